"""SequenceField as a drop-in for ``mongoengine.fields.SequenceField``, in this project's words.

MongoEngine's own tests of its field pass with ours substituted (``../shared/mongoengine-upstream``,
outside the project); each behaviour they rely on is tested here too: the counter names
(MongoEngine's ``owner_document`` rule: abstract bases share one counter), the field-level
``get_next_value()`` and ``set_next_value()`` (which drop leased blocks), ``sequence_name``,
``collection_name``, ``db_alias``, ``value_decorator`` and embedded documents. Names and counter
documents are compared with what MongoEngine's field writes for the same models.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import mongoengine as me
import pytest
from bson.json_util import RELAXED_JSON_OPTIONS
from mongoengine import fields as me_fields

from mongoengine_ids.errors import IdSpaceExhaustedError
from mongoengine_ids.sequence import DEFAULT_COLLECTION, SequenceField


def counters(db: Any, collection: str = DEFAULT_COLLECTION) -> list[dict[str, Any]]:
    return sorted(db[collection].find(), key=lambda doc: str(doc["_id"]))


def model(
    class_name: str, bases: tuple[type, ...] = (me.Document,), /, **namespace: Any
) -> type[Any]:
    """A class ``class_name`` (the name matters: MongoEngine names some counters after it)."""
    return type(class_name, bases, {"__module__": __name__, **namespace})


def drop_all(db: Any) -> None:
    for name in db.list_collection_names():
        db.drop_collection(name)


# -- counter names: MongoEngine's rule ----------------------------------------------------------

Field = Callable[..., Any]
#: A shape of models: given a field class, builds the models and saves a few documents.
Shape = Callable[[Field], None]


def plain(field: Field) -> None:
    Order = model("Order", id=field(primary_key=True))
    Order().save()


def own_collection(field: Field) -> None:
    Named = model("Named", meta={"collection": "orders_2024"}, number=field())
    Named().save()


def custom_sequence_name(field: Field) -> None:
    Jelly = model("Jelly", id=field(primary_key=True, sequence_name="jelly"))
    Jelly().save()


def abstract_base(field: Field) -> None:
    # MongoEngine: one counter named after the base, shared by the subclasses.
    Base = model("Base", meta={"abstract": True}, counter=field(), name=me.StringField())
    Foo = model("Foo", (Base,))
    Bar = model("Bar", (Base,))
    Bar(name="bar").save()
    Foo(name="foo").save()


def nested_abstract_bases(field: Field) -> None:
    Root = model("RootDoc", meta={"abstract": True}, number=field())
    Middle = model("MiddleDoc", (Root,), meta={"abstract": True})
    Leaf = model("LeafDoc", (Middle,))
    Leaf().save()


def camel_case_abstract_base(field: Field) -> None:
    Base = model("HTTPRequestBase", meta={"abstract": True}, number=field())
    Leaf = model("HttpGet", (Base,))
    Leaf().save()


def fields_on_the_subclasses(field: Field) -> None:
    # Declared on each subclass: one counter per subclass.
    Base = model("Base", meta={"abstract": True}, name=me.StringField())
    Foo = model("Foo", (Base,), counter=field())
    Bar = model("Bar", (Base,), counter=field())
    Bar().save()
    Foo().save()


def allow_inheritance(field: Field) -> None:
    Animal = model("Animal", meta={"allow_inheritance": True}, id=field(primary_key=True))
    Dog = model("Dog", (Animal,), tag=field())
    Dog().save()
    Animal().save()


def embedded(field: Field) -> None:
    Comment = model("Comment", (me.EmbeddedDocument,), id=field())
    Post = model("Post", comments=me.ListField(me.EmbeddedDocumentField(Comment)))
    Post(comments=[Comment(), Comment()]).save()


def embedded_with_inheritance(field: Field) -> None:
    Note = model("Note", (me.EmbeddedDocument,), meta={"allow_inheritance": True}, number=field())
    Memo = model("Memo", (Note,))
    Folder = model("Folder", notes=me.ListField(me.EmbeddedDocumentField(Note)))
    Folder(notes=[Note(), Memo()]).save()


def plain_mixin(field: Field) -> None:
    # MongoEngine makes the first model made from the mixin the field's owner: both models
    # share its counter.
    Mixin = type("Mixin", (), {"code": field()})
    First = model("FirstMixed", (Mixin, me.Document))
    Second = model("SecondMixed", (Mixin, me.Document))
    Second().save()
    First().save()


SHAPES = [
    plain,
    own_collection,
    custom_sequence_name,
    abstract_base,
    nested_abstract_bases,
    camel_case_abstract_base,
    fields_on_the_subclasses,
    allow_inheritance,
    embedded,
    embedded_with_inheritance,
    plain_mixin,
]


@pytest.mark.parametrize("shape", SHAPES, ids=[shape.__name__ for shape in SHAPES])
def test_counter_documents_are_mongoengines(mongoengine_db: Any, shape: Shape) -> None:
    shape(me_fields.SequenceField)
    theirs = counters(mongoengine_db)
    drop_all(mongoengine_db)

    shape(SequenceField)
    assert counters(mongoengine_db) == theirs


def test_an_abstract_base_keeps_one_counter_for_its_subclasses(mongoengine_db: Any) -> None:
    class Base(me.Document):
        meta = {"abstract": True}
        counter = SequenceField(batch_size=10)

    class Foo(Base):
        pass

    class Bar(Base):
        pass

    saved = [Foo().save(), Bar().save(), Foo().save(), Bar().save()]
    Foo.objects.insert([Foo(), Foo()])
    assert [doc.counter for doc in saved] == [1, 2, 3, 4]
    assert sorted(doc["counter"] for doc in mongoengine_db["foo"].find()) == [1, 3, 5, 6]
    assert sorted(doc["counter"] for doc in mongoengine_db["bar"].find()) == [2, 4]
    # One counter, leased once (batch_size=10).
    assert counters(mongoengine_db) == [{"_id": "base.counter", "next": 10}]
    assert Foo._fields["counter"] is Bar._fields["counter"]
    assert Foo._fields["counter"].get_sequence_name() == "base"


@pytest.mark.parametrize("signature", ["mongoengine's", "ours"])
def test_an_overridden_get_sequence_name_names_the_counter(
    mongoengine_db: Any, signature: str
) -> None:
    """Overridden with MongoEngine's signature (no argument) too (found by probe I: a
    TypeError on every save)."""
    if signature == "ours":

        class TenantSequence(SequenceField):
            def get_sequence_name(self, document_class: Any = None) -> str:
                return "tenant_a"
    else:

        class TenantSequence(SequenceField):  # type: ignore[no-redef]
            def get_sequence_name(self) -> str:  # type: ignore[override]
                return "tenant_a"

    class Invoice(me.Document):
        number = TenantSequence()

    assert Invoice.number.get_next_value() == 1

    mongoengine_db[DEFAULT_COLLECTION].insert_one({"_id": "tenant_a.number", "next": 41})
    invoice = Invoice().save()
    assert mongoengine_db["invoice"].find_one({"_id": invoice.pk})["number"] == 42
    assert counters(mongoengine_db) == [{"_id": "tenant_a.number", "next": 42}]


def test_a_field_no_class_owns_has_no_counter_name() -> None:
    with pytest.raises(TypeError, match="belongs to no document class"):
        SequenceField().get_sequence_name()
    assert SequenceField(sequence_name="free").get_sequence_name() == "free"


# -- get_next_value() and set_next_value() ------------------------------------------------------


def script(field: Field, db: Any) -> list[Any]:
    """What a user of MongoEngine's field sees through its field-level helpers."""
    Person = model("Person", id=field(primary_key=True), name=me.StringField())
    seen: list[Any] = [Person.id.get_next_value()]  # no counter yet
    seen += [Person(name=str(i)).save().id for i in range(3)]
    seen += [Person.id.get_next_value(), Person.id.get_next_value()]  # a preview: nothing used
    seen += [Person(name="after preview").save().id]
    seen += [Person.id.set_next_value(1000), Person(name="up").save().id]
    seen += [Person.id.get_next_value()]
    db.drop_collection("person")
    seen += [Person.id.set_next_value(0), Person(name="down").save().id]
    seen += [Person.id.get_next_value()]
    db.drop_collection(DEFAULT_COLLECTION)
    seen += [Person.id.get_next_value()]
    return seen


