"""A new document whose insert had its reply lost keeps its key for the application's retry
(see test_faults_exhaustive). MongoEngine's ``update()``, ``modify()``, ``delete()`` and
``reload()`` address the stored document by that key: they act only once it is known to be
this document's (its insert was applied); otherwise they refuse, since the key may be another
document's (a number the field would have retried had the insert's error come back, or a
key a copy of the document holds)."""

from __future__ import annotations

import contextlib
import copy
import pickle
from collections.abc import Callable, Iterator
from typing import Any

import mongoengine as me
import pymongo.errors
import pytest
from _support import TEST_URI
from bson import Binary
from bson.binary import UuidRepresentation
from bson.codec_options import CodecOptions
from mongoengine.errors import OperationError

from mongoengine_ids import SequenceField, UUID4Field
from mongoengine_ids.testing import connected_threadsafe


class Order(me.Document):
    id = SequenceField(primary_key=True)
    item = me.StringField()


class LoseInsert:
    """Once armed, the next insert (``method`` on ``collection``): ``before`` (never applied),
    ``after`` (applied, reply lost) or ``refused`` (refused by the server, that reply lost)."""

    def __init__(self, mode: str) -> None:
        self.mode = mode
        self.collection, self.method = "order", "insert_one"
        self.armed = False

    def __call__(self, collection: str, method: str, call: Callable[[], Any]) -> Any:
        if not self.armed or (collection, method) != (self.collection, self.method):
            return call()
        self.armed = False
        if self.mode == "before":
            raise pymongo.errors.AutoReconnect("injected before the call")
        with contextlib.suppress(pymongo.errors.DuplicateKeyError):
            call()
        raise pymongo.errors.AutoReconnect("injected after the call")

    def lose(self, write: Callable[[], Any]) -> None:
        """Arm, then run ``write``, whose insert fails so (the application sees the error)."""
        self.armed = True
        with pytest.raises(pymongo.errors.AutoReconnect):
            write()


@pytest.fixture(params=["before", "refused"])
def lost(request: Any) -> Iterator[LoseInsert]:
    hook = LoseInsert(request.param)
    with connected_threadsafe(TEST_URI, hook=hook) as connect:
        connect()
        yield hook


def raw() -> list[dict[str, Any]]:
    return list(Order._get_collection().find().sort("_id"))


#: What each action leaves stored (the document's own attribute: update() leaves it alone).
STORED = {"update": "mine, changed", "modify": "mine, changed", "reload": "mine"}
ACTIONS: dict[str, Callable[[Order], Any]] = {
    "update": lambda order: order.update(set__item="mine, changed"),
    "modify": lambda order: order.modify(set__item="mine, changed"),
    "delete": lambda order: order.delete(),
    "reload": lambda order: order.reload(),
}


def _lost_insert(hook: LoseInsert) -> Order:
    """An order whose save() picks the number 1, which an imported document holds."""
    Order._get_collection().insert_one({"_id": 1, "item": "theirs"})
    order = Order(item="mine")
    hook.lose(order.save)
    assert order.id == 1  # kept for the application's retry
    return order


@pytest.mark.parametrize("action", ACTIONS)
def test_a_key_not_known_to_be_its_own_is_refused(lost: LoseInsert, action: str) -> None:
    order = _lost_insert(lost)
    with pytest.raises(
        OperationError,
        match=r"Order 1: its insert had its reply lost, and '\w+\.\w+' holds under that key a "
        r"document that no attempt sent.*give it another key \(a generated key: set it to "
        r"None\), set to None the other generated values .* and save",
    ):
        ACTIONS[action](order)
    assert raw() == [{"_id": 1, "item": "theirs"}]  # the holder of 1 untouched
    order.save()  # the retry: 1 is another's, the field takes the next number
    assert raw() == [{"_id": 1, "item": "theirs"}, {"_id": 2, "item": "mine"}]
    ACTIONS[action](order)  # now on its own document
    mine = [] if action == "delete" else [{"_id": 2, "item": STORED[action]}]
    assert raw() == [{"_id": 1, "item": "theirs"}, *mine]
    assert order.item == ("mine, changed" if action == "modify" else "mine")


@pytest.mark.parametrize("action", ACTIONS)
def test_a_landed_insert_makes_the_key_its_own(action: str) -> None:
    hook = LoseInsert("after")
    with connected_threadsafe(TEST_URI, hook=hook) as connect:
        connect()
        order = Order(item="mine")
        hook.lose(order.save)
        ACTIONS[action](order)  # looks the insert up: applied, so key 1 is its own
        if action == "delete":
            assert raw() == []
            return
        assert raw() == [{"_id": 1, "item": STORED[action]}]
        order.item = "mine, saved"
        order.save()  # an update of the stored document, not a second insert
        assert raw() == [{"_id": 1, "item": "mine, saved"}]


