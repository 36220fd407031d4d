"""Generated fields reached through inheritance: a key declared on an abstract base or a mixin,
fields only a subclass of an embedded class declares (at any depth), lists sorted by such a
field, projections that leave an embedded document's ``_cls`` out, upserts and ``distinct()``
through a base class. Each was missed where the package read the declared class only (found by
probe L). Each test checks the stored documents."""

from __future__ import annotations

from typing import Any

import mongoengine as me
import pytest
from mongoengine.errors import InvalidQueryError, NotUniqueError, OperationError

from mongoengine_ids import LocalityUUID, LocalityUUIDField, SequenceField, UUID4Field, backfill

# -- a generated key declared on a base the hook met first -------------------------------------


class PmKeyMixin:
    id = SequenceField(primary_key=True, sequence_name="pm_keys")


class PmAbstract(me.Document):
    id = SequenceField(primary_key=True, sequence_name="pm_keys")
    name = me.StringField()
    meta = {"abstract": True}


class PmFromAbstract(PmAbstract):
    meta = {"collection": "pm_keyed"}


class PmAbstractOfMixin(PmKeyMixin, me.Document):
    name = me.StringField()
    meta = {"abstract": True}


class PmFromMixin(PmAbstractOfMixin):
    meta = {"collection": "pm_keyed"}


class PmPart(me.EmbeddedDocument):
    code = SequenceField(sequence_name="pm_part_codes")


class PmHolderBase(me.Document):  # hooked for its embedded field, before its subclass's key
    part = me.EmbeddedDocumentField(PmPart)
    meta = {"abstract": True}


class PmKeyedHolder(PmHolderBase):
    id = SequenceField(primary_key=True, sequence_name="pm_keys")
    name = me.StringField()
    meta = {"collection": "pm_keyed"}


KEYED = [PmFromAbstract, PmFromMixin, PmKeyedHolder]


def _keyed() -> list[dict[str, Any]]:
    return list(PmFromAbstract._get_collection().find({}, {"part": 0}).sort("_id"))


@pytest.mark.parametrize("model", KEYED, ids=lambda model: model.__name__)
def test_a_key_assigned_after_building_is_inserted_not_written_over(
    mongoengine_db: Any, model: Any
) -> None:
    first = model(name="first").save()
    late = model(name="second")
    late.id = first.id
    with pytest.raises(NotUniqueError):
        late.save()
    assert _keyed() == [{"_id": first.id, "name": "first"}]


@pytest.mark.parametrize("model", KEYED, ids=lambda model: model.__name__)
def test_the_key_of_a_stored_document_cannot_change(mongoengine_db: Any, model: Any) -> None:
    first = model(name="first").save()
    loaded = model.objects.get(id=first.id)
    loaded.id = 99
    with pytest.raises(OperationError, match="cannot change"):
        loaded.save()
    assert _keyed() == [{"_id": first.id, "name": "first"}]


# -- a generated field reached through a subclass's field --------------------------------------


class PmLeaf(me.EmbeddedDocument):
    meta = {"allow_inheritance": True}


class PmMid(me.EmbeddedDocument):
    meta = {"allow_inheritance": True}


class PmTop(me.Document):  # names PmMid, which declares nothing of the package
    mid = me.EmbeddedDocumentField(PmMid)
    meta = {"collection": "pm_tops"}


class PmCodedLeaf(PmLeaf):  # declared after the model
    code = SequenceField(sequence_name="pm_leaf_codes")
    uid = UUID4Field()


class PmMidSub(PmMid):  # holds the leaf in a field of its own
    leaf = me.EmbeddedDocumentField(PmLeaf)


def test_values_inside_a_field_only_a_subclass_declares_are_written(
    mongoengine_db: Any,
) -> None:
    PmTop(mid=PmMidSub(leaf=PmCodedLeaf())).save()
    PmTop.objects.insert([PmTop(mid=PmMidSub(leaf=PmCodedLeaf())) for _ in range(2)])
    leaves = [doc["mid"]["leaf"] for doc in PmTop._get_collection().find()]
    assert [leaf["code"] for leaf in leaves] == [1, 2, 3]
    assert len({leaf["uid"] for leaf in leaves}) == 3
    before = list(PmTop._get_collection().find())
    with pytest.raises(InvalidQueryError, match=r"PmCodedLeaf\.code is generated"):
        PmTop.objects.update(inc__mid__leaf__code=1)
    assert list(PmTop._get_collection().find()) == before


