"""References to models keyed by every generated field of the package, under every
``uuidRepresentation``.

Each test runs for each key (Locality, UUID4 and UUID7, stored as Binary and as text; a
SequenceField with a prefix and zero padding; a RandomUniqueField) and each representation
(``standard``, ``pythonLegacy``, ``unspecified``, and none given: MongoEngine's default), on
mongomock or, with ``MONGOENGINE_IDS_TEST_URI``, on a real server. Every test checks the raw
stored documents and the documents read back; and every call that reaches the database is
recorded (the hook of ``connected_threadsafe`` on mongomock, with the filter of each find, a
command listener on a server): at the end of each test, no ``uuid.UUID`` may have been sent
where the key is stored as Binary subtype 4, unless the server encodes it so (``standard``). A
real server under ``pythonLegacy`` would encode it as subtype 3 and miss every document; under
``unspecified`` it refuses it.

Three cases rest on the wrappers the package installs on MongoEngine's reference fields
(``mongoengine_ids.write.references``), and are tested here like every other: lists and dicts
of ``ReferenceField(..., dbref=True)`` read without ``select_related()``,
``CachedReferenceField`` queried by the document (with its ``auto_sync`` and ``sync_all()``),
and a ``GenericLazyReferenceField`` read back before ``save()``.
"""

from __future__ import annotations

import copy
import itertools
import pickle
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import bson
import mongoengine as me
import pytest
from _support import TEST_URI
from bson import DBRef, json_util
from bson.binary import Binary, UuidRepresentation
from bson.codec_options import CodecOptions
from mongoengine.base import LazyReference
from pymongo import monitoring

from mongoengine_ids import (
    LocalityUUID,
    LocalityUUIDField,
    RandomUniqueField,
    SequenceField,
    UUID4Field,
    UUID7Field,
    UUID7Generator,
)
from mongoengine_ids.stored import StoredUUID, StoredUUIDText
from mongoengine_ids.testing import connected_threadsafe
from mongoengine_ids.write import seam

# -- the keys -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Key:
    """A generated primary key field, and how its values are stored."""

    name: str
    #: Builds the field, given MongoEngine's field options (``primary_key=True``...).
    make: Callable[..., me.fields.BaseField]
    #: The class of the attribute's values; None: the stored value is the value (int, str).
    value_type: type | None = None
    as_string: bool = False

    @property
    def binary(self) -> bool:
        """Stored as BSON Binary subtype 4."""
        return self.value_type is not None and not self.as_string

    def stored(self, value: Any) -> Any:
        """The stored form of the key ``value``, as a raw read with no UUID decoding returns it."""
        if self.value_type is None:
            return value
        return str(value) if self.as_string else Binary(value.bytes, 4)

    def check_stored(self, raw: Any, value: Any) -> None:
        """Assert that ``raw``, read from the database, is ``value`` in stored form."""
        expected = self.stored(value)
        if self.binary:
            assert isinstance(raw, Binary), f"{raw!r} is not BSON Binary"
            assert raw.subtype == 4, f"{raw!r} is not Binary subtype 4"
            assert bytes(raw) == bytes(expected)
        else:
            assert isinstance(raw, type(expected)), f"{raw!r} is not a {type(expected)}"
            assert raw == expected


def _uuid_keys(name: str, make: Callable[..., Any], value_type: type) -> list[Key]:
    return [
        Key(name, make, value_type),
        Key(f"{name}-text", lambda **kwargs: make(as_string=True, **kwargs), value_type, True),
    ]


KEYS = [
    *_uuid_keys("locality", LocalityUUIDField, LocalityUUID),
    *_uuid_keys("uuid4", UUID4Field, uuid.UUID),
    *_uuid_keys("uuid7", UUID7Field, uuid.UUID),
    Key("sequence", lambda **kwargs: SequenceField(prefix="O-", digits=6, zero_pad=True, **kwargs)),
    Key("random", lambda **kwargs: RandomUniqueField(digits=12, **kwargs)),
]

#: None: no uuidRepresentation given (MongoEngine warns and uses its default, pythonLegacy).
REPRESENTATIONS = ["standard", "pythonLegacy", "unspecified", None]

#: Reads the stored bytes as they are: every Binary subtype stays Binary.
RAW = CodecOptions(document_class=dict, uuid_representation=UuidRepresentation.UNSPECIFIED)


# -- what reaches the database ------------------------------------------------------------------


def _uuids(value: Any, path: str = "") -> Iterator[tuple[str, uuid.UUID]]:
    """Every uuid.UUID in ``value`` (documents, lists, DBRefs), with where it is."""
    if isinstance(value, uuid.UUID):
        yield path, value
    elif isinstance(value, DBRef):
        yield from _uuids(value.id, f"{path}.$id")
    elif isinstance(value, dict):
        for key, item in value.items():
            if key != "lsid":  # the driver's session id
                yield from _uuids(item, f"{path}.{key}")
    elif isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            yield from _uuids(item, f"{path}.{index}")


@dataclass
class Sent:
    """The calls that reached the database during one test."""

    calls: list[tuple[str, str, Any]] = field(default_factory=list)

    def hook(self, collection: str, method: str, call: Any) -> Any:
        """``connected_threadsafe``'s hook (mongomock). A find reaches it as the first
        ``getMore`` of its cursor: what it sends is the cursor's filter (mongomock's ``_spec``)."""
        payload = (call.args, call.keywords)
        if method == "getMore" and TEST_URI is None:
            payload = getattr(call.args[0], "_spec", None)
        self.calls.append((collection, method, payload))
        return call()

    def command(self, event: Any) -> None:
        """A command started on a real server."""
        self.calls.append((event.database_name, event.command_name, event.command))

    def uuids(self) -> list[tuple[str, str, uuid.UUID]]:
        return [
            (method, path, value)
            for _, method, payload in self.calls
            for path, value in _uuids(payload)
        ]


class _Listener(monitoring.CommandListener):
    """Gives ``sink`` every command a real server is sent by the one client it is passed to
    (``event_listeners``: not registered globally, where it would outlive the test)."""

    def __init__(self, sink: Sent) -> None:
        self.sink = sink

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        self.sink.command(event)

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        pass

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        pass


# -- one test's world ---------------------------------------------------------------------------

_numbers = itertools.count(1)


@dataclass
class World:
    """A fresh database under one representation, with models keyed by one key."""

    key: Key
    representation: str | None
    database: Any
    sent: Sent

    @property
    def decodes_keys(self) -> bool:
        """Whether the driver reads a stored key back as a value equal to the attribute's: a
        real server under ``standard`` decodes Binary subtype 4 as ``uuid.UUID``."""
        if self.key.value_type is None:
            return True
        return TEST_URI is not None and self.representation == "standard" and self.key.binary

    @property
    def encodes_keys(self) -> bool:
        """Whether the driver sends the attribute's value as the stored form."""
        return self.decodes_keys

    def model(self, role: str, **fields: Any) -> type[me.Document]:
        """A new Document class (a name of its own: GenericReferenceField finds it by name)."""
        number = next(_numbers)
        meta = {"collection": f"{role.lower()}_{number}"}
        return type(f"{role}{number}", (me.Document,), {"meta": meta, **fields})

    def order(self) -> type[me.Document]:
        """A model keyed by the key, with a ``name``."""
        return self.model("Order", id=self.key.make(primary_key=True), name=me.StringField())

    def raw(self, model: type[me.Document], document: me.Document) -> dict[str, Any]:
        """``document`` as stored, every Binary subtype left as it is."""
        collection = model._get_collection().with_options(codec_options=RAW)
        found = collection.find_one({"_id": model._fields["id"].to_mongo(document.pk)})
        assert found is not None
        return found  # type: ignore[no-any-return]

    def check_reference(self, raw: Any, target: me.Document, *, dbref: bool) -> None:
        """Assert that ``raw`` is a stored reference to ``target``."""
        if dbref:
            assert isinstance(raw, DBRef), f"{raw!r} is not a DBRef"
            assert raw.collection == target._get_collection_name()
            raw = raw.id
        self.key.check_stored(raw, target.pk)

    def check_generic_reference(self, raw: Any, target: me.Document) -> None:
        """Assert that ``raw`` is a stored generic reference to ``target`` (its class, and a
        DBRef to it)."""
        assert raw["_cls"] == target._class_name
        self.check_reference(raw["_ref"], target, dbref=True)

    def check_sent(self) -> None:
        if self.encodes_keys:
            return  # pymongo encodes a uuid.UUID as the stored Binary subtype 4
        found = self.sent.uuids()
        assert not found, f"uuid.UUID sent where the key is stored as {self.key.name}: {found}"


