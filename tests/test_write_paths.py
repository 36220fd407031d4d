"""The specified write path (``spec-write.md``), for every generated field kind: new documents
(``save()`` and bulk insert), primary-key collisions, partial loads, fields added to a model
later (``save()`` and ``backfill()``), a RandomUniqueField adopted by a populated collection,
``pre_save`` assignments, and reads that must never produce an id.

Every test checks the raw stored documents (and, where it matters, the counter documents of
``mongoengine.counters``), not only the Python attributes. Upserts are in
``test_write_upserts.py``; embedded documents and model shapes in ``test_write_models.py``.
"""

from __future__ import annotations

import copy
import itertools
import os
import pickle
import re
import uuid
from collections.abc import Callable
from typing import Any

import mongoengine as me
import pytest
from _faults import stamp_after_insert
from _write_support import (
    BY_NAME,
    COUNTERS,
    ROLES,
    Indexes,
    Kind,
    Numbers,
    by_kind,
    coded,
    coded_part,
    counters,
    distinct,
    document,
    field_of,
    first_locality,
    first_uuid7,
    frozen_locality,
    frozen_uuid7,
    is_object_id,
    model_for,
    raw_collection,
    raw_docs,
    raw_one,
)
from bson import ObjectId
from bson.json_util import RELAXED_JSON_OPTIONS
from mongoengine import signals
from mongoengine.errors import NotUniqueError
from mongoengine.queryset import QuerySet

from mongoengine_ids import (
    GeneratedField,
    LocalityUUIDField,
    RandomUniqueField,
    SequenceField,
    UUID4Field,
    UUID7Field,
)

by_role = pytest.mark.parametrize("role", ROLES)


# -- new documents: save() and bulk insert --------------------------------------------------------


@by_role
@by_kind
def test_save_generates_and_stores_the_values(mongoengine_db: Any, kind: Kind, role: str) -> None:
    Model = model_for(role, kind, "SavedItem", "saved_items")
    attr, key = field_of(role)
    first = Model(name="a").save()
    second = Model(name="b")
    second.save()

    docs = raw_docs(mongoengine_db.saved_items)
    assert [doc["name"] for doc in docs] == ["a", "b"]
    for doc, saved in zip(docs, [first, second], strict=True):
        assert set(doc) == {"_id", "name", key}
        kind.check(doc[key])
        assert doc[key] == kind.stored(getattr(saved, attr))
        if role == "plain":
            assert is_object_id(doc["_id"])
            assert doc["_id"] == saved.pk
    assert docs[0][key] != docs[1][key]
    assert kind.stored(getattr(Model.objects.get(name="b"), attr)) == docs[1][key]


@pytest.mark.parametrize("load_bulk", [True, False], ids=["load_bulk", "ids"])
@by_role
@by_kind
def test_bulk_insert_generates_and_stores_the_values(
    mongoengine_db: Any, kind: Kind, role: str, load_bulk: bool
) -> None:
    Model = model_for(role, kind, "BulkItem", "bulk_items")
    attr, key = field_of(role)
    docs = [Model(name=f"n{i}") for i in range(4)]
    result = Model.objects.insert(docs, load_bulk=load_bulk)

    stored = {doc["name"]: doc for doc in raw_docs(mongoengine_db.bulk_items)}
    assert sorted(stored) == ["n0", "n1", "n2", "n3"]
    for doc in docs:
        raw = stored[doc.name]
        assert set(raw) == {"_id", "name", key}
        kind.check(raw[key])
        assert raw[key] == kind.stored(getattr(doc, attr))
        assert raw["_id"] == kind.stored(doc.pk)
    assert distinct([raw[key] for raw in stored.values()])
    if load_bulk:
        assert [kind.stored(getattr(loaded, attr)) for loaded in result] == [
            stored[f"n{i}"][key] for i in range(4)
        ]
    else:
        assert [kind.stored(pk) for pk in result] == [stored[f"n{i}"]["_id"] for i in range(4)]


@pytest.mark.parametrize("via", ["save", "insert"])
@by_role
@by_kind
def test_assigned_values_are_kept(mongoengine_db: Any, kind: Kind, role: str, via: str) -> None:
    Model = model_for(role, kind, "AssignedItem", "assigned_items")
    attr, key = field_of(role)
    values = [kind.sample(), kind.sample()]
    docs = [
        Model(name="a", **{attr: values[0]}),
        Model(name="b"),
        Model(name="c", **{attr: values[1]}),
    ]
    write(via, Model, docs)

    stored = {doc["name"]: doc[key] for doc in raw_docs(mongoengine_db.assigned_items)}
    assert stored["a"] == kind.stored(values[0])
    assert stored["c"] == kind.stored(values[1])
    kind.check(stored["b"])
    assert distinct(list(stored.values()))
    assert [kind.stored(getattr(doc, attr)) for doc in docs] == [stored[n] for n in "abc"]


def write(via: str, model: type[me.Document], docs: list[me.Document]) -> None:
    """Write ``docs``: each with ``save()``, or all with one bulk ``insert()``."""
    if via == "save":
        for doc in docs:
            doc.save()
    else:
        model.objects.insert(docs)


def _predictable_key(kind: Kind, monkeypatch: pytest.MonkeyPatch) -> tuple[GeneratedField, Any]:
    """A primary-key field of ``kind`` and the first value it will generate (Python form)."""
    if kind.name == "sequence":
        # A new counter starts at 1. Retries off (a SequenceField retries a collision with a
        # fresh value by default): the collision is raised.
        sequence = SequenceField(primary_key=True)
        sequence.collision_retries = 0
        return sequence, 1
    if kind.name == "random":
        # Retries off: the collision is raised (with retries it is retried, tested below).
        field = RandomUniqueField(digits=12, primary_key=True, rng=Indexes(0), max_retries=0)
        return field, 10**11
    if kind.name == "locality":
        return LocalityUUIDField(primary_key=True, generator=frozen_locality()), first_locality()
    if kind.name == "uuid7":
        return UUID7Field(primary_key=True, generator=frozen_uuid7()), first_uuid7()
    assert kind.name == "uuid4"
    first = uuid.uuid4()
    scripted = [first.bytes]
    return UUID4Field(
        primary_key=True, random_bytes=lambda n: scripted.pop() if scripted else os.urandom(n)
    ), first


@pytest.mark.parametrize("via", ["save", "insert"])
@by_kind
def test_a_generated_key_is_inserted_never_replacing_a_stored_document(
    mongoengine_db: Any, monkeypatch: pytest.MonkeyPatch, kind: Kind, via: str
) -> None:
    field, taken = _predictable_key(kind, monkeypatch)
    Model = document("Clash", "clashes", id=field, name=me.StringField())
    existing = {"_id": kind.stored(taken), "name": "existing", "extra": "untouched"}
    mongoengine_db.clashes.insert_one(dict(existing))

    doc = Model(name="new")
    with pytest.raises(NotUniqueError):
        write(via, Model, [doc])
    assert raw_docs(mongoengine_db.clashes) == [existing]
    # Nothing was written: the document is as before the call, and can be written again.
    assert doc.pk is None
    write(via, Model, [doc])
    docs = raw_docs(mongoengine_db.clashes)
    assert docs[0] == existing
    assert [d["name"] for d in docs] == ["existing", "new"]
    kind.check(docs[1]["_id"])
    assert docs[1]["_id"] == kind.stored(doc.pk) != kind.stored(taken)


@pytest.mark.parametrize("via", ["save", "insert"])
@by_role
def test_random_collisions_are_retried_with_a_fresh_value(
    mongoengine_db: Any, role: str, via: str
) -> None:
    attr, key = field_of(role)
    taken = 10**11  # index 0, the first draw
    mongoengine_db.retried.insert_one({key: taken, "name": "existing"})
    options: dict[str, Any] = {"primary_key": True} if role == "pk" else {}
    Model = document(
        "Retried",
        "retried",
        name=me.StringField(),
        **{attr: RandomUniqueField(digits=12, rng=Indexes(0), **options)},
    )
    docs = [Model(name="new"), Model(name="newer")]
    write(via, Model, docs)

    stored = {doc["name"]: doc[key] for doc in raw_docs(mongoengine_db.retried)}
    assert stored["existing"] == taken
    assert set(stored) == {"existing", "new", "newer"}
    assert distinct(list(stored.values()))
    for doc in docs:
        assert stored[doc.name] == getattr(doc, attr)
        assert 10**11 < stored[doc.name] < 10**12


# -- partial loads --------------------------------------------------------------------------------

PROJECTIONS: dict[str, Callable[[QuerySet], QuerySet]] = {
    "only": lambda queryset: queryset.only("name"),
    "only_two": lambda queryset: queryset.only("name", "note"),
    "exclude": lambda queryset: queryset.exclude("code"),
    "fields_include": lambda queryset: queryset.fields(name=1),
    "fields_exclude": lambda queryset: queryset.fields(code=0),
}


@pytest.mark.parametrize("change", [True, False], ids=["changed", "unchanged"])
@pytest.mark.parametrize("projection", list(PROJECTIONS))
@by_kind
def test_a_partially_loaded_document_keeps_its_stored_values(
    mongoengine_db: Any, kind: Kind, projection: str, change: bool
) -> None:
    Model = document(
        "Partial",
        "partials",
        id=kind.make(primary_key=True),
        name=me.StringField(),
        note=me.StringField(),
        code=kind.make(),
    )
    saved = Model(name="a", note="n").save()
    before = raw_one(mongoengine_db.partials)
    kind.check(before["code"])
    counters_before = counters(mongoengine_db)

    loaded = PROJECTIONS[projection](Model.objects).get(id=saved.id)
    assert loaded.code is None  # not loaded
    if change:
        loaded.name = "changed"
    loaded.save()

    expected = {**before, "name": "changed"} if change else before
    assert raw_one(mongoengine_db.partials) == expected
    # Not regenerated: no counter moved, and the document holds no new value.
    assert counters(mongoengine_db) == counters_before
    assert loaded.code is None or kind.stored(loaded.code) == before["code"]
    # A second save changes nothing either.
    loaded.save()
    assert raw_one(mongoengine_db.partials) == expected
    assert counters(mongoengine_db) == counters_before


EMBEDDED_PROJECTIONS: dict[str, Callable[[QuerySet], QuerySet]] = {
    "only": lambda queryset: queryset.only("name", "parts.label", "part.label"),
    "exclude": lambda queryset: queryset.exclude("parts.code", "part.code"),
    "fields": lambda queryset: queryset.fields(parts__code=0, part__code=0),
}


