"""Per-process state (leased blocks, generator counters, checked indexes): how to drop it all
at once, and how a forked child makes it its own."""

from __future__ import annotations

import os
import threading
import weakref
from collections.abc import Callable
from typing import Any, ClassVar, Generic, NoReturn, SupportsIndex, TypeVar

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
    method is atomic (under a :class:`ProcessLock`).
    """

    def __init__(self) -> None:
        self._lock = ProcessLock()
        self._by_client: dict[int, dict[_K, _V]] = {}

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
_adopt_locks: dict[int, threading.RLock] = {}


def on_fork(callback: Callable[[], None]) -> Callable[[], None]:
    """Register ``callback`` to make per-process state its own in a forked child: a new pid,
    counters and random words, leased blocks dropped, locks made anew.

    It runs once per process, before that process hands out an id: in Python's at-fork hook, or
    after a fork that skips it, on the first hand-out or :class:`ProcessLock` that sees another
    pid (:func:`check_process`), perhaps while other threads of the child run. Those threads
    wait for it at their own first check, so a callback may change state that a
    :class:`ProcessLock` guards without taking it (every one is new by then, and free).

    A callback hands out no id: the state it would use may not all be this process's yet.
    """
    _fork_callbacks.append(callback)
    return callback


def check_process() -> None:
    """Make this package's state this process's if it was forked without Python's at-fork
    hooks (see :data:`owner_pid`); else nothing but one ``os.getpid()`` (about 0.2 us).

    Call it before reading state an :func:`on_fork` callback resets, where no
    :class:`ProcessLock` is entered first (which checks). The hottest paths inline it:
    ``if _getpid() != resets.owner_pid: resets.adopt_process()``.
    """
    if _getpid() != owner_pid:
        adopt_process()


def adopt_process(*, forked: bool = False) -> None:
    """Make every :class:`ProcessLock` anew and run every :func:`on_fork` callback, once in
    this process, unless the state is already its own. Also Python's at-fork hook in a child
    (``forked``): the state is another process's whatever the pid, which may be the one it was
    recorded for (probe 40c: a dead ancestor's pid given again to a child of a process forked
    without the hooks, which never made the state its own; the child took it for its own and
    handed out that ancestor's leased values again).

    Threads of the child that notice together wait for the first. A callback that raises does
    not stop the others; its error propagates, and the state stays another process's, so the
    next check runs them all again (dropping leased blocks again loses values, never repeats
    one).
    """
    global owner_pid, _adopting
    pid = _getpid()
    adopting = (pid, threading.get_ident())
    if forked:
        owner_pid = -1  # not this process's, whatever its pid
        _adopt_locks[pid] = threading.RLock()  # one thread: an inherited one may be held
    with _adopt_locks.setdefault(pid, threading.RLock()):
        if owner_pid == pid or _adopting == adopting:
            return  # done by another thread meanwhile, or this one's callbacks take locks
        for lock in _live_locks():
            lock._renew()
        _adopting = adopting
        try:
            failed = _run_fork_callbacks()
        finally:
            _adopting = None
        if failed is not None:
            raise failed
        owner_pid = pid
    # An ancestor's lock may be held; a descendant given its pid again must not find it.
    for other in list(_adopt_locks):
        if other != pid:
            _adopt_locks.pop(other, None)


def _run_fork_callbacks() -> Exception | None:
    """Run every :func:`on_fork` callback; the first error, if one raised."""
    failed: Exception | None = None
    for callback in list(_fork_callbacks):
        try:
            callback()
        except Exception as error:
            if failed is None:
                failed = error
    return failed


class ProcessLock:
    """A lock on per-process state of this package, always this process's own.

    ``with lock:`` first makes the package's state this process's (:func:`check_process`), so
    no code under it reads a parent's state after a fork that skipped Python's at-fork hooks.
    And a child gets every such lock anew: one held by another thread of the parent at fork
    time would stay held forever in the child, which does not have that thread.
    :func:`adopt_process` replaces them before the :func:`on_fork` callbacks run; no thread of
    the child holds an old one, since every thread checks the process before it enters.

    ``reentrant``: an :class:`threading.RLock` inside. The hottest paths, which check the
    process themselves, take the lock inside (:attr:`lock`, read again at each use: a child
    replaces it).

    Never fork inside one: the child would leave it by releasing the new lock. It cannot be
    copied or pickled, as a :class:`threading.Lock` cannot (a copy would not be made anew).
    """

    __slots__ = ("__weakref__", "_make", "lock")

    def __init__(self, *, reentrant: bool = False) -> None:
        self._make = threading.RLock if reentrant else threading.Lock
        self.lock: Any = self._make()
        _process_locks.add(weakref.ref(self, _process_locks.discard))

    def __enter__(self) -> None:
        if _getpid() != owner_pid:
            adopt_process()
        self.lock.acquire()

    def __exit__(self, *exc_info: object) -> None:
        self.lock.release()

    def _renew(self) -> None:
        self.lock = self._make()

    def __reduce_ex__(self, protocol: SupportsIndex) -> NoReturn:
        raise TypeError(f"cannot copy or pickle a {type(self).__name__}")


#: Every live :class:`ProcessLock` (a weak reference, which drops itself), made anew in a child.
_process_locks: set[weakref.ref[ProcessLock]] = set()


def _live_locks() -> list[ProcessLock]:
    # A snapshot in one C call (set.copy runs no Python code): another thread may make a lock
    # meanwhile, which is new already.
    return [lock for made in _process_locks.copy() if (lock := made()) is not None]


#: The process and thread running the :func:`on_fork` callbacks, if one is (a grandchild forked
#: meanwhile may give a thread of its own the same id).
_adopting: tuple[int, int] | None = None


def _forked() -> None:
    adopt_process(forked=True)


if hasattr(os, "register_at_fork"):  # not on Windows, which has no fork()
    os.register_at_fork(after_in_child=_forked)


class NotCopied:
    """Mixed into a generator or a ``Sequence``, which ``copy.copy()``, ``copy.deepcopy()`` and
    pickle refuse (``TypeError``): a copy would go on from the original's state (its counter,
    millisecond and lock; its leased blocks), outside the fork reset, and repeat or interleave
    its ids. ``_COPIED`` says what a copy would do and what to do instead."""

    __slots__ = ()
    _COPIED: ClassVar[str]

    def _not_copied(self, how: str) -> TypeError:
        return TypeError(f"a {type(self).__name__} cannot be copied ({how}): {self._COPIED}")

    def __copy__(self) -> NoReturn:
        raise self._not_copied("copy.copy()")

    def __deepcopy__(self, memo: dict[int, Any]) -> NoReturn:
        raise self._not_copied("copy.deepcopy()")

    def __reduce_ex__(self, protocol: Any) -> NoReturn:
        raise self._not_copied("pickle")