@pytest.mark.parametrize("batch_size", [1, 7])
def test_field_helpers_behave_as_mongoengines(mongoengine_db: Any, batch_size: int) -> None:
    theirs = script(me_fields.SequenceField, mongoengine_db)
    drop_all(mongoengine_db)
    ours = script(lambda **kw: SequenceField(batch_size=batch_size, **kw), mongoengine_db)
    assert theirs == [1, 1, 2, 3, 4, 4, 4, 1000, 1001, 1002, 0, 1, 2, 1]
    if batch_size == 1:
        assert ours == theirs
    else:
        # The same, but the last preview: the dropped counter is gone, and this process still
        # holds values 2..7 of its block, which the next save would use.
        assert ours == [*theirs[:-1], 2]


def test_set_next_value_stores_mongoengines_counter_document(mongoengine_db: Any) -> None:
    class Person(me.Document):
        id = SequenceField(primary_key=True, batch_size=50)

    assert Person.id.set_next_value(1000) == 1000
    assert counters(mongoengine_db) == [{"_id": "person.id", "next": 1000}]
    assert Person().save().id == 1001
    assert counters(mongoengine_db) == [{"_id": "person.id", "next": 1050}]


def test_get_next_value_previews_the_leased_block(mongoengine_db: Any) -> None:
    class Leased(me.Document):
        id = SequenceField(primary_key=True, batch_size=10)

    assert Leased.id.get_next_value() == 1
    assert counters(mongoengine_db) == []  # a preview creates nothing
    Leased().save()
    assert counters(mongoengine_db) == [{"_id": "leased.id", "next": 10}]
    assert Leased.id.get_next_value() == 2  # this process's block, not the counter's 11
    Leased.objects.insert([Leased() for _ in range(12)])  # 2..10, then 11..20 leased, 11..13 used
    assert Leased.id.get_next_value() == 14
    assert Leased().save().id == 14


