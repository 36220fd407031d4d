"""SequenceField and Sequence: drop-in shape, leasing, values, shards, scopes, safety."""

from __future__ import annotations

import gc
import os
import random
import threading
import time
import warnings
import weakref
from collections.abc import Callable, Iterator
from typing import Any, Final
from unittest import mock

import bson.json_util
import mongoengine
import mongoengine as me
import mongomock
import pymongo
import pymongo.errors
import pytest
from _support import TEST_URI
from mongoengine import Document, IntField, StringField
from mongoengine import fields as me_fields
from mongoengine.errors import NotUniqueError, ValidationError
from test_random_unique import Script

from mongoengine_ids import (
    InvalidQueryValueError,
    LocalityUUIDField,
    RandomUniqueField,
    UUID4Field,
    backfill,
)
from mongoengine_ids.errors import IdSpaceExhaustedError, InvalidIdError, RetriesExhaustedError
from mongoengine_ids.resets import reset_process_state
from mongoengine_ids.sequence import admin
from mongoengine_ids.sequence import field as sequence_module
from mongoengine_ids.sequence.field import (
    DEFAULT_COLLECTION,
    INT64_MAX,
    CorruptedCounterError,
    ExplicitValueError,
    Sequence,
    SequenceField,
    SequenceFormat,
    Space,
    discard_blocks,
    luhn_check_digit,
)
from mongoengine_ids.testing import Connect, connected, connected_threadsafe
from mongoengine_ids.write import seam
from mongoengine_ids.write.field import Write


def counters(db: Any) -> list[dict[str, Any]]:
    return sorted(db[DEFAULT_COLLECTION].find(), key=lambda doc: str(doc["_id"]))


def counter(db: Any, document_id: str) -> dict[str, Any] | None:
    found: dict[str, Any] | None = db[DEFAULT_COLLECTION].find_one({"_id": document_id})
    return found


class Calls:
    """A hook for the instrumented mongomock client: records calls, optionally fails some."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []
        self.fail: Callable[[str, str], str | None] = lambda collection, method: None

    def __call__(self, collection: str, method: str, call: Callable[[], Any]) -> Any:
        self.calls.append((collection, method))
        when = self.fail(collection, method)
        if when == "before":
            raise pymongo.errors.AutoReconnect("injected: request lost before the server")
        result = call()
        if when == "after":
            raise pymongo.errors.AutoReconnect("injected: reply lost after the server applied it")
        return result

    def count(self, method: str, collection: str = DEFAULT_COLLECTION) -> int:
        return sum(1 for call in self.calls if call == (collection, method))


@pytest.fixture
def calls() -> Calls:
    return Calls()


@pytest.fixture
def hooked(calls: Calls) -> Iterator[Connect]:
    """mongomock (always, even with a server URI) with every database call seen by ``calls``."""
    with connected_threadsafe(None, hook=calls) as connect:
        yield connect


# -- the drop-in --------------------------------------------------------------------------------


@pytest.mark.parametrize("batch_size", [1, 7])
def test_alternating_with_mongoengine_field_never_reuses_a_value(
    mongoengine_db: Any, batch_size: int
) -> None:
    class Theirs(Document):
        meta = {"collection": "things"}
        id = me_fields.SequenceField(primary_key=True)
        label = StringField()

    class Ours(Document):
        meta = {"collection": "things"}
        id = SequenceField(primary_key=True, batch_size=batch_size)
        label = StringField()

    ids = []
    for round_ in range(30):
        theirs = Theirs(label=f"theirs {round_}")
        theirs.save()
        ours = Ours(label=f"ours {round_}")
        ours.save()
        ids += [theirs.id, ours.id]
    assert len(set(ids)) == len(ids) == 60
    stored = sorted(doc["_id"] for doc in mongoengine_db["things"].find())
    assert stored == sorted(ids)
    # One document, MongoEngine's shape: the highest value handed out or leased.
    assert counters(mongoengine_db) == [{"_id": "things.id", "next": max(ids)}]
    if batch_size == 1:
        assert sorted(ids) == list(range(1, 61))  # no gaps without leasing


def test_counter_document_shape_and_name_rules(mongoengine_db: Any) -> None:
    class Order(Document):
        id = SequenceField(primary_key=True)

    class Named(Document):
        number = SequenceField(sequence_name="custom", start=1000)

    Order().save()
    Order().save()
    Named().save()
    assert counters(mongoengine_db) == [
        {"_id": "custom.number", "next": 1000},
        {"_id": "order.id", "next": 2},
    ]
    assert [doc["_id"] for doc in mongoengine_db["order"].find()] == [1, 2]
    assert mongoengine_db["named"].find_one()["number"] == 1000


def test_reading_an_empty_field_never_burns_a_value(mongoengine_db: Any) -> None:
    class Lazy(Document):
        id = SequenceField(primary_key=True)

    doc = Lazy()
    assert doc.id is None
    assert doc.pk is None
    doc.to_json(json_options=bson.json_util.DEFAULT_JSON_OPTIONS)
    _ = doc == Lazy(), hash(doc)
    assert counters(mongoengine_db) == []
    doc.save()
    assert doc.id == 1


def test_an_int64_read_loads_as_a_plain_int(mongoengine_db: Any) -> None:
    """Review BF: a server's reply decodes an int64 to ``bson.Int64``, which the field kept,
    where MongoEngine's IntField and LongField load an int."""

    class Invoice(Document):
        id = SequenceField(primary_key=True)
        number = SequenceField()

    Invoice._get_collection().insert_one({"_id": bson.Int64(7), "number": bson.Int64(2**40)})
    loaded = Invoice.objects.get()
    assert (type(loaded.id), type(loaded.number)) == (int, int)
    assert (loaded.id, loaded.number) == (7, 2**40)
    assert type(Invoice(number=bson.Int64(3)).number) is int  # assigned: as loaded
    assert Invoice.number.to_python(True) is True  # a bool is no int: validate() refuses it


class _NumpyInt64:
    """Stands for NumPy's ``int64`` (not installed here): no int, an integer by ``__index__``."""

    def __init__(self, value: int) -> None:
        self.value = value

    def __index__(self) -> int:
        return self.value


def test_integers_of_other_number_types_are_taken_as_mongoengine_takes_them(
    mongoengine_db: Any,
) -> None:
    """Probe BT: a query by NumPy's int64 (from pandas) or an integral Decimal was refused, where
    MongoEngine's SequenceField and IntField take it by int(). Assigned, it is stored as an int
    and the counter moves past it; a Decimal with a fraction is still refused."""
    from decimal import Decimal

    from mongoengine_ids import RandomUniqueField

    class Numbered(Document):
        id = SequenceField(primary_key=True)
        code = RandomUniqueField(digits=6)
        label = SequenceField(digits=5, prefix="F-")

    first = Numbered().save()
    for value in (_NumpyInt64(1), Decimal(1), Decimal("1.000")):
        assert [doc.id for doc in Numbered.objects(pk=value)] == [1]
        assert Numbered.objects(label=value).count() == 1
    assert Numbered.objects(code=_NumpyInt64(first.code)).count() == 1
    assert Numbered.objects(code=Decimal(first.code)).count() == 1
    Numbered(id=_NumpyInt64(7), code=Decimal(123456), label=_NumpyInt64(9)).save()
    assert Numbered().save().id == 8
    stored = Numbered._get_collection().find_one({"_id": 7})
    assert stored == {"_id": 7, "code": 123456, "label": "F-9"}
    assert (type(stored["_id"]), type(stored["code"])) == (int, int)
    with pytest.raises(me.errors.ValidationError, match=r"Decimal\('1\.5'\): expected an int"):
        Numbered.objects(pk=Decimal("1.5")).count()


def test_counters_live_on_the_models_alias(mongoengine_connect: Connect) -> None:
    default = mongoengine_connect()
    other = mongoengine_connect("other")

    class Remote(Document):
        meta = {"db_alias": "other"}
        id = SequenceField(primary_key=True)

    class Pinned(Document):
        meta = {"db_alias": "other"}
        id = SequenceField(primary_key=True, db_alias="default")

    Remote().save()
    Pinned().save()
    assert counters(other) == [{"_id": "remote.id", "next": 1}]
    assert counters(default) == [{"_id": "pinned.id", "next": 1}]


def test_the_helpers_of_a_field_of_an_abstract_base_act_on_its_models_database(
    mongoengine_connect: Connect,
) -> None:
    # Probe AR: they had set a counter in the default database, which no model used: the next
    # save handed out a number already stored.
    default = mongoengine_connect()
    other = mongoengine_connect("other")

    class HelpedBase(Document):
        number = SequenceField()
        meta = {"abstract": True}

    class Helped(HelpedBase):
        meta = {"db_alias": "other"}

    Helped().save()
    other.helped.insert_many([{"number": n} for n in (2, 3, 4)])  # written past the field
    Helped.number.set_next_value(4)
    assert Helped.number.get_next_value() == 5
    assert Helped().save().number == 5
    assert counters(default) == []
    assert counters(other) == [{"_id": "helped_base.number", "next": 5}]

    class HelpedUnconnected(HelpedBase):  # another application's: its alias not connected
        meta = {"db_alias": "not_connected_here"}

    assert Helped.number.get_next_value() == 6  # review I: it raised ConnectionFailure

    class LoneBase(Document):
        number = SequenceField()
        meta = {"abstract": True}

    class Lone(LoneBase):  # its only model, not connected: refused, not the default database
        meta = {"db_alias": "not_connected_either"}

    with pytest.raises(mongoengine.connection.ConnectionFailure, match="not_connected_either"):
        Lone.number.set_next_value(100)  # review J
    assert counters(default) == []

    class HelpedElsewhere(HelpedBase):  # a second model, in another database
        pass

    with pytest.raises(ValueError, match=r"databases \[.*\].*give the field db_alias="):
        Helped.number.set_next_value(10)
    assert counters(other) == [{"_id": "helped_base.number", "next": 5}]


def test_custom_counter_collection(mongoengine_db: Any) -> None:
    class Ticket(Document):
        id = SequenceField(primary_key=True, collection_name="my_counters")

    Ticket().save()
    assert list(mongoengine_db["my_counters"].find()) == [{"_id": "ticket.id", "next": 1}]
    assert counters(mongoengine_db) == []


# -- leasing ------------------------------------------------------------------------------------


def test_batch_size_leases_one_block_per_round_trip(hooked: Connect, calls: Calls) -> None:
    db = hooked()

    class Item(Document):
        id = SequenceField(primary_key=True, batch_size=10)

    Item().save()  # creates the counter, then leases 1..10
    calls.calls.clear()
    saved = []
    for _ in range(9):
        item = Item()
        item.save()
        saved.append(item.id)
    assert saved == list(range(2, 11))
    assert calls.count("find_one_and_update") == 0  # all from the leased block
    Item().save()
    assert calls.count("find_one_and_update") == 1
    assert counter(db, "item.id") == {"_id": "item.id", "next": 20}


def test_bulk_insert_leases_in_one_round_trip(hooked: Connect, calls: Calls) -> None:
    db = hooked()

    class Row(Document):
        id = SequenceField(primary_key=True)
        n = IntField()

    class TheirRow(Document):
        id = me_fields.SequenceField(primary_key=True)
        n = IntField()

    Row(n=-1).save()
    TheirRow(n=-1).save()
    calls.calls.clear()
    Row.objects.insert([Row(n=i) for i in range(1000)], load_bulk=False)
    assert calls.count("find_one_and_update") == 1
    assert sorted(doc["_id"] for doc in db["row"].find()) == list(range(1, 1002))
    assert counter(db, "row.id") == {"_id": "row.id", "next": 1001}

    calls.calls.clear()
    TheirRow.objects.insert([TheirRow(n=i) for i in range(50)], load_bulk=False)
    assert calls.count("find_one_and_update") == 50  # MongoEngine's: one per document


