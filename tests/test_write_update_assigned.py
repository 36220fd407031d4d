"""Values assigned inside the embedded documents an update writes (``set__``,
``set_on_insert__``, ``push__``..., upsert or not) are told to their fields as a new document's
are: a ``reserve_in`` value taken is refused before anything is written, a counter moves past
a number given; a value the matched document already holds there is its own. Each test checks
the stored documents (found by review Y)."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import mongoengine as me
import pymongo.errors
import pytest
from _support import real_server
from mongoengine.errors import InvalidQueryError, NotUniqueError, OperationError, ValidationError

from mongoengine_ids import ExplicitValueError, RandomUniqueField, SequenceField


class UaPart(me.EmbeddedDocument):
    code = RandomUniqueField(digits=6, reserve_in="ua_part_codes")
    n = SequenceField(sequence_name="ua_part_n")


class UaBox(me.Document):
    name = me.StringField()
    part = me.EmbeddedDocumentField(UaPart)
    parts = me.ListField(me.EmbeddedDocumentField(UaPart))
    meta = {"collection": "ua_boxes"}


def _stored() -> dict[str, Any]:
    return {doc["name"]: doc for doc in UaBox._get_collection().find()}


@pytest.fixture
def first(mongoengine_db: Any) -> UaBox:
    return UaBox(name="first", part=UaPart()).save()


@pytest.mark.parametrize(
    "how", ["upsert-set", "upsert-set-on-insert", "update-push", "update-set-list", "modify"]
)
def test_a_taken_reserve_in_value_given_inside_an_update_is_refused(first: UaBox, how: str) -> None:
    UaBox(name="other").save()
    before = _stored()
    taken = UaPart(code=first.part.code)
    updates = {
        "upsert-set": lambda: UaBox.objects(name="up").update_one(upsert=True, set__part=taken),
        "upsert-set-on-insert": lambda: UaBox.objects(name="up").update_one(
            upsert=True, set_on_insert__part=taken
        ),
        "update-push": lambda: UaBox.objects(name="other").update_one(push__parts=taken),
        "update-set-list": lambda: UaBox.objects(name="other").update_one(
            set__parts=[UaPart(), taken]
        ),
        "modify": lambda: UaBox.objects(name="up").modify(upsert=True, new=True, set__part=taken),
    }
    with pytest.raises(NotUniqueError):
        updates[how]()
    assert _stored() == before


def test_a_number_given_inside_an_upsert_moves_the_counter_past_it(first: UaBox) -> None:
    UaBox.objects(name="up").update_one(upsert=True, set__part=UaPart(n=5))
    later = [UaBox(name=f"later {i}", part=UaPart()).save().part.n for i in range(2)]
    assert later == [6, 7]
    numbers = sorted(doc["part"]["n"] for doc in _stored().values())
    assert numbers == [1, 5, 6, 7]


def test_a_documents_own_embedded_document_set_again_is_its_own(first: UaBox) -> None:
    listed = UaBox(name="listed", parts=[UaPart()]).save()
    before = _stored()
    UaBox.objects(id=first.id).update_one(set__part=first.part)
    UaBox.objects(id=listed.id).update_one(set__parts=[*listed.parts, UaPart()])
    stored = _stored()
    assert stored["first"]["part"] == before["first"]["part"]
    kept, added = stored["listed"]["parts"]
    assert kept == before["listed"]["parts"][0]
    assert added["code"] not in (kept["code"], before["first"]["part"]["code"])


def test_a_documents_own_value_set_at_a_second_place_is_refused(first: UaBox) -> None:
    before = _stored()
    with pytest.raises(NotUniqueError):  # it would hold the value twice
        UaBox.objects(id=first.id).update_one(set__parts=[first.part])
    assert _stored() == before


def test_a_value_given_twice_in_one_update_is_refused(first: UaBox) -> None:
    UaBox(name="other").save()
    before = _stored()
    with pytest.raises(NotUniqueError):
        UaBox.objects(name="other").update_one(
            set__parts=[UaPart(code=123456), UaPart(code=123456)]
        )
    assert _stored() == before
    # Nothing was written: the value is free.
    UaBox.objects(name="other").update_one(set__part=UaPart(code=123456))
    assert _stored()["other"]["part"]["code"] == 123456


# -- a value an update (no upsert) gives a generated field itself ------------------------------


class UaTicket(me.Document):
    number = SequenceField(sequence_name="ua_ticket_number")
    code = RandomUniqueField(digits=6, reserve_in="ua_ticket_codes")
    name = me.StringField()
    meta = {"collection": "ua_tickets"}


def _tickets() -> dict[str, Any]:
    return {doc["name"]: doc for doc in UaTicket._get_collection().find()}


def test_a_number_an_update_gives_moves_the_counter_past_it(mongoengine_db: Any) -> None:
    first = UaTicket(name="first").save()
    UaTicket.objects(id=first.id).update_one(set__number=5)
    later = [UaTicket(name=f"later {i}").save().number for i in range(2)]
    assert later == [6, 7]
    assert sorted(doc["number"] for doc in _tickets().values()) == [5, 6, 7]


def test_a_taken_reserve_in_value_an_update_gives_is_refused(mongoengine_db: Any) -> None:
    first, second = UaTicket(name="first").save(), UaTicket(name="second").save()
    before = _tickets()
    with pytest.raises(NotUniqueError):
        UaTicket.objects(id=second.id).update_one(set__code=first.code)
    assert _tickets() == before
    UaTicket.objects(id=first.id).update_one(set__code=first.code)  # its own: kept
    UaTicket.objects(id=first.id).update(set__name="first again", set__code=first.code)
    assert _tickets()["first again"]["code"] == first.code


def test_an_update_of_several_documents_giving_one_value_is_refused(mongoengine_db: Any) -> None:
    UaTicket(name="a").save()
    UaTicket(name="b").save()
    before = _tickets()
    with pytest.raises(me.errors.InvalidQueryError, match="code"):
        UaTicket.objects(name__in=["a", "b"]).update(set__code=123456)
    assert _tickets() == before
    # A counter's number may be given to several (as save() lets you): the counter moves past.
    UaTicket.objects(name__in=["a", "b"]).update(set__number=9)
    assert sorted(doc["number"] for doc in _tickets().values()) == [9, 9]
    assert UaTicket(name="c").save().number == 10


@pytest.mark.parametrize("upsert", [False, True])
def test_renaming_another_field_into_a_generated_one_is_refused(
    mongoengine_db: Any, upsert: bool
) -> None:
    UaTicket(name="a").save()
    before = _tickets()
    with pytest.raises(me.errors.InvalidQueryError, match=r"UaTicket\.number is generated"):
        UaTicket.objects(name="a").update_one(rename__name="number", upsert=upsert)
    assert _tickets() == before


@pytest.mark.parametrize("upsert", [False, True])
@pytest.mark.parametrize(
    "update",
    [
        {"inc__number": 1},
        {"max__number": 50},
        {"mul__number": 2},
        {"__raw__": {"$inc": {"number": 1}}},
        {"__raw__": {"$min": {"code": 1}}},
    ],
    ids=["inc", "max", "mul", "raw-inc", "raw-min"],
)
def test_an_operator_computing_a_generated_value_is_refused(
    mongoengine_db: Any, update: dict[str, Any], upsert: bool
) -> None:
    """Review AS: inc__/max__ of a generated field stored a number the counter later handed
    out again; refused now, as for an upsert, by every update method."""
    doc = UaTicket(name="a").save()
    before = _tickets()
    for write in (
        lambda: UaTicket.objects(name="a").update_one(upsert=upsert, **update),
        lambda: UaTicket.objects(name="a").modify(upsert=upsert, **update),
        lambda: doc.update(**update),
    ):
        with pytest.raises(me.errors.InvalidQueryError, match=r"UaTicket\.(number|code) is gen"):
            write()
        assert _tickets() == before
    assert UaTicket(name="b").save().number == 2


# -- review Z ---------------------------------------------------------------------------------


class UzPart(me.EmbeddedDocument):
    code = RandomUniqueField(digits=6, reserve_in="uz_part_codes")
    label = me.StringField()


class UzBox(me.Document):
    name = me.StringField()
    kind = me.StringField()
    part = me.EmbeddedDocumentField(UzPart)
    parts = me.ListField(me.EmbeddedDocumentField(UzPart))
    grid = me.ListField(me.ListField(me.EmbeddedDocumentField(UzPart)))
    by_key = me.MapField(me.EmbeddedDocumentField(UzPart))
    meta = {"collection": "uz_boxes"}


def _uz() -> list[dict[str, Any]]:
    return sorted(UzBox._get_collection().find(), key=lambda doc: str(doc["_id"]))


def test_an_update_that_matches_nothing_gives_its_values_back(mongoengine_db: Any) -> None:
    assert UzBox.objects(name="nobody").update_one(push__parts=UzPart(code=123456)) == 0
    assert UzBox.objects(name="nobody").update(set__part=UzPart(code=234567), full_result=True)
    assert UzBox.objects(name="nobody").modify(set__part=UzPart(code=345678)) is None
    assert list(mongoengine_db.uz_part_codes.find()) == []
    for code in (123456, 234567, 345678):
        UzBox(name=str(code), parts=[UzPart(code=code)]).save()
    assert sorted(p["code"] for doc in _uz() for p in doc["parts"]) == [123456, 234567, 345678]


@pytest.mark.parametrize("how", ["grid", "by_key", "parts"])
def test_a_documents_own_embedded_documents_written_back_are_its_own(
    mongoengine_db: Any, how: str
) -> None:
    UzBox(
        name="b",
        parts=[UzPart(label="x"), UzPart(label="y")],
        grid=[[UzPart()]],
        by_key={"k": UzPart()},
    ).save()
    box = UzBox.objects.get(name="b")
    before = _uz()
    if how == "grid":
        UzBox.objects(name="b").update_one(set__grid=box.grid)
    elif how == "by_key":
        UzBox.objects(name="b").update_one(set__by_key=box.by_key)
    else:
        UzBox.objects(name="b").update_one(set__parts=box.parts)
    assert _uz() == before


def test_an_item_written_back_at_a_positional_place_is_refused(mongoengine_db: Any) -> None:
    """A positional ``$`` place is not known beforehand: a value the list holds may be another
    item's, which the update would store twice; a field that tracks its values refuses it (a
    false refusal where the place is the item's own, rather than a possible duplicate)."""
    UzBox(name="b", parts=[UzPart(label="x"), UzPart(label="y")]).save()
    box = UzBox.objects.get(name="b")
    before = _uz()
    with pytest.raises(NotUniqueError, match=str(box.parts[1].code)):
        UzBox.objects(name="b", parts__label="y").update_one(set__parts__S=box.parts[1])
    assert _uz() == before


