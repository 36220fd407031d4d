"""save() of an existing document that gets a new embedded document: the update writes the
paths MongoEngine saw change, as for a model without generated fields (compared side by side),
never a wider one that would replace what another writer stored beside them."""

from __future__ import annotations

import uuid
from typing import Any
from unittest import mock

import mongoengine as me
import pytest
from _write_support import raw_collection
from bson import Binary, json_util

from mongoengine_ids import RandomUniqueField, SequenceField, UUID4Field
from mongoengine_ids.errors import ExplicitValueError


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
    return list(raw_collection(model).find())


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


# -- ... holding generated values it did not change --------------------------------------------


class HeldEverything(me.Document):
    note = me.StringField()
    number = SequenceField()
    code = RandomUniqueField(digits=6)
    ref = UUID4Field()
    seq_key = me.IntField()


def _held_json() -> str:
    return json_util.dumps(
        {
            "_id": {"$oid": "65a000000000000000000002"},
            "note": "x",
            "number": 900,
            "code": 123456,
            "ref": {"$uuid": "0c6a4d3e8b2f4a1c9d7e5f3a2b1c0d9e"},
        }
    )


def test_values_it_holds_are_inserted_by_the_upsert(mongoengine_db: Any) -> None:
    """from_json() (created=False) of a document not stored, changed and saved: MongoEngine
    upserts the changed fields only; the generated values it holds are set on insert."""
    document = HeldEverything.from_json(_held_json(), json_options=json_util.RELAXED_JSON_OPTIONS)
    document.note = "y"
    document.save()
    (stored,) = raw(HeldEverything)
    assert stored["note"] == "y"
    assert stored["number"] == 900
    assert stored["code"] == 123456
    assert stored["ref"] == Binary(uuid.UUID("0c6a4d3e8b2f4a1c9d7e5f3a2b1c0d9e").bytes, 4)
    # The counter was told of the number the upsert inserted: it never hands it out.
    assert HeldEverything(note="new").save().number == 901


def test_values_it_holds_leave_a_stored_copy_alone(mongoengine_db: Any) -> None:
    """The values are set on insert only: a stored copy holding others keeps them (and its
    number is not told to the counter again)."""
    HeldEverything._get_collection().insert_one(
        {"_id": json_util.loads(_held_json())["_id"], "note": "x", "number": 5, "code": 111111}
    )
    document = HeldEverything.from_json(_held_json(), json_options=json_util.RELAXED_JSON_OPTIONS)
    document.note = "y"
    document.save()
    (stored,) = raw(HeldEverything)
    assert {k: stored.get(k) for k in ("note", "number", "code", "ref")} == {
        "note": "y",
        "number": 5,
        "code": 111111,
        "ref": None,
    }
    assert HeldEverything(note="new").save().number == 1


_RELAXED = json_util.RELAXED_JSON_OPTIONS


def _json(document: dict[str, Any]) -> str:
    return json_util.dumps(document, json_options=_RELAXED)


class KeyImported(me.Document):
    id = SequenceField(primary_key=True)
    note = me.StringField()


class ReservedKeyImported(me.Document):
    id = RandomUniqueField(primary_key=True, digits=6, reserve_in="imported_keys")
    note = me.StringField()


def test_a_generated_key_the_upsert_inserted_is_told_to_its_field(mongoengine_db: Any) -> None:
    """Found by a probe: the key, which the upsert's filter holds (not ``$setOnInsert``), was
    never told: after importing keys 1 to 10, every new save() met a stored key until its
    retries ran out."""
    for number in range(1, 11):
        document = KeyImported.from_json(_json({"_id": number, "note": "x"}), json_options=_RELAXED)
        document.note = "imported"
        document.save()  # an upsert that inserts
    assert KeyImported(note="new").save().id == 11
    assert sorted(doc["_id"] for doc in raw(KeyImported)) == list(range(1, 12))

    document = ReservedKeyImported.from_json(
        _json({"_id": 123456, "note": "x"}), json_options=_RELAXED
    )
    document.note = "imported"
    document.save()
    assert [doc["_id"] for doc in mongoengine_db["imported_keys"].find()] == [123456]
    with pytest.raises(me.NotUniqueError, match="123456"):
        ReservedKeyImported(id=123456, note="again").save()
    assert [doc["note"] for doc in raw(ReservedKeyImported)] == ["imported"]