def test_bulk_insert_uses_the_current_block_first_and_keeps_the_rest(
    hooked: Connect, calls: Calls
) -> None:
    db = hooked()

    class Row(Document):
        id = SequenceField(primary_key=True, batch_size=100)

    Row().save()  # block 1..100, 1 used
    calls.calls.clear()
    Row.objects.insert([Row() for _ in range(150)], load_bulk=False)
    # 99 from the block, 51 more: one lease rounded up to 100 (101..200), 49 left over.
    assert calls.count("find_one_and_update") == 1
    assert counter(db, "row.id") == {"_id": "row.id", "next": 200}
    following = Row()
    following.save()
    assert following.id == 152
    assert calls.count("find_one_and_update") == 1
    assert sorted(doc["_id"] for doc in db["row"].find()) == list(range(1, 153))


def test_sequence_without_a_model(mongoengine_db: Any) -> None:
    invoices = Sequence("invoice", database=mongoengine_db, batch_size=3)
    assert [invoices.next() for _ in range(4)] == [1, 2, 3, 4]
    assert counter(mongoengine_db, "invoice") == {"_id": "invoice", "next": 6}
    assert invoices.next_values(5) == [5, 6, 7, 8, 9]
    block = invoices.lease(4)
    assert isinstance(block, range)
    assert block == range(10, 14)
    assert counter(mongoengine_db, "invoice") == {"_id": "invoice", "next": 13}
    assert invoices.next() == 14  # the lease bypassed the blocks: a new block 14..16
    assert counter(mongoengine_db, "invoice") == {"_id": "invoice", "next": 16}


def test_sequence_on_an_alias_drops_blocks_on_reconnect(mongoengine_connect: Connect) -> None:
    mongoengine_connect("seq")
    sequence = Sequence("s", database="seq", batch_size=100)
    assert sequence.next() == 1
    mongoengine.disconnect("seq")
    fresh = mongoengine_connect("seq")
    # A new connection (to a new database): the block 2..100 of the old one is dropped.
    assert sequence.next() == 1
    assert counter(fresh, "s") == {"_id": "s", "next": 100}


def test_sequence_on_an_alias_reconnected_to_another_database_of_one_client_leases_there() -> None:
    # MongoEngine gives aliases of the same settings one client: the alias reconnected to
    # another database may keep it. The old block (2..100 of the first database) is dropped.
    server = mongomock.MongoClient()
    try:
        for name in ("first", "second"):
            mongoengine.disconnect("moved_seq")
            mongoengine.connect(
                name,
                alias="moved_seq",
                mongo_client_class=lambda *args, **kwargs: server,
                uuidRepresentation="standard",
            )
            if name == "first":
                sequence = Sequence("s", database="moved_seq", batch_size=100)
                assert sequence.next() == 1
        assert [sequence.next() for _ in range(2)] == [1, 2]
    finally:
        mongoengine.disconnect("moved_seq")
        reset_process_state()
    assert server.first[DEFAULT_COLLECTION].find_one() == {"_id": "s", "next": 100}
    assert server.second[DEFAULT_COLLECTION].find_one() == {"_id": "s", "next": 100}


def test_prefetch_leases_the_next_block_in_the_background(mongoengine_db: Any) -> None:
    sequence = Sequence("p", database=mongoengine_db, batch_size=10, prefetch=True)
    first = [sequence.next() for _ in range(5)]  # the 5th value starts the prefetch
    assert first == [1, 2, 3, 4, 5]
    flight = sequence._flight
    if flight is not None:
        flight.done.wait(timeout=30)
    assert counter(mongoengine_db, "p") == {"_id": "p", "next": 20}
    assert [sequence.next() for _ in range(15)] == list(range(6, 21))


def _next_values_one_by_one(sequence: Sequence, count: int) -> list[int]:
    """``count`` values from ``sequence.next()``, each prefetch one starts landed (or failed)
    before the next: the order of events is the test's, not the threads'."""
    values = []
    for _ in range(count):
        values.append(sequence.next())
        flight = sequence._flight
        assert flight is None or flight.done.wait(timeout=30)
    return values


def _threads_started(
    monkeypatch: pytest.MonkeyPatch, sequence: Sequence, *, fail: BaseException | None = None
) -> list[bool]:
    """Whether the sequence's locks were held as each prefetch thread started (``fail``: its
    start raises that, once)."""
    held: list[bool] = []

    class Recording(threading.Thread):
        def start(self) -> None:
            held.append(sequence._lock.lock.locked() or sequence._raised_lock.lock.locked())
            if fail is not None and len(held) == 1:
                raise fail
            super().start()

    fake = type("threading", (), {"Thread": Recording, "Event": threading.Event})
    monkeypatch.setattr(sequence_module, "threading", fake)
    return held


@pytest.mark.parametrize(
    "batch_size",
    [
        10,  # the 5th value starts it, taken from the block (next())
        2,  # the first value of each block starts it (the refill)
    ],
)
def test_a_prefetch_thread_starts_with_no_lock_of_the_sequence_held(
    mongoengine_db: Any, monkeypatch: pytest.MonkeyPatch, batch_size: int
) -> None:
    """Probe BH: under gevent patched after the sequence was made, its lock is an OS lock,
    and ``Thread.start()`` switches to the new green thread, which waited for the lock that
    the starting one held: the whole process hung on the first prefetch."""
    sequence = Sequence("p", database=mongoengine_db, batch_size=batch_size, prefetch=True)
    held = _threads_started(monkeypatch, sequence)
    values = _next_values_one_by_one(sequence, 12)
    assert values == list(range(1, 13))
    assert held  # prefetches started
    assert not any(held)


