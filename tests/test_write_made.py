"""Managers and querysets as MongoEngine makes them (a user's meta["queryset_class"] on a subclass,
an abstract base's manager shared with plain siblings, a manager overriding __get__, a manager on
an instance), and a nested plain field of the same name. Each beside the same models built from
plain fields."""

from __future__ import annotations

from typing import Any

import mongoengine as me
import pytest
from mongoengine.queryset import QuerySetManager

from mongoengine_ids import RandomUniqueField, SequenceField


def raw(model: Any) -> list[dict[str, Any]]:
    return list(model._get_collection().find({}, {"_id": 0}))


class MadeSoftQS(me.QuerySet):
    def delete(self, *args: Any, **kwargs: Any) -> Any:
        return self.update(set__deleted=True)


class MadeHardQS(me.QuerySet):
    """A QuerySet subclass that deletes for real (the manager's own default)."""


class MadeHardManager(QuerySetManager):
    default = MadeHardQS


# 1. A model's meta["queryset_class"] is ignored when it inherits a manager the package
#    replaced on an abstract base: the child's soft delete deletes for real.


class MadeAbsGen(me.Document):
    num = SequenceField()
    name = me.StringField()
    deleted = me.BooleanField(default=False)
    objects = MadeHardManager()
    meta = {"abstract": True}


class MadeAbsPlain(me.Document):
    num = me.SequenceField()
    name = me.StringField()
    deleted = me.BooleanField(default=False)
    objects = MadeHardManager()
    meta = {"abstract": True}


class MadeChildGen(MadeAbsGen):
    meta = {"queryset_class": MadeSoftQS, "collection": "made_child_gen"}


class MadeChildPlain(MadeAbsPlain):
    meta = {"queryset_class": MadeSoftQS, "collection": "made_child_plain"}


@pytest.mark.parametrize("model", [MadeChildPlain, MadeChildGen])
def test_meta_queryset_class_under_abstract_manager(mongoengine_db: Any, model: Any) -> None:
    model(name="a").save()
    model.objects(name="a").delete()  # meta["queryset_class"]: soft delete
    assert [(d["name"], d["deleted"]) for d in raw(model)] == [("a", True)]


# 1b. Same through allow_inheritance: a subclass giving its own meta["queryset_class"].


class MadeInhGen(me.Document):
    num = SequenceField()
    name = me.StringField()
    deleted = me.BooleanField(default=False)
    objects = MadeHardManager()
    meta = {"allow_inheritance": True, "collection": "made_inh_gen"}


class MadeInhGenSub(MadeInhGen):
    meta = {"queryset_class": MadeSoftQS}


class MadeInhPlain(me.Document):
    num = me.SequenceField()
    name = me.StringField()
    deleted = me.BooleanField(default=False)
    objects = MadeHardManager()
    meta = {"allow_inheritance": True, "collection": "made_inh_plain"}


class MadeInhPlainSub(MadeInhPlain):
    meta = {"queryset_class": MadeSoftQS}


@pytest.mark.parametrize("model", [MadeInhPlainSub, MadeInhGenSub])
def test_meta_queryset_class_of_subclass(mongoengine_db: Any, model: Any) -> None:
    model(name="a").save()
    model.objects(name="a").delete()
    assert [(d["name"], d["deleted"]) for d in raw(model)] == [("a", True)]


# 2. A custom manager overriding __get__ (a filtered manager) loses its override.


class MadeAliveManager(QuerySetManager):
    default = MadeSoftQS

    def __get__(self, instance: Any, owner: Any) -> Any:
        queryset = super().__get__(instance, owner)
        return queryset if instance is not None else queryset.filter(deleted=False)


class MadeAliveGen(me.Document):
    num = SequenceField()
    name = me.StringField()
    deleted = me.BooleanField(default=False)
    objects = MadeAliveManager()
    meta = {"collection": "made_alive_gen"}


