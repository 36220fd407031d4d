"""A network error at every database call of a write, in turn: never a lost or doubled document.

For each generated field (as primary key and as a plain field) and each write (a new document's
``save()``, a bulk ``insert()``, ``upsert_one()`` (also by a value of the field no document
holds, given as ``field: v`` or inside ``$and``), ``modify(upsert=True)``, and ``save()`` of a
loaded, changed document, ``save()`` of a new document whose key was assigned after it was
built, and an ``update_one()`` giving the field a value; a bulk insert retried by saving each
document, and a save retried as a bulk insert), a counting run learns N, the number
of database calls the write makes. Then, for every call k < N, the write
runs again on a fresh database holding the same pre-existing documents, with ``AutoReconnect``
raised at call k either before the call ("before": never sent), after it was applied ("after":
the reply is lost), or with the call held back and applied after the next call ("late": a write
still in flight when the connection broke, which lands after the retry looked for it), or with
``KeyboardInterrupt`` raised after it was applied ("interrupt": the process interrupted while it
waited for the reply, a task's time limit), or, at a call that writes, with the write applied
and its write concern failed ("concern": pymongo's ``WriteConcernError``, or a
``BulkWriteError`` holding ``writeConcernErrors``), and is retried as an application would:
``ConnectionFailure`` (or the interrupt: the task is run again; or the write concern error:
the write may not last) caught, the same call made again with the same Python objects, up to
:data:`_faults.RETRIES` times; any other error ends the attempt and is an acceptable outcome.
The writes include ``save()`` of a loaded document whose stored copy lacks the field (the field
added to a populated collection), which fills it. The raw stored documents are then checked
(:func:`_violations`):

1. every pre-existing document is still there, unchanged (save of a loaded document: changed as
   asked, or not at all; as asked if the write returned);
2. no logical document (a unique ``key``) is stored twice, nor a document of no known key; each
   one the write made is stored once if it returned;
3. no generated value is held by two stored documents;
4. if the write returned, the Python documents' pk and generated value are the stored ones;
5. an upsert leaves exactly one document for its key;
6. every document the write stored holds a valid generated value (upserts too: the write-path
   spec generates them with ``$setOnInsert``);
7. a retry refused as a duplicate (``NotUniqueError``, the spec's ``UnconfirmedWriteError``,
   after a ``ConnectionFailure``) tells the application its earlier attempt was applied: then
   every document of the write is stored;
8. after a ``ConnectionFailure`` (or the interrupt), the application's retry of the same call
   ends as the call would have: written, refused as a duplicate, or still failing over; never
   refused for another reason (a bulk insert whose reload failed, retried, was refused because
   its documents were saved).

A second test holds call k back ("late") and fails, in turn, every later call of the retries
("before"; and "concern" at a write): a retry that fails before it sends anything must not
forget the held write.

The counted calls are those of the write and its retries only: the pre-existing documents, the
model's indexes and a document to be re-saved are set up beforehand. Every read is a call,
reading a cursor by index (``cursor[0]``, which MongoEngine's ``first()`` and ``with_id()`` use,
e.g. in ``upsert_one()``) too. Against a real server (``MONGOENGINE_IDS_TEST_URI``) the same
faults are injected into pymongo's client.
"""

from __future__ import annotations

import contextlib
import math
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import cache
from typing import Any

import mongoengine as me
import pymongo.errors
import pytest
from _faults import (
    ACCEPTABLE,
    Faults,
    Outcome,
    StoredValues,
    concern_failed,
    draw,
    draws,
    modes_for,
    retrying,
    stamp_after_insert,
)
from _support import CLIENT_OPTIONS, TEST_URI
from bson import json_util
from bson.binary import Binary
from bson.objectid import ObjectId
from mongoengine.base import BaseField

from mongoengine_ids import (
    LocalityUUIDField,
    LocalityUUIDGenerator,
    RandomUniqueField,
    SequenceField,
    UUID4Field,
    UUID7Field,
    UUID7Generator,
    backfill,
)
from mongoengine_ids.instrumented import Hook
from mongoengine_ids.testing import connected_threadsafe
from mongoengine_ids.write.seam import generated_fields