@pytest.fixture(params=KEYS, ids=[key.name for key in KEYS])
def key(request: pytest.FixtureRequest) -> Key:
    return request.param  # type: ignore[no-any-return]


@pytest.fixture(params=REPRESENTATIONS, ids=[str(r) if r else "default" for r in REPRESENTATIONS])
def world(request: pytest.FixtureRequest, key: Key) -> Iterator[World]:
    representation = request.param
    sent = Sent()
    options = {} if TEST_URI is None else {"event_listeners": [_Listener(sent)]}
    with connected_threadsafe(TEST_URI, hook=sent.hook, **options) as connect:
        if representation is None:
            with pytest.warns(DeprecationWarning, match="No uuidRepresentation"):
                database = connect(uuid_representation=None)
        else:
            database = connect(uuid_representation=representation)
        world = World(key, representation, database, sent)
        yield world
    world.check_sent()


def names(documents: Any) -> list[str]:
    return [document.name for document in documents]


# -- ReferenceField ---------------------------------------------------------------------------


@pytest.mark.parametrize("dbref", [False, True], ids=["id", "dbref"])
def test_reference_field(world: World, dbref: bool) -> None:
    Order = world.order()
    Shipment = world.model("Shipment", order=me.ReferenceField(Order, dbref=dbref))
    first = Order(name="a").save()
    shipment = Shipment(order=first).save()

    world.check_reference(world.raw(Shipment, shipment)["order"], first, dbref=dbref)
    loaded = Shipment.objects.get(id=shipment.id)
    assert loaded.order == first
    assert loaded.order.name == "a"
    assert type(loaded.order.id) is type(first.id)

    # Not dereferenced: a DBRef holding the key, written back as it was stored.
    plain = Shipment.objects.no_dereference().get(id=shipment.id)
    ref = plain._data["order"]
    assert isinstance(ref, DBRef)
    assert ref.id == first.id  # a StoredUUID (UUID keys): equal to the key, and hashes as it
    assert hash(ref.id) == hash(first.id)
    again = Shipment(order=ref).save()
    world.check_reference(world.raw(Shipment, again)["order"], first, dbref=dbref)
    assert Shipment.objects.get(id=again.id).order.name == "a"


def test_to_dbref_holds_the_key_in_stored_form(world: World) -> None:
    Order = world.order()
    first = Order(name="a").save()
    ref = first.to_dbref()
    assert ref == DBRef(Order._get_collection_name(), first.id)
    assert bson.encode({"r": ref}) == bson.encode(
        {"r": DBRef(Order._get_collection_name(), world.key.stored(first.id))}
    )
    Shipment = world.model("Shipment", order=me.ReferenceField(Order))
    shipment = Shipment(order=ref).save()
    world.key.check_stored(world.raw(Shipment, shipment)["order"], first.id)
    assert Shipment.objects.get(id=shipment.id).order.name == "a"


# -- lists and dicts of references ---------------------------------------------------------


@pytest.mark.parametrize("dbref", [False, True], ids=["id", "dbref"])
def test_a_query_of_one_key_of_a_dict_of_references(world: World, dbref: bool) -> None:
    """Review AQ: ``by_code__x=order.id`` sent the key as given (a uuid.UUID), which matches
    no stored form on mongomock, nor text: it found nothing."""
    Order = world.order()
    Shipment = world.model(
        "Shipment",
        name=me.StringField(),
        by_code=me.DictField(me.ReferenceField(Order, dbref=dbref)),
        by_name=me.MapField(me.ReferenceField(Order, dbref=dbref)),
    )
    a, b = Order(name="a").save(), Order(name="b").save()
    Shipment(name="first", by_code={"x": a}, by_name={"x": a}).save()
    Shipment(name="second", by_code={"x": b}, by_name={"y": a}).save()
    # The document, or its key as text, only where the key's stored form differs (a UUID):
    # MongoEngine sends any other as given, for an ObjectId key as for these.
    uuid_key = world.key.value_type is not None
    if dbref and not uuid_key:
        pytest.skip("MongoEngine sends such a key as given: no DBRef matches it (as an ObjectId)")
    for name in ("by_code", "by_name"):
        for given in (a, a.id, str(a.id)) if uuid_key else (a.id,):
            assert names(Shipment.objects(**{f"{name}__x": given})) == ["first"], (name, given)
        assert names(Shipment.objects(**{f"{name}__x__in": [a.id, b.id]})) == (
            ["first", "second"] if name == "by_code" else ["first"]
        )
        assert names(Shipment.objects(**{f"{name}__x__ne": a.id})) == ["second"]
    assert names(Shipment.objects(by_name__y=a if uuid_key else a.id)) == ["second"]


@pytest.mark.parametrize("dbref", [False, True], ids=["id", "dbref"])
def test_list_and_dict_of_references(world: World, dbref: bool) -> None:
    Order = world.order()
    Shipment = world.model(
        "Shipment",
        orders=me.ListField(me.ReferenceField(Order, dbref=dbref)),
        by_code=me.DictField(me.ReferenceField(Order, dbref=dbref)),
    )
    a, b, gone = Order(name="a").save(), Order(name="b").save(), Order(name="gone").save()
    shipment = Shipment(orders=[a, b, gone], by_code={"x": a, "y": b}).save()
    gone_id = gone.id
    gone.delete()

    raw = world.raw(Shipment, shipment)
    for stored, target in zip(raw["orders"][:2], [a, b], strict=True):
        world.check_reference(stored, target, dbref=dbref)
    for code, target in (("x", a), ("y", b)):
        world.check_reference(raw["by_code"][code], target, dbref=dbref)

    # Read lazily, without select_related(): one $in loads the documents of each field.
    loaded = Shipment.objects.get(id=shipment.id)
    assert names(loaded.orders[:2]) == ["a", "b"]
    assert [type(order.id) for order in loaded.orders[:2]] == [type(a.id)] * 2
    assert {code: order.name for code, order in loaded.by_code.items()} == {"x": "a", "y": "b"}
    missing = loaded.orders[2]  # a document deleted since: MongoEngine leaves its DBRef
    assert isinstance(missing, DBRef)
    assert missing.id == gone_id
    assert hash(missing.id) == hash(gone_id)

    # Written back as loaded, every reference is stored as it was.
    loaded.orders[0] = b
    loaded.save()
    raw = world.raw(Shipment, shipment)
    for stored, target in zip(raw["orders"][:2], [b, b], strict=True):
        world.check_reference(stored, target, dbref=dbref)
    world.key.check_stored(raw["orders"][2].id if dbref else raw["orders"][2], gone_id)
    assert Shipment.objects(orders=b).count() == 1
    assert Shipment.objects(orders=a).count() == 0

    (related,) = Shipment.objects.select_related()
    assert names(related.orders[:2]) == ["b", "b"]
    assert {code: order.name for code, order in related.by_code.items()} == {"x": "a", "y": "b"}
    assert [type(order.id) for order in related.orders[:2]] == [type(a.id)] * 2


