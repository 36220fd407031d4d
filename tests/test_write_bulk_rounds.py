"""Bulk insert retries and reloads found by a review of an attempted fix (each failed on it).

A document written by an insert() call that then failed, whose stored copy is updated, or
deleted and saved again, or whose own earlier insert landed late; a document holding NaN; one
the driver cannot encode; insert(load_bulk=True) of plain keys that change form when stored.
Each test checks the raw stored documents.
"""

import contextlib
import decimal
import re
import uuid

import bson
import mongoengine as me
import mongomock.collection
import pymongo.errors
import pytest
from bson.binary import UuidRepresentation
from bson.codec_options import CodecOptions
from mongoengine.context_managers import switch_collection
from pymongo import ReadPreference

from mongoengine_ids import RandomUniqueField, SequenceField, UUID4Field
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


@contextlib.contextmanager
def stored_a_then_failed(model):
    """Connected: ``model.objects.insert([a, b])`` stored a, then the server refused b.
    Yields (db, a, b)."""
    with connected_threadsafe(hook=FirstThen(model._meta["collection"], refused())) as connect:
        db = connect()
        a, b = model(name="a"), model(name="b")
        with pytest.raises(me.errors.BulkWriteError):
            model.objects.insert([a, b])
        yield db, a, b


@contextlib.contextmanager
def changed_after_a_lost_reply_then_refused(model, hook):
    """Connected through ``hook``: ``model.objects.insert([a, b])`` lost its reply, a was
    changed (named "a2"), and the retry of the call was refused: the change would be left
    unwritten. Yields (db, a, b)."""
    with connected_threadsafe(hook=hook) as connect:
        db = connect()
        a, b = model(name="a"), model(name="b")
        with pytest.raises(pymongo.errors.AutoReconnect):
            model.objects.insert([a, b])
        a.name = "a2"
        with pytest.raises(me.errors.OperationError, match="changed since: the retry would"):
            model.objects.insert([a, b])
        yield db, a, b


# -- insert(load_bulk=True) returns the stored documents of plain keys that change form -------

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
    assert [d and d.name for d in loaded] == ["a"]


# -- a document written by a failed insert(), its stored copy updated since: refused ---------


class BrSeq(me.Document):
    meta = {"collection": "br_seq"}
    id = SequenceField(primary_key=True)
    name = me.StringField()
    views = me.IntField(default=0)


def test_retry_after_the_stored_copy_was_updated_stores_no_second_copy():
    """The retry cannot tell a's stored copy, updated since, from another document given a's
    key after a was deleted (probe BY-1: taken for a, that one was returned in a's place and
    a's next save() wrote over it): refused, nothing written. Left out of the retry, a stays
    as stored and b is inserted."""
    with connected_threadsafe(hook=FirstThen("br_seq", refused())) as connect:
        db = connect()
        a, b = BrSeq(name="a"), BrSeq(name="b")
        with pytest.raises(me.errors.BulkWriteError):
            BrSeq.objects.insert([a, b])  # a written (nInserted=1), b refused
        BrSeq.objects(pk=a.pk).update(inc__views=1)
        before = list(db.br_seq.find())
        with pytest.raises(me.errors.OperationError, match="other than the one that insert wrote"):
            BrSeq.objects.insert([a, b])  # the application's retry of the call
        assert list(db.br_seq.find()) == before
        BrSeq.objects.insert([b])
        stored = {d["name"]: d for d in db.br_seq.find()}
        assert stored == {
            "a": {"_id": a.pk, "name": "a", "views": 1},
            "b": {"_id": b.pk, "name": "b", "views": 0},
        }
        assert a.pk != b.pk


def test_retry_after_an_update_through_the_document_takes_it_as_stored():
    """Updated through its own object (by its key), a's stored copy is known to be a's: the
    retry counts it stored (the exhaustive harness's "touch" between attempts)."""
    with stored_a_then_failed(BrSeq) as (db, a, b):
        a.update(inc__views=1)
        BrSeq.objects.insert([a, b])
        stored = {d["name"]: d for d in db.br_seq.find()}
        assert stored == {
            "a": {"_id": a.pk, "name": "a", "views": 1},
            "b": {"_id": b.pk, "name": "b", "views": 0},
        }


