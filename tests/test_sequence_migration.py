"""Migration without renumbering, from data MongoEngine itself wrote.

Each test lets ``mongoengine.fields.SequenceField`` write documents and counters, then swaps the
import: the same models (same class names, same collections) declared with
``mongoengine_ids.SequenceField``. The next values continue after the stored ones and never
repeat, whatever ``batch_size``; and MongoEngine's field, swapped back, continues after ours
(the counter documents stay readable by it). Then a populated collection keyed by ObjectIds
gets a generated field (not the primary key), filled in by ``backfill()``.

Every check reads the raw stored documents and counters.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import mongoengine as me
import pytest
from _write_support import KIND_IDS, KINDS, Kind, distinct, norm, raw_docs
from bson import ObjectId
from mongoengine import fields as me_fields
from mongoengine.context_managers import switch_db

from mongoengine_ids import SequenceField, backfill
from mongoengine_ids.sequence import DEFAULT_COLLECTION, admin
from mongoengine_ids.sequence.field import CorruptedCounterError

Field = Callable[..., Any]
THEIRS: Field = me_fields.SequenceField


def ours(batch_size: int) -> Field:
    return lambda *args, **kwargs: SequenceField(*args, batch_size=batch_size, **kwargs)


by_batch = pytest.mark.parametrize("batch_size", [1, 10])


def model(class_name: str, bases: tuple[type, ...] = (me.Document,), /, **fields: Any) -> Any:
    """A class ``class_name``: declared twice per test, MongoEngine's then ours."""
    return type(class_name, bases, {"__module__": __name__, **fields})


def counters(db: Any) -> dict[str, int]:
    return {doc["_id"]: doc["next"] for doc in db[DEFAULT_COLLECTION].find()}


def values(db: Any, collection: str, key: str = "_id") -> list[Any]:
    return sorted(doc[key] for doc in db[collection].find() if key in doc)


# -- plain model ----------------------------------------------------------------------------------


def people(field: Field) -> Any:
    return model("Person", id=field(primary_key=True), name=me.StringField())


@by_batch
def test_plain_model(mongoengine_db: Any, batch_size: int) -> None:
    Theirs = people(THEIRS)
    for i in range(5):
        Theirs(name=f"theirs {i}").save()
    assert counters(mongoengine_db) == {"person.id": 5}

    Ours = people(ours(batch_size))
    assert Ours.id.get_next_value() == 6
    saved = [Ours(name="ours").save().id for _ in range(3)]
    Ours.objects.insert([Ours(name="bulk") for _ in range(4)])
    assert saved == [6, 7, 8]
    assert values(mongoengine_db, "person") == list(range(1, 13))
    assert Ours.objects.get(id=3).name == "theirs 2"

    # And back: MongoEngine's field continues after what ours leased (6..15 with batch 10).
    Back = people(THEIRS)
    assert Back(name="back").save().id == (13 if batch_size == 1 else 16)
    assert distinct(values(mongoengine_db, "person"))


@by_batch
def test_explicit_ids_mongoengine_wrote_above_its_counter(
    mongoengine_db: Any, batch_size: int
) -> None:
    # MongoEngine's field never moves its counter past an id assigned explicitly: its own next
    # save of that id would silently replace the document (its issue 1472).
    Theirs = people(THEIRS)
    for _ in range(3):
        Theirs(name="theirs").save()
    Theirs(id=5, name="explicit").save()
    assert counters(mongoengine_db) == {"person.id": 3}

    Ours = people(ours(batch_size))
    # 4, then 5 collides with the stored document: the write is retried with a fresh value
    # (with batch_size=10, from a fresh block: the one holding 5 is dropped).
    expected = [4, 6, 7] if batch_size == 1 else [4, 14, 15]
    assert [Ours(name="ours").save().id for _ in range(3)] == expected
    assert mongoengine_db.person.find_one({"_id": 5})["name"] == "explicit"
    assert values(mongoengine_db, "person") == sorted([1, 2, 3, 5, *expected])


# -- abstract base shared by two models -----------------------------------------------------------


def foo_and_bar(field: Field) -> tuple[Any, Any]:
    Base = model("Base", meta={"abstract": True}, id=field(primary_key=True), name=me.StringField())
    return model("Foo", (Base,)), model("Bar", (Base,))


