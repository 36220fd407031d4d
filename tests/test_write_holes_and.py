"""An upsert whose filter fixes a generated field inside ``$and`` while the update writes it
with another operator sends no path twice (a server refuses that). Plain MongoEngine is the
reference; the update sent is checked (mongomock does not refuse such an update)."""

from __future__ import annotations

from typing import Any

import mongoengine as me
import pytest
from mongoengine.queryset.visitor import Q

from mongoengine_ids import RandomUniqueField, SequenceField


def _spy_updates(monkeypatch: pytest.MonkeyPatch, model: Any) -> list[dict[str, Any]]:
    """The update documents ``model``'s collection is sent by ``update_one``."""
    sent: list[dict[str, Any]] = []
    klass = type(model._get_collection())
    original = klass.update_one

    def update_one(self: Any, filter: Any, update: Any, *args: Any, **kwargs: Any) -> Any:
        sent.append(update)
        return original(self, filter, update, *args, **kwargs)

    monkeypatch.setattr(klass, "update_one", update_one)
    return sent


def _conflicting_paths(update: dict[str, Any]) -> set[str]:
    """Paths an update document writes with two operators: a server refuses it ("Updating the
    path 'x' would create a conflict at 'x'", code 40)."""
    seen: dict[str, str] = {}
    conflicts = set()
    for op, fields in update.items():
        for path in fields if isinstance(fields, dict) else ():
            if path in seen and seen[path] != op:
                conflicts.add(path)
            seen[path] = op
    return conflicts


@pytest.mark.parametrize(
    "update",
    [
        {"inc__number": 1},
        {"max__number": 100},
        {"unset__number": True},
        {"__raw__": {"$inc": {"num": 1}}},
    ],
)
@pytest.mark.parametrize("kind", ["sequence", "random"])
def test_upsert_fixed_inside_and_with_caller_operator_sends_no_conflict(
    mongoengine_db: Any, monkeypatch: pytest.MonkeyPatch, update: dict[str, Any], kind: str
) -> None:
    """A filter fixing a generated field inside ``$and`` (``Q(number=500) & Q(number__ne=None)``)
    while the update writes it with another operator (``$inc``, ``$max``, ``$unset``): plain
    MongoEngine sends that operator alone (a server inserts ``number: 500`` from the filter,
    then applies it), and the package never sends a ``$setOnInsert`` of the same path, which a
    server refuses (code 40, "would create a conflict"): an operator computing a generated
    value (``$inc``, ``$max``) is refused before anything is sent, and so is ``$unset`` (review
    BX: the document inserted lacked the value, never matched the filter again, and each
    retry inserted another)."""

    field = (
        SequenceField(db_field="num", sequence_name="y_fixed")
        if kind == "sequence"
        else RandomUniqueField(digits=3, db_field="num")
    )

    class YPlain(me.Document):
        number = me.IntField(db_field="num")
        name = me.StringField()
        meta = {"collection": "y_plain"}

    YGen = type(
        "YGen",
        (me.Document,),
        {"number": field, "name": me.StringField(), "meta": {"collection": "y_gen"}},
    )
    for model in (YPlain, YGen):
        sent = _spy_updates(monkeypatch, model)
        query = model.objects(Q(number=500) & Q(number__ne=None))
        if model is YGen:
            # Refused, before anything is sent.
            with pytest.raises(me.errors.InvalidQueryError, match=r"YGen\.number is generated"):
                query.update_one(upsert=True, **dict(update))
            assert sent == []
            continue
        query.update_one(upsert=True, **dict(update))
        assert sent, model
        assert _conflicting_paths(sent[-1]) == set(), (model.__name__, sent[-1])
        monkeypatch.undo()
