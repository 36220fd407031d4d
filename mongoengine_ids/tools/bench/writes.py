"""Benchmark group ``writes``: each field's write path against values the caller assigns.

For every field of this package, ``save()`` of a new document and ``insert()`` of 1,000 new
documents (``load_bulk=False``) are timed against a model of the same shape whose value the
caller assigns to a plain MongoEngine field: the same stored BSON type, the same indexes, and
insert semantics (``save(force_insert=True)``; a bulk insert always inserts). What differs is
this package's write path, and only that: making the values, and the seam around MongoEngine's
own write. The baselines, by family:

* ``SequenceField(batch_size=1000)`` primary key: an ``IntField`` primary key (int32);
* ``RandomUniqueField(digits=12)``: a ``LongField(unique=True, sparse=True)`` (int64, the same
  sparse unique index), the primary key an ObjectId in both;
* ``LocalityUUIDField``, ``UUID4Field`` and ``UUID7Field`` primary keys (one run, one
  baseline): MongoEngine's ``UUIDField`` stored as BSON Binary subtype 4, as they store it.

Rows (names are stable; the tests look for them), in two sections:

* mongomock behind a simulated network, each database call costing 0.2 ms (:mod:`._latency`; a
  server on the same machine or rack answers in about that, its work included), mongomock's
  own work left out of the timing: per family, the baseline row, then each candidate against
  it, target **<= 1.05x**. The note gives the database calls per operation of both sides,
  counted by the hook in the last round.
* mongomock alone: the same rows, reported without targets (mongomock's own cost, tens of
  microseconds per write, is no server's).

With ``uri`` the first section runs against that server, with its own latency, and the second
is left out. The baseline and its candidates take turns operation by operation
(:func:`~mongoengine_ids.tools.bench._core.measure_alternating`). Each document is made outside the
clock (an assigned value, too); each save is followed, untimed, by emptying the collection, so
every save meets an empty one (mongomock checks a unique index by scanning the collection);
each bulk insert starts from an empty collection.
"""

from __future__ import annotations

import itertools
import random
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Final

from bson.binary import Binary
from mongoengine import Document, IntField, LongField, StringField, UUIDField

from ...locality import LocalityUUIDField
from ...random_unique import RandomUniqueField
from ...sequence import SequenceField
from ...standard import UUID4Field, UUID7Field
from ._core import (
    BENCH_ALIAS,
    Result,
    Step,
    baseline_row,
    clock,
    compare_row,
    database,
    database_label,
    measure_alternating,
)
from ._latency import CountingLatency, latency_database

GROUP: Final = "writes"
LATENCY_SECONDS: Final = 0.0002
BULK_SIZE: Final = 1_000
BATCH_SIZE: Final = 1_000
#: Target: a candidate may take this many times its baseline's time (with the latency).
MAX_RATIO: Final = 1.05
#: The assigned codes are drawn from this seed: runs are comparable.
SEED: Final = 20_240_601


@dataclass(frozen=True)
class _Counts:
    """One run's sizes: saves per round, bulk inserts per round, rounds of each."""

    save_number: int
    save_rounds: int
    insert_number: int
    insert_rounds: int
    warmup: int


# Full run on the 2-core development machine, shared with other processes: about 3 min, most of
# it the waits of the latency section and mongomock's bulk inserts under a unique index.
# save_number is the batch size, so that every round pays for exactly one lease.
_FULL: Final = _Counts(
    save_number=BATCH_SIZE, save_rounds=7, insert_number=3, insert_rounds=9, warmup=1
)
_QUICK: Final = _Counts(save_number=3, save_rounds=1, insert_number=1, insert_rounds=1, warmup=0)


# -- models -------------------------------------------------------------------------------------


class BinaryUUIDField(UUIDField):  # type: ignore[misc]
    """MongoEngine's ``UUIDField``, stored as BSON Binary subtype 4 whatever the client's
    ``uuidRepresentation`` (mongomock cannot encode a native ``uuid.UUID``): what the UUID
    fields of this package store."""

    def to_python(self, value: Any) -> Any:
        if isinstance(value, Binary) and value.subtype == 4:
            return value.as_uuid()
        return super().to_python(value)

    def to_mongo(self, value: Any) -> Any:
        return Binary(value.bytes, 4)


def _meta(collection: str) -> dict[str, Any]:
    return {"db_alias": BENCH_ALIAS, "collection": f"bench_writes_{collection}"}


class SequenceDocument(Document):  # type: ignore[misc]
    id = SequenceField(primary_key=True, batch_size=BATCH_SIZE)
    name = StringField()
    count = IntField()
    meta = _meta("sequence")


class AssignedIntDocument(Document):  # type: ignore[misc]
    id = IntField(primary_key=True)
    name = StringField()
    count = IntField()
    meta = _meta("assigned_int")


