"""Per-process state (leased blocks, generator counters, checked indexes): how to drop it all
at once, and how a forked child makes it its own."""

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


# -- the process the state belongs to -----------------------------------------------------------

_getpid = os.getpid
_fork_callbacks: list[Callable[[], None]] = []

#: The id of the process whose state this package holds. A child forked by ``os.fork()`` (or
#: ``multiprocessing``) makes the state its own in Python's at-fork hook. A child forked by the
#: C ``fork()`` never runs that hook: uWSGI's default prefork (without
#: ``--py-call-osafterfork``, unbit/uwsgi#1978), a C extension's fork. Its state stays its
#: parent's, which every sibling shares (the same Locality pid and counters, the same leased
#: block, the same unread random words), until a hand-out sees that ``os.getpid()`` differs
#: from this, as ``bson.ObjectId`` and pymongo do. Changed only by :func:`adopt_process`.
owner_pid: int = _getpid()

#: The lock of :func:`adopt_process` by process id: every thread of a process gets the same one
#: (``dict.setdefault`` is atomic), made in that process. A lock made in the parent could be
#: held by one of its threads at fork time, which the child does not have.
_adopt_locks: dict[int, threading.Lock] = {}


def on_fork(callback: Callable[[], None]) -> Callable[[], None]:
    """Register ``callback`` to make per-process state its own in a forked child: a new pid,
    counters and random words, leased blocks dropped, locks made anew.

    It runs once per process, before that process hands out an id: in Python's at-fork hook, or
    after a fork that skips it, on the first hand-out that sees another pid
    (:func:`check_process`), perhaps while other threads of the child run.

    **Warning:** a callback makes new locks and never acquires the parent's (a thread that held
    one at fork time does not exist in the child). Code taking a lock that a callback makes anew
    calls :func:`check_process` before, or another thread of the child may hold the old one
    while the callback replaces it. A callback hands out no id: the check inside it would wait
    for the reset it is part of.
    """
    _fork_callbacks.append(callback)
    return callback


def check_process() -> None:
    """Make this package's state this process's if it was forked without Python's at-fork
    hooks (see :data:`owner_pid`); else nothing but one ``os.getpid()`` (about 0.2 us).

    Call it before touching state an :func:`on_fork` callback resets. The hottest paths inline
    it: ``if _getpid() != resets.owner_pid: resets.adopt_process()``.
    """
    if _getpid() != owner_pid:
        adopt_process()


def adopt_process() -> None:
    """Run every :func:`on_fork` callback, once in this process, unless the state is already its
    own. Also Python's at-fork hook in a child.

    Threads of the child that notice together wait for the first. A callback that raises does
    not stop the others; its error propagates, and the state stays another process's, so the
    next check runs them all again (dropping leased blocks again loses values, never repeats
    one).
    """
    global owner_pid
    pid = _getpid()
    with _adopt_locks.setdefault(pid, threading.Lock()):
        if owner_pid == pid:
            return  # another thread of this process did it while this one waited
        failed: Exception | None = None
        for callback in list(_fork_callbacks):
            try:
                callback()
            except Exception as error:
                if failed is None:
                    failed = error
        if failed is not None:
            raise failed
        owner_pid = pid
    # An ancestor's lock may be held; a descendant given its pid again must not find it.
    for other in list(_adopt_locks):
        if other != pid:
            _adopt_locks.pop(other, None)


@on_fork
def _new_locks_in_child() -> None:
    # A lock held by another thread at fork time would stay held forever in the child. After a
    # fork without the hooks, a thread of the child may be inside a method under the old lock
    # (the callers of a cache do not check the process): each method is a few dict operations,
    # and the worst an overlap once per process does is lose one cache entry.
    for cache in list(_per_client):
        cache._lock = threading.Lock()


if hasattr(os, "register_at_fork"):  # not on Windows, which has no fork()
    os.register_at_fork(after_in_child=adopt_process)
