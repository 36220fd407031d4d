"""Everyday MongoEngine paths: projections loaded by modify() and in_bulk(), values assigned
to loaded embedded documents, pull__ of an embedded document, multi-document updates, empty
upserts, a QuerySetManager's own default queryset, a replaced embedded document keeping its
value. Each test checks the raw stored documents and, where it applies, compares with a model
of plain MongoEngine fields beside it.
"""

from __future__ import annotations

import copy
import pickle
from typing import Any

import mongoengine as me
import pytest
from mongoengine.context_managers import no_dereference
from mongoengine.errors import InvalidQueryError
from mongoengine.queryset import QuerySet, QuerySetManager

from mongoengine_ids import (
    LocalityUUIDField,
    RandomUniqueField,
    SequenceField,
    UUID4Field,
    UUID7Field,
)


def raw(model: type[me.Document]) -> list[dict[str, Any]]:
    return list(model._get_collection().find())


# -- projection loads that bypass __next__/__getitem__ are not recorded -----------------------


class DayNumbered(me.Document):
    number = SequenceField()
    name = me.StringField()
    other = me.StringField()


def test_modify_new_with_only_then_save_spends_no_counter_value(mongoengine_db: Any) -> None:
    DayNumbered(name="a").save()
    assert DayNumbered.number.get_next_value() == 2
    loaded = DayNumbered.objects(name="a").only("name").modify(new=True, set__other="o")
    loaded.name = "b"
    loaded.save()
    (stored,) = raw(DayNumbered)
    assert stored["number"] == 1
    assert stored["name"] == "b"
    # docs/guarantees.md: fields a projection left out are "not regenerated (no counter value
    # spent)". modify() loads through _from_son, not __next__: the projection is not recorded,
    # save() takes the field for one the stored copy lacks and draws a value (then drops it).
    assert DayNumbered.number.get_next_value() == 2


def test_in_bulk_with_only_then_save_spends_no_counter_value(mongoengine_db: Any) -> None:
    doc = DayNumbered(name="a").save()
    assert DayNumbered.number.get_next_value() == 2
    loaded = DayNumbered.objects.only("name").in_bulk([doc.id])[doc.id]
    loaded.name = "b"
    loaded.save()
    (stored,) = raw(DayNumbered)
    assert stored["number"] == 1
    assert stored["name"] == "b"
    assert DayNumbered.number.get_next_value() == 2


# -- a value assigned to a loaded embedded document is not told to its field ------------------


class DayTag(me.EmbeddedDocument):
    n = SequenceField()
    name = me.StringField()


class DayTagHolder(me.Document):
    name = me.StringField()
    tags = me.ListField(me.EmbeddedDocumentField(DayTag))
    main = me.EmbeddedDocumentField(DayTag)


def test_value_assigned_to_loaded_embedded_document_is_told_to_the_counter(
    mongoengine_db: Any,
) -> None:
    doc = DayTagHolder(name="a", tags=[DayTag(name="t")]).save()  # n=1
    loaded = DayTagHolder.objects.get(id=doc.id)
    loaded.tags[0].n = 4  # assigned, as a loaded document's top-level value would be
    loaded.save()
    DayTagHolder(name="b", tags=[DayTag() for _ in range(4)]).save()
    numbers = [tag["n"] for stored in raw(DayTagHolder) for tag in stored["tags"]]
    # A top-level value assigned to a loaded document moves the counter past it (the
    # "loaded, a generated value you assigned" row); inside a loaded embedded document it does
    # not, and the counter later hands out 4 again.
    assert len(numbers) == len(set(numbers)), numbers


# -- pull__ with an embedded document gets a generated value, so it matches nothing -----------


class DayPlainItem(me.EmbeddedDocument):
    uid = me.StringField()
    name = me.StringField()


class DayPlainItems(me.Document):
    items = me.EmbeddedDocumentListField(DayPlainItem)


class DayGenItem(me.EmbeddedDocument):
    uid = UUID4Field()
    name = me.StringField()


class DayGenItems(me.Document):
    items = me.EmbeddedDocumentListField(DayGenItem)


@pytest.mark.parametrize(
    ("model", "item"),
    [(DayPlainItems, DayPlainItem), (DayGenItems, DayGenItem)],
    ids=["plain", "plugin"],
)
def test_pull_with_an_embedded_document_removes_the_matching_items(
    mongoengine_db: Any, model: Any, item: Any
) -> None:
    given = {"uid": "1"} if model is DayPlainItems else {}  # the plugin generates its own
    model(items=[item(name="a", **given), item(name="b", **given)]).save()
    model.objects.update(pull__items=item(name="a"))  # $pull matches by the fields given
    (stored,) = raw(model)
    # Plain: "a" is removed. Plugin: the pull value is given a fresh uid (an id made for a
    # condition, not a write) and matches no stored item: nothing is removed, silently.
    assert [i["name"] for i in stored["items"]] == ["b"]