def test_a_prefetch_whose_thread_cannot_start_is_forgotten(
    mongoengine_db: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The refill then leases in the foreground: no value lost, none waiting for ever."""
    sequence = Sequence("q", database=mongoengine_db, batch_size=4, prefetch=True)
    held = _threads_started(monkeypatch, sequence, fail=RuntimeError("can't start new thread"))
    values = _next_values_one_by_one(sequence, 9)
    assert values == list(range(1, 10))
    assert len(held) >= 2
    assert counter(mongoengine_db, "q") == {"_id": "q", "next": 12}


def test_an_interrupt_while_a_prefetch_starts_is_the_callers_and_the_prefetch_forgotten(
    mongoengine_db: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A gevent ``Timeout`` while ``Thread.start()`` waits for the new thread: raised in the
    caller (whose value is then lost: a gap), and no later refill waits for that prefetch."""
    sequence = Sequence("r", database=mongoengine_db, batch_size=4, prefetch=True)
    _threads_started(monkeypatch, sequence, fail=_Interrupted())
    assert sequence.next() == 1
    with pytest.raises(_Interrupted):
        sequence.next()  # 2, the trigger: handed to no one
    values = _next_values_one_by_one(sequence, 6)
    assert values == [3, 4, 5, 6, 7, 8]


class _Interrupted(BaseException):
    """An interrupt of one thread (KeyboardInterrupt, a gevent Timeout)."""


class _WatchedEvent(threading.Event):
    """A flight's event that says when a thread waits on it."""

    waiting = threading.Event()

    def wait(self, timeout: float | None = None) -> bool:
        type(self).waiting.set()
        return super().wait(timeout)


@pytest.fixture
def watched_flights(monkeypatch: pytest.MonkeyPatch) -> threading.Event:
    """Flights whose waiters are seen: the event set once a thread waits on one."""
    _WatchedEvent.waiting = threading.Event()
    real = sequence_module._Flight.__init__

    def init(self: Any, epoch: int, **options: Any) -> None:
        real(self, epoch, **options)
        self.done = _WatchedEvent()

    monkeypatch.setattr(sequence_module._Flight, "__init__", init)
    return _WatchedEvent.waiting


def _fail_lease_once(
    monkeypatch: pytest.MonkeyPatch, waiting: threading.Event, error: BaseException, thread: str
) -> None:
    """The first lease by a thread whose name starts with ``thread`` waits until another
    thread waits on it, then raises ``error`` (nothing written)."""
    real = sequence_module.CounterStore.lease
    armed = [True]

    def lease(self: Any, count: int, **kwargs: Any) -> range:
        if armed[0] and threading.current_thread().name.startswith(thread):
            armed[0] = False
            assert waiting.wait(timeout=30)
            raise error
        return real(self, count, **kwargs)

    monkeypatch.setattr(sequence_module.CounterStore, "lease", lease)


def test_a_failed_prefetch_is_leased_again_by_the_refill_waiting_on_it(
    mongoengine_db: Any, monkeypatch: pytest.MonkeyPatch, watched_flights: threading.Event
) -> None:
    # Probe AW: the refill waiting on the prefetch raised the prefetch's AutoReconnect (its own
    # lease was never tried), though the next one leased at once.
    _fail_lease_once(
        monkeypatch, watched_flights, pymongo.errors.AutoReconnect("reset"), "prefetch"
    )
    sequence = Sequence("p", database=mongoengine_db, batch_size=4, prefetch=True)
    values = [sequence.next() for _ in range(6)]  # the 2nd starts the prefetch; the 5th waits
    assert values == [1, 2, 3, 4, 5, 6]
    flight = sequence._flight  # the 6th started the prefetch of 9..12 (None: landed)
    assert flight is None or flight.done.wait(timeout=30)
    assert counter(mongoengine_db, "p") == {"_id": "p", "next": 12}


def test_a_save_of_a_scoped_field_waits_for_the_lease_another_thread_makes(
    mongoengine_db: Any, monkeypatch: pytest.MonkeyPatch, watched_flights: threading.Event
) -> None:
    """Probe BZ-3: a scoped field's save() leased a block beside the one another thread was
    leasing (an unscoped field's waits): a block too many, its values handed out late."""

    class Scoped(Document):
        number = SequenceField(scope="tenant", batch_size=10)
        tenant = StringField()

    real = sequence_module.CounterStore.lease
    leases: list[str] = []

    def lease(self: Any, count: int, **kwargs: Any) -> range:
        leases.append(threading.current_thread().name)
        if threading.current_thread().name == "first":
            assert watched_flights.wait(timeout=10), "the second save leased beside it"
        return real(self, count, **kwargs)

    monkeypatch.setattr(sequence_module.CounterStore, "lease", lease)
    saved: dict[str, int] = {}
    failed: list[BaseException] = []

    def save(name: str) -> None:
        try:
            saved[name] = Scoped(tenant="a").save().number
        except BaseException as error:
            failed.append(error)

    first = threading.Thread(target=save, args=("first",), name="first")
    first.start()
    while not leases:
        time.sleep(0.001)
    save("second")  # waits on the first thread's lease
    first.join(timeout=30)
    assert failed == []
    assert leases == ["first"]
    assert sorted(saved.values()) == [1, 2]
    assert counter(mongoengine_db, "scoped.number@a")["next"] == 10
    stored = sorted(doc["number"] for doc in mongoengine_db.scoped.find())
    assert stored == [1, 2]


@pytest.mark.parametrize("interrupt", [True, False])
def test_a_failed_lease_is_shared_by_the_threads_waiting_on_it_unless_an_interrupt(
    mongoengine_db: Any,
    monkeypatch: pytest.MonkeyPatch,
    watched_flights: threading.Event,
    interrupt: bool,
) -> None:
    # Probe AW: an interrupt (a KeyboardInterrupt, a gevent Timeout) of the thread leasing the
    # block was raised in every thread waiting on that lease: they lease again. A database
    # error (after the lease's retries) is theirs too (review N: leasing again, an outage
    # would fail them one after another).
    error: BaseException = _Interrupted() if interrupt else pymongo.errors.AutoReconnect("down")
    _fail_lease_once(monkeypatch, watched_flights, error, "leader")
    sequence = Sequence("i", database=mongoengine_db, batch_size=2)
    outcomes: dict[str, Any] = {}

    def take(name: str) -> None:
        try:
            outcomes[name] = sequence.next()
        except BaseException as raised:  # the outcome compared below
            outcomes[name] = raised

    leader = threading.Thread(target=take, args=("leader",), name="leader")
    leader.start()
    while sequence._flight is None:  # the leader's lease has begun
        threading.Event().wait(0.001)
    follower = threading.Thread(target=take, args=("follower",), name="follower")
    follower.start()
    leader.join(30)
    follower.join(30)
    assert outcomes["leader"] is error
    if interrupt:
        assert outcomes["follower"] == 1
        assert counter(mongoengine_db, "i") == {"_id": "i", "next": 2}
    else:
        assert outcomes["follower"] is error
        assert counter(mongoengine_db, "i") is None
        assert sequence.next() == 1  # the next call leases


def test_disconnect_and_reconnect_discard_leased_blocks(mongoengine_connect: Connect) -> None:
    mongoengine_connect()

    class Doc(Document):
        id = SequenceField(primary_key=True, batch_size=100)

    first = Doc()
    first.save()
    assert first.id == 1
    mongoengine.disconnect()
    Doc._collection = None
    db = mongoengine_connect()
    second = Doc()
    second.save()
    # A new (empty) database: a value from the old block would have been 2.
    assert second.id == 1
    assert counter(db, "doc.id") == {"_id": "doc.id", "next": 100}


def test_reset_discards_leased_blocks(mongoengine_db: Any) -> None:
    class Doc(Document):
        id = SequenceField(primary_key=True, batch_size=10)

    Doc().save()
    reset_process_state()
    doc = Doc()
    doc.save()
    assert doc.id == 11
    assert counter(mongoengine_db, "doc.id") == {"_id": "doc.id", "next": 20}


def test_a_counter_dropped_under_a_live_process_never_repeats_its_values(
    mongoengine_db: Any,
) -> None:
    class Ticket(Document):
        number = SequenceField(batch_size=10)

    assert [Ticket().save().number for _ in range(3)] == [1, 2, 3]
    # A database dropped between tests, without reset_process_state(): the block 4..10 is
    # still this process's. Recreated at 1, the counter would hand 4 and 5 out again.
    mongoengine_db.client.drop_database(mongoengine_db.name)
    with pytest.warns(RuntimeWarning, match=r"'ticket.number' .* up to 10: recreated at 10"):
        numbers = [Ticket().save().number for _ in range(12)]
    assert numbers == list(range(4, 16))
    assert sorted(doc["number"] for doc in Ticket._get_collection().find()) == numbers
    assert counter(mongoengine_db, "ticket.number") == {"_id": "ticket.number", "next": 20}
    # Dropped on purpose, with the reset: the counter starts again from its first value.
    mongoengine_db.client.drop_database(mongoengine_db.name)
    reset_process_state()
    assert [Ticket().save().number for _ in range(2)] == [1, 2]


def test_a_counter_dropped_under_a_live_process_is_not_made_again_below_it_by_a_given_number(
    mongoengine_db: Any,
) -> None:
    """Review AS: a number you assign, or the admin API, made the dropped counter again at the
    number given (an upsert with $max), below the block 4..10 this process still holds: 4..7
    were handed out twice. Made again after it, as a lease makes it; the admin API refuses
    (force=True moves it on purpose)."""

    class Stub(Document):
        number = SequenceField(batch_size=10)

    assert [Stub().save().number for _ in range(3)] == [1, 2, 3]
    mongoengine_db.drop_collection(DEFAULT_COLLECTION)
    Stub(number=2).save()  # told to the counter
    assert counter(mongoengine_db, "stub.number") == {"_id": "stub.number", "next": 10}
    numbers = [Stub().save().number for _ in range(8)]
    assert numbers == list(range(4, 12))
    stored = sorted(doc["number"] for doc in Stub._get_collection().find())
    assert stored == [1, 2, 2, 3, *range(4, 12)]

    mongoengine_db.drop_collection(DEFAULT_COLLECTION)
    with pytest.raises(ValueError, match=r"deleted while this process held values of it up to 20"):
        admin.set_next_value(mongoengine_db, "stub.number", 2)
    assert counter(mongoengine_db, "stub.number") is None
    admin.set_next_value(mongoengine_db, "stub.number", 2, force=True)
    Stub(number=3).save()  # set on purpose: no floor left
    assert counter(mongoengine_db, "stub.number") == {"_id": "stub.number", "next": 3}


def test_a_dropped_counter_of_one_value_per_lease_starts_again_as_mongoengines(
    mongoengine_db: Any,
) -> None:
    # batch_size=1 (MongoEngine's behaviour, the drop-in default) holds no value it has not
    # handed out: a dropped counter starts again from 1, as MongoEngine's own field does (its
    # test suite drops the counters between tests), with no warning (an error in this suite).
    class OnePerLease(Document):
        number = SequenceField()

    assert [OnePerLease().save().number for _ in range(3)] == [1, 2, 3]
    mongoengine_db.drop_collection(DEFAULT_COLLECTION)
    assert [OnePerLease().save().number for _ in range(2)] == [1, 2]


def test_a_dropped_counter_shared_by_two_fields_never_repeats_a_value(
    mongoengine_db: Any,
) -> None:
    class SharedA(Document):
        number = SequenceField(sequence_name="shared", batch_size=10)

    class SharedB(Document):
        number = SequenceField(sequence_name="shared", batch_size=10)

    handed = [SharedA().save().number, SharedB().save().number]  # blocks 1..10 and 11..20
    mongoengine_db.drop_collection(DEFAULT_COLLECTION)
    handed += [SharedA().save().number for _ in range(9)]  # 2..10
    with pytest.warns(RuntimeWarning, match="up to 20: recreated at 20"):
        handed.append(SharedA().save().number)  # 21
    handed += [SharedB().save().number for _ in range(3)]  # 12, 13, 14
    assert sorted(handed) == [*range(1, 15), 21]


class CountedElsewhere(Document):
    meta = {"db_alias": "counted_docs"}
    number = SequenceField(db_alias="counted_counters", batch_size=10)


def test_counters_on_an_alias_reconnected_elsewhere_are_leased_there() -> None:
    # The documents' collection stays the same object; the counters' alias moves to another
    # server: the next value is leased there, and the first server's counter is left alone.
    documents, first, second = (mongomock.MongoClient() for _ in range(3))
    try:
        for alias, server in (("counted_docs", documents), ("counted_counters", first)):
            mongoengine.connect(
                "app",
                alias=alias,
                mongo_client_class=lambda *args, server=server, **kwargs: server,
                uuidRepresentation="standard",
            )
        assert [CountedElsewhere().save().number for _ in range(2)] == [1, 2]
        mongoengine.disconnect("counted_counters")
        mongoengine.connect(
            "app",
            alias="counted_counters",
            mongo_client_class=lambda *args, **kwargs: second,
            uuidRepresentation="standard",
        )
        assert CountedElsewhere().save().number == 1  # the second server's own counter
    finally:
        for alias in ("counted_docs", "counted_counters"):
            mongoengine.disconnect(alias)
        CountedElsewhere._collection = None
        reset_process_state()
    assert first.app[DEFAULT_COLLECTION].find_one() == {
        "_id": "counted_elsewhere.number",
        "next": 10,
    }
    assert second.app[DEFAULT_COLLECTION].find_one() == {
        "_id": "counted_elsewhere.number",
        "next": 10,
    }
    assert [d["number"] for d in documents.app.counted_elsewhere.find()] == [1, 2, 1]


def test_a_switch_to_the_counters_collection_is_refused(mongoengine_db: Any) -> None:
    from mongoengine.context_managers import switch_collection

    class Switched(Document):
        number = SequenceField(batch_size=10)

    assert Switched().save().number == 1
    refused = pytest.raises(ValueError, match=f"collection_name={DEFAULT_COLLECTION!r}")
    with switch_collection(Switched, DEFAULT_COLLECTION), refused:
        Switched().save()
    assert Switched().save().number == 2
    assert counters(mongoengine_db) == [{"_id": "switched.number", "next": 10}]


@pytest.mark.parametrize("first", ["context", "document"])
def test_a_switched_write_names_its_counter_as_mongoengine_does(
    mongoengine_db: Any, first: str
) -> None:
    """Under ``with switch_collection(Model, "other")`` the counter is ``"other.<field>"``; a
    document's own ``switch_collection("other")`` numbers with the model's counter (both
    MongoEngine's names, so nothing is renumbered on the way from its field), whichever comes
    first. (On mongomock, one collection object per name: the first one's counter served both.)"""
    from mongoengine.context_managers import switch_collection

    class Logged(Document):
        number = SequenceField()
        label = StringField()

    def by_context() -> None:
        with switch_collection(Logged, "other") as Other:
            Other(label="context").save()

    def by_document() -> None:
        doc = Logged(label="document")
        doc.switch_collection("other")
        doc.save()

    Logged(label="home").save()
    for write in (by_context, by_document) if first == "context" else (by_document, by_context):
        write()
    assert {c["_id"]: c["next"] for c in counters(mongoengine_db)} == {
        "logged.number": 2,
        "other.number": 1,
    }
    assert {d["label"]: d["number"] for d in mongoengine_db["other"].find()} == {
        "context": 1,
        "document": 2,
    }


class OnTwoServers(Document):
    meta = {"db_alias": "two_servers"}
    number = SequenceField()


def test_the_same_counter_name_on_another_server_is_another_counter() -> None:
    # An alias reconnected to another cluster with the same database name: its counter is not
    # the one this process leased from (no warning, no floor).
    servers = [mongomock.MongoClient(), mongomock.MongoClient()]
    try:
        for server in servers:
            mongoengine.connect(
                "app",
                alias="two_servers",
                mongo_client_class=lambda *args, server=server, **kwargs: server,
                uuidRepresentation="standard",
            )
            try:
                OnTwoServers._collection = None
                assert [OnTwoServers().save().number for _ in range(3)] == [1, 2, 3]
            finally:
                mongoengine.disconnect("two_servers")
    finally:
        OnTwoServers._collection = None
        reset_process_state()
    for server in servers:
        assert [doc["number"] for doc in server.app.on_two_servers.find()] == [1, 2, 3]


def test_a_counter_moved_down_by_hand_is_moved_back_with_warnings_as_errors(
    mongoengine_db: Any,
) -> None:
    """Probe: the warning came before the repair, so with warnings as errors the counter stayed
    below what was leased, and every save failed."""

    class Moved(Document):
        number = SequenceField(batch_size=10)

    assert [Moved().save().number for _ in range(11)] == list(range(1, 12))  # 1..20 leased
    # This process's block (12..20) is dropped; the record of what it leased is kept.
    discard_blocks(mongoengine_db.name, DEFAULT_COLLECTION, "moved.number")
    counters = mongoengine_db[DEFAULT_COLLECTION]
    counters.update_one({"_id": "moved.number"}, {"$set": {"next": 0}})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(RuntimeWarning, match="moved down without"):
            Moved().save()  # leased 1..10 again: dropped, and the counter moved back to 20
        assert counters.find_one({"_id": "moved.number"})["next"] == 20
        assert Moved().save().number == 21
    assert sorted(doc["number"] for doc in Moved._get_collection().find()) == [
        *range(1, 12),
        21,
    ]


def test_a_counter_set_on_purpose_then_dropped_starts_where_it_was_set(
    mongoengine_db: Any,
) -> None:
    class Restarted(Document):
        number = SequenceField(batch_size=10)

    assert [Restarted().save().number for _ in range(2)] == [1, 2]
    Restarted.number.set_next_value(0)  # leased 1..10 before: not a floor now
    mongoengine_db.drop_collection(DEFAULT_COLLECTION)
    assert Restarted().save().number == 1  # no warning (an error in this suite)


@pytest.mark.parametrize(
    ("then", "warned"),
    [
        # dropped: made again where it was set, not from 1
        (lambda db: db.drop_collection(DEFAULT_COLLECTION), "was deleted while this process"),
        # moved down by hand: moved back past where it was set
        (
            lambda db: db[DEFAULT_COLLECTION].update_one(
                {"_id": "set_up.number"}, {"$set": {"next": 0}}
            ),
            "moved down without",
        ),
    ],
    ids=["dropped", "moved-down-by-hand"],
)
def test_a_counter_set_up_on_purpose_never_goes_back_below_where_it_was_set(
    mongoengine_db: Any, then: Callable[[Any], Any], warned: str
) -> None:
    class SetUp(Document):
        number = SequenceField(batch_size=10)

    assert [SetUp().save().number for _ in range(3)] == [1, 2, 3]
    SetUp.number.set_next_value(1000)
    then(mongoengine_db)
    with pytest.warns(RuntimeWarning, match=warned):
        numbers = [SetUp().save().number for _ in range(3)]
    assert numbers == [1001, 1002, 1003]
    stored = sorted(doc["number"] for doc in SetUp._get_collection().find())
    assert stored == [1, 2, 3, 1001, 1002, 1003]


def test_a_counter_set_up_by_the_admin_api_then_dropped_starts_where_it_was_set(
    mongoengine_db: Any,
) -> None:
    class AdminSet(Document):
        number = SequenceField(batch_size=10)

    assert [AdminSet().save().number for _ in range(2)] == [1, 2]
    admin.set_next_value(mongoengine_db, "admin_set.number", 500)
    mongoengine_db.drop_collection(DEFAULT_COLLECTION)
    with pytest.raises(ValueError, match="deleted while this process held values of it up to 499"):
        admin.set_next_value(mongoengine_db, "admin_set.number", 100)
    with pytest.warns(RuntimeWarning):
        assert [AdminSet().save().number for _ in range(2)] == [500, 501]


def test_a_block_sequence_never_repeats_a_value_a_one_per_lease_sequence_took(mongoengine_db):
    class MixedBlocks(Document):
        number = SequenceField(sequence_name="mixed", batch_size=10)

    class MixedSingles(Document):
        number = SequenceField(sequence_name="mixed")  # batch_size=1

    MixedBlocks().save()  # A leases 1..10, hands out 1
    [MixedSingles().save() for _ in range(3)]  # B: 11, 12, 13
    mongoengine_db.drop_collection(DEFAULT_COLLECTION)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        [MixedBlocks().save() for _ in range(12)]  # 2..10 from its block, then a new lease
    numbers = [d["number"] for d in mongoengine_db.mixed_blocks.find()]
    numbers += [d["number"] for d in mongoengine_db.mixed_singles.find()]
    # observed: 11, 12, 13 twice (the floor is 10: B's leases were not recorded)
    assert len(numbers) == len(set(numbers)), sorted(numbers)


def test_sequence_used_directly_two_batch_sizes(mongoengine_db):
    blocks = Sequence("direct", database=mongoengine_db, batch_size=10)
    single = Sequence("direct", database=mongoengine_db)
    handed = [blocks.next()] + [single.next() for _ in range(3)]  # 1; 11, 12, 13
    mongoengine_db.drop_collection(DEFAULT_COLLECTION)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        handed += [blocks.next() for _ in range(12)]
    assert len(handed) == len(set(handed)), handed


def test_lease_with_batch_size_one_is_a_held_block(mongoengine_db):
    seq = Sequence("leased", database=mongoengine_db)
    held = seq.lease(5)  # 1..5, the caller's to hand out
    mongoengine_db.drop_collection(DEFAULT_COLLECTION)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        after = seq.next()
    assert after not in held, (list(held), after)


def test_a_dropped_sharded_counter_is_recreated_with_its_bounds(mongoengine_db: Any) -> None:
    sequence = Sequence(
        "parts", database=mongoengine_db, batch_size=2, digits=2, shards=2, rng=random.Random(7)
    )
    first = [sequence.next() for _ in range(6)]
    leased = {doc["_id"]: doc for doc in mongoengine_db["mongoengine.counters"].find()}
    mongoengine_db.drop_collection("mongoengine.counters")
    with pytest.warns(RuntimeWarning, match="was deleted while this process held values") as seen:
        later = [sequence.next() for _ in range(6)]
    assert {w.filename for w in seen} == {__file__}  # the user's line (review AG)
    assert not set(first) & set(later)
    recreated = {doc["_id"]: doc for doc in mongoengine_db["mongoengine.counters"].find()}
    assert set(leased) & set(recreated)
    for document_id in set(leased) & set(recreated):
        # Recreated with its bounds, where it was.
        before, after = leased[document_id], recreated[document_id]
        assert (after["low"], after["high"]) == (before["low"], before["high"])
        assert after["next"] >= before["next"]


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork()")
def test_fork_child_discards_the_parents_blocks(mongoengine_db: Any) -> None:
    sequence = Sequence("forked", database=mongoengine_db, batch_size=100)
    assert sequence.next() == 1
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        try:
            os.close(read_end)
            try:
                with warnings.catch_warnings():
                    # A real server: pymongo warns on the first use of a client made before
                    # fork() (filterwarnings=error would make it an exception). The child must
                    # use the parent's client: the sequence it holds is the parent's.
                    warnings.filterwarnings("ignore", "MongoClient opened before fork")
                    reply = str(sequence.next())
            except BaseException as error:  # the parent reports it
                reply = f"{type(error).__name__}: {error}"
            os.write(write_end, reply.encode())
        finally:
            os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end) as pipe:
        reply = pipe.read()
    os.waitpid(pid, 0)
    assert reply.isdigit(), f"the child failed: {reply}"
    child_value = int(reply)
    # The child leased its own block (on mongomock, in its copy of the store; on a server, after
    # the parent's): never a value of the parent's block 1..100.
    assert child_value == 101
    assert sequence.next() == 2