@pytest.mark.parametrize("how", ["update", "upsert", "modify"])
def test_one_embedded_object_written_by_a_second_update_is_refused(
    mongoengine_db: Any, how: str
) -> None:
    UzBox(name="a").save()
    UzBox(name="b").save()
    part = UzPart(code=777777)
    UzBox.objects(name="a").update_one(set__part=part)
    before = _uz()
    second = {
        "update": lambda: UzBox.objects(name="b").update_one(set__part=part),
        "upsert": lambda: UzBox.objects(name="c").update_one(upsert=True, set__part=part),
        "modify": lambda: UzBox.objects(name="d").modify(upsert=True, new=True, set__part=part),
    }
    with pytest.raises(NotUniqueError):
        second[how]()
    assert _uz() == before


def test_a_unique_embedded_value_given_to_an_update_of_several_is_refused(
    mongoengine_db: Any,
) -> None:
    held = UzBox(kind="k", part=UzPart()).save()
    UzBox(kind="k").save()
    before = _uz()
    for code in (held.part.code, 424242):
        with pytest.raises(me.errors.InvalidQueryError, match="several"):
            UzBox.objects(kind="k").update(set__part=UzPart(code=code))
    assert _uz() == before


def test_an_update_retried_after_a_lost_reply_finds_its_own_reservation() -> None:
    """The reservation of a value an update gives, made by an attempt whose reply was lost, is
    the application's retry's own (the same update: collection and filter), as for upserts."""
    import pymongo.errors

    from mongoengine_ids.testing import connected_threadsafe

    armed: list[bool] = []

    def hook(collection: str, method: str, call: Any) -> Any:
        result = call()
        if collection == "ua_ticket_codes" and method.startswith("insert") and armed:
            armed.clear()
            raise pymongo.errors.AutoReconnect("injected: the reply is lost")
        return result

    with connected_threadsafe(hook=hook) as connect:
        db = connect()
        ticket = UaTicket(name="t").save()
        reservations = db.ua_ticket_codes.count_documents({})
        armed.append(True)
        with pytest.raises(pymongo.errors.AutoReconnect):
            UaTicket.objects(id=ticket.id).update_one(set__code=654321)
        assert UaTicket.objects(id=ticket.id).update_one(set__code=654321) == 1
        assert db.ua_tickets.find_one({"_id": ticket.id})["code"] == 654321
        assert db.ua_ticket_codes.count_documents({}) == reservations + 1
        other = UaTicket(name="other")
        other.code = 654321
        with pytest.raises(NotUniqueError):
            other.save()


# -- review AA ----------------------------------------------------------------------------------


class AaScoped(me.Document):
    tenant = me.StringField()
    number = SequenceField(sequence_name="aa_scoped", scope="tenant")
    meta = {"collection": "aa_scoped"}


def test_a_scoped_number_an_update_gives_moves_that_scopes_counter(mongoengine_db: Any) -> None:
    x = AaScoped(tenant="x").save()
    AaScoped(tenant="y").save()
    AaScoped.objects(id=x.id).update_one(set__number=20)
    assert [AaScoped(tenant=t).save().number for t in ("x", "y")] == [21, 2]
    AaScoped.objects(id=x.id).update_one(set__tenant="y", set__number=30)  # y's number now
    assert AaScoped(tenant="y").save().number == 31


def _one_lost(
    *, request: bool = False, collections: tuple[str, ...] = ("uz_boxes",)
) -> tuple[list[bool], Any]:
    """A hook losing, once armed (``armed.append(True)``), the next ``update_one`` on
    ``collections``: its reply (applied), or its ``request`` (never sent)."""
    armed: list[bool] = []

    def hook(collection: str, called: str, call: Any) -> Any:
        lose = bool(armed) and called == "update_one" and collection in collections
        if lose:
            armed.clear()
            if request:
                raise pymongo.errors.AutoReconnect("injected: the request is lost")
        result = call()
        if lose:
            raise pymongo.errors.AutoReconnect("injected: the reply is lost")
        return result

    return armed, hook


def test_an_embedded_object_of_an_update_whose_reply_was_lost_is_refused_elsewhere() -> None:
    import pymongo.errors

    from mongoengine_ids.testing import connected_threadsafe

    armed, hook = _one_lost()
    with connected_threadsafe(hook=hook) as connect:
        connect()
        b, c = UzBox(name="b").save(), UzBox(name="c").save()
        part = UzPart(code=555555)
        armed.append(True)
        with pytest.raises(pymongo.errors.AutoReconnect):
            UzBox.objects(id=b.id).update_one(set__part=part)
        with pytest.raises(NotUniqueError):
            UzBox.objects(id=c.id).update_one(set__part=part)
        UzBox.objects(id=b.id).update_one(set__part=part)  # the retry: its own
        assert [doc.get("part") for doc in _uz()] == [{"code": 555555}, None]


def test_the_retry_of_a_conditional_update_that_landed_keeps_its_reservation() -> None:
    import pymongo.errors

    from mongoengine_ids.testing import connected_threadsafe

    armed, hook = _one_lost()
    with connected_threadsafe(hook=hook) as connect:
        connect()
        box = UzBox(name="open").save()
        part = UzPart(code=565656)

        def close() -> Any:
            return UzBox.objects(id=box.id, name="open").update_one(
                set__part=part, set__name="closed"
            )

        armed.append(True)
        with pytest.raises(pymongo.errors.AutoReconnect):
            close()
        # Landed: the filter matches nothing now, and the value is held by a document it does
        # not match, which the retry cannot tell from another's: refused, as an upsert's is.
        with pytest.raises(NotUniqueError, match="earlier attempt"):
            close()
        with pytest.raises(NotUniqueError):
            UzBox(name="other", part=UzPart(code=565656)).save()
        assert [doc.get("part") for doc in _uz()] == [{"code": 565656}]


class AaStrict(me.Document):
    number = SequenceField(sequence_name="aa_strict", allow_explicit=False)
    name = me.StringField()
    meta = {"collection": "aa_strict"}


def test_a_number_given_to_an_update_of_several_is_refused_by_allow_explicit(
    mongoengine_db: Any,
) -> None:
    from mongoengine_ids.sequence.field import ExplicitValueError

    AaStrict(name="a").save()
    AaStrict(name="b").save()
    with pytest.raises(ExplicitValueError):
        AaStrict.objects.update(set__number=1)
    assert sorted(doc["number"] for doc in AaStrict._get_collection().find()) == [1, 2]