def test_a_generated_key_of_an_upsert_that_matched_is_not_told(mongoengine_db: Any) -> None:
    KeyImported._get_collection().insert_one({"_id": 5, "note": "stored"})
    document = KeyImported.from_json(_json({"_id": 5, "note": "x"}), json_options=_RELAXED)
    document.note = "changed"
    document.save()  # matches the stored copy: nothing inserted, nothing told
    assert raw(KeyImported) == [{"_id": 5, "note": "changed"}]
    assert KeyImported(note="new").save().id == 1


def test_a_loaded_document_whose_stored_copy_was_deleted_keeps_its_values(
    mongoengine_db: Any,
) -> None:
    original = HeldEverything(note="x").save()
    loaded = HeldEverything.objects.get(id=original.id)
    HeldEverything._get_collection().delete_many({})  # another process deletes it
    loaded.note = "y"
    loaded.save()  # MongoEngine's upsert brings it back
    (stored,) = raw(HeldEverything)
    assert stored["note"] == "y"
    assert (stored["number"], stored["code"]) == (original.number, original.code)
    assert stored["ref"] == Binary(original.ref.bytes, 4)


class HeldReserved(me.Document):
    note = me.StringField()
    code = RandomUniqueField(digits=6, reserve_in="held_reservations")
    number = SequenceField(allow_explicit=False)


