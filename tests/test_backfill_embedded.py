"""``backfill()`` of generated fields declared on embedded documents (probe R: it returned 0
and filled nothing, silently). Stored documents whose embedded documents lack the value (the
field added later) get one: in a single field, a list, a map, nested, of a subclass named by
its ``_cls``; with one update per document conditioned on the field as read. The raw stored
documents are checked; the application's retry after a fault at each call is in
``test_faults_embedded.py`` (its ``backfill`` write).
"""

from __future__ import annotations

import ast
import importlib
import re
from typing import Any

import mongoengine as me
import pytest
from _write_support import (
    KINDS,
    Kind,
    Numbers,
    by_kind,
    coded_part,
    distinct,
    document,
    raw_docs,
)
from mongoengine.errors import ValidationError

from mongoengine_ids import SequenceField, backfill


def _models(kind: Kind) -> tuple[Any, Any, Any]:
    Part = coded_part(kind, "BfPart", "bf_codes")
    Holder = type(
        "BfHolder",
        (me.EmbeddedDocument,),
        {
            "__module__": __name__,
            "title": me.StringField(),
            "parts": me.ListField(me.EmbeddedDocumentField(Part)),
        },
    )
    Box = document(
        "BfBox",
        "bf_boxes",
        name=me.StringField(),
        part=me.EmbeddedDocumentField(Part),
        parts=me.ListField(me.EmbeddedDocumentField(Part)),
        mapped=me.MapField(me.EmbeddedDocumentField(Part)),
        holders=me.ListField(me.EmbeddedDocumentField(Holder)),
    )
    return Part, Holder, Box


def _codes(documents: list[dict[str, Any]], field: str = "code") -> dict[str, Any]:
    """Every embedded document's ``field``, by its label."""
    found: dict[str, Any] = {}

    def walk(value: Any) -> None:
        if isinstance(value, dict):
            if "label" in value:
                found[value["label"]] = value.get(field)
            for inner in value.values():
                walk(inner)
        elif isinstance(value, list):
            for inner in value:
                walk(inner)

    walk(documents)
    return found


@by_kind
def test_embedded_documents_lacking_a_value_get_one(mongoengine_db: Any, kind: Kind) -> None:
    _, _, Box = _models(kind)
    held = kind.stored(kind.sample())
    collection = mongoengine_db.bf_boxes
    collection.insert_many(
        [
            {
                "name": "legacy",
                "part": {"label": "single"},
                "parts": [{"label": "first"}, {"label": "kept", "code": held}],
                "mapped": {"a": {"label": "mapped"}},
                "holders": [{"title": "h", "parts": [{"label": "nested"}]}],
            },
            {"name": "empty"},
        ]
    )
    assert backfill(Box) == 4
    stored = raw_docs(collection)
    codes = _codes(stored)
    assert set(codes) == {"single", "first", "kept", "mapped", "nested"}
    assert codes["kept"] == held  # a value stored is never replaced
    for label in ("single", "first", "mapped", "nested"):
        kind.check(codes[label])
    assert distinct(list(codes.values()))
    assert stored[1] == {"_id": stored[1]["_id"], "name": "empty"}
    assert backfill(Box) == 0  # nothing left: a second run writes nothing
    assert raw_docs(collection) == stored
    loaded = Box.objects.get(name="legacy")
    assert kind.stored(loaded.holders[0].parts[0].code) == codes["nested"]


@by_kind
def test_only_the_named_embedded_fields_are_filled(mongoengine_db: Any, kind: Kind) -> None:
    _, _, Box = _models(kind)
    mongoengine_db.bf_boxes.insert_one(
        {"name": "legacy", "part": {"label": "single"}, "parts": [{"label": "listed"}]}
    )
    assert backfill(Box, "parts.code") == 1
    codes = _codes(raw_docs(mongoengine_db.bf_boxes))
    assert codes["single"] is None
    kind.check(codes["listed"])
    assert backfill(Box, "parts.code", "part.code") == 1
    kind.check(_codes(raw_docs(mongoengine_db.bf_boxes))["single"])


@pytest.mark.parametrize("name", ["code", "holders.code", "holders.parts", "name.code"])
def test_a_name_leading_to_no_generated_field_is_refused(mongoengine_db: Any, name: str) -> None:
    _, _, Box = _models(KINDS[0])
    mongoengine_db.bf_boxes.insert_one({"name": "legacy", "part": {"label": "single"}})
    with pytest.raises(ValueError, match=rf"'{re.escape(name)}' is not a generated field.*dotted"):
        backfill(Box, name)
    assert _codes(raw_docs(mongoengine_db.bf_boxes)) == {"single": None}