def test_a_value_an_update_does_not_write_is_given_back(mongoengine_db: Any) -> None:
    UaTicket(name="t").save()
    UaTicket.objects(name="t").modify(remove=True, set__code=424242)
    # Not written: free (a reservation left would refuse it).
    UaTicket(name="u", code=424242).save()
    assert _tickets()["u"]["code"] == 424242


def test_a_value_given_on_insert_to_an_upsert_that_matched_stays_reserved(
    mongoengine_db: Any,
) -> None:
    """The upsert's reply does not say whether it inserted: the document it inserted may have
    been deleted since by another writer, whose value is never handed out again."""
    UzBox(name="a").save()
    UzBox.objects(name="a").update_one(upsert=True, set_on_insert__part=UzPart(code=246810))
    with pytest.raises(NotUniqueError, match="246810"):
        UzBox(name="z", part=UzPart(code=246810)).save()
    assert [doc.get("part") for doc in _uz()] == [None]


@pytest.mark.parametrize("upsert", [False, True])
def test_a_value_given_by_a_path_inside_an_embedded_document_is_told(
    mongoengine_db: Any, upsert: bool
) -> None:
    a = UaBox(name="a", part=UaPart()).save()
    b = UaBox(name="b", part=UaPart(), parts=[UaPart()]).save()
    before = _stored()
    name = "new" if upsert else "b"
    with pytest.raises(NotUniqueError):
        UaBox.objects(name=name).update_one(upsert=upsert, set__part__code=a.part.code)
    with pytest.raises(NotUniqueError):
        UaBox.objects(name="b", parts__n=b.parts[0].n).update_one(set__parts__S__code=a.part.code)
    assert _stored() == before
    UaBox.objects(id=b.id).update_one(set__part__n=40)
    assert UaBox(name="c", part=UaPart()).save().part.n == 41


def test_values_given_in_a_raw_update_are_told(mongoengine_db: Any) -> None:
    first = UaTicket(name="first").save()
    UaTicket.objects(id=first.id).update_one(__raw__={"$set": {"number": 2}})
    assert UaTicket(name="second").save().number == 3
    second = UaTicket.objects.get(name="second")
    before = _tickets()
    with pytest.raises(NotUniqueError):
        UaTicket.objects(id=second.id).update_one(__raw__={"$set": {"code": first.code}})
    with pytest.raises(me.errors.InvalidQueryError, match=r"UaTicket\.code is generated"):
        UaTicket.objects(id=second.id).update_one(__raw__={"$rename": {"name": "code"}})
    assert _tickets() == before


# -- review AB ----------------------------------------------------------------------------------


def test_an_upsert_that_inserted_beyond_its_filter_keeps_its_set_on_insert_values(
    mongoengine_db: Any,
) -> None:
    UzBox.objects(name="new").update_one(
        upsert=True, set__name="renamed", set_on_insert__part=UzPart(code=123456)
    )
    with pytest.raises(NotUniqueError):
        UzBox.objects(name="other").update_one(upsert=True, set__part=UzPart(code=123456))
    assert [doc.get("part") for doc in _uz()] == [{"code": 123456}]


def test_new_embedded_values_of_an_update_that_writes_nothing_are_given_back(
    mongoengine_db: Any,
) -> None:
    UzBox(name="b").save()
    part = UzPart()
    assert UzBox.objects(name="nobody").update_one(set__part=part) == 0
    assert part.code is None
    other = UzPart()
    UzBox.objects(name="b").update_one(upsert=True, set__kind="k", set_on_insert__part=other)
    assert other.code is None  # matched: $setOnInsert wrote nothing
    UzBox.objects(name="b").update_one(set__part=part)
    assert [doc.get("part") for doc in _uz()] == [{"code": part.code}]


@pytest.mark.parametrize("upsert", [False, True])
def test_the_retry_of_an_update_matching_another_document_is_refused_its_value(
    upsert: bool,
) -> None:
    from mongoengine_ids.testing import connected_threadsafe

    armed, hook = _one_lost()
    with connected_threadsafe(hook=hook) as connect:
        connect()
        if not upsert:
            UzBox(kind="pending").save()
            UzBox(kind="pending").save()
        part = UzPart(code=123456)

        def update() -> Any:
            return UzBox.objects(kind="pending", name=None).update_one(
                upsert=upsert, set__name="done", set__part=part
            )

        armed.append(True)
        with pytest.raises(pymongo.errors.AutoReconnect):
            update()
        with pytest.raises(NotUniqueError, match="earlier attempt"):
            update()
        assert [doc.get("part") for doc in _uz()].count({"code": 123456}) == 1


def test_another_update_with_the_same_filter_leaves_the_retry_its_reservation() -> None:
    from mongoengine_ids.testing import connected_threadsafe

    armed, hook = _one_lost(request=True)

    with connected_threadsafe(hook=hook) as connect:
        connect()
        UzBox(name="a").save()
        part = UzPart(code=123456)
        armed.append(True)
        with pytest.raises(pymongo.errors.AutoReconnect):
            UzBox.objects(name="a").update_one(set__part=part)
        UzBox.objects(name="a").update_one(set__parts=[UzPart()])  # another request
        UzBox.objects(name="a").update_one(set__part=part)  # the retry
        assert [doc.get("part") for doc in _uz()] == [{"code": 123456}]
        assert len(_uz()[0]["parts"]) == 1


def test_a_scope_set_without_set_or_in_raw_moves_that_scopes_counter(mongoengine_db: Any) -> None:
    t = AaScoped(tenant="a").save()
    AaScoped.objects(id=t.id).update_one(tenant="b", number=2)
    u = AaScoped(tenant="a").save()
    AaScoped.objects(id=u.id).update_one(__raw__={"$set": {"tenant": "c", "number": 1}})
    assert [AaScoped(tenant=x).save().number for x in ("b", "c")] == [3, 2]


def test_a_value_given_at_one_place_held_at_another_of_the_document_is_refused(
    mongoengine_db: Any,
) -> None:
    box = UzBox(name="b", parts=[UzPart(), UzPart()]).save()
    before = _uz()
    with pytest.raises(NotUniqueError):
        UzBox.objects(id=box.id).update_one(set__parts__1__code=box.parts[0].code)
    with pytest.raises(NotUniqueError):
        UzBox.objects(id=box.id).update_one(push__parts=UzPart(code=box.parts[1].code))
    UzBox.objects(id=box.id).update_one(set__parts__1__code=box.parts[1].code)  # its own
    assert _uz() == before


def test_modify_in_order_looks_at_the_document_it_modifies(mongoengine_db: Any) -> None:
    a = UzBox(name="a", part=UzPart()).save()
    UzBox(name="b").save()
    before = _uz()
    with pytest.raises(NotUniqueError):
        UzBox.objects(name__in=["a", "b"]).order_by("-name").modify(set__part__code=a.part.code)
    assert _uz() == before


# -- review AC ----------------------------------------------------------------------------------


class SqPart(me.EmbeddedDocument):
    n = SequenceField(sequence_name="sq_part_n")


class SqBox(me.Document):
    kind = me.StringField()
    part = me.EmbeddedDocumentField(SqPart)
    meta = {"collection": "uz_boxes"}  # the collection the lost-reply hook watches


@pytest.mark.parametrize("how", ["push", "set-sequence"])
def test_the_retry_of_an_update_landing_elsewhere_never_stores_a_value_twice(how: str) -> None:
    from mongoengine_ids.testing import connected_threadsafe

    armed, hook = _one_lost()
    with connected_threadsafe(hook=hook) as connect:
        connect()
        model: Any = UzBox if how == "push" else SqBox
        model(kind="x").save()
        model(kind="x").save()
        part = UzPart(code=123456)
        new_part = SqPart()

        def update() -> Any:
            if how == "push":
                return UzBox.objects(kind="x").update_one(set__kind="y", push__parts=part)
            return SqBox.objects(kind="x").update_one(set__kind="y", set__part=new_part)

        armed.append(True)
        with pytest.raises(pymongo.errors.AutoReconnect):
            update()
        with pytest.raises(NotUniqueError, match="earlier attempt"):
            update()
        assert sorted(doc["kind"] for doc in model._get_collection().find()) == ["x", "y"]


def test_update_one_in_order_looks_at_the_document_it_updates(mongoengine_db: Any) -> None:
    UzBox(name="a", kind="1").save()
    b = UzBox(name="b", kind="2", part=UzPart()).save()
    before = _uz()
    with pytest.raises(NotUniqueError):  # update_one writes a (no sort), which lacks it
        UzBox.objects(kind__in=["1", "2"]).order_by("-kind").update_one(
            set__part=UzPart(code=b.part.code)
        )
    assert _uz() == before