def test_retry_after_the_document_changed_is_refused_then_save_writes_it():
    """Probe BY-1d: a, written by the call that failed, was changed before the retry, which
    counted it stored and left the change unwritten, silently. Refused, nothing written;
    save() writes the change, and the retry without a inserts b."""
    with stored_a_then_failed(BrSeq) as (db, a, b):
        a.name = "a2"
        before = list(db.br_seq.find())
        with pytest.raises(me.errors.OperationError, match="changed since: the retry would"):
            BrSeq.objects.insert([a, b])
        assert list(db.br_seq.find()) == before == [{"_id": a.pk, "name": "a", "views": 0}]
        a.save()
        BrSeq.objects.insert([b])
        stored = {d["name"]: d for d in db.br_seq.find()}
        assert stored == {
            "a2": {"_id": a.pk, "name": "a2", "views": 0},
            "b": {"_id": b.pk, "name": "b", "views": 0},
        }
        assert a.pk != b.pk


class BrRandom(me.Document):
    meta = {"collection": "br_random"}
    id = RandomUniqueField(primary_key=True, digits=1)
    name = me.StringField()


def test_retry_after_the_key_went_to_another_document_is_refused():
    """Probe BY-1: a, written by the call that failed, was deleted, and a save() drew its key
    again; the retry took that document for a and wrote a nowhere."""
    with stored_a_then_failed(BrRandom) as (db, a, b):
        db.br_random.delete_one({"_id": a.pk})
        db.br_random.insert_one({"_id": a.pk, "name": "another"})
        with pytest.raises(me.errors.OperationError, match="other than the one that insert wrote"):
            BrRandom.objects.insert([a, b], load_bulk=True)
        assert list(db.br_random.find()) == [{"_id": a.pk, "name": "another"}]


def test_retry_after_the_key_changed_is_refused():
    """Probe BY-1c: a was stored under its first key; given another (held by "other"), it was
    taken as stored, and its next save() wrote over "other"."""
    with connected_threadsafe(hook=FirstThen("br_seq", refused())) as connect:
        db = connect()
        other = BrSeq(name="other").save()
        a, b = BrSeq(name="a"), BrSeq(name="b")
        with pytest.raises(me.errors.BulkWriteError):
            BrSeq.objects.insert([a, b])
        first_key = a.pk
        a.pk = other.pk
        before = list(db.br_seq.find())
        with pytest.raises(me.errors.OperationError, match="its key changed since"):
            BrSeq.objects.insert([a, b])
        assert list(db.br_seq.find()) == before
        a.pk = first_key
        BrSeq.objects.insert([a, b])
        stored = sorted((d["_id"], d["name"]) for d in db.br_seq.find())
        assert stored == sorted([(other.pk, "other"), (first_key, "a"), (b.pk, "b")])


def test_retry_into_another_database_inserts_there_never_takes_another_document():
    """Probe BY-1b: the retry went to another database, where another document held a's key:
    it was taken for a. There a is new: its key is the application's (assigned), refused as
    held, and nothing of the other document is changed."""
    with connected_threadsafe(hook=FirstThen("br_seq", refused())) as connect:
        connect()
        other_db = connect("br_other")
        a, b = BrSeq(name="a"), BrSeq(name="b")
        with pytest.raises(me.errors.BulkWriteError):
            BrSeq.objects.insert([a, b])
        other_db.br_seq.insert_one({"_id": a.pk, "name": "theirs"})
        with pytest.raises(me.errors.NotUniqueError):
            BrSeq.objects.using("br_other").insert([a, b])
        assert list(other_db.br_seq.find()) == [{"_id": a.pk, "name": "theirs"}]


# -- written by a failed insert(), deleted, saved again: stored with its value ---------------


class BrCode(me.Document):
    meta = {"collection": "br_code"}
    name = me.StringField()
    code = SequenceField()


def test_delete_then_save_keeps_the_generated_value():
    with stored_a_then_failed(BrCode) as (db, a, _b):
        stored_before = list(db.br_code.find())  # [{_id, name: "a", code: 1}]
        a.delete()
        a.save()  # MongoEngine (and 47620bd) saves the document again, whole
        assert a.code == 1
        assert list(db.br_code.find()) == stored_before


# -- found by the duplicate-key check, then the call fails: the retry stores it once ---------


