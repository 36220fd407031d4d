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
from _write_support import raw_collection
from mongoengine.context_managers import switch_collection, switch_db

from mongoengine_ids import (
    LocalityUUIDField,
    RandomUniqueField,
    SequenceField,
    UUID4Field,
    UUID7Field,
    backfill,
)
from mongoengine_ids.errors import RetriesExhaustedError
from mongoengine_ids.sequence.field import DEFAULT_COLLECTION, CounterStore
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


def stored_without_ids(collection: Any) -> list[dict[str, Any]]:
    """The raw stored documents, without their ObjectId keys."""
    return [{k: v for k, v in doc.items() if k != "_id"} for doc in collection.find()]


def reservations(collection: Any) -> list[tuple[Any, str]]:
    """(value, ns) of each reservation stored in a ``reserve_in`` collection."""
    return [(doc["_id"], doc["ns"]) for doc in collection.find()]


def all_taken(attempts: int, proxy: str) -> str:
    """The message of the RetriesExhaustedError of a field whose every draw was taken."""
    taken = f"already taken in the proxy collection '{proxy}'"
    return f"all {attempts} attempts drew a value that was {taken}"


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
    with pytest.raises(RetriesExhaustedError, match=all_taken(17, "fw_codes_u")):
        FwReservedUpsert(name="b").save()  # 7 is the only value the rng draws
    stored = stored_without_ids(mongoengine_db["fw_reserved_upsert"])
    assert stored == [{"name": "a", "code": 7}]
    assert reservations(mongoengine_db["fw_codes_u"]) == [(7, "fw_reserved_upsert.code")]


def test_a_value_assigned_to_a_loaded_document_is_reserved(mongoengine_db: Any) -> None:
    mongoengine_db["fw_reserved_loaded"].insert_one({"name": "pre"})
    loaded = FwReservedLoaded.objects.get(name="pre")
    loaded.code = 7
    loaded.save()
    with pytest.raises(RetriesExhaustedError, match=all_taken(17, "fw_codes_l")):
        FwReservedLoaded(name="b").save()  # 7 is the only value the rng draws
    stored = stored_without_ids(mongoengine_db["fw_reserved_loaded"])
    assert stored == [{"name": "pre", "code": 7}]
    assert reservations(mongoengine_db["fw_codes_l"]) == [(7, "fw_reserved_loaded.code")]


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
        with pytest.raises(RetriesExhaustedError, match=all_taken(17, "fw_codes_i")):
            FwInterrupted(name="b").save()  # 7 is the only value the rng draws
        assert stored_without_ids(db["fw_interrupted"]) == [{"name": "a", "code": 7}]
        assert reservations(db["fw_codes_i"]) == [(7, "fw_interrupted.code")]


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
        with pytest.raises(RetriesExhaustedError, match=all_taken(4, "fw_codes_b")):
            FwInterruptedBulk(name="c").save()  # the space is full: must raise
        stored_docs = sorted(stored_without_ids(db["fw_interrupted_bulk"]), key=lambda d: d["code"])
        assert stored_docs == [{"name": "a", "code": 1}, {"name": "b", "code": 2}]
        ns = "fw_interrupted_bulk.code"
        assert sorted(reservations(db["fw_codes_b"])) == [(1, ns), (2, ns)]


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
    went: list[bool] = []  # what each go.wait() returned

    def reply_late(self: CounterStore, count: int) -> range:
        block = lease(self, count)
        if threading.current_thread().name == "fw-writer":  # the reply is on its way
            leased.set()
            went.append(go.wait(5))
        return block

    monkeypatch.setattr(CounterStore, "lease", reply_late)
    with connect_with(None) as db:
        writer = threading.Thread(target=lambda: FwTicket(who="t").save(), name="fw-writer")
        writer.start()
        assert leased.wait(5)  # the counter moved to 10; the block 1..10 is not installed yet
        FwTicket(who="explicit", number=5).save()
        go.set()
        writer.join(10)
        assert not writer.is_alive()
        for _ in range(5):
            FwTicket(who="g").save()
        # The block 1..10 holds 5: dropped when its reply came, so the writer leased again
        # (11..20: its second wait returned at once) and took 11; the 5 later saves 12..16.
        assert went == [True, True]
        stored = sorted((doc["number"], doc["who"]) for doc in db["fw_tickets"].find())
        assert stored == [(5, "explicit"), (11, "t"), *((n, "g") for n in range(12, 17))]


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


class FwKeyedConditioned(me.Document):
    meta = {"collection": "fw_keyed_conditioned"}
    id = SequenceField(primary_key=True, sequence_name="fw_keyed_conditioned")
    version = me.IntField(default=0)
    owner = me.StringField()


