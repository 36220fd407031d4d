"""The write-path hook: ids on save() and insert() only, insert semantics, aliases, batches."""

from __future__ import annotations

import copy
import pickle
import re
import threading
import uuid
from typing import Any

import mongoengine as me
import pytest
from _write_support import raw_collection
from bson import json_util
from bson.binary import Binary, UuidRepresentation
from bson.json_util import RELAXED_JSON_OPTIONS
from mongoengine.context_managers import switch_db
from mongoengine.queryset import QuerySet

from mongoengine_ids import (
    BulkNotUniqueError,
    GeneratedField,
    LocalityUUID,
    LocalityUUIDField,
    LocalityUUIDGenerator,
    Write,
    backfill,
)
from mongoengine_ids.constants import SPREAD_STEP
from mongoengine_ids.testing import Connect

T = 1350327498450


def frozen_generator(counter: int = 0) -> LocalityUUIDGenerator:
    return LocalityUUIDGenerator(pid=1, mac=2, clock=lambda: T, counter=counter)


def next_id(generator: LocalityUUIDGenerator) -> LocalityUUID:
    """The id ``generator`` will make next, without consuming it."""
    return LocalityUUID.from_fields(
        counter=(generator._counter + SPREAD_STEP) % 2**32,  # type: ignore[attr-defined]
        pid=generator.pid,
        node=generator.node,
        timestamp_ms=T,
    )


class CountingField(GeneratedField):
    """Hands out 1, 2, 3, ... and records every new_values() call (batch sizes, contexts)."""

    def __init__(self, **kwargs: Any) -> None:
        self.calls: list[tuple[Write, int]] = []
        self.databases: list[str] = []
        self.assigned: list[list[Any]] = []
        self._next = 0
        self._lock = threading.Lock()
        super().__init__(**kwargs)

    def new_values(self, write: Write, count: int) -> list[Any]:
        with self._lock:
            self.calls.append((write, count))
            self.databases.append(write.database.name)
            start = self._next
            self._next += count
        return list(range(start + 1, start + count + 1))

    def note_assigned(self, write: Write, values: list[Any]) -> None:
        self.assigned.append(values)

    def validate(self, value: Any) -> None:
        if not isinstance(value, int):
            self.error(f"{value!r} is not an int")


def raw(model: type[me.Document]) -> list[dict[str, Any]]:
    return list(raw_collection(model).find().sort("name"))


# -- only on the write path ---------------------------------------------------------------------


class Pickled(me.Document):
    """Module level, so that pickle can find it."""

    id = LocalityUUIDField(primary_key=True, generator=frozen_generator())
    name = me.StringField()


def test_reads_never_generate(mongoengine_db: Any) -> None:
    Place = Pickled
    generator = Pickled.id.generator
    expected = next_id(generator)
    place = Place(name="a")
    observed = [
        place.id,
        place.pk,
        place == Place(name="a"),
        hash(place) is not None,
        place.to_json(json_options=RELAXED_JSON_OPTIONS),
        place.to_mongo().to_dict(),
        pickle.loads(pickle.dumps(place)).id,
        copy.copy(place).id,
        copy.deepcopy(place).id,
        repr(place),
        str(place),
        place.validate(),
        Place.objects.count(),
    ]
    assert observed[:2] == [None, None]
    assert observed[2] is False
    assert observed[4] == '{"name": "a"}'
    assert observed[5] == {"name": "a"}
    assert observed[6:9] == [None, None, None]
    assert place._data["id"] is None
    # Nothing was consumed: the first save gets the generator's very next id.
    place.save()
    assert place.id == expected
    assert raw(Place) == [{"_id": Binary(expected.bytes, 4), "name": "a"}]


def test_save_generates_and_stores_binary_subtype_4(mongoengine_db: Any) -> None:
    class Place(me.Document):
        id = LocalityUUIDField(primary_key=True)
        name = me.StringField()
        other = LocalityUUIDField()

    place = Place(name="a").save()
    assert type(place.id) is LocalityUUID
    assert type(place.other) is LocalityUUID
    assert place.id != place.other
    assert raw(Place) == [
        {"_id": Binary(place.id.bytes, 4), "name": "a", "other": Binary(place.other.bytes, 4)}
    ]
    loaded = Place.objects.get(id=place.id)
    assert (loaded.id, loaded.other) == (place.id, place.other)
    assert type(loaded.id) is LocalityUUID


# -- insert semantics ---------------------------------------------------------------------------