@pytest.mark.parametrize("how", ["set", "push", "upsert"])
def test_a_retry_after_a_lost_request_writes_the_values_its_first_attempt_made(how: str) -> None:
    from mongoengine_ids.testing import connected_threadsafe

    armed, hook = _one_lost(request=True)

    with connected_threadsafe(hook=hook) as connect:
        connect()
        box = UzBox(name="b").save()
        part = UzPart()
        updates = {
            "set": lambda: UzBox.objects(id=box.id).update_one(set__part=part),
            "push": lambda: UzBox.objects(id=box.id).update_one(push__parts=part),
            "upsert": lambda: UzBox.objects(name="new").update_one(upsert=True, set__part=part),
        }
        armed.append(True)
        with pytest.raises(pymongo.errors.AutoReconnect):
            updates[how]()
        made = part.code
        assert updates[how]() == 1
        stored = [p["code"] for doc in _uz() for p in [doc.get("part"), *doc.get("parts", [])] if p]
        assert stored == [made]


# -- review AD ----------------------------------------------------------------------------------


def test_a_retry_failing_before_it_writes_keeps_the_first_attempts_values_its_own() -> None:
    from mongoengine_ids.testing import connected_threadsafe

    lost: list[str] = []

    def hook(collection: str, called: str, call: Any) -> Any:
        if lost and collection == "uz_boxes" and called == lost[0]:
            lost.pop(0)
            raise pymongo.errors.AutoReconnect("injected: the request is lost")
        return call()

    with connected_threadsafe(hook=hook) as connect:
        connect()
        box = UzBox(name="b").save()
        part = UzPart()

        def update() -> Any:
            return UzBox.objects(id=box.id).update_one(set__part=part)

        lost.append("update_one")
        with pytest.raises(pymongo.errors.AutoReconnect):
            update()
        lost.append("find_one")  # the retry's own look-up is lost: nothing written again
        with pytest.raises(pymongo.errors.AutoReconnect):
            update()
        assert update() == 1
        assert [doc.get("part") for doc in _uz()] == [{"code": part.code}]


def test_the_retry_of_a_push_that_landed_is_refused_not_pushed_again() -> None:
    from mongoengine_ids.testing import connected_threadsafe

    armed, hook = _one_lost()
    with connected_threadsafe(hook=hook) as connect:
        connect()
        box = UzBox(name="c").save()
        part = UzPart()
        armed.append(True)
        with pytest.raises(pymongo.errors.AutoReconnect):
            UzBox.objects(id=box.id).update_one(push__parts=part)
        with pytest.raises(NotUniqueError, match="earlier attempt"):
            UzBox.objects(id=box.id).update_one(push__parts=part)
        assert [p["code"] for p in _uz()[0]["parts"]] == [part.code]


def test_a_repeated_upsert_giving_a_set_on_insert_value_is_its_own(mongoengine_db: Any) -> None:
    def upsert() -> Any:
        return UzBox.objects(name="u").update_one(
            upsert=True, set_on_insert__part=UzPart(code=123456)
        )

    assert upsert() == 1
    assert upsert() == 1  # matched: the document holds the value already
    assert [doc.get("part") for doc in _uz()] == [{"code": 123456}]


def test_a_retry_with_a_fresh_time_stamp_after_a_landed_attempt_writes() -> None:
    """A retry loop that makes its time stamp again, after a lost reply whose attempt landed:
    the value is the matched document's own, written again."""
    import datetime

    from mongoengine_ids.testing import connected_threadsafe

    armed, hook = _one_lost()
    with connected_threadsafe(hook=hook) as connect:
        connect()
        box = UzBox(name="b").save()
        part = UzPart(code=135790)

        def update() -> Any:
            stamp = datetime.datetime.now(datetime.timezone.utc).isoformat()
            return UzBox.objects(id=box.id).update_one(set__part=part, set__kind=stamp)

        armed.append(True)
        with pytest.raises(pymongo.errors.AutoReconnect):
            update()
        assert update() == 1
        assert _uz()[0]["part"] == {"code": 135790}


@pytest.mark.parametrize("how", ["embedded", "own-field"])
def test_a_retry_with_a_fresh_time_stamp_after_a_lost_request_is_the_same_update(how: str) -> None:
    """Only the values given to generated fields (and the embedded objects) tell attempts
    apart: a retry loop that makes its time stamp again is the same update, and finds its
    reservation."""
    import datetime

    from mongoengine_ids.testing import connected_threadsafe

    armed, hook = _one_lost(request=True, collections=("uz_boxes", "ua_tickets"))

    with connected_threadsafe(hook=hook) as connect:
        connect()
        box, ticket = UzBox(name="b").save(), UaTicket(name="t").save()
        part = UzPart(code=135791)

        def update() -> Any:
            stamp = datetime.datetime.now(datetime.timezone.utc).isoformat()
            if how == "embedded":
                return UzBox.objects(id=box.id).update_one(set__part=part, set__kind=stamp)
            return UaTicket.objects(id=ticket.id).update_one(set__code=246813, set__name=stamp)

        armed.append(True)
        with pytest.raises(pymongo.errors.AutoReconnect):
            update()
        assert update() == 1
        if how == "embedded":
            assert _uz()[0]["part"] == {"code": 135791}
        else:
            assert _tickets()[UaTicket.objects.get(id=ticket.id).name]["code"] == 246813


@pytest.mark.parametrize("upsert", [False, True])
def test_an_update_counted_to_one_document_writes_one_when_another_arrives(upsert: bool) -> None:
    """An ``update()`` of new embedded documents is allowed when its filter matches one
    document (counted first); one inserted between the count and the update must not get the
    same value (found by review AB)."""
    from mongoengine_ids.testing import connected_threadsafe

    armed: list[bool] = []

    def hook(collection: str, called: str, call: Any) -> Any:
        if armed and collection == "uz_boxes" and called.startswith("update"):
            armed.clear()
            UzBox._get_collection().insert_one({"kind": "k", "name": "arrived"})
        return call()

    with connected_threadsafe(hook=hook) as connect:
        connect()
        UzBox(kind="k", name="first").save()
        armed.append(True)
        assert UzBox.objects(kind="k").update(upsert=upsert, set__part=UzPart()) == 1
        stored = _uz()
    assert sorted(doc["name"] for doc in stored) == ["arrived", "first"]
    assert len([doc["part"]["code"] for doc in stored if "part" in doc]) == 1


@pytest.mark.parametrize(
    "raw",
    [
        {"$set": {"part": {"code": "TAKEN"}}},
        {"$set": {"parts": [{"label": "x"}, {"code": "TAKEN"}]}},
        {"$set": {"parts.0": {"code": "TAKEN"}}},
        {"$set": {"grid": [[{"code": "TAKEN"}]]}},
        {"$set": {"by_key": {"k": {"code": "TAKEN"}}}},
        {"$push": {"parts": {"code": "TAKEN"}}},
        {"$push": {"parts": {"$each": [{"code": 434343}, {"code": "TAKEN"}]}}},
        {"$addToSet": {"parts": {"code": "TAKEN"}}},
    ],
    ids=["set", "set-list", "set-item", "set-grid", "set-map", "push", "push-each", "add-to-set"],
)
def test_a_taken_value_inside_a_raw_embedded_document_is_refused(
    mongoengine_db: Any, raw: dict[str, Any]
) -> None:
    """``__raw__`` embedded documents given whole, as stored dicts, have their values told to
    the fields as embedded objects do (found by review AB): a ``reserve_in`` value taken is
    refused before anything is written."""
    held = UzBox(name="held", part=UzPart()).save()
    UzBox(name="b", parts=[UzPart(label="y")]).save()
    taken = held.part.code
    raw = _replace(raw, "TAKEN", taken)
    before = _uz()
    with pytest.raises(NotUniqueError, match=str(taken)):
        UzBox.objects(name="b").update_one(__raw__=raw)
    assert _uz() == before


def _replace(value: Any, old: Any, new: Any) -> Any:
    if isinstance(value, dict):
        return {key: _replace(item, old, new) for key, item in value.items()}
    if isinstance(value, list):
        return [_replace(item, old, new) for item in value]
    return new if value == old else value


def test_a_raw_embedded_documents_values_are_reserved_and_its_own_kept(
    mongoengine_db: Any,
) -> None:
    box = UzBox(name="a", part=UzPart()).save()
    UzBox(name="b").save()
    own = box.part.code
    UzBox.objects(name="a").update_one(__raw__={"$set": {"part": {"code": own, "label": "l"}}})
    UzBox.objects(name="a").update_one(__raw__={"$push": {"parts": {"code": 565656}}})
    with pytest.raises(NotUniqueError, match="565656"):
        UzBox(name="c", part=UzPart(code=565656)).save()
    stored = {doc["name"]: doc for doc in _uz()}
    assert stored["a"]["part"] == {"code": own, "label": "l"}
    assert stored["a"]["parts"] == [{"code": 565656}]
    assert set(stored) == {"a", "b"}


