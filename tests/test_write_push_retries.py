"""``push__`` of new embedded documents: sent so that an attempt landing unseen and the
application's retry store the item once, without changing what a push of items that are not
there yet does (review AJ's findings on the first version of this)."""

from __future__ import annotations

import uuid
from typing import Any

import mongoengine as me
import pymongo.errors
import pytest

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
    return list(PrBox._get_collection().find({}, {"_id": 0, "name": 0}))


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


@pytest.mark.parametrize("field", ["counted", "reserved"])
def test_an_item_written_back_at_the_place_its_filter_pins_is_its_own(
    mongoengine_db: Any, field: str
) -> None:
    """``parts__code=v`` in the filter: the positional ``$`` item holds ``v``."""
    kind = PrCounted if field == "counted" else PrReserved
    PrBox(name="b", **{field: [kind(label="a"), kind(label="b")]}).save()
    loaded = PrBox.objects.get(name="b")
    item = getattr(loaded, field)[1]
    item.label = "b-edited"
    filtered = PrBox.objects(name="b", **{f"{field}__code": item.code})
    assert filtered.update_one(**{f"set__{field}__S": item}) == 1
    (stored,) = _stored()
    assert [(i["code"], i["label"]) for i in stored[field]] == [
        (getattr(loaded, field)[0].code, "a"),
        (item.code, "b-edited"),
    ]
