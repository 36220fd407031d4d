"""Managers with their own default querysets (a soft-deleting one must keep soft-deleting, the
plain one must really delete), map entries of embedded documents keeping their reserved values,
upserts that set a held value (by key: its own document's; onto another document: refused), and
a multi-document upsert whose new embedded documents are only set on insert. Each test checks
the raw stored documents, beside a model of plain fields."""

from __future__ import annotations

from typing import Any

import mongoengine as me
import pytest

from mongoengine_ids import RandomUniqueField, SequenceField, UUID4Field
from mongoengine_ids.errors import ExplicitValueError


def raw(model: type[me.Document]) -> list[dict[str, Any]]:
    return list(model._get_collection().find())


# -- a model with a plain manager and a custom one: the custom one loses its queryset --------


class MgrSoftDeleteQuerySet(me.QuerySet):
    def delete(self, *args: Any, **kwargs: Any) -> Any:  # soft delete
        return self.update(set__deleted=True)


class MgrTrashManager(me.queryset.QuerySetManager):
    default = MgrSoftDeleteQuerySet


class MgrTwoManagers(me.Document):
    num = SequenceField()
    name = me.StringField()
    deleted = me.BooleanField(default=False)
    objects = me.queryset.QuerySetManager()
    trash = MgrTrashManager()
    meta = {"collection": "mgr_two_managers"}


class MgrPlainTwoManagers(me.Document):
    num = me.SequenceField()
    name = me.StringField()
    deleted = me.BooleanField(default=False)
    objects = me.queryset.QuerySetManager()
    trash = MgrTrashManager()
    meta = {"collection": "mgr_plain_two_managers"}


@pytest.mark.parametrize("model", [MgrPlainTwoManagers, MgrTwoManagers])
def test_custom_manager_keeps_its_own_queryset(mongoengine_db: Any, model: Any) -> None:
    model(name="a").save()
    model.trash(name="a").delete()  # the soft-deleting manager: keeps the document
    assert [(d["name"], d["deleted"]) for d in raw(model)] == [("a", True)]


@pytest.mark.parametrize("model", [MgrPlainTwoManagers, MgrTwoManagers])
def test_the_plain_manager_keeps_its_own_queryset(mongoengine_db: Any, model: Any) -> None:
    model(name="a").save()
    model.objects(name="a").delete()  # the plain manager: a real delete
    assert raw(model) == []


# 1b. the soft-deleting manager is the model's only `objects`, next to a @queryset_manager
#     (MongoEngine's documented way to add a filtered manager): `objects` loses its queryset.


def _alive(doc_cls: Any, queryset: Any) -> Any:
    return queryset.filter(deleted=False)


class MgrSoftWithShortcut(me.Document):
    num = SequenceField()
    name = me.StringField()
    deleted = me.BooleanField(default=False)
    objects = MgrTrashManager()
    alive = me.queryset_manager(_alive)
    meta = {"collection": "mgr_soft_with_shortcut"}


class MgrPlainSoftWithShortcut(me.Document):
    num = me.SequenceField()
    name = me.StringField()
    deleted = me.BooleanField(default=False)
    objects = MgrTrashManager()
    alive = me.queryset_manager(_alive)
    meta = {"collection": "mgr_plain_soft_with_shortcut"}


@pytest.mark.parametrize("model", [MgrPlainSoftWithShortcut, MgrSoftWithShortcut])
def test_soft_deleting_objects_beside_a_queryset_manager(mongoengine_db: Any, model: Any) -> None:
    model(name="a").save()
    model.objects(name="a").delete()
    assert [(d["name"], d["deleted"]) for d in raw(model)] == [("a", True)]


# 1c. a subclass (allow_inheritance) declaring its own `objects`: the base's auto-added manager
#     is in the MRO too, so the subclass's manager loses its queryset.


class MgrBase(me.Document):
    num = SequenceField()
    name = me.StringField()
    deleted = me.BooleanField(default=False)
    meta = {"collection": "mgr_base", "allow_inheritance": True}


class MgrChild(MgrBase):
    objects = MgrTrashManager()


class MgrPlainBase(me.Document):
    num = me.SequenceField()
    name = me.StringField()
    deleted = me.BooleanField(default=False)
    meta = {"collection": "mgr_plain_base", "allow_inheritance": True}


class MgrPlainChild(MgrPlainBase):
    objects = MgrTrashManager()


@pytest.mark.parametrize("model", [MgrPlainChild, MgrChild])
def test_subclass_manager_keeps_its_queryset(mongoengine_db: Any, model: Any) -> None:
    model(name="a").save()
    model.objects(name="a").delete()
    assert [(d["name"], d["deleted"]) for d in raw(model)] == [("a", True)]


# -- a loaded document's map of embedded documents keyed by digits ("2024"): a rebuilt entry
#       keeping its reserved value is refused (the probe drops the key as if a list index) -----


class MgrBadge(me.EmbeddedDocument):
    code = RandomUniqueField(min_value=1, max_value=10**6, reserve_in="mgr_badge_codes")
    label = me.StringField()


class MgrYears(me.Document):
    name = me.StringField()
    badges = me.MapField(me.EmbeddedDocumentField(MgrBadge))
    meta = {"collection": "mgr_years"}


@pytest.mark.parametrize("key", ["a2024", "2024"])
def test_rebuilt_map_entry_keeps_its_reserved_value(mongoengine_db: Any, key: str) -> None:
    MgrYears(name="y", badges={key: MgrBadge(label="old")}).save()
    loaded = MgrYears.objects.get(name="y")
    code = loaded.badges[key].code
    loaded.badges[key] = MgrBadge(code=code, label="new")  # same value, rebuilt entry
    loaded.save()  # "2024": NotUniqueError, already reserved
    assert [d["badges"] for d in raw(MgrYears)] == [{key: {"code": code, "label": "new"}}]


