"""Upserts of decorated sequences, filters matching by $and or by regex, retries meeting values
others may hold, drop_collection overrides on base classes, counters on another server, the
counters CLI given a huge number, and a reserve_in embedded document moved after a lost reply.
Each test checks the stored documents."""

from __future__ import annotations

import uuid
from typing import Any

import bson
import mongoengine as me
import pymongo
import pytest

from mongoengine_ids import RandomUniqueField, SequenceField, UUID4Field


def _lose_first_update_one(monkeypatch: pytest.MonkeyPatch, collection: str) -> None:
    """The next update_one on ``collection`` fails before it is sent (AutoReconnect)."""
    import mongomock.collection

    real = mongomock.collection.Collection.update_one

    def lost(self: Any, *args: Any, **kwargs: Any) -> Any:
        if self.name != collection:
            return real(self, *args, **kwargs)
        monkeypatch.setattr(mongomock.collection.Collection, "update_one", real)
        raise pymongo.errors.AutoReconnect("connection lost before the write was sent")

    monkeypatch.setattr(mongomock.collection.Collection, "update_one", lost)


# -- an upsert's $and filter fixing a stored value outside the space -----------------------


@pytest.mark.parametrize("field", ["ri", "seq", "u4"])
def test_and_filter_upsert_matching_an_old_value_updates_it(
    mongoengine_db: Any, field: str
) -> None:
    """An upsert whose filter fixes, inside $and, a value outside the field's space that a stored
    document holds (stored before the space changed) updates that document, as the plain
    equality filter does: the value is refused only when the upsert would insert it."""

    class WOld(me.Document):
        ri = RandomUniqueField(digits=6)
        seq = SequenceField(sequence_name="w_old", digits=3)
        u4 = UUID4Field()
        name = me.StringField()
        meta = {"collection": "w_old"}

    old_uuid = uuid.UUID("405ac656-e830-11f1-a1b7-02fc00000001")  # version 1
    values = {"ri": 5, "seq": 5000, "u4": old_uuid}
    stored = {"ri": 5, "seq": 5000, "u4": bson.Binary(old_uuid.bytes, 4), "name": "old"}
    mongoengine_db.w_old.insert_one(dict(stored))
    WOld.objects(**{field: values[field]}).update_one(set__name="plain", upsert=True)
    assert [d["name"] for d in mongoengine_db.w_old.find()] == ["plain"]
    # the same filter, inside $and (as Q(...) & Q(...) makes it)
    WOld.objects(me.Q(**{field: values[field]}) & me.Q(**{f"{field}__ne": None})).update_one(
        set__name="and", upsert=True
    )
    assert [d["name"] for d in mongoengine_db.w_old.find()] == ["and"]


# -- values_unique and _refuse_held: unique_with -------------------------------------------