# -- one update writing a new embedded document to many documents ----------------------------


def test_multi_update_does_not_give_one_generated_value_to_many_documents(
    mongoengine_db: Any,
) -> None:
    for name in "xyz":
        DayTagHolder(name=name).save()
    try:
        DayTagHolder.objects.update(push__tags=DayTag(name="t"))  # multi=True by default
    except InvalidQueryError:
        return  # refusing is acceptable too
    numbers = [tag["n"] for stored in raw(DayTagHolder) for tag in stored["tags"]]
    # Got [1, 1, 1]: one counter value stored in three documents.
    assert len(numbers) == len(set(numbers)) == 3, numbers


# -- an upsert with no update parameters --------------------------------------------------


class DayPlainNumbered(me.Document):
    number = me.IntField()
    name = me.StringField()


@pytest.mark.parametrize("model", [DayPlainNumbered, DayNumbered], ids=["plain", "plugin"])
def test_empty_upsert_is_refused_as_by_mongoengine(mongoengine_db: Any, model: Any) -> None:
    with pytest.raises(ValueError, match="update cannot be empty"):
        model.objects(name="x").update(upsert=True)
    with pytest.raises(ValueError, match="update cannot be empty"):
        model.objects(name="y").upsert_one()
    assert raw(model) == []


# -- a QuerySetManager subclass's default queryset ------------------------------------------


class DayQuerySet(QuerySet):
    def named(self, name: str) -> Any:
        return self.filter(name=name)


class DayManager(QuerySetManager):
    default = DayQuerySet


class DayManagedPlain(me.Document):
    name = me.StringField()
    objects = DayManager()


class DayManagedGen(me.Document):
    number = SequenceField()
    name = me.StringField()
    objects = DayManager()


@pytest.mark.parametrize("model", [DayManagedPlain, DayManagedGen], ids=["plain", "plugin"])
def test_query_set_manager_default_queryset_is_kept(mongoengine_db: Any, model: Any) -> None:
    model(name="a").save()
    # Plugin: AttributeError: 'GeneratingQuerySet' object has no attribute 'named'.
    assert model.objects.named("a").count() == 1
    assert len(raw(model)) == 1


# -- replacing an embedded document, keeping its reserved value -----------------------------


class DayCard(me.EmbeddedDocument):
    number = RandomUniqueField(digits=8, reserve_in="day_card_numbers")
    holder = me.StringField()


class DayWallet(me.Document):
    card = me.EmbeddedDocumentField(DayCard)


def test_replacing_an_embedded_document_keeping_its_own_value(mongoengine_db: Any) -> None:
    wallet = DayWallet(card=DayCard(holder="a")).save()
    loaded = DayWallet.objects.get(id=wallet.id)
    number = loaded.card.number
    loaded.card = DayCard(number=number, holder="b")  # same card number, new holder
    # Raised NotUniqueError ("already reserved") before: the only holder is this document.
    loaded.save()
    (stored,) = raw(DayWallet)
    assert stored["card"] == {"number": number, "holder": "b"}


# -- no_dereference() copies the fields of the model it loads --------------------------------

_NO_DEREF_FIELDS: dict[str, Any] = {
    "sequence": SequenceField,
    "random": lambda **options: RandomUniqueField(digits=12, **options),
    "locality": LocalityUUIDField,
    "uuid4": UUID4Field,
    "uuid7": UUID7Field,
    "plain": me.IntField,  # MongoEngine's own, its value assigned
}
_NO_DEREF_MODELS = {
    (kind, role): type(
        f"DayNoDeref_{kind}_{role}",
        (me.Document,),
        {
            "__module__": __name__,
            "name": me.StringField(),
            **({"id": make(primary_key=True)} if role == "pk" else {"code": make()}),
        },
    )
    for kind, make in _NO_DEREF_FIELDS.items()
    for role in ("pk", "plain")
}


