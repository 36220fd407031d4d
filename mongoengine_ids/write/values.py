"""Generated values of one write: find the empty ones, fill them, retry, give them back.

A :class:`Slot` is one generated field of one document (or of an embedded document inside it).
:func:`fill` asks each field once for all of its slots of the write (one counter lease for a
whole batch); :func:`send` runs the write and, when a field claims the duplicate-key error as
its own value colliding, gives that slot a fresh value and sends again.
"""

from __future__ import annotations

import itertools
import logging
import os
import reprlib
import time
from collections.abc import Callable, Collection, Iterable, Iterator
from typing import Any, TypeVar, cast

import bson.errors
import pymongo.errors
from mongoengine.base import BaseDocument
from mongoengine.errors import NotUniqueError, ValidationError

from .. import resets
from . import seam
from .field import GeneratedField, Write

_logger = logging.getLogger(__name__)
_T = TypeVar("_T")

#: Errors after which a write may or may not have been applied: the reply was lost, or the
#: write concern timed out after the primary applied it.
OUTCOME_UNKNOWN = (pymongo.errors.ConnectionFailure, pymongo.errors.WriteConcernError)


def _caused_by(error: BaseException, kinds: Any) -> Any:
    """``error``, or the error it was raised from (MongoEngine wraps pymongo's once), that is
    one of ``kinds``; None if neither is."""
    seen: BaseException | None = error
    for _ in range(3):
        if seen is None:
            return None
        if isinstance(seen, kinds):
            return seen
        seen = seen.__cause__ or seen.__context__
    return None


def outcome_unknown(error: BaseException) -> bool:
    """Whether ``error`` (or the pymongo error MongoEngine wrapped in it) leaves the write's
    fate unknown: a lost reply, a write concern that timed out, or an interrupt (anything that
    is not an ``Exception``: ``KeyboardInterrupt``, ``SystemExit``, a gevent ``Timeout``), which
    may come after the server applied the write."""
    return not isinstance(error, Exception) or _caused_by(error, OUTCOME_UNKNOWN) is not None


#: What the driver raises: the database call failed or was refused, or the command could not
#: be encoded (a value BSON has no type for, an int beyond 64 bits) and was never sent. (Not
#: ``InvalidBSON``: a reply it cannot decode comes after the write, review J.)
DRIVER_ERRORS = (
    pymongo.errors.PyMongoError,
    bson.errors.InvalidDocument,
    bson.errors.InvalidStringData,
    OverflowError,
)


def from_driver(error: BaseException) -> bool:
    """Whether ``error`` is (or MongoEngine wrapped) an error of the driver (see
    :data:`DRIVER_ERRORS`); any other comes from code around the database call."""
    return _caused_by(error, DRIVER_ERRORS) is not None


def duplicate_key(error: BaseException) -> pymongo.errors.DuplicateKeyError | None:
    """The pymongo duplicate-key error behind ``error`` (MongoEngine wraps it), if any."""
    found: pymongo.errors.DuplicateKeyError | None = _caused_by(
        error, pymongo.errors.DuplicateKeyError
    )
    return found


class Holder:
    """Generated values without a document (an upsert's, a backfill's): what a slot fills, and
    the values of the document it stands for that the fields read (``depends_on``); ``owner``:
    whom its assigned values are for (see :attr:`Write.owners`). A field reads those values as
    it reads a document's: as attributes (``holder.name``), None for one it does not hold."""

    __slots__ = ("_data", "_owner")

    def __init__(self, data: dict[str, Any] | None = None, owner: str | None = None) -> None:
        self._data: dict[str, Any] = {} if data is None else data
        self._owner = owner  # not ``owner``: a field of that name reads its value

    def __getattr__(self, name: str) -> Any:
        # Called for names that are not attributes of the holder itself (probe BD: a field of
        # the user's reading ``document.name`` got None, and stored it).
        if name.startswith("_"):
            raise AttributeError(name)
        return self._data.get(name)


class Slot:
    """One generated field of one document of a write.

    Attributes:
        root: the document written.
        holder: the document itself, an embedded document inside it, or an upsert's values.
        name: the field's name.
        field: the field.
        kind: the class whose field it is (default: the holder's class).
        place: where the holder is in the document written, as a query and an index name it
            (the stored steps but the items of lists): "" for the document itself,
            ``"lines"`` for an embedded document in the list ``lines``; "" where not known.
    """

    __slots__ = ("_data", "field", "holder", "kind", "name", "place", "root")

    def __init__(
        self,
        root: Any,
        holder: Any,
        name: str,
        field: GeneratedField,
        kind: type[BaseDocument] | None = None,
        place: str = "",
    ) -> None:
        self.root = root
        self.holder = holder
        self.name = name
        self.field = field
        self.kind = type(holder) if kind is None else kind
        self.place = place
        self._data = seam.data(holder)  # the same dict while the write lasts

    def __repr__(self) -> str:
        return f"Slot({type(self.holder).__name__}.{self.name}={self.value!r})"

    @property
    def value(self) -> Any:
        return self._data.get(self.name)

    @value.setter
    def value(self, value: Any) -> None:
        self._data[self.name] = value