@pytest.mark.parametrize("projection", list(EMBEDDED_PROJECTIONS))
@by_kind
def test_an_embedded_value_left_out_by_a_projection_is_never_cleared(
    mongoengine_db: Any, kind: Kind, projection: str
) -> None:
    """A projection leaving out the generated field of embedded documents: a change by path
    keeps the stored values; a save that writes such an embedded document whole (an append
    makes MongoEngine write the list whole) is refused, since it would clear them; reloaded,
    it saves. (It cleared them.)"""
    Part = coded_part(kind, "PartialPart", "partial_codes")
    Model = document(
        "PartialParts",
        "partial_parts",
        name=me.StringField(),
        parts=me.ListField(me.EmbeddedDocumentField(Part)),
        part=me.EmbeddedDocumentField(Part),
    )
    saved = Model(name="a", parts=[Part(label="x"), Part(label="y")], part=Part(label="z")).save()
    before = raw_one(mongoengine_db.partial_parts)
    counters_before = counters(mongoengine_db)

    loaded = EMBEDDED_PROJECTIONS[projection](Model.objects).get(id=saved.id)
    assert [p.code for p in loaded.parts] == [None, None]
    loaded.parts[1].label = "w"
    loaded.part.label = "v"
    loaded.save()
    before["parts"][1]["label"], before["part"]["label"] = "w", "v"
    assert raw_one(mongoengine_db.partial_parts) == before

    # A copy (copy, deepcopy, pickle: MongoEngine makes its embedded documents anew) knows
    # what was left out of them as well (it did not: its save cleared the stored values).
    for change, copied in itertools.product(
        (
            lambda doc: doc.parts.append(Part(label="new")),
            lambda doc: setattr(doc, "part", doc.parts[0]),
        ),
        (lambda doc: doc, copy.copy, copy.deepcopy),
    ):
        loaded = copied(EMBEDDED_PROJECTIONS[projection](Model.objects).get(id=saved.id))
        change(loaded)
        with pytest.raises(me.errors.OperationError, match=r"was not loaded.*whole"):
            loaded.save()
        assert raw_one(mongoengine_db.partial_parts) == before
        assert counters(mongoengine_db) == counters_before

    # One embedded document copied on its own (second review: its copy, built anew from its
    # data, lost the record, and the save cleared the stored value).
    for copied in (copy.copy, copy.deepcopy):
        loaded = EMBEDDED_PROJECTIONS[projection](Model.objects).get(id=saved.id)
        loaded.parts[0] = copied(loaded.parts[0])
        loaded.parts[0].label = "changed"
        with pytest.raises(me.errors.OperationError, match=r"was not loaded.*whole"):
            loaded.save()
        assert raw_one(mongoengine_db.partial_parts) == before

    loaded.reload()
    loaded.parts.append(Part(label="new"))
    loaded.save()
    stored = raw_one(mongoengine_db.partial_parts)
    assert stored["parts"][:2] == before["parts"]
    kind.check(stored["parts"][2]["code"])


MAP_PROJECTIONS: dict[str, Callable[[QuerySet], QuerySet]] = {
    "only": lambda queryset: queryset.only("name", "parts.a.label", "parts.b", "lists.k.label"),
    "exclude": lambda queryset: queryset.exclude("parts.a.code", "lists.k.code"),
    "fields": lambda queryset: queryset.fields(parts__a__code=0, lists__k__code=0),
}


@pytest.mark.parametrize("projection", list(MAP_PROJECTIONS))
@by_kind
def test_a_projection_naming_a_map_key_is_kept_on_save(
    mongoengine_db: Any, kind: Kind, projection: str
) -> None:
    """A projection names a map's entries by key (``parts.a.code``, unlike a list's items): a
    save that makes MongoEngine write the map (or a list in it) whole is refused, as for a
    list, since it would clear the values left out. (It cleared them.)"""
    Part = coded_part(kind, "MapPart", "map_codes")
    Model = document(
        "MapParts",
        "map_parts",
        name=me.StringField(),
        parts=me.MapField(me.EmbeddedDocumentField(Part)),
        lists=me.MapField(me.ListField(me.EmbeddedDocumentField(Part))),
    )
    saved = Model(
        name="a", parts={"a": Part(label="x"), "b": Part(label="y")}, lists={"k": [Part(label="z")]}
    ).save()
    before = raw_one(mongoengine_db.map_parts)
    for change in (
        lambda doc: doc.parts.pop("b"),
        lambda doc: doc.lists["k"].append(Part(label="new")),
    ):
        loaded = MAP_PROJECTIONS[projection](Model.objects).get(id=saved.id)
        assert loaded.parts["a"].code is None
        change(loaded)
        with pytest.raises(me.errors.OperationError, match=r"was not loaded.*whole"):
            loaded.save()
        assert raw_one(mongoengine_db.map_parts) == before
    loaded = MAP_PROJECTIONS[projection](Model.objects).get(id=saved.id)
    loaded.parts["a"].label = "w"  # a path inside the entry: written alone
    loaded.save()
    before["parts"]["a"]["label"] = "w"
    assert raw_one(mongoengine_db.map_parts) == before


INSIDE_PROJECTIONS: dict[str, Callable[[QuerySet], QuerySet]] = {
    "only": lambda queryset: queryset.only("name", "holders.label"),
    "exclude": lambda queryset: queryset.exclude("holders.parts", "holders.part"),
    "fields": lambda queryset: queryset.fields(holders__parts=0, holders__part=0),
}


@pytest.mark.parametrize("projection", list(INSIDE_PROJECTIONS))
@by_kind
def test_a_container_left_out_inside_loaded_items_is_never_cleared(
    mongoengine_db: Any, kind: Kind, projection: str
) -> None:
    """Probe Q: a projection leaving out, inside the items of a list, a list or an embedded
    document holding generated values (``only("holders.label")``): loaded as ``[]`` and
    None, nothing held a record of them, and an append (MongoEngine writes the list whole)
    cleared the stored values. Refused now; a change by path, or a field the user set again
    (theirs to replace), is written."""
    Part = coded_part(kind, "InsidePart", "inside_codes")
    Holder = type(
        "InsideHolder",
        (me.EmbeddedDocument,),
        {
            "__module__": __name__,
            "label": me.StringField(),
            "parts": me.ListField(me.EmbeddedDocumentField(Part)),
            "part": me.EmbeddedDocumentField(Part),
        },
    )
    Model = document(
        "InsideHolders",
        "inside_holders",
        name=me.StringField(),
        holders=me.ListField(me.EmbeddedDocumentField(Holder)),
    )
    saved = Model(
        name="a", holders=[Holder(label="h", parts=[Part(label="x")], part=Part(label="y"))]
    ).save()
    before = raw_one(mongoengine_db.inside_holders)
    counters_before = counters(mongoengine_db)

    for copied in (lambda doc: doc, copy.copy, copy.deepcopy):
        loaded = copied(INSIDE_PROJECTIONS[projection](Model.objects).get(id=saved.id))
        assert (loaded.holders[0].parts, loaded.holders[0].part) == ([], None)
        loaded.holders.append(Holder(label="new"))
        with pytest.raises(me.errors.OperationError, match=r"InsideHolder\.part.*not loaded"):
            loaded.save()
        assert raw_one(mongoengine_db.inside_holders) == before
        assert counters(mongoengine_db) == counters_before

    loaded = INSIDE_PROJECTIONS[projection](Model.objects).get(id=saved.id)
    loaded.holders[0].label = "w"  # by its path: the rest of the item is kept
    loaded.save()
    before["holders"][0]["label"] = "w"
    assert raw_one(mongoengine_db.inside_holders) == before

    loaded = INSIDE_PROJECTIONS[projection](Model.objects).get(id=saved.id)
    loaded.holders[0].parts = [Part(label="again")]  # set again: the user's to replace
    loaded.holders[0].part = Part(label="again")
    loaded.holders.append(Holder(label="new"))
    loaded.save()
    stored = raw_one(mongoengine_db.inside_holders)["holders"]
    assert [h["label"] for h in stored] == ["w", "new"]
    assert stored[0]["parts"][0]["label"] == stored[0]["part"]["label"] == "again"
    made = [stored[0]["parts"][0]["code"], stored[0]["part"]["code"]]
    for value in made:
        kind.check(value)
    held = [before["holders"][0]["parts"][0]["code"], before["holders"][0]["part"]["code"]]
    assert len(set(map(repr, made + held))) == 4  # new values, none handed out again

    # Review: set, it is the user's from that save on (a later whole write was refused).
    loaded.holders.append(Holder(label="later"))
    loaded.save()
    assert [h["label"] for h in raw_one(mongoengine_db.inside_holders)["holders"]] == [
        "w",
        "new",
        "later",
    ]


@by_kind
def test_a_document_loaded_without_its_generated_key_is_not_saved_as_a_copy(
    mongoengine_db: Any, kind: Kind
) -> None:
    """Review AQ: loaded with exclude("id") and saved, it was inserted again under a new key;
    refused now (a key set to None inserts a copy, as documented)."""
    Model = document("NoKey", "no_keys", id=kind.make(primary_key=True), name=me.StringField())
    Model(name="a").save()
    before = raw_docs(mongoengine_db.no_keys)
    counters_before = counters(mongoengine_db)
    for projection in (lambda q: q.exclude("id"), lambda q: q.only("name").exclude("id")):
        loaded = projection(Model.objects).get()
        loaded.name = "b"
        with pytest.raises(me.errors.OperationError, match=r"without its key"):
            loaded.save()
        assert raw_docs(mongoengine_db.no_keys) == before
        assert counters(mongoengine_db) == counters_before
    loaded.pk = None
    loaded.save()
    stored = raw_docs(mongoengine_db.no_keys)
    assert [doc["name"] for doc in stored] == ["a", "b"]
    assert stored[0]["_id"] != stored[1]["_id"]


def test_an_embedded_number_left_out_by_a_projection_cannot_change_scope(
    mongoengine_db: Any,
) -> None:
    """A loaded embedded document whose scoped number a projection left out, moved to
    another scope: refused (its number was kept, and the new scope's counter handed it out
    again)."""
    Line = type(
        "PartialLine",
        (me.EmbeddedDocument,),
        {
            "__module__": __name__,
            "kind": me.StringField(),
            "no": SequenceField(sequence_name="partial_line", scope="kind"),
        },
    )
    Model = document(
        "PartialLines",
        "partial_lines",
        lines=me.ListField(me.EmbeddedDocumentField(Line)),
        line=me.EmbeddedDocumentField(Line),
    )
    doc = Model(lines=[Line(kind="a"), Line(kind="a")], line=Line(kind="a")).save()
    before = raw_one(mongoengine_db.partial_lines)
    for path, move in (
        ("lines.kind", lambda loaded: setattr(loaded.lines[1], "kind", "b")),
        ("line.kind", lambda loaded: setattr(loaded.line, "kind", "b")),
    ):
        loaded = Model.objects.only(path).get(id=doc.id)
        move(loaded)
        with pytest.raises(me.errors.OperationError, match=r"was not loaded.*numbered by"):
            loaded.save()
    assert raw_one(mongoengine_db.partial_lines) == before
    loaded = Model.objects.get(id=doc.id)
    loaded.lines[1].kind = "b"
    loaded.save()
    assert Model(lines=[Line(kind="b")]).save().lines[0].no == 3


@by_kind
def test_a_partially_loaded_document_of_a_collection_with_several_documents(
    mongoengine_db: Any, kind: Kind
) -> None:
    Model = coded(kind, "PartialMany", "partial_many", note=me.StringField())
    Model.objects.insert([Model(name=f"n{i}", note="x") for i in range(3)])
    before = raw_docs(mongoengine_db.partial_many)
    counters_before = counters(mongoengine_db)

    for loaded in Model.objects.only("note"):
        loaded.note = "y"
        loaded.save()
    assert raw_docs(mongoengine_db.partial_many) == [{**doc, "note": "y"} for doc in before]
    assert counters(mongoengine_db) == counters_before