def test_a_number_inside_a_raw_embedded_document_moves_the_counter_past_it(
    first: UaBox,
) -> None:
    UaBox.objects(name="first").update_one(__raw__={"$push": {"parts": {"n": 40}}})
    later = UaBox(name="later", part=UaPart()).save()
    assert later.part.n == 41
    numbers = sorted(
        part["n"] for doc in _stored().values() for part in [doc["part"], *doc["parts"]]
    )
    assert numbers == [1, 40, 41]


def test_the_retry_of_a_raw_update_whose_reply_was_lost_finds_its_reservation() -> None:
    from mongoengine_ids.testing import connected_threadsafe

    armed, hook = _one_lost()
    with connected_threadsafe(hook=hook) as connect:
        connect()
        UzBox(name="b").save()
        raw = {"$set": {"part": {"code": 575757}}}
        armed.append(True)
        with pytest.raises(pymongo.errors.AutoReconnect):
            UzBox.objects(name="b").update_one(__raw__=raw)
        UzBox.objects(name="b").update_one(__raw__=raw)  # the application's retry
        with pytest.raises(NotUniqueError):
            UzBox(name="c", part=UzPart(code=575757)).save()
        assert [(doc["name"], doc.get("part")) for doc in _uz()] == [("b", {"code": 575757})]


@pytest.mark.parametrize("full_result", [False, True])
def test_an_unacknowledged_update_keeps_its_values(full_result: bool) -> None:
    """With ``w=0`` the result of an update says nothing of what it wrote (MongoEngine returns
    None, or pymongo's unacknowledged result): the values it wrote are kept, never given back as
    if it matched nothing (found by review AF: the reservation of a stored value was deleted)."""
    from pymongo.results import UpdateResult

    from mongoengine_ids.testing import connected_threadsafe

    def unacknowledged(collection: str, called: str, call: Any) -> Any:
        result = call()
        if collection == "uz_boxes" and called.startswith("update"):
            return UpdateResult(None, acknowledged=False)  # as pymongo returns for w=0
        return result

    with connected_threadsafe(hook=unacknowledged) as connect:
        connect()
        box = UzBox(name="b").save()
        part = UzPart()
        result = UzBox.objects(id=box.id).update(
            push__parts=part, write_concern={"w": 0}, full_result=full_result
        )
        if full_result:
            assert result.acknowledged is False
        else:
            assert result is None  # MongoEngine's count of an unacknowledged update
        assert part.code is not None
        with pytest.raises(NotUniqueError, match=str(part.code)):
            UzBox(name="c", part=UzPart(code=part.code)).save()
        assert [(doc["name"], doc["parts"]) for doc in _uz()] == [("b", [{"code": part.code}])]


class UrLine(me.EmbeddedDocument):
    shop = me.StringField()
    n = SequenceField(scope="shop", sequence_name="ur_line_n")


class UrPart(me.EmbeddedDocument):
    label = me.StringField()
    meta = {"allow_inheritance": True}


class UrSubPart(UrPart):
    code = RandomUniqueField(digits=6, reserve_in="ur_codes")


class UrBox(me.Document):
    name = me.StringField()
    lines = me.ListField(me.EmbeddedDocumentField(UrLine))
    part = me.EmbeddedDocumentField(UrPart)
    anything = me.GenericEmbeddedDocumentField()
    meta = {"collection": "ur_boxes"}


def _ur() -> list[dict[str, Any]]:
    return sorted(UrBox._get_collection().find(), key=lambda doc: str(doc["_id"]))


def test_a_raw_embedded_document_of_a_scoped_counter_is_told_to_its_scope(
    mongoengine_db: Any,
) -> None:
    """The scope is read from the dict as well (review AH: it was refused, the scope lost)."""
    UrBox(name="o").save()
    UrBox.objects(name="o").update_one(__raw__={"$push": {"lines": {"shop": "B", "n": 40}}})
    UrBox.objects(name="o").update_one(push__lines=UrLine(shop="B"))
    assert [line["n"] for line in _ur()[0]["lines"]] == [40, 41]


@pytest.mark.parametrize(
    "raw",
    [
        {"$set": {"part": {"_cls": "CLASS", "code": "TAKEN"}}},
        {"$set": {"anything": {"_cls": "CLASS", "code": "TAKEN"}}},
    ],
    ids=["subclass", "generic"],
)
def test_a_raw_embedded_document_of_a_subclass_is_told_to_its_fields(
    mongoengine_db: Any, raw: dict[str, Any]
) -> None:
    """``_cls`` names the class whose fields the dict holds (review AH)."""
    held = UrBox(name="held", part=UrSubPart()).save()
    UrBox(name="b").save()
    before = _ur()
    raw = _replace(_replace(raw, "TAKEN", held.part.code), "CLASS", UrSubPart._class_name)
    with pytest.raises(NotUniqueError, match=str(held.part.code)):
        UrBox.objects(name="b").update_one(__raw__=raw)
    assert _ur() == before


@pytest.mark.parametrize("how", ["set", "push", "push_all"])
def test_an_embedded_document_given_as_a_dict_is_told_to_its_fields(
    mongoengine_db: Any, how: str
) -> None:
    """``set__part={"code": 5}``, as MongoEngine stores it (review AH: not looked at)."""
    held = UzBox(name="held", part=UzPart()).save()
    UzBox(name="b").save()
    taken = {"code": held.part.code}
    before = _uz()
    given = {
        "set": {"set__part": taken},
        "push": {"push__parts": taken},
        "push_all": {"push_all__parts": [{"code": 898989}, taken]},
    }[how]
    with pytest.raises(NotUniqueError, match=str(held.part.code)):
        UzBox.objects(name="b").update_one(**given)
    assert _uz() == before


@pytest.mark.parametrize("how", ["index", "raw-index", "positional", "raw-positional"])
def test_an_item_written_whole_holds_only_its_own_value(mongoengine_db: Any, how: str) -> None:
    """A whole embedded document written to one list item: a value another item of the list
    holds is not its own (review AH: it was, and the document held it twice)."""
    UzBox(name="b", parts=[UzPart(label="x"), UzPart(label="y")]).save()
    before = _uz()
    other = before[0]["parts"][1]["code"]
    box = UzBox.objects(name="b", parts__label="x")
    given = {
        "index": {"set__parts__0": UzPart(code=other)},
        "raw-index": {"__raw__": {"$set": {"parts.0": {"code": other}}}},
        "positional": {"set__parts__S": UzPart(code=other)},
        "raw-positional": {"__raw__": {"$set": {"parts.$": {"code": other}}}},
    }[how]
    with pytest.raises(NotUniqueError, match=str(other)):
        box.update_one(**given)
    assert _uz() == before


def test_an_item_written_whole_at_its_place_keeps_its_own_value(mongoengine_db: Any) -> None:
    UzBox(name="b", parts=[UzPart(label="x"), UzPart(label="y")]).save()
    before = _uz()
    own = before[0]["parts"][1]["code"]
    UzBox.objects(name="b").update_one(set__parts__1=UzPart(code=own, label="y"))
    UzBox.objects(name="b").update_one(__raw__={"$set": {"parts.1": {"code": own, "label": "y"}}})
    assert _uz() == before


# -- review AM ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "how", ["copy", "same object", "map", "raw", "modify", "modify upsert", "doc.update"]
)
def test_a_documents_own_value_written_twice_by_an_update_is_refused(
    mongoengine_db: Any, how: str
) -> None:
    """The matched document holds the value once; an update writing it at two places is
    refused, as ``save()`` refuses it (each place was taken as the document's own)."""
    import copy

    box = UzBox(name="b", parts=[UzPart(label="0"), UzPart(label="1")]).save()
    box = UzBox.objects.get(id=box.id)
    first = box.parts[0]
    twice = [first, first if how == "same object" else copy.deepcopy(first)]
    query = UzBox.objects(id=box.id)
    writes = {
        "copy": lambda: query.update_one(set__parts=twice),
        "same object": lambda: query.update_one(set__parts=twice),
        "map": lambda: query.update_one(set__by_key={"a": twice[0], "b": twice[1]}),
        "raw": lambda: query.update_one(
            __raw__={"$set": {"parts": [{"code": first.code}, {"code": first.code}]}}
        ),
        "modify": lambda: query.modify(set__parts=twice),
        "modify upsert": lambda: query.modify(upsert=True, new=True, set__parts=twice),
        "doc.update": lambda: box.update(set__parts=twice),
    }
    before = _uz()
    with pytest.raises(NotUniqueError, match=str(first.code)):
        writes[how]()
    assert _uz() == before