class LateOnce:
    """insert_many #1 is in flight (reply lost; it lands during #2, before #2 is applied)."""

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
            self.held()  # #2 meets a duplicate key: the document's own earlier insert
        return self.later(call)

    def later(self, call):
        return call()


class LateThenRefused(LateOnce):
    """insert_many #1 is in flight (reply lost; it lands during #2); #3 is refused."""

    def later(self, call):
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


# -- after an ambiguous error, a document holding NaN (never equal to itself) -----------------


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


# -- a uuid.UUID the codec refuses (ValueError): nothing sent, the reservation released -------


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
        assert doc.code is None
        assert list(db.br_codes.find()) == []


# -- a document written by a failed insert() and deleted since: sent again, and retried ------


class Script:
    """insert_many on ``collection``: call n follows plan[n] ('first': apply the first doc
    then refuse the second; 'refuse': refuse the first; 'lost': raise AutoReconnect, nothing
    applied; 'first_lost': apply the first doc, then raise AutoReconnect; anything else:
    normal)."""

    def __init__(self, collection, plan):
        self.collection, self.plan, self.n = collection, plan, 0

    def __call__(self, collection, method, call):
        if (collection, method) != (self.collection, "insert_many"):
            return call()
        step = self.plan[self.n] if self.n < len(self.plan) else None
        self.n += 1
        if step == "first":
            call.func(call.args[0][:1], *call.args[1:], **call.keywords)
            raise refused()
        if step == "refuse":
            raise refused(n_inserted=0, index=0)
        if step == "lost":
            raise pymongo.errors.AutoReconnect("reply lost, nothing applied")
        if step == "first_lost":
            call.func(call.args[0][:1], *call.args[1:], **call.keywords)
            raise pymongo.errors.AutoReconnect("reply lost, the first document applied")
        return call()


class BrqReserved(me.Document):
    meta = {"collection": "brq_reserved"}
    name = me.StringField()
    code = RandomUniqueField(digits=12, reserve_in="brq_codes")


def test_deleted_then_retried_reserve_in_value_is_not_refused_as_taken():
    with connected_threadsafe(hook=Script("brq_reserved", ["first"])) as connect:
        db = connect()
        a, b = BrqReserved(name="a"), BrqReserved(name="b")
        with pytest.raises(me.errors.BulkWriteError):
            BrqReserved.objects.insert([a, b])  # a written, b refused
        code = a.code
        a.delete()
        BrqReserved.objects.insert([a, b])  # the retry: a is sent again (docs: "sent again")
        stored = {d["name"]: d for d in db.brq_reserved.find()}
        assert sorted(stored) == ["a", "b"]
        assert stored["a"]["code"] == code


class BrqSeq(me.Document):
    meta = {"collection": "brq_seq"}
    id = SequenceField(primary_key=True)
    name = me.StringField()
    code = SequenceField()


def test_deleted_resent_then_refused_can_be_retried_again():
    with connected_threadsafe(hook=Script("brq_seq", ["first", "refuse"])) as connect:
        db = connect()
        a, b = BrqSeq(name="a"), BrqSeq(name="b")
        with pytest.raises(me.errors.BulkWriteError):
            BrqSeq.objects.insert([a, b])  # a written, b refused
        a.delete()
        with pytest.raises(me.errors.BulkWriteError):
            BrqSeq.objects.insert([a, b])  # a sent again, refused: nothing written
        assert list(db.brq_seq.find()) == []
        BrqSeq.objects.insert([a, b])  # not refused as saved documents
        assert sorted(d["name"] for d in db.brq_seq.find()) == ["a", "b"]


def test_written_to_one_collection_retried_into_another():
    with connected_threadsafe(hook=Script("brq_seq", ["first"])) as connect:
        db = connect()
        a, b = BrqSeq(name="a"), BrqSeq(name="b")
        with pytest.raises(me.errors.BulkWriteError):
            BrqSeq.objects.insert([a, b])
        with switch_collection(BrqSeq, "brq_seq_other") as Other:
            Other.objects.insert([a, b])
        assert [d["name"] for d in db.brq_seq.find()] == ["a"]
        other = list(db.brq_seq_other.find())
        assert sorted(d["name"] for d in other) == ["a", "b"]
        ids = [d["_id"] for d in other]
        assert len(set(ids)) == 2