# -- sorted lists -------------------------------------------------------------------------------


class PmSortedPart(me.EmbeddedDocument):
    label = me.StringField()
    meta = {"allow_inheritance": True}


class PmNumberedPart(PmSortedPart):
    n = SequenceField(sequence_name="pm_sorted_n")


class PmGenericPart(me.EmbeddedDocument):
    n = SequenceField(sequence_name="pm_generic_n")


class PmSorted(me.Document):
    by_base = me.SortedListField(me.EmbeddedDocumentField(PmSortedPart), ordering="n")
    by_choice = me.SortedListField(
        me.GenericEmbeddedDocumentField(choices=[PmGenericPart]), ordering="n"
    )
    meta = {"collection": "pm_sorted"}


def test_a_list_sorted_by_a_subclass_or_choice_field_is_saved_sorted(mongoengine_db: Any) -> None:
    PmSorted(
        by_base=[PmNumberedPart(label="a"), PmNumberedPart(label="b")],
        by_choice=[PmGenericPart(), PmGenericPart()],
    ).save()
    (stored,) = PmSorted._get_collection().find()
    assert [(p["label"], p["n"]) for p in stored["by_base"]] == [("a", 1), ("b", 2)]
    assert [p["n"] for p in stored["by_choice"]] == [1, 2]


# -- projections that leave an embedded document's _cls out ------------------------------------


class PmBoxPart(me.EmbeddedDocument):
    label = me.StringField()
    kind = me.StringField()
    meta = {"allow_inheritance": True}


class PmCodedPart(PmBoxPart):
    code = SequenceField(sequence_name="pm_box_codes")
    n = SequenceField(scope="kind", sequence_name="pm_box_n")


class PmBox(me.Document):
    name = me.StringField()
    part = me.EmbeddedDocumentField(PmBoxPart)
    parts = me.ListField(me.EmbeddedDocumentField(PmBoxPart))
    meta = {"collection": "pm_boxes"}


@pytest.fixture
def box(mongoengine_db: Any) -> dict[str, Any]:
    PmBox(name="b", part=PmCodedPart(kind="a"), parts=[PmCodedPart(kind="a")]).save()
    stored = PmBox._get_collection().find_one()
    assert stored is not None
    return stored


def _loaded(*fields: str) -> PmBox:
    return PmBox.objects.only(*fields).get(name="b")


def test_an_embedded_document_loaded_without_its_class_is_not_written_whole(
    box: dict[str, Any],
) -> None:
    loaded = _loaded("parts.label")
    assert type(loaded.parts[0]) is PmBoxPart  # as MongoEngine loads it
    loaded.parts.append(PmCodedPart(label="new", kind="a"))
    with pytest.raises(OperationError, match=r"PmCodedPart\.code .* may be stored as PmCodedPart"):
        loaded.save()
    assert PmBox._get_collection().find_one() == box


def test_its_scope_changed_is_refused(box: dict[str, Any]) -> None:
    loaded = _loaded("part.kind")
    loaded.part.kind = "c"
    with pytest.raises(OperationError, match=r"PmCodedPart\.n .* numbered by changed"):
        loaded.save()
    assert PmBox._get_collection().find_one() == box


def test_one_loaded_with_its_class_is_saved(box: dict[str, Any]) -> None:
    loaded = _loaded("parts")  # whole items, _cls too
    loaded.parts.append(PmCodedPart(label="new", kind="a"))
    loaded.save()
    stored = PmBox._get_collection().find_one()
    assert stored is not None
    assert stored["parts"] == [
        box["parts"][0],
        {"_cls": "PmCodedPart", "label": "new", "kind": "a", "code": 3, "n": 3},
    ]


# -- through the base class's queryset ---------------------------------------------------------


class PmBase(me.Document):
    name = me.StringField()
    meta = {"allow_inheritance": True, "collection": "pm_bases"}


class PmSub(PmBase):
    n = SequenceField(sequence_name="pm_sub_n")


