"""Benchmark group ``locality``: Locality UUID generation, ``save()`` and bulk insert.

Rows (names are stable; the tests look for them):

* generation, one interleaved run: ``uuid.uuid4()``, ``bson.ObjectId()``,
  ``str(uuid.uuid4())`` (baselines); ``generate() spread`` and ``generate() sequential``
  against ``uuid.uuid4()`` (target **<= 0.50x**) and ``bson.ObjectId()``;
  ``generate_str() spread`` and ``generate_str() sequential`` against ``str(uuid.uuid4())`` and
  ``uuid.uuid4()``.
* ``save()`` of a new document with ``id = LocalityUUIDField(primary_key=True)`` against the
  same document shape with MongoEngine's default ObjectId pk (target **<= 1.15x**).
* ``insert()`` of 1,000 documents (``load_bulk=False``), same two shapes, reported only.

The database rows use mongomock, or the server given as ``uri``.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

import bson
from mongoengine import Document, IntField, ListField, StringField

from ...fields import LocalityUUIDField
from ...locality import LocalityUUIDGenerator
from ._core import (
    BENCH_ALIAS,
    Result,
    baseline_row,
    compare_row,
    database,
    database_label,
    insert_trial,
    loop,
    measure,
    save_trial,
)

GROUP: Final = "locality"

UUID4: Final = "uuid.uuid4()"
OBJECT_ID: Final = "bson.ObjectId()"
STR_UUID4: Final = "str(uuid.uuid4())"
GENERATE_SPREAD: Final = "generate() spread"
GENERATE_SEQUENTIAL: Final = "generate() sequential"
GENERATE_STR_SPREAD: Final = "generate_str() spread"
GENERATE_STR_SEQUENTIAL: Final = "generate_str() sequential"
SAVE_LOCALITY: Final = "save() LocalityUUIDField pk"
SAVE_OBJECT_ID: Final = "save() ObjectId pk"
BULK_SIZE: Final = 1_000
INSERT_LOCALITY: Final = f"insert({BULK_SIZE:,}) LocalityUUIDField pk"
INSERT_OBJECT_ID: Final = f"insert({BULK_SIZE:,}) ObjectId pk"

#: Targets, as the most time a candidate may take relative to its baseline.
GENERATE_MAX_RATIO: Final = 0.5
SAVE_MAX_RATIO: Final = 1.15


@dataclass(frozen=True)
class _Counts:
    """Iterations of one run: operations per round, rounds."""

    generate_number: int
    generate_rounds: int
    save_number: int
    save_rounds: int
    insert_rounds: int
    warmup: int


# Full run on the 2-core development machine: generation ~13 s, save() and insert() ~6 s on
# mongomock, ~20 s in all. Over three full runs the ratios moved by at most 0.015 (generation),
# 0.03 (save) and 0.04 (insert), while the absolute times moved by up to 10%.
_FULL: Final = _Counts(
    generate_number=50_000,
    generate_rounds=31,
    save_number=1_000,
    save_rounds=31,
    insert_rounds=15,
    warmup=1,
)
_QUICK: Final = _Counts(
    generate_number=200,
    generate_rounds=2,
    save_number=5,
    save_rounds=2,
    insert_rounds=1,
    warmup=0,
)


# -- models -------------------------------------------------------------------------------------
# The same shape twice: only the primary key differs. Indexes are created by the warm-up round
# (first collection access), never inside a timed one.


class BenchLocalityDocument(Document):  # type: ignore[misc]
    """A document whose primary key is a generated Locality UUID."""

    id = LocalityUUIDField(primary_key=True)
    name = StringField()
    count = IntField()
    tags = ListField(StringField())
    meta = {"db_alias": BENCH_ALIAS, "collection": "bench_locality_uuid"}


class BenchObjectIdDocument(Document):  # type: ignore[misc]
    """The baseline: the same fields, MongoEngine's default ObjectId primary key."""

    name = StringField()
    count = IntField()
    tags = ListField(StringField())
    meta = {"db_alias": BENCH_ALIAS, "collection": "bench_object_id"}


def _new_documents(model: type[Document], count: int) -> list[Document]:
    return [model(name=f"place {i}", count=i, tags=["a", "b"]) for i in range(count)]


# -- the group ----------------------------------------------------------------------------------