def test_deleted_resent_reply_lost_can_be_retried():
    with connected_threadsafe(hook=Script("brq_seq", ["first", "lost"])) as connect:
        db = connect()
        a, b = BrqSeq(name="a"), BrqSeq(name="b")
        with pytest.raises(me.errors.BulkWriteError):
            BrqSeq.objects.insert([a, b])  # a written, b refused
        a.delete()
        with pytest.raises(pymongo.errors.AutoReconnect):
            BrqSeq.objects.insert([a, b])  # a sent again, reply lost (not applied)
        BrqSeq.objects.insert([a, b])  # not refused as saved documents
        assert sorted(d["name"] for d in db.brq_seq.find()) == ["a", "b"]


# -- look-ups after a failed write read on the primary ----------------------------------------


class StaleSecondary(FirstThen):
    """:class:`FirstThen`, and find_one on a non-primary read preference misses what was just
    written (a lagging secondary)."""

    def __call__(self, collection, method, call):
        target = getattr(call.func, "__self__", None)
        if (
            method == "find_one"
            and collection == self.collection
            and target.read_preference != ReadPreference.PRIMARY
        ):
            return None
        return super().__call__(collection, method, call)


class BrqSecondary(me.Document):
    meta = {"collection": "brq_secondary"}
    name = me.StringField()
    code = SequenceField()


@pytest.mark.parametrize(
    "error",
    [pymongo.errors.DocumentTooLarge("injected"), pymongo.errors.AutoReconnect("lost")],
    ids=["other_error", "lost_reply"],
)
def test_a_secondary_read_preference_never_stores_a_document_twice(error):
    with connected_threadsafe(hook=StaleSecondary("brq_secondary", error)) as connect:
        db = connect()
        BrqSecondary._collection = BrqSecondary._get_collection().with_options(
            read_preference=ReadPreference.SECONDARY_PREFERRED
        )  # as a connection made with readPreference=secondaryPreferred gives it
        try:
            docs = [BrqSecondary(name="a"), BrqSecondary(name="b")]
            with pytest.raises(type(error)):
                BrqSecondary.objects.insert(docs)  # a applied, then the error
            BrqSecondary.objects.insert(docs)  # the application's retry
            stored = list(db.brq_secondary.find())
            assert sorted(d["name"] for d in stored) == ["a", "b"], stored
        finally:
            BrqSecondary._collection = None


class BrBox(me.EmbeddedDocument):
    ref = me.LazyReferenceField("BrNode")


class BrNode(me.Document):
    id = RandomUniqueField(primary_key=True, digits=1)
    name = me.StringField(unique=True)
    parent = me.ReferenceField("self")
    others = me.ListField(me.GenericReferenceField())
    box = me.EmbeddedDocumentField(BrBox)


@pytest.mark.parametrize(
    ("link", "linked", "where"),
    [
        (lambda child, parent: setattr(child, "parent", parent), lambda c: c.parent, ""),
        (lambda child, parent: setattr(child, "others", [parent]), lambda c: c.others[0], ""),
        (
            lambda child, parent: setattr(child, "box", BrBox(ref=parent)),
            lambda c: c.box.ref.fetch(),
            " (in its BrBox)",
        ),
    ],
    ids=["reference", "generic-in-list", "lazy-in-embedded"],
)
def test_a_reference_to_a_document_without_a_key_is_refused_as_mongoengine_does(
    mongoengine_db, link, linked, where
):
    """Probe: insert() made the keys of a whole batch before serialising it, so a document
    could reference one after it; that one refused (a duplicate name), its key given back, the
    stored reference pointed at a key a later document drew. MongoEngine refuses the batch (the
    referenced document has no key): so does the package, before writing anything."""
    BrNode(name="taken").save()
    child, parent = BrNode(name="child"), BrNode(name="taken")
    link(child, parent)
    refused = re.escape(
        f"the BrNode at position 0 of insert() references a BrNode that has no key yet{where}"
    )
    with pytest.raises(me.ValidationError, match=refused):
        BrNode.objects.insert([child, parent])
    assert [doc["name"] for doc in mongoengine_db.br_node.find()] == ["taken"]
    assert (child.pk, parent.pk) == (None, None)
    parent.name = "parent"
    BrNode.objects.insert([parent])
    BrNode.objects.insert([child])  # the parent has its key: referenced
    assert linked(BrNode.objects.get(name="child")).name == "parent"


