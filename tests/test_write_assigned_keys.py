"""A key assigned to a document after it was built (``doc.id = 5``, also by a ``pre_save``
handler), which makes MongoEngine take the document as stored (``_created`` becomes False) and
``save()`` an upsert of everything it holds. A generated key is inserted all the same (never
written over the document holding it), and a document of any key is stored with its generated
values. Each test checks the stored documents."""

from __future__ import annotations

import copy
import pickle
from collections.abc import Iterator
from typing import Any

import mongoengine as me
import pytest
from _write_support import raw_collection
from bson import ObjectId, json_util
from mongoengine import signals
from mongoengine.errors import NotUniqueError
from test_random_unique import Script

from mongoengine_ids import RandomUniqueField, SequenceField, UUID4Field


class KeyedBySequence(me.Document):
    id = SequenceField(primary_key=True)
    code = RandomUniqueField(digits=6)
    owner = me.StringField()
    meta = {"collection": "keyed_by_sequence"}


class KeyedByRandom(me.Document):
    id = RandomUniqueField(primary_key=True, digits=6)
    number = SequenceField()
    owner = me.StringField()
    meta = {"collection": "keyed_by_random"}


class KeyedByUUID(me.Document):
    id = UUID4Field(primary_key=True)
    number = SequenceField()
    owner = me.StringField()
    meta = {"collection": "keyed_by_uuid"}


class KeyedByObjectId(me.Document):
    number = SequenceField()
    code = RandomUniqueField(digits=6)
    owner = me.StringField()
    meta = {"collection": "keyed_by_object_id"}


GENERATED_KEYS = [KeyedBySequence, KeyedByRandom, KeyedByUUID]
RELAXED = json_util.RELAXED_JSON_OPTIONS


def _stored(model: type[me.Document]) -> list[dict[str, Any]]:
    return list(raw_collection(model).find())


def _saved_under_a_key_the_field_made(
    model: type[me.Document], document: me.Document
) -> dict[str, Any]:
    """Assign ``document`` a key the field made (no longer held), save it; its stored copy,
    checked to hold the other generated values."""
    document.id = model(owner="spare").save().id
    model.objects(id=document.id).delete()
    document.save()
    (stored,) = [doc for doc in _stored(model) if doc["owner"] == document.owner]
    generated = [name for name in ("code", "number") if name in model._fields]
    assert all(stored.get(name) is not None for name in generated)
    return stored


@pytest.mark.parametrize("model", GENERATED_KEYS, ids=lambda m: m.__name__)
def test_a_generated_key_assigned_after_building_is_not_written_over_its_holder(
    mongoengine_db: Any, model: type[me.Document]
) -> None:
    first = model(owner="Ada").save()
    before = _stored(model)
    intruder = model(owner="Mallory")
    intruder.id = first.id
    with pytest.raises(NotUniqueError):
        intruder.save()
    assert _stored(model) == before


@pytest.mark.parametrize("model", GENERATED_KEYS, ids=lambda m: m.__name__)
def test_a_generated_key_assigned_after_building_is_inserted_with_its_values(
    mongoengine_db: Any, model: type[me.Document]
) -> None:
    first = model(owner="Ada").save()
    other = model(owner="Bo")
    stored = _saved_under_a_key_the_field_made(model, other)
    assert stored["_id"] != model._fields["id"].to_mongo(first.id)
    assert other.to_mongo().to_dict() == stored
    # Saved: the next save() updates it.
    other.owner = "Bo 2"
    other.save()
    assert model.objects(owner="Bo 2").count() == 1


@pytest.mark.parametrize("build", ["from_json", "_from_son"])
@pytest.mark.parametrize("model", GENERATED_KEYS, ids=lambda m: m.__name__)
def test_a_document_built_new_from_its_data_is_inserted_under_a_key_assigned_after(
    mongoengine_db: Any, model: type[me.Document], build: str
) -> None:
    # from_json(created=True) and _from_son(created=True) build a new document, as the
    # constructor does (save() inserts it); a key assigned after makes MongoEngine take it as
    # stored, and its update would write only the key.
    first = model(owner="Ada").save()
    data = model(owner="Bo").to_mongo()
    built = (
        model.from_json(
            json_util.dumps(data, json_options=RELAXED),
            created=True,
            json_options=RELAXED,
        )
        if build == "from_json"
        else model._from_son(data, created=True)
    )
    stored = _saved_under_a_key_the_field_made(model, built)
    assert built.to_mongo().to_dict() == stored
    # And a key another document holds is refused, never written over it.
    intruder = model._from_son(model(owner="Mallory").to_mongo(), created=True)
    intruder.id = first.id
    before = _stored(model)
    with pytest.raises(NotUniqueError):
        intruder.save()
    assert _stored(model) == before