@by_batch
def test_abstract_base_shared_by_two_models(mongoengine_db: Any, batch_size: int) -> None:
    TheirFoo, TheirBar = foo_and_bar(THEIRS)
    for _ in range(3):
        TheirFoo(name="foo").save()
        TheirBar(name="bar").save()
    assert values(mongoengine_db, "foo") == [1, 3, 5]
    assert values(mongoengine_db, "bar") == [2, 4, 6]
    assert counters(mongoengine_db) == {"base.id": 6}

    Foo, Bar = foo_and_bar(ours(batch_size))
    assert [Foo(name="f").save().id, Bar(name="b").save().id, Foo(name="f").save().id] == [
        7,
        8,
        9,
    ]
    Bar.objects.insert([Bar(name="bulk"), Bar(name="bulk")])
    assert values(mongoengine_db, "foo") == [1, 3, 5, 7, 9]
    assert values(mongoengine_db, "bar") == [2, 4, 6, 8, 10, 11]
    assert list(counters(mongoengine_db)) == ["base.id"]  # no foo.id, no bar.id

    BackFoo, _ = foo_and_bar(THEIRS)
    assert BackFoo(name="back").save().id == (12 if batch_size == 1 else 17)


# -- allow_inheritance ----------------------------------------------------------------------------


def animals(field: Field) -> tuple[Any, Any]:
    Animal = model(
        "Animal",
        meta={"allow_inheritance": True},
        id=field(primary_key=True),
        name=me.StringField(),
    )
    return Animal, model("Dog", (Animal,), tag=field())


@by_batch
def test_allow_inheritance(mongoengine_db: Any, batch_size: int) -> None:
    TheirAnimal, TheirDog = animals(THEIRS)
    TheirAnimal(name="cat").save()
    TheirDog(name="rex").save()
    TheirDog(name="fido").save()
    assert counters(mongoengine_db) == {"animal.id": 3, "animal.tag": 2}

    Animal, Dog = animals(ours(batch_size))
    dog = Dog(name="laika").save()
    animal = Animal(name="owl").save()
    assert (dog.id, dog.tag, animal.id) == (4, 3, 5)
    Animal.objects.insert([Dog(name="bulk")])  # through the parent's queryset
    raws = list(mongoengine_db.animal.find())
    assert sorted(raw["_id"] for raw in raws) == [1, 2, 3, 4, 5, 6]
    assert sorted(raw["tag"] for raw in raws if "tag" in raw) == [1, 2, 3, 4]
    assert Animal.objects.get(id=2).tag == 1
    assert set(counters(mongoengine_db)) == {"animal.id", "animal.tag"}


# -- custom sequence_name -------------------------------------------------------------------------


def tickets(field: Field) -> tuple[Any, Any]:
    # Two models numbered by one named counter, "jelly.id".
    Red = model("Red", id=field(primary_key=True, sequence_name="jelly"))
    Green = model("Green", id=field(primary_key=True, sequence_name="jelly"))
    return Red, Green


@by_batch
def test_custom_sequence_name(mongoengine_db: Any, batch_size: int) -> None:
    TheirRed, TheirGreen = tickets(THEIRS)
    TheirRed().save()
    TheirGreen().save()
    TheirRed().save()
    assert counters(mongoengine_db) == {"jelly.id": 3}

    Red, Green = tickets(ours(batch_size))
    # Two fields, each leasing its own blocks from the one counter.
    expected = [4, 5, 6] if batch_size == 1 else [4, 14, 5]
    assert [Green().save().id, Red().save().id, Green().save().id] == expected
    assert values(mongoengine_db, "red") == sorted([1, 3, expected[1]])
    assert values(mongoengine_db, "green") == sorted([2, expected[0], expected[2]])
    assert list(counters(mongoengine_db)) == ["jelly.id"]


# -- embedded documents ---------------------------------------------------------------------------


def posts(field: Field) -> tuple[Any, Any]:
    Comment = model("Comment", (me.EmbeddedDocument,), id=field(), text=me.StringField())
    Post = model(
        "Post",
        title=me.StringField(),
        comments=me.ListField(me.EmbeddedDocumentField(Comment)),
    )
    return Comment, Post


def comment_ids(db: Any) -> dict[str, list[Any]]:
    return {
        raw["title"]: [comment.get("id") for comment in raw["comments"]] for raw in db.post.find()
    }


@by_batch
def test_embedded_documents(mongoengine_db: Any, batch_size: int) -> None:
    TheirComment, TheirPost = posts(THEIRS)
    TheirPost(title="a", comments=[TheirComment(text="1"), TheirComment(text="2")]).save()
    TheirPost(title="b", comments=[TheirComment(text="3")]).save()
    assert comment_ids(mongoengine_db) == {"a": [1, 2], "b": [3]}
    assert counters(mongoengine_db) == {"comment.id": 3}

    Comment, Post = posts(ours(batch_size))
    Post(title="c", comments=[Comment(text="4"), Comment(text="5")]).save()
    loaded = Post.objects.get(title="a")
    loaded.comments.append(Comment(text="6"))
    loaded.save()
    Post.objects.insert([Post(title="d", comments=[Comment(text="7")])])
    assert comment_ids(mongoengine_db) == {"a": [1, 2, 6], "b": [3], "c": [4, 5], "d": [7]}
    assert list(counters(mongoengine_db)) == ["comment.id"]


