"""``push__`` of new embedded documents: sent so that an attempt landing unseen and the
application's retry store the item once, without changing what a push of items that are not
there yet does (review AJ's findings on the first version of this)."""

from __future__ import annotations

import uuid
from typing import Any

import mongoengine as me
import pymongo.errors
import pytest
from _write_support import raw_collection
from bson import Binary

from mongoengine_ids import RandomUniqueField, SequenceField, UUID4Field
from mongoengine_ids.testing import connected_threadsafe


class PrScoped(me.EmbeddedDocument):
    kind = me.StringField()
    code = SequenceField(scope="kind", sequence_name="pr_scoped")


class PrPart(me.EmbeddedDocument):
    code = UUID4Field()
    label = me.StringField()


class PrCounted(me.EmbeddedDocument):
    code = SequenceField(sequence_name="pr_counted", allow_explicit=False)
    label = me.StringField()


class PrNumbered(me.EmbeddedDocument):
    code = SequenceField(sequence_name="pr_numbered")
    label = me.StringField()


class PrReserved(me.EmbeddedDocument):
    code = RandomUniqueField(digits=6, reserve_in="pr_codes")
    label = me.StringField()


class PrBox(me.Document):
    name = me.StringField()
    scoped = me.ListField(me.EmbeddedDocumentField(PrScoped))
    parts = me.ListField(me.EmbeddedDocumentField(PrPart))
    counted = me.ListField(me.EmbeddedDocumentField(PrCounted))
    numbered = me.ListField(me.EmbeddedDocumentField(PrNumbered))
    reserved = me.ListField(me.EmbeddedDocumentField(PrReserved))
    meta = {"collection": "pr_boxes"}


def _stored() -> list[dict[str, Any]]:
    return list(raw_collection(PrBox).find({}, {"_id": 0, "name": 0}))


def test_a_number_another_scope_holds_is_pushed(mongoengine_db: Any) -> None:
    box = PrBox(name="b", scoped=[PrScoped(kind="a")]).save()
    assert PrBox.objects(id=box.id).update_one(push__scoped=PrScoped(kind="b")) == 1
    (stored,) = _stored()
    assert stored["scoped"] == [{"kind": "a", "code": 1}, {"kind": "b", "code": 1}]


def test_an_attempt_in_flight_and_its_retry_store_the_item_once_beside_a_filter_on_it() -> None:
    """The caller's own condition on the list (``parts__code__nin``) does not take the place
    of the package's: the first attempt, applied after its retry was sent, matches nothing."""
    held: list[Any] = []
    armed: list[bool] = []

    def hook(collection: str, method: str, call: Any) -> Any:
        if armed and collection == "pr_boxes" and method == "update_one":
            armed.clear()
            held.append(call)  # in flight: applied after the retry's update
            raise pymongo.errors.AutoReconnect("injected: the reply is lost")
        return call()

    with connected_threadsafe(hook=hook) as connect:
        connect()
        box = PrBox(name="b").save()
        part = PrPart(label="new")

        def push() -> Any:
            other = uuid.uuid4()
            return PrBox.objects(id=box.id, parts__code__nin=[other]).update_one(push__parts=part)

        armed.append(True)
        with pytest.raises(pymongo.errors.AutoReconnect):
            push()
        assert push() == 1  # the retry
        held.pop()()  # the first attempt lands now
        (stored,) = _stored()
    assert [item["label"] for item in stored["parts"]] == ["new"]


def test_a_dict_among_the_items_of_a_list_is_told_to_its_field(mongoengine_db: Any) -> None:
    """Beside embedded objects, a dict's number moves the counter past it (it was not told)."""
    box = PrBox(name="b").save()
    PrBox.objects(id=box.id).update_one(
        set__numbered=[PrNumbered(label="obj"), {"code": 4, "label": "dict"}]
    )
    PrBox(name="later", numbered=[PrNumbered(), PrNumbered()]).save()
    codes = [[item["code"] for item in doc["numbered"]] for doc in _stored()]
    assert codes == [[5, 4], [6, 7]]


class PrShelf(me.Document):
    by_key = me.MapField(me.EmbeddedDocumentField(PrNumbered))
    reserved = me.MapField(me.EmbeddedDocumentField(PrReserved))
    meta = {"collection": "pr_shelves"}


def test_a_dict_among_the_values_of_a_map_is_told_to_its_field(mongoengine_db: Any) -> None:
    """Beside embedded objects, a dict given as a map's value is told to its field as in a
    list: its number moves the counter past it, its reservation is taken."""
    shelf = PrShelf().save()
    PrShelf.objects(id=shelf.id).update_one(
        set__by_key={"obj": PrNumbered(label="obj"), "dict": {"code": 4, "label": "dict"}}
    )
    PrShelf(by_key={"later": PrNumbered()}).save()
    stored = list(PrShelf._get_collection().find({}, {"_id": 0, "reserved": 0}))
    assert [{key: item["code"] for key, item in doc["by_key"].items()} for doc in stored] == [
        {"obj": 5, "dict": 4},
        {"later": 6},
    ]
    taken = PrShelf(reserved={"a": PrReserved()}).save().reserved["a"].code
    with pytest.raises(me.errors.NotUniqueError, match=str(taken)):
        PrShelf.objects(id=shelf.id).update_one(
            set__reserved={"obj": PrReserved(), "dict": {"code": taken}}
        )
    assert PrShelf._get_collection().find_one({"_id": shelf.id})["reserved"] == {}


