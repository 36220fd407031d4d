"""Upserts whose filter fixes a generated value, round trips of upserts by key and of rebuilt
embedded documents (as many as without the package), rebuilt and reordered lists keeping their
values, and a lost multi-match count. Each test checks the raw stored documents."""

from __future__ import annotations

import contextlib
import uuid
from typing import Any

import mongoengine as me
import pymongo.errors
import pytest

from mongoengine_ids import ExplicitValueError, RandomUniqueField, SequenceField, UUID4Field
from mongoengine_ids.testing import connected_threadsafe


def raw(model: type[me.Document]) -> list[dict[str, Any]]:
    return list(model._get_collection().find())


# -- an upsert whose filter fixes a generated value held by ANOTHER document (the filter
#       has more conditions, so the upsert inserts): the value is not told, stored twice ------


class RoundScoped(me.Document):
    tenant = me.StringField()
    num = SequenceField(scope="tenant")
    name = me.StringField()
    meta = {"collection": "round_scoped"}


def test_upsert_filter_value_held_in_another_scope_moves_this_scopes_counter(
    mongoengine_db: Any,
) -> None:
    RoundScoped(tenant="a", name="a1").save()  # tenant a: num 1
    # tenant b's document 1, imported by an upsert keyed by (tenant, num)
    RoundScoped.objects(tenant="b", num=1).update_one(upsert=True, set__name="imported")
    RoundScoped(tenant="b", name="b-new").save()  # tenant b's counter still at 1: hands out 1
    nums = sorted(d["num"] for d in raw(RoundScoped) if d["tenant"] == "b")
    assert len(nums) == len(set(nums)), nums  # got [1, 1]


class RoundReserved(me.Document):
    code = RandomUniqueField(min_value=1, max_value=1000, reserve_in="round_codes")
    name = me.StringField()
    meta = {"collection": "round_reserved"}


def test_upsert_filter_value_held_by_another_document_is_not_stored_twice(
    mongoengine_db: Any,
) -> None:
    first = RoundReserved(name="a").save()
    # The same value given by set__ is refused (already reserved); fixed by a filter that does
    # not match the holder, it is inserted without being reserved.
    with pytest.raises(
        me.NotUniqueError, match=rf"\[{first.code}\] already reserved in 'round_codes'"
    ):
        RoundReserved.objects(code=first.code, name="b").update_one(upsert=True, set__name="b")
    # got [n, n], no error: nothing inserted, and the value is still the first's reservation
    assert raw(RoundReserved) == [{"_id": first.id, "code": first.code, "name": "a"}]
    reservations = mongoengine_db["round_codes"].find()
    assert [(d["_id"], d["ns"]) for d in reservations] == [(first.code, "round_reserved.code")]


class RoundStrict(me.Document):
    num = SequenceField(allow_explicit=False)
    name = me.StringField()
    meta = {"collection": "round_strict"}


def test_upsert_filter_value_held_by_another_document_bypasses_allow_explicit(
    mongoengine_db: Any,
) -> None:
    first = RoundStrict(name="a").save()  # 1
    with pytest.raises(ExplicitValueError, match="explicit value 1 rejected"):
        RoundStrict.objects(num=1, name="b").update_one(upsert=True, set__name="b")
    # got [1, 1], no ExplicitValueError: nothing inserted, the counter not moved
    assert raw(RoundStrict) == [{"_id": first.id, "num": 1, "name": "a"}]
    counters = mongoengine_db["mongoengine.counters"].find()
    assert list(counters) == [{"_id": "round_strict.num", "next": 1}]


# -- an upsert by key of a UUID-keyed model: one extra round trip (the look-up), though a
#       UUID field is told nothing -------------------------------------------------------------


class RoundUuidKeyed(me.Document):
    id = UUID4Field(primary_key=True)
    name = me.StringField()
    meta = {"collection": "round_uuid_keyed"}


class RoundPlainUuidKeyed(me.Document):
    id = me.UUIDField(primary_key=True, binary=False)
    name = me.StringField()
    meta = {"collection": "round_plain_uuid_keyed"}


def _round_trips(run: Any) -> list[tuple[str, str]]:
    calls: list[tuple[str, str]] = []
    recording = [False]

    def hook(collection: str, method: str, call: Any) -> Any:
        if recording[0]:
            calls.append((collection, method))
        return call()

    with connected_threadsafe(hook=hook) as connect:
        connect()
        run(lambda: recording.__setitem__(0, True))
    return calls


def test_upsert_by_uuid_key_costs_what_plain_mongoengine_costs() -> None:
    def ours(start: Any) -> None:
        RoundUuidKeyed.objects.first()  # indexes made
        start()
        RoundUuidKeyed.objects(id=uuid.uuid4()).update_one(upsert=True, set__name="x")

    def plain(start: Any) -> None:
        RoundPlainUuidKeyed.objects.first()
        start()
        RoundPlainUuidKeyed.objects(id=uuid.uuid4()).update_one(upsert=True, set__name="x")

    # got ['find_one', 'update_one'] == ['update_one']
    assert [m for _, m in _round_trips(ours)] == [m for _, m in _round_trips(plain)]