def test_unloaded_references_are_written_back_in_stored_form(world: World) -> None:
    Order = world.order()
    Shipment = world.model(
        "Shipment",
        orders=me.ListField(me.ReferenceField(Order)),
        copies=me.ListField(me.ReferenceField(Order, dbref=True)),
    )
    a, b, c = (Order(name=name).save() for name in "abc")
    shipment = Shipment(orders=[a, b], copies=[a]).save()

    plain = Shipment.objects.no_dereference().get(id=shipment.id)
    plain.orders.append(c)
    plain.copies.append(c)
    plain.save()
    raw = world.raw(Shipment, shipment)
    for stored, target in zip(raw["orders"], [a, b, c], strict=True):
        world.check_reference(stored, target, dbref=False)
    for stored, target in zip(raw["copies"], [a, c], strict=True):
        world.check_reference(stored, target, dbref=True)
    assert names(Shipment.objects.get(id=shipment.id).orders) == ["a", "b", "c"]


# -- GenericReferenceField ------------------------------------------------------------------


def _generic_shipment(world: World) -> tuple[Any, Any, Any, Any]:
    """A shipment referring to orders a and b by ``GenericReferenceField``s: ``anything`` to
    a, ``several`` to both; returns (Shipment, shipment, a, b)."""
    Order = world.order()
    Shipment = world.model(
        "Shipment",
        anything=me.GenericReferenceField(),
        several=me.ListField(me.GenericReferenceField()),
    )
    a, b = Order(name="a").save(), Order(name="b").save()
    return Shipment, Shipment(anything=a, several=[a, b]).save(), a, b


def test_generic_reference_field(world: World) -> None:
    Shipment, shipment, a, b = _generic_shipment(world)

    raw = world.raw(Shipment, shipment)
    for stored, target in [(raw["anything"], a), *zip(raw["several"], [a, b], strict=True)]:
        world.check_generic_reference(stored, target)

    loaded = Shipment.objects.get(id=shipment.id)
    assert loaded.anything == a
    assert loaded.anything.name == "a"
    assert names(loaded.several) == ["a", "b"]
    assert Shipment.objects(anything=a).count() == 1
    assert Shipment.objects(several=b).count() == 1
    assert Shipment.objects(anything=b).count() == 0


def test_a_dbref_made_by_hand_in_a_generic_reference(world: World) -> None:
    """Found by a probe: a ``DBRef(collection, pk)`` made by hand was sent with the key as given
    (a uuid.UUID): a query by it matched nothing, a save could not encode it. As for an ObjectId
    key, the query finds the documents, and the save stores the DBRef (MongoEngine stores a
    DBRef given by hand as it is, without the class)."""
    Order = world.order()
    Holder = world.model(
        "Holder", anything=me.GenericReferenceField(), lazy=me.GenericLazyReferenceField()
    )
    a, b = Order(name="a").save(), Order(name="b").save()
    Holder(anything=a, lazy=a).save()
    by_hand = DBRef(Order._get_collection_name(), a.pk)
    assert Holder.objects(anything=by_hand).count() == 1
    assert Holder.objects(lazy=by_hand).count() == 1
    assert Holder.objects(anything=DBRef(Order._get_collection_name(), b.pk)).count() == 0
    saved = Holder(anything=by_hand, lazy=by_hand).save()
    raw = world.raw(Holder, saved)
    world.check_reference(raw["anything"], a, dbref=True)
    world.check_reference(raw["lazy"], a, dbref=True)
    world.check_sent()


def test_a_reference_made_by_hand_to_a_collection_two_models_share(world: World) -> None:
    """Found by probe AN: with two models keyed alike in one collection (an import beside the
    model), a DBRef made by hand was sent with the key as given (the model was not known), and
    a ``LazyReference`` in a generic reference always was: queries matched nothing, a save
    could not encode the key. As with ObjectId keys, both find the document."""
    Order = world.order()
    meta = {"collection": Order._get_collection_name()}
    Imported = type(
        f"Imported{next(_numbers)}",
        (me.Document,),
        {"meta": meta, "id": world.key.make(primary_key=True), "name": me.StringField()},
    )
    Holder = world.model("Holder", anything=me.GenericReferenceField())
    a, b = Order(name="a").save(), Imported(name="b").save()
    Holder(anything=a).save()
    by_hand = DBRef(Order._get_collection_name(), a.pk)
    assert Holder.objects(anything=by_hand).count() == 1
    assert Holder.objects(anything=LazyReference(Order, a.pk)).count() == 1
    assert Holder.objects(anything=LazyReference(Imported, b.pk)).count() == 0
    saved = Holder(anything=by_hand).save()
    world.check_reference(world.raw(Holder, saved)["anything"], a, dbref=True)
    world.check_sent()


def test_documents_in_untyped_lists_and_dicts(world: World) -> None:
    """Found by probe AN: MongoEngine turns a document in a ``ListField()`` or ``DictField()``
    into ``DBRef(collection, pk)`` with the key as the document holds it, which the driver
    could not encode (or encoded as subtype 3 under ``pythonLegacy``: never found). As with an
    ObjectId key, the reference is stored and read back."""
    Order = world.order()
    Holder = world.model("Holder", things=me.ListField(), by_name=me.DictField())
    a, b = Order(name="a").save(), Order(name="b").save()
    saved = Holder(things=[a, b], by_name={"x": a}).save()
    raw = world.raw(Holder, saved)
    for stored, target in [*zip(raw["things"], [a, b], strict=True), (raw["by_name"]["x"], a)]:
        world.check_reference(stored, target, dbref=True)
    loaded = Holder.objects.get(id=saved.id)
    assert names(loaded.things) == ["a", "b"]
    assert loaded.by_name["x"].name == "a"
    # Read back as a server's driver hands it: BSON decoded (mongomock keeps the objects sent,
    # whose class made them match the documents; review BF: on a server, the references stayed
    # DBRefs for a key stored as text or under the legacy representations).
    if TEST_URI is None:  # a server's reads are decoded so already
        collection = Holder._get_collection()
        options = CodecOptions(uuid_representation=collection.codec_options.uuid_representation)
        stored = collection.find_one()
        again = bson.decode(bson.encode(stored, codec_options=options), options)
        collection.replace_one({}, again)
    loaded = Holder.objects.get(id=saved.id)
    assert names(loaded.things) == ["a", "b"]
    assert loaded.by_name["x"].name == "a"
    world.check_sent()