def test_a_name_refused_is_told_the_dotted_names_accepted(mongoengine_db: Any) -> None:
    # Probe BS-3: with every generated field inside embedded documents, it listed [] and
    # named "lines.no" as an example, which no model held.
    _, _, Box = _models(KINDS[0])
    with pytest.raises(ValueError, match="'code' is not a generated field") as raised:
        backfill(Box, "code")
    accepted = re.search(r"expected one of (\[.*?\])", str(raised.value))
    assert accepted is not None
    names = ast.literal_eval(accepted.group(1))  # the list the message quotes
    assert {"part.code", "parts.code"} <= set(names)
    for name in names:  # each is one backfill() takes
        backfill(Box, name)


class BfNode(me.EmbeddedDocument):
    label = me.StringField()
    no = SequenceField(sequence_name="bf_nodes")
    children = me.ListField(me.EmbeddedDocumentField("BfNode"))


class BfTree(me.Document):
    root = me.EmbeddedDocumentField(BfNode)
    meta = {"collection": "bf_trees"}


def test_a_recursive_shape_is_filled_at_every_depth(mongoengine_db: Any) -> None:
    """Review: only the first level was filled (the names stopped at a class met once), and
    ``root.children.no`` was refused as a name."""
    mongoengine_db.bf_trees.insert_one(
        {"root": {"label": "r", "children": [{"label": "c", "children": [{"label": "g"}]}]}}
    )
    assert backfill(BfTree, "root.children.children.no") == 1
    assert _codes(raw_docs(mongoengine_db.bf_trees), "no") == {"r": None, "c": None, "g": 1}
    assert backfill(BfTree) == 2
    assert _codes(raw_docs(mongoengine_db.bf_trees), "no") == {"r": 2, "c": 3, "g": 1}


class BfBase(me.EmbeddedDocument):
    label = me.StringField()
    meta = {"allow_inheritance": True}


class BfNumbered(BfBase):
    n = SequenceField(sequence_name="bf_numbered")


class BfShelf(me.Document):
    items = me.ListField(me.EmbeddedDocumentField(BfBase))
    meta = {"collection": "bf_shelves"}


def test_a_field_of_the_subclass_named_by_its_cls_is_filled(mongoengine_db: Any) -> None:
    mongoengine_db.bf_shelves.insert_one(
        {
            "items": [
                {"_cls": "BfBase", "label": "base"},
                {"_cls": "BfBase.BfNumbered", "label": "s"},
            ]
        }
    )
    assert backfill(BfShelf, "items.n") == 1
    (stored,) = raw_docs(mongoengine_db.bf_shelves)
    assert stored["items"] == [
        {"_cls": "BfBase", "label": "base"},
        {"_cls": "BfBase.BfNumbered", "label": "s", "n": 1},
    ]


class BfLine(me.EmbeddedDocument):
    tenant = me.StringField()
    no = SequenceField(scope="tenant", sequence_name="bf_lines")


class BfOrder(me.Document):
    lines = me.ListField(me.EmbeddedDocumentField(BfLine))
    meta = {"collection": "bf_orders"}


def test_an_embedded_document_lacking_its_scope_is_named_after_the_others_are_filled(
    mongoengine_db: Any,
) -> None:
    mongoengine_db.bf_orders.insert_one({"lines": [{"tenant": "a"}, {}, {"tenant": "a"}]})
    with pytest.raises(ValidationError, match=r"made from \['tenant'\].*'lines\.1'"):
        backfill(BfOrder)
    (stored,) = raw_docs(mongoengine_db.bf_orders)
    assert stored["lines"] == [{"tenant": "a", "no": 1}, {}, {"tenant": "a", "no": 2}]


def test_a_list_changed_meanwhile_is_read_again_never_written_over(mongoengine_db: Any) -> None:
    """Another writer pushes an item between the read and the update: the update, conditioned
    on the list as read, matches nothing; the values are given back and the list read again."""
    field = Numbers()
    Item = type("BfCounted", (me.EmbeddedDocument,), {"label": me.StringField(), "n": field})
    Model = document(
        "BfCountedBox", "bf_counted", items=me.ListField(me.EmbeddedDocumentField(Item))
    )
    collection = mongoengine_db.bf_counted
    collection.insert_one({"items": [{"label": "a"}]})
    field.before = lambda: collection.update_one({}, {"$push": {"items": {"label": "pushed"}}})
    assert backfill(Model) == 2
    (stored,) = raw_docs(collection)
    # The first attempt's value (1) was not written; the list as read again got 2 and 3.
    assert stored["items"] == [{"label": "a", "n": 2}, {"label": "pushed", "n": 3}]


# -- values made from embedded documents holding generated values (probe AJ) --------------------


class BfScopePlace(me.EmbeddedDocument):
    city = me.StringField()
    code = SequenceField(sequence_name="bf_scope_place_code")  # added later, as the number


class BfScopedVisit(me.Document):
    place = me.EmbeddedDocumentField(BfScopePlace)
    number = SequenceField(scope="place")
    meta = {"collection": "bf_scoped_visits"}


