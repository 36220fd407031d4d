"""save() of an existing document that gets a new embedded document: the update writes the
paths MongoEngine saw change, as for a model without generated fields (compared side by side),
never a wider one that would replace what another writer stored beside them."""

from __future__ import annotations

import uuid
from typing import Any

import mongoengine as me
import pytest
from bson import json_util

from mongoengine_ids import SequenceField, UUID4Field


class GenSub(me.EmbeddedDocument):
    sid = UUID4Field()
    v = me.StringField()


class GenPart(me.EmbeddedDocument):
    name = me.StringField()
    sub = me.EmbeddedDocumentField(GenSub)


class GenHolder(me.Document):
    parts = me.ListField(me.EmbeddedDocumentField(GenPart))
    one = me.EmbeddedDocumentField(GenPart)


class PlainSub(me.EmbeddedDocument):
    sid = me.StringField(default=lambda: str(uuid.uuid4()))
    v = me.StringField()


class PlainPart(me.EmbeddedDocument):
    name = me.StringField()
    sub = me.EmbeddedDocumentField(PlainSub)


class PlainHolder(me.Document):
    parts = me.ListField(me.EmbeddedDocumentField(PlainPart))
    one = me.EmbeddedDocumentField(PlainPart)


def raw(model: type[me.Document]) -> list[dict[str, Any]]:
    return list(model._get_collection().find())


@pytest.mark.parametrize("model", [PlainHolder, GenHolder], ids=["plain", "plugin"])
def test_new_nested_embedded_document_does_not_overwrite_unloaded_data(
    mongoengine_db: Any, model: Any
) -> None:
    part, sub = model._fields["one"].document_type, model._fields["one"].document_type.sub
    model(one=part(name="keep me")).save()
    loaded = model.objects.only("one.sub").get()
    loaded.one.sub = sub.document_type(v="y")
    loaded.save()
    (stored,) = raw(model)
    assert stored["one"]["sub"]["v"] == "y"
    assert stored["one"]["sub"].get("sid") is not None
    assert stored["one"].get("name") == "keep me"


@pytest.mark.parametrize("model", [PlainHolder, GenHolder], ids=["plain", "plugin"])
def test_new_nested_embedded_document_keeps_concurrent_changes(
    mongoengine_db: Any, model: Any
) -> None:
    part = model._fields["one"].document_type
    sub = part.sub.document_type
    model(parts=[part(name="p0")], one=part(name="one")).save()
    loaded = model.objects.get()
    # another process changes other parts of the document meanwhile
    model._get_collection().update_one(
        {},
        {
            "$push": {"parts": {"name": "pushed by another process"}},
            "$set": {"one.name": "renamed"},
        },
    )
    loaded.parts[0].sub = sub(v="x")
    loaded.one.sub = sub(v="y")
    loaded.save()  # MongoEngine writes $set parts.0.sub and one.sub
    (stored,) = raw(model)
    assert [p["name"] for p in stored["parts"]] == ["p0", "pushed by another process"]
    assert stored["one"]["name"] == "renamed"
    assert stored["parts"][0]["sub"].get("sid") is not None


# -- a document built with created=False that is not stored (from_json()'s default) ------------


class GenImported(me.Document):
    note = me.StringField()
    number = SequenceField()


class PlainImported(me.Document):
    note = me.StringField()
    number = me.IntField(default=7)


@pytest.mark.parametrize("model", [PlainImported, GenImported], ids=["plain", "plugin"])
def test_a_document_built_as_stored_but_missing_is_upserted_with_its_values(
    mongoengine_db: Any, model: Any
) -> None:
    document = model.from_json(
        '{"_id": {"$oid": "65a000000000000000000001"}, "note": "x"}',
        json_options=json_util.RELAXED_JSON_OPTIONS,
    )
    document.save()  # nothing changed: MongoEngine writes nothing
    assert raw(model) == []
    document.note = "y"
    document.save()  # an upsert of the changed fields: with the generated value
    (stored,) = raw(model)
    assert stored["note"] == "y"
    if model is GenImported:
        assert isinstance(stored["number"], int)
        assert stored["number"] == document.number
