"""Benchmark group ``sequence``: leased counters against MongoEngine's ``SequenceField``.

Rows (names are stable; the tests look for them):

* hand-out from a leased block: ``Sequence.next() from a leased block`` (target **<= 200 ns**,
  5M ids/s), with ``with lock: next(count)`` and ``bson.ObjectId()`` for scale.
* with a simulated 1 ms round trip (mongomock wrapped so that every database call waits 1 ms,
  a real server's own latency with ``uri``), ``batch_size=1000`` against MongoEngine's field:
  id acquisition (target **at least 500 times faster**, issue 11), ``save()`` (target **at
  least 1.8 times faster**, one round trip instead of three, issue 3) and ``insert()`` of 1,000
  documents (target **at least 40 times faster**, issue 11), with the default ObjectId
  ``save()`` for scale. The notes give the counter round trips per 1,000 ids.
* on mongomock without added latency: the same acquisition, ``save()`` (against the ObjectId
  save only) and insert rows, reported without targets: mongomock's own cost is no server's.
  How ``save()`` and bulk inserts compare with values the caller assigns is the ``writes``
  group's.
"""

from __future__ import annotations

import dataclasses
import itertools
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

import bson
from mongoengine import Document, IntField, StringField
from mongoengine import fields as me_fields

from ...sequence import DEFAULT_COLLECTION, Sequence, SequenceField
from ._core import (
    BENCH_ALIAS,
    Result,
    baseline_row,
    clear,
    compare_row,
    database,
    database_label,
    insert_trial,
    loop,
    measure,
    save_trial,
)
from ._latency import CountingLatency, latency_database

GROUP: Final = "sequence"
LATENCY_SECONDS: Final = 0.001
BATCH_SIZE: Final = 1_000
BULK_SIZE: Final = 1_000

HANDOUT: Final = "Sequence.next() from a leased block"
LOCKED_COUNT: Final = "with lock: next(count)"
OBJECT_ID: Final = "bson.ObjectId()"
ACQUIRE_OURS: Final = f"Sequence(batch_size={BATCH_SIZE:,}).next()"
ACQUIRE_THEIRS: Final = "mongoengine SequenceField.generate()"
SAVE_OURS: Final = f"save() SequenceField(batch_size={BATCH_SIZE:,}) pk"
SAVE_THEIRS: Final = "save() mongoengine SequenceField pk"
SAVE_OBJECT_ID: Final = "save() ObjectId pk"
INSERT_OURS: Final = f"insert({BULK_SIZE:,}) SequenceField pk"
INSERT_THEIRS: Final = f"insert({BULK_SIZE:,}) mongoengine SequenceField pk"

#: Targets: the hand-out time (issue 3), then how many times faster than MongoEngine's field
#: with 1 ms per database call (acquisition and bulk insert: issue 11; save: issue 3).
HANDOUT_MAX_SECONDS: Final = 200e-9  # 5M ids/s
ACQUIRE_MIN_SPEEDUP: Final = 500
SAVE_MIN_SPEEDUP: Final = 1.8
INSERT_MIN_SPEEDUP: Final = 40


@dataclass(frozen=True)
class _Counts:
    handout_number: int
    handout_rounds: int
    acquire_number: int
    save_number: int
    latency_rounds: int
    mock_save_number: int
    mock_rounds: int
    warmup: int


# Full run on the 2-core development machine: about 25 s, most of it MongoEngine's field under
# 1 ms latency (1,000 round trips per 1,000 ids, 2,000 per 1,000 saves).
_FULL: Final = _Counts(
    handout_number=200_000,
    handout_rounds=15,
    acquire_number=BATCH_SIZE,  # one lease per round for ours: the amortised cost
    save_number=200,
    latency_rounds=3,
    mock_save_number=1_000,
    mock_rounds=15,
    warmup=1,
)
_QUICK: Final = _Counts(
    handout_number=200,
    handout_rounds=2,
    acquire_number=20,
    save_number=3,
    latency_rounds=1,
    mock_save_number=5,
    mock_rounds=1,
    warmup=0,
)


# -- models -------------------------------------------------------------------------------------


class BenchSequenceDocument(Document):  # type: ignore[misc]
    """A document numbered by our leased sequence."""

    id = SequenceField(primary_key=True, batch_size=BATCH_SIZE)
    name = StringField()
    count = IntField()
    meta = {"db_alias": BENCH_ALIAS, "collection": "bench_sequence"}


class BenchMongoEngineSequenceDocument(Document):  # type: ignore[misc]
    """The baseline: MongoEngine's own SequenceField (one counter round trip per value)."""

    id = me_fields.SequenceField(primary_key=True, db_alias=BENCH_ALIAS)
    name = StringField()
    count = IntField()
    meta = {"db_alias": BENCH_ALIAS, "collection": "bench_me_sequence"}


