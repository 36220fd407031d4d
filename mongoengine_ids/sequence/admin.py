"""Inspect and move sequence counters: list them, show one, set the next value.

The Python side of ``mongoengine-ids counters list|show|set``. Works on the counter collection
directly, so it also sees counters made by MongoEngine's own ``SequenceField``.

.. warning::
   Other processes that already hold leased blocks keep handing them out (this process's are
   dropped): moving a counter **down** (``force=True``) can make a value be handed out twice.
   Moving it up is always safe.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeGuard

from bson.son import SON
from mongoengine.connection import get_db
from pymongo.read_concern import ReadConcern
from pymongo.read_preferences import ReadPreference

from .._checks import check_collection_name
from ..write import seam
from .field import (
    DEFAULT_COLLECTION,
    INT64_MAX,
    MAJORITY,
    SHARD_SEPARATOR,
    check_database,
    counter_id,
    discard_blocks,
    leased_floor,
    set_leased_floor,
    stored_integer,
)

if TYPE_CHECKING:
    from pymongo.collection import Collection
    from pymongo.database import Database


@dataclass(frozen=True)
class ShardInfo:
    """One counter document.

    Attributes:
        document_id: its ``_id``.
        next: the highest value handed out or leased (``"next"``), or None if corrupted.
        low: the first value it owns (None for MongoEngine's shape, which stores no bounds).
        high: the last value it owns (None likewise).
        problem: why the document is corrupted, or None.
    """

    document_id: str
    next: int | None
    low: int | None
    high: int | None
    problem: str | None = None

    @property
    def last(self) -> int | None:
        """The highest value it handed out or leased: ``next``, unless none yet (``next`` below
        the first value: -1 before 0, or a shard made by a lease that went to another, holding
        the value before its own) or corrupted."""
        first = 0 if self.low is None else self.low
        if self.next is None or self.problem is not None or self.next < first:
            return None
        return self.next

    def headroom(self, high: int | None = None) -> int | None:
        """Values left before this counter is exhausted (None if corrupted: its bounds or
        ``next`` are not what the package writes).

        Args:
            high: the last value, for a document that stores no bounds (``10**digits - 1``);
                default: its own bound, else the end of a BSON int64.
        """
        if self.next is None or self.problem is not None:
            return None
        end = self.high if self.high is not None else (INT64_MAX if high is None else high)
        return max(0, end - self.next)


@dataclass(frozen=True)
class CounterInfo:
    """A sequence: one counter document, or its shards.

    Attributes:
        name: the sequence name (MongoEngine's ``"<collection>.<field>"``).
        scope: the scope value of a scoped sequence, else None: as its counter is named
            (an embedded document's, a generic reference's as a ``SON``), so that given back
            to :func:`show_counter` or :func:`set_next_value` it names the same counter.
        shards: the counter documents, in shard order.
    """

    name: str
    scope: Any
    shards: tuple[ShardInfo, ...]

    @property
    def sharded(self) -> bool:
        """Whether the values are split over several counter documents."""
        return any(shard.low is not None for shard in self.shards)

    @property
    def last(self) -> int | None:
        """The highest value handed out or leased (of any shard, :attr:`ShardInfo.last`); None
        if none was."""
        values = [shard.last for shard in self.shards if shard.last is not None]
        return max(values) if values else None

    @property
    def next_value(self) -> int | None:
        """The value the next lease starts with (unsharded only: a sharded one picks a shard)."""
        values = [shard.next for shard in self.shards if shard.next is not None]
        if self.sharded or not values:
            return None
        return max(values) + 1

    def headroom(self, high: int | None = None) -> int | None:
        """Values left before the sequence is exhausted, summed over shards.

        Args:
            high: the last value of an unsharded sequence (``10**digits - 1``); default: the end
                of a BSON int64.
        """
        rooms = [shard.headroom(high) for shard in self.shards]
        if any(room is None for room in rooms):
            return None
        return sum(room for room in rooms if room is not None)

    @property
    def problems(self) -> list[str]:
        """What is wrong with its documents (empty when all are sound)."""
        return [f"{s.document_id!r}: {s.problem}" for s in self.shards if s.problem is not None]


def _database(database: Database[Any] | str) -> Database[Any]:
    """The database given to an admin function: a pymongo ``Database``, or a MongoEngine alias's."""
    check_database(database)
    return get_db(database) if isinstance(database, str) else database


def _collection(database: Database[Any], collection: str) -> Collection[Any]:
    check_collection_name("collection", collection)
    return database.get_collection(
        collection,
        write_concern=MAJORITY,
        read_preference=ReadPreference.PRIMARY,
        read_concern=ReadConcern("local"),  # what the primary applied (see seam.primary)
    )


def _check_sequence_name(name: object) -> None:
    if not isinstance(name, str):
        raise TypeError(f"name must be a sequence name (str), not {name!r}")
    if not name:
        raise ValueError(f"name={name!r} is empty: expected a sequence name")


def _is_int(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _shard_info(document: Mapping[str, Any]) -> ShardInfo:
    document_id = str(document.get("_id"))
    value = stored_integer(document.get("next"))
    low, high = document.get("low"), document.get("high")
    problem = None
    if value is None:
        problem = f"'next' is {document.get('next')!r}; expected an integer"
    bounded = "low" in document or "high" in document or "shard" in document
    if bounded:
        if not (_is_int(low) and _is_int(high)):
            problem = problem or f"bounds are low={low!r}, high={high!r}; expected integers"
            low = high = None
        elif value is not None and not low - 1 <= value <= high:
            problem = f"'next' is {value!r}, outside its bounds {low - 1!r}..{high!r}"
    return ShardInfo(
        document_id, value, low if bounded else None, high if bounded else None, problem
    )


def _group_key(document: Mapping[str, Any]) -> tuple[str, str | None]:
    """The sequence of a counter document and its ``_id`` without a shard's suffix: the shards
    of one counter share it. (Not the text of its ``scope``, which the driver decodes: two
    counters named from a dict and from a ``SON`` of the same items would be taken for one.)"""
    document_id = str(document.get("_id"))
    name = document.get("sequence")
    if not isinstance(name, str):
        return document_id, None
    shard = document.get("shard")
    suffix = f"{SHARD_SEPARATOR}{shard}" if _is_int(shard) else ""
    return name, document_id.removesuffix(suffix)


def _named_scope(document: Mapping[str, Any]) -> object:
    """The ``scope`` of a counter document as its ``_id`` names it, so that given back
    (:func:`show_counter`, :func:`set_next_value`) it names that counter: as decoded, or as the
    ``SON`` that a field's ``to_mongo()`` made of an embedded document or a generic reference,
    which the driver decodes as a dict (whose text names another counter; probe AM)."""
    scope = document.get("scope")
    name = document.get("sequence")
    if scope is None or not isinstance(name, str):
        return scope
    inner = scope
    if isinstance(scope, dict):  # a map of embedded documents: a dict of SONs
        inner = type(scope)((key, _as_son(item)) for key, item in scope.items())
    for candidate in (scope, _as_son(scope), _as_son(scope, deep=False), inner):
        if _of_scope(document, name, candidate):
            return candidate
    return scope  # (an embedded document holding both a SON and a dict: see sequence.md)


def _as_son(value: Any, *, deep: bool = True) -> Any:
    """``value`` with its dicts as ``SON`` (``deep``: at any depth; else those at the top, or
    items of a list at the top)."""
    if isinstance(value, list):
        return [_as_son(item, deep=deep) for item in value]
    if isinstance(value, dict):
        items = value.items()
        return SON((key, _as_son(item) if deep else item) for key, item in items)
    return value


def _shard_number(document: Mapping[str, Any]) -> int:
    shard = document.get("shard")
    return shard if _is_int(shard) else 0


def _build(documents: Iterable[Mapping[str, Any]]) -> list[CounterInfo]:
    groups: dict[tuple[str, str | None], list[Mapping[str, Any]]] = {}
    for document in documents:
        groups.setdefault(_group_key(document), []).append(document)
    infos = []
    for (name, _), members in sorted(
        groups.items(), key=lambda item: (item[0][0], item[0][1] or "")
    ):
        members.sort(key=_shard_number)
        infos.append(
            CounterInfo(name, _named_scope(members[0]), tuple(_shard_info(doc) for doc in members))
        )
    return infos


def list_counters(
    database: Database[Any] | str, *, collection: str = DEFAULT_COLLECTION
) -> list[CounterInfo]:
    """Every sequence in the counter collection, sorted by name then scope.

    Args:
        database: where the counters are (the model's database): a pymongo ``Database``, or a
            MongoEngine alias.
        collection: the counter collection.

    Returns:
        One :class:`CounterInfo` per sequence and scope (shards grouped); corrupted documents
        are included with their :attr:`ShardInfo.problem`.
    """
    return _build(_collection(_database(database), collection).find())


def show_counter(
    database: Database[Any] | str,
    name: str,
    *,
    scope: object = None,
    collection: str = DEFAULT_COLLECTION,
) -> CounterInfo:
    """One sequence: its counter document or all its shards.

    Args:
        database: where the counters are: a pymongo ``Database``, or a MongoEngine alias.
        name: the sequence name (the ``_id`` of an unsharded, unscoped counter).
        scope: the scope value of a scoped sequence.
        collection: the counter collection.

    Raises:
        TypeError: ``name`` is not a str, or ``database`` neither a ``Database`` nor an alias.
        ValueError: ``collection`` is not a usable collection name.
        LookupError: no counter of that name (and scope).
    """
    _check_sequence_name(name)
    database = _database(database)
    scope = seam.as_stored(scope)  # as the field names its counter
    counters = _collection(database, collection)
    base = _counter_id(name, scope)
    documents = [doc for doc in counters.find({"_id": base}) if _of_scope(doc, name, scope)]
    if not documents:
        documents = [
            doc for doc in counters.find({"sequence": name}) if _of_scope(doc, name, scope)
        ]
    if not documents:
        where = "" if scope is None else f" with scope {scope!r}"
        hint = (
            f"{name!r} is numbered per scope: name one (scope=, or --scope)"
            if scope is None and _scoped(counters, name)
            else "`mongoengine-ids counters list` shows the counters there"
        )
        raise LookupError(f"no counter {name!r}{where} in {database.name}.{collection}; {hint}")
    return _build(documents)[0]


def has_scoped_counters(
    database: Database[Any] | str, name: str, *, collection: str = DEFAULT_COLLECTION
) -> bool:
    """Whether sequence ``name`` has counters per scope (an unscoped counter of that name may
    still be another field's: a shared ``sequence_name``)."""
    return _scoped(_collection(_database(database), collection), name)


def _scoped(counters: Collection[Any], name: str) -> bool:
    return counters.find_one({"sequence": name, "scope": {"$exists": True}}) is not None


def _of_scope(document: Mapping[str, Any], name: str, scope: object) -> bool:
    """Whether the counter ``document`` of sequence ``name`` is one of ``scope`` (stored form;
    None: unscoped): its ``_id`` is the one the field gives that scope's counter (of its own
    shard, if any). The text alone cannot tell: shard 1 of scope ``"a"`` is ``name@a#1``, as
    the unsharded counter of scope ``"a#1"`` is. (Its ``scope`` cannot either: the driver may
    decode it as another type than the one the ``_id`` was written from.)"""
    shard = document.get("shard")
    return document.get("_id") == _counter_id(name, scope, shard if _is_int(shard) else None)


def set_next_value(
    database: Database[Any] | str,
    name: str,
    value: int,
    *,
    scope: object = None,
    force: bool = False,
    collection: str = DEFAULT_COLLECTION,
) -> CounterInfo:
    """Make ``value`` the next value a lease hands out (stores ``next = value - 1``).

    Unlike MongoEngine's ``SequenceField.set_next_value(n)`` (after which the next value is
    ``n + 1``), ``value`` here is the next value itself. For a sharded sequence, the shard that
    owns ``value`` is moved. A missing counter is created: unsharded, or for a new scope of a
    sharded sequence, the shard owning ``value`` as its other scopes' shards are laid out.

    .. warning::
       A sharded field (``shards=``) makes its own counters, with the bounds of their values:
       one that has made none yet (no document saved) refuses the unsharded counter made here
       (``CorruptedCounterError`` on every save) until it is deleted. Save a document first.
       A name ending as a shard's ``_id`` does (``"ticket.number#1"``) is refused when it has
       no counter.

    Args:
        database: where the counters are: a pymongo ``Database``, or a MongoEngine alias.
        name: the sequence name.
        value: the next value to hand out.
        scope: the scope value of a scoped sequence.
        force: allow moving the counter down (**values may then be handed out twice**).
        collection: the counter collection.

    Returns:
        The sequence after the change.

    Raises:
        TypeError: ``name`` is not a str, ``value`` not an int, ``force`` not a bool, or
            ``database`` neither a ``Database`` nor an alias.
        ValueError: ``value`` is below the counter, or the counter is corrupted (its ``next``
            not an integer), and ``force`` is False; no shard owns ``value`` (of a new scope:
            no shard its other scopes have made); ``name`` is empty, or has no counter and
            ends in ``#`` and digits (a shard's ``_id``: its counter is made by the field).
        LookupError: a sharded sequence that does not exist (unsharded ones are created).
    """
    _check_sequence_name(name)
    if not _is_int(value):
        raise TypeError(f"value must be an int, not {value!r}")
    if not isinstance(force, bool):
        raise TypeError(f"force must be a bool, not {force!r}")
    if not 0 <= value <= INT64_MAX:
        # 0: the first value of a field with start=0.
        raise ValueError(f"value={value!r} must be between 0 and {INT64_MAX!r}")
    database = _database(database)
    scope = seam.as_stored(scope)  # as the field names its counter
    target = _collection(database, collection)
    try:
        info = show_counter(database, name, scope=scope, collection=collection)
    except LookupError:
        info = None
    document_id, shard = _counter_owning(info, name, value, scope)
    # A counter made here holds what the sequence's own would (a scoped one: its names).
    extra: dict[str, Any] = {} if scope is None else {"sequence": name, "scope": scope}
    if info is None and scope is not None:
        layout = _layout_of_other_scopes(target, name, value)
        if layout is not None:
            document_id = _counter_id(name, scope, layout["shard"])
            extra.update(layout)
    if info is None and "shard" not in extra:
        _refuse_shard_name(target, document_id, name, scope)
    if info is None:
        _refuse_foreign(target, document_id, name, scope)
    if info is None and scope is None and _scoped(target, name):
        # The field refuses a counter without scope beside its scopes' (review W).
        raise ValueError(
            f"sequence {name!r} has counters per scope and none without: give scope= (a "
            "counter without scope made beside them would be refused by the field on the "
            "first save of every new scope)"
        )
    if not force:
        _refuse_move(target, document_id, shard, value)
    # $max unless forced: a concurrent lease that moved it further is kept.
    update: dict[str, Any] = {"$set" if force else "$max": {"next": value - 1}}
    if extra:
        update["$setOnInsert"] = extra
    target.update_one({"_id": document_id}, update, upsert=True)
    # Set on purpose: made again from there if deleted (with force, below what was leased).
    set_leased_floor(target, document_id, value - 1, down=force)
    # This process's blocks of the sequence would keep handing out the old values.
    discard_blocks(database.name, collection, name)
    return show_counter(database, name, scope=scope, collection=collection)


def _refuse_shard_name(target: Any, document_id: str, name: str, scope: object) -> None:
    """Refuse to make an unsharded counter of ``name`` and ``scope`` (none was found) when
    ``name`` ends as a shard's ``_id`` does (``#<k>``): a shard's counter document is made by
    its field, with the bounds of its values. One made here would have none, and the field
    would refuse it on every save (probe BE: ``counters set ticket.number#1 7000``, the
    ``_id`` that ``counters show`` prints).

    Raises:
        ValueError: ``name`` ends in ``#`` and ASCII digits.
    """
    base, separator, shard = name.rpartition(SHARD_SEPARATOR)
    if not (separator and base and shard.isascii() and shard.isdigit()):
        return
    of_scope = "" if scope is None else f" with scope {scope!r}"
    found = target.find_one({"_id": document_id})
    owner = None if found is None else found.get("sequence")
    if found is not None and isinstance(owner, str) and _is_int(found.get("shard")):
        raise ValueError(
            f"{document_id!r} is the counter of shard {found['shard']!r} of sequence "
            f"{owner!r}, not a sequence: name the sequence ({owner!r}, with its scope if it "
            "has one), and the shard owning the value is moved; nothing was changed"
        )
    if found is not None:
        return  # not a shard's: _refuse_foreign says what it is
    where = f"{target.database.name}.{target.name}"
    raise ValueError(
        f"no counter {name!r}{of_scope} in {where}, and a name ending in "
        f"{SHARD_SEPARATOR + shard!r} is a shard's: a shard's counter is made by its field, "
        "with the bounds of its values (one made here would have none, and the field would "
        f"refuse it): save a document first, then name the sequence ({base!r} if that is "
        "its name); nothing was changed"
    )


def _refuse_foreign(target: Any, document_id: str, name: str, scope: object) -> None:
    """Refuse to make the counter ``document_id`` of ``name`` and ``scope`` (none was found)
    over a document of that ``_id`` that is not this counter, as its fields say (a hand edit: a
    shard's bounds on an ``_id`` without its ``#k``): moved, it would still not be found, and
    the call would fail after writing (probe AM)."""
    if target.find_one({"_id": document_id}, {"_id": 1}) is not None:
        where = f"{target.database.name}.{target.name}"
        raise ValueError(
            f"the document {document_id!r} in {where} is not the counter of {name!r}"
            f"{'' if scope is None else f' with scope {scope!r}'}, as its fields say "
            "(`mongoengine-ids counters list` shows what is wrong with it): fix or delete it "
            "by hand"
        )


def _refuse_move(target: Any, document_id: str, shard: ShardInfo | None, value: int) -> None:
    """Refuse to make ``value`` the next value of counter ``document_id`` (``shard``: its
    document, None if there is none) where that could hand values out twice.

    Raises:
        ValueError: the counter is corrupted, above ``value - 1``, or was deleted while this
            process held values of it from ``value`` on.
    """
    if shard is not None and shard.problem is not None:
        raise ValueError(
            f"counter {document_id!r} is corrupted: {shard.problem}; nothing was changed (use "
            "force=True, --force, to overwrite it, once you know which values it handed out)"
        )
    current = None if shard is None else shard.next
    if current is not None and current > value - 1:
        raise ValueError(
            f"counter {document_id!r} is at {current!r}: the next value is {current + 1!r}, "
            f"above {value!r}; moving it down can hand values out twice (use force=True, "
            "--force, only if no process holds leased blocks and no document has those values)"
        )
    leased = leased_floor(target, document_id)
    if current is None and leased is not None and leased > value - 1:
        raise ValueError(
            f"counter {document_id!r} was deleted while this process held values of it up to "
            f"{leased!r}: making it again with the next value {value!r} would hand them out "
            "twice (use force=True, --force, only if no document has those values)"
        )


def _counter_owning(
    info: CounterInfo | None, name: str, value: int, scope: object
) -> tuple[str, ShardInfo | None]:
    """The ``_id`` of the counter document that hands out ``value``, and the document (None if
    there is none yet)."""
    if info is not None and info.sharded:
        owners = [
            shard
            for shard in info.shards
            if shard.low is not None and shard.high is not None and shard.low <= value <= shard.high
        ]
        if not owners:
            bounds = ", ".join(f"{s.low}..{s.high}" for s in info.shards)
            raise ValueError(
                f"value={value!r} is in no shard of {name!r} made so far; they own {bounds} (a "
                "shard's counter is made when the field first uses it)"
            )
        return owners[0].document_id, owners[0]
    return _counter_id(name, scope), None if info is None else info.shards[0]


def _layout_of_other_scopes(target: Any, name: str, value: int) -> dict[str, int] | None:
    """For a new scope of sequence ``name``: the shard owning ``value`` in the layout of its
    other scopes (its ``shard``, ``low`` and ``high``), which the field gives every scope; None
    if they are not sharded (or there are none). An unsharded counter made beside a sharded
    field's would be refused by the field as laid out otherwise.

    Raises:
        ValueError: no shard of that layout owns ``value``.
    """
    found = {
        (document["shard"], document.get("low"), document.get("high"))
        for document in target.find({"sequence": name, "scope": {"$exists": True}})
        if _is_int(document.get("shard"))
    }
    if not found:
        return None
    shards = sorted(found, key=repr)
    for shard, low, high in shards:
        if _is_int(low) and _is_int(high) and low <= value <= high:
            return {"shard": shard, "low": low, "high": high}
    bounds = ", ".join(f"{low}..{high}" for _, low, high in shards)
    raise ValueError(
        f"value={value!r} is in no shard of {name!r}; the shards of its other scopes own {bounds}"
    )


def _counter_id(name: str, scope: object, shard: int | None = None) -> str:
    """The ``_id`` of the counter of sequence ``name`` and ``scope`` (in stored form,
    :func:`seam.as_stored`), unsharded or of ``shard``, as the field names it."""
    return counter_id(name, scope=None if scope is None else str(scope), shard=shard)


__all__ = [
    "CounterInfo",
    "ShardInfo",
    "has_scoped_counters",
    "list_counters",
    "set_next_value",
    "show_counter",
]