@pytest.mark.parametrize("how", ["copy", "deepcopy", "pickle"])
def test_a_copy_of_a_document_built_new_is_new(mongoengine_db: Any, how: str) -> None:
    built = KeyedBySequence._from_son(KeyedBySequence(owner="Ada").to_mongo(), created=True)
    copied = {
        "copy": copy.copy,
        "deepcopy": copy.deepcopy,
        "pickle": lambda doc: pickle.loads(pickle.dumps(doc)),
    }[how](built)
    copied.id = 100
    copied.save()
    (stored,) = _stored(KeyedBySequence)
    assert stored == {"_id": 100, "owner": "Ada", "code": copied.code}
    assert copied.code is not None


def test_a_document_built_new_from_its_data_records_its_changes_as_mongoengines(
    mongoengine_db: Any,
) -> None:
    # Review: the first fix made it as the constructor makes one, which records no changes: a
    # pre_save handler saw none, as it does for MongoEngine's own models.
    class Plain(me.Document):
        owner = me.StringField()

    seen: list[list[str]] = []

    def on_pre_save(sender: Any, document: me.Document, **kwargs: Any) -> None:
        seen.append(sorted(document._get_changed_fields()))

    signals.pre_save.connect(on_pre_save)
    try:
        for model in (KeyedBySequence, Plain):
            built = model._from_son(model(owner="Ada").to_mongo(), created=True)
            built.owner = "Bo"
            built.save()
    finally:
        signals.pre_save.disconnect(on_pre_save)
    assert seen == [["owner"], ["owner"]]
    assert [doc["owner"] for doc in _stored(KeyedBySequence)] == ["Bo"]


def test_a_sequence_key_assigned_after_building_moves_the_counter_past_it(
    mongoengine_db: Any,
) -> None:
    KeyedBySequence(owner="Ada").save()
    late = KeyedBySequence(owner="Bo")
    late.id = 2
    late.save()
    assert KeyedBySequence(owner="Cy").save().id == 3
    assert sorted(doc["_id"] for doc in _stored(KeyedBySequence)) == [1, 2, 3]


@pytest.fixture
def key_set_before_save() -> Iterator[list[Any]]:
    """A pre_save handler giving each KeyedBySequence the next key of a list."""
    keys: list[Any] = []

    def assign(sender: Any, document: Any, **kwargs: Any) -> None:
        if keys:
            document.id = keys.pop(0)

    signals.pre_save.connect(assign, sender=KeyedBySequence)
    try:
        yield keys
    finally:
        signals.pre_save.disconnect(assign, sender=KeyedBySequence)


def test_a_generated_key_assigned_by_pre_save_is_inserted_never_written_over(
    mongoengine_db: Any, key_set_before_save: list[Any]
) -> None:
    KeyedBySequence(owner="Ada").save()  # key 1
    key_set_before_save.extend([50, 50])
    bo = KeyedBySequence(owner="Bo").save()
    assert bo.id == 50
    with pytest.raises(NotUniqueError):
        KeyedBySequence(owner="Cy").save()
    stored = {doc["_id"]: doc for doc in _stored(KeyedBySequence)}
    assert sorted(stored) == [1, 50]
    assert stored[50]["owner"] == "Bo"
    assert stored[50]["code"] == bo.code is not None


def test_a_key_of_another_kind_assigned_after_building_gets_the_generated_values(
    mongoengine_db: Any,
) -> None:
    # The key is not this package's: MongoEngine's upsert of what the document holds stays,
    # with the generated values among what it holds.
    ticket = KeyedByObjectId(owner="Ada")
    ticket.id = ObjectId()
    ticket.save()
    (stored,) = _stored(KeyedByObjectId)
    assert stored == {"_id": ticket.id, "number": 1, "code": ticket.code, "owner": "Ada"}
    assert isinstance(ticket.code, int)


def test_a_key_of_another_kind_assigned_to_a_stored_documents_keeps_its_values(
    mongoengine_db: Any,
) -> None:
    # Saved over the stored document (MongoEngine's upsert): its generated values stay its own.
    stored = KeyedByObjectId(owner="Ada").save()
    blind = KeyedByObjectId(owner="Ada 2")
    blind.id = stored.id
    blind.save()
    assert _stored(KeyedByObjectId) == [
        {"_id": stored.id, "number": 1, "code": stored.code, "owner": "Ada 2"}
    ]
    assert (blind.number, blind.code) == (1, stored.code)
    later = KeyedByObjectId(owner="Cy").save()  # the value made for the blind save is spent
    assert sorted(doc["number"] for doc in _stored(KeyedByObjectId)) == [1, later.number]
    assert later.number > 1