@pytest.mark.parametrize("options", [None, "RELAXED", "CANONICAL"])
def test_a_document_in_a_dynamic_field_is_read_back_also_from_json(
    world: World, options: str | None
) -> None:
    """Probe BL-1: ``from_json()`` decodes the key in the stored ``{"_cls", "_ref": DBRef}`` to a
    ``uuid.UUID``, which ``DynamicField`` dereferenced as given: no document matched it, and
    ``from_json()`` raised."""
    Order = world.order()
    Holder = world.model("Holder", thing=me.DynamicField())
    a = Order(name="a").save()
    saved = Holder(thing=a).save()
    raw = world.raw(Holder, saved)
    assert raw["thing"]["_cls"] == Order._class_name
    world.check_reference(raw["thing"]["_ref"], a, dbref=True)
    loaded = Holder.objects.get(id=saved.id)
    assert loaded.thing.name == "a"
    if options is None:  # as MongoEngine's own docs call them
        with pytest.warns(DeprecationWarning, match="json_options"):
            again = Holder.from_json(loaded.to_json())
    else:
        json_options = getattr(json_util, f"{options}_JSON_OPTIONS")
        again = Holder.from_json(
            loaded.to_json(json_options=json_options), json_options=json_options
        )
    assert again.thing.name == "a"
    assert again.thing.pk == a.pk
    world.check_sent()


def test_an_untyped_reference_to_a_text_key_stays_text(mongoengine_connect: Any) -> None:
    """Review Q: read back, a DBRef's id was re-keyed by any UUID-keyed model of the package
    whose collection has that name (here in another database): the text key of a plain model
    became a Binary UUID, stored so at the next save, and no document was found by it."""
    db = mongoengine_connect()
    mongoengine_connect("elsewhere")

    class SameName(me.Document):  # the class MongoEngine finds by the DBRef's collection
        id = me.StringField(primary_key=True)
        meta = {"collection": "same_name"}

    class UUIDKeyed(me.Document):
        id = UUID4Field(primary_key=True)
        meta = {"collection": "same_name", "db_alias": "elsewhere"}

    class Holder(me.Document):
        things = me.ListField()
        meta = {"collection": "text_holder"}

    key = str(uuid.uuid4())
    target = SameName(id=key).save()
    UUIDKeyed().save()
    Holder(things=[target]).save()
    loaded = Holder.objects.get()
    assert [type(thing) for thing in loaded.things] == [SameName]
    loaded.things.append(target)
    loaded.save()
    stored = [
        thing["_ref"] if isinstance(thing, dict) else thing  # (MongoEngine's two forms)
        for thing in db.text_holder.find_one()["things"]
    ]
    assert [(ref.collection, ref.id) for ref in stored] == [("same_name", key)] * 2
    assert [type(ref.id) for ref in stored] == [str, str]


def test_keys_held_by_references_order_as_the_documents_keys(world: World) -> None:
    """Found by probe AN: a ``LazyReference.pk`` (a ``StoredUUID``) could not be ordered
    against a document's key (``sorted()``, ``max()`` raised TypeError)."""
    Order = world.order()
    Holder = world.model("Holder", lazy=me.LazyReferenceField(Order))
    orders = [Order(name=name).save() for name in "abc"]
    for order in orders:
        Holder(lazy=order).save()
    held = [holder.lazy.pk for holder in Holder.objects]
    keys = [order.pk for order in orders]
    for mixed in ([held[0], keys[1], held[2]], [keys[0], held[1], keys[2]]):
        assert sorted(mixed) == sorted(keys)
        assert max(mixed) == max(keys)
        assert min(mixed) == min(keys)
    assert sorted(held) == sorted(keys)


def test_a_generic_reference_read_without_dereferencing_holds_the_key(world: World) -> None:
    """Its DBRef equals the document, as ``ReferenceField``'s does (found by review AE: on
    mongomock it held the stored Binary, equal to nothing); dereferenced later, it loads."""
    Shipment, _, a, b = _generic_shipment(world)
    loaded = Shipment.objects.no_dereference().get()
    refs = [loaded.anything["_ref"], *(item["_ref"] for item in loaded.several)]
    assert [ref.id for ref in refs] == [a.id, a.id, b.id]
    assert refs == [a.to_dbref(), a.to_dbref(), b.to_dbref()]
    assert a == refs[0]
    again = Shipment.objects.get()
    assert (again.anything, again.several) == (a, [a, b])
    assert names([again.anything, *again.several]) == ["a", "a", "b"]


# -- LazyReferenceField -----------------------------------------------------------------------


@pytest.mark.parametrize("dbref", [False, True], ids=["id", "dbref"])
def test_lazy_reference_field(world: World, dbref: bool) -> None:
    Order = world.order()
    Shipment = world.model(
        "Shipment",
        order=me.LazyReferenceField(Order, dbref=dbref),
        orders=me.ListField(me.LazyReferenceField(Order, dbref=dbref)),
    )
    a, b = Order(name="a").save(), Order(name="b").save()
    shipment = Shipment(order=a, orders=[a, b]).save()

    raw = world.raw(Shipment, shipment)
    world.check_reference(raw["order"], a, dbref=dbref)
    for stored, target in zip(raw["orders"], [a, b], strict=True):
        world.check_reference(stored, target, dbref=dbref)

    loaded = Shipment.objects.get(id=shipment.id)
    assert loaded.order.pk == a.id  # a StoredUUID (UUID keys), stored as an id or a DBRef
    assert [ref.pk for ref in loaded.orders] == [a.id, b.id]
    assert loaded.order.fetch().name == "a"
    assert type(loaded.order.fetch().id) is type(a.id)
    assert [ref.fetch().name for ref in loaded.orders] == ["a", "b"]
    assert Shipment.objects(order=a).count() == 1
    assert Shipment.objects(orders=b).count() == 1


def test_generic_lazy_reference_field(world: World) -> None:
    Order = world.order()
    Shipment = world.model(
        "Shipment",
        order=me.GenericLazyReferenceField(),
        orders=me.ListField(me.GenericLazyReferenceField()),
    )
    a, b = Order(name="a").save(), Order(name="b").save()
    shipment = Shipment(order=a, orders=[a, b]).save()

    raw = world.raw(Shipment, shipment)
    for stored, target in [(raw["order"], a), *zip(raw["orders"], [a, b], strict=True)]:
        world.check_generic_reference(stored, target)
    loaded = Shipment.objects.get(id=shipment.id)
    assert isinstance(loaded.order, LazyReference)
    assert loaded.order.pk == a.id  # a StoredUUID (UUID keys), as a LazyReferenceField's
    assert hash(loaded.order.pk) == hash(a.id)
    assert loaded.order.fetch().name == "a"
    assert [ref.pk for ref in loaded.orders] == [a.id, b.id]
    assert [ref.fetch().name for ref in loaded.orders] == ["a", "b"]
    assert Shipment.objects(order=a).count() == 1
    assert Shipment.objects(order=loaded.order).count() == 1

    loaded.orders.append(loaded.order)  # written back as loaded
    loaded.save()
    raw = world.raw(Shipment, shipment)
    for stored, target in zip(raw["orders"], [a, b, a], strict=True):
        world.check_reference(stored["_ref"], target, dbref=True)


def test_generic_lazy_reference_field_read_before_save(world: World) -> None:
    """Read back before save(), the field holds a LazyReference to the document's ``pk``:
    written, and queried by, with the key in stored form."""
    Order = world.order()
    Shipment = world.model("Shipment", order=me.GenericLazyReferenceField())
    a, b = Order(name="a").save(), Order(name="b").save()
    shipment = Shipment(order=a)
    held = shipment.order
    assert isinstance(held, LazyReference)
    assert held.pk == a.id
    shipment.save()
    by_hand = Shipment(order=LazyReference(Order, b.id)).save()  # a LazyReference made by hand

    for document, target in ((shipment, a), (by_hand, b)):
        stored = world.raw(Shipment, document)["order"]
        world.check_generic_reference(stored, target)
    assert Shipment.objects(order=held).count() == 1
    assert Shipment.objects(order=LazyReference(Order, b.id)).get().id == by_hand.id
    assert Shipment.objects(order=a).get().id == shipment.id
    loaded = Shipment.objects.get(id=shipment.id)
    assert loaded.order.fetch().name == "a"