def test_retry_after_a_reconnect_to_the_same_server_takes_the_written_as_stored():
    """Review CA-5: the retry of the call on a new client (a reconnect after the network error,
    to the same server) sent a and b again, refused as duplicates of their own stored copies."""
    from mongomock.store import ServerStore

    store = ServerStore()

    class OneServer(mongomock.MongoClient):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, _store=store, **kwargs)

    options = {"mongo_client_class": OneServer, "uuidRepresentation": "standard"}
    me.connect("br_reconnect", **options)
    try:
        a, b, c = BrSeq(name="a"), BrSeq(name="b"), BrSeq(name="c")
        real = mongomock.collection.Collection.insert_many
        calls = []

        def first_two(self, documents, *args, **kwargs):
            calls.append(len(documents))
            if len(calls) == 1:
                real(self, documents[:2], *args, **kwargs)
                raise refused(n_inserted=2, index=2)
            return real(self, documents, *args, **kwargs)

        mongomock.collection.Collection.insert_many = first_two
        try:
            with pytest.raises(me.errors.BulkWriteError):
                BrSeq.objects.insert([a, b, c])
            me.disconnect()
            BrSeq._collection = None
            me.connect("br_reconnect", **options)
            BrSeq.objects.insert([a, b, c])
        finally:
            mongomock.collection.Collection.insert_many = real
        stored = sorted((d["_id"], d["name"]) for d in OneServer().br_reconnect.br_seq.find())
        assert stored == [(a.pk, "a"), (b.pk, "b"), (c.pk, "c")]
        assert calls == [3, 1]
    finally:
        me.disconnect()
        BrSeq._collection = None


# -- save(force_insert=True), delete() and reload() of a document a failed insert() stored ------


class BrUuid(me.Document):
    meta = {"collection": "br_uuid"}
    id = UUID4Field(primary_key=True)
    name = me.StringField()
    views = me.IntField(default=0)


@pytest.mark.parametrize("model", [BrSeq, BrUuid], ids=["sequence", "uuid4"])
def test_save_force_insert_of_a_document_a_failed_insert_stored_says_what_to_do(model):
    """Decided in session 38: the document is stored, so save(force_insert=True) refuses it
    before writing anything (MongoEngine's insert was refused as a duplicate of itself, with
    a message that did not say why). A first version wrote over the stored copy after looking
    it up: the review of session 38 found it writing over another document given the key
    between the look-up and the write, or after the look-up's answer went stale. save()
    writes the change; the documents that call did not store are inserted."""
    name = model._meta["collection"]
    with stored_a_then_failed(model) as (db, a, b):
        stored_a = db[name].find_one()
        a.name = "a2"
        with pytest.raises(
            me.errors.NotUniqueError,
            match=r"is stored: a write of it whose call failed stored it; .* save\(\) it",
        ):
            a.save(force_insert=True)
        assert list(db[name].find()) == [stored_a]
        a.save()
        b.save(force_insert=True)
        stored = {d["name"]: d for d in db[name].find()}
        assert stored == {
            "a2": {**stored_a, "name": "a2"},
            "b": {"_id": stored["b"]["_id"], "name": "b", "views": 0},
        }
        assert model.objects.get(name="b").pk == b.pk != a.pk


@pytest.mark.parametrize("how", ["key_cleared", "other_collection"])
def test_save_force_insert_of_a_new_document_is_not_refused_as_the_stored_copy(how):
    """A generated key set to None makes the document a new one: save(force_insert=True)
    inserts it under a new key, beside the copy the failed call stored; a save into another
    collection (switch_collection) inserts it there. Neither is refused as that copy."""
    with stored_a_then_failed(BrUuid) as (db, a, _b):
        first = db.br_uuid.find_one()
        a.name = "a2"
        if how == "key_cleared":
            a.id = None
            a.save(force_insert=True)
            assert a.pk is not None
            assert a.pk != BrUuid._fields["id"].to_python(first["_id"])
            expected = [first, {"_id": bson.Binary.from_uuid(a.pk), "name": "a2", "views": 0}]
            assert list(db.br_uuid.find()) == expected
        else:
            with switch_collection(BrUuid, "br_uuid_other"):
                a.save(force_insert=True)
            assert list(db.br_uuid.find()) == [first]
            assert list(db.br_uuid_other.find()) == [{**first, "name": "a2"}]


