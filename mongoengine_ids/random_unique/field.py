"""``RandomUniqueField``: a random id from a fixed space, retried when it is already taken.

**Guarantee: two documents never get the same value. The unique index (or, on a sharded
collection, the proxy collection) is what decides; the field only draws candidates and retries
the write when the index says the candidate was taken.**

The strategy is the articles' "randomly choose a unique identifier and retry if it is already
assigned" (``shared/seeds/001_...``). What this module adds to the naive loop:

* the unique index is declared by the field, created on first use, and its absence is an error
  on the first write when ``meta['auto_create_index']`` is off (without it, collisions would be
  written silently);
* a duplicate-key error is retried only when it was *this* field's index that collided (the
  server's ``keyPattern``, then the index name in the message, then a probe query); a collision
  on any other unique index raises at once;
* retries are bounded (:data:`DEFAULT_MAX_RETRIES`, justified in ``docs/random-unique.md``), and
  the observed collision rate is watched: a warning is logged when it says the space is filling;
* ``reserve_in="<collection>"`` reserves each candidate in a proxy collection keyed by ``_id``
  first, for sharded collections where the unique index cannot be enforced; a failed write
  releases its reservation.
"""

from __future__ import annotations

import datetime as _dt
import logging
import re
import weakref
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, overload

import pymongo
import pymongo.errors
from bson.regex import Regex
from mongoengine.base import BaseDocument
from mongoengine.document import EmbeddedDocument
from mongoengine.errors import NotUniqueError, OperationError
from pymongo.read_concern import ReadConcern
from pymongo.read_preferences import ReadPreference
from pymongo.write_concern import WriteConcern

from .. import resets
from .._checks import check_bool, check_collection_name
from ..errors import RetriesExhaustedError, UniqueIndexMissingError, unique_index_unbuilt
from ..resets import PerClient, on_drop, on_reset
from ..write import seam
from ..write.field import GeneratedField, Write
from .space import (
    SYSTEM_RANDOMNESS,
    IntegerSpace,
    Randomness,
    StringSpace,
    ValueSpace,
    randbelow_of,
)

if TYPE_CHECKING:
    from typing_extensions import Self

logger = logging.getLogger(__name__)

# -- limits (candidates for mongoengine_ids.constants) ------------------------------------------

#: Retries after the first attempt. A write fails only if 1 + max_retries candidates in a row
#: are taken: probability f ** (1 + max_retries) at fill f. 16 keeps that below 1e-5 at half
#: full (0.5 ** 17 = 7.6e-6), where each insert already costs one retry on average, and at
#: 1e-17 at 10% full; at 90% full a fifth of inserts fail (0.9 ** 17 = 0.17), which is the
#: signal to widen the space. See docs/random-unique.md.
DEFAULT_MAX_RETRIES: Final = 16

#: Warn when more than this share of the recent attempts collided: the share estimates the
#: fill f (a uniform draw hits a taken value with probability f).
DEFAULT_WARN_COLLISION_RATE: Final = 0.01

#: The window the rate is measured over: attempts before the counts restart, and the fewest
#: attempts a warning is based on (fewer would make 1 collision in 50 look like 2%).
STATS_WINDOW: Final = 1_000
STATS_MIN_ATTEMPTS: Final = 100

#: Reservations in the proxy collection must survive a failover: a rolled-back reservation
#: would let the same value be handed out twice, and the sharded collection behind the proxy
#: has no unique index to catch it.
RESERVE_WRITE_CONCERN: Final = WriteConcern("majority")

_DUPLICATE_KEY_CODES: Final = (11000, 11001)
#: ``... index: code_1 dup key: ...`` (4.2+) or ``... index: db.coll.$code_1 dup key: ...``.
_INDEX_IN_MESSAGE: Final = re.compile(r"index: (?P<name>\S+) dup key")
_ID_INDEX: Final = "_id_"


# -- statistics ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class RandomFieldStats:
    """What a :class:`RandomUniqueField` has seen in this process.

    Attributes:
        attempts: candidate values tried (each write of a drawn value, each reservation).
        collisions: attempts whose value was already taken.
        exhausted: writes that gave up after ``1 + max_retries`` collisions in a row.
    """

    attempts: int
    collisions: int
    exhausted: int

    @property
    def collision_rate(self) -> float:
        """``collisions / attempts`` (0.0 before any attempt): an estimate of the fill."""
        return self.collisions / self.attempts if self.attempts else 0.0


