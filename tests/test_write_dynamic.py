"""Dynamic documents (found by probe N): an upsert into a ``DynamicEmbeddedDocument`` of a
``DynamicDocument`` (MongoEngine resolves its paths as ``DynamicField``); embedded documents
written whole, as dicts naming their class, into a dynamic attribute, a ``DynamicField`` or an
untyped list; embedded documents loaded into a dynamic attribute (MongoEngine builds them as
new); a bool in ``__raw__``. Each test checks the stored documents."""

from __future__ import annotations

import copy
from typing import Any

import mongoengine as me
import pytest
from bson.binary import UuidRepresentation
from bson.json_util import JSONOptions
from mongoengine.errors import NotUniqueError, ValidationError

from mongoengine_ids import RandomUniqueField, SequenceField, backfill
from mongoengine_ids.sequence import DEFAULT_COLLECTION


class DyPart(me.DynamicEmbeddedDocument):
    label = me.StringField()
    code = SequenceField(sequence_name="dy_part_code")
    rr = RandomUniqueField(digits=3, reserve_in="dy_part_rr")
    meta = {"allow_inheritance": True}


class DyDoc(me.DynamicDocument):
    name = me.StringField()
    part = me.EmbeddedDocumentField(DyPart)
    df = me.DynamicField()
    untyped = me.ListField()
    n = SequenceField(sequence_name="dy_doc_n")
    meta = {"collection": "dy_docs"}


def _stored(name: str) -> dict[str, Any]:
    found = DyDoc._get_collection().find_one({"name": name}, {"_id": 0})
    assert found is not None
    return found


def _counter(name: str) -> int:
    found = DyDoc._get_db()[DEFAULT_COLLECTION].find_one({"_id": name})
    return 0 if found is None else int(found["next"])


@pytest.mark.parametrize(
    "upsert",
    [
        lambda: DyDoc.objects(name="a").update_one(upsert=True, set__part__label="L"),
        lambda: DyDoc.objects(name="a").upsert_one(set__part__label="L"),
        lambda: DyDoc.objects(name="a").modify(upsert=True, new=True, set__part__label="L"),
        lambda: DyDoc.objects(name="a", part__label="L").update_one(upsert=True, set__x=1),
    ],
    ids=["update_one", "upsert_one", "modify", "from-filter"],
)
def test_an_upsert_creating_a_dynamic_embedded_document_gets_its_values(
    mongoengine_db: Any, upsert: Any
) -> None:
    upsert()
    stored = _stored("a")
    assert stored["part"]["label"] == "L"
    assert stored["part"]["code"] == 1
    assert 100 <= stored["part"]["rr"] <= 999
    reserved = [doc["_id"] for doc in mongoengine_db["dy_part_rr"].find()]
    assert reserved == [stored["part"]["rr"]]


@pytest.mark.parametrize(
    "update",
    [
        {"__raw__": {"$set": {"extra": {"_cls": "DyPart", "code": 40}}}},
        {"__raw__": {"$set": {"df": {"_cls": "DyPart", "code": 40}}}},
        {"__raw__": {"$push": {"untyped": {"_cls": "DyPart", "code": 40}}}},
        {"__raw__": {"$set": {"part.more": {"_cls": "DyPart", "code": 40}}}},
        {"set__df": {"_cls": "DyPart", "code": 40}},
    ],
    ids=["dynamic-attribute", "dynamic-field", "untyped-list", "inside-dynamic-embedded", "kw"],
)
def test_a_number_in_a_dict_naming_its_class_moves_the_counter(
    mongoengine_db: Any, update: dict[str, Any]
) -> None:
    DyDoc(name="a", part=DyPart()).save()  # code 1
    DyDoc.objects(name="a").update_one(**update)
    assert _counter("dy_part_code.code") == 40
    later = DyDoc(name="later", part=DyPart()).save()
    assert _stored("later")["part"]["code"] == 41 == later.part.code