class RandomDocument(Document):  # type: ignore[misc]
    code = RandomUniqueField(digits=12)
    name = StringField()
    count = IntField()
    meta = _meta("random")


class AssignedLongDocument(Document):  # type: ignore[misc]
    code = LongField(unique=True, sparse=True)
    name = StringField()
    count = IntField()
    meta = _meta("assigned_long")


class LocalityDocument(Document):  # type: ignore[misc]
    id = LocalityUUIDField(primary_key=True)
    name = StringField()
    count = IntField()
    meta = _meta("locality")


class UUID4Document(Document):  # type: ignore[misc]
    id = UUID4Field(primary_key=True)
    name = StringField()
    count = IntField()
    meta = _meta("uuid4")


class UUID7Document(Document):  # type: ignore[misc]
    id = UUID7Field(primary_key=True)
    name = StringField()
    count = IntField()
    meta = _meta("uuid7")


class AssignedUUIDDocument(Document):  # type: ignore[misc]
    id = BinaryUUIDField(primary_key=True)
    name = StringField()
    count = IntField()
    meta = _meta("assigned_uuid")


# -- the families -------------------------------------------------------------------------------

#: Makes ``count`` new documents, values assigned or not.
Make = Callable[[int], list[Document]]


@dataclass(frozen=True)
class _Side:
    """One model in a family: ``label`` names its rows, ``make`` its new documents."""

    label: str
    model: type[Document]
    make: Make
    force_insert: bool = False


@dataclass(frozen=True)
class _Family:
    """A baseline and the candidates measured against it, in one alternating run.

    ``insert_number`` replaces the run's bulk inserts per round where each is slow; ``note``
    is added to the family's rows.
    """

    baseline: _Side
    candidates: tuple[_Side, ...]
    insert_number: int | None = None
    note: str = ""

    @property
    def sides(self) -> tuple[_Side, ...]:
        return (self.baseline, *self.candidates)


def _generated(model: type[Document]) -> Make:
    return lambda count: [model(name=f"row {i}", count=i) for i in range(count)]


def _assigned(model: type[Document], field: str, values: Callable[[int], list[Any]]) -> Make:
    def make(count: int) -> list[Document]:
        return [
            model(**{field: value}, name=f"row {i}", count=i)
            for i, value in enumerate(values(count))
        ]

    return make


def _families() -> list[_Family]:
    numbers: Iterator[int] = itertools.count(1)
    rng = random.Random(SEED)
    codes = range(10**11, 10**12)  # the space of digits=12
    return [
        _Family(
            _Side(
                "IntField pk, assigned",
                AssignedIntDocument,
                _assigned(AssignedIntDocument, "id", lambda n: list(itertools.islice(numbers, n))),
                force_insert=True,
            ),
            (
                _Side(
                    f"SequenceField(batch_size={BATCH_SIZE:,}) pk",
                    SequenceDocument,
                    _generated(SequenceDocument),
                ),
            ),
        ),
        _Family(
            _Side(
                "LongField(unique, sparse), assigned",
                AssignedLongDocument,
                _assigned(AssignedLongDocument, "code", lambda n: rng.sample(codes, n)),
                force_insert=True,
            ),
            (_Side("RandomUniqueField(digits=12)", RandomDocument, _generated(RandomDocument)),),
            # mongomock checks a unique index by scanning the collection: a bulk insert of
            # 1,000 compares about 500,000 pairs (about 1 s, on both sides), which no server
            # does. Behind the latency it is left out of the timing (review BP: it hid the
            # write path's cost in the ratio); on mongomock alone it is the figure.
            insert_number=1,
            note="mongomock scans the unique index (bulk: O(n^2), both sides)",
        ),
        _Family(
            _Side(
                "UUIDField pk (Binary 4), assigned",
                AssignedUUIDDocument,
                _assigned(AssignedUUIDDocument, "id", lambda n: [uuid.uuid4() for _ in range(n)]),
                force_insert=True,
            ),
            (
                _Side("LocalityUUIDField pk", LocalityDocument, _generated(LocalityDocument)),
                _Side("UUID4Field pk", UUID4Document, _generated(UUID4Document)),
                _Side("UUID7Field pk", UUID7Document, _generated(UUID7Document)),
            ),
        ),
    ]


def save_name(label: str) -> str:
    """The name of the ``save()`` row of ``label``."""
    return f"save() {label}"


def insert_name(label: str) -> str:
    """The name of the bulk insert row of ``label``."""
    return f"insert({BULK_SIZE:,}) {label}"


# -- steps --------------------------------------------------------------------------------------


