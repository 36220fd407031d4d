"""Upserts (``spec-write.md``): ``QuerySet.update(upsert=True)``, ``update_one(upsert=True)``,
``upsert_one()`` and ``modify(upsert=True)``.

When the upsert inserts, the generated values are added (``$setOnInsert``), a generated primary
key included (never the server's ObjectId); when it matches, they are untouched. A value fixed by
an equality in the filter, or given by the update, is not generated. Another operator on a
generated field in an upsert is refused before anything is written. Every test reads the raw
stored documents.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import mongoengine as me
import pytest
from _write_support import (
    BY_NAME,
    COUNTERS,
    KINDS,
    ROLES,
    Indexes,
    Kind,
    by_kind,
    counters,
    document,
    field_of,
    is_object_id,
    raw_docs,
    raw_one,
)
from mongoengine.context_managers import switch_db
from mongoengine.errors import InvalidQueryError
from mongoengine.queryset import QuerySet

from mongoengine_ids import RandomUniqueField, SequenceField
from mongoengine_ids.errors import ExplicitValueError
from mongoengine_ids.testing import Connect

OPERATIONS = ["update", "update_one", "upsert_one", "modify"]

by_role = pytest.mark.parametrize("role", ROLES)
by_operation = pytest.mark.parametrize("operation", OPERATIONS)


def upsert(operation: str, queryset: QuerySet, **update: Any) -> Any:
    """Run ``operation`` as an upsert; return the document for upsert_one() and modify()."""
    if operation == "update":
        return queryset.update(upsert=True, **update)
    if operation == "update_one":
        return queryset.update_one(upsert=True, **update)
    if operation == "upsert_one":
        return queryset.upsert_one(**update)
    assert operation == "modify"
    return queryset.modify(upsert=True, new=True, **update)


def account(
    kind: Kind, role: str, class_name: str, collection: str, **extra: Any
) -> type[me.Document]:
    """A model keyed by ``email``, with a counter ``n`` and the generated field of ``role``."""
    attr, _ = field_of(role)
    options: dict[str, Any] = {"primary_key": True} if role == "pk" else {}
    return document(
        class_name,
        collection,
        email=me.StringField(),
        n=me.IntField(),
        **{attr: kind.make(**options)},
        **extra,
    )


@by_operation
@by_role
@by_kind
def test_an_upsert_that_inserts_generates_the_values(
    mongoengine_db: Any, kind: Kind, role: str, operation: str
) -> None:
    Model = account(kind, role, "Inserted", "upsert_inserted")
    attr, key = field_of(role)

    result = upsert(operation, Model.objects(email="a@x"), set__n=1)

    doc = raw_one(mongoengine_db.upsert_inserted)
    assert set(doc) == {"_id", "email", "n", key}
    assert (doc["email"], doc["n"]) == ("a@x", 1)
    kind.check(doc[key])
    if role == "pk":
        assert not is_object_id(doc["_id"])
    returned = result if operation in ("upsert_one", "modify") else Model.objects.get(email="a@x")
    assert kind.stored(getattr(returned, attr)) == doc[key]


@by_operation
@by_role
@by_kind
def test_an_upsert_that_matches_leaves_the_values(
    mongoengine_db: Any, kind: Kind, role: str, operation: str
) -> None:
    Model = account(kind, role, "Matched", "upsert_matched")
    attr, key = field_of(role)
    saved = Model(email="a@x", n=0).save()
    before = raw_one(mongoengine_db.upsert_matched)
    kind.check(before[key])

    result = upsert(operation, Model.objects(email="a@x"), set__n=2)

    assert raw_one(mongoengine_db.upsert_matched) == {**before, "n": 2}
    if operation in ("upsert_one", "modify"):
        assert kind.stored(getattr(result, attr)) == before[key]
    assert kind.stored(getattr(saved, attr)) == before[key]


@by_operation
@by_role
@by_kind
def test_a_filter_equality_on_the_generated_field_wins(
    mongoengine_db: Any, kind: Kind, role: str, operation: str
) -> None:
    Model = account(kind, role, "Filtered", "upsert_filtered")
    attr, key = field_of(role)
    value = kind.sample()

    upsert(operation, Model.objects(email="a@x", **{attr: value}), set__n=1)

    doc = raw_one(mongoengine_db.upsert_filtered)
    assert doc[key] == kind.stored(value)
    assert (doc["email"], doc["n"]) == ("a@x", 1)
    assert set(doc) == {"_id", "email", "n", key}


@pytest.mark.parametrize("form", ["$eq", "$and", "$and of $eq"])
@by_operation
@by_role
@by_kind
def test_a_filter_equality_written_with_an_operator_wins(
    mongoengine_db: Any, kind: Kind, role: str, operation: str, form: str
) -> None:
    # A server gives the document an upsert inserts the filter's equalities written as
    # {"$eq": v} and inside "$and" too (MongoEngine writes "$and" for a field filtered twice).
    Model = account(kind, role, "FilteredOp", "upsert_filtered_op")
    _, key = field_of(role)
    stored = kind.stored(kind.sample())
    condition = {key: {"$eq": stored}} if "$eq" in form else {key: stored}
    raw = {"$and": [condition, {"n": {"$gte": 0}}]} if "$and" in form else condition

    for n in (1, 2):  # the second upsert finds the first one's document
        upsert(operation, Model.objects(__raw__=raw), set__n=n)

    doc = raw_one(mongoengine_db.upsert_filtered_op)
    assert doc[key] == stored
    assert doc["n"] == 2


@by_operation
@by_role
@by_kind
def test_an_upsert_setting_the_generated_field_to_none_is_refused(
    mongoengine_db: Any, kind: Kind, role: str, operation: str
) -> None:
    Model = account(kind, role, "SetNone", "upsert_set_none")
    attr, _ = field_of(role)
    with pytest.raises(InvalidQueryError, match=rf"SetNone\.{attr} .* cannot set it to None"):
        upsert(operation, Model.objects(email="a@x"), set__n=1, **{f"set__{attr}": None})
    assert raw_docs(mongoengine_db.upsert_set_none) == []


#: Conditions on a generated field an upsert fills: (query suffix, value, whether a document
#: stored without the field matches it).
CONDITIONS = {
    "null": ("", None, True),
    "eq_null": ("__raw__", None, True),
    "not_exists": ("__exists", False, True),
    "in_null": ("__in", [None], True),
    "not_exists_true": ("__not__exists", True, True),
}


def _condition(attr: str, db_field: str, name: str) -> dict[str, Any]:
    suffix, value, _ = CONDITIONS[name]
    if suffix == "__raw__":
        return {"__raw__": {"$and": [{db_field: {"$eq": None}}]}}
    return {attr + suffix: value}


@pytest.mark.parametrize("condition", list(CONDITIONS))
@by_operation
@by_role
@by_kind
def test_an_upsert_whose_filter_holds_a_condition_on_a_generated_field_is_refused(
    mongoengine_db: Any, kind: Kind, role: str, operation: str, condition: str
) -> None:
    # Probe BB, review O: the document inserted holds a value made there, which the filter
    # (null, missing, a range...) does not match: each run (or retry) inserted another (a
    # plain IntField asked to be null inserts one and matches it).
    Model = account(kind, role, "AsksMissing", "upsert_asks_missing")
    attr, key = field_of(role)
    query = Model.objects(email="a@x", **_condition(attr, key, condition))
    with pytest.raises(InvalidQueryError, match=rf"AsksMissing\.{attr} is generated: .* condition"):
        upsert(operation, query, set__n=1)
    assert raw_docs(mongoengine_db.upsert_asks_missing) == []
    if role == "plain" and CONDITIONS[condition][2]:
        # A document stored without it (before the field was added) is matched and updated.
        mongoengine_db.upsert_asks_missing.insert_one({"email": "a@x", "n": 0})
        query = Model.objects(email="a@x", **_condition(attr, key, condition))
        upsert(operation, query, set__n=2)
        stored = raw_docs(mongoengine_db.upsert_asks_missing)
        assert [(d["email"], d["n"], key in d) for d in stored] == [("a@x", 2, False)]


def test_an_upsert_whose_filter_holds_a_range_on_a_generated_field_is_refused(
    mongoengine_db: Any,
) -> None:
    class Ranged(me.Document):
        email = me.StringField()
        n = SequenceField()

    for query in (Ranged.objects(email="a@x", n__lt=0), Ranged.objects(email="a@x", n__in=[0])):
        with pytest.raises(InvalidQueryError, match=r"Ranged\.n is generated: .* condition"):
            query.upsert_one(set__email="a@x")
    assert raw_docs(mongoengine_db.ranged) == []


def test_an_upsert_whose_filter_asks_for_a_generated_value_in_an_or_is_refused(
    mongoengine_db: Any,
) -> None:
    Model = account(KINDS[0], "plain", "OrMissing", "upsert_or_missing")
    attr, _ = field_of("plain")
    query = Model.objects(me.Q(**{attr: None}) | me.Q(email="b@x"), email="a@x")
    with pytest.raises(InvalidQueryError, match=rf"OrMissing\.{attr} is generated"):
        query.upsert_one(set__n=1)
    assert raw_docs(mongoengine_db.upsert_or_missing) == []


def test_an_upsert_whose_filter_asks_an_embedded_generated_value_missing_is_refused(
    mongoengine_db: Any,
) -> None:
    class MissingPart(me.EmbeddedDocument):
        n = SequenceField()
        label = me.StringField()

    class Boxed(me.Document):
        name = me.StringField()
        part = me.EmbeddedDocumentField(MissingPart)

    with pytest.raises(InvalidQueryError, match=r"MissingPart\.n is generated: .*part__n"):
        Boxed.objects(name="x", part__n=None).upsert_one(set__part__label="a")
    assert raw_docs(mongoengine_db.boxed) == []


@pytest.mark.parametrize(
    ("role", "operator"),
    [("plain", "set"), ("plain", "set_on_insert"), ("pk", "set_on_insert")],
)
@by_operation
@by_kind
def test_a_value_given_by_the_update_is_not_generated(
    mongoengine_db: Any, kind: Kind, operation: str, role: str, operator: str
) -> None:
    Model = account(kind, role, "Given", "upsert_given")
    attr, key = field_of(role)
    value = kind.sample()

    upsert(operation, Model.objects(email="a@x"), set__n=1, **{f"{operator}__{attr}": value})

    doc = raw_one(mongoengine_db.upsert_given)
    assert doc[key] == kind.stored(value)
    assert set(doc) == {"_id", "email", "n", key}


@by_operation
@by_kind
def test_an_upsert_fills_every_generated_field(
    mongoengine_db: Any, kind: Kind, operation: str
) -> None:
    Model = account(kind, "pk", "Both", "upsert_both", code=kind.make(), ref=kind.make())
    given = kind.sample()
    upsert(operation, Model.objects(email="a@x"), set__n=1, set__ref=given)

    doc = raw_one(mongoengine_db.upsert_both)
    assert set(doc) == {"_id", "email", "n", "code", "ref"}
    kind.check(doc["_id"])
    kind.check(doc["code"])
    assert doc["ref"] == kind.stored(given)
    if kind.name != "sequence":  # a sequence has one counter per field: both start at 1
        assert doc["_id"] != doc["code"]


@by_operation
@by_role
@by_kind
def test_two_upserts_with_different_keys_insert_two_documents(
    mongoengine_db: Any, kind: Kind, role: str, operation: str
) -> None:
    Model = account(kind, role, "Twice", "upsert_twice")
    _, key = field_of(role)

    upsert(operation, Model.objects(email="a@x"), set__n=1)
    upsert(operation, Model.objects(email="b@x"), set__n=2)

    docs = raw_docs(mongoengine_db.upsert_twice)
    assert [(doc["email"], doc["n"]) for doc in docs] == [("a@x", 1), ("b@x", 2)]
    for doc in docs:
        kind.check(doc[key])
    assert docs[0][key] != docs[1][key]


@by_operation
@by_role
def test_a_random_collision_in_an_upsert_is_retried(
    mongoengine_db: Any, role: str, operation: str
) -> None:
    attr, key = field_of(role)
    options: dict[str, Any] = {"primary_key": True} if role == "pk" else {}
    # Both upserts draw index 0 first: the second collides and is retried with a fresh value.
    rng = Indexes(0, 0)
    Model = document(
        "RandomUpsert",
        "upsert_random",
        email=me.StringField(),
        n=me.IntField(),
        **{attr: RandomUniqueField(digits=12, rng=rng, **options)},
    )

    upsert(operation, Model.objects(email="a@x"), set__n=1)
    upsert(operation, Model.objects(email="b@x"), set__n=2)

    docs = {doc["email"]: doc for doc in raw_docs(mongoengine_db.upsert_random)}
    assert sorted(docs) == ["a@x", "b@x"]
    assert docs["a@x"][key] == 10**11
    assert docs["b@x"]["n"] == 2
    assert 10**11 < docs["b@x"][key] < 10**12


#: Operators other than $set/$setOnInsert on the generated field (arithmetic on integers only).
REFUSED = [
    pytest.param(kind, operator, id=f"{kind.name}-{operator}")
    for kind in KINDS
    for operator in (["unset", "inc", "dec", "max"] if kind.numeric else ["unset"])
]


@by_operation
@pytest.mark.parametrize(("kind", "operator"), REFUSED)
def test_another_operator_on_a_generated_field_is_refused_before_writing(
    mongoengine_db: Any, kind: Kind, operation: str, operator: str
) -> None:
    Model = account(kind, "plain", "Refused", "upsert_refused")
    update = {f"{operator}__code": 1}

    with pytest.raises(InvalidQueryError):
        upsert(operation, Model.objects(email="a@x"), **update)
    assert raw_docs(mongoengine_db.upsert_refused) == []
    assert mongoengine_db[COUNTERS].count_documents({}) == 0

    # Also when the filter matches a stored document: refused, the document untouched.
    Model(email="a@x", n=0).save()
    before = raw_one(mongoengine_db.upsert_refused)
    with pytest.raises(InvalidQueryError):
        upsert(operation, Model.objects(email="a@x"), set__n=5, **update)
    assert raw_docs(mongoengine_db.upsert_refused) == [before]


@by_operation
@by_kind
def test_an_upsert_follows_db_alias(
    mongoengine_connect: Connect, kind: Kind, operation: str
) -> None:
    default = mongoengine_connect()
    other = mongoengine_connect("other")
    Model = account(
        kind, "pk", "AliasUpsert", "upsert_alias", meta={"db_alias": "other"}, code=kind.make()
    )

    upsert(operation, Model.objects(email="a@x"), set__n=1)

    doc = raw_one(other.upsert_alias)
    kind.check(doc["_id"])
    kind.check(doc["code"])
    assert "upsert_alias" not in default.list_collection_names()
    assert counters(default) == []
    if kind.name == "sequence":
        assert [c["_id"] for c in counters(other)] == ["upsert_alias.code", "upsert_alias.id"]


@by_kind
def test_an_upsert_follows_switch_db(mongoengine_connect: Connect, kind: Kind) -> None:
    default = mongoengine_connect()
    archive = mongoengine_connect("archive")
    Model = account(kind, "plain", "SwitchedUpsert", "upsert_switched")

    with switch_db(Model, "archive") as Archived:
        Archived.objects(email="a@x").update_one(upsert=True, set__n=1)
    Model.objects(email="b@x").update_one(upsert=True, set__n=2)

    kind.check(raw_one(archive.upsert_switched)["code"])
    assert raw_one(archive.upsert_switched)["email"] == "a@x"
    kind.check(raw_one(default.upsert_switched)["code"])
    assert raw_one(default.upsert_switched)["email"] == "b@x"


@by_operation
@by_kind
def test_an_upsert_through_a_subclass_generates(
    mongoengine_db: Any, kind: Kind, operation: str
) -> None:
    Base = account(
        kind,
        "pk",
        "UpsertBase",
        "upsert_inherited",
        meta={"allow_inheritance": True},
        code=kind.make(),
    )
    Sub = type("UpsertSub", (Base,), {"__module__": __name__, "extra": me.StringField()})

    upsert(operation, Sub.objects(email="a@x"), set__extra="e")

    doc = raw_one(mongoengine_db.upsert_inherited)
    assert doc["_cls"] == "UpsertBase.UpsertSub"
    assert doc["extra"] == "e"
    kind.check(doc["_id"])
    kind.check(doc["code"])
    assert Base.objects.get(email="a@x").extra == "e"


def test_a_sequence_upsert_that_inserts_takes_the_next_values(mongoengine_db: Any) -> None:
    kind = BY_NAME["sequence"]
    Model = account(kind, "pk", "SeqUpsert", "upsert_sequence", code=kind.make())
    Model(email="saved", n=0).save()
    Model.objects(email="a@x").update_one(upsert=True, set__n=1)
    Model.objects(email="saved").update_one(upsert=True, set__n=5)  # matches

    docs = {doc["email"]: doc for doc in raw_docs(mongoengine_db.upsert_sequence)}
    assert (docs["saved"]["_id"], docs["saved"]["code"], docs["saved"]["n"]) == (1, 1, 5)
    assert docs["a@x"]["_id"] > 1
    assert docs["a@x"]["code"] > 1
    assert len(docs) == 2


# -- values the filter or the update gives ------------------------------------------------------


class Numbered(me.Document):
    meta = {"collection": "upsert_numbered"}
    name = me.StringField()
    number = SequenceField()


class NumberedStrict(me.Document):
    meta = {"collection": "upsert_numbered_strict"}
    name = me.StringField()
    number = SequenceField(allow_explicit=False)


@pytest.mark.parametrize(
    "given",
    [
        pytest.param(lambda: Numbered.objects(name="x").upsert_one(set__number=3), id="set"),
        pytest.param(
            lambda: Numbered.objects(name="x").update_one(upsert=True, set_on_insert__number=3),
            id="set_on_insert",
        ),
    ],
)
def test_a_value_an_upsert_gives_moves_the_counter_past_it(
    mongoengine_db: Any, given: Callable[[], Any]
) -> None:
    given()
    for name in "abc":
        Numbered(name=name).save()
    stored = sorted(doc["number"] for doc in mongoengine_db["upsert_numbered"].find())
    assert stored == [3, 4, 5, 6]


def test_an_upsert_giving_a_value_the_field_refuses_writes_nothing(mongoengine_db: Any) -> None:
    with pytest.raises(ExplicitValueError, match="explicit value 5"):
        NumberedStrict.objects(name="x").upsert_one(set__number=5)
    assert list(mongoengine_db["upsert_numbered_strict"].find()) == []


def test_an_upsert_never_writes_into_the_callers_raw_update(mongoengine_db: Any) -> None:
    raw = {"$setOnInsert": {"note": "new"}}
    Numbered.objects(name="a").update(upsert=True, __raw__=raw)
    Numbered.objects(name="b").update(upsert=True, __raw__=raw)
    assert raw == {"$setOnInsert": {"note": "new"}}
    stored = sorted(doc["number"] for doc in mongoengine_db["upsert_numbered"].find())
    assert stored == [1, 2]


def test_a_pipeline_upsert_that_would_lack_a_value_is_refused(mongoengine_db: Any) -> None:
    with pytest.raises(InvalidQueryError, match=r"Numbered.number is generated.*pipeline"):
        Numbered.objects(name="x").update(upsert=True, __raw__=[{"$set": {"name": "y"}}])
    assert list(mongoengine_db["upsert_numbered"].find()) == []


# -- embedded documents an upsert creates from its filter or a path ---------------------------


class Inner(me.EmbeddedDocument):
    tag = me.StringField()
    serial = SequenceField(sequence_name="created_inner")


class Piece(me.EmbeddedDocument):
    label = me.StringField()
    code = RandomUniqueField(digits=9, reserve_in="created_pieces")
    inner = me.EmbeddedDocumentField(Inner)


class Crate(me.Document):
    name = me.StringField()
    piece = me.EmbeddedDocumentField(Piece)


@by_operation
@pytest.mark.parametrize(
    ("how", "query", "update"),
    [
        ("filter", {"piece__label": "a"}, {"set__name": "n"}),
        ("path", {"name": "n"}, {"set__piece__label": "a"}),
        ("path-set-on-insert", {"name": "n"}, {"set_on_insert__piece__label": "a"}),
    ],
    ids=lambda value: value if isinstance(value, str) else "",
)
def test_an_embedded_document_the_upsert_creates_gets_its_values(
    mongoengine_db: Any, operation: str, how: str, query: dict[str, Any], update: dict[str, Any]
) -> None:
    upsert(operation, Crate.objects(**query), **update)
    upsert(operation, Crate.objects(**query), **update)  # matches: values untouched
    (stored,) = raw_docs(Crate._get_collection())
    assert stored["piece"]["label"] == "a"
    assert isinstance(stored["piece"]["code"], int)
    assert 10**8 <= stored["piece"]["code"] < 10**9
    assert "inner" not in stored["piece"]  # not created: nothing to fill there


def test_a_nested_embedded_document_created_by_a_path_gets_its_values(
    mongoengine_db: Any,
) -> None:
    Crate.objects(name="n").update_one(upsert=True, set__piece__inner__tag="t")
    Crate.objects(name="m").update_one(upsert=True, set__piece__inner__tag="u")
    first, second = raw_docs(Crate._get_collection())
    assert (first["piece"]["inner"], second["piece"]["inner"]) == (
        {"tag": "t", "serial": 1},
        {"tag": "u", "serial": 2},
    )
    assert first["piece"]["code"] != second["piece"]["code"]


def test_a_value_the_filter_or_the_update_gives_inside_is_not_generated(
    mongoengine_db: Any,
) -> None:
    Crate.objects(piece__label="a", piece__code=123456789).update_one(upsert=True, set__name="n")
    Crate.objects(name="m").update_one(upsert=True, set__piece__code=234567890)
    assert [d["piece"] for d in raw_docs(Crate._get_collection())] == [
        {"label": "a", "code": 123456789},
        {"code": 234567890},
    ]


def test_an_upsert_matching_a_whole_embedded_document_to_fill_is_refused(
    mongoengine_db: Any,
) -> None:
    """``piece=Piece(label="a")`` matches the stored piece exactly, which, once inserted with its
    generated code, it never matches again: the application's retry would insert another."""
    with pytest.raises(InvalidQueryError, match=r"Piece.code is generated.*piece__<field>"):
        Crate.objects(piece=Piece(label="a")).update_one(upsert=True, set__name="n")
    assert raw_docs(Crate._get_collection()) == []
    # given the value, it is the filter's
    Crate.objects(piece=Piece(label="a", code=123456789)).update_one(upsert=True, set__name="n")
    (stored,) = raw_docs(Crate._get_collection())
    assert stored["piece"] == {"label": "a", "code": 123456789}