def test_a_reserved_or_strict_value_brought_back_by_the_upsert_is_kept(
    mongoengine_db: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """Telling is for the field never to hand a value out again: a value reserved already (by
    the document before it was deleted) stays reserved; a counter that takes no explicit value
    is not told, which a warning says."""
    original = HeldReserved(note="x").save()
    loaded = HeldReserved.objects.get(id=original.id)
    HeldReserved._get_collection().delete_many({})
    loaded.note = "y"
    loaded.save()
    (stored,) = raw(HeldReserved)
    assert (stored["note"], stored["code"], stored["number"]) == ("y", original.code, 1)
    reservations = list(mongoengine_db["held_reservations"].find())
    assert [r["_id"] for r in reservations] == [original.code]
    assert "HeldReserved.number: 1 was stored by an upsert and not told" in caplog.text


def test_a_junk_value_held_is_refused_before_the_upsert(mongoengine_db: Any) -> None:
    document = HeldEverything.from_json(
        '{"_id": {"$oid": "65a000000000000000000003"}, "note": "x", "code": -7}',
        json_options=json_util.RELAXED_JSON_OPTIONS,
    )
    document.note = "y"
    with pytest.raises(me.ValidationError, match="-7"):
        document.save()
    # Checked even so (review P: probe BD had it skipped; a value its field refuses, inserted
    # if the document was deleted, is told to no field and made again).
    with pytest.raises(me.ValidationError, match=r"sets code=-7 on insert.*update_one"):
        document.save(validate=False)
    assert raw(HeldEverything) == []


class HeldInner(me.EmbeddedDocument):
    tag = me.StringField()
    serial = SequenceField(sequence_name="held_inner")


class HeldPart(me.EmbeddedDocument):
    label = me.StringField()
    code = UUID4Field()
    inner = me.EmbeddedDocumentField(HeldInner)


class HeldBox(me.Document):
    name = me.StringField()
    part = me.EmbeddedDocumentField(HeldPart)
    other = me.EmbeddedDocumentField(HeldPart)


def test_an_embedded_document_the_upsert_creates_by_a_path_keeps_its_values(
    mongoengine_db: Any,
) -> None:
    """A loaded document deleted since, changed inside an embedded document: MongoEngine's
    upsert creates that embedded document by its changed path; the generated values held in
    it (and in the one inside it) are set on insert; an embedded document the upsert does not
    create gets none of its own."""
    original = HeldBox(
        name="x",
        part=HeldPart(label="a", inner=HeldInner(tag="t")),
        other=HeldPart(label="o"),
    ).save()
    loaded = HeldBox.objects.get(id=original.id)
    HeldBox._get_collection().delete_many({})
    loaded.part.inner.tag = "u"
    loaded.save()
    (stored,) = raw(HeldBox)
    assert stored["part"] == {
        "code": Binary(original.part.code.bytes, 4),
        "inner": {"tag": "u", "serial": 1},
    }
    assert "other" not in stored
    assert HeldBox(part=HeldPart(inner=HeldInner())).save().part.inner.serial == 2


class ScaledPart(me.EmbeddedDocument):
    code = SequenceField(sequence_name="scaled_part")
    label = me.StringField()


class Scaled(me.Document):
    parts = me.ListField(me.EmbeddedDocumentField(ScaledPart))
    meta = {"collection": "scaled"}


@pytest.mark.parametrize("how", ["append", "reorder", "update"])
def test_a_list_written_whole_is_looked_up_once_not_once_per_item(
    mongoengine_db: Any, how: str
) -> None:
    """Probe AF: each of n items written again was looked for among the n stored ones (2.9 s
    to append one item to 2,000 on mongomock). The stored items are read once per write:
    counted by the walks over them, never timed. The numbers are kept, the new one made."""
    from mongoengine_ids.write import values

    n = 300
    stored = Scaled(parts=[ScaledPart(label=str(i)) for i in range(n)]).save()
    loaded = Scaled.objects.get(id=stored.id)
    with mock.patch.object(values, "holders_at", wraps=values.holders_at) as walked:
        if how == "append":
            loaded.parts.append(ScaledPart(label="new"))
            loaded.save()
        elif how == "reorder":
            loaded.parts = list(reversed(loaded.parts))
            loaded.save()
        else:
            Scaled.objects(id=stored.id).update(set__parts=list(reversed(loaded.parts)))
    assert walked.call_count <= 3 * (n + 2)  # one walk: the list, then each item (was ~n*n)
    codes = [part["code"] for part in mongoengine_db.scaled.find_one()["parts"]]
    expected = list(range(1, n + 1)) + ([n + 1] if how == "append" else [])
    assert sorted(codes) == expected


# -- a field the stored copy lacks, filled by save(): seen by post_save -----------------------


class Shelved(me.Document):
    meta = {"collection": "shelved"}
    name = me.StringField()
    code = UUID4Field()
    number = SequenceField()


class Basket(me.Document):
    meta = {"collection": "basket"}
    featured = me.CachedReferenceField(Shelved, fields=["name", "code", "number"])


def test_values_save_fills_are_changes_post_save_sees(mongoengine_db: Any) -> None:
    """Probe AV: the values save() gave the fields a stored copy lacked (field added later),
    written by a conditional update of their own, were not among the changes post_save
    handlers see (``_delta()``): a ``CachedReferenceField`` (a post_save handler) kept its
    cache without them."""
    seen: list[list[str]] = []

    def changes(sender: Any, document: Any, **kwargs: Any) -> None:
        seen.append(sorted(document._delta()[0]))

    shelved = Shelved(name="pen").save()
    Basket(featured=shelved).save()
    mongoengine_db.shelved.update_many({}, {"$unset": {"code": 1, "number": 1}})
    mongoengine_db.basket.update_many({}, {"$unset": {"featured.code": 1, "featured.number": 1}})
    me.signals.post_save.connect(changes, sender=Shelved)
    try:
        loaded = Shelved.objects.get(id=shelved.id)
        loaded.name = "pen 2"
        loaded.save()
    finally:
        me.signals.post_save.disconnect(changes, sender=Shelved)
    stored = mongoengine_db.shelved.find_one()
    assert seen == [["code", "name", "number"]]
    assert mongoengine_db.basket.find_one({}, {"_id": 0}) == {
        "featured": {
            "_id": shelved.id,
            "name": "pen 2",
            "code": stored["code"],
            "number": stored["number"],
        }
    }
    assert stored["number"] == 2  # the first number went with the unset copy
    assert Basket.objects(featured__number=loaded.number).count() == 1


# -- a cached copy of an embedded document with generated values: auto_sync ------------------


class Part(me.EmbeddedDocument):
    meta = {"allow_inheritance": True}  # stored with its _cls
    label = me.StringField()
    reserved = RandomUniqueField(length=8, reserve_in="cached_part_codes")
    strict = SequenceField(allow_explicit=False)


class PartOwner(me.Document):
    meta = {"collection": "part_owner"}
    name = me.StringField()
    part = me.EmbeddedDocumentField(Part)


class Pet(me.Document):
    meta = {"collection": "pet"}
    number = SequenceField()  # a model of the package's: its updates go through the write path
    owner = me.CachedReferenceField(PartOwner, fields=["name", "part"])


def test_auto_sync_of_a_cached_embedded_document_is_no_new_value(mongoengine_db: Any) -> None:
    """Probe BC: MongoEngine's ``auto_sync`` copies the owner's new embedded document into the
    cached references (``update(set__owner__part=<its stored dict>)``). The update path read
    that path as untyped, took the copy (its ``_cls``) for a new embedded document and claimed
    its values again: ``reserve_in`` refused the owner's own code as taken, a strict sequence
    its number as assigned, and the owner's ``save()`` raised after the owner was written, the
    cached copies left stale."""
    owner = PartOwner(name="a", part=Part(label="x")).save()
    Pet(owner=owner).save()
    reservations = mongoengine_db.cached_part_codes.count_documents({})
    owner.part = Part(label="y")
    owner.save()
    stored = mongoengine_db.part_owner.find_one()
    assert stored["part"]["label"] == "y"
    assert stored["part"]["strict"] == 2
    assert mongoengine_db.pet.find_one({}, {"_id": 0}) == {
        "number": 1,
        "owner": {"_id": owner.id, "name": "a", "part": stored["part"]},
    }
    # One more reservation, the owner's new code: the copy claimed nothing.
    assert mongoengine_db.cached_part_codes.count_documents({}) == reservations + 1
    assert mongoengine_db.cached_part_codes.find_one({"_id": stored["part"]["reserved"]})


class Shelter(me.Document):
    meta = {"allow_inheritance": True, "collection": "shelter"}
    name = me.StringField()


class CachedShelter(Shelter):
    owner = me.CachedReferenceField(PartOwner, fields=["name", "part"])


class PartBox(me.EmbeddedDocument):
    part = me.EmbeddedDocumentField(Part)


class BoxedShelter(Shelter):
    owner = me.EmbeddedDocumentField(PartBox)  # the same path, a document's own values


def test_a_path_cached_in_one_class_is_claimed_where_another_declares_it(
    mongoengine_db: Any,
) -> None:
    """Review P: a path into a cached copy in one subclass is a real embedded document in
    another: the values an update writes there are that class's own, told and reserved (the
    first fix read every class's path as a copy, and the next boxes got number 3 again)."""
    BoxedShelter(name="b", owner=PartBox(part=Part(label="first"))).save()
    BoxedShelter(name="c").save()
    Shelter.objects(name="b").update(set__owner__part={"label": "given", "reserved": "GAVE0000"})
    with pytest.raises(ExplicitValueError):
        Shelter.objects(name="b").update(__raw__={"$set": {"owner.part.strict": 3}})
    with pytest.raises(me.NotUniqueError, match="GAVE0000"):
        Shelter.objects(name="c").update(set__owner__part={"reserved": "GAVE0000"})
    parts = {d["name"]: d.get("owner", {}).get("part") for d in mongoengine_db.shelter.find()}
    assert parts["b"]["label"] == "given"
    assert parts["b"]["reserved"] == "GAVE0000"
    assert parts["c"] is None
    assert mongoengine_db.cached_part_codes.find_one({"_id": "GAVE0000"}) is not None