@pytest.mark.parametrize("model", [*GENERATED_KEYS, KeyedByObjectId], ids=lambda m: m.__name__)
def test_documents_of_a_bulk_insert_saved_later_are_updated(
    mongoengine_db: Any, model: type[me.Document]
) -> None:
    documents = [model(owner="a"), model(owner="b")]
    model.objects.insert(documents, load_bulk=False)
    before = {doc["owner"]: doc for doc in _stored(model)}
    documents[0].owner = "a 2"
    documents[0].save()
    after = {doc["owner"]: doc for doc in _stored(model)}
    assert sorted(after) == ["a 2", "b"]
    assert after["a 2"] == {**before["a"], "owner": "a 2"}


# -- a collision of a value MongoEngine's update writes is retried -------------------------------


DRAWS = Script()


class BlindCoded(me.Document):
    code = RandomUniqueField(digits=1, rng=DRAWS)
    owner = me.StringField()
    meta = {"collection": "blind_coded"}


def test_a_value_written_by_a_key_assigned_upsert_is_drawn_again_on_a_collision(
    mongoengine_db: Any,
) -> None:
    DRAWS.then(2)
    taken = BlindCoded(owner="Ada").save()  # code 3
    blind = BlindCoded(owner="Bo")
    blind.id = ObjectId()
    DRAWS.then(2, 4)  # 3 collides (in MongoEngine's upsert), then 5
    blind.save()
    stored = {doc["owner"]: doc["code"] for doc in _stored(BlindCoded)}
    assert stored == {"Ada": taken.code, "Bo": 5}
    assert blind.code == 5


def test_a_value_added_to_the_upsert_of_a_document_built_as_stored_is_drawn_again(
    mongoengine_db: Any,
) -> None:
    DRAWS.then(0)
    BlindCoded(owner="Ada").save()  # code 1
    built = BlindCoded.from_json(
        f'{{"_id": {{"$oid": "{ObjectId()}"}}, "owner": "Bo"}}',
        json_options=json_util.RELAXED_JSON_OPTIONS,
    )
    built.owner = "Bo 2"  # changed: MongoEngine upserts it
    DRAWS.then(0, 0, 6)
    built.save()
    stored = {doc["owner"]: doc["code"] for doc in _stored(BlindCoded)}
    assert stored == {"Ada": 1, "Bo 2": 7}


# -- review Z ---------------------------------------------------------------------------------


@pytest.mark.parametrize("how", ["copy", "deepcopy", "pickle"])
def test_a_copy_of_a_bulk_inserted_document_is_a_stored_one(mongoengine_db: Any, how: str) -> None:
    import copy
    import pickle

    original = KeyedBySequence(owner="x")
    KeyedBySequence.objects.insert([original], load_bulk=False)
    copies = {
        "copy": copy.copy,
        "deepcopy": copy.deepcopy,
        "pickle": lambda doc: pickle.loads(pickle.dumps(doc)),
    }
    duplicate = copies[how](original)
    duplicate.owner = how
    duplicate.save()
    assert [(doc["_id"], doc["owner"]) for doc in _stored(KeyedBySequence)] == [(1, how)]


class WholeTicket(me.Document):
    number = SequenceField(sequence_name="whole_number")
    strict = SequenceField(allow_explicit=False, sequence_name="whole_strict")
    meta = {"collection": "whole_tickets"}


def test_values_assigned_to_a_document_written_whole_are_told_to_their_fields(
    mongoengine_db: Any,
) -> None:
    from mongoengine_ids.sequence.field import ExplicitValueError

    inserted = WholeTicket()
    WholeTicket.objects.insert([inserted], load_bulk=False)  # number 1, strict 1
    inserted.number = 3
    inserted.save()
    blind = WholeTicket(number=4)
    blind.id = ObjectId()
    blind.save()
    numbers = sorted(doc["number"] for doc in _stored(WholeTicket))
    later = [WholeTicket().save().number for _ in range(2)]
    assert numbers == [3, 4]
    assert later == [5, 6]
    inserted.strict = 7
    with pytest.raises(ExplicitValueError):
        inserted.save()
    assert {doc["strict"] for doc in _stored(WholeTicket)} == {1, 2, 3, 4}


def test_the_generated_key_of_a_stored_document_cannot_change(mongoengine_db: Any) -> None:
    KeyedBySequence(owner="a").save()
    KeyedBySequence(owner="b").save()
    before = _stored(KeyedBySequence)
    loaded = KeyedBySequence.objects.get(id=1)
    loaded.id = 2
    loaded.owner = "over"
    with pytest.raises(me.errors.OperationError, match=r"KeyedBySequence: the key .* \(to 2\)"):
        loaded.save()
    saved = KeyedBySequence(owner="d").save()
    saved.id = None
    saved.id = 1
    with pytest.raises(me.errors.OperationError, match="cannot change"):
        saved.save()
    assert _stored(KeyedBySequence)[:2] == before