def test_a_deeper_filter_path_creates_each_embedded_document_on_the_way(
    mongoengine_db: Any,
) -> None:
    Crate.objects(piece__inner__tag="t").update_one(upsert=True, set__name="n")
    (stored,) = raw_docs(Crate._get_collection())
    assert isinstance(stored["piece"]["code"], int)
    assert stored["piece"]["inner"] == {"tag": "t", "serial": 1}


def test_a_null_in_the_filter_is_refused_when_the_upsert_would_insert(
    mongoengine_db: Any,
) -> None:
    # Probe BB: the value generated for the document inserted made it one the filter never
    # matches: each run inserted another. Matching a stored document, it is an update.
    with pytest.raises(InvalidQueryError, match=r"Piece\.code is generated: .* condition on it"):
        Crate.objects(piece__label="x", piece__code=None).update_one(upsert=True, set__name="n")
    assert raw_docs(Crate._get_collection()) == []
    Crate._get_collection().insert_one({"piece": {"label": "x"}})
    Crate.objects(piece__label="x", piece__code=None).update_one(upsert=True, set__name="n")
    assert [(d["piece"], d["name"]) for d in raw_docs(Crate._get_collection())] == [
        ({"label": "x"}, "n")
    ]


def test_removing_a_generated_value_of_a_created_embedded_document_is_refused(
    mongoengine_db: Any,
) -> None:
    with pytest.raises(InvalidQueryError, match=r"Piece.code is generated.*\$unset"):
        Crate.objects(piece__label="x").update_one(upsert=True, unset__piece__code=1)
    assert raw_docs(Crate._get_collection()) == []