# -- value_decorator ------------------------------------------------------------------------------


@by_batch
def test_value_decorator(mongoengine_db: Any, batch_size: int) -> None:
    def labels(field: Field) -> Any:
        return model("Label", id=field(primary_key=True, value_decorator=str))

    Theirs = labels(THEIRS)
    for _ in range(3):
        Theirs().save()
    assert values(mongoengine_db, "label") == ["1", "2", "3"]

    Ours = labels(ours(batch_size))
    assert [Ours().save().id for _ in range(2)] == ["4", "5"]
    assert values(mongoengine_db, "label") == ["1", "2", "3", "4", "5"]
    assert Ours.objects.get(id=2).id == Ours.objects.get(id="2").id == "2"


# -- a model on another alias ---------------------------------------------------------------------


@by_batch
def test_a_model_on_another_alias_keeps_the_default_aliass_counter(
    mongoengine_connect: Any, batch_size: int
) -> None:
    default = mongoengine_connect()
    other = mongoengine_connect("other")

    def remote(field: Field, **options: Any) -> Any:
        return model("Remote", meta={"db_alias": "other"}, id=field(primary_key=True, **options))

    Theirs = remote(THEIRS)
    for _ in range(3):
        Theirs().save()
    # MongoEngine's field keeps the counter on the default alias, whatever the model's.
    assert counters(default) == {"remote.id": 3}
    assert counters(other) == {}

    Ours = remote(ours(batch_size), db_alias="default")
    assert [Ours().save().id for _ in range(2)] == [4, 5]
    assert values(other, "remote") == [1, 2, 3, 4, 5]
    assert counters(other) == {}


@by_batch
def test_documents_written_under_switch_db_keep_the_default_aliass_counter(
    mongoengine_connect: Any, batch_size: int
) -> None:
    default = mongoengine_connect()
    archive = mongoengine_connect("archive")

    def tickets(field: Field, **options: Any) -> Any:
        return model("Ticket", number=field(**options), title=me.StringField())

    Theirs = tickets(THEIRS)
    for _ in range(3):
        with switch_db(Theirs, "archive") as Switched:
            Switched(title="old").save()
    # MongoEngine's field keeps the counter on the default alias, whatever the database written.
    assert counters(default) == {"ticket.number": 3}
    assert counters(archive) == {}

    Ours = tickets(ours(batch_size), db_alias="default")
    with switch_db(Ours, "archive") as Switched:
        assert [Switched(title="new").save().number for _ in range(2)] == [4, 5]
    assert values(archive, "ticket", "number") == [1, 2, 3, 4, 5]
    assert counters(archive) == {}


# -- ObjectId keys, then a generated field --------------------------------------------------------


def customers(field: Field | None) -> tuple[Any, Any]:
    extra = {} if field is None else {"number": field(unique=True, sparse=True)}
    Customer = model("Customer", name=me.StringField(), **extra)
    Order = model("CustomerOrder", customer=me.ReferenceField(Customer), total=me.IntField())
    return Customer, Order


@pytest.mark.parametrize("kind", KINDS, ids=KIND_IDS)
def test_objectid_keys_then_a_generated_field(mongoengine_db: Any, kind: Kind) -> None:
    TheirCustomer, TheirOrder = customers(None)
    for i in range(5):
        customer = TheirCustomer(name=f"old {i}").save()
        TheirOrder(customer=customer, total=i).save()
    old_ids = values(mongoengine_db, "customer")
    assert all(isinstance(key, ObjectId) for key in old_ids)

    Customer, Order = customers(kind.make)
    new = Customer(name="new").save()  # builds the sparse unique index over the populated data
    assert Customer.objects(number=None).count() == 5
    assert backfill(Customer) == 5
    assert backfill(Customer) == 0
    Customer.objects.insert([Customer(name="bulk")])

    raws = raw_docs(mongoengine_db.customer)
    assert [raw["_id"] for raw in raws[:5]] == old_ids  # the keys did not change
    numbers = [raw["number"] for raw in raws]
    assert len(numbers) == 7
    for number in numbers:
        kind.check(number)
    assert distinct(numbers)
    assert norm(Customer.objects.get(name="new").number) == norm(new.number)
    indexes = mongoengine_db.customer.index_information().values()
    (index,) = [index for index in indexes if index["key"] == [("number", 1)]]
    assert index.get("unique") is True
    assert index.get("sparse") is True
    # References written before the field existed still resolve, and see the new values.
    for order in Order.objects:
        assert kind.stored(order.customer.number) in numbers
        assert order.customer.name == f"old {order.total}"
    if kind.name == "sequence":
        assert sorted(numbers) == list(range(1, 8))


