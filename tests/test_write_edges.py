"""Edges of the write path: values set back to a document's own, upserts by an existing key or
value, raises of explicit values racing leases, failures after a lost reply, multi-document
updates carrying new embedded documents. Each test checks the raw stored documents."""

from __future__ import annotations

import threading
from typing import Any

import mongoengine as me
import pymongo.errors
import pytest
from test_write_failures import FailOnce, connect_with

from mongoengine_ids import SequenceField
from mongoengine_ids.random_unique import RandomUniqueField
from mongoengine_ids.sequence import Sequence

# -- a loaded document whose value is set back to its own: save() refused ------------------


class EdgeOrder(me.Document):
    code = RandomUniqueField(digits=6, reserve_in="edge_order_codes")
    name = me.StringField()
    meta = {"collection": "edge_orders"}


class EdgePlainOrder(me.Document):
    code = me.IntField(unique=True)
    name = me.StringField()
    meta = {"collection": "edge_plain_orders"}


@pytest.mark.parametrize("model", [EdgePlainOrder, EdgeOrder], ids=["plain", "plugin"])
def test_value_set_back_to_its_own_saves(mongoengine_db: Any, model: Any) -> None:
    order = model(name="a", code=123456) if model is EdgePlainOrder else model(name="a")
    order.save()
    own = order.code
    loaded = model.objects.get(pk=order.pk)
    loaded.code = own + 1 if own < 999999 else own - 1  # e.g. a form edit, then undone
    loaded.code = own
    loaded.name = "b"
    loaded.save()  # plugin: NotUniqueError (its own reservation)
    (stored,) = list(model._get_collection().find())
    assert stored["name"] == "b"
    assert stored["code"] == own


# -- an upsert keyed by an existing document's generated value: refused --------------------


@pytest.mark.parametrize("model", [EdgePlainOrder, EdgeOrder], ids=["plain", "plugin"])
def test_upsert_matching_by_generated_value_updates(mongoengine_db: Any, model: Any) -> None:
    order = model(name="a", code=123456) if model is EdgePlainOrder else model(name="a")
    order.save()
    model.objects(code=order.code).update_one(upsert=True, set__name="b")  # NotUniqueError
    (stored,) = list(model._get_collection().find())
    assert stored["name"] == "b"
    assert stored["code"] == order.code


# -- save() of a loaded document: a failure making a missing field's value leaks the new
#       embedded documents' values (reserved, kept in the document) ------------------------------


class EdgeTag(me.EmbeddedDocument):
    code = RandomUniqueField(digits=6, reserve_in="edge_tag_codes")


class EdgeTicket(me.Document):
    tenant = me.StringField()
    num = SequenceField(scope="tenant")
    tags = me.ListField(me.EmbeddedDocumentField(EdgeTag))
    meta = {"collection": "edge_tickets"}


def test_failed_missing_fill_gives_back_embedded_values(mongoengine_db: Any) -> None:
    # stored before the field existed, and before a tenant was set
    EdgeTicket._get_collection().insert_one({"tags": []})
    ticket = EdgeTicket.objects.get()
    ticket.tags.append(EdgeTag())
    with pytest.raises(me.ValidationError):
        ticket.save()  # the scope is None: nothing is written
    assert list(mongoengine_db.rc_tag_codes.find()) == []  # leaked: one reservation left
    assert ticket.tags[0].code is None  # the value stays in the document
    ticket.tenant = "t"
    ticket.save()  # then: NotUniqueError (its own leaked reservation)
    (stored,) = list(EdgeTicket._get_collection().find())
    assert stored["num"] == 1
    assert stored["tags"][0]["code"] is not None


# -- save(save_condition=...) reading a field the stored copy lacks -----------------------------


class EdgeAdopted(me.Document):
    name = me.StringField()
    num = SequenceField()
    code = RandomUniqueField(digits=6)
    meta = {"collection": "edge_adopted"}


@pytest.mark.parametrize(
    "condition", [{"num": None}, {"num__exists": False}, {"__raw__": {"$or": [{"name": "a"}]}}]
)
def test_a_save_condition_reading_a_lacking_field_sees_the_document_as_read(
    mongoengine_db: Any, condition: dict[str, Any]
) -> None:
    """Probe W: the fill of the field (its own write, first) made the condition false: the
    value was stored, the change was not, and SaveConditionError blamed a race."""
    collection = EdgeAdopted._get_collection()
    key = collection.insert_one({"name": "a"}).inserted_id  # stored before the fields
    adopted = EdgeAdopted.objects.get(pk=key)
    adopted.name = "b"
    adopted.save(save_condition=condition)
    stored = collection.find_one({"_id": key})
    named_all = "__raw__" in condition  # an operator: it may read any field
    assert stored["name"] == "b"
    assert "num" not in stored
    assert ("code" in stored) is not named_all
    # The next save without a condition fills what is lacking.
    adopted.name = "c"
    adopted.save()
    stored = collection.find_one({"_id": key})
    assert stored["name"] == "c"
    assert stored["num"] == 1
    assert stored["code"] == adopted.code


