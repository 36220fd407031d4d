"""RandomUniqueField(reserve_in=...): each value is reserved in a proxy collection keyed by
``_id`` before the document is written (sharded collections, where a unique index on the field
cannot be enforced); a failed write releases its reservation."""

from __future__ import annotations

import copy
import json
import os
import pickle
import uuid
from collections.abc import Callable
from typing import Any
from unittest import mock

import bson.errors
import mongoengine as me
import pymongo.errors
import pytest
from mongoengine.errors import NotUniqueError
from test_random_unique import Script, codes, stored
from test_write_upserts import OPERATIONS, upsert

from mongoengine_ids.errors import BulkNotUniqueError, RetriesExhaustedError
from mongoengine_ids.random_unique import RandomFieldStats, RandomUniqueField
from mongoengine_ids.random_unique import field as field_module
from mongoengine_ids.testing import connected_threadsafe
from mongoengine_ids.write.values import new_owner


def proxied(script: Script, **options: Any) -> type[me.Document]:
    class Order(me.Document):
        code = RandomUniqueField(digits=1, rng=script, reserve_in="order_codes", **options)
        email = me.StringField(unique=True, sparse=True)
        meta = {"collection": "orders"}

    return Order


def reserved(db: Any) -> list[Any]:
    return sorted(doc["_id"] for doc in db.order_codes.find())


def test_value_is_reserved_then_written(mongoengine_db: Any) -> None:
    Order = proxied(Script(4))
    order = Order()
    order.save()

    assert order.code == 5
    reservation = mongoengine_db.order_codes.find_one({"_id": 5})
    assert reservation["ns"] == "orders.code"
    assert "at" in reservation
    assert codes(mongoengine_db.orders) == [5]
    # the document collection needs no unique index on the field (it could not have one)
    assert "code_1" not in mongoengine_db.orders.index_information()


def test_taken_reservation_is_retried(mongoengine_db: Any) -> None:
    script = Script(0)
    Order = proxied(script)
    Order().save()
    script.then(0, 0, 1)
    order = Order()
    order.save()

    assert order.code == 2
    assert script.draws == 4
    assert Order.code.stats() == RandomFieldStats(attempts=4, collisions=2, exhausted=0)
    assert reserved(mongoengine_db) == [1, 2]
    assert codes(mongoengine_db.orders) == [1, 2]


def test_failed_write_releases_its_reservation(mongoengine_db: Any) -> None:
    script = Script(0)
    Order = proxied(script)
    Order(email="a@example.com").save()
    script.then(1)
    duplicate = Order(email="a@example.com")
    with pytest.raises(NotUniqueError):
        duplicate.save()

    assert duplicate.code is None
    assert reserved(mongoengine_db) == [1]  # 2 was reserved, then released
    assert codes(mongoengine_db.orders) == [1]
    # the value is free again: the next document may take it
    script.then(1)
    again = Order(email="b@example.com")
    again.save()
    assert again.code == 2
    assert reserved(mongoengine_db) == [1, 2]


def test_exhausted_reservations(mongoengine_db: Any) -> None:
    script = Script(0)
    Order = proxied(script, max_retries=1)
    Order().save()
    script.then(0, 0)
    unlucky = Order()
    with pytest.raises(RetriesExhaustedError) as raised:
        unlucky.save()

    assert "in the proxy collection 'order_codes'" in str(raised.value)
    assert "all 2 attempts" in str(raised.value)
    assert unlucky.code is None
    assert reserved(mongoengine_db) == [1]
    assert codes(mongoengine_db.orders) == [1]


def test_assigned_values_are_reserved(mongoengine_db: Any) -> None:
    script = Script()
    Order = proxied(script)
    Order(code=7).save()
    assert reserved(mongoengine_db) == [7]
    with pytest.raises(NotUniqueError, match=r"Order.code: \[7\] already reserved"):
        Order(code=7).save()
    assert reserved(mongoengine_db) == [7]  # the first document's reservation stays
    assert codes(mongoengine_db.orders) == [7]
    # a drawn value never lands on an assigned one
    script.then(6, 4)  # 7: taken in the proxy; then 5
    order = Order()
    order.save()
    assert order.code == 5
    assert reserved(mongoengine_db) == [5, 7]