class _Counters:
    """Counts, and the windowed rate behind the "space is filling" warning, under one lock.

    Windows are the attempts numbered ``k * STATS_WINDOW`` to ``(k + 1) * STATS_WINDOW - 1``
    since the last reset. A window counts no more collisions than attempts: a write whose
    attempts cross into a new window, or a thread whose collisions come in after another's
    attempts began one, counts in it at most the attempts made there.
    """

    __slots__ = (
        "__weakref__",
        "_lock",
        "attempts",
        "collisions",
        "exhausted",
        "warned",
        "window_collisions",
    )

    def __init__(self) -> None:
        self._lock = resets.ProcessLock()
        _all_counters.add(self)
        self.attempts = self.collisions = self.exhausted = self.window_collisions = 0
        self.warned = False

    def record(self, attempts: int, collisions: int, threshold: float) -> tuple[int, int] | None:
        """Count; return (window attempts, window collisions) when a warning is due."""
        with self._lock:
            window = self.attempts // STATS_WINDOW
            self.attempts += attempts
            self.collisions += collisions
            in_window = self.attempts % STATS_WINDOW
            if self.attempts // STATS_WINDOW != window:  # a new window
                self.window_collisions, self.warned = min(collisions, in_window), False
            else:
                self.window_collisions = min(self.window_collisions + collisions, in_window)
            if (
                self.warned
                or in_window < STATS_MIN_ATTEMPTS
                or self.window_collisions <= threshold * in_window
            ):
                return None
            self.warned = True
            return (in_window, self.window_collisions)

    def count_exhausted(self) -> None:
        with self._lock:
            self.exhausted += 1

    def snapshot(self) -> RandomFieldStats:
        with self._lock:
            return RandomFieldStats(self.attempts, self.collisions, self.exhausted)

    def reset(self) -> None:
        with self._lock:
            self.attempts = self.collisions = self.exhausted = self.window_collisions = 0
            self.warned = False


#: The names of the unique indexes on a field, by client and (database, collection, db_field).
_index_names: PerClient[tuple[str, str, str], frozenset[str]] = PerClient()
on_reset(_index_names.clear)


@on_drop
def _forget_indexes_of(database: Any, name: str) -> None:
    _index_names.drop(database.client, lambda key: key[:2] != (database.name, name))


_all_counters: weakref.WeakSet[_Counters] = weakref.WeakSet()


@on_reset
def _reset_all_stats() -> None:
    # Per-process counts of writes gone (a test's): the next test starts from zero.
    for counters in list(_all_counters):
        counters.reset()


class _Claims:
    """The values that random fields without ``reserve_in`` drew for documents of this process
    whose writes are not settled: each value of a collection's field held by one document, from
    its draw until the document draws another, gives it back, or its write is settled (stored
    and confirmed). A draw another document holds is drawn again.

    The unique index keeps two stored documents from one value, not a document whose insert has
    not reached the server: when the insert of one fails before it is sent, its retry (the
    application's) would find the value stored by another document drawn meanwhile and, the two
    holding the same data, take it for its own insert landed (see :mod:`..write.landed`): two
    objects for one stored document. Keyed by the collection and the stored field name, which
    the unique index covers (two models of one collection share it). A document that is gone
    holds nothing (a weak reference, read when its value is drawn again).
    """

    def __init__(self) -> None:
        #: (client id, collection, db field, value) -> the holder.
        self._holder: dict[tuple[int, str, str, Any], weakref.ref[Any]] = {}
        #: holder id -> {(client id, collection, db field): the key it holds there}.
        self._of: dict[int, dict[tuple[int, str, str], tuple[int, str, str, Any]]] = {}
        self._lock = resets.ProcessLock()

    @staticmethod
    def where(field: Any, collection: Any) -> tuple[int, str, str]:
        """What a claim of ``field``'s values in ``collection`` is keyed by."""
        return (id(collection.database.client), collection.full_name, field.db_field)

    def claim(self, where: tuple[int, str, str], value: Any, holder: Any) -> bool:
        """Claim ``value`` for ``holder`` at ``where`` (:meth:`where`), instead of the one it
        held there; False if another document holds it."""
        key = (*where, value)
        try:
            hash(key)
        except TypeError:  # a value of a space of the user's that cannot be hashed
            return True
        with self._lock:
            held = self._holder.get(key)
            holding = None if held is None else held()
            if holding is not None and holding is not holder:
                return False
            mine = self._of.setdefault(id(holder), {})
            before = mine.get(where)
            if before is not None and before != key:
                self._drop(before, holder)
            mine[where] = key
            self._holder[key] = weakref.ref(holder)
            return True

    def release(self, field: Any, holders: Iterable[Any]) -> None:
        """``holders`` no longer hold values of ``field`` that need a claim (given back, or
        stored: their write is settled)."""
        if not self._of:
            return
        with self._lock:
            for holder in holders:
                mine = self._of.get(id(holder))
                if mine is None:
                    continue
                for where in [w for w in mine if w[2] == field.db_field]:
                    self._drop(mine.pop(where), holder)
                if not mine:
                    del self._of[id(holder)]

    def _drop(self, key: tuple[int, str, str, Any], holder: Any) -> None:
        held = self._holder.get(key)
        if held is not None and held() in (holder, None):
            del self._holder[key]

    def clear(self) -> None:
        """Forget every claim (a reset of the process's state: a test's documents are gone)."""
        with self._lock:
            self._holder.clear()
            self._of.clear()


_CLAIMS = _Claims()
# (probe BZ-1: a claim of a document a failed test kept alive refused its value in the next
# test's empty database, as "already taken")
on_reset(_CLAIMS.clear)


def _unique_on(spec: dict[str, Any], db_field: str) -> bool:
    """Whether an ``index_information()`` entry makes ``db_field`` unique on its own: a unique
    index on it alone, over every document or over those holding it (sparse, or a partial
    filter on its existence: each value the field writes is in it)."""
    partial = spec.get("partialFilterExpression")
    return (
        bool(spec.get("unique"))
        and [key for key, _direction in spec.get("key", [])] == [db_field]
        and partial in (None, {db_field: {"$exists": True}})
    )