def test_an_upsert_through_the_base_queryset_tells_a_subclass_field(mongoengine_db: Any) -> None:
    PmSub(name="a").save()
    PmBase.objects(name="a").update_one(upsert=True, set__n=3)
    PmSub(name="b").save()
    numbers = sorted(doc["n"] for doc in PmBase._get_collection().find())
    assert numbers == [3, 4]
    with pytest.raises(InvalidQueryError, match=r"PmSub\.n is generated"):
        PmBase.objects(name="a").update_one(upsert=True, set__n=None)
    assert sorted(doc["n"] for doc in PmBase._get_collection().find()) == [3, 4]


class PmScopedSub(PmBase):
    tenant = me.StringField()
    num = SequenceField(scope="tenant", sequence_name="pm_scoped_sub_num")


@pytest.mark.parametrize(
    "upsert",
    [
        lambda: PmBase.objects(name="new").update_one(upsert=True, set__n=1),
        lambda: PmBase.objects(n=2).update_one(upsert=True, set__name="by-filter"),
        lambda: PmBase.objects(tenant="t1").update_one(upsert=True, set__num=1),
        lambda: PmBase.objects(name="s").upsert_one(set__tenant="t1", set__num=2),
        lambda: PmBase.objects(name="m").modify(upsert=True, set__n=5),
    ],
    ids=["set", "filter", "scoped", "upsert_one", "modify"],
)
def test_an_upsert_through_the_base_queryset_inserting_a_subclass_value_is_refused(
    mongoengine_db: Any, upsert: Any
) -> None:
    # Probe AR: it inserts a PmBase, which holds no such field: the value was told to no
    # counter (the filter's, a scoped one's), and later PmSub documents got it again.
    PmSub(name="a").save()
    before = list(PmBase._get_collection().find())
    with pytest.raises(
        InvalidQueryError, match=r"declared by a subclass of PmBase.*PmS\w+\.objects"
    ):
        upsert()
    assert list(PmBase._get_collection().find()) == before
    assert PmSub(name="b").save().n == 2


class PmDynamicBase(me.DynamicDocument):
    name = me.StringField()
    meta = {"allow_inheritance": True, "collection": "pm_dynamic_bases"}


class PmDynamicSub(PmDynamicBase):
    n = SequenceField(sequence_name="pm_dynamic_sub_n")


def test_an_upsert_through_a_dynamic_base_giving_a_subclass_field_is_refused(
    mongoengine_db: Any,
) -> None:
    """Probe BC found it refused with a false reason (a ``DynamicDocument`` holds any
    attribute); review P showed that letting it insert stored values told to no field (a scope
    given with it, a value in the filter): refused, saying what the base would hold."""
    with pytest.raises(InvalidQueryError, match="holds it as a dynamic attribute of its own"):
        PmDynamicBase.objects(name="upserted").update_one(set__n=2, upsert=True)
    with pytest.raises(InvalidQueryError, match=r"upsert through PmDynamicSub\.objects"):
        PmDynamicBase.objects(name="upserted", n=2).upsert_one(set__name="x")
    assert list(mongoengine_db.pm_dynamic_bases.find()) == []
    assert PmDynamicSub(name="sub").save().n == 1


class PmShelf(me.Document):
    name = me.StringField()
    code = me.IntField()
    meta = {"allow_inheritance": True, "collection": "pm_shelves"}


class PmNumberedShelf(PmShelf):
    code = SequenceField(sequence_name="pm_numbered_shelf_code")  # the base's place, numbered


def test_an_upsert_through_the_base_giving_its_own_field_is_not_refused(
    mongoengine_db: Any,
) -> None:
    # Review I: a subclass numbering the base's own field had the base's upserts refused.
    PmShelf.objects(code=7).modify(upsert=True, set__name="a")
    PmShelf.objects(name="b").update_one(upsert=True, set__code=8)
    stored = sorted((d["name"], d["code"]) for d in PmShelf._get_collection().find())
    assert stored == [("a", 7), ("b", 8)]


class PmPlainSub(PmBase):
    tenant = me.StringField()
    num = me.IntField()  # a plain field of the name PmScopedSub numbers