@by_kind
def test_a_partially_loaded_document_lacking_the_field_is_not_filled(
    mongoengine_db: Any, kind: Kind
) -> None:
    # Stored without the field, loaded without it: the field was not loaded, so it is not
    # written (the full load of the next section fills it).
    mongoengine_db.partial_legacy.insert_one({"name": "a", "note": "n"})
    Model = coded(kind, "PartialLegacy", "partial_legacy", note=me.StringField())
    before = raw_one(mongoengine_db.partial_legacy)

    loaded = Model.objects.only("note").get()
    loaded.note = "m"
    loaded.save()
    assert raw_one(mongoengine_db.partial_legacy) == {**before, "note": "m"}
    assert counters(mongoengine_db) == []


RELOADS: dict[str, Callable[[Any], Any]] = {
    "reload()": lambda doc: doc.reload(),
    "reload(code)": lambda doc: doc.reload("code"),
    "modify()": lambda doc: doc.modify(set__note="m"),
}


@pytest.mark.parametrize("how", list(RELOADS))
@by_kind
def test_a_partially_loaded_document_reloaded_is_loaded(
    mongoengine_db: Any, kind: Kind, how: str
) -> None:
    # reload() and modify() load the fields a projection left out: the document is then
    # fully loaded, and its stored copy lacking the field gets a value on save().
    mongoengine_db.partial_reloaded.insert_one({"name": "a", "note": "n"})
    Model = coded(kind, "PartialReloaded", "partial_reloaded", note=me.StringField())
    loaded = Model.objects.only("name").get()
    RELOADS[how](loaded)
    loaded.name = "b"
    loaded.save()
    stored = raw_one(mongoengine_db.partial_reloaded)
    kind.check(stored["code"])
    assert kind.stored(loaded.code) == stored["code"]
    assert {k: v for k, v in stored.items() if k not in ("_id", "code")} == {
        "name": "b",
        "note": "m" if how == "modify()" else "n",
    }


@by_kind
def test_a_partially_loaded_document_reloaded_in_part_is_loaded_in_part(
    mongoengine_db: Any, kind: Kind
) -> None:
    # reload("note") loads note only: code is still a field the projection left out.
    mongoengine_db.partial_half.insert_one({"name": "a", "note": "n"})
    Model = coded(kind, "PartialHalf", "partial_half", note=me.StringField())
    loaded = Model.objects.only("name").get()
    loaded.reload("note")
    loaded.name = "b"
    loaded.save()
    assert {k: v for k, v in raw_one(mongoengine_db.partial_half).items() if k != "_id"} == {
        "name": "b",
        "note": "n",
    }
    assert counters(mongoengine_db) == []


COPIES: dict[str, Callable[[Any], Any]] = {
    "pickle": lambda doc: pickle.loads(pickle.dumps(doc)),
    "copy": copy.copy,
    "deepcopy": copy.deepcopy,
}


@pytest.mark.parametrize("how", list(COPIES))
@by_kind
def test_a_copy_of_a_partially_loaded_document_keeps_its_stored_values(
    mongoengine_db: Any, kind: Kind, how: str
) -> None:
    Model = READ_MODELS[kind.name]  # module-level, for pickle
    collection = mongoengine_db[Model._meta["collection"]]
    saved = Model(name="a").save()
    before = raw_one(collection)
    counters_before = counters(mongoengine_db)

    copied = COPIES[how](Model.objects.only("name").get(id=saved.id))
    assert copied.code is None
    copied.name = "b"
    copied.save()
    assert raw_one(collection) == {**before, "name": "b"}
    assert counters(mongoengine_db) == counters_before  # "code" was not drawn again


@pytest.mark.parametrize("how", ["clone", "elsewhere", "insert"])
@by_kind
def test_a_partially_loaded_document_inserted_as_new_gets_new_values(
    mongoengine_db: Any, kind: Kind, how: str
) -> None:
    # A new document (a clone: pk = None; a copy inserted into another collection): its empty
    # generated fields get values, as MongoEngine's own SequenceField gives them; the stored
    # original is untouched.
    Model = coded(kind, "PartialCloned", "partial_cloned", tag=me.StringField(unique=True))
    saved = Model(name="a", tag="t0").save()
    before = raw_one(mongoengine_db.partial_cloned, {"_id": saved.pk})

    made = []
    tags = (1,) if how == "elsewhere" else (1, 2)  # elsewhere, a second copy replaces the first
    for n in tags:
        loaded = Model.objects.only("name", "tag").get(id=saved.pk)
        loaded.tag = f"t{n}"
        if how == "elsewhere":
            loaded.switch_collection("partial_cloned_archive", keep_created=False)
            loaded.save()
        else:
            loaded.pk = None
            if how == "clone":
                loaded.save()
            else:
                Model.objects.insert([loaded])
        made.append(loaded)

    assert raw_one(mongoengine_db.partial_cloned, {"_id": saved.pk}) == before
    target = "partial_cloned_archive" if how == "elsewhere" else "partial_cloned"
    stored = {doc["tag"]: doc for doc in raw_docs(mongoengine_db[target])}
    codes = [stored[f"t{n}"]["code"] for n in tags]
    for code in codes:
        kind.check(code)
    assert len({before["code"], *codes}) == 1 + len(tags)
    assert [kind.stored(doc.code) for doc in made] == codes


# -- a field added to the model later -------------------------------------------------------------


@pytest.mark.parametrize("change", [True, False], ids=["changed", "unchanged"])
@by_kind
def test_a_stored_document_without_the_field_gets_it_on_save(
    mongoengine_db: Any, kind: Kind, change: bool
) -> None:
    collection = mongoengine_db.grown
    collection.insert_many([{"name": "a"}, {"name": "b"}])
    Model = coded(kind, "Grown", "grown")

    loaded = Model.objects.get(name="a")
    assert loaded.code is None
    if change:
        loaded.name = "a2"
    loaded.save()

    filled = raw_one(collection, {"_id": loaded.pk})
    assert set(filled) == {"_id", "name", "code"}
    assert filled["name"] == ("a2" if change else "a")
    kind.check(filled["code"])
    assert filled["code"] == kind.stored(loaded.code)
    assert "code" not in raw_one(collection, {"name": "b"})
    # Later saves keep it.
    loaded.name = "a3"
    loaded.save()
    assert raw_one(collection, {"_id": loaded.pk}) == {**filled, "name": "a3"}


@pytest.mark.parametrize("change", [True, False], ids=["changed", "unchanged"])
@by_kind
def test_a_value_stored_by_another_writer_between_load_and_save_wins(
    mongoengine_db: Any, kind: Kind, change: bool
) -> None:
    collection = mongoengine_db.raced
    collection.insert_many([{"name": "a"}, {"name": "b"}])
    Model = coded(kind, "Raced", "raced")

    loaded = Model.objects.get(name="a")
    assert loaded.code is None
    theirs = kind.sample()
    collection.update_one({"_id": loaded.pk}, {"$set": {"code": kind.stored(theirs)}})
    if change:
        loaded.name = "a2"
    loaded.save()

    assert raw_one(collection, {"_id": loaded.pk}) == {
        "_id": loaded.pk,
        "name": "a2" if change else "a",
        "code": kind.stored(theirs),
    }
    assert kind.stored(loaded.code) == kind.stored(theirs)
    assert "code" not in raw_one(collection, {"name": "b"})


def _legacy(database: Any, collection: str, count: int, **extra: Any) -> list[Any]:
    """Insert ``count`` raw documents named n0, n1... lacking the generated fields."""
    docs = [{"name": f"n{i}", **extra} for i in range(count)]
    database[collection].insert_many(docs)
    return [doc["_id"] for doc in docs]


@by_kind
def test_backfill_fills_every_missing_value_and_is_resumable(
    mongoengine_db: Any, kind: Kind
) -> None:
    from mongoengine_ids import backfill

    collection = mongoengine_db.backfilled
    _legacy(mongoengine_db, "backfilled", 5)
    existing = kind.stored(kind.sample())
    collection.insert_one({"name": "has", "code": existing})
    Model = coded(kind, "Backfilled", "backfilled")

    assert backfill(Model) == 5
    docs = raw_docs(collection)
    assert [doc["name"] for doc in docs] == ["n0", "n1", "n2", "n3", "n4", "has"]
    assert docs[5]["code"] == existing
    for doc in docs[:5]:
        assert set(doc) == {"_id", "name", "code"}
        kind.check(doc["code"])
    assert distinct([doc["code"] for doc in docs])
    # Nothing left to fill: a second run writes nothing.
    assert backfill(Model) == 0
    assert raw_docs(collection) == docs
    # The documents load with their values.
    assert sorted(kind.stored(doc.code) for doc in Model.objects) == sorted(
        doc["code"] for doc in docs
    )


@pytest.mark.parametrize("batch_size", [1, 2, 5, 1000])
@by_kind
def test_backfill_in_batches(mongoengine_db: Any, kind: Kind, batch_size: int) -> None:
    from mongoengine_ids import backfill

    _legacy(mongoengine_db, "batched", 5)
    Model = coded(kind, "Batched", "batched")
    assert backfill(Model, batch_size=batch_size) == 5
    docs = raw_docs(mongoengine_db.batched)
    for doc in docs:
        kind.check(doc["code"])
    assert distinct([doc["code"] for doc in docs])
    assert backfill(Model, batch_size=batch_size) == 0


@by_kind
def test_backfill_of_named_fields_only(mongoengine_db: Any, kind: Kind) -> None:
    from mongoengine_ids import backfill

    _legacy(mongoengine_db, "two_fields", 3)
    Model = coded(kind, "TwoFields", "two_fields", ref=kind.make())

    assert backfill(Model, "code") == 3
    docs = raw_docs(mongoengine_db.two_fields)
    assert all("ref" not in doc for doc in docs)
    for doc in docs:
        kind.check(doc["code"])
    assert backfill(Model, "code") == 0
    assert backfill(Model) == 3
    after = raw_docs(mongoengine_db.two_fields)
    assert [doc["code"] for doc in after] == [doc["code"] for doc in docs]
    for doc in after:
        kind.check(doc["ref"])
    assert distinct([doc["ref"] for doc in after])
    assert backfill(Model, "code", "ref") == 0


class BackfilledAnimal(me.Document):
    name = me.StringField()
    meta = {"allow_inheritance": True, "collection": "backfilled_animals"}


class BackfilledDog(BackfilledAnimal):
    tag = SequenceField(sequence_name="backfilled_dog")


class BackfilledPuppy(BackfilledDog):
    pass


def test_backfill_of_a_subclass_fills_its_own_documents_only(mongoengine_db: Any) -> None:
    from mongoengine_ids import backfill

    collection = mongoengine_db.backfilled_animals
    collection.insert_many(
        [
            {"_cls": "BackfilledAnimal", "name": "generic"},
            {"_cls": "BackfilledAnimal.BackfilledDog", "name": "rex"},
            {"_cls": "BackfilledAnimal.BackfilledDog.BackfilledPuppy", "name": "bit"},
        ]
    )
    assert backfill(BackfilledDog) == 2  # a dog and a puppy, as BackfilledDog.objects finds
    assert {doc["name"]: doc.get("tag") for doc in raw_docs(collection)} == {
        "generic": None,
        "rex": 1,
        "bit": 2,
    }
    assert backfill(BackfilledPuppy) == 0