class MadeAlivePlain(me.Document):
    num = me.SequenceField()
    name = me.StringField()
    deleted = me.BooleanField(default=False)
    objects = MadeAliveManager()
    meta = {"collection": "made_alive_plain"}


@pytest.mark.parametrize("model", [MadeAlivePlain, MadeAliveGen])
def test_manager_overriding_get(mongoengine_db: Any, model: Any) -> None:
    model(name="a").save()
    model(name="b", deleted=True).save()
    model.objects.update(set__name="z")  # only the live documents
    assert sorted((d["name"], d["deleted"]) for d in raw(model)) == [
        ("b", True),
        ("z", False),
    ]


# 3. A custom manager's own methods/attributes, reached on an instance (MongoEngine gives the
#    manager itself) or on the class's manager object.


class MadeHelperManager(QuerySetManager):
    default = MadeSoftQS
    label = "helper"

    def describe(self) -> str:
        return "manager of soft deletes"


class MadeHelperGen(me.Document):
    num = SequenceField()
    objects = MadeHelperManager()
    meta = {"collection": "made_helper_gen"}


class MadeHelperPlain(me.Document):
    num = me.SequenceField()
    objects = MadeHelperManager()
    meta = {"collection": "made_helper_plain"}


@pytest.mark.parametrize("model", [MadeHelperPlain, MadeHelperGen])
def test_manager_on_instance(mongoengine_db: Any, model: Any) -> None:
    document = model()
    assert isinstance(document.objects, MadeHelperManager)
    assert document.objects.label == "helper"
    assert document.objects.describe() == "manager of soft deletes"


class MadePart(me.EmbeddedDocument):
    code = me.IntField()  # plain: a supplier's part code


class MadeBadge(me.EmbeddedDocument):
    code = RandomUniqueField(min_value=1, max_value=10**6, reserve_in="made_badge_codes")
    parts = me.ListField(me.EmbeddedDocumentField(MadePart))


class MadeHolder(me.Document):
    name = me.StringField()
    badges = me.ListField(me.EmbeddedDocumentField(MadeBadge))
    meta = {"collection": "made_holders"}


def test_nested_plain_field_of_same_name_is_not_the_stored_value(mongoengine_db: Any) -> None:
    MadeHolder(name="a", badges=[MadeBadge()]).save()
    taken = raw(MadeHolder)[0]["badges"][0]["code"]  # reserved by a
    MadeHolder(name="b", badges=[MadeBadge(parts=[MadePart(code=taken)])]).save()
    loaded = MadeHolder.objects.get(name="b")
    loaded.badges[0].code = taken  # a's reserved code: must be refused
    with pytest.raises(me.NotUniqueError):
        loaded.save()
    codes = [d["badges"][0]["code"] for d in raw(MadeHolder)]
    assert len(set(codes)) == 2, codes


# 6. A model with no generated field is changed too: an abstract base (allow_inheritance) with
#    its own manager, one concrete child with a generated field, a sibling of plain fields that
#    gives its meta["queryset_class"]. The package replaced the abstract base's manager.


class MadeAbsShared(me.Document):
    name = me.StringField()
    deleted = me.BooleanField(default=False)
    objects = MadeHardManager()
    meta = {"abstract": True, "allow_inheritance": True}


class MadeSiblingPlain(MadeAbsShared):
    meta = {"queryset_class": MadeSoftQS, "collection": "made_sibling_plain"}


def test_plain_sibling_keeps_meta_queryset_class(mongoengine_db: Any) -> None:
    class MadeSiblingGen(MadeAbsShared):  # defined later, e.g. in another module
        num = SequenceField()
        meta = {"collection": "made_sibling_gen"}

    MadeSiblingPlain(name="a").save()
    MadeSiblingPlain.objects(name="a").delete()  # soft delete (its meta["queryset_class"])
    assert [(d["name"], d["deleted"]) for d in raw(MadeSiblingPlain)] == [("a", True)]