@pytest.mark.parametrize("prefetch", [False, True])
def test_set_next_value_drops_the_leased_blocks(mongoengine_db: Any, prefetch: bool) -> None:
    class Batched(me.Document):
        id = SequenceField(primary_key=True, batch_size=10, prefetch=prefetch)

    assert [Batched().save().id for _ in range(6)] == [1, 2, 3, 4, 5, 6]
    Batched.id.set_next_value(500)  # up: the rest of 1..10 (and any prefetched block) dropped
    assert Batched().save().id == 501
    assert Batched.objects.count() == 7
    mongoengine_db.drop_collection("batched")
    Batched.id.set_next_value(0)  # down, as MongoEngine's allows: 502..510 dropped
    assert [Batched().save().id for _ in range(3)] == [1, 2, 3]
    assert counters(mongoengine_db) == [{"_id": "batched.id", "next": 10}]


def test_set_next_value_drops_the_blocks_of_every_field_on_the_counter(
    mongoengine_db: Any,
) -> None:
    class Left(me.Document):
        number = SequenceField(sequence_name="shared", batch_size=10)

    class Right(me.Document):
        number = SequenceField(sequence_name="shared", batch_size=10)

    assert [Left().save().number, Right().save().number] == [1, 11]
    Left.number.set_next_value(100)
    # Right's block 12..20 was dropped too: each leases anew from 100.
    assert [Right().save().number, Left().save().number] == [101, 111]


def test_set_next_value_refuses_what_no_counter_can_hold(mongoengine_db: Any) -> None:
    class Bounded(me.Document):
        id = SequenceField(primary_key=True, start=100, digits=3)

    with pytest.raises(TypeError, match="value must be an int, not '5'"):
        Bounded.id.set_next_value("5")
    with pytest.raises(ValueError, match=r"value=98 must be between 99 \(start - 1\) and 999"):
        Bounded.id.set_next_value(98)
    with pytest.raises(ValueError, match="value=1000 must be between 99"):
        Bounded.id.set_next_value(1000)
    assert counters(mongoengine_db) == []
    Bounded.id.set_next_value(99)
    assert Bounded.id.get_next_value() == 100
    Bounded.id.set_next_value(999)  # the last value is handed out: exhausted
    with pytest.raises(IdSpaceExhaustedError):
        Bounded.id.get_next_value()


def test_get_next_value_of_a_new_counter_is_start(mongoengine_db: Any) -> None:
    class Started(me.Document):
        id = SequenceField(primary_key=True, start=1000)

    assert Started.id.get_next_value() == 1000
    mongoengine_db[DEFAULT_COLLECTION].insert_one({"_id": "started.id", "next": 5})
    # A counter below start - 1 (MongoEngine's, say) is moved up by the next lease.
    assert Started.id.get_next_value() == 1000
    assert Started().save().id == 1000


def test_field_helpers_use_the_counters_database_and_collection(
    mongoengine_connect: Any,
) -> None:
    default = mongoengine_connect()
    other = mongoengine_connect("other")

    class Remote(me.Document):
        meta = {"db_alias": "other"}
        id = SequenceField(primary_key=True)

    class Pinned(me.Document):
        meta = {"db_alias": "other"}
        id = SequenceField(primary_key=True, db_alias="default", collection_name="my_counters")

    Remote.id.set_next_value(10)
    Pinned.id.set_next_value(20)
    assert counters(other) == [{"_id": "remote.id", "next": 10}]
    assert counters(default, "my_counters") == [{"_id": "pinned.id", "next": 20}]
    assert [Remote().save().id, Pinned().save().id] == [11, 21]
    assert [Remote.id.get_next_value(), Pinned.id.get_next_value()] == [12, 22]


