"""Querysets made by MongoEngine for models with generated fields: a queryset_manager function
of more arguments, pickling, plain siblings under a shared concrete base keeping MongoEngine's
own class, and a subclass whose mixin's __init_subclass__ never reaches the hooked model. Each
beside the same models built from plain fields."""

from __future__ import annotations

import pickle
from typing import Any

import mongoengine as me
import pytest
from mongoengine.queryset import QuerySet, queryset_manager

from mongoengine_ids import SequenceField


def raw(model: Any) -> list[dict[str, Any]]:
    return list(model._get_collection().find({}, {"_id": 0}))


# 1. A queryset_manager function taking arguments (doc_cls, queryset, *args): MongoEngine's
#    __get__ returns functools.partial(func, owner, queryset); the wrapper leaves the partial
#    as it is, so calling it yields a plain QuerySet and the upsert generates nothing.


class QmArgs(me.Document):
    num = SequenceField()
    name = me.StringField()
    meta = {"collection": "qm_args"}

    @queryset_manager
    def named(doc_cls, queryset, name):
        return queryset.filter(name=name)


@pytest.mark.parametrize("via", ["objects", "named"])
def test_queryset_manager_with_arguments_upserts_generate(mongoengine_db: Any, via: str) -> None:
    queryset = QmArgs.objects(name="x") if via == "objects" else QmArgs.named("x")
    queryset.update(upsert=True, set__name="x")
    assert [d.get("num") for d in raw(QmArgs)] == [1]


# 2. Pickling a queryset of a model with generated fields: the generating class is made with
#    type() and is not reachable as mongoengine_ids.write.seam.GeneratingQuerySet.


class QmPickleGen(me.Document):
    num = SequenceField()
    name = me.StringField()
    meta = {"collection": "qm_pickle_gen"}


class QmPicklePlain(me.Document):
    num = me.SequenceField()
    name = me.StringField()
    meta = {"collection": "qm_pickle_plain"}


@pytest.mark.parametrize("model", [QmPicklePlain, QmPickleGen])
def test_queryset_pickles(mongoengine_db: Any, model: Any) -> None:
    model(name="a").save()
    loaded = pickle.loads(pickle.dumps(model.objects(name="a")))
    assert [d.name for d in loaded] == ["a"]


# 3. A plain model beside a generating one under a shared concrete allow_inheritance base:
#    the base is marked, and the mark (a class attribute) is inherited by every subclass of
#    it, so the plain sibling's querysets are turned into GeneratingQuerySet.


class QmRootGen(me.Document):
    name = me.StringField()
    meta = {"allow_inheritance": True, "collection": "qm_root_gen"}


class QmPlainKidGen(QmRootGen):
    pass


class QmGenKid(QmRootGen):
    num = SequenceField()


class QmRootPlain(me.Document):
    name = me.StringField()
    meta = {"allow_inheritance": True, "collection": "qm_root_plain"}


class QmPlainKidPlain(QmRootPlain):
    pass


class QmPlainKid2(QmRootPlain):
    num = me.SequenceField()


@pytest.mark.parametrize("model", [QmPlainKidPlain, QmPlainKidGen])
def test_plain_sibling_keeps_mongoengines_queryset(mongoengine_db: Any, model: Any) -> None:
    assert type(model.objects) is QuerySet
    assert type(model(name="a")._qs) is QuerySet


# 4. A manager whose __get__ makes the queryset itself as MongoEngine's does (the model's
#    meta["queryset_class"], else its default) without calling QuerySetManager.__get__:
#    before fa28cd2 that class was the generating one; now the upsert generates nothing.


# -- a mixin whose __init_subclass__ does not call super()


class MixedRegistered:
    """A plain registry mixin, as often written: no super().__init_subclass__()."""

    kinds: dict[str, type] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        MixedRegistered.kinds[cls.__name__] = cls


class MixedRoot(me.Document):
    num = SequenceField()
    name = me.StringField()
    meta = {"collection": "qm_mixed", "allow_inheritance": True}


class MixedSub(MixedRegistered, MixedRoot):
    pass


def test_subclass_with_registry_mixin_upsert_generates(mongoengine_db: Any) -> None:
    MixedSub.objects(name="x").update(upsert=True, set__name="x")
    assert [d.get("num") for d in raw(MixedRoot)] == [1]


def test_subclass_with_registry_mixin_insert_generates(mongoengine_db: Any) -> None:
    MixedSub.objects.insert([MixedSub(name="x")])
    assert [d.get("num") for d in raw(MixedRoot)] == [1]


def test_subclass_with_registry_mixin_save_generates(mongoengine_db: Any) -> None:
    # holds (the save wrappers are inherited): shown for contrast with the two above
    MixedSub(name="x").save()
    assert [d.get("num") for d in raw(MixedRoot)] == [1]