@pytest.mark.parametrize("names", [(), ("number",)], ids=["all", "number-only"])
def test_a_scope_holding_generated_values_is_filled_before_it_numbers(
    mongoengine_db: Any, names: tuple[str, ...]
) -> None:
    # The numbers had been made in the counter of the scope without its code, which the scope
    # as then stored never told: a document saved later in that scope got number 1 again.
    collection = BfScopedVisit._get_collection()
    collection.insert_many([{"place": {"city": "x"}}, {"place": {"city": "x"}}])
    assert backfill(BfScopedVisit, *names) == 4
    stored = list(collection.find({}, {"_id": 0}).sort("place.code"))
    assert stored == [
        {"place": {"city": "x", "code": 1}, "number": 1},
        {"place": {"city": "x", "code": 2}, "number": 1},
    ]
    again = BfScopedVisit(place=BfScopePlace(city="x", code=1)).save()
    assert again.number == 2
    assert collection.count_documents({"place": {"city": "x", "code": 1}}) == 2


class BfSiblingLine(me.EmbeddedDocument):
    code = SequenceField(sequence_name="bf_sibling_code")
    no = SequenceField(scope="code", sequence_name="bf_sibling_no")


class BfSiblings(me.Document):
    lines = me.ListField(me.EmbeddedDocumentField(BfSiblingLine))
    meta = {"collection": "bf_siblings"}


def test_an_embedded_number_scoped_by_a_generated_sibling_is_filled_in_one_run(
    mongoengine_db: Any,
) -> None:
    # The first run had filled the codes, then raised ValidationError advising to give the
    # lines a code (just given); a second run was needed.
    collection = BfSiblings._get_collection()
    collection.insert_many([{"lines": [{}]}, {"lines": [{}, {}]}])
    assert backfill(BfSiblings) == 6
    lines = [line for doc in collection.find().sort("_id") for line in doc["lines"]]
    assert sorted(line["code"] for line in lines) == [1, 2, 3]
    assert [line["no"] for line in lines] == [1, 1, 1]  # each first of its code's counter
    assert backfill(BfSiblings) == 0


def test_a_document_whose_scope_lacks_its_values_is_not_numbered(
    mongoengine_db: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Review H: a document stored after the values inside the scopes were filled (by the old
    # application, still running) was numbered from its scope without them, then given them:
    # a later document saved in that scope got the same number.
    module = importlib.import_module("mongoengine_ids.write.backfill")  # (the package
    # exports the function under the module's name)

    collection = BfScopedVisit._get_collection()
    collection.insert_one({"_id": 1, "place": {"city": "x"}})
    fill_inside = module._backfill_inside

    def then_a_late_one(*args: Any, **kwargs: Any) -> int:
        filled = fill_inside(*args, **kwargs)
        if collection.count_documents({"_id": 2}) == 0:  # once: after the scopes' pass
            collection.insert_one({"_id": 2, "place": {"city": "x"}})
        return filled

    monkeypatch.setattr(module, "_backfill_inside", then_a_late_one)
    with pytest.raises(ValidationError, match=r"\['place', 'place\.code'\].*_id 2"):
        backfill(BfScopedVisit)
    # Its code given by the pass over every embedded value, which comes after: no number.
    assert list(collection.find({"_id": 2})) == [{"_id": 2, "place": {"city": "x", "code": 2}}]
    monkeypatch.setattr(module, "_backfill_inside", fill_inside)
    assert backfill(BfScopedVisit) == 1  # its number, from its scope as stored
    late = collection.find_one({"_id": 2})
    assert late["number"] == 1
    again = BfScopedVisit(place=BfScopePlace(**late["place"])).save()
    assert again.number == 2


class BfOptionalPart(me.EmbeddedDocument):
    code = SequenceField(sequence_name="bf_optional_part_code")
    meta = {"allow_inheritance": True}


class BfPlainPart(BfOptionalPart):
    code = me.StringField()  # its items hold no generated code


class BfOptional(me.Document):
    parts = me.ListField(me.EmbeddedDocumentField(BfOptionalPart))
    number = SequenceField(scope="parts")
    meta = {"collection": "bf_optional"}


def test_a_scope_whose_subclass_generates_nothing_there_is_numbered(mongoengine_db: Any) -> None:
    # Review J: the scope's items of the subclass lack "code" for good, and backfill() had
    # named them as lacking it on every run, though save() numbers them.
    collection = BfOptional._get_collection()
    collection.insert_many([{"_id": 1, "parts": [{"_cls": "BfPlainPart"}]}])
    assert backfill(BfOptional) == 1
    assert list(collection.find()) == [{"_id": 1, "parts": [{"_cls": "BfPlainPart"}], "number": 1}]
    assert BfOptional(parts=[BfPlainPart()]).save().number == 2