def test_retry_after_the_document_was_deleted_never_takes_another_for_it():
    """Review of session 38: after a.delete(), another document given a's key was taken for a
    by the retry of the call (the delete, addressing a by its key, dropped the comparison with
    what the call wrote): a's object then stood for it, and its next save() wrote over it.
    Refused, nothing written (with nothing under the key, a is sent again: the tests above)."""
    with stored_a_then_failed(BrRandom) as (db, a, b):
        a.delete()
        db.br_random.insert_one({"_id": a.pk, "name": "another"})
        with pytest.raises(me.errors.OperationError, match="other than the one that insert wrote"):
            BrRandom.objects.insert([a, b])
        assert list(db.br_random.find()) == [{"_id": a.pk, "name": "another"}]


def test_retry_after_a_reload_still_compares_the_stored_copy():
    """Review of session 38: a reload() through the document dropped the comparison with what
    the call wrote, as an update through it does; it writes nothing, so it keeps it: another
    document given a's key since is refused, not taken for a."""
    with stored_a_then_failed(BrRandom) as (db, a, b):
        a.reload()
        db.br_random.delete_one({"_id": a.pk})
        db.br_random.insert_one({"_id": a.pk, "name": "another"})
        with pytest.raises(me.errors.OperationError, match="other than the one that insert wrote"):
            BrRandom.objects.insert([a, b])
        assert list(db.br_random.find()) == [{"_id": a.pk, "name": "another"}]


class LostInsertReply:
    """The first insert_many on ``collection`` is applied, then its reply is lost."""

    def __init__(self, collection):
        self.collection, self.armed = collection, True

    def __call__(self, collection, method, call):
        result = call()
        if self.armed and (collection, method) == (self.collection, "insert_many"):
            self.armed = False
            raise pymongo.errors.AutoReconnect("reply lost")
        return result


@pytest.mark.parametrize("how", ["reload", "delete"])
def test_a_landed_insert_found_by_a_reload_or_delete_is_compared_by_the_retry(how):
    """Review of session 38: a document whose insert() lost its reply, then found landed by its
    reload() or delete() (which look its key up), was recorded stored with no copy to compare:
    another document given its key since was taken for it by the retry of the call. Recorded
    as found; an update through the document drops the comparison (the test above)."""
    with connected_threadsafe(hook=LostInsertReply("br_random")) as connect:
        db = connect()
        a, b = BrRandom(name="a"), BrRandom(name="b")
        with pytest.raises(pymongo.errors.AutoReconnect):
            BrRandom.objects.insert([a, b])
        getattr(a, how)()
        db.br_random.delete_one({"_id": a.pk})
        db.br_random.insert_one({"_id": a.pk, "name": "another"})
        before = sorted(db.br_random.find(), key=lambda d: d["name"])
        with pytest.raises(me.errors.OperationError, match="other than the one that insert wrote"):
            BrRandom.objects.insert([a, b])
        assert sorted(db.br_random.find(), key=lambda d: d["name"]) == before
        assert [d["name"] for d in before] == ["another", "b"]


def _another_holds_the_key(db, a):
    """Another process deleted a and gave its key to a document of its own."""
    db.br_random.delete_one({"_id": a.pk})
    db.br_random.insert_one({"_id": a.pk, "name": "another"})


@pytest.mark.parametrize(
    "how",
    ["modify_matching_nothing", "update_refused_before_sending", "full_result_matching_nothing"],
)
def test_an_update_through_the_document_that_wrote_nothing_keeps_the_comparison(how):
    """Re-review of session 38: an update through the document that wrote nothing dropped the
    comparison with what the failed call wrote, as one that wrote does: another document given
    the key since was taken for the document by the retry."""
    with stored_a_then_failed(BrRandom) as (db, a, b):
        if how == "modify_matching_nothing":
            assert a.modify(query={"name": "nobody"}, set__name="q") is False
        elif how == "update_refused_before_sending":
            with pytest.raises(me.errors.InvalidQueryError):
                a.update(set__nosuch=1)
        else:  # pymongo's result, always truthy (third review of session 38)
            db.br_random.delete_one({"_id": a.pk})
            assert a.update(full_result=True, set__name="q").matched_count == 0
        _another_holds_the_key(db, a)
        with pytest.raises(me.errors.OperationError, match="other than the one that insert wrote"):
            BrRandom.objects.insert([a, b])
        assert list(db.br_random.find()) == [{"_id": a.pk, "name": "another"}]