# -- CachedReferenceField ---------------------------------------------------------------------


def test_cached_reference_field(world: World) -> None:
    Order = world.order()
    Shipment = world.model("Shipment", order=me.CachedReferenceField(Order, fields=["name"]))
    a = Order(name="a").save()
    shipment = Shipment(order=a).save()

    stored = world.raw(Shipment, shipment)["order"]
    assert set(stored) == {"_id", "name"}
    world.key.check_stored(stored["_id"], a.id)
    assert stored["name"] == "a"

    loaded = Shipment.objects.get(id=shipment.id)
    assert loaded.order == a
    assert type(loaded.order.id) is type(a.id)
    assert Shipment.objects(order__id=a.id).count() == 1
    assert Shipment.objects(order__id=str(a.id)).count() == 1


def test_cached_reference_field_by_document(world: World) -> None:
    """A query by the document, ``auto_sync`` (the same query, after the referenced document is
    saved) and ``sync_all()`` (the same query, and ``set__order=document``) send the key in
    stored form."""
    Order = world.order()
    Shipment = world.model("Shipment", order=me.CachedReferenceField(Order, fields=["name"]))
    a, b = Order(name="a").save(), Order(name="b").save()
    first, second = Shipment(order=a).save(), Shipment(order=b).save()

    assert Shipment.objects(order=a).get().id == first.id
    assert Shipment.objects(order__ne=a).get().id == second.id
    assert Shipment.objects(order=b).count() == 1

    a.name = "renamed"
    a.save()  # auto_sync: updates the cached copies of a, and of a only
    assert world.raw(Shipment, first)["order"]["name"] == "renamed"
    assert world.raw(Shipment, second)["order"]["name"] == "b"
    assert Shipment.objects.get(id=first.id).order.name == "renamed"

    Order.objects(id=b.id).update(set__name="b2")  # no signal: the copy is stale
    assert world.raw(Shipment, second)["order"]["name"] == "b"
    Shipment._fields["order"].sync_all()
    for document, target, name in ((first, a, "renamed"), (second, b, "b2")):
        stored = world.raw(Shipment, document)["order"]
        assert set(stored) == {"_id", "name"}
        world.key.check_stored(stored["_id"], target.id)
        assert stored["name"] == name
    assert Shipment.objects(order=b).get().order.name == "b2"


def test_cached_values_of_the_packages_fields_are_sent_in_stored_form(world: World) -> None:
    """MongoEngine's update of a cached copy (``sync_all()``, ``set__order=document``) copies
    the referenced document's attribute values: those of UUID fields of the package are sent as
    they are stored (Binary subtype 4, or text), as ``save()`` stores them."""
    Order = world.model(
        "Order",
        id=world.key.make(primary_key=True),
        name=me.StringField(),
        tag=UUID4Field(),
        stamp=UUID7Field(as_string=True),
        tags=me.ListField(UUID4Field()),
    )
    cached = me.CachedReferenceField(Order, fields=["name", "tag", "stamp", "tags"])
    Shipment = world.model("Shipment", order=cached)
    a = Order(name="a", tags=[uuid.uuid4(), uuid.uuid4()]).save()
    first, second = Shipment(order=a).save(), Shipment().save()

    def check(document: me.Document, name: str) -> None:
        stored = world.raw(Shipment, document)["order"]
        assert set(stored) == {"_id", "name", "tag", "stamp", "tags"}
        world.key.check_stored(stored["_id"], a.id)
        assert stored["name"] == name
        assert stored["tag"] == Binary(a.tag.bytes, 4)
        assert type(stored["tag"]) is Binary
        assert stored["stamp"] == str(a.stamp)
        assert stored["tags"] == [Binary(tag.bytes, 4) for tag in a.tags]

    check(first, "a")
    Order.objects(id=a.id).update(set__name="a2")  # no signal: the copy is stale
    Shipment._fields["order"].sync_all()
    check(first, "a2")
    Shipment.objects(id=second.id).update(set__order=a.reload())
    check(second, "a2")


def test_a_path_to_one_key_of_a_map_of_the_packages_values(world: World) -> None:
    """``set__codes__x=`` and ``codes__x=`` reach MongoEngine's map field, which sent the value
    as given (a ``uuid.UUID``): the package's field prepares it, in stored form."""
    Box = world.model("Box", codes=me.MapField(UUID4Field()), stamps=me.MapField(UUID7Field()))
    first, second = uuid.uuid4(), uuid.uuid4()
    box = Box(codes={"a": first}).save()
    Box.objects(id=box.id).update_one(set__codes__b=second)
    stored = world.raw(Box, box)["codes"]
    assert stored == {"a": Binary(first.bytes, 4), "b": Binary(second.bytes, 4)}
    assert Box.objects(codes__b=second).get().id == box.id
    assert Box.objects(codes__a=second).count() == 0
    assert Box.objects.get(id=box.id).codes == {"a": first, "b": second}
    with pytest.raises(me.ValidationError, match="version 7"):
        Box.objects(id=box.id).update_one(set__stamps__x=first)  # a version 4 UUID


# -- select_related(), reload() -------------------------------------------------------------


def _every_kind(Order: type[me.Document]) -> dict[str, Any]:
    return {
        "order": me.ReferenceField(Order),
        "copy": me.ReferenceField(Order, dbref=True),
        "orders": me.ListField(me.ReferenceField(Order)),
        "copies": me.ListField(me.ReferenceField(Order, dbref=True)),
        "by_code": me.DictField(me.ReferenceField(Order)),
        "anything": me.GenericReferenceField(),
    }


def _check_every_kind(shipment: me.Document, a: me.Document, b: me.Document) -> None:
    data = shipment._data  # what is attached now, before any lazy load
    assert isinstance(data["order"], type(a))
    assert data["order"].name == "a"
    assert isinstance(data["copy"], type(a))
    assert data["copy"].name == "b"
    assert names(data["orders"]) == ["a", "b"]
    assert names(data["copies"]) == ["b", "a"]
    assert {code: order.name for code, order in data["by_code"].items()} == {"x": "a"}
    assert shipment.anything.name == "b"
    assert type(data["order"].id) is type(a.id)


def test_select_related(world: World) -> None:
    Order = world.order()
    Shipment = world.model("Shipment", name=me.StringField(), **_every_kind(Order))
    a, b = Order(name="a").save(), Order(name="b").save()
    Shipment(
        name="s", order=a, copy=b, orders=[a, b], copies=[b, a], by_code={"x": a}, anything=b
    ).save()

    (shipment,) = Shipment.objects.select_related()
    _check_every_kind(shipment, a, b)


def test_reload(world: World) -> None:
    Order = world.order()
    Shipment = world.model("Shipment", name=me.StringField(), **_every_kind(Order))
    a, b = Order(name="a").save(), Order(name="b").save()
    shipment = Shipment(
        name="s", order=a, copy=b, orders=[a, b], copies=[b, a], by_code={"x": a}, anything=b
    ).save()

    shipment.reload()
    _check_every_kind(shipment, a, b)
    loaded = Shipment.objects.get(id=shipment.id)
    loaded.reload("order", "copies")
    assert loaded.order.name == "a"
    assert names(loaded.copies) == ["b", "a"]


