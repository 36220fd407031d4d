"""Test support: MongoEngine connected to a fresh database for each test.

Installed as a pytest plugin (entry point ``pytest11``), so with ``mongoengine-ids`` and
``mongomock`` installed these fixtures are available in any test suite, no conftest needed:

``mongoengine_db``
    Connects MongoEngine's ``default`` alias to a new, empty mongomock database and yields it
    (a pymongo-like ``Database``). Everything is disconnected afterwards, and the model classes
    forget their cached collections, so no state leaks into the next test.

``mongoengine_connect``
    A function ``connect(alias="default", *, uuid_representation="standard")`` for tests that
    need more aliases (models with ``meta = {"db_alias": ...}``); each call returns that alias's
    fresh database, and all are disconnected after the test.

Outside pytest, :func:`connected` does the same as a context manager.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import mongoengine
import pytest
from mongoengine.connection import DEFAULT_CONNECTION_NAME

from .writepath import reset_process_state

Connect = Callable[..., Any]


class _Connections:
    """The aliases one test connected, and how to tear them down."""

    def __init__(self, uri: str | None) -> None:
        self._uri = uri
        self._aliases: list[tuple[str, str]] = []

    def connect(
        self, alias: str = DEFAULT_CONNECTION_NAME, *, uuid_representation: str = "standard"
    ) -> Any:
        name = f"mongoengine_ids_test_{uuid.uuid4().hex[:12]}"
        if self._uri is None:
            import mongomock

            mongoengine.connect(
                name,
                alias=alias,
                mongo_client_class=mongomock.MongoClient,
                uuidRepresentation=uuid_representation,
            )
        else:
            mongoengine.connect(
                name, alias=alias, host=self._uri, uuidRepresentation=uuid_representation
            )
        self._aliases.append((alias, name))
        return mongoengine.get_db(alias)

    def close(self) -> None:
        for alias, name in reversed(self._aliases):
            if self._uri is not None:
                with contextlib.suppress(Exception):
                    mongoengine.get_connection(alias).drop_database(name)
            mongoengine.disconnect(alias)
        self._aliases.clear()
        reset_process_state()


@contextlib.contextmanager
def connected(uri: str | None = None) -> Iterator[Connect]:
    """Yield a ``connect(alias=..., uuid_representation=...)`` function; disconnect on exit.

    Args:
        uri: a MongoDB URI to use a real server (each alias gets a new database, dropped on
            exit); None for mongomock.
    """
    connections = _Connections(uri)
    try:
        yield connections.connect
    finally:
        connections.close()


@pytest.fixture
def mongoengine_connect() -> Iterator[Connect]:
    """Connect MongoEngine aliases to fresh mongomock databases for this test."""
    with connected() as connect:
        yield connect


@pytest.fixture
def mongoengine_db(mongoengine_connect: Connect) -> Any:
    """MongoEngine's default alias on a fresh mongomock database, for this test."""
    return mongoengine_connect()