def test_a_conditional_save_after_a_lost_insert_never_reaches_the_holder_of_its_key() -> None:
    """Review CA-2: a loaded document given a new key (None, then made) whose insert was lost
    before it was sent, then saved with a save_condition: MongoEngine, taking it as stored,
    updated by the key, and the document holding it (imported past the counter) was written
    over. Its key is looked up first, as for update() and delete()."""
    hook = FailOnce("fw_keyed_conditioned", "insert_one", "before")
    with connect_with(hook) as db:
        db.fw_keyed_conditioned.insert_one({"_id": 5, "owner": "carol", "version": 0})
        carol = FwKeyedConditioned.objects.get(pk=5)
        db.fw_keyed_conditioned.insert_one({"_id": 1, "owner": "alice", "version": 0})
        carol.id = None  # a copy, under a key of its own
        hook.armed = True
        with pytest.raises(pymongo.errors.AutoReconnect):
            carol.save()
        assert carol.pk == 1  # made, before the counter knew the import
        carol.owner = "carol's copy"
        with pytest.raises(me.errors.OperationError, match="no attempt sent"):
            carol.save(save_condition={"version": 0})
        stored = sorted((doc["_id"], doc["owner"]) for doc in db.fw_keyed_conditioned.find())
        assert stored == [(1, "alice"), (5, "carol")]
        carol.save()  # without the condition: inserted, with a fresh key
        stored = sorted((doc["_id"], doc["owner"]) for doc in db.fw_keyed_conditioned.find())
        assert stored == [(1, "alice"), (2, "carol's copy"), (5, "carol")]


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


# -- bulk insert: partial failures, write concern, other errors, keys left to the driver ------


class Faults:
    """A hook failing the calls it is armed for, in order: each plan names a method (and a
    collection), how many matching calls to let through first, the error, and whether the
    call was applied (True: the reply is lost; "first": an insert_many of which only the first
    document was applied, as when pymongo sent a large insert as several commands)."""

    def __init__(self) -> None:
        self.plans: list[list[Any]] = []

    def arm(
        self, method: str, error: BaseException, *, applied: Any, collection: str, skip: int = 0
    ) -> None:
        self.plans.append([collection, method, error, applied, skip])

    def __call__(self, collection: str, method: str, call: Any) -> Any:
        for index, plan in enumerate(self.plans):
            if (plan[0], plan[1]) != (collection, method):
                continue
            if plan[4]:
                plan[4] -= 1
                return call()
            del self.plans[index]
            if plan[3] == "first":
                call.func(call.args[0][:1], *call.args[1:], **call.keywords)
            elif plan[3]:
                call()
            raise plan[2]
        return call()


LOST = pymongo.errors.AutoReconnect("injected: connection reset")


class FwBulk(me.Document):
    number = SequenceField()
    name = me.StringField()


def stored_numbers(model: type[me.Document]) -> list[tuple[Any, Any]]:
    return sorted((doc["name"], doc["number"]) for doc in model._get_collection().find())


@pytest.mark.parametrize("second", ["insert_many", "find_one"])
def test_a_bulk_insert_retried_twice_after_partial_landings_completes(second: str) -> None:
    faults = Faults()
    with connect_with(faults):
        docs = [FwBulk(name=f"n{i}") for i in range(3)]
        faults.arm("insert_many", LOST, applied="first", collection="fw_bulk")
        with pytest.raises(pymongo.errors.AutoReconnect):
            FwBulk.objects.insert(docs)
        assert stored_numbers(FwBulk) == [("n0", 1)]
        # The retry finds n0 stored; then its own insert (or the look-up of n1) loses its reply.
        if second == "insert_many":
            faults.arm("insert_many", LOST, applied=False, collection="fw_bulk")
        else:
            faults.arm("find_one", LOST, applied=True, collection="fw_bulk", skip=1)
        with pytest.raises(pymongo.errors.AutoReconnect):
            FwBulk.objects.insert(docs)
        # n0 is not yet counted written (the insert failed): the third attempt finishes it.
        assert [doc.number for doc in FwBulk.objects.insert(docs)] == [1, 2, 3]
        assert stored_numbers(FwBulk) == [("n0", 1), ("n1", 2), ("n2", 3)]
        assert not any(doc._created for doc in docs)


class FwBulkUnique(me.Document):
    number = SequenceField(unique=True)
    name = me.StringField()


def _with_write_concern_error(collection_name: str) -> Callable[..., Any]:
    """A hook whose first insert_many on ``collection_name`` also reports a write concern
    error, as a server does when the write concern timed out."""
    armed = [True]

    def hook(collection: str, method: str, call: Callable[[], Any]) -> Any:
        if (collection, method) != (collection_name, "insert_many") or not armed[0]:
            return call()
        armed[0] = False
        try:
            result = call()
        except pymongo.errors.BulkWriteError as error:
            details = error.details
        else:
            details = {"nInserted": len(call.args[0]), "writeErrors": []}  # type: ignore[attr-defined]
            del result
        details["writeConcernErrors"] = [
            {"code": 64, "errmsg": "waiting for replication timed out"}
        ]
        raise pymongo.errors.BulkWriteError(details)

    return hook


@pytest.mark.parametrize("collides", [False, True], ids=["clean", "beside_a_collision"])
def test_a_bulk_insert_whose_write_concern_failed_is_retried_without_copies(
    collides: bool,
) -> None:
    with connect_with(_with_write_concern_error("fw_bulk_unique")) as db:
        FwBulkUnique.ensure_indexes()
        if collides:
            db.fw_bulk_unique.insert_one({"number": 2, "name": "old"})  # the batch's 2nd value
        docs = [FwBulkUnique(name=f"n{i}") for i in range(3)]
        # Applied on the primary, not known to be replicated: an error (never swallowed by
        # the retry of a collision), and the outcome of every document is unknown.
        with pytest.raises(me.errors.BulkWriteError, match="waiting for replication"):
            FwBulkUnique.objects.insert(docs, write_concern={"w": "majority", "wtimeout": 1})
        assert all(doc._created for doc in docs)
        FwBulkUnique.objects.insert(docs)  # the application's retry
        stored = [doc for doc in db.fw_bulk_unique.find() if doc["name"] != "old"]
        assert sorted(doc["name"] for doc in stored) == ["n0", "n1", "n2"]
        numbers = [doc["number"] for doc in db.fw_bulk_unique.find()]
        assert len(numbers) == len(set(numbers))
        assert {doc.pk for doc in docs} == {doc["_id"] for doc in stored}


