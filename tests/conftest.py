"""The project's fixtures: mongomock by default, a real server with MONGOENGINE_IDS_TEST_URI.

The fixtures have the names of the user-facing plugin's (``mongoengine_ids.testing``), so every
test runs unchanged against either database.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _support import CLIENT_OPTIONS, TEST_URI
from hypothesis import settings
from mongomock.collection import Collection as MongomockCollection
from pymongo import ReadPreference

import mongoengine_ids
from mongoengine_ids.testing import Connect, connected, connected_threadsafe

pytest_plugins = ("pytester",)

# CI machines are VMs with a locally administered MAC, for which generators warn (and pytest's
# filterwarnings turns warnings into errors). Tests that need the real detection patch it.
os.environ.setdefault("MONGOENGINE_IDS_MAC", "aa:bb:cc:dd:ee:ff")

settings.register_profile("ci", max_examples=200, deadline=None)
settings.register_profile("dev", max_examples=50, deadline=None)
settings.load_profile("ci" if os.environ.get("CI") else "dev")


@pytest.fixture
def mongoengine_connect() -> Iterator[Connect]:
    with connected(TEST_URI, **CLIENT_OPTIONS) as connect:
        yield connect


@pytest.fixture
def atomic_connect() -> Iterator[Connect]:
    """``mongoengine_connect`` with every mongomock operation atomic (for concurrency tests)."""
    with connected_threadsafe(TEST_URI) as connect:
        yield connect


#: The reads of a mongomock collection.
_READS = (
    "find",
    "find_one",
    "count_documents",
    "distinct",
    "aggregate",
    "estimated_document_count",
)
_PACKAGE = str(Path(mongoengine_ids.__file__).parent) + os.sep
#: Modules of the package that read on the user's behalf, or are the database (a proxy).
_NOT_THE_WRITE_PATH = ("instrumented.py", "testing.py", f"tools{os.sep}")


@pytest.fixture(autouse=True)
def _package_reads_on_the_primary(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Fail a test in which the package read through a collection whose read preference is not
    the primary's: it reads to decide what it writes (is a value taken, did an insert land,
    which values to give back), and a secondary may lack a write just applied. A read by
    MongoEngine, by a test, or by mongomock itself is the caller's."""
    if TEST_URI is not None:
        yield
        return
    found: list[str] = []

    def guarded(method: Any) -> Any:
        def read(self: Any, *args: Any, **kwargs: Any) -> Any:
            frame = sys._getframe(1)
            while frame is not None and _driver(frame.f_code.co_filename):
                frame = frame.f_back
            where = frame.f_code.co_filename if frame is not None else ""
            if (
                where.startswith(_PACKAGE)
                and not where[len(_PACKAGE) :].startswith(_NOT_THE_WRITE_PATH)
                and self.read_preference != ReadPreference.PRIMARY
            ):
                found.append(f"{method.__name__} by {frame.f_code.co_name} ({where})")
            return method(self, *args, **kwargs)

        return read

    for name in _READS:
        monkeypatch.setattr(MongomockCollection, name, guarded(getattr(MongomockCollection, name)))
    yield
    assert not found, f"the package read on a secondary: {found}"


def _driver(filename: str) -> bool:
    return f"{os.sep}mongomock{os.sep}" in filename or filename.endswith(f"{os.sep}instrumented.py")


@pytest.fixture
def mongoengine_db(mongoengine_connect: Connect) -> Any:
    return mongoengine_connect()
