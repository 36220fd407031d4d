"""One new embedded object placed more than once in one write (in two documents of a bulk
insert, twice in one document, twice in one update) holds one value per field: a value that no
two documents may share is refused before anything is written, as an assigned one is; a
counter's number is made once, stored wherever the object is (as MongoEngine's own
``SequenceField`` does). Found by review AF: each placement got a value of its own, the last
one kept, and the one value was stored twice."""

from __future__ import annotations

from typing import Any

import mongoengine as me
import pytest
from mongoengine.errors import NotUniqueError

from mongoengine_ids import RandomUniqueField, SequenceField


class TwPart(me.EmbeddedDocument):
    code = RandomUniqueField(digits=6, reserve_in="tw_part_codes")
    label = me.StringField()


class TwBox(me.Document):
    name = me.StringField()
    parts = me.ListField(me.EmbeddedDocumentField(TwPart))
    meta = {"collection": "tw_boxes"}


class TwLine(me.EmbeddedDocument):
    n = SequenceField(sequence_name="tw_line_n")


class TwOrder(me.Document):
    name = me.StringField()
    lines = me.ListField(me.EmbeddedDocumentField(TwLine))
    meta = {"collection": "tw_orders"}


def _stored(model: type[me.Document]) -> list[dict[str, Any]]:
    return [{k: v for k, v in doc.items() if k != "_id"} for doc in model._get_collection().find()]


def _writes(part: TwPart) -> dict[str, Any]:
    return {
        "insert-two": lambda: TwBox.objects.insert([TwBox(parts=[part]), TwBox(parts=[part])]),
        "insert-one": lambda: TwBox.objects.insert([TwBox(parts=[part, part])]),
        "save": lambda: TwBox(parts=[part, part]).save(),
        "save-loaded": lambda: _save_loaded(part),
        "upsert": lambda: TwBox.objects(name="u").update_one(
            upsert=True, push_all__parts=[part, part]
        ),
        "update": lambda: TwBox.objects(name="held").update_one(push_all__parts=[part, part]),
    }


def _save_loaded(part: TwPart) -> None:
    box = TwBox.objects.get(name="held")
    box.parts += [part, part]
    box.save()


@pytest.mark.parametrize("how", list(_writes(TwPart())))
def test_a_unique_value_of_an_object_placed_twice_is_refused(mongoengine_db: Any, how: str) -> None:
    TwBox(name="held", parts=[TwPart(label="first")]).save()
    before = _stored(TwBox)
    reserved = list(mongoengine_db.tw_part_codes.find())
    part = TwPart(label="twice")
    with pytest.raises(NotUniqueError, match=r"TwPart object is placed 2 times"):
        _writes(part)[how]()
    assert _stored(TwBox) == before
    assert list(mongoengine_db.tw_part_codes.find()) == reserved
    assert part.code is None


def test_a_number_of_an_object_placed_twice_is_made_once(mongoengine_db: Any) -> None:
    line = TwLine()
    TwOrder.objects.insert([TwOrder(name="a", lines=[line]), TwOrder(name="b", lines=[line])])
    TwOrder(name="c", lines=[TwLine(), line]).save()
    assert line.n == 1
    assert _stored(TwOrder) == [
        {"name": "a", "lines": [{"n": 1}]},
        {"name": "b", "lines": [{"n": 1}]},
        {"name": "c", "lines": [{"n": 2}, {"n": 1}]},
    ]