def test_assigned_value_of_a_failed_save_is_released(mongoengine_db: Any) -> None:
    Order = proxied(Script())
    Order(code=3, email="a@example.com").save()
    with pytest.raises(NotUniqueError):
        Order(code=4, email="a@example.com").save()
    assert reserved(mongoengine_db) == [3]


def test_primary_key_in_proxy_mode(mongoengine_db: Any) -> None:
    script = Script(0)

    class Shipment(me.Document):
        id = RandomUniqueField(digits=1, primary_key=True, rng=script, reserve_in="shipment_ids")
        name = me.StringField()
        meta = {"collection": "shipments"}

    Shipment(name="first").save()
    # 1 is reserved; a document written before the proxy existed holds 2: both are skipped
    mongoengine_db.shipments.insert_one({"_id": 2, "name": "legacy"})
    script.then(0, 1, 2)
    shipment = Shipment(name="second")
    shipment.save()
    assert shipment.pk == 3
    assert sorted(doc["_id"] for doc in mongoengine_db.shipment_ids.find()) == [1, 2, 3]
    assert {doc["_id"]: doc["name"] for doc in mongoengine_db.shipments.find()} == {
        1: "first",
        2: "legacy",
        3: "second",
    }


def test_bulk_insert_reserves_and_releases(mongoengine_db: Any) -> None:
    script = Script(0)
    Order = proxied(script)
    Order(email="a@example.com").save()
    # reservations for the 3 documents: 1 (taken), 2, 2 (taken within the batch), then 3 and 4
    script.then(0, 1, 1, 2, 3)
    batch = [Order(), Order(email="a@example.com"), Order()]
    with pytest.raises(BulkNotUniqueError):
        Order.objects.insert(batch)

    # ordered: the first is written; the second fails on the email, the third is never sent
    assert [batch[0].code, batch[1].code, batch[2].code] == [3, None, None]
    assert Order.code.stats() == RandomFieldStats(attempts=6, collisions=2, exhausted=0)
    # the unwritten documents' values (2 and 4) are released; the written one stays reserved
    assert reserved(mongoengine_db) == [1, 3]
    assert codes(mongoengine_db.orders) == [1, 3]


def test_a_round_out_of_retries_releases_every_reservation_it_made(mongoengine_db: Any) -> None:
    # Found by probe AL: the first position out of retries raised at once, and the later
    # positions' reservations of that round (2, here) were left reserved by no document.
    script = Script(0)
    Order = proxied(script, max_retries=0)
    Order().save()
    script.then(0, 1)  # the next two draw 1 (taken) and 2
    batch = [Order(), Order()]
    with pytest.raises(RetriesExhaustedError, match="in the proxy collection 'order_codes'"):
        Order.objects.insert(batch)
    assert [batch[0].code, batch[1].code] == [None, None]
    assert reserved(mongoengine_db) == [1]
    assert codes(mongoengine_db.orders) == [1]
    script.then(1)
    assert Order().save().code == 2  # free again


# -- values assigned after save() began ---------------------------------------------------------
# -- values assigned after save() began ---------------------------------------------------------


def test_a_value_assigned_in_pre_save_is_reserved_too(mongoengine_db: Any) -> None:
    from mongoengine import signals

    Order = proxied(Script(4))
    first = Order()
    first.save()  # holds 5
    wanted: list[int] = [5]

    def choose(sender: Any, document: Any, **kwargs: Any) -> None:
        document.code = wanted[0]

    signals.pre_save.connect(choose, sender=Order)
    try:
        late = Order()
        with pytest.raises(NotUniqueError, match=r"Order.code: \[5\] already reserved"):
            late.save()
        assert late.code == 5  # the user's value, kept; not cleared, not released
        assert reserved(mongoengine_db) == [5]  # the first document's reservation intact
        assert codes(mongoengine_db.orders) == [5]
        wanted[0] = 8
        Order().save()
    finally:
        signals.pre_save.disconnect(choose, sender=Order)
    assert reserved(mongoengine_db) == [5, 8]
    assert codes(mongoengine_db.orders) == [5, 8]