@pytest.mark.parametrize("dbref", [False, True], ids=["id", "dbref"])
def test_reverse_delete_rules(world: World, dbref: bool) -> None:
    """Deleting a document applies the delete rules of the references to it: MongoEngine finds
    the referring documents by a query on the deleted ones (``order__in=``), then deletes them
    (CASCADE), unsets the reference (NULLIFY), pulls it from a list (PULL) or refuses (DENY)."""
    Order = world.order()
    Shipment = world.model(
        "Shipment",
        name=me.StringField(),
        order=me.ReferenceField(Order, reverse_delete_rule=me.CASCADE, dbref=dbref),
    )
    Invoice = world.model(
        "Invoice",
        name=me.StringField(),
        order=me.ReferenceField(Order, reverse_delete_rule=me.NULLIFY, dbref=dbref),
        orders=me.ListField(me.ReferenceField(Order, reverse_delete_rule=me.PULL, dbref=dbref)),
    )
    Claim = world.model(
        "Claim", order=me.ReferenceField(Order, reverse_delete_rule=me.DENY, dbref=dbref)
    )
    a, b = Order(name="a").save(), Order(name="b").save()
    Shipment(name="of a", order=a).save()
    kept = Shipment(name="of b", order=b).save()
    invoice = Invoice(name="i", order=a, orders=[a, b, a]).save()

    a.delete()

    assert [raw["name"] for raw in Shipment._get_collection().find()] == ["of b"]
    world.check_reference(world.raw(Shipment, kept)["order"], b, dbref=dbref)
    stored = world.raw(Invoice, invoice)
    assert "order" not in stored
    assert len(stored["orders"]) == 1
    world.check_reference(stored["orders"][0], b, dbref=dbref)
    assert names(Invoice.objects.get(id=invoice.id).orders) == ["b"]

    Claim(order=b).save()
    with pytest.raises(me.OperationError, match="Could not delete document"):
        b.delete()
    assert [raw["name"] for raw in Order._get_collection().find()] == ["b"]


# -- in_bulk(), distinct() --------------------------------------------------------------------


def test_in_bulk_takes_every_form_of_the_key_and_keys_the_result_as_given(world: World) -> None:
    Order = world.order()
    a, b, gone = (Order(name=name).save() for name in ("a", "b", "gone"))
    gone.delete()

    found = Order.objects.in_bulk([a.id, b.id, gone.id])
    assert {key: order.name for key, order in found.items()} == {a.id: "a", b.id: "b"}
    assert [type(key) for key in found] == [type(a.id)] * 2
    assert [type(order.id) for order in found.values()] == [type(a.id)] * 2

    for given in (str(a.id), world.key.stored(a.id)):
        found = Order.objects.in_bulk([given])
        assert list(found) == [given]
        assert type(next(iter(found))) is type(given)
        assert found[given].name == "a"
    assert Order.objects.in_bulk([]) == {}


@pytest.mark.parametrize("dbref", [False, True], ids=["id", "dbref"])
def test_distinct_returns_the_fields_values(world: World, dbref: bool) -> None:
    Order = world.order()
    Shipment = world.model(
        "Shipment",
        order=me.ReferenceField(Order, dbref=dbref),
        orders=me.ListField(me.ReferenceField(Order, dbref=dbref)),
    )
    a, b = Order(name="a").save(), Order(name="b").save()
    Shipment(order=a, orders=[a, b]).save()
    Shipment(order=a, orders=[b]).save()

    Tagged = world.model("Tagged", code=world.key.make())  # not the key
    tagged = Tagged().save()
    assert Tagged.objects.distinct("code") == [tagged.code]
    assert type(Tagged.objects.distinct("code")[0]) is type(tagged.code)

    ids = Order.objects.distinct("id")
    assert sorted(ids, key=str) == sorted([a.id, b.id], key=str)
    assert [type(value) for value in ids] == [type(a.id)] * 2
    assert sorted(Order.objects.distinct("pk"), key=str) == sorted(ids, key=str)
    by_stored_name = Order.objects.distinct("_id")  # raw Binary or text before (review AQ)
    assert sorted(by_stored_name, key=str) == sorted(ids, key=str)
    assert [type(value) for value in by_stored_name] == [type(a.id)] * 2
    assert sorted(Order.objects.distinct("name")) == ["a", "b"]
    assert Shipment.objects.distinct("order") == [a]
    (order,) = Shipment.objects.distinct("order")
    assert isinstance(order, Order)
    assert (order.name, type(order.id)) == ("a", type(a.id))
    orders = Shipment.objects.distinct("orders")
    assert all(isinstance(order, Order) for order in orders), orders
    assert sorted(names(orders)) == ["a", "b"]


@pytest.mark.parametrize("dbref", [False, True], ids=["id", "dbref"])
def test_distinct_of_lazy_references_gives_keys_equal_to_the_documents(
    world: World, dbref: bool
) -> None:
    """As for an ObjectId key, the values equal the documents' keys (found by review AE: the
    stored Binary or text of a UUID key, equal to nothing)."""
    Order = world.order()
    Lazy = world.model(
        "Lazy",
        order=me.LazyReferenceField(Order, dbref=dbref),
        orders=me.ListField(me.LazyReferenceField(Order, dbref=dbref)),
    )
    if dbref and world.key.value_type is None:
        pytest.skip("MongoEngine's own distinct() of a LazyReferenceField(dbref=True) fails")
    a, b = Order(name="a").save(), Order(name="b").save()
    Lazy(order=a, orders=[a, b]).save()
    Lazy(order=b, orders=[b]).save()
    for path in ("order", "orders"):
        found = Lazy.objects.distinct(path)
        keys = [value.id if isinstance(value, DBRef) else value for value in found]
        assert sorted(keys, key=str) == sorted([a.id, b.id], key=str)
        assert a.id in keys
        assert b.id in keys
        if dbref:
            assert {value.collection for value in found} == {Order._get_collection_name()}


def test_distinct_of_a_list_or_map_of_the_packages_values(world: World) -> None:
    """As for the field itself: the field's values, not the stored Binary or text (found by a
    probe)."""
    Tagged = world.model(
        "Tagged",
        tags=me.ListField(UUID4Field()),
        places=me.ListField(LocalityUUIDField(as_string=True)),
        codes=me.MapField(UUID7Field(as_string=True)),
    )
    tags = [uuid.uuid4(), uuid.uuid4()]
    place = LocalityUUID("12345678-1234-b234-8234-123456789abc")
    code = UUID7Generator().generate()
    Tagged(tags=tags, places=[place], codes={"a": code}).save()
    Tagged(tags=tags[1:], places=[place], codes={"a": code}).save()
    found = Tagged.objects.distinct("tags")
    assert sorted(found, key=str) == sorted(tags, key=str)
    assert {type(tag) for tag in found} == {uuid.UUID}
    assert sorted(Tagged.objects.distinct("tags.0"), key=str) == sorted(tags, key=str)
    assert Tagged.objects.distinct("places") == [place]
    assert type(Tagged.objects.distinct("places")[0]) is LocalityUUID
    assert Tagged.objects.distinct("codes.a") == [code]
    assert type(Tagged.objects.distinct("codes.a")[0]) is uuid.UUID