def test_map_entry_moved_to_another_key_keeps_its_reserved_value(mongoengine_db: Any) -> None:
    # A list item may move to another index (any item is probed); a map entry may not move to
    # another key: the probe names the key. (Also refused before these commits.)
    MgrYears(name="y", badges={"draft": MgrBadge(label="b")}).save()
    loaded = MgrYears.objects.get(name="y")
    code = loaded.badges["draft"].code
    loaded.badges = {"final": MgrBadge(code=code, label="b")}  # rebuilt under another key
    loaded.save()  # NotUniqueError: already reserved
    assert [d["badges"] for d in raw(MgrYears)] == [{"final": {"code": code, "label": "b"}}]


# -- an upsert by key that also $sets the key's own value (a sync that writes every field):
#       the value, held by the very document the filter matches, is told and refused ---------


class MgrCard(me.Document):
    number = RandomUniqueField(min_value=1, max_value=10**6, reserve_in="mgr_card_numbers")
    holder = me.StringField()
    meta = {"collection": "mgr_cards"}


class MgrStrict(me.Document):
    num = SequenceField(allow_explicit=False)
    holder = me.StringField()
    meta = {"collection": "mgr_strict"}


class MgrPlainCard(me.Document):
    number = me.IntField(unique=True)
    holder = me.StringField()
    meta = {"collection": "mgr_plain_cards"}


@pytest.mark.parametrize(
    ("model", "field"), [(MgrPlainCard, "number"), (MgrCard, "number"), (MgrStrict, "num")]
)
def test_upsert_by_key_setting_the_same_key_value(
    mongoengine_db: Any, model: Any, field: str
) -> None:
    if model is MgrPlainCard:
        model(number=7, holder="a").save()
    else:
        model(holder="a").save()
    value = raw(model)[0][field]
    model.objects(**{field: value}).update_one(
        upsert=True, **{f"set__{field}": value, "set__holder": "b"}
    )  # MgrCard: NotUniqueError (already reserved); MgrStrict: explicit value refused
    assert [(d[field], d["holder"]) for d in raw(model)] == [(value, "b")]


# -- update(upsert=True) of several documents whose only new embedded documents are in
#       set_on_insert__: nothing is inserted when documents match, so nothing holds the value,
#       yet it is refused (not a regression of these commits: refused before them as well) ----


class MgrTag(me.EmbeddedDocument):
    tid = UUID4Field()
    label = me.StringField()


class MgrPlainTag(me.EmbeddedDocument):
    tid = me.UUIDField()
    label = me.StringField()


class MgrGroup(me.Document):
    group = me.StringField()
    seen = me.BooleanField(default=False)
    tags = me.ListField(me.EmbeddedDocumentField(MgrTag))
    meta = {"collection": "mgr_groups"}


class MgrPlainGroup(me.Document):
    group = me.StringField()
    seen = me.BooleanField(default=False)
    tags = me.ListField(me.EmbeddedDocumentField(MgrPlainTag))
    meta = {"collection": "mgr_plain_groups"}


@pytest.mark.parametrize(("model", "tag"), [(MgrPlainGroup, MgrPlainTag), (MgrGroup, MgrTag)])
def test_multi_upsert_with_set_on_insert_embedded(
    mongoengine_db: Any, model: Any, tag: Any
) -> None:
    model(group="g").save()
    model(group="g").save()
    model.objects(group="g").update(
        upsert=True, set__seen=True, set_on_insert__tags=[tag(label="x")]
    )  # MgrGroup: InvalidQueryError, nothing written
    assert [(d["seen"], d["tags"]) for d in raw(model)] == [(True, []), (True, [])]


# -- An upsert whose filter names the field with another condition, setting a value another
#    document holds: the value is told (the look-up keeps the filter's own condition) and refused.


@pytest.mark.parametrize(
    ("model", "field"), [(MgrPlainCard, "number"), (MgrCard, "number"), (MgrStrict, "num")]
)
def test_upsert_moving_another_document_onto_a_held_value(
    mongoengine_db: Any, model: Any, field: str
) -> None:
    if model is MgrPlainCard:
        model(number=7, holder="a").save()
        model(number=8, holder="b").save()
    else:
        model(holder="a").save()
        model(holder="b").save()
    first, second = (d[field] for d in raw(model))
    with pytest.raises((me.NotUniqueError, ExplicitValueError)):
        model.objects(**{field: second}).update_one(upsert=True, **{f"set__{field}": first})
    values = [d[field] for d in raw(model)]
    assert len(set(values)) == len(values) == 2


@pytest.mark.parametrize(
    ("model", "field"), [(MgrPlainCard, "number"), (MgrCard, "number"), (MgrStrict, "num")]
)
def test_upsert_inserting_a_held_value(mongoengine_db: Any, model: Any, field: str) -> None:
    if model is MgrPlainCard:
        model(number=7, holder="a").save()
    else:
        model(holder="a").save()
    (held,) = (d[field] for d in raw(model))
    with pytest.raises((me.NotUniqueError, ExplicitValueError)):
        model.objects(**{f"{field}__gt": held}).update_one(
            upsert=True, **{f"set__{field}": held, "set__holder": "b"}
        )
    values = [d[field] for d in raw(model)]
    assert values == [held]


# 5. _stored_in looks for the value under the field's key at any depth of the top-level field:
#    a plain field of the same name nested deeper (a part's own `code`) counts as the stored
#    copy holding the value, so a value reserved by another document is taken without a check.