class FwPlace(me.Document):
    id = UUID4Field(primary_key=True)
    name = me.StringField()


def _scripted(*indexes: int) -> Callable[[int], int]:
    """The given indexes, then 0, 1, 2... (mod n)."""
    drawn = itertools.chain(indexes, itertools.count())
    return lambda n: next(drawn) % n


class FwReservedBulk(me.Document):
    # "a" and "b" draw indexes 0 and 1; "c" draws 0 again: free only if "a" lost its reservation.
    code = RandomUniqueField(digits=1, rng=_scripted(0, 1, 0), reserve_in="fw_bulk_codes")
    name = me.StringField()


# What pymongo raises for the second command of an insert it split (the first was applied),
# and what the application gets (MongoEngine wraps an OperationFailure).
AFTER_A_FIRST_COMMAND: list[tuple[BaseException, type[BaseException]]] = [
    (pymongo.errors.DocumentTooLarge("injected: too large"), pymongo.errors.DocumentTooLarge),
    (
        pymongo.errors.OperationFailure("injected: operation was interrupted", 11601),
        me.errors.OperationError,
    ),
    (pymongo.errors.InvalidOperation("injected: cannot encode"), pymongo.errors.InvalidOperation),
]


@pytest.mark.parametrize(
    ("error", "raised"), AFTER_A_FIRST_COMMAND, ids=lambda error: type(error).__name__
)
def test_a_bulk_insert_failing_after_a_first_command_keeps_the_stored_keys(
    error: BaseException, raised: type[BaseException]
) -> None:
    faults = Faults()
    with connect_with(faults) as db:
        docs = [FwPlace(name=f"n{i}") for i in range(3)]
        faults.arm("insert_many", error, applied="first", collection="fw_place")
        with pytest.raises(raised, match="injected"):
            FwPlace.objects.insert(docs)
        assert [doc["name"] for doc in db.fw_place.find()] == ["n0"]
        assert all(doc.pk is not None for doc in docs)  # kept: the outcome is unknown
        docs[0].name = "n0-renamed"
        docs[0].save()  # its own copy, not a second one
        FwPlace.objects.insert(docs[1:])
        assert sorted(doc["name"] for doc in db.fw_place.find()) == ["n0-renamed", "n1", "n2"]
        assert sorted(doc["_id"] for doc in raw_collection(db.fw_place).find()) == sorted(
            FwPlace._fields["id"].to_mongo(doc.pk) for doc in docs
        )


def test_a_bulk_insert_failing_after_a_first_command_keeps_the_reservations() -> None:
    faults = Faults()
    with connect_with(faults) as db:
        docs = [FwReservedBulk(name="a"), FwReservedBulk(name="b")]
        faults.arm(
            "insert_many",
            AFTER_A_FIRST_COMMAND[0][0],
            applied="first",
            collection="fw_reserved_bulk",
        )
        with pytest.raises(pymongo.errors.DocumentTooLarge):
            FwReservedBulk.objects.insert(docs)
        FwReservedBulk(name="c").save()
        codes = [doc["code"] for doc in db.fw_reserved_bulk.find()]
        assert len(codes) == 2
        assert len(set(codes)) == 2  # "c" did not get the code "a" is stored with


class FwStringKeyed(me.Document):
    id = me.StringField(primary_key=True)
    code = SequenceField(unique=True)
    name = me.StringField()


@pytest.mark.parametrize("how", ["insert", "save"])
def test_a_key_left_to_the_driver_is_stored_once_after_a_lost_reply(how: str) -> None:
    method = "insert_many" if how == "insert" else "insert_one"
    hook = FailOnce("fw_string_keyed", method, "after")
    with connect_with(hook) as db:
        doc = FwStringKeyed(name="a")
        hook.armed = True
        if how == "insert":
            retry(lambda: FwStringKeyed.objects.insert([doc]))
        else:
            retry(lambda: doc.save(validate=False))  # a key is required by validate()
        assert hook.fired
        (stored,) = db.fw_string_keyed.find()
        assert (stored["name"], stored["code"]) == ("a", 1)
        assert doc.pk == stored["_id"]


@pytest.mark.parametrize("errmsg", ["not authorized on db", "E11000 duplicate key error"])
def test_an_operation_failure_of_a_bulk_insert_is_mongoengines_error(errmsg: str) -> None:
    faults = Faults()
    with connect_with(faults):
        faults.arm(
            "insert_many",
            pymongo.errors.OperationFailure(errmsg, 13),
            applied=False,
            collection="fw_bulk",
        )
        expected = me.errors.NotUniqueError if "E11000" in errmsg else me.errors.OperationError
        with pytest.raises(expected, match=errmsg):
            FwBulk.objects.insert(FwBulk(name="x"))


