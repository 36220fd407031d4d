"""The ``writes`` benchmark group: every row, baselines of the same shape, round trips counted.

Timings are never asserted on; what is checked is what the ratios rest on: each baseline
stores the same BSON types under the same indexes as its candidates and inserts (never
replaces), and a candidate's ``save()`` makes one database call, as the baseline's does.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import bson
import pytest
from mongoengine.errors import NotUniqueError

from mongoengine_ids.sequence import DEFAULT_COLLECTION
from mongoengine_ids.tools.bench import writes
from mongoengine_ids.tools.bench._latency import latency_database

FAMILIES = writes._families()
SIDES = [(family, side) for family in FAMILIES for side in family.sides]


def test_quick_run_has_every_row_in_order() -> None:
    rows = writes.run(quick=True, uri=None)

    assert [(row.name, row.baseline) for row in rows] == writes.expected_rows()
    half = len(rows) // 2
    for position, row in enumerate(rows):
        assert row.group == "writes"
        assert row.seconds > 0
        judged = position < half
        assert row.note.startswith("mongomock + 0.2 ms per call" if judged else "mongomock;")
        if row.baseline is None:
            assert row.target is None
            continue
        assert row.ratio is not None
        assert row.ratio > 0
        assert row.target == ("<= 1.05x" if judged else None)
        assert ("db calls/op" in row.note) == judged


def test_every_field_of_the_package_is_measured() -> None:
    names = {name for name, _ in writes.expected_rows()}
    for field in ("SequenceField", "RandomUniqueField", "LocalityUUIDField", "UUID4Field"):
        assert any(field in name and name.startswith("save() ") for name in names), field
        assert any(field in name and name.startswith("insert(1,000) ") for name in names), field
    assert any("UUID7Field" in name for name in names)


def _bson_types(son: Any) -> dict[str, tuple[int, int | None]]:
    """Each key's BSON element type (and binary subtype), as the driver would encode it."""
    found = {}
    for key, value in son.items():
        element = bson.encode({"v": value})
        found[key] = (element[4], getattr(value, "subtype", None))
    return found


@pytest.fixture
def calls() -> Iterator[list[tuple[str, str]]]:
    """A mongomock database on the benchmark's alias; yields the (collection, method) log."""
    log: list[tuple[str, str]] = []

    def hook(collection: str, method: str, call: Callable[[], Any]) -> Any:
        log.append((collection, method))
        return call()

    with latency_database(hook):
        yield log


@pytest.mark.parametrize("family", FAMILIES, ids=lambda family: family.baseline.label)
def test_baseline_has_the_candidates_stored_types_and_indexes(
    family: Any, calls: list[tuple[str, str]]
) -> None:
    def saved(side: Any) -> tuple[dict[str, Any], dict[str, Any]]:
        (document,) = side.make(1)
        document.save(force_insert=side.force_insert)
        collection = side.model._get_collection()
        return _bson_types(document.to_mongo()), collection.index_information()

    base_types, base_indexes = saved(family.baseline)
    for side in family.candidates:
        types, indexes = saved(side)
        assert types == base_types, side.label
        assert indexes == base_indexes, side.label


@pytest.mark.parametrize("family", FAMILIES, ids=lambda family: family.baseline.label)
def test_baseline_inserts_and_never_replaces(family: Any, calls: list[tuple[str, str]]) -> None:
    side = family.baseline
    (document,) = side.make(1)
    document.save(force_insert=side.force_insert)
    value = {name: document[name] for name in ("id", "code") if name in side.model._fields}
    again = side.model(**value, name="other")
    with pytest.raises(NotUniqueError):
        again.save(force_insert=side.force_insert)
    assert side.model.objects.count() == 1


@pytest.mark.parametrize(("family", "side"), SIDES, ids=[side.label for _, side in SIDES])
def test_a_save_is_one_insert_and_a_bulk_insert_one_insert_many(
    family: Any, side: Any, calls: list[tuple[str, str]]
) -> None:
    collection = side.model._get_collection().name
    (first,) = side.make(1)
    first.save(force_insert=side.force_insert)  # warm-up: indexes checked, a block leased
    calls.clear()

    for document in side.make(10):
        document.save(force_insert=side.force_insert)
    assert calls == [(collection, "insert_one")] * 10

    calls.clear()
    side.model.objects.insert(side.make(writes.BULK_SIZE), load_bulk=False)
    own = [(collection, "insert_many")]
    # A sequence leases the block the batch needs (one counter call), nothing else does.
    if side.model is writes.SequenceDocument:
        assert calls == [(DEFAULT_COLLECTION, "find_one_and_update"), *own]
    else:
        assert calls == own