def test_a_key_cleared_after_save_took_the_document_for_stored_says_when_to_clear_it(
    mongoengine_db: Any,
) -> None:
    """Probe BU-1: cleared in pre_save_post_validation, the refusal told the user to do what
    the handler did. In pre_save, the copy is inserted."""
    KeyedBySequence(owner="a").save()

    def clear(sender: Any, document: Any, **kwargs: Any) -> None:
        document.id = None
        document.code = None  # unique: the copy gets its own

    late = me.signals.pre_save_post_validation
    late.connect(clear, sender=KeyedBySequence)
    try:
        loaded = KeyedBySequence.objects.get(id=1)
        loaded.owner = "late copy"
        with pytest.raises(me.errors.OperationError, match=r"\(to None\).* in a pre_save handler"):
            loaded.save()
    finally:
        late.disconnect(clear, sender=KeyedBySequence)
    assert [doc["owner"] for doc in _stored(KeyedBySequence)] == ["a"]
    me.signals.pre_save.connect(clear, sender=KeyedBySequence)
    try:
        loaded = KeyedBySequence.objects.get(id=1)
        loaded.owner = "early copy"
        loaded.save()
    finally:
        me.signals.pre_save.disconnect(clear, sender=KeyedBySequence)
    stored = {doc["_id"]: doc["owner"] for doc in _stored(KeyedBySequence)}
    assert stored == {1: "a", 2: "early copy"}


# Probe BJ-3: a new document given the key of a stored one (plain MongoEngine replaces that one)
# that carries the values it holds: they are its own, not taken. It was refused as reserved.


class ReplacedLine(me.EmbeddedDocument):
    r = RandomUniqueField(digits=9, reserve_in="replaced_line_r")
    label = me.StringField()


class ReplacedOrder(me.Document):
    name = me.StringField()
    number = SequenceField(allow_explicit=False)
    line = me.EmbeddedDocumentField(ReplacedLine)
    meta = {"collection": "replaced_orders"}


@pytest.mark.parametrize("how", ["rebuilt", "_from_son(created=True)"])
def test_a_new_document_replacing_the_stored_one_by_its_key_keeps_its_values(
    mongoengine_db: Any, how: str
) -> None:
    order = ReplacedOrder(name="v1", line=ReplacedLine(label="a")).save()
    if how == "rebuilt":
        copy_ = ReplacedOrder(
            id=order.id, name="v2", number=order.number, line=ReplacedLine(r=order.line.r)
        )
    else:
        copy_ = ReplacedOrder._from_son(order.to_mongo(), created=True)
        copy_.name = "v2"
    copy_.save()
    assert list(mongoengine_db.replaced_orders.find()) == [
        {
            "_id": order.id,
            "name": "v2",
            "number": order.number,
            "line": {"r": order.line.r, **({"label": "a"} if how != "rebuilt" else {})},
        }
    ]


def test_a_new_document_carrying_another_documents_values_under_a_new_key_is_refused(
    mongoengine_db: Any,
) -> None:
    order = ReplacedOrder(name="v1", line=ReplacedLine(label="a")).save()
    other = ReplacedOrder(name="b").save()
    taken = ReplacedOrder(id=other.id, name="b2", line=ReplacedLine(r=order.line.r))
    with pytest.raises(NotUniqueError, match="already reserved"):
        taken.save()  # replaces "b", which does not hold it: another document's value
    fresh = ReplacedOrder(id=ObjectId(), name="c", line=ReplacedLine(r=order.line.r))
    with pytest.raises(NotUniqueError, match="already reserved"):
        fresh.save()  # no document under its key: inserted, and the value is order's
    assert sorted(d["name"] for d in mongoengine_db.replaced_orders.find()) == ["b", "v1"]


class ShardedReplacedOrder(me.Document):
    tenant = me.StringField()
    line = me.EmbeddedDocumentField(ReplacedLine)
    meta = {"collection": "sharded_replaced_orders", "shard_key": ("tenant",)}


def test_the_document_a_new_one_replaces_is_found_by_its_shard_key_too(
    mongoengine_db: Any,
) -> None:
    # Review V: MongoEngine replaces by the key and the shard key; another tenant's document
    # under the key is not the one replaced (on a sharded cluster, the save inserts beside it):
    # its value was taken for this one's own, never reserved for it.
    order = ShardedReplacedOrder(tenant="a", line=ReplacedLine(label="a")).save()
    other = ShardedReplacedOrder(id=order.id, tenant="b", line=ReplacedLine(r=order.line.r))
    with pytest.raises(NotUniqueError, match="already reserved"):
        other.save()
    same = ShardedReplacedOrder(id=order.id, tenant="a", line=ReplacedLine(r=order.line.r))
    same.save()  # the one replaced holds it: its own
    assert list(mongoengine_db.sharded_replaced_orders.find()) == [
        {"_id": order.id, "tenant": "a", "line": {"r": order.line.r}}
    ]
