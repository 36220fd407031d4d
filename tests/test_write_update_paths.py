"""A value an update gives a generated field by a path is told to its field wherever MongoEngine
resolves the path: through a ``GenericEmbeddedDocumentField`` (its choices), to a field only a
subclass of an embedded document's class declares, and to a field of a subclass updated through
its base class's queryset. Before, the path was walked through the
declared classes of ``EmbeddedDocumentField`` only: a counter handed such a number out again, a
taken ``reserve_in`` value was stored twice, ``allow_explicit=False`` and the refusal of
``inc__``/``set__...=None`` were bypassed (found by probe K). Each test checks the stored
documents."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import mongoengine as me
import pytest
from mongoengine.errors import InvalidQueryError, NotUniqueError, ValidationError

from mongoengine_ids import ExplicitValueError, RandomUniqueField, SequenceField


class UpPart(me.EmbeddedDocument):
    n = SequenceField(sequence_name="up_part_n")
    code = RandomUniqueField(digits=6, reserve_in="up_part_codes")
    label = me.StringField()
    meta = {"allow_inheritance": True}


class UpNumberedPart(UpPart):
    m = SequenceField(sequence_name="up_part_m")


class UpLine(me.EmbeddedDocument):
    tenant = me.StringField(required=True)
    no = SequenceField(scope="tenant", sequence_name="up_line_no")


class UpHolder(me.Document):
    name = me.StringField()
    one = me.EmbeddedDocumentField(UpPart)
    gen = me.GenericEmbeddedDocumentField(choices=[UpPart])
    gens = me.ListField(me.GenericEmbeddedDocumentField(choices=[UpPart]))
    parts = me.ListField(me.EmbeddedDocumentField(UpPart))
    line = me.GenericEmbeddedDocumentField(choices=[UpLine])
    meta = {"collection": "up_holders"}


def _stored(name: str) -> dict[str, Any]:
    found = UpHolder._get_collection().find_one({"name": name})
    assert found is not None
    return found


def _next_number(model: Any, place: str, part: me.EmbeddedDocument, name: str) -> int:
    """The number ``part`` gets in its field ``name`` when saved in a new ``model`` at
    ``place`` (saved, then deleted)."""
    probe = model(name="probe", **{place: part}).save()
    stored = model._get_collection().find_one({"_id": probe.pk})
    probe.delete()
    return int(stored[place][name])


def _next_n() -> int:
    return _next_number(UpHolder, "one", UpPart(), "n")


def _next_m() -> int:
    return _next_number(UpHolder, "one", UpNumberedPart(), "m")


@pytest.fixture
def holder(mongoengine_db: Any) -> UpHolder:
    return UpHolder(
        name="h",
        one=UpNumberedPart(),
        gen=UpPart(),
        gens=[UpPart()],
        parts=[UpNumberedPart()],
    ).save()


@pytest.mark.parametrize(
    ("update", "where"),
    [
        ({"set__gen__n": 50}, ("gen", "n")),
        ({"__raw__": {"$set": {"gen.n": 50}}}, ("gen", "n")),
        ({"set__gens__0__n": 50}, ("gens", 0, "n")),
    ],
    ids=["generic", "generic-raw", "list-of-generic"],
)
def test_a_number_given_through_a_generic_embedded_field_moves_the_counter(
    holder: UpHolder, update: dict[str, Any], where: tuple[Any, ...]
) -> None:
    UpHolder.objects(name="h").update_one(**update)
    stored: Any = _stored("h")
    for step in where:
        stored = stored[step]
    assert stored == 50
    assert _next_n() == 51


@pytest.mark.parametrize(
    "update", [{"set__one__m": 70}, {"set__parts__0__m": 70}], ids=["embedded", "in-a-list"]
)
def test_a_number_given_to_a_field_of_an_embedded_subclass_moves_its_counter(
    holder: UpHolder, update: dict[str, Any]
) -> None:
    UpHolder.objects(name="h").update_one(**update)
    stored = _stored("h")
    assert 70 in (stored["one"]["m"], stored["parts"][0]["m"])
    assert _next_m() == 71


@pytest.mark.parametrize("path", ["gen__code", "gens__0__code"], ids=["generic", "list"])
def test_a_taken_reserve_in_value_given_through_a_generic_field_is_refused(
    holder: UpHolder, path: str
) -> None:
    other = UpHolder(name="other", gen=UpPart()).save()
    taken = _stored("h")["one"]["code"]
    before = _stored("other")
    with pytest.raises(NotUniqueError, match=str(taken)):
        UpHolder.objects(id=other.id).update_one(**{f"set__{path}": taken})
    assert _stored("other") == before


@pytest.mark.parametrize(
    "update",
    [
        {"inc__gen__n": 1},
        {"__raw__": {"$inc": {"gen.n": 1}}},
        {"inc__one__m": 1},
        {"set__gen__n": None},
        {"set__one__m": None},
        {"rename__name": "gen.n"},
    ],
    ids=[
        "inc-generic",
        "raw-inc-generic",
        "inc-subclass",
        "none-generic",
        "none-subclass",
        "rename",
    ],
)
def test_an_update_computing_or_nulling_such_a_field_is_refused(
    holder: UpHolder, update: dict[str, Any]
) -> None:
    before = _stored("h")
    with pytest.raises(InvalidQueryError, match="is generated"):
        UpHolder.objects(name="h").update_one(**update)
    assert _stored("h") == before


def test_a_scope_moved_through_a_generic_field_is_told_to_the_new_scopes_counter(
    mongoengine_db: Any,
) -> None:
    UpHolder(name="a", line=UpLine(tenant="A")).save()
    for _ in range(3):
        UpHolder(name="b", line=UpLine(tenant="B")).save()
    moved = UpHolder(name="moved", line=UpLine(tenant="A")).save()  # number 2 in A
    UpHolder.objects(id=moved.id).update_one(set__line__tenant="B", set__line__no=9)
    assert _stored("moved")["line"] == {"_cls": "UpLine", "tenant": "B", "no": 9}
    later = UpHolder(name="later", line=UpLine(tenant="B")).save()
    assert _stored("later")["line"]["no"] == 10
    numbers = [d["line"]["no"] for d in UpHolder._get_collection().find({"line.tenant": "B"})]
    assert sorted(numbers) == [1, 2, 3, 9, 10]
    assert later.line.no == 10


class UpBase(me.Document):
    name = me.StringField()
    meta = {"allow_inheritance": True, "collection": "up_bases"}


class UpSub(UpBase):
    number = SequenceField(sequence_name="up_sub_number")
    strict = SequenceField(allow_explicit=False, sequence_name="up_sub_strict")


#: The test runs through the base class's queryset, and through the subclass's.
_either_queryset = pytest.mark.parametrize(
    "queryset", [lambda: UpBase.objects, lambda: UpSub.objects], ids=["base", "sub"]
)


def _numbers() -> list[int]:
    return sorted(doc["number"] for doc in UpBase._get_collection().find())


@_either_queryset
def test_a_subclass_field_given_through_either_queryset_moves_its_counter(
    mongoengine_db: Any, queryset: Callable[[], Any]
) -> None:
    first = UpSub(name="a").save()
    queryset()(id=first.id).update_one(set__number=5)
    UpSub(name="b").save()
    assert _numbers() == [5, 6]


@_either_queryset
def test_allow_explicit_false_holds_through_the_base_queryset(
    mongoengine_db: Any, queryset: Callable[[], Any]
) -> None:
    first = UpSub(name="a").save()
    before = UpBase._get_collection().find_one({"_id": first.id})
    with pytest.raises(ExplicitValueError):
        queryset()(id=first.id).update_one(set__strict=999)
    assert UpBase._get_collection().find_one({"_id": first.id}) == before


# -- a name two classes declare, one of them generated (found by review) -----------------------


class UpAddress(me.EmbeddedDocument):
    street = me.StringField()
    number = me.StringField()


class UpTicket(me.EmbeddedDocument):
    number = SequenceField(sequence_name="up_ticket_number")


class UpShared(me.Document):
    name = me.StringField()
    where = me.GenericEmbeddedDocumentField(choices=[UpAddress, UpTicket])
    meta = {"collection": "up_shared"}


def _next_ticket() -> int:
    return _next_number(UpShared, "where", UpTicket(), "number")


def test_none_by_a_path_another_class_declares_too_is_the_other_fields(
    mongoengine_db: Any,
) -> None:
    UpShared(name="a", where=UpAddress(street="Main", number="1")).save()
    UpShared.objects(name="a").update_one(set__where__number=None)
    stored = UpShared._get_collection().find_one({"name": "a"})
    assert stored["where"] == {"_cls": "UpAddress", "street": "Main", "number": None}
    assert _next_ticket() == 1  # the counter was told nothing


@pytest.mark.parametrize("given", [2.0, "12B"], ids=["equal-number", "text"])
def test_another_value_by_such_a_path_is_checked_as_the_generated_fields(
    mongoengine_db: Any, given: Any
) -> None:
    """2.0 would match the number 2 a counter hands out (a duplicate); a value the field does
    not take is refused with it (set the embedded document whole to write the other class)."""
    UpShared(name="a", where=UpTicket()).save()  # number 1
    before = UpShared._get_collection().find_one({"name": "a"})
    with pytest.raises(ValidationError):
        UpShared.objects(name="a").update_one(__raw__={"$set": {"where.number": given}})
    assert UpShared._get_collection().find_one({"name": "a"}) == before
    assert _next_ticket() == 2


def test_a_number_the_generated_field_takes_is_told_to_it(mongoengine_db: Any) -> None:
    UpShared(name="a", where=UpTicket()).save()  # number 1
    # (A keyword would be refused by MongoEngine, which reads the path in UpAddress first.)
    UpShared.objects(name="a").update_one(__raw__={"$set": {"where.number": 7}})
    assert UpShared._get_collection().find_one({"name": "a"})["where"]["number"] == 7
    assert _next_ticket() == 8


class UpKeyMixin:
    code = SequenceField(sequence_name="up_mixin_code")


class UpMixedPart(UpKeyMixin, me.EmbeddedDocument):
    pass


class UpMixedDoc(UpKeyMixin, me.Document):
    name = me.StringField()
    part = me.EmbeddedDocumentField(UpMixedPart)
    meta = {"collection": "up_mixed"}


def test_none_by_a_path_to_a_field_the_model_shares_is_refused_as_none(
    mongoengine_db: Any,
) -> None:
    # MongoEngine gives the model and its embedded class the same field object.
    assert UpMixedDoc._fields["code"] is UpMixedPart._fields["code"]
    with pytest.raises(InvalidQueryError, match="setting it to None"):
        UpMixedDoc.objects(name="a").update_one(upsert=True, set__part__code=None)
    assert UpMixedDoc._get_collection().count_documents({}) == 0


def test_a_class_named_in_mongoengine_older_form_is_checked_and_told(holder: UpHolder) -> None:
    """Probe Q: a ``_cls`` in MongoEngine's older form (``"UpPart.UpNumberedPart"``), which it
    loads as that class, was not found: its values were neither checked nor told (a taken
    ``reserve_in`` value stored twice, a counter's number handed out again)."""
    older = "UpPart.UpNumberedPart"
    taken = _stored("h")["one"]["code"]
    before = _stored("h")
    with pytest.raises(NotUniqueError, match=str(taken)):
        UpHolder.objects(name="h").update_one(
            __raw__={"$push": {"parts": {"_cls": older, "code": taken}}}
        )
    assert _stored("h") == before
    UpHolder.objects(name="h").update_one(__raw__={"$push": {"parts": {"_cls": older, "m": 80}}})
    loaded = UpHolder.objects.get(name="h").parts[-1]
    assert (type(loaded), loaded.m) == (UpNumberedPart, 80)
    assert _next_m() == 81


@pytest.mark.parametrize(
    ("path", "hint"),
    [
        ("parts.$[].n", r"__raw__=\{'\$unset': \{'parts\.\$\[\]\.n': ''\}\}"),
        ("parts.$[p].n", r"__raw__=\{'\$unset': \{'parts\.\$\[p\]\.n': ''\}\}"),
        ("parts.$.n", r"__raw__=\{'\$unset': \{'parts\.\$\.n': ''\}\}"),
    ],
)
def test_none_through_a_positional_path_is_refused_with_a_working_hint(
    holder: UpHolder, path: str, hint: str
) -> None:
    """Probe Q: the hint named ``unset__parts__S[]__n``, which is not a keyword, and which
    MongoEngine would send as the literal field name ``parts.S[].n`` (and a keyword built from
    the stored path names no field where a db_field differs from its name: review)."""
    before = _stored("h")
    with pytest.raises(InvalidQueryError, match=f"remove the value instead: {hint}"):
        UpHolder.objects(name="h").update_one(__raw__={"$set": {path: None}})
    assert _stored("h") == before