# -- start, digits, exhaustion, overflow --------------------------------------------------------


def test_start_on_a_new_counter_and_below_an_existing_one(mongoengine_db: Any) -> None:
    fresh = Sequence("fresh", database=mongoengine_db, start=500)
    assert fresh.next() == 500
    assert counter(mongoengine_db, "fresh") == {"_id": "fresh", "next": 500}
    mongoengine_db[DEFAULT_COLLECTION].insert_one({"_id": "old", "next": 3})
    raised = Sequence("old", database=mongoengine_db, start=100, batch_size=5)
    assert raised.next() == 100  # never below start
    assert counter(mongoengine_db, "old") == {"_id": "old", "next": 104}
    above = Sequence("old", database=mongoengine_db, start=50)
    assert above.next() == 105  # a counter already past start continues


def test_digits_exhaustion_raises_before_anything_is_written(mongoengine_db: Any) -> None:
    class Code(Document):
        id = SequenceField(primary_key=True, digits=2, start=95, batch_size=4)

    saved = []
    for _ in range(5):
        doc = Code()
        doc.save()
        saved.append(doc.id)
    assert saved == [95, 96, 97, 98, 99]
    with pytest.raises(IdSpaceExhaustedError, match=r"every value from 95 to 99") as caught:
        Code().save()
    assert isinstance(caught.value, RuntimeError)
    assert mongoengine_db["code"].count_documents({}) == 5
    with pytest.raises(IdSpaceExhaustedError):
        Code.objects.insert([Code(), Code()], load_bulk=False)
    assert mongoengine_db["code"].count_documents({}) == 5
    # The counter stops at the last value: it never moves past the space.
    assert counter(mongoengine_db, "code.id") == {"_id": "code.id", "next": 99}


def test_a_bulk_insert_too_big_for_the_space_left_keeps_the_values_left(
    mongoengine_db: Any,
) -> None:
    """Review AS: the values left were leased, then lost with the error, and every later
    save() raised with values never handed out."""

    class Small(Document):
        id = SequenceField(primary_key=True, digits=1, batch_size=4)

    assert [Small().save().id for _ in range(5)] == [1, 2, 3, 4, 5]  # 6..8 held here
    with pytest.raises(
        IdSpaceExhaustedError, match=r"^6 values were asked for, and only 4 are left"
    ):
        Small.objects.insert([Small() for _ in range(6)], load_bulk=False)
    assert sorted(doc["_id"] for doc in mongoengine_db["small"].find()) == [1, 2, 3, 4, 5]
    assert counter(mongoengine_db, "small.id") == {"_id": "small.id", "next": 9}
    assert [doc.pk for doc in Small.objects.insert([Small(), Small()])] == [6, 7]
    assert [Small().save().id for _ in range(2)] == [8, 9]
    with pytest.raises(IdSpaceExhaustedError, match=r"every value from 1 to 9"):
        Small().save()
    assert sorted(doc["_id"] for doc in mongoengine_db["small"].find()) == list(range(1, 10))


def test_a_counter_moved_down_by_hand_never_hands_out_a_value_again(mongoengine_db: Any) -> None:
    """Review AS: moved down in the shell (not by set_next_value()) while a process ran, the
    counter handed that process the values it had leased again: a field without a unique
    index stored them twice."""

    class Moved(Document):
        id = SequenceField(primary_key=True, batch_size=10)
        number = SequenceField(batch_size=10)

    for _ in range(12):
        Moved().save()  # blocks 1..10 and 11..20 of each counter leased
    mongoengine_db["mongoengine.counters"].update_many({}, {"$set": {"next": 0}})
    for _ in range(8):
        Moved().save()  # 13..20, held already
    with pytest.warns(RuntimeWarning, match=r"gave 1, but this process leased .* up to 20"):
        Moved().save()
    for _ in range(3):
        Moved().save()
    stored = list(mongoengine_db["moved"].find())
    assert sorted(doc["_id"] for doc in stored) == list(range(1, 25))
    assert sorted(doc["number"] for doc in stored) == list(range(1, 25))
    assert counter(mongoengine_db, "moved.number") == {"_id": "moved.number", "next": 30}


def test_two_sequences_leasing_from_one_counter_at_once_is_no_move_down(
    mongoengine_db: Any,
) -> None:
    """A lease recorded after another one that started later (two sequences of one process on
    one counter) gives lower values: not a counter moved down, and its block is kept."""
    first = Sequence("shared", database=mongoengine_db, batch_size=10)
    second = Sequence("shared", database=mongoengine_db, batch_size=10)
    store = first.store()
    counters = store.collection
    raced = []

    class Racing:  # the counter collection, where the second lease lands inside the first's
        def __getattr__(self, name: str) -> Any:
            return getattr(counters, name)

        def find_one_and_update(self, *args: Any, **kwargs: Any) -> Any:
            found = counters.find_one_and_update(*args, **kwargs)
            if not raced:
                raced.append(second.next())
            return found

    assert [first.next(), second.next()] == [1, 11]  # both have held values of the counter
    store.collection = Racing()
    first.discard()
    second.discard()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert first.next() == 21  # leased 21..30, recorded after the second's 31..40
    assert raced == [31]
    assert [first.next() for _ in range(9)] == list(range(22, 31))
    assert second.next() == 32
    assert counter(mongoengine_db, "shared") == {"_id": "shared", "next": 40}


def test_a_partial_block_at_the_end_of_the_space(mongoengine_db: Any) -> None:
    sequence = Sequence("end", database=mongoengine_db, digits=1, batch_size=4)
    assert [sequence.next() for _ in range(9)] == list(range(1, 10))
    assert counter(mongoengine_db, "end") == {"_id": "end", "next": 9}
    with pytest.raises(IdSpaceExhaustedError):
        sequence.next()


def test_int64_end_never_overflows(mongoengine_db: Any) -> None:
    mongoengine_db[DEFAULT_COLLECTION].insert_one({"_id": "big", "next": INT64_MAX - 3})
    sequence = Sequence("big", database=mongoengine_db, batch_size=1000)
    assert [sequence.next() for _ in range(3)] == [INT64_MAX - 2, INT64_MAX - 1, INT64_MAX]
    with pytest.raises(IdSpaceExhaustedError):
        sequence.next()
    assert counter(mongoengine_db, "big") == {"_id": "big", "next": INT64_MAX}