#: Documents of the bulk insert (each retry sends them all again).
INSERTED = 4
# -- the fields ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    """A generated field in one role, and the values pre-existing documents hold in it."""

    kind: str
    primary_key: bool
    make: Callable[..., BaseField]
    #: Python values of the pre-existing documents (made anew for each database).
    existing: Callable[[], list[Any]]
    #: The model has its own ``_save_create``, which writes after its insert
    #: (:func:`_faults.stamp_after_insert`).
    own_step: bool = False

    @property
    def id(self) -> str:
        role = "pk" if self.primary_key else "plain"
        return f"{self.kind}-{role}{'-own-step' if self.own_step else ''}"

    @property
    def name(self) -> str:
        return "id" if self.primary_key else "code"


def _uuids(make: Callable[[], Any]) -> Callable[[], list[Any]]:
    return lambda: [make() for _ in range(3)]


_locality = LocalityUUIDGenerator()
_uuid7 = UUID7Generator()


def _random_field(**kwargs: Any) -> RandomUniqueField:
    return RandomUniqueField(
        min_value=1, max_value=12, max_retries=40, rng=draw, warn_collision_rate=1.0, **kwargs
    )


def _reserved_field(**kwargs: Any) -> RandomUniqueField:
    return _random_field(reserve_in="faults_reserved", **kwargs)


CASES = [
    # The counter starts at 1: its first three values are taken (stored before it knew them).
    Case("sequence", True, SequenceField, lambda: [1, 2, 3]),
    # No unique index on a plain SequenceField: nothing would refuse a collision there.
    Case("sequence", False, SequenceField, lambda: [1001, 1002, 1003]),
    # 6 of its 12 values taken. With the seed of _run(), save() draws 5 and 1 (both taken),
    # then 12; insert() draws 5, 1, 12, 9, then new values for the first two.
    Case("random", True, _random_field, lambda: [1, 2, 3, 5, 7, 11]),
    Case("random", False, _random_field, lambda: [1, 2, 3, 5, 7, 11]),
    # The same, each candidate (and each value assigned) reserved in a proxy collection first.
    Case("reserved", True, _reserved_field, lambda: [1, 2, 3, 5, 7, 11]),
    Case("reserved", False, _reserved_field, lambda: [1, 2, 3, 5, 7, 11]),
    Case("locality", True, LocalityUUIDField, _uuids(_locality.generate)),
    Case("locality", False, LocalityUUIDField, _uuids(_locality.generate)),
    Case("uuid4", True, UUID4Field, _uuids(uuid.uuid4)),
    Case("uuid4", False, UUID4Field, _uuids(uuid.uuid4)),
    Case("uuid7", True, UUID7Field, _uuids(_uuid7.generate)),
    Case("uuid7", False, UUID7Field, _uuids(_uuid7.generate)),
    # A model's own step, which stamps the document after its insert: what is stored is then
    # no version the package sent.
    Case("sequence", True, SequenceField, lambda: [1, 2, 3], own_step=True),
    Case("sequence", False, SequenceField, lambda: [1001, 1002, 1003], own_step=True),
    Case("random", True, _random_field, lambda: [1, 2, 3, 5, 7, 11], own_step=True),
    Case("uuid4", True, UUID4Field, _uuids(uuid.uuid4), own_step=True),
]


@cache
def _model(case: Case) -> type[me.Document]:
    """The model of ``case``: ``key`` (one per logical document), ``note``, the field; and two
    fields whose values a retry must compare as stored: ``spot`` (a list its ``to_mongo()``
    sends as it is, so an edit in place reaches what was sent) and ``reading`` (a NaN is the
    same stored value, though ``nan != nan``)."""
    collection = f"faults_{case.id.replace('-', '_')}"
    attributes = {
        "meta": {"collection": collection},
        "key": me.StringField(),
        "note": me.StringField(),
        "spot": me.GeoPointField(),
        "reading": me.FloatField(),
        case.name: case.make(primary_key=case.primary_key),
    }
    if case.own_step:
        attributes.update(stamp=me.IntField(), _save_create=stamp_after_insert)
    name = "Faults" + "".join(part.title() for part in case.id.split("-"))
    return type(name, (me.Document,), attributes)


# -- the writes ---------------------------------------------------------------------------------


@dataclass
class Write:
    """One write, ready to run (and run again) with the same Python objects."""

    #: Keys of the logical documents it writes.
    keys: list[str]
    #: Makes the write; returns the Python documents whose values must be the stored ones.
    call: Callable[[], list[me.Document]]
    upsert: bool = False
    #: Changes it makes to pre-existing documents, by key.
    changes: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: The new documents it writes (see :func:`_touch`).
    documents: list[me.Document] = field(default_factory=list)


