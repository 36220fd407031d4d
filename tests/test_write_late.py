"""Updates and upserts after the second round of fixes: an update key with no operator (a
``set``), an upsert whose filter fixes a generated field, a value kept at its own place in a
list, and updates that match one document without naming its key. Each test checks the raw
stored documents."""

from __future__ import annotations

from typing import Any

import mongoengine as me
import pytest

from mongoengine_ids import RandomUniqueField, SequenceField, UUID4Field
from mongoengine_ids.errors import RetriesExhaustedError


def raw(model: type[me.Document]) -> list[dict[str, Any]]:
    return list(model._get_collection().find())


class LateTag(me.EmbeddedDocument):
    uid = UUID4Field()
    name = me.StringField()


class LateHolder(me.Document):
    name = me.StringField()
    email = me.StringField(unique=True)
    tags = me.ListField(me.EmbeddedDocumentField(LateTag))
    main = me.EmbeddedDocumentField(LateTag)
    meta = {"collection": "late_holders"}


# -- an update key without an operator (MongoEngine's implicit set__) is not "writing":
#       the new embedded document is stored without its generated value -----------------------


def test_implicit_set_of_list_fills_new_embedded(mongoengine_db: Any) -> None:
    doc = LateHolder(name="a").save()
    LateHolder.objects(id=doc.id).update(tags=[LateTag(name="t")])  # = set__tags
    (stored,) = raw(LateHolder)
    assert stored["tags"][0].get("uid") is not None, stored  # got {'name': 't'}


def test_implicit_set_by_document_update_fills_new_embedded(mongoengine_db: Any) -> None:
    doc = LateHolder(name="a").save()
    doc.update(main=LateTag(name="t"))  # = set__main
    (stored,) = raw(LateHolder)
    assert stored["main"].get("uid") is not None, stored


def test_implicit_set_by_modify_fills_new_embedded(mongoengine_db: Any) -> None:
    doc = LateHolder(name="a").save()
    LateHolder.objects(id=doc.id).modify(main=LateTag(name="t"))
    (stored,) = raw(LateHolder)
    assert stored["main"].get("uid") is not None, stored


# -- an upsert whose filter fixes a generated field: the $set value is not told ----------


class LateNumbered(me.Document):
    num = SequenceField()
    name = me.StringField()
    meta = {"collection": "late_numbered"}


def test_upsert_set_value_told_when_filter_fixes_the_field(mongoengine_db: Any) -> None:
    LateNumbered(name="first").save()  # 1
    LateNumbered.objects(num=1).update_one(upsert=True, set__num=3)  # renumbered: 3 stored
    LateNumbered(name="a").save()
    LateNumbered(name="b").save()
    nums = [d["num"] for d in raw(LateNumbered)]
    assert len(nums) == len(set(nums)), nums  # got [3, 2, 3]


# -- an upsert that inserts the value its filter fixes: not told, handed out again -------


def test_upsert_inserting_filter_value_moves_the_counter(mongoengine_db: Any) -> None:
    LateNumbered.objects(num=3).update_one(upsert=True, set__name="imported")  # inserts num=3
    for name in "abc":
        LateNumbered(name=name).save()
    nums = [d["num"] for d in raw(LateNumbered)]
    assert len(nums) == len(set(nums)), nums  # got [3, 1, 2, 3]


class LateReserved(me.Document):
    # reserve_in: the field declares no unique index of its own (docs/random-unique.md)
    code = RandomUniqueField(min_value=1, max_value=3, rng=lambda n: 0, reserve_in="late_codes")
    name = me.StringField()
    meta = {"collection": "late_reserved"}


def test_upsert_inserting_filter_value_reserves_it(mongoengine_db: Any) -> None:
    LateReserved.objects(code=1).update_one(upsert=True, set__name="imported")  # inserts code=1
    # Draws 1 on every attempt: refused each time, never stored twice (got [1, 1]).
    taken = "all 17 attempts drew a value that was already taken in the proxy collection"
    with pytest.raises(RetriesExhaustedError, match=f"{taken} 'late_codes'"):
        LateReserved(name="new").save()
    assert [{k: v for k, v in d.items() if k != "_id"} for d in raw(LateReserved)] == [
        {"code": 1, "name": "imported"}
    ]
    reservations = mongoengine_db["late_codes"].find()
    assert [(d["_id"], d["ns"]) for d in reservations] == [(1, "late_reserved.code")]


# -- _stored_in: a value held anywhere in the stored document counts as "its own", also
#       when the document keeps holding it elsewhere: a reserved value stored twice ----------


class LateCard(me.EmbeddedDocument):
    number = RandomUniqueField(digits=8, reserve_in="late_card_numbers")
    holder = me.StringField()


class LateWallet(me.Document):
    cards = me.ListField(me.EmbeddedDocumentField(LateCard))
    meta = {"collection": "late_wallets"}


def test_copying_a_stored_embedded_value_into_a_new_embedded_document(
    mongoengine_db: Any,
) -> None:
    # For a new document the same is refused: LateWallet(cards=[LateCard(number=n),
    # LateCard(number=n)]).save() raises NotUniqueError.
    wallet = LateWallet(cards=[LateCard(holder="x")]).save()
    loaded = LateWallet.objects.get(id=wallet.id)
    loaded.cards.append(LateCard(holder="y", number=loaded.cards[0].number))
    with pytest.raises(me.NotUniqueError, match="given to two places of one write"):
        loaded.save()
    (stored,) = raw(LateWallet)
    numbers = [card["number"] for card in stored["cards"]]
    assert len(numbers) == len(set(numbers)), numbers  # got [n, n]


# -- false refusals: a multi update() whose filter matches one document at most ---------


def test_update_filtered_by_unique_field(mongoengine_db: Any) -> None:
    LateHolder(name="a", email="a@example.com").save()
    LateHolder.objects(email="a@example.com").update(push__tags=LateTag(name="t"))
    (stored,) = raw(LateHolder)  # InvalidQueryError: nothing written
    assert stored["tags"][0].get("uid") is not None


def test_update_filtered_by_id_in_one_key(mongoengine_db: Any) -> None:
    doc = LateHolder(name="a").save()
    LateHolder.objects(id__in=[doc.id]).update(push__tags=LateTag(name="t"))
    (stored,) = raw(LateHolder)
    assert stored["tags"][0].get("uid") is not None
