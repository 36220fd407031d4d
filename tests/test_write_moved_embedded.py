"""An embedded document loaded from the database and placed again (in another document, twice
in one, or a copy of it) holds a value already stored: a field that tracks the values it hands
out (``reserve_in``, ``SequenceField``) refuses it there as it refuses the same value assigned,
and one that stays where it was loaded is its document's own. Each test checks the stored
documents (found by review Y)."""

from __future__ import annotations

import copy
from typing import Any

import mongoengine as me
import pytest
from mongoengine.errors import NotUniqueError

from mongoengine_ids import RandomUniqueField, SequenceField


class MvPart(me.EmbeddedDocument):
    code = RandomUniqueField(digits=6, reserve_in="mv_part_codes")
    label = me.StringField()


class MvBox(me.Document):
    name = me.StringField()
    parts = me.ListField(me.EmbeddedDocumentField(MvPart))
    spare = me.EmbeddedDocumentField(MvPart)
    meta = {"collection": "mv_boxes"}


def _codes() -> dict[str, list[Any]]:
    return {
        doc["name"]: [part["code"] for part in doc.get("parts", [])]
        for doc in MvBox._get_collection().find()
    }


@pytest.fixture
def boxes(mongoengine_db: Any) -> dict[str, list[Any]]:
    MvBox(name="a", parts=[MvPart(), MvPart()]).save()
    MvBox(name="b").save()
    return _codes()


@pytest.mark.parametrize("how", ["append", "assign", "deepcopy", "spare"])
def test_a_loaded_embedded_document_placed_in_another_document_is_refused(
    boxes: dict[str, list[Any]], how: str
) -> None:
    part = MvBox.objects.get(name="a").parts[0]
    other = MvBox.objects.get(name="b")
    if how == "append":
        other.parts.append(part)
    elif how == "assign":
        other.parts = [part]
    elif how == "deepcopy":
        other.parts.append(copy.deepcopy(part))
    else:
        other.spare = part
    with pytest.raises(NotUniqueError):
        other.save()
    assert _codes() == boxes
    assert MvBox.objects.get(name="b").spare is None


def test_a_loaded_embedded_document_placed_twice_in_its_document_is_refused(
    boxes: dict[str, list[Any]],
) -> None:
    box = MvBox.objects.get(name="a")
    box.parts.append(box.parts[0])
    with pytest.raises(NotUniqueError):
        box.save()
    assert _codes() == boxes


@pytest.mark.parametrize("how", ["append-new", "reorder", "edit-other-field", "rebuild-list"])
def test_loaded_embedded_documents_kept_in_their_document_are_its_own(
    boxes: dict[str, list[Any]], how: str
) -> None:
    box = MvBox.objects.get(name="a")
    first, second = box.parts
    if how == "append-new":
        box.parts.append(MvPart())
    elif how == "reorder":
        box.parts = [second, first]
    elif how == "edit-other-field":
        first.label = "edited"
    else:
        box.parts = list(box.parts)
    box.save()
    codes = _codes()["a"]
    expected = {"append-new": boxes["a"] + codes[2:], "reorder": boxes["a"][::-1]}
    assert codes == expected.get(how, boxes["a"])
    assert len(set(codes)) == len(codes)


# Probe BJ-1: moved to another field of the same document (parts <-> spare, or into a nested
# place), a loaded embedded document keeps its value: the stored copy holds it at another place
# of the same document, which the save leaves without it. It was refused as "already reserved".


class MvTray(me.EmbeddedDocument):
    parts = me.ListField(me.EmbeddedDocumentField(MvPart))


class MvItem(me.EmbeddedDocument):
    n = SequenceField(allow_explicit=False)
    label = me.StringField()


class MvOther(me.EmbeddedDocument):
    n = me.IntField()  # a plain field stored as "n", as MvItem's counter is


class MvCart(me.Document):
    later = me.EmbeddedDocumentListField(MvItem)
    items = me.EmbeddedDocumentListField(MvItem)
    tray = me.EmbeddedDocumentField(MvTray)
    parts = me.ListField(me.EmbeddedDocumentField(MvPart))
    others = me.EmbeddedDocumentListField(MvOther)


@pytest.mark.parametrize("how", ["spare to parts", "parts to spare", "swap"])
def test_a_loaded_embedded_document_moved_to_another_field_of_its_document_is_its_own(
    boxes: dict[str, list[Any]], how: str
) -> None:
    box = MvBox.objects.get(name="a")
    first, second = box.parts
    if how == "spare to parts":
        box.spare = box.parts.pop()
        box.save()
        box = MvBox.objects.get(name="a")
        box.parts.append(box.spare)
        box.spare = None
    elif how == "parts to spare":
        box.spare = box.parts.pop(0)
    else:
        box.parts, box.spare = [second], first
    box.save()
    (raw,) = MvBox._get_collection().find({"name": "a"})
    held = [part["code"] for part in raw.get("parts", [])] + (
        [raw["spare"]["code"]] if raw.get("spare") else []
    )
    assert sorted(held) == sorted(boxes["a"])


