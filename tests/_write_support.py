"""Helpers of the write-path behaviour tests (``test_write_*.py``): the five generated field
kinds, their stored forms, models built per test, raw reads of collections and counters.

The expectations come from ``spec-write.md`` (the specified write path), not from the current
implementation: every check reads the raw stored documents.
"""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import mongoengine as me
import pytest
from bson import Binary, ObjectId
from bson.binary import UuidRepresentation
from bson.codec_options import CodecOptions

from mongoengine_ids import (
    GeneratedField,
    LocalityUUID,
    LocalityUUIDField,
    LocalityUUIDGenerator,
    RandomUniqueField,
    SequenceField,
    UUID4Field,
    UUID7Field,
    UUID7Generator,
    Write,
)

#: MongoEngine's counter collection, which SequenceField keeps using.
COUNTERS = "mongoengine.counters"
#: Frozen clock of the deterministic generators (epoch milliseconds).
T = 1350327498450

_numbers = itertools.count(1)
_sample_locality = LocalityUUIDGenerator(pid=7, mac=9)
_sample_uuid7 = UUID7Generator()


def _version(raw: Any) -> int:
    return bytes(raw)[6] >> 4


def _check_uuid(raw: Any, version: int) -> None:
    assert isinstance(raw, Binary), f"{raw!r} is not BSON Binary"
    assert raw.subtype == 4, f"{raw!r} is not Binary subtype 4"
    assert len(raw) == 16
    assert _version(raw) == version, f"{raw!r}: version nibble {_version(raw):x}, not {version:x}"
    if version in (4, 7):
        assert bytes(raw)[8] >> 6 == 0b10, f"{raw!r} has not the RFC 9562 variant"


@dataclass(frozen=True)
class Kind:
    """One generated field type of the package, as the tests use it.

    Attributes:
        name: the pytest id.
        make: builds a field (``make(primary_key=True)``, ``make(db_field=...)``...).
        uuid_version: the version nibble of the stored Binary; None for integer kinds.
        sample: a fresh valid value a user (or another writer) could assign, Python form.
    """

    name: str
    make: Callable[..., GeneratedField]
    uuid_version: int | None
    sample: Callable[[], Any]

    @property
    def numeric(self) -> bool:
        return self.uuid_version is None

    def stored(self, value: Any) -> Any:
        """The stored form of the Python value ``value`` (as a raw read returns it)."""
        if isinstance(value, uuid.UUID):
            return Binary(value.bytes, 4)
        return value

    def check(self, raw: Any) -> None:
        """Assert that the raw stored ``raw`` is a value this kind generates."""
        if self.name == "sequence":
            assert is_integer(raw), f"{raw!r} is not an int"
            assert raw >= 1
        elif self.name == "random":
            assert is_integer(raw), f"{raw!r} is not an int"
            assert 10**11 <= raw < 10**12, f"{raw!r} has not 12 digits"
        else:
            assert self.uuid_version is not None
            _check_uuid(norm(raw), self.uuid_version)


KINDS = [
    Kind("sequence", SequenceField, None, lambda: 1_000_000 * next(_numbers)),
    Kind(
        "random",
        lambda **kwargs: RandomUniqueField(digits=12, **kwargs),
        None,
        lambda: 5 * 10**11 + next(_numbers),
    ),
    Kind("locality", LocalityUUIDField, 0xB, _sample_locality.generate),
    Kind("uuid4", UUID4Field, 4, uuid.uuid4),
    Kind("uuid7", UUID7Field, 7, _sample_uuid7.generate),
]
KIND_IDS = [kind.name for kind in KINDS]
#: Runs a test once per kind (its ``kind`` argument).
by_kind = pytest.mark.parametrize("kind", KINDS, ids=KIND_IDS)
BY_NAME = {kind.name: kind for kind in KINDS}
NUMERIC_KINDS = [kind for kind in KINDS if kind.numeric]


def norm(value: Any) -> Any:
    """``value`` with every ``uuid.UUID`` as Binary subtype 4 (a real server with
    ``uuidRepresentation="standard"`` decodes subtype 4 to ``uuid.UUID``; mongomock does not)."""
    if isinstance(value, uuid.UUID):
        return Binary(value.bytes, 4)
    if isinstance(value, dict):
        return {key: norm(item) for key, item in value.items()}
    if isinstance(value, list):
        return [norm(item) for item in value]
    return value


#: Codec options of a raw read: every BSON Binary stays ``Binary`` (subtype 3 and 4 included),
#: whatever the client's ``uuidRepresentation`` (with "standard" pymongo decodes subtype 4 to
#: ``uuid.UUID``; mongomock never does). An int64 still reads as ``bson.Int64`` from a server.
RAW = CodecOptions(document_class=dict, uuid_representation=UuidRepresentation.UNSPECIFIED)


def raw_collection(collection: Any) -> Any:
    """``collection`` (a pymongo collection, or a model class for its collection) reading the
    stored BSON values as they are: the same on mongomock and on a real server."""
    if isinstance(collection, type):
        collection = collection._get_collection()
    return collection.with_options(codec_options=RAW)