def _save_new(model: type[me.Document]) -> Write:
    document = model(key="new-0", note="new")

    def call() -> list[me.Document]:
        document.save()
        return [document]

    return Write(["new-0"], call, documents=[document])


def _insert(model: type[me.Document]) -> Write:
    documents = [model(key=f"new-{i}", note="new", reading=math.nan) for i in range(INSERTED)]

    def call() -> list[me.Document]:
        return [*documents, *model.objects.insert(documents)]

    return Write([document.key for document in documents], call, documents=documents)


def _insert_then_save(model: type[me.Document]) -> Write:
    """A bulk insert, retried by saving each document on its own (an application's fallback)."""
    documents = [model(key=f"new-{i}", note="new") for i in range(INSERTED)]
    attempts = []

    def call() -> list[me.Document]:
        attempts.append(1)
        if len(attempts) == 1:
            return [*documents, *model.objects.insert(documents)]
        for document in documents:
            document.save()
        return documents

    return Write([document.key for document in documents], call, documents=documents)


def _save_then_insert(model: type[me.Document]) -> Write:
    """A new document's save(), retried as a bulk insert of it (a queue's worker that batches
    what it retries)."""
    document = model(key="new-0", note="new")
    attempts = []

    def call() -> list[me.Document]:
        attempts.append(1)
        if len(attempts) == 1:
            document.save()
        else:
            model.objects.insert([document], load_bulk=False)
        return [document]

    return Write(["new-0"], call, documents=[document])


def _unheld(case: Case) -> Any:
    """A value of ``case``'s field that no document holds (a UUID made for no document)."""
    return {"sequence": 500, "random": 4, "reserved": 4}.get(case.kind) or case.existing()[0]


def _save_assigned(model: type[me.Document]) -> Write:
    """A new document given a value no document holds: the field is told of it (a counter
    moves past it, a proxy reserves it) before the insert."""
    case = next(case for case in CASES if _model(case) is model)
    value = _unheld(case)
    document = model(key="new-0", note="assigned", **{case.name: value})

    def call() -> list[me.Document]:
        document.save()
        return [document]

    return Write(["new-0"], call, documents=[document])


def _upsert_one(model: type[me.Document]) -> Write:
    def call() -> list[me.Document]:
        return [model.objects(key="up-0").upsert_one(set__note="upserted")]

    return Write(["up-0"], call, upsert=True)


def _upsert_by_value(model: type[me.Document]) -> Write:
    """An upsert whose filter fixes the generated field to a value no document holds yet: the
    field is told of it (a counter moves past it) before the upsert inserts it."""
    case = next(case for case in CASES if _model(case) is model)
    value = _unheld(case)

    def call() -> list[me.Document]:
        found = model.objects(**{case.name: value}).upsert_one(set__key="up-0", set__note="v")
        return [found]

    return Write(["up-0"], call, upsert=True)


def _upsert_by_and(model: type[me.Document]) -> Write:
    """An upsert whose filter fixes the generated field only inside ``$and``, with ``$eq`` (as
    MongoEngine writes a field filtered twice): a server gives the document it inserts that
    value (mongomock does not: the package sets it on insert as well)."""
    case = next(case for case in CASES if _model(case) is model)
    value = _unheld(case)
    field_ = model._fields[case.name]
    condition = {"$and": [{field_.db_field: {"$eq": field_.to_mongo(value)}}]}

    def call() -> list[me.Document]:
        found = model.objects(__raw__=condition).upsert_one(set__key="up-0", set__note="and")
        return [found]

    return Write(["up-0"], call, upsert=True)


def _modify(model: type[me.Document]) -> Write:
    def call() -> list[me.Document]:
        return [model.objects(key="up-0").modify(upsert=True, new=True, set__note="modified")]

    return Write(["up-0"], call, upsert=True)


def _save_loaded(model: type[me.Document]) -> Write:
    document = model.objects.get(key="pre-0")
    document.note = "changed"

    def call() -> list[me.Document]:
        document.save()
        return [document]

    return Write([], call, changes={"pre-0": {"note": "changed"}})