def test_backfill_asks_for_at_most_batch_size_values_at_a_time(mongoengine_db: Any) -> None:
    from mongoengine_ids import backfill

    field = Numbers()
    _legacy(mongoengine_db, "counted", 5)
    Model = document("Counted", "counted", name=me.StringField(), number=field)

    assert backfill(Model, batch_size=2) == 5
    assert sum(field.counts) == 5
    assert max(field.counts) <= 2
    assert sorted(doc["number"] for doc in raw_docs(mongoengine_db.counted)) == [1, 2, 3, 4, 5]


@pytest.mark.parametrize("batch_size", [1, 2, 1000])
def test_backfill_fills_documents_of_every_key_type(mongoengine_db: Any, batch_size: int) -> None:
    # Batches read on from the last _id of the one before (by the _id index: probe AJ found
    # every batch reading again from the start, past every document filled); keys of another
    # BSON type, which $gt does not reach, are found by the pass from the start that ends it.
    from mongoengine_ids import backfill

    keys: list[Any] = [7, 3, "b", "a", ObjectId(), 5.5, uuid.UUID(int=9).hex]
    mongoengine_db.mixed_keys.insert_many([{"_id": key, "name": str(key)} for key in keys])
    Model = document("MixedKeys", "mixed_keys", name=me.StringField(), number=Numbers())
    assert backfill(Model, batch_size=batch_size) == len(keys)
    numbers = {doc["_id"]: doc["number"] for doc in raw_docs(mongoengine_db.mixed_keys)}
    assert set(numbers) == set(keys)
    assert sorted(numbers.values()) == list(range(1, len(keys) + 1))
    assert backfill(Model, batch_size=batch_size) == 0


def test_backfill_resumes_after_an_interruption(mongoengine_db: Any) -> None:
    from mongoengine_ids import backfill

    field = Numbers()
    field.fail_beyond = 2  # the first batch of 2 gets its values; the second fails
    _legacy(mongoengine_db, "resumed", 5)
    Model = document("Resumed", "resumed", name=me.StringField(), number=field)

    with pytest.raises(RuntimeError, match="interrupted"):
        backfill(Model, batch_size=2)
    first = {
        doc["name"]: doc["number"] for doc in raw_docs(mongoengine_db.resumed) if "number" in doc
    }
    assert sorted(first.values()) == [1, 2]

    field.fail_beyond = None
    assert backfill(Model, batch_size=2) == 3
    after = {doc["name"]: doc["number"] for doc in raw_docs(mongoengine_db.resumed)}
    assert len(after) == 5
    assert {name: after[name] for name in first} == first  # the first batch's values are kept
    assert sorted(after.values()) == [1, 2, 3, 4, 5]
    assert backfill(Model, batch_size=2) == 0


@pytest.mark.parametrize("fault", ["lost", "refused"])
def test_an_interrupted_backfill_releases_the_values_of_its_batch_not_sent(fault: str) -> None:
    """The batch's values are made at once; the writes left unsent when one fails give theirs
    back (found by probe E: their reservations stayed, held by no document). The failed write's
    own is kept if its outcome is unknown."""
    import pymongo.errors

    from mongoengine_ids import backfill
    from mongoengine_ids.testing import connected_threadsafe

    class Backfilled(me.Document):
        meta = {"collection": "backfilled"}
        name = me.StringField()
        code = RandomUniqueField(digits=6, reserve_in="backfilled_codes")

    calls = []

    def fail_fifth_fill(collection: str, method: str, call: Callable[[], Any]) -> Any:
        if collection == "backfilled" and method == "update_one":
            calls.append(method)
            if len(calls) == 5:
                if fault == "lost":
                    raise pymongo.errors.AutoReconnect("injected before the 5th fill")
                raise pymongo.errors.OperationFailure("injected: not applied", code=10107)
        return call()

    with connected_threadsafe(hook=fail_fifth_fill) as connect:
        db = connect()
        db.backfilled.insert_many([{"name": f"n{i}"} for i in range(20)])
        with pytest.raises(pymongo.errors.PyMongoError, match="injected"):
            backfill(Backfilled, batch_size=10)
        held = sorted(doc["code"] for doc in db.backfilled.find({"code": {"$ne": None}}))
        reserved = sorted(doc["_id"] for doc in db.backfilled_codes.find())
        assert len(held) == 4
        # A lost reply keeps the fifth value reserved (its write may land); a refusal frees it.
        assert len(reserved) == (5 if fault == "lost" else 4)
        assert set(held) <= set(reserved)

        assert backfill(Backfilled, batch_size=10) == 16
        held = sorted(doc["code"] for doc in db.backfilled.find())
        reserved = sorted(doc["_id"] for doc in db.backfilled_codes.find())
        assert len(held) == 20
        assert len(set(held)) == 20
        assert set(held) <= set(reserved)
        assert len(reserved) == (21 if fault == "lost" else 20)


def test_backfill_never_replaces_a_value_another_writer_stored_meanwhile(
    mongoengine_db: Any,
) -> None:
    from mongoengine_ids import backfill

    field = Numbers()
    ids = _legacy(mongoengine_db, "contended", 5)
    Model = document("Contended", "contended", name=me.StringField(), number=field)
    # While the first values are being made, another process fills in the last document.
    field.before = lambda: mongoengine_db.contended.update_one(
        {"_id": ids[4]}, {"$set": {"number": 999}}
    )

    assert backfill(Model, batch_size=2) == 4
    stored = {doc["name"]: doc["number"] for doc in raw_docs(mongoengine_db.contended)}
    assert stored["n4"] == 999
    assert len(stored) == 5
    assert distinct(list(stored.values()))
    assert backfill(Model, batch_size=2) == 0


class ScopeMoved(me.Document):
    cat = me.StringField()
    no = SequenceField(scope="cat")
    note = me.StringField()
    meta = {"collection": "scope_moved"}


def test_a_number_filled_in_is_never_stored_in_a_scope_it_was_not_made_in() -> None:
    """Probe BS-1: moved to scope B by another writer between backfill()'s read and its write
    (or save()'s load and its fill), a document got scope A's next number, which B's counter
    was never told and handed out again."""
    from mongoengine_ids import backfill
    from mongoengine_ids.testing import connected_threadsafe

    moved: list[Any] = []

    def hook(collection: str, method: str, call: Any) -> Any:
        sent = call.args[0] if call.args else {}
        if collection == "scope_moved" and method == "update_one" and "no" in sent and not moved:
            moved.append(sent["_id"])  # another process moves it just before the fill lands
            ScopeMoved.objects(id=sent["_id"]).update(set__cat="B")
        return call()

    with connected_threadsafe(hook=hook) as connect:
        db = connect()
        for _ in range(3):
            ScopeMoved(cat="A").save()
        legacy = db.scope_moved.insert_one({"cat": "A"}).inserted_id
        assert backfill(ScopeMoved) == 1  # read again in B, numbered there
        assert moved == [legacy]
        later = db.scope_moved.insert_one({"cat": "A"}).inserted_id
        loaded = ScopeMoved.objects.get(id=later)
        db.scope_moved.update_one({"_id": later}, {"$set": {"cat": "B"}})
        loaded.note = "x"
        loaded.save()  # its fill finds the scope moved: nothing stored, none made
        assert loaded.no is None
        new = [ScopeMoved(cat=cat).save().no for cat in "ABB"]
        stored = sorted((doc["cat"], doc.get("no", 0)) for doc in db.scope_moved.find())
    # A's number made for the moved ones is spent (a gap), never stored in B.
    assert new[0] > 3
    assert new[1:] == [2, 3]
    assert stored == [
        ("A", 1),
        ("A", 2),
        ("A", 3),
        ("A", new[0]),
        ("B", 0),  # the one whose fill found its scope moved: none stored (0: missing)
        *(("B", n) for n in (1, 2, 3)),
    ]


def test_a_failing_save_condition_on_the_scope_stores_no_missing_value(
    mongoengine_db: Any,
) -> None:
    """Review 5 of session 35: the scope's condition replaced the save_condition's on the same
    field, and the value was stored though the save was refused."""
    legacy = mongoengine_db.scope_moved.insert_one({"cat": "A"}).inserted_id
    before = list(mongoengine_db.scope_moved.find())
    loaded = ScopeMoved.objects.get(id=legacy)
    loaded.note = "x"
    with pytest.raises(me.errors.SaveConditionError):
        loaded.save(save_condition={"cat__ne": "A"})
    assert list(mongoengine_db.scope_moved.find()) == before


class ScopeInForm(me.Document):
    grp = me.IntField()
    no = SequenceField(scope="grp")
    note = me.StringField()
    meta = {"collection": "scope_in_form"}


def test_a_missing_value_is_filled_where_the_scope_is_stored_in_another_form(
    mongoengine_db: Any,
) -> None:
    """Review 5 of session 35: compared in the form the field writes (5), a scope stored as
    text ("5") never matched, and the value was silently not filled."""
    legacy = mongoengine_db.scope_in_form.insert_one({"grp": "5"}).inserted_id
    loaded = ScopeInForm.objects.get(id=legacy)
    loaded.note = "x"
    loaded.save()
    assert loaded.no == 1
    (raw,) = mongoengine_db.scope_in_form.find({}, {"_id": 0})
    assert raw == {"grp": "5", "no": 1, "note": "x"}
    assert ScopeInForm(grp=5).save().no == 2  # one numbering


