"""Per-process caches (leased blocks, checked indexes) and how to drop them all at once."""

from __future__ import annotations

import os
import threading
import weakref
from collections.abc import Callable
from typing import Any, Generic, TypeVar

_K = TypeVar("_K")
_V = TypeVar("_V")

_reset_callbacks: list[Callable[[], None]] = []
_drop_callbacks: list[Callable[[Any, str], None]] = []


def on_reset(callback: Callable[[], None]) -> Callable[[], None]:
    """Register ``callback`` to drop per-process state (leased blocks, caches) on reset."""
    _reset_callbacks.append(callback)
    return callback


def reset_process_state() -> None:
    """Drop every per-process cache of this package (the test fixtures call it after a test)."""
    for callback in _reset_callbacks:
        callback()


def on_drop(callback: Callable[[Any, str], None]) -> Callable[[Any, str], None]:
    """Register ``callback(database, name)`` to drop what is cached of a collection that a
    model's ``drop_collection()`` dropped (its indexes went with it)."""
    _drop_callbacks.append(callback)
    return callback


def collection_dropped(database: Any, name: str) -> None:
    """A model's ``drop_collection()`` dropped collection ``name`` of ``database``."""
    for callback in _drop_callbacks:
        callback(database, name)


class PerClient(Generic[_K, _V]):
    """A per-process cache of what is known through one client (a connection): entries keyed by
    the client and a key of their own, dropped with the client.

    Keyed by ``id(client)``, which CPython gives to another object once the client is freed: a
    new connection must never find what was known of an old one (an index seen on another
    server, an attempt made through another connection). So the entries of a client go when it
    is collected (:func:`weakref.finalize`), before its ``id`` can be reused. Thread-safe; every
    method is atomic.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_client: dict[int, dict[_K, _V]] = {}
        _per_client.add(self)

    def get(self, client: Any, key: _K) -> _V | None:
        with self._lock:
            return self._by_client.get(id(client), {}).get(key)

    def set(self, client: Any, key: _K, value: _V) -> None:
        with self._lock:
            entries = self._by_client.get(id(client))
            if entries is None:
                entries = self._by_client[id(client)] = {}
                weakref.finalize(client, self._forget, id(client))
            entries[key] = value

    def pop(self, client: Any, key: _K) -> _V | None:
        with self._lock:
            return self._by_client.get(id(client), {}).pop(key, None)

    def drop(self, client: Any, keep: Callable[[_K], bool]) -> None:
        """Drop the entries of ``client`` whose key ``keep`` is false for."""
        with self._lock:
            entries = self._by_client.get(id(client), {})
            for key in [key for key in entries if not keep(key)]:
                del entries[key]

    def clear(self) -> None:
        with self._lock:
            self._by_client.clear()

    def _forget(self, client_id: int) -> None:
        # Run by the collector, perhaps inside a method of this cache in the same thread: not
        # under the lock (a second acquire would never return). One dict.pop is atomic, and
        # never of a client a method is using (that client is alive).
        self._by_client.pop(client_id, None)


_per_client: weakref.WeakSet[PerClient[Any, Any]] = weakref.WeakSet()


def _new_locks_in_child() -> None:
    # A lock held by another thread at fork time would stay held forever in the child.
    for cache in list(_per_client):
        cache._lock = threading.Lock()


os.register_at_fork(after_in_child=_new_locks_in_child)