def _save_edited(model: type[me.Document]) -> Write:
    """The application edits the document before every attempt (a retry sends a new version),
    its ``spot`` in place."""
    document = model(key="new-0", note="new", spot=[0.0, 0.0], reading=math.nan)
    attempts = iter(range(100))

    def call() -> list[me.Document]:
        attempt = next(attempts)
        document.note = f"edit-{attempt}"
        document.spot[0] = float(attempt)
        document.save()
        return [document]

    return Write(["new-0"], call)


def _save_adopting(model: type[me.Document]) -> Write:
    """A loaded document whose stored copy lacks the field (added to a populated collection):
    its save() fills it with a conditional write, then writes the change."""
    adopting = model(key="adopt-0", note="old").save()
    name = next(name for name, _ in generated_fields(model))
    if name != model._meta["id_field"]:  # a key cannot be missing
        model._get_collection().update_one(
            {"_id": adopting.pk}, {"$unset": {model._fields[name].db_field: ""}}
        )
    document = model.objects.get(key="adopt-0")
    document.note = "changed"

    def call() -> list[me.Document]:
        document.save()
        return [document]

    return Write(["adopt-0"], call)


def _save_keyed_late(model: type[me.Document]) -> Write:
    """A new document whose key is assigned after it was built, which MongoEngine then takes as
    stored: a generated key (one no document holds) is inserted; any other (an ObjectId) is
    MongoEngine's upsert of all the document holds, with its generated value."""
    case = next(case for case in CASES if _model(case) is model)
    document = model(key="new-0", note="keyed late")
    document.pk = _unheld(case) if case.primary_key else ObjectId()

    def call() -> list[me.Document]:
        document.save()
        return [document]

    return Write(["new-0"], call)


def _update_given(model: type[me.Document]) -> Write:
    """An update (no upsert) of a stored document giving its generated field a value no
    document holds: the field is told of it first. (A key cannot change: for a key, the update
    changes the note only.)"""
    case = next(case for case in CASES if _model(case) is model)
    if case.primary_key:
        changes: dict[str, Any] = {"note": "updated"}
    else:
        value = _unheld(case)
        changes = {"code": _raw(model._fields["code"].to_mongo(value))}

    def call() -> list[me.Document]:
        given = {"set__note": "updated"} if case.primary_key else {"set__code": value}
        model.objects(key="pre-0").update_one(**given)
        return []

    return Write([], call, changes={"pre-0": changes})


def _save_built_as_stored(model: type[me.Document]) -> Write:
    """A document built from JSON (``created=False``) that is not stored, holding a value no
    document holds, changed and saved: MongoEngine's upsert of the changed fields inserts it,
    with the value set on insert, which its field is told of. Then a new document is saved:
    a plain counter's next number is the one given (nothing would refuse it twice)."""
    case = next(case for case in CASES if _model(case) is model)
    value = 1 if case.id == "sequence-plain" else _unheld(case)
    stored = model._fields[case.name].to_mongo(value)
    son = {"_id": stored if case.primary_key else ObjectId(), "note": "old"}
    if not case.primary_key:
        son["code"] = stored
    document = model.from_json(json_util.dumps(son), json_options=json_util.RELAXED_JSON_OPTIONS)
    document.key, document.note = "json-0", "changed"  # MongoEngine upserts what changed
    fresh = model(key="new-0", note="after")

    def call() -> list[me.Document]:
        document.save()
        fresh.save()
        return [document, fresh]

    return Write(["json-0", "new-0"], call)


class _Made:
    """In a write's ``changes``: a value the write makes anew, which any stored value matches
    (checks 3 and 6 judge it: held by no other document, a valid value of the field)."""

    def __eq__(self, other: object) -> bool:
        return other is not None

    __hash__ = None  # type: ignore[assignment]


def _save_cleared(model: type[me.Document]) -> Write:
    """A stored document loaded, its generated field set to None and saved: the save makes a
    new value, which its update writes (a key set to None makes a new document: for a key,
    the note changes only)."""
    case = next(case for case in CASES if _model(case) is model)
    document = model.objects.get(key="pre-0")
    document.note = "cleared"
    changes: dict[str, Any] = {"note": "cleared"}
    if not case.primary_key:
        setattr(document, case.name, None)
        changes[model._fields[case.name].db_field] = _Made()

    def call() -> list[me.Document]:
        document.save()
        return [document]

    return Write([], call, changes={"pre-0": changes})


