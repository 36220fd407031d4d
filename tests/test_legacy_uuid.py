"""Documents stored before a UUID field replaced another kind of id (a version 4 key under a
``UUID7Field``, say; MongoEngine's ``UUIDField`` under ``pythonLegacy`` stored subtype 3): the
value is left as found (not a value of the field), so ``save()`` and ``to_json()`` refuse it
with ``ValidationError`` and write nothing. Stored as the field stores its own, a query by the
key finds them, and they can be reloaded and deleted. Convert such keys first
(docs/standard-uuids.md)."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import mongoengine as me
import pytest
from bson import Binary, json_util
from bson.binary import UuidRepresentation
from bson.codec_options import CodecOptions

from mongoengine_ids import LocalityUUIDField, UUID4Field, UUID7Field, UUID7Generator

RAW = CodecOptions(document_class=dict, uuid_representation=UuidRepresentation.UNSPECIFIED)

#: (field, a UUID of another kind than the field's)
FIELDS: dict[str, tuple[Callable[..., Any], Callable[[], uuid.UUID]]] = {
    "uuid7": (UUID7Field, uuid.uuid4),
    "uuid4": (UUID4Field, lambda: UUID7Generator().generate()),
    "locality": (LocalityUUIDField, uuid.uuid4),
}
#: How a key of another kind may be stored.
FORMS: dict[str, Callable[[uuid.UUID], Any]] = {
    "binary": lambda key: Binary(key.bytes, 4),
    "subtype-3": lambda key: Binary(key.bytes, 3),
    "text": str,
}


def _model(name: str) -> type[me.Document]:
    make, _ = FIELDS[name]
    attributes = {"id": make(primary_key=True), "kind": me.StringField()}
    return type(f"Legacy{name.title()}", (me.Document,), attributes)


MODELS = {name: _model(name) for name in FIELDS}


def raw(model: type[me.Document]) -> list[dict[str, Any]]:
    return list(model._get_collection().with_options(codec_options=RAW).find())


@pytest.mark.parametrize("form", list(FORMS))
@pytest.mark.parametrize("name", list(FIELDS))
def test_a_key_of_another_kind_is_found_and_never_written_over(
    mongoengine_db: Any, name: str, form: str
) -> None:
    model = MODELS[name]
    key = FIELDS[name][1]()
    stored = FORMS[form](key)
    model._get_collection().insert_one({"_id": stored, "kind": "old"})

    (old,) = model.objects
    old.kind = "changed"
    with pytest.raises(me.ValidationError):
        old.save()
    with pytest.raises(me.ValidationError):
        old.to_json(json_options=json_util.RELAXED_JSON_OPTIONS)
    assert raw(model) == [{"_id": stored, "kind": "old"}]
    if form != "binary":
        return  # another stored form: not found by the key either (convert it first)
    assert model.objects.get(id=key).kind == "old"  # a query by the key finds it
    old.reload()
    assert old.kind == "old"
    old.delete()
    assert raw(model) == []
