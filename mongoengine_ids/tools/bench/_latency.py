"""A simulated network for the benchmark: mongomock whose every database call costs a round trip.

:class:`CountingLatency` is a hook for
:func:`~mongoengine_ids.instrumented.instrumented_client_class`: each database call waits the
round-trip time, which stands for the server's work too, and mongomock's own work is left out
of the timings; it counts the calls. :func:`latency_database` connects the benchmark's alias
to such a client. The ``sequence`` group uses 1 ms per call, the ``writes`` group 0.2 ms (a
local server's order). A real server's own work on a bulk insert of 1,000 (some milliseconds)
is not modelled: its ratios are the stricter for it.

The wait is :func:`wait`: it sleeps for all but the last :data:`SPIN_SECONDS`, then spins on
:func:`time.perf_counter` until the time has passed. ``time.sleep(0.0002)`` alone took 0.28 ms
on the development machine (the kernel's timer slack), which would have charged every call 40%
more than the latency asked for; spinning alone holds the GIL, which a client waiting on its
socket does not: a thread leasing in the background (``SequenceField``'s prefetch) then held
up the writes it was meant to spare, and the bulk insert timings swung by half from run to run.
"""

from __future__ import annotations

import contextlib
import threading
import time
import uuid
from collections.abc import Callable, Iterator, MutableMapping
from typing import Any

import mongoengine
from bson import ObjectId

from ...instrumented import Hook, instrumented_client_class
from ._core import BENCH_ALIAS, add_server_time, require_mongomock

#: The end of a wait spent spinning: :func:`time.sleep` overshoots by up to about this much.
SPIN_SECONDS = 0.00015


def wait(seconds: float) -> None:
    """Return after ``seconds``: asleep (the GIL released, as a client waiting on its socket),
    then spinning for the last :data:`SPIN_SECONDS`, exact to a few microseconds unlike
    :func:`time.sleep` alone."""
    deadline = time.perf_counter() + seconds
    if seconds > SPIN_SECONDS:
        time.sleep(seconds - SPIN_SECONDS)
    while time.perf_counter() < deadline:
        pass


class CountingLatency:
    """A hook that makes every database call cost ``latency`` seconds (a simulated round trip,
    the server's work included) and counts the calls, per collection and in all.

    It waits ``latency``, then runs mongomock's call with the benchmark's clock stopped
    (:func:`~mongoengine_ids.tools.bench._core.add_server_time`): mongomock's own work is no
    server's, and counted as time it took most of a bulk insert of 1,000 (a linear scan of a
    unique index per document), on both sides of a ratio (review BP). What the driver does on
    the client before sending stays timed: the ``_id`` it gives inserted documents
    (:func:`give_ids_as_the_driver`).

    Args:
        latency: seconds per round trip (0 to count only: the clock then runs on).
        sleep: the waiting function (injected for tests).
        timer: the clock timing mongomock's work (injected for tests).
    """

    def __init__(
        self,
        latency: float,
        *,
        sleep: Callable[[float], None] = wait,
        timer: Callable[[], float] = time.perf_counter,
    ) -> None:
        if latency < 0:
            raise ValueError(f"latency={latency!r} must be >= 0")
        self.latency = latency
        self.calls: dict[str, int] = {}
        self.total = 0
        #: Seconds mongomock spent on the calls, left out of the timings.
        self.server_seconds = 0.0
        self._sleep = sleep
        self._timer = timer
        self._lock = threading.Lock()

    def __call__(self, collection: str, method: str, call: Callable[[], Any]) -> Any:
        with self._lock:
            self.calls[collection] = self.calls.get(collection, 0) + 1
            self.total += 1
        if not self.latency:
            return call()
        give_ids_as_the_driver(method, call)
        self._sleep(self.latency)
        start = self._timer()
        try:
            return call()
        finally:
            spent = self._timer() - start
            with self._lock:
                self.server_seconds += spent
                add_server_time(spent)

    def count(self, collection: str) -> int:
        """Database calls made on ``collection`` so far."""
        return self.calls.get(collection, 0)


def give_ids_as_the_driver(method: str, call: Callable[[], Any]) -> None:
    """Give each document that ``call`` inserts without an ``_id`` an ObjectId, as pymongo does
    on the client before it sends ``insert_one()`` or ``insert_many()``.

    mongomock makes them inside the call, whose time the benchmark leaves out as the server's:
    a model whose key is left to the driver was timed without making it, while the same model
    with a generated field, whose key this package makes before the insert (so that a retry
    reuses it), paid for it: about 3 µs per document on the development machine, a third of
    ``RandomUniqueField``'s ``insert(1,000)`` allowance and more. Documents given in another
    form than a list (a generator, which this would consume) are left to mongomock.
    """
    args = getattr(call, "args", ())
    keywords = getattr(call, "keywords", {})
    documents: Any
    if method == "insert_one":
        documents = [args[0] if args else keywords.get("document")]
    elif method == "insert_many":
        documents = args[0] if args else keywords.get("documents")
    else:
        return
    if isinstance(documents, list):
        for document in documents:
            if isinstance(document, MutableMapping) and "_id" not in document:
                document["_id"] = ObjectId()


@contextlib.contextmanager
def latency_database(hook: Hook) -> Iterator[Any]:
    """Connect :data:`~mongoengine_ids.tools.bench._core.BENCH_ALIAS` to a new mongomock database
    whose calls go through ``hook``.

    Yields the database; disconnects on exit.

    Raises:
        BenchError: mongomock is not installed.
    """
    require_mongomock()  # the instrumented client is mongomock's: say so in one line
    name = f"mongoengine_ids_bench_{uuid.uuid4().hex[:12]}"
    mongoengine.connect(
        name,
        alias=BENCH_ALIAS,
        mongo_client_class=instrumented_client_class(hook=hook),
        uuidRepresentation="standard",
    )
    try:
        yield mongoengine.get_db(BENCH_ALIAS)
    finally:
        mongoengine.disconnect(BENCH_ALIAS)


__all__ = ["CountingLatency", "give_ids_as_the_driver", "latency_database", "wait"]
