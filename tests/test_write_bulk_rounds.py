"""Bulk insert retries and reloads found by a review of an attempted fix (each failed on it).

A document written by an insert() call that then failed, whose stored copy is updated, or
deleted and saved again, or whose own earlier insert landed late; a document holding NaN; one
the driver cannot encode; insert(load_bulk=True) of plain keys that change form when stored.
Each test checks the raw stored documents.
"""

import decimal
import uuid

import bson
import mongoengine as me
import mongomock.collection
import pymongo.errors
import pytest
from bson.binary import UuidRepresentation
from bson.codec_options import CodecOptions

from mongoengine_ids import RandomUniqueField, SequenceField
from mongoengine_ids.testing import connected_threadsafe


class FirstThen:
    """insert_many on ``collection``: only the first document is applied, then ``error``."""

    def __init__(self, collection, error):
        self.collection, self.error, self.armed = collection, error, True

    def __call__(self, collection, method, call):
        if not self.armed or (collection, method) != (self.collection, "insert_many"):
            return call()
        self.armed = False
        call.func(call.args[0][:1], *call.args[1:], **call.keywords)
        raise self.error


def refused(n_inserted=1, index=1):
    """The server refuses a document (document validation), not a duplicate key."""
    return pymongo.errors.BulkWriteError(
        {
            "nInserted": n_inserted,
            "writeConcernErrors": [],
            "writeErrors": [{"index": index, "code": 121, "errmsg": "Document failed validation"}],
        }
    )


# -- 1. insert(load_bulk=True) reloads by the keys in Python form ------------------------------

KEYS = {
    "uuid_text": (
        lambda: me.UUIDField(primary_key=True, binary=False),
        uuid.UUID("12345678-1234-5678-1234-567812345678"),
    ),
    "decimal_text": (
        lambda: me.DecimalField(primary_key=True, force_string=True),
        decimal.Decimal("1.5"),
    ),
    "datetime_given_as_text": (lambda: me.DateTimeField(primary_key=True), "2020-01-01 10:00:00"),
    "decimal": (lambda: me.DecimalField(primary_key=True), decimal.Decimal("1.5")),
}


@pytest.fixture
def encoding_find(monkeypatch):
    """mongomock's find() encodes its filter, as pymongo does before sending it."""
    own = mongomock.collection.Collection.find
    options = CodecOptions(uuid_representation=UuidRepresentation.STANDARD)

    def find(self, filter=None, *args, **kwargs):
        bson.encode(filter or {}, codec_options=options)
        return own(self, filter, *args, **kwargs)

    monkeypatch.setattr(mongomock.collection.Collection, "find", find)


@pytest.mark.parametrize("key", list(KEYS))
def test_load_bulk_returns_the_stored_documents_as_mongoengine(mongoengine_db, encoding_find, key):
    make, value = KEYS[key]

    def model(name, code):
        return type(
            name,
            (me.Document,),
            {
                "__module__": __name__,
                "meta": {"collection": name},
                "id": make(),
                "name": me.StringField(),
                "code": code,
            },
        )

    Plain, Gen = model(f"br_plain_{key}", me.IntField()), model(f"br_gen_{key}", SequenceField())
    assert [d.name for d in Plain.objects.insert([Plain(id=value, name="a")])] == ["a"]
    loaded = Gen.objects.insert([Gen(id=value, name="a")])  # raises InvalidDocument for "decimal"
    assert mongoengine_db[f"br_gen_{key}"].count_documents({}) == 1
    assert [d and d.name for d in loaded] == ["a"]  # observed: [None]


# -- 2a. a document written by a failed insert(), its stored copy updated, is stored twice -----


class BrSeq(me.Document):
    meta = {"collection": "br_seq"}
    id = SequenceField(primary_key=True)
    name = me.StringField()
    views = me.IntField(default=0)


def test_retry_after_the_stored_copy_was_updated_stores_no_second_copy():
    with connected_threadsafe(hook=FirstThen("br_seq", refused())) as connect:
        db = connect()
        a, b = BrSeq(name="a"), BrSeq(name="b")
        with pytest.raises(me.errors.BulkWriteError):
            BrSeq.objects.insert([a, b])  # a written (nInserted=1), b refused
        BrSeq.objects(pk=a.pk).update(inc__views=1)
        BrSeq.objects.insert([a, b])  # the application's retry of the call
        stored = list(db.br_seq.find())
        assert sorted(d["name"] for d in stored) == ["a", "b"], stored