def test_field_helpers_of_an_embedded_field(mongoengine_db: Any) -> None:
    class Comment(me.EmbeddedDocument):
        id = SequenceField()

    class Post(me.Document):
        comments = me.ListField(me.EmbeddedDocumentField(Comment))

    assert Comment.id.set_next_value(41) == 41
    post = Post(comments=[Comment(), Comment()]).save()
    assert [comment.id for comment in post.comments] == [42, 43]
    assert Comment.id.get_next_value() == 44
    assert counters(mongoengine_db) == [{"_id": "comment.id", "next": 43}]


def test_field_helpers_of_an_abstract_base(mongoengine_db: Any) -> None:
    class Base(me.Document):
        meta = {"abstract": True}
        counter = SequenceField(batch_size=5)

    class Foo(Base):
        pass

    class Bar(Base):
        pass

    assert Foo().save().counter == 1
    Bar._fields["counter"].set_next_value(9)
    assert [Bar().save().counter, Foo().save().counter] == [10, 11]
    assert Foo._fields["counter"].get_next_value() == 12
    assert counters(mongoengine_db) == [{"_id": "base.counter", "next": 14}]


def test_field_helpers_of_a_scoped_field(mongoengine_db: Any) -> None:
    class Invoice(me.Document):
        tenant = me.StringField()
        number = SequenceField(scope="tenant")

    with pytest.raises(TypeError, match="numbered per 'tenant': pass scope="):
        Invoice.number.get_next_value()
    Invoice.number.set_next_value(100, scope="acme")
    assert Invoice(tenant="acme").save().number == 101
    assert Invoice(tenant="other").save().number == 1
    assert Invoice.number.get_next_value(scope="acme") == 102
    assert Invoice.number.get_next_value(scope="new") == 1
    assert counters(mongoengine_db) == [
        {"_id": "invoice.number@acme", "next": 101, "sequence": "invoice.number", "scope": "acme"},
        {"_id": "invoice.number@other", "next": 1, "sequence": "invoice.number", "scope": "other"},
    ]

    class Plain(me.Document):
        number = SequenceField()

    with pytest.raises(TypeError, match="has one counter"):
        Plain.number.get_next_value(scope="acme")


def test_field_helpers_of_a_sharded_field_are_refused(mongoengine_db: Any) -> None:
    class Sharded(me.Document):
        number = SequenceField(digits=6, shards=4)

    with pytest.raises(ValueError, match="4 shards, each with its own counter"):
        Sharded.number.get_next_value()
    with pytest.raises(ValueError, match="4 shards"):
        Sharded.number.set_next_value(10)


def test_get_next_value_of_a_formatted_field_is_formatted(mongoengine_db: Any) -> None:
    class Account(me.Document):
        number = SequenceField(prefix="AC-", digits=4, zero_pad=True)

    assert Account.number.get_next_value() == "AC-0001"
    assert Account.number.set_next_value(41) == "AC-0041"
    assert Account().save().number == "AC-0042"


# -- value_decorator ----------------------------------------------------------------------------


def decorated_script(field: Field, db: Any) -> list[Any]:
    Person = model("Person", id=field(primary_key=True, value_decorator=str))
    seen: list[Any] = [Person.id.get_next_value()]
    seen += [Person().save().id for _ in range(3)]
    seen += [[doc["_id"] for doc in db["person"].find()], counters(db)]
    seen += [[person.id for person in Person.objects.order_by("id")]]
    seen += [Person.objects.get(id=2).id, Person.objects.get(id="3").id]
    seen += [Person.id.get_next_value(), Person.id.set_next_value(10), Person().save().id]
    return seen


@pytest.mark.parametrize("batch_size", [1, 5])
def test_value_decorator_behaves_as_mongoengines(mongoengine_db: Any, batch_size: int) -> None:
    theirs = decorated_script(me_fields.SequenceField, mongoengine_db)
    drop_all(mongoengine_db)
    ours = decorated_script(lambda **kw: SequenceField(batch_size=batch_size, **kw), mongoengine_db)
    assert theirs == [
        "1",
        "1",
        "2",
        "3",
        ["1", "2", "3"],
        [{"_id": "person.id", "next": 3}],
        ["1", "2", "3"],
        "2",
        "3",
        "4",
        "10",
        "11",
    ]
    if batch_size == 1:
        assert ours == theirs
    else:  # the counter is at the end of the leased block
        assert ours == [*theirs[:5], [{"_id": "person.id", "next": 5}], *theirs[6:]]