def slots(document: BaseDocument, *, embedded_new_only: bool = False) -> list[Slot]:
    """Every generated field of ``document`` and of the embedded documents inside it.

    With ``embedded_new_only``, embedded documents loaded from the database are left out (their
    fields may not have been loaded): only those added since are looked into.
    """
    found: list[Slot] = []
    _collect(document, embedded_new_only, found)
    return found


def holders_at(value: Any, steps: tuple[str, ...]) -> list[dict[str, Any]]:
    """The stored embedded documents (dicts) that ``steps`` lead to from ``value`` (a db field
    name or map key each, a list index, or ``"*"``: every item of a list or map; ``"$"``, a
    place not known, leads nowhere); no steps: ``value`` itself."""
    if not steps:
        return [value] if isinstance(value, dict) else []
    step, rest = steps[0], steps[1:]
    if step.isdigit() and isinstance(value, list):  # one item of a list
        return holders_at(value[int(step)], rest) if int(step) < len(value) else []
    if step != "*":
        return holders_at(value.get(step), rest) if isinstance(value, dict) else []
    items = value if isinstance(value, list) else value.values() if isinstance(value, dict) else []
    return [found for item in items for found in holders_at(item, rest)]


def holds(stored: Any, steps: tuple[str, ...], slot: Slot) -> bool:
    """Whether a stored embedded document (or document) that ``steps`` lead to from ``stored``
    holds ``slot``'s value in the slot's field, and the same values of the fields the slot's
    field reads (a scoped counter's number belongs to its scope: the same number in another
    scope is another)."""
    identity = _identity(slot)
    return any(
        all(seam.as_stored(holder.get(key)) == value for key, value in identity)
        for holder in _holders_of(stored, steps, slot)
    )


def _holders_of(stored: Any, steps: tuple[str, ...], slot: Slot) -> list[dict[str, Any]]:
    """The stored holders at ``steps`` whose value under the slot's db field is one of the
    slot's field: not those stored as a class (``_cls``) whose field of that name is another
    (a subclass that declares its own counter; review V: its number was taken for the base
    class's own, whose counter was then not told)."""
    found = []
    for holder in holders_at(stored, steps):
        kind = seam.registered(holder.get("_cls")) if steps else None
        if kind is None or seam.field_of(kind, slot.name) is slot.field:
            found.append(holder)
    return found


def held(stored: dict[str, Any], places: Iterable[tuple[tuple[str, ...], Slot]]) -> set[int]:
    """The slots (by id) of ``places`` (steps, slot) whose value the stored document holds at
    their steps, as :func:`holds` tells one: the stored holders at each steps are read once
    for all the slots (n items of a list written whole: n look-ups, not n scans of n items).
    Values that cannot be hashed (a list, a dict) are compared one by one, as there."""
    found: set[int] = set()
    tables: dict[tuple[tuple[str, ...], tuple[str, ...], Any], set[tuple[Any, ...]] | None] = {}
    # Per slot, whatever its places (review X: worked out at each of them).
    identities: dict[int, tuple[tuple[str, ...], tuple[Any, ...]]] = {}
    for steps, slot in places:
        if id(slot) in found:
            continue  # held at another of its places
        known = identities.get(id(slot))
        if known is None:
            identity = _identity(slot)
            known = identities[id(slot)] = (
                tuple(key for key, _ in identity),
                tuple(value for _, value in identity),
            )
        keys, wanted = known
        if (steps, keys, slot.field) not in tables:
            rows = [
                tuple(seam.as_stored(h.get(k)) for k in keys)
                for h in _holders_of(stored, steps, slot)
            ]
            tables[steps, keys, slot.field] = set(rows) if all(map(_hashable, rows)) else None
        table = tables[steps, keys, slot.field]
        if table is not None and _hashable(wanted):
            hit = wanted in table
        else:
            hit = holds(stored, steps, slot)
        if hit:
            found.add(id(slot))
    return found


def _hashable(value: Any) -> bool:
    try:
        hash(value)
    except TypeError:
        return False
    return True


def read_for(slot: Slot, steps: tuple[str, ...]) -> set[str]:
    """The top-level db fields a read of the stored document must return for :func:`holds` to
    answer for ``slot`` at ``steps``: the field holding its holder, or, for the document's own
    field, that field and those it reads (a scope)."""
    if steps:
        return {steps[0]}
    return {
        slot.field.db_field,
        *(seam.read_field(slot.kind, slot.field, n).db_field for n in slot.field.depends_on),
    }