def _generation(counts: _Counts) -> list[Result]:
    spread = LocalityUUIDGenerator()
    sequential = LocalityUUIDGenerator(mode="sequential")
    functions: dict[str, Callable[[], object]] = {
        UUID4: uuid.uuid4,
        OBJECT_ID: bson.ObjectId,
        STR_UUID4: lambda: str(uuid.uuid4()),
        GENERATE_SPREAD: spread.generate,
        GENERATE_SEQUENTIAL: sequential.generate,
        GENERATE_STR_SPREAD: spread.generate_str,
        GENERATE_STR_SEQUENTIAL: sequential.generate_str,
    }
    timings = measure(
        {name: loop(function) for name, function in functions.items()},
        number=counts.generate_number,
        rounds=counts.generate_rounds,
        warmup=counts.warmup,
    )
    note = f"min of {counts.generate_rounds} rounds x {counts.generate_number:,}"
    rows = [
        baseline_row(GROUP, name, timings[name], note=note)
        for name in (UUID4, OBJECT_ID, STR_UUID4)
    ]
    for name in (GENERATE_SPREAD, GENERATE_SEQUENTIAL):
        rows.append(
            compare_row(GROUP, name, timings, UUID4, max_ratio=GENERATE_MAX_RATIO, note=note)
        )
        rows.append(compare_row(GROUP, name, timings, OBJECT_ID, note=note))
    for name in (GENERATE_STR_SPREAD, GENERATE_STR_SEQUENTIAL):
        rows.append(compare_row(GROUP, name, timings, STR_UUID4, note=note))
        rows.append(compare_row(GROUP, name, timings, UUID4, note=note))
    return rows


def _writes(counts: _Counts, uri: str | None) -> list[Result]:
    label = database_label(uri)
    with database(uri):
        saves = measure(
            {
                SAVE_OBJECT_ID: save_trial(BenchObjectIdDocument, _new_documents),
                SAVE_LOCALITY: save_trial(BenchLocalityDocument, _new_documents),
            },
            number=counts.save_number,
            rounds=counts.save_rounds,
            warmup=counts.warmup,
        )
        inserts = measure(
            {
                INSERT_OBJECT_ID: insert_trial(BenchObjectIdDocument, _new_documents, BULK_SIZE),
                INSERT_LOCALITY: insert_trial(BenchLocalityDocument, _new_documents, BULK_SIZE),
            },
            number=1,
            rounds=counts.insert_rounds,
            warmup=counts.warmup,
        )
    save_note = f"{label}; min of {counts.save_rounds} rounds x {counts.save_number:,} saves"
    insert_note = f"{label}; min of {counts.insert_rounds} rounds; time per batch"
    return [
        baseline_row(GROUP, SAVE_OBJECT_ID, saves[SAVE_OBJECT_ID], note=save_note),
        compare_row(
            GROUP, SAVE_LOCALITY, saves, SAVE_OBJECT_ID, max_ratio=SAVE_MAX_RATIO, note=save_note
        ),
        baseline_row(GROUP, INSERT_OBJECT_ID, inserts[INSERT_OBJECT_ID], note=insert_note),
        compare_row(GROUP, INSERT_LOCALITY, inserts, INSERT_OBJECT_ID, note=insert_note),
    ]


def run(*, quick: bool, uri: str | None) -> list[Result]:
    """Measure the group; return its rows (prints nothing).

    Args:
        quick: tiny iteration counts (the rows appear, the numbers mean nothing).
        uri: a MongoDB URI for the database rows, or None for mongomock.
    """
    counts = _QUICK if quick else _FULL
    return [*_generation(counts), *_writes(counts, uri)]


def expected_rows() -> list[tuple[str, str | None]]:
    """The (name, baseline) of every row :func:`run` returns, in order."""
    return [
        (UUID4, None),
        (OBJECT_ID, None),
        (STR_UUID4, None),
        (GENERATE_SPREAD, UUID4),
        (GENERATE_SPREAD, OBJECT_ID),
        (GENERATE_SEQUENTIAL, UUID4),
        (GENERATE_SEQUENTIAL, OBJECT_ID),
        (GENERATE_STR_SPREAD, STR_UUID4),
        (GENERATE_STR_SPREAD, UUID4),
        (GENERATE_STR_SEQUENTIAL, STR_UUID4),
        (GENERATE_STR_SEQUENTIAL, UUID4),
        (SAVE_OBJECT_ID, None),
        (SAVE_LOCALITY, SAVE_OBJECT_ID),
        (INSERT_OBJECT_ID, None),
        (INSERT_LOCALITY, INSERT_OBJECT_ID),
    ]


__all__ = ["GROUP", "expected_rows", "run"]