def decorated_bulk_script(field: Field, db: Any) -> list[Any]:
    Ticket = model(
        "Ticket",
        id=field(primary_key=True, value_decorator=lambda n: n + 1000),
        title=me.StringField(),
    )
    inserted = Ticket.objects.insert([Ticket(title="a"), Ticket(title="b")])
    found = Ticket.objects.in_bulk([1001, 1002])
    return [
        [(ticket.id, ticket.title) for ticket in inserted],
        sorted((key, ticket.title) for key, ticket in found.items()),
        list(db["ticket"].find()),
    ]


def test_a_numeric_value_decorator_inserts_and_finds_in_bulk_as_mongoengines(
    mongoengine_db: Any,
) -> None:
    """Probe V: a decorator returning a number (n + 1000) was applied again to the keys
    in_bulk() looks up: insert() wrote the documents, then returned None for each."""
    theirs = decorated_bulk_script(me_fields.SequenceField, mongoengine_db)
    drop_all(mongoengine_db)
    ours = decorated_bulk_script(SequenceField, mongoengine_db)
    assert theirs == [
        [(1001, "a"), (1002, "b")],
        [(1001, "a"), (1002, "b")],
        [{"_id": 1001, "title": "a"}, {"_id": 1002, "title": "b"}],
    ]
    assert ours == theirs


@pytest.mark.parametrize(
    "decorator",
    [lambda n: str(n + 1000), lambda n: n + 1000, lambda n: f"24{n:04d}"],
    ids=["text offset", "number offset", "year prefix"],
)
def test_a_decorated_key_addresses_its_own_document(mongoengine_db: Any, decorator: Any) -> None:
    """Probe BK-3: the key a document holds was read as a query value, a number to decorate:
    "1001" (of 1) was looked for as "2001", so reload(), update() and delete() went to that
    document, or to none. The key is sent as stored."""
    Ticket = model(
        "Ticket",
        id=SequenceField(primary_key=True, value_decorator=decorator),
        t=me.StringField(),
    )
    first = Ticket(t="first").save()
    assert first.id == decorator(1)
    # A document stored under what the key would be looked for as, were it taken for a number.
    misread = decorator(int(str(first.id)))
    mongoengine_db["ticket"].insert_one({"_id": misread, "t": "other"})
    first.t = "stale"
    first.reload()
    assert first.t == "first"
    first.update(set__t="updated")
    assert mongoengine_db["ticket"].find_one({"_id": first.id})["t"] == "updated"
    # modify() asks for the key by its field's name as well (review W: both were asked, one
    # of them misread, and it matched nothing).
    assert first.modify(set__t="modified") is True
    assert mongoengine_db["ticket"].find_one({"_id": first.id})["t"] == "modified"
    first.delete()
    assert list(mongoengine_db["ticket"].find()) == [{"_id": misread, "t": "other"}]


@pytest.mark.parametrize("shard_key", [("id",), ("no",)])
def test_a_decorated_value_in_the_shard_key_addresses_its_own_document(
    mongoengine_db: Any, shard_key: tuple[str, ...]
) -> None:
    """Review W: MongoEngine addresses a document by its shard key's values too, which were
    read as query values: a decorated number there was looked for as another."""
    decorated = {"value_decorator": lambda n: str(n + 1000)}
    keyed = shard_key == ("id",)
    Ticket = model(
        "Ticket",
        **({"id": SequenceField(primary_key=True, **decorated)} if keyed else {}),
        no=SequenceField(**decorated) if not keyed else me.StringField(),
        t=me.StringField(),
        meta={"shard_key": shard_key},
    )
    first = Ticket(t="first").save()
    field = "_id" if keyed else "no"
    mongoengine_db["ticket"].insert_one({field: "2001", "t": "other"})
    first.reload()
    assert first.update(set__t="updated") == 1
    assert first.modify(set__t="modified") is True
    first.delete()
    assert [(doc[field], doc["t"]) for doc in mongoengine_db["ticket"].find()] == [
        ("2001", "other")
    ]


def test_a_value_decorator_returning_none_is_refused_before_any_write(
    mongoengine_db: Any,
) -> None:
    """Probe V: save() refused None as "not a sequence value (a document not saved has no
    key)", while a bulk insert stored the documents without the field."""

    class Blank(me.Document):
        number = SequenceField(value_decorator=lambda n: None)
        size = me.IntField()

    message = r"Blank.number: value_decorator returned None for number \d+: it must return"
    with pytest.raises(ValueError, match=message):
        Blank(size=1).save()
    with pytest.raises(ValueError, match=message):
        Blank.objects.insert([Blank(size=2), Blank(size=3)])
    assert mongoengine_db["blank"].count_documents({}) == 0