def _identity(slot: Slot) -> list[tuple[str, Any]]:
    """What identifies ``slot``'s value in a stored holder, as (db field, value as stored)
    pairs: the value, and the values of the fields its field reads (a scope) that are known
    (an update giving a value by a path may not say its scope: the stored one, then). A
    document's scope that is None is known, unless a projection left it out: a number whose
    scope was cleared is not the stored one of its old scope (probe AH: it was never told,
    and two documents held one number without a scope)."""
    field = slot.field
    found = [(field.db_field, seam.as_stored(field.to_mongo(slot.value)))]
    for name in field.depends_on:
        source = seam.read_field(slot.kind, field, name)
        value = slot._data.get(name)
        if value is not None:
            found.append((source.db_field, seam.as_stored(source.to_mongo(value))))
        elif not isinstance(slot.holder, Holder) and seam.loaded_whole(
            slot.holder, name, slot.kind
        ):  # (an upsert's or update's Holder holds what was given: its None is not known)
            found.append((source.db_field, None))
    return found


def identity_key(slot: Slot) -> tuple[Any, ...]:
    """A hashable key of ``slot``'s field and value with its scope: two slots with the same key
    hold the same value of that field (a number of one scope)."""
    return (id(slot.field), *(repr(pair) for pair in _identity(slot)))


def repeated(slots: Iterable[Slot]) -> set[tuple[Any, ...]]:
    """The :func:`identity_key` of every value two or more of ``slots`` hold."""
    seen: set[tuple[Any, ...]] = set()
    twice: set[tuple[Any, ...]] = set()
    for slot in slots:
        key = identity_key(slot)
        (twice if key in seen else seen).add(key)
    return twice


def python_values(stored: dict[str, Any], fields: dict[str, Any]) -> dict[str, Any]:
    """The values of ``fields`` (fields by name) that the stored document (or embedded
    document) ``stored`` holds, by name, in Python form."""
    return {
        name: field.to_python(stored[field.db_field])
        for name, field in fields.items()
        if stored.get(field.db_field) is not None
    }


def reads(kind: Any, name: str, field: GeneratedField) -> dict[str, Any]:
    """The fields of ``kind`` a slot of its generated field ``name`` reads: itself and its
    scope (``depends_on``), by name."""
    found = {each: seam.read_field(kind, field, each) for each in field.depends_on}
    return {name: seam.field_of(kind, name), **found}


def holder_of(
    kind: Any, name: str, field: GeneratedField, stored: dict[str, Any], owner: str | None = None
) -> Holder:
    """A holder of the values of the stored embedded document ``stored`` (of ``kind``) that a
    slot of its generated field ``name`` reads (:func:`reads`), in Python form."""
    return Holder(python_values(stored, reads(kind, name, field)), owner)


def _collect(document: BaseDocument, embedded_new_only: bool, found: list[Slot]) -> None:
    for place, holder in _holders(document):  # a loaded one may hold new ones
        shape = seam.shape(type(holder))
        if shape.guarded:
            _refuse_shadowing(holder)
        if not (embedded_new_only and holder is not document and not seam.is_new(holder)):
            for name, field in shape.generated:
                found.append(Slot(document, holder, name, field, place=place))


def _holders(document: BaseDocument) -> Iterator[tuple[str, BaseDocument]]:
    """``document``, then the embedded documents inside it at any depth, each with its place
    (:attr:`Slot.place`: the stored steps but the items of lists)."""
    yield "", document
    for _, steps, inner in seam.embedded_places(document, keys=True):
        yield ".".join(step for step in steps if step != "*"), inner


def _refuse_shadowing(document: BaseDocument) -> None:
    """Refuse a dynamic attribute that MongoEngine would store over a generated value, or as a
    scope (:func:`.seam.shadowing`): the value written would not be the one the field made or
    was told, and two documents could hold one.

    Raises:
        ValidationError: naming the attribute and the field.
    """
    clash = seam.shadowing(document)
    if clash is not None:
        attribute, name = clash
        kind = type(document).__name__
        raise ValidationError(
            f"{kind}: the dynamic attribute {attribute!r} is stored under the db_field of "
            f"{kind}.{name}, over that field's value; assign {kind}.{name} instead (or "
            "rename the attribute)",
            field_name=attribute,
        )


def embedded(document: BaseDocument) -> Iterator[BaseDocument]:
    """Every embedded document inside ``document``, at any depth."""
    if seam.shape(type(document)).embedding == ():
        return
    for _, _, inner in seam.embedded_places(document):
        yield inner


def _with_embedded(documents: list[BaseDocument]) -> list[BaseDocument]:
    """``documents`` and the embedded documents inside them."""
    found = list(documents)
    for document in documents:
        if seam.shape(type(document)).embedding != ():
            found.extend(embedded(document))
    return found