def test_values_moved_to_another_field_or_a_nested_place_are_its_own(
    mongoengine_db: Any,
) -> None:
    MvCart(later=[MvItem(label="i")]).save()
    cart = MvCart.objects.get()
    cart.items.append(cart.later.pop())
    cart.save()  # allow_explicit=False: refused as an explicit value before
    (raw,) = mongoengine_db.mv_cart.find()
    assert (raw.get("later", []), raw["items"]) == ([], [{"n": 1, "label": "i"}])
    cart.parts = [MvPart()]
    cart.save()
    code = cart.parts[0].code
    cart = MvCart.objects.get()
    cart.tray = MvTray(parts=[cart.parts.pop()])  # into a nested place
    cart.save()
    (raw,) = mongoengine_db.mv_cart.find()
    assert (raw.get("parts", []), raw["tray"]) == ([], {"parts": [{"code": code}]})
    part = MvBox(name="c", parts=[MvPart()]).save().parts[0]
    box = MvBox.objects.get(name="c")
    cart.tray = MvTray(parts=[box.parts[0]])  # from another document: refused, as before
    with pytest.raises(NotUniqueError):
        cart.save()
    assert mongoengine_db.mv_cart.find_one()["items"] == [{"n": 1, "label": "i"}]
    assert part.code == MvBox._get_collection().find_one({"name": "c"})["parts"][0]["code"]


def test_a_value_another_kind_holds_in_the_stored_copy_is_not_taken_for_its_own(
    mongoengine_db: Any,
) -> None:
    # MvOther stores a plain 7 as "n": a number 7 given to an MvItem is still an explicit one.
    MvCart(others=[MvOther(n=7)]).save()
    cart = MvCart.objects.get()
    cart.items.append(MvItem(n=7))
    with pytest.raises(me.ValidationError, match="explicit value 7 rejected"):
        cart.save()
    (raw,) = mongoengine_db.mv_cart.find()
    assert raw.get("items", []) == []


class MvLine(me.EmbeddedDocument):
    no = SequenceField()
    meta = {"allow_inheritance": True}


class MvSubLine(MvLine):
    no = SequenceField()  # a counter of its own: "mv_sub_line.no"


class MvOrder(me.Document):
    line = me.EmbeddedDocumentField(MvLine)
    lines = me.EmbeddedDocumentListField(MvLine)


def test_a_number_of_a_subclass_with_its_own_counter_is_not_taken_for_the_base_classs(
    mongoengine_db: Any,
) -> None:
    # Review V: the stored copy's SubLine number 3 was taken for the MvLine number 3 given to
    # `line`, so MvLine's counter was not told of it, and handed it out again.
    MvOrder(lines=[MvSubLine(), MvSubLine(), MvSubLine()]).save()
    order = MvOrder.objects.get()
    order.line = MvLine(no=order.lines.pop().no)  # 3, now a number of MvLine's counter
    order.save()
    MvOrder(line=MvLine(), lines=[MvLine(), MvLine()]).save()
    numbers = [
        item["no"]
        for doc in mongoengine_db.mv_order.find()
        for item in [doc["line"], *doc.get("lines", [])]
        if item["_cls"] == "MvLine"
    ]
    assert sorted(numbers) == [3, 4, 5, 6]


class MvNode(me.EmbeddedDocument):
    code = RandomUniqueField(digits=9, reserve_in="mv_node_codes")
    kids = me.EmbeddedDocumentListField("MvNode")


class MvTree(me.Document):
    root = me.EmbeddedDocumentField(MvNode)
    loose = me.EmbeddedDocumentListField(MvNode)


def test_a_node_moved_out_of_a_tree_keeps_its_value(mongoengine_db: Any) -> None:
    # Review V: the places of a class that holds itself stopped one level down: a node at
    # root.kids.0.kids was not found in the stored copy, and its move refused as taken.
    MvTree(root=MvNode(kids=[MvNode(kids=[MvNode()])])).save()
    stored = mongoengine_db.mv_tree.find_one()["root"]["kids"][0]["kids"][0]["code"]
    tree = MvTree.objects.get()
    tree.loose.append(tree.root.kids[0].kids.pop())
    tree.save()
    raw = mongoengine_db.mv_tree.find_one()
    assert raw["root"]["kids"][0].get("kids", []) == []
    assert [node["code"] for node in raw["loose"]] == [stored]