def test_upsert_retry_of_a_unique_with_sequence_is_not_refused(
    mongoengine_db: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A SequenceField unique_with another field (one counter per tenant) may hold a value another
    tenant's document holds: the application's retry of an upsert after a lost reply that never
    landed is not refused it (MongoEngine sets unique for unique_with: that is no uniqueness of
    the value alone)."""

    class WTicket(me.Document):
        tenant = me.StringField()
        number = SequenceField(scope="tenant", unique_with="tenant", sequence_name="w_ticket")
        status = me.StringField()
        meta = {"collection": "w_tickets"}

    WTicket(tenant="a", number=7, status="imported").save()
    # the call itself, without a lost reply, is accepted (another tenant holds 7):
    WTicket.objects(tenant="b", status="first").update_one(
        set__status="done", set__number=7, upsert=True
    )
    _lose_first_update_one(monkeypatch, "w_tickets")
    with pytest.raises(pymongo.errors.AutoReconnect):
        WTicket.objects(tenant="c", status="pending").update_one(
            set__status="done", set__number=7, upsert=True
        )
    assert mongoengine_db.w_tickets.count_documents({}) == 2  # nothing landed
    # the application's retry of the same call: written once
    WTicket.objects(tenant="c", status="pending").update_one(
        set__status="done", set__number=7, upsert=True
    )
    assert sorted((d["tenant"], d["number"]) for d in mongoengine_db.w_tickets.find()) == [
        ("a", 7),
        ("b", 7),
        ("c", 7),
    ]


# -- _hook_drop_collection: a drop_collection the model inherits ---------------------------


def test_an_inherited_own_drop_collection_still_resets_the_index_check(
    mongoengine_db: Any,
) -> None:
    """A base class (abstract, shared by its models) that overrides drop_collection to drop the
    collection itself: the field looks for its unique index again after it."""
    from test_random_unique import Script

    from mongoengine_ids.random_unique.field import UniqueIndexMissingError

    class WBase(me.Document):
        meta = {"abstract": True}

        @classmethod
        def drop_collection(cls) -> None:  # type: ignore[override]
            cls._get_db().drop_collection(cls._get_collection_name())
            cls._collection = None

    class WDropped(WBase):
        code = RandomUniqueField(digits=1, rng=Script(4, 4, 4), max_retries=1)
        meta = {"collection": "w_dropped", "auto_create_index": False}

    mongoengine_db.w_dropped.create_index([("code", pymongo.ASCENDING)], unique=True)
    WDropped().save()
    WDropped.drop_collection()  # its indexes go with it
    with pytest.raises(UniqueIndexMissingError):
        WDropped().save()
    assert [d["code"] for d in mongoengine_db.w_dropped.find()] == []


# -- collection_name naming "the documents' own collection" --------------------------------


def test_counters_in_a_database_of_the_same_name_elsewhere_are_not_refused(
    mongoengine_connect: Any,
) -> None:
    """Counters kept on another alias (another server) whose database and collection have the
    names of the documents' are not among the documents: not refused."""
    import mongomock
    from mongoengine.connection import disconnect

    me.connect(
        "app",
        alias="w_docs",
        host="mongodb://documents.example",
        mongo_client_class=mongomock.MongoClient,
        uuidRepresentation="standard",
    )
    me.connect(
        "app",
        alias="w_counters",
        host="mongodb://counters.example",
        mongo_client_class=mongomock.MongoClient,
        uuidRepresentation="standard",
    )
    try:

        class WOrder(me.Document):
            number = SequenceField(collection_name="orders", db_alias="w_counters")
            meta = {"collection": "orders", "db_alias": "w_docs"}

        docs, counters = me.get_db("w_docs"), me.get_db("w_counters")
        assert docs.client is not counters.client  # two servers
        WOrder().save()
        assert [d["number"] for d in docs.orders.find()] == [1]
        assert counters.orders.count_documents({}) == 1  # the counter, on the other server
    finally:
        disconnect("w_docs")
        disconnect("w_counters")


# -- prepare_query_value decorates the stored value the package itself adds ---------------


def _offset(n: int) -> int:
    return n + 1000


@pytest.mark.parametrize("how", ["update_one", "upsert_one", "modify", "and-filter"])
def test_decorated_sequence_upsert_stores_the_value_decorated_once(
    mongoengine_db: Any, how: str
) -> None:
    """An upsert of a SequenceField with a value_decorator stores the decorated value once, as
    save() does (the package's own values are set on insert in stored form, not read as values
    of yours to decorate)."""

    class WOffset(me.Document):
        code = SequenceField(value_decorator=_offset, sequence_name="w_offset")
        name = me.StringField()
        meta = {"collection": "w_offset"}

    WOffset(name="saved").save()
    if how == "update_one":
        WOffset.objects(name="up").update_one(set__name="up", upsert=True)
    elif how == "upsert_one":
        WOffset.objects(name="up").upsert_one(set__name="up")
    elif how == "modify":
        WOffset.objects(name="up").modify(set__name="up", upsert=True, new=True)
    else:  # the filter fixes the counter number 2 (stored 1002), inside $and
        WOffset.objects(me.Q(code=2) & me.Q(code__ne=None)).update_one(set__name="up", upsert=True)
    stored = {d["name"]: d["code"] for d in mongoengine_db.w_offset.find()}
    assert stored == {"saved": 1001, "up": 1002}


# -- the counters CLI: a number too long for int() ---------------------------------------


@pytest.mark.parametrize(
    ("argv", "accepted"),
    [
        (["counters", "set", "order.id", "1" * 4301], "from 0 to 9223372036854775807"),
        (["counters", "show", "order.id", "--digits", "1" * 4301], "from 1 to 18"),
    ],
    ids=["set-value", "show-digits"],
)
def test_counters_a_very_long_number_is_refused_saying_what_is_accepted(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    argv: list[str],
    accepted: str,
) -> None:
    """A number of thousands of digits on the command line is refused as any number out of range
    is, quoted shortened, saying what is accepted."""
    from mongoengine_ids.tools import cli

    monkeypatch.delenv("MONGOENGINE_IDS_URI", raising=False)
    assert cli.main(argv) == cli.EXIT_USAGE
    err = capsys.readouterr().err
    assert f"is not a number {accepted} (ASCII digits)" in err, err[:200]
    assert "parse" not in err
    assert len(err) < 1000


# -- _check_fixed: a regex is no value the filter fixes -------------------------------------


def test_upsert_filtered_by_a_regex_on_a_generated_field_is_refused(mongoengine_db: Any) -> None:
    """A regex in the filter is a match, not an equality: the document an upsert inserts does not
    get it, and the value made there may not match it, so the filter may never match that
    document: each run would insert another (review O). Refused when no document matches."""
    import re

    class WPattern(me.Document):
        rs = RandomUniqueField(length=8)
        name = me.StringField()
        meta = {"collection": "w_pattern"}

    WPattern(name="a").save()
    # "#" is in no alphabet: the stored value never matches (a letter would, one run in 32).
    with pytest.raises(me.errors.InvalidQueryError, match=r"WPattern\.rs is generated"):
        WPattern.objects(rs=re.compile("^#")).upsert_one(set__name="b")
    assert [d["name"] for d in mongoengine_db.w_pattern.find()] == ["a"]


# -- reserve_in owners: an embedded object whose write's reply was lost --------------------


def test_reserve_in_embedded_object_moved_to_another_document_after_a_lost_reply(
    mongoengine_db: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A reservation made for an embedded document in one document (whose insert landed, its
    reply lost) is not the same embedded object's in another document: refused there."""
    import mongomock.collection
    from mongoengine.errors import NotUniqueError

    class WPart(me.EmbeddedDocument):
        code = RandomUniqueField(digits=3, reserve_in="w_part_codes")

    class WKit(me.Document):
        name = me.StringField()
        parts = me.ListField(me.EmbeddedDocumentField(WPart))
        meta = {"collection": "w_kits"}

    WKit(name="warm").save()
    real = mongomock.collection.Collection.insert_one

    def landed_reply_lost(self: Any, *args: Any, **kwargs: Any) -> Any:
        result = real(self, *args, **kwargs)
        if self.name == "w_kits":
            monkeypatch.setattr(mongomock.collection.Collection, "insert_one", real)
            raise pymongo.errors.AutoReconnect("reply lost")
        return result

    monkeypatch.setattr(mongomock.collection.Collection, "insert_one", landed_reply_lost)
    part = WPart(code=777)
    with pytest.raises(pymongo.errors.AutoReconnect):
        WKit(name="a", parts=[part]).save()  # landed
    with pytest.raises(NotUniqueError):  # another document: refused the value
        WKit(name="b", parts=[part]).save()
    stored = [p["code"] for d in mongoengine_db.w_kits.find() for p in d.get("parts", [])]
    assert stored == [777]