def confirm(
    documents: list[BaseDocument], *, unwritten: Collection[int] = (), whole: bool = False
) -> None:
    """The documents are known to be stored: nothing of an earlier lost reply is pending, and
    the values assigned to them (and to their embedded documents) are theirs by being stored,
    no longer by a reservation made for their write (:func:`_owner`). The embedded documents
    ``unwritten`` (by id: new ones an update left alone) stay new, their write settled all
    the same (a value assigned in one is written at its path). ``whole``: they were written
    whole (inserted, or written over their own copy): nothing of them is one a projection left
    out any more (the review of session 39: a copy of a document loaded in part, inserted
    whole, was refused its next save as one lacking what the load left out)."""
    holders = _with_embedded(documents)
    if whole:
        for holder in holders:
            seam.loaded_again(holder, ())
    seam.mark_written([h for h in holders if id(h) not in unwritten], settle=True)
    for holder in holders:
        if id(holder) in unwritten:
            seam.settle_new(holder)
    _settled(holders)


def _settled(holders: Iterable[BaseDocument]) -> None:
    """Tell the generated fields of ``holders`` that nothing of them is pending
    (:meth:`.GeneratedField.settled`)."""
    by_kind: dict[type[BaseDocument], list[BaseDocument]] = {}
    for holder in holders:
        by_kind.setdefault(type(holder), []).append(holder)
    for kind, group in by_kind.items():
        for _, field in seam.shape(kind).generated:
            field.settled(group)


def settle(holders: Iterable[Any]) -> None:
    """The write of these holders (documents, embedded documents) is settled: the values
    assigned to them are theirs by being stored (or were given back), no longer by a
    reservation made for that write (:func:`_owner`); another write of them is another one."""
    for holder in holders:
        if not isinstance(holder, Holder):
            state = seam.state(holder, create=False)
            if state is not None:
                state.owner = None


def note_assigned(write: Write, assigned: list[Slot]) -> list[tuple[Slot, Any]]:
    """Tell each field the values the user assigned (a counter moves past them, a proxy
    reserves them); returns them as (slot, value), to release if nothing is written.

    Each value is validated first: ``insert()`` and ``save(validate=False)`` skip MongoEngine's
    validation, and a junk value would be written (and a counter moved by it).

    Raises:
        ValidationError: a value is not one the field accepts (nothing noted).
    """
    if not assigned:
        return []
    for slot in assigned:
        slot.field.validate(slot.value)
    noted: list[tuple[Slot, Any]] = []
    try:
        for (klass, field), group in _by_field(assigned).items():
            values = [s.value for s in group]
            holders = [s.holder for s in group]
            owners = [_owner(s) for s in group]
            field.note_assigned(Write(klass, write.collection, holders, owners), values)
            noted.extend(zip(group, values, strict=True))
    except BaseException:
        release(write, noted)
        raise
    return noted


def _owner(slot: Slot) -> str:
    """Whom the value assigned at ``slot`` is for, until its write is settled: that place, a
    field of one holder (a document, an embedded document in ``root``, or an upsert's
    :class:`Holder`) in one write. The same in every retry of that write (the records of the
    objects keep it), never another place's: not another document's, another embedded
    document's, the same one's in another document, nor another field's of the same holder
    (two fields may share what their values must be unique in: a ``reserve_in`` collection)."""
    root, holder = slot.root, slot.holder
    # The field object itself: two classes of one name (in two modules) are two places.
    place = f"{slot.kind.__qualname__}.{slot.name}@{id(slot.field):x}"
    if holder is root:
        return f"{_token(root)}:{place}"
    return f"{_token(root)}/{_token(holder)}:{place}"


def _token(holder: Any) -> str:
    if isinstance(holder, Holder):
        if holder._owner is None:
            holder._owner = new_owner()
        return holder._owner
    state = seam.state(holder)
    if state.owner is None:
        state.owner = new_owner()
    return state.owner


# Owners are told apart by a number counted in this process, after random bytes read once per
# process (again in a forked child): never by a draw per write from something an application's
# tests patch. With uuid.uuid4 pinned, every write was one owner, and a reserve_in value another
# document held was taken for its own (probe Z).
_owners = itertools.count()  # next() of it is atomic
_process: list[str] = []


def _new_process() -> None:
    # The process id and the time beside the random bytes: children forked while a test pins
    # os.urandom still differ.
    _process[:] = [f"{os.getpid():x}.{time.time_ns():x}.{os.urandom(8).hex()}"]


_new_process()
resets.on_fork(_new_process)


