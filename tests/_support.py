"""Helpers shared by the test modules (import as ``from _support import ...``)."""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable
from typing import Any

import pytest
from pymongo import ReadPreference

TEST_URI = os.environ.get("MONGOENGINE_IDS_TEST_URI") or None

#: The options of the tests' connections. On mongomock they read on a secondary where they may
#: (mongomock has none, so nothing changes): every read the package makes itself must still go
#: to the primary, which the guard in conftest.py checks.
CLIENT_OPTIONS = {} if TEST_URI else {"read_preference": ReadPreference.SECONDARY_PREFERRED}

#: Marks a test that only a real mongod can prove (true concurrency, server error details).
real_server = pytest.mark.skipif(
    TEST_URI is None, reason="needs a real mongod: set MONGOENGINE_IDS_TEST_URI"
)


def in_forked_child(work: Callable[[], Any]) -> tuple[int, Any]:
    """Run ``work()`` in a child made by ``os.fork()`` (Python's at-fork hooks run); return the
    child's pid and what ``work`` returned, sent back as JSON through a pipe."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        try:
            os.close(read_end)
            data = json.dumps(work()).encode()
            while data:
                data = data[os.write(write_end, data) :]
        finally:
            os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end) as pipe:
        result = json.loads(pipe.read())
    os.waitpid(pid, 0)
    return pid, result


def run_threads(count: int, work: Callable[[int], list[Any]]) -> list[list[Any]]:
    """Run ``work(index)`` in ``count`` threads started together; return their results."""
    results: list[list[Any]] = [[] for _ in range(count)]
    errors: list[BaseException] = []
    barrier = threading.Barrier(count)

    def target(index: int) -> None:
        try:
            barrier.wait()
            results[index] = work(index)
        except BaseException as error:  # reported below, in the test's thread
            errors.append(error)

    threads = [threading.Thread(target=target, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]
    return results


def refused_client_connect(name: str, **settings: Any) -> None:
    """A stand-in for ``mongoengine.connect()`` whose client pymongo refuses: MongoEngine's
    ``ConnectionFailure``, wrapping pymongo's error as MongoEngine words it (probe BE)."""
    from mongoengine.connection import ConnectionFailure

    try:
        raise ValueError("authentication source must be $external or None for MONGODB-X509")
    except ValueError as error:
        raise ConnectionFailure(f"Cannot connect to database {name} :\n{error}")  # noqa: B904