@pytest.mark.parametrize("load_bulk", [True, False])
def test_a_bulk_insert_retried_after_its_reload_failed_returns_the_stored_documents(
    load_bulk: bool,
) -> None:
    # The documents are written; then reloading them (load_bulk) loses its reply, or (without
    # load_bulk) the insert's own reply is lost: the application retries the same call.
    faults = Faults()
    with connect_with(faults) as db:
        docs = [FwBulk(name=f"r{i}") for i in range(3)]
        if load_bulk:
            faults.arm("getMore", LOST, applied=True, collection="fw_bulk")
        else:
            faults.arm("insert_many", LOST, applied=True, collection="fw_bulk")
        with pytest.raises(pymongo.errors.AutoReconnect):
            FwBulk.objects.insert(docs, load_bulk=load_bulk)
        again = FwBulk.objects.insert(docs, load_bulk=load_bulk)
        assert stored_numbers(FwBulk) == [("r0", 1), ("r1", 2), ("r2", 3)]
        if load_bulk:
            assert [(doc.name, doc.number) for doc in again] == [("r0", 1), ("r1", 2), ("r2", 3)]
        else:
            assert again == [doc.pk for doc in docs]
        assert not any(doc._created for doc in docs)
        # Counted stored once the call returned: a new insert of a saved document is refused.
        with pytest.raises(me.errors.OperationError, match="Some documents have ObjectIds"):
            FwBulk.objects.insert(docs[:1])
        assert db.fw_bulk.count_documents({}) == 3


class FwReservedExtra(me.Document):
    code = RandomUniqueField(digits=12, reserve_in="fw_extra_codes")
    extra = me.DictField()


class _Unencodable:
    pass


@pytest.mark.parametrize("how", ["save", "insert"])
def test_a_write_that_sends_nothing_releases_its_reservation(mongoengine_db: Any, how: str) -> None:
    # The driver cannot encode the document: nothing was sent (none of its keys is stored).
    doc = FwReservedExtra(extra={"x": _Unencodable()})
    write = (
        (lambda: doc.save(validate=False))
        if how == "save"
        else (lambda: FwReservedExtra.objects.insert([doc]))
    )
    with pytest.raises(Exception, match="cannot encode"):
        write()
    assert doc.code is None
    assert list(mongoengine_db.fw_reserved_extra.find()) == []
    assert list(mongoengine_db.fw_extra_codes.find()) == []


_KEYS: dict[str, Callable[[], Any]] = {
    "string": lambda: me.StringField(primary_key=True),
    "int": lambda: me.IntField(primary_key=True),
    "long": lambda: me.LongField(primary_key=True),
    "decimal": lambda: me.DecimalField(primary_key=True),
    "float": lambda: me.FloatField(primary_key=True),
    "binary": lambda: me.BinaryField(primary_key=True),
    "datetime": lambda: me.DateTimeField(primary_key=True),
    "date": lambda: me.DateField(primary_key=True),
    "uuid_text": lambda: me.UUIDField(primary_key=True, binary=False),
}


@pytest.mark.parametrize("how", ["insert", "save"])
@pytest.mark.parametrize("key", list(_KEYS))
def test_a_key_left_unset_is_stored_as_without_the_package(
    mongoengine_db: Any, key: str, how: str
) -> None:
    # Made before the write where the field sends an ObjectId as it is (a retry can then find
    # it); left to the driver where it does not; either way stored as MongoEngine stores it.
    outcomes = []
    for name, extra in ((f"FwPlainKey_{key}", {}), (f"FwOurKey_{key}", {"code": SequenceField()})):
        model = type(name, (me.Document,), {"id": _KEYS[key](), "name": me.StringField(), **extra})
        doc = model(name="a")
        try:
            if how == "insert":
                model.objects.insert([doc], load_bulk=False)
            else:
                doc.save(validate=False)  # a key is required by validate()
        except Exception as error:  # compared with MongoEngine's own outcome
            outcomes.append(("refused", type(error).__name__))
            continue
        stored = model._get_collection().find_one()
        outcomes.append(("stored", type(stored["_id"]).__name__, type(doc.pk).__name__))
        assert doc.name == "a"
    assert outcomes[1] == outcomes[0]


class FailNth:
    """A hook failing the n-th call of ``collection.method``: before it was sent, or after it
    was applied (the reply lost)."""

    def __init__(self, collection: str, method: str, n: int, mode: str) -> None:
        self.target, self.n, self.mode, self.calls = (collection, method), n, mode, 0

    def __call__(self, collection: str, method: str, call: Callable[[], Any]) -> Any:
        if (collection, method) != self.target:
            return call()
        self.calls += 1
        if self.calls != self.n:
            return call()
        if self.mode == "after":
            call()
        raise pymongo.errors.AutoReconnect(f"injected {self.mode} the call")


class FwBulkKeyed(me.Document):
    id = SequenceField(primary_key=True)
    name = me.StringField()