def test_queries_by_the_number_and_by_the_decorated_value(mongoengine_db: Any) -> None:
    class Ticket(me.Document):
        id = SequenceField(primary_key=True, value_decorator=hex, batch_size=10)

    Ticket.objects.insert([Ticket() for _ in range(20)])
    assert sorted(doc["_id"] for doc in mongoengine_db["ticket"].find())[:3] == [
        "0x1",
        "0x10",
        "0x11",
    ]
    # By the counter number (an int or its digits), as MongoEngine does...
    assert Ticket.objects.get(id=31 - 20).id == "0xb"
    assert Ticket.objects.get(id="12").id == "0xc"
    # ...and by the stored value, which MongoEngine's field decorates again (its issue 975).
    assert Ticket.objects.get(id="0xd").id == "0xd"
    assert [t.id for t in Ticket.objects(id__in=[1, "0x2", "3"]).order_by("id")] == [
        "0x1",
        "0x2",
        "0x3",
    ]
    assert Ticket.objects(id=None).count() == 0


def test_an_explicit_decorated_value_moves_the_counter_when_it_is_a_number(
    mongoengine_db: Any,
) -> None:
    class Label(me.Document):
        id = SequenceField(primary_key=True, value_decorator=str)

    assert Label().save().id == "1"
    assert Label(id="50").save().id == "50"  # its digits are the number: counter moved
    assert Label().save().id == "51"
    # A value the field cannot read a number from is kept, and moves nothing.
    assert Label(id="special").save().id == "special"
    assert Label().save().id == "52"
    assert counters(mongoengine_db) == [{"_id": "label.id", "next": 52}]
    assert sorted(doc["_id"] for doc in mongoengine_db["label"].find()) == [
        "1",
        "50",
        "51",
        "52",
        "special",
    ]


def test_an_explicit_value_a_query_by_it_would_not_find_is_refused(mongoengine_db: Any) -> None:
    """Found by a probe: ``Ticket(id=5)`` under ``value_decorator=hex`` was stored as 5, while a
    query by 5 (also ``reload()``'s and ``delete()``'s, by the key) looks for ``hex(5)``: the
    document could not be found, and ``delete()`` deleted nothing, silently. (MongoEngine's
    field stores it so too.)"""

    class Ticket(me.Document):
        id = SequenceField(primary_key=True, value_decorator=hex)
        number = SequenceField(value_decorator=str)

    with pytest.raises(me.ValidationError, match=r"Ticket\.id: 5 .*looks for '0x5'"):
        Ticket(id=5).save()
    with pytest.raises(me.ValidationError, match=r"Ticket\.number: 7 .*looks for '7'"):
        Ticket(id="0x7", number=7).save()
    with pytest.raises(me.ValidationError, match=r"Ticket\.id: 8 "):
        Ticket.objects.insert([Ticket(), Ticket(id=8)])
    # Digits that are not the decorator's form of their number: a query by "6" looks for
    # "0x6" (found by another probe); "07" for "7".
    with pytest.raises(me.ValidationError, match=r"Ticket\.id: '6' .*looks for '0x6'"):
        Ticket(id="6").save()
    with pytest.raises(me.ValidationError, match=r"Ticket\.number: '07' .*looks for '7'"):
        Ticket(id="0x7", number="07").save()
    assert list(mongoengine_db["ticket"].find()) == []
    assert counters(mongoengine_db) == []
    # Values of the decorator's form are kept: it may have made them (a query by its number
    # finds them), or they are no number at all.
    ticket = Ticket(id="0x20", number="7").save()
    assert Ticket(id="special").save().id == "special"
    assert Ticket.objects.get(id=32) == ticket
    ticket.reload()
    ticket.delete()
    # An update's value is prepared as a query's: decorated (as MongoEngine does).
    Ticket.objects(number="1").upsert_one(set_on_insert__id=9)
    assert sorted(doc["_id"] for doc in mongoengine_db["ticket"].find()) == ["0x9", "special"]


def test_a_document_built_as_stored_keeps_its_decorated_fields_value(mongoengine_db: Any) -> None:
    """Found by a review: the number a document built as stored (``from_json()``) brings is
    stored by MongoEngine's upsert as it is; the refusal above came after that write, and every
    later ``save()`` of the object raised it."""

    class Ticket(me.Document):
        id = SequenceField(primary_key=True, value_decorator=hex)
        name = me.StringField()

    ticket = Ticket.from_json('{"_id": 5, "name": "a"}', json_options=RELAXED_JSON_OPTIONS)
    for name in ("b", "c"):
        ticket.name = name
        ticket.save()
    assert list(mongoengine_db["ticket"].find()) == [{"_id": 5, "name": "c"}]
    assert Ticket().save().id == "0x1"  # not a number of the counter's: it moved nothing