class _Calls:
    """Database calls per operation of each side, counted by the hook in the last round."""

    def __init__(self, hook: CountingLatency | None) -> None:
        self.hook = hook
        self.seen: dict[str, list[int]] = {}

    def timed(self, name: str, index: int, operation: Callable[[], object]) -> float:
        """Run ``operation``, return its seconds; count its calls (from afresh at index 0)."""
        before = self.hook.total if self.hook is not None else 0
        start = clock()
        operation()
        elapsed = clock() - start
        if self.hook is not None:
            ops_calls = self.seen.get(name, [0, 0]) if index else [0, 0]
            self.seen[name] = [ops_calls[0] + 1, ops_calls[1] + self.hook.total - before]
        return elapsed

    def per_operation(self, name: str) -> float | None:
        if name not in self.seen:
            return None
        operations, calls = self.seen[name]
        return calls / operations


def _save_step(side: _Side, calls: _Calls) -> Step:
    collection = side.model._get_collection()  # first access: indexes made here, untimed

    def step(index: int) -> float:
        (document,) = side.make(1)
        elapsed = calls.timed(
            save_name(side.label), index, lambda: document.save(force_insert=side.force_insert)
        )
        collection.delete_many({})
        return elapsed

    return step


def _insert_step(side: _Side, calls: _Calls) -> Step:
    collection = side.model._get_collection()

    def step(index: int) -> float:
        collection.delete_many({})
        documents = side.make(BULK_SIZE)
        return calls.timed(
            insert_name(side.label),
            index,
            lambda: side.model.objects.insert(documents, load_bulk=False),
        )

    return step


# -- rows ---------------------------------------------------------------------------------------


def _rows(
    family: _Family,
    timings: dict[str, Any],
    name: Callable[[str], str],
    calls: _Calls,
    *,
    judged: bool,
    note: str,
) -> list[Result]:
    base = name(family.baseline.label)
    base_calls = calls.per_operation(base)
    rows = [baseline_row(GROUP, base, timings[base], note=note)]
    for side in family.candidates:
        ours = calls.per_operation(name(side.label))
        counted = (
            ""
            if ours is None or base_calls is None
            else f"; db calls/op {ours:.3f} vs {base_calls:.3f}"
        )
        rows.append(
            compare_row(
                GROUP,
                name(side.label),
                timings,
                base,
                max_ratio=MAX_RATIO if judged else None,
                note=note + counted,
            )
        )
    return rows


def _section(
    counts: _Counts, label: str, hook: CountingLatency | None, judged: bool
) -> list[Result]:
    """Every family's ``save()`` and bulk insert rows on the connected database."""
    saves: list[Result] = []
    inserts: list[Result] = []
    for family in _families():
        calls = _Calls(hook)
        save_timings = measure_alternating(
            {save_name(side.label): _save_step(side, calls) for side in family.sides},
            number=counts.save_number,
            rounds=counts.save_rounds,
            warmup=counts.warmup,
        )
        insert_number = min(counts.insert_number, family.insert_number or counts.insert_number)
        insert_timings = measure_alternating(
            {insert_name(side.label): _insert_step(side, calls) for side in family.sides},
            number=insert_number,
            rounds=counts.insert_rounds,
            warmup=counts.warmup,
        )
        save_note = f"{label}; median of {counts.save_rounds} rounds x {counts.save_number:,}"
        insert_note = f"{label}; median of {counts.insert_rounds} rounds x {insert_number:,}"
        if family.note and label == "mongomock":  # (left out of the timing behind the latency)
            insert_note += f"; {family.note}"
        saves += _rows(family, save_timings, save_name, calls, judged=judged, note=save_note)
        inserts += _rows(
            family, insert_timings, insert_name, calls, judged=judged, note=insert_note
        )
    return [*saves, *inserts]


def run(*, quick: bool, uri: str | None) -> list[Result]:
    """Measure the group; return its rows (prints nothing).

    Args:
        quick: tiny iteration counts (the rows appear, the numbers mean nothing).
        uri: a MongoDB URI: the rows run against it, with its own latency; None for mongomock,
            with 0.2 ms added per call (judged), then without (reported only).
    """
    counts = _QUICK if quick else _FULL
    if uri is not None:
        with database(uri):
            return _section(counts, database_label(uri), None, judged=True)
    hook = CountingLatency(LATENCY_SECONDS)
    with latency_database(hook):
        rows = _section(counts, "mongomock + 0.2 ms per call", hook, judged=True)
    with database(None):
        rows += _section(counts, "mongomock", None, judged=False)
    return rows


def expected_rows() -> list[tuple[str, str | None]]:
    """The (name, baseline) of every row :func:`run` returns without ``uri``, in order."""
    section: list[tuple[str, str | None]] = []
    for name in (save_name, insert_name):
        for family in _families():
            base = name(family.baseline.label)
            section.append((base, None))
            section += [(name(side.label), base) for side in family.candidates]
    return [*section, *section]


__all__ = ["GROUP", "MAX_RATIO", "expected_rows", "insert_name", "run", "save_name"]