@pytest.mark.parametrize("mode", ["before", "after"])
def test_a_bulk_insert_retried_after_a_collision_then_a_lost_reply(mode: str) -> None:
    # The first insert_many meets a document holding 3: n0 and n1 are written, n2 gets a fresh
    # value, and the resend loses its reply. The application retries the same call.
    with connect_with(FailNth("fw_bulk_keyed", "insert_many", 2, mode)) as db:
        db.fw_bulk_keyed.insert_one({"_id": 3, "name": "older"})
        docs = [FwBulkKeyed(name=f"n{i}") for i in range(5)]
        with pytest.raises(pymongo.errors.AutoReconnect):
            FwBulkKeyed.objects.insert(docs, load_bulk=False)
        FwBulkKeyed.objects.insert(docs, load_bulk=False)
        stored = sorted((doc["name"], doc["_id"]) for doc in db.fw_bulk_keyed.find())
        assert [name for name, _ in stored] == ["n0", "n1", "n2", "n3", "n4", "older"]
        assert len({key for _, key in stored}) == 6
        assert sorted((doc.name, doc.pk) for doc in docs) == [s for s in stored if s[0] != "older"]


def _stored_then_reload_lost(faults: Faults, docs: list[Any]) -> None:
    """insert() writes every document, then reloading them (load_bulk) loses its reply."""
    faults.arm("getMore", LOST, applied=True, collection="fw_bulk")
    with pytest.raises(pymongo.errors.AutoReconnect):
        FwBulk.objects.insert(docs)


@pytest.mark.parametrize("load_bulk", [True, False])
def test_a_retry_after_the_stored_copy_was_deleted_stores_it_again(load_bulk: bool) -> None:
    faults = Faults()
    with connect_with(faults) as db:
        docs = [FwBulk(name="a"), FwBulk(name="b")]
        _stored_then_reload_lost(faults, docs)
        db.fw_bulk.delete_one({"name": "a"})  # another process deletes it meanwhile
        FwBulk.objects.insert(docs, load_bulk=load_bulk)  # looked up: "a" is stored again
        assert stored_numbers(FwBulk) == [("a", 1), ("b", 2)]


def test_documents_of_a_failed_insert_inserted_into_another_collection_are_stored_there() -> None:
    faults = Faults()
    with connect_with(faults):
        docs = [FwBulk(name="a"), FwBulk(name="b")]
        _stored_then_reload_lost(faults, docs)
        with switch_collection(FwBulk, "fw_bulk_archive") as Archive:
            Archive.objects.insert(docs, load_bulk=False)
            # Probe: the archive's counter was not told of 1 and 2, and handed them out again.
            Archive.objects.insert([Archive(name="c"), Archive(name="d")], load_bulk=False)
            assert stored_numbers(Archive) == [("a", 1), ("b", 2), ("c", 3), ("d", 4)]
        assert stored_numbers(FwBulk) == [("a", 1), ("b", 2)]


def test_a_value_changed_before_the_retry_of_a_deleted_document_is_told() -> None:
    """Probe: a document stored by the failed call, deleted since, was sent again with all its
    values taken as its own: a number the application assigned meanwhile was not told to the
    counter, which handed it out again."""
    faults = Faults()
    with connect_with(faults) as db:
        docs = [FwBulk(name="a"), FwBulk(name="b")]
        _stored_then_reload_lost(faults, docs)
        db.fw_bulk.delete_one({"name": "a"})
        docs[0].number = 7
        FwBulk.objects.insert(docs, load_bulk=False)
        FwBulk(name="c").save()
        assert stored_numbers(FwBulk) == [("a", 7), ("b", 2), ("c", 8)]


class FwReserved(me.Document):
    # Draws go round the space of 9, so that filling it never runs out of retries (random
    # draws did, about one run in seven); each value is drawn in turn, the stored one too.
    code = RandomUniqueField(digits=1, reserve_in="fw_codes", rng=_cycling())
    name = me.StringField()


def test_a_reserved_value_of_a_failed_insert_moved_to_another_database_is_reserved() -> None:
    """Probe: sent to another database, the values of a document the failed call stored were
    taken as reserved for it there: another document drew the same code. (To another
    collection of the same database, its value is reserved already, for the stored copy: a
    NotUniqueError, as for any value assigned that another document holds.)"""
    faults = Faults()
    with connected_threadsafe(hook=faults) as connect:
        connect()
        connect("archive")
        docs = [FwReserved(name="a")]
        faults.arm("getMore", LOST, applied=True, collection="fw_reserved")
        with pytest.raises(pymongo.errors.AutoReconnect):
            FwReserved.objects.insert(docs)
        taken = rf"\[{docs[0].code}\] already reserved"
        with (
            switch_collection(FwReserved, "fw_reserved_archive") as Moved,
            pytest.raises(me.NotUniqueError, match=taken),
        ):
            Moved.objects.insert(docs, load_bulk=False)
        with switch_db(FwReserved, "archive") as Archive:
            Archive.objects.insert(docs, load_bulk=False)
            for name in "bcdefghi":  # the rest of the space of 9
                Archive(name=name).save()
            codes = [doc["code"] for doc in Archive._get_collection().find()]
        assert sorted(codes) == list(range(1, 10))


# -- a retry whose document changed, or holds what == cannot compare ----------------------------

