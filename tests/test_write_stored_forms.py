"""Keys stored in another form than their field writes, and keys given by JSON.

A key written before the field was declared (by MongoEngine's own ``SequenceField``, by a
``StringField``, or before the field was given a format) may be stored in a form the field
reads as another value: the text ``"12345"`` a SequenceField reads as the number, ``"k7m2q9"``
a Crockford ``RandomUniqueField`` reads as ``"K7M2Q9"``, the number ``1`` a field formatted
since reads as ``"AC-000001"``. MongoEngine's ``save()`` would upsert the document by the key
in the field's form: a second copy (probe AZ, F2). The document is addressed as it is stored
(``update()``, ``reload()``, ``delete()``) and its ``save()`` is refused. A key the JSON of
``from_json()`` holds is the application's, a value in any form the field accepts (probe AZ,
F1): it is not taken for a stored form.

Every check reads the raw stored documents.
"""

from __future__ import annotations

import copy
import uuid
from dataclasses import dataclass
from typing import Any

import mongoengine as me
import pytest
from _write_support import document
from bson import Binary, json_util
from mongoengine import fields as me_fields

from mongoengine_ids import LocalityUUIDField, RandomUniqueField, SequenceField, UUID4Field


@dataclass(frozen=True)
class Case:
    """A key ``before`` stores as ``stored``, which ``after`` reads as ``read``."""

    name: str
    before: Any
    assign: Any
    stored: Any
    after: Any
    read: Any


CASES = [
    Case(
        "mongoengine_sequence_text",
        lambda: me_fields.SequenceField(primary_key=True),
        "12345",
        "12345",
        lambda: SequenceField(primary_key=True),
        12345,
    ),
    Case(
        "string_lower_case",
        lambda: me.StringField(primary_key=True),
        "k7m2q9",
        "k7m2q9",
        lambda: RandomUniqueField(length=6, primary_key=True),
        "K7M2Q9",
    ),
    Case(
        "number_then_formatted",
        lambda: SequenceField(primary_key=True),
        1,
        1,
        lambda: SequenceField(primary_key=True, prefix="AC-", digits=6, zero_pad=True),
        "AC-000001",
    ),
]


def _model(name: str, key: Any) -> Any:
    """A model ``name`` on the collection ``name``: the key ``key`` and a ``name``."""
    return document(name, name, id=key, name=me.StringField())


def _stored(case: Case) -> Any:
    """The model declared over the documents ``case.before`` stored: one, named ``"Bo"``."""
    Before = _model(f"before_{case.name}", case.before())
    Before(id=case.assign, name="Bo").save()
    return _model(f"before_{case.name}", case.after())


def raw(model: Any) -> list[dict[str, Any]]:
    return list(model._get_collection().find())


def from_json(model: Any, text: str) -> Any:
    return model.from_json(text, json_options=json_util.RELAXED_JSON_OPTIONS)


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_a_key_stored_in_another_form_is_addressed_as_stored(
    mongoengine_db: Any, case: Case
) -> None:
    After = _stored(case)
    document = After.objects.get(name="Bo")
    assert document.id == case.read

    document.update(set__name="Cy")
    assert raw(After) == [{"_id": case.stored, "name": "Cy"}]
    document.reload()
    assert document.name == "Cy"
    with pytest.raises(me.ValidationError, match=r"stored as .*another form"):
        copy.deepcopy(document).save()  # a copy knows the stored form too

    document.name = "Di"
    with pytest.raises(me.ValidationError, match=rf"stored as {case.stored!r}, another form"):
        document.save()  # MongoEngine would upsert a second copy under case.read
    with pytest.raises(me.ValidationError, match=r"another form"):
        document.save(force_insert=True)
    assert raw(After) == [{"_id": case.stored, "name": "Cy"}]

    document.delete()
    assert raw(After) == []


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_a_key_in_the_fields_form_is_saved(mongoengine_db: Any, case: Case) -> None:
    After = _stored(case)
    After._get_collection().delete_many({})
    document = After(name="Bo").save()
    loaded = After.objects.get(id=document.id)
    loaded.name = "Cy"
    loaded.save()
    assert raw(After) == [{"_id": After.id.to_mongo(document.id), "name": "Cy"}]


KEYS = {
    "uuid4": lambda: UUID4Field(primary_key=True),
    "locality": lambda: LocalityUUIDField(primary_key=True),
    "sequence": lambda: SequenceField(primary_key=True),
    "random": lambda: RandomUniqueField(length=6, primary_key=True),
}


@pytest.mark.parametrize("kind", list(KEYS))
def test_from_json_takes_the_key_as_a_value_of_the_field(mongoengine_db: Any, kind: str) -> None:
    # Probe AZ F1: an API's JSON holds a UUID as text, a number as text, an id in lower case;
    # taken for a stored form, update() and delete() found nothing and save() was refused.
    Model = _model(f"json_{kind}", KEYS[kind]())
    stored = Model(name="Bo").save()
    Model(name="Other").save()
    text = str(stored.id).lower()

    document = from_json(Model, f'{{"_id": "{text}", "name": "Bo"}}')
    assert document.id == stored.id
    document.update(set__name="Cy")
    document.reload()
    assert document.name == "Cy"

    changed = from_json(Model, f'{{"_id": "{text}", "name": "Bo"}}')
    changed.name = "Ed"
    changed.save()
    assert sorted(d["name"] for d in raw(Model)) == ["Ed", "Other"]

    from_json(Model, f'{{"_id": "{text}"}}').delete()
    assert [d["name"] for d in raw(Model)] == ["Other"]


@pytest.mark.parametrize("kind", list(KEYS))
def test_the_querysets_from_json_takes_the_key_as_a_value_of_the_field(
    mongoengine_db: Any, kind: str
) -> None:
    # Review N: QuerySet.from_json() builds its documents by _from_son() alone.
    Model = _model(f"qs_json_{kind}", KEYS[kind]())
    stored = Model(name="Bo").save()
    Model(name="Other").save()
    text = str(stored.id).lower()
    (document,) = _queryset_from_json(Model, f'[{{"_id": "{text}", "name": "Bo"}}]')
    document.name = "Cy"
    document.save()
    assert sorted(d["name"] for d in raw(Model)) == ["Cy", "Other"]
    document.delete()
    assert [d["name"] for d in raw(Model)] == ["Other"]


def _queryset_from_json(model: Any, text: str) -> list[Any]:
    """``model.objects.from_json(text)`` (MongoEngine's takes no json_options)."""
    return list(model.objects.from_json(text))


def test_from_json_of_a_raw_row_keeps_a_key_stored_as_subtype_3(mongoengine_db: Any) -> None:
    # Review N: JSON stating subtype 3 (a raw row's: QuerySet.to_json(), a backup) is no value
    # an application gives; the document is still addressed as stored.
    Model = _model("json_subtype_3", KEYS["uuid4"]())
    key = uuid.uuid4()
    Model._get_collection().insert_one({"_id": Binary(key.bytes, 3), "name": "Bo"})
    text = json_util.dumps(
        {"_id": Binary(key.bytes, 3), "name": "Bo"}, json_options=json_util.RELAXED_JSON_OPTIONS
    )
    document = from_json(Model, text)
    document.name = "Cy"
    with pytest.raises(me.ValidationError):  # no value of the field, or in another form
        document.save()
    assert raw(Model) == [{"_id": Binary(key.bytes, 3), "name": "Bo"}]
    document.delete()
    assert raw(Model) == []