def _release(proxy: Any, values: list[Any]) -> None:
    """Delete the reservations of ``values``: they were never written, so nobody else holds them."""
    if values:
        proxy.delete_many({"_id": {"$in": values}})


# -- the field ----------------------------------------------------------------------------------


class RandomUniqueField(GeneratedField):
    """A random id from a fixed space; a write that collides is retried with a fresh value.

    Give exactly one value space: ``digits``, ``min_value`` and ``max_value``, ``length``
    (with ``alphabet``, ``prefix``), or ``space``.

    Args:
        digits: positive integers of exactly this many decimal digits (1 to 18; with ``luhn``
            the last one is the check digit).
        min_value: the smallest integer (with ``max_value``).
        max_value: the largest integer (with ``min_value``).
        length: strings of this many characters after the prefix (check character included).
        alphabet: the characters of a string id: ``"crockford32"`` (default), ``"decimal"``,
            ``"base62"`` or the characters themselves.
        prefix: fixed text in front of every string id.
        luhn: end the id with a Luhn check digit (Luhn mod N over the alphabet for strings).
        space: a :class:`~mongoengine_ids.random_unique.space.ValueSpace` of your own.
        rng: where randomness comes from: ``randbelow(n)`` as a function, an object with a
            ``randbelow`` method, or a ``random.Random`` (its ``randrange``). Default
            :data:`~mongoengine_ids.random_unique.space.SYSTEM_RANDOMNESS` (``os.urandom``, read
            in blocks). Inject one in tests.
        max_retries: writes retried with a fresh value after a collision on this field, per
            document (default :data:`DEFAULT_MAX_RETRIES`). 0 means a collision raises
            ``NotUniqueError`` at once.
        reserve_in: name of a proxy collection (in the document's database) where each value is
            reserved, keyed by ``_id``, before the document is written: for sharded collections
            where a unique index on this field cannot be enforced. The field then declares no
            unique index of its own.
        warn_collision_rate: log a warning when more than this share of recent attempts
            collided (default 1%).
        **kwargs: any MongoEngine field option (``primary_key``, ``db_field``, ``sparse``, ...).

    Raises:
        TypeError: an argument has the wrong type.
        ValueError: no value space or more than one, an invalid space, ``max_retries < 0``,
            ``unique=False`` or ``unique_with`` without ``reserve_in``, a bad collection name.

    Warning:
        Without ``reserve_in``, uniqueness is only as good as the unique index: on a sharded
        collection whose shard key is not a prefix of it, use ``reserve_in``.
    """

    _refused_options = GeneratedField._refused_options | {"unique_with"}

    if TYPE_CHECKING:  # the value's type for type checkers; BaseField.__get__ runs

        @overload
        def __get__(self, instance: None, owner: Any) -> Self: ...
        @overload
        def __get__(self, instance: object, owner: Any) -> int | str | None: ...
        def __get__(self, instance: object, owner: Any) -> Any: ...

    def __init__(
        self,
        *,
        digits: int | None = None,
        min_value: int | None = None,
        max_value: int | None = None,
        length: int | None = None,
        alphabet: str | None = None,
        prefix: str | None = None,
        luhn: bool = False,
        space: ValueSpace | None = None,
        rng: Randomness | None = None,
        max_retries: int = DEFAULT_MAX_RETRIES,
        reserve_in: str | None = None,
        warn_collision_rate: float = DEFAULT_WARN_COLLISION_RATE,
        **kwargs: Any,
    ) -> None:
        # MongoEngine's options first: a misspelt option (``lenght=8``) is reported as such,
        # not as a missing value space.
        super().__init__(**_index_options(reserve_in, kwargs))
        self._space: ValueSpace = _space_from(
            digits=digits,
            min_value=min_value,
            max_value=max_value,
            length=length,
            alphabet=alphabet,
            prefix=prefix,
            luhn=luhn,
            space=space,
        )
        self._randbelow = randbelow_of(rng)
        _check_retry_options(max_retries, warn_collision_rate)
        self.max_retries = max_retries
        self.collision_retries = max_retries
        self.reserve_in = reserve_in
        self.warn_collision_rate = float(warn_collision_rate)
        self._counters = _Counters()
        self._size = self._space.size
        #: Values of a space that is not of integers are text (see ``prepare_query_value``).
        self.stores_text = not isinstance(self._space, IntegerSpace)
        #: An index into the space; the default randomness is ours and needs no checking.
        self._draw_index: Callable[[], int] = (
            SYSTEM_RANDOMNESS.below(self._size) if rng is None else self._checked_index
        )
        #: Whether the field's own unique index (or the _id index) decides collisions.
        self._has_own_index = bool(self.primary_key or self.unique)

    def _copied(self) -> None:
        self._counters = _Counters()  # its own collision counts

    def check_embedded_in(self, owner: type[BaseDocument], name: str) -> None:
        """Without ``reserve_in``, refuse an embedded document class (TypeError). Checked when
        the class is made, and again by every write of values for one: a class whose own
        ``__init_subclass__`` does not call ``super()`` is not seen made."""
        if not self.reserve_in and issubclass(owner, EmbeddedDocument):
            raise TypeError(
                f"RandomUniqueField {name!r} of the embedded document {owner.__name__!r} needs "
                "reserve_in='<collection>': no unique index can make a value unique across "
                "the embedded documents of every document"
            )

    # -- the value space ------------------------------------------------------------------------

    @property
    def space(self) -> ValueSpace:
        """The value space the ids are drawn from."""
        return self._space

    @property
    def space_size(self) -> int:
        """How many distinct values the field can take."""
        return self._space.size

    def stats(self) -> RandomFieldStats:
        """Attempts, collisions and exhausted writes of this field in this process."""
        return self._counters.snapshot()

    def reset_stats(self) -> None:
        """Set every count of :meth:`stats` back to zero."""
        self._counters.reset()

    def _draw(self) -> Any:
        return self._space.value(self._draw_index())

    def _checked_index(self) -> int:
        """An index from an injected ``rng``, which may return anything."""
        size = self._size
        index = self._randbelow(size)
        if type(index) is not int:
            raise TypeError(
                f"the rng of {self._label} returned {index!r} ({type(index).__name__}): "
                f"expected an int from 0 to {size - 1}"
            )
        if not 0 <= index < size:
            raise ValueError(
                f"the rng of {self._label} returned {index!r}: expected an int from 0 to {size - 1}"
            )
        return index

    # -- the write-path strategy ----------------------------------------------------------------

    def new_values(self, write: Write, count: int) -> list[Any]:
        """Draw ``count`` candidates (reserved in the proxy collection with ``reserve_in``).

        Raises:
            UniqueIndexMissingError: the field's unique index is missing and
                ``meta['auto_create_index']`` is False.
            RetriesExhaustedError: with ``reserve_in``, every candidate for a document was
                already reserved.
            TypeError: for an embedded document, without ``reserve_in``.
        """
        if self.reserve_in is not None:
            return self._reserve(write, count)
        self.check_embedded_in(write.document_class, self.name)
        if self._has_own_index:
            self._index_names(write.collection, write.document_class, create=True)
        holders = list(write.documents)
        where = _Claims.where(self, write.collection)
        values: list[Any] = []
        held = 0  # draws another document of the process holds (:class:`_Claims`)
        try:
            for position in range(count):
                holder = holders[position] if position < len(holders) else None
                claims = isinstance(holder, BaseDocument)  # a document saved or inserted
                for _ in range(self.collision_retries + 1):
                    value = self._draw()
                    if not claims or _CLAIMS.claim(where, value, holder):
                        values.append(value)
                        break
                    held += 1
                else:
                    break  # out of retries: raised below, once recorded
        except BaseException:
            self._record(len(values) + held, held)
            _CLAIMS.release(self, holders[: len(values)])
            raise
        self._record(len(values) + held, held)  # a held draw counts as a collision
        if len(values) < count:
            # The claims of the values drawn are given back with them (probe AL: a document of
            # a failed bulk insert kept its claim, and a free value could not be drawn again).
            _CLAIMS.release(self, holders[: len(values)])
            raise self._exhausted(
                self.collision_retries + 1,
                " by another document of this process whose write is not settled",
            )
        return values

    @property
    def values_unique(self) -> bool:
        """Always: by its unique index, or by its reservations (``reserve_in``)."""
        return True

    @property
    def tracks_assigned(self) -> bool:
        """With ``reserve_in``: an assigned value is reserved."""
        return self.reserve_in is not None

    def note_assigned(self, write: Write, values: list[Any]) -> None:
        """With ``reserve_in``, reserve values the user assigned (a value taken is an error).
        Without, claim them for their documents, as a draw is claimed (:class:`_Claims`): a
        draw for another document of the write, or of this process, draws again (probe BB: a
        draw took the value a later document of a bulk insert was given, which was refused).

        Raises:
            NotUniqueError: with ``reserve_in``, an assigned value is already reserved, or
                given to two places of the write (nothing is reserved).
            TypeError: for an embedded document, without ``reserve_in``.
        """
        if self.reserve_in is None:
            self.check_embedded_in(write.document_class, self.name)
            where = _Claims.where(self, write.collection)
            for holder, value in zip(write.documents, values, strict=True):
                if isinstance(holder, BaseDocument):
                    _CLAIMS.claim(where, value, holder)  # held by another: the index decides
            return
        if not values:
            return
        stored = [self.to_mongo(value) for value in values]
        twice = sorted({value for i, value in enumerate(stored) if value in stored[:i]})
        if twice:
            raise NotUniqueError(
                f"{self._label}: {twice!r} given to two places of one write (two documents, or "
                "two embedded documents of one): expected each to hold a value of its own"
            )
        proxy = self._proxy(write)
        taken, own = _insert_reservations(proxy, stored, _namespace(write, self), write.owners)
        if taken:
            # Those reserved now are released; those an earlier attempt reserved are kept (it
            # may have written them).
            _release(proxy, [v for i, v in enumerate(stored) if i not in taken and i not in own])
            shown = [stored[position] for position in sorted(taken)]
            raise NotUniqueError(
                f"{self._label}: {shown!r} already reserved in {self.reserve_in!r}: held by "
                "another document or another place of this one, or by one that held it before "
                "(a reserved value is never handed out again, also when its holder is deleted "
                "or the embedded document holding it moves to another document), or by a "
                "write whose outcome is unknown (its reply lost) of a document this one is a "
                "copy (copy, pickle) of: retry with that object itself. Expected values held "
                "nowhere else; set the field to None for a new one"
            )

    def release_values(self, write: Write, values: list[Any]) -> None:
        """Release the reservations (``reserve_in``) of values that were not written, or
        without it their claims (review O: a failed write kept them, and a free value could
        not be drawn)."""
        if self.reserve_in is None:
            _CLAIMS.release(self, write.documents)
        elif values:
            _release(self._proxy(write), [self.to_mongo(value) for value in values])

    def settled(self, holders: list[Any]) -> None:
        """The writes of ``holders`` are settled, or their values given back: the values they
        held are stored (the index's to guard) or nobody's (:class:`_Claims`)."""
        if self.reserve_in is None:
            _CLAIMS.release(self, holders)

    def is_collision(
        self, write: Write, error: pymongo.errors.DuplicateKeyError, value: Any
    ) -> bool:
        """Whether ``error`` was this field's unique index rejecting ``value``.

        Decided by the server's ``keyPattern`` if it sent one, else by the index name in the
        message, else (mongomock, old servers) by looking the value up: a document holding it
        means it is taken.
        """
        if not self._has_own_index or value is None:
            return False  # no unique index on this field: a duplicate key is someone else's
        path = write.path(self.db_field)  # (of an embedded document: where it lies)
        verdict = _verdict_from_details(error.details, path)
        if verdict is None:
            names = self._index_names(
                write.collection, write.document_class, create=False, path=path
            )
            verdict = _verdict_from_message(str(error), names)
        if verdict is None:
            # The probe can race a delete of the other document: then the error is raised as
            # not ours, which is safe (no silent duplicate), merely unlucky.
            probe = write.held_by_others(self.db_field, self.to_mongo(value))
            verdict = write.collection.find_one(probe, {"_id": 1}) is not None
        if verdict:
            self._record(0, 1)
        return verdict

    def retries_exhausted(self, error: Exception, attempts: int) -> Exception:
        """A :class:`~mongoengine_ids.errors.RetriesExhaustedError` naming field and space."""
        return self._exhausted(attempts)

    def _exhausted(self, attempts: int, where: str = "") -> RetriesExhaustedError:
        self._counters.count_exhausted()
        stats = self._counters.snapshot()
        return RetriesExhaustedError(
            f"{self._label}: all {attempts} attempts drew a value that was already taken"
            f"{where} (max_retries={self.max_retries}); the space holds "
            f"{self._space.size:,} values ({self._space.description}) and "
            f"{stats.collision_rate:.1%} of this process's {stats.attempts:,} attempts "
            "collided: it is close to full, widen it so that it still holds the values stored "
            "(docs/random-unique.md, 'Widening a space'); or its randomness repeats itself "
            "(rng=, or os.urandom, patched in a test?)"
        )

    def _record(self, attempts: int, collisions: int) -> None:
        due = self._counters.record(attempts, collisions, self.warn_collision_rate)
        if due is not None:
            self._warn(due)

    def _warn(self, due: tuple[int, int]) -> None:
        window, collided = due
        fill = collided / window
        logger.warning(
            "%s: %d of the last %d attempts (%.1f%%) drew a value already taken: the space of "
            "%s values is about %.0f%% full (expected retries per insert f/(1-f) = %.3f); "
            "widen it before inserts start failing, so that it still holds the values stored "
            "(docs/random-unique.md, 'Widening a space')",
            self._label,
            collided,
            window,
            100 * fill,
            f"{self._space.size:,}",
            100 * fill,
            fill / (1 - fill) if fill < 1 else float("inf"),
        )

    # -- the unique index -----------------------------------------------------------------------

    def _index_names(
        self,
        collection: Any,
        document_class: type[BaseDocument],
        *,
        create: bool,
        path: str | None = None,
    ) -> frozenset[str]:
        """The names of the unique indexes on exactly this field (at ``path``, for an embedded
        document's; made only for a document's own); checked once per collection.

        Raises:
            UniqueIndexMissingError: none exists, ``create`` is true and ``auto_create_index``
                is off.
        """
        if self.primary_key:
            return frozenset({_ID_INDEX})
        database = collection.database
        path = self.db_field if path is None else path
        key = (database.name, collection.name, path)
        names = _index_names.get(database.client, key)
        if names is not None:
            return names
        self._check_declared_index(document_class)
        info = collection.index_information()
        names = frozenset(name for name, spec in info.items() if _unique_on(spec, path))
        if not names:
            if not create or path != self.db_field:
                return names
            ours = [(self.db_field, pymongo.ASCENDING)]
            for name, spec in info.items():
                if [tuple(pair) for pair in spec.get("key", [])] == ours:  # would clash
                    raise self._index_missing(
                        collection, f"its index {name!r} is {spec!r}", clashing=name
                    )
            if not seam.auto_create_index(document_class):
                raise self._index_missing(collection, "meta['auto_create_index'] is False")
            names = frozenset({self._create_index(collection)})
        _index_names.set(database.client, key, names)
        return names

    def _create_index(self, collection: Any) -> str:
        """Create the unique index on this field; its name.

        Raises:
            UniqueIndexMissingError: two stored documents hold one value (probe 40, B: the
                server's bare ``DuplicateKeyError`` from ``backfill()``, or from ``save()`` of a
                new document MongoEngine's ``NotUniqueError``, as if it had collided).
        """
        try:
            return str(
                collection.create_index(
                    [(self.db_field, pymongo.ASCENDING)], unique=True, sparse=self.sparse
                )
            )
        except pymongo.errors.DuplicateKeyError as error:
            raise unique_index_unbuilt(
                self._label, collection.name, self.db_field, error
            ) from error

    def _index_missing(
        self, collection: Any, why: str, *, clashing: str | None = None
    ) -> UniqueIndexMissingError:
        """The error for a missing unique index; ``clashing``: the name of an index on the same
        keys, which the one needed cannot be created beside."""
        create = f"create_index([({self.db_field!r}, 1)], unique=True"
        create += ", sparse=True)" if self.sparse else ")"
        fix = (
            f"Create it with {create}, or through the model's ensure_indexes()"
            if clashing is None
            else f"Drop {clashing!r} (and its declaration in meta['indexes'], if any), then "
            f"create it with {create}, or through the model's ensure_indexes()"
        )
        return UniqueIndexMissingError(
            f"{self._label}: collection {collection.name!r} has no unique index on "
            f"{self.db_field!r} alone, and {why}; without one, random collisions would be "
            f"written silently. It may be sparse, or partial on "
            f"{{{self.db_field!r}: {{'$exists': True}}}}; none other makes every value "
            f"unique. {fix}"
        )

    def _check_declared_index(self, document_class: type[BaseDocument]) -> None:
        """Refuse an index the model declares on this field with a partial filter while the
        field is sparse: MongoEngine merges the field's ``unique`` and ``sparse`` into it, and
        MongoDB refuses an index both sparse and partial (mongomock makes it)."""
        for spec in seam.index_specs(document_class):
            if [key for key, _ in spec.get("fields", [])] != [self.db_field]:
                continue
            if spec.get("sparse") and "partialFilterExpression" in spec:
                raise UniqueIndexMissingError(
                    f"{self._label}: meta['indexes'] declares an index on "
                    f"{self.db_field!r} with partialFilterExpression="
                    f"{spec['partialFilterExpression']!r}, and the field is sparse: MongoEngine "
                    "merges the field's unique index into it, and MongoDB refuses an index "
                    "both sparse and partial. Declare the field with sparse=False (a partial "
                    f"filter {{{self.db_field!r}: {{'$exists': True}}}} skips the documents "
                    "lacking it, as sparse does)"
                )

    # -- the proxy collection -------------------------------------------------------------------

    def _proxy(self, write: Write) -> Any:
        assert self.reserve_in is not None
        user = (
            "the collection of the documents themselves"
            if self.reserve_in == write.collection.name
            else seam.collection_user(self.reserve_in, write.database)
        )
        if user is not None:  # probe BD: reservations written among another model's documents
            raise ValueError(
                f"{self._label}: reserve_in={self.reserve_in!r} is {user}; the reservations "
                "need a collection of their own"
            )
        return write.database.get_collection(
            self.reserve_in,
            write_concern=RESERVE_WRITE_CONCERN,
            # A reservation just made is found, replicated or not (see seam.primary).
            read_preference=ReadPreference.PRIMARY,
            read_concern=ReadConcern("local"),
        )

    def _reserve(self, write: Write, count: int) -> list[Any]:
        """``count`` values, each reserved in the proxy collection (one round trip per round)."""
        proxy = self._proxy(write)
        namespace = _namespace(write, self)
        values: list[Any] = [None] * count
        attempts = [0] * count
        pending = list(range(count))
        reserved: list[Any] = []
        try:
            while pending:
                candidates = [self.to_mongo(self._draw()) for _ in pending]
                taken, _ = _insert_reservations(proxy, candidates, namespace)
                self._record(len(pending), len(taken))
                still: list[int] = []
                for position, slot in enumerate(pending):
                    attempts[slot] += 1
                    if position not in taken:
                        values[slot] = candidates[position]
                        reserved.append(candidates[position])
                    else:
                        still.append(slot)
                # Raised once the round is recorded: every value it reserved is released (probe
                # AL: those after the first position out of retries had been left reserved).
                out = next((slot for slot in still if attempts[slot] > self.max_retries), None)
                if out is not None:
                    where = f" in the proxy collection {self.reserve_in!r}"
                    raise self._exhausted(attempts[out], where)
                pending = still
        except BaseException:
            _release(proxy, reserved)
            raise
        return values

    # -- MongoEngine's field contract -----------------------------------------------------------

    def coerce(self, value: Any) -> Any:
        """The canonical form of a loosely typed value (see the space); junk unchanged."""
        return self._space.coerce(value)

    def in_own_form(self, stored: Any, uuid_representation: int | None = None) -> bool:
        """Whether ``stored``, a key as read, is what the field writes (not an id in lower
        case, nor a number as text: see :meth:`~.GeneratedField._written_back`)."""
        return self._written_back(stored)

    def to_python(self, value: Any) -> Any:
        """The stored value as the Python value (ints and strings are stored as they are)."""
        return None if value is None else self._space.coerce(value)

    def to_mongo(self, value: Any) -> Any:
        """The value in stored form, not checked (as MongoEngine's fields: ``validate()`` and
        the write path check what is written). A value stored before the space changed is
        serialised as it is (``to_json()``, ``copy``, ``pickle``: probe AZ)."""
        if value is None:
            # Asked for the key of a document not saved (a reference's query by it): refused,
            # as an ObjectId key is; null would match every reference left unset (review AQ).
            self.error(f"{self._label}: None is not a value (a document not saved has no key)")
        return self._space.coerce(value)

    def validate(self, value: Any, clean: bool = True) -> None:
        """Raise ``ValidationError`` unless ``value`` is in the field's space."""
        problem = self._space.problem(self._space.coerce(value))
        if problem is not None:
            self.error(
                f"{value!r} is not a valid id for {self._label}: {problem}; expected "
                f"{self._space.description}"
            )

    def query_value(self, value: Any) -> Any:
        """A query value in stored form.

        A value of the space's kind that is not in the space simply matches nothing (documents
        stored before the space changed can still be found); a value that cannot be one at all
        (``"--5"`` or ``"²"`` for integers, an int for strings) raises ``ValidationError``
        naming the field and quoting it.
        """
        if isinstance(value, (list, tuple, set)):
            return [self._query_value(item) for item in value]
        return self._query_value(value)

    def _query_value(self, value: Any) -> Any:
        coerced = self._space.coerce(value)
        space = self._space
        if isinstance(space, IntegerSpace):
            wrong = isinstance(coerced, bool) or not isinstance(coerced, (int, float))
            accepted = "an int, or a string of ASCII digits"
        elif isinstance(space, StringSpace):
            wrong = not isinstance(coerced, (str, re.Pattern, Regex))
            accepted = "a str"
        else:  # a space of the user's: its values may be of any kind
            wrong = False
        if wrong:
            self.query_error(
                f"cannot query {self._label} by {value!r}: expected {accepted} "
                f"({space.description})"
            )
        return coerced