def test_backfill_stops_on_a_document_it_can_never_write(
    mongoengine_db: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Review 5 of session 35: a scope whose condition never matched (a NaN on mongomock) was
    read again and again, for ever."""
    import importlib

    from mongoengine_ids import backfill

    backfill_module = importlib.import_module("mongoengine_ids.write.backfill")
    mongoengine_db.scope_moved.insert_one({"cat": "A"})
    monkeypatch.setattr(backfill_module, "fill_if_missing", lambda *args, **kwargs: False)
    with pytest.raises(me.errors.OperationError, match=r"10 conditional writes found it changed"):
        backfill(ScopeMoved)
    assert [doc.get("no") for doc in mongoengine_db.scope_moved.find()] == [None]


def test_backfill_leaves_a_list_holding_a_null_alone(mongoengine_db: Any) -> None:
    """Probe BS-2: {no: null} matched a list holding a null, which was replaced."""
    from mongoengine_ids import backfill

    mongoengine_db.scope_moved.insert_many([{"cat": "A", "no": [7, None]}, {"cat": "A"}])
    assert backfill(ScopeMoved) == 1
    stored = [doc.get("no") for doc in mongoengine_db.scope_moved.find()]
    assert stored == [[7, None], 1]


# -- a RandomUniqueField adopted by a populated collection ----------------------------------------


def _code_index(collection: Any, key: str = "code") -> dict[str, Any]:
    found = [spec for spec in collection.index_information().values() if spec["key"] == [(key, 1)]]
    assert len(found) == 1, f"expected one index on {key!r}: {collection.index_information()!r}"
    return found[0]


def test_a_random_unique_field_on_a_collection_of_documents_without_it(
    mongoengine_db: Any,
) -> None:
    collection = mongoengine_db.adopters
    _legacy(mongoengine_db, "adopters", 3)
    Model = coded(BY_NAME["random"], "Adopter", "adopters")

    assert Model.objects.count() == 3
    assert Model.objects.get(name="n1").code is None
    new = Model(name="new").save()
    newer = Model(name="newer").save()
    Model.objects.insert([Model(name="bulk1"), Model(name="bulk2")])
    loaded = Model.objects.get(name="n0")
    loaded.save()

    index = _code_index(collection)
    assert index.get("unique") is True
    assert index.get("sparse") is True
    docs = {doc["name"]: doc for doc in raw_docs(collection)}
    assert "code" not in docs["n1"]
    assert "code" not in docs["n2"]
    filled = [docs[name]["code"] for name in ("n0", "new", "newer", "bulk1", "bulk2")]
    assert distinct(filled)
    assert all(10**11 <= code < 10**12 for code in filled)
    assert Model.objects.get(code=new.code).name == "new"
    assert Model.objects(code=newer.code).count() == 1
    assert Model.objects(code=None).count() == 2


@pytest.mark.parametrize("options", [{}, {"db_field": "c"}], ids=["plain", "db_field"])
def test_the_unique_index_of_a_random_field_is_sparse(
    mongoengine_db: Any, options: dict[str, Any]
) -> None:
    Model = document(
        "Sparse",
        "sparse_codes",
        name=me.StringField(),
        code=RandomUniqueField(digits=12, **options),
    )
    Model(name="a").save()
    index = _code_index(mongoengine_db.sparse_codes, options.get("db_field", "code"))
    assert index.get("unique") is True
    assert index.get("sparse") is True


# -- signals ---------------------------------------------------------------------------------------


@by_role
@by_kind
def test_a_value_assigned_by_a_pre_save_handler_is_kept(
    mongoengine_db: Any, kind: Kind, role: str
) -> None:
    Model = model_for(role, kind, "Signalled", "signalled")
    attr, key = field_of(role)
    value = kind.sample()

    def assign(sender: Any, document: Any, **kwargs: Any) -> None:
        if getattr(document, attr) is None:
            setattr(document, attr, value)

    signals.pre_save.connect(assign, sender=Model)
    try:
        doc = Model(name="a").save()
        other = Model(name="b", **{attr: kind.sample()}).save()
    finally:
        signals.pre_save.disconnect(assign, sender=Model)

    stored = raw_one(mongoengine_db.signalled, {"name": "a"})
    assert stored[key] == kind.stored(value)
    assert set(stored) == {"_id", "name", key}
    assert kind.stored(getattr(doc, attr)) == kind.stored(value)
    assert raw_one(mongoengine_db.signalled, {"name": "b"})[key] == kind.stored(
        getattr(other, attr)
    )
    # A later save keeps it.
    doc.name = "a2"
    doc.save()
    assert raw_one(mongoengine_db.signalled, {"_id": stored["_id"]}) == {**stored, "name": "a2"}


# -- reads never produce ids -----------------------------------------------------------------------
# Module-level models, so that pickle finds them.


class ReadSequence(me.Document):
    id = SequenceField(primary_key=True)
    code = SequenceField()
    name = me.StringField()
    meta = {"collection": "read_sequence"}


class ReadRandom(me.Document):
    id = RandomUniqueField(digits=12, primary_key=True)
    code = RandomUniqueField(digits=12)
    name = me.StringField()
    meta = {"collection": "read_random"}


class ReadLocality(me.Document):
    id = LocalityUUIDField(primary_key=True)
    code = LocalityUUIDField()
    name = me.StringField()
    meta = {"collection": "read_locality"}


class ReadUUID4(me.Document):
    id = UUID4Field(primary_key=True)
    code = UUID4Field()
    name = me.StringField()
    meta = {"collection": "read_uuid4"}


class ReadUUID7(me.Document):
    id = UUID7Field(primary_key=True)
    code = UUID7Field()
    name = me.StringField()
    meta = {"collection": "read_uuid7"}


READ_MODELS: dict[str, type[me.Document]] = {
    "sequence": ReadSequence,
    "random": ReadRandom,
    "locality": ReadLocality,
    "uuid4": ReadUUID4,
    "uuid7": ReadUUID7,
}


def _read_everything(doc: me.Document) -> list[Any]:
    """Every read the spec names, and then some; returns the copies made."""
    assert doc.id is None
    assert doc.pk is None
    assert doc.code is None
    doc.to_json(json_options=RELAXED_JSON_OPTIONS)
    doc.to_mongo()
    doc.to_mongo().to_dict()
    repr(doc)
    str(doc)
    dict(doc._data)
    return [pickle.loads(pickle.dumps(doc)), copy.copy(doc), copy.deepcopy(doc)]


@by_kind
def test_reading_a_new_document_never_produces_an_id(mongoengine_db: Any, kind: Kind) -> None:
    Model = READ_MODELS[kind.name]
    collection = mongoengine_db[Model._meta["collection"]]
    doc = Model(name="a")

    copies = _read_everything(doc)
    assert doc.to_json(json_options=RELAXED_JSON_OPTIONS) == '{"name": "a"}'
    assert doc.to_mongo().to_dict() == {"name": "a"}
    for made in [doc, *copies]:
        assert made.id is None
        assert made.pk is None
        assert made.code is None
        assert made._data["id"] is None
        assert made._data["code"] is None
    assert raw_docs(collection) == []
    assert counters(mongoengine_db) == []

    doc.save()
    stored = raw_one(collection)
    kind.check(stored["_id"])
    kind.check(stored["code"])
    if kind.name == "sequence":
        # Nothing was burnt by the reads: both counters hand out their first value.
        assert (stored["_id"], stored["code"]) == (1, 1)
        assert [c["next"] for c in counters(mongoengine_db)] == [1, 1]


@by_kind
def test_reading_a_loaded_document_lacking_a_value_never_produces_one(
    mongoengine_db: Any, kind: Kind
) -> None:
    Model = READ_MODELS[kind.name]
    collection = mongoengine_db[Model._meta["collection"]]
    key = kind.stored(kind.sample())
    collection.insert_one({"_id": key, "name": "old"})

    loaded = Model.objects.get(name="old")
    assert loaded.code is None
    loaded.to_json(json_options=RELAXED_JSON_OPTIONS)
    loaded.to_mongo()
    copies = [pickle.loads(pickle.dumps(loaded)), copy.copy(loaded), copy.deepcopy(loaded)]
    assert all(made.code is None for made in [loaded, *copies])
    assert raw_docs(collection) == [{"_id": key, "name": "old"}]
    assert mongoengine_db[COUNTERS].count_documents({}) == 0


# -- found by review: a model's own _save_create(), one object twice, a retry failing early ------


def test_a_models_own_save_create_return_value_is_the_key(mongoengine_db: Any) -> None:
    """A get-or-create ``_save_create`` returns the ``_id`` it found: MongoEngine sets the key
    to it, so the document is the stored one (not the ObjectId made for it, never written)."""

    class Member(me.Document):
        meta = {"collection": "members"}
        email = me.StringField(unique=True)
        number = SequenceField()

        def _save_create(self, doc: Any, force_insert: bool, write_concern: Any) -> Any:
            found = self._get_collection().find_one({"email": doc["email"]}, {"_id": 1})
            if found is not None:
                return found["_id"]
            return super()._save_create(doc, force_insert, write_concern)

    first = Member(email="a@x").save()
    again = Member(email="a@x").save()
    assert again.pk == first.pk
    again.email = "b@x"
    again.save()
    assert raw_docs(mongoengine_db.members) == [{"_id": first.pk, "email": "b@x", "number": 1}]


@by_role
@by_kind
def test_insert_refuses_one_object_twice(mongoengine_db: Any, kind: Kind, role: str) -> None:
    Model = model_for(role, kind, "TwiceItem", "twice_items")
    attr, _ = field_of(role)
    twice = Model(name="a")
    with pytest.raises(me.errors.OperationError, match=r"same document object twice.*0 and 2"):
        Model.objects.insert([twice, Model(name="b"), twice])
    assert raw_docs(mongoengine_db.twice_items) == []
    assert getattr(twice, attr) is None
    twice.save()  # still a new document
    assert [doc["name"] for doc in raw_docs(mongoengine_db.twice_items)] == ["a"]


@by_role
@by_kind
def test_insert_refuses_one_object_a_pre_bulk_insert_handler_adds_again(
    mongoengine_db: Any, kind: Kind, role: str
) -> None:
    """A handler may add documents to the batch: one it adds twice is refused as well (found
    by review AF: it was stored as two documents sharing its values)."""
    Model = model_for(role, kind, "TwiceAdded", "twice_added")
    attr, _ = field_of(role)
    once = Model(name="a")

    def again(sender: Any, documents: list[Any], **kwargs: Any) -> None:
        documents.append(documents[0])

    me.signals.pre_bulk_insert.connect(again, sender=Model)
    try:
        with pytest.raises(me.errors.OperationError, match=r"same document object twice.*0 and 1"):
            Model.objects.insert([once], load_bulk=False)
    finally:
        me.signals.pre_bulk_insert.disconnect(again, sender=Model)
    assert raw_docs(mongoengine_db.twice_added) == []
    assert getattr(once, attr) is None


@by_role
@by_kind
def test_insert_hands_pre_bulk_insert_the_callers_own_list(
    mongoengine_db: Any, kind: Kind, role: str
) -> None:
    """As MongoEngine's insert(): a document a handler adds is in the caller's list too, and
    gets its values (found by probe D: the handler got a copy)."""
    Model = model_for(role, kind, "HandedList", "handed_list")
    attr, _ = field_of(role)
    given = [Model(name="a")]

    def add(sender: Any, documents: list[Any], **kwargs: Any) -> None:
        documents.append(Model(name="added"))

    me.signals.pre_bulk_insert.connect(add, sender=Model)
    try:
        Model.objects.insert(given, load_bulk=False)
    finally:
        me.signals.pre_bulk_insert.disconnect(add, sender=Model)
    assert [doc.name for doc in given] == ["a", "added"]
    stored = raw_docs(mongoengine_db.handed_list)
    assert sorted(doc["name"] for doc in stored) == ["a", "added"]
    values_made = [getattr(doc, attr) for doc in given]
    assert None not in values_made
    assert len(set(values_made)) == 2


@pytest.mark.parametrize("how", ["itself", *COPIES])
@by_kind
def test_the_key_of_a_bulk_inserted_document_cannot_change(
    mongoengine_db: Any, kind: Kind, how: str
) -> None:
    """A document insert(load_bulk=False) wrote (or a copy of it) is a stored one: its generated
    key cannot change, as a saved one's (found by probe B: MongoEngine's insert() leaves it no
    record of changes, so its save() upserted it whole under the new key, over the document
    holding that key)."""
    Model = READ_MODELS[kind.name]  # module-level, for pickle
    collection = mongoengine_db[Model._meta["collection"]]
    victim = Model(name="victim").save()
    batch = [Model(name="mine")]
    Model.objects.insert(batch, load_bulk=False)
    mine = batch[0] if how == "itself" else COPIES[how](batch[0])
    before = raw_docs(collection)
    mine.id = victim.id
    mine.name = "over"
    with pytest.raises(me.errors.OperationError, match="the key of a stored document cannot"):
        mine.save()
    assert raw_docs(collection) == before
    assert sorted(doc["name"] for doc in before) == ["mine", "victim"]


@by_kind
def test_a_bulk_inserted_document_saves_its_changes(mongoengine_db: Any, kind: Kind) -> None:
    """Its save() writes it (whole, as MongoEngine's: insert() leaves it no record of
    changes), its key and values kept."""
    Model = coded(kind, "BulkChanged", "bulk_changed", count=me.IntField())
    batch = [Model(name="a", count=1), Model(name="b", count=2)]
    Model.objects.insert(batch, load_bulk=False)
    before = raw_docs(mongoengine_db.bulk_changed)
    batch[0].name = "renamed"
    batch[0].save()
    after = raw_docs(mongoengine_db.bulk_changed)
    assert after == [{**before[0], "name": "renamed"}, before[1]]


@by_kind
def test_a_value_cleared_on_a_loaded_document_is_made_anew_by_its_save(
    mongoengine_db: Any, kind: Kind
) -> None:
    """As MongoEngine's SequenceField makes a new value for None: the save makes one, which
    its update writes; the other documents are untouched (probe I: the save removed it)."""
    Model = coded(kind, "Cleared", "cleared")
    first, second = Model(name="a").save(), Model(name="b").save()
    other = raw_one(mongoengine_db.cleared, {"_id": second.pk})
    loaded = Model.objects.get(id=first.pk)
    old = loaded.code
    loaded.code = None
    loaded.save()
    stored = raw_one(mongoengine_db.cleared, {"_id": first.pk})
    assert loaded.code is not None
    assert loaded.code != old
    assert stored == {"_id": first.pk, "name": "a", "code": kind.stored(loaded.code)}
    assert raw_one(mongoengine_db.cleared, {"_id": second.pk}) == other
    assert distinct([old, second.code, loaded.code])


@by_kind
def test_a_value_cleared_in_a_loaded_embedded_document_is_made_anew_by_its_save(
    mongoengine_db: Any, kind: Kind
) -> None:
    """Probe Q: set to None in a loaded embedded document (by hand, or by the list's
    ``update(code=None)``), the save removed the value; MongoEngine's SequenceField makes a new
    one, as the package does for the document's own field."""
    Part = coded_part(kind, "ClearedPart", "cleared_codes")
    Model = document(
        "ClearedParts",
        "cleared_parts",
        parts=me.EmbeddedDocumentListField(Part),
        part=me.EmbeddedDocumentField(Part),
    )
    saved = Model(parts=[Part(label="a"), Part(label="b")], part=Part(label="c")).save()
    before = raw_one(mongoengine_db.cleared_parts)
    loaded = Model.objects.get(id=saved.id)
    loaded.parts.update(code=None)
    loaded.part.code = None
    loaded.save()
    stored = raw_one(mongoengine_db.cleared_parts)
    places = [*stored["parts"], stored["part"]]
    assert [p["label"] for p in places] == ["a", "b", "c"]
    made = [p.code for p in [*loaded.parts, loaded.part]]
    assert [p["code"] for p in places] == [kind.stored(value) for value in made]
    old = [p["code"] for p in [*before["parts"], before["part"]]]
    assert len({repr(value) for value in made}) == 3
    assert not {repr(kind.stored(value)) for value in made} & set(map(repr, old))


