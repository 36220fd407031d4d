"""The fault injector, the application's retry loop and what both exhaustive fault tests
(``test_faults_exhaustive.py``, ``test_faults_embedded.py``) share; also the model step that
the lost-reply tests of ``test_write_paths.py`` use."""

from __future__ import annotations

import contextlib
import copy
import functools
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import mongoengine as me
import pymongo.errors

from mongoengine_ids import MongoEngineIdsError, RetriesExhaustedError

#: An application's retries after a ConnectionFailure (or a failed write concern).
RETRIES = 3
MODES = ("before", "after", "late", "interrupt", "concern")
#: The calls that write, which "concern" fails (a read has no write concern).
WRITE_METHODS = frozenset(
    {
        "bulk_write",
        "delete_many",
        "delete_one",
        "find_one_and_delete",
        "find_one_and_replace",
        "find_one_and_update",
        "insert_many",
        "insert_one",
        "replace_one",
        "update_many",
        "update_one",
    }
)
#: The error a server reports when a write was applied but its write concern was not met
#: (``wtimeout``; a primary stepping down: code 64, WriteConcernFailed).
CONCERN_ERROR = {"code": 64, "codeName": "WriteConcernFailed", "errmsg": "injected: waiting"}
#: Errors that end an attempt as an acceptable outcome (a duplicate, a refused write...);
#: anything else (TypeError, KeyError...) is a fault of the write path itself.
ACCEPTABLE = (
    me.errors.OperationError,
    me.errors.ValidationError,
    me.errors.InvalidQueryError,
    pymongo.errors.PyMongoError,
    MongoEngineIdsError,
)

#: RandomUniqueField's draws (its ``rng``: :func:`draw`), re-seeded before every run: the same
#: draws (and so the same collisions and database calls) as in the counting run, up to the
#: fault.
draws = random.Random()


def draw(n: int) -> int:
    return draws.randrange(n)


def modes_for(call: str) -> tuple[str, ...]:
    """The modes in which call ``call`` ("collection.method") is failed: every mode, but
    "concern" only for a write."""
    if call.rpartition(".")[2] in WRITE_METHODS:
        return MODES
    return tuple(mode for mode in MODES if mode != "concern")


class Faults:
    """Counts the database calls while armed, and fails call ``k``: ``before`` it is applied
    (never sent), ``after`` (applied, the reply lost), ``late`` (the reply lost, and the call
    applied only after the next call, the first of the application's retry, has run: a write
    still in flight when the connection broke), ``interrupt`` (applied, then a
    ``KeyboardInterrupt``) or ``concern`` (a write applied, then its write concern failed, as
    pymongo reports it: :func:`_concern_failed`)."""

    def __init__(self, k: int | None = None, mode: str = "before", **more: str) -> None:
        #: The calls to fail, by index: a mode each (``more``: "k12": "before", a second fault).
        self.faults = {} if k is None else {k: mode}
        self.faults.update({int(key[1:]): value for key, value in more.items()})
        self.armed = False
        self.calls: list[str] = []  # "collection.method", in order
        self.fired = False
        self.held: Callable[[], Any] | None = None  # a late call, not applied yet

    def __call__(self, collection: str, method: str, call: Callable[[], Any]) -> Any:
        if not self.armed:
            return call()
        index = len(self.calls)
        self.calls.append(f"{collection}.{method}")
        mode = self.faults.get(index)
        if mode is None:
            try:
                return call()
            finally:
                self.land()
        self.fired = True
        if mode == "concern":
            try:
                return _concern_failed(method, call)
            finally:
                self.land()
        if mode == "interrupt":
            # Applied, then the process is interrupted (KeyboardInterrupt, a task's time limit)
            # before the reply is read; the task is run again with the same objects.
            with contextlib.suppress(Exception):
                call()
            raise KeyboardInterrupt(f"injected at call {index} ({mode})")
        if mode == "after":
            # Applied; the reply is lost, whatever it was (a duplicate key, the end of a cursor).
            with contextlib.suppress(Exception):
                call()
        elif mode == "late":
            self.land()
            self.held = _as_sent(call)
        raise pymongo.errors.AutoReconnect(f"injected at call {index} ({mode})")

    def land(self) -> None:
        """Apply the late call, if one is held (whatever it answers, nobody hears it)."""
        held, self.held = self.held, None
        if held is not None:
            with contextlib.suppress(Exception):
                held()


def _concern_failed(method: str, call: Callable[[], Any]) -> Any:
    """Apply the write ``call``, then raise what pymongo raises when its write concern failed:
    ``WriteConcernError`` for one write (but a write error, such as a duplicate key, which
    pymongo raises first, except for a findAndModify: it reads the write concern error first),
    a ``BulkWriteError`` with ``writeConcernErrors`` for a bulk write, counting what it
    inserted (and its write errors, if it met one)."""
    if method not in ("insert_many", "bulk_write"):
        if method.startswith("find_one_and_"):
            with contextlib.suppress(pymongo.errors.OperationFailure):
                call()
        else:
            call()
        raise pymongo.errors.WriteConcernError(
            CONCERN_ERROR["errmsg"], CONCERN_ERROR["code"], dict(CONCERN_ERROR)
        )
    try:
        result = call()
    except pymongo.errors.BulkWriteError as error:
        details = dict(error.details)
    else:
        inserted = getattr(result, "inserted_ids", None)
        details = {
            "writeErrors": [],
            "nInserted": getattr(result, "inserted_count", len(inserted or ())),
            "nUpserted": getattr(result, "upserted_count", 0),
            "nMatched": getattr(result, "matched_count", 0),
            "nModified": getattr(result, "modified_count", 0),
            "nRemoved": getattr(result, "deleted_count", 0),
            "upserted": [],
        }
    details["writeConcernErrors"] = [dict(CONCERN_ERROR)]
    raise pymongo.errors.BulkWriteError(details)