class AmLine(me.EmbeddedDocument):
    kind = me.StringField()
    no = SequenceField(sequence_name="am_line", scope="kind")


class AmInvoice(me.Document):
    tenant = me.StringField()
    number = SequenceField(sequence_name="am_invoice", scope="tenant")
    lines = me.ListField(me.EmbeddedDocumentField(AmLine))
    x = me.IntField()
    meta = {"collection": "am_invoices"}


def _numbers() -> list[tuple[str, int]]:
    stored = AmInvoice._get_collection().find()
    return sorted((doc["tenant"], doc["number"]) for doc in stored)


def _line_numbers() -> list[tuple[str, int]]:
    stored = AmInvoice._get_collection().find()
    return sorted((line["kind"], line["no"]) for doc in stored for line in doc.get("lines", []))


def test_a_document_saved_into_another_scope_tells_that_scope_its_number(
    mongoengine_db: Any,
) -> None:
    """Review AM: the number kept after the scope changed was handed out again by the new
    scope's counter. save() tells it, as a number you assign there."""
    for x in range(3):
        AmInvoice(tenant="A", x=x, lines=[AmLine(kind="a"), AmLine(kind="a")]).save()
    AmInvoice(tenant="B", x=9, lines=[AmLine(kind="b")]).save()
    moved = AmInvoice.objects.get(x=2)
    moved.tenant = "B"
    moved.lines[1].kind = "b"
    moved.save()
    for x in range(10, 13):
        AmInvoice(tenant="B", x=x, lines=[AmLine(kind="b")]).save()
    assert _numbers() == [("A", 1), ("A", 2), ("B", 1), ("B", 3), ("B", 4), ("B", 5), ("B", 6)]
    lines = _line_numbers()
    assert len(lines) == len(set(lines)) == 10
    assert [no for kind, no in lines if kind == "b"] == [1, 6, 7, 8, 9]


@pytest.mark.parametrize(
    "how",
    [
        "set",
        "modify",
        "raw",
        "several",
        "embedded",
        "embedded raw",
        "upsert",
        pytest.param("all items", marks=real_server),  # mongomock cannot apply $[]
    ],
)
def test_an_update_moving_documents_to_another_scope_tells_it_their_numbers(
    mongoengine_db: Any, how: str
) -> None:
    """Review AM: the update kept the numbers in the new scope, whose counter handed them out
    again. The numbers the matched documents keep are told to it (one read)."""
    for x in range(3):
        AmInvoice(tenant="A", x=x, lines=[AmLine(kind="a"), AmLine(kind="a")]).save()
    AmInvoice(tenant="B", x=9, lines=[AmLine(kind="b")]).save()
    writes = {
        "set": lambda: AmInvoice.objects(x=2).update_one(set__tenant="B"),
        "modify": lambda: AmInvoice.objects(x=2).modify(set__tenant="B"),
        "raw": lambda: AmInvoice.objects(x=2).update_one(__raw__={"$set": {"tenant": "B"}}),
        "several": lambda: AmInvoice.objects(x__gte=1, tenant="A").update(set__tenant="B"),
        "embedded": lambda: AmInvoice.objects(x=1).update_one(set__lines__0__kind="b"),
        "embedded raw": lambda: AmInvoice.objects(x=1).update_one(
            __raw__={"$set": {"lines.0.kind": "b"}}
        ),
        "upsert": lambda: AmInvoice.objects(x=2).update_one(upsert=True, set__tenant="B"),
        "all items": lambda: AmInvoice.objects(x=2).update_one(
            __raw__={"$set": {"lines.$[].kind": "b"}}
        ),
    }
    writes[how]()
    for x in range(10, 13):
        AmInvoice(tenant="B", x=x, lines=[AmLine(kind="b")]).save()
    numbers, lines = _numbers(), _line_numbers()
    assert len(numbers) == len(set(numbers)) == 7
    assert len(lines) == len(set(lines)) == 10
    if how in ("set", "modify", "raw"):
        assert numbers == [("A", 1), ("A", 2), ("B", 1), ("B", 3), ("B", 4), ("B", 5), ("B", 6)]
    if how == "upsert":  # the number made for its insert, not written, is a gap
        assert numbers == [("A", 1), ("A", 2), ("B", 1), ("B", 3), ("B", 5), ("B", 6), ("B", 7)]
    if how == "several":
        assert numbers == [("A", 1), ("B", 1), ("B", 2), ("B", 3), ("B", 4), ("B", 5), ("B", 6)]
    if how in ("embedded", "embedded raw"):  # a:3 moved: b:3
        assert [no for kind, no in lines if kind == "b"] == [1, 3, 4, 5, 6]
    if how == "all items":
        assert [no for kind, no in lines if kind == "b"] == [1, 5, 6, 7, 8, 9]


@pytest.mark.parametrize("how", ["unset", "rename", "positional", "inc"])
def test_an_update_changing_a_scope_otherwise_is_refused(mongoengine_db: Any, how: str) -> None:
    """The scope's new value is not known: refused before anything is written."""
    AmInvoice(tenant="A", x=1, lines=[AmLine(kind="a")]).save()
    writes = {
        "unset": lambda: AmInvoice.objects(x=1).update_one(unset__tenant=True),
        "rename": lambda: AmInvoice.objects(x=1).update_one(rename__tenant="other"),
        "positional": lambda: AmInvoice.objects(x=1, lines__kind="a").update_one(
            set__lines__S__kind="b"
        ),
        "inc": lambda: AmInvoice.objects(x=1).update_one(__raw__={"$max": {"tenant": "Z"}}),
    }
    before = list(AmInvoice._get_collection().find())
    with pytest.raises(me.errors.InvalidQueryError, match="is numbered per"):
        writes[how]()
    assert list(AmInvoice._get_collection().find()) == before


def test_an_update_giving_the_number_with_the_new_scope_tells_it_there(
    mongoengine_db: Any,
) -> None:
    """The number it already held in its old scope is new to the scope the update sets."""
    numbers = _moved_then_numbered(
        AmInvoice, lambda: AmInvoice.objects(x=2).update_one(set__tenant="B", set__number=3)
    )
    assert numbers == [("A", 1), ("A", 2), ("B", 1), ("B", 3), ("B", 4), ("B", 5), ("B", 6)]


def _moved_then_numbered(model: Any, move: Any) -> list[tuple[str, int]]:
    """Numbers 1..3 in tenant A and 1 in B (x = 0..2, 9), ``move()``, three more saved in B
    (x = 10..12): the stored (tenant, number) pairs, sorted."""
    for x in range(3):
        model(tenant="A", x=x).save()
    model(tenant="B", x=9).save()
    move()
    for x in range(10, 13):
        model(tenant="B", x=x).save()
    return sorted((d["tenant"], d["number"]) for d in model._get_collection().find())


@pytest.mark.parametrize("where", ["document", "embedded"])
def test_a_loaded_documents_scope_cleared_is_refused_by_save(
    mongoengine_db: Any, where: str
) -> None:
    """Probe AH: the number, kept, was taken for the stored one (a None scope was read as not
    known): never told, and two documents held number 1 with no scope. Refused, as for a new
    document and as an update's set__tenant=None is; nothing written."""
    for tenant in ("A", "B"):
        AmInvoice(tenant=tenant, x=1, lines=[AmLine(kind=tenant)]).save()
    before = list(AmInvoice._get_collection().find())
    for invoice in AmInvoice.objects:
        if where == "document":
            invoice.tenant = None
        else:
            invoice.lines[0].kind = None
        with pytest.raises(
            ValidationError, match=r"is numbered per '(tenant|kind)', which is None"
        ):
            invoice.save()
    assert list(AmInvoice._get_collection().find()) == before


def test_a_scope_stored_as_none_is_not_refused(mongoengine_db: Any) -> None:
    """Saving other changes of a document whose stored scope is absent (written before the
    scope was) keeps the number as stored."""
    AmInvoice._get_collection().insert_one({"number": 7, "x": 1})
    legacy = AmInvoice.objects.get(x=1)
    legacy.x = 10
    legacy.save()
    assert list(AmInvoice._get_collection().find({}, {"_id": 0})) == [{"number": 7, "x": 10}]


