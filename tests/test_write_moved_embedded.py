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

from mongoengine_ids import RandomUniqueField


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
