"""Embedded documents and model shapes on the write path (``spec-write.md``).

Generated fields declared in embedded documents (``EmbeddedDocumentField``, a ``ListField`` of
them, nested two levels) are filled on the parent's ``save()`` and bulk insert, distinct, kept
on later saves; an embedded document appended later gets its value at the next save.
``DynamicDocument``, ``allow_inheritance``, abstract bases, plain mixins, ``switch_db``,
``switch_collection`` and ``meta["db_alias"]`` are all followed. Every test reads the raw stored
documents.

Embedded document classes are made inside the tests: the current code refuses them when the
class is defined.
"""

from __future__ import annotations

from typing import Any

import mongoengine as me
import pytest
from _write_support import (
    KINDS,
    Kind,
    by_kind,
    counters,
    distinct,
    document,
    raw_docs,
    raw_one,
)
from mongoengine.context_managers import switch_collection, switch_db

from mongoengine_ids import RandomUniqueField
from mongoengine_ids.testing import Connect

#: A RandomUniqueField in an embedded document needs reserve_in (no unique index can make its
#: values unique across documents): refused otherwise, see test_embedded_random_needs_a_proxy.
EMBEDDABLE = [kind for kind in KINDS if kind.name != "random"]
by_embeddable_kind = pytest.mark.parametrize(
    "kind", EMBEDDABLE, ids=[kind.name for kind in EMBEDDABLE]
)


def embedded(class_name: str, **fields: Any) -> type[me.EmbeddedDocument]:
    return type(class_name, (me.EmbeddedDocument,), {"__module__": __name__, **fields})


def subclass(base: type[me.Document], class_name: str, **fields: Any) -> type[me.Document]:
    return type(class_name, (base,), {"__module__": __name__, **fields})


# -- embedded documents ---------------------------------------------------------------------------


def order_models(kind: Kind, prefix: str) -> tuple[type[Any], type[me.Document]]:
    Line = embedded(f"{prefix}Line", label=me.StringField(), code=kind.make())
    Order = document(
        f"{prefix}Order",
        f"{prefix.lower()}_orders",
        name=me.StringField(),
        main=me.EmbeddedDocumentField(Line),
        lines=me.ListField(me.EmbeddedDocumentField(Line)),
    )
    return Line, Order


def line_codes(raw: dict[str, Any]) -> list[Any]:
    """The stored codes of an order: main's, then each line's (None where missing)."""
    return [raw["main"].get("code"), *(line.get("code") for line in raw["lines"])]


def object_codes(kind: Kind, order: Any) -> list[Any]:
    return [kind.stored(order.main.code), *(kind.stored(line.code) for line in order.lines)]


@by_embeddable_kind
def test_embedded_values_are_filled_on_save(mongoengine_db: Any, kind: Kind) -> None:
    Line, Order = order_models(kind, "Saved")
    assigned = kind.sample()
    order = Order(
        name="o",
        main=Line(label="m"),
        lines=[Line(label="x"), Line(label="y", code=assigned), Line(label="z")],
    )
    order.save()

    raw = raw_one(mongoengine_db.saved_orders)
    assert [line["label"] for line in raw["lines"]] == ["x", "y", "z"]
    codes = line_codes(raw)
    assert codes[2] == kind.stored(assigned)
    for code in (codes[0], codes[1], codes[3]):
        kind.check(code)
    assert distinct(codes)
    assert object_codes(kind, order) == codes
    assert set(raw["main"]) == {"label", "code"}


@by_embeddable_kind
def test_embedded_values_are_filled_on_bulk_insert(mongoengine_db: Any, kind: Kind) -> None:
    Line, Order = order_models(kind, "Bulk")
    orders = [
        Order(name=f"o{i}", main=Line(label="m"), lines=[Line(label="a"), Line(label="b")])
        for i in range(3)
    ]
    Order.objects.insert(orders)

    raws = {raw["name"]: raw for raw in raw_docs(mongoengine_db.bulk_orders)}
    assert sorted(raws) == ["o0", "o1", "o2"]
    every: list[Any] = []
    for order in orders:
        codes = line_codes(raws[order.name])
        for code in codes:
            kind.check(code)
        assert object_codes(kind, order) == codes
        every.extend(codes)
    assert distinct(every)