class BenchSequenceObjectIdDocument(Document):  # type: ignore[misc]
    """The same fields with MongoEngine's default ObjectId primary key."""

    name = StringField()
    count = IntField()
    meta = {"db_alias": BENCH_ALIAS, "collection": "bench_sequence_object_id"}


_MODELS: Final = (
    BenchSequenceDocument,
    BenchMongoEngineSequenceDocument,
    BenchSequenceObjectIdDocument,
)


# -- trials -------------------------------------------------------------------------------------


def _new_documents(model: type[Document], count: int) -> list[Document]:
    return [model(name=f"row {i}", count=i) for i in range(count)]


def _theirs_generate() -> Callable[[], object]:
    field = BenchMongoEngineSequenceDocument._fields["id"]
    return field.generate  # type: ignore[no-any-return]


def _round_trips_per_thousand(db: Any, hook: CountingLatency) -> tuple[int, int]:
    """Counter calls for 1,000 ids: ours (batch 1,000), MongoEngine's."""
    ours = Sequence("bench.round_trips", database=db, batch_size=BATCH_SIZE)
    ours.next()  # the counter exists, its first block is leased
    ours.next_values(BATCH_SIZE - 1)  # ...and used up
    before = hook.count(DEFAULT_COLLECTION)
    for _ in range(BATCH_SIZE):
        ours.next()
    ours_calls = hook.count(DEFAULT_COLLECTION) - before
    generate = _theirs_generate()
    before = hook.count(DEFAULT_COLLECTION)
    for _ in range(BATCH_SIZE):
        generate()
    return ours_calls, hook.count(DEFAULT_COLLECTION) - before


# -- the group ----------------------------------------------------------------------------------


def _handout(counts: _Counts, db: Any) -> list[Result]:
    """The in-process rows; ``db`` holds the counter (one lease, before the clock starts)."""
    # One block larger than every round together: no refill inside the clock.
    total = counts.handout_number * (counts.handout_rounds + counts.warmup) + 1
    sequence = Sequence("bench.handout", database=db, batch_size=total)
    sequence.next()
    lock = threading.Lock()
    counter = itertools.count()

    def locked() -> int:
        with lock:
            return next(counter)

    timings = measure(
        {
            HANDOUT: loop(sequence.next),
            LOCKED_COUNT: loop(locked),
            OBJECT_ID: loop(bson.ObjectId),
        },
        number=counts.handout_number,
        rounds=counts.handout_rounds,
        warmup=counts.warmup,
    )
    note = f"in-process; min of {counts.handout_rounds} rounds x {counts.handout_number:,}"
    seconds = timings[HANDOUT].seconds
    return [
        baseline_row(GROUP, LOCKED_COUNT, timings[LOCKED_COUNT], note=note),
        baseline_row(GROUP, OBJECT_ID, timings[OBJECT_ID], note=note),
        Result(
            group=GROUP,
            name=HANDOUT,
            seconds=seconds,
            target=f"<= {HANDOUT_MAX_SECONDS * 1e9:.0f} ns",
            met=seconds <= HANDOUT_MAX_SECONDS,
            note=f"{1 / seconds / 1e6:.1f}M ids/s; {note}",
        ),
    ]