def test_a_sibling_class_field_of_the_same_name_is_not_taken_for_a_number(
    mongoengine_db: Any,
) -> None:
    # Probe AR: the move of the scope read every matched document, and took PmPlainSub's num
    # for a second number 1 moved into t2 (NotUniqueError); plain MongoEngine applies it.
    PmScopedSub(name="a", tenant="t1").save()
    PmPlainSub(name="b", tenant="t1", num=1).save()
    assert PmBase.objects(tenant="t1").update(set__tenant="t2") == 2
    stored = sorted((d["_cls"], d["tenant"], d["num"]) for d in PmBase._get_collection().find())
    assert stored == [("PmBase.PmPlainSub", "t2", 1), ("PmBase.PmScopedSub", "t2", 1)]
    assert PmScopedSub(name="c", tenant="t2").save().num == 2  # t2's counter was told 1


class PmDistinctPart(me.EmbeddedDocument):
    meta = {"allow_inheritance": True}


class PmDistinctChild(PmDistinctPart):
    cid = LocalityUUIDField(db_field="c")


class PmDistinctGrandchild(PmDistinctChild):
    gid = LocalityUUIDField()


class PmDistinct(me.Document):
    part = me.EmbeddedDocumentField(PmDistinctPart)
    parts = me.ListField(me.EmbeddedDocumentField(PmDistinctPart))
    meta = {"collection": "pm_distinct"}


@pytest.mark.parametrize(
    ("path", "value"),
    [
        ("part.gid", lambda saved: saved.part.gid),  # a grandchild's (MongoEngine reads
        ("parts.gid", lambda saved: saved.parts[0].gid),  # children only)
        ("part.c", lambda saved: saved.part.cid),  # by its stored name, through a child
        ("parts.c", lambda saved: saved.parts[0].cid),
    ],
)
def test_distinct_of_a_subclass_field_gives_its_values(
    mongoengine_db: Any, path: str, value: Any
) -> None:
    saved = PmDistinct(part=PmDistinctGrandchild(), parts=[PmDistinctGrandchild()]).save()
    values = PmDistinct.objects.distinct(path)
    assert values == [value(saved)]
    assert isinstance(values[0], LocalityUUID)


class PmFillBase(me.Document):
    name = me.StringField()
    meta = {"allow_inheritance": True, "collection": "pm_fill"}


class PmFillSub(PmFillBase):
    n = SequenceField(sequence_name="pm_fill_n")


class PmFillOther(PmFillBase):
    n = SequenceField(sequence_name="pm_fill_other_n")  # another field of the same name


@pytest.mark.parametrize("names", [(), ("n",)], ids=["all", "named"])
def test_backfill_of_a_base_fills_its_subclasses_fields(mongoengine_db: Any, names: Any) -> None:
    collection = PmFillBase._get_collection()
    collection.insert_many(
        [
            {"_cls": "PmFillBase", "name": "base"},
            {"_cls": "PmFillBase.PmFillSub", "name": "sub 1"},
            {"_cls": "PmFillBase.PmFillSub", "name": "sub 2", "n": 7},
            {"_cls": "PmFillBase.PmFillOther", "name": "other"},
        ]
    )
    assert backfill(PmFillBase, *names) == 2
    stored = {doc["name"]: doc.get("n") for doc in collection.find()}
    assert stored == {"base": None, "sub 1": 1, "sub 2": 7, "other": 1}
    assert backfill(PmFillBase, *names) == 0  # nothing left to fill
    with pytest.raises(ValueError, match="'code' is not a generated field of PmFillBase"):
        backfill(PmFillBase, "code")


class PmOverBase(me.Document):
    name = me.StringField()
    code = SequenceField(sequence_name="pm_over_base")
    meta = {"allow_inheritance": True, "collection": "pm_over"}


class PmOverSub(PmOverBase):
    code = SequenceField(sequence_name="pm_over_sub")  # its own numbering


def test_backfill_of_a_base_fills_an_overriding_field_from_its_own_counter(
    mongoengine_db: Any,
) -> None:
    collection = PmOverBase._get_collection()
    collection.insert_many(
        [{"_cls": "PmOverBase", "name": "b"}, {"_cls": "PmOverBase.PmOverSub", "name": "s"}]
    )
    assert backfill(PmOverBase) == 2
    PmOverSub(name="s2").save()
    stored = {doc["name"]: doc["code"] for doc in collection.find()}
    assert stored == {"b": 1, "s": 1, "s2": 2}  # s from the subclass's counter, s2 after it