def test_a_value_kept_over_a_retry_is_not_taken_for_an_assigned_one(mongoengine_db: Any) -> None:
    # code (a unique index) collides once and is drawn again; ref (reserve_in) keeps the value
    # it reserved at the first attempt, and is not reserved a second time.
    class Parcel(me.Document):
        code = RandomUniqueField(digits=1, rng=Script(0, 1))
        ref = RandomUniqueField(digits=1, rng=Script(6), reserve_in="parcel_refs")

    mongoengine_db.parcel.insert_one({"code": 1})
    parcel = Parcel()
    parcel.save()
    assert (parcel.code, parcel.ref) == (2, 7)
    assert sorted(doc["_id"] for doc in mongoengine_db.parcel_refs.find()) == [7]
    assert Parcel.code.stats().collisions == 1
    assert stored(mongoengine_db.parcel, "code", "ref")[1:] == [
        {"_id": parcel.pk, "code": 2, "ref": 7}
    ]


def test_a_value_assigned_in_clean_is_the_users_and_never_retried(mongoengine_db: Any) -> None:
    script = Script(0)

    class Voucher(me.Document):
        code = RandomUniqueField(digits=1, rng=script)

        def clean(self) -> None:
            if self.code is None:
                self.code = 1

    Voucher(code=1).save()
    voucher = Voucher()
    with pytest.raises(NotUniqueError) as raised:
        voucher.save()  # 1 collides: the user's value, so NotUniqueError at once
    assert not isinstance(raised.value, RetriesExhaustedError)
    assert script.draws == 0
    assert voucher.code == 1
    assert codes(mongoengine_db.voucher) == [1]


def lose_the_next_reservation_reply(monkeypatch: pytest.MonkeyPatch) -> None:
    """The next reservation is made, and its reply lost (a ConnectionFailure)."""
    real = field_module._insert_reservations

    def lost(*args: Any) -> Any:
        monkeypatch.setattr(field_module, "_insert_reservations", real)
        real(*args)
        raise pymongo.errors.AutoReconnect("reply lost")

    monkeypatch.setattr(field_module, "_insert_reservations", lost)