def test_a_document_the_retry_found_landed_is_compared_by_the_next_retry():
    """Re-review of session 38: the insert of a landed with its reply lost; the retry found it
    by its look-up and failed at b. a was recorded with nothing to compare, and the next retry
    took another document given a's key for a. Recorded as found."""
    with connected_threadsafe(hook=Script("br_random", ["first_lost", "refuse"])) as connect:
        db = connect()
        a, b = BrRandom(name="a"), BrRandom(name="b")
        with pytest.raises(pymongo.errors.AutoReconnect):
            BrRandom.objects.insert([a, b])
        with pytest.raises(me.errors.BulkWriteError):
            BrRandom.objects.insert([a, b])  # a found stored, b refused
        assert list(db.br_random.find()) == [{"_id": a.pk, "name": "a"}]
        _another_holds_the_key(db, a)
        with pytest.raises(me.errors.OperationError, match="other than the one that insert wrote"):
            BrRandom.objects.insert([a, b])
        assert list(db.br_random.find()) == [{"_id": a.pk, "name": "another"}]


def test_save_force_insert_after_the_document_was_deleted_inserts_it_again():
    """Re-review of session 38: refused as stored, though nothing was."""
    with stored_a_then_failed(BrUuid) as (db, a, _b):
        a.delete()
        a.name = "a2"
        a.save(force_insert=True)
        assert list(db.br_uuid.find()) == [
            {"_id": bson.Binary.from_uuid(a.pk), "name": "a2", "views": 0}
        ]


def test_retry_after_an_update_through_the_document_and_a_change_of_it_is_refused():
    """Re-review of session 38: after a.update(), a change of the object was left unwritten by
    the retry, silently (the comparison the update dropped was the one that saw it)."""
    with stored_a_then_failed(BrSeq) as (db, a, b):
        a.update(inc__views=1)
        a.name = "a2"
        with pytest.raises(me.errors.OperationError, match="changed since: the retry would"):
            BrSeq.objects.insert([a, b])
        assert list(db.br_seq.find()) == [{"_id": a.pk, "name": "a", "views": 1}]


class BrOwnUpdate(me.Document):
    meta = {"collection": "br_own_update"}
    id = SequenceField(primary_key=True)
    name = me.StringField()
    views = me.IntField(default=0)

    def update(self, **kwargs):  # does not pass MongoEngine's count on (None)
        super().update(**kwargs)


@pytest.mark.parametrize("model", [BrSeq, BrOwnUpdate], ids=["mongoengine_update", "own_update"])
def test_retry_after_an_update_then_a_reload_takes_the_document_as_stored(model):
    """Third review of session 38: the reload after an update (the usual way) was taken for a
    change the retry would leave unwritten; a model's own update() returning None was taken
    for one that wrote nothing, and the updated copy for another document."""
    name = model._meta["collection"]
    with stored_a_then_failed(model) as (db, a, b):
        a.update(inc__views=1)
        a.reload()
        assert [(d.name, d.views) for d in model.objects.insert([a, b])] == [("a", 1), ("b", 0)]
        stored = {d["name"]: d for d in db[name].find()}
        assert stored == {
            "a": {"_id": a.pk, "name": "a", "views": 1},
            "b": {"_id": b.pk, "name": "b", "views": 0},
        }


def test_save_force_insert_while_another_document_holds_the_key_says_so():
    """Third review of session 38: the message said the document was stored and advised
    save(), which would have written over the other document."""
    with stored_a_then_failed(BrRandom) as (db, a, _b):
        _another_holds_the_key(db, a)
        a.name = "a2"
        with pytest.raises(me.errors.NotUniqueError, match="a document other than the one") as e:
            a.save(force_insert=True)
        assert "save() it without" not in str(e.value)
        assert list(db.br_random.find()) == [{"_id": a.pk, "name": "another"}]


