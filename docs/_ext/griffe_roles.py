"""A griffe extension for the API reference: Sphinx roles in docstrings become code.

Some docstrings name other objects the Sphinx way, ``:class:`Write``` or
``:meth:`GeneratedField.new_values```; MkDocs would show the role as text. This turns each into
a code span, ```Write```.
"""

from __future__ import annotations

import re
from typing import Any

import griffe

ROLE = re.compile(r":(?:py:)?(?:class|func|meth|attr|data|exc|mod|obj|const):`~?([^`]+)`")


class SphinxRoles(griffe.Extension):
    def on_instance(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = ROLE.sub(r"`\1`", obj.docstring.value)