# -- scope= added to or removed from a live sequence (probe BK-1) --------------------------------


def _invoices(field: Field) -> Any:
    return model("Invoice", number=field(), tenant=me.StringField())


@by_batch
def test_scope_added_to_a_live_sequence_is_refused_until_its_counters_are_set(
    mongoengine_db: Any, batch_size: int
) -> None:
    # Each scope would be numbered from 1 again beside the numbers its documents hold: acme
    # held 1 and 3, and a new acme document got 1.
    Theirs = _invoices(THEIRS)
    for tenant in ("acme", "zeta", "acme"):
        Theirs(tenant=tenant).save()
    before = (raw_docs(mongoengine_db.invoice), list(mongoengine_db[DEFAULT_COLLECTION].find()))
    Scoped = model(
        "Invoice",
        number=SequenceField(scope="tenant", batch_size=batch_size),
        tenant=me.StringField(),
    )
    with pytest.raises(CorruptedCounterError, match="scope= cannot be added to or removed from"):
        Scoped(tenant="acme").save()
    assert (
        raw_docs(mongoengine_db.invoice),
        list(mongoengine_db[DEFAULT_COLLECTION].find()),
    ) == before
    # The way the message gives: each scope's counter past its numbers, the shared one deleted.
    admin.set_next_value(mongoengine_db, "invoice.number", 4, scope="acme")
    mongoengine_db[DEFAULT_COLLECTION].delete_one({"_id": "invoice.number"})
    Scoped(tenant="acme").save()
    Scoped(tenant="beta").save()  # a new scope: from the start
    numbers = [(doc["tenant"], doc["number"]) for doc in raw_docs(mongoengine_db.invoice)]
    assert numbers == [("acme", 1), ("zeta", 2), ("acme", 3), ("acme", 4), ("beta", 1)]


def test_scope_removed_from_a_live_sequence_is_refused(mongoengine_db: Any) -> None:
    Scoped = model("Invoice", number=SequenceField(scope="tenant"), tenant=me.StringField())
    Scoped(tenant="acme").save()
    Scoped(tenant="zeta").save()
    Shared = _invoices(SequenceField)
    with pytest.raises(CorruptedCounterError, match="with a scope=, and this one has no scope="):
        Shared(tenant="acme").save()
    assert [doc["number"] for doc in raw_docs(mongoengine_db.invoice)] == [1, 1]


def test_scope_removed_is_refused_for_the_empty_scope_too(mongoengine_db: Any) -> None:
    # Review W: the look for "name@<scope>" counters began after "name@", missing scope "".
    Scoped = model("Invoice", number=SequenceField(scope="tenant"), tenant=me.StringField())
    Scoped(tenant="").save()
    with pytest.raises(CorruptedCounterError, match=r"'invoice\.number@'"):
        _invoices(SequenceField)(tenant="").save()
    assert [doc["number"] for doc in raw_docs(mongoengine_db.invoice)] == [1]


def test_a_scopes_counter_set_by_the_field_is_the_way_from_one_layout_to_the_other(
    mongoengine_db: Any,
) -> None:
    # Review W: the field's own set_next_value(scope=) was refused while the counter without
    # scope was still there, though it is the first step of the way out.
    _invoices(THEIRS)(tenant="acme").save()
    Scoped = model("Invoice", number=SequenceField(scope="tenant"), tenant=me.StringField())
    Scoped.number.set_next_value(1, scope="acme")  # MongoEngine's: the next one is 2
    mongoengine_db[DEFAULT_COLLECTION].delete_one({"_id": "invoice.number"})
    Scoped(tenant="acme").save()
    assert [doc["number"] for doc in raw_docs(mongoengine_db.invoice)] == [1, 2]


def test_the_admin_refuses_a_counter_without_scope_beside_the_scopes_counters(
    mongoengine_db: Any,
) -> None:
    # Review W: made, it made the first save of every new scope fail.
    Scoped = model("Invoice", number=SequenceField(scope="tenant"), tenant=me.StringField())
    Scoped(tenant="acme").save()
    before = list(mongoengine_db[DEFAULT_COLLECTION].find())
    with pytest.raises(ValueError, match="has counters per scope and none without: give scope="):
        admin.set_next_value(mongoengine_db, "invoice.number", 10)
    assert list(mongoengine_db[DEFAULT_COLLECTION].find()) == before
    Scoped(tenant="zeta").save()
    assert [doc["number"] for doc in raw_docs(mongoengine_db.invoice)] == [1, 1]
