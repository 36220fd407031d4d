"""The queryset a model with generated fields gets: a custom ``meta["queryset_class"]`` keeps
its own methods (their ``super()`` reaches this package's), the querysets MongoEngine makes
of its own classes (``no_cache()``, ``cache()``) keep generating, and new embedded documents
in an update (``push__``, ``set__``, upserts) get their values. Each test reads the raw stored
documents; a model with plain fields is checked beside it where one compares."""

from __future__ import annotations

import uuid
from typing import Any

import mongoengine as me
import pytest
from _write_support import raw_collection
from bson import Binary
from mongoengine.queryset import QuerySet

from mongoengine_ids import LocalityUUIDField, SequenceField, UUID4Field


def raw(model: type[me.Document]) -> list[dict[str, Any]]:
    return list(raw_collection(model).find())


class QsAuditQuerySet(QuerySet):
    """A custom queryset whose insert() stamps the documents (an everyday override)."""

    def insert(self, doc_or_docs: Any, *args: Any, **kwargs: Any) -> Any:
        docs = doc_or_docs if isinstance(doc_or_docs, list) else [doc_or_docs]
        for doc in docs:
            doc.source = "bulk"
        return super().insert(doc_or_docs, *args, **kwargs)


class QsAudited(me.Document):
    number = SequenceField()
    source = me.StringField()
    meta = {"queryset_class": QsAuditQuerySet}


class PlainAudited(me.Document):
    number = me.IntField()
    source = me.StringField()
    meta = {"queryset_class": QsAuditQuerySet}


def test_custom_queryset_insert_override_runs(mongoengine_db: Any) -> None:
    PlainAudited.objects.insert([PlainAudited(number=1)])
    assert [doc["source"] for doc in raw(PlainAudited)] == ["bulk"]

    QsAudited.objects.insert([QsAudited()])
    assert [doc.get("source") for doc in raw(QsAudited)] == ["bulk"]


class QsKeyed(me.Document):
    id = LocalityUUIDField(primary_key=True)
    number = SequenceField()
    name = me.StringField()


def _assert_generated(stored: dict[str, Any]) -> None:
    assert isinstance(stored["_id"], Binary), stored
    assert stored["_id"].subtype == 4, stored
    assert isinstance(stored.get("number"), int), stored


def test_no_cache_insert_generates(mongoengine_db: Any) -> None:
    QsKeyed.objects.insert([QsKeyed(name="cached")])
    QsKeyed.objects.no_cache().insert([QsKeyed(name="no_cache")])
    for stored in raw(QsKeyed):
        _assert_generated(stored)


@pytest.mark.parametrize("operation", ["update", "modify"])
def test_no_cache_upsert_generates(mongoengine_db: Any, operation: str) -> None:
    queryset = QsKeyed.objects(name="upserted").no_cache()
    if operation == "update":
        queryset.update(upsert=True, set__name="upserted")
    else:
        queryset.modify(upsert=True, new=True, set__name="upserted")
    (stored,) = raw(QsKeyed)
    _assert_generated(stored)


def test_no_cache_projection_spends_no_counter_value(mongoengine_db: Any) -> None:
    QsKeyed(name="a").save()
    assert QsKeyed.number.get_next_value() == 2
    for loaded in QsKeyed.objects.only("name").no_cache():
        loaded.name = "b"
        loaded.save()
    # docs/guarantees.md: fields a projection left out are "not regenerated (no counter value
    # spent)"; with no_cache() the projection is not recorded and a value is drawn (then lost).
    assert QsKeyed.number.get_next_value() == 2
    (stored,) = raw(QsKeyed)
    assert stored["number"] == 1
    assert stored["name"] == "b"


def test_cache_after_no_cache_keeps_generating(mongoengine_db: Any) -> None:
    QsKeyed.objects.no_cache().cache().insert([QsKeyed(name="cached again")])
    (stored,) = raw(QsKeyed)
    _assert_generated(stored)


class PlainTagged(me.EmbeddedDocument):
    tid = me.StringField(default=lambda: str(uuid.uuid4()))  # the plain-MongoEngine way
    name = me.StringField()


class GenTagged(me.EmbeddedDocument):
    tid = UUID4Field()
    name = me.StringField()


class PlainTagHolder(me.Document):
    name = me.StringField()
    tags = me.ListField(me.EmbeddedDocumentField(PlainTagged))
    main = me.EmbeddedDocumentField(PlainTagged)


class GenTagHolder(me.Document):
    name = me.StringField()
    tags = me.ListField(me.EmbeddedDocumentField(GenTagged))
    main = me.EmbeddedDocumentField(GenTagged)


@pytest.mark.parametrize("model", [PlainTagHolder, GenTagHolder], ids=["plain", "plugin"])
def test_embedded_document_written_by_update_gets_its_id(mongoengine_db: Any, model: Any) -> None:
    tag = model._fields["main"].document_type
    doc = model(name="h").save()
    model.objects(id=doc.id).update(push__tags=tag(name="pushed"))
    doc.update(set__main=tag(name="set"))
    model.objects(name="new").upsert_one(set__main=tag(name="upserted"))
    stored = {d["name"]: d for d in raw(model)}
    assert stored["h"]["tags"][0].get("tid") is not None
    assert stored["h"]["main"].get("tid") is not None
    assert stored["new"]["main"].get("tid") is not None
    tids = [stored["h"]["tags"][0]["tid"], stored["h"]["main"]["tid"], stored["new"]["main"]["tid"]]
    assert len(set(tids)) == 3


def test_an_update_that_fails_gives_the_embedded_values_back(mongoengine_db: Any) -> None:
    GenNumberedHolder(name="h").save()
    tag = GenNumberedTag(name="pushed")
    with pytest.raises(me.ValidationError):  # refused as MongoEngine reads the update
        GenNumberedHolder.objects(name="h").update_one(push__tags=tag, inc__name=1)
    assert tag.n is None  # nothing written, and no value was made for it
    GenNumberedHolder.objects(name="h").update_one(push__tags=tag)
    (stored,) = raw(GenNumberedHolder)
    assert [t["n"] for t in stored["tags"]] == [1]


class GenNumberedTag(me.EmbeddedDocument):
    n = SequenceField()
    name = me.StringField()


class GenNumberedHolder(me.Document):
    name = me.StringField()
    tags = me.ListField(me.EmbeddedDocumentField(GenNumberedTag))