def test_a_value_a_projection_left_out_then_cleared_is_made_anew(mongoengine_db: Any) -> None:
    """Cleared where a projection left it out, with its scope moved: a new number of the new
    scope (review: MongoEngine saw None set over None, and the save took the stored number of
    the old scope into the new one: held twice there). A number whose scope moves without one
    is made anew."""
    Model = document(
        "ClearedUnloaded",
        "cleared_unloaded",
        tenant=me.StringField(),
        n=SequenceField(scope="tenant"),
    )
    Model(tenant="x").save()
    Model(tenant="y").save()
    loaded = Model.objects.only("tenant").get(tenant="x")
    loaded.n = None
    loaded.tenant = "y"
    loaded.save()
    assert loaded.n == 2
    stored = sorted((doc["tenant"], doc["n"]) for doc in raw_docs(mongoengine_db.cleared_unloaded))
    assert stored == [("y", 1), ("y", 2)]


def test_a_cleared_value_whose_update_was_not_sent_is_written_by_the_retry() -> None:
    """The update of a cleared field fails before it is sent (its outcome unknown to the
    application): the retry writes the value made for it (review: it took the old one back)."""
    import pymongo.errors

    from mongoengine_ids.testing import connected_threadsafe

    class Renumbered(me.Document):
        meta = {"collection": "renumbered"}
        name = me.StringField()
        number = SequenceField()

    lose = {"armed": False}

    def hook(collection: str, method: str, call: Callable[[], Any]) -> Any:
        if collection == "renumbered" and method == "update_one" and lose["armed"]:
            lose["armed"] = False
            raise pymongo.errors.AutoReconnect("not sent")
        return call()

    with connected_threadsafe(hook=hook) as connect:
        db = connect()
        loaded = Renumbered.objects.get(id=Renumbered(name="a").save().id)
        loaded.number = None
        lose["armed"] = True
        with pytest.raises(pymongo.errors.AutoReconnect):
            loaded.save()
        made = loaded.number
        loaded.save()  # the application's retry
        assert made == loaded.number == 2
        assert [doc["number"] for doc in db.renumbered.find()] == [2]


def test_a_cleared_random_value_that_collides_is_drawn_again(mongoengine_db: Any) -> None:
    Model = document(
        "ClearedRandom",
        "cleared_random",
        name=me.StringField(),
        code=RandomUniqueField(digits=12, rng=Indexes(5, 6, 6, 7)),
    )
    first, second = Model(name="a").save(), Model(name="b").save()
    assert (first.code, second.code) == (10**11 + 5, 10**11 + 6)
    first.code = None
    first.save()  # draws 6 (the second document's: taken), then 7
    assert first.code == 10**11 + 7
    assert sorted(doc["code"] for doc in raw_docs(mongoengine_db.cleared_random)) == [
        10**11 + 6,
        10**11 + 7,
    ]


@pytest.mark.parametrize("emptied", [False, True], ids=["empty", "emptied-by-handler"])
def test_insert_of_no_documents_raises_as_mongoengine(mongoengine_db: Any, emptied: bool) -> None:
    """An empty batch is the driver's TypeError, as MongoEngine's insert() gives: also when a
    pre_bulk_insert handler removed every document (found by probe D: it returned [], and sent
    post_bulk_insert with no documents)."""

    class Emptied(me.Document):
        number = SequenceField()
        meta = {"collection": "emptied"}

    received: list[str] = []

    def empty(sender: Any, documents: list[Any], **kwargs: Any) -> None:
        documents.clear()

    def after(sender: Any, documents: list[Any], **kwargs: Any) -> None:
        received.append("post_bulk_insert")

    me.signals.pre_bulk_insert.connect(empty, sender=Emptied)
    me.signals.post_bulk_insert.connect(after, sender=Emptied)
    try:
        with pytest.raises(TypeError, match="documents must be a non-empty list"):
            Emptied.objects.insert([Emptied()] if emptied else [])
    finally:
        me.signals.pre_bulk_insert.disconnect(empty, sender=Emptied)
        me.signals.post_bulk_insert.disconnect(after, sender=Emptied)
    assert received == []
    assert raw_docs(mongoengine_db.emptied) == []
    assert Emptied.objects.insert([Emptied()], load_bulk=False) is not None
    assert [doc["number"] for doc in raw_docs(mongoengine_db.emptied)] == [1]