def test_a_landed_bulk_insert_updated_by_key_is_counted_by_its_retry() -> None:
    """The update found the insert landed (the stored copies are the orders'), then changed
    them: the application's retry of the insert counts them stored, inserts nothing again."""
    hook = LoseInsert("after")
    with connected_threadsafe(TEST_URI, hook=hook) as connect:
        connect()
        orders = [Order(item="a"), Order(item="b")]
        hook.method = "insert_many"
        hook.lose(lambda: Order.objects.insert(orders, load_bulk=False))
        for order in orders:
            order.update(set__item=f"{order.item}, changed")
        assert Order.objects.insert(orders, load_bulk=False) == [1, 2]
        assert raw() == [{"_id": 1, "item": "a, changed"}, {"_id": 2, "item": "b, changed"}]


def test_a_refused_delete_sends_no_signal() -> None:
    """MongoEngine's delete() sends pre_delete (and deletes the GridFS files) before it reads
    the key: the key is settled first."""
    hook = LoseInsert("before")
    sent: list[Any] = []

    def handler(sender: Any, document: Any, **kwargs: Any) -> None:
        sent.append(document)

    me.signals.pre_delete.connect(handler, sender=Order)
    try:
        with connected_threadsafe(TEST_URI, hook=hook) as connect:
            connect()
            order = _lost_insert(hook)
            with pytest.raises(OperationError, match="its insert had its reply lost"):
                order.delete()
            assert sent == []
            order.save()
            order.delete()
            assert sent == [order]
            assert raw() == [{"_id": 1, "item": "theirs"}]
    finally:
        me.signals.pre_delete.disconnect(handler, sender=Order)


class Parcel(me.Document):
    id = UUID4Field(primary_key=True)
    item = me.StringField()


def test_a_key_made_for_the_document_alone_addresses_it_or_nothing() -> None:
    """A UUID key made for the document is no other's: MongoEngine's calls act as on any
    document that is not stored (nothing matched), not refused."""
    hook = LoseInsert("before")
    with connected_threadsafe(TEST_URI, hook=hook) as connect:
        connect()
        parcel = Parcel(item="mine")
        hook.collection = "parcel"
        hook.lose(parcel.save)
        with pytest.raises(Parcel.DoesNotExist):
            parcel.reload()
        assert parcel.update(set__item="changed") == 0
        assert list(Parcel._get_collection().find()) == []
        parcel.save()  # the retry inserts it, with the same key
        raw_binary = CodecOptions(uuid_representation=UuidRepresentation.UNSPECIFIED)
        (stored,) = Parcel._get_collection().with_options(codec_options=raw_binary).find()
        assert stored == {"_id": Binary(parcel.pk.bytes, 4), "item": "mine"}


def _raw_parcels() -> list[dict[str, Any]]:
    raw_binary = CodecOptions(uuid_representation=UuidRepresentation.UNSPECIFIED)
    return list(Parcel._get_collection().with_options(codec_options=raw_binary).find())


def _saved_copy_of_a_lost_insert(hook: LoseInsert, how: str, *, bulk: bool = False) -> Parcel:
    """A parcel whose insert was never applied (the reply lost); a copy of it, taken then
    (holding the key made for the parcel), saved meanwhile."""
    hook.collection = "parcel"
    hook.method = "insert_many" if bulk else "insert_one"
    parcel = Parcel(item="mine")
    hook.lose(lambda: Parcel.objects.insert([parcel]) if bulk else parcel.save())
    twin = copy.deepcopy(parcel) if how == "deepcopy" else pickle.loads(pickle.dumps(parcel))
    twin.item = "the copy"
    twin.save()
    return parcel


@pytest.mark.parametrize("how", ["deepcopy", "pickle"])
@pytest.mark.parametrize("bulk", [False, True], ids=["save", "insert"])
def test_the_retry_never_writes_over_a_copy_saved_meanwhile(how: str, bulk: bool) -> None:
    """Found by probe AU: the retry took the copy's document, stored under the key made for
    the parcel, for its own landed insert and wrote the parcel over it (the copy's save had
    returned; its data was lost)."""
    hook = LoseInsert("before")
    with connected_threadsafe(TEST_URI, hook=hook) as connect:
        connect()
        parcel = _saved_copy_of_a_lost_insert(hook, how, bulk=bulk)
        with pytest.raises(me.NotUniqueError):
            Parcel.objects.insert([parcel]) if bulk else parcel.save()
        assert _raw_parcels() == [{"_id": Binary(parcel.pk.bytes, 4), "item": "the copy"}]


@pytest.mark.parametrize("action", ACTIONS)
def test_a_key_a_copy_was_saved_under_is_not_addressed(action: str) -> None:
    hook = LoseInsert("before")
    with connected_threadsafe(TEST_URI, hook=hook) as connect:
        connect()
        parcel = _saved_copy_of_a_lost_insert(hook, "deepcopy")
        with pytest.raises(
            OperationError, match="holds under that key a document that no attempt sent"
        ):
            ACTIONS[action](parcel)
        assert _raw_parcels() == [{"_id": Binary(parcel.pk.bytes, 4), "item": "the copy"}]