@by_embeddable_kind
def test_embedded_values_are_kept_on_later_saves(mongoengine_db: Any, kind: Kind) -> None:
    Line, Order = order_models(kind, "Kept")
    Order(name="o", main=Line(label="m"), lines=[Line(label="a"), Line(label="b")]).save()
    before = raw_one(mongoengine_db.kept_orders)

    loaded = Order.objects.get(name="o")
    assert object_codes(kind, loaded) == line_codes(before)
    loaded.name = "renamed"
    loaded.save()
    assert raw_one(mongoengine_db.kept_orders) == {**before, "name": "renamed"}

    loaded = Order.objects.get(name="renamed")
    loaded.lines[0].label = "a2"
    loaded.save()
    after = raw_one(mongoengine_db.kept_orders)
    assert line_codes(after) == line_codes(before)
    assert after["lines"][0]["label"] == "a2"

    # Loaded partially, the embedded values are not rewritten either.
    partial = Order.objects.only("name").get(name="renamed")
    partial.name = "again"
    partial.save()
    assert raw_one(mongoengine_db.kept_orders) == {**after, "name": "again"}


@by_embeddable_kind
def test_an_appended_embedded_document_gets_a_value_at_the_next_save(
    mongoengine_db: Any, kind: Kind
) -> None:
    Line, Order = order_models(kind, "Appended")
    Order(name="o", main=Line(label="m"), lines=[Line(label="a")]).save()
    before = raw_one(mongoengine_db.appended_orders)

    loaded = Order.objects.get(name="o")
    loaded.lines.append(Line(label="b"))
    loaded.save()
    after = raw_one(mongoengine_db.appended_orders)
    assert [line["label"] for line in after["lines"]] == ["a", "b"]
    assert line_codes(after)[:2] == line_codes(before)
    kind.check(after["lines"][1]["code"])
    assert distinct(line_codes(after))
    assert kind.stored(loaded.lines[1].code) == after["lines"][1]["code"]

    # An embedded document set in place of a missing one, on a document that had none.
    bare = Order(name="bare").save()
    assert "main" not in raw_one(mongoengine_db.appended_orders, {"name": "bare"})
    bare.main = Line(label="late")
    bare.save()
    late = raw_one(mongoengine_db.appended_orders, {"name": "bare"})["main"]
    kind.check(late["code"])
    assert late["code"] not in line_codes(after)


#: Where a model may hold an embedded document with a generated field: (id, how the model
#: holds it, whether the model declares a generated field of its own). A model that names the
#: class (or a base or a subclass of it) is found however it names it; one that names none (an
#: untyped container, a DynamicDocument's attribute) writes the write path only if it declares
#: a generated field itself (see docs/guarantees.md, "Embedded documents").
HOLDERS: list[tuple[str, str, bool]] = [
    ("typed-with-the-base", "base", False),
    ("typed-with-a-subclass", "subclass", False),
    ("named-by-a-string", "string", False),
    ("dynamic-document", "dynamic", True),
    ("generic-embedded", "generic", True),
    ("untyped-list", "list", True),
    ("untyped-dict", "dict", True),
    ("dynamic-field", "dynamic-field", True),
]