def _backfill(model: type[me.Document]) -> Write:
    """Stored documents lacking the field (added to a populated collection), given values by
    ``backfill()``, a batch of one at a time: each reads on from the key before, then a pass
    from the start ends it. (A key cannot be missing: nothing to fill then.)"""
    name = next(name for name, _ in generated_fields(model))
    keys = [] if name == model._meta["id_field"] else ["legacy-0", "legacy-1"]
    if keys:
        model._get_collection().insert_many([{"key": key, "note": "old"} for key in keys])

    def call() -> list[me.Document]:
        backfill(model, batch_size=1)
        return []

    return Write(keys, call)


WRITES: dict[str, Callable[[type[me.Document]], Write]] = {
    "save-edited": _save_edited,
    "save-adopting": _save_adopting,
    "save": _save_new,
    "save-assigned": _save_assigned,
    "insert": _insert,
    "insert-then-save": _insert_then_save,
    "save-then-insert": _save_then_insert,
    "upsert_one": _upsert_one,
    "upsert-by-value": _upsert_by_value,
    "upsert-by-$and": _upsert_by_and,
    "modify": _modify,
    "save-loaded": _save_loaded,
    "save-keyed-late": _save_keyed_late,
    "update-given": _update_given,
    "save-built-as-stored": _save_built_as_stored,
    "save-cleared": _save_cleared,
    "backfill": _backfill,
}

# -- faults -------------------------------------------------------------------------------------


@contextlib.contextmanager
def _database(hook: Hook) -> Iterator[Any]:
    """A fresh database whose every call goes through ``hook``; the models forget it after."""
    with connected_threadsafe(TEST_URI, hook=hook, **CLIENT_OPTIONS) as connect:
        yield connect()
    for case in CASES:
        _model(case)._collection = None


# -- one run ------------------------------------------------------------------------------------


def _raw(value: Any) -> Any:
    """The stored form: a real server hands a standard UUID back as uuid.UUID, not Binary."""
    if isinstance(value, uuid.UUID):
        return Binary(value.bytes, 4)
    if isinstance(value, dict):
        return {key: _raw(item) for key, item in value.items()}
    return value


@dataclass
class Run:
    calls: list[str]
    fired: bool
    outcome: Outcome
    problems: list[str]


def _touch(write: Write) -> None:
    """Between attempts, the application updates the new documents it holds (by their key, as
    ``update()``, ``modify()``, ``delete()`` and ``reload()`` address them): refused while the
    key is not known to be the document's own, else applied to its stored copy."""
    for document in write.documents:
        if document.pk is not None:
            with contextlib.suppress(me.OperationError):
                document.update(set__note="touched")


def _run(
    case: Case,
    make_write: Callable[[type[me.Document]], Write],
    faults: Faults,
    *,
    touch: bool = False,
) -> Run:
    """One run on a fresh database: pre-existing documents, the write (faults armed), checks;
    with ``touch``, :func:`_touch` between the application's attempts."""
    model = _model(case)
    draws.seed(52)
    with _database(faults) as db:
        collection = db[model._get_collection_name()]
        generated = model._fields[case.name]
        existing = [
            {
                "_id": generated.to_mongo(value) if case.primary_key else ObjectId(),
                "key": f"pre-{i}",
                "note": "old",
                **({} if case.primary_key else {"code": generated.to_mongo(value)}),
            }
            for i, value in enumerate(case.existing())
        ]
        collection.insert_many([dict(document) for document in existing])
        proxy = getattr(generated, "reserve_in", None)
        if proxy is not None:  # stored through the package: their values are reserved
            db[proxy].insert_many(
                [{"_id": generated.to_mongo(value), "ns": "pre"} for value in case.existing()]
            )
        model._get_collection()  # its indexes: MongoEngine makes them once per process
        write = make_write(model)
        db_field = generated.db_field
        stored_values = StoredValues(faults, lambda: _values_by_key(collection, db_field), db_field)

        def between() -> None:
            stored_values.between()
            if touch:
                _touch(write)

        faults.armed = True
        try:
            outcome = retrying(write.call, between)
        finally:
            faults.armed = False
            faults.land()  # no later call came: the server applies it all the same
        stored = [_raw(document) for document in collection.find()]
        problems = _violations(case, model, write, existing, stored, outcome)
        problems.extend(stored_values.problems())
    return Run(faults.calls, faults.fired, outcome, problems)


