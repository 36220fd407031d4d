"""Counter-based ids leased in blocks: the :class:`Sequence` allocator and :class:`SequenceField`.

**Guarantee: a value is never handed out twice; values can be skipped (gaps).** Every value
comes from a block reserved by one atomic ``findAndModify`` ``$inc`` on a counter document;
values of a block not used when the process ends, forks or reconnects are lost, never reused.

The counter document is MongoEngine's own (``{_id: "<sequence_name>.<field>", next: N}`` in
``mongoengine.counters``, ``N`` the highest value handed out or leased), so a model can switch
from ``mongoengine.fields.SequenceField`` to :class:`SequenceField` on a live database without
renumbering. With ``shards=K`` the value space is split into K ranges, each owned by a counter
document that stores its bounds (``{_id: "<name>#<k>", next, low, high, sequence}``). A scoped
sequence (one counter per value of another field) adds ``@<scope value>`` to the ``_id`` and
stores ``sequence`` and ``scope``.

Why blocks: one counter round trip costs about 31 us on mongomock and a network round trip plus
a majority write on a real server; handing a value out of a leased block costs about 0.05 us.
The hand-out takes no lock: a block is a ``range`` iterator, whose ``__next__`` is atomic under
the GIL, so only a refill takes the lock, and never across the round trip (a lock held across
it made throughput fall as threads were added: 5.5M ids/s at 1 thread, 4.2M at 8, against
22M flat without).
"""

from __future__ import annotations

import itertools
import math
import operator
import os
import random
import threading
import time
import warnings
import weakref
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from dataclasses import field as dataclass_field
from itertools import islice
from typing import TYPE_CHECKING, Any, Final, NamedTuple, TypeVar, cast, overload

import pymongo.errors
from mongoengine.connection import ConnectionFailure as AliasNotConnected
from mongoengine.connection import get_db
from mongoengine.errors import ValidationError
from pymongo import ReturnDocument, WriteConcern
from pymongo.read_concern import ReadConcern
from pymongo.read_preferences import ReadPreference

from .. import resets
from .._checks import (
    check_callable,
    check_collection_name,
    check_int,
    check_room,
    integer_like,
    is_int,
    suggest_keywords,
    user_stacklevel,
)
from ..constants import COUNTERS_COLLECTION
from ..errors import (
    CorruptedCounterError,
    ExplicitValueError,
    IdSpaceExhaustedError,
    InvalidIdError,
    RetriesExhaustedError,
    invalid_id,
)
from ..resets import NotCopied, PerClient, on_reset
from ..write import seam
from ..write.field import GeneratedField, Write

if TYPE_CHECKING:
    from mongoengine.base import BaseDocument
    from pymongo.collection import Collection
    from pymongo.database import Database
    from typing_extensions import Self

# -- constants ----------------------------------------------------------------------------------

#: MongoEngine's counter collection (``mongoengine.fields.SequenceField.COLLECTION_NAME``).
DEFAULT_COLLECTION: Final = COUNTERS_COLLECTION
#: The largest value a BSON int64 holds: the end of the value space without ``digits``.
INT64_MAX: Final = (1 << 63) - 1
#: ``shards`` above this would make one counter document per few values; the articles' layout
#: is 1,000 shards of 10**9 values.
MAX_SHARDS: Final = 1_000_000
#: Separators of the counter ``_id``: ``<sequence>@<scope>#<shard>``.
#: The sequences a field keeps per process (one per connection, database and scope): past it,
#: the one kept longest goes.
MAX_SEQUENCES: Final = 4096

SCOPE_SEPARATOR: Final = "@"
SHARD_SEPARATOR: Final = "#"
#: Write concern of counter updates: an update acknowledged only by a primary that then fails
#: over can be rolled back, and the same block leased again by someone else.
MAJORITY: Final = WriteConcern("majority")
#: Retries of a lease after a network error. pymongo already retries a findAndModify once
#: (retryable writes, applied exactly once); these come on top, each may leave a gap.
DEFAULT_RETRIES: Final = 3
#: First back-off after a network error; doubled per retry (0.05 + 0.1 + 0.2 s at most).
RETRY_BACKOFF_SECONDS: Final = 0.05
#: The most retries allowed: at 10 the back-offs add up to 51 s (0.05 * (2**10 - 1)), beyond
#: which a caller waits on a server that is not coming back; at 64 the wait would not fit a float.
MAX_RETRIES: Final = 10
#: Attempts of the slow path (create, move up, lease the remainder) before giving up: each
#: attempt fails only when another client changed the document in between.
_MAX_CONTENDED_ATTEMPTS: Final = 100

_T = TypeVar("_T")
_DOUBLE: Final = {"$type": "double"}
_getpid = os.getpid

#: Errors after which a lease is retried: the request may or may not have been applied, so the
#: retry may skip a block (a gap) but takes its values only from its own reply (never a reuse).
RETRYABLE_ERRORS: Final = (pymongo.errors.ConnectionFailure, pymongo.errors.WTimeoutError)


# -- errors -------------------------------------------------------------------------------------


def _corrupted(document_id: object, collection: str, problem: str) -> CorruptedCounterError:
    return CorruptedCounterError(
        f"counter document {document_id!r} in {collection!r} is corrupted: {problem}; "
        "fix or delete it by hand once you know which values it handed out "
        "(`mongoengine-ids counters list` shows the counters; `counters set --force` rewrites "
        "only its 'next')"
    )


def _sharded(name: str, shards: int, what: str) -> ValueError:
    return ValueError(
        f"sequence {name!r} has {shards} shards, each with its own counter: it has no single "
        f"{what} (mongoengine-ids counters show lists them)"
    )


# -- the value space ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Space:
    """The values a sequence hands out, split into shards.

    Attributes:
        start: the first value.
        high: the last value (``10**digits - 1``, or :data:`INT64_MAX`).
        shards: how many disjoint ranges, each owned by one counter document.
    """

    start: int
    high: int
    shards: int

    @classmethod
    def build(cls, *, start: int, digits: int | None, shards: int) -> Space:
        """Check the options and build the space.

        Raises:
            TypeError: an option is not an int.
            ValueError: ``start`` is negative or beyond the space, ``digits`` is not 1-18,
                ``shards`` is not 1 to :data:`MAX_SHARDS` or exceeds the number of values.
        """
        for name, value in (("start", start), ("shards", shards), ("digits", digits)):
            if value is not None and (not isinstance(value, int) or isinstance(value, bool)):
                raise TypeError(f"{name} must be an int, not {value!r}")
        if digits is not None and not 1 <= digits <= 18:
            # 10**19 - 1 exceeds a BSON int64.
            raise ValueError(f"digits={digits!r} must be between 1 and 18 (a BSON int64)")
        high = INT64_MAX if digits is None else 10**digits - 1
        if not 0 <= start <= high:
            raise ValueError(f"start={start!r} must be between 0 and {high!r} (digits={digits!r})")
        if not 1 <= shards <= MAX_SHARDS:
            raise ValueError(f"shards={shards!r} must be between 1 and {MAX_SHARDS:,}")
        if shards > high - start + 1:
            raise ValueError(
                f"shards={shards!r} exceeds the {high - start + 1!r} values from start={start!r} "
                f"to {high!r}"
            )
        return cls(start=start, high=high, shards=shards)

    def bounds(self, shard: int) -> tuple[int, int]:
        """The first and last value of ``shard`` (0-based); shards split the space evenly.

        With ``start=0, digits=12, shards=1000``, shard 499 owns 499,000,000,000 to
        499,999,999,999, the articles' example.
        """
        span = self.high - self.start + 1
        low = self.start + shard * span // self.shards
        next_low = self.start + (shard + 1) * span // self.shards
        return low, next_low - 1

    def shard_of(self, value: int) -> int | None:
        """The shard that owns ``value``, or None outside the space."""
        if not self.start <= value <= self.high:
            return None
        span = self.high - self.start + 1
        shard = (value - self.start) * self.shards // span
        # Integer division can land one shard off at a boundary: settle it with the bounds.
        while value < self.bounds(shard)[0]:
            shard -= 1
        while value > self.bounds(shard)[1]:
            shard += 1
        return shard


# -- counter documents --------------------------------------------------------------------------


@dataclass(frozen=True)
class _Counter:
    document_id: str
    low: int
    high: int
    bounded: bool  # stores low/high (sharded counters); the drop-in shape does not
    extra: Mapping[str, Any]


def counter_id(name: str, *, scope: str | None = None, shard: int | None = None) -> str:
    """The ``_id`` of a counter document: ``name``, ``name@scope``, ``name#3``, ``name@scope#3``."""
    document_id = name if scope is None else f"{name}{SCOPE_SEPARATOR}{scope}"
    return document_id if shard is None else f"{document_id}{SHARD_SEPARATOR}{shard}"


#: The highest integer a double holds exactly.
_EXACT_DOUBLE: Final = 2**53


