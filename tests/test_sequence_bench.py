"""The ``sequence`` benchmark group runs, and its latency wrapper counts and waits."""

from __future__ import annotations

import copy
import functools
from typing import Any

import pytest
from bson import ObjectId

from mongoengine_ids.sequence import DEFAULT_COLLECTION, Sequence
from mongoengine_ids.tools.bench import sequence as bench
from mongoengine_ids.tools.bench._latency import CountingLatency, latency_database


def test_quick_run_returns_every_row() -> None:
    rows = bench.run(quick=True, uri=None)
    assert [(row.name, row.baseline) for row in rows] == bench.expected_rows()
    assert all(row.group == "sequence" and row.seconds > 0 for row in rows)
    judged = {(row.name, row.baseline): row.target for row in rows if row.target}
    assert judged == {
        (bench.HANDOUT, None): "<= 200 ns",
        (bench.ACQUIRE_OURS, bench.ACQUIRE_THEIRS): ">= 500x faster",
        (bench.SAVE_OURS, bench.SAVE_THEIRS): ">= 1.8x faster",
        (bench.INSERT_OURS, bench.INSERT_THEIRS): ">= 40x faster",
    }
    # Judged only with the latency: the mongomock-only rows (the second half) have no target.
    mongomock_only = [row for row in rows if "mongomock;" in row.note]
    assert mongomock_only
    assert all(row.target is None for row in mongomock_only)


def test_latency_wrapper_waits_before_every_call_and_counts_them() -> None:
    waits: list[float] = []
    hook = CountingLatency(0.001, sleep=waits.append)
    with latency_database(hook) as db:
        sequence = Sequence("wrapped", database=db, batch_size=10)
        assert sequence.next_values(25) == list(range(1, 26))
        # Creation: a missed $inc, a find_one, a look for counters of another layout, the
        # insert; then one $inc of 30 values.
        assert hook.count(DEFAULT_COLLECTION) == 5
        assert waits == [0.001] * 5
        db["other"].insert_one({"x": 1})
        assert hook.count("other") == 1
        assert hook.total == 6


def test_the_clock_is_stopped_while_mongomock_works_behind_the_latency(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Review BP: mongomock's own work was timed as a server's, on both sides of every ratio.
    from mongoengine_ids.tools.bench import _core

    now = [100.0]
    monkeypatch.setattr(_core.time, "perf_counter", lambda: now[0])
    monkeypatch.setattr(_core, "_server_seconds", [0.0])

    def work(seconds: float) -> Any:
        def call() -> str:
            now[0] += seconds  # what mongomock spends on the call
            return "done"

        return call

    hook = CountingLatency(0.001, sleep=lambda seconds: None, timer=lambda: now[0])
    start = _core.clock()
    assert hook("c", "insert_many", work(0.5)) == "done"
    assert hook("c", "insert_one", work(0.25)) == "done"
    assert hook.server_seconds == 0.75
    assert _core.clock() - start == 0.0  # the waits are the round trips (none here)
    counting = CountingLatency(0, timer=lambda: now[0])  # no latency: mongomock's time is all
    counting("c", "insert_one", work(0.5))
    assert counting.server_seconds == 0.0
    assert _core.clock() - start == 0.5


def test_latency_must_not_be_negative() -> None:
    with pytest.raises(ValueError, match="latency=-1 must be >= 0"):
        CountingLatency(-1)


def test_database_is_left_disconnected(mongoengine_db: Any) -> None:
    import mongoengine

    with latency_database(CountingLatency(0)):
        pass
    with pytest.raises(mongoengine.connection.ConnectionFailure):
        mongoengine.get_db(bench.BENCH_ALIAS)


def test_wait_spins_until_the_deadline(monkeypatch: pytest.MonkeyPatch) -> None:
    # A fake clock that moves 0.25 s per reading: the wait reads it until the deadline passed.
    from mongoengine_ids.tools.bench import _latency

    readings: list[float] = []

    def clock() -> float:
        readings.append(len(readings) * 0.25)
        return readings[-1]

    monkeypatch.setattr(_latency.time, "perf_counter", clock)
    _latency.wait(1.0)
    assert readings == [0.0, 0.25, 0.5, 0.75, 1.0]  # the start, then until it reaches 0.0 + 1.0


def test_inserted_documents_get_their_id_on_the_clock_as_the_driver_gives_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # pymongo makes the ObjectId of a document inserted without one on the client; mongomock
    # made it inside the call, out of the timings, so only a model whose key the package makes
    # paid for one.
    from mongoengine_ids.tools.bench import _core

    now = [100.0]
    monkeypatch.setattr(_core.time, "perf_counter", lambda: now[0])
    monkeypatch.setattr(_core, "_server_seconds", [0.0])
    seen: list[Any] = []

    def mongomock_call(payload: Any) -> None:
        seen.append(copy.deepcopy(payload))  # what mongomock was given
        now[0] += 1.0  # its work: out of the timings

    def insert(payload: Any) -> Any:
        return functools.partial(mongomock_call, payload)  # as the instrumented client makes it

    hook = CountingLatency(0.001, sleep=lambda seconds: None, timer=lambda: now[0])
    start = _core.clock()
    many = [{"x": 1}, {"_id": 7, "x": 2}]
    hook("c", "insert_many", insert(many))
    one = {"x": 3}
    hook("c", "insert_one", insert(one))
    assert isinstance(many[0]["_id"], ObjectId)
    assert many[1]["_id"] == 7
    assert isinstance(one["_id"], ObjectId)
    # Given before the call ran: mongomock saw them, as a server sees the driver's.
    assert seen == [many, one]
    assert _core.clock() == start  # mongomock's work is not timed
    unchanged = {"x": 4}
    hook("c", "update_one", insert(unchanged))
    assert seen[-1] == unchanged == {"x": 4}