def test_generated_pk_never_replaces_an_existing_document(mongoengine_db: Any) -> None:
    generator = frozen_generator()

    class Place(me.Document):
        id = LocalityUUIDField(primary_key=True, generator=generator)
        name = me.StringField()

    # Someone else already wrote the id this generator will produce next.
    taken = next_id(generator)
    Place._get_collection().insert_one({"_id": Binary(taken.bytes, 4), "name": "existing"})
    place = Place(name="new")
    with pytest.raises(me.NotUniqueError):
        place.save()
    assert raw(Place) == [{"_id": Binary(taken.bytes, 4), "name": "existing"}]
    # The failed save left the document as it was; the next save generates a fresh id.
    assert place.id is None
    assert place._created
    place.save()
    assert place.id != taken
    assert [doc["name"] for doc in raw(Place)] == ["existing", "new"]


@pytest.mark.parametrize(
    ("args", "kwargs"),
    [((False,), {}), ((), {"force_insert": False})],
    ids=["positional", "keyword"],
)
def test_force_insert_false_cannot_turn_a_generated_pk_into_a_replace(
    mongoengine_db: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> None:
    generator = frozen_generator()

    class Place(me.Document):
        id = LocalityUUIDField(primary_key=True, generator=generator)
        name = me.StringField()

    taken = next_id(generator)
    Place._get_collection().insert_one({"_id": Binary(taken.bytes, 4), "name": "existing"})
    with pytest.raises(me.NotUniqueError):
        Place(name="new").save(*args, **kwargs)
    assert raw(Place) == [{"_id": Binary(taken.bytes, 4), "name": "existing"}]


def test_a_user_assigned_value_is_kept_validated_and_saved_as_mongoengine_does(
    mongoengine_db: Any,
) -> None:
    class Place(me.Document):
        id = LocalityUUIDField(primary_key=True)
        name = me.StringField()

    value = LocalityUUID("20be0ffc-314a-bd53-7a50-013a65ca76d2")
    Place(id=str(value).upper(), name="first").save()
    assert raw(Place) == [{"_id": Binary(value.bytes, 4), "name": "first"}]
    # A key of a generated field is inserted, also when assigned: never written over the
    # document holding it (MongoEngine's replace would, silently: its issue 1472).
    with pytest.raises(me.NotUniqueError):
        Place(id=value, name="second").save()
    assert raw(Place) == [{"_id": Binary(value.bytes, 4), "name": "first"}]
    with pytest.raises(me.ValidationError, match="'nope' is not a valid Locality UUID"):
        Place(id="nope").save()
    assert len(raw(Place)) == 1


def test_failed_validation_generates_nothing(mongoengine_db: Any) -> None:
    generator = frozen_generator()

    class Place(me.Document):
        id = LocalityUUIDField(primary_key=True, generator=generator)
        name = me.StringField(required=True)

    expected = next_id(generator)
    place = Place()
    with pytest.raises(me.ValidationError):
        place.save()
    assert place.id is None
    place.name = "now valid"
    place.save()
    assert place.id == expected


def test_an_existing_document_gains_a_missing_generated_value(mongoengine_db: Any) -> None:
    class Legacy(me.Document):
        name = me.StringField()

    legacy = Legacy(name="old").save()

    class Upgraded(me.Document):
        meta = {"collection": "legacy"}
        name = me.StringField()
        ref = LocalityUUIDField()

    loaded = Upgraded.objects.get(id=legacy.id)
    assert loaded.ref is None
    loaded.save()
    assert type(loaded.ref) is LocalityUUID
    assert raw(Upgraded) == [{"_id": legacy.id, "name": "old", "ref": Binary(loaded.ref.bytes, 4)}]


def test_a_save_override_that_forwards_kwargs_keeps_working(mongoengine_db: Any) -> None:
    seen: list[Any] = []

    class Place(me.Document):
        id = LocalityUUIDField(primary_key=True)
        name = me.StringField()

        def save(self, *args: Any, **kwargs: Any) -> Any:
            seen.append(kwargs.get("force_insert"))
            return super().save(*args, **kwargs)

    place = Place(name="a").save()
    place.name = "b"
    place.save()
    assert seen == [None, None]  # save()'s arguments are the caller's, untouched
    assert raw(Place) == [{"_id": Binary(place.id.bytes, 4), "name": "b"}]


# -- aliases, switch_db, inheritance ------------------------------------------------------------


def test_db_alias_is_followed(mongoengine_connect: Connect) -> None:
    default = mongoengine_connect()
    other = mongoengine_connect("other")
    field = CountingField()

    class Tagged(me.Document):
        meta = {"db_alias": "other"}
        number = field

    Tagged().save()
    assert field.databases == [other.name]
    assert list(other["tagged"].find({}, {"_id": 0})) == [{"number": 1}]
    assert "tagged" not in default.list_collection_names()


def test_switch_db_is_followed(mongoengine_connect: Connect) -> None:
    default = mongoengine_connect()
    archive = mongoengine_connect("archive")
    field = CountingField()

    class Entry(me.Document):
        number = field

    with switch_db(Entry, "archive") as ArchiveEntry:
        ArchiveEntry().save()
        ArchiveEntry.objects.insert([ArchiveEntry(), ArchiveEntry()])
    Entry().switch_db("archive").save()
    Entry().save()
    assert field.databases == [archive.name] * 3 + [default.name]
    assert sorted(d["number"] for d in archive["entry"].find()) == [1, 2, 3, 4]
    assert [d["number"] for d in default["entry"].find()] == [5]


def test_inherited_and_abstract_models_generate(mongoengine_db: Any) -> None:
    class Base(me.Document):
        meta = {"abstract": True}
        id = LocalityUUIDField(primary_key=True)

    class Concrete(Base):
        name = me.StringField()

    class Parent(me.Document):
        meta = {"allow_inheritance": True}
        id = LocalityUUIDField(primary_key=True)
        name = me.StringField()

    class Child(Parent):
        extra = LocalityUUIDField()

    concrete = Concrete(name="c").save()
    child = Child(name="child").save()
    parent = Parent(name="parent").save()
    assert raw(Concrete) == [{"_id": Binary(concrete.id.bytes, 4), "name": "c"}]
    assert raw(Parent) == [
        {
            "_id": Binary(child.id.bytes, 4),
            "_cls": "Parent.Child",
            "name": "child",
            "extra": Binary(child.extra.bytes, 4),
        },
        {"_id": Binary(parent.id.bytes, 4), "_cls": "Parent", "name": "parent"},
    ]
    assert Parent.objects.get(id=child.id).extra == child.extra


def test_no_global_patching_of_mongoengine(mongoengine_db: Any) -> None:
    class Plain(me.Document):
        name = me.StringField()

    class WithId(me.Document):
        id = LocalityUUIDField(primary_key=True)

    assert me.Document.save is Plain.save is WithId.save  # save() itself is never wrapped
    assert me.Document._save_create is Plain._save_create
    assert WithId._save_create is not me.Document._save_create
    assert Plain._meta.get("queryset_class", QuerySet) is QuerySet
    Plain(name="x").save()
    assert [doc["name"] for doc in raw(Plain)] == ["x"]


# -- bulk insert --------------------------------------------------------------------------------


def test_bulk_insert_asks_for_the_whole_batch_at_once(mongoengine_db: Any) -> None:
    field = CountingField()

    class Ticket(me.Document):
        number = field
        name = me.StringField()

    inserted = Ticket.objects.insert([Ticket(name=f"t{i}") for i in range(5)])
    assert [count for _, count in field.calls] == [5]
    assert [doc.number for doc in inserted] == [1, 2, 3, 4, 5]
    assert [(d["name"], d["number"]) for d in raw(Ticket)] == [(f"t{i}", i + 1) for i in range(5)]
    # Assigned values are kept and reported to the field (a counter moves past them there).
    Ticket.objects.insert([Ticket(name="t5", number=99), Ticket(name="t6")])
    assert field.assigned == [[99]]
    assert [(d["name"], d["number"]) for d in raw(Ticket)][5:] == [("t5", 99), ("t6", 6)]


def test_bulk_insert_of_uuid_keys_returns_the_documents(mongoengine_db: Any) -> None:
    class Place(me.Document):
        id = LocalityUUIDField(primary_key=True)
        name = me.StringField()

    docs = [Place(name=f"p{i}") for i in range(3)]
    loaded = Place.objects.insert(docs)
    assert [doc.name for doc in loaded] == ["p0", "p1", "p2"]
    assert [doc.id for doc in loaded] == [doc.id for doc in docs]
    assert all(type(doc.id) is LocalityUUID for doc in docs + loaded)
    one = Place.objects.insert(Place(name="single"))
    assert one.name == "single"
    assert type(one.id) is LocalityUUID
    ids = Place.objects.insert([Place(name="x")], load_bulk=False)
    assert [type(pk) for pk in ids] == [LocalityUUID]
    assert {d["_id"] for d in raw(Place)} == {
        Binary(pk.bytes, 4) for pk in [*(d.id for d in docs), one.id, *ids]
    }


def test_subclass_naming_its_own_queryset_class_still_batches(mongoengine_db: Any) -> None:
    field = CountingField()

    class Parent(me.Document):
        meta = {"allow_inheritance": True}
        number = field

    class CustomQuerySet(QuerySet):
        def first_number(self) -> Any:
            return self.first().number

    class Child(Parent):
        meta = {"queryset_class": CustomQuerySet}

    Child.objects.insert([Child(), Child(), Child()])
    assert [count for _, count in field.calls] == [3]
    assert Child.objects.order_by("number").first_number() == 1


def test_failed_bulk_insert_keeps_ids_of_written_documents_only(mongoengine_db: Any) -> None:
    generator = frozen_generator()

    class Place(me.Document):
        id = LocalityUUIDField(primary_key=True, generator=generator)
        name = me.StringField()

    # The third id of the batch is already taken: an ordered insert writes two, then stops.
    third = LocalityUUID.from_fields(
        counter=3 * SPREAD_STEP % 2**32, pid=generator.pid, node=generator.node, timestamp_ms=T
    )
    Place._get_collection().insert_one({"_id": Binary(third.bytes, 4), "name": "existing"})
    docs = [Place(name=f"p{i}") for i in range(4)]
    with pytest.raises(me.NotUniqueError) as info:
        Place.objects.insert(docs)
    assert isinstance(info.value, BulkNotUniqueError)
    assert isinstance(info.value, me.errors.BulkWriteError)
    assert [doc.id is not None for doc in docs] == [True, True, False, False]
    assert [doc._created for doc in docs] == [False, False, True, True]
    assert [d["name"] for d in raw(Place)] == ["existing", "p0", "p1"]
    # A written document saves as an update; the others insert with fresh ids.
    docs[0].name = "p0 renamed"
    docs[0].save()
    docs[2].save()
    assert [d["name"] for d in raw(Place)] == ["existing", "p0 renamed", "p1", "p2"]
    assert raw(Place)[0]["_id"] == Binary(third.bytes, 4)


def test_bulk_insert_rejects_foreign_documents_before_generating(mongoengine_db: Any) -> None:
    field = CountingField()

    class Ticket(me.Document):
        number = field

    class Other(me.Document):
        name = me.StringField()

    with pytest.raises(me.OperationError, match="aren't instances of"):
        Ticket.objects.insert([Ticket(), Other()])  # type: ignore[list-item]
    assert field.calls == []


class ScriptedUniqueField(GeneratedField):
    """Hands out scripted values; retries once when its own value is already stored."""

    collision_retries = 1

    def __init__(self, values: list[int], **kwargs: Any) -> None:
        self.script = list(values)
        self.released: list[Any] = []
        super().__init__(unique=True, **kwargs)

    def new_values(self, write: Write, count: int) -> list[Any]:
        return [self.script.pop(0) for _ in range(count)]

    def is_collision(self, write: Write, error: Exception, value: Any) -> bool:
        return write.collection.find_one({self.db_field: value}) is not None

    def release_values(self, write: Write, values: list[Any]) -> None:
        self.released.extend(values)


def test_each_field_has_its_own_retry_budget(mongoengine_db: Any) -> None:
    class Pair(me.Document):
        a = ScriptedUniqueField([1, 2])
        b = ScriptedUniqueField([1, 2])

    Pair._get_collection().insert_many([{"a": 1, "b": 90}, {"a": 91, "b": 1}])
    pair = Pair().save()  # a collides once, then b collides once: one retry each
    assert (pair.a, pair.b) == (2, 2)
    assert Pair.a.script == Pair.b.script == []
    assert Pair.objects(a=2, b=2).count() == 1


def test_a_failed_save_releases_generated_values_except_the_collided_one(
    mongoengine_db: Any,
) -> None:
    class Pair(me.Document):
        a = ScriptedUniqueField([1, 1])
        b = ScriptedUniqueField([7, 8])
        name = me.StringField(unique=True)

    Pair._get_collection().insert_one({"a": 1, "b": 90, "name": "x"})
    with pytest.raises(me.NotUniqueError) as info:
        Pair(name="y").save()
    assert info.value.__cause__ is not info.value  # the default: the last error, as it was
    # a's two values collided (kept: in use); b's value was never written: released.
    assert Pair.a.released == []
    assert Pair.b.released == [7]
    # Another unique index: nothing claimed, every generated value released.
    Pair.a.script, Pair.b.script = [5], [6]
    with pytest.raises(me.NotUniqueError):
        Pair(name="x").save()
    assert (Pair.a.released, Pair.b.released) == ([5], [7, 6])
    assert Pair.objects.count() == 1


class Note(me.Document):
    """Referenced by Entry with cascade, to fail after Entry itself is written."""

    text = me.StringField(unique=True)


def test_a_failure_after_the_write_keeps_the_id_and_never_writes_twice(
    mongoengine_db: Any,
) -> None:
    class Entry(me.Document):
        id = LocalityUUIDField(primary_key=True)
        note = me.ReferenceField(Note)

    Note(text="taken").save()
    clashing = Note(text="free").save()
    clashing.text = "taken"  # the cascade's update of this note will hit the unique index
    entry = Entry(note=clashing)
    with pytest.raises(me.NotUniqueError):
        entry.save(cascade=True)
    # Entry was written before the cascade failed: its id stays, and no retry wrote it again.
    assert entry.id is not None
    assert [doc["_id"] for doc in raw(Entry)] == [Binary(entry.id.bytes, 4)]
    clashing.text = "free again"
    entry.save(cascade=True)
    assert [doc["_id"] for doc in raw(Entry)] == [Binary(entry.id.bytes, 4)]


class StampMixin:
    """A plain mixin declaring a generated field."""

    ref = LocalityUUIDField()


def test_a_field_declared_on_a_plain_mixin_is_generated(mongoengine_db: Any) -> None:
    class Stamped(StampMixin, me.Document):
        name = me.StringField()

    one = Stamped(name="a").save()
    many = Stamped.objects.insert([Stamped(name="b"), Stamped(name="c")])
    assert all(type(doc.ref) is LocalityUUID for doc in [one, *many])
    assert [type(doc["ref"]) for doc in raw(Stamped)] == [Binary] * 3


def test_inserting_a_subclass_through_the_parent_generates(mongoengine_db: Any) -> None:
    class Root(me.Document):
        meta = {"allow_inheritance": True}
        name = me.StringField()

    class Leaf(Root):
        ref = LocalityUUIDField()

    Root.objects.insert([Leaf(name="a"), Root(name="b")])
    stored = {doc["name"]: doc for doc in raw(Root)}
    assert isinstance(stored["a"]["ref"], Binary)
    assert "ref" not in stored["b"]


def test_serialising_another_document_during_a_save_never_gives_it_an_id(
    mongoengine_db: Any,
) -> None:
    # A post_save handler logging an unsaved document: to_json() runs inside Order's save().
    from mongoengine import signals

    class Invoice(me.Document):
        id = LocalityUUIDField(primary_key=True)
        text = me.StringField()

    class Order(me.Document):
        id = LocalityUUIDField(primary_key=True)

    pending = Invoice(text="for the order")
    logged: list[str] = []

    def log_invoice(sender: Any, document: Any, **kwargs: Any) -> None:
        logged.append(pending.to_json(json_options=RELAXED_JSON_OPTIONS))

    signals.post_save.connect(log_invoice, sender=Order)
    try:
        Order().save()
    finally:
        signals.post_save.disconnect(log_invoice, sender=Order)
    assert logged == ['{"text": "for the order"}']
    assert pending.id is None
    pending.save()
    assert [doc["text"] for doc in raw(Invoice)] == ["for the order"]


# -- where save() fills the values in -----------------------------------------------------------


def test_values_are_made_at_the_write_after_the_hooks_that_precede_it(
    mongoengine_db: Any,
) -> None:
    from mongoengine import signals

    seen: list[tuple[str, Any, Any]] = []

    class Ticket(me.Document):
        id = LocalityUUIDField(primary_key=True)
        number = CountingField()

        def clean(self) -> None:
            seen.append(("clean", self.id, self.number))

    def record(stage: str) -> Any:
        def handler(sender: Any, document: Any, **kwargs: Any) -> None:
            seen.append((stage, document.id, document.number))

        return handler

    handlers = {
        name: record(name) for name in ("pre_save", "pre_save_post_validation", "post_save")
    }
    for name, handler in handlers.items():
        getattr(signals, name).connect(handler, sender=Ticket)
    try:
        ticket = Ticket().save()
    finally:
        for name, handler in handlers.items():
            getattr(signals, name).disconnect(handler, sender=Ticket)
    assert [stage for stage, _, _ in seen] == [
        "pre_save",
        "clean",
        "pre_save_post_validation",
        "post_save",
    ]
    # Values are made at the write itself, after every hook that runs before it.
    assert seen[0][1:] == seen[1][1:] == seen[2][1:] == (None, None)
    assert seen[3][1:] == (ticket.id, 1)
    assert type(ticket.id) is LocalityUUID
    assert raw(Ticket) == [{"_id": Binary(ticket.id.bytes, 4), "number": 1}]


@pytest.mark.parametrize(
    ("args", "kwargs"),
    [((), {"validate": False}), ((False, False), {}), ((True,), {"validate": False})],
    ids=["keyword", "positional", "mixed"],
)
def test_save_without_validation_still_generates_and_skips_validation(
    mongoengine_db: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> None:
    class Place(me.Document):
        id = LocalityUUIDField(primary_key=True)
        name = me.StringField(required=True)

    place = Place()
    with pytest.raises(me.ValidationError, match="name"):
        place.save()
    assert place.id is None
    place.save(*args, **kwargs)  # MongoEngine writes it without the required name
    assert type(place.id) is LocalityUUID
    assert raw(Place) == [{"_id": Binary(place.id.bytes, 4)}]


def test_a_validate_override_gets_the_values_with_or_without_super(mongoengine_db: Any) -> None:
    field = CountingField()
    calls: list[str] = []

    class Base(me.Document):
        meta = {"allow_inheritance": True}
        number = field
        name = me.StringField(required=True)

    class Calls(Base):
        def validate(self, clean: bool = True) -> None:
            calls.append(f"calls super, number={self.number}")
            super().validate(clean)

    class Skips(Base):
        def validate(self, clean: bool = True) -> None:
            calls.append(f"skips super, number={self.number}")

    class Loose:
        def validate(self, clean: bool = True) -> None:
            calls.append(f"mixin, number={self.number}")  # type: ignore[attr-defined]

    class Mixed(Loose, Base):
        pass

    with pytest.raises(me.ValidationError, match="name"):
        Calls().save()
    assert calls == ["calls super, number=None"]
    saved = [Calls(name="a").save(), Skips().save(), Mixed().save()]
    assert calls[1:] == [
        "calls super, number=None",
        "skips super, number=None",
        "mixin, number=None",
    ]
    # One value each, from one new_values() call each: never filled twice.
    assert [doc.number for doc in saved] == [1, 2, 3]
    assert [count for _, count in field.calls] == [1, 1, 1]
    assert sorted(doc["number"] for doc in raw(Base)) == [1, 2, 3]


@pytest.mark.parametrize("signal_name", ["pre_save", "pre_save_post_validation"])
def test_validating_another_document_during_a_save_never_gives_it_an_id(
    mongoengine_db: Any, signal_name: str
) -> None:
    from mongoengine import signals

    signal = getattr(signals, signal_name)

    class Place(me.Document):
        id = LocalityUUIDField(primary_key=True)
        name = me.StringField()

    other = Place(name="other")
    checked: list[Any] = []

    def check_other(sender: Any, document: Any, **kwargs: Any) -> None:
        if document is not other:
            other.validate()
            checked.append((other.id, other.to_mongo().to_dict()))

    signal.connect(check_other, sender=Place)
    try:
        saved = Place(name="saved").save()
    finally:
        signal.disconnect(check_other, sender=Place)
    assert checked == [(None, {"name": "other"})]
    assert other.id is None
    assert raw(Place) == [{"_id": Binary(saved.id.bytes, 4), "name": "saved"}]


def test_a_save_override_that_skips_validation_still_generates(mongoengine_db: Any) -> None:
    class Fast(me.Document):
        id = LocalityUUIDField(primary_key=True)
        name = me.StringField()

        def save(self, *args: Any, **kwargs: Any) -> Any:
            kwargs["validate"] = False  # "we validate at the API layer"
            return super().save(*args, **kwargs)

    fast = Fast(name="x").save()
    assert type(fast.id) is LocalityUUID
    assert raw(Fast) == [{"_id": Binary(fast.id.bytes, 4), "name": "x"}]


def test_a_pre_save_handler_that_catches_a_validation_error_changes_nothing(
    mongoengine_db: Any,
) -> None:
    from mongoengine import signals

    class Task(me.Document):
        id = LocalityUUIDField(primary_key=True)
        status = me.StringField(choices=["draft", "ready"], required=True)

    def default_status(sender: Any, document: Any, **kwargs: Any) -> None:
        try:
            document.validate()
        except me.ValidationError:
            document.status = "draft"

    signals.pre_save.connect(default_status, sender=Task)
    try:
        task = Task().save()
    finally:
        signals.pre_save.disconnect(default_status, sender=Task)
    assert type(task.id) is LocalityUUID
    assert raw(Task) == [{"_id": Binary(task.id.bytes, 4), "status": "draft"}]


def test_cascading_passes_on_the_callers_arguments_not_the_forced_insert(
    mongoengine_db: Any,
) -> None:
    class Note(me.Document):
        text = me.StringField(max_length=3)

    class Entry(me.Document):
        id = LocalityUUIDField(primary_key=True)
        note = me.ReferenceField(Note)

    note = Note(text="ok").save()
    note.text = "new"
    # The entry's key is generated, so the entry is force-inserted; the note already exists
    # and is updated by the cascade, as MongoEngine does.
    entry = Entry(note=note).save(cascade=True)
    note.text = "far too long"  # and save(validate=False) reaches the cascade unchanged
    second = Entry(note=note).save(validate=False, cascade=True)
    assert [doc["text"] for doc in Note._get_collection().find()] == ["far too long"]
    assert sorted(doc["_id"] for doc in raw(Entry)) == sorted(
        [Binary(entry.id.bytes, 4), Binary(second.id.bytes, 4)]
    )


def test_a_save_override_with_its_own_positional_parameters(mongoengine_db: Any) -> None:
    seen: list[tuple[Any, Any, Any]] = []

    class Audited(me.Document):
        id = LocalityUUIDField(primary_key=True)
        name = me.StringField()

        def save(self, actor: Any = None, reason: Any = None, **kwargs: Any) -> Any:
            seen.append((actor, reason, kwargs.get("force_insert")))
            return super().save(**kwargs)

    doc = Audited(name="a")
    doc.save("alice", "create")
    doc.name = "b"
    doc.save("bob", "rename")
    assert seen == [("alice", "create", None), ("bob", "rename", None)]
    assert raw(Audited) == [{"_id": Binary(doc.id.bytes, 4), "name": "b"}]


@pytest.mark.parametrize(
    ("args", "kwargs"),
    [((), {}), ((False,), {}), ((), {"force_insert": False}), ((False, True), {})],
    ids=["none", "positional", "keyword", "two positional"],
)
def test_force_insert_reaches_a_forwarding_override_once(
    mongoengine_db: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> None:
    class Place(me.Document):
        id = LocalityUUIDField(primary_key=True)

        def save(self, *args: Any, **kwargs: Any) -> Any:
            return super().save(*args, **kwargs)

    place = Place().save(*args, **kwargs)
    assert raw(Place) == [{"_id": Binary(place.id.bytes, 4)}]


def test_a_to_mongo_override_is_filled_before(mongoengine_db: Any) -> None:
    class Stamped(me.Document):
        meta = {"allow_inheritance": True}
        id = LocalityUUIDField(primary_key=True)

    class Labelled(Stamped):
        def to_mongo(self, *args: Any, **kwargs: Any) -> Any:
            label = f"id given: {self.id is not None}"  # before MongoEngine's to_mongo()
            son = super().to_mongo(*args, **kwargs)
            son["label"] = label
            return son

    labelled = Labelled().save()
    assert raw(Stamped) == [
        {"_id": Binary(labelled.id.bytes, 4), "_cls": "Stamped.Labelled", "label": "id given: True"}
    ]


def test_to_mongo_passes_every_argument_on(mongoengine_db: Any) -> None:
    class Place(me.Document):
        id = LocalityUUIDField(primary_key=True)
        name = me.StringField(db_field="n")
        city = me.StringField(db_field="c")

    place = Place(name="a", city="b").save()
    calls = [
        ((), {}),
        ((False,), {}),
        ((), {"use_db_field": False}),
        ((True, ["name"]), {}),
        ((), {"fields": ["city"], "use_db_field": False}),
    ]
    for args, kwargs in calls:
        expected = me.Document.to_mongo(place, *args, **kwargs)
        # With fields that leave the key out, MongoEngine copies the attribute into _id; the
        # key's model gives its stored form (CachedReferenceField stores this).
        expected["_id"] = Binary(place.id.bytes, 4)
        found = place.to_mongo(*args, **kwargs)
        assert found == expected
        assert type(found["_id"]) is Binary
    assert set(place.to_mongo(False)) == {"_id", "id", "name", "city"}  # names, not db_fields
    assert set(place.to_mongo(fields=["name"])) == {"_id", "n"}


def test_a_save_failing_before_serialising_leaves_no_value(mongoengine_db: Any) -> None:
    class Place(me.Document):
        id = LocalityUUIDField(primary_key=True)
        name = me.StringField(required=True)

    place = Place()
    with pytest.raises(me.ValidationError):
        place.save()  # fails before serialising: no value, and nothing left on the document
    assert place.to_mongo().to_dict() == {}
    assert place.id is None
    place.name = "a"
    place.save()
    assert raw(Place) == [{"_id": Binary(place.id.bytes, 4), "name": "a"}]


def test_a_nested_save_of_the_same_document_leaves_the_outer_one_filling(
    mongoengine_db: Any,
) -> None:
    # A pre_save handler saving the same document again, which fails before serialising: the
    # outer save() still fills its values in.
    from mongoengine import signals

    class Place(me.Document):
        id = LocalityUUIDField(primary_key=True)
        ref = LocalityUUIDField()

    depth: list[int] = []

    def resave(sender: Any, document: Any, **kwargs: Any) -> None:
        if depth:
            raise RuntimeError("nested save refused")
        depth.append(1)
        with pytest.raises(RuntimeError, match="nested save refused"):
            document.save()

    signals.pre_save.connect(resave, sender=Place)
    try:
        place = Place().save()
    finally:
        signals.pre_save.disconnect(resave, sender=Place)
    assert raw(Place) == [{"_id": Binary(place.id.bytes, 4), "ref": Binary(place.ref.bytes, 4)}]


@pytest.mark.parametrize(
    "args", [(), (False,), (True,), (False, False)], ids=["none", "false", "true", "two"]
)
def test_a_save_wrapped_by_a_decorator_without_wraps(
    mongoengine_db: Any, args: tuple[Any, ...]
) -> None:
    def logged(method: Any) -> Any:
        def wrapper(*args: Any, **kwargs: Any) -> Any:  # no functools.wraps: no self visible
            return method(*args, **kwargs)

        return wrapper

    class Place(me.Document):
        id = LocalityUUIDField(primary_key=True)

        @logged
        def save(self, *args: Any, **kwargs: Any) -> Any:
            return super().save(*args, **kwargs)

    place = Place().save(*args)
    assert raw(Place) == [{"_id": Binary(place.id.bytes, 4)}]


def test_the_callers_cascade_kwargs_decide_the_cascades_force_insert(mongoengine_db: Any) -> None:
    class Note(me.Document):
        text = me.StringField()

    class Entry(me.Document):
        id = LocalityUUIDField(primary_key=True)
        note = me.ReferenceField(Note)

    note = Note(text="a").save()
    note.text = "b"
    entry = Entry(note=note)
    with pytest.raises(me.NotUniqueError):  # the caller asked to insert the note: it exists
        entry.save(cascade=True, cascade_kwargs={"force_insert": True})
    assert [doc["text"] for doc in Note._get_collection().find()] == ["a"]
    assert raw(Entry) == [{"_id": Binary(entry.id.bytes, 4), "note": note.id}]


# -- a field of the user's, as the field contract describes it ----------------------------------


class SlugField(GeneratedField):
    """``<name>-<n>``: reads the document's ``name``, which it says (``depends_on``)."""

    def __init__(self, **kwargs: Any) -> None:
        self.handed = 0
        super().__init__(**kwargs)

    @property
    def depends_on(self) -> tuple[str, ...]:
        return ("name",)

    def new_values(self, write: Write, count: int) -> list[Any]:
        self.handed += count
        first = self.handed - count + 1
        return [f"{doc.name}-{first + n}" for n, doc in enumerate(write.documents)]


def test_a_field_reads_the_values_it_depends_on_on_every_write(mongoengine_db: Any) -> None:
    """Probe BD: an upsert and a backfill, which have no document, hand the field holders of
    the values it depends on; those read ``doc.name`` as None (the field stored ``None-3``):
    they read as a document's attributes now, on every path."""

    class Page(me.Document):
        name = me.StringField()
        owner = me.StringField()  # a field named as the holder's own attribute was
        slug = SlugField(unique=True)

    Page(name="saved").save()
    Page.objects.insert([Page(name="bulk")])
    Page.objects(name="upserted").update_one(set__owner="o", upsert=True)
    Page._get_collection().insert_one({"name": "stored"})
    backfill(Page)
    assert sorted((d["name"], d["slug"]) for d in raw(Page)) == [
        ("bulk", "bulk-2"),
        ("saved", "saved-1"),
        ("stored", "stored-4"),
        ("upserted", "upserted-3"),
    ]


class BinaryKeyField(GeneratedField):
    """A UUID key stored as Binary subtype 4 (``stored_form_differs``), without ``as_string``."""

    stored_form_differs = True

    def new_values(self, write: Write, count: int) -> list[Any]:
        return [uuid.uuid4() for _ in range(count)]

    def to_mongo(self, value: Any) -> Any:
        return Binary(value.bytes, 4)

    def to_python(self, value: Any) -> Any:
        return value.as_uuid() if isinstance(value, Binary) else value


def test_a_key_field_whose_stored_form_differs_loads_a_decoded_key(mongoengine_db: Any) -> None:
    """Probe BD: a key read as a ``uuid.UUID`` (a server's driver decodes Binary subtype 4 so
    under ``standard``; ``from_json()`` of a raw row does) raised AttributeError for a field of
    the user's: the write path read ``as_string``, an option of the package's UUID fields."""

    class Thing(me.Document):
        id = BinaryKeyField(primary_key=True)
        name = me.StringField()

    thing = Thing(name="a").save()
    for loaded in (
        Thing._from_son({"_id": thing.id, "name": "a"}),
        Thing.from_json(
            json_util.dumps(raw_collection(Thing).find_one()),
            json_options=json_util.JSONOptions(uuid_representation=UuidRepresentation.STANDARD),
        ),
    ):
        loaded.name = "b"
        loaded.save()
    assert raw(Thing) == [{"_id": Binary(thing.id.bytes, 4), "name": "b"}]


@pytest.mark.parametrize("returned", [[], [None], None, [1, 2]], ids=repr)
def test_a_field_breaking_the_contract_is_told_before_any_write(
    mongoengine_db: Any, returned: Any
) -> None:
    """Probe BD: ``new_values()`` returning the wrong count raised zip()'s error (or too many
    values to unpack), and None values were stored as null (left out by a bulk insert)."""

    class Broken(GeneratedField):
        def new_values(self, write: Write, count: int) -> Any:
            return returned

    class Item(me.Document):
        made = Broken()

    expected = rf"Item\.made: new_values\(\) returned {re.escape(repr(returned))} for 1 document"
    with pytest.raises(TypeError, match=expected):
        Item().save()
    with pytest.raises(TypeError, match=expected):
        Item.objects.insert([Item()])
    assert raw(Item) == []


def test_a_field_may_return_its_values_as_any_iterable(mongoengine_db: Any) -> None:
    """Review P: the contract's check first took only lists and tuples (a generator of the
    right length had worked)."""

    class Counted(GeneratedField):
        def new_values(self, write: Write, count: int) -> Any:
            return (f"v{n}" for n in range(count))

    class Item(me.Document):
        made = Counted()

    Item().save()
    Item.objects.insert([Item(), Item()])
    assert sorted(d["made"] for d in raw(Item)) == ["v0", "v0", "v1"]
