"""The project's fixtures: mongomock by default, a real server with MONGOENGINE_IDS_TEST_URI.

The fixtures have the names of the user-facing plugin's (``mongoengine_ids.testing``), so every
test runs unchanged against either database.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest
from _support import TEST_URI
from hypothesis import settings

from mongoengine_ids.testing import Connect, connected

pytest_plugins = ("pytester",)

# CI machines are VMs with a locally administered MAC, for which generators warn (and pytest's
# filterwarnings turns warnings into errors). Tests that need the real detection patch it.
os.environ.setdefault("MONGOENGINE_IDS_MAC", "aa:bb:cc:dd:ee:ff")

settings.register_profile("ci", max_examples=200, deadline=None)
settings.register_profile("dev", max_examples=50, deadline=None)
settings.load_profile("ci" if os.environ.get("CI") else "dev")


@pytest.fixture
def mongoengine_connect() -> Iterator[Connect]:
    with connected(TEST_URI) as connect:
        yield connect


@pytest.fixture
def mongoengine_db(mongoengine_connect: Connect) -> Any:
    return mongoengine_connect()
