"""Documents stored before a UUID field replaced another kind of id (a version 4 key under a
``UUID7Field``, say; MongoEngine's ``UUIDField`` under ``pythonLegacy`` stored subtype 3): the
value is left as found (not a value of the field), so ``save()`` and ``to_json()`` refuse it
with ``ValidationError`` and write nothing. Stored as the field stores its own, a query by the
key finds them, and they can be reloaded and deleted. Convert such keys first
(docs/standard-uuids.md)."""

from __future__ import annotations

import copy
import uuid
from collections.abc import Callable
from typing import Any

import mongoengine as me
import pytest
from bson import Binary, json_util
from bson.binary import UuidRepresentation
from bson.codec_options import CodecOptions

from mongoengine_ids import (
    LocalityUUIDField,
    LocalityUUIDGenerator,
    UUID4Field,
    UUID7Field,
    UUID7Generator,
)

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


#: (field, a UUID of the field's own kind)
OWN_KIND: dict[str, tuple[Callable[..., Any], Callable[[], uuid.UUID]]] = {
    "uuid4": (UUID4Field, uuid.uuid4),
    "uuid7": (UUID7Field, lambda: UUID7Generator().generate()),
    "locality": (LocalityUUIDField, lambda: LocalityUUIDGenerator(pid=7).generate()),
}
#: A key of the field's own kind stored in another form than the field writes: (the field's
#: options, the stored form). Subtype 3 is what MongoEngine's UUIDField writes under
#: pythonLegacy, which a server's driver decodes to a uuid.UUID under that representation.
OTHER_FORMS: dict[str, tuple[dict[str, Any], Callable[[uuid.UUID], Any]]] = {
    "subtype-3": ({}, lambda key: Binary(key.bytes, 3)),
    "text-under-binary": ({}, str),
    "binary-under-text": ({"as_string": True}, lambda key: Binary(key.bytes, 4)),
    "hex-under-text": ({"as_string": True}, lambda key: key.hex),
    "upper-case-under-text": ({"as_string": True}, lambda key: str(key).upper()),
}


@pytest.mark.parametrize("form", list(OTHER_FORMS))
@pytest.mark.parametrize("name", list(OWN_KIND))
def test_a_key_of_its_kind_stored_in_another_form_is_never_stored_twice(
    mongoengine_connect: Any, name: str, form: str
) -> None:
    """Read, the key is a value of the field; MongoEngine's save() would upsert the document
    by the field's form and store a second copy (found by probe G, on a server and with text or
    binary forms on mongomock). It is refused; the document is addressed as it is stored."""
    mongoengine_connect(uuid_representation="pythonLegacy")
    make, new_key = OWN_KIND[name]
    options, to_stored = OTHER_FORMS[form]
    model = type(
        f"OtherForm{name.title()}",
        (me.Document,),
        {"id": make(primary_key=True, **options), "kind": me.StringField()},
    )
    key = new_key()
    stored = to_stored(key)
    model._get_collection().insert_one({"_id": stored, "kind": "old"})

    (old,) = model.objects
    # A server's driver decodes subtype 3 under pythonLegacy; mongomock leaves the Binary, which
    # validate() refuses before the write path is reached.
    decoded = old.id == key
    assert decoded or (form == "subtype-3" and old.id == stored)
    refused = "another form than its field writes" if decoded else None
    old.kind = "changed"
    with pytest.raises(me.ValidationError, match=refused):
        old.save()
    with pytest.raises(me.ValidationError, match=refused):
        copy.deepcopy(old).save()
    if decoded:  # a forced insert would store the copy too
        with pytest.raises(me.ValidationError, match=refused):
            old.save(force_insert=True)
    assert raw(model) == [{"_id": stored, "kind": "old"}]
    old.reload()
    assert old.kind == "old"
    old.update(set__kind="updated in place")
    assert raw(model) == [{"_id": stored, "kind": "updated in place"}]
    # Converted as the docs say: a copy under a new key, then the old one deleted.
    old.reload()
    old.pk = None
    old.save()
    copied = old.pk
    (original,) = model.objects(kind="updated in place", id__ne=copied)
    original.delete()
    assert [row["kind"] for row in raw(model)] == ["updated in place"]
    assert model.objects.get(id=copied).kind == "updated in place"
    # The object is the copy now (review: it still addressed the original).
    old.kind = "the copy"
    old.save()
    old.update(set__kind="the copy, updated")
    assert [row["kind"] for row in raw(model)] == ["the copy, updated"]
    old.delete()
    assert raw(model) == []