def test_a_taken_reserve_in_value_in_a_dict_naming_its_class_is_refused(
    mongoengine_db: Any,
) -> None:
    DyDoc(name="a", part=DyPart()).save()
    DyDoc(name="b").save()
    taken = _stored("a")["part"]["rr"]
    before = _stored("b")
    with pytest.raises(NotUniqueError, match=str(taken)):
        DyDoc.objects(name="b").update_one(
            __raw__={"$set": {"extra": {"_cls": "DyPart", "rr": taken}}}
        )
    assert _stored("b") == before


JSON = JSONOptions(uuid_representation=UuidRepresentation.STANDARD)
LOADS = {
    "queryset": lambda: DyDoc.objects.get(name="a"),
    "from_son": lambda: DyDoc._from_son(DyDoc._get_collection().find_one({"name": "a"})),
    "from_json": lambda: DyDoc.from_json(
        DyDoc.objects.get(name="a").to_json(json_options=JSON), json_options=JSON
    ),
    "deepcopy": lambda: copy.deepcopy(DyDoc.objects.get(name="a")),
}


@pytest.mark.parametrize("load", list(LOADS))
def test_an_embedded_document_loaded_into_a_dynamic_attribute_is_not_filled(
    mongoengine_db: Any, load: str
) -> None:
    # Stored before DyPart had its generated fields (or by another program).
    DyDoc._get_collection().insert_one(
        {"name": "a", "n": 5, "extra": {"_cls": "DyPart", "label": "x"}}
    )
    loaded = LOADS[load]()
    DyDoc._get_collection().update_one({"name": "a"}, {"$set": {"extra.label": "meanwhile"}})
    loaded.name = "renamed"
    loaded.save()
    assert _stored("renamed") == {
        "name": "renamed",
        "n": 5,
        "extra": {"_cls": "DyPart", "label": "meanwhile"},
    }
    assert _counter("dy_part_code.code") == 0  # no value made for it


@pytest.mark.parametrize("path", ["n", "part.code"])
def test_a_bool_in_raw_is_refused(mongoengine_db: Any, path: str) -> None:
    DyDoc(name="a", part=DyPart()).save()
    before = _stored("a")
    with pytest.raises(ValidationError, match=r"True, which the update sets at .* \(a bool\)"):
        DyDoc.objects(name="a").update_one(__raw__={"$set": {path: True}})
    assert _stored("a") == before


class DyDefaulted(me.Document):
    name = me.StringField()
    part = me.EmbeddedDocumentField(DyPart, default=DyPart)
    meta = {"collection": "dy_defaulted"}


def test_an_embedded_document_a_default_makes_for_a_loaded_document_is_written_as_changed(
    mongoengine_db: Any,
) -> None:
    """A change inside it is written at its path, as MongoEngine writes it: written whole with
    values (as until session 35), it replaced what another writer had stored there since the
    load (review 2 of session 35). backfill() gives it its values."""
    collection = DyDefaulted._get_collection()
    collection.insert_one({"name": "a"})
    loaded = DyDefaulted.objects.get(name="a")
    collection.update_one({"name": "a"}, {"$set": {"part.note": "meanwhile"}})
    loaded.part.label = "new"
    loaded.save()
    assert collection.find_one({"name": "a"}, {"_id": 0}) == {
        "name": "a",
        "part": {"note": "meanwhile", "label": "new"},
    }
    assert _counter("dy_part_code.code") == 0  # no value made for it
    assert backfill(DyDefaulted) == 2  # part.code and part.rr
    part = collection.find_one({"name": "a"})["part"]
    assert (part["note"], part["label"], part["code"]) == ("meanwhile", "new", 1)
    assert 100 <= part["rr"] <= 999


@pytest.mark.parametrize("path", ["extra", "df"], ids=["dynamic-attribute", "dynamic-field"])
def test_a_number_an_upsert_filter_fixes_in_a_dict_naming_its_class_is_told(
    mongoengine_db: Any, path: str
) -> None:
    """Found by the second review: the filter's values were told where an EmbeddedDocumentField
    is declared only."""
    DyDoc.objects(__raw__={"name": "b", path: {"_cls": "DyPart", "code": 40}}).update_one(
        upsert=True, set__x=1
    )
    assert _stored("b")[path] == {"_cls": "DyPart", "code": 40}
    assert _counter("dy_part_code.code") == 40
    later = DyDoc(name="later", part=DyPart()).save()
    assert _stored("later")["part"]["code"] == 41 == later.part.code


