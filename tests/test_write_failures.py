"""Failures and assigned values beyond the exhaustive fault harness (test_faults_exhaustive).

The save() of an existing document under a lost reply, interrupts after a write was applied,
values a user assigns outside a new document's save(), a failed save_condition, and a scoped
counter without a document (upserts, backfill). Each test checks the raw stored documents.
"""

from __future__ import annotations

import contextlib
import itertools
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import mongoengine as me
import pymongo.errors
import pytest

from mongoengine_ids import RandomUniqueField, SequenceField, UUID4Field, backfill
from mongoengine_ids.sequence.field import CounterStore
from mongoengine_ids.testing import connected_threadsafe

#: An application's retries after a ConnectionFailure (as in test_faults_exhaustive.py).
RETRIES = 3


class FailOnce:
    """A hook failing the first call of ``collection.method`` once armed: ``before`` (never
    applied), ``after`` (applied, reply lost) or ``interrupt`` (applied, then a
    KeyboardInterrupt while waiting for the reply)."""

    def __init__(self, collection: str, method: str, mode: str) -> None:
        self.target = (collection, method)
        self.mode = mode
        self.armed = False
        self.fired = False

    def __call__(self, collection: str, method: str, call: Callable[[], Any]) -> Any:
        if not self.armed or self.fired or (collection, method) != self.target:
            return call()
        self.fired = True
        if self.mode == "before":
            raise pymongo.errors.AutoReconnect("injected before the call")
        call()
        if self.mode == "interrupt":
            raise KeyboardInterrupt("injected after the call was applied")
        raise pymongo.errors.AutoReconnect("injected after the call was applied")


@contextlib.contextmanager
def connect_with(hook: Any) -> Iterator[Any]:
    with connected_threadsafe(hook=hook) as connect:
        yield connect()


def retry(call: Callable[[], Any]) -> Any:
    """As an application: again after a ConnectionFailure, at most RETRIES times."""
    for _ in range(RETRIES):
        try:
            return call()
        except pymongo.errors.ConnectionFailure:
            continue
    return call()


def shared(values: list[Any]) -> list[Any]:
    return [value for value, count in Counter(values).items() if value is not None and count > 1]


# -- save() of a loaded document that fills a field its stored copy lacks -------------------


class FwAdopted(me.Document):
    meta = {"collection": "fw_adopted"}
    note = me.StringField()
    code = SequenceField()


@pytest.mark.parametrize("mode", ["before", "after"])
def test_fill_of_a_loaded_document_is_stored_after_a_network_error_and_retry(mode: str) -> None:
    hook = FailOnce("fw_adopted", "update_one", mode)  # the conditional $set of the fill
    with connect_with(hook) as db:
        collection = db["fw_adopted"]
        collection.insert_one({"note": "old"})  # stored before the field was added
        document = FwAdopted.objects.get()
        document.note = "new"
        hook.armed = True
        retry(document.save)  # returns on the retry
        assert hook.fired
        (stored,) = list(collection.find())
        assert document.code is not None
        # The document is never stored without its generated value, and the Python document
        # holds the stored one.
        assert stored.get("code") == document.code, (stored, document.code)


# -- values assigned outside save() of a new document are not noted -------------------------


def _always(index: int) -> Callable[[int], int]:
    return lambda n: index


def _cycling() -> Callable[[int], int]:
    drawn = itertools.count()
    return lambda n: next(drawn) % n


class FwReservedUpsert(me.Document):
    meta = {"collection": "fw_reserved_upsert"}
    name = me.StringField()
    code = RandomUniqueField(min_value=1, max_value=1000, rng=_always(6), reserve_in="fw_codes_u")


class FwReservedLoaded(me.Document):
    meta = {"collection": "fw_reserved_loaded"}
    name = me.StringField()
    code = RandomUniqueField(min_value=1, max_value=1000, rng=_always(6), reserve_in="fw_codes_l")


def test_a_value_assigned_by_an_upsert_is_reserved(mongoengine_db: Any) -> None:
    # docs/random-unique.md: "Values you assign are reserved too".
    FwReservedUpsert.objects(name="a").upsert_one(set__code=7)
    with contextlib.suppress(me.NotUniqueError):  # 7 is the only value the rng draws
        FwReservedUpsert(name="b").save()
    codes = [doc.get("code") for doc in mongoengine_db["fw_reserved_upsert"].find()]
    assert not shared(codes), codes


def test_a_value_assigned_to_a_loaded_document_is_reserved(mongoengine_db: Any) -> None:
    mongoengine_db["fw_reserved_loaded"].insert_one({"name": "pre"})
    loaded = FwReservedLoaded.objects.get(name="pre")
    loaded.code = 7
    loaded.save()
    with contextlib.suppress(me.NotUniqueError):  # 7 is the only value the rng draws
        FwReservedLoaded(name="b").save()
    codes = [doc.get("code") for doc in mongoengine_db["fw_reserved_loaded"].find()]
    assert not shared(codes), codes