def is_integer(value: Any) -> bool:
    """Whether ``value`` is a stored integer: an int, or the ``bson.Int64`` a server's reply
    decodes an int64 to (never a bool)."""
    return isinstance(value, int) and not isinstance(value, bool)


def raw_docs(collection: Any, query: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """The raw documents of ``collection`` (pymongo-like), in insertion order; a
    ``uuid.UUID`` mongomock holds as given reads as the Binary subtype 4 a server stores."""
    return [norm(doc) for doc in raw_collection(collection).find(query or {})]


def raw_one(collection: Any, query: dict[str, Any] | None = None) -> dict[str, Any]:
    """The only raw document of ``collection`` matching ``query``."""
    found = raw_docs(collection, query)
    assert len(found) == 1, f"expected one document, found {found!r}"
    return found[0]


def counters(database: Any) -> list[dict[str, Any]]:
    """The raw counter documents of ``database``, sorted by ``_id``."""
    return sorted(raw_collection(database[COUNTERS]).find(), key=lambda doc: str(doc["_id"]))


def distinct(values: list[Any]) -> bool:
    return len({repr(value) for value in values}) == len(values)


def document(
    class_name: str,
    collection: str,
    base: type[me.Document] = me.Document,
    **fields: Any,
) -> type[me.Document]:
    """A Document class ``class_name`` on ``collection`` with ``fields``; ``meta`` may be given
    as a field (merged with the collection)."""
    meta = {"collection": collection, **fields.pop("meta", {})}
    namespace: dict[str, Any] = {"__module__": __name__, "meta": meta, **fields}
    return type(class_name, (base,), namespace)


def keyed(kind: Kind, class_name: str, collection: str, **fields: Any) -> type[me.Document]:
    """A model whose primary key is generated by ``kind``, with a ``name``."""
    return document(
        class_name, collection, id=kind.make(primary_key=True), name=me.StringField(), **fields
    )


def coded(kind: Kind, class_name: str, collection: str, **fields: Any) -> type[me.Document]:
    """A model with MongoEngine's ObjectId pk, a ``name`` and ``code`` generated by ``kind``."""
    return document(class_name, collection, name=me.StringField(), code=kind.make(), **fields)


def coded_part(kind: Kind, class_name: str, reservations: str) -> type[me.EmbeddedDocument]:
    """An embedded document class with a ``label`` and a ``code`` generated by ``kind`` (a
    random value in embedded documents needs its reservations: ``reserve_in=reservations``)."""
    options = {"reserve_in": reservations} if kind.name == "random" else {}
    namespace = {"__module__": __name__, "label": me.StringField(), "code": kind.make(**options)}
    return type(class_name, (me.EmbeddedDocument,), namespace)


def model_for(role: str, kind: Kind, class_name: str, collection: str) -> type[me.Document]:
    """``keyed`` for role "pk", ``coded`` for role "plain"."""
    return (keyed if role == "pk" else coded)(kind, class_name, collection)


def field_of(role: str) -> tuple[str, str]:
    """(attribute name, stored name) of the generated field of ``model_for(role, ...)``."""
    return ("id", "_id") if role == "pk" else ("code", "code")


ROLES = ["pk", "plain"]


# -- deterministic values, to force collisions ------------------------------------------------


class Indexes:
    """A ``randbelow(n)`` for RandomUniqueField: the scripted indexes first, then 100, 101, ...

    With ``digits=12`` index ``i`` is the value ``10**11 + i``.
    """

    def __init__(self, *scripted: int) -> None:
        self.scripted = list(scripted)
        self.fresh = itertools.count(100)
        self.calls = 0

    def __call__(self, n: int) -> int:
        self.calls += 1
        if self.scripted:
            return self.scripted.pop(0)
        return next(self.fresh)


def frozen_locality() -> LocalityUUIDGenerator:
    return LocalityUUIDGenerator(pid=1, mac=2, clock=lambda: T, counter=0)


def frozen_uuid7() -> UUID7Generator:
    return UUID7Generator(clock=lambda: T, random_bytes=lambda n: bytes(n))


def first_locality() -> LocalityUUID:
    """The first id of every :func:`frozen_locality` generator."""
    value = frozen_locality().generate()
    assert isinstance(value, LocalityUUID)
    return value


def first_uuid7() -> uuid.UUID:
    """The first id of every :func:`frozen_uuid7` generator."""
    return frozen_uuid7().generate()


def is_object_id(value: Any) -> bool:
    return isinstance(value, ObjectId)


class Numbers(GeneratedField):
    """Hands out 1, 2, 3...; records the count of every call; can fail or run a hook first."""

    def __init__(self, **kwargs: Any) -> None:
        self.counts: list[int] = []
        self.handed = 0
        self.fail_beyond: int | None = None
        self.before: Callable[[], None] | None = None
        super().__init__(**kwargs)

    def new_values(self, write: Write, count: int) -> list[Any]:
        self.counts.append(count)
        if self.before is not None:
            before, self.before = self.before, None
            before()
        if self.fail_beyond is not None and self.handed + count > self.fail_beyond:
            raise RuntimeError("interrupted")
        start = self.handed
        self.handed += count
        return list(range(start + 1, start + count + 1))

    def validate(self, value: Any) -> None:
        if not isinstance(value, int):
            self.error(f"{value!r} is not an int")