def test_a_value_a_matching_upsert_filter_fixes_is_not_told(mongoengine_db: Any) -> None:
    DyDoc._get_collection().insert_one({"name": "b", "extra": {"_cls": "DyPart", "code": 40}})
    DyDoc.objects(__raw__={"name": "b", "extra": {"_cls": "DyPart", "code": 40}}).update_one(
        upsert=True, set__x=1
    )
    assert DyDoc._get_collection().count_documents({}) == 1
    assert _counter("dy_part_code.code") == 0  # matched: nothing inserted, nothing told


# -- a dynamic attribute named as a generated field's db_field (probe AK) -----------------------


class DyNamedPart(me.DynamicEmbeddedDocument):
    code = SequenceField(db_field="c", sequence_name="dy_named_part_code")
    rr = RandomUniqueField(digits=3, db_field="r", reserve_in="dy_named_part_rr")


class DyNamed(me.DynamicDocument):
    name = me.StringField()
    tenant = me.StringField(db_field="t")
    n = SequenceField(db_field="num", sequence_name="dy_named_n")
    k = SequenceField(scope="tenant", sequence_name="dy_named_k")
    part = me.EmbeddedDocumentField(DyNamedPart)
    meta = {"collection": "dy_named"}


def _named_stored() -> list[dict[str, Any]]:
    return list(DyNamed._get_collection().find({}, {"_id": 0}).sort("name"))


@pytest.mark.parametrize(
    ("write", "attribute"),
    [
        (lambda: DyNamed(name="b", tenant="A", num=1).save(), "num"),
        (lambda: DyNamed(name="b", tenant="B", t="A").save(), "t"),
        (lambda: DyNamed(name="b", tenant="A", part=DyNamedPart(c=1)).save(), "c"),
        (lambda: DyNamed(name="b", tenant="A", part=DyNamedPart(r=500)).save(), "r"),
        (lambda: DyNamed.objects.insert([DyNamed(name="b", tenant="A", num=1)]), "num"),
        (
            lambda: DyNamed.objects.insert(
                [DyNamed(name="b", tenant="A"), DyNamed(name="c", part=DyNamedPart(c=1))]
            ),
            "c",
        ),
    ],
    ids=["new-key", "new-scope", "new-embedded", "new-embedded-reserve_in", "insert", "insert-2nd"],
)
def test_a_dynamic_attribute_stored_over_a_generated_value_is_refused(
    mongoengine_db: Any, write: Any, attribute: str
) -> None:
    # MongoEngine stores dynamic attributes after the declared fields, under their own names:
    # it had stored num=1 over the number made (1 again for the next document), or t="A" as
    # the scope of a number counted in B's counter (two documents held A's 1).
    first = DyNamed(name="a", tenant="A", part=DyNamedPart()).save()
    with pytest.raises(ValidationError, match=f"dynamic attribute {attribute!r}"):
        write()
    assert _named_stored() == [
        {"name": "a", "t": "A", "num": 1, "k": 1, "part": {"c": 1, "r": first.part.rr}}
    ]
    reserved = [doc["_id"] for doc in mongoengine_db["dy_named_part_rr"].find()]
    assert reserved == [first.part.rr]


def test_a_dynamic_attribute_stored_over_a_loaded_documents_number_is_refused(
    mongoengine_db: Any,
) -> None:
    DyNamed(name="a", tenant="A").save()
    loaded = DyNamed.objects.get(name="a")
    loaded.num = 2  # a dynamic attribute: the field is n
    with pytest.raises(ValidationError, match=r"dynamic attribute 'num'.*assign DyNamed\.n"):
        loaded.save()
    assert _named_stored() == [{"name": "a", "t": "A", "num": 1, "k": 1}]
    assert DyNamed(name="b", tenant="A").save().n == 2