def _values_by_key(collection: Any, db_field: str) -> dict[Any, Any]:
    """The stored values of ``db_field`` by the key of their document, of keys held once."""
    documents = list(collection.find())
    held = Counter(document.get("key") for document in documents)
    return {
        document.get("key"): _raw(document.get(db_field))
        for document in documents
        if held[document.get("key")] == 1
    }


def _violations(
    case: Case,
    model: type[me.Document],
    write: Write,
    existing: list[dict[str, Any]],
    stored: list[dict[str, Any]],
    outcome: Outcome,
) -> list[str]:
    """What is wrong with the ``stored`` documents after ``write`` ended as ``outcome``."""
    problems = []
    generated = model._fields[case.name]
    db_field = generated.db_field
    by_key = Counter(document.get("key") for document in stored)
    returned = outcome.returned
    # 1. pre-existing documents
    for before in existing:
        change = write.changes.get(before["key"])
        allowed = [_raw(before)]
        if change is not None:
            allowed = [_raw({**before, **change}), *([] if returned else allowed)]
        now = [document for document in stored if document["_id"] == _raw(before["_id"])]
        if now not in ([document] for document in allowed):
            problems.append(f"1. pre-existing {before['key']!r} is now {now!r}, was {before!r}")
    # 2. each logical document once
    known = {before["key"] for before in existing} | set(write.keys)
    for key, count in by_key.items():
        if key not in known:
            problems.append(f"2. {count} stored document(s) with an unknown key {key!r}")
        elif count > 1:
            problems.append(f"2. {key!r} stored {count} times")
    if returned:
        problems.extend(f"2. {key!r} not stored" for key in write.keys if by_key[key] == 0)
    # 3. no value shared
    values = Counter(document[db_field] for document in stored if document.get(db_field))
    problems.extend(
        f"3. {db_field}={value!r} held by {count} documents"
        for value, count in values.items()
        if count > 1
    )
    # 4. the Python documents hold the stored values
    if returned:
        by_key_stored = {document.get("key"): document for document in stored}
        for document in outcome.documents:
            raw = by_key_stored.get(document.key, {})
            for name in dict.fromkeys([case.name, model._meta["id_field"]]):
                field_ = model._fields[name]
                mine = _stored_form(field_, getattr(document, name))
                if mine != raw.get(field_.db_field):
                    problems.append(
                        f"4. {document.key!r}: the Python {name} is {mine!r}, stored "
                        f"{raw.get(field_.db_field)!r}"
                    )
    # 5. an upsert leaves one document
    if write.upsert:
        problems.extend(
            f"5. {by_key[key]} documents for the upserted key {key!r}"
            for key in write.keys
            if by_key[key] != 1
        )
    # 6. what the write stored holds a generated value
    for document in stored:
        if document.get("key") in (*write.keys, *write.changes):
            value = document.get(db_field)
            if not _valid(generated, value):
                problems.append(f"6. {document['key']!r} holds no generated {db_field}: {value!r}")
    # 7. a retry refused as a duplicate: the application takes the earlier attempt as applied
    # (the spec's UnconfirmedWriteError), so its documents had better be stored.
    ending = outcome.ending
    if outcome.refused_as_duplicate:
        problems.extend(
            f"7. the retry was refused as a duplicate ({str(ending)[:60]}...), but {key!r} "
            "is not stored"
            for key in write.keys
            if by_key[key] == 0
        )
    # 8. the application's retry of the same call ends as the call would have: written, or
    # refused as a duplicate (or as retries exhausted), or still failing over.
    if outcome.failed_over and not (
        isinstance(
            ending,
            (type(None), me.NotUniqueError, pymongo.errors.ConnectionFailure, KeyboardInterrupt),
        )
        or concern_failed(ending)
    ):
        problems.append(f"8. the retry was refused: {type(ending).__name__}: {ending}")
    if ending is not None and not isinstance(ending, ACCEPTABLE):
        problems.append(f"unexpected {type(ending).__name__}: {ending}")
    return problems


def _stored_form(field_: Any, value: Any) -> Any:
    try:
        return _raw(field_.to_mongo(value))
    except (me.ValidationError, TypeError, ValueError):
        return value  # not a value of the field (an ObjectId the server made): as it is


def _valid(field_: Any, stored: Any) -> bool:
    if stored is None:
        return False
    try:
        field_.validate(field_.to_python(stored))
    except (me.ValidationError, TypeError, ValueError):
        return False
    return True