def test_a_bulk_larger_than_what_is_left(mongoengine_db: Any) -> None:
    sequence = Sequence("short", database=mongoengine_db, digits=1)
    with pytest.raises(IdSpaceExhaustedError):
        sequence.next_values(12)
    assert counter(mongoengine_db, "short") == {"_id": "short", "next": 9}


# -- shards -------------------------------------------------------------------------------------


def test_shard_bounds_match_the_articles_example() -> None:
    space = Space.build(start=0, digits=12, shards=1000)
    assert space.bounds(0) == (0, 999_999_999)
    assert space.bounds(499) == (499_000_000_000, 499_999_999_999)
    assert space.bounds(999) == (999_000_000_000, 999_999_999_999)
    for value, shard in ((0, 0), (499_000_000_000, 499), (498_999_999_999, 498), (10**12 - 1, 999)):
        assert space.shard_of(value) == shard
    assert space.shard_of(10**12) is None


@pytest.mark.parametrize(("start", "digits", "shards"), [(1, 3, 7), (0, 2, 3), (5, 4, 1000)])
def test_shards_cover_the_space_exactly(start: int, digits: int, shards: int) -> None:
    space = Space.build(start=start, digits=digits, shards=shards)
    values = [v for k in range(shards) for v in range(space.bounds(k)[0], space.bounds(k)[1] + 1)]
    assert values == list(range(start, 10**digits))
    assert all(space.shard_of(v) == k for k in range(shards) for v in space.bounds(k))


def test_sharded_counters_store_their_bounds(mongoengine_db: Any) -> None:
    class Card(Document):
        id = SequenceField(primary_key=True, start=0, digits=3, shards=4)

    card = Card()
    card.save()
    docs = counters(mongoengine_db)
    assert len(docs) == 1
    shard = docs[0]["shard"]
    low = shard * 250
    assert docs[0] == {
        "_id": f"card.id#{shard}",
        "next": low,
        "low": low,
        "high": low + 249,
        "sequence": "card.id",
        "shard": shard,
    }
    assert card.id == low


def test_sharded_sequence_hands_out_the_whole_space_then_fails(mongoengine_db: Any) -> None:
    sequence = Sequence(
        "cards",
        database=mongoengine_db,
        start=0,
        digits=3,
        shards=8,
        batch_size=16,
        rng=random.Random(7),
    )
    values = [sequence.next() for _ in range(1000)]
    assert sorted(values) == list(range(1000))
    with pytest.raises(IdSpaceExhaustedError, match="all 8 shard counters"):
        sequence.next()
    for doc in counters(mongoengine_db):
        assert doc["next"] == doc["high"]  # never spilled past its own range


def test_an_exhausted_shard_is_skipped(mongoengine_db: Any) -> None:
    collection = mongoengine_db[DEFAULT_COLLECTION]
    collection.insert_one(
        {"_id": "s#1", "next": 199, "low": 100, "high": 199, "sequence": "s", "shard": 1}
    )
    sequence = Sequence("s", database=mongoengine_db, start=0, digits=3, shards=10, batch_size=5)
    values = sequence.next_values(900)
    assert sorted(values) == [v for v in range(1000) if not 100 <= v <= 199]


# -- corrupted counters -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("document", "shards", "message"),
    [
        # next is text
        ({"_id": "bad", "next": "12"}, 1, r"'next' is '12'; expected an integer"),
        # next is a boolean (BSON bool is not a number)
        ({"_id": "bad", "next": True}, 1, r"'next' is True"),
        # next missing
        ({"_id": "bad"}, 1, r"'next' is None"),
        # a float
        ({"_id": "bad", "next": 4.5}, 1, r"'next' is 4.5"),
        # a shard without its bounds
        ({"_id": "bad#0", "next": 5, "sequence": "bad"}, 2, r"bound 'low' is None"),
        # a shard with other bounds than the configuration
        ({"_id": "bad#0", "next": 5, "low": 1, "high": 50}, 2, r"owns 1\.\.50 but the sequence"),
        # next outside the bounds
        ({"_id": "bad#0", "next": 900, "low": 1, "high": 49}, 2, r"'next' is 900, outside"),
    ],
)
def test_a_corrupted_counter_raises_naming_the_document(
    mongoengine_db: Any, document: dict[str, Any], shards: int, message: str
) -> None:
    mongoengine_db[DEFAULT_COLLECTION].insert_one(document)
    sequence = Sequence(
        "bad", database=mongoengine_db, digits=2, shards=shards, rng=random.Random(0)
    )
    if shards > 1:
        sequence._store = None
        sequence.store()._live = [0]  # lease from shard 0 only
    with pytest.raises(CorruptedCounterError, match=message) as caught:
        sequence.next()
    assert repr(document["_id"]) in str(caught.value)
    assert isinstance(caught.value, ValueError)


@pytest.mark.parametrize(("before", "after"), [(1, 3), (3, 1), (3, 4), (4, 3)])
def test_shards_changed_on_a_live_sequence_are_refused_before_a_value_is_handed_out(
    mongoengine_db: Any, before: int, after: int
) -> None:
    def sequence(shards: int) -> Sequence:
        return Sequence(
            "tickets", database=mongoengine_db, digits=1, shards=shards, rng=random.Random(3)
        )

    handed = sequence(before).next_values(9)
    assert sorted(handed) == list(range(1, 10))  # every value, from every counter of the layout
    stored = counters(mongoengine_db)
    changed = sequence(after)
    if 1 < before < after:
        changed.store()._live = [after - 1]  # a shard the first layout does not have
    with pytest.raises(CorruptedCounterError, match="cannot change on a live sequence"):
        changed.next()
    assert counters(mongoengine_db) == stored  # no counter made, none moved


def test_a_scoped_sequences_layout_is_looked_up_by_the_id_index_alone(
    mongoengine_db: Any,
) -> None:
    """Probe AF: the look-up named the shards by their sequence and scope fields, which no
    index holds: each new scope read every counter document. It names _id keys and ranges
    only; shards changed in one scope are still refused, other scopes are not confused."""
    import mongomock

    def sequence(scope: str, shards: int) -> Sequence:
        return Sequence(
            "bills",
            database=mongoengine_db,
            digits=1,
            shards=shards,
            scope=scope,
            rng=random.Random(3),
        )

    assert sorted(sequence("acme", 3).next_values(9)) == list(range(1, 10))
    with mock.patch.object(
        mongomock.collection.Collection,
        "find",
        autospec=True,
        side_effect=mongomock.collection.Collection.find,
    ) as find:
        assert sequence("acme-2", 1).next() == 1  # a name the first one prefixes
    filters = [call.args[1] for call in find.call_args_list if len(call.args) > 1]
    layout = [f for f in filters if "$or" in f]
    assert layout, filters
    assert all("_id" in clause for f in layout for clause in f["$or"])
    # A scope whose text is another's and "#1" is no shard of it (review D: it was taken
    # for one, and refused as another layout).
    notes = [
        Sequence("notes", database=mongoengine_db, digits=1, scope=scope).next()
        for scope in ("x#1", "x", "x")
    ]
    assert notes == [1, 1, 2]
    stored = counters(mongoengine_db)
    with pytest.raises(CorruptedCounterError, match="cannot change on a live sequence"):
        sequence("acme", 1).next()
    assert counters(mongoengine_db) == stored


def test_a_field_keeps_a_bounded_number_of_scopes(
    mongoengine_db: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Probe AF: each scope's sequence stayed for the connection's life (5.5 KB each, a
    million tenants: 5.5 GB). Past the bound the one kept longest goes: its block's values
    are skipped, never handed out again."""
    from mongoengine_ids.sequence import field as field_module

    monkeypatch.setattr(field_module, "MAX_SEQUENCES", 3)

    class Bill(me.Document):
        tenant = me.StringField()
        number = SequenceField(scope="tenant", batch_size=10)
        meta = {"collection": "bounded_bills"}

    for tenant in "ABCDE":
        Bill(tenant=tenant).save()
    assert len(Bill.number._sequences) == 3
    Bill(tenant="A").save()  # A's sequence went: a new lease
    stored = sorted((d["tenant"], d["number"]) for d in mongoengine_db.bounded_bills.find())
    assert stored == [("A", 1), ("A", 11), ("B", 1), ("C", 1), ("D", 1), ("E", 1)]


class LetGoReceipt(me.Document):
    id = SequenceField(primary_key=True, batch_size=100)
    name = me.StringField()
    meta = {"collection": "receipts_let_go"}


def _saved_after_its_sequence_was_let_go(let_go: Callable[[Any], None]) -> tuple[Any, list[Any]]:
    """Save a receipt (leasing 1..100), ``let_go(database)`` of its sequence, have another
    writer store 2..5, and save another receipt: its id, and the stored (id, name) pairs."""
    with connected() as connect:
        database = connect()  # mongomock's own client: one collection object per name
        LetGoReceipt(name="first").save()
        let_go(database)
        raw = database.receipts_let_go
        raw.insert_many([{"_id": number, "name": f"other-{number}"} for number in range(2, 6)])
        made = LetGoReceipt(name="mine").save().id
        return made, sorted((d["_id"], d["name"]) for d in raw.find())


#: What :func:`_saved_after_its_sequence_was_let_go` stores when the collision drops the stale
#: block: the other writer's 2..5 are kept, and the receipt takes the next block's first value.
_STORED_AFTER_A_FRESH_BLOCK: Final = [
    (1, "first"),
    *((number, f"other-{number}") for number in range(2, 6)),
    (101, "mine"),
]


def test_past_the_bound_the_writes_of_a_collection_lease_from_a_sequence_the_field_keeps(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Probe BI: past the bound (4,096 tenant databases), the writes of a collection went on
    leasing from the sequence dropped from it, and a collision dropped the blocks of a new
    one: every retry took the next value of the stale block, and the save was refused."""
    from mongoengine_ids.sequence import field as field_module

    monkeypatch.setattr(field_module, "MAX_SEQUENCES", 2)

    def other_databases_push_it_out_of_the_bound(database: Any) -> None:
        for tenant in ("t1", "t2", "t3"):
            LetGoReceipt.id.sequence_for(database.client[f"bounded_{tenant}"], LetGoReceipt)

    made, stored = _saved_after_its_sequence_was_let_go(other_databases_push_it_out_of_the_bound)
    assert made == 101
    assert stored == _STORED_AFTER_A_FRESH_BLOCK


def test_a_collision_drops_the_blocks_of_the_sequence_the_write_leased_from() -> None:
    """Review T: a write may lease from a sequence the field no longer keeps by its key (the
    bound let it go while the write looked it up); the collision must drop that sequence's
    blocks, not those of another made for the key."""

    def let_go_by_its_key_still_the_collections(database: Any) -> None:
        LetGoReceipt.id._sequences.clear()

    made, stored = _saved_after_its_sequence_was_let_go(let_go_by_its_key_still_the_collections)
    assert made == 101
    assert stored == _STORED_AFTER_A_FRESH_BLOCK


class LetGoTenant(me.Document):
    id = SequenceField(primary_key=True, batch_size=10)
    number = SequenceField(scope="shop")
    shop = me.StringField()
    meta = {"collection": "tenants_let_go"}


def test_the_sequences_of_a_disconnected_client_are_let_go(mongoengine_connect: Connect) -> None:
    """Probe BI: a field kept the sequence of every connection it wrote through, and each held
    its client after ``disconnect()``: a process connecting per tenant kept every closed client.
    The next sequence a field makes lets go of those of connections MongoEngine ended."""
    clients = []
    for tenant in range(3):
        database = mongoengine_connect()  # the default alias, a new client each time
        LetGoTenant(shop="a").save()
        LetGoTenant.objects.insert([LetGoTenant(shop="b")])
        assert [d["number"] for d in database.tenants_let_go.find().sort("_id")] == [1, 1]
        clients.append(weakref.ref(database.client))
        if tenant < 2:
            mongoengine.disconnect()
    gc.collect()
    assert [client() is None for client in clients] == [True, True, False]
    # Those of the connection in use are kept: the next save takes the block's next key.
    LetGoTenant(shop="a").save()
    assert LetGoTenant.objects.order_by("-id").first().id == 3


def test_a_sequence_made_for_a_database_of_ones_own_is_kept(mongoengine_connect: Connect) -> None:
    """Only connections MongoEngine made and ended are let go: a database given to
    ``sequence_for()`` by hand keeps its sequence (and its blocks) however many are made."""
    database = mongoengine_connect()
    client = mongomock.MongoClient() if TEST_URI is None else pymongo.MongoClient(TEST_URI)
    own = client[database.name]
    try:
        sequence = LetGoTenant.id.sequence_for(own, LetGoTenant)
        mongoengine.disconnect()
        mongoengine_connect()
        LetGoTenant(shop="a").save()  # a sequence made for the new connection
        assert LetGoTenant.id.sequence_for(own, LetGoTenant) is sequence
    finally:
        client.close()


def test_a_used_up_sharded_scope_names_its_own_counters(mongoengine_db: Any) -> None:
    """Probe BI: the message named ``u.n#0...``, counters that do not exist, not the scope's
    ``u.n@acme#0``."""

    class Ticket(me.Document):
        tenant = me.StringField()
        number = SequenceField(scope="tenant", digits=1, shards=3)
        meta = {"collection": "used_up_tickets"}

    for _ in range(9):
        Ticket(tenant="acme").save()
    with pytest.raises(IdSpaceExhaustedError) as raised:
        Ticket(tenant="acme").save()
    assert "all 3 shard counters used_up_tickets.number@acme#0..." in str(raised.value)
    assert "used_up_tickets.number@acme#0" in {
        document["_id"] for document in mongoengine_db[DEFAULT_COLLECTION].find()
    }


def test_a_new_shard_of_the_same_layout_is_made_beside_the_others(mongoengine_db: Any) -> None:
    def sequence() -> Sequence:
        return Sequence("tickets", database=mongoengine_db, digits=2, shards=3, batch_size=1)

    values = [sequence().next() for _ in range(30)]  # a new Sequence each time: shards at random
    assert len(set(values)) == 30
    assert len(counters(mongoengine_db)) == 3


def test_a_sharded_sequence_used_up_starts_again_after_its_counters_are_dropped(
    mongoengine_db: Any,
) -> None:
    """The documented fixture of your own: drop the database, then ``reset_process_state()``;
    a sharded sequence had kept its shards as used up (found by review AG)."""
    ticks = Sequence("ticks", database=mongoengine_db, digits=1, shards=3, batch_size=1)
    assert sorted(ticks.next() for _ in range(9)) == list(range(1, 10))
    with pytest.raises(IdSpaceExhaustedError):
        ticks.next()
    used_up = counters(mongoengine_db)
    mongoengine_db.client.drop_database(mongoengine_db.name)
    reset_process_state()
    assert counters(mongoengine_db) == []
    again = [ticks.next() for _ in range(9)]
    assert sorted(again) == list(range(1, 10))
    assert counters(mongoengine_db) == used_up


# -- formatting ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("number", "check"),
    [
        ("7992739871", 3),  # the textbook example: 79927398713
        ("0", 0),
        ("1", 8),
        ("000000000042", luhn_check_digit("42")),  # leading zeros do not change it
        ("453201511283036", 6),  # a Visa-style test number 4532015112830366
    ],
)
def test_luhn_check_digit(number: str, check: int) -> None:
    assert luhn_check_digit(number) == check