# -- helpers ------------------------------------------------------------------------------------


def _index_options(reserve_in: str | None, kwargs: dict[str, Any]) -> dict[str, Any]:
    """MongoEngine's options of a RandomUniqueField, with its unique index made sparse.

    Raises:
        ValueError: ``unique_with``, or ``unique=False`` without ``reserve_in``.
    """
    if reserve_in is not None:
        _check_collection_name(reserve_in)
    if kwargs.get("unique_with"):
        raise ValueError(
            f"unique_with={kwargs['unique_with']!r} is not supported: a compound index "
            "would not make the random value unique on its own"
        )
    if kwargs.get("primary_key"):
        kwargs.setdefault("unique", False)  # the _id index is unique already
    elif reserve_in is None:
        if "unique" in kwargs:
            check_bool("unique", kwargs["unique"])
        if kwargs.get("unique", True) is not True:
            raise ValueError(
                f"unique={kwargs['unique']!r}: a RandomUniqueField needs its unique index "
                "(to create it yourself, set meta['auto_create_index'] = False), or "
                "reserve_in='<collection>' where a unique index cannot be enforced"
            )
        kwargs["unique"] = True
        # Documents stored before the field was added lack it: they must not collide.
        kwargs.setdefault("sparse", True)
    return kwargs


def _check_retry_options(max_retries: object, warn_collision_rate: object) -> None:
    """Raise TypeError or ValueError for a bad ``max_retries`` or ``warn_collision_rate``."""
    if not isinstance(max_retries, int) or isinstance(max_retries, bool):
        raise TypeError(f"max_retries must be an int, not {max_retries!r}")
    if max_retries < 0:
        raise ValueError(f"max_retries={max_retries!r} is negative: expected 0 or more")
    if not isinstance(warn_collision_rate, (int, float)) or isinstance(warn_collision_rate, bool):
        raise TypeError(f"warn_collision_rate must be a float, not {warn_collision_rate!r}")
    if not 0 <= warn_collision_rate <= 1:
        raise ValueError(
            f"warn_collision_rate={warn_collision_rate!r} is not a share: expected 0 to 1"
        )