class FwCounted(me.Document):
    meta = {"collection": "fw_counted"}
    name = me.StringField()
    number = SequenceField()


def test_a_value_assigned_by_an_upsert_moves_the_counter(mongoengine_db: Any) -> None:
    # docs/sequence.md: an explicit value moves the counter with $max "so no later lease hands
    # it out".
    FwCounted.objects(name="x").upsert_one(set__number=3)
    for _ in range(3):
        FwCounted(name="g").save()
    numbers = [doc["number"] for doc in mongoengine_db["fw_counted"].find()]
    assert not shared(numbers), sorted(numbers)


def test_a_value_assigned_to_a_loaded_document_moves_the_counter(mongoengine_db: Any) -> None:
    mongoengine_db["fw_counted"].insert_one({"name": "x", "number": 1})
    FwCounted.number.set_next_value(1)
    loaded = FwCounted.objects.get(name="x")
    loaded.number = 3
    loaded.save()
    for _ in range(3):
        FwCounted(name="g").save()
    numbers = [doc["number"] for doc in mongoengine_db["fw_counted"].find()]
    assert not shared(numbers), sorted(numbers)


# -- an interrupt after the insert was applied is taken for "nothing written" ---------------


class FwInterrupted(me.Document):
    meta = {"collection": "fw_interrupted"}
    name = me.StringField()
    code = RandomUniqueField(min_value=1, max_value=1000, rng=_always(6), reserve_in="fw_codes_i")


def test_an_interrupt_after_the_insert_keeps_the_reservation_of_the_stored_value() -> None:
    hook = FailOnce("fw_interrupted", "insert_one", "interrupt")
    with connect_with(hook) as db:
        hook.armed = True
        with pytest.raises(KeyboardInterrupt):
            FwInterrupted(name="a").save()
        hook.armed = False
        stored = {doc["code"] for doc in db["fw_interrupted"].find()}
        reserved = {doc["_id"] for doc in db["fw_codes_i"].find()}
        assert stored == {7}  # the insert was applied
        assert stored <= reserved, f"stored {stored}, reserved {reserved}"
        with contextlib.suppress(me.NotUniqueError):  # 7 is the only value the rng draws
            FwInterrupted(name="b").save()
        codes = [doc["code"] for doc in db["fw_interrupted"].find()]
        assert not shared(codes), codes


class FwInterruptedUUID(me.Document):
    meta = {"collection": "fw_interrupted_uuid"}
    name = me.StringField()
    code = UUID4Field()


def test_a_save_retried_after_an_interrupt_is_not_stored_twice() -> None:
    hook = FailOnce("fw_interrupted_uuid", "insert_one", "interrupt")
    with connect_with(hook) as db:
        document = FwInterruptedUUID(name="a")
        hook.armed = True
        with pytest.raises(KeyboardInterrupt):
            document.save()
        document.save()  # the task is run again with the same object
        names = [doc["name"] for doc in db["fw_interrupted_uuid"].find()]
        assert names == ["a"], names


class FwInterruptedBulk(me.Document):
    meta = {"collection": "fw_interrupted_bulk"}
    name = me.StringField()
    code = RandomUniqueField(
        min_value=1,
        max_value=2,
        max_retries=3,
        reserve_in="fw_codes_b",
        warn_collision_rate=1.0,
        rng=_cycling(),  # 1, 2, 1, 2...: the first two documents never collide
    )


def test_an_interrupt_after_a_bulk_insert_keeps_the_reservations_of_the_stored_values() -> None:
    hook = FailOnce("fw_interrupted_bulk", "insert_many", "interrupt")
    with connect_with(hook) as db:
        hook.armed = True
        with pytest.raises(KeyboardInterrupt):
            FwInterruptedBulk.objects.insert(
                [FwInterruptedBulk(name="a"), FwInterruptedBulk(name="b")]
            )
        hook.armed = False
        stored = {doc["code"] for doc in db["fw_interrupted_bulk"].find()}
        reserved = {doc["_id"] for doc in db["fw_codes_b"].find()}
        assert stored == {1, 2}  # the insert was applied; the space is full
        assert stored <= reserved, f"stored {stored}, reserved {reserved}"
        with contextlib.suppress(me.NotUniqueError):  # the space is full: must raise
            FwInterruptedBulk(name="c").save()
        codes = [doc["code"] for doc in db["fw_interrupted_bulk"].find()]
        assert not shared(codes), codes


# -- retry of a loaded document given a new embedded document (reserve_in) ------------------