@pytest.mark.parametrize("via", ["save", "insert"])
@pytest.mark.parametrize(("name", "holds", "own"), HOLDERS, ids=[h[0] for h in HOLDERS])
@by_embeddable_kind
def test_embedded_values_are_filled_however_the_model_holds_the_document(
    mongoengine_db: Any, kind: Kind, name: str, holds: str, own: bool, via: str
) -> None:
    """The generated field of an embedded document is filled on ``save()`` and ``insert()``,
    distinct across documents, kept on a later save, and the embedded document is marked
    stored, however the model holds it."""
    prefix = f"Held{name.title().replace('-', '')}{via.title()}"
    Base = type(
        f"{prefix}PartBase",
        (me.EmbeddedDocument,),
        {"__module__": __name__, "meta": {"allow_inheritance": True}, "label": me.StringField()},
    )
    Part = type(f"{prefix}Part", (Base,), {"__module__": __name__, "code": kind.make()})
    Held = type(f"{prefix}Sub", (Part,), {"__module__": __name__}) if holds == "subclass" else Part
    fields: dict[str, Any] = {
        "base": {"part": me.EmbeddedDocumentField(Base)},
        "subclass": {"part": me.EmbeddedDocumentField(Held)},
        "string": {"part": me.EmbeddedDocumentField(f"{prefix}Part")},
        "dynamic": {},
        "generic": {"part": me.GenericEmbeddedDocumentField()},
        "list": {"part": me.ListField()},
        "dict": {"part": me.DictField()},
        "dynamic-field": {"part": me.DynamicField()},
    }[holds]
    if own:
        fields["own"] = kind.make()
    base = me.DynamicDocument if holds == "dynamic" else me.Document
    collection = f"{prefix.lower()}s"
    Model = document(f"{prefix}Model", collection, base, name=me.StringField(), **fields)

    def held(doc: Any) -> Any:
        return doc.part[0] if holds == "list" else doc.part["p"] if holds == "dict" else doc.part

    def holding(part: Any) -> Any:
        return [part] if holds == "list" else {"p": part} if holds == "dict" else part

    docs = [Model(name=f"d{i}", part=holding(Held(label=f"l{i}"))) for i in range(2)]
    if via == "save":
        for doc in docs:
            doc.save()
    else:
        Model.objects.insert(docs)
    raws = {raw["name"]: raw for raw in raw_docs(mongoengine_db[collection])}
    codes = []
    for doc in docs:
        raw = raws[doc.name]["part"]
        stored = raw[0] if holds == "list" else raw["p"] if holds == "dict" else raw
        kind.check(stored["code"])
        assert kind.stored(held(doc).code) == stored["code"]
        assert held(doc)._created is False  # stored now: a later save() keeps its value
        codes.append(stored["code"])
    assert distinct(codes)
    docs[0].name = "renamed"
    docs[0].save()
    assert raw_one(mongoengine_db[collection], {"name": "renamed"})["part"] == raws["d0"]["part"]


@by_embeddable_kind
def test_embedded_documents_nested_two_levels(mongoengine_db: Any, kind: Kind) -> None:
    Inner = embedded("NestedInner", label=me.StringField(), code=kind.make())
    Outer = embedded(
        "NestedOuter",
        inner=me.EmbeddedDocumentField(Inner),
        items=me.ListField(me.EmbeddedDocumentField(Inner)),
    )
    Root = document(
        "NestedRoot",
        "nested_roots",
        name=me.StringField(),
        outer=me.EmbeddedDocumentField(Outer),
        outers=me.ListField(me.EmbeddedDocumentField(Outer)),
    )

    def make(name: str) -> Any:
        return Root(
            name=name,
            outer=Outer(inner=Inner(label="i"), items=[Inner(label="j"), Inner(label="k")]),
            outers=[Outer(inner=Inner(label="l"), items=[Inner(label="m")])],
        )

    def codes(raw: dict[str, Any]) -> list[Any]:
        found = [raw["outer"]["inner"].get("code")]
        found += [item.get("code") for item in raw["outer"]["items"]]
        for outer in raw["outers"]:
            found.append(outer["inner"].get("code"))
            found += [item.get("code") for item in outer["items"]]
        return found

    saved = make("saved").save()
    Root.objects.insert([make("bulk1"), make("bulk2")])
    raws = {raw["name"]: raw for raw in raw_docs(mongoengine_db.nested_roots)}
    every = [code for raw in raws.values() for code in codes(raw)]
    assert len(every) == 15
    for code in every:
        kind.check(code)
    assert distinct(every)
    assert (
        kind.stored(saved.outers[0].items[0].code) == raws["saved"]["outers"][0]["items"][0]["code"]
    )

    # Kept on a later save; an item appended two levels down gets a value.
    loaded = Root.objects.get(name="saved")
    loaded.outers[0].items.append(Inner(label="n"))
    loaded.save()
    after = raw_one(mongoengine_db.nested_roots, {"name": "saved"})
    assert codes(after)[:5] == codes(raws["saved"])
    kind.check(after["outers"][0]["items"][1]["code"])
    assert after["outers"][0]["items"][1]["code"] not in every