def test_a_failing_save_condition_on_a_lacking_field_writes_nothing(mongoengine_db: Any) -> None:
    collection = EdgeAdopted._get_collection()
    key = collection.insert_one({"name": "a"}).inserted_id
    adopted = EdgeAdopted.objects.get(pk=key)
    adopted.name = "b"
    with pytest.raises(me.errors.SaveConditionError):
        adopted.save(save_condition={"num__exists": True})
    assert collection.find_one({"_id": key}) == {"_id": key, "name": "a"}


# -- Sequence.raise_to(): a block leased before it, queued after it, is handed out ---------


class EdgeNumbered(me.Document):
    num = SequenceField(batch_size=10, prefetch=True)
    meta = {"collection": "edge_numbered"}


class _GatedLock:
    """The sequence's lock; the prefetch thread waits at it until the gate opens."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.gate = threading.Event()
        self.waiting = threading.Event()
        self.opened: list[bool] = []  # what each gate.wait() returned

    def __enter__(self) -> None:
        if threading.current_thread().name.startswith("prefetch") and not self.gate.is_set():
            self.waiting.set()
            self.opened.append(self.gate.wait(10))
        self.lock.acquire()

    def __exit__(self, *exc: Any) -> None:
        self.lock.release()


def test_raise_to_drops_block_leased_meanwhile(mongoengine_db: Any) -> None:
    EdgeNumbered().save()  # leases 1..10; the prefetch starts when 5 is handed out
    sequence = EdgeNumbered.num.sequence_for(EdgeNumbered._get_db(), EdgeNumbered)
    gated = sequence._lock = _GatedLock()  # type: ignore[assignment]
    for _ in range(4):
        EdgeNumbered().save()  # 2..5: the prefetch leases 11..20
    assert gated.waiting.wait(10)  # leased; about to queue the block
    EdgeNumbered(num=15).save()  # assigned: raise_to(15) (the counter is at 20 already)
    gated.gate.set()
    for thread in threading.enumerate():
        if thread.name.startswith("prefetch"):
            thread.join(10)
            assert not thread.is_alive()
    assert gated.opened == [True]
    for _ in range(15):
        EdgeNumbered().save()  # 6..10, 11..20: 15 is generated again
    nums = [d["num"] for d in EdgeNumbered._get_collection().find()]
    # The first block used up (1..10), 15 as assigned; the prefetched block (11..20) held 15:
    # dropped, and the 10 saves after 6..10 take the next block.
    batch = EdgeNumbered.num.batch_size
    assert sorted(nums) == [*range(1, batch + 1), 15, *range(2 * batch + 1, 3 * batch + 1)]


# -- Sequence.raise_to(): one raise clears the value another raise still waits for ----------


def test_values_taken_out_before_a_raise_are_not_put_back(mongoengine_db: Any) -> None:
    """Found by a probe: next_values(15) took 2..10 out of its block, then its lease failed
    and it put them back; raise_to(5) in between had found no block holding 5, and 5 was
    handed out after it."""
    sequence = Sequence("rc.putback", database=mongoengine_db, batch_size=10)
    assert sequence.next() == 1  # the block 1..10
    store = sequence.store()
    leasing, go = threading.Event(), threading.Event()

    went: list[bool] = []  # what each go.wait() returned

    def failing_lease(size: int, **options: Any) -> range:
        leasing.set()
        went.append(go.wait(10))
        raise pymongo.errors.AutoReconnect("lost")

    store.lease = failing_lease  # type: ignore[method-assign]
    failed: list[BaseException] = []

    def take() -> None:
        try:
            sequence.next_values(15)  # 2..10, and a lease of 10 more
        except pymongo.errors.AutoReconnect as error:
            failed.append(error)

    worker = threading.Thread(target=take)
    worker.start()
    assert leasing.wait(10)
    sequence.raise_to(5)
    go.set()
    worker.join(10)
    assert not worker.is_alive()
    assert went == [True]
    assert len(failed) == 1
    del store.lease  # the real one again
    handed = [sequence.next() for _ in range(6)]
    assert 5 not in handed
    assert handed == list(range(11, 17))  # 2..10 dropped: lost, never handed out


def test_concurrent_raise_keeps_the_other_value(mongoengine_db: Any) -> None:
    sequence = Sequence("rc.clear", database=mongoengine_db, batch_size=10)
    sequence.raise_to(55)  # the counter at 55: the next block is 56..65
    store = sequence.store()
    real_raise, real_lease = store.raise_to, store.lease
    raising_60, leased, lease_go = threading.Event(), threading.Event(), threading.Event()
    raise_60_go = threading.Event()
    went: list[tuple[str, bool]] = []  # what each wait in the threads returned

    def slow_raise(value: int) -> None:
        if value == 60:
            raising_60.set()
            # raise_to(60) recorded 60, has not moved the counter yet
            went.append(("raise", raise_60_go.wait(10)))
        real_raise(value)

    def slow_lease(size: int) -> range:
        block = real_lease(size)  # before the counter moves past 60
        leased.set()
        went.append(("lease", lease_go.wait(10)))
        return block

    store.raise_to, store.lease = slow_raise, slow_lease  # type: ignore[method-assign]
    raiser = threading.Thread(target=sequence.raise_to, args=(60,))
    raiser.start()
    assert raising_60.wait(10)
    sequence.raise_to(50)  # no lease on its way: clears every recorded value, 60 too
    got: list[list[int]] = []
    leaser = threading.Thread(target=lambda: got.append(sequence.next_values(10)))
    leaser.start()
    assert leased.wait(10)  # 56..65 leased
    raise_60_go.set()
    raiser.join(10)  # $max(60) (no effect), nothing of 60 in the blocks yet
    assert not raiser.is_alive()
    lease_go.set()
    leaser.join(10)
    assert not leaser.is_alive()
    # 56..65 held 60: dropped, and the next lease (66..75, its wait returned at once) served.
    assert got == [list(range(66, 76))]
    assert went == [("raise", True), ("lease", True), ("lease", True)]


# -- a multi-document update with a new embedded document: one "unique" value, many copies --


class EdgeBoard(me.Document):
    name = me.StringField()
    tags = me.ListField(me.EmbeddedDocumentField(EdgeTag))
    meta = {"collection": "edge_boards"}


def test_multi_update_does_not_store_one_reserved_value_twice(mongoengine_db: Any) -> None:
    EdgeBoard(name="a").save()
    EdgeBoard(name="b").save()
    before = list(EdgeBoard._get_collection().find())
    with pytest.raises(me.errors.InvalidQueryError, match="update_one"):
        EdgeBoard.objects.update(push__tags=EdgeTag())  # multi=True: both documents, one value
    assert list(EdgeBoard._get_collection().find()) == before
    EdgeBoard.objects(name="a").update_one(push__tags=EdgeTag())
    EdgeBoard.objects(name="b").update_one(push__tags=EdgeTag())
    codes = [t["code"] for d in EdgeBoard._get_collection().find() for t in d.get("tags", [])]
    assert None not in codes
    assert len(codes) == len(set(codes)) == 2, codes


class EdgeStrict(me.Document):
    id = SequenceField(primary_key=True, allow_explicit=False)
    hits = me.IntField(default=0)
    meta = {"collection": "edge_strict"}


def test_upsert_by_existing_key_with_allow_explicit_false(mongoengine_db: Any) -> None:
    doc = EdgeStrict()
    doc.save()
    EdgeStrict.objects(id=doc.id).update_one(upsert=True, inc__hits=1)  # ExplicitValueError
    (stored,) = list(EdgeStrict._get_collection().find())
    assert stored == {"_id": doc.id, "hits": 1}


# -- save() of a loaded document: a retry after a lost reply that then fails definitively
#       gives back the values the first (landed) attempt stored --------------------------------


class EdgeVersioned(me.Document):
    version = me.IntField(default=1)
    tags = me.ListField(me.EmbeddedDocumentField(EdgeTag))
    meta = {"collection": "edge_versioned"}


def test_retry_refused_by_condition_keeps_values_of_landed_attempt() -> None:
    hook = FailOnce("edge_versioned", "update_one", "after")
    with connect_with(hook) as db:
        EdgeVersioned().save()
        doc = EdgeVersioned.objects.get()
        doc.tags.append(EdgeTag())
        doc.version = 2
        hook.armed = True
        with pytest.raises(pymongo.errors.ConnectionFailure):
            doc.save(save_condition={"version": 1})  # applied, reply lost
        code = doc.tags[0].code
        with pytest.raises(me.errors.SaveConditionError):
            doc.save(save_condition={"version": 1})  # the first one landed: version is 2
        (stored,) = list(db["edge_versioned"].find())
        assert [t["code"] for t in stored["tags"]] == [code]  # stored...
        assert [r["_id"] for r in db["edge_tag_codes"].find()] == [code]  # ...but released


# -- an upsert keyed by a number handed out already burns the rest of the leased block ----


class EdgeInvoice(me.Document):
    number = SequenceField(batch_size=100)
    paid = me.BooleanField(default=False)
    meta = {"collection": "edge_invoices"}


def test_upsert_by_handed_out_number_keeps_the_block(mongoengine_db: Any) -> None:
    first = EdgeInvoice()
    first.save()  # 1, from the block 1..100
    EdgeInvoice.objects(number=first.number).update_one(upsert=True, set__paid=True)
    EdgeInvoice().save()
    numbers = sorted(d["number"] for d in EdgeInvoice._get_collection().find())
    assert numbers == [1, 2]  # got [1, 101]: the block 1..100 was dropped
