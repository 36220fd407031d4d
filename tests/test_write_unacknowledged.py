"""Writes with ``w=0``: the reply says nothing of what was written, so the values the package
made or was given are kept as written (reserved, never given back), and its own conditional
writes are acknowledged all the same (found by review AH).

mongomock acknowledges every write: :func:`_as_pymongo` answers an update sent to a collection
whose write concern is ``w=0`` as pymongo does, with an unacknowledged result."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import mongoengine as me
import pymongo.errors
import pytest
from bson import json_util
from mongoengine.errors import NotUniqueError
from pymongo import WriteConcern
from pymongo.results import InsertManyResult, InsertOneResult, UpdateResult

from mongoengine_ids import RandomUniqueField, SequenceField, UUID4Field
from mongoengine_ids.testing import connected_threadsafe


def _as_pymongo(collection: str, method: str, call: Any) -> Any:
    sent_to = getattr(call.func, "__self__", None)
    concern = getattr(sent_to, "write_concern", None)
    unacknowledged = concern is not None and concern.document.get("w") == 0
    written = method.startswith(("insert", "update")) or method == "find_one_and_update"
    if not (unacknowledged and written):
        return call()
    with contextlib.suppress(pymongo.errors.PyMongoError):  # refused without a word
        call()
    if method == "insert_one":
        return InsertOneResult(call.args[0].get("_id"), acknowledged=False)
    if method == "insert_many":
        return InsertManyResult([doc.get("_id") for doc in call.args[0]], acknowledged=False)
    if method.startswith("update"):
        return UpdateResult(None, acknowledged=False)
    # find_one_and_update: pymongo fakes the reply {"ok": 1} of a command sent with w=0.
    return None


class WzTicket(me.Document):
    name = me.StringField()
    code = RandomUniqueField(digits=6, reserve_in="wz_codes")
    meta = {"collection": "wz_tickets"}


class WzPart(me.EmbeddedDocument):
    code = RandomUniqueField(digits=6, reserve_in="wz_part_codes")


class WzBox(me.Document):
    name = me.StringField()
    parts = me.ListField(me.EmbeddedDocumentField(WzPart))
    meta = {"collection": "wz_boxes"}


@pytest.fixture
def db() -> Iterator[Any]:
    with connected_threadsafe(hook=_as_pymongo) as connect:
        yield connect()
    WzTicket._collection = None


def test_a_missing_value_filled_under_w0_is_stored_and_kept(db: Any) -> None:
    """The conditional write that fills a field the stored copy lacks is the package's own: it
    is acknowledged even on a ``w=0`` connection (it raised pymongo's InvalidOperation after
    the write, and the value was given back while stored)."""
    db.wz_tickets.insert_one({"name": "old"})  # stored before the field existed
    old = WzTicket.objects.get(name="old")
    WzTicket._collection = WzTicket._get_collection().with_options(
        write_concern=WriteConcern(w=0)  # as a connection made with w=0 gives it
    )
    old.name = "new"
    old.save()
    (stored,) = db.wz_tickets.find({}, {"_id": 0})
    assert stored == {"name": "new", "code": old.code}
    assert [doc["_id"] for doc in db.wz_codes.find()] == [old.code]
    with pytest.raises(NotUniqueError, match=str(old.code)):
        WzTicket(name="copy", code=old.code).save()


class WzOncePart(me.EmbeddedDocument):
    code = RandomUniqueField(digits=6, reserve_in="wz_part_codes", max_retries=0)


class WzOnceBox(me.Document):
    name = me.StringField()
    parts = me.ListField(me.EmbeddedDocumentField(WzOncePart))
    meta = {"collection": "wz_boxes"}


def test_a_conditional_save_under_w0_keeps_its_values(db: Any) -> None:
    """MongoEngine reads the count of a conditional update it sent with ``w=0`` and fails
    (TypeError) after the update was applied: the values stay reserved. (A value never
    retried on a collision, ``max_retries=0``: the update is sent with ``w=0`` as asked.)"""
    WzOnceBox(name="b").save()
    box = WzOnceBox.objects.get(name="b")
    part = WzOncePart()
    box.parts.append(part)
    with pytest.raises(TypeError):
        box.save(write_concern={"w": 0}, save_condition={"name": "b"})
    (stored,) = db.wz_boxes.find({}, {"_id": 0})
    assert stored == {"name": "b", "parts": [{"code": part.code}]}
    assert [doc["_id"] for doc in db.wz_part_codes.find()] == [part.code]
    with pytest.raises(NotUniqueError, match=str(part.code)):
        WzOnceBox(name="dup", parts=[WzOncePart(code=part.code)]).save()


class WzImported(me.Document):
    name = me.StringField()
    number = SequenceField()
    meta = {"collection": "wz_imported"}


def test_a_value_an_unacknowledged_save_may_have_inserted_is_told(db: Any) -> None:
    """``save()`` of a document built as stored, under ``w=0``: MongoEngine's reply says nothing
    of whether its upsert inserted the document (with the number it holds), so the counter is
    told of that number all the same."""
    document = WzImported.from_json(
        '{"_id": {"$oid": "65a000000000000000000004"}, "name": "x", "number": 2}',
        json_options=json_util.RELAXED_JSON_OPTIONS,
    )
    document.name = "y"
    document.save(write_concern={"w": 0})
    assert [WzImported(name=f"n{i}").save().number for i in range(2)] == [3, 4]
    WzImported._collection = None


def test_counter_leases_are_acknowledged_on_a_w0_connection() -> None:
    """A lease needs its reply (the values it hands out): under ``w=0`` every lease was applied
    and looked missed, until the save failed having burnt hundreds (probe AT). The counter
    collection of ``write_concern=None`` is acknowledged; an unacknowledged one is refused."""
    with pytest.raises(ValueError, match=r"WriteConcern\(w=0\) is not acknowledged"):
        SequenceField(write_concern=WriteConcern(w=0))

    class WzCounted(me.Document):
        number = SequenceField(write_concern=None)
        meta = {"collection": "wz_counted"}

    with connected_threadsafe(hook=_as_pymongo, w=0) as connect:
        database = connect()
        assert [WzCounted().save().number for _ in range(3)] == [1, 2, 3]
        counter = database["mongoengine.counters"].find_one({"_id": "wz_counted.number"})
        assert counter is not None
        assert counter["next"] == 3


class WzKeyed(me.Document):
    id = SequenceField(primary_key=True, sequence_name="wz_keyed")
    owner = me.StringField()
    views = me.IntField(default=0)
    meta = {"collection": "wz_keyed"}


@pytest.mark.parametrize("how", ["save", "insert"])
def test_a_w0_insert_of_a_value_that_may_collide_is_acknowledged(db: Any, how: str) -> None:
    """Probe BV-1: the key made collided with a document stored past the counter (an import);
    under w=0 the server refused the insert without a word, and the document's next save()
    wrote over the holder of its key, its update() changed it and its delete() removed it.
    Sent acknowledged, the collision is retried with a fresh key."""
    db.wz_keyed.insert_many([{"_id": 1, "owner": "alice"}, {"_id": 2, "owner": "bob"}])
    carol = WzKeyed(owner="carol")
    if how == "save":
        carol.save(write_concern={"w": 0})
    else:
        WzKeyed.objects.insert([carol], write_concern={"w": 0}, load_bulk=False)
    assert carol.pk == 3
    carol.update(set__owner="carol (updated)")
    assert list(db.wz_keyed.find()) == [
        {"_id": 1, "owner": "alice"},
        {"_id": 2, "owner": "bob"},
        {"_id": 3, "owner": "carol (updated)", "views": 0},
    ]
    carol.delete()
    assert [doc["owner"] for doc in db.wz_keyed.find()] == ["alice", "bob"]


class WzDrawn(me.Document):
    code = RandomUniqueField(digits=1, rng=lambda n: next(WzDrawn.draws) % n)
    note = me.StringField()
    meta = {"collection": "wz_drawn"}
    draws: Iterator[int] = iter(())


def test_a_w0_update_of_a_value_that_may_collide_is_acknowledged(db: Any) -> None:
    """Probe CB-1: a loaded document's code cleared and saved with w=0 was given code 1, which
    another document holds: the server refused the update without a word, the note changed
    with it was lost, and the document kept code 1 as its own. Sent acknowledged, the
    collision is retried with a fresh code."""
    db.wz_drawn.insert_many([{"code": 1, "note": "a"}, {"code": 2, "note": "b"}])
    WzDrawn.draws = iter([0, 8])  # code 1 (taken), then 9
    b = WzDrawn.objects.get(note="b")
    b.code, b.note = None, "b, recoded"
    b.save(write_concern={"w": 0})
    assert b.code == 9
    assert list(db.wz_drawn.find({}, {"_id": 0})) == [
        {"code": 1, "note": "a"},
        {"code": 9, "note": "b, recoded"},
    ]


class WzVote(me.Document):
    id = RandomUniqueField(primary_key=True, digits=1, rng=lambda n: next(WzVote.draws) % n)
    voter = me.StringField()
    choice = me.StringField()
    meta = {"collection": "wz_votes"}
    draws: Iterator[int] = iter(())


@pytest.mark.parametrize("how", ["update_one", "modify"])
def test_a_w0_upsert_of_a_value_that_may_collide_is_acknowledged(db: Any, how: str) -> None:
    """Probe CB-1: an upsert with w=0 (the option, or the collection's for modify()) given key
    1, which another document holds, inserted nothing, unseen. Sent acknowledged, the
    collision is retried with a fresh key."""
    db.wz_votes.insert_one({"_id": 1, "voter": "alice", "choice": "x"})
    WzVote.draws = iter([0, 8])  # key 1 (taken), then 9
    if how == "update_one":
        WzVote.objects(voter="bob").update_one(upsert=True, set__choice="y", write_concern={"w": 0})
    else:
        WzVote._collection = WzVote._get_collection().with_options(write_concern=WriteConcern(w=0))
        try:
            WzVote.objects(voter="bob").modify(upsert=True, set__choice="y")
        finally:
            WzVote._collection = None
    assert list(db.wz_votes.find()) == [
        {"_id": 1, "voter": "alice", "choice": "x"},
        {"_id": 9, "voter": "bob", "choice": "y"},
    ]


def test_a_w0_insert_changed_since_is_saved_as_itself(db: Any) -> None:
    """Review CA-1: taken for one whose reply was lost, a document inserted with w=0 and
    changed since by another write was stored a second time by its next save()."""
    dave = WzKeyed(owner="dave")
    dave.save(write_concern={"w": 0})
    WzKeyed.objects(pk=dave.pk).update_one(inc__views=1)
    dave.owner = "dave (edited)"
    dave.save()
    assert list(db.wz_keyed.find()) == [{"_id": 1, "owner": "dave (edited)", "views": 1}]


class WzUUID(me.Document):
    id = UUID4Field(primary_key=True)
    meta = {"collection": "wz_uuid"}


def test_a_w0_insert_whose_values_cannot_collide_stays_unacknowledged(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    concerns: list[Any] = []

    def seen(collection: str, method: str, call: Any) -> Any:
        if method in ("insert_one", "insert_many") and collection.startswith("wz_"):
            concerns.append(call.func.__self__.write_concern.document.get("w"))
        return _as_pymongo(collection, method, call)

    with connected_threadsafe(hook=seen) as connect:
        db = connect()
        WzUUID().save(write_concern={"w": 0})
        WzKeyed(owner="erin").save(write_concern={"w": 0})
        WzUUID.objects.insert([WzUUID()], write_concern={"w": 0})
        assert db.wz_uuid.count_documents({}) == 2
    WzUUID._collection = WzKeyed._collection = None
    assert concerns == [0, 1, 0]