def _database_rows(
    counts: _Counts, db: Any, label: str, hook: CountingLatency | None, *, judged: bool
) -> list[Result]:
    """Acquisition, save() and insert() of ours against MongoEngine's on ``db``."""
    for model in _MODELS:
        clear(model)
    trips = ""
    if hook is not None:
        ours_trips, theirs_trips = _round_trips_per_thousand(db, hook)
        trips = f"; counter round trips per 1,000 ids: {ours_trips} vs {theirs_trips}"
    ours = Sequence("bench.acquire", database=db, batch_size=BATCH_SIZE)
    acquire = measure(
        {ACQUIRE_THEIRS: loop(_theirs_generate()), ACQUIRE_OURS: loop(ours.next)},
        number=counts.acquire_number,
        rounds=counts.latency_rounds,
        warmup=counts.warmup,
    )
    save_trials = {
        SAVE_OBJECT_ID: save_trial(BenchSequenceObjectIdDocument, _new_documents),
        SAVE_OURS: save_trial(BenchSequenceDocument, _new_documents),
    }
    if judged:
        # On mongomock without latency MongoEngine's save() of a set pk takes its
        # find_one_and_replace path (about 1.2 ms against 56 us): left out there, it would
        # dominate the run and say nothing about the counter.
        save_trials[SAVE_THEIRS] = save_trial(BenchMongoEngineSequenceDocument, _new_documents)
    saves = measure(
        save_trials,
        number=counts.save_number if judged else counts.mock_save_number,
        rounds=counts.latency_rounds if judged else counts.mock_rounds,
        warmup=counts.warmup,
    )
    inserts = measure(
        {
            INSERT_THEIRS: insert_trial(
                BenchMongoEngineSequenceDocument, _new_documents, BULK_SIZE
            ),
            INSERT_OURS: insert_trial(BenchSequenceDocument, _new_documents, BULK_SIZE),
        },
        number=1,
        rounds=counts.latency_rounds,
        warmup=counts.warmup,
    )
    acquire_note = (
        f"{label}; min of {counts.latency_rounds} rounds x {counts.acquire_number:,}{trips}"
    )
    save_rounds = counts.latency_rounds if judged else counts.mock_rounds
    save_note = f"{label}; min of {save_rounds} rounds"
    insert_note = f"{label}; min of {counts.latency_rounds} rounds; time per batch"
    return [
        baseline_row(GROUP, ACQUIRE_THEIRS, acquire[ACQUIRE_THEIRS], note=acquire_note),
        _faster_row(
            ACQUIRE_OURS,
            acquire,
            ACQUIRE_THEIRS,
            ACQUIRE_MIN_SPEEDUP if judged else None,
            acquire_note,
        ),
        baseline_row(GROUP, SAVE_OBJECT_ID, saves[SAVE_OBJECT_ID], note=save_note),
        *(
            [
                baseline_row(GROUP, SAVE_THEIRS, saves[SAVE_THEIRS], note=save_note),
                _faster_row(SAVE_OURS, saves, SAVE_THEIRS, SAVE_MIN_SPEEDUP, save_note),
            ]
            if judged
            else []
        ),
        compare_row(GROUP, SAVE_OURS, saves, SAVE_OBJECT_ID, note=save_note),
        baseline_row(GROUP, INSERT_THEIRS, inserts[INSERT_THEIRS], note=insert_note),
        _faster_row(
            INSERT_OURS,
            inserts,
            INSERT_THEIRS,
            INSERT_MIN_SPEEDUP if judged else None,
            insert_note,
        ),
    ]


def _faster_row(
    name: str, timings: dict[str, Any], baseline: str, min_speedup: float | None, note: str
) -> Result:
    """``name`` against ``baseline``; the target, if any, written as a speedup (a ratio of
    1/500 would print as ``<= 0.00x``)."""
    max_ratio = None if min_speedup is None else 1 / min_speedup
    row = compare_row(GROUP, name, timings, baseline, max_ratio=max_ratio, note=note)
    if min_speedup is None:
        return row
    return dataclasses.replace(row, target=f">= {min_speedup:g}x faster")


def _with_speedup(row: Result) -> Result:
    """Say "N x faster" in the note: a ratio of 0.001 prints as 0.00x."""
    if row.ratio is None or not 0 < row.ratio < 1:
        return row
    return dataclasses.replace(row, note=f"{1 / row.ratio:,.1f}x faster; {row.note}")


def run(*, quick: bool, uri: str | None) -> list[Result]:
    """Measure the group; return its rows (prints nothing).

    Args:
        quick: tiny iteration counts (the rows appear, the numbers mean nothing).
        uri: a MongoDB URI: the database rows run against it, with its own latency; None for
            mongomock, with and without a simulated 1 ms round trip.
    """
    counts = _QUICK if quick else _FULL
    return [_with_speedup(row) if row.baseline else row for row in _run(counts, uri)]


def _run(counts: _Counts, uri: str | None) -> list[Result]:
    if uri is not None:
        # The server's database holds the hand-out's counter too: no mongomock needed.
        with database(uri) as db:
            rows = _handout(counts, db)
            rows += _database_rows(counts, db, database_label(uri), None, judged=True)
        return rows
    with database(None) as db:  # without mongomock: its one-line error, before any timing
        rows = _handout(counts, db)
    hook = CountingLatency(LATENCY_SECONDS)
    with latency_database(hook) as db:
        rows += _database_rows(counts, db, "mongomock + 1 ms per call", hook, judged=True)
    with database(None) as db:
        rows += _database_rows(counts, db, "mongomock", None, judged=False)
    return rows


def expected_rows() -> list[tuple[str, str | None]]:
    """The (name, baseline) of every row :func:`run` returns without ``uri``, in order."""

    def database_rows(judged: bool) -> list[tuple[str, str | None]]:
        saves: list[tuple[str, str | None]] = [(SAVE_OBJECT_ID, None)]
        if judged:
            saves += [(SAVE_THEIRS, None), (SAVE_OURS, SAVE_THEIRS)]
        return [
            (ACQUIRE_THEIRS, None),
            (ACQUIRE_OURS, ACQUIRE_THEIRS),
            *saves,
            (SAVE_OURS, SAVE_OBJECT_ID),
            (INSERT_THEIRS, None),
            (INSERT_OURS, INSERT_THEIRS),
        ]

    return [
        (LOCKED_COUNT, None),
        (OBJECT_ID, None),
        (HANDOUT, None),
        *database_rows(True),
        *database_rows(False),
    ]
