"""Several processes saving into one collection at once, each with two threads, by ``save()`` and
bulk ``insert()``: every value stored once, exactly the values the writers were handed.

Only a real server proves this (``MONGOENGINE_IDS_TEST_URI``): mongomock lives in one process.
There each writer is a spawned process with its own connection, as the application's workers
are. On mongomock the same writers run one after the other in this process, on one atomic
database (``connected_threadsafe``): the check of the stored documents is the same.
"""

from __future__ import annotations

import multiprocessing
import os
from collections import Counter
from typing import Any

import mongoengine as me
import pytest
from _support import TEST_URI, real_server, run_threads
from _write_support import raw_collection

from mongoengine_ids import LocalityUUIDField, RandomUniqueField, SequenceField
from mongoengine_ids.sequence import DEFAULT_COLLECTION
from mongoengine_ids.testing import Connect

WRITERS = 4
#: Documents per writer: half saved one by one, half inserted in batches, by two threads.
PER_WRITER = 120


class PrTicket(me.Document):
    # 900 values (100..999), 480 taken: writers collide often, across processes on a server.
    code = RandomUniqueField(digits=3, max_retries=500, warn_collision_rate=1.0)
    writer = me.IntField()
    meta = {"collection": "pr_tickets"}


class PrBadge(me.Document):
    # The same, reserved in a proxy collection (the sharded-collection way) instead.
    code = RandomUniqueField(
        digits=3, reserve_in="pr_badge_codes", max_retries=500, warn_collision_rate=1.0
    )
    writer = me.IntField()
    meta = {"collection": "pr_badges"}


class PrAccount(me.Document):
    id = SequenceField(primary_key=True, batch_size=20, sequence_name="pr_accounts")
    writer = me.IntField()
    meta = {"collection": "pr_accounts"}


class PrPlace(me.Document):
    id = LocalityUUIDField(primary_key=True)
    writer = me.IntField()
    meta = {"collection": "pr_places"}


MODELS: dict[str, tuple[type[me.Document], str]] = {
    "random": (PrTicket, "code"),
    "random-reserve-in": (PrBadge, "code"),
    "sequence-pk": (PrAccount, "id"),
    "locality-pk": (PrPlace, "id"),
}


def _write(kind: str, writer: int) -> list[Any]:
    """Save ``PER_WRITER`` documents of ``kind`` with two threads (each half by ``save()``,
    half by ``insert()`` in batches of 10); return the values they were given."""
    model, field = MODELS[kind]

    def work(_: int) -> list[Any]:
        made = [getattr(model(writer=writer).save(), field) for _ in range(PER_WRITER // 4)]
        for _ in range(PER_WRITER // 40):
            batch = [model(writer=writer) for _ in range(10)]
            model.objects.insert(batch, load_bulk=False)
            made += [getattr(document, field) for document in batch]
        return made

    return [value for half in run_threads(2, work) for value in half]


def _process(uri: str, database: str, kind: str, writer: int) -> list[Any]:
    """A spawned writer: its own node (so that Locality UUIDs of two writers whose pids meet
    mod 65536 still differ) and its own connection to the test's database."""
    from mongoengine_ids.testing import _without_database

    os.environ["MONGOENGINE_IDS_MAC"] = f"02:00:00:00:00:{writer + 1:02x}"
    me.connect(database, host=_without_database(uri), uuidRepresentation="standard")
    try:
        return _write(kind, writer)
    finally:
        me.disconnect()


def _check(kind: str, handed_out: list[Any], db: Any) -> None:
    model, field = MODELS[kind]
    stored = list(raw_collection(model).find())
    values = [doc["_id" if field == "id" else field] for doc in stored]
    assert len(stored) == WRITERS * PER_WRITER
    assert [value for value, times in Counter(values).items() if times > 1] == []
    assert Counter(doc["writer"] for doc in stored) == dict.fromkeys(range(WRITERS), PER_WRITER)
    # Every value a writer was handed is the one stored for it: none taken from another.
    as_stored = [model._fields[field].to_mongo(value) for value in handed_out]
    assert sorted(map(str, as_stored)) == sorted(map(str, values))
    if kind == "random":
        assert all(100 <= value <= 999 for value in values)
    if kind == "random-reserve-in":
        reserved = [doc["_id"] for doc in db["pr_badge_codes"].find()]
        assert sorted(reserved) == sorted(values)  # no reservation leaked, none missing
    if kind == "sequence-pk":
        (counter,) = db[DEFAULT_COLLECTION].find({"_id": {"$regex": "^pr_accounts"}})
        assert max(values) <= counter["next"]


@pytest.mark.parametrize("kind", list(MODELS))
def test_writers_one_after_the_other_on_one_atomic_database(
    atomic_connect: Connect, kind: str
) -> None:
    db = atomic_connect()
    MODELS[kind][0].ensure_indexes()
    handed_out = [value for writer in range(WRITERS) for value in _write(kind, writer)]
    _check(kind, handed_out, db)


@real_server
@pytest.mark.parametrize("kind", list(MODELS))
def test_processes_writing_at_once_on_a_real_server(atomic_connect: Connect, kind: str) -> None:
    db = atomic_connect()
    assert TEST_URI is not None
    MODELS[kind][0].ensure_indexes()
    context = multiprocessing.get_context("spawn")
    with context.Pool(WRITERS) as pool:
        results = pool.starmap(_process, [(TEST_URI, db.name, kind, n) for n in range(WRITERS)])
    _check(kind, [value for result in results for value in result], db)