# -- the tests ----------------------------------------------------------------------------------

#: (case id, write) -> (N, faulted runs made); read by the summary test.
#: Every write of every case; but a backfill of a key, which every stored document holds.
CASE_WRITES = [
    pytest.param(case, name, id=f"{case.id}-{name}")
    for case in CASES
    for name in WRITES
    if not (case.primary_key and name == "backfill")
]

_tally: dict[tuple[str, str], tuple[int, int]] = {}


@pytest.mark.parametrize(("case", "write_name"), CASE_WRITES)
def test_a_fault_at_every_call_never_loses_or_doubles_a_document(
    case: Case, write_name: str
) -> None:
    make_write = WRITES[write_name]
    label = f"{case.id} {write_name}"
    baseline = _run(case, make_write, Faults())
    n = len(baseline.calls)
    assert n > 0, f"{label}: the hook saw no database call, so no fault can be injected"
    failures = []
    if baseline.problems or not baseline.outcome.returned:
        failures.append(f"{label}, no fault: {baseline.outcome}: " + "; ".join(baseline.problems))
    runs = 0
    for k in range(n):
        for mode in modes_for(baseline.calls[k]):
            run = _run(case, make_write, Faults(k, mode))
            runs += 1
            # The harness itself: the same calls as counted up to call k, which was failed.
            assert run.calls[:k] == baseline.calls[:k], f"{label} k={k} {mode}: other calls"
            assert run.fired, f"{label} k={k} {mode}: call {k} never came ({run.calls})"
            if run.problems:
                failures.append(
                    f"{label} k={k} ({baseline.calls[k]}) {mode}: {run.outcome}: "
                    + "; ".join(run.problems)
                )
    _tally[(case.id, write_name)] = (n, runs)
    assert not failures, (
        f"{len(failures)} failing run(s) of {label} (N={n}: {runs} faulted + 1 counting):\n"
        + "\n".join(failures)
    )


@pytest.mark.parametrize(("case", "write_name"), CASE_WRITES)
def test_a_second_fault_in_the_retry_of_a_late_write_never_doubles_a_document(
    case: Case, write_name: str
) -> None:
    """A call held back ("late", applied after the retry's first call), then a second fault at
    every later call of the retries, in turn ("before"; and "concern" at a write): the retry
    must not forget the held write."""
    make_write = WRITES[write_name]
    label = f"{case.id} {write_name}"
    n = len(_run(case, make_write, Faults()).calls)
    failures, runs = [], 0
    for k in range(n):
        calls = _run(case, make_write, Faults(k, "late")).calls
        for second in range(k + 2, len(calls)):
            for then in ("before", "concern"):
                if then not in modes_for(calls[second]):
                    continue
                run = _run(case, make_write, Faults(k, "late", **{f"k{second}": then}))
                runs += 1
                if run.problems:
                    failures.append(
                        f"{label} late at {k} ({calls[k]}), then {then} at {second} "
                        f"({calls[second]}): {run.outcome}: " + "; ".join(run.problems)
                    )
    _second_tally[(case.id, write_name)] = runs
    assert not failures, f"{len(failures)} failing run(s) of {label}:\n" + "\n".join(failures)


_second_tally: dict[tuple[str, str], int] = {}
_touch_tally: dict[tuple[str, str], int] = {}


@pytest.mark.parametrize(
    "write_name", ["save", "save-assigned", "insert", "insert-then-save", "save-then-insert"]
)
@pytest.mark.parametrize("case", CASES, ids=lambda case: case.id)
def test_an_update_between_attempts_never_touches_another_document(
    case: Case, write_name: str
) -> None:
    """A fault at every call of a new document's write, then the application updates its
    documents by their key before each retry (:func:`_touch`): a key kept for the retry may be
    another document's (a number the field would have retried), which must be left alone."""
    make_write = WRITES[write_name]
    label = f"{case.id} {write_name}"
    calls = _run(case, make_write, Faults()).calls
    failures, runs = [], 0
    for k in range(len(calls)):
        for mode in modes_for(calls[k]):
            run = _run(case, make_write, Faults(k, mode), touch=True)
            runs += 1
            if run.problems:
                failures.append(f"{label} k={k} {mode}: {run.outcome}: " + "; ".join(run.problems))
    _touch_tally[(case.id, write_name)] = runs
    assert not failures, f"{len(failures)} failing run(s) of {label}:\n" + "\n".join(failures)