def test_format_and_parse_round_trip() -> None:
    fmt = SequenceFormat(prefix="AC-", width=12, luhn=True)
    text = fmt.format(42)
    assert text == "AC-000000000042" + str(luhn_check_digit("000000000042"))
    assert fmt.parse(text) == 42
    wrong_check = text[:-1] + str((int(text[-1]) + 1) % 10)
    no_prefix = text[3:]
    too_short = "AC-" + text[4:]
    for bad in (no_prefix, too_short, wrong_check, "AC-x"):
        with pytest.raises(InvalidIdError, match="expected 'AC-' then 12 digits"):
            fmt.parse(bad)


def test_formatted_field_stores_text_and_queries_accept_both(mongoengine_db: Any) -> None:
    class Account(Document):
        number = SequenceField(prefix="AC-", digits=6, zero_pad=True, luhn=True, unique=True)
        owner = StringField()

    account = Account(owner="ada")
    account.save()
    expected = "AC-000001" + str(luhn_check_digit("000001"))
    assert account.number == expected
    assert mongoengine_db["account"].find_one()["number"] == expected
    assert Account.objects(number=1).count() == 1
    assert Account.objects(number=expected).count() == 1
    assert Account.objects(number__in=[1, "AC-0000026"]).count() == 1
    reloaded = Account.objects.get(number=1)
    assert reloaded.number == expected
    wrong = expected[:-1] + str((int(expected[-1]) + 1) % 10)
    with pytest.raises(ValidationError, match="check digit"):
        Account(number=wrong, owner="eve").save()
    with pytest.raises(ValidationError, match=r"cannot query Account\.number by 'nope'"):
        Account.objects(number="nope").count()


def test_digits_with_a_wrong_check_digit_are_refused_without_a_prefix(
    mongoengine_db: Any,
) -> None:
    # Without a prefix the stored values are digits too: "17", number 1 with a wrong check
    # digit (1 is "18"), had been read as the number 17 and found another document ("174").
    class LuhnInvoice(Document):
        id = SequenceField(primary_key=True, luhn=True)
        customer = StringField()

    for index in range(20):
        LuhnInvoice(customer=f"c{index + 1}").save()
    stored = {doc["_id"]: doc["customer"] for doc in mongoengine_db["luhn_invoice"].find()}
    assert (stored["18"], stored["174"]) == ("c1", "c17")
    assert LuhnInvoice.objects.get(id="18").customer == "c1"
    assert LuhnInvoice.objects.get(id=17).customer == "c17"  # the number, as an int
    with pytest.raises(InvalidQueryValueError, match=r"by '17': expected digits then a Luhn"):
        LuhnInvoice.objects.get(id="17")
    with pytest.raises(ValidationError, match="check digit"):
        LuhnInvoice(id="17", customer="typo").save()
    assert mongoengine_db["luhn_invoice"].count_documents({}) == 20


def test_unformatted_field_validation(mongoengine_db: Any) -> None:
    class Short(Document):
        id = SequenceField(primary_key=True, digits=3)

    with pytest.raises(
        ValidationError, match=r"1000 is out of range: expected an int from 0 to 999"
    ):
        Short(id=1000).save()
    with pytest.raises(ValidationError, match=r"'x' is not a sequence value"):
        Short(id="x").save()
    assert Short.objects(id="7").count() == 0  # a numeric string queries as the number


# -- scoped sequences ---------------------------------------------------------------------------


def test_scoped_sequences_number_per_scope(hooked: Connect, calls: Calls) -> None:
    db = hooked()

    class Invoice(Document):
        tenant = StringField()
        number = SequenceField(scope="tenant")

    made = []
    for tenant in ["acme", "acme", "zeta", "acme", "zeta"]:
        invoice = Invoice(tenant=tenant)
        invoice.save()
        made.append((tenant, invoice.number))
    assert made == [("acme", 1), ("acme", 2), ("zeta", 1), ("acme", 3), ("zeta", 2)]
    assert counters(db) == [
        {"_id": "invoice.number@acme", "next": 3, "sequence": "invoice.number", "scope": "acme"},
        {"_id": "invoice.number@zeta", "next": 2, "sequence": "invoice.number", "scope": "zeta"},
    ]
    calls.calls.clear()
    batch = [Invoice(tenant=t) for t in ["zeta", "acme", "zeta", "acme", "zeta"]]
    Invoice.objects.insert(batch, load_bulk=False)
    assert [(i.tenant, i.number) for i in batch] == [
        ("zeta", 3),
        ("acme", 4),
        ("zeta", 4),
        ("acme", 5),
        ("zeta", 5),
    ]
    assert calls.count("find_one_and_update") == 2  # one lease per scope
    with pytest.raises(ValidationError, match="numbered per 'tenant', which is None"):
        Invoice(number=None).save()


def test_a_duplicate_of_another_field_is_not_a_scoped_number_colliding(
    mongoengine_db: Any,
) -> None:
    """The same number in another scope says nothing: a duplicate e-mail is the e-mail's
    (NotUniqueError, not retried), while a number held in the same scope is retried."""

    class Ticket(Document):
        tenant = StringField(required=True)
        email = StringField(unique=True)
        number = SequenceField(scope="tenant", unique_with="tenant")

    for i in range(3):
        Ticket(tenant="A", email=f"a{i}").save()
    with pytest.raises(NotUniqueError) as raised:
        Ticket(tenant="B", email="a0").save()
    assert not isinstance(raised.value, RetriesExhaustedError)
    # One number (1) was spent by that insert, not one per retry.
    assert Ticket(tenant="B", email="b0").save().number == 2
    mongoengine_db["ticket"].insert_one({"tenant": "B", "email": "imported", "number": 3})
    assert Ticket(tenant="B", email="b1").save().number == 4  # 3 collided in B: retried
    stored = sorted((d["tenant"], d["number"]) for d in mongoengine_db["ticket"].find())
    assert stored == [("A", 1), ("A", 2), ("A", 3), ("B", 2), ("B", 3), ("B", 4)]


def test_a_scoped_number_unique_with_another_field_collides_by_that_index(
    mongoengine_db: Any,
) -> None:
    """Numbered per tenant, unique with the year: a number held in another tenant in the same
    year collides (the index is number and year: retried), a duplicate e-mail does not."""

    class Ticket(Document):
        tenant = StringField(required=True)
        year = IntField(required=True)
        email = StringField(unique=True)
        number = SequenceField(scope="tenant", unique_with="year")

    for i in range(3):
        Ticket(tenant="A", year=2025, email=f"a{i}").save()
    with pytest.raises(NotUniqueError) as raised:
        Ticket(tenant="B", year=2026, email="a0").save()  # 1 is free in 2026: the e-mail's
    assert not isinstance(raised.value, RetriesExhaustedError)
    # B's next is 2 (1 spent above), held with 2025 by A's ticket 2, and 3 by A's 3: retried.
    assert Ticket(tenant="B", year=2025, email="b0").save().number == 4
    assert Ticket(tenant="B", year=2026, email="b1").save().number == 5
    stored = sorted((d["tenant"], d["year"], d["number"]) for d in mongoengine_db["ticket"].find())
    assert stored == [
        ("A", 2025, 1),
        ("A", 2025, 2),
        ("A", 2025, 3),
        ("B", 2025, 4),
        ("B", 2026, 5),
    ]


def test_a_scoped_number_unique_on_its_own_collides_across_scopes(mongoengine_db: Any) -> None:
    """A scoped number under an index of its own (unique=True): another scope's holder is a
    collision, retried; a server's error naming another index is not this field's."""

    class Seat(Document):
        room = StringField(required=True)
        number = SequenceField(scope="room", unique=True)

    Seat(room="A").save()
    assert Seat(room="B").save().number == 2  # 1 is held in room A: retried
    field = Seat._fields["number"]
    other = pymongo.errors.DuplicateKeyError("E11000", 11000, {"keyPattern": {"email": 1}})
    write = Write(Seat, seam.class_collection(Seat), [Seat(room="A")])
    assert field.is_collision(write, other, 1) is False
    ours = pymongo.errors.DuplicateKeyError("E11000", 11000, {"keyPattern": {"number": 1}})
    assert field.is_collision(write, ours, 1) is True