def test_a_retry_that_fails_making_its_values_still_finds_the_earlier_insert(
    mongoengine_db: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The insert's reply is lost and it lands late; the retry fails before it sends anything
    (a counter update for an assigned value is lost); the next retry must still look for the
    earlier insert, and find it: one document."""
    import mongomock
    import pymongo.errors

    class Ticket(me.Document):
        meta = {"collection": "tickets"}
        id = SequenceField(primary_key=True)
        name = me.StringField()
        ref = SequenceField()

    held: list[Any] = []
    insert_one = mongomock.collection.Collection.insert_one

    def lost_insert(self: Any, document: Any, *args: Any, **kwargs: Any) -> Any:
        if self.name == "tickets" and not held:
            held.append(dict(document))  # in flight: applied later
            raise pymongo.errors.AutoReconnect("reply lost")
        return insert_one(self, document, *args, **kwargs)

    monkeypatch.setattr(mongomock.collection.Collection, "insert_one", lost_insert)
    ticket = Ticket(name="t", ref=500)
    with pytest.raises(pymongo.errors.AutoReconnect):
        ticket.save()

    note_assigned = SequenceField.note_assigned
    failing = [True]

    def lost_note(self: Any, write: Any, values: list[Any]) -> None:
        if failing:
            failing.clear()
            raise pymongo.errors.AutoReconnect("counter update lost")
        note_assigned(self, write, values)

    monkeypatch.setattr(SequenceField, "note_assigned", lost_note)
    ticket.ref = 600  # changed between attempts: told to the field again
    with pytest.raises(pymongo.errors.AutoReconnect, match="counter update lost"):
        ticket.save()
    insert_one(mongoengine_db.tickets, held[0])  # the earlier insert lands now
    ticket.save()  # finds it, and writes the current version over it
    assert raw_docs(mongoengine_db.tickets) == [{"_id": 1, "name": "t", "ref": 600}]
    assert ticket.pk == 1
    assert Ticket(name="u").save().ref == 601  # the counter moved past the value assigned


class _LoseInsertOnce:
    """A ``connected_threadsafe`` hook: the first ``insert_one`` into ``collection`` is never
    applied and its reply is lost."""

    def __init__(self, collection: str) -> None:
        self.collection = collection
        self.lost = False

    def __call__(self, collection: str, method: str, call: Callable[[], Any]) -> Any:
        if collection == self.collection and method == "insert_one" and not self.lost:
            self.lost = True
            import pymongo.errors

            raise pymongo.errors.AutoReconnect("reply lost")
        return call()


@pytest.mark.parametrize("applied", [False, True], ids=["not-applied", "applied"])
@pytest.mark.parametrize("key", ["generated", "object-id"])
def test_the_retry_of_a_loaded_document_copied_under_a_new_key_inserts_it_once(
    applied: bool, key: str
) -> None:
    """``doc.pk = None; doc.save()`` of a loaded document, its insert's reply lost: MongoEngine
    takes the document, now keyed, as stored, and the application's retry went to an update
    (review: refused as a key change for a generated key). It is that insert again."""
    import pymongo.errors

    from mongoengine_ids.testing import connected_threadsafe

    class Copied(me.Document):
        meta = {"collection": "copied"}
        name = me.StringField()
        number = SequenceField()
        if key == "generated":
            id = UUID7Field(primary_key=True)

    lose = {"armed": False}

    def hook(collection: str, method: str, call: Callable[[], Any]) -> Any:
        if collection == "copied" and method == "insert_one" and lose["armed"]:
            lose["armed"] = False
            if applied:
                call()
            raise pymongo.errors.AutoReconnect("reply lost")
        return call()

    with connected_threadsafe(hook=hook) as connect:
        db = connect()
        original = Copied(name="a").save()
        loaded = Copied.objects.get(id=original.id)
        loaded.pk = None
        loaded.name = "copy"
        lose["armed"] = True
        with pytest.raises(pymongo.errors.AutoReconnect):
            loaded.save()
        loaded.save()  # the application's retry
        stored = sorted((doc["name"], doc["_id"]) for doc in raw_collection(db.copied).find())
        assert stored == sorted(
            [("a", original.to_mongo()["_id"]), ("copy", loaded.to_mongo()["_id"])]
        )
        loaded.update(set__name="copy, updated")
        assert db.copied.find_one({"_id": loaded.to_mongo()["_id"]})["name"] == "copy, updated"
        assert db.copied.count_documents({}) == 2


def test_a_retry_keeps_the_values_the_earlier_attempt_noted_and_notes_changed_ones() -> None:
    """After a lost reply, an assigned value the earlier attempt reserved is not reserved again
    (its own reservation would refuse it); a value the application changes before the retry is
    told to the field (a counter moves past it, a reservation is taken)."""
    import pymongo.errors

    from mongoengine_ids.testing import connected_threadsafe

    class Reserved(me.Document):
        meta = {"collection": "reserved"}
        key = me.StringField()
        code = RandomUniqueField(digits=6, reserve_in="reserved_codes")

    class Counted(me.Document):
        meta = {"collection": "counted"}
        key = me.StringField()
        code = SequenceField()

    for model in (Reserved, Counted):
        hook = _LoseInsertOnce(model._get_collection_name())
        with connected_threadsafe(hook=hook) as connect:
            db = connect()
            assigned = model(key="a", code="123456" if model is Reserved else 5)
            with pytest.raises(pymongo.errors.AutoReconnect):
                assigned.save()
            assigned.save()  # the same value, noted by the first attempt: not noted again

            hook.lost = False
            changed = model(key="b")
            with pytest.raises(pymongo.errors.AutoReconnect):
                changed.save()
            changed.code = "654321" if model is Reserved else 9  # before the retry
            changed.save()

            stored = {row["key"]: row["code"] for row in db[model._get_collection_name()].find()}
            assert stored == {"a": assigned.code, "b": changed.code}
            if model is Reserved:
                assert stored == {"a": 123456, "b": 654321}
                with pytest.raises(NotUniqueError, match="654321"):
                    model(key="c", code="654321").save()
            else:
                assert stored == {"a": 5, "b": 9}
                assert model(key="c").save().code == 10  # the counter moved past 9


# -- found by a third review: a refused attempt, an unknown look-up, a key the user assigned ----


class _FailCalls:
    """A ``connected_threadsafe`` hook failing (before it is sent) each call whose number, from
    the moment ``start()`` is called, is in ``numbers``; ``log`` records the methods called."""

    def __init__(self) -> None:
        self.log: list[str] = []
        self.failing: set[int] = set()

    def start(self, *numbers: int) -> None:
        self.failing = {len(self.log) + number for number in numbers}

    def __call__(self, collection: str, method: str, call: Callable[[], Any]) -> Any:
        self.log.append(method)
        if len(self.log) in self.failing:
            import pymongo.errors

            raise pymongo.errors.AutoReconnect(f"lost at {method}")
        return call()


def test_a_refused_retry_is_not_taken_for_a_version_that_may_land() -> None:
    """A retry's insert refused as a duplicate (another document's key) cannot land: when the
    retry then fails, that version must not be matched later, or the other document would be
    taken for this one and replaced."""
    import pymongo.errors

    from mongoengine_ids.testing import connected_threadsafe

    draws: list[int] = []

    class Ticket(me.Document):
        meta = {"collection": "tickets_refused"}
        id = RandomUniqueField(
            primary_key=True, min_value=1, max_value=12, rng=lambda n: draws.pop(0) - 1
        )
        status = me.StringField()

    hook = _FailCalls()
    with connected_threadsafe(hook=hook) as connect:
        raw = connect()["tickets_refused"]
        Ticket.ensure_indexes()
        raw.insert_one({"_id": 1, "status": "new"})  # another's, with our content
        ticket = Ticket(status="new")
        draws[:] = [5]
        hook.start(1)  # the insert of 5, never sent
        with pytest.raises(pymongo.errors.AutoReconnect):
            ticket.save()
        raw.insert_one({"_id": 5, "status": "someone else"})
        draws[:] = [1, 9]
        # look-up of 5, insert 5 (duplicate), its check, look-up of the collision, refill to 1,
        # insert 1 (duplicate), then the check of that duplicate is lost
        hook.start(6)
        with pytest.raises(pymongo.errors.AutoReconnect):
            ticket.save()
        draws[:] = [9]
        ticket.save()
        assert sorted(raw.find(), key=lambda doc: doc["_id"]) == [
            {"_id": 1, "status": "new"},
            {"_id": 5, "status": "someone else"},
            {"_id": ticket.pk, "status": "new"},
        ]
        assert ticket.pk not in (1, 5)


def test_a_lost_look_up_after_a_models_own_step_keeps_the_key_and_values() -> None:
    """A model's own step fails after its insert, and the look-up that would tell whether the
    insert landed is lost: the document may be stored, so its key and value are kept (not
    handed out again), and the retry finds its copy."""

    from mongoengine_ids.testing import connected_threadsafe

    draws: list[int] = []
    failing = [True]

    class Audited(me.Document):
        meta = {"collection": "audited"}
        code = RandomUniqueField(
            min_value=1, max_value=9, reserve_in="audited_codes", rng=lambda n: draws.pop(0) - 1
        )

        def _save_create(self, doc: Any, force_insert: bool, write_concern: Any) -> Any:
            written = super()._save_create(doc, force_insert, write_concern)
            if failing:
                raise RuntimeError("the audit row was not written")
            return written

    hook = _FailCalls()
    with connected_threadsafe(hook=hook) as connect:
        db = connect()
        Audited.ensure_indexes()
        audited = Audited()
        draws[:] = [4]
        hook.start(3)  # the reservation, the insert, then the look-up is lost
        with pytest.raises(RuntimeError, match="audit row"):
            audited.save()
        assert (audited.pk, audited.code) == (db.audited.find_one()["_id"], 4)
        failing.clear()
        audited.save()
        assert list(db.audited.find()) == [{"_id": audited.pk, "code": 4}]
        assert [row["_id"] for row in db.audited_codes.find()] == [4]


def test_a_key_the_user_assigned_is_not_taken_for_the_retrys_own() -> None:
    """After a lost reply, a stored document holding a key the user assigned (an idempotency
    key) may be another's: the retry refuses it as a duplicate, as a save without a fault."""
    import pymongo.errors

    from mongoengine_ids.testing import connected_threadsafe

    class Order(me.Document):
        meta = {"collection": "orders_assigned"}
        id = UUID4Field(primary_key=True)
        item = me.StringField()

    hook = _FailCalls()
    with connected_threadsafe(hook=hook) as connect:
        raw = connect()["orders_assigned"]
        key = uuid.uuid4()
        Order(id=key, item="first request").save()
        second = Order(id=key, item="second request")
        hook.start(1)
        with pytest.raises(pymongo.errors.AutoReconnect):
            second.save()
        with pytest.raises(NotUniqueError):
            second.save()
        assert [doc["item"] for doc in raw.find()] == ["first request"]


# -- found by a review of the leaner bulk insert: each document's own key -------------------------


class _LoseReplyOnce:
    """A ``connected_threadsafe`` hook: the first ``method`` call into ``collection`` is applied
    and its reply is lost."""

    def __init__(self, collection: str, method: str) -> None:
        self.target = (collection, method)
        self.lost = False

    def __call__(self, collection: str, method: str, call: Callable[[], Any]) -> Any:
        if (collection, method) != self.target or self.lost:
            return call()
        self.lost = True
        call()
        import pymongo.errors

        raise pymongo.errors.AutoReconnect("reply lost")


@pytest.mark.parametrize("lost", [False, True], ids=["written", "reply-lost-then-retried"])
def test_bulk_insert_gives_a_subclass_with_an_object_id_key_its_key(lost: bool) -> None:
    """MongoEngine lets a subclass declare its key anew under the same name: a bulk insert
    through the base makes each document's key by its own class, so the key is known before the
    insert (and the retry after a lost reply finds the document instead of storing a copy)."""
    import pymongo.errors
    from bson import ObjectId

    from mongoengine_ids.testing import connected_threadsafe

    class Animal(me.Document):
        meta = {"collection": "animals", "allow_inheritance": True}
        id = me.StringField(primary_key=True)
        name = me.StringField()
        serial = SequenceField()

    class Dog(Animal):
        id = me.ObjectIdField(primary_key=True)

    hook = _LoseReplyOnce("animals", "insert_many" if lost else "none")
    with connected_threadsafe(hook=hook) as connect:
        db = connect()
        dog = Dog(name="rex")
        if lost:
            with pytest.raises(pymongo.errors.AutoReconnect):
                Animal.objects.insert([dog], load_bulk=False)
        ids = Animal.objects.insert([dog], load_bulk=False)
        stored = raw_docs(db.animals)
        assert len(stored) == 1
        assert isinstance(stored[0]["_id"], ObjectId)
        assert stored[0] == {
            "_id": dog.pk,
            "_cls": "Animal.Dog",
            "name": "rex",
            "serial": 1,
        }
        assert ids == [dog.pk]


# -- found by a review: MongoEngine's queryset API, kept on a model with generated fields ---------


def test_update_and_modify_take_their_options_positionally_as_mongoengine_does(
    mongoengine_db: Any,
) -> None:
    Coded = document(
        "PositionalCoded", "positional_coded", name=me.StringField(), code=SequenceField()
    )
    Coded(name="a").save()
    # BaseQuerySet.update(upsert, multi, write_concern, ...) and
    # BaseQuerySet.modify(upsert, full_response, remove, new, ...)
    assert Coded.objects(name="a").update(False, True, set__name="b") == 1
    found = Coded.objects(name="b").modify(False, False, False, True, set__name="c")
    assert (found.name, found.code) == ("c", 1)
    assert raw_docs(mongoengine_db.positional_coded) == [{"_id": found.pk, "name": "c", "code": 1}]
    with pytest.raises(TypeError, match="multiple values for argument 'multi'"):
        Coded.objects(name="c").update(False, True, multi=True, set__name="d")
    with pytest.raises(TypeError, match="at most"):
        Coded.objects(name="c").modify(False, False, False, True, None, None, set__name="d")
    # An upsert given its options positionally still generates on insert.
    assert Coded.objects(name="new").update(True, True, set__name="new") == 1
    assert raw_one(mongoengine_db.positional_coded, {"name": "new"})["code"] == 2


def test_in_bulk_with_ids_that_are_no_keys_finds_nothing_for_them(mongoengine_db: Any) -> None:
    Coded = document("InBulkCoded", "in_bulk_coded", name=me.StringField(), code=SequenceField())
    stored = Coded(name="a").save()
    assert Coded.objects.in_bulk(["not-an-id"]) == {}  # as MongoEngine: no error
    assert Coded.objects.in_bulk(["not-an-id", stored.pk]) == {stored.pk: stored}