def _save_twice_over(model: type[me.Document]) -> Write:
    """Not what an application does: a new object at each attempt, so a new ObjectId."""

    def call() -> list[me.Document]:
        document = model(key="new-0", note="new")
        document.save()
        return [document]

    return Write(["new-0"], call)


def test_the_checks_catch_a_retry_that_writes_twice() -> None:
    # A control: the lost reply of an insert, retried with a fresh document, stores two.
    case = next(case for case in CASES if case.id == "uuid4-plain")
    run = _run(case, _save_twice_over, Faults(0, "after"))
    assert run.outcome.returned
    assert run.problems == ["2. 'new-0' stored 2 times"]


def test_a_failed_write_concern_is_applied_and_retried() -> None:
    # A control of the "concern" mode: the insert is applied, pymongo's WriteConcernError
    # reaches the application (wrapped by MongoEngine), which retries; a fresh document then
    # stores a second copy.
    case = next(case for case in CASES if case.id == "uuid4-plain")
    run = _run(case, _save_twice_over, Faults(0, "concern"))
    assert run.calls[0].endswith(".insert_one")
    assert (run.outcome.returned, run.outcome.failed_over, run.outcome.attempts) == (True, True, 2)
    assert run.problems == ["2. 'new-0' stored 2 times"]


def test_a_bulk_insert_whose_write_concern_failed_is_counted_stored_by_the_retry() -> None:
    # The "concern" mode at a bulk insert: pymongo's BulkWriteError holding
    # writeConcernErrors, every document applied; the retry finds them stored, none twice.
    case = next(case for case in CASES if case.id == "uuid4-pk")
    calls = _run(case, _insert, Faults()).calls
    k = next(k for k, call in enumerate(calls) if call.endswith(".insert_many"))
    run = _run(case, _insert, Faults(k, "concern"))
    assert isinstance(run.outcome.ending, type(None))
    assert (run.outcome.returned, run.outcome.failed_over, run.outcome.attempts) == (True, True, 2)
    assert run.problems == []
    retry = run.calls[k + 1 :]  # a look-up of each, then the reload (load_bulk), no insert
    assert retry[:INSERTED] == [calls[k].replace("insert_many", "find_one")] * INSERTED
    assert retry[INSERTED:] == calls[k + 1 :]


def _clear_again_at_each_attempt(model: type[me.Document]) -> Write:
    """Not what an application does: each attempt loads the document again and clears its
    value, so a retry makes another over the one the first attempt stored."""
    name = next(name for name, _ in generated_fields(model))

    def call() -> list[me.Document]:
        document = model.objects.get(key="pre-0")
        setattr(document, name, None)
        document.save()
        return [document]

    return Write([], call, changes={"pre-0": {model._fields[name].db_field: _Made()}})


def test_the_checks_catch_a_retry_that_writes_over_a_stored_value() -> None:
    # A control of check 9: the first attempt's value landed (its reply lost); the retry,
    # clearing it again, stores another.
    case = next(case for case in CASES if case.id == "uuid4-plain")
    calls = _run(case, _clear_again_at_each_attempt, Faults()).calls
    update = next(k for k, call in enumerate(calls) if call.endswith(".update_one"))
    run = _run(case, _clear_again_at_each_attempt, Faults(update, "after"))
    assert run.outcome.returned
    assert len(run.problems) == 1
    assert run.problems[0].startswith("9. 'pre-0' held code=Binary(")


def test_every_call_of_every_write_was_failed_both_ways(request: pytest.FixtureRequest) -> None:
    selected = [
        item
        for item in request.session.items
        if getattr(item, "originalname", None)
        == test_a_fault_at_every_call_never_loses_or_doubles_a_document.__name__
    ]
    if not selected:
        pytest.skip("the fault runs were not selected")
    total = sum(runs for _, runs in _tally.values())
    print(
        f"\nfault runs: {total} over {len(_tally)} (field, role, write) cases, and "
        f"{sum(_second_tally.values())} with a second fault in the retry of a late write, "
        f"{sum(_touch_tally.values())} with an update between attempts "
        f"(+{len(_tally)} counting runs); calls per write: "
        + ", ".join(f"{case} {write}={n}" for (case, write), (n, _) in _tally.items())
    )
    assert len(_tally) == len(selected), "a case stopped before all its runs were made"
    assert total > 0