@pytest.mark.parametrize("field", ["counted", "reserved"])
def test_an_item_written_at_a_positional_place_the_filter_names_is_refused(
    mongoengine_db: Any, field: str
) -> None:
    """Which item ``$`` is, the filter's conditions decide together (and a counter's number
    is its scope's): a value held in the list is refused there, even one the filter names
    (review AK: taking it as the item's own stored it twice)."""
    kind = PrCounted if field == "counted" else PrReserved
    PrBox(name="b", **{field: [kind(label="a"), kind(label="b")]}).save()
    loaded = PrBox.objects.get(name="b")
    first = getattr(loaded, field)[0]
    before = _stored()
    filtered = PrBox.objects(name="b", **{f"{field}__code": first.code, f"{field}__label": "b"})
    refused = me.errors.ValidationError if field == "counted" else me.errors.NotUniqueError
    with pytest.raises(refused):  # allow_explicit=False; reserve_in
        filtered.update_one(**{f"set__{field}__S": kind(code=first.code, label="moved")})
    assert _stored() == before


def test_an_upsert_adds_items_without_generated_values_as_pushed(mongoengine_db: Any) -> None:
    """Only a keyword whose items all hold values the package made goes as ``add_to_set__``:
    an item equal to one the list holds is pushed again, as asked (review AK)."""
    PrBox(name="a", parts=[PrPart(label="x", code=None)]).save()
    PrBox.objects(name="a").update_one(
        upsert=True, push_all__parts=[PrPart(label="q"), PrPart(label="x", code=None)]
    )
    (stored,) = _stored()
    assert [item["label"] for item in stored["parts"]] == ["x", "q", "x"]


class PrSub(me.EmbeddedDocument):
    code = SequenceField(sequence_name="pr_sub")


class PrPlain(me.EmbeddedDocument):
    label = me.StringField()
    sub = me.EmbeddedDocumentField(PrSub)  # its generated value is inside it


class PrHolder(me.EmbeddedDocument):
    scoped = me.ListField(me.EmbeddedDocumentField(PrScoped))
    by_key = me.MapField(me.ListField(me.EmbeddedDocumentField(PrPart)))


class PrNested(me.Document):
    name = me.StringField()
    plains = me.ListField(me.EmbeddedDocumentField(PrPlain))
    holder = me.EmbeddedDocumentField(PrHolder)
    meta = {"collection": "pr_nested"}


def _in_flight_then_retried(write: Any) -> list[dict[str, Any]]:
    """Run ``write`` with its first update held back (its reply lost) and applied right after
    the retry's first database call; the stored documents."""
    held: list[Any] = []

    def hook(collection: str, method: str, call: Any) -> Any:
        if collection == "pr_nested" and method == "update_one" and not held:
            held.append(call)
            raise pymongo.errors.AutoReconnect("injected: in flight")
        try:
            return call()
        finally:
            if len(held) == 1:
                held.append(None)
                held[0]()  # lands now

    with connected_threadsafe(hook=hook) as connect:
        db = connect()
        db.pr_nested.insert_one({"name": "pre", "plains": [], "holder": {"scoped": []}})
        with pytest.raises(pymongo.errors.AutoReconnect):
            write()
        write()  # the application's retry
        stored = list(raw_collection(db.pr_nested).find({}, {"_id": 0}))
    PrNested._collection = None
    return stored


def test_an_upsert_pushing_an_item_whose_value_is_inside_it_stores_it_once() -> None:
    plain = PrPlain(label="new", sub=PrSub())
    stored = _in_flight_then_retried(
        lambda: PrNested.objects(name="pre").upsert_one(push__plains=plain)
    )
    assert [doc["plains"] for doc in stored] == [[{"label": "new", "sub": {"code": 1}}]]


def test_a_scoped_item_pushed_into_a_list_of_an_embedded_document_is_stored_once() -> None:
    item = PrScoped(kind="k")
    stored = _in_flight_then_retried(
        lambda: PrNested.objects(name="pre").update_one(push__holder__scoped=item)
    )
    assert [doc["holder"]["scoped"] for doc in stored] == [[{"kind": "k", "code": 1}]]


