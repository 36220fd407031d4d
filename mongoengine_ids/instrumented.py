"""Instrumented mongomock clients: atomic operations, counted or failing calls, added latency.

mongomock is not thread-safe: 8 threads x 2,000 ``$inc`` on one counter document handed the same
value to several callers in every measured run, and sometimes lost increments. A real server
applies each operation atomically, so a concurrency test on mongomock must restore that
property before its exact-set assertion means anything. :func:`instrumented_client_class`
returns a ``mongo_client_class`` for ``mongoengine.connect`` whose every database call runs under
one lock per client (the whole in-memory store), and can route each call through a hook (count
the round trips, raise a network error before or after the call is applied, sleep to simulate
network latency).

Nothing here is imported by the package at run time: the test plugin
(:mod:`mongoengine_ids.testing`) and the benchmark use it.
"""

from __future__ import annotations

import functools
import operator
import threading
import time
from collections.abc import Callable
from typing import Any, Final

import pymongo

#: ``hook(collection_name, method_name, call)``: must call ``call()`` (once, or not at all to
#: simulate a lost request) and return its result, or raise. ``call`` is a
#: :func:`functools.partial`, whose ``args`` and ``keywords`` are the call's arguments.
Hook = Callable[[str, str, Callable[[], Any]], Any]

#: Collection methods that reach the server (one round trip each on a real server). Everything
#: else (``with_options``, ``name``, ``database``, ...) is local and passes through unlocked.
ROUND_TRIP_METHODS: Final = frozenset(
    {
        "aggregate",
        "bulk_write",
        "count_documents",
        "create_index",
        "create_indexes",
        "delete_many",
        "delete_one",
        "distinct",
        "drop",
        "drop_index",
        "drop_indexes",
        "estimated_document_count",
        "find_one",
        "find_one_and_delete",
        "find_one_and_replace",
        "find_one_and_update",
        "index_information",
        "insert_many",
        "insert_one",
        "list_indexes",
        "replace_one",
        "update_many",
        "update_one",
    }
)

#: Database and client methods that reach the server.
_ADMIN_METHODS: Final = frozenset(
    {
        "command",
        "create_collection",
        "dereference",
        "drop_collection",
        "drop_database",
        "list_collection_names",
        "list_collections",
        "list_database_names",
        "server_info",
    }
)


def _client_types(*, server: bool) -> tuple[type, type, type, tuple[type, ...]]:
    """The client, database, collection and cursor classes of pymongo (a real server) or of
    mongomock."""
    modules: Any
    if server:
        import pymongo.collection
        import pymongo.command_cursor
        import pymongo.cursor
        import pymongo.database

        modules = pymongo
        return (
            modules.MongoClient,
            modules.database.Database,
            modules.collection.Collection,
            (modules.cursor.Cursor, modules.command_cursor.CommandCursor),
        )
    mongomock = require_mongomock()
    from mongomock import collection, command_cursor

    return (
        mongomock.MongoClient,
        mongomock.Database,
        mongomock.Collection,
        (collection.Cursor, command_cursor.CommandCursor),
    )


class _Control:
    """What every proxy of one client shares: the lock and the hook."""

    __slots__ = (
        "cached_types",
        "collection_type",
        "cursor_types",
        "hook",
        "lock",
        "proxies",
        "wrapped_types",
    )

    def __init__(self, hook: Hook | None, *, server: bool = False) -> None:
        client, database, collection, cursors = _client_types(server=server)
        self.hook = hook
        # One proxy per client and database, so that ``db.client is db.client``
        # holds as it does unwrapped (callers key caches by identity). Each proxy keeps its
        # target alive, so an id() is never reused while it is in here.
        self.proxies: dict[int, _Proxy] = {}
        # Re-entrant: a hook may itself use the client (e.g. read a document to decide).
        self.lock = threading.RLock()
        self.cursor_types: tuple[type, ...] = cursors
        # Clients and databases only: a collection is made anew by every with_options().
        self.cached_types: tuple[type, ...] = (client, database)
        self.collection_type: type = collection
        self.wrapped_types: tuple[type, ...] = (client, database, collection, *cursors)

    def wrap(self, value: Any, collection: str) -> Any:
        if isinstance(value, self.collection_type):
            collection = str(getattr(value, "name", collection))
        if isinstance(value, self.cursor_types):
            return _CursorProxy(value, self, collection)
        if isinstance(value, self.cached_types):
            proxy = self.proxies.get(id(value))
            if proxy is None:
                proxy = self.proxies.setdefault(id(value), _Proxy(value, self, collection))
            return proxy
        if isinstance(value, self.wrapped_types):
            return _Proxy(value, self, collection)
        return value

    def run(self, collection: str, method: str, call: Callable[[], Any]) -> Any:
        with self.lock:
            if self.hook is None:
                return call()
            return self.hook(collection, method, call)


#: Attributes that never change on one client, database or collection object (pymongo and
#: mongomock make a new object for other options): a proxy reads each once. A server answers
#: them without a round trip; read through the proxy every time, they cost a benchmark's
#: candidate about a microsecond each that no real client pays.
_FIXED_ATTRIBUTES: Final = frozenset(
    {"client", "codec_options", "database", "full_name", "name", "read_preference", "write_concern"}
)