@pytest.mark.parametrize("how", ["queryset", "context_manager"])
@pytest.mark.parametrize(
    "key", list(_NO_DEREF_MODELS), ids=[f"{kind}-{role}" for kind, role in _NO_DEREF_MODELS]
)
def test_no_dereference_loads_and_saves_a_document_with_generated_values(
    mongoengine_db: Any, key: tuple[str, str], how: str
) -> None:
    # MongoEngine deep-copies the fields of a model it loads without dereferencing: a field
    # holding its generator or counters could not be copied (TypeError).
    model = _NO_DEREF_MODELS[key]
    kind, role = key
    doc = model(name="a")
    if kind == "plain":
        setattr(doc, "id" if role == "pk" else "code", 7)
    doc.save()
    before = raw(model)
    if how == "queryset":
        loaded = model.objects.no_dereference().get()
    else:
        with no_dereference(model):
            loaded = model.objects.get()
    assert loaded.pk == doc.pk
    loaded.name = "b"
    loaded.save()
    assert raw(model) == [{**before[0], "name": "b"}]
    if kind != "plain":
        name = "id" if role == "pk" else "code"
        second = model(name="c").save()  # the model's own field goes on from where it was
        assert getattr(second, name) not in (None, getattr(doc, name))
        if kind == "sequence":
            assert getattr(second, name) == 2


class DayNoDerefPart(me.EmbeddedDocument):
    n = SequenceField()


class DayNoDerefHolder(me.Document):  # declares nothing of the package itself
    name = me.StringField()
    parts = me.ListField(me.EmbeddedDocumentField(DayNoDerefPart))


def test_no_dereference_loads_embedded_documents_with_generated_values(
    mongoengine_db: Any,
) -> None:
    DayNoDerefHolder(name="a", parts=[DayNoDerefPart()]).save()
    loaded = DayNoDerefHolder.objects.no_dereference().get()
    assert loaded.parts[0].n == 1
    loaded.parts.append(DayNoDerefPart())
    loaded.save()
    assert [part["n"] for part in raw(DayNoDerefHolder)[0]["parts"]] == [1, 2]


def test_a_deep_copy_of_a_generated_field_is_a_field_of_its_own(mongoengine_db: Any) -> None:
    # A model built from copies of another's fields: naming the copy must not rename the
    # original (which would then count on another counter, from 1 again).
    mongoengine_db["mongoengine.counters"].insert_one(
        {"_id": "day_copied_from.number", "next": 100}
    )

    class DayCopiedFrom(me.Document):
        number = SequenceField()

    class DayCopiedTo(me.Document):
        code = copy.deepcopy(DayCopiedFrom._fields["number"])

    assert DayCopiedFrom._fields["number"].name == "number"
    assert DayCopiedTo._fields["code"] is not DayCopiedFrom._fields["number"]
    assert DayCopiedFrom().save().number == 101
    assert DayCopiedTo().save().code == 1
    assert [doc["number"] for doc in raw(DayCopiedFrom)] == [101]
    # Stored under the db_field it was copied with, as a copy of MongoEngine's own field is.
    assert [doc["number"] for doc in raw(DayCopiedTo)] == [1]


def test_a_copy_of_a_locality_field_shares_its_generator_made_later(mongoengine_db: Any) -> None:
    # Two generators in one process would share pid and node: a copy made before the field made
    # its generator uses the same one.
    original = LocalityUUIDField(primary_key=True)
    copied = copy.deepcopy(original)

    class DayLocalityA(me.Document):
        meta = {"collection": "day_locality"}
        id = original

    class DayLocalityB(me.Document):
        meta = {"collection": "day_locality"}
        id = copied

    DayLocalityA().save()
    DayLocalityB().save()
    assert DayLocalityA._fields["id"].generator is DayLocalityB._fields["id"].generator
    assert len({doc["_id"] for doc in raw(DayLocalityA)}) == 2


# -- a SortedListField ordered by a generated field of its embedded documents -----------------


class SortedComment(me.EmbeddedDocument):
    n = SequenceField()
    at = UUID7Field()
    text = me.StringField()


class SortedPost(me.Document):
    by_n = me.SortedListField(me.EmbeddedDocumentField(SortedComment), ordering="n")
    by_at = me.SortedListField(me.EmbeddedDocumentField(SortedComment), ordering="at", reverse=True)


