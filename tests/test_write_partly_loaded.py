"""Embedded documents a projection loaded in part, written back by an update or a save.

Probe BJ-4: an update writing back embedded documents loaded with ``only("lines.label")`` gave
their generated fields (left out, so empty) new values: the stored ids of the items were
replaced. ``save()`` refuses the same change; so does an update now, nothing written.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import mongoengine as me
import pytest

from mongoengine_ids import RandomUniqueField, SequenceField


class PlLine(me.EmbeddedDocument):
    no = SequenceField(unique=True, sparse=True)
    r = RandomUniqueField(digits=9, reserve_in="pl_line_r")
    label = me.StringField()


class PlBox(me.EmbeddedDocument):
    label = me.StringField()
    lines = me.ListField(me.EmbeddedDocumentField(PlLine))


class PlOrder(me.Document):
    name = me.StringField()
    line = me.EmbeddedDocumentField(PlLine)
    lines = me.EmbeddedDocumentListField(PlLine)
    box = me.EmbeddedDocumentField(PlBox)


def stored(db: Any) -> list[dict[str, Any]]:
    return list(db.pl_order.find())


def _order() -> PlOrder:
    return PlOrder(
        name="o",
        line=PlLine(label="s"),
        lines=[PlLine(label="x"), PlLine(label="y")],
        box=PlBox(label="b", lines=[PlLine(label="z")]),
    ).save()


Update = Callable[[PlOrder], Any]

UPDATES: dict[str, Update] = {
    "doc.update(set__lines)": lambda o: o.update(set__lines=list(o.lines)),
    "update_one(set__line)": lambda o: PlOrder.objects(id=o.id).update_one(set__line=o.line),
    "modify(set__line)": lambda o: PlOrder.objects(id=o.id).modify(set__line=o.line),
    "upsert_one(set__line)": lambda o: PlOrder.objects(id=o.id).upsert_one(set__line=o.line),
    "update_one(push__lines)": lambda o: PlOrder.objects(id=o.id).update_one(
        push__lines=o.lines[0]
    ),
}


@pytest.mark.parametrize("how", UPDATES)
def test_an_update_writing_back_embedded_documents_loaded_in_part_is_refused(
    mongoengine_connect: Any, how: str
) -> None:
    db = mongoengine_connect()
    _order()
    before = stored(db)
    loaded = PlOrder.objects.only("lines.label", "line.label").get()
    with pytest.raises(me.OperationError, match=r"PlLine\.(no|r) at lines?(\.0)? was not loaded"):
        UPDATES[how](loaded)
    assert stored(db) == before  # the ids of the items are kept


def test_an_update_writing_back_a_document_whose_list_of_generated_values_was_left_out(
    mongoengine_connect: Any,
) -> None:
    db = mongoengine_connect()
    _order()
    before = stored(db)
    loaded = PlOrder.objects.only("box.label").get()  # box.lines left out whole
    with pytest.raises(me.OperationError, match=r"PlBox\.lines at box was not loaded.*cleared"):
        loaded.update(set__box=loaded.box)
    assert stored(db) == before


def test_an_embedded_document_loaded_in_part_whose_values_are_set_since_is_written(
    mongoengine_connect: Any,
) -> None:
    db = mongoengine_connect()
    order = _order()
    loaded = PlOrder.objects.only("line.label").get()
    loaded.line.no, loaded.line.r = order.line.no, order.line.r  # the user's, set whole
    loaded.line.label = "S"
    PlOrder.objects(id=order.id).update_one(set__line=loaded.line)
    (raw,) = stored(db)
    assert raw["line"] == {"no": order.line.no, "r": order.line.r, "label": "S"}


def test_a_whole_embedded_document_loaded_with_its_values_is_written_as_given(
    mongoengine_connect: Any,
) -> None:
    db = mongoengine_connect()
    order = _order()
    loaded = PlOrder.objects.only("lines").get()  # the list whole: nothing left out
    loaded.lines[1].label = "Y"
    loaded.update(set__lines=list(loaded.lines))
    (raw,) = stored(db)
    assert [(item["no"], item["r"], item["label"]) for item in raw["lines"]] == [
        (order.lines[0].no, order.lines[0].r, "x"),
        (order.lines[1].no, order.lines[1].r, "Y"),
    ]