class FwPart(me.EmbeddedDocument):
    code = RandomUniqueField(min_value=1, max_value=1000, reserve_in="fw_part_codes")


class FwBox(me.Document):
    meta = {"collection": "fw_box"}
    parts = me.ListField(me.EmbeddedDocumentField(FwPart))


@pytest.mark.parametrize("mode", ["before", "after"])
def test_a_retried_save_of_a_new_embedded_document_is_not_refused_as_a_duplicate(
    mode: str,
) -> None:
    hook = FailOnce("fw_box", "update_one", mode)
    with connect_with(hook) as db:
        FwBox().save()
        box = FwBox.objects.get()
        box.parts.append(FwPart())
        hook.armed = True
        retry(box.save)  # the retry raises NotUniqueError: its own reservation
        assert hook.fired
        (stored,) = list(db["fw_box"].find())
        assert [part["code"] for part in stored["parts"]] == [box.parts[0].code]


# -- an explicit value inside a block this process leased but has not installed yet ----------


class FwTicket(me.Document):
    meta = {"collection": "fw_tickets"}
    number = SequenceField(batch_size=10)
    who = me.StringField()


def test_an_explicit_value_in_a_lease_in_flight_is_never_generated(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # docs/sequence.md: "this process drops its leased blocks that contain it".
    leased, go = threading.Event(), threading.Event()
    lease = CounterStore.lease

    def reply_late(self: CounterStore, count: int) -> range:
        block = lease(self, count)
        if threading.current_thread().name == "fw-writer":  # the reply is on its way
            leased.set()
            go.wait(5)
        return block

    monkeypatch.setattr(CounterStore, "lease", reply_late)
    with connect_with(None) as db:
        writer = threading.Thread(target=lambda: FwTicket(who="t").save(), name="fw-writer")
        writer.start()
        assert leased.wait(5)  # the counter moved to 10; the block 1..10 is not installed yet
        FwTicket(who="explicit", number=5).save()
        go.set()
        writer.join()
        for _ in range(5):
            FwTicket(who="g").save()
        numbers = [doc["number"] for doc in db["fw_tickets"].find()]
        assert not shared(numbers), sorted(numbers)


class FwTicketA(me.Document):
    meta = {"collection": "fw_shared_tickets"}
    number = SequenceField(sequence_name="fw_shared", batch_size=10)
    who = me.StringField()


class FwTicketB(me.Document):
    meta = {"collection": "fw_shared_tickets"}
    number = SequenceField(sequence_name="fw_shared", batch_size=10)
    who = me.StringField()


def test_an_explicit_value_drops_every_block_of_this_process_holding_it(
    mongoengine_db: Any,
) -> None:
    FwTicketB(who="b").save()  # B's sequence leases 1..10
    FwTicketA(who="a", number=5).save()  # the same counter; only A's blocks are looked at
    for _ in range(5):
        FwTicketB(who="b").save()
    numbers = [doc["number"] for doc in mongoengine_db["fw_shared_tickets"].find()]
    assert not shared(numbers), sorted(numbers)


# -- save_condition: the fill of a loaded document is written although save() fails ----------


class FwConditioned(me.Document):
    meta = {"collection": "fw_conditioned"}
    version = me.IntField()
    note = me.StringField()
    code = SequenceField()


def test_a_save_refused_by_its_condition_writes_nothing(mongoengine_db: Any) -> None:
    collection = mongoengine_db["fw_conditioned"]
    collection.insert_one({"version": 1, "note": "old"})
    before = list(collection.find())
    loaded = FwConditioned.objects.get()
    loaded.note = "new"
    with pytest.raises(me.errors.SaveConditionError):
        loaded.save(save_condition={"version": 2})
    assert list(collection.find()) == before


# -- scoped SequenceField: backfill() and upserts crash ----------------------------------------


class FwInvoice(me.Document):
    meta = {"collection": "fw_invoices"}
    tenant = me.StringField()
    number = SequenceField(scope="tenant")


def test_backfill_of_a_scoped_sequence(mongoengine_db: Any) -> None:
    collection = mongoengine_db["fw_invoices"]
    collection.insert_many([{"tenant": "a"}, {"tenant": "b"}])
    assert backfill(FwInvoice) == 2  # AttributeError: 'Holder' object has no attribute '_fields'
    assert sorted((doc["tenant"], doc["number"]) for doc in collection.find()) == [
        ("a", 1),
        ("b", 1),
    ]


def test_upsert_of_a_scoped_sequence(mongoengine_db: Any) -> None:
    FwInvoice.objects(tenant="a").upsert_one(set__tenant="a")  # AttributeError likewise
    (stored,) = list(mongoengine_db["fw_invoices"].find())
    assert stored["number"] == 1