def test_a_list_sorted_by_a_generated_field_is_saved_sorted(mongoengine_db: Any) -> None:
    # save() serialises the document before the values are made: nothing to sort by yet.
    post = SortedPost(by_n=[SortedComment(text="a"), SortedComment(text="b")])
    post.save()
    (stored,) = raw(SortedPost)
    assert [(c["n"], c["text"]) for c in stored["by_n"]] == [(1, "a"), (2, "b")]
    # A loaded document given a new item, and an item with a lower value moved last.
    loaded = SortedPost.objects.get()
    loaded.by_n.append(SortedComment(text="c"))
    loaded.by_n.append(SortedComment(n=0, text="z"))
    loaded.by_at = [SortedComment(text="x"), SortedComment(text="y")]
    loaded.save()
    (stored,) = raw(SortedPost)
    assert [(c["n"], c["text"]) for c in stored["by_n"]] == [(0, "z"), (1, "a"), (2, "b"), (3, "c")]
    assert [c["text"] for c in stored["by_at"]] == ["y", "x"]  # the later UUID7 first
    assert stored["by_at"][0]["at"] > stored["by_at"][1]["at"]


def test_a_list_sorted_by_a_missing_plain_field_still_fails_as_in_mongoengine(
    mongoengine_db: Any,
) -> None:
    class Note(me.EmbeddedDocument):
        rank = me.IntField()

    class Board(me.Document):
        notes = me.SortedListField(me.EmbeddedDocumentField(Note), ordering="rank")

    with pytest.raises(KeyError, match="rank"):
        Board(notes=[Note()]).save()


# -- doc.update(upsert=True) of a document without a key: upserted by itself -----------------


class UpsertedPart(me.EmbeddedDocument):
    n = SequenceField()
    name = me.StringField()


class UpsertedOrder(me.Document):
    number = SequenceField()
    name = me.StringField()
    status = me.StringField()
    main = me.EmbeddedDocumentField(UpsertedPart)
    parts = me.ListField(me.EmbeddedDocumentField(UpsertedPart))


def test_an_unsaved_document_upserted_by_itself_stores_its_embedded_values(
    mongoengine_db: Any,
) -> None:
    # MongoEngine upserts by the document's to_mongo(): the inserted document takes its
    # embedded documents from that filter, so their values are made before it is built.
    order = UpsertedOrder(
        name="a", main=UpsertedPart(name="m"), parts=[UpsertedPart(name="p"), UpsertedPart()]
    )
    assert order.update(upsert=True, set__status="new") == 1
    (stored,) = raw(UpsertedOrder)
    assert {k: v for k, v in stored.items() if k != "_id"} == {
        "number": 1,  # the upsert's own, set on insert
        "name": "a",
        "status": "new",
        "main": {"n": 1, "name": "m"},
        "parts": [{"n": 2, "name": "p"}, {"n": 3}],
    }
    assert [order.main.n, *(part.n for part in order.parts)] == [1, 2, 3]
    # Run again, the same filter matches that document: nothing new, no value spent.
    assert order.update(upsert=True, set__status="again") == 1
    (stored,) = raw(UpsertedOrder)
    assert stored["status"] == "again"
    assert [stored["main"]["n"], *(part["n"] for part in stored["parts"])] == [1, 2, 3]
    assert UpsertedOrder(main=UpsertedPart()).save().main.n == 4


class ReservedPart(me.EmbeddedDocument):
    code = RandomUniqueField(digits=6, reserve_in="upserted_part_codes")
    name = me.StringField()


class ReservedBox(me.Document):
    name = me.StringField()
    part = me.EmbeddedDocumentField(ReservedPart)


def test_an_unsaved_document_upserted_by_itself_reserves_its_embedded_values(
    mongoengine_db: Any,
) -> None:
    """The values made for its filter are the upsert's own, not values given to it: a
    ``reserve_in`` field found them reserved already, and refused every such upsert (found by
    probe A: NotUniqueError "already reserved", nothing stored)."""
    boxes = [ReservedBox(name=name, part=ReservedPart(name=name)) for name in ("a", "b")]
    assert [box.update(upsert=True, set__name=box.name) for box in boxes] == [1, 1]
    stored = raw(ReservedBox)
    codes = [box.part.code for box in boxes]
    assert [(doc["name"], doc["part"]) for doc in stored] == [
        (box.name, {"code": code, "name": box.name}) for box, code in zip(boxes, codes, strict=True)
    ]
    assert len(set(codes)) == 2
    reservations = mongoengine_db.upserted_part_codes.find({}, {"_id": 1})
    assert sorted(doc["_id"] for doc in reservations) == sorted(codes)
    # A value it holds is reserved for it: another document cannot take it.
    with pytest.raises(me.errors.NotUniqueError, match=str(codes[0])):
        ReservedBox(part=ReservedPart(code=codes[0])).save()


class TenantPart(me.EmbeddedDocument):
    tenant = me.StringField(required=True)
    n = SequenceField(scope="tenant")