# -- 2b. written by a failed insert(), deleted, saved again: stored without its value ----------


class BrCode(me.Document):
    meta = {"collection": "br_code"}
    name = me.StringField()
    code = SequenceField()


def test_delete_then_save_keeps_the_generated_value():
    with connected_threadsafe(hook=FirstThen("br_code", refused())) as connect:
        db = connect()
        a, b = BrCode(name="a"), BrCode(name="b")
        with pytest.raises(me.errors.BulkWriteError):
            BrCode.objects.insert([a, b])
        stored_before = list(db.br_code.find())  # [{_id, name: "a", code: 1}]
        a.delete()
        a.save()  # MongoEngine (and 47620bd) saves the document again, whole
        assert a.code == 1  # observed: None (given back)
        assert list(db.br_code.find()) == stored_before  # observed: stored without "code"


# -- 2c. found by the duplicate-key check, then the call fails: its record has no version ------


class LateThenRefused:
    """insert_many #1 is in flight (reply lost; it lands during #2); #3 is refused."""

    def __init__(self, collection):
        self.collection, self.n, self.held = collection, 0, None

    def __call__(self, collection, method, call):
        if (collection, method) != (self.collection, "insert_many"):
            return call()
        self.n += 1
        if self.n == 1:
            self.held = call
            raise pymongo.errors.AutoReconnect("lost, still in flight")
        if self.n == 2:
            self.held()
            return call()  # duplicate key on a: its own earlier insert
        if self.n == 3:
            raise refused(n_inserted=0, index=0)
        return call()


class BrLate(me.Document):
    meta = {"collection": "br_late"}
    id = SequenceField(primary_key=True)
    name = me.StringField()


def test_late_landed_then_failed_call_then_retry_stores_once():
    with connected_threadsafe(hook=LateThenRefused("br_late")) as connect:
        db = connect()
        a, b = BrLate(name="a"), BrLate(name="b")
        with pytest.raises(pymongo.errors.AutoReconnect):
            BrLate.objects.insert([a])
        with pytest.raises(me.errors.BulkWriteError):
            BrLate.objects.insert([a, b])
        assert [d["name"] for d in db.br_late.find()] == ["a"]
        BrLate.objects.insert([a, b])
        stored = list(db.br_late.find())
        assert sorted(d["name"] for d in stored) == ["a", "b"], stored


# -- 3a. any_stored: a document with NaN never equals itself as stored --------------------------


class BrNan(me.Document):
    meta = {"collection": "br_nan"}
    name = me.StringField()
    score = me.FloatField()
    code = SequenceField()


def test_a_nan_document_written_before_an_error_is_stored_once():
    hook = FirstThen("br_nan", pymongo.errors.DocumentTooLarge("injected: too large"))
    with connected_threadsafe(hook=hook) as connect:
        db = connect()
        docs = [BrNan(name="a", score=float("nan")), BrNan(name="b", score=1.0)]
        with pytest.raises(pymongo.errors.DocumentTooLarge):
            BrNan.objects.insert(docs)
        assert [d["name"] for d in db.br_nan.find()] == ["a"]
        BrNan.objects.insert(docs)
        stored = list(db.br_nan.find())
        assert sorted(d["name"] for d in stored) == ["a", "b"], stored


# -- 3b. any_stored: a uuid.UUID the codec refuses raises ValueError, not InvalidDocument -------


class BrReserved(me.Document):
    meta = {"collection": "br_reserved"}
    code = RandomUniqueField(digits=12, reserve_in="br_codes")
    token = me.UUIDField()


def test_a_document_the_driver_cannot_encode_releases_its_reservation():
    with connected_threadsafe() as connect:
        db = connect(uuid_representation="unspecified")
        doc = BrReserved(token=uuid.uuid4())
        with pytest.raises(ValueError, match=r"cannot encode native uuid\.UUID"):
            BrReserved.objects.insert([doc])  # nothing sent
        assert list(db.br_reserved.find()) == []
        assert doc.code is None  # observed: kept
        assert list(db.br_codes.find()) == []  # observed: the reservation is kept
