"""Upserts of shapes review BX found escaping the write path: a unique value given to several
documents, a number kept while its document moves to another scope, a generated value removed
under a filter that fixes it, generated fields named like MongoEngine's operators, one object
pushed twice, pipelines that create an embedded document, and an empty raw update. Each test
checks the stored documents."""

from __future__ import annotations

from collections import Counter
from typing import Any

import mongoengine as me
import pytest
from mongoengine.errors import InvalidQueryError

from mongoengine_ids import RandomUniqueField, SequenceField


class UsTicket(me.Document):
    email = me.StringField()
    code = RandomUniqueField(digits=6)
    reserved = RandomUniqueField(digits=6, reserve_in="us_ticket_reserved")
    n = SequenceField(sequence_name="us_ticket_n")
    meta = {"collection": "us_tickets"}


def _tickets() -> list[dict[str, Any]]:
    return list(UsTicket._get_collection().find())


@pytest.mark.parametrize("field", ["code", "reserved"])
def test_a_unique_value_given_by_an_upsert_of_several_documents_is_refused(
    mongoengine_db: Any, field: str
) -> None:
    """As the same update without upsert=True: each document matched would hold the value (a
    unique index failed half-way; a reserve_in field stored it twice)."""
    UsTicket(email="x").save()
    UsTicket(email="x").save()
    before = _tickets()
    with pytest.raises(InvalidQueryError, match=rf"UsTicket\.{field} is generated: an update of"):
        UsTicket.objects(email="x").update(upsert=True, **{f"set__{field}": 123457})
    assert _tickets() == before
    # One document: given (and reserved), as a new document's value.
    UsTicket.objects(email="x", id=before[0]["_id"]).update(upsert=True, set__code=123457)
    assert [doc["code"] for doc in _tickets()] == [123457, before[1]["code"]]


class UsScoped(me.Document):
    tenant = me.StringField()
    email = me.StringField()
    n = SequenceField(scope="tenant", sequence_name="us_scoped")
    meta = {"collection": "us_scoped"}


@pytest.mark.parametrize("upsert", [False, True])
def test_an_upsert_moving_a_document_to_another_scope_with_its_number_tells_that_scope(
    mongoengine_db: Any, upsert: bool
) -> None:
    """The document holds its number in A; in B nobody does: B's counter moves past it."""
    for i in range(5):
        UsScoped(tenant="A", email=f"a{i}").save()  # A: 1 to 5
    UsScoped.objects(email="a4").update_one(upsert=upsert, set__tenant="B", set__n=5)
    later = [UsScoped(tenant="B", email=f"b{i}").save().n for i in range(2)]
    assert later == [6, 7]
    stored = [(doc["tenant"], doc["n"]) for doc in UsScoped._get_collection().find()]
    assert sorted(stored) == [("A", 1), ("A", 2), ("A", 3), ("A", 4), ("B", 5), ("B", 6), ("B", 7)]
    assert not [key for key, count in Counter(stored).items() if count > 1]


@pytest.mark.parametrize(
    "upsert",
    [
        lambda: UsTicket.objects(email="y", n=5).update_one(upsert=True, unset__n=1),
        lambda: UsTicket.objects(email="y", code=123456).modify(
            upsert=True, new=True, unset__code=1
        ),
        lambda: UsTicket.objects(email="y", n=5).update_one(upsert=True, rename__n="m"),
    ],
    ids=["unset-number", "modify-unset-code", "rename-number"],
)
def test_removing_a_generated_value_the_filter_fixes_is_refused(
    mongoengine_db: Any, upsert: Any
) -> None:
    """The document inserted would lack the value, and never match the filter again: each
    retry inserted another."""
    with pytest.raises(InvalidQueryError, match="an upsert cannot write it with"):
        upsert()
    assert _tickets() == []


class UsOperatorPart(me.EmbeddedDocument):
    label = me.StringField()
    type = SequenceField(sequence_name="us_operator_part_type")


class UsOperatorNames(me.Document):
    email = me.StringField()
    part = me.EmbeddedDocumentField(UsOperatorPart)
    size = RandomUniqueField(digits=6)
    exists = SequenceField(sequence_name="us_operator_exists")
    meta = {"collection": "us_operator_names"}


def test_generated_fields_named_like_operators_get_their_values_on_insert(
    mongoengine_db: Any,
) -> None:
    """``type``, ``size`` and ``exists`` are MongoEngine operators: set on insert escaped."""
    UsOperatorNames.objects(email="1", part__label="a").update_one(upsert=True, set__email="1")
    UsOperatorNames.objects(email="2").upsert_one(set__part__label="b")
    UsOperatorNames.objects(email="3").modify(upsert=True, new=True, set__email="3")
    stored = {doc["email"]: doc for doc in UsOperatorNames._get_collection().find()}
    assert stored["1"]["part"] == {"label": "a", "type": 1}
    assert stored["2"]["part"] == {"label": "b", "type": 2}
    assert "part" not in stored["3"]
    assert [stored[email]["exists"] for email in "123"] == [1, 2, 3]
    sizes = [stored[email]["size"] for email in "123"]
    assert len(set(sizes)) == 3
    assert all(100_000 <= size < 1_000_000 for size in sizes)