def test_a_save_retried_after_its_reservation_reply_was_lost_keeps_the_value(
    mongoengine_db: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    Order = proxied(Script())
    order = Order(code=7, email="a@example.com")
    lose_the_next_reservation_reply(monkeypatch)
    with pytest.raises(pymongo.errors.AutoReconnect):
        order.save()
    assert reserved(mongoengine_db) == [7]  # made, but the write did not know
    order.save()  # the application's retry: the reservation is its own
    assert stored(mongoengine_db.orders, "code", "email") == [
        {"_id": order.pk, "code": 7, "email": "a@example.com"}
    ]
    # Another document is still refused the value, and nothing of it is written.
    with pytest.raises(NotUniqueError, match=r"Order.code: \[7\] already reserved"):
        Order(code=7, email="b@example.com").save()
    assert codes(mongoengine_db.orders) == [7]
    assert reserved(mongoengine_db) == [7]


def test_an_upsert_retried_after_its_reservation_reply_was_lost_inserts_once(
    mongoengine_db: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    Order = proxied(Script())
    lose_the_next_reservation_reply(monkeypatch)
    with pytest.raises(pymongo.errors.AutoReconnect):
        Order.objects(email="a@example.com").upsert_one(set__code=7)
    assert reserved(mongoengine_db) == [7]
    Order.objects(email="a@example.com").upsert_one(set__code=7)  # the retry
    assert [
        {k: v for k, v in doc.items() if k != "_id"} for doc in mongoengine_db.orders.find()
    ] == [{"code": 7, "email": "a@example.com"}]
    # Another upsert (another filter) is refused the value, and writes nothing.
    with pytest.raises(NotUniqueError, match=r"Order.code: \[7\] already reserved"):
        Order.objects(email="b@example.com").upsert_one(set__code=7)
    assert codes(mongoengine_db.orders) == [7]
    assert reserved(mongoengine_db) == [7]


# -- an upsert that matches a document keeps the reservations it made ------------------------


@pytest.mark.parametrize("operation", OPERATIONS)
def test_an_upsert_that_matches_keeps_the_reservation_it_made(
    mongoengine_db: Any, operation: str
) -> None:
    """Its reply does not say whether it inserted, and a value no document holds after it may
    be that of a document it inserted and another writer deleted: kept, a gap."""
    Order = proxied(Script(2, 6, 4))  # draws 3, then 7 for the upsert that matches, then 5
    upsert(operation, Order.objects(email="a@example.com"), set__email="a@example.com")  # 3
    upsert(operation, Order.objects(email="a@example.com"), set__email="a@example.com")  # matches
    assert codes(mongoengine_db.orders) == [3]
    assert reserved(mongoengine_db) == [3, 7]
    upsert(operation, Order.objects(email="b@example.com"), set__email="b@example.com")  # 5
    assert codes(mongoengine_db.orders) == [3, 5]
    assert reserved(mongoengine_db) == [3, 5, 7]


SLIP_DRAWS = Script()


class Slip(me.EmbeddedDocument):
    label = me.StringField()
    code = RandomUniqueField(digits=1, rng=SLIP_DRAWS, reserve_in="slip_codes")


class Tray(me.Document):
    name = me.StringField()
    slip = me.EmbeddedDocumentField(Slip)
    meta = {"collection": "trays"}


def _deleted_at_once(monkeypatch: pytest.MonkeyPatch, *collections: Any) -> None:
    """Another writer deletes every document of ``collections`` right after each upsert."""
    names = {collection.name for collection in collections}
    kind = type(collections[0])

    def then_deleted(method: Any) -> Any:
        def call(self: Any, *args: Any, **kwargs: Any) -> Any:
            result = method(self, *args, **kwargs)
            if self.name in names and kwargs.get("upsert"):
                self.database[self.name].delete_many({})
            return result

        return call

    for name in ("update_one", "update_many", "find_one_and_update"):
        monkeypatch.setattr(kind, name, then_deleted(getattr(kind, name)))


@pytest.mark.parametrize("operation", OPERATIONS)
def test_the_values_of_an_upserted_document_deleted_at_once_are_never_handed_out_again(
    mongoengine_db: Any, monkeypatch: pytest.MonkeyPatch, operation: str
) -> None:
    """Found by a probe: the values an upsert set on insert that no document held after it were
    released, also when it had inserted them and another writer deleted the document."""
    draws = Script(2)
    Order = proxied(draws)
    _deleted_at_once(monkeypatch, Order._get_collection(), Tray._get_collection())
    upsert(operation, Order.objects(email="a@example.com"), set__email="a@example.com")  # inserts 3
    assert reserved(mongoengine_db) == [3]
    slip = Slip(label="x")
    SLIP_DRAWS.then(4)
    upsert(operation, Tray.objects(name="t"), set_on_insert__slip=slip)  # inserts 5
    monkeypatch.undo()
    assert codes(mongoengine_db.orders) == []
    assert mongoengine_db.trays.count_documents({}) == 0
    assert reserved(mongoengine_db) == [3]
    assert [doc["_id"] for doc in mongoengine_db.slip_codes.find()] == [5]
    draws.then(2, 0)  # 3 is taken: 1
    assert Order(email="b@example.com").save().code == 1
    SLIP_DRAWS.then(4, 0)
    assert Tray(name="u", slip=Slip(label="y")).save().slip.code == 1


def test_a_value_given_by_set_to_an_upsert_that_matches_stays_reserved(
    mongoengine_db: Any,
) -> None:
    Order = proxied(Script(2))
    Order.objects(email="a@example.com").upsert_one(set__email="a@example.com")  # 3
    Order.objects(email="a@example.com").upsert_one(set__code=8)  # matches: writes 8
    assert codes(mongoengine_db.orders) == [8]
    assert reserved(mongoengine_db) == [3, 8]  # 3: its old value stays taken (never reused)


class Ticket(me.EmbeddedDocument):
    code = RandomUniqueField(digits=3, reserve_in="ticket_codes")


class Booking(me.Document):
    tickets = me.EmbeddedDocumentListField(Ticket)
    meta = {"collection": "bookings"}


def test_a_value_given_to_two_places_of_one_write_says_so(mongoengine_db: Any) -> None:
    """Found by a probe: the error said the value was 'already reserved' when nothing reserved
    or held it."""
    with pytest.raises(NotUniqueError, match=r"\[778\] given to two places of one write"):
        Booking(tickets=[Ticket(code=778), Ticket(code=778)]).save()
    # Codes of its own, not drawn: one drawn as 777 is held by the booking already, and the
    # refusal then says it is reserved (1 run in 500 failed so).
    booking = Booking(tickets=[Ticket(code=100), Ticket(code=101)]).save()
    before = sorted(doc["_id"] for doc in mongoengine_db.ticket_codes.find())
    booking.tickets.update(code=777)  # MongoEngine's: every item gets 777
    with pytest.raises(NotUniqueError, match=r"\[777\] given to two places of one write"):
        booking.save()
    assert sorted(doc["_id"] for doc in mongoengine_db.ticket_codes.find()) == before
    assert mongoengine_db.bookings.count_documents({}) == 1
    assert mongoengine_db.bookings.count_documents({"tickets.code": {"$in": [777, 778]}}) == 0


class Badge(me.EmbeddedDocument):
    code = RandomUniqueField(digits=2, reserve_in="shared_codes")
    spare = RandomUniqueField(digits=2, reserve_in="shared_codes")


class Desk(me.Document):
    name = me.StringField()
    code = RandomUniqueField(digits=2, reserve_in="shared_codes")
    badge = me.EmbeddedDocumentField(Badge)
    meta = {"collection": "desks"}


def _shared(db: Any) -> list[Any]:
    return sorted(doc["_id"] for doc in db.shared_codes.find())


def test_two_fields_sharing_a_proxy_cannot_take_one_value_by_save(mongoengine_db: Any) -> None:
    """Found by a probe: the reservation the second field made of a value already reserved for
    the same write was taken for its own (an earlier attempt's), and one value was stored
    twice; fields sharing ``reserve_in`` share its values."""
    for desk in (Desk(badge=Badge(code=42, spare=42)), Desk(code=42, badge=Badge(code=42))):
        with pytest.raises(NotUniqueError, match=r"\[42\] already reserved in 'shared_codes'"):
            desk.save()
    assert mongoengine_db.desks.count_documents({}) == 0
    assert _shared(mongoengine_db) == []


@pytest.mark.parametrize("operation", OPERATIONS)
def test_two_fields_sharing_a_proxy_cannot_take_one_value_by_upsert(
    mongoengine_db: Any, operation: str
) -> None:
    with pytest.raises(NotUniqueError, match=r"\[48\] already reserved in 'shared_codes'"):
        upsert(operation, Desk.objects(name="t"), set__badge__code=48, set_on_insert__code=48)
    with pytest.raises(NotUniqueError, match=r"\[49\] already reserved in 'shared_codes'"):
        upsert(operation, Desk.objects(name="t"), set__badge__code=49, set__badge__spare=49)
    assert mongoengine_db.desks.count_documents({}) == 0
    assert _shared(mongoengine_db) == []
    upsert(operation, Desk.objects(name="t"), set__badge__code=48, set_on_insert__code=49)
    (stored,) = mongoengine_db.desks.find()
    assert (stored["code"], stored["badge"]["code"]) == (49, 48)
    assert _shared(mongoengine_db) == sorted([48, 49, stored["badge"]["spare"]])


def test_two_classes_of_one_name_sharing_a_proxy_cannot_take_one_value(
    mongoengine_db: Any,
) -> None:
    """Found by a review: the place was named by the class's name, which two classes (of two
    modules) may share."""

    def badge(module: str) -> type[me.EmbeddedDocument]:
        code = RandomUniqueField(digits=2, reserve_in="shared_codes")
        return type("Badge", (me.EmbeddedDocument,), {"__module__": module, "code": code})

    Staff, Visitor = badge("staff.models"), badge("visitors.models")

    class Lobby(me.Document):
        name = me.StringField()
        staff = me.EmbeddedDocumentField(Staff)
        visitor = me.EmbeddedDocumentField(Visitor)
        meta = {"collection": "lobbies"}

    with pytest.raises(NotUniqueError, match=r"\[48\] already reserved in 'shared_codes'"):
        Lobby.objects(name="t").upsert_one(set__staff__code=48, set__visitor__code=48)
    with pytest.raises(NotUniqueError, match=r"\[50\] already reserved in 'shared_codes'"):
        Lobby(name="s", staff=Staff(code=50), visitor=Visitor(code=50)).save()
    assert mongoengine_db.lobbies.count_documents({}) == 0
    assert _shared(mongoengine_db) == []


class PinnedVoucher(me.Document):
    code = RandomUniqueField(digits=6, reserve_in="pinned_voucher_codes")
    name = me.StringField()
    meta = {"collection": "pinned_vouchers"}


@pytest.mark.parametrize(
    "write",
    [
        lambda name: PinnedVoucher(code=123456, name=name).save(),
        lambda name: PinnedVoucher.objects(name=name).upsert_one(set__code=123456),
        lambda name: PinnedVoucher.objects.insert([PinnedVoucher(code=123456, name=name)]),
    ],
    ids=["save", "upsert_one", "insert"],
)
def test_an_application_pinning_uuid4_changes_nothing(
    mongoengine_db: Any, write: Callable[[str], Any]
) -> None:
    """Probe Z: a test pinning ``uuid.uuid4`` (for its own ids) made every write one owner, so
    a value another document held was taken for the write's own reservation: stored twice.
    The package draws nothing from ``uuid4`` now, and the value stays refused."""
    with mock.patch("uuid.uuid4", return_value=uuid.UUID(int=1)) as pinned:
        write("a")
        with pytest.raises(NotUniqueError, match=r"\[123456\] already reserved"):
            write("b")
    assert pinned.call_count == 0
    stored_docs = list(mongoengine_db.pinned_vouchers.find({}, {"_id": 0}))
    assert stored_docs == [{"code": 123456, "name": "a"}]
    assert [doc["_id"] for doc in mongoengine_db.pinned_voucher_codes.find()] == [123456]


def _owners_of_a_child() -> list[str]:
    """Eight owners named by a forked child."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        try:
            os.write(write, json.dumps([new_owner() for _ in range(8)]).encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read) as pipe:
        owners: list[str] = json.loads(pipe.read())
    os.waitpid(pid, 0)
    return owners


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork()")
def test_forked_children_name_other_owners_than_their_parent_and_each_other() -> None:
    """Owners are counted per process: a child counting on from its parent's count would name
    the parent's next owners, and take a value reserved for one as its own; so would two
    children forked while a test pins os.urandom (review C)."""
    first = _owners_of_a_child()
    with mock.patch("os.urandom", return_value=bytes(8)):
        pinned = [_owners_of_a_child(), _owners_of_a_child()]
    parent = [new_owner() for _ in range(8)]
    everyone = [first, *pinned, parent]
    assert all(len(set(owners)) == 8 for owners in everyone)
    assert len(set().union(*everyone)) == 8 * len(everyone)


# -- modify() failing after its write (probe AR) ------------------------------------------------


class LateSlipPart(me.EmbeddedDocument):
    pc = RandomUniqueField(digits=1, reserve_in="late_slip_part_pcs")


class LateSlip(me.Document):
    name = me.StringField()
    ref = RandomUniqueField(digits=1, reserve_in="late_slip_refs")
    own = RandomUniqueField(digits=1, reserve_in="late_slip_owns")
    part = me.EmbeddedDocumentField(LateSlipPart)
    data = me.DictField()
    meta = {"collection": "late_slips"}


def test_a_modify_failing_after_its_write_keeps_its_values(mongoengine_db: Any) -> None:
    # MongoEngine's modify() builds the document it returns after the write: a post_init
    # handler raising there had made the package give back the values the stored document
    # holds (made, assigned and embedded): later documents were handed them again.
    from mongoengine import signals

    def picky(sender: Any, document: Any, **kwargs: Any) -> None:
        if document.name == "boom":
            raise RuntimeError("post_init handler failed")

    signals.post_init.connect(picky, sender=LateSlip)
    try:
        with pytest.raises(RuntimeError, match="post_init handler failed"):
            LateSlip.objects(name="boom").modify(
                upsert=True, new=True, set__own=5, set__part=LateSlipPart()
            )
    finally:
        signals.post_init.disconnect(picky, sender=LateSlip)
    (stored,) = mongoengine_db.late_slips.find()
    assert stored["own"] == 5
    held = {
        "late_slip_refs": [stored["ref"]],
        "late_slip_owns": [5],
        "late_slip_part_pcs": [stored["part"]["pc"]],
    }
    for proxy, values in held.items():
        assert sorted(doc["_id"] for doc in mongoengine_db[proxy].find()) == values
    with pytest.raises(NotUniqueError, match=r"\[5\] already reserved"):
        LateSlip(name="other", own=5).save()
    # The application's retry of the same modify() finds the document: nothing is doubled.
    retried = LateSlip.objects(name="boom").modify(
        upsert=True, new=True, set__own=5, set__part=LateSlipPart()
    )
    assert retried.own == 5
    assert mongoengine_db.late_slips.count_documents({}) == 1
    assert [doc["_id"] for doc in mongoengine_db.late_slip_owns.find()] == [5]


def test_a_modify_the_driver_cannot_encode_gives_its_values_back(mongoengine_db: Any) -> None:
    # Review I: the driver's encoding error (raised before anything is sent) had been taken
    # for a failure after the write, and the reservation was kept by no document.
    with pytest.raises(bson.errors.InvalidDocument):
        LateSlip.objects(name="enc").modify(upsert=True, set__own=6, set__data={"x": object()})
    assert list(mongoengine_db.late_slips.find()) == []
    assert list(mongoengine_db.late_slip_owns.find()) == []
    assert LateSlip(name="after", own=6).save().own == 6


class Ledger(me.Document):
    name = me.StringField()
    number = me.SequenceField(collection_name="ledger_counters")
    meta = {"collection": "ledger"}


@pytest.mark.parametrize(
    ("reserve_in", "user"),
    [
        ("tickets", "the collection of the documents themselves"),
        ("ledger", "the collection of Ledger"),
        ("mongoengine.counters", "the counters of SequenceFields"),
        ("ledger_counters", "the counters of Ledger.number"),
    ],
)
def test_reservations_are_refused_a_collection_other_documents_are_kept_in(
    mongoengine_db: Any, reserve_in: str, user: str
) -> None:
    """Probe BD: only the documents' own collection was refused; reservations written among
    another model's documents made its queries raise (FieldDoesNotExist), among counters
    showed as a corrupted counter."""

    class Ticket(me.Document):
        code = RandomUniqueField(digits=6, reserve_in=reserve_in)
        meta = {"collection": "tickets"}

    Ledger(name="kept").save()
    with pytest.raises(ValueError, match=rf"Ticket\.code: reserve_in='{reserve_in}' is {user};"):
        Ticket().save()
    assert sorted(mongoengine_db.list_collection_names()) == [
        "ledger",
        "ledger_counters",
    ]
    assert [d["name"] for d in mongoengine_db.ledger.find()] == ["kept"]


class Scan(me.Document):
    image = me.FileField()  # GridFS: its collection_name "fs" names no counters
    meta = {"collection": "scans"}


class ElsewhereCodes(me.Document):
    name = me.StringField()
    meta = {"collection": "elsewhere_codes", "db_alias": "elsewhere"}


class Reservation(me.Document):
    """A model reading the reservations themselves (to inspect or clean them)."""

    id = me.StringField(primary_key=True)
    ns = me.StringField()
    at = me.DateTimeField()
    by = me.StringField()
    meta = {"collection": "inspected_codes"}


@pytest.mark.parametrize("reserve_in", ["fs", "elsewhere_codes", "inspected_codes"])
def test_reservations_may_go_where_no_document_breaks(
    mongoengine_connect: Any, reserve_in: str
) -> None:
    """Review P: the first check refused GridFS's "fs" (a FileField's collection_name), a
    collection of that name used by a model of another database, and a model written to read
    the reservations."""
    mongoengine_db = mongoengine_connect()
    elsewhere = mongoengine_connect("elsewhere")
    ElsewhereCodes(name="kept").save()

    class Voucher(me.Document):
        code = RandomUniqueField(digits=6, reserve_in=reserve_in)
        meta = {"collection": "vouchers"}

    code = Voucher().save().code
    assert [d["_id"] for d in mongoengine_db[reserve_in].find()] == [code]
    if reserve_in == "inspected_codes":
        assert [r.ns for r in Reservation.objects] == ["vouchers.code"]
    assert [d["name"] for d in elsewhere.elsewhere_codes.find()] == ["kept"]


class _FirstInsertLost:
    """The first insert_one on ``collection`` fails before it is sent (AutoReconnect)."""

    def __init__(self, collection: str) -> None:
        self.collection, self.armed = collection, True

    def __call__(self, collection: str, method: str, call: Callable[[], Any]) -> Any:
        if self.armed and (collection, method) == (self.collection, "insert_one"):
            self.armed = False
            raise pymongo.errors.AutoReconnect("injected: never sent")
        return call()


class ProxyCopied(me.Document):
    code = RandomUniqueField(digits=6, reserve_in="copied_codes")
    name = me.StringField()
    meta = {"collection": "proxy_copied"}


@pytest.mark.parametrize(
    "copied", [copy.copy, copy.deepcopy, lambda d: pickle.loads(pickle.dumps(d))]
)
def test_a_copy_saved_after_a_lost_reply_is_refused_saying_so(copied: Any) -> None:
    """Probe BO-1: a copy of a document whose insert had its reply lost is refused the value
    that insert reserved (it may have written it), nothing written; the error named other
    holders only. It names the copy and the retry with the object itself, which stores it."""
    with connected_threadsafe(hook=_FirstInsertLost("proxy_copied")) as connect:
        db = connect()
        doc = ProxyCopied(name="a")
        with pytest.raises(pymongo.errors.AutoReconnect):
            doc.save()
        with pytest.raises(
            NotUniqueError,
            match=r"reply lost\) of a document this one is a copy \(copy, pickle\) of: retry with",
        ):
            copied(doc).save()
        assert list(db.proxy_copied.find()) == []
        doc.save()
        assert list(db.proxy_copied.find()) == [{"_id": doc.id, "code": doc.code, "name": "a"}]
        assert [r["_id"] for r in db.copied_codes.find()] == [doc.code]