def _lacking(space: object) -> str:
    """The members of a ``ValueSpace`` that ``space`` lacks, for a message."""
    members = ("size", "description", "value", "coerce", "problem")
    return ", ".join(name for name in members if not hasattr(space, name))


def _space_from(
    *,
    digits: int | None,
    min_value: int | None,
    max_value: int | None,
    length: int | None,
    alphabet: str | None,
    prefix: str | None,
    luhn: bool,
    space: ValueSpace | None,
) -> ValueSpace:
    """The one value space the arguments describe (see :class:`RandomUniqueField`)."""
    if not isinstance(luhn, bool):
        raise TypeError(f"luhn must be a bool, not {luhn!r}")
    given = [
        shown
        for shown, present in (
            (f"digits={digits!r}", digits is not None),
            (
                f"min_value={min_value!r}, max_value={max_value!r}",
                min_value is not None or max_value is not None,
            ),
            (f"length={length!r}", length is not None),
            (f"space={space!r}", space is not None),
        )
        if present
    ]
    if len(given) != 1:
        raise ValueError(
            f"{' and '.join(given) or 'no value space'} given: expected exactly one of digits=N, "
            "min_value=A with max_value=B, length=N (with alphabet, prefix) or space=..."
        )
    if length is None and (alphabet is not None or prefix is not None):
        raise ValueError(
            f"alphabet={alphabet!r}, prefix={prefix!r} apply to string ids: expected length=N"
        )
    if space is not None:
        if not isinstance(space, ValueSpace):
            raise TypeError(
                f"space must be a ValueSpace, not {space!r} (it lacks {_lacking(space)}): "
                "expected an object with size, description, value(index), coerce(value) and "
                "problem(value)"
            )
        size = space.size
        if isinstance(size, bool) or not isinstance(size, int):
            raise TypeError(f"space.size must be an int >= 1, not {size!r}")
        if size < 1:
            raise ValueError(f"space.size must be an int >= 1, not {size!r}")
        if luhn:
            raise ValueError("luhn=True with space=...: the space decides its own check digit")
        return space
    if digits is not None:
        return IntegerSpace.of_digits(digits, luhn=luhn)
    if length is not None:
        return StringSpace(
            length, "crockford32" if alphabet is None else alphabet, prefix=prefix or "", luhn=luhn
        )
    if min_value is None or max_value is None:
        raise ValueError(f"min_value={min_value!r}, max_value={max_value!r}: expected both bounds")
    if luhn:
        raise ValueError(
            f"luhn=True with min_value={min_value!r}, max_value={max_value!r}: a check digit "
            "changes the range; expected digits=N (the check digit is the last of the N)"
        )
    return IntegerSpace(min_value, max_value)