@pytest.mark.parametrize("dbref", [False, True], ids=["id", "dbref"])
def test_distinct_of_references_inside_embedded_documents_and_maps(
    world: World, dbref: bool
) -> None:
    """MongoEngine loads no document for such a path and returns the stored keys: equal to the
    documents' keys, as an ObjectId key's are (found by a probe: a UUID key's Binary or text)."""
    Order = world.order()
    Box = type(
        f"Box{next(_numbers)}",
        (me.EmbeddedDocument,),
        {"r": me.ReferenceField(Order, dbref=dbref), "lz": me.LazyReferenceField(Order)},
    )
    Holder = world.model(
        "Holder",
        box=me.EmbeddedDocumentField(Box),
        boxes=me.ListField(me.EmbeddedDocumentField(Box)),
        by_code=me.MapField(me.ReferenceField(Order, dbref=dbref)),
    )
    a, b = Order(name="a").save(), Order(name="b").save()
    Holder(box=Box(r=a, lz=a), boxes=[Box(r=a), Box(r=b)], by_code={"x": b}).save()
    paths = {"box.r": [a], "boxes.r": [a, b], "by_code.x": [b], "box.lz": [a]}
    for path, expected in paths.items():
        found = Holder.objects.distinct(path)
        if dbref and path != "box.lz":  # MongoEngine loads the documents of DBRefs
            assert all(isinstance(value, Order) for value in found), (path, found)
            assert sorted(names(found)) == names(expected), path
            continue
        assert sorted(found, key=str) == sorted((d.id for d in expected), key=str), path
        assert {hash(key) for key in found} == {hash(d.id) for d in expected}, path


@pytest.mark.parametrize("dbref", [False, True], ids=["id", "dbref"])
def test_distinct_by_stored_names_and_of_dicts_of_references(world: World, dbref: bool) -> None:
    """Found by a probe: MongoEngine's distinct() passes a path of stored names (``db_field``),
    which was not resolved: a UUID key's Binary or text came back, equal to no key (as for an
    ObjectId key, the keys, or with DBRefs the documents, are expected); and the DBRefs of a
    dict of references were not loaded."""
    Order = world.order()
    Box = type(
        f"Box{next(_numbers)}",
        (me.EmbeddedDocument,),
        {
            "r": me.ReferenceField(Order, dbref=dbref, db_field="rr"),
            "label": me.StringField(db_field="x"),
        },
    )
    Holder = world.model(
        "Holder",
        order=me.ReferenceField(Order, dbref=dbref, db_field="o"),
        orders=me.ListField(me.ReferenceField(Order, dbref=dbref), db_field="os"),
        box=me.EmbeddedDocumentField(Box, db_field="bx"),
        boxes=me.ListField(me.EmbeddedDocumentField(Box), db_field="bs"),
        by_place=me.MapField(me.EmbeddedDocumentField(Box)),
        lazy=me.LazyReferenceField(Order, db_field="lz"),
        by_code=me.DictField(field=me.ReferenceField(Order, dbref=dbref)),
    )
    a, b = Order(name="a").save(), Order(name="b").save()
    Holder(
        order=a,
        orders=[b],
        box=Box(r=a),
        boxes=[Box(r=b)],
        by_place={"x": Box(r=a)},  # a key that is also the stored name of a field of Box
        lazy=b,
        by_code={"x": b},
    ).save()
    paths = {"order": a, "orders": b, "box.r": a, "boxes.r": b, "boxes.0.r": b, "by_place.x.r": a}
    for path, expected in paths.items():
        (found,) = Holder.objects.distinct(path)
        if dbref:  # MongoEngine loads the documents of DBRefs
            assert isinstance(found, Order), (path, found)
            assert found.name == expected.name, path
        else:
            assert found == expected.id, (path, found)
            assert hash(found) == hash(expected.id), path
    assert Holder.objects.distinct("lazy") == [b.id]
    ((name, loaded),) = Holder.objects.distinct("by_code")[0].items()
    assert (name, type(loaded), loaded.name) == ("x", Order, "b")


# -- queries ------------------------------------------------------------------------------------


def shipments(world: World, Order: type[me.Document], dbref: bool) -> type[me.Document]:
    """A model with a name, a reference to an ``Order`` and a list of them."""
    return world.model(
        "Shipment",
        name=me.StringField(),
        order=me.ReferenceField(Order, dbref=dbref),
        orders=me.ListField(me.ReferenceField(Order, dbref=dbref)),
    )


@pytest.mark.parametrize("dbref", [False, True], ids=["id", "dbref"])
def test_queries_by_the_document_its_id_and_its_text(world: World, dbref: bool) -> None:
    Order = world.order()
    Shipment = shipments(world, Order, dbref)
    a, b, c = (Order(name=name).save() for name in "abc")
    Shipment(name="s1", order=a, orders=[a, b]).save()
    Shipment(name="s2", order=b, orders=[c]).save()
    as_stored = Shipment.objects.no_dereference().get(name="s1")._data["order"]

    def found(**query: Any) -> list[str]:
        return sorted(names(Shipment.objects(**query)))

    for probe in (a, a.id, str(a.id), world.key.stored(a.id), a.to_dbref(), as_stored):
        assert found(order=probe) == ["s1"], probe
    assert found(order__in=[a, b.id]) == ["s1", "s2"]
    assert found(order__in=[str(b.id), c]) == ["s2"]
    assert found(order__ne=a) == ["s2"]
    assert found(order__nin=[a.id]) == ["s2"]
    assert found(orders=b) == ["s1"]
    assert found(orders=str(c.id)) == ["s2"]
    assert found(orders__in=[b.id, c]) == ["s1", "s2"]
    assert found(orders__all=[a, b.id]) == ["s1"]
    assert Order.objects(id=str(a.id)).get() == a
    by_id = Order.objects(id__in=[a.id, str(b.id), world.key.stored(c.id)])
    assert sorted(names(by_id)) == ["a", "b", "c"]


@pytest.mark.parametrize("dbref", [False, True], ids=["id", "dbref"])
def test_a_reference_made_by_hand_from_the_key(world: World, dbref: bool) -> None:
    """Found by a probe: a ``LazyReference`` or DBRef made from a document's key, given to a
    ``ReferenceField``, was sent with the key as given (a ``uuid.UUID``): saved, the driver
    could not encode it (or, under ``pythonLegacy``, stored another form); queried, it matched
    nothing."""
    Order = world.order()
    Shipment = shipments(world, Order, dbref)
    a, b = Order(name="a").save(), Order(name="b").save()
    collection = Order._get_collection_name()
    for made in (LazyReference(Order, a.id), DBRef(collection, a.id)):
        other = LazyReference(Order, b.id)
        shipment = Shipment(name="s", order=made, orders=[made, other]).save()

        raw = world.raw(Shipment, shipment)
        world.check_reference(raw["order"], a, dbref=dbref)
        for stored, target in zip(raw["orders"], [a, b], strict=True):
            world.check_reference(stored, target, dbref=dbref)
        assert Shipment.objects(order=made).get().id == shipment.id
        assert Shipment.objects(orders=made).get().id == shipment.id
        assert Shipment.objects(orders__all=[made, other]).get().id == shipment.id
        assert Shipment.objects.get(id=shipment.id).order.name == "a"
        shipment.delete()


@pytest.mark.parametrize("dbref", [False, True], ids=["id", "dbref"])
def test_a_query_by_a_document_not_saved_is_refused(world: World, dbref: bool) -> None:
    """As for an ObjectId key: a document not saved has no key, and a query by it raises, never
    sending null, which matches every holder whose reference is unset (review AQ: a sequence
    key sent ``{"order": None}``, and a delete() by it removed the unrelated holders)."""
    Order = world.order()
    Shipment = world.model(
        "Shipment",
        name=me.StringField(),
        order=me.LazyReferenceField(Order, dbref=dbref),
        strong=me.ReferenceField(Order, dbref=dbref),
        loose=me.GenericLazyReferenceField(),
    )
    a = Order(name="a").save()
    Shipment(name="unset").save()
    Shipment(name="held", order=a, strong=a, loose=a).save()
    for query in ("order", "order__in", "order__ne", "strong", "loose"):
        unsaved = Order(name="not saved")
        value = [unsaved] if query.endswith("__in") else unsaved
        with pytest.raises(me.ValidationError):
            Shipment.objects(**{query: value}).delete()
    stored = world.database[Shipment._get_collection_name()].find({}, {"name": 1})
    assert sorted(document["name"] for document in stored) == ["held", "unset"]
    assert Order.objects.count() == 1