def new_owner() -> str:
    """A token for whom values are assigned in one write (see :func:`_owner`): unique in this
    process, and among processes (its prefix: process id, time, random bytes)."""
    resets.check_process()  # after a fork that skips Python's hooks: this process's own
    return f"{_process[0]}-{next(_owners):x}"


def prepare(
    write: Write,
    documents: list[BaseDocument],
    states: list[seam.State | None],
    new: Callable[[list[Slot]], list[Slot]] | None = None,
) -> tuple[list[tuple[Slot, Any]], list[Slot]]:
    """The values of new documents about to be written: the fields are told the values the
    user assigned (those ``new`` keeps, if given: not those a document the write replaces
    holds), and the empty ones are filled. Values an earlier attempt generated or noted (its
    reply was lost; ``states`` are the documents' records), if unchanged since, stay this
    write's own. Returns (noted, filled)."""
    found: list[Slot] = []
    for document in documents:
        _collect(document, False, found)
    kept, kept_noted, others = split_kept(found, states)
    assigned: list[Slot] = []
    empty: list[Slot] = []
    for slot in others:
        (empty if slot.value is None else assigned).append(slot)
    if new is not None and assigned:
        assigned = new(assigned)
    noted, filled = note_and_fill(write, assigned, empty)
    return [*kept_noted, *noted], [*kept, *filled]


def note_and_fill(
    write: Write, assigned: list[Slot], empty: list[Slot]
) -> tuple[list[tuple[Slot, Any]], list[Slot]]:
    """Tell the fields the values of ``assigned`` (:func:`note_assigned`) and fill ``empty``
    (:func:`fill`); returns (noted, filled). An assigned value is told before the values are
    made (a counter moves past an assigned number before it hands out the next), unless its
    field reads a value still to be made (its scope, or one inside it): then once that is made,
    to the counter of its scope as stored, before any value of its field is made. On an error,
    nothing is left noted or filled."""
    noted: list[tuple[Slot, Any]] = []
    try:
        filled = fill(
            write,
            empty,
            untold=assigned,
            tell=lambda told: noted.extend(note_assigned(write, told)),
        )
    except BaseException:
        release(write, noted)
        raise
    return noted, filled


def split_kept(
    found: list[Slot], states: Iterable[seam.State | None]
) -> tuple[list[Slot], list[tuple[Slot, Any]], list[Slot]]:
    """Split ``found`` by what an earlier attempt of its documents whose outcome is unknown
    (``states``: their records) did with each value: generated it, noted it (as (slot, value)),
    or neither (the others). A value is the earlier attempt's only if it is unchanged since,
    where it was, in the same document, and so is its scope (a number moved to another scope
    is another number there, which that scope's counter must be told of: one of the others);
    it stays that document's own."""
    earlier: dict[tuple[int, int, str], tuple[Any, bool]] = {}
    for state in states:
        if state is not None:
            earlier.update({_place(s): (i, True) for s, _, i in state.generated})
            earlier.update({_place(s): (i, False) for s, _, i in state.noted})
    if not earlier:
        return [], [], found
    generated: list[Slot] = []
    noted: list[tuple[Slot, Any]] = []
    others: list[Slot] = []
    for slot in found:
        value = slot.value
        before = earlier.get(_place(slot))
        if before is None or value is None or before[0] != _identity(slot):
            others.append(slot)
        elif before[1]:
            generated.append(slot)
        else:
            noted.append((slot, value))
    return generated, noted, others


def _place(slot: Slot) -> tuple[int, int, str]:
    return id(slot.root), id(slot.holder), slot.name


def unconfirmed(
    document: BaseDocument,
    *,
    sent: Any,
    made_pk: bool,
    filled: list[Slot],
    noted: list[tuple[Slot, Any]],
) -> None:
    """Record that the outcome of ``document``'s insert is unknown, for the application's retry
    (see :mod:`.landed`): ``sent``, the version this attempt sent (its :func:`.landed.snapshot`),
    may land (None: it sent none that may), as may every version sent before; ``filled`` and
    ``noted`` are its values."""
    state = seam.state(document)
    if sent is not None:
        if state.sent is not None:
            state.sent_before.append(state.sent)  # an earlier version may land too
        state.sent = sent
    state.unconfirmed, state.made_pk = True, made_pk
    pending(document, filled, noted)


def pending(document: BaseDocument, generated: list[Slot], noted: list[tuple[Slot, Any]]) -> None:
    """Record that the outcome of an update of ``document`` is unknown: the values it
    ``generated`` and ``noted`` stay its own for the application's retry (see :func:`prepare`)."""
    state = seam.state(document)
    state.generated = _held(generated)
    state.noted = [(slot, value, _identity(slot)) for slot, value in noted]