#: Primary keys, by field; None: MongoEngine's own ObjectId key, left to the driver (which the
#: package makes before the write in a model it hooks: each has a generated plain field too).
_RETRY_KEYS: dict[str, Callable[[], Any] | None] = {
    "SequenceField": lambda: SequenceField(primary_key=True),
    "RandomUniqueField": lambda: RandomUniqueField(primary_key=True, digits=6),
    "LocalityUUIDField": lambda: LocalityUUIDField(primary_key=True),
    "UUID4Field": lambda: UUID4Field(primary_key=True),
    "UUID7Field": lambda: UUID7Field(primary_key=True),
    "ObjectId": None,
}


def _retried_model(key: str, collection: str, **fields: Any) -> type[me.Document]:
    make_key = _RETRY_KEYS[key]
    key_field = {} if make_key is None else {"id": make_key()}
    attributes = {**key_field, "meta": {"collection": collection}, "tag": UUID4Field(), **fields}
    return type(collection, (me.Document,), attributes)


def _first_attempt_lost(hook: FailOnce, write: Callable[[], Any]) -> None:
    hook.armed = True
    with pytest.raises(pymongo.errors.AutoReconnect):
        write()


@pytest.mark.parametrize("bulk", [False, True], ids=["save", "insert"])
@pytest.mark.parametrize("key", list(_RETRY_KEYS))
def test_a_document_holding_nan_is_stored_once_after_a_lost_reply(key: str, bulk: bool) -> None:
    """The retry compares the stored copy with what was sent: a NaN double is the same BSON,
    though nan != nan in Python (a sequence or random key then took the copy for another
    document's and stored a second one)."""
    model = _retried_model(key, "fw_nan", value=me.FloatField(), name=me.StringField())
    hook = FailOnce("fw_nan", "insert_many" if bulk else "insert_one", "after")
    with connect_with(hook) as db:
        model(value=1.0, name="before").save()
        document = model(value=float("nan"), name="nan")
        write = (lambda: model.objects.insert([document])) if bulk else document.save
        _first_attempt_lost(hook, write)
        write()
        stored = list(raw_collection(db.fw_nan).find())
        assert sorted(doc["name"] for doc in stored) == ["before", "nan"]
        assert [doc["_id"] for doc in stored if doc["name"] == "nan"] == [
            document.to_mongo()["_id"]
        ]


@pytest.mark.parametrize("bulk", [False, True], ids=["save", "insert"])
@pytest.mark.parametrize("key", list(_RETRY_KEYS))
def test_a_value_edited_in_place_before_the_retry_is_stored_once(key: str, bulk: bool) -> None:
    """What was sent is remembered as a copy: a GeoPointField sends its list as it is, and an
    edit of it in place before the retry changed the version remembered, so the copy that
    landed matched none (a second one was stored)."""
    model = _retried_model(key, "fw_edited", loc=me.GeoPointField(), name=me.StringField())
    hook = FailOnce("fw_edited", "insert_many" if bulk else "insert_one", "after")
    with connect_with(hook) as db:
        model(loc=[0.0, 0.0], name="before").save()
        document = model(loc=[1.0, 2.0], name="edited")
        write = (lambda: model.objects.insert([document])) if bulk else document.save
        _first_attempt_lost(hook, write)
        document.loc[0] = 1.5
        if bulk:
            # The copy that landed is found; the edit would be left unwritten: refused (the
            # third review of session 38: it was counted written as it landed, silently).
            with pytest.raises(me.errors.OperationError, match="changed since: the retry"):
                write()
            landed = [d for d in raw_collection(db.fw_edited).find() if d["name"] == "edited"]
            assert [d["loc"] for d in landed] == [[1.0, 2.0]]
        # save() writes the current version over its own copy
        document.save()
        stored = [doc for doc in raw_collection(db.fw_edited).find() if doc["name"] == "edited"]
        assert [(doc["_id"], doc["loc"]) for doc in stored] == [
            (document.to_mongo()["_id"], [1.5, 2.0])
        ]


@pytest.mark.parametrize("mode", ["before", "after"])
@pytest.mark.parametrize("key", [key for key, field in _RETRY_KEYS.items() if field is not None])
def test_a_key_changed_to_another_documents_before_the_retry_is_refused(
    key: str, mode: str
) -> None:
    """A key no attempt sent cannot be that of a copy of this document that landed: the
    document holding it is another's, never replaced (a generated UUID key was taken as the
    document's own whatever its current value). A key of another field (an ObjectId) assigned
    this way is MongoEngine's upsert, with or without a lost reply."""
    model = _retried_model(key, "fw_rekeyed", name=me.StringField())
    hook = FailOnce("fw_rekeyed", "insert_one", mode)
    with connect_with(hook) as db:
        other = model(name="other").save()
        document = model(name="mine")
        _first_attempt_lost(hook, document.save)
        first_key = document.to_mongo()["_id"]
        document.id = other.id
        with pytest.raises(me.NotUniqueError):
            document.save()
        stored = sorted((doc["name"], doc["_id"]) for doc in raw_collection(db.fw_rekeyed).find())
        mine = [("mine", first_key)] if mode == "after" else []
        assert stored == sorted([("other", other.to_mongo()["_id"]), *mine])


class FwScoped(me.Document):
    meta = {"collection": "fw_scoped"}
    tenant = me.StringField(required=True)
    number = SequenceField(scope="tenant")