@pytest.mark.parametrize("name", list(OWN_KIND))
def test_a_document_from_json_is_written_under_its_key(mongoengine_db: Any, name: str) -> None:
    """json_util decodes the key to a uuid.UUID, as a driver would under standard: taken as the
    field's own form (review: it was taken for subtype 3, and the document could be neither
    saved nor addressed)."""
    make, _ = OWN_KIND[name]
    model = type(
        f"FromJson{name.title()}",
        (me.Document,),
        {"id": make(primary_key=True), "kind": me.StringField()},
    )
    stored = model(kind="a").save()
    options = json_util.JSONOptions(uuid_representation=UuidRepresentation.STANDARD)
    copied = model.from_json(stored.to_json(json_options=options), json_options=options)
    assert type(copied.id) is type(stored.id)
    copied.kind = "changed"
    copied.save()
    copied.update(set__kind="updated")
    assert raw(model) == [{"_id": stored.to_mongo()["_id"], "kind": "updated"}]
    copied.delete()
    assert raw(model) == []


@pytest.mark.parametrize(
    ("representation", "own"),
    [
        (UuidRepresentation.STANDARD, True),
        (UuidRepresentation.PYTHON_LEGACY, False),
        (UuidRepresentation.JAVA_LEGACY, False),
        (UuidRepresentation.CSHARP_LEGACY, False),
    ],
)
def test_a_uuid_the_driver_decoded_is_the_fields_form_under_standard_only(
    representation: int, own: bool
) -> None:
    """A server's driver decodes subtype 4 to a uuid.UUID under standard, and subtype 3 under
    the legacy representations (mongomock decodes neither: the test above sees the Binary)."""
    key = uuid.uuid4()
    assert UUID4Field().in_own_form(key, representation) is own
    assert UUID4Field(as_string=True).in_own_form(key, representation) is False
    assert UUID4Field().in_own_form(Binary(key.bytes, 4), representation) is True
    assert UUID4Field().in_own_form(Binary(key.bytes, 3), representation) is False


class _Read:
    """The collection a queryset read from, as note_read() sees it: its name and the
    representation its driver decoded under (mongomock's report none)."""

    def __init__(self, representation: int) -> None:
        self.full_name = "db.read_by_representation"
        self.codec_options = CodecOptions(uuid_representation=representation)


@pytest.mark.parametrize(
    ("representation", "other_form"),
    [
        (UuidRepresentation.STANDARD, False),
        (UuidRepresentation.PYTHON_LEGACY, True),
        (UuidRepresentation.UNSPECIFIED, False),
    ],
)
def test_a_key_decoded_to_a_uuid_is_judged_by_the_collection_that_read_it(
    mongoengine_db: Any, representation: int, other_form: bool
) -> None:
    """A server's driver hands a key back as a uuid.UUID from subtype 4 under standard, from
    subtype 3 under the legacy representations (mongomock does neither: its collections report
    no representation, so the queryset's judgement is driven here with the collection it would
    have read from). A document built from such a row outside a queryset is judged by its
    model's collection: on mongomock, as the field's own (from_json() among them)."""
    from mongoengine_ids.write import seam

    model = MODELS["uuid4"]  # a UUID4Field key
    key = uuid.uuid4()
    read = model._from_son({"_id": key, "kind": "old"})
    query = seam.QuerySetParts(model, _Read(representation), {}, None)  # type: ignore[arg-type]
    seam.note_read(read, query)
    assert (seam.stored_key(read) == key) is other_form
    built = model._from_son({"_id": key, "kind": "old"})
    assert seam.stored_key(built) is None