def test_embedded_random_needs_a_proxy() -> None:
    """Refused with the TypeError itself (raised when the class is made, not inside
    ``__set_name__``, whose errors Python < 3.12 wraps in a RuntimeError), and also when the
    field comes from a mixin (found by a probe: no check, and values repeated)."""
    expected = r"RandomUniqueField 'code' of the embedded document '\w+' needs reserve_in"
    with pytest.raises(TypeError, match=expected):
        embedded("RandomLine", code=RandomUniqueField(digits=12))

    class CodeMixin:
        code = RandomUniqueField(digits=12)

    with pytest.raises(TypeError, match=expected):

        class MixedLine(CodeMixin, me.EmbeddedDocument):
            label = me.StringField()

    Line = embedded("ProxiedLine", code=RandomUniqueField(digits=12, reserve_in="line_codes"))
    assert issubclass(Line, me.EmbeddedDocument)


def test_embedded_random_needs_a_proxy_also_when_its_class_was_not_seen_made(
    mongoengine_db: Any,
) -> None:
    """Found by a review: a base whose own ``__init_subclass__`` does not call ``super()`` hides
    the classes made from it from the check; their writes are refused, nothing written."""

    class Base(me.EmbeddedDocument):
        meta = {"allow_inheritance": True}

        def __init_subclass__(cls, **kwargs: Any) -> None:
            cls.kind = cls.__name__

    class Badge(Base):
        code = RandomUniqueField(digits=1)

    class Desk(me.Document):
        badge = me.EmbeddedDocumentField(Base)
        meta = {"collection": "desks_unseen"}

    expected = r"RandomUniqueField 'code' of the embedded document 'Badge' needs reserve_in"
    for badge in (Badge(), Badge(code=3)):
        with pytest.raises(TypeError, match=expected):
            Desk(badge=badge).save()
    with pytest.raises(TypeError, match=expected):
        Desk.objects.insert([Desk(badge=Badge())])
    assert mongoengine_db.desks_unseen.count_documents({}) == 0


# -- model shapes ---------------------------------------------------------------------------------


@by_kind
def test_dynamic_document(mongoengine_db: Any, kind: Kind) -> None:
    Dynamic = document(
        "DynamicItem",
        "dynamic_items",
        base=me.DynamicDocument,
        id=kind.make(primary_key=True),
        name=me.StringField(),
        code=kind.make(),
    )
    saved = Dynamic(name="a")
    saved.extra = "x"
    saved.save()
    Dynamic.objects.insert([Dynamic(name="b", other=1), Dynamic(name="c")])

    raws = {raw["name"]: raw for raw in raw_docs(mongoengine_db.dynamic_items)}
    assert raws["a"]["extra"] == "x"
    assert raws["b"]["other"] == 1
    for raw in raws.values():
        kind.check(raw["_id"])
        kind.check(raw["code"])
    assert distinct([raw["_id"] for raw in raws.values()])
    assert distinct([raw["code"] for raw in raws.values()])
    assert kind.stored(saved.code) == raws["a"]["code"]

    # Later saves keep the values.
    loaded = Dynamic.objects.get(name="a")
    loaded.extra = "y"
    loaded.save()
    after = {raw["_id"]: raw for raw in raw_docs(mongoengine_db.dynamic_items)}
    assert after[raws["a"]["_id"]] == {**raws["a"], "extra": "y"}
    assert after[raws["b"]["_id"]] == raws["b"]


@by_kind
def test_allow_inheritance(mongoengine_db: Any, kind: Kind) -> None:
    Base = document(
        "InheritedBase",
        "inherited",
        meta={"allow_inheritance": True},
        id=kind.make(primary_key=True),
        name=me.StringField(),
        code=kind.make(),
    )
    Sub = subclass(Base, "InheritedSub", extra=me.StringField())

    Sub(name="saved-sub", extra="e").save()
    Base(name="saved-base").save()
    Base.objects.insert([Base(name="bulk-base"), Sub(name="bulk-sub-via-base")])
    Sub.objects.insert([Sub(name="bulk-sub")])

    raws = {raw["name"]: raw for raw in raw_docs(mongoengine_db.inherited)}
    assert {name: raw["_cls"] for name, raw in raws.items()} == {
        "saved-sub": "InheritedBase.InheritedSub",
        "saved-base": "InheritedBase",
        "bulk-base": "InheritedBase",
        "bulk-sub-via-base": "InheritedBase.InheritedSub",
        "bulk-sub": "InheritedBase.InheritedSub",
    }
    for raw in raws.values():
        kind.check(raw["_id"])
        kind.check(raw["code"])
    assert distinct([raw["_id"] for raw in raws.values()])
    assert distinct([raw["code"] for raw in raws.values()])