def concern_failed(error: BaseException) -> bool:
    """Whether ``error`` says a write was applied but its write concern failed: pymongo's
    error, or MongoEngine's ``OperationError`` raised from it (MongoEngine and the package wrap
    pymongo's once). Any other error, whatever it was raised while handling, is not: a fault
    of the write path (a ``KeyError``...) met after such an error is not retried away."""

    def reports(seen: BaseException | None) -> bool:
        if isinstance(seen, pymongo.errors.WriteConcernError):
            return True
        return isinstance(seen, pymongo.errors.BulkWriteError) and bool(
            seen.details.get("writeConcernErrors")
        )

    if reports(error):
        return True
    return isinstance(error, me.errors.OperationError) and (
        reports(error.__cause__) or reports(error.__context__)
    )


def _as_sent(call: Callable[[], Any]) -> Callable[[], Any]:
    """``call`` (a :func:`functools.partial`) with the documents it sends copied now: the driver
    encodes them when it sends, so a write in flight lands with what they held then, not with
    the application's edits of the same objects before its retry."""

    def sent(value: Any) -> Any:
        return copy.deepcopy(value) if isinstance(value, dict | list) else value

    if not isinstance(call, functools.partial):
        return call
    keywords = {name: sent(value) for name, value in call.keywords.items()}
    return functools.partial(call.func, *map(sent, call.args), **keywords)


@dataclass
class Outcome:
    """How the write and the application's retries ended."""

    returned: bool = False
    attempts: int = 0
    #: A ConnectionFailure, or a failed write concern, reached the application (it then
    #: retried).
    failed_over: bool = False
    ending: BaseException | None = None
    #: What the write returned: the Python documents to compare with the stored ones.
    documents: list[me.Document] = field(default_factory=list)

    @property
    def refused_as_duplicate(self) -> bool:
        """The application's retry was refused as a duplicate (not for retries running out):
        it takes its earlier attempt as applied (the spec's ``UnconfirmedWriteError``)."""
        return (
            self.failed_over
            and isinstance(self.ending, me.errors.NotUniqueError)
            and not isinstance(self.ending, RetriesExhaustedError)
        )

    def __str__(self) -> str:
        if self.returned:
            return f"returned after {self.attempts} attempt(s)"
        return f"ended with {type(self.ending).__name__} after {self.attempts} attempt(s)"


def retrying(call: Callable[[], list[Any]], between: Callable[[], None] | None = None) -> Outcome:
    """Run ``call`` (a write) as an application would: again after a ConnectionFailure, or
    after an error saying its write concern failed (the write may not last: it is written
    again), at most :data:`RETRIES` times (``between`` called before each retry); any other
    error ends it."""
    outcome = Outcome()
    while outcome.attempts <= RETRIES:
        outcome.attempts += 1
        try:
            outcome.documents = call()
        except (Exception, KeyboardInterrupt) as error:
            outcome.ending = error
            failed_over = isinstance(error, (pymongo.errors.ConnectionFailure, KeyboardInterrupt))
            if not (failed_over or concern_failed(error)):
                return outcome
            outcome.failed_over = True
            if between is not None:
                between()
            continue
        outcome.returned, outcome.ending = True, None
        return outcome
    return outcome


class StoredValues:
    """Check 9 of both harnesses: a value the write had stored when an attempt failed is the
    one stored at the end (a retry never writes another over it; the application may have
    read it meanwhile). ``read()`` gives the stored values by the label of their logical
    document, for those held once (a label held twice is check 2's or 5's), None where the
    value is missing; ``name`` names the value in the problems."""

    def __init__(self, faults: Faults, read: Callable[[], dict[Any, Any]], name: str) -> None:
        self.faults, self.read, self.name = faults, read, name
        self.before = read()
        #: When each attempt failed: the values the write had stored (changed, not missing).
        self.seen: list[dict[Any, Any]] = []

    def between(self) -> None:
        """Before the application's retry: read, not as a call of the write (nor as the call
        a late call awaits)."""
        self.faults.armed = False
        now = self.read()
        self.faults.armed = True
        self.seen.append(
            {
                label: value
                for label, value in now.items()
                if value is not None and self.before.get(label) != value
            }
        )

    def problems(self) -> list[str]:
        """After the write (faults disarmed): each value seen then and changed since."""
        now = self.read()
        return [
            f"9. {label!r} held {self.name}={value!r} after attempt {attempt}, now {now[label]!r}"
            for attempt, values in enumerate(self.seen, start=1)
            for label, value in values.items()
            if label in now and now[label] != value
        ]


def stamp_after_insert(self: me.Document, doc: Any, force_insert: bool, write_concern: Any) -> Any:
    """A model's own ``_save_create``: MongoEngine's, then an update of the document written
    (so what is stored is no version the package sent)."""
    written = me.Document._save_create(self, doc, force_insert, write_concern)
    self._get_collection().update_one({"_id": doc["_id"]}, {"$set": {"stamp": 1}})
    return written