class _Proxy:
    """A mongomock client, database or collection whose database calls are atomic."""

    __slots__ = ("__weakref__", "_collection", "_control", "_fixed", "_target")

    def __init__(self, target: Any, control: _Control, collection: str) -> None:
        object.__setattr__(self, "_target", target)
        object.__setattr__(self, "_control", control)
        object.__setattr__(self, "_fixed", {})
        import mongomock

        name = target.name if isinstance(target, mongomock.Collection) else collection
        object.__setattr__(self, "_collection", name)

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._target, name)
        control = self._control
        collection = self._collection
        if not callable(value) or isinstance(value, (type, *control.wrapped_types)):
            return control.wrap(value, collection)
        if name in ROUND_TRIP_METHODS or name in _ADMIN_METHODS:

            def round_trip(*args: Any, **kwargs: Any) -> Any:
                result = control.run(collection, name, functools.partial(value, *args, **kwargs))
                return control.wrap(result, collection)

            return round_trip

        def local(*args: Any, **kwargs: Any) -> Any:
            return control.wrap(value(*args, **kwargs), collection)

        return local

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self._target, name, value)

    def __getitem__(self, key: Any) -> Any:
        return self._control.wrap(self._target[key], self._collection)

    def __eq__(self, other: object) -> bool:
        target = other._target if isinstance(other, _Proxy) else other
        return bool(self._target == target)

    def __hash__(self) -> int:
        return hash(self._target)

    def __repr__(self) -> str:
        return f"<atomic {self._target!r}>"


def _fixed_attribute(name: str) -> property:
    """The attribute ``name`` of a proxy's target (wrapped), read once: a property, which Python
    finds without the failed look-up that precedes every ``__getattr__``."""

    def read(self: _Proxy) -> Any:
        fixed = self._fixed
        if name not in fixed:
            fixed[name] = self._control.wrap(getattr(self._target, name), self._collection)
        return fixed[name]

    return property(read)


for _name in _FIXED_ATTRIBUTES:
    setattr(_Proxy, _name, _fixed_attribute(_name))


class _CursorProxy(_Proxy):
    """A cursor: mongomock computes the results on the first ``next()``, or on reading one
    result by index (``cursor[0]``), a round trip."""

    __slots__ = ()

    def __iter__(self) -> _CursorProxy:
        return self

    def __next__(self) -> Any:
        target = self._target
        return self._control.run(self._collection, "getMore", functools.partial(next, target))

    def __getitem__(self, key: Any) -> Any:
        # cursor[i] (MongoEngine's first()) runs a query of its own: a round trip; a slice
        # makes a cursor, which is local until read.
        if isinstance(key, slice):
            return super().__getitem__(key)
        target = self._target
        read = functools.partial(operator.getitem, target, key)
        found = self._control.run(self._collection, "find", read)
        return self._control.wrap(found, self._collection)


def require_mongomock() -> Any:
    """The ``mongomock`` module, which the test support needs without a server URI.

    Raises:
        ModuleNotFoundError: it is not installed, saying how to install it.
    """
    try:
        import mongomock
    except ModuleNotFoundError as error:
        raise ModuleNotFoundError(
            "mongoengine-ids' test support runs on mongomock, which is not installed: "
            "pip install mongomock, or give a server URI",
            name="mongomock",
        ) from error
    return mongomock


def instrumented_client_class(
    *, hook: Hook | None = None, server: bool = False
) -> Callable[..., Any]:
    """A ``mongo_client_class`` for ``mongoengine.connect``: mongomock with atomic operations
    (or, with ``server``, pymongo's client for a real server, whose operations are atomic).

    Every database call of the client (and of its databases, collections and cursors) runs
    under one re-entrant lock per client, as each operation is atomic on a real server; local
    calls (``with_options``, attribute reads) are not locked.

    Args:
        hook: called as ``hook(collection_name, method_name, call)`` for every database call,
            under the lock; it must return ``call()``'s result or raise. Use it to count round
            trips, inject failures before or after the call is applied, or add latency.

    Returns:
        A callable taking ``mongomock.MongoClient``'s arguments and returning the wrapped client.

    Raises:
        ModuleNotFoundError: mongomock is not installed (and ``server`` is false).
    """
    client_class: Any = pymongo.MongoClient if server else require_mongomock().MongoClient

    def make_client(*args: Any, **kwargs: Any) -> Any:
        return _Control(hook, server=server).wrap(client_class(*args, **kwargs), "")

    return make_client


def latency_hook(seconds: float, *, sleep: Callable[[float], None] = time.sleep) -> Hook:
    """A hook that waits ``seconds`` before each database call (a simulated round trip).

    Args:
        seconds: the simulated round-trip time, e.g. ``0.001`` for 1 ms.
        sleep: the function that waits (injected for tests).

    Raises:
        ValueError: ``seconds`` is negative.
    """
    if seconds < 0:
        raise ValueError(f"seconds={seconds!r} must be >= 0")

    def hook(collection: str, method: str, call: Callable[[], Any]) -> Any:
        sleep(seconds)
        return call()

    return hook


__all__ = ["ROUND_TRIP_METHODS", "Hook", "instrumented_client_class", "latency_hook"]