def test_a_scoped_number_unique_per_scope_names_its_own_scope_when_retries_run_out(
    mongoengine_db: Any,
) -> None:
    """Probe BK-2: declared unique_with its scope, it was told that documents of other scopes
    held the numbers and to declare unique_with=, which it has."""

    class Bench(Document):
        room = StringField(required=True)
        number = SequenceField(scope="room", unique_with="room")

    Bench.ensure_indexes()
    mongoengine_db.bench.insert_many([{"room": "A", "number": n} for n in range(1, 7)])
    with pytest.raises(RetriesExhaustedError) as raised:
        Bench(room="A").save()
    message = str(raised.value)
    assert "held by stored documents of the same one" in message
    assert "set_next_value(db, 'bench.number', <highest stored value + 1>, scope=" in message
    assert "unique_with" not in message
    assert mongoengine_db.bench.count_documents({}) == 6  # nothing written


def test_a_scoped_number_under_a_per_scope_index_of_meta_names_its_own_scope_too(
    mongoengine_db: Any,
) -> None:
    """Session 34's W-F4: unique per scope by an index declared in meta["indexes"] (not by
    unique_with=), it was told that documents of other scopes held the numbers."""

    class Stool(Document):
        room = StringField(required=True)
        number = SequenceField(scope="room")
        meta = {"indexes": [{"fields": ["room", "number"], "unique": True}]}

    Stool.ensure_indexes()
    mongoengine_db.stool.insert_many([{"room": "A", "number": n} for n in range(1, 7)])
    assert Stool(room="B").save().number == 1  # another room's 1 is no collision
    with pytest.raises(RetriesExhaustedError) as raised:
        Stool(room="A").save()
    message = str(raised.value)
    assert "held by stored documents of the same one" in message
    assert "unique_with" not in message
    assert sorted((d["room"], d["number"]) for d in mongoengine_db.stool.find()) == [
        *(("A", n) for n in range(1, 7)),
        ("B", 1),
    ]


def test_a_scoped_number_unique_on_its_own_says_so_when_retries_run_out(
    mongoengine_db: Any,
) -> None:
    """It said the numbers were imported, and advised set_next_value(), which a scoped field
    refuses without scope= (probe AI)."""

    class Desk(Document):
        room = StringField(required=True)
        number = SequenceField(scope="room", unique=True)

    for room in range(4):  # each room's counter starts at 1: room r takes r + 1
        Desk(room=str(room)).save()
    with pytest.raises(RetriesExhaustedError, match=r"declare it unique_with='room'"):
        Desk(room="4").save()  # 1 to 4 held: the four draws of its retries collide


def test_a_scoped_primary_key_is_refused_when_declared() -> None:
    """Each scope numbers from the start: keys would repeat (probe AI: accepted, then every
    save skipped numbers until a misleading RetriesExhaustedError)."""
    with pytest.raises(ValueError, match=r"primary_key=True, scope='tenant'.*keys would repeat"):
        SequenceField(primary_key=True, scope="tenant")


class GenericTarget(Document):
    meta = {"collection": "generic_targets"}


class GenericScoped(Document):
    ref = me_fields.GenericReferenceField()
    refs = me_fields.ListField(me_fields.GenericReferenceField())
    n = SequenceField(scope="ref")
    m = SequenceField(scope="refs")
    meta = {"collection": "generic_scoped"}


def test_a_generic_reference_scope_names_one_counter_whichever_form_it_comes_in(
    mongoengine_db: Any,
) -> None:
    """A document, or its stored dict (backfill(), a document copied from a no_dereference()
    load): one scope the server matches as one named two counters, which both handed out the
    same numbers (probe AI)."""
    target = GenericTarget().save()
    GenericScoped(ref=target, refs=[target]).save()
    stored_ref = mongoengine_db.generic_scoped.find_one()["ref"]
    copied = GenericScoped.objects.no_dereference().first()
    GenericScoped.objects.insert(
        [GenericScoped(ref=copied.ref, refs=copied.refs), GenericScoped(ref=target, refs=[target])]
    )
    mongoengine_db.generic_scoped.insert_one({"ref": stored_ref, "refs": [stored_ref]})
    assert backfill(GenericScoped) == 2  # n and m of the document written past the package
    stored = list(mongoengine_db.generic_scoped.find())
    assert sorted(d["n"] for d in stored) == [1, 2, 3, 4]
    assert sorted(d["m"] for d in stored) == [1, 2, 3, 4]
    names = sorted(c["_id"] for c in mongoengine_db[DEFAULT_COLLECTION].find())
    assert len(names) == 2, names


def test_a_dict_scope_holding_cls_and_ref_keeps_its_counter(mongoengine_db: Any) -> None:
    """Only a generic reference's dict is named as its document is (review F: a DictField
    scope of those two keys moved to a new counter, which numbered from 1 again)."""

    class Ticket(Document):
        queue = me_fields.DictField()
        number = SequenceField(scope="queue")
        meta = {"collection": "dict_scoped_tickets"}

    assert [Ticket(queue={"_cls": "Desk", "_ref": 7}).save().number for _ in range(2)] == [1, 2]
    names = [c["_id"] for c in mongoengine_db[DEFAULT_COLLECTION].find()]
    assert names == ["dict_scoped_tickets.number@{'_cls': 'Desk', '_ref': 7}"]


_KEYS: dict[str, Callable[[], Any]] = {
    "LocalityUUIDField": lambda: LocalityUUIDField(primary_key=True),
    "UUID4Field": lambda: UUID4Field(primary_key=True),
    "UUID4Field(as_string=True)": lambda: UUID4Field(primary_key=True, as_string=True),
    "SequenceField": lambda: SequenceField(primary_key=True),
    "ObjectId": lambda: me_fields.ObjectIdField(primary_key=True, default=bson.ObjectId),
}
_REFERENCES: dict[str, Callable[[type[Document]], Any]] = {
    "ReferenceField": lambda model: me_fields.ReferenceField(model),
    "ReferenceField(dbref=True)": lambda model: me_fields.ReferenceField(model, dbref=True),
    "LazyReferenceField": lambda model: me_fields.LazyReferenceField(model),
    "GenericReferenceField": lambda model: me_fields.GenericReferenceField(),
}


@pytest.mark.parametrize("reference", list(_REFERENCES))
@pytest.mark.parametrize("key", list(_KEYS))
def test_a_scope_names_one_counter_on_every_write_path(
    mongoengine_db: Any, key: str, reference: str
) -> None:
    """A scope that refers to a document is one counter whichever path writes: save() and
    insert() serialise the reference, an upsert holds it as a query value (a UUID key's
    StoredUUID): both name the counter by the value the server stores."""

    class Tenant(Document):
        id = _KEYS[key]()

    class Invoice(Document):
        tenant = _REFERENCES[reference](Tenant)
        number = SequenceField(scope="tenant")
        label = StringField()

    tenant = Tenant().save()
    Invoice(tenant=tenant, label="save").save()
    Invoice.objects.insert([Invoice(tenant=tenant, label="insert")], load_bulk=False)
    Invoice.objects(label="upsert").update_one(upsert=True, set__tenant=tenant)
    Invoice.objects(label="by filter", tenant=tenant).upsert_one(set__label="by filter")
    Invoice.objects(label="modify").modify(upsert=True, set__tenant=tenant)
    stored = {doc["label"]: doc["number"] for doc in mongoengine_db["invoice"].find()}
    assert stored == {"save": 1, "insert": 2, "upsert": 3, "by filter": 4, "modify": 5}
    (only,) = [c for c in counters(mongoengine_db) if c.get("sequence") == "invoice.number"]
    assert only["next"] == 5


def test_a_float_scope_of_zero_is_one_scope_whatever_its_sign(mongoengine_db: Any) -> None:
    """Probe: -0.0 named a counter of its own ("@-0.0"), though the server matches it as 0.0:
    two documents of one scope got the same number."""

    class Reading(Document):
        level = me_fields.FloatField()
        number = SequenceField(scope="level")
        label = StringField()

    Reading(level=0.0).save()
    Reading(level=-0.0).save()
    Reading.objects.insert([Reading(level=-0.0)], load_bulk=False)
    Reading.objects(label="upsert").update_one(upsert=True, set__level=-0.0)
    numbers = sorted(doc["number"] for doc in Reading.objects(level=0.0).as_pymongo())
    assert numbers == [1, 2, 3, 4]
    assert [c["_id"] for c in counters(mongoengine_db)] == ["reading.number@0.0"]


class _Place(me.EmbeddedDocument):
    city = StringField()
    ref = UUID4Field()


def test_a_scope_holding_generated_values_is_numbered_as_stored(mongoengine_db: Any) -> None:
    """Probe V: the scope was read before the values inside it were made: the first document's
    counter was named by its place without the ref it was stored with, the second (the same
    place, its ref given) by the whole place: one number twice in one stored scope."""

    class Visit(Document):
        place = me_fields.EmbeddedDocumentField(_Place)
        number = SequenceField(scope="place")
        label = StringField()

    first = Visit(place=_Place(city="Oslo"), label="save").save()
    same = _Place(city="Oslo", ref=first.place.ref)
    Visit(place=same, label="same place").save()
    Visit.objects.insert(
        [Visit(place=_Place(city="Oslo", ref=first.place.ref), label="insert")], load_bulk=False
    )
    Visit(place=_Place(city="Oslo"), label="another ref").save()
    stored = {doc["label"]: doc for doc in mongoengine_db["visit"].find()}
    assert {label: doc["number"] for label, doc in stored.items()} == {
        "save": 1,
        "same place": 2,
        "insert": 3,
        "another ref": 1,
    }
    assert stored["save"]["place"] == stored["insert"]["place"]
    names = sorted(c["_id"] for c in counters(mongoengine_db))
    assert len(names) == 2
    assert all("ref" in name for name in names)


def test_a_scope_made_on_the_same_write_is_made_first(mongoengine_db: Any) -> None:
    """Probe V: a generated scope declared after the field numbered per it was still None
    when the number was made: every write was refused, saying to set it."""

    class Ticket(Document):
        number = SequenceField(scope="code")
        code = SequenceField(sequence_name="ticket_codes")

    Ticket().save()
    Ticket.objects.insert([Ticket(), Ticket()], load_bulk=False)
    stored = sorted((doc["code"], doc["number"]) for doc in mongoengine_db["ticket"].find())
    assert stored == [(1, 1), (2, 1), (3, 1)]


def test_a_number_follows_its_scope_drawn_again_after_a_collision(mongoengine_db: Any) -> None:
    """Probe V: the scope, a random value, collided and was drawn again; the number made from
    the first draw was kept, from the counter of a scope the document is not in."""

    class Seat(Document):
        number = SequenceField(scope="row")
        row = RandomUniqueField(digits=1, rng=Script(0, 0, 1, 1, 2))
        label = StringField()

    Seat(label="a").save()  # row 1
    Seat(label="b").save()  # row 1 taken: row 2
    Seat.objects.insert([Seat(label="c")], load_bulk=False)  # row 2 taken: row 3
    stored = {doc["label"]: (doc["row"], doc["number"]) for doc in mongoengine_db["seat"].find()}
    assert stored == {"a": (1, 1), "b": (2, 1), "c": (3, 1)}


def test_numbers_made_from_a_scope_drawn_again_are_all_made_again(
    mongoengine_db: Any,
) -> None:
    """Review: a chain of scopes (row -> number -> sub): after row collided, number was made
    again but sub, made from number, was not: one (number, sub) pair held three times."""

    class Seat(Document):
        row = RandomUniqueField(digits=1, rng=Script(0, 0, 1, 0, 2, 3))
        number = SequenceField(scope="row")
        sub = SequenceField(scope="number", sequence_name="seat_sub")
        label = StringField()

    Seat(label="a").save()  # row 1
    Seat(label="b").save()  # row 1 taken: row 2
    Seat.objects.insert([Seat(label="c")], load_bulk=False)  # row 1 taken: row 3
    Seat(label="d").save()  # row 4
    stored = sorted(
        (doc["label"], doc["row"], doc["number"], doc["sub"]) for doc in mongoengine_db.seat.find()
    )
    assert [(label, row, number) for label, row, number, _ in stored] == [
        ("a", 1, 1),
        ("b", 2, 1),
        ("c", 3, 1),
        ("d", 4, 1),
    ]
    assert sorted(sub for *_, sub in stored) == [1, 2, 3, 4]  # one scope (number 1): distinct