def test_a_scope_a_projection_left_out_is_not_taken_for_none(mongoengine_db: Any) -> None:
    """Review C: a scope left out by only()/exclude() was read as None. Left out of embedded
    documents MongoEngine writes whole, the save is refused saying so (the list was written
    without it: its numbers moved to no scope); set since, it is known."""
    AmInvoice(tenant="A", x=1, lines=[AmLine(kind="a")]).save()
    before = list(AmInvoice._get_collection().find())
    lines_out = AmInvoice.objects.exclude("lines.kind").get(x=1)
    lines_out.lines.append(AmLine(kind="c"))
    with pytest.raises(OperationError, match=r"AmLine.kind at lines\.0\.kind .* was not loaded"):
        lines_out.save()
    assert list(AmInvoice._get_collection().find()) == before
    moved = AmInvoice.objects.only("x", "number").get(x=1)
    moved.tenant = "B"
    moved.save()
    assert AmInvoice(tenant="B", x=2).save().number == 2  # B's counter was told of number 1


def test_updates_that_keep_the_scope_are_not_refused(mongoengine_db: Any) -> None:
    """$setOnInsert writes a new document; a $set of the value the filter fixes moves none."""
    AmInvoice(tenant="A", x=1).save()
    AmInvoice.objects(x=5).update_one(upsert=True, set_on_insert__tenant="B", set__x=5)
    AmInvoice.objects(x=1, tenant="A").update_one(upsert=True, set__tenant="A")
    AmInvoice.objects(x=6, tenant="C").update_one(upsert=True, set__tenant="C")
    assert _numbers() == [("A", 1), ("B", 1), ("C", 1)]


class AmStrict(me.Document):
    tenant = me.StringField()
    number = SequenceField(sequence_name="am_strict", scope="tenant", allow_explicit=False)
    meta = {"collection": "am_strict"}


@pytest.mark.parametrize("how", ["save", "update"])
def test_a_move_to_another_scope_is_refused_by_allow_explicit(
    mongoengine_db: Any, how: str
) -> None:
    AmStrict(tenant="A").save()
    moved = AmStrict(tenant="A").save()
    before = list(AmStrict._get_collection().find())
    moved.tenant = "B"
    with pytest.raises(ExplicitValueError, match="moved to another 'tenant'"):
        moved.save() if how == "save" else AmStrict.objects(id=moved.id).update_one(set__tenant="B")
    assert list(AmStrict._get_collection().find()) == before


class AmCleared(me.Document):
    n = SequenceField(sequence_name="am_cleared")
    part = me.EmbeddedDocumentField(AmLine)
    x = me.IntField()
    meta = {"collection": "am_cleared"}


@pytest.mark.parametrize(
    ("keyword", "several", "suggested"),
    [
        ("set__n", False, r"__raw__=\{'\$unset': \{'n': ''\}\}"),
        ("set__n", True, r"__raw__=\{'\$unset': \{'n': ''\}\}"),
        ("set__part__no", False, r"__raw__=\{'\$unset': \{'part\.no': ''\}\}"),
    ],
)
def test_setting_a_generated_field_to_none_is_refused(
    mongoengine_db: Any, keyword: str, several: bool, suggested: str
) -> None:
    """Review AM: null was stored (a value for a unique index) and counter values were made
    that no document got; for several documents the error blamed a shared value."""
    for x in range(2):
        AmCleared(x=x, part=AmLine(kind="k")).save()
    before = list(AmCleared._get_collection().find())
    query = AmCleared.objects if several else AmCleared.objects(x=0)
    with pytest.raises(me.errors.InvalidQueryError, match=f"setting it to None.*{suggested}"):
        query.update(**{keyword: None}) if several else query.update_one(**{keyword: None})
    assert list(AmCleared._get_collection().find()) == before
    assert AmCleared(x=9).save().n == 3  # no number spent
    AmCleared.objects(x=0).update_one(unset__n=True)
    assert "n" not in AmCleared._get_collection().find_one({"x": 0})


# -- review AO: the scope moves, checked again --------------------------------------------------


class AoBase(me.Document):
    tenant = me.StringField()
    x = me.IntField()
    meta = {"collection": "ao_base", "allow_inheritance": True}


class AoSub(AoBase):
    number = SequenceField(sequence_name="ao_sub", scope="tenant")


def test_an_update_through_a_base_class_tells_a_subclass_documents_move(
    mongoengine_db: Any,
) -> None:
    numbers = _moved_then_numbered(AoSub, lambda: AoBase.objects(x=2).update_one(set__tenant="B"))
    assert numbers == [("A", 1), ("A", 2), ("B", 1), ("B", 3), ("B", 4), ("B", 5), ("B", 6)]


@pytest.mark.parametrize("load", ["only", "exclude"])
def test_a_document_loaded_without_its_number_cannot_move_to_another_scope(
    mongoengine_db: Any, load: str
) -> None:
    AmInvoice(tenant="A", x=1).save()
    loaded = (
        AmInvoice.objects.only("tenant", "x")
        if load == "only"
        else AmInvoice.objects.exclude("number")
    ).get(x=1)
    before = list(AmInvoice._get_collection().find())
    loaded.tenant = "B"
    with pytest.raises(me.errors.OperationError, match="was not loaded"):
        loaded.save()
    assert list(AmInvoice._get_collection().find()) == before


class AoLine(me.EmbeddedDocument):
    kind = me.StringField()
    no = SequenceField(sequence_name="ao_line", scope="kind", allow_explicit=False)


class AoDay(me.Document):
    day = me.DateTimeField()
    n = SequenceField(sequence_name="ao_day", scope="day", allow_explicit=False)
    part = me.EmbeddedDocumentField(AoLine)
    lines = me.ListField(me.EmbeddedDocumentField(AoLine))
    meta = {"collection": "ao_days"}


def test_what_moves_nothing_is_not_refused_by_allow_explicit(mongoengine_db: Any) -> None:
    """Review AO: the same number in two scopes counted as held twice, a datetime sent with
    microseconds (kept to the millisecond) as a move, and a number given back by a path as a
    new one of no scope: each refused by allow_explicit=False."""
    import datetime

    now = datetime.datetime(2024, 1, 1, 12, 0, 0, 123456)
    doc = AoDay(day=now, part=AoLine(kind="a"), lines=[AoLine(kind="a"), AoLine(kind="b")]).save()
    doc = AoDay.objects.get(id=doc.id)
    query = AoDay.objects(id=doc.id)
    query.update_one(set__lines=list(doc.lines))
    query.update_one(set__lines=list(reversed(doc.lines)))
    query.update_one(set__day=now)
    query.update_one(set__part__no=doc.part.no)
    query.update_one(__raw__={"$set": {"part.no": doc.part.no}})
    doc = AoDay.objects.get(id=doc.id)
    doc.day = now
    doc.lines = list(reversed(doc.lines))
    doc.save()
    stored = AoDay._get_collection().find_one()
    assert [(line["kind"], line["no"]) for line in stored["lines"]] == [("a", 2), ("b", 1)]
    assert (stored["n"], stored["part"]["no"]) == (1, 1)


def test_a_datetime_scope_is_one_counter_per_stored_value(mongoengine_db: Any) -> None:
    """Review AO: each microsecond named its own counter, while the server keeps
    milliseconds: two documents of one stored day got the same number."""
    import datetime

    first = AoDay(day=datetime.datetime(2024, 1, 1, 12, 0, 0, 123456)).save()
    second = AoDay(day=datetime.datetime(2024, 1, 1, 12, 0, 0, 123999)).save()
    assert (first.n, second.n) == (1, 2)


def test_a_move_changing_the_number_otherwise_is_refused(mongoengine_db: Any) -> None:
    """Review AO: the number read before the update was told, not the one it stored."""
    AmInvoice(tenant="A", x=1).save()
    before = list(AmInvoice._get_collection().find())
    with pytest.raises(me.errors.InvalidQueryError, match=r"\$inc of 'number'"):
        AmInvoice.objects(x=1).update_one(set__tenant="B", inc__number=1)
    assert list(AmInvoice._get_collection().find()) == before


# -- review AP ----------------------------------------------------------------------------------


def test_an_update_of_several_documents_moving_no_scope_reads_nothing_more() -> None:
    """Review AP: every update() not by key counted its documents first, to read moves."""
    from mongoengine_ids.testing import connected_threadsafe

    calls: list[str] = []

    def hook(collection: str, method: str, call: Any) -> Any:
        calls.append(f"{collection}.{method}")
        return call()

    with connected_threadsafe(hook=hook) as connect:
        connect()
        AmInvoice(tenant="A", x=1).save()
        AmInvoice(tenant="A", x=2).save()
        calls.clear()
        AmInvoice.objects(tenant="A").update(set__x=5)
        assert calls == ["am_invoices.update_many"]
        AmInvoice._collection = None