def test_value_decorator_int_is_the_plain_field(mongoengine_db: Any) -> None:
    field = SequenceField(value_decorator=int)
    assert not field.decorated
    assert field.value_decorator is int
    assert field.to_mongo("7") == 7  # the plain field's coercion and validation
    with pytest.raises(me.ValidationError):
        field.validate("x")
    assert SequenceField(value_decorator=str).value_decorator is str
    formatted = SequenceField(prefix="A-")
    assert formatted.value_decorator(7) == "A-7"


def test_mongoengines_positional_parameters_and_class_attributes(mongoengine_db: Any) -> None:
    class Ordered(me.Document):
        # MongoEngine's order: collection_name, db_alias, sequence_name, value_decorator.
        id = SequenceField("my_counters", "default", "jelly", str, primary_key=True)

    assert Ordered().save().id == "1"
    assert counters(mongoengine_db, "my_counters") == [{"_id": "jelly.id", "next": 1}]

    class Elsewhere(SequenceField):
        COLLECTION_NAME = "elsewhere"

    class Counted(me.Document):
        number = Elsewhere()

    Counted().save()
    assert counters(mongoengine_db, "elsewhere") == [{"_id": "counted.number", "next": 1}]

    class Text(SequenceField):
        VALUE_DECORATOR = str

    class Labelled(me.Document):
        number = Text()

    Labelled().save()
    assert mongoengine_db["labelled"].find_one()["number"] == "1"
    assert Labelled.objects.get(number=1).number == "1"
    assert SequenceField.COLLECTION_NAME == me_fields.SequenceField.COLLECTION_NAME
    assert SequenceField.VALUE_DECORATOR is me_fields.SequenceField.VALUE_DECORATOR


# -- what MongoEngine's field can read back -----------------------------------------------------


@pytest.mark.parametrize(
    ("options", "decorator"),
    [
        ({}, None),
        ({"batch_size": 10}, None),
        ({"start": 1000, "digits": 9}, None),
        ({"value_decorator": str}, str),
        ({"prefix": "AC-", "digits": 6, "zero_pad": True}, lambda n: f"AC-{n:06d}"),
    ],
    ids=["plain", "batch_size", "start_digits", "value_decorator", "formatted"],
)
def test_mongoengines_field_continues_after_ours(
    mongoengine_db: Any, options: dict[str, Any], decorator: Any
) -> None:
    def accounts(field: Field, **extra: Any) -> Any:
        return model("Account", number=field(**extra), name=me.StringField())

    Ours = accounts(SequenceField, **options)
    mine = [Ours(name="ours").save().number for _ in range(3)]
    (counter,) = counters(mongoengine_db)
    assert set(counter) == {"_id", "next"}  # MongoEngine's shape
    Theirs = accounts(me_fields.SequenceField, value_decorator=decorator)
    theirs = Theirs(name="theirs").save().number
    assert theirs not in mine
    stored = [doc["number"] for doc in mongoengine_db["account"].find()]
    assert stored == [*mine, theirs]
    assert theirs == (decorator or int)(counter["next"] + 1)


@pytest.mark.parametrize(
    ("options", "document_ids"),
    [
        ({"digits": 6, "shards": 2}, ["account.number#0", "account.number#1"]),
        ({"scope": "name"}, ["account.number@a"]),
    ],
    ids=["sharded", "scoped"],
)
def test_sharded_and_scoped_counters_are_not_mongoengines(
    mongoengine_db: Any, options: dict[str, Any], document_ids: list[str]
) -> None:
    # MongoEngine's field would look for "account.number" and start a new counter at 1.
    class Account(me.Document):
        name = me.StringField()
        number = SequenceField(batch_size=10, **options)

    Account.objects.insert([Account(name="a") for _ in range(30)])
    found = [doc["_id"] for doc in counters(mongoengine_db)]
    assert "account.number" not in found
    assert set(found) <= set(document_ids)


def test_assigning_none_then_saving_gives_a_new_value_as_mongoengines(
    mongoengine_db: Any,
) -> None:
    """MongoEngine's field generates a value when None is assigned (the deselected upstream
    test_sequence_fields_reload); ours never generates off the write path, but the save makes
    the new one, which its update writes (found by probe I: the save removed the value, and the
    next save of the same object filled it)."""

    class Animal(me.Document):
        counter = SequenceField()
        name = me.StringField()

    animal = Animal(name="Boi").save()
    assert animal.counter == 1
    animal.counter = None
    assert animal.counter is None  # not on read
    animal.save()
    assert animal.counter == 2
    assert mongoengine_db["animal"].find_one({}, {"_id": 0}) == {"name": "Boi", "counter": 2}
    animal.save()
    assert mongoengine_db["animal"].find_one({}, {"_id": 0}) == {"name": "Boi", "counter": 2}
    assert Animal(name="Next").save().counter == 3


