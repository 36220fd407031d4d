"""Writes whose outcome is unknown (a lost reply, a write-concern timeout): never a duplicate.

Faults are injected into mongomock calls (``connected_threadsafe(hook=...)``); a real server
cannot be made to lose a reply on demand.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import mongoengine as me
import pymongo.errors
import pytest
from _write_support import raw_collection
from bson.binary import Binary

from mongoengine_ids import (
    LocalityUUIDField,
    RandomUniqueField,
    SequenceField,
)
from mongoengine_ids.testing import connected_threadsafe
from mongoengine_ids.write.seam import state


class Faults:
    """Raise ``error`` on the next ``method`` call of ``collection``, after or before it ran."""

    def __init__(self) -> None:
        self.plan: tuple[str, str, BaseException, bool] | None = None

    def arm(self, collection: str, method: str, error: BaseException, *, applied: bool) -> None:
        self.plan = (collection, method, error, applied)

    def __call__(self, collection: str, method: str, call: Callable[[], Any]) -> Any:
        plan = self.plan
        if plan is None or (collection, method) != plan[:2]:
            return call()
        self.plan = None
        if plan[3]:
            call()  # the server applied it; the reply is lost
        raise plan[2]


@pytest.fixture
def faults() -> Iterator[tuple[Faults, Any]]:
    injected = Faults()
    with connected_threadsafe(hook=injected) as connect:
        yield injected, connect()


ERRORS = [
    pymongo.errors.AutoReconnect("connection reset by peer"),
    pymongo.errors.WTimeoutError("waiting for replication timed out", 64, {}),
]


class Place(me.Document):
    id = LocalityUUIDField(primary_key=True)
    name = me.StringField()


def places(db: Any) -> list[dict[str, Any]]:
    """The stored places, Binary as stored (a server decodes subtype 4 to uuid.UUID)."""
    return list(raw_collection(db["place"]).find())


@pytest.mark.parametrize("error", ERRORS, ids=lambda e: type(e).__name__)
def test_applied_but_unconfirmed_save_never_writes_twice(
    faults: tuple[Faults, Any], error: BaseException
) -> None:
    injected, db = faults
    injected.arm("place", "insert_one", error, applied=True)
    place = Place(name="a")
    with pytest.raises((pymongo.errors.PyMongoError, me.OperationError)):
        place.save()
    first_id = place.id
    assert first_id is not None  # kept: the write may have happened
    place.save()  # it did: the retry finds it stored and writes nothing new
    assert place.id == first_id
    assert places(db) == [{"_id": Binary(first_id.bytes, 4), "name": "a"}]


@pytest.mark.parametrize("error", ERRORS, ids=lambda e: type(e).__name__)
def test_unapplied_and_unconfirmed_save_is_written_once_on_retry(
    faults: tuple[Faults, Any], error: BaseException
) -> None:
    injected, db = faults
    injected.arm("place", "insert_one", error, applied=False)
    place = Place(name="a")
    with pytest.raises((pymongo.errors.PyMongoError, me.OperationError)):
        place.save()
    first_id = place.id
    place.save()  # the same id, inserted now
    assert place.id == first_id
    assert places(db) == [{"_id": Binary(first_id.bytes, 4), "name": "a"}]
    place.name = "b"
    place.save()  # confirmed: an ordinary update from now on
    assert places(db) == [{"_id": Binary(first_id.bytes, 4), "name": "b"}]


def test_a_certain_failure_gives_the_id_back(faults: tuple[Faults, Any]) -> None:
    injected, db = faults
    injected.arm("place", "insert_one", pymongo.errors.OperationFailure("bad", 2), applied=False)
    place = Place(name="a")
    with pytest.raises(me.OperationError):
        place.save()
    assert place.id is None
    place.save()
    assert db["place"].count_documents({}) == 1


def test_unconfirmed_bulk_insert_keeps_ids_and_never_writes_twice(
    faults: tuple[Faults, Any],
) -> None:
    injected, db = faults
    injected.arm("place", "insert_many", pymongo.errors.AutoReconnect("reset"), applied=True)
    docs = [Place(name=f"p{i}") for i in range(3)]
    with pytest.raises(pymongo.errors.AutoReconnect):
        Place.objects.insert(docs)
    ids = [doc.id for doc in docs]
    assert None not in ids
    for doc in docs:
        doc.save()  # found stored: not inserted a second time
    assert [doc.id for doc in docs] == ids
    assert sorted(d["name"] for d in db["place"].find()) == ["p0", "p1", "p2"]


def test_force_insert_false_cannot_replace_after_an_unconfirmed_save(
    faults: tuple[Faults, Any],
) -> None:
    injected, db = faults
    injected.arm("place", "insert_one", pymongo.errors.AutoReconnect("reset"), applied=True)
    place = Place(name="a")
    with pytest.raises(pymongo.errors.AutoReconnect):
        place.save()
    place.name = "b"
    place.save(False, True, True, None, None, None)  # force_insert=False, positionally
    # The earlier insert landed: the retry writes this document's current version over its
    # own stored copy (found by its _id), never a second copy.
    assert [doc["name"] for doc in db["place"].find()] == ["b"]


class NumberedPk(me.Document):
    id = SequenceField(primary_key=True)
    name = me.StringField()


class DrawnPk(me.Document):
    id = RandomUniqueField(primary_key=True, digits=6)
    name = me.StringField()


@pytest.mark.parametrize("force_insert", [True, False], ids=["force_insert", "save"])
@pytest.mark.parametrize("applied", [True, False], ids=["applied", "not-applied"])
@pytest.mark.parametrize("model", [Place, NumberedPk, DrawnPk], ids=lambda m: m.__name__)
def test_a_retry_whose_write_over_its_own_copy_fails_is_retried_again(
    faults: tuple[Faults, Any], model: type[me.Document], applied: bool, force_insert: bool
) -> None:
    """The insert landed, its reply lost; the retry found it and its write of the current
    version over that copy failed too (applied or not); the third attempt writes it (probe
    CB-2: with force_insert it inserted again, refused as a duplicate of its own copy)."""
    injected, db = faults
    collection = model._get_collection_name()
    injected.arm(collection, "insert_one", pymongo.errors.AutoReconnect("reset"), applied=True)
    document = model(name="v1")
    with pytest.raises(pymongo.errors.AutoReconnect):
        document.save(force_insert=force_insert)
    key = document.pk
    document.name = "v2"
    lost = pymongo.errors.AutoReconnect("reset again")
    injected.arm(collection, "find_one_and_replace", lost, applied=applied)
    with pytest.raises(pymongo.errors.AutoReconnect):
        document.save(force_insert=force_insert)
    stored = list(raw_collection(db[collection]).find())
    assert [raw["name"] for raw in stored] == ["v2" if applied else "v1"]
    document.save(force_insert=force_insert)
    assert document.pk == key
    assert list(raw_collection(db[collection]).find()) == [{**stored[0], "name": "v2"}]
    document.name = "v3"
    document.save()  # confirmed: an update of the stored copy
    assert list(raw_collection(db[collection]).find()) == [{**stored[0], "name": "v3"}]


class Card(me.Document):
    number = RandomUniqueField(digits=12)
    name = me.StringField()


@pytest.mark.parametrize("applied", [True, False], ids=["applied", "not-applied"])
def test_an_unconfirmed_generated_field_keeps_its_value_and_is_never_written_twice(
    faults: tuple[Faults, Any], applied: bool
) -> None:
    # Not the primary key: the ObjectId made before the first attempt and the value are kept,
    # so the retry inserts the same document (refused by the _id index if it landed).
    injected, db = faults
    injected.arm("card", "insert_one", pymongo.errors.AutoReconnect("reset"), applied=applied)
    card = Card(name="a")
    with pytest.raises(pymongo.errors.AutoReconnect):
        card.save()
    number = card.number
    assert number is not None
    assert state(card).unconfirmed
    card.save()  # stored once whether the first attempt landed or not
    assert not state(card).unconfirmed  # confirmed
    assert [(raw["number"], raw["name"]) for raw in db["card"].find()] == [(number, "a")]


class Ticket(me.Document):
    code = RandomUniqueField(digits=8, reserve_in="ticket_codes")  # no unique index on code
    name = me.StringField()


class Stamped(me.Document):
    code = LocalityUUIDField()  # not the primary key, no unique index
    name = me.StringField()


class Numbered(me.Document):
    code = SequenceField()  # not the primary key, no unique index
    name = me.StringField()


@pytest.mark.parametrize("applied", [True, False], ids=["applied", "not-applied"])
@pytest.mark.parametrize("model", [Ticket, Stamped, Numbered], ids=lambda m: m.__name__)
def test_an_unconfirmed_value_without_a_unique_index_is_looked_up_before_it_is_sent_again(
    faults: tuple[Faults, Any], applied: bool, model: type[me.Document]
) -> None:
    # No unique index on the field: the _id made before the first attempt, kept, is what
    # refuses a second copy.
    injected, db = faults
    collection = model._get_collection_name()
    injected.arm(collection, "insert_one", pymongo.errors.AutoReconnect("reset"), applied=applied)
    document = model(name="a")
    with pytest.raises(pymongo.errors.AutoReconnect):
        document.save()
    code = document.code
    assert code is not None
    document.save()  # looked up by its _id: sent again only if the first did not land
    stored = [(raw["code"], raw["name"]) for raw in raw_collection(db[collection]).find()]
    assert stored == [(model.code.to_mongo(code), "a")]
    if model is Ticket:
        assert [raw["_id"] for raw in db["ticket_codes"].find()] == [code]  # still reserved


@pytest.mark.parametrize("applied", [True, False], ids=["applied", "not-applied"])
@pytest.mark.parametrize("model", [Ticket, Stamped, Numbered], ids=lambda m: m.__name__)
def test_an_unconfirmed_bulk_insert_sent_again_is_never_written_twice(
    faults: tuple[Faults, Any], applied: bool, model: type[me.Document]
) -> None:
    injected, db = faults
    collection = model._get_collection_name()
    injected.arm(collection, "insert_many", pymongo.errors.AutoReconnect("reset"), applied=applied)
    docs = [model(name=f"p{i}") for i in range(3)]
    with pytest.raises(pymongo.errors.AutoReconnect):
        model.objects.insert(docs)
    codes = [model.code.to_mongo(doc.code) for doc in docs]
    model.objects.insert(docs)  # the documents found stored are not sent again
    assert [state(doc).unconfirmed for doc in docs] == [False] * 3  # confirmed
    stored = sorted((raw["name"], raw["code"]) for raw in raw_collection(db[collection]).find())
    assert stored == [(f"p{i}", code) for i, code in enumerate(codes)]