@pytest.mark.parametrize("load_bulk", [True, False])
def test_insert_gives_a_document_with_an_unset_plain_key_the_id_the_driver_made(
    mongoengine_db: Any, load_bulk: bool
) -> None:
    """A model with generated fields and a key of another kind than an ObjectId, left unset:
    the driver makes an ObjectId, which the document gets (as MongoEngine's insert() does)."""
    Coded = document(
        "PlainKeyCoded",
        "plain_key_coded",
        id=me.StringField(primary_key=True),
        code=SequenceField(),
    )
    doc = Coded()
    returned = Coded.objects.insert(doc, load_bulk=load_bulk)
    raw = raw_one(mongoengine_db.plain_key_coded)
    assert raw["code"] == 1
    assert doc.pk is not None
    assert Coded._fields["id"].to_mongo(doc.pk) == raw["_id"]
    if load_bulk:
        assert returned.pk == doc.pk
    else:
        assert returned == doc.pk


def test_backfill_of_a_scoped_counter_fills_the_documents_it_can_and_names_the_others(
    mongoengine_db: Any,
) -> None:
    """Documents lacking the scope a value is made from cannot be numbered: the others are,
    and the error names those, so that backfill() can run again once they have one."""
    raw = mongoengine_db.bf_scoped
    raw.insert_many([{"tenant": "a"}, {"name": "no tenant"}, {"tenant": "b"}, {"tenant": "a"}])

    class BfScoped(me.Document):
        tenant = me.StringField()
        name = me.StringField()
        number = SequenceField(scope="tenant")
        meta = {"collection": "bf_scoped"}

    from mongoengine_ids import backfill

    (unready,) = [doc["_id"] for doc in raw.find({"tenant": None})]
    named = rf"\['tenant'\].*{re.escape(repr(unready))}.*\(3 value\(s\) were given meanwhile"
    with pytest.raises(me.ValidationError, match=named):
        backfill(BfScoped)
    numbered = sorted((doc.get("tenant", ""), doc.get("number", 0)) for doc in raw.find())
    assert numbered == [("", 0), ("a", 1), ("a", 2), ("b", 1)]
    raw.update_one({"_id": unready}, {"$set": {"tenant": "b"}})
    assert backfill(BfScoped) == 1
    assert raw.find_one({"_id": unready})["number"] == 2


def test_backfill_numbers_a_list_scope_holding_a_null(mongoengine_db: Any) -> None:
    # Probe AJ: the filter of documents holding their scope ($ne: null) left out a list holding
    # a null, which backfill() then named as lacking it; save() numbers it.
    raw = mongoengine_db.bf_listed
    raw.insert_many([{"tags": ["a", None]}, {"tags": [None]}, {"tags": ["a", None]}, {}])

    class BfListed(me.Document):
        tags = me.ListField()
        number = SequenceField(scope="tags")
        meta = {"collection": "bf_listed"}

    from mongoengine_ids import backfill

    with pytest.raises(me.ValidationError, match=r"\['tags'\].*\(3 value\(s\) were given"):
        backfill(BfListed)
    numbered = sorted((repr(doc.get("tags")), doc.get("number", 0)) for doc in raw.find())
    assert numbered == [("None", 0), ("['a', None]", 1), ("['a', None]", 2), ("[None]", 1)]
    assert BfListed(tags=["a", None]).save().number == 3


def test_backfill_names_a_document_whose_scope_is_no_value(mongoengine_db: Any) -> None:
    # Review H: MongoEngine's bare error named neither the document nor the field.
    class BfJunkPlace(me.EmbeddedDocument):
        city = me.StringField()

    class BfJunk(me.Document):
        place = me.EmbeddedDocumentField(BfJunkPlace)
        number = SequenceField(scope="place")
        meta = {"collection": "bf_junk"}

    mongoengine_db.bf_junk.insert_one({"_id": 1, "place": "junk"})
    from mongoengine_ids import backfill

    with pytest.raises(me.ValidationError, match=r"BfJunk\.number .* _id 1 holds no value"):
        backfill(BfJunk)
    assert list(mongoengine_db.bf_junk.find()) == [{"_id": 1, "place": "junk"}]


def test_backfill_fills_every_field_before_naming_documents_a_scoped_one_cannot_number(
    mongoengine_db: Any,
) -> None:
    from mongoengine_ids import backfill

    raw = mongoengine_db.bf_two
    raw.insert_many([{"tenant": "x"}, {"tenant": "y"}, {}])

    class BfTwo(me.Document):
        tenant = me.StringField()
        number = SequenceField(sequence_name="bf_two_number", scope="tenant")
        code = RandomUniqueField(digits=6)
        meta = {"collection": "bf_two"}

    # The count is of both fields (found by a probe: it was number's alone, 2).
    expected = r"BfTwo\.number is made from \['tenant'\].*\(5 value\(s\) were given meanwhile"
    with pytest.raises(me.ValidationError, match=expected):
        backfill(BfTwo)
    stored = list(raw.find())
    assert all(isinstance(doc.get("code"), int) for doc in stored)
    assert sorted(doc.get("number", 0) for doc in stored) == [0, 1, 1]


@by_kind
def test_a_projection_naming_a_map_key_of_digits_is_kept_on_save(
    mongoengine_db: Any, kind: Kind
) -> None:
    """A map's key of digits (a year, an id) is a key to a projection, never a list index: left
    out there, its values are kept as for any key. (Taken for an index, it was not recorded.)"""
    Part = coded_part(kind, "YearPart", "year_codes")
    Model = document("YearParts", "year_parts", years=me.MapField(me.EmbeddedDocumentField(Part)))
    saved = Model(years={"2025": Part(label="x"), "2026": Part(label="y")}).save()
    before = raw_one(mongoengine_db.year_parts)
    loaded = Model.objects.exclude("years.2025.code").get(id=saved.id)
    assert loaded.years["2025"].code is None
    assert loaded.years["2026"].code is not None
    loaded.years.pop("2026")
    with pytest.raises(me.errors.OperationError, match=r"was not loaded.*whole"):
        loaded.save()
    assert raw_one(mongoengine_db.year_parts) == before


class _LoseTheReply:
    """A ``connected_threadsafe`` hook: once armed, the next call of ``method`` is applied and
    its reply lost."""

    armed = False

    def __init__(self, method: str) -> None:
        self.method = method

    def __call__(self, collection: str, method: str, call: Callable[[], Any]) -> Any:
        if not (self.armed and method == self.method):
            return call()
        import pymongo.errors

        self.armed = False
        call()
        raise pymongo.errors.AutoReconnect(f"the {method}'s reply was lost")


@pytest.mark.parametrize("key_field", [UUID4Field, SequenceField], ids=["uuid4", "sequence"])
def test_the_retry_after_a_models_own_step_wrote_more(key_field: type) -> None:
    """A model's own ``_save_create`` updates the document after its insert, and that update's
    reply is lost: the stored copy holds every value sent, and more. For a sequence key (the
    other choice: a fresh key) it is this document's; found by a check of probe AU's fix: the
    key was taken for a collision and the document stored twice (1 and 2). A UUID key made
    for it alone is compared exactly (review L: a copy adding a field was written over): the
    retry refuses, naming the step."""
    import pymongo.errors

    from mongoengine_ids.testing import connected_threadsafe

    class Stamped(me.Document):
        meta = {"collection": f"stamped_{key_field.__name__.lower()}"}
        id = key_field(primary_key=True)
        name = me.StringField()

        _save_create = stamp_after_insert

    hook = _LoseTheReply("update_one")
    with connected_threadsafe(hook=hook) as connect:
        db = connect()
        stamped = Stamped(name="a")
        hook.armed = True
        with pytest.raises(pymongo.errors.AutoReconnect, match="reply was lost"):
            stamped.save()
        key = stamped.pk
        if key_field is SequenceField:
            stamped.save()
        else:
            with pytest.raises(NotUniqueError, match=r"or by Stamped's own _save_create\(\)\)"):
                stamped.save()
        collection = db[Stamped._get_collection_name()]
        assert list(collection.find({}, {"_id": 0})) == [{"name": "a", "stamp": 1}]
        assert [doc.pk for doc in Stamped.objects.only("id")] == [key]
        assert stamped.pk == key


def test_the_retry_after_a_models_own_step_changed_a_value_is_refused() -> None:
    """Review K: a step that changes a value it was given stores a copy that holds no version
    sent: for a key made for the document alone, the retry cannot tell it from a copy's, and
    refuses (a sequence or random key takes a fresh value: docs/guarantees.md)."""
    import pymongo.errors

    from mongoengine_ids.testing import connected_threadsafe

    class Lowered(me.Document):
        meta = {"collection": "lowered"}
        id = UUID4Field(primary_key=True)
        name = me.StringField()

        def _save_create(self, doc: Any, force_insert: bool, write_concern: Any) -> Any:
            doc = {**doc, "name": doc["name"].lower()}
            return me.Document._save_create(self, doc, force_insert, write_concern)

    hook = _LoseTheReply("insert_one")
    with connected_threadsafe(hook=hook) as connect:
        db = connect()
        lowered = Lowered(name="A")
        hook.armed = True
        with pytest.raises(pymongo.errors.AutoReconnect, match="reply was lost"):
            lowered.save()
        with pytest.raises(
            NotUniqueError,
            match=r"that no attempt sent: this one, changed since it landed \(by another "
            r"writer, or by Lowered's own _save_create\(\)\)",
        ):
            lowered.save()
        assert list(db.lowered.find({}, {"_id": 0})) == [{"name": "a"}]


class _LandLate:
    """A ``connected_threadsafe`` hook: once armed, the next ``insert_one`` into ``collection``
    has its reply lost and is applied only after the next ``find_one`` (the retry's look-up
    found nothing)."""

    armed = False
    held: Callable[[], Any] | None = None

    def __init__(self, collection: str) -> None:
        self.collection = collection

    def __call__(self, collection: str, method: str, call: Callable[[], Any]) -> Any:
        import pymongo.errors

        if self.armed and (collection, method) == (self.collection, "insert_one"):
            self.armed, self.held = False, call
            raise pymongo.errors.AutoReconnect("the insert's reply was lost; still in flight")
        result = call()
        if self.held is not None and method == "find_one":
            held, self.held = self.held, None
            held()
        return result


@pytest.mark.parametrize("key_field", [UUID4Field, SequenceField], ids=["uuid4", "sequence"])
def test_a_late_insert_of_a_models_own_step_is_its_own(key_field: type) -> None:
    """Review K: the first insert lands after the retry's look-up; the retry's insert then meets
    its key. A model's own step was not compared with the earlier insert, and a sequence key
    was taken for a collision: the document stored twice (1 and 2)."""
    import pymongo.errors

    from mongoengine_ids.testing import connected_threadsafe

    class LateStamped(me.Document):
        meta = {"collection": f"late_stamped_{key_field.__name__.lower()}"}
        id = key_field(primary_key=True)
        name = me.StringField()

        _save_create = stamp_after_insert

    hook = _LandLate(LateStamped._get_collection_name())
    with connected_threadsafe(hook=hook) as connect:
        db = connect()
        stamped = LateStamped(name="a")
        hook.armed = True
        with pytest.raises(pymongo.errors.AutoReconnect, match="still in flight"):
            stamped.save()
        stamped.save()
        collection = db[LateStamped._get_collection_name()]
        assert list(collection.find({}, {"_id": 0})) == [{"name": "a", "stamp": 1}]
        assert [doc.pk for doc in LateStamped.objects.only("id")] == [stamped.pk]