def stored_by_failed_insert(
    document: BaseDocument, collection: Any, *, written: Any, local: Any
) -> None:
    """Record that ``document`` is stored in ``collection`` by an insert whose call failed
    (``written``: as stored, in stored form, if known; ``local``: the object as it was then,
    if known): the application's retry of that insert counts it stored if it finds it so
    (:func:`.landed.still_stored`), else inserts it again (:func:`new_again`) with the values
    it was stored with."""
    seam.state(document).stored_by_failed_insert = seam.FailedInsert(
        collection, _held(slots(document)), seam.stored_pk(document), written, local
    )


def _held(found: Iterable[Slot]) -> list[tuple[Slot, Any, Any]]:
    """The values ``found`` hold, as the records keep them: (slot, value, identity)."""
    return [(s, s.value, _identity(s)) for s in found if s.value is not None]


def new_again(document: BaseDocument, collection: Any) -> None:
    """``document``, recorded by :func:`stored_by_failed_insert`, is not in ``collection``
    (deleted since, or the write goes to another collection): it is inserted again, new. The
    values it was stored with, unchanged since and sent to the same collection, stay its own
    (handed out, reserved for it there); the others are the user's, told to their fields."""
    state = seam.state(document)
    record, state.stored_by_failed_insert = state.stored_by_failed_insert, None
    seam.mark_new(document)
    state.generated = []
    if record is None:
        return
    where = record.collection
    if (
        where.full_name == collection.full_name
        and where.database.client is collection.database.client
    ):
        state.generated = record.held


def may_collide(filled: Iterable[Slot]) -> bool:
    """Whether a value of ``filled`` may collide: its field retries it on a duplicate key (a
    counter's, a random one), so the write sending it must be acknowledged to see that."""
    return any(slot.field.collision_retries for slot in filled)


def acknowledged_concern(write: Write, filled: Iterable[Slot], write_concern: Any) -> Any:
    """MongoEngine's ``write_concern`` option for a write (an insert, ``save()``'s update) of
    values ``filled`` in ``write``; acknowledged (:func:`acknowledged_option`) if a value
    generated may collide (:func:`may_collide`): under ``w=0`` the server refuses it without a
    word, and the document's next save(), update() or delete() went to the document holding
    its value (probe BV-1), or its changes were lost (probe CB-1). The package's own
    conditional writes are acknowledged so too."""
    if not may_collide(filled):
        return write_concern
    return acknowledged_option(write.collection, write_concern)


def acknowledged_option(collection: Any, write_concern: Any) -> Any:
    """MongoEngine's ``write_concern`` option for a write to ``collection``, with ``w=1`` if
    it is not acknowledged (``w=0``)."""
    if seam.acknowledged(collection, write_concern):
        return write_concern
    return {**(write_concern or {}), "w": 1}


def fill(
    write: Write,
    empty: list[Slot],
    *,
    untold: list[Slot] | None = None,
    tell: Callable[[list[Slot]], None] | None = None,
) -> list[Slot]:
    """Give every slot a new value, one ``new_values()`` call per field and document class (per
    round: see :func:`_in_order`, to which ``untold`` and ``tell`` go).

    On an error, the slots already filled are given back and the error propagates.

    Raises:
        NotUniqueError: one embedded object is placed more than once in the write (see
            :func:`_once_each`) with a field whose values no two documents may share.
    """
    filled: list[Slot] = []
    try:
        for ready in _in_order(empty, untold or [], tell):
            for (klass, field), group in _by_field(ready).items():
                holders = [slot.holder for slot in group]
                values = made(field, write.of(klass, holders), len(group))
                for slot, value in zip(group, values, strict=True):
                    slot.value = value
                    filled.append(slot)
    except BaseException:
        give_back(write, filled)
        raise
    return filled


def made(field: GeneratedField, write: Write, count: int) -> list[Any]:
    """``field.new_values(write, count)``, checked: a field of the user's that breaks the
    contract is told so, before anything is written (probe BD: a wrong count raised zip()'s
    error, None values were stored as null).

    Raises:
        TypeError: not a list of ``count`` values, or one of them None.
    """
    returned = field.new_values(write, count)
    iterable = isinstance(returned, Iterable) and not isinstance(returned, (str, bytes, dict))
    values = list(returned) if iterable else []
    if not iterable or len(values) != count or any(value is None for value in values):
        raise TypeError(
            f"{field._label}: new_values() returned {reprlib.repr(returned)} for {count} "
            f"document(s); expected a list of {count} values, none of them None"
        )
    return values