@by_embeddable_kind
def test_a_model_whose_class_name_another_took_fills_embedded_values(
    mongoengine_db: Any, kind: Kind
) -> None:
    """Probe 40a: the models made before an embedded class with a generated field that they may
    hold were hooked by a walk of MongoEngine's registry, which keeps the last class made under
    a name. A model whose name another class took meanwhile (a test's scratch model, another
    module's ``Order``) was left out: its embedded documents were stored without their values,
    by ``save()`` and by a bulk insert."""
    prefix = f"Hidden{kind.name.capitalize()}"  # (names of their own: none seen declaring)
    Line = embedded(f"{prefix}Line", label=me.StringField(), meta={"allow_inheritance": True})
    Order = document(
        f"{prefix}Order", "hidden_orders", lines=me.ListField(me.EmbeddedDocumentField(Line))
    )
    document(f"{prefix}Order", "hidden_scratch", title=me.StringField())  # takes its name
    Numbered = type(f"{prefix}NumberedLine", (Line,), {"__module__": __name__, "code": kind.make()})
    order = Order(lines=[Numbered(label="a"), Numbered(label="b")]).save()
    order.lines.append(Numbered(label="c"))
    order.save()
    Order.objects.insert([Order(lines=[Numbered(label="d")])])

    lines = [line for raw in raw_docs(mongoengine_db.hidden_orders) for line in raw["lines"]]
    assert [line["label"] for line in lines] == ["a", "b", "c", "d"]
    codes = [line.get("code") for line in lines]
    for code in codes:
        kind.check(code)
    assert distinct(codes)


@by_kind
def test_abstract_base_declaring_the_fields(mongoengine_db: Any, kind: Kind) -> None:
    Abstract = type(
        "AbstractCoded",
        (me.Document,),
        {
            "__module__": __name__,
            "meta": {"abstract": True},
            "id": kind.make(primary_key=True),
            "code": kind.make(),
            "name": me.StringField(),
        },
    )
    First = subclass(Abstract, "AbstractFirst", meta={"collection": "abstract_first"})
    Second = subclass(Abstract, "AbstractSecond", meta={"collection": "abstract_second"})

    first = First(name="a").save()
    second = Second(name="b").save()
    First.objects.insert([First(name="c")])
    Second.objects.insert([Second(name="d")])

    firsts = raw_docs(mongoengine_db.abstract_first)
    seconds = raw_docs(mongoengine_db.abstract_second)
    assert [raw["name"] for raw in firsts] == ["a", "c"]
    assert [raw["name"] for raw in seconds] == ["b", "d"]
    for raw in firsts + seconds:
        kind.check(raw["_id"])
        kind.check(raw["code"])
    assert kind.stored(first.code) == firsts[0]["code"]
    assert kind.stored(second.code) == seconds[0]["code"]
    if kind.name == "sequence":
        # MongoEngine's naming: one counter per field, named after the abstract base and
        # shared by its subclasses (a migrated app's existing counters keep numbering).
        assert [(raw["_id"], raw["code"]) for raw in firsts] == [(1, 1), (3, 3)]
        assert [(raw["_id"], raw["code"]) for raw in seconds] == [(2, 2), (4, 4)]
        assert counters(mongoengine_db) == [
            {"_id": "abstract_coded.code", "next": 4},
            {"_id": "abstract_coded.id", "next": 4},
        ]


@by_kind
def test_plain_mixin_declaring_the_field(mongoengine_db: Any, kind: Kind) -> None:
    class CodedMixin:
        code = kind.make()

    Mixed = type(
        "MixedIn",
        (CodedMixin, me.Document),
        {"__module__": __name__, "name": me.StringField(), "meta": {"collection": "mixed"}},
    )
    saved = Mixed(name="a").save()
    Mixed.objects.insert([Mixed(name="b"), Mixed(name="c")])

    raws = raw_docs(mongoengine_db.mixed)
    assert [raw["name"] for raw in raws] == ["a", "b", "c"]
    for raw in raws:
        kind.check(raw["code"])
    assert distinct([raw["code"] for raw in raws])
    assert kind.stored(saved.code) == raws[0]["code"]