def test_a_scope_set_to_none_or_moving_one_number_twice_is_refused(mongoengine_db: Any) -> None:
    """Review AP: null was stored as the scope, numbers kept; two documents holding one number
    in their scopes were moved into one, which then held it twice."""
    AmInvoice(tenant="A", x=1).save()
    AmInvoice(tenant="C", x=2).save()  # number 1 of C
    before = list(AmInvoice._get_collection().find())
    with pytest.raises(me.errors.InvalidQueryError, match="is numbered per"):
        AmInvoice.objects(x=1).update_one(set__tenant=None)
    with pytest.raises(NotUniqueError, match="the same number 1 into one 'tenant'"):
        AmInvoice.objects(x__in=[1, 2]).update(set__tenant="B")
    assert list(AmInvoice._get_collection().find()) == before


def test_the_admin_api_names_a_datetime_scopes_counter_as_the_field_does(
    mongoengine_db: Any,
) -> None:
    import datetime

    from mongoengine_ids.sequence import set_next_value

    day = datetime.datetime(2024, 1, 1, 12, 0, 0, 250999, tzinfo=datetime.timezone.utc)
    AoDay(day=day).save()
    set_next_value(AoDay._get_db(), "ao_day.n", 100, scope=day)
    assert AoDay(day=day.replace(microsecond=250000, tzinfo=None)).save().n == 100


def test_a_number_given_by_a_path_needs_its_scope_beside_it(mongoengine_db: Any) -> None:
    """A number given by a path into a scoped embedded document is told to its scope's counter:
    without the scope beside it, the update is refused with what to do (it said "which is None
    ... an upsert"); with it, the counter moves past the number."""
    doc = AmInvoice(tenant="A", lines=[AmLine(kind="a")]).save()
    before = list(AmInvoice._get_collection().find())
    for given in (
        {"set__lines__0__no": 70},
        {"__raw__": {"$set": {"lines.0.no": 70}}},
    ):
        with pytest.raises(me.errors.InvalidQueryError, match=r"set__lines__0__kind=\.\.\."):
            AmInvoice.objects(id=doc.id).update_one(**given)
    with pytest.raises(me.errors.InvalidQueryError, match=r"'lines\.\$\.no'.*set__lines__S__kind"):
        AmInvoice.objects(id=doc.id, lines__kind="a").update_one(set__lines__S__no=70)
    # No keyword reaches a filtered place (probe AA: it named set__lines__S[e]__kind).
    for place in ("$[e]", "$[]"):
        remedy = re.escape(f"('lines.{place}.kind' in the same $set)")
        with pytest.raises(me.errors.InvalidQueryError, match=remedy):
            # (refused before it is sent: no array_filters needed, which 0.27 lacks)
            AmInvoice.objects(id=doc.id).update_one(__raw__={"$set": {f"lines.{place}.no": 70}})
    assert list(AmInvoice._get_collection().find()) == before
    AmInvoice.objects(id=doc.id).update_one(set__lines__0__no=70, set__lines__0__kind="a")
    other = AmInvoice(tenant="B", lines=[AmLine(kind="a")]).save()
    assert other.lines[0].no == 71
    stored = [[line["no"] for line in d["lines"]] for d in AmInvoice._get_collection().find()]
    assert stored == [[70], [71]]


# -- a scope that is an embedded document (review D) -------------------------------------------


class VisitPlace(me.EmbeddedDocument):
    city = me.StringField()
    zip = me.StringField()


class Visit(me.Document):
    place = me.EmbeddedDocumentField(VisitPlace)
    number = SequenceField(sequence_name="visit", scope="place")
    label = me.StringField()
    meta = {"collection": "visits"}


def _visits() -> list[tuple[str, int]]:
    return sorted((d["place"]["city"], d["number"]) for d in Visit._get_collection().find())


@pytest.mark.parametrize("number", [None, 3])
def test_a_number_in_a_scope_loaded_in_part_is_refused(mongoengine_db: Any, number: Any) -> None:
    """only("place.city") loads part of the scope: its number came from (or was told to) a
    counter named by that part, and one number was stored twice in the stored scope."""
    for _ in range(2):
        Visit(place=VisitPlace(city="Oslo", zip="0150")).save()
    before = list(Visit._get_collection().find())
    partial = Visit.objects.only("place.city", "number").first()
    partial.number = number
    with pytest.raises(OperationError, match=r"Visit.place was not loaded whole"):
        partial.save()
    assert list(Visit._get_collection().find()) == before
    assert Visit(place=VisitPlace(city="Oslo", zip="0150")).save().number == 3


def test_a_field_changed_inside_a_scope_moves_the_number_told(mongoengine_db: Any) -> None:
    """A change by a path inside the scope moves the number: save() tells the new scope's
    counter; an update, which does not give the new scope whole, is refused (either stored
    number 1 twice in the new scope)."""
    Visit(place=VisitPlace(city="A")).save()
    moved = Visit(place=VisitPlace(city="A")).save()  # number 2 of A
    Visit(place=VisitPlace(city="B")).save()  # number 1 of B
    moved.place.city = "B"
    moved.save()
    assert Visit(place=VisitPlace(city="B")).save().number == 3
    before = list(Visit._get_collection().find())
    for update in (
        {"set__place__city": "C"},
        {"__raw__": {"$set": {"place.city": "C"}}},
        {"__raw__": [{"$set": {"place.city": "C"}}]},
    ):
        with pytest.raises(InvalidQueryError, match=r"numbered per"):
            Visit.objects(id=moved.id).update_one(**update)
    assert list(Visit._get_collection().find()) == before
    assert _visits() == [("A", 1), ("B", 1), ("B", 2), ("B", 3)]


@pytest.mark.parametrize(
    "load",
    [
        lambda: Visit.objects.exclude("place.zip"),  # review E: a part, by exclusion
        lambda: Visit.objects.only("place.city", "number"),
    ],
    ids=["exclude a part", "only a part"],
)
def test_a_scope_loaded_in_part_by_any_projection_is_refused(
    mongoengine_db: Any, load: Callable[[], Any]
) -> None:
    Visit(place=VisitPlace(city="Oslo", zip="0150")).save()
    partial = load().first()
    partial.number = 7
    with pytest.raises(OperationError, match=r"Visit.place was not loaded whole"):
        partial.save()
    assert Visit(place=VisitPlace(city="Oslo", zip="0150")).save().number == 2


@pytest.mark.parametrize(
    "load_again",
    [
        lambda visit: visit.reload(),
        lambda visit: visit.reload("place", "number"),
        lambda visit: visit.reload(2),  # max_depth, as MongoEngine reads it (review F)
        lambda visit: visit.modify(set__label="m"),
        lambda visit: (setattr(visit, "place", VisitPlace(city="A", zip="1")), visit.save()),
    ],
    ids=["reload()", "reload(place)", "reload(2)", "modify()", "set whole and saved"],
)
def test_a_scope_loaded_again_is_loaded(mongoengine_db: Any, load_again: Any) -> None:
    """Review E: the refusal advises reload(), after which it refused all the same."""
    Visit(place=VisitPlace(city="A", zip="1")).save()
    visit = Visit.objects.only("label", "number").first()
    load_again(visit)
    visit.number = None
    visit.save()
    assert _visits() == [("A", 2)]


class ScopedLine(me.EmbeddedDocument):
    place = me.EmbeddedDocumentField(VisitPlace)
    no = SequenceField(sequence_name="scoped_line", scope="place")
    note = me.StringField()


class LinedOrder(me.Document):
    lines = me.ListField(me.EmbeddedDocumentField(ScopedLine))
    meta = {"collection": "lined_orders"}


def test_a_change_inside_an_embedded_documents_scope_is_told(mongoengine_db: Any) -> None:
    """Review E: lines[1].place.city changed and saved kept number 2 untold to B's counter,
    which then handed out 2 again."""
    order = LinedOrder(
        lines=[ScopedLine(place=VisitPlace(city="A")), ScopedLine(place=VisitPlace(city="A"))]
    ).save()
    LinedOrder(lines=[ScopedLine(place=VisitPlace(city="B"))]).save()
    loaded = LinedOrder.objects.get(id=order.id)
    loaded.lines[1].place.city = "B"
    loaded.save()
    assert LinedOrder(lines=[ScopedLine(place=VisitPlace(city="B"))]).save().lines[0].no == 3


def test_an_embedded_number_cleared_writes_that_number_alone(mongoengine_db: Any) -> None:
    """Review E: the save wrote the embedded document whole, losing what the projection left
    out of it (plain MongoEngine writes the path changed)."""
    order = LinedOrder(
        lines=[ScopedLine(place=VisitPlace(city="A"), note=f"keep {i}") for i in range(2)]
    ).save()
    loaded = LinedOrder.objects.exclude("lines.note").get(id=order.id)
    loaded.lines[1].no = None
    loaded.save()
    stored = mongoengine_db.lined_orders.find_one()["lines"]
    assert [(line["note"], line["no"]) for line in stored] == [("keep 0", 1), ("keep 1", 3)]