@pytest.mark.parametrize("mode", ["before", "after", "interrupt"])
@pytest.mark.parametrize("how", ["save", "insert"])
def test_a_number_kept_for_a_retry_moved_to_another_scope_is_told_to_that_scope(
    mode: str, how: str
) -> None:
    """A number kept from an attempt whose outcome is unknown, whose document the application
    then moves to another scope before retrying, is that scope's number too: its counter is
    told, and never hands it out again."""
    hook = FailOnce("fw_scoped", "insert_one" if how == "save" else "insert_many", mode)
    with connect_with(hook) as db:
        for _ in range(3):
            FwScoped(tenant="A").save()
        doc = FwScoped(tenant="A")
        write = doc.save if how == "save" else lambda: FwScoped.objects.insert([doc])
        hook.armed = True
        with pytest.raises((pymongo.errors.AutoReconnect, KeyboardInterrupt)):
            write()
        assert doc.number == 4  # A's next number, kept for the retry
        doc.tenant = "B"
        if how == "insert" and mode != "before":
            # A bulk insert's retry finds its earlier insert landed, in A: the move would be
            # left unwritten, and is refused (the third review of session 38: it was counted
            # written as sent, silently). save() writes it over its own copy.
            with pytest.raises(me.errors.OperationError, match="changed since: the retry"):
                write()
            assert sorted((d["tenant"], d["number"]) for d in db.fw_scoped.find())[-1] == (
                "A",
                4,
            )
            doc.save()
        else:
            write()
        later = [FwScoped(tenant="B").save().number for _ in range(4)]
        stored = sorted((d["tenant"], d["number"]) for d in db.fw_scoped.find())
        assert later == [5, 6, 7, 8]
        assert stored == [("A", 1), ("A", 2), ("A", 3), ("B", 4), *(("B", n) for n in later)]


@pytest.mark.parametrize("mode", ["after", "interrupt"])
def test_a_value_made_again_for_a_retry_whose_insert_landed_is_retried_on_a_collision(
    mode: str,
) -> None:
    """The earlier insert landed (its reply lost); the application clears the value and retries:
    the value is made again and replaces the stored one, and a collision of it is retried with
    a fresh value, as in any write. (It raised NotUniqueError, and the object kept another
    document's value: every later save failed.)"""
    draws = iter([4, 0, 1, 2, 3, 5, 6, 7, 8, 9])  # the value is the draw + 1: 5, then 1 (held)

    class FwRemade(me.Document):
        meta = {"collection": "fw_remade"}
        code = RandomUniqueField(min_value=1, max_value=10, rng=lambda n: next(draws))
        note = me.StringField()

    hook = FailOnce("fw_remade", "insert_one", mode)
    with connect_with(hook) as db:
        FwRemade.ensure_indexes()
        db.fw_remade.insert_one({"code": 1, "note": "other"})
        doc = FwRemade(note="mine")
        hook.armed = True
        with pytest.raises((pymongo.errors.AutoReconnect, KeyboardInterrupt)):
            doc.save()  # stored with 5
        doc.code = None
        doc.save()  # 1 is held: 2
        assert doc.code == 2
        doc.note = "changed"
        doc.save()
        stored = sorted((d["note"], d["code"]) for d in db.fw_remade.find())
        assert stored == [("changed", 2), ("other", 1)]


class FwKeyedEmail(me.Document):
    meta = {"collection": "fw_keyed_email"}
    id = SequenceField(primary_key=True)
    email = me.StringField(unique=True)


@pytest.mark.parametrize("mode", ["after", "interrupt"])
def test_a_retry_whose_insert_landed_meeting_another_fields_duplicate_keeps_its_key(
    mode: str,
) -> None:
    """The earlier insert landed (its reply lost); the application changes a unique field to
    another document's value and retries: the replace of its stored copy fails with that
    duplicate, which is no value of the document's own (its key is the stored copy's), and a
    later save updates the one stored copy. (The key was taken for colliding and made anew:
    the next save stored a second copy.)"""
    hook = FailOnce("fw_keyed_email", "insert_one", mode)
    with connect_with(hook) as db:
        FwKeyedEmail.ensure_indexes()
        FwKeyedEmail(email="taken").save()
        doc = FwKeyedEmail(email="a")
        hook.armed = True
        with pytest.raises((pymongo.errors.AutoReconnect, KeyboardInterrupt)):
            doc.save()
        doc.email = "taken"
        with pytest.raises(me.NotUniqueError):
            doc.save()
        assert doc.id == 2
        doc.email = "b"
        doc.save()
        stored = sorted((d["_id"], d["email"]) for d in db.fw_keyed_email.find())
        assert stored == [(1, "taken"), (2, "b")]
        assert FwKeyedEmail(email="c").save().id == 3


class FailPlanned:
    """Fails the calls planned, in order, each once: (collection.method, mode)."""

    def __init__(self) -> None:
        self.plan: list[tuple[str, str]] = []

    def __call__(self, collection: str, method: str, call: Callable[[], Any]) -> Any:
        if self.plan and self.plan[0][0] == f"{collection}.{method}":
            _, mode = self.plan.pop(0)
            if mode == "after":
                call()
            raise pymongo.errors.AutoReconnect(f"injected {mode} {collection}.{method}")
        return call()