def test_a_key_nothing_holds_yet_is_refused_until_the_retry() -> None:
    """A sequence key kept for the retry, which no document holds: it may be handed to another
    (the insert is not known to have failed for good), so update() waits for the save()."""
    hook = LoseInsert("before")
    with connected_threadsafe(TEST_URI, hook=hook) as connect:
        connect()
        order = Order(item="mine")
        hook.lose(order.save)
        with pytest.raises(OperationError, match=r"Order 1: .* is not stored in .*save\(\) it"):
            order.update(set__item="changed")
        assert raw() == []
        order.save()
        assert raw() == [{"_id": 1, "item": "mine"}]


def test_a_landed_document_changed_by_another_writer_is_refused_with_the_way_out() -> None:
    """Review K: its stored copy is no version sent (a worker changed it), which a copy saved
    meanwhile would look like too: the retry and the calls by key refuse, naming both and what
    to do, and write nothing."""
    hook = LoseInsert("after")
    with connected_threadsafe(TEST_URI, hook=hook) as connect:
        connect()
        hook.collection = "parcel"
        parcel = Parcel(item="mine")
        hook.lose(parcel.save)
        Parcel._get_collection().update_one({}, {"$set": {"status": "picked"}})
        message = (
            r"holds under that key a document that no attempt sent: this one, changed since it "
            r"landed \(by another writer\), or another document holding the key \(a copy of "
            r"this one saved meanwhile, or one given that key\); nothing was written. Load the "
            r"document that collection holds under that key to see which; to store this one as "
            r"a new document, give it another key \(a generated key: set it to None\), set to "
            r"None the other generated values it shares with that document, and save\(\) it"
        )
        with pytest.raises(OperationError, match=message):
            parcel.reload()
        with pytest.raises(me.NotUniqueError, match=message):
            parcel.save()
        expected = [{"_id": Binary(parcel.pk.bytes, 4), "item": "mine", "status": "picked"}]
        assert _raw_parcels() == expected


class StepParcel(me.Document):
    id = UUID4Field(primary_key=True)
    item = me.StringField()
    extra = me.StringField()

    def _save_create(self, doc: Any, force_insert: bool, write_concern: Any) -> Any:
        return super()._save_create(doc, force_insert, write_concern)


def test_a_copy_adding_a_value_is_not_taken_for_an_own_steps_insert() -> None:
    """Review L: for a model with its own ``_save_create``, a stored copy holding every value
    sent, and more, was taken for the retry's own under any key: the original's retry wrote
    over a copy saved meanwhile with a value added. A key made for it alone is compared
    exactly."""
    hook = LoseInsert("before")
    with connected_threadsafe(TEST_URI, hook=hook) as connect:
        db = connect()
        hook.collection = "step_parcel"
        parcel = StepParcel(item="mine")
        hook.lose(parcel.save)
        twin = copy.copy(parcel)
        twin.extra = "the copy's"
        twin.save()
        with pytest.raises(me.NotUniqueError, match="holds under that key a document that no"):
            parcel.save()
        stored = db.step_parcel.find({}, {"_id": 0})
        assert list(stored) == [{"item": "mine", "extra": "the copy's"}]


class Ticket(me.Document):
    id = SequenceField(primary_key=True)
    item = me.StringField()


def test_an_assigned_key_held_by_another_is_refused_with_the_way_out() -> None:
    """Review L: a key you assigned to a generated field is never given a fresh value: the
    retry finding another document under it refuses with the error naming what to do (it was
    MongoEngine's bare duplicate key error)."""
    hook = LoseInsert("before")
    with connected_threadsafe(TEST_URI, hook=hook) as connect:
        db = connect()
        hook.collection = "ticket"
        ticket = Ticket(id=5, item="mine")
        hook.lose(ticket.save)
        db.ticket.insert_one({"_id": 5, "item": "theirs"})
        with pytest.raises(me.NotUniqueError, match=r"Ticket 5: .*give it another key"):
            ticket.save()
        assert list(db.ticket.find()) == [{"_id": 5, "item": "theirs"}]


class Labelled(me.Document):
    id = me.StringField(primary_key=True)
    item = me.StringField()
    number = SequenceField()


def test_an_assigned_key_of_a_plain_field_keeps_mongoengines_save() -> None:
    """A key of a field that is not generated, assigned: MongoEngine's save() writes over what
    holds it (its save is a replace, not an insert), also on the retry after a lost reply."""
    hook = LoseInsert("after")
    with connected_threadsafe(TEST_URI, hook=hook) as connect:
        db = connect()
        hook.collection, hook.method = "labelled", "find_one_and_replace"
        labelled = Labelled(id="k1", item="mine")
        hook.lose(labelled.save)
        db.labelled.update_one({"_id": "k1"}, {"$set": {"item": "theirs"}})
        labelled.save()
        assert list(db.labelled.find()) == [{"_id": "k1", "item": "mine", "number": 1}]