@pytest.mark.parametrize("keyword", ["push__holder__scoped", "push__holder__by_key__k"])
def test_an_upsert_pushing_into_a_nested_list_stores_the_item_once(keyword: str) -> None:
    """A list inside an embedded document, or a map's list: the upsert's push goes as
    ``add_to_set`` as at the top level (it was pushed, and the attempt landing late stored the
    item, and its value, twice)."""
    item = PrScoped(kind="k") if keyword.endswith("scoped") else PrPart(label="new")
    stored = _in_flight_then_retried(
        lambda: PrNested.objects(name="pre").upsert_one(**{keyword: item})
    )
    (doc,) = stored
    if keyword.endswith("scoped"):
        assert doc["holder"]["scoped"] == [{"kind": "k", "code": 1}]
    else:
        assert doc["holder"]["by_key"]["k"] == [
            {"code": Binary(item.code.bytes, 4), "label": "new"}
        ]


def test_an_upsert_inserting_pushes_into_a_nested_list(mongoengine_db: Any) -> None:
    """No document matches: the upsert inserts one holding the pushed item, as a push would."""
    item = PrPart(label="new")
    PrNested.objects(name="none").update_one(upsert=True, push__holder__by_key__k=item)
    (doc,) = raw_collection(PrNested).find({}, {"_id": 0})
    stored_item = {"code": Binary(item.code.bytes, 4), "label": "new"}
    assert doc == {"name": "none", "holder": {"by_key": {"k": [stored_item]}}}


@pytest.mark.parametrize("keyword", ["push__plains__0", "push__holder__by_key__k__0"])
def test_an_upsert_pushing_at_a_position_keeps_the_position(
    mongoengine_db: Any, keyword: str
) -> None:
    """``push__x__0`` pushes at index 0 (MongoEngine's ``$position``), which no set can: sent
    as a push."""
    first = PrPlain(label="old") if "plains" in keyword else PrPart(label="old")
    pushed = PrPlain(label="new", sub=PrSub()) if "plains" in keyword else PrPart(label="new")
    path = keyword.removeprefix("push__").removesuffix("__0")
    PrNested.objects(name="n").update_one(upsert=True, **{f"push__{path}": first})
    PrNested.objects(name="n").update_one(upsert=True, **{keyword: pushed})
    (doc,) = PrNested._get_collection().find({}, {"_id": 0})
    items = doc["plains"] if "plains" in keyword else doc["holder"]["by_key"]["k"]
    assert [item["label"] for item in items] == ["new", "old"]


def _pushed_again_after_a_lost_reply(field: str, items: list[Any]) -> tuple[Any, Any]:
    """``push_all__<field>=items`` applied with its reply lost, then the application's retry,
    refused as a duplicate (the first landed); returns the stored list and the filter the
    first attempt sent."""
    sent: list[dict[str, Any]] = []
    armed = [True]

    def hook(collection: str, method: str, call: Any) -> Any:
        if armed and collection == "pr_boxes" and method == "update_one":
            armed.clear()
            sent.append(call.args[0])
            call()  # applied; the reply is lost
            raise pymongo.errors.AutoReconnect("injected: the reply is lost")
        return call()

    with connected_threadsafe(hook=hook) as connect:
        connect()
        box = PrBox(name="b").save()
        query = PrBox.objects(id=box.id)
        with pytest.raises(pymongo.errors.AutoReconnect):
            query.update_one(**{f"push_all__{field}": items})
        with pytest.raises(me.errors.NotUniqueError, match="earlier attempt of this update"):
            query.update_one(**{f"push_all__{field}": items})  # it landed: not pushed again
        (stored,) = _stored()
    return stored[field], sent[0]


def test_several_items_pushed_at_once_are_stored_once_by_the_retry_of_a_lost_reply() -> None:
    """The filter keeping the retry from pushing again names every value made for the items
    of one path in one ``$nin`` (probe S: one ``$ne`` each made the server check each stored
    item once per item pushed)."""
    items = [PrNumbered(label=label) for label in "xyz"]
    stored, sent = _pushed_again_after_a_lost_reply("numbered", items)
    assert stored == [
        {"code": 1, "label": "x"},
        {"code": 2, "label": "y"},
        {"code": 3, "label": "z"},
    ]
    assert {"numbered.code": {"$nin": [1, 2, 3]}} in sent["$and"]


def test_scoped_items_pushed_at_once_are_matched_by_scope_in_one_clause() -> None:
    """A scoped counter's numbers are matched with their scope: one ``$elemMatch`` per list and
    scope, its numbers in one ``$in`` (second review: one per item, each stored item checked
    once per item pushed)."""
    items = [PrScoped(kind="a"), PrScoped(kind="a"), PrScoped(kind="b")]
    stored, sent = _pushed_again_after_a_lost_reply("scoped", items)
    assert stored == [
        {"kind": "a", "code": 1},
        {"kind": "a", "code": 2},
        {"kind": "b", "code": 1},
    ]
    clauses = sent["$and"]
    assert {"scoped": {"$not": {"$elemMatch": {"kind": "a", "code": {"$in": [1, 2]}}}}} in clauses
    assert {"scoped": {"$not": {"$elemMatch": {"kind": "b", "code": 1}}}} in clauses