def _in_order(
    empty: list[Slot],
    untold: list[Slot],
    tell: Callable[[list[Slot]], None] | None,
) -> Iterator[list[Slot]]:
    """``empty`` (one slot per embedded object: :func:`_once_each`) in rounds: a slot whose
    field reads other values (``depends_on``: a counter's scope) after the slots it reads
    (:func:`_waits`), whose values are made first.

    ``untold``: values assigned, given to ``tell`` before any value is made, but those that read
    values still to be made (their scope): once those are made, and before any value of their
    field is made (a number assigned in a scope made in this write moves its counter before
    that counter hands out).

    Raises:
        ValueError: fields that read one another (none can be made first).
    """
    if not _any_reads(untold) and not _any_reads(empty):
        if untold and tell is not None:
            tell(untold)
        yield _once_each(empty)
        return
    pending = empty
    while pending:
        holders = {id(s.holder) for s in pending}
        places = {(id(s.holder), s.name) for s in pending}
        now = [s for s in untold if not _waits(s, holders, places)]
        if now and tell is not None:
            tell(now)
            told = {id(s) for s in now}
            untold = [s for s in untold if id(s) not in told]
        pending = _once_each(pending)  # (after the values assigned are told, as they were)
        blocked = {id(s.field) for s in untold}
        waiting = {id(s) for s in pending if id(s.field) in blocked or _waits(s, holders, places)}
        ready = [s for s in pending if id(s) not in waiting]
        if not ready:
            names = sorted({f"{s.kind.__name__}.{s.name}" for s in pending})
            raise ValueError(
                f"{', '.join(names)} are each made from another's value (scope=): none can be "
                "made first; scope each by a field that is not numbered per it"
            )
        yield ready
        pending = [s for s in pending if id(s) in waiting]
    if untold and tell is not None:
        tell(untold)


def _any_reads(slots: list[Slot]) -> bool:
    """Whether the field of any of ``slots`` reads other values (``depends_on``)."""
    return any(field.depends_on for field in {id(s.field): s.field for s in slots}.values())


def _waits(slot: Slot, holders: set[int], places: set[tuple[int, str]]) -> bool:
    """Whether ``slot`` reads a value still to be made: of another of its holder's fields
    (``places``: (holder id, name) of those to be made), or inside an embedded document its
    field reads (``holders``: the ids of those with values to be made)."""
    names = slot.field.depends_on
    return any(name != slot.name and (id(slot.holder), name) in places for name in names) or any(
        id(inner) in holders for inner in read_inside(slot)
    )


def read_inside(slot: Slot) -> Iterator[BaseDocument]:
    """The embedded documents inside the values ``slot``'s field reads (its scope), at any
    depth: their values are part of what it reads."""
    for name in slot.field.depends_on:
        for inner in seam.embedded_documents(slot._data.get(name)):
            yield inner
            yield from embedded(inner)


def _reads(slot: Slot, other: Slot) -> bool:
    """Whether ``slot``'s field reads ``other``'s value to make its own: ``other`` is a field
    it reads (its scope) of the same holder, or a field of an embedded document inside one."""
    if other is slot or not slot.field.depends_on:
        return False
    if other.holder is slot.holder:
        return other.name in slot.field.depends_on
    return any(inner is other.holder for inner in read_inside(slot))


def _once_each(empty: list[Slot]) -> list[Slot]:
    """``empty`` with one slot per embedded object and field: an object placed more than once
    in one write (in two documents, twice in one) holds one value, stored at each place. A
    value no two documents may share cannot be: refused before any is made."""
    first_of: dict[tuple[int, str], Slot] = {}
    for slot in empty:
        first = first_of.setdefault((id(slot.holder), slot.name), slot)
        if first is not slot and first.field.values_unique:
            kind = first.kind.__name__
            places = sum(s.holder is slot.holder and s.name == slot.name for s in empty)
            raise NotUniqueError(
                f"{kind}.{first.name} is generated and unique: one {kind} object is placed "
                f"{places} times in this write, and each place would hold its one "
                f"value; place a copy of it (copy.deepcopy(), or a new {kind}) in each"
            )
    return empty if len(first_of) == len(empty) else list(first_of.values())


def give_back(write: Write, filled: Iterable[Slot], *, taken: Slot | None = None) -> None:
    """Clear the values of a write that wrote nothing and release them to their fields.

    ``taken`` collided: its value is someone else's, so it is cleared but not released.
    """
    filled = list(filled)
    released = [(slot, slot.value) for slot in filled if slot is not taken]
    for (_, field), group in _by_field(filled).items():
        field.settled([slot.holder for slot in group])
    for slot in filled:
        slot.value = None
    release(write, released)


def release(write: Write, given: Iterable[tuple[Slot, Any]]) -> None:
    """Release (slot, value) pairs that were not written to their fields."""
    by_field = _by_field(slot for slot, value in given if value is not None)
    held = {id(slot): value for slot, value in given}
    for (klass, field), group in by_field.items():
        try:
            field.release_values(
                write.of(klass, [s.holder for s in group]), [held[id(s)] for s in group]
            )
        except Exception:  # a leaked reservation, never a duplicate: keep the first error
            _logger.warning("could not release values of %s", field.name, exc_info=True)