class UsPart(me.EmbeddedDocument):
    label = me.StringField()
    code = SequenceField(sequence_name="us_part_code")  # not unique: one object twice is allowed


class UsBox(me.Document):
    email = me.StringField()
    part = me.EmbeddedDocumentField(UsPart)
    parts = me.ListField(me.EmbeddedDocumentField(UsPart))
    meta = {"collection": "us_boxes"}


class UsKeyed(me.Document):
    id = SequenceField(primary_key=True, sequence_name="us_keyed")
    part = me.EmbeddedDocumentField(UsPart)
    meta = {"collection": "us_keyed"}


def test_one_object_pushed_twice_by_an_upsert_is_pushed_not_added_to_a_set(
    mongoengine_db: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A server's $addToSet adds equal items of one $each once: the second place was lost."""
    import mongomock.collection

    sent: list[dict[str, Any]] = []
    real = mongomock.collection.Collection.update_one

    def spy(self: Any, filter: Any, update: Any, *args: Any, **kwargs: Any) -> Any:
        sent.append(update)
        return real(self, filter, update, *args, **kwargs)

    monkeypatch.setattr(mongomock.collection.Collection, "update_one", spy)
    part = UsPart(label="twice")
    UsBox.objects(email="x").update_one(upsert=True, push_all__parts=[part, part])
    assert [list(update) for update in sent] == [["$push"]]
    (stored,) = UsBox._get_collection().find()
    assert stored["parts"] == [{"label": "twice", "code": 1}, {"label": "twice", "code": 1}]


@pytest.mark.parametrize(
    "upsert",
    [
        lambda: UsBox.objects(email="2", part__label="a").update_one(
            upsert=True, __raw__=[{"$set": {"email": "2"}}]
        ),
        lambda: UsKeyed.objects(id=5, part__label="b").update_one(
            upsert=True, __raw__=[{"$set": {"x": 1}}]
        ),
        lambda: UsBox.objects(email="4").update_one(
            upsert=True, __raw__=[{"$set": {"part.label": "c"}}]
        ),
    ],
    ids=["filter-creates-it", "key-fixed", "stage-creates-it"],
)
def test_a_pipeline_upsert_creating_an_embedded_document_with_a_generated_value_is_refused(
    mongoengine_db: Any, upsert: Any
) -> None:
    """A pipeline has no $setOnInsert: the embedded document was inserted without its value."""
    with pytest.raises(InvalidQueryError, match=r"UsPart\.code is generated: an upsert with a pi"):
        upsert()
    assert list(UsBox._get_collection().find()) == []
    assert list(UsKeyed._get_collection().find()) == []


def test_a_pipeline_upsert_giving_an_embedded_number_in_its_filter_tells_the_counter(
    mongoengine_db: Any,
) -> None:
    UsBox.objects(email="1", part__code=7).update_one(
        upsert=True, __raw__=[{"$set": {"part.label": "given"}}]
    )
    assert UsBox(email="2", part=UsPart()).save().part.code == 8
    stored = {doc["email"]: doc["part"] for doc in UsBox._get_collection().find()}
    assert stored == {"1": {"code": 7, "label": "given"}, "2": {"code": 8}}


def test_an_empty_raw_upsert_is_refused_as_plain_mongoengine_refuses_it(
    mongoengine_db: Any,
) -> None:
    with pytest.raises(ValueError, match="update cannot be empty"):
        UsTicket.objects(email="x").update_one(upsert=True, __raw__={})
    assert _tickets() == []


class UsUnderscorePart(me.EmbeddedDocument):
    label = me.StringField()
    code_ = SequenceField(sequence_name="us_underscore_code")


class UsUnderscore(me.Document):
    name = me.StringField()
    number_ = SequenceField(sequence_name="us_underscore_number")
    part = me.EmbeddedDocumentField(UsUnderscorePart)
    meta = {"collection": "us_underscore"}


def test_generated_fields_whose_names_end_in_an_underscore_get_their_values_on_insert(
    mongoengine_db: Any,
) -> None:
    """Review CA-3: the escape of operator-like names, added to every name, broke these
    (``set_on_insert__number___`` was read as ``number`` then ``_``)."""
    UsUnderscore.objects(name="a").upsert_one(set__name="a")
    UsUnderscore.objects(name="b").update_one(upsert=True, set__name="b")
    UsUnderscore.objects(name="c").modify(upsert=True, new=True, set__name="c")
    UsUnderscore.objects(name="d", part__label="x").update_one(upsert=True, set__name="d")
    stored = {doc["name"]: doc for doc in UsUnderscore._get_collection().find()}
    assert [stored[name]["number_"] for name in "abcd"] == [1, 2, 3, 4]
    assert stored["d"]["part"] == {"label": "x", "code_": 1}