def _check_collection_name(name: object) -> None:
    check_collection_name("reserve_in", name)


def _namespace(write: Write, field: RandomUniqueField) -> str:
    """What a reservation records as its owner: ``"<collection>.<db_field>"``."""
    return f"{write.collection.name}.{field.db_field}"


def _insert_reservations(
    proxy: Any, values: list[Any], namespace: str, owners: Sequence[str] = ()
) -> tuple[set[int], set[int]]:
    """Insert a reservation per value, for its owner if ``owners`` are given; return the
    positions whose value was already reserved, for another, and those whose value was already
    reserved for the same owner (by an earlier attempt of the same write, whose outcome is
    unknown: its own).

    Raises:
        OperationError: the proxy collection refused a reservation for another reason.
    """
    now = _dt.datetime.now(_dt.timezone.utc)
    by: Sequence[str | None] = owners or [None] * len(values)
    documents = [
        {"_id": value, "ns": namespace, "at": now, **({"by": owner} if owner else {})}
        for value, owner in zip(values, by, strict=True)
    ]
    try:
        proxy.insert_many(documents, ordered=False)
    except pymongo.errors.BulkWriteError as error:
        details = error.details
        problems = [
            e for e in details.get("writeErrors", []) if e.get("code") not in _DUPLICATE_KEY_CODES
        ]
        taken = {int(e["index"]) for e in details.get("writeErrors", [])}
        if problems or details.get("writeConcernErrors"):
            _release(proxy, [value for i, value in enumerate(values) if i not in taken])
            raise OperationError(
                f"could not reserve values in {proxy.name!r} ({details})"
            ) from error
        # A value a position before it in this call holds is taken by that one, whoever for.
        repeated = {i for i in taken if values[i] in values[:i]}
        own = _reserved_for(proxy, [(i, values[i], by[i]) for i in taken - repeated if by[i]])
        return taken - own, own
    return set(), set()