# -- the stored key values --------------------------------------------------------------------

STORED_KEYS = [
    pytest.param(lambda: LocalityUUIDField(primary_key=True), StoredUUID, id="binary"),
    pytest.param(lambda: UUID7Field(primary_key=True, as_string=True), StoredUUIDText, id="text"),
]


@pytest.mark.parametrize(("make", "stored_type"), STORED_KEYS)
def test_model_id_gives_mongoengines_references_the_stored_form(
    mongoengine_db: Any, make: Callable[[], Any], stored_type: type
) -> None:
    class Place(me.Document):
        id = make()

    place = Place().save()
    raw = mongoengine_db.place.with_options(codec_options=RAW).find_one()["_id"]
    field = Place._fields["id"]
    assert type(field.to_python(raw)) is type(place.id)  # what loading a document uses

    # Model.id, as MongoEngine's reference fields read it: the same field, but for to_python.
    assert isinstance(Place.id, type(field))
    assert Place.id.__dict__ is field.__dict__
    assert Place.id.generator is field.generator
    assert Place.id is Place.id
    carried = Place.id.to_python(raw)
    assert type(carried) is stored_type
    assert carried == field.reference_key(place.id)
    assert carried == place.id
    assert place.id == carried
    assert carried == raw
    assert raw == carried
    assert hash(carried) == hash(place.id)
    assert carried != uuid.uuid4()
    assert {place.id: "found"}[carried] == "found"
    assert bson.encode({"k": carried}) == bson.encode({"k": raw})
    assert carried.value == place.id
    assert type(carried.value) is type(place.id)
    assert str(carried) == str(place.id)
    assert repr(carried) == f"{stored_type.__name__}({str(place.id)!r})"
    for copied in (copy.copy(carried), copy.deepcopy(carried), pickle.loads(pickle.dumps(carried))):
        assert type(copied) is stored_type
        assert copied == carried

    # What a document holds is the plain value, however it is given.
    assert type(Place(id=carried).id) is type(place.id)
    assert type(Place.objects.get(id=carried).id) is type(place.id)
    assert type(field.to_mongo(carried)) is type(raw)


# -- the wrappers on MongoEngine's reference fields -------------------------------------------

WRAPPED = [
    (me.ReferenceField, "to_mongo"),
    (me.ReferenceField, "to_python"),
    (me.LazyReferenceField, "to_python"),
    (me.CachedReferenceField, "prepare_query_value"),
    (me.GenericLazyReferenceField, "to_mongo"),
    (me.GenericLazyReferenceField, "build_lazyref"),
    (me.DynamicField, "to_python"),
]


def test_reference_wrappers_are_installed_once(mongoengine_db: Any) -> None:
    class Keyed(me.Document):
        id = LocalityUUIDField(primary_key=True)

    seam.hook_reference_fields()
    seam.hook_reference_fields()
    for owner, name in WRAPPED:
        wrapper = vars(owner)[name]
        assert getattr(wrapper, "_mongoengine_ids_wrapper", False), (owner, name)
        own = wrapper.__wrapped__
        assert own.__module__ == "mongoengine.fields", (owner, name)
        assert not hasattr(own, "__wrapped__"), (owner, name)


def test_reference_wrappers_leave_other_references_as_mongoengine_makes_them(
    mongoengine_db: Any,
) -> None:
    class Plain(me.Document):
        name = me.StringField()

    class Counted(me.Document):
        id = SequenceField(primary_key=True)
        name = me.StringField()

    class Keyed(me.Document):
        id = LocalityUUIDField(primary_key=True)

    for model, key in ((Plain, bson.ObjectId()), (Counted, 7)):
        ref = DBRef(model._get_collection_name(), key, cls=model._class_name)
        for field_class in (me.ReferenceField, me.LazyReferenceField):
            assert field_class(model, dbref=True).to_python(ref) is ref
        assert me.ReferenceField(model, dbref=True).to_mongo(ref) is ref
        document = model(id=key, name="n")
        query = me.CachedReferenceField(model, fields=["name"]).prepare_query_value(None, document)
        assert query == {"_id": key, "name": "n"}
        assert query["_id"] is key
        son = me.GenericLazyReferenceField().to_mongo(LazyReference(model, key))
        assert son["_ref"] == DBRef(model._get_collection_name(), key)
        assert son["_ref"].id is key
        built = me.GenericLazyReferenceField().build_lazyref(son)
        assert type(built) is LazyReference
        assert built.pk is key
    unknown = DBRef("elsewhere", uuid.uuid4())
    assert me.ReferenceField("NeverDeclared", dbref=True).to_python(unknown) is unknown
    junk = DBRef(Keyed._get_collection_name(), "not a key")
    assert me.ReferenceField(Keyed, dbref=True).to_python(junk) is junk


def test_a_reference_made_by_hand_to_an_abstract_model_or_one_not_declared_yet(
    mongoengine_db: Any,
) -> None:
    """Found by a review: MongoEngine gives an abstract model no ``id_field``, so its UUID key
    was not found (a hand-made reference went as given); and a model not declared yet made the
    wrapper fail instead of doing what MongoEngine does."""

    class Base(me.Document):
        id = LocalityUUIDField(primary_key=True)
        meta = {"abstract": True}

    class Concrete(Base):
        name = me.StringField()
        meta = {"collection": "concrete"}

    class Holder(me.Document):
        # dbref=True: given a DBRef, MongoEngine stores the bare id (dbref=False), and then
        # cannot load it back for an abstract model (it has no collection name).
        ref = me.ReferenceField(Base, dbref=True)
        meta = {"collection": "holders"}

    concrete = Concrete(name="c").save()
    stored = Binary(concrete.id.bytes, 4)
    for made in (DBRef("concrete", concrete.id), LazyReference(Concrete, concrete.id)):
        holder = Holder(ref=made).save()
        holders = mongoengine_db.holders.with_options(codec_options=RAW)  # Binary as stored
        raw = holders.find_one({"_id": holder.id})["ref"]
        assert type(raw) is DBRef
        assert raw.collection == "concrete"
        assert bson.encode({"id": raw.id}) == bson.encode({"id": stored})  # the key as stored
        assert Holder.objects(ref=made).get().id == holder.id
        holder.delete()
    later = me.ReferenceField("DeclaredLater")
    assert later.to_mongo(DBRef("declared_later", 5)) == 5  # MongoEngine's: the id


def test_a_stored_dbref_keeps_its_database_and_extra_fields(mongoengine_db: Any) -> None:
    class Keyed(me.Document):
        id = LocalityUUIDField(primary_key=True)

    key = Keyed().save().id
    stored = DBRef("keyed", Binary(key.bytes, 4), "elsewhere", cls="Keyed")
    for field_class in (me.ReferenceField, me.LazyReferenceField):
        found = field_class(Keyed, dbref=True).to_python(stored)
        assert type(found) is DBRef
        assert type(found.id) is StoredUUID
        assert found.id == key
        assert (found.collection, found.database, found.cls) == ("keyed", "elsewhere", "Keyed")
        assert bson.encode({"r": found}) == bson.encode({"r": stored})