@by_embeddable_kind
def test_plain_mixin_declaring_the_field_of_an_embedded_document(
    mongoengine_db: Any, kind: Kind
) -> None:
    """A mixin's generated field, copied into an embedded document made from it: filled when
    the document holding it is written."""

    class CodedPartMixin:
        code = kind.make()

    Part = type(
        "MixedInPart",
        (CodedPartMixin, me.EmbeddedDocument),
        {"__module__": __name__, "label": me.StringField()},
    )
    Holder = document(
        "MixedInHolder", "mixed_holders", name=me.StringField(), part=me.EmbeddedDocumentField(Part)
    )
    saved = Holder(name="a", part=Part(label="x")).save()
    Holder.objects.insert([Holder(name="b", part=Part(label="y"))])

    raws = raw_docs(mongoengine_db.mixed_holders)
    assert [raw["name"] for raw in raws] == ["a", "b"]
    for raw in raws:
        kind.check(raw["part"]["code"])
    assert distinct([raw["part"]["code"] for raw in raws])
    assert kind.stored(saved.part.code) == raws[0]["part"]["code"]


@by_kind
def test_switch_db(mongoengine_connect: Connect, kind: Kind) -> None:
    default = mongoengine_connect()
    archive = mongoengine_connect("archive")
    Model = document(
        "SwitchedDb",
        "switched_db",
        id=kind.make(primary_key=True),
        name=me.StringField(),
        code=kind.make(),
    )

    with switch_db(Model, "archive") as Archived:
        Archived(name="a").save()
        Archived.objects.insert([Archived(name="b"), Archived(name="c")])
    Model(name="home").save()

    archived = raw_docs(archive.switched_db)
    assert [raw["name"] for raw in archived] == ["a", "b", "c"]
    for raw in archived:
        kind.check(raw["_id"])
        kind.check(raw["code"])
    assert distinct([raw["code"] for raw in archived])
    home = raw_one(default.switched_db)
    assert home["name"] == "home"
    kind.check(home["code"])


@by_kind
def test_switch_collection(mongoengine_db: Any, kind: Kind) -> None:
    Model = document(
        "SwitchedCollection",
        "switched_main",
        id=kind.make(primary_key=True),
        name=me.StringField(),
        code=kind.make(),
    )

    with switch_collection(Model, "switched_archive") as Archived:
        Archived(name="a").save()
        Archived.objects.insert([Archived(name="b"), Archived(name="c")])
    Model(name="home").save()

    archived = raw_docs(mongoengine_db.switched_archive)
    assert [raw["name"] for raw in archived] == ["a", "b", "c"]
    for raw in archived:
        kind.check(raw["_id"])
        kind.check(raw["code"])
    assert distinct([raw["_id"] for raw in archived])
    assert distinct([raw["code"] for raw in archived])
    home = raw_one(mongoengine_db.switched_main)
    assert home["name"] == "home"
    kind.check(home["code"])
    if kind.name == "random":
        index = [
            spec
            for spec in mongoengine_db.switched_archive.index_information().values()
            if spec["key"] == [("code", 1)]
        ]
        assert len(index) == 1
        assert index[0].get("unique") is True


@by_kind
def test_meta_db_alias(mongoengine_connect: Connect, kind: Kind) -> None:
    default = mongoengine_connect()
    other = mongoengine_connect("other")
    Model = document(
        "Aliased",
        "aliased",
        meta={"db_alias": "other"},
        id=kind.make(primary_key=True),
        name=me.StringField(),
        code=kind.make(),
    )

    saved = Model(name="a").save()
    Model.objects.insert([Model(name="b"), Model(name="c")])

    raws = raw_docs(other.aliased)
    assert [raw["name"] for raw in raws] == ["a", "b", "c"]
    for raw in raws:
        kind.check(raw["_id"])
        kind.check(raw["code"])
    assert distinct([raw["code"] for raw in raws])
    assert kind.stored(saved.code) == raws[0]["code"]
    assert "aliased" not in default.list_collection_names()
    # The counters live on the model's own database, not on the default one.
    assert counters(default) == []
    if kind.name == "sequence":
        assert [(c["_id"], c["next"]) for c in counters(other)] == [
            ("aliased.code", 3),
            ("aliased.id", 3),
        ]