def stored_integer(value: object) -> int | None:
    """A stored number (a counter's ``next``, a number a document holds) as an int: an int, or
    a double holding an integer exactly (the mongo shell writes numbers as doubles: a counter
    set there, as MongoEngine's field takes it); None for anything else."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, float) and value.is_integer() and abs(value) <= _EXACT_DOUBLE:
        return int(value)
    return None


def _check_next(document: Mapping[str, Any], collection: str) -> int:
    value = stored_integer(document.get("next"))
    if value is None:
        raise _corrupted(
            document.get("_id"),
            collection,
            f"'next' is {document.get('next')!r}; expected an integer (the highest value "
            "handed out)",
        )
    return value


class CounterStore:
    """The database side of one sequence: leases blocks from its counter documents.

    Thread-safe; holds no lock across a round trip. Every write uses the collection's write
    concern (``majority`` unless configured) and primary reads.
    """

    def __init__(
        self,
        collection: Collection[Any],
        name: str,
        space: Space,
        *,
        scope: tuple[str, Any] | None = None,
        retries: int = DEFAULT_RETRIES,
        rng: random.Random | None = None,
        sleep: Callable[[float], None] = time.sleep,
        holds_values: bool = True,
    ) -> None:
        """Bind the store to ``collection``.

        Args:
            collection: the counter collection (with the write concern to use).
            name: the sequence name, e.g. ``"invoice.id"``.
            space: the values and their shards.
            scope: ``(text, stored value)`` of a scoped sequence's scope, or None.
            retries: retries of a round trip after a network error.
            rng: picks a shard per lease (injected for tests).
            sleep: waits between retries (injected for tests).
            holds_values: whether the caller may hold leased values it has not handed out
                yet (blocks): then a counter deleted meanwhile is recreated after them (see
                :meth:`create`). False for one value per lease, as MongoEngine's field: a
                deleted counter starts again from its first value, as with MongoEngine.
        """
        self._holds_values = holds_values
        self.collection = collection
        self.name = name
        self.space = space
        self._scope = scope
        self._retries = retries
        # Only a sharded sequence picks (a random.Random holds 2.5 KB, kept per scope).
        self._rng = rng if rng is not None or space.shards == 1 else random.Random()
        self._sleep = sleep
        self._lock = resets.ProcessLock()
        self._live: list[int] = list(range(space.shards))
        #: Counters whose layout was checked (see :meth:`_check_layout`).
        self._layout_checked: set[str] = set()
        self._counters = [self._make_counter(shard) for shard in range(min(space.shards, 1))]

    def _make_counter(self, shard: int) -> _Counter:
        scope_text = None if self._scope is None else self._scope[0]
        extra: dict[str, Any] = {}
        if self._scope is not None:
            extra.update(sequence=self.name, scope=self._scope[1])
        if self.space.shards == 1:
            return _Counter(
                counter_id(self.name, scope=scope_text),
                self.space.start,
                self.space.high,
                False,
                extra,
            )
        low, high = self.space.bounds(shard)
        extra.update(sequence=self.name, shard=shard)
        return _Counter(
            counter_id(self.name, scope=scope_text, shard=shard), low, high, True, extra
        )

    def counter(self, shard: int) -> _Counter:
        """The counter document description of ``shard``."""
        if self.space.shards == 1:
            return self._counters[0]
        return self._make_counter(shard)

    @property
    def collection_name(self) -> str:
        """``database.collection`` of the counters, for messages."""
        return str(self.collection.full_name)

    # -- round trips with retries ---------------------------------------------------------------

    def _call(self, operation: Callable[[], _T]) -> _T:
        attempt = 0
        while True:
            try:
                return operation()
            except RETRYABLE_ERRORS:
                if attempt >= self._retries:
                    raise
            except pymongo.errors.OperationFailure as error:
                if attempt >= self._retries or not error.has_error_label("RetryableWriteError"):
                    raise
            self._sleep(RETRY_BACKOFF_SECONDS * (1 << attempt))
            attempt += 1

    # -- leasing --------------------------------------------------------------------------------

    def lease(self, count: int, *, held: bool | None = None) -> range:
        """Reserve up to ``count`` consecutive values with (usually) one round trip.

        The block is shorter than ``count`` only at the end of a shard or of the space.
        ``held``: the caller keeps values of it to hand out later (default: the store's
        ``holds_values``), which a counter deleted meanwhile is recreated after.

        Raises:
            IdSpaceExhaustedError: every value of the space has been handed out.
            CorruptedCounterError: a counter document is not what the sequence wrote.
            pymongo.errors.PyMongoError: the database failed after every retry.
        """
        if self.space.shards == 1:
            block = self._lease_from(self._counters[0], count, held)
            if block is None:
                raise self._exhausted()
            return block
        while True:
            with self._lock:
                if not self._live:
                    raise self._exhausted()
                shard = cast(random.Random, self._rng).choice(self._live)
                if shard not in self._live:
                    # An injected rng is checked: a shard outside the space has no bounds.
                    raise ValueError(
                        f"rng.choice() returned {shard!r}: expected one of the live shards "
                        f"{self._live!r}"
                    )
            block = self._lease_from(self._make_counter(shard), count, held)
            if block is not None:
                return block
            with self._lock:
                if shard in self._live:
                    self._live.remove(shard)

    def forget_used_up(self) -> None:
        """Take every shard as live again (its counter was set, or dropped): the next lease
        from one used up finds it so again."""
        with self._lock:
            self._live = list(range(self.space.shards))

    def _exhausted(self) -> IdSpaceExhaustedError:
        where = (
            f"its counter {self._counters[0].document_id!r}"
            if self.space.shards == 1
            else f"all {self.space.shards} shard counters {self._make_counter(0).document_id}..."
        )
        return IdSpaceExhaustedError(
            f"sequence {self.name!r} has handed out every value from {self.space.start!r} to "
            f"{self.space.high!r} ({where} in {self.collection_name!r}); raise digits or add a "
            "new sequence"
        )

    def _lease_from(self, counter: _Counter, count: int, held: bool | None) -> range | None:
        """A block of up to ``count`` values from ``counter``; None when it is exhausted."""
        document_id = counter.document_id
        fast_filter: dict[str, Any] = {
            "_id": document_id,
            # A double passes the range test: left to the slow path, which makes it an integer
            # (or reports it), instead of incrementing it.
            "next": {"$gte": counter.low - 1, "$lte": counter.high - count, "$not": _DOUBLE},
        }
        if counter.bounded:
            fast_filter.update(low=counter.low, high=counter.high)
        collection = self.collection
        for _ in range(_MAX_CONTENDED_ATTEMPTS):
            # Read before the lease: every block recorded by then was leased before it.
            floor = leased_floor(collection, document_id)
            # The common path, one round trip: the filter makes the update a no-op (None) on a
            # missing, exhausted, nearly exhausted or corrupted counter, so the counter never
            # moves past the end of its range and an int64 never overflows.
            document = self._call(
                lambda: collection.find_one_and_update(
                    fast_filter, {"$inc": {"next": count}}, return_document=ReturnDocument.AFTER
                )
            )
            if document is not None:
                after = _check_next(document, self.collection_name)
                block = self._leased(document_id, range(after - count + 1, after + 1), held, floor)
                if block is not None:
                    return block
                continue  # the counter was moved down by hand: moved back up, lease again
            block = self._slow_path(counter, count, held)
            if block is not None:
                return block if len(block) else None
        raise RuntimeError(
            f"counter {document_id!r} in {self.collection_name!r} changed under every one of "
            f"{_MAX_CONTENDED_ATTEMPTS} attempts to lease from it"
        )

    def _slow_path(self, counter: _Counter, count: int, held: bool | None) -> range | None:
        """Create, move up or lease the remainder of ``counter``.

        Returns a block, an empty range when the counter is exhausted, or None to try again.
        """
        collection = self.collection
        document_id = counter.document_id
        floor = leased_floor(collection, document_id)  # before the lease (see _leased)
        document = self._call(lambda: collection.find_one({"_id": document_id}))
        if document is None:
            self.create(counter)
            return None
        current = self._validate(document, counter)
        if type(document["next"]) is float:
            # Set in the mongo shell: made an integer, only if nobody moved it meanwhile.
            self._call(
                lambda: collection.update_one(
                    {"_id": document_id, "next": current}, {"$set": {"next": current}}
                )
            )
            return None
        if current >= counter.high:
            return range(0)
        if current < counter.low - 1:
            # The drop-in counter below ``start`` (made by MongoEngine's field, or start raised):
            # move it up, only if nobody moved it meanwhile.
            self._call(
                lambda: collection.update_one(
                    {"_id": document_id, "next": current}, {"$set": {"next": counter.low - 1}}
                )
            )
            return None
        # Fewer than ``count`` values left: take exactly the rest, if nobody took it meanwhile.
        remaining = min(count, counter.high - current)
        leased = self._call(
            lambda: collection.find_one_and_update(
                {"_id": document_id, "next": current},
                {"$inc": {"next": remaining}},
                return_document=ReturnDocument.AFTER,
            )
        )
        if leased is None:
            return None
        after = _check_next(leased, self.collection_name)
        return self._leased(document_id, range(after - remaining + 1, after + 1), held, floor)

    def _leased(
        self, document_id: str, block: range, held: bool | None, floor: int | None
    ) -> range | None:
        """Record ``block``, just leased from counter ``document_id``; returns it. ``held``:
        the caller may hold values of it (default: the store's ``holds_values``).

        ``floor``: :func:`leased_floor`, read before the lease. Every block recorded by then was
        leased before this one, which is above them unless the counter was moved down by hand
        meanwhile (``set_next_value`` forgets what was leased): then None, the block is dropped
        and the counter moved back past ``floor``, with a warning, so that no value is handed
        out twice. (A block another sequence of this process leases at the same time is
        recorded after that read: never taken for a move.)"""
        if floor is not None and block[0] <= floor:
            collection = self.collection
            self._call(
                lambda: collection.update_one({"_id": document_id}, {"$max": {"next": floor}})
            )
            warnings.warn(  # after the repair: with warnings as errors, it is made all the same
                f"counter {document_id!r} in {self.collection_name!r} gave {block[0]}, but this "
                f"process leased values of it up to {floor}: it was moved down without "
                "set_next_value(). Moved back past them, so that none is handed out twice.",
                RuntimeWarning,
                stacklevel=user_stacklevel(),
            )
            return None
        held = self._holds_values if held is None else held
        client = self.collection.database.client
        key = (self.collection_name, document_id)
        with _leased_lock:
            highest, ever_held = _leased_to.get(client, key) or (block[-1], False)
            _leased_to.set(client, key, (max(block[-1], highest), held or ever_held))
        return block

    def create(self, counter: _Counter) -> None:
        """Insert ``counter``'s document if it does not exist (``next`` = its first value - 1).

        A counter this process leased from before (through any sequence) was deleted since
        (its database dropped while this process held values of it): it is recreated at the
        highest value leased, with a warning, so that no value is handed out twice by this
        process. (Recreated by another writer first, it cannot be told from a counter that
        never went away.)

        Creating before the first ``$inc`` (instead of ``$setOnInsert``, which a real server
        rejects together with ``$inc`` on the same field) works the same on every server and on
        mongomock; with the look for counters of another layout (:meth:`_check_layout`), it
        costs three extra round trips once per counter.

        Raises:
            CorruptedCounterError: the sequence has counters of another layout.
        """
        document_id = counter.document_id
        self._check_layout(counter)
        leased = leased_floor(self.collection, document_id)
        start = counter.low - 1 if leased is None else max(leased, counter.low - 1)
        initial: dict[str, Any] = {"_id": document_id, "next": start}
        if counter.bounded:
            initial.update(low=counter.low, high=counter.high)
        initial.update(counter.extra)
        collection = self.collection
        try:
            self._call(lambda: collection.insert_one(initial))
        except pymongo.errors.DuplicateKeyError:
            return  # made by another client, or by our own retried insert: either is fine
        if start > counter.low - 1:  # past values this process leased (or set it to)
            warnings.warn(
                f"counter {document_id!r} in {self.collection_name!r} was deleted while this "
                f"process held values of it up to {leased}: recreated at {start}, so that none "
                "is handed out twice. If it was dropped on purpose (a database dropped between "
                "tests), call mongoengine_ids.resets.reset_process_state() after dropping it, "
                "and the counter starts again from its first value (the package's pytest "
                "fixtures do).",
                RuntimeWarning,
                stacklevel=user_stacklevel(),
            )

    def _check_layout(self, counter: _Counter, *, scoping: bool = True) -> None:
        """Refuse to create ``counter`` beside counters of the same sequence (and scope) laid
        out otherwise: its other layout's counter (``shards`` changed from or to 1), or a
        shard this configuration does not have or bounds it does not give (``shards``,
        ``start`` or ``digits`` changed). Its values would be handed out a second time.

        Looked up once per counter and store: a layout changes with a restart. With
        ``scoping``, also a counter of the sequence with scope when this one has none, or the
        reverse (:meth:`_other_scoping`).

        Raises:
            CorruptedCounterError: such a counter exists.
        """
        if counter.document_id in self._layout_checked:
            return
        scope = self._scope
        plain = counter_id(self.name, scope=None if scope is None else scope[0])
        # Its shards' _ids are plain + "#<n>": a range of the _id index, as plain is one key
        # ("$" follows "#"). Looked up by their fields alone, which no index holds, each new
        # scope read every counter document; the fields keep out another scope's counter in
        # the range (the scope "x#1" beside "x").
        shards = {
            "_id": {"$gt": plain + SHARD_SEPARATOR, "$lt": plain + chr(ord(SHARD_SEPARATOR) + 1)},
            "sequence": self.name,
            "shard": {"$exists": True},
            "scope": {"$exists": False} if scope is None else scope[1],
        }
        clauses = [{"_id": plain}, shards, *(self._other_scoping() if scoping else [])]
        collection = self.collection
        found = self._call(lambda: list(collection.find({"$or": clauses})))
        for other in found:
            shard = other.get("shard")
            if other["_id"] == counter.document_id:
                continue
            if scoping and self._of_other_scoping(other):
                raise self._scoping_changed(other["_id"])
            if self.space.shards == 1:
                fits = other["_id"] == plain
            else:
                fits = (
                    isinstance(shard, int)
                    and 0 <= shard < self.space.shards
                    and (other.get("low"), other.get("high")) == self.space.bounds(shard)
                )
            if not fits:
                raise _corrupted(
                    other["_id"],
                    self.collection_name,
                    f"it belongs to sequence {self.name!r} laid out otherwise than this one "
                    f"(shards={self.space.shards}, values {self.space.start}.."
                    f"{self.space.high}), whose counter {counter.document_id!r} would hand out "
                    "its values again: start, digits and shards cannot change on a live sequence",
                )
        self._layout_checked.add(counter.document_id)

    # A counter of a scoped sequence beside the counter of the same sequence without scope, or
    # the reverse, is refused (probe BK-1: scope= added to a live sequence numbered each scope
    # from 1 again, beside the numbers its documents held; removed, the shared counter started
    # again beside every scope's). Looked for in the same read as the layout (review W).

    def _other_scoping(self) -> list[dict[str, Any]]:
        """Filters (each by the ``_id`` index) for the counters of this sequence with scope if
        it has none, or without."""
        name = self.name
        if self._scope is None:  # any "name@<scope>" of this sequence: a range of the _id index
            after = chr(ord(SCOPE_SEPARATOR) + 1)
            ids = {"$gte": name + SCOPE_SEPARATOR, "$lt": name + after}  # (the scope "" too)
            return [{"_id": ids, "sequence": name, "scope": {"$exists": True}}]
        # "name", or its shards "name#<n>"
        ids = {"$gt": name + SHARD_SEPARATOR, "$lt": name + chr(ord(SHARD_SEPARATOR) + 1)}
        shard = {"_id": ids, "sequence": name, "shard": {"$exists": True}}
        return [{"_id": name}, {**shard, "scope": {"$exists": False}}]

    def _of_other_scoping(self, document: Mapping[str, Any]) -> bool:
        """Whether ``document``, found by :meth:`_other_scoping` among others, is such one."""
        if self._scope is None:
            return "scope" in document and document.get("sequence") == self.name
        return document["_id"] == self.name or (
            document.get("sequence") == self.name
            and "shard" in document
            and "scope" not in document
        )

    def _scoping_changed(self, document_id: object) -> CorruptedCounterError:
        name = self.name
        has, lacks = ("a", "no") if self._scope is None else ("no", "a")
        return _corrupted(
            document_id,
            self.collection_name,
            f"it belongs to sequence {name!r} with {has} scope=, and this one has {lacks} "
            "scope=: scope= cannot be added to or removed from a live sequence (each scope "
            "would be numbered again from the start beside the numbers its documents hold, or "
            "the shared counter beside every scope's). To number per scope from here, set each "
            "scope's counter past the highest number its documents hold "
            "(mongoengine_ids.sequence.admin.set_next_value(..., scope=...)), then delete the "
            "counters of the old layout",
        )

    def _validate(self, document: Mapping[str, Any], counter: _Counter) -> int:
        current = _check_next(document, self.collection_name)
        if not counter.bounded:
            return current
        document_id = counter.document_id
        for key in ("low", "high"):
            bound = document.get(key)
            if not isinstance(bound, int) or isinstance(bound, bool):
                raise _corrupted(
                    document_id,
                    self.collection_name,
                    f"bound {key!r} is {bound!r}; expected an integer",
                )
        low, high = document["low"], document["high"]
        if (low, high) != (counter.low, counter.high):
            raise _corrupted(
                document_id,
                self.collection_name,
                f"it owns {low!r}..{high!r} but the sequence expects {counter.low!r}.."
                f"{counter.high!r}: start, digits and shards cannot change on a live sequence",
            )
        if not low - 1 <= current <= high:
            raise _corrupted(
                document_id,
                self.collection_name,
                f"'next' is {current!r}, outside its bounds {low - 1!r}..{high!r}",
            )
        return current

    # -- MongoEngine's field-level helpers -------------------------------------------------------

    def _single(self, what: str) -> _Counter:
        if self.space.shards != 1:
            raise _sharded(self.name, self.space.shards, what)
        return self._counters[0]

    def peek(self) -> int:
        """The value the counter would lease next, without leasing it (one read).

        Raises:
            ValueError: the sequence is sharded.
            IdSpaceExhaustedError: every value has been handed out.
            CorruptedCounterError: the counter document is not what the sequence wrote.
        """
        counter = self._single("next value")
        collection = self.collection
        document = self._call(lambda: collection.find_one({"_id": counter.document_id}))
        if document is None:
            return counter.low
        current = self._validate(document, counter)
        if current >= counter.high:
            raise self._exhausted()
        # A counter below ``start - 1`` is moved up by the next lease.
        return max(current + 1, counter.low)

    def set_counter(self, value: int) -> None:
        """Store ``next = value`` (the next lease starts at ``value + 1``), creating the counter
        if needed: MongoEngine's ``set_next_value``. Unconditional, down as well as up.

        Raises:
            ValueError: the sequence is sharded.
        """
        counter = self._single("counter to set")
        # Set on purpose: a scope's counter set while the counter without scope is still there
        # is the way from one to the other (sequence.md, "Sharded ranges").
        self._check_layout(counter, scoping=False)
        update: dict[str, Any] = {"$set": {"next": value}}
        if counter.extra:
            update["$setOnInsert"] = dict(counter.extra)
        collection = self.collection
        self._call(lambda: collection.update_one({"_id": counter.document_id}, update, upsert=True))
        set_leased_floor(collection, counter.document_id, value)  # set on purpose

    # -- explicit values ------------------------------------------------------------------------

    def raise_to(self, value: int) -> None:
        """Move the counter that owns ``value`` to at least ``value`` (``$max``).

        A value outside the space is owned by no counter and can never be generated: ignored.
        """
        shard = self.space.shard_of(value)
        if shard is None:
            return
        counter = self.counter(shard)
        collection = self.collection
        if counter.bounded:
            self.create(counter)
            self._call(
                lambda: collection.update_one(
                    {"_id": counter.document_id}, {"$max": {"next": value}}
                )
            )
            return
        self._check_layout(counter)
        # Upsert: {_id} equality upserts are retried by the server itself when they race. A
        # counter deleted while this process held values of it is made again after them (as
        # create() makes it); an existing one is past them already.
        floor = leased_floor(collection, counter.document_id)
        update: dict[str, Any] = {"$max": {"next": value if floor is None else max(value, floor)}}
        if counter.extra:
            update["$setOnInsert"] = dict(counter.extra)
        self._call(lambda: collection.update_one({"_id": counter.document_id}, update, upsert=True))


# -- leased blocks ------------------------------------------------------------------------------


class _Flight:
    """One lease in progress; the others needing values wait on it, not on the lock."""

    __slots__ = ("done", "epoch", "error", "prefetch")

    def __init__(self, epoch: int, *, prefetch: bool = False) -> None:
        self.done = threading.Event()
        self.epoch = epoch
        self.error: BaseException | None = None
        self.prefetch = prefetch

    def shared_error(self) -> BaseException | None:
        """The error the threads waiting on this lease raise: the database's, once it failed
        after its retries (each waiting thread leasing again would make an outage fail them
        one after another, review N). None if they lease again: after a prefetch (a
        background lease, which no one waits on by choice) or an interrupt of the leading
        thread (a ``KeyboardInterrupt``, a gevent ``Timeout``: that thread's own, probe AW)."""
        if self.prefetch or not isinstance(self.error, Exception):
            return None
        return self.error


_EMPTY: Final = range(0)
#: For each counter document this process leased from, by client (dropped
#: with it: the same names on another server, or on a new connection, are other counters) and
#: (``db.collection``, ``_id``): the highest value leased through any sequence, and whether a
#: sequence held values of it. Such a counter deleted since is never recreated below that value.
_leased_to: PerClient[tuple[str, str], tuple[int, bool]] = PerClient()
_leased_lock = resets.ProcessLock()  # one entry read, then updated


def _runs(values: list[int]) -> list[range]:
    """``values`` as ranges of consecutive values, in order."""
    runs: list[range] = []
    for value in values:
        if runs and runs[-1].stop == value:
            runs[-1] = range(runs[-1].start, value + 1)
        else:
            runs.append(range(value, value + 1))
    return runs


def leased_floor(collection: Collection[Any], document_id: str) -> int | None:
    """The highest value this process leased from counter ``document_id`` in ``collection``
    while a sequence held values of it (None if none did): that counter, deleted since, is
    never made again below it. (With one value per lease only, it starts again from its first
    value, as MongoEngine's field does.)"""
    key = (str(collection.full_name), document_id)
    highest, held = _leased_to.get(collection.database.client, key) or (None, False)
    return highest if held else None


def set_leased_floor(
    collection: Collection[Any], document_id: str, value: int, *, down: bool = True
) -> None:
    """Counter ``document_id`` in ``collection`` was set to ``value`` (its ``next``) on purpose:
    if it is deleted, it is made again from there (:func:`leased_floor`). With ``down`` (the set
    may have moved it down, on purpose), not from a higher value this process leased before."""
    client, key = collection.database.client, (str(collection.full_name), document_id)
    with _leased_lock:
        found = _leased_to.get(client, key)
        if found is not None:  # else no sequence of the process held values of it
            highest, held = found
            _leased_to.set(client, key, (value if down else max(value, highest), held))


def _same_database(one: Database[Any], other: Database[Any]) -> bool:
    return one.client is other.client and one.name == other.name


_live_sequences: weakref.WeakSet[Sequence] = weakref.WeakSet()
_live_lock = resets.ProcessLock()


class Sequence(NotCopied):
    """A counter in the database, handed out from leased blocks; usable without a model.

    >>> invoices = Sequence("invoice", database=db, batch_size=100)   # doctest: +SKIP
    >>> invoices.next(), invoices.next()                              # doctest: +SKIP
    (1, 2)

    **Values are never handed out twice; unused values of leased blocks are lost (gaps)** when
    the process ends, forks (the child drops the parent's blocks) or the object is discarded.
    Safe under threads: the hand-out takes no lock; a refill takes one briefly, and concurrent
    callers wait for a single lease in flight instead of each making their own.

    Args:
        name: the counter's ``_id`` (MongoEngine's is ``"<collection>.<field>"``).
        database: a pymongo ``Database``, or a MongoEngine alias (blocks leased on a previous
            connection of the alias are dropped when it reconnects).
        collection: the counter collection.
        batch_size: values leased per round trip (1: MongoEngine's behaviour).
        prefetch: lease the next block in a background thread when the current one is half
            used, so that no caller waits for a round trip (at most two blocks are lost at exit).
        start: the first value of a new counter.
        digits: the values have at most this many digits; beyond ``10**digits - 1`` the
            sequence raises :class:`~mongoengine_ids.errors.IdSpaceExhaustedError`.
        shards: split the values into this many ranges, each with its own counter document; a
            lease picks one at random.
        scope: the value of a scoped sequence's scope (its own counter), or None.
        write_concern: of counter updates; ``majority`` by default.
        retries: retries of a lease after a network error (each may leave a gap).
        rng: picks shards (injected for tests).
        sleep: waits between retries (injected for tests).

    Raises:
        TypeError: an option has the wrong type.
        ValueError: an option is out of range (the message names it and what is accepted).
    """

    # (Probe of session 39: a copy.copy() was allowed, outside the fork reset: in a forked
    # child it went on from the parent's leased block, which the parent also handed out.)
    _COPIED = (
        "the copy would hand out the values of the blocks the original leased, also after a "
        "fork (outside the fork reset), where the original hands them out too. Share the one "
        "Sequence; in another process, make one there"
    )

    @suggest_keywords
    def __init__(
        self,
        name: str,
        *,
        database: Database[Any] | str,
        collection: str = DEFAULT_COLLECTION,
        batch_size: int = 1,
        prefetch: bool = False,
        start: int = 1,
        digits: int | None = None,
        shards: int = 1,
        scope: object = None,
        write_concern: WriteConcern | None = MAJORITY,
        retries: int = DEFAULT_RETRIES,
        rng: random.Random | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        _check_name("name", name)
        _check_options(batch_size=batch_size, prefetch=prefetch, retries=retries)
        check_collection_name("collection", collection)
        check_database(database)
        if rng is not None and not callable(getattr(rng, "choice", None)):
            raise TypeError(f"rng must be a random.Random (with a choice method), not {rng!r}")
        check_callable("sleep", sleep, "a callable taking seconds, like time.sleep")
        _check_write_concern(write_concern)
        self.name = name
        self.space = Space.build(start=start, digits=digits, shards=shards)
        self.batch_size = batch_size
        self.prefetch = prefetch
        self.collection_name = collection
        self.write_concern = write_concern
        self._scope = None if scope is None else (str(scope), scope)
        self._retries = retries
        self._rng = rng
        self._sleep = sleep
        if isinstance(database, str):
            alias = database
            self._source: Callable[[], Database[Any]] | None = lambda: get_db(alias)
            self._database: Database[Any] | None = None
        else:
            self._source = None
            self._database = database
        self._store: CounterStore | None = None
        self._lock = resets.ProcessLock()
        #: Explicit values being raised (see :meth:`raise_to`), kept while a raise or a lease
        #: is open: a block leased meanwhile is dropped if it holds one. A lease is open from
        #: its start until its block is used or queued. Their own lock, taken after ``_lock``
        #: when both are: a lease starting (a prefetch) must not wait for the hand-out's.
        self._raised_lock = resets.ProcessLock()
        self._epoch = 0
        self._reset_state()
        with _live_lock:
            _live_sequences.add(self)

    def _reset_state(self) -> None:
        """Forget every leased block (also run in a forked child, where no thread holds a lock:
        see :class:`~mongoengine_ids.resets.ProcessLock`)."""
        self._epoch += 1
        self._block = _EMPTY
        self._iterator: Iterator[int] = iter(_EMPTY)
        self._next_value: Callable[[], int] = self._iterator.__next__
        self._trigger: int | None = None
        self._ready: deque[range] = deque()
        self._flight: _Flight | None = None
        self._raised: list[int] = []
        self._open = 0  # leases and raises open
        #: Raises done (under ``_lock``): values taken out of the blocks before one may hold
        #: the value raised, and are not put back (see :meth:`next_values`).
        self._raises_done = 0

    # -- the store, per connection --------------------------------------------------------------

    def store(self) -> CounterStore:
        """The counter store on the current connection and database (a reconnect drops the leased
        blocks)."""
        store = self._store
        if self._source is not None:
            database = self._source()
            # MongoEngine shares one client between aliases of the same settings: a reconnect
            # of the alias to another database may keep the client.
            if store is None or not _same_database(store.collection.database, database):
                self.discard()
                store = self._store = self._make_store(database)
            return store
        if store is None:
            assert self._database is not None
            store = self._store = self._make_store(self._database)
        return store

    def _make_store(self, database: Database[Any]) -> CounterStore:
        # Read on the primary, what it has applied (see seam.primary); leases acknowledged
        # (write_concern=None on a w=0 connection: w=1, as a lease needs its reply).
        options: dict[str, Any] = {
            "read_preference": ReadPreference.PRIMARY,
            "read_concern": ReadConcern("local"),
        }
        if self.write_concern is not None:
            options["write_concern"] = self.write_concern
        return CounterStore(
            seam.acknowledging(database.get_collection(self.collection_name, **options)),
            self.name,
            self.space,
            scope=self._scope,
            retries=self._retries,
            rng=self._rng,
            sleep=self._sleep,
            holds_values=self.batch_size > 1 or self.prefetch,
        )

    # -- hand-out -------------------------------------------------------------------------------

    def next(self) -> int:
        """The next value: from the current block, or from a new lease (one round trip).

        Raises:
            IdSpaceExhaustedError: the space is used up (nothing was handed out).
            CorruptedCounterError: the counter document is not what the sequence wrote.
            pymongo.errors.PyMongoError: the lease failed after every retry.
        """
        if _getpid() != resets.owner_pid:
            # Forked without Python's at-fork hooks: the blocks are the parent's, which every
            # sibling would hand out again. One getpid() (about 0.2 us) per value, as in
            # bson.ObjectId(); the hand-out from a block costs about 0.1 us.
            resets.adopt_process()
        if self._source is not None:
            self.store()  # a reconnect of the alias drops the blocks
        try:
            value = self._next_value()
        except StopIteration:
            return self._refill()
        if value == self._trigger:
            self._start_prefetch()
        return value

    __next__ = next

    def __iter__(self) -> Sequence:
        return self

    def next_values(self, count: int) -> list[int]:
        """``count`` values, leasing what the current blocks lack in one round trip.

        The lease is rounded up to a multiple of ``batch_size``; what is left over serves the
        next calls.

        Raises:
            TypeError: ``count`` is not an int.
            ValueError: ``count`` is negative, beyond an int64, or more values than memory holds.
            IdSpaceExhaustedError: the space cannot supply ``count`` values: none are handed
                out, and those this process holds stay its own for later calls (fewer at a
                time), as after any failure of the lease.
        """
        check_int("count", count, 0, INT64_MAX)
        check_room("count", count)  # before the counter moves for them
        resets.check_process()  # as next(): not the parent's blocks
        if self._source is not None:
            self.store()
        raises_done = self._raises_done  # before any value is taken out
        values = list(islice(self._iterator, count))
        trigger = self._trigger
        if trigger is not None and values and values[0] <= trigger <= values[-1]:
            self._start_prefetch()
        missing = count - len(values)
        if missing:
            with self._lock:
                while missing and self._ready:
                    block = self._ready.popleft()
                    if len(block) > missing:
                        self._ready.appendleft(block[missing:])
                        block = block[:missing]
                    values.extend(block)
                    missing -= len(block)
                epoch = self._epoch
        try:
            while missing:
                size = math.ceil(missing / self.batch_size) * self.batch_size
                block = self._lease_block(size)
                with self._lock:
                    if not self._close(block):
                        continue  # it holds a value assigned explicitly meanwhile: dropped
                    taken = block[:missing]
                    values.extend(taken)
                    missing -= len(taken)
                    rest = block[len(taken) :]
                    if rest and epoch == self._epoch:
                        self._ready.append(rest)
        except BaseException as error:
            # None of them was handed out: they serve the next calls, unless the blocks were
            # discarded meanwhile or a value was raised meanwhile (one of them may be it).
            with self._lock:
                if epoch == self._epoch and raises_done == self._raises_done:
                    self._ready.extendleft(reversed(_runs(values)))
            if isinstance(error, IdSpaceExhaustedError) and values:
                # (probe BY-3: the counter's words first read as if none were left)
                raise IdSpaceExhaustedError(
                    f"{count} values were asked for, and only {len(values)} are left, which this "
                    f"process holds and keeps for the next calls (fewer at a time): {error}"
                ) from error
            raise
        return values

    def lease(self, count: int) -> range:
        """Reserve up to ``count`` values for the caller with one round trip, bypassing blocks.

        Returns:
            A ``range``, shorter than ``count`` only at the end of a shard or of the space.

        Raises:
            TypeError: ``count`` is not an int.
            ValueError: ``count`` is below 1 or beyond an int64.
            IdSpaceExhaustedError: the space is used up.
        """
        check_int("count", count, 1, INT64_MAX)
        return self.store().lease(count, held=True)  # the caller's to hand out

    def discard(self) -> None:
        """Drop the leased blocks (their values are lost, never handed out), and what this
        process knew of the shards' counters (the counters were set, or dropped)."""
        with self._lock:
            self._drop_blocks()
        self._forget_used_up()

    def _drop_blocks(self) -> None:
        """Drop the leased blocks (called with ``_lock`` held)."""
        self._epoch += 1
        self._install(_EMPTY)
        self._ready.clear()

    def _forget_used_up(self) -> None:
        """Forget what this process knew of the shards' counters (after the blocks were
        dropped: the counters were set, dropped, or raised)."""
        store = self._store
        if store is not None:
            store.forget_used_up()

    def peek(self) -> int:
        """The value :meth:`next` would return now, without handing it out: a preview, which
        another thread or process may take first.

        The next value of this process's leased blocks if it holds one, else the counter's
        next value (one read).

        Raises:
            ValueError: the sequence is sharded (a lease picks a shard at random).
            IdSpaceExhaustedError: the space is used up.
        """
        if self.space.shards != 1:
            raise _sharded(self.name, self.space.shards, "next value")
        resets.check_process()  # not a value of the parent's blocks
        if self._source is not None:
            self.store()  # a reconnect of the alias drops the blocks
        with self._lock:
            # A range iterator knows how many values it has left: the next is at that offset.
            left = operator.length_hint(self._iterator)
            if left:
                return self._block[len(self._block) - left]
            if self._ready:
                return self._ready[0][0]
        return self.store().peek()

    def set_counter(self, value: int) -> None:
        """Set the counter to ``value``, so that the next value handed out is ``value + 1``
        (MongoEngine's ``set_next_value``), and drop the leased blocks of this process.

        **Warning:** moving the counter down hands out again the values between; other
        processes keep the blocks they leased before (restart them, or move it up only).

        Raises:
            TypeError: ``value`` is not an int.
            ValueError: ``value`` is below ``start - 1`` or beyond the space, or the sequence
                is sharded.
        """
        if self.space.shards != 1:
            raise _sharded(self.name, self.space.shards, "counter to set")
        if not isinstance(value, int) or isinstance(value, bool):
            raise TypeError(f"value must be an int, not {value!r}")
        if not self.space.start - 1 <= value <= self.space.high:
            raise ValueError(
                f"value={value!r} must be between {self.space.start - 1!r} (start - 1) and "
                f"{self.space.high!r}: the next value handed out is value + 1"
            )
        store = self.store()
        store.set_counter(value)
        discard_blocks(store.collection.database.name, self.collection_name, store.name)

    def raise_to(self, value: int) -> None:
        """Make sure ``value`` (assigned explicitly somewhere) is never generated.

        Moves the counter that owns it past it (``$max``) and drops the blocks of this process
        that could contain it: this sequence's and those of every other one on the same counter,
        also a block being leased meanwhile. Blocks already leased by other processes are not
        affected: a unique index must catch those (:class:`SequenceField` retries with a fresh
        value).

        Raises:
            TypeError: ``value`` is not an int.
        """
        check_int("value", value)
        resets.check_process()
        store = self.store()
        database = store.collection.database.name
        sharing = _sequences_of(database, self.collection_name, self.name, self._scope)
        for sequence in sharing:
            with sequence._raised_lock:
                sequence._open += 1
                sequence._raised.append(value)
        try:
            store.raise_to(value)
        finally:
            for sequence in sharing:
                sequence._drop_blocks_holding(value)

    def _drop_blocks_holding(self, value: int) -> None:
        """The raise of ``value`` is done: drop the blocks that could still hand it out."""
        with self._lock:
            left = operator.length_hint(self._iterator)
            unused = self._block[len(self._block) - left :]
            stale = value in unused or any(value in block for block in self._ready)
            self._close()
            # In one hold of the lock: a next_values() that sees this raise done sees the
            # blocks dropped too (it takes no value from them).
            self._raises_done += 1
            if stale:
                self._drop_blocks()
        if stale:
            self._forget_used_up()

    def _close(self, block: range = _EMPTY) -> bool:
        """Close a raise or a lease (with its ``block``); whether the block holds no value
        raised meanwhile. Called with ``_lock`` held."""
        with self._raised_lock:
            self._open -= 1
            clean = not any(value in block for value in self._raised)
            if not self._open:
                self._raised.clear()
        return clean

    # -- refill ---------------------------------------------------------------------------------

    def _lease_block(self, size: int) -> range:
        """A block of ``size`` values from the counter, its lease open (see :meth:`_close`)."""
        with self._raised_lock:
            self._open += 1
        try:
            return self.store().lease(size)
        except BaseException:
            with self._lock:
                self._close()
            raise

    def _install(self, block: range) -> None:
        # Called with the lock held.
        self._block = block
        self._iterator = iterator = iter(block)
        self._next_value = iterator.__next__
        # Prefetch when half the block is used: with 1,000 values and 1 ms round trips, the next
        # block arrives in time as long as fewer than 500,000 values per second are taken.
        self._trigger = block[(len(block) - 1) // 2] if self.prefetch and block else None

    def _refill(self) -> int:
        while True:
            prefetch = flight = None
            with self._lock:
                try:
                    value = self._next_value()
                except StopIteration:
                    if self._ready:
                        self._install(self._ready.popleft())
                        continue
                    leader = self._flight is None
                    flight = self._flight = self._flight or _Flight(self._epoch)
                else:
                    if value == self._trigger:
                        prefetch = self._prefetch()
            if flight is None:
                self._launch(prefetch)
                return value
            self._await(flight, leader)

    def _await(self, flight: _Flight, leader: bool) -> None:
        """Lease the block of ``flight`` (its ``leader``), or wait for the thread leasing it;
        raise the error the lease leaves to this thread (see :meth:`_Flight.shared_error`)."""
        if leader:
            self._fly(flight)
            if flight.error is not None:
                raise flight.error
        else:
            flight.done.wait()  # another thread's lease, or a prefetch
            error = flight.shared_error()
            if error is not None:
                raise error

    def _fly(self, flight: _Flight) -> None:
        """Lease a block (no lock held) and queue it; record the error instead of raising (see
        :meth:`_Flight.shared_error`)."""
        block: range | None
        try:
            block = self._lease_block(self.batch_size)
        except BaseException as error:  # handed to the callers waiting on the flight
            flight.error = error
            block = None
        with self._lock:
            if self._flight is flight:
                self._flight = None
            if block is not None and self._close(block) and flight.epoch == self._epoch:
                self._ready.append(block)
        flight.done.set()

    def _start_prefetch(self) -> None:
        with self._lock:
            flight = self._prefetch()
        self._launch(flight)

    def _prefetch(self) -> _Flight | None:
        """The lease of a prefetch, to :meth:`_launch` once the lock is released (called with
        it held); None if a lease is in flight or a block is ready."""
        if self._flight is not None or self._ready:
            return None
        flight = self._flight = _Flight(self._epoch, prefetch=True)
        return flight

    def _launch(self, flight: _Flight | None) -> None:
        """Start the thread of a prefetch (``flight``, if any), with no lock held: under gevent
        or eventlet patched after this sequence was made, its lock is an OS lock, and
        ``Thread.start()`` switches to the new green thread, which waited for it forever, and
        so did the whole process (probe BH).

        A thread per block (about 0.1 ms to start, once per ``batch_size`` values) instead of a
        long-lived worker: nothing to rebuild after fork(). A failed prefetch is forgotten: a
        refill waiting on it, and the next, lease in the foreground (and raise their own); so
        is one whose thread could not start, or whose start was interrupted (a gevent
        ``Timeout`` while it waits for the thread; the thread may run all the same: its block
        is queued as any other). An interrupt from a signal handler may come anywhere, here
        between the lock and the start too: as everywhere in Python, the state it leaves is
        undefined (the next refill may wait for that prefetch for ever).
        """
        if flight is None:
            return
        try:
            threading.Thread(
                target=self._fly, args=(flight,), name=f"prefetch {self.name}", daemon=True
            ).start()
        except BaseException as error:
            with self._lock:
                if self._flight is flight:
                    self._flight = None
            flight.done.set()
            if not isinstance(error, Exception):
                raise  # an interrupt (KeyboardInterrupt, a gevent Timeout): the caller's

    def __repr__(self) -> str:
        return (
            f"Sequence({self.name!r}, batch_size={self.batch_size!r}, prefetch={self.prefetch!r}, "
            f"start={self.space.start!r}, high={self.space.high!r}, shards={self.space.shards!r})"
        )


def _check_options(*, batch_size: int, prefetch: bool, retries: int) -> None:
    if not isinstance(batch_size, int) or isinstance(batch_size, bool):
        raise TypeError(f"batch_size must be an int, not {batch_size!r}")
    if not 1 <= batch_size <= INT64_MAX:
        # The counter is a BSON int64: a larger block could not be added to it.
        raise ValueError(
            f"batch_size={batch_size!r} must be >= 1 and at most {INT64_MAX} (the counter is "
            "an int64)"
        )
    if not isinstance(prefetch, bool):
        raise TypeError(f"prefetch must be a bool, not {prefetch!r}")
    if not is_int(retries):
        raise TypeError(f"retries must be an int, not {retries!r}")
    if not 0 <= retries <= MAX_RETRIES:
        raise ValueError(f"retries={retries!r} must be an int >= 0 and at most {MAX_RETRIES}")


def check_database(database: object) -> None:
    """``database`` given to a sequence or an admin function: a pymongo ``Database``, or the
    name of a MongoEngine alias (a non-empty str).

    Raises:
        TypeError: neither (the value quoted).
        ValueError: an empty alias.
    """
    if isinstance(database, str):
        _check_name("database", database)
    elif not callable(getattr(database, "get_collection", None)):
        raise TypeError(
            f"database must be a pymongo Database or a MongoEngine alias (str), not {database!r}"
        )


def _check_name(option: str, value: object) -> None:
    """A name given as text (sequence, alias, field): a non-empty str."""
    if not isinstance(value, str):
        raise TypeError(f"{option} must be a non-empty str, not {value!r}")
    if not value:
        raise ValueError(f"{option}={value!r} is empty: expected a non-empty str")


def _forget_all_blocks() -> None:
    with _live_lock:
        sequences = list(_live_sequences)
    for sequence in sequences:
        sequence.discard()
    _leased_to.clear()  # the counters were dropped on purpose (reset_process_state)


def discard_blocks(database: str, collection: str, name: str) -> None:
    """Drop the blocks this process leased from the counters of sequence ``name`` (every scope)
    in ``database.collection``: after the counter was set, they could repeat or skip values."""
    for sequence in _sequences_of(database, collection, name):
        sequence.discard()


_ANY_SCOPE: Final = object()


def _sequences_of(
    database: str, collection: str, name: str, scope: object = _ANY_SCOPE
) -> list[Sequence]:
    """The live sequences of this process on the counters of ``name`` in
    ``database.collection`` (of one ``scope``, as ``Sequence._scope`` holds it, if given)."""
    with _live_lock:
        sequences = list(_live_sequences)
    return [
        sequence
        for sequence in sequences
        if sequence._store is not None
        and sequence.name == name
        and sequence.collection_name == collection
        and sequence._store.collection.database.name == database
        and (scope is _ANY_SCOPE or sequence._scope == scope)
    ]


@resets.on_fork
def _after_fork_in_child() -> None:
    # The child must not hand out values its parent (and siblings) also hold. Run before the
    # child's first hand-out, its locks made anew (resets.ProcessLock).
    for sequence in list(_live_sequences):
        sequence._reset_state()


# -- formatting ---------------------------------------------------------------------------------


def luhn_check_digit(number: str) -> int:
    """The Luhn check digit of the decimal string ``number`` (leading zeros do not change it).

    >>> luhn_check_digit("7992739871")
    3

    Raises:
        TypeError: ``number`` is not a str.
        ValueError: ``number`` is not made of ASCII digits.
    """
    if not isinstance(number, str):
        raise TypeError(f"number must be a str of ASCII digits, not {number!r}")
    if not (number.isascii() and number.isdigit()):
        raise ValueError(f"number={number!r} is not made of ASCII digits (0-9)")
    total = 0
    for position, char in enumerate(reversed(number)):
        digit = ord(char) - 48
        if position % 2 == 0:
            digit *= 2
            if digit > 9:
                digit -= 9
        total += digit
    return (10 - total % 10) % 10


@dataclass(frozen=True)
class SequenceFormat:
    """How a sequence value is written: prefix, zero padding, Luhn check digit.

    ``SequenceFormat(prefix="AC-", width=12, luhn=True).format(42)`` is
    ``"AC-0000000000424"``.

    Attributes:
        prefix: text before the number.
        width: pad the number with zeros to this many digits (None: no padding).
        luhn: append a Luhn check digit.
        active: whether values are stored as formatted strings (else as integers).
    """

    prefix: str = ""
    width: int | None = None
    luhn: bool = False
    active: bool = dataclass_field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not isinstance(self.prefix, str):
            raise TypeError(f"prefix must be a str, not {self.prefix!r}")
        if self.width is not None:
            check_int("width", self.width, 1, 18)
        if not isinstance(self.luhn, bool):
            raise TypeError(f"luhn must be a bool, not {self.luhn!r}")
        active = bool(self.prefix) or self.width is not None or self.luhn
        object.__setattr__(self, "active", active)  # frozen: set once, here

    def describe(self) -> str:
        """What a formatted value looks like, for error messages."""
        digits = f"{self.width} digits" if self.width is not None else "digits"
        check = " then a Luhn check digit" if self.luhn else ""
        prefix = f"{self.prefix!r} then " if self.prefix else ""
        return f"{prefix}{digits}{check}, or the number as an int"

    def format(self, number: int) -> str:
        """The formatted text of ``number``."""
        text = str(number) if self.width is None else f"{number:0{self.width}d}"
        if self.luhn:
            text += str(luhn_check_digit(text))
        return self.prefix + text

    def parse(self, text: str) -> int:
        """The number in formatted ``text``.

        Raises:
            InvalidIdError: ``text`` lacks the prefix, has the wrong width or check digit.
        """
        if not text.startswith(self.prefix):
            raise invalid_id(text, "sequence value", self.describe())
        body = text[len(self.prefix) :]
        if not (body.isascii() and body.isdigit()):
            raise invalid_id(text, "sequence value", self.describe())
        if self.luhn:
            if len(body) < 2 or luhn_check_digit(body[:-1]) != int(body[-1]):
                raise invalid_id(text, "sequence value", self.describe() + " (check digit wrong)")
            body = body[:-1]
        if self.width is not None and len(body) != self.width:
            raise invalid_id(text, "sequence value", self.describe())
        return int(body)


# -- the field ----------------------------------------------------------------------------------

_live_fields: weakref.WeakSet[SequenceField] = weakref.WeakSet()


class _Found(NamedTuple):
    """The sequence an unscoped field uses for one collection object (and, with ``db_alias``,
    one database of the counters)."""

    collection: weakref.ref[Any]
    counters: weakref.ref[Any] | None
    sequence: Sequence


def _field_options(
    value_decorator: Callable[[int], Any] | None,
    *,
    collection_name: str | None,
    names: dict[str, str | None],
    batch_size: int,
    prefetch: bool,
    retries: int,
    prefix: str,
    flags: dict[str, bool],
    digits: int | None,
    write_concern: WriteConcern | None,
) -> Callable[[int], Any] | None:
    """Check SequenceField's options; returns the value decorator (None: the plain field).

    Raises:
        TypeError: an option has the wrong type.
        ValueError: an option is out of range, or two options contradict each other.
    """
    if value_decorator is not None and not callable(value_decorator):
        raise TypeError(f"value_decorator must be a callable or None, not {value_decorator!r}")
    if value_decorator is int:  # the plain field
        value_decorator = None
    if value_decorator is not None and (prefix or flags["zero_pad"] or flags["luhn"]):
        raise ValueError(
            f"value_decorator={value_decorator!r} and prefix/zero_pad/luhn both format the "
            "stored value: pass one or the other"
        )
    _check_options(batch_size=batch_size, prefetch=prefetch, retries=retries)
    if collection_name is not None:
        check_collection_name("collection_name", collection_name)
    for option, value in names.items():
        if value is not None:
            _check_name(option, value)
    if not isinstance(prefix, str):
        raise TypeError(f"prefix must be a str, not {prefix!r}")
    for option, flag in flags.items():
        if not isinstance(flag, bool):
            raise TypeError(f"{option} must be a bool, not {flag!r}")
    if flags["zero_pad"] and digits is None:
        raise ValueError("zero_pad=True needs digits=N: the width to pad to")
    _check_write_concern(write_concern)
    return value_decorator


def _databases_of(owner: type) -> list[Database[Any]]:
    """The databases of the models made from ``owner`` (an abstract base or a mixin: see
    :func:`.seam.models_made_from`), but those whose alias is not connected in this process
    (review I: another application's model).

    Raises:
        mongoengine.connection.ConnectionFailure: none of them is connected (review J: the
            default database had been taken, which none of them uses).
    """
    found: list[Database[Any]] = []
    missing: AliasNotConnected | None = None
    for model in seam.models_made_from(owner):
        try:
            found.append(seam.default_database(model))
        except AliasNotConnected as error:
            missing = error
    if not found and missing is not None:
        raise missing
    return found


def _check_write_concern(write_concern: object) -> None:
    """Raise unless ``write_concern`` is None or an acknowledged pymongo ``WriteConcern``: a
    lease needs the counter's reply, the values it hands out (probe AT: under ``w=0`` every
    lease was applied and looked missed, until the save failed having burnt hundreds)."""
    if write_concern is not None and not isinstance(write_concern, WriteConcern):
        raise TypeError(
            f"write_concern must be a pymongo WriteConcern or None, not {write_concern!r}"
        )
    if write_concern is not None and not write_concern.acknowledged:
        raise ValueError(
            f"write_concern={write_concern!r} is not acknowledged: a counter's lease needs "
            "its reply (the values it hands out); use w=1 or more"
        )


class SequenceField(GeneratedField):
    """An integer (or formatted) id from a counter, leased in blocks; drop-in for MongoEngine's.

    Values are produced by ``save()`` and ``Model.objects.insert()`` only (reading an empty
    field never burns a value); a bulk insert of K documents leases what it needs in one round
    trip. Counters live on the model's own database (``db_alias``, ``switch_db``) unless
    ``db_alias`` names another.

    **Values are never reused; values leased but not used are lost (gaps).**

    The first four parameters are MongoEngine's, in its order; the others are keyword-only.

    Args:
        collection_name: the counter collection (MongoEngine's default).
        db_alias: keep the counters on this alias instead of the model's database (MongoEngine's
            field always used ``"default"``: pass it to keep such counters when migrating).
        sequence_name: the counter's name; the ``_id`` is ``"<sequence_name>.<field name>"``.
            Default: MongoEngine's rule (:meth:`get_sequence_name`): the collection of the
            model declaring the field; for an abstract base, its class name in snake case, one
            counter shared by the subclasses.
        value_decorator: MongoEngine's: a callable making the stored value of a counter number
            (``str``, ``hex``...). Values are stored and loaded as it makes them and not
            validated; queries by an int or a string of digits are decorated, other query values
            are sent as they are; an explicit value moves the counter only if it is an int or
            a string of digits. Prefer ``prefix``/``zero_pad``/``luhn``, which also validate
            and parse.
        batch_size: values leased per round trip (1: MongoEngine's behaviour).
        prefetch: lease the next block in the background when the current one is half used.
        start: the first value of a new counter.
        digits: at most this many digits; beyond, :class:`IdSpaceExhaustedError` is raised
            before anything is written.
        shards: split the value space into this many ranges with their own counter documents.
        scope: name of another field: one counter per value of it (per tenant, per year...).
        prefix: stored values are this text followed by the number (a formatted string).
        zero_pad: pad the number to ``digits`` digits (requires ``digits``).
        luhn: append a Luhn check digit.
        allow_explicit: accept values assigned by the user (the counter moves past them); when
            False, saving such a document raises :class:`ExplicitValueError`.
        write_concern: of counter updates (``majority`` by default).
        retries: retries of a lease after a network error.
        **kwargs: any MongoEngine field option (``primary_key``, ``unique``, ``db_field``...).

    Raises:
        TypeError: an option has the wrong type.
        ValueError: an option is out of range; ``value_decorator`` with formatting options.
    """

    #: Another process may hold a leased block containing a value assigned explicitly here;
    #: the unique index catches it and the write is retried with a fresh value.
    collision_retries = 3
    #: MongoEngine's class attributes: the default counter collection and value decorator.
    COLLECTION_NAME: str = DEFAULT_COLLECTION
    VALUE_DECORATOR: Callable[[int], Any] = int

    if TYPE_CHECKING:  # the value's type for type checkers; BaseField.__get__ runs

        @overload
        def __get__(self, instance: None, owner: Any) -> Self: ...
        @overload
        def __get__(self, instance: object, owner: Any) -> int | str | None: ...
        def __get__(self, instance: object, owner: Any) -> Any: ...

    def __init__(
        self,
        collection_name: str | None = None,
        db_alias: str | None = None,
        sequence_name: str | None = None,
        value_decorator: Callable[[int], Any] | None = None,
        *,
        batch_size: int = 1,
        prefetch: bool = False,
        start: int = 1,
        digits: int | None = None,
        shards: int = 1,
        scope: str | None = None,
        prefix: str = "",
        zero_pad: bool = False,
        luhn: bool = False,
        allow_explicit: bool = True,
        write_concern: WriteConcern | None = MAJORITY,
        retries: int = DEFAULT_RETRIES,
        **kwargs: Any,
    ) -> None:
        value_decorator = _field_options(
            value_decorator if value_decorator is not None else self.VALUE_DECORATOR,
            collection_name=collection_name,
            names={"sequence_name": sequence_name, "db_alias": db_alias, "scope": scope},
            batch_size=batch_size,
            prefetch=prefetch,
            retries=retries,
            prefix=prefix,
            flags={"zero_pad": zero_pad, "luhn": luhn, "allow_explicit": allow_explicit},
            digits=digits,
            write_concern=write_concern,
        )
        self.space = Space.build(start=start, digits=digits, shards=shards)
        self.collection_name = collection_name or self.COLLECTION_NAME
        self.sequence_name = sequence_name
        self.db_alias = db_alias
        self.batch_size = batch_size
        self.prefetch = prefetch
        self.digits = digits
        self.scope = scope
        self.allow_explicit = allow_explicit
        self.write_concern = write_concern
        self.retries = retries
        self.format = SequenceFormat(prefix=prefix, width=digits if zero_pad else None, luhn=luhn)
        #: Whether stored values are made by a user's ``value_decorator`` (MongoEngine's way).
        self.decorated = value_decorator is not None
        #: Formatted values are text: a string operator matches them as stored (probe AZ: it
        #: was sent as the query by the value, ``n__startswith="N1"`` matched "N1" alone).
        self.stores_text = self.format.active and not self.decorated
        #: The counter number -> the stored value: the user's decorator, the formatting options',
        #: or ``int`` (MongoEngine's attribute of the same name and meaning).
        self.value_decorator: Callable[[int], Any] = (
            value_decorator
            if value_decorator is not None
            else self.format.format
            if self.format.active
            else int
        )
        #: (client id, database, counter, scope) -> (the client, the sequence, whether the
        #: client was one of MongoEngine's connections when the sequence was made).
        self._sequences: dict[
            tuple[int, str, str, str | None], tuple[weakref.ref[Any], Sequence, bool]
        ] = {}
        #: The sequence of an unscoped field by the collection object its documents are written
        #: to (see :meth:`_sequence_of`).
        self._by_collection: dict[tuple[int, type, str], _Found] = {}
        self._sequences_lock = resets.ProcessLock()
        #: The ids of MongoEngine's connected clients when the field last looked (a new
        #: sequence looks again only if they changed: review U, a scan per new scope).
        self._connected: frozenset[int] = frozenset()
        super().__init__(**kwargs)
        if scope is not None and self.primary_key:
            raise ValueError(
                f"SequenceField(primary_key=True, scope={scope!r}): each {scope!r} is numbered "
                "from the start, so keys would repeat across scopes; number the key without "
                "scope=, and put a scoped SequenceField beside it (unique_with= its scope)"
            )
        _live_fields.add(self)

    # -- names and sequences --------------------------------------------------------------------

    def get_sequence_name(self, document_class: type[BaseDocument] | None = None) -> str:
        """The counter's name before ``.<field>``, by MongoEngine's rule.

        ``sequence_name`` if given; else named after the field's owner (MongoEngine's
        ``owner_document``): the collection of a concrete model, the class name in snake case
        for an abstract base (one counter shared by its subclasses, ``"base.counter"``) or an
        embedded document. A field of a plain mixin is owned by the first model made from it.
        ``document_class`` serves only a field no class owns.

        Raises:
            TypeError: the field belongs to no class and ``document_class`` is None.
        """
        if self.sequence_name is not None:
            return self.sequence_name
        return seam.counter_prefix(self._owner(document_class))

    def _owner(self, document_class: type[BaseDocument] | None = None) -> type[BaseDocument]:
        owner = seam.owner_of(self) or document_class
        if owner is None:
            raise TypeError(
                f"{self!r} belongs to no document class: its counter has no name or database "
                "(declare it on a Document or EmbeddedDocument)"
            )
        return owner

    def counter_name(self, document_class: type[BaseDocument] | None = None) -> str:
        """The counter's ``_id``: ``"<sequence name>.<field name>"``, MongoEngine's."""
        if document_class is None or seam.owner_of(self) is not None:
            # MongoEngine's signature, which a subclass may override: no argument.
            return f"{self.get_sequence_name()}.{self.name}"
        return f"{self.get_sequence_name(document_class)}.{self.name}"

    def sequence_for(
        self, database: Database[Any], document_class: type[BaseDocument], scope: Any = None
    ) -> Sequence:
        """The :class:`Sequence` of this field for ``document_class`` on ``database``.

        One per connection, database and scope: after a reconnect (a new client), a new one
        with no leased blocks.
        """
        if self.db_alias is not None:
            database = get_db(self.db_alias)
        client = database.client
        name = self.counter_name(document_class)
        scope_key = None if scope is None else str(scope)
        key = (id(client), str(database.name), name, scope_key)
        entry = self._sequences.get(key)
        if entry is not None and entry[0]() is client:
            return entry[1]
        with self._sequences_lock:
            entry = self._sequences.get(key)
            if entry is not None and entry[0]() is client:
                return entry[1]
            connected = seam.connected_clients()
            live = frozenset(map(id, connected))
            if live != self._connected:  # a connection ended since the last look, or began
                self._connected = live
                self._let_go(self._disconnected(live))
            sequence = Sequence(
                name,
                database=database,
                collection=self.collection_name,
                batch_size=self.batch_size,
                prefetch=self.prefetch,
                start=self.space.start,
                digits=self.digits,
                shards=self.space.shards,
                scope=scope,
                write_concern=self.write_concern,
                retries=self.retries,
            )
            if entry is not None:
                entry[1].discard()
            registered = any(each is client for each in connected)
            self._sequences[key] = (weakref.ref(client), sequence, registered)
            # The longest kept go past the bound (probe AF: each scope's stayed for the
            # connection's life, 5.5 KB each).
            excess = max(0, len(self._sequences) - MAX_SEQUENCES)
            self._let_go(list(itertools.islice(self._sequences, excess)))
            return sequence

    def _disconnected(self, live: frozenset[int]) -> list[tuple[int, str, str, str | None]]:
        """The keys of the sequences made for a connection of MongoEngine's that has ended
        (``disconnect()``; ``live``: the ids of the clients connected): each holds its client
        (probe BI: closed clients piled up, 15 KB each, in a process connecting per tenant)."""
        return [
            key
            for key, (client, _, registered) in self._sequences.items()
            if registered and id(client()) not in live  # (a client collected is None)
        ]

    def _let_go(self, keys: list[tuple[int, str, str, str | None]]) -> None:
        """Stop keeping the sequences of ``keys`` (under ``_sequences_lock``), also as the
        sequences of collections (probe BI: a collision then dropped the blocks of a new
        sequence, not of the one the writes went on leasing from). Their blocks' values are
        skipped, as after a restart; a thread using one leases on from the counter, which never
        repeats a value."""
        if not keys:
            return
        gone = {id(self._sequences.pop(key)[1]) for key in keys}
        self._by_collection = {
            place: found
            for place, found in self._by_collection.items()
            if id(found.sequence) not in gone
        }

    def forget_sequences(self) -> None:
        """Drop every cached sequence and its leased blocks (on reset and disconnect)."""
        with self._sequences_lock:
            entries = list(self._sequences.values())
            self._sequences.clear()
            self._by_collection = {}
        for _, sequence, _ in entries:
            sequence.discard()

    def _copied(self) -> None:
        # Its own sequences (by its own counter name) and lock, reached by resets and fork().
        self._sequences = {}
        self._by_collection = {}
        self._connected = frozenset()
        self._sequences_lock = resets.ProcessLock()
        _live_fields.add(self)

    @property
    def depends_on(self) -> tuple[str, ...]:
        """The scope field, if any: its value picks the counter."""
        return () if self.scope is None else (self.scope,)

    def _scope_of(self, document_class: type[BaseDocument], document: Any) -> Any:
        """The stored value of the scope of ``document``, a ``document_class`` (or the values
        of one: an upsert's, a backfill's)."""
        if self.scope is None:
            return None
        name = document_class.__name__
        source = self._scope_field(document_class)
        value = seam.data(document).get(self.scope)
        if value is None:
            raise ValidationError(
                f"{name}.{self.name} is numbered per {self.scope!r}, which is None: set "
                f"{self.scope!r} before the document is written (an upsert: in its filter or "
                "update; a document loaded without it, by only() or exclude(): load it)",
                field_name=self.name,
            )
        return seam.scope_form(source, source.to_mongo(value))

    def _scope_field(self, document_class: type[BaseDocument]) -> Any:
        """The field of ``document_class`` named by ``scope`` (which is set).

        Raises:
            ValueError: ``document_class`` has no such field, or it is this field.
        """
        assert self.scope is not None
        source = seam.read_field(document_class, self, self.scope)
        if source is self:
            raise ValueError(
                f"{document_class.__name__}.{self.name} has scope={self.scope!r}, itself: a "
                "number cannot pick its own counter; scope it by another field"
            )
        return source

    # -- MongoEngine's field-level helpers -------------------------------------------------------

    def _counter_sequence(self, scope: Any) -> Sequence:
        """The sequence the field-level helpers act on: on ``db_alias``, else on the owner's
        database (its ``meta["db_alias"]``; the default alias for an embedded document)."""
        owner = self._owner()
        stored_scope = None
        if self.scope is not None:
            if scope is None:
                raise TypeError(
                    f"{owner.__name__}.{self.name} is numbered per {self.scope!r}: pass scope= "
                    "(the value whose counter is meant)"
                )
            source = self._scope_field(owner)
            try:  # a value a document can hold
                source.validate(source.to_python(scope))
            except ValidationError as error:
                raise ValidationError(
                    f"{self._label}: scope={scope!r} is not a value of {owner.__name__}."
                    f"{self.scope} ({error})",
                    field_name=self.name,
                ) from error
            if isinstance(scope, dict) and seam.holds_embedded(source):
                scope = source.to_python(scope)  # its stored dict: as the document
            stored_scope = seam.scope_form(source, source.to_mongo(scope))
        elif scope is not None:
            raise TypeError(
                f"{owner.__name__}.{self.name} has one counter (no scope=): scope={scope!r} refused"
            )
        return self.sequence_for(self._helper_database(owner), owner, stored_scope)

    def _helper_database(self, owner: type[BaseDocument]) -> Any:
        """The database of the counter the field-level helpers act on: ``db_alias``'s; else the
        owner's (its ``meta["db_alias"]``); for an abstract base or a mixin, the one database of
        the models made from it (probe AR: the helpers had set a counter in the default
        database, which no model used).

        Raises:
            ValueError: the models made from it are in several databases.
        """
        if self.db_alias:
            return get_db(self.db_alias)
        databases = {(id(db.client), db.name): db for db in _databases_of(owner)}
        if not databases:
            return seam.default_database(owner)
        if len(databases) > 1:
            names = sorted(db.name for db in databases.values())
            raise ValueError(
                f"{self._label} is declared on {owner.__name__}, whose models are in the "
                f"databases {names}: its helpers cannot tell which counter is meant; give the "
                "field db_alias=, or use the counters admin on the model's database "
                "(mongoengine_ids.sequence.set_next_value(Model._get_db(), ...))"
            )
        (database,) = databases.values()
        return database

    def get_next_value(self, *, scope: Any = None) -> Any:
        """The value the next document would get, in the field's form: MongoEngine's preview.

        The next value of this process's leased block if it holds one, else the counter's next
        value. Nothing is handed out: another thread or process may take it first.

        Args:
            scope: for a scoped field, the scope value whose counter is meant.

        Raises:
            TypeError: ``scope`` is missing for a scoped field, or given for another.
            ValueError: the field is sharded (no single next value).
            IdSpaceExhaustedError: every value has been handed out.
        """
        return self._present([self._counter_sequence(scope).peek()])[0]

    def set_next_value(self, value: int, *, scope: Any = None) -> Any:
        """Set the counter to ``value``: the next document gets ``value + 1`` (MongoEngine's
        meaning; the admin ``set_next_value`` takes the next value itself).

        The counter document is created if missing. This process's leased blocks of the counter
        are dropped, so the next value is ``value + 1`` whatever ``batch_size``.

        **Warning:** moving the counter down hands the values between out again, and other
        processes keep the blocks they had leased (one that held values of it moves it back
        past them at its next lease): move it down only when no process is writing and no
        document holds those values.

        Args:
            value: the counter's new value (the highest value considered handed out).
            scope: for a scoped field, the scope value whose counter is meant.

        Returns:
            ``value`` in the field's form, as MongoEngine's returns it.

        Raises:
            TypeError: ``value`` is not an int; ``scope`` missing or unexpected.
            ValueError: ``value`` is below ``start - 1`` or beyond the space; the field is
                sharded.
        """
        self._counter_sequence(scope).set_counter(value)
        return self._present([value])[0]

    # -- GeneratedField -------------------------------------------------------------------------

    def new_values(self, write: Write, count: int) -> list[Any]:
        """``count`` values for ``write.documents`` (one lease per scope)."""
        if self.scope is None:
            numbers = _take(self._write_sequence(write, None), count)
            return numbers if self.value_decorator is int else self._present(numbers)
        self._check_apart(write)
        groups: dict[str, tuple[Any, list[int]]] = {}
        for position, document in enumerate(write.documents):
            scope = self._scope_of(write.document_class, document)
            groups.setdefault(str(scope), (scope, []))[1].append(position)
        numbers = [0] * count
        for scope, positions in groups.values():
            sequence = self._write_sequence(write, scope)
            for position, number in zip(positions, _take(sequence, len(positions)), strict=True):
                numbers[position] = number
        return self._present(numbers)

    def _write_sequence(self, write: Write, scope: Any) -> Sequence:
        """The sequence the values of ``write`` come from (for the documents of ``scope``):
        what hands them out, raises past an assigned one and drops blocks after a collision."""
        if self.scope is None:
            return self._sequence_of(write)
        return self.sequence_for(write.database, write.document_class, scope)

    def _sequence_of(self, write: Write) -> Sequence:
        """The sequence of an unscoped field for the documents of ``write``.

        Found by the collection object they are written to, which MongoEngine makes anew on a
        reconnect, ``switch_db`` and ``switch_collection`` (and by the counters' database, with
        ``db_alias``): :meth:`sequence_for` and the check that the counters live apart run once
        per collection, not at every save.
        """
        collection = write.collection
        counters = None if self.db_alias is None else get_db(self.db_alias)
        # The class's collection name is part of the counter's: a switch_collection() context
        # renames it (mongomock hands out one collection object per name, a switch or not).
        place = (id(collection), write.document_class, seam.collection_name(write.document_class))
        found = self._by_collection.get(place)
        if found is not None and found.collection() is collection:
            known = found.counters
            if (None if known is None else known()) is counters:
                return found.sequence
        self._check_apart(write)
        sequence = self.sequence_for(write.database, write.document_class)
        with self._sequences_lock:
            # The entries of collections gone (a with_options() copy, an ended switch_db).
            live = {key: entry for key, entry in self._by_collection.items() if entry.collection()}
            live[place] = _Found(
                weakref.ref(collection),
                None if counters is None else weakref.ref(counters),
                sequence,
            )
            self._by_collection = live
        return sequence

    def _check_apart(self, write: Write) -> None:
        """Raise ``ValueError`` if the counters would be written among the documents."""
        counters = write.database if self.db_alias is None else get_db(self.db_alias)
        if (
            self.collection_name == write.collection.name
            and counters.name == write.database.name
            and counters.client is write.database.client
        ):
            name = self.counter_name(write.document_class)
            kept = (
                repr(name)
                if self.scope is None
                else f"{name}{SCOPE_SEPARATOR}<scope>, one per scope"
            )
            raise ValueError(
                f"{self._label}: collection_name={self.collection_name!r} is the collection of "
                "the documents themselves; the counters need a collection of their own "
                f"(default {DEFAULT_COLLECTION!r}). Copy the counter documents kept there "
                f"(_id {kept}) into it first, or the numbers start again from the first"
            )

    def _present(self, numbers: list[int]) -> list[Any]:
        """The values of counter ``numbers``: decorated by ``value_decorator``.

        Raises:
            ValueError: the decorator returned None (no value to store) for one of them.
        """
        decorate = self.value_decorator
        if decorate is int:
            return numbers
        values = [decorate(number) for number in numbers]
        missing = [number for number, value in zip(numbers, values, strict=True) if value is None]
        if missing:
            number = missing[0]
            raise ValueError(
                f"{self._label}: value_decorator returned None for number {number}: it must "
                "return the value to store"
            )
        return values

    @property
    def tracks_assigned(self) -> bool:
        """An explicit value moves the counter (or is refused)."""
        return True

    def note_assigned(self, write: Write, values: list[Any]) -> None:
        """Move the counters past explicitly assigned values, or reject them.

        Raises:
            ExplicitValueError: ``allow_explicit`` is False.
            ValidationError: with ``value_decorator``, a value that a query by it would not
                find (a number the decorator writes as another type: ``5`` for ``hex``).
        """
        if not values:
            return
        if self.decorated:
            for value in values:
                self._check_found_by_itself(value)
        self._check_apart(write)
        if not self.allow_explicit:
            raise ExplicitValueError(
                f"{write.document_class.__name__}.{self.name} is generated by its sequence: "
                f"explicit value {values[0]!r} rejected (allow_explicit=False); leave it unset"
                + (
                    f" (a document moved to another {self.scope!r} keeps its number, which is "
                    "then one given to that scope)"
                    if self.scope is not None
                    else ""
                ),
                field_name=self.name,
            )
        highest: dict[str, tuple[Any, int]] = {}
        for document, value in zip(write.documents, values, strict=True):
            number = self.number_of(value)
            if number is None:
                continue  # validate() reports it
            scope = self._scope_of(write.document_class, document)
            key = str(scope)
            if key not in highest or highest[key][1] < number:
                highest[key] = (scope, number)
        for scope, number in highest.values():
            self._write_sequence(write, scope).raise_to(number)

    def _check_found_by_itself(self, value: Any) -> None:
        """Refuse a value assigned to a decorated field that would be stored as given while a
        query by it (``reload()``'s and ``delete()``'s too, by the key) looks for another value:
        a number the decorator writes as another type (``5``, which ``hex`` writes ``"0x5"``), or
        a string of digits that is not the decorator's form of its number (``"42"`` where it
        writes ``"000042"``; ``"6"`` for ``hex``). A value of the decorator's form (``"000042"``,
        ``"0x6"``), or another value of the type it makes (an upsert's value, prepared as a
        query's, is one), may be one it made: kept, as MongoEngine keeps it."""
        looked_for = self.query_value(value)
        if looked_for != value and (type(looked_for) is not type(value) or isinstance(value, str)):
            self.error(
                f"{self._label}: {value!r} would be stored as given, but a query by it (and "
                f"reload(), delete()) looks for {looked_for!r}, value_decorator's form of its "
                "number: assign that, or leave the field empty to be generated"
            )

    def is_collision(
        self, write: Write, error: pymongo.errors.DuplicateKeyError, value: Any
    ) -> bool:
        """Whether the duplicate was this field's generated value (a probe query decides).

        mongomock's duplicate-key errors name no index, so the database is asked whether a
        document already holds the value; if so, the blocks that produced it are dropped. A
        server names the index: one without this field is another field's duplicate.
        """
        pattern = (error.details or {}).get("keyPattern")
        if isinstance(pattern, dict) and write.path(self.db_field) not in pattern:
            return False
        first = write.documents[0] if write.documents else None
        scope = None if first is None else self._scope_of(write.document_class, first)
        probe = write.held_by_others(self.db_field, self.to_mongo(value))
        if first is not None:
            colliding = self._colliding_with(write.document_class, first)
            probe.update({write.path(name): value for name, value in colliding.items()})
        if write.collection.find_one(probe, {"_id": 1}) is None:
            return False
        self._write_sequence(write, scope).discard()
        return True

    def _colliding_with(self, document_class: type[BaseDocument], document: Any) -> dict[str, Any]:
        """The values of ``document`` (db field: stored value) that a document holding the same
        number must hold too for a duplicate to be this field's: the fields its unique index
        holds with it (``unique_with``), or, without an index of its own, its scope (the same
        number in another scope is another number). None for a key, unique alone."""
        if self.primary_key:
            return {}
        found = {}
        for name in _names(self.unique_with if self.unique else self.scope):
            source = seam.field_of(document_class, name)
            if source is None:
                continue  # a dotted path: not probed (a wider probe, as without it)
            held = seam.data(document).get(name)
            found[source.db_field] = None if held is None else seam.as_stored(source.to_mongo(held))
        return found

    def retries_exhausted(self, error: Exception, attempts: int) -> RetriesExhaustedError:
        """A :class:`~mongoengine_ids.errors.RetriesExhaustedError` naming the field."""
        if self.unique and self.scope not in _names(self.unique_with):
            # unique=True alone: each scope's numbers start again. (Not unique itself, the
            # field meets an index declared in meta["indexes"], probed with its scope.)
            return RetriesExhaustedError(
                f"{self._label}: all {attempts} values the counter of this {self.scope!r} gave "
                "were held by documents of other scopes: a number per scope repeats across "
                f"scopes, which an index unique on {self.name!r} alone refuses; declare it "
                f"unique_with={self.scope!r} (unique per scope), or drop scope="
            )
        if self.scope is not None:  # (probe BK-2: this was said to be other scopes' doing)
            return RetriesExhaustedError(
                f"{self._label}: all {attempts} values the counter of this {self.scope!r} gave "
                "were held by stored documents of the same one already (written without it: "
                "imported, numbered by a counter without scope=, or with the counter set back); "
                "move its counter past them: mongoengine_ids.sequence.admin.set_next_value(db, "
                f"{self.counter_name()!r}, <highest stored value + 1>, scope=<the {self.scope}>)"
            )
        return RetriesExhaustedError(
            f"{self._label}: all {attempts} values the counter gave were held by stored "
            "documents already (written without it: imported, or with the counter set back); "
            f"move the counter past them: {self._label}.set_next_value(<highest stored value>)"
        )

    def coerce(self, value: Any) -> Any:
        if self.decorated:
            # The decorator's form is the user's: stored and loaded as given, as MongoEngine's.
            return value
        if isinstance(value, float) and (number := stored_integer(value)) is not None:
            value = number  # a double holding an integer: stored by the mongo shell, say
        elif (number := integer_like(value)) is not None:
            value = number  # NumPy's int64, an integral Decimal
        if self.format.active:
            if (
                isinstance(value, int)
                and not isinstance(value, bool)
                and 0 <= value <= self.space.high
            ):
                return self.format.format(value)
            return value
        if isinstance(value, int) and not isinstance(value, bool):
            return int(value)  # a bson.Int64 (a server's int64) as a plain int, as IntField
        if isinstance(value, str) and value.isascii() and value.isdigit():
            return int(value)
        return value

    # -- MongoEngine's field methods ------------------------------------------------------------

    def number_of(self, value: Any) -> int | None:
        """The counter number of a stored, formatted or raw value; None if it is none of them."""
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return stored_integer(value)  # an int, or a double holding one
        if isinstance(value, str):
            if self.format.active:
                try:
                    return self.format.parse(value)
                except InvalidIdError:
                    if self.format.luhn and not self.format.prefix:
                        # Digits with a wrong check digit are a mistyped value, not the number
                        # they spell: that is another document's (probe AN).
                        return None
            if value.isascii() and value.isdigit():
                return int(value)
        return integer_like(value)  # (probe BT: NumPy's int64 was refused)

    def in_own_form(self, stored: Any, uuid_representation: int | None = None) -> bool:
        """Whether ``stored``, a key as read, is what the field writes (not a number as text,
        nor a number under a field formatted since: see
        :meth:`~.GeneratedField._written_back`)."""
        return self._written_back(stored)

    def to_python(self, value: Any) -> Any:
        return None if value is None else self.coerce(value)

    def to_mongo(self, value: Any) -> Any:
        if value is None:
            # Asked for the key of a document not saved (a LazyReferenceField's query by it):
            # refused, as an ObjectId key is; null would match every reference left unset.
            self.error(
                f"{self._label}: None is not a sequence value (a document not saved has no key)"
            )
        return self.coerce(value)

    def validate(self, value: Any) -> None:
        if self.decorated:
            return  # any value the decorator makes is valid: MongoEngine checks nothing either
        accepted = (
            self.format.describe()
            if self.format.active
            else f"an int from 0 to {self.space.high!r}"
        )
        if self.format.active and isinstance(value, str):
            try:
                number = self.format.parse(value)
            except InvalidIdError as error:
                self.error(str(error))
        elif isinstance(value, int) and not isinstance(value, bool):
            number = value
        else:
            self.error(f"{self._label}: {value!r} is not a sequence value: expected {accepted}")
        if not 0 <= number <= self.space.high:
            self.error(f"{self._label}: {value!r} is out of range: expected {accepted}")

    def query_value(self, value: Any) -> Any:
        """The stored form of a query value: a number is formatted (or decorated); a formatted
        value is checked.

        With ``value_decorator``, an int or a string of digits is taken as the counter number
        and decorated, as MongoEngine does; anything else is taken as a value already in the
        decorator's form and sent unchanged (MongoEngine decorates it again: its issue 975).
        """
        if self.decorated:
            number = self.number_of(value)
            return value if number is None else self.value_decorator(number)
        number = self.number_of(value)
        if number is None or (self.format.active and number < 0):
            accepted = self.format.describe() if self.format.active else "an int"
            self.query_error(f"cannot query {self._label} by {value!r}: expected {accepted}")
        return self.format.format(number) if self.format.active else number


def _take(sequence: Sequence, count: int) -> list[int]:
    """``count`` values of ``sequence``. One (a save()) comes from ``next()``, which waits for a
    block being leased by another thread instead of leasing another beside it, which would
    leave values of one block unused and hand them out late (probe BZ-3: so did a scoped
    field's)."""
    return [sequence.next()] if count == 1 else sequence.next_values(count)


def _names(given: str | list[str] | tuple[str, ...] | None) -> list[str]:
    """Field names given as MongoEngine's ``unique_with`` takes them: one, several, or none."""
    return [given] if isinstance(given, str) else list(given or ())


def _reset_all() -> None:
    for field in list(_live_fields):
        field.forget_sequences()
    _forget_all_blocks()


on_reset(_reset_all)


__all__ = [
    "DEFAULT_COLLECTION",
    "INT64_MAX",
    "MAJORITY",
    "CorruptedCounterError",
    "CounterStore",
    "ExplicitValueError",
    "Sequence",
    "SequenceField",
    "SequenceFormat",
    "Space",
    "counter_id",
    "luhn_check_digit",
]