class TenantBox(me.Document):
    name = me.StringField()
    main = me.EmbeddedDocumentField(TenantPart)
    extra = me.EmbeddedDocumentField(TenantPart)


def test_an_unsaved_document_upserted_by_itself_tells_a_number_it_gives_in_another_scope(
    mongoengine_db: Any,
) -> None:
    """A number made for one scope is not a number given in another (review: the values made
    were matched without their scope, and counter "b" was never told of the 1 given there)."""
    box = TenantBox(name="x", main=TenantPart(tenant="a"), extra=TenantPart(tenant="b", n=1))
    assert box.update(upsert=True, set__name="x") == 1
    (stored,) = raw(TenantBox)
    assert (stored["main"], stored["extra"]) == ({"tenant": "a", "n": 1}, {"tenant": "b", "n": 1})
    assert TenantBox(name="y", main=TenantPart(tenant="b")).save().main.n == 2


def test_an_upsert_of_another_model_inside_one_upserted_by_itself_is_not_its_own(
    mongoengine_db: Any,
) -> None:
    """A model's own update() that upserts another document by the same embedded values: the
    values made for the first are not that upsert's own (review: the code was stored twice)."""

    class Audit(me.Document):
        part = me.EmbeddedDocumentField(ReservedPart)
        seen = me.IntField()

    class AuditedBox(me.Document):
        name = me.StringField()
        part = me.EmbeddedDocumentField(ReservedPart)

        def update(self, **kwargs: Any) -> Any:
            if kwargs.get("upsert"):
                Audit.objects(part=self.part).update_one(upsert=True, inc__seen=1)
            return super().update(**kwargs)

    box = AuditedBox(name="a", part=ReservedPart(name="p"))
    with pytest.raises(me.errors.NotUniqueError, match="already reserved"):
        box.update(upsert=True, set__name="a")
    assert raw(AuditedBox) == []
    assert raw(Audit) == []


def test_save_after_a_lost_reply_of_an_upsert_by_itself_stores_no_value_twice(
    mongoengine_db: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The values kept for the upsert's retry are not those of an insert by save() (review:
    save() took them for its own earlier attempt's and stored the reserved code twice)."""
    import mongomock.collection
    import pymongo.errors

    applied = mongomock.collection.Collection.update_one

    def lost(self: Any, *args: Any, **kwargs: Any) -> Any:
        applied(self, *args, **kwargs)
        raise pymongo.errors.AutoReconnect("reply lost")

    box = ReservedBox(name="a", part=ReservedPart(name="p"))
    monkeypatch.setattr(mongomock.collection.Collection, "update_one", lost)
    with pytest.raises(pymongo.errors.AutoReconnect):
        box.update(upsert=True, set__name="a")
    monkeypatch.setattr(mongomock.collection.Collection, "update_one", applied)
    with pytest.raises(me.errors.NotUniqueError, match=str(box.part.code)):
        box.save()
    assert [doc["part"]["code"] for doc in raw(ReservedBox)] == [box.part.code]
    # The application's retry of the update is its own: it finds the document stored.
    assert box.update(upsert=True, set__name="a") == 1
    assert [doc["part"]["code"] for doc in raw(ReservedBox)] == [box.part.code]


class CopiedLine(me.EmbeddedDocument):
    no = SequenceField()
    code = UUID7Field()
    qty = me.IntField()


class CopiedOrder(me.Document):
    lines = me.EmbeddedDocumentListField(CopiedLine)
    line = me.EmbeddedDocumentField(CopiedLine)


COPIES = {
    "deepcopy": copy.deepcopy,
    "copy": copy.copy,
    "pickle": lambda doc: pickle.loads(pickle.dumps(doc)),
}


@pytest.mark.parametrize("how", COPIES)
def test_a_copy_of_a_loaded_document_fills_its_new_embedded_documents(
    mongoengine_db: Any, how: str
) -> None:
    # Probe BL-2: MongoEngine's copy builds the embedded documents as loaded; the new ones
    # were saved without their values.
    CopiedOrder(lines=[CopiedLine(qty=1)]).save()
    loaded = CopiedOrder.objects.get()
    loaded.lines.create(qty=2)
    loaded.line = CopiedLine(qty=9)
    COPIES[how](loaded).save()
    (stored,) = raw(CopiedOrder)
    lines = [*stored["lines"], stored["line"]]
    assert [(line["qty"], line["no"]) for line in lines] == [(1, 1), (2, 2), (9, 3)]
    assert len({line["code"] for line in lines}) == 3