def _reserved_for(proxy: Any, wanted: list[tuple[int, Any, str | None]]) -> set[int]:
    """The positions of ``wanted`` (position, value, owner) whose value is reserved for that
    owner (one look-up)."""
    if not wanted:
        return set()
    found = list(proxy.find({"_id": {"$in": [value for _, value, _ in wanted]}}, {"by": 1}))
    return {
        position
        for position, value, owner in wanted
        if any(doc["_id"] == value and doc.get("by") == owner for doc in found)
    }


def _verdict_from_details(details: Any, db_field: str) -> bool | None:
    """From the server's ``keyPattern``: whether the index includes ``db_field``. One of
    several keys too: another document holds the same value on every key, so the value is
    taken (the server names one of the indexes the document violates; with a compound index
    declared before the field's own, that one)."""
    if not isinstance(details, dict):
        return None
    pattern = details.get("keyPattern")
    if not isinstance(pattern, dict):
        return None
    return db_field in pattern


def _verdict_from_message(message: str, names: Iterable[str]) -> bool | None:
    """From ``index: <name> dup key`` in the message: whether it names one of ``names``."""
    match = _INDEX_IN_MESSAGE.search(message)
    if match is None:
        return None
    name = match.group("name").rsplit(".$", 1)[-1]
    return name in set(names)


__all__ = [
    "DEFAULT_MAX_RETRIES",
    "DEFAULT_WARN_COLLISION_RATE",
    "RandomFieldStats",
    "RandomUniqueField",
    "UniqueIndexMissingError",
]