@pytest.mark.parametrize("force_insert", [False, True], ids=["save", "force_insert"])
@pytest.mark.parametrize(("mode", "again", "expected"), [("before", 0, 5), ("after", 2, 3)])
def test_a_value_made_again_whose_replace_lost_its_reply_is_settled_by_the_next_save(
    mode: str, again: int, expected: int, force_insert: bool
) -> None:
    """The earlier insert landed (its reply lost); the application clears the value and
    retries, and the replace of the stored copy loses its reply too: the value made again is
    the document's own for its next save, which takes what is stored (the replace was not
    applied: 5) or keeps it (it was: 3). (The value was then taken for the user's: 1, another
    document's, was refused at every later save; with force_insert, probe CB-2, the next
    save inserted again and was refused its own copy.)"""
    draws = iter([4, again, 5, 6, 7, 8, 9])  # the value is the draw + 1: 5, then 1 or 3

    class FwRemadeLost(me.Document):
        meta = {"collection": "fw_remade_lost"}
        code = RandomUniqueField(min_value=1, max_value=10, rng=lambda n: next(draws))
        note = me.StringField()

    hook = FailPlanned()
    with connect_with(hook) as db:
        FwRemadeLost.ensure_indexes()
        db.fw_remade_lost.insert_one({"code": 1, "note": "other"})
        doc = FwRemadeLost(note="mine")
        hook.plan = [("fw_remade_lost.insert_one", "after")]
        with pytest.raises(pymongo.errors.AutoReconnect):
            doc.save(force_insert=force_insert)  # stored with 5
        doc.code = None
        hook.plan = [("fw_remade_lost.find_one_and_replace", mode)]
        with pytest.raises(pymongo.errors.AutoReconnect):
            doc.save(force_insert=force_insert)
        doc.note = "changed"
        doc.save(force_insert=force_insert)
        stored = sorted((d["note"], d["code"]) for d in db.fw_remade_lost.find())
        assert stored == [("changed", expected), ("other", 1)]
        assert doc.code == expected


def test_a_value_assigned_for_a_retry_whose_replace_lost_its_reply_is_kept_reserved() -> None:
    """The earlier insert landed (its reply lost); the application assigns a reserve_in value
    and retries, and the replace of the stored copy is lost before it is applied: the value
    stays reserved as the document's own, and its next save stores it. (Its reservation was
    then taken for another document's: every later save was refused.)"""

    class FwAssignedLost(me.Document):
        meta = {"collection": "fw_assigned_lost"}
        code = RandomUniqueField(
            min_value=1, max_value=10, rng=lambda n: 4, reserve_in="fw_assigned_lost_codes"
        )
        note = me.StringField()

    hook = FailPlanned()
    with connect_with(hook) as db:
        doc = FwAssignedLost(note="mine")
        hook.plan = [("fw_assigned_lost.insert_one", "after")]
        with pytest.raises(pymongo.errors.AutoReconnect):
            doc.save()  # stored with 5
        doc.code = 7
        hook.plan = [("fw_assigned_lost.find_one_and_replace", "before")]
        with pytest.raises(pymongo.errors.AutoReconnect):
            doc.save()
        doc.note = "changed"
        doc.save()
        assert [(d["note"], d["code"]) for d in db.fw_assigned_lost.find()] == [("changed", 7)]
        # 5, the value it held before, stays reserved: a gap, never a second holder.
        assert sorted(d["_id"] for d in db.fw_assigned_lost_codes.find()) == [5, 7]


# A counter's lease failing with an OperationFailure (its write concern timed out, applied on
# the primary) reaches the application as MongoEngine's error of the call, as save() raised it
# already (probe CB: insert() and the upserts raised pymongo's WriteConcernError).
LEASE_WRITE_CONCERN = pymongo.errors.WriteConcernError("waiting for replication timed out", 64)
FAILING_LEASES: dict[str, tuple[Callable[[], Any], str]] = {
    "save": (lambda: FwBulk(name="a").save(), "Could not save document"),
    "insert": (lambda: FwBulk.objects.insert([FwBulk(name="a")]), "Could not save document"),
    "update_one_upsert": (
        lambda: FwBulk.objects(name="a").update_one(upsert=True, set__name="a"),
        "Update failed",
    ),
    "upsert_one": (lambda: FwBulk.objects(name="a").upsert_one(set__name="a"), "Update failed"),
    "modify_upsert": (
        lambda: FwBulk.objects(name="a").modify(upsert=True, new=True, set__name="a"),
        "Update failed",
    ),
}


@pytest.mark.parametrize("way", FAILING_LEASES)
def test_a_lease_whose_write_concern_failed_raises_mongoengines_error(way: str) -> None:
    call, message = FAILING_LEASES[way]
    faults = Faults()
    with connect_with(faults) as db:
        faults.arm(
            "find_one_and_update",
            LEASE_WRITE_CONCERN,
            applied=True,
            collection=DEFAULT_COLLECTION,
        )
        with pytest.raises(me.errors.OperationError, match=message) as raised:
            call()
        assert type(raised.value) is me.errors.OperationError
        assert "waiting for replication timed out" in str(raised.value)
        assert faults.plans == []  # the lease's call is the one that failed
        assert list(db.fw_bulk.find()) == []
        call()  # the application's retry
        (stored,) = db.fw_bulk.find()
        assert stored["name"] == "a"
        FwBulk(name="b").save()
        numbers = [doc["number"] for doc in db.fw_bulk.find()]
        assert len(numbers) == len(set(numbers)) == 2
