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
from mongoengine import fields as me_fields

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


def test_a_field_no_class_owns_has_no_counter_name() -> None:
    with pytest.raises(TypeError, match="belongs to no document class"):
        SequenceField().get_sequence_name()
    assert SequenceField(sequence_name="free").get_sequence_name() == "free"
