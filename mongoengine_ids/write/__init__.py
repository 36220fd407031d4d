"""The write path: where generated values are made and written.

* :mod:`.seam`: the one module touching MongoEngine's internals (checked at import);
* :mod:`.field`: the contract between the write path and a field (:class:`GeneratedField`,
  :class:`Write`);
* :mod:`.values`: the values of one write: fill, retry on collision, give back;
* :mod:`.save`, :mod:`.bulk`, :mod:`.upsert`: ``save()``, bulk insert, upserts;
* :mod:`.backfill`: values for stored documents that lack them.
"""

from __future__ import annotations

# Every module of the write path is imported with the package, none on first use: a class the
# hooks install (the queryset mixin, say) is then one class for the life of the process, also
# where a test runner drops the modules imported during a test (pytester does).
from . import bulk, queryset, references, save, upsert  # noqa: F401
from .backfill import backfill
from .field import GeneratedField, Write

__all__ = ["GeneratedField", "Write", "backfill"]