def test_a_string_of_digits_assigned_reads_as_the_number_at_once(mongoengine_db: Any) -> None:
    """Probe Y: MongoEngine's field keeps "12345" on the attribute and stores the string, which
    reload() then misses; ours holds and stores the number (sequence.md's migration table)."""

    class Parcel(me.Document):
        id = SequenceField(primary_key=True)
        name = me.StringField()

    parcel = Parcel(name="a")
    parcel.id = "12345"
    assert parcel.id == 12345
    parcel.save()
    assert mongoengine_db["parcel"].find_one() == {"_id": 12345, "name": "a"}
    assert parcel.reload().id == 12345


# -- numbers written as doubles (the mongo shell's) ------------------------------------------------


@pytest.mark.parametrize("batch_size", [1, 10])
def test_a_counter_the_mongo_shell_set_as_a_double_carries_on(
    mongoengine_db: Any, batch_size: int
) -> None:
    """mongosh writes numbers as doubles (``{$set: {next: 500}}``): MongoEngine's field takes
    such a counter, and so does ours, making it an integer on its next lease (found by probe I:
    CorruptedCounterError on every save)."""

    class Shelled(me.Document):
        number = SequenceField(batch_size=batch_size)

    counters = mongoengine_db[DEFAULT_COLLECTION]
    counters.insert_one({"_id": "shelled.number", "next": 500.0})
    assert Shelled.number.get_next_value() == 501
    assert [Shelled().save().number for _ in range(3)] == [501, 502, 503]
    stored = counters.find_one({"_id": "shelled.number"})["next"]
    assert type(stored) is int
    assert stored == (510 if batch_size == 10 else 503)  # one lease of 10, or three of 1


def test_a_counter_double_holding_no_integer_is_still_corrupted(mongoengine_db: Any) -> None:
    from mongoengine_ids.errors import CorruptedCounterError

    class Halved(me.Document):
        number = SequenceField()

    mongoengine_db[DEFAULT_COLLECTION].insert_one({"_id": "halved.number", "next": 4.5})
    with pytest.raises(CorruptedCounterError, match=r"'next' is 4\.5"):
        Halved().save()
    assert list(mongoengine_db.halved.find()) == []


def test_a_document_numbered_by_a_double_reads_as_the_int_and_is_found(
    mongoengine_db: Any,
) -> None:
    """A key stored as ``7.0`` (imported by the mongo shell): read as 7, found by it, reloaded,
    saved, updated and deleted (found by probe I: every query by it was refused)."""

    class Imported(me.Document):
        id = SequenceField(primary_key=True)
        name = me.StringField()

    mongoengine_db.imported.insert_one({"_id": 7.0, "name": "shell"})
    loaded = Imported.objects.get(id=7)
    assert type(loaded.id) is int
    assert loaded.id == 7
    assert Imported.objects.get(id=7.0) == loaded
    assert [doc.id for doc in Imported.objects(id__in=["7", 7.0])] == [7]
    loaded.reload()
    loaded.name = "saved"
    loaded.save()
    loaded.update(set__name="updated")
    assert list(mongoengine_db.imported.find()) == [{"_id": 7.0, "name": "updated"}]
    with pytest.raises(me.ValidationError, match=r"cannot query Imported.id by 7.5"):
        Imported.objects.get(id=7.5)
    loaded.delete()
    assert list(mongoengine_db.imported.find()) == []


def test_a_subclass_overriding_generate_is_refused_when_declared() -> None:
    """MongoEngine's SequenceField subclasses override generate() to shape the values; it
    makes none here (found by probe I: the save failed with "'X-None' is not a sequence
    value"). Refused with what to use instead."""
    with pytest.raises(TypeError, match=r"Prefixed overrides generate\(\).*value_decorator="):

        class Prefixed(SequenceField):
            def generate(self) -> Any:
                return f"X-{super().generate()}"


def test_a_generate_a_mixin_gives_a_field_subclass_is_refused_too() -> None:
    class Shaping:
        def generate(self) -> Any:
            return "X"

    with pytest.raises(TypeError, match=r"ViaMixin overrides generate\(\)"):

        class ViaMixin(Shaping, SequenceField):
            pass