def test_an_embedded_document_written_whole_is_left_to_the_update(mongoengine_db: Any) -> None:
    """``unset__piece`` with a filter on ``piece.label``: no value is set on insert inside the
    field the update removes (a server refuses the two paths together)."""
    Crate.objects(piece__label="x").update_one(upsert=True, unset__piece=1, set__name="n")
    (stored,) = raw_docs(Crate._get_collection())
    assert stored.get("piece", {}).get("code") is None


def test_a_nested_document_inside_a_whole_filter_to_fill_is_refused(mongoengine_db: Any) -> None:
    inner = Inner(tag="t")
    with pytest.raises(InvalidQueryError, match=r"Inner.serial is generated"):
        Crate.objects(piece=Piece(label="x", code=123456789, inner=inner)).update_one(
            upsert=True, set__name="n"
        )
    assert raw_docs(Crate._get_collection()) == []


@pytest.mark.parametrize(
    ("query", "update"),
    [
        ({"piece__inner__serial": 4, "piece__inner__tag": "t"}, {"set__name": "n"}),
        ({"name": "n"}, {"set_on_insert__piece__inner__serial": 4}),
        ({"__raw__": {"piece.inner.serial": 4}}, {"set__name": "n"}),
    ],
    ids=["filter", "set_on_insert", "raw"],
)
def test_a_counter_value_given_inside_is_told_to_the_counter(
    mongoengine_db: Any, query: dict[str, Any], update: dict[str, Any]
) -> None:
    Crate.objects(**query).update_one(upsert=True, **update)
    Crate.objects(name="m").update_one(upsert=True, set__piece__inner__tag="u")
    serials = sorted(d["piece"]["inner"]["serial"] for d in raw_docs(Crate._get_collection()))
    assert serials == [4, 5]