# -- the application's retry of an upsert whose reply was lost, the value fixed by the
#       filter (reserve_in): the first attempt's reservation is kept, the retry is refused ------


# -- a loaded list of embedded documents rebuilt without its first item (e.g. from a form):
#       each kept value now sits one place lower, is taken for "copied", and is refused --------


class RoundCard(me.EmbeddedDocument):
    number = RandomUniqueField(digits=8, reserve_in="round_card_numbers")
    holder = me.StringField()


class RoundWallet(me.Document):
    cards = me.ListField(me.EmbeddedDocumentField(RoundCard))
    meta = {"collection": "round_wallets"}


def test_rebuilt_list_without_its_first_item_saves(mongoengine_db: Any) -> None:
    wallet = RoundWallet(cards=[RoundCard(holder="a"), RoundCard(holder="b")]).save()
    kept = wallet.cards[1].number
    loaded = RoundWallet.objects.get(id=wallet.id)
    loaded.cards = [RoundCard(number=c.number, holder=c.holder) for c in loaded.cards[1:]]
    loaded.save()  # plain MongoEngine stores [b]; got NotUniqueError (already reserved)
    (stored,) = raw(RoundWallet)
    assert [c["number"] for c in stored["cards"]] == [kept], stored


def test_reordered_list_saves(mongoengine_db: Any) -> None:
    wallet = RoundWallet(cards=[RoundCard(holder="a"), RoundCard(holder="b")]).save()
    numbers = [c.number for c in wallet.cards]
    loaded = RoundWallet.objects.get(id=wallet.id)
    loaded.cards = [RoundCard(number=c.number, holder=c.holder) for c in reversed(loaded.cards)]
    loaded.save()
    (stored,) = raw(RoundWallet)
    assert [c["number"] for c in stored["cards"]] == numbers[::-1], stored


# -- a network error at the multi-match count, then the application's retry ----------------


class RoundTag(me.EmbeddedDocument):
    uid = UUID4Field()
    name = me.StringField()


class RoundHolder(me.Document):
    email = me.StringField()
    tags = me.ListField(me.EmbeddedDocumentField(RoundTag))
    meta = {"collection": "round_holders"}


def test_count_lost_then_retry() -> None:
    lost = {"count_documents": True}

    def hook(collection: str, method: str, call: Any) -> Any:
        if collection == "round_holders" and lost.get(method):
            lost[method] = False
            raise pymongo.errors.AutoReconnect("lost")
        return call()

    with connected_threadsafe(hook=hook) as connect:
        connect()
        RoundHolder(email="a").save()
        tag = RoundTag(name="t")
        for _ in range(2):
            with contextlib.suppress(pymongo.errors.AutoReconnect):
                RoundHolder.objects(email="a").update(push__tags=tag)
                break
        (stored,) = raw(RoundHolder)
    assert len(stored["tags"]) == 1, stored
    assert stored["tags"][0].get("uid") is not None, stored


# -- a loaded document whose embedded documents are rebuilt with their own UUIDs (as
#       serializers do): one look-up per embedded document, though a UUID field is told nothing


class RoundPlainTag(me.EmbeddedDocument):
    uid = me.UUIDField(binary=False)
    name = me.StringField()


class RoundPlainHolder(me.Document):
    email = me.StringField()
    tags = me.ListField(me.EmbeddedDocumentField(RoundPlainTag))
    meta = {"collection": "round_plain_holders"}


class RoundStrTag(me.EmbeddedDocument):
    uid = UUID4Field(as_string=True)
    name = me.StringField()


class RoundStrHolder(me.Document):
    email = me.StringField()
    tags = me.ListField(me.EmbeddedDocumentField(RoundStrTag))
    meta = {"collection": "round_str_holders"}


def test_rebuilt_embedded_uuids_cost_what_plain_mongoengine_costs() -> None:
    def run(model: Any, tag: Any, start: Any) -> None:
        doc = model(email="a", tags=[tag(uid=uuid.uuid4(), name=str(i)) for i in range(3)])
        doc.save()
        loaded = model.objects.get(id=doc.id)
        start()
        loaded.tags = [tag(uid=t.uid, name=t.name + "!") for t in loaded.tags]
        loaded.save()

    ours = _round_trips(lambda start: run(RoundStrHolder, RoundStrTag, start))
    plain = _round_trips(lambda start: run(RoundPlainHolder, RoundPlainTag, start))
    # got 3 x find_one + update_one, plain: update_one
    assert [m for _, m in ours] == [m for _, m in plain]