class EarlierInsertLanded(Exception):
    """The duplicate key met by a retried insert is the document's own earlier insert (whose
    reply was lost), which landed after the retry looked for it (see :mod:`.landed`)."""


def send(
    write: Write,
    filled: list[Slot],
    attempt: Callable[[], _T],
    *,
    stored: Callable[[], bool] | None = None,
    on_unknown: Callable[[], None] | None = None,
    earlier_landed: Callable[[], bool] | None = None,
    may_land: bool = False,
) -> _T:
    """Run ``attempt()``; on a collision of a filled slot, refill that slot and run it again.

    When the outcome of a failed attempt is unknown (a lost reply; or ``stored()`` says the
    document is in the database although the attempt failed), the values are kept for the
    application's retry and ``on_unknown()`` is called. With ``may_land`` (the write retries
    an insert whose outcome was unknown: it may land at any time, with these values), they are
    kept whatever the failure, never given back; ``earlier_landed``, if given, is asked first
    on a duplicate key whether it is that insert.

    Raises:
        EarlierInsertLanded: ``earlier_landed()`` said the duplicate is the earlier insert.
        NotUniqueError: a duplicate key no filled slot claims (values given back).
        RetriesExhaustedError (from the field): every attempt of one slot collided.
    """
    attempts: dict[int, int] = {}
    while True:
        try:
            return attempt()
        except BaseException as error:
            if outcome_unknown(error):
                _keep(on_unknown)
                raise
            try:
                dup = duplicate_key(error)
                if earlier_landed is not None and dup is not None and earlier_landed():
                    raise EarlierInsertLanded from error
                slot = None if dup is None else collided(write, dup, filled)
                if slot is None:  # no field claims it
                    if stored is not None and stored():
                        _keep(on_unknown)  # written, then something else failed
                    else:
                        _abandon(write, filled, may_land, on_unknown)
                    raise
                tried = attempts.get(id(slot), 1)
                if tried > slot.field.collision_retries:
                    _abandon(write, filled, may_land, on_unknown, taken=slot)
                    exhausted = slot.field.retries_exhausted(cast(Exception, error), tried)
                    if exhausted is error:
                        raise
                    raise exhausted from error
                attempts[id(slot)] = tried + 1
                refill(write, slot, filled)
            except BaseException as failure:
                if failure is not error and (may_land or outcome_unknown(failure)):
                    # The write failed; its look-up did not answer (or failed).
                    _abandon(write, filled, may_land, on_unknown)
                raise


def _keep(on_unknown: Callable[[], None] | None) -> None:
    """The write may be in the database (or may still land): its values are kept."""
    if on_unknown is not None:
        on_unknown()


def _abandon(
    write: Write,
    filled: list[Slot],
    may_land: bool,
    on_unknown: Callable[[], None] | None,
    taken: Slot | None = None,
) -> None:
    """Nothing of this write is stored: its values are given back, unless an earlier insert
    with them may still land (``may_land``). ``taken`` is another document's value."""
    if may_land:
        if taken is not None:
            taken.value = None  # another document's: not ours to keep, nor to release
        _keep(on_unknown)  # but the earlier insert may still land with the others
    else:
        give_back(write, filled, taken=taken)


def collided(
    write: Write, error: pymongo.errors.DuplicateKeyError, filled: list[Slot]
) -> Slot | None:
    """The filled slot whose field claims ``error`` as its value colliding, if any."""
    for slot in filled:
        at = write.of(slot.kind, [slot.holder], place=slot.place, roots=[slot.root])
        if slot.field.is_collision(at, error, slot.value):
            return slot
    return None


def refill(write: Write, slot: Slot, filled: list[Slot]) -> None:
    """A fresh value for ``slot``, whose value collided (so it is not released); the values of
    ``filled`` made from it (a number of its scope: :func:`_reads`), and from those, are made
    again from the fresh one, theirs given back."""
    slot.value = None
    (slot.value,) = made(slot.field, write.of(slot.kind, [slot.holder]), 1)
    made_from: list[Slot] = []
    reading = [slot]
    while reading:  # those made from it, and those made from them (a scope of a scope)
        reading = [
            other
            for other in filled
            if other not in made_from and any(_reads(other, read) for read in reading)
        ]
        made_from += reading
    if made_from:
        give_back(write, made_from)
        fill(write, made_from)


def _by_field(
    group: Iterable[Slot],
) -> dict[tuple[type[BaseDocument], GeneratedField], list[Slot]]:
    found: dict[tuple[type[BaseDocument], GeneratedField], list[Slot]] = {}
    for slot in group:
        found.setdefault((slot.kind, slot.field), []).append(slot)
    return found


__all__ = ["NotUniqueError", "Slot", "fill", "give_back", "note_assigned", "send", "slots"]