def test_a_change_after_a_lost_reply_is_refused_by_the_retry_that_finds_it_landed():
    """Third review of session 38: the insert of a landed with its reply lost; the application
    changed a, then retried the call, which found a stored and counted it written: the change
    was left unwritten, silently (a's stored copy kept the old name). Refused, as for a document
    stored by a call that failed at a later one (probe BY-1d); save() writes it."""
    lost = Script("br_random", ["first_lost"])
    with changed_after_a_lost_reply_then_refused(BrRandom, lost) as (db, a, b):
        assert list(db.br_random.find()) == [{"_id": a.pk, "name": "a"}]
        a.save()
        BrRandom.objects.insert([b])
        stored = {d["name"]: d["_id"] for d in db.br_random.find()}
        assert stored == {"a2": a.pk, "b": b.pk}


def test_a_change_before_a_retry_that_meets_its_late_insert_is_refused_then_saved():
    """A review of session 38: the retry looked for a and found nothing; its own insert, in
    flight, landed before the retry's, which met it as a duplicate and counted a stored, as
    first sent: the change made before the retry was left unwritten, silently. Refused as when
    the look-up finds it (nothing written); save() writes the change."""
    with changed_after_a_lost_reply_then_refused(BrLate, LateOnce("br_late")) as (db, a, b):
        assert sorted((d["_id"], d["name"]) for d in db.br_late.find()) == [
            (a.pk, "a"),
            (b.pk, "b"),
        ]
        a.save()
        BrLate.objects.insert([b])
        assert sorted((d["_id"], d["name"]) for d in db.br_late.find()) == [
            (a.pk, "a2"),
            (b.pk, "b"),
        ]


def test_an_unchanged_document_whose_late_insert_the_retry_meets_is_stored_once():
    """The same without the change: the retry counts a (and b) stored, and writes neither
    again."""
    with connected_threadsafe(hook=LateOnce("br_late")) as connect:
        db = connect()
        a, b = BrLate(name="a"), BrLate(name="b")
        with pytest.raises(pymongo.errors.AutoReconnect):
            BrLate.objects.insert([a, b])
        assert BrLate.objects.insert([a, b], load_bulk=False) == [a.pk, b.pk]
        assert sorted((d["_id"], d["name"]) for d in db.br_late.find()) == [
            (a.pk, "a"),
            (b.pk, "b"),
        ]
        a.name = "a2"
        a.save()
        assert db.br_late.find_one({"_id": a.pk}) == {"_id": a.pk, "name": "a2"}


# -- a failed write concern reported with a write error: the refused document cannot land ----


class ConcernFailsOnce:
    """insert_many on ``collection``, once: applied as far as it goes, then the write concern
    fails (pymongo's BulkWriteError holding writeConcernErrors, and the write errors met)."""

    def __init__(self, collection):
        self.collection, self.armed = collection, True

    def __call__(self, collection, method, call):
        if not self.armed or (collection, method) != (self.collection, "insert_many"):
            return call()
        self.armed = False
        try:
            call()
            details = {"writeErrors": [], "nInserted": len(call.args[0])}
        except pymongo.errors.BulkWriteError as error:
            details = dict(error.details)
        details["writeConcernErrors"] = [{"code": 64, "errmsg": "injected: waiting"}]
        raise pymongo.errors.BulkWriteError(details)


class BrTwin(me.Document):
    meta = {"collection": "br_twin"}
    id = SequenceField(primary_key=True)
    name = me.StringField()


@pytest.mark.parametrize("then", ["retry", "save"])
def test_a_document_refused_under_a_failed_write_concern_is_not_taken_as_stored(then):
    """The review of session 39: b was refused (a duplicate key: another writer's document
    holds its number, with the same data) in the insert whose write concern failed; the
    retry, or b's save(), took that document for b's own insert landed, and b's next save
    wrote over it. Refused, b is no version that may land: it gets a fresh number."""
    with connected_threadsafe(hook=ConcernFailsOnce("br_twin")) as connect:
        db = connect()
        db.br_twin.insert_one({"_id": 2, "name": "b"})  # another writer's, the same data
        a, b = BrTwin(name="a"), BrTwin(name="b")
        with pytest.raises(me.errors.BulkWriteError, match="writeConcernErrors"):
            BrTwin.objects.insert([a, b])
        if then == "retry":
            BrTwin.objects.insert([a, b])
        b.name = "b-mine"
        b.save()
        assert b.pk == 3
        assert sorted(db.br_twin.find(), key=lambda d: d["_id"]) == [
            {"_id": 1, "name": "a"},
            {"_id": 2, "name": "b"},
            {"_id": 3, "name": "b-mine"},
        ]