def test_a_number_assigned_is_told_to_the_counter_of_its_scope_as_stored(
    mongoengine_db: Any,
) -> None:
    """Review: an assigned number was told to its counter before the values inside its scope
    were made: the counter named by the place without its ref moved, the stored place's did
    not, and it handed the number out again."""

    class Visit(Document):
        place = me_fields.EmbeddedDocumentField(_Place)
        number = SequenceField(scope="place")

    first = Visit(number=3, place=_Place(city="Oslo")).save()
    for _ in range(3):
        Visit(place=_Place(city="Oslo", ref=first.place.ref)).save()
    assert sorted(doc["number"] for doc in mongoengine_db.visit.find()) == [3, 4, 5, 6]
    assert len(counters(mongoengine_db)) == 1

    class Ticket(Document):
        number = SequenceField(scope="code")
        code = SequenceField(sequence_name="ticket_codes")

    Ticket(number=5).save()  # its scope is made in the same write, then the number told
    assert [(doc["code"], doc["number"]) for doc in mongoengine_db.ticket.find()] == [(1, 5)]
    assert counter(mongoengine_db, "ticket.number@1")["next"] == 5


def test_a_number_assigned_in_a_scope_made_by_the_write_moves_the_counter_first(
    mongoengine_db: Any,
) -> None:
    """Review B: an assigned number waiting for its scope was told after the whole fill; a
    number made in the same batch, in the same scope, came from the counter before it moved:
    (batch 1, num 1) stored twice."""

    class Line(Document):
        tenant = StringField()
        batch = SequenceField(scope="tenant")
        num = SequenceField(scope="batch")

    Line.objects.insert([Line(tenant="t1", num=1), Line(tenant="t2", batch=1)], load_bulk=False)
    stored = sorted((doc["tenant"], doc["batch"], doc["num"]) for doc in mongoengine_db.line.find())
    assert stored == [("t1", 1, 1), ("t2", 1, 2)]


def test_backfill_fills_a_scope_before_the_numbers_made_from_it(mongoengine_db: Any) -> None:
    """Review: backfill() filled the fields in their declared order, so a number declared
    before its generated scope was refused as lacking it."""
    mongoengine_db.ticket.insert_many([{"label": "a"}, {"label": "b"}])

    class Ticket(Document):
        number = SequenceField(scope="code")
        code = SequenceField(sequence_name="ticket_codes")
        label = StringField()

    assert backfill(Ticket) == 4
    stored = sorted((doc["code"], doc["number"]) for doc in mongoengine_db.ticket.find())
    assert stored == [(1, 1), (2, 1)]
    assert backfill(Ticket) == 0


def test_scopes_that_cannot_be_made_first_are_refused_before_any_write(
    mongoengine_db: Any,
) -> None:
    class Itself(Document):
        number = SequenceField(scope="number")

    class Crossed(Document):
        first = SequenceField(scope="second")
        second = SequenceField(scope="first")

    with pytest.raises(ValueError, match=r"Itself.number has scope='number', itself"):
        Itself().save()
    for write in (lambda: Crossed().save(), lambda: Crossed.objects.insert([Crossed()])):
        with pytest.raises(ValueError, match=r"Crossed.first, Crossed.second are each made"):
            write()
    assert mongoengine_db["itself"].count_documents({}) == 0
    assert mongoengine_db["crossed"].count_documents({}) == 0
    assert counters(mongoengine_db) == []


# -- explicit values ----------------------------------------------------------------------------


def test_an_explicit_value_moves_the_counter(mongoengine_db: Any) -> None:
    class Ref(Document):
        id = SequenceField(primary_key=True)

    Ref(id=500).save()
    assert counter(mongoengine_db, "ref.id") == {"_id": "ref.id", "next": 500}
    Ref(id=20).save()  # below: the counter does not move back
    generated = Ref()
    generated.save()
    assert generated.id == 501
    Ref.objects.insert([Ref(id=900), Ref()], load_bulk=False)
    assert sorted(doc["_id"] for doc in mongoengine_db["ref"].find()) == [20, 500, 501, 900, 901]


def test_an_explicit_value_inside_the_leased_block_drops_it(mongoengine_db: Any) -> None:
    class Ref(Document):
        id = SequenceField(primary_key=True, batch_size=100)

    Ref().save()  # block 1..100
    Ref(id=50).save()
    following = Ref()
    following.save()
    assert following.id == 101  # the block that held 50 is dropped
    assert counter(mongoengine_db, "ref.id") == {"_id": "ref.id", "next": 200}


def test_a_value_taken_by_another_process_is_retried(mongoengine_db: Any) -> None:
    class Ref(Document):
        id = SequenceField(primary_key=True, batch_size=10)

    Ref().save()  # block 1..10
    # Another process saved 2 explicitly after this one leased the block.
    mongoengine_db["ref"].insert_one({"_id": 2})
    mongoengine_db[DEFAULT_COLLECTION].update_one({"_id": "ref.id"}, {"$max": {"next": 2}})
    doc = Ref()
    doc.save()
    assert doc.id == 11  # collided on 2, dropped the stale block, leased 11..20
    assert sorted(d["_id"] for d in mongoengine_db["ref"].find()) == [1, 2, 11]


@pytest.mark.parametrize("write", ["save", "insert"])
def test_values_held_by_documents_written_without_the_counter_end_in_retries_exhausted(
    mongoengine_db: Any, write: str
) -> None:
    class Imported(Document):
        id = SequenceField(primary_key=True)

    mongoengine_db["imported"].insert_many([{"_id": n} for n in range(1, 11)])
    run = Imported().save if write == "save" else lambda: Imported.objects.insert([Imported()])
    with pytest.raises(RetriesExhaustedError, match=r"Imported\.id: all 4 values") as caught:
        run()
    assert isinstance(caught.value, NotUniqueError)
    assert "Imported.id.set_next_value(" in str(caught.value)
    assert sorted(d["_id"] for d in mongoengine_db["imported"].find()) == list(range(1, 11))
    Imported.id.set_next_value(10)  # as the message says
    Imported().save()
    assert mongoengine_db["imported"].find_one({"_id": 11}) == {"_id": 11}


def test_explicit_values_can_be_rejected(mongoengine_db: Any) -> None:
    class Strict(Document):
        id = SequenceField(primary_key=True, allow_explicit=False)

    with pytest.raises(ExplicitValueError, match=r"explicit value 7 rejected") as caught:
        Strict(id=7).save()
    assert isinstance(caught.value, ValidationError)
    with pytest.raises(ExplicitValueError):
        Strict.objects.insert([Strict(), Strict(id=8)], load_bulk=False)
    assert mongoengine_db["strict"].count_documents({}) == 0
    Strict().save()
    assert mongoengine_db["strict"].find_one() == {"_id": 1}


# -- faults -------------------------------------------------------------------------------------


def _fail_once(when: str) -> Callable[[str, str], str | None]:
    state = {"armed": True}

    def fail(collection: str, method: str) -> str | None:
        if state["armed"] and collection == DEFAULT_COLLECTION and method == "find_one_and_update":
            state["armed"] = False
            return when
        return None

    return fail


def test_network_error_before_the_inc_is_retried_without_a_gap(
    hooked: Connect, calls: Calls
) -> None:
    db = hooked()
    sequence = Sequence("net", database=db, batch_size=10, sleep=lambda _: None)
    assert sequence.next() == 1
    sequence.discard()
    calls.calls.clear()
    calls.fail = _fail_once("before")
    assert sequence.next() == 11
    assert calls.count("find_one_and_update") == 2  # the lost request, the retry
    assert counter(db, "net") == {"_id": "net", "next": 20}


def test_network_error_after_the_inc_leaves_a_gap_never_a_reuse(
    hooked: Connect, calls: Calls
) -> None:
    db = hooked()

    class Doc(Document):
        id = SequenceField(primary_key=True, batch_size=10)

    Doc().save()
    Doc._fields["id"].forget_sequences()
    calls.fail = _fail_once("after")
    doc = Doc()
    doc.save()
    # 11..20 was applied but its reply lost; the retry leased 21..30.
    assert doc.id == 21
    assert counter(db, "doc.id") == {"_id": "doc.id", "next": 30}
    assert sorted(d["_id"] for d in db["doc"].find()) == [1, 21]


def test_persistent_network_errors_propagate_and_write_nothing(
    hooked: Connect, calls: Calls
) -> None:
    db = hooked()
    seen: list[float] = []

    class Doc(Document):
        id = SequenceField(primary_key=True, retries=2)

    Doc().save()
    for sequence in list(Doc._fields["id"]._sequences.values()):
        sequence[1]._sleep = seen.append
        sequence[1]._store = None
    calls.fail = lambda collection, method: (
        "after" if (collection, method) == (DEFAULT_COLLECTION, "find_one_and_update") else None
    )
    with pytest.raises(pymongo.errors.AutoReconnect):
        Doc().save()
    assert seen == [0.05, 0.1]  # two retries, exponential back-off
    assert db["doc"].count_documents({}) == 1
    calls.fail = lambda collection, method: None
    doc = Doc()
    doc.save()
    assert doc.id == 5  # 2, 3 and 4 were applied and lost: gaps, never reused


# -- options ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "error", "message"),
    [
        ({"batch_size": 0}, ValueError, "batch_size=0 must be >= 1"),
        ({"batch_size": "10"}, TypeError, "batch_size must be an int, not '10'"),
        ({"prefetch": 1}, TypeError, "prefetch must be a bool, not 1"),
        ({"start": -1}, ValueError, r"start=-1 must be between 0 and"),
        ({"digits": 19}, ValueError, "digits=19 must be between 1 and 18"),
        ({"digits": 2, "start": 100}, ValueError, "start=100 must be between 0 and 99"),
        ({"shards": 0}, ValueError, "shards=0 must be between 1"),
        ({"digits": 1, "shards": 20}, ValueError, "shards=20 exceeds the 9 values"),
        ({"zero_pad": True}, ValueError, "zero_pad=True needs digits"),
        ({"scope": ""}, ValueError, "scope='' is empty"),
        ({"write_concern": {"w": 1}}, TypeError, "write_concern must be a pymongo WriteConcern"),
        ({"retries": -1}, ValueError, "retries=-1 must be an int >= 0"),
        ({"value_decorator": "str"}, TypeError, "value_decorator must be a callable or None"),
        (
            {"value_decorator": str, "prefix": "A-"},
            ValueError,
            "value_decorator=<class 'str'> and prefix/zero_pad/luhn both format",
        ),
    ],
)
def test_bad_options_are_refused(options: dict[str, Any], error: type, message: str) -> None:
    with pytest.raises(error, match=message):
        SequenceField(**options)


def test_string_operators_match_formatted_values_as_stored_text(mongoengine_db: Any) -> None:
    # Probe AZ F4: n__startswith="N1" was sent as the query by the value "N1" (one document,
    # not four), and n__regex was refused.
    class Formatted(Document):
        n = SequenceField(prefix="N")

    for _ in range(12):
        Formatted().save()

    def found(**query: Any) -> list[str]:
        return sorted((d.n for d in Formatted.objects(**query)), key=lambda n: int(n[1:]))

    assert found(n__startswith="N1") == ["N1", "N10", "N11", "N12"]
    assert found(n__regex=r"^N1\d$") == ["N10", "N11", "N12"]
    assert found(n__iendswith="2") == ["N2", "N12"]
    assert found(n__not__startswith="N1") == [f"N{i}" for i in range(2, 10)]
    assert found(n__exact=3) == ["N3"]
    with pytest.raises(ValidationError, match=r"Formatted\.n by startswith 1"):
        found(n__startswith=1)
    with pytest.raises(ValidationError, match=r"Formatted\.n by startswith None"):
        Formatted.objects(n__startswith=None).delete()  # never sent as null (review N)
    assert Formatted.objects.count() == 12
