"""Upserts: ``update(upsert=True)``, ``update_one``, ``upsert_one`` and ``modify(upsert=True)``.

No document instance exists, so no hook of the document runs: the queryset adds the generated
values to the update as ``$setOnInsert`` (written only if the upsert inserts; a matched document
keeps its own). A field fixed by an equality in the filter, or given by the update, is left to
them, and its value told to the field (a counter moves past it, a proxy reserves it). A collision
of a generated value is retried with a fresh one, as for ``save()``.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import logging
import re
import uuid
from collections import abc
from collections.abc import Callable, Collection, Iterator, Sequence
from typing import Any, Final, NamedTuple, TypeVar

from bson import json_util
from bson.binary import Binary, UuidRepresentation
from bson.regex import Regex
from mongoengine.base import BaseDocument
from mongoengine.document import Document
from mongoengine.errors import InvalidQueryError, NotUniqueError, OperationError, ValidationError
from mongoengine.fields import EmbeddedDocumentField

from ..resets import PerClient, on_reset
from . import landed, seam, values
from .field import GeneratedField, Stored, Write
from .values import Slot

_T = TypeVar("_T")
_logger = logging.getLogger(__name__)

#: Update operators that give a field its value on insert.
_GIVING = ("$set", "$setOnInsert")
#: No value: neither the filter nor the update gives the field one.
_ABSENT: Final[Any] = object()


def upsert(
    queryset: Any,
    update: dict[str, Any],
    run: Callable[[dict[str, Any]], _T],
    owner: str,
    earlier: bool,
    sending: Sending,
) -> _T:
    """Run ``run(update)`` with the generated values added as ``set_on_insert__<field>``.

    A value the update gives a generated field (``set__``, ``set_on_insert__``) is told to the
    field first (a counter moves past it, a proxy reserves it), as a value assigned to a new
    document is; so is a value the filter fixes, unless a document holds it already (an upsert
    by key finds that document). An empty update is left to MongoEngine, which refuses it.
    ``owner`` and ``earlier``: the attempt (see :func:`with_given_values`); ``sending``: how
    ``run`` sends it, told whether a value made here may collide (:attr:`Sending.acknowledge`);
    its ``written`` says whether ``run`` failed after its database call was done (its values
    are then kept, as stored).

    Raises:
        InvalidQueryError: the update writes a generated field with another operator
            (``inc__``, ``unset__``...), or is a pipeline (``__raw__=[...]``) while a generated
            field is not fixed by the filter: the inserted document would lack its value.
    """
    if not update or update == {"__raw__": {}}:  # (review BX: a raw one inserted a document)
        return run(update)
    query = seam.parts(queryset)
    return _upsert(
        query, _own_copy(update), run, owner, earlier_may_have_landed=earlier, sending=sending
    )


@dataclasses.dataclass
class _Attempt:
    """An attempt of an update or upsert, kept while its outcome is unknown (a lost reply) for
    the application's retry, which takes it over."""

    #: Whom the values it assigns are for (see ``Write.owners``): its retry's too.
    owner: str = dataclasses.field(default_factory=values.new_owner)
    #: The values it made (see :func:`_made_key`): its retry's own, not values given to it.
    made: set[tuple[int, str, str]] = dataclasses.field(default_factory=set)
    #: It is the retry of one whose outcome is unknown (which may have landed).
    earlier: bool = False
    #: It failed after its database call was done (see :attr:`Sending.written`).
    written: bool = False


@contextlib.contextmanager
def _attempt(query: seam.QuerySetParts, values_of: Any) -> Iterator[_Attempt]:
    """One attempt of an update by ``query``'s filter giving ``values_of`` (see
    :func:`_given_identity`): an earlier one whose outcome is unknown, taken over (the
    application's retry of the same update), or a new one; kept if this one's outcome is
    unknown too, or an earlier one's still is."""
    collection = query.collection
    client = collection.database.client
    key = (collection.full_name, repr(query.query), repr(values_of))
    earlier = _unsettled.pop(client, key)  # atomic: one concurrent retry takes it over
    attempt = earlier or _Attempt()
    attempt.earlier = earlier is not None
    try:
        yield attempt
    except BaseException as error:
        if attempt.earlier or attempt.written or values.outcome_unknown(error):
            _unsettled.set(client, key, attempt)  # this attempt, or an earlier one, may land
        raise
    enclosing = _one_write.get()
    if enclosing is not None and (values_of or attempt.made):  # it wrote values of its own
        enclosing.append((client, key, attempt))


#: The attempts that succeeded within the application's one write (see :func:`one_write`).
_one_write: contextvars.ContextVar[list[tuple[Any, Any, _Attempt]] | None] = contextvars.ContextVar(
    "mongoengine_ids_one_write", default=None
)


@contextlib.contextmanager
def one_write() -> Iterator[None]:
    """The updates run inside are one write of the application's (``upsert_one()``: its update,
    then a read of the document): if it fails with its outcome unknown, their attempts are kept
    for its retry, as an update's own lost reply keeps its attempt; the retry does not send
    them as new ones."""
    done: list[tuple[Any, Any, _Attempt]] = []
    token = _one_write.set(done)
    try:
        yield
    except BaseException as error:
        if values.outcome_unknown(error):
            for client, key, attempt in done:
                _unsettled.set(client, key, attempt)
        raise
    finally:
        _one_write.reset(token)


def _upsert(
    query: seam.QuerySetParts,
    update: dict[str, Any],
    run: Callable[[dict[str, Any]], _T],
    owner: str,
    *,
    earlier_may_have_landed: bool,
    sending: Sending,
) -> _T:
    """:func:`upsert`, its values assigned for ``owner``."""
    document_class, collection = query.document_class, query.collection
    matches = _Matches(collection, query.query)
    empty, assigned, fixed = _fields_of(document_class, query.query, update, matches, owner)
    inside, told = _created_embedded(document_class, query.query, update, matches, owner)
    made_for, made = _made_for_filter.get()
    if made_for is document_class:  # its own: not given
        told = [slot for slot in told if _identity(slot) not in made]
    empty += list(inside)
    assigned += told
    update = _set_on_insert(update, fixed)
    if not empty and not assigned:
        return run(update)
    write = Write(document_class, collection)
    if earlier_may_have_landed:
        _refuse_held(collection, assigned)
    noted, filled = values.note_and_fill(write, assigned, empty)
    sending.acknowledge = sending.acknowledge or values.may_collide(filled)
    try:

        def attempt() -> _T:
            made = {inside.get(slot, slot.name): slot.field.to_mongo(slot.value) for slot in filled}
            return run(_set_on_insert(update, made))

        return values.send(write, filled, attempt, stored=lambda: sending.written)
    except BaseException as error:
        if not (values.outcome_unknown(error) or earlier_may_have_landed or sending.written):
            values.release(write, noted)  # nothing written: the assigned values are free
        raise


def _refuse_subclass_values(
    document_class: Any, query: dict[str, Any], update: dict[str, Any], collection: Any
) -> None:
    """Refuse an upsert through ``document_class``'s queryset that gives a value (by its filter
    or its update) to a generated field only a subclass declares, when it would insert: the
    document it inserts is a ``document_class``, which does not hold that field, and its value
    would be told to no field (probe AR: later documents of the subclass got it again).
    Matching a document of the subclass, it is an update of that document, told as any. (A
    ``DynamicDocument`` base would hold it as a dynamic attribute, which no field of the
    subclass makes nor sees: refused too, review P; such an upsert's filter and scope are told
    to no field.)

    Raises:
        InvalidQueryError: naming the field and the queryset to upsert through.
    """
    if not update or isinstance(update.get("__raw__"), list):
        return
    declared = seam.shape(document_class).by_db_field  # its own fields (generated or not)
    operations: dict[str, Any] | None = None
    for kind in seam.with_subclasses(document_class)[1:]:
        for name, field in seam.generated_fields(kind):
            if field.db_field in declared:
                continue  # a field of its own at that place (review I): as MongoEngine writes
            if operations is None:
                operations = seam.update_operations(document_class, **update)
            path = field.db_field
            if _from_update(operations, path) is _ABSENT and (
                _from_filter(query, path)[0] is _ABSENT
            ):
                continue
            if collection.find_one(query, {"_id": 1}) is None:
                base = document_class.__name__
                holds = (
                    "holds it as a dynamic attribute of its own, not as that field"
                    if seam.is_dynamic(document_class)
                    else "does not hold it"
                )
                raise InvalidQueryError(
                    f"{kind.__name__}.{name} is generated and declared by a subclass of {base}: "
                    f"this upsert would insert a {base}, which {holds} (its value would be "
                    f"told to no counter); upsert through {kind.__name__}.objects"
                )
            return  # it matches a document: an update of it


def _set_on_insert(update: dict[str, Any], stored: dict[str, Any]) -> dict[str, Any]:
    """``update`` with the ``stored`` values (by field name, in stored form) set on insert
    (``set_on_insert__<name>``, after the caller's own operators, whose order is kept). They are
    the package's own: sent as they are (:class:`~.field.Stored`), not read as values of yours
    (a ``value_decorator`` would decorate them again)."""
    if not stored or isinstance(update.get("__raw__"), list):  # a pipeline has no $setOnInsert
        return update
    return {
        **update,
        **{f"set_on_insert__{seam.update_path(name)}": Stored(v) for name, v in stored.items()},
    }


def _refuse_held(collection: Any, assigned: list[Slot]) -> None:
    """The retry of an upsert whose earlier attempt may have landed: a value it gives that a
    document holds (one its filter does not match: see :func:`_fields_of`) may be the earlier
    attempt's, and the retry would store it a second time. (The reservation made for the
    earlier attempt is this upsert's own: it cannot tell.)

    Raises:
        NotUniqueError: such a value, quoted (nothing written).
    """
    for slot in assigned:
        if not slot.field.values_unique:
            continue  # another document may hold it as well
        stored = slot.field.to_mongo(slot.value)
        if collection.find_one({slot.field.db_field: stored}, {"_id": 1}) is not None:
            raise NotUniqueError(
                f"{slot.field._label}: {slot.value!r} is held by a stored document that this "
                "upsert's filter does not match; an earlier attempt of it, whose reply was lost, "
                "may have stored it there, and this one would store it twice"
            )


#: The attempts of updates and upserts whose outcome is unknown (a lost reply), by (client,
#: collection, filter, values given): the application's retry of the same one takes it over,
#: and finds its reservations and the values it made its own.
_unsettled: PerClient[tuple[str, str, str], _Attempt] = PerClient()
on_reset(_unsettled.clear)


#: The update operators that write the embedded documents given to them (``pull`` matches).
_WRITING = frozenset({"set", "set_on_insert", "push", "push_all", "add_to_set"})
#: Those of them that add to a list beside what it holds.
_ADDING = frozenset({"push", "push_all", "add_to_set"})


def with_given_values(
    queryset: Any,
    update: dict[str, Any],
    run: Callable[[str, bool, Sending], _T],
    *,
    single: bool,
    upserting: bool,
    acknowledged: bool = True,
    ordered: bool = False,
) -> _T:
    """Run ``run(owner, earlier, sending)``, an update given ``update``, once the values it
    writes are settled: the new embedded documents it writes (``push__tags=Tag()``,
    ``set__address=...``) get their generated values (given back if nothing was written), and
    the values it gives generated fields (inside those embedded documents; and, unless
    ``upserting``, for which :func:`upsert` does it, the documents' own: ``set__number=5``)
    are told to their fields.

    ``owner``: whom the values of this attempt are for, the same in the application's retry of
    the update (same collection and filter) after a lost reply; ``earlier``: there was such an
    attempt (it may have landed: its values are never given back); ``sending``: how to send it
    (:class:`Sending`: to one document at most, a filter added). ``ordered``: the update
    writes the first matched document in ``order_by()`` order (``modify()``). Not
    ``acknowledged`` (``w=0``): what the update wrote is not known, so nothing is given back.

    Raises:
        InvalidQueryError: the update may write them to several documents (not ``single``, and
            the filter is no key): each would hold the same values.
        NotUniqueError: a value given is taken (a ``reserve_in`` reservation; nothing written).
    """
    query = seam.parts(queryset)
    if upserting:
        _refuse_subclass_values(query.document_class, query.query, update, query.collection)
    operations = _operations(query.document_class, update)
    sort = query.ordering if ordered else None
    moved = _moved_scope(query, operations, single, sort)
    writes = _Writes.of(query, update, operations, upserting)
    if not writes.empty and not writes.given and not moved and not upserting:
        return run("", False, Sending())
    # The documents' own, which upsert() tells: $set on every document matched.
    own = _own_unique_set(query.document_class, operations) if upserting else []
    on_insert_only = writes.on_insert_only and not own
    shared = [(slot.kind, slot.name) for slot in writes.unique] + own
    # Counted to one document: written to one at most, so that a document the filter matches
    # from then on (inserted by another writer) does not get the same values too.
    one = not single and not on_insert_only
    single = single or not _may_match_several(query)  # by key: one document at most
    if not single and not on_insert_only:
        kind, name = shared[0]
        raise InvalidQueryError(
            f"{kind.__name__}.{name} is generated: an update of several "
            f"{query.document_class.__name__} documents would give each of them the same value; "
            "use update_one(), or filter by the key"
        )
    write = Write(query.document_class, query.collection)
    with _attempt(query, _given_identity(writes.given, writes.empty)) as attempt:
        new = _to_tell(query, writes, attempt, moved, single, sort)
        noted = values.note_assigned(write, new)
        result, filled = _fill_and_run(write, writes, update, attempt, noted, run, one, upserting)
        # An earlier attempt's values are never given back (it may have written them), nor
        # those of an update whose result says nothing (w=0). Still in the attempt: interrupted
        # here, the write is done and its retry is this attempt's.
        if not attempt.earlier and acknowledged:
            _give_back_unused(write, query, result, filled, noted, writes.on_insert, upserting)
    # Settled: a later write of the same embedded objects is another one, not a retry.
    values.settle([slot.holder for slot, _ in noted])
    return result


def _own_unique_set(document_class: Any, operations: dict[str, Any]) -> list[tuple[Any, str]]:
    """The generated fields of ``document_class``'s own, whose values no two documents may
    share, that an upsert's ``$set`` gives a value (review BX: given to several documents
    matched, each held it)."""
    setting = operations.get("$set", {})
    return [
        (document_class, name)
        for name, field in seam.generated_fields(document_class)
        if field.values_unique and field.db_field in setting
    ]


def _to_tell(
    query: seam.QuerySetParts,
    writes: _Writes,
    attempt: _Attempt,
    moved: list[tuple[Slot, tuple[str, ...]]],
    single: bool,
    sort: Any,
) -> list[Slot]:
    """The values an update gives generated fields (``writes.given``) and those whose scope it
    moves (``moved``) that its fields must be told of (see :func:`with_given_values`), each
    made this attempt's (``attempt.owner``); those an earlier attempt of it made are its own,
    not told again.

    Raises:
        NotUniqueError: a value given may be stored already by an earlier attempt elsewhere.
    """
    this = values.Holder(owner=attempt.owner)
    for slot, _ in writes.given:  # whom each value is for: this update (and the embedded object)
        if isinstance(slot.holder, values.Holder):
            slot.holder._owner = attempt.owner
        else:
            slot.root = this
    if attempt.earlier:
        _refuse_held_elsewhere(query, writes.given, writes.added, attempt.made)
    # Values an earlier attempt of this update made (its reply lost): its own, not given.
    told = [(s, steps) for s, steps in writes.given if _made_key(s) not in attempt.made]
    told += moved
    new = _new_to_match(query, told, single, writes.added, sort)
    _refuse_without_scope(new, told)
    return new


def _fill_and_run(
    write: Write,
    writes: _Writes,
    update: dict[str, Any],
    attempt: _Attempt,
    noted: list[tuple[Slot, Any]],
    run: Callable[[str, bool, Sending], _T],
    one: bool,
    upserting: bool,
) -> tuple[_T, list[Slot]]:
    """Fill the empty slots of an update's embedded documents and run it (see
    :func:`with_given_values`); returns its result and the slots filled. If nothing was written,
    the values are given back (``noted``: those told to their fields), unless an earlier attempt
    of it may have landed."""
    filled: list[Slot] = []
    sending = Sending(one)
    try:
        filled = values.fill(write, writes.empty)
        sending.acknowledge = values.may_collide(filled)
        attempt.made |= {_made_key(slot) for slot in filled}  # its retry's own
        if upserting:
            sending.renamed = _idempotent_pushes(update, writes.pushed, attempt.made)
        else:
            sending.absent = _not_added_yet(writes.added, attempt.made)
        return run(attempt.owner, attempt.earlier, sending), filled
    except BaseException as error:
        attempt.written = sending.written
        if not (values.outcome_unknown(error) or attempt.earlier or sending.written):
            values.give_back(write, filled)  # nothing written: the values are free
            values.release(write, noted)
        raise


@dataclasses.dataclass
class _Writes:
    """The values an update writes to generated fields (see :func:`with_given_values`)."""

    #: Slots to fill: generated fields of the embedded documents it writes, left empty.
    empty: list[Slot] = dataclasses.field(default_factory=list)
    #: Values it gives, with the steps to each in the stored document.
    given: list[tuple[Slot, tuple[str, ...]]] = dataclasses.field(default_factory=list)
    #: Slots of values added beside the document's (``push__``...), by id, with their steps
    #: and whether the slot's holder is an item added itself (else inside one).
    added: dict[int, tuple[Slot, tuple[str, ...], bool]] = dataclasses.field(default_factory=dict)
    #: ``set_on_insert__``'s slots: given or made.
    on_insert: list[tuple[Slot, tuple[str, ...]]] = dataclasses.field(default_factory=list)
    #: ``push__``/``push_all__``'s, by key: the value and its slots.
    pushed: dict[str, tuple[Any, list[Slot]]] = dataclasses.field(default_factory=dict)
    #: Values that no two documents may share: those made here, and unique ones given.
    unique: list[Slot] = dataclasses.field(default_factory=list)
    #: Whether it writes them with ``$setOnInsert`` only (to one document at most: the one
    #: inserted).
    on_insert_only: bool = True

    @classmethod
    def of(
        cls,
        query: seam.QuerySetParts,
        update: dict[str, Any],
        operations: dict[str, Any],
        upserting: bool,
    ) -> _Writes:
        writes = cls()
        written = [
            *update.items(),
            *_scalars(query, update, operations, upserting),
            *_raw_embedded(query, update),
        ]
        for key, value in written:
            operator = seam.update_operator(key) if key != "__raw__" else None
            if operator not in _WRITING or (operator == "set_on_insert" and not upserting):
                continue
            if isinstance(value, _Scalars):
                slots = value.slots
            else:
                (operation,) = seam.update_operations(query.document_class, **{key: value}).values()
                ((path, stored),) = operation.items()
                _refuse_loaded_in_part(value, path)
                slots = _given_slots(query, operator, path, value, stored)
            writes._add(operator, key, value, slots)
        return writes

    def _add(
        self, operator: str, key: str, value: Any, slots: list[tuple[Slot, tuple[str, ...]]]
    ) -> None:
        """The ``slots`` (with their steps) of what ``operator`` writes (``value``, given as
        ``key``).

        Raises:
            NotUniqueError: a value made here, or one no two documents may share, is written
                through ``$[]`` or ``$[x]``, into every item they match (nothing written).
        """
        _refuse_every_item(slots)
        made = [slot for slot, _ in slots if slot.value is None]
        self.empty += made
        if operator == "set_on_insert":
            self.on_insert += slots
        if operator in _ADDING:  # added beside what the document holds: never its own
            items = {id(item) for item in (value if isinstance(value, (list, tuple)) else [value])}
            self.added.update(
                (id(slot), (slot, steps, id(slot.holder) in items)) for slot, steps in slots
            )
        if operator in ("push", "push_all") and not isinstance(value, _Scalars):
            self.pushed[key] = (value, [slot for slot, _ in slots])
        self.given += [(slot, steps) for slot, steps in slots if slot.value is not None]
        shared = made + [slot for slot, _ in slots if slot.field.values_unique]
        self.on_insert_only = self.on_insert_only and (not shared or operator == "set_on_insert")
        self.unique += shared


def _refuse_loaded_in_part(value: Any, path: str) -> None:
    """Refuse an update that writes (at ``path``) an embedded document a projection loaded
    without a generated field, or without a field that may hold generated values
    (``only("lines.label")``), unless set since: it writes the embedded document whole, so
    the stored value would be replaced by a new one, or cleared (probe BJ-4: the stored ids of
    the items were replaced). ``save()`` refuses the same change.

    Raises:
        OperationError: so; nothing is written.
    """
    for place, _, inner in seam.embedded_places_in(value, path):
        record = seam.state(inner, create=False)
        if record is None or not record.unloaded:
            continue
        data, here = seam.data(inner), set(seam.changed_here(inner))
        for name in sorted(record.unloaded):
            field = seam.field_in_family(type(inner), name)
            if field is None or seam.is_generated(field):  # (field None: a subclass's)
                if data.get(name) is not None:
                    continue  # set since: the user's
                what = "its value would be replaced by a new one"
            elif field.db_field in here:
                continue
            else:
                what = "the generated values stored in it would be cleared"
            raise OperationError(
                f"{type(inner).__name__}.{name} at {place} was not loaded (only(), exclude()), "
                f"and this update writes its embedded document whole: {what}; load it "
                "(reload()) before this change"
            )


def _refuse_every_item(slots: list[tuple[Slot, tuple[str, ...]]]) -> None:
    """Refuse a value written through the all-positional ``$[]`` or a filtered ``$[x]``: the
    server writes it into every item they match, so that items of one document would share it.
    (One value a user gives a field whose values may repeat, a scope, say, is theirs to give.)

    Raises:
        NotUniqueError: such a value (nothing written).
    """
    for slot, steps in slots:
        many = next((step for step in steps if step.startswith("$[")), None)
        if many is not None and (slot.value is None or slot.field.values_unique):
            what = "a value made for it" if slot.value is None else repr(slot.value)
            path = ".".join((*steps, slot.field.db_field))
            raise NotUniqueError(
                f"{slot.kind.__name__}.{slot.name}: the update writes {what} at {path!r}: "
                f"through {many!r}, into every item it matches, which would then share it; "
                "write each item by its index, or give each its own value"
            )


def _give_back_unused(
    write: Write,
    query: seam.QuerySetParts,
    result: Any,
    filled: list[Slot],
    noted: list[tuple[Slot, Any]],
    on_insert: list[tuple[Slot, tuple[str, ...]]],
    upserting: bool,
) -> None:
    """Give back the values of a done update that it did not write: all of them if it matched
    nothing. An upsert's reply does not say whether it inserted: the values made for
    ``$setOnInsert`` that no stored document holds are cleared from their embedded objects (it
    matched a document, and wrote none of them), their fields not told (a reservation stays
    taken, a gap): the document it inserted may have been deleted since, and its values are
    never handed out again. If the look-up fails, they are kept; the update, done, does not
    fail (its retry would write again)."""
    if not upserting and _matched_nothing(result):  # nothing written
        values.give_back(write, filled)
        values.release(write, noted)
    elif on_insert:
        made = [(slot, steps) for slot, steps in on_insert if slot in filled]
        try:
            unwritten = _unwritten(query, made)
        except Exception:
            _logger.warning("could not look up the unused values of an upsert", exc_info=True)
            return
        for slot in unwritten:
            slot.value = None


def _made_key(slot: Slot) -> tuple[int, str, str]:
    """A value made for ``slot``'s holder (by identity: the same object in the retry)."""
    return id(slot.holder), slot.name, repr(slot.field.to_mongo(slot.value))


def _unwritten(
    query: seam.QuerySetParts, on_insert: list[tuple[Slot, tuple[str, ...]]]
) -> list[Slot]:
    """The slots of ``on_insert`` whose value no stored document holds at that path (one read
    each) after an upsert: it matched a document, and its ``$setOnInsert`` wrote nothing, or
    the document it inserted is gone. Only paths through no list are looked up (a query cannot
    always reach into a list of lists): the others are kept."""
    return [
        slot
        for slot, steps in on_insert
        if "*" not in steps
        and "$" not in steps
        and query.collection.find_one(
            {_query_path(steps, slot.field.db_field): slot.field.to_mongo(slot.value)},
            {"_id": 1},
        )
        is None
    ]


def _query_path(steps: tuple[str, ...], *names: str) -> str:
    """The dotted path a query takes to ``steps`` (as :func:`values.holders_at` takes them: any
    item of a list is matched by the list's own path; a ``$`` place is left out), then
    ``names``."""
    return ".".join([*(step for step in steps if not step.startswith(("*", "$"))), *names])


def _refuse_held_elsewhere(
    query: seam.QuerySetParts,
    given: list[tuple[Slot, tuple[str, ...]]],
    added: Collection[int],
    made: Collection[tuple[int, str, str]],
) -> None:
    """The retry of an update whose earlier attempt may have landed: a value it gives that a
    document the filter does not match holds may be that attempt's (the filter then matched
    it), and would be stored twice; so may one it adds to a list (``added``: ``push__``...)
    that any document holds, the one it matches too. Looked up for values no two documents may
    share, those a field tracks, and those the package made (``made``, see :func:`_made_key`).

    Raises:
        NotUniqueError: such a value, quoted (nothing written).
    """
    for slot, steps in given:
        field = slot.field
        if not (field.values_unique or field.tracks_assigned or _made_key(slot) in made):
            continue
        path = _query_path(steps, slot.field.db_field)
        stored = slot.field.to_mongo(slot.value)
        holder = query.collection.find_one({path: stored}, {"_id": 1})
        if holder is None:
            continue
        matched = {"$and": [query.query, {"_id": holder["_id"]}]}
        if id(slot) in added or query.collection.find_one(matched, {"_id": 1}) is None:
            where = "a stored document"
            if id(slot) not in added:
                where += " that this update's filter does not match"
            raise NotUniqueError(
                f"{slot.field._label}: {slot.value!r} is held by {where}: an earlier attempt of "
                "this update, whose reply was lost, may have stored it there, and this one "
                "would store it twice"
            )


@dataclasses.dataclass
class Sending:
    """How an update is sent (see :func:`with_given_values`)."""

    #: To one document at most, though the caller's update may write several.
    one: bool = False
    #: A filter added to the caller's (None: none): the matched document must not hold the
    #: values the package made for the items the update adds to its lists.
    absent: dict[str, Any] | None = None
    #: Keywords of the update sent under another name (``push__x`` as ``add_to_set__x``).
    renamed: dict[str, str] = dataclasses.field(default_factory=dict)
    #: Set by the sender: the call failed after its database call was done (``modify()``
    #: building the document it returns), so what it wrote is stored: its values are kept.
    written: bool = False
    #: A value the package made for it may collide (retried on a duplicate key): sent
    #: acknowledged whatever the write concern (probe CB-1: under ``w=0`` an upsert refused
    #: for a value taken inserted nothing, unseen, where a fresh value would have been tried).
    acknowledge: bool = False

    def sent(self, update: dict[str, Any]) -> dict[str, Any]:
        """``update`` as it is sent: its keywords renamed."""
        if not self.renamed:
            return update
        return {self.renamed.get(key, key): value for key, value in update.items()}


def _not_added_yet(
    added: dict[int, tuple[Slot, tuple[str, ...], bool]], made: Collection[tuple[int, str, str]]
) -> dict[str, Any] | None:
    """A filter by which a document holds none of the items, with the values the package made
    for them, that the update adds to its lists (``push__``): a ``$push`` is not idempotent, so
    an attempt that landed unseen (its reply lost, or still in flight) and the application's
    retry must not both apply. A value made from others (a counter's scope: the same number
    may be another scope's) is matched with them, held by an item added itself only (not inside
    one: no one condition reaches it there). None if the update adds no such item, or adds it
    at a positional ``$`` place (a condition on that list would change which item ``$`` is).
    (A path through a list of lists matches no stored value: there it guards nothing.)"""
    absent: dict[str, list[Any]] = {}  # by path: the values none of its items may hold
    # By list, field and scope: the scope (db field: stored value) and the values there.
    scoped: dict[tuple[str, str, str], tuple[dict[str, Any], list[Any]]] = {}
    for slot, steps, is_item in added.values():
        if slot.value is None or _made_key(slot) not in made or any("$" in s for s in steps):
            continue
        field = slot.field
        if not field.depends_on:
            absent.setdefault(_query_path(steps, field.db_field), []).append(
                field.to_mongo(slot.value)
            )
            continue
        if not is_item:  # inside an item added: no one condition on the item reaches it
            continue
        scope = {}
        for name in field.depends_on:
            source = seam.read_field(slot.kind, field, name)
            value = seam.data(slot.holder).get(name)
            scope[source.db_field] = None if value is None else source.to_mongo(value)
        # (By the text of the scope: equal scopes of two types are two groups, as before.)
        key = (_query_path(steps), field.db_field, repr(sorted(scope.items())))
        scoped.setdefault(key, (scope, []))[1].append(field.to_mongo(slot.value))
    # One clause per list (and scope), not one per value: the $ne, or the item matched, of each
    # value in one set, which the server looks each stored item up in once.
    conditions = [
        {path: {"$ne": found[0]} if len(found) == 1 else {"$nin": found}}
        for path, found in absent.items()
    ]
    conditions += [
        {path: {"$not": {"$elemMatch": {**scope, db_field: _one_of(found)}}}}
        for (path, db_field, _), (scope, found) in scoped.items()
    ]
    return {"$and": conditions} if conditions else None


def _one_of(found: list[Any]) -> Any:
    """A query value matching any of ``found``: the value itself if it is alone."""
    return found[0] if len(found) == 1 else {"$in": found}


def _idempotent_pushes(
    update: dict[str, Any],
    pushed: dict[str, tuple[Any, list[Slot]]],
    made: Collection[tuple[int, str, str]],
) -> dict[str, str]:
    """The ``push__x``/``push_all__x`` keywords of an upsert whose items are all new embedded
    documents holding values the package made, renamed ``add_to_set__x``: an upsert cannot be
    narrowed by a filter (it would insert a second document), and items holding new values are
    added to a set as pushing adds them, except where the same item is there already: the
    upsert's own attempt that landed unseen (its reply lost, or still in flight) and its retry
    store it once. (An item without such a value, which a set would not add twice, a push
    at a position, ``push__parts__0``, which a set cannot express, and items equal to one
    another, which a set would add once (review BX: one object pushed twice), are left as
    they are.)"""
    renamed = {}
    for key, (value, slots) in pushed.items():
        operator, _, rest = key.partition("__")
        items = value if operator == "push_all" else [value]
        target = f"add_to_set__{rest}"
        at_position = rest.rpartition("__")[2].isdigit()  # push__parts__0: at index 0
        if at_position or target in update or not isinstance(items, (list, tuple)):
            continue
        made_in = {
            id(slot.holder) for slot in slots if slot.value is not None and _made_key(slot) in made
        }
        if (
            items
            and all(
                isinstance(item, BaseDocument)
                and any(id(inner) in made_in for inner in [item, *values.embedded(item)])
                for item in items
            )
            and _all_differ(items)
        ):
            renamed[key] = target
    return renamed


def _all_differ(items: Sequence[BaseDocument]) -> bool:
    """Whether no two of ``items`` are stored alike (in any order of their fields)."""
    forms = {json_util.dumps(item.to_mongo(), sort_keys=True) for item in items}
    return len(forms) == len(items)


def _given_identity(
    given: list[tuple[Slot, tuple[str, ...]]], empty: list[Slot]
) -> list[tuple[str, Any]]:
    """What tells an update's attempts apart: the values it gives the documents' own fields,
    and the embedded documents it writes, by identity (the same objects in the application's
    retry, whose values the first attempt may have made). Its other values (a time stamp made
    again for the retry) do not."""
    return sorted(
        {
            (str(slot.field.db_field), repr(slot.field.to_mongo(slot.value)))
            if isinstance(slot.holder, values.Holder)
            else (str(slot.field.db_field), id(slot.holder))
            for slot in [*(slot for slot, _ in given), *empty]
        },
        key=repr,
    )


def _matched_nothing(result: Any) -> bool:
    """Whether an update that is no upsert wrote nothing, by what MongoEngine returned: no
    document (``modify()``), a count of 0, or a result matching none (``full_result``)."""
    if result is None or result == 0:
        return True
    return getattr(result, "matched_count", None) == 0


#: Update operators that compute a field's new value from the stored one.
_COMPUTING = frozenset({"$inc", "$mul", "$max", "$min", "$bit", "$currentDate"})


def _operations(document_class: Any, update: dict[str, Any]) -> dict[str, Any]:
    """The update as MongoEngine sends it (``__raw__`` included; {} for a pipeline, which
    :func:`upsert` deals with), a value of a generated field it would compute refused.

    Raises:
        InvalidQueryError: ``rename__<field>=<a generated field>``, or ``inc__``, ``max__``...
            of a generated field (also in ``__raw__``, also by a path into an embedded
            document): the value written would be none the field made or was told of (a
            counter would hand it out again).
    """
    if not update:
        return {}
    if isinstance(update.get("__raw__"), list):
        _refuse_pipeline_writes(document_class, update["__raw__"])
        return {}
    operations: dict[str, Any] = seam.update_operations(document_class, **update)
    for operator, fields in operations.items():
        if not (operator in _COMPUTING or operator == "$rename") or not isinstance(fields, dict):
            continue
        for source, target in fields.items():
            path = str(target) if operator == "$rename" else str(source)
            found = seam.generated_at(document_class, path)
            if not found:
                continue
            kind, name, _ = found[0]
            if operator == "$rename":
                why = (
                    f"renaming {source!r} to {target!r} would move another field's value into "
                    "it; set it with set__ (told to the field), or let save() make it"
                )
            else:
                why = (
                    f"{operator} of {source!r} would store a value the field neither made nor "
                    "was told of (a counter would hand it out again); give the value with set__ "
                    "(told to the field)"
                )
            raise InvalidQueryError(f"{kind.__name__}.{name} is generated: {why}")
    return operations


def _refuse_pipeline_writes(document_class: Any, pipeline: list[Any]) -> None:
    """Refuse an update pipeline (``__raw__=[...]``) with a stage that writes a generated field,
    or a field that may hold embedded documents with generated fields, or that writes or
    removes a field a generated field reads (a counter's scope): what it computes is no value
    the field made or was told of, nor checked (a counter would hand a number out again, a
    unique value could be copied, numbers would move to another scope untold). A stage that
    only removes generated values is let through, as ``unset__`` is.

    Raises:
        InvalidQueryError: such a stage (nothing written).
    """
    for stage in pipeline:
        for operator, spec in stage.items() if isinstance(stage, abc.Mapping) else ():
            for path, removes in _pipeline_paths(operator, spec):
                # Removing a generated value is let through; the whole document, never.
                writes = not (removes and path)
                found = seam.generated_under(document_class, path) if writes else []
                found += [
                    f"{kind.__name__}.{name} is numbered per it"
                    for kind, name, _ in (seam.reading_at(document_class, path) if path else ())
                ]
                found += [
                    f"{kind.__name__}.{name} is numbered per the field it is in"
                    for kind, name, _ in (seam.reading_above(document_class, path) if path else ())
                ]
                if found:
                    if path:
                        what = f"{'removes' if removes else 'writes'} {path!r}"
                    else:
                        what = (
                            "removes every field it does not name"
                            if removes
                            else "writes the whole document"
                        )
                    raise InvalidQueryError(
                        f"{document_class.__name__}: the {operator} stage of an update pipeline "
                        f"(__raw__=[...]) {what} "
                        f"({'; '.join(found)}): a generated value is made or checked by its "
                        "field, and a scope's change is told to its counter, never computed "
                        "on the server; give them with an update document (set__..., unset__..."
                        ", or __raw__={'$set': ...}), or leave them to save()"
                    )


def _pipeline_paths(operator: str, spec: Any) -> list[tuple[str, bool]]:
    """The dotted paths a pipeline stage writes or removes, as (path, only removes it); ``""``:
    the whole document."""
    if operator == "$unset":
        return [(str(path), True) for path in ([spec] if isinstance(spec, str) else spec)]
    if operator in ("$set", "$addFields") and isinstance(spec, abc.Mapping):
        return [(str(path), False) for path in spec]
    if operator == "$project" and isinstance(spec, abc.Mapping):
        # 0 or False removes a field. Any other value but _id's makes it an inclusion, which
        # removes every field it does not name; a value other than 1 or True computes one.
        named = [kept for path, kept in spec.items() if path != "_id"] or list(spec.values())
        if all(kept in (0, False) for kept in named):  # ({"_id": 1} alone keeps _id alone)
            return [(str(path), True) for path in spec]
        computed = [str(path) for path, kept in spec.items() if not _kept(kept)]
        return [("", True), *((path, False) for path in computed)]
    return [("", False)]  # $replaceRoot, $replaceWith (and any other): the whole document


def _kept(value: Any) -> bool:
    """Whether a ``$project`` value keeps or removes its field as it is (a boolean or a
    number), rather than computing it."""
    return isinstance(value, (bool, int, float))


def _moved_scope(
    query: seam.QuerySetParts, operations: dict[str, Any], single: bool, sort: Any
) -> list[tuple[Slot, tuple[str, ...]]]:
    """The values an update moves to another scope: it sets a field that a generated field
    reads (a ``SequenceField``'s scope) in the documents it matches and keeps their values,
    which then belong to the new scope's numbering. Each is a slot holding the value with its
    new scope, to tell its field as a value given there (one read of the matched documents,
    the first in ``sort`` order if ``single``). A value the update gives at the same place is
    told as given; ``$setOnInsert`` writes a new document.

    Raises:
        InvalidQueryError: the scope is changed otherwise (``$unset``, ``$rename``, ``$inc``...)
            or at a place not known beforehand (``$``, ``$[x]``): its new value is not known.
    """
    moves = _moves(query.document_class, operations)
    if not moves:
        return []
    single = single or not _may_match_several(query)
    tops = {move.steps[0] if move.steps else move.path for move in moves}
    tops.update(move.field.db_field for move in moves if not move.steps)
    projection = dict.fromkeys([*tops, "_cls"], 1)
    if single:
        stored = query.collection.find_one(query.query, projection, sort=sort)
        matched = [] if stored is None else [stored]
    else:
        matched = list(query.collection.find(query.query, projection))
    found = []
    for stored in matched:
        for kind, name, field, path, steps, read, new in moves:
            scope = path.rpartition(".")[2]
            for holder in values.holders_at(stored, steps):
                if holder.get(field.db_field) is None or seam.as_stored(
                    holder.get(scope)
                ) == seam.as_stored(new):
                    continue  # no value, or no move
                stored_as = seam.registered(holder.get("_cls"))
                if stored_as is not None and not issubclass(stored_as, kind):
                    continue  # another class's field of that name (probe AR): not numbered
                moved = values.Holder(values.python_values({**holder, scope: new}, read))
                found.append((Slot(moved, moved, name, field, kind), steps))
    repeated = values.repeated(slot for slot, _ in found)
    twice = next((slot for slot, _ in found if values.identity_key(slot) in repeated), None)
    if twice is not None:
        raise NotUniqueError(
            f"{twice.kind.__name__}.{twice.name}: this update moves documents holding the same "
            f"number {twice.value!r} into one {twice.field.depends_on[0]!r}, which would then "
            "hold it twice; renumber them (give the number in the update), or move them apart"
        )
    return found


class _Move(NamedTuple):
    """A place where an update sets the scope of a generated field (see :func:`_moves`)."""

    kind: type[BaseDocument]  # the class whose field it is
    name: str
    field: GeneratedField
    path: str  # of the scope set
    steps: tuple[str, ...]  # to the field's holder
    reads: dict[str, Any]  # the fields a slot of it reads (itself and its scope), by name
    new: Any  # the scope's new value, as the update sets it


def _moves(document_class: type[BaseDocument], operations: dict[str, Any]) -> list[_Move]:
    """The places where an update sets the scope of a generated field (see
    :func:`_moved_scope`), refusing a change of scope whose new value is not known.

    Raises:
        InvalidQueryError: as :func:`_moved_scope` says.
    """
    setting = operations.get("$set", {})
    moves: list[_Move] = []
    for operator, fields in operations.items():
        if operator == "$setOnInsert" or not isinstance(fields, dict):
            continue
        renamed = [str(target) for target in fields.values()] if operator == "$rename" else []
        for path in [*fields, *renamed]:
            above = seam.reading_above(document_class, path)
            if above:
                kind, name, field = above[0]
                scope = field.depends_on[0]
                raise InvalidQueryError(
                    f"{kind.__name__}.{name} is numbered per {scope!r}: this update changes "
                    f"{path!r} inside it, which moves documents to another numbering whose "
                    f"counter the update cannot tell (it does not give the new {scope!r} "
                    f"whole); set {scope!r} whole with $set, or load the document and save() it"
                )
            for kind, name, field in seam.reading_at(document_class, path):
                holder = path.rpartition(".")[0]
                own = f"{holder}.{field.db_field}" if holder else field.db_field
                if own in setting:
                    continue  # given at the same place: told as given, in the scope written
                steps = tuple("*" if s == "$[]" else s for s in holder.split(".") if s)
                unknown = any(s.startswith("$") for s in steps) or (
                    operator == "$set" and fields[path] is None
                )
                changing = _writer(operations, own)  # $unset...: the number kept is not known
                shown, at = (operator, path)
                if changing not in (None, "$setOnInsert"):
                    shown, at = str(changing), own
                if shown != "$set" or path in renamed or unknown:
                    raise InvalidQueryError(
                        f"{kind.__name__}.{name} is numbered per {field.depends_on[0]!r}: this "
                        f"update changes {at!r} with {shown} as it moves documents to "
                        "another numbering, whose counter could then hand their numbers out "
                        f"again; set the scope with $set and give {name} with $set (or leave "
                        "it as it is), or load the document and save() it"
                    )
                read = values.reads(kind, name, field)
                moves.append(_Move(kind, name, field, path, steps, read, fields[path]))
    return moves


def _refuse_without_scope(slots: list[Slot], told: list[tuple[Slot, tuple[str, ...]]]) -> None:
    """A number given by a path into an embedded document (``set__parts__0__n=``) is told to
    its scope's counter, which the update must name beside it: refused if it does not.

    Raises:
        InvalidQueryError: the scope of such a number is not set beside it.
    """
    steps_of = {id(slot): steps for slot, steps in told}
    for slot in slots:
        steps = steps_of.get(id(slot), ())
        missing = [name for name in slot.field.depends_on if slot._data.get(name) is None]
        if steps and missing and isinstance(slot.holder, values.Holder):
            source = seam.read_field(slot.kind, slot.field, missing[0]).db_field
            path = ".".join((*steps, slot.field.db_field))
            beside = ".".join((*steps, source))
            if any(step.startswith("$[") for step in steps):  # no keyword reaches $[] or $[e]
                how = f"{beside!r} in the same $set"
            else:
                how = f"set__{'__'.join((*steps, source)).replace('$', 'S')}=..."
            raise InvalidQueryError(
                f"{slot.kind.__name__}.{slot.name} is numbered per {missing[0]!r}: an update "
                f"giving it a new number by a path ({path!r}) must also set {missing[0]!r} "
                f"there ({how}), whose counter is then told of it; or set the whole embedded "
                "document"
            )


class _Scalars:
    """The values an update's ``$set`` gives generated fields reached by a path (not inside an
    embedded document it writes whole), as slots with the steps to their holders."""

    def __init__(self, slots: list[tuple[Slot, tuple[str, ...]]]) -> None:
        self.slots = slots


def _scalars(
    query: seam.QuerySetParts,
    update: dict[str, Any],
    operations: dict[str, Any],
    upserting: bool,
) -> list[tuple[str, _Scalars]]:
    """``("set", _Scalars)`` for the values ``$set`` gives generated fields: the documents' own
    (unless ``upserting``: :func:`upsert` tells those) and those inside embedded documents by a
    dotted path (``set__part__code=``, ``set__parts__S__code=``, ``__raw__``)."""
    slots: list[tuple[Slot, tuple[str, ...]]] = []
    for path, value in operations.get("$set", {}).items():
        if isinstance(value, Stored):
            continue
        found = seam.generated_at(query.document_class, path)
        if value is None and found and seam.shares_path(query.document_class, path):
            # Another class's field may be the one written: None is that field's (as
            # MongoEngine takes the first class it finds). Any other value is checked and told
            # as this field's: a number equal to one of its values would be a duplicate.
            found = []
        for each in found:
            slots += _path_slot(query, operations, path, value, each, upserting)
    return [("set", _Scalars(slots))] if slots else []


def _path_slot(
    query: seam.QuerySetParts,
    operations: dict[str, Any],
    path: str,
    value: Any,
    found: tuple[Any, str, GeneratedField],
    upserting: bool,
) -> list[tuple[Slot, tuple[str, ...]]]:
    """The slots of :func:`_scalars` for the value ``$set`` gives at ``path``, which leads to
    the generated field ``found`` (its class, name and field)."""
    kind, name, field = found
    # The upsert's own fields are upsert()'s to tell (a subclass's are not among them: the
    # document it inserts is of the queryset's class).
    own = (name, field) in seam.generated_fields(query.document_class)
    inserted = upserting and "." not in path and own
    if value is None and not inserted:  # (upsert() says it so)
        raise InvalidQueryError(
            f"{kind.__name__}.{name} is generated: setting it to None ({path!r}) would "
            "store null, which a unique index counts as a value (two documents holding it "
            f"collide); remove the value instead: __raw__={{'$unset': {{{path!r}: ''}}}}"
        )
    if value is not None:
        _check_stored_form(field, value, f"the update sets at {path!r}", query.collection)
    if "." not in path:
        return [] if inserted else _own_slots(query, operations, found, value)
    data = {name: field.to_python(value)}
    parent = path.rpartition(".")[0]
    for each in field.depends_on:  # a scope the update sets beside it (else the stored one)
        source = seam.read_field(kind, field, each)
        beside = operations.get("$set", {}).get(f"{parent}.{source.db_field}")
        if beside is not None:
            data[each] = source.to_python(beside)
    holder = values.Holder(data)
    # Written at this very place: its own only if it held the value there already (not
    # known for a positional $: then new).
    return [(Slot(holder, holder, name, field, kind), tuple(path.split(".")[:-1]))]


#: The operators of a ``__raw__`` update that may write embedded documents whole, as the
#: keywords MongoEngine names them by.
_RAW_WRITING = {
    "$set": "set",
    "$setOnInsert": "set_on_insert",
    "$push": "push",
    "$addToSet": "add_to_set",
}


def _raw_embedded(query: seam.QuerySetParts, update: dict[str, Any]) -> list[tuple[str, _Scalars]]:
    """``(operator, _Scalars)`` for the values of generated fields inside the embedded documents
    a ``__raw__`` update writes whole, as stored dicts (``{"$set": {"part": {"code": 5}}}``, a
    ``$push`` of one, ``$each``): told to their fields as those of embedded objects are. None
    is made: a raw update is sent as given."""
    raw = update.get("__raw__")
    found: list[tuple[str, _Scalars]] = []
    for op, operator in _RAW_WRITING.items():
        fields = raw.get(op) if isinstance(raw, dict) else None
        slots = [
            slot
            for path, value in (fields.items() if isinstance(fields, dict) else ())
            for slot in _stored_slots(query, path, value, item=operator in _ADDING)
        ]
        if slots:
            found.append((operator, _Scalars(slots)))
    return found


def _given_slots(
    query: seam.QuerySetParts, operator: str, path: str, value: Any, stored: Any
) -> list[tuple[Slot, tuple[str, ...]]]:
    """The generated fields of the embedded documents a keyword of an update writes at
    ``path``: those of the embedded objects in ``value``, and those given as dicts
    (``set__part={"code": 5}``, a dict among the items of a list or the values of a map), read
    from ``stored``, as MongoEngine sends them."""
    found = _embedded_slots(value, path)
    adding = operator in _ADDING
    if isinstance(value, dict):
        if not found:
            return _stored_slots(query, path, stored, item=adding)
        if not adding and isinstance(stored, dict):  # a map of objects and dicts
            for key, given in value.items():
                if isinstance(given, dict) and key in stored:
                    found += _stored_slots(query, path, {key: stored[key]}, item=False)
        return found
    items = stored.get("$each") if isinstance(stored, dict) else stored
    if isinstance(value, (list, tuple)) and isinstance(items, list) and len(items) == len(value):
        for given, sent in zip(value, items, strict=True):
            if isinstance(given, dict):  # an item of the list at path
                found += _stored_slots(query, path, sent, item=True)
    return found


def _stored_slots(
    query: seam.QuerySetParts, path: str, value: Any, *, item: bool
) -> list[tuple[Slot, tuple[str, ...]]]:
    """The values of generated fields inside embedded documents in stored form (dicts) that an
    update writes at ``path``, as slots with the steps to their holders (``item``: ``value`` is
    one item added to the list at ``path``, or ``$each`` of them)."""
    if item and isinstance(value, dict) and isinstance(value.get("$each"), list):
        value, item = value["$each"], False  # the items, as a list at path
    slots = []
    for kind, name, field, embedded, steps in seam.generated_in(
        query.document_class, path, value, item=item
    ):
        given = embedded[field.db_field]
        if given is None:
            raise InvalidQueryError(
                f"{kind.__name__}.{name} is generated: the embedded document written at "
                f"{path!r} gives it None, which would store null (a unique index counts it as "
                "a value: two documents holding it collide); leave the field out, or give a value"
            )
        _check_stored_form(field, given, f"the update writes at {path!r}", query.collection)
        holder = values.holder_of(kind, name, field, embedded)
        slots.append(
            (Slot(holder, holder, name, field, kind), _any_item(steps, len(path.split("."))))
        )
    return slots


def _own_slots(
    query: seam.QuerySetParts,
    operations: dict[str, Any],
    found: tuple[Any, str, GeneratedField],
    written: Any,
) -> list[tuple[Slot, tuple[str, ...]]]:
    """The generated field of the documents themselves (``found``: its class, which may be a
    subclass of the queryset's, name and field) that an update gives the value ``written``:
    one slot, or, for a field whose values depend on others (a scope), one per combination of
    those in the documents the filter matches (or as the update sets them)."""
    kind, name, field = found
    value = field.to_python(written)
    sources = [seam.read_field(kind, field, dep) for dep in field.depends_on]
    combinations: list[dict[str, Any]] = [{}]
    if sources:
        setting = operations.get("$set", {})
        set_here = {
            source.name: source.to_python(setting[source.db_field])
            for source in sources
            if setting.get(source.db_field) is not None
        }
        projection = {source.db_field: 1 for source in sources}
        combinations = []
        for stored in query.collection.find(query.query, projection):
            held = values.python_values(stored, {source.name: source for source in sources})
            if {**held, **set_here} not in combinations:
                combinations.append({**held, **set_here})
    return [
        (Slot(holder, holder, name, field, kind), ())
        for data in combinations
        for holder in [values.Holder({**data, name: value})]
    ]


def _embedded_slots(value: Any, path: str) -> list[tuple[Slot, tuple[str, ...]]]:
    """The generated fields of the embedded documents inside ``value``, which an update writes
    at ``path``, each with the steps to its holder in a stored document (as
    :func:`values.holders_at` takes them: a list index or map key inside ``value`` is any item of
    the same field, as for ``save()``; the place ``path`` names is that place)."""
    return [
        (Slot(embedded, embedded, name, field), _any_item(steps, len(path.split("."))))
        for _, steps, embedded in seam.embedded_places_in(value, path)
        for name, field in seam.shape(type(embedded)).generated
    ]


def _any_item(steps: tuple[str, ...], written_at: int) -> tuple[str, ...]:
    """``steps`` with every step past the first ``written_at`` (the path the update names, a
    place of its own) that names an item (an index, ``$``, ``$[]``) made ``"*"``: inside a
    value written whole, any item of the same list or map."""
    inside = ("*" if s.isdigit() or s.startswith("$") else s for s in steps[written_at:])
    return (*steps[:written_at], *inside)


def _new_to_match(
    query: seam.QuerySetParts,
    given: list[tuple[Slot, tuple[str, ...]]],
    single: bool,
    added: Collection[int],
    sort: Any,
) -> list[Slot]:
    """The slots of ``given`` whose value is new to the document the update matches: one that
    document holds where it is written (``steps``: any item of a top-level field written
    whole, or one place; ``$``: a place not known, or added beside the others: new) is left
    out, for a field that tracks assigned values (one read of its stored copy, in the order
    ``modify()`` picks it). A value the update writes more than once for one field is new
    where it is written twice (as ``save()`` refuses a document holding it twice)."""
    if not single:  # a value one of several matched documents holds is not the others'
        return [slot for slot, _ in given]
    twice = values.repeated(slot for slot, _ in given)
    tracked = [
        (slot, steps)
        for slot, steps in given
        if slot.field.tracks_assigned
        and "$" not in steps
        and id(slot) not in added
        and values.identity_key(slot) not in twice
    ]
    tops = set().union(*(values.read_for(slot, steps) for slot, steps in tracked))
    stored = (
        query.collection.find_one(query.query, dict.fromkeys(tops, 1), sort=sort) if tops else None
    )
    held = values.held(stored or {}, [(steps, slot) for slot, steps in tracked])
    return [slot for slot, _ in given if id(slot) not in held]


def _filled(write: Write, empty: list[Slot], run: Callable[[], _T]) -> _T:
    """Run ``run()`` once the ``empty`` slots have values; given back if nothing was written."""
    filled = values.fill(write, empty)
    try:
        return run()
    except BaseException as error:
        if not values.outcome_unknown(error):
            values.give_back(write, filled)
        raise


DocumentUpdate = Callable[..., Any]


def wrap_document_update(owner: type[Document], own: DocumentUpdate | None) -> DocumentUpdate:
    """``Document.update`` for ``owner``, calling ``own`` (the class's own) or the parent's.

    ``doc.update(upsert=True)`` of a document without a key upserts by the document itself:
    MongoEngine's filter is its ``to_mongo()``, from which the document it inserts takes its
    embedded documents. Their empty values are made first, so that they are stored with them
    (the document's own are the upsert's to set on insert, as for any upsert)."""

    def update(self: Document, *args: Any, **kwargs: Any) -> Any:
        def run() -> Any:
            def write() -> Any:
                if own is not None:
                    return own(self, *args, **kwargs)
                return super(owner, self).update(*args, **kwargs)

            return landed.through_itself(self, write)

        if seam.key(self) is not None or not kwargs.get("upsert", False):
            return run()
        return _upsert_by_itself(self, run)

    return update


def _upsert_by_itself(document: Document, run: Callable[[], _T]) -> _T:
    """``run()``, MongoEngine's upsert of ``document`` (which has no key) by its ``to_mongo()``,
    once the empty values of its embedded documents are made; those an earlier attempt made
    (its outcome unknown), unchanged since, are its own (see :data:`_made_for_filter`)."""
    found = [s for s in values.slots(document) if s.holder is not document]
    state = seam.state(document, create=False)
    earlier = {} if state is None else state.upserted
    kept = [s for s in found if s.value is not None and earlier.get(_place(s)) == _identity(s)]
    empty = [s for s in found if s.value is None]

    def run_with_made() -> _T:
        token = _made_for_filter.set((type(document), frozenset(map(_identity, kept + empty))))
        try:
            return run()
        finally:
            _made_for_filter.reset(token)

    try:
        result = _filled(Write(type(document), seam.collection_of(document)), empty, run_with_made)
    except BaseException as error:
        if values.outcome_unknown(error):  # kept for the application's retry
            seam.state(document).upserted = {_place(s): _identity(s) for s in kept + empty}
        raise
    if state is not None:
        state.upserted = {}  # settled: a later write of the document is another one
    return result


#: The values ``doc.update(upsert=True)`` of a document without a key made for the embedded
#: documents of its filter (:func:`wrap_document_update`): its class, and their
#: ``values.identity_key``. They are the upsert's own, which it does not tell their fields
#: again as values its filter gives (a ``reserve_in`` field would find them reserved already,
#: and refuse them); an upsert of another model run meanwhile (a model's own ``update()``) is
#: not that one.
_made_for_filter: contextvars.ContextVar[tuple[type | None, frozenset[Any]]] = (
    contextvars.ContextVar("mongoengine_ids_made_for_filter", default=(None, frozenset()))
)


def _place(slot: Slot) -> tuple[int, str]:
    return id(slot.holder), slot.name


_identity = values.identity_key


def _may_match_several(query: seam.QuerySetParts) -> bool:
    """Whether the filter may match more than one document (one count, unless it is the key)."""
    if _from_filter(query.query, "_id")[0] is not _ABSENT:
        return False
    return bool(query.collection.count_documents(query.query, limit=2) > 1)


def _own_copy(update: dict[str, Any]) -> dict[str, Any]:
    """``update`` with the operators of its ``__raw__`` copied: MongoEngine merges the values
    added here into them, which must not end up in the caller's dict (its next upsert would
    find them there, as given)."""
    raw = update.get("__raw__")
    if not isinstance(raw, dict):
        return update
    copied = {
        op: dict(fields) if isinstance(fields, dict) else fields for op, fields in raw.items()
    }
    return {**update, "__raw__": copied}


class _Matches:
    """Whether an upsert's filter matches a stored document (it updates it, inserting
    nothing): looked up in ``collection`` once, when first asked (nothing is written before the
    upsert is sent), for every check of one attempt that depends on it."""

    def __init__(self, collection: Any, query: dict[str, Any]) -> None:
        self.collection = collection
        self._query = query
        self._found: bool | None = None

    def __call__(self) -> bool:
        if self._found is None:
            self._found = self.collection.find_one(self._query, {"_id": 1}) is not None
        return self._found


def _fields_of(
    document_class: Any,
    query: dict[str, Any],
    update: dict[str, Any],
    matches: _Matches,
    owner: str,
) -> tuple[list[Slot], list[Slot], dict[str, Any]]:
    """The generated fields an upsert must give a value (neither fixed by the filter nor
    written by the update); those the update gives one, or the filter a value no stored
    document holds yet (``matches``), with it; and the values, by field name and as the filter gives
    them, that the filter fixes only inside ``$and``, to set on insert as well (mongomock
    leaves them out of the document it inserts, which a server does not; the same value, so a
    server is unaffected)."""
    pipeline = isinstance(update.get("__raw__"), list)
    operations = {} if pipeline or not update else seam.update_operations(document_class, **update)
    holder = values.Holder(_given(document_class, query, operations), owner)
    empty, assigned, fixed = [], [], {}
    for name, field in seam.generated_fields(document_class):
        path = field.db_field
        given = _from_update(operations, path)
        if given is None:
            raise InvalidQueryError(
                f"{document_class.__name__}.{name} is generated: an upsert cannot set it to "
                "None (the document it inserts would lack its value); give it a value, or "
                "leave it out to be generated"
            )
        op = _writer(operations, path) if given is _ABSENT else None
        if op is not None:  # also under a filter that fixes it (review BX: inserted without)
            raise InvalidQueryError(
                f"{document_class.__name__}.{name} is generated: an upsert cannot write it "
                f"with {op} (the document it inserts would lack its value); use set__{name} "
                f"or set_on_insert__{name}, or leave it to be generated"
            )
        in_filter, inside_and = _from_filter(query, path)
        if given is _ABSENT and in_filter is not _ABSENT:
            if inside_and:
                fixed[name] = in_filter
            if not field.tracks_assigned:
                _check_fixed(field, in_filter, matches)
                continue  # nothing to tell
            if matches():
                continue  # the upsert finds the document holding it
            given = in_filter
        elif (
            given is not _ABSENT
            and field.tracks_assigned
            and matches.collection.find_one(
                {"$and": [query, _held_after(document_class, field, operations, given)]},
                {"_id": 1},
            )
            is not None
        ):
            continue  # the upsert finds a document holding it already: not a new value
        if given is not _ABSENT:
            where = "its filter fixes" if given is in_filter else "it sets"
            _check_stored_form(field, given, where, matches.collection)
            seam.data(holder)[name] = field.to_python(given)
            assigned.append(Slot(holder, holder, name, field, document_class))
            continue
        if pipeline:
            raise InvalidQueryError(
                f"{document_class.__name__}.{name} is generated: an upsert with a pipeline "
                "(__raw__=[...]) cannot give it a value on insert only; fix it in the filter, "
                "or insert with save() or insert()"
            )
        if _conditions(query, path) and not matches():
            raise _never_matched(f"{document_class.__name__}.{name}", name)
        empty.append(Slot(holder, holder, name, field, document_class))
    return empty, assigned, fixed


def _held_after(
    document_class: Any, field: GeneratedField, operations: dict[str, Any], given: Any
) -> dict[str, Any]:
    """The filter of a stored document that holds ``given`` (stored form), the value an
    upsert's update gives ``field``, as it will hold it: in the scope the update sets (review
    BX: a document moved to another scope with its number was taken to hold it already, and
    the new scope's counter was never told)."""
    held = {field.db_field: given}
    setting = operations.get("$set", {})
    for each in field.depends_on:
        source = seam.read_field(document_class, field, each).db_field
        if source in setting:
            held[source] = setting[source]
    return held


#: Update operators that write no value at their path (nor create the documents above it).
_REMOVING = frozenset({"$unset", "$pull", "$pullAll", "$pop", "$rename"})


def _created_embedded(
    document_class: Any,
    query: dict[str, Any],
    update: dict[str, Any],
    matches: _Matches,
    owner: str,
) -> tuple[dict[Slot, str], list[Slot]]:
    r"""The generated fields of the embedded documents an upsert's insert creates from its
    filter (``part__label="a"``, at any depth) or from a path of its update
    (``set__part__label="b"``), at any depth of ``EmbeddedDocumentField``\ s: those nothing
    else gives a value, each with the name its value is set on insert by (``part__code``);
    and those the filter or ``set_on_insert__`` gives a value, with it, to tell their fields
    (a counter moves past it) unless the upsert matches a document. An embedded document the
    update writes whole is filled as an update's (:func:`with_given_values`); one in a list
    is not reached by a path here; a subclass's fields are not known here.

    Raises:
        InvalidQueryError: the filter matches such an embedded document whole while one of its
            generated fields is empty (it would never match the document it inserts: its
            retry would insert another), or the update removes a generated value of one, or
            is a pipeline while one is empty (it has no ``$setOnInsert``).
    """
    if not update:
        return {}, []
    pipeline = update.get("__raw__")
    if isinstance(pipeline, list):
        operations = _pipeline_operations(pipeline)
    else:
        operations = seam.update_operations(document_class, **update)
    places = _Places(query, operations, owner)
    places.visit(document_class, ("", ""), None)
    places.visit_untyped(document_class)
    if isinstance(pipeline, list) and places.empty:
        # (review BX: the embedded document was inserted without its value)
        slot = next(iter(places.empty))
        raise InvalidQueryError(
            f"{slot.kind.__name__}.{slot.name} is generated: an upsert with a pipeline "
            f"(__raw__=[...]) would insert the embedded document at {slot.place!r} without its "
            "value (a pipeline cannot give it one on insert only); fix the value in the filter, "
            "use an update document, or insert with save() or insert()"
        )
    if places.conditioned and not matches():
        raise _never_matched(*places.conditioned[0])
    if places.inserted and matches():
        places.given = []  # the upsert matches: it inserts nothing
    else:
        for field, given, path in places.inserted:  # sent as given (a __raw__ filter or update)
            _check_stored_form(field, given, f"the upsert inserts at {path!r}", matches.collection)
    return places.empty, places.given


def _pipeline_operations(pipeline: list[Any]) -> dict[str, dict[str, Any]]:
    """The paths an update pipeline's stages write (as ``$set``, with the expression given)
    or remove (as ``$unset``), in the form of an update document's operators."""
    operations: dict[str, dict[str, Any]] = {"$set": {}, "$unset": {}}
    for stage in pipeline:
        for operator, spec in stage.items() if isinstance(stage, abc.Mapping) else ():
            for path, removes in _pipeline_paths(operator, spec):
                if removes:
                    operations["$unset"][path] = ""
                elif path:
                    operations["$set"][path] = spec[path]
    return operations


class _Places:
    """The embedded documents an upsert's insert creates, visited field by field."""

    def __init__(self, query: dict[str, Any], operations: dict[str, Any], owner: str) -> None:
        self.query, self.operations, self.owner = query, operations, owner
        self.equalities = [query, *_clauses(query)]
        self.empty: dict[Slot, str] = {}
        self.given: list[Slot] = []
        #: The values the filter or the update gives generated fields, as the insert stores
        #: them: (field, value, db path).
        self.inserted: list[tuple[Any, Any, str]] = []
        #: The generated fields to fill that the filter holds a condition on (:func:`_conditions`):
        #: (``Kind.field``, the update name of its path).
        self.conditioned: list[tuple[str, str]] = []

    def visit(self, kind: Any, prefix: tuple[str, str], whole: dict[str, Any] | None) -> None:
        """The embedded documents in fields of ``kind`` at ``prefix`` (a db path and an
        update name); ``whole``: what the filter fixes there whole (None: nothing)."""
        for name, field in seam.fields(kind).items():
            if not isinstance(field, EmbeddedDocumentField):
                continue
            path, update_name = f"{prefix[0]}{field.db_field}", f"{prefix[1]}{name}__"
            if any(path in fields for fields in self.operations.values()):
                continue  # written (or removed) whole by the update
            here = whole.get(field.db_field) if whole is not None else None
            if whole is None:
                found, _ = _from_filter(self.query, path)
                here = found if isinstance(found, dict) else None
            if here is None and not self._created(path):
                continue
            given = dict(here or {})
            for fields in (*self.equalities, *(self.operations.get(op, {}) for op in _GIVING)):
                given.update(_under(fields, path))
            self._fill(field.document_type, path, update_name, given, whole_fixed=here is not None)
            self.visit(field.document_type, (f"{path}.", update_name), here)

    def visit_untyped(self, document_class: Any) -> None:
        """The values of generated fields in the stored embedded documents (dicts naming their
        class) that an equality of the filter fixes whole where no ``EmbeddedDocumentField``
        is (:meth:`visit` takes those): a dynamic attribute, a ``DynamicField``, a list, a
        generic field. The insert stores them as given: told to their fields (unless the
        upsert matches), as the filter's values are."""
        for fields in self.equalities:
            for path, condition in fields.items():
                value = _equal_value(condition)
                if not isinstance(path, str) or path.startswith("$") or value is _ABSENT:
                    continue
                if seam.embedded_field_at(document_class, path) or any(
                    path in written for written in self.operations.values()
                ):
                    continue  # visited, or written by the update
                for kind, name, field, embedded, _ in seam.generated_in(
                    document_class, path, value
                ):
                    given = embedded.get(field.db_field)
                    if given is None:
                        continue
                    holder = values.holder_of(kind, name, field, embedded, self.owner)
                    self.inserted.append((field, given, path))
                    if field.tracks_assigned:
                        self.given.append(Slot(holder, holder, name, field, kind))

    def _created(self, path: str) -> bool:
        """Whether an equality of the filter, or an operator of the update that writes a value,
        names a path under ``path`` (the insert makes the embedded document there)."""
        under = f"{path}."
        in_filter = any(
            isinstance(key, str) and key.startswith(under) and _equality(value)
            for fields in self.equalities
            for key, value in fields.items()
        )
        return in_filter or any(
            key.startswith(under)
            for op, fields in self.operations.items()
            if op not in _REMOVING and isinstance(fields, dict)
            for key in fields
        )

    def _fill(
        self, kind: Any, path: str, update_name: str, given: dict[str, Any], whole_fixed: bool
    ) -> None:
        holder = values.Holder(values.python_values(given, seam.fields(kind)), self.owner)
        for inner, generated in seam.generated_fields(kind):
            inner_path = f"{path}.{generated.db_field}"
            removing = next(
                (op for op in _REMOVING if inner_path in self.operations.get(op, {})), None
            )
            if removing is not None:
                raise InvalidQueryError(
                    f"{kind.__name__}.{inner} is generated: an upsert cannot write it with "
                    f"{removing} (the embedded document it inserts would lack its value)"
                )
            if given.get(generated.db_field) is not None:
                self.inserted.append((generated, given[generated.db_field], inner_path))
                set_here = _writer(self.operations, inner_path) not in (None, "$setOnInsert")
                if generated.tracks_assigned and not set_here:  # a $set is told as an update's
                    self.given.append(Slot(holder, holder, inner, generated, kind))
                continue
            if _writer(self.operations, inner_path) is not None:
                continue  # written by another operator ($inc...: refused as an update's)
            if _conditions(self.query, inner_path):
                self.conditioned.append((f"{kind.__name__}.{inner}", f"{update_name}{inner}"))
            if whole_fixed:
                raise InvalidQueryError(
                    f"{kind.__name__}.{inner} is generated: this upsert's filter matches "
                    f"{path!r} as a whole embedded document without it, which the document it "
                    "inserts (holding a generated value there) never matches again: its retry "
                    "would insert a second one. Filter by its fields instead "
                    f"({update_name}<field>=...), or give the value"
                )
            slot = Slot(holder, holder, inner, generated, kind, place=path)
            self.empty[slot] = f"{update_name}{inner}"


def _equality(value: Any) -> bool:
    """Whether a filter's condition is an equality (which the inserted document gets)."""
    return _equal_value(value) is not _ABSENT


def _equal_value(condition: Any) -> Any:
    """The value a filter's condition on one path is equal to (``value``, ``{"$eq": value}``),
    which the document an upsert inserts gets; ``_ABSENT`` for another operator or a match."""
    if isinstance(condition, dict) and any(str(key).startswith("$") for key in condition):
        return condition.get("$eq", _ABSENT)
    if isinstance(condition, (re.Pattern, Regex)):
        return _ABSENT  # a match, not an equality: the document inserted does not get it
    return condition


def _clauses(query: dict[str, Any]) -> list[dict[str, Any]]:
    """The clauses of the filter's ``$and`` (whose equalities the inserted document gets)."""
    clauses = query.get("$and")
    return [c for c in clauses if isinstance(c, dict)] if isinstance(clauses, list) else []


def _under(fields: dict[str, Any], path: str) -> dict[str, Any]:
    """The values of ``fields`` (a filter's equalities, or an operator's fields) at paths one
    step under ``path``, by that step's name."""
    found = {}
    for key, value in fields.items():
        if not isinstance(key, str) or not key.startswith(f"{path}."):
            continue
        step = key[len(path) + 1 :]
        if "." in step:
            continue
        value = _equal_value(value)
        if value is not _ABSENT and value is not None:
            found[step] = value
    return found


def _writer(operations: dict[str, Any], path: str) -> str | None:
    """The first operator of the update that writes ``path`` (or a path inside it), if any."""
    return next(
        (
            op
            for op, fields in operations.items()
            if isinstance(fields, dict)
            and any(key == path or key.startswith(f"{path}.") for key in fields)
        ),
        None,
    )


def _check_fixed(field: Any, stored: Any, matches: _Matches) -> None:
    """Refuse a value the filter fixes that ``save()`` would refuse, unless the filter matches a
    document (a value of the field's kind outside its space finds documents stored before the
    space changed; the upsert inserts it only when it matches none).

    Raises:
        ValidationError: the value is not one the field accepts, and the upsert would insert it.
    """
    try:
        field.validate(field.to_python(stored))
    except ValidationError as error:
        if not matches():
            raise ValidationError(
                f"{field._label}: the upsert would insert {stored!r}, which its filter fixes "
                f"({error})",
                field_name=field.name,
            ) from error
        return
    try:
        _check_stored_form(field, stored, "its filter fixes", matches.collection)
    except ValidationError:
        if not matches():
            raise


def _check_stored_form(field: Any, given: Any, where: str, collection: Any) -> None:
    """Refuse a value a write stores as given (a ``__raw__`` filter or update is sent as it
    is) that is not in the form the field stores: ``"11"`` for a counter stores the text,
    which the field's queries and its unique index never match with the ``11`` it may hand
    out. (A value MongoEngine converted, from a keyword, is in that form.)

    Raises:
        ValidationError: saying the form the field stores.
    """
    if isinstance(given, bool):  # equal to 1 or 0, and an int to Python: never a value
        raise ValidationError(
            f"{field._label}: {given!r}, which {where}, is not a value of this field (a bool)",
            field_name=field.name,
        )
    stored = field.to_mongo(field.to_python(given))
    if stored == given and isinstance(given, type(stored)):
        return  # (a subclass too: a StoredUUID is the stored Binary)
    standard = collection.codec_options.uuid_representation == UuidRepresentation.STANDARD
    if isinstance(given, uuid.UUID) and standard and stored == Binary.from_uuid(given):
        return  # the client sends it as that Binary
    raise ValidationError(
        f"{field._label}: {given!r}, which {where}, would be stored as it is; the field "
        f"stores it as {stored!r}: give that (MongoEngine converts a value given by a keyword "
        "to a declared field, not one in __raw__, in a dict, or by a path into a dynamic "
        "embedded document of a dynamic document, which it takes for a DynamicField)",
        field_name=field.name,
    )


def _given(
    document_class: Any, query: dict[str, Any], operations: dict[str, Any]
) -> dict[str, Any]:
    """The values the fields read (their ``depends_on``) that the inserted document gets from
    the filter or the update, in Python form."""
    given = {}
    for _, field in seam.generated_fields(document_class):
        for name in field.depends_on:
            source = seam.read_field(document_class, field, name)
            path = source.db_field
            stored = _from_update(operations, path)
            if stored is _ABSENT:
                stored = _from_filter(query, path)[0]
            if stored is not _ABSENT and stored is not None:
                given[name] = source.to_python(stored)
    return given


def _conditions(query: Any, path: str) -> bool:
    """Whether the filter holds a condition on ``path``, a generated field the upsert fills (so
    no equality to a value the insert would get): null, ``$exists``, ``$in``, a range, a
    pattern, ``$not``, or any condition inside ``$or``, ``$nor`` or ``$and``. The value made
    for the document inserted is not known to meet it (null and missing it never meets)."""
    if not isinstance(query, dict):
        return False
    for key, condition in query.items():
        if key == path:
            return True
        if (
            key in ("$and", "$or", "$nor")
            and isinstance(condition, list)
            and any(_conditions(clause, path) for clause in condition)
        ):
            return True
    return False


def _never_matched(label: str, name: str) -> InvalidQueryError:
    """The error for an upsert whose filter holds a condition on the generated field ``label``
    (null, missing, a range...) while no document matches: the document it would insert holds
    a value made there, which the filter may never match (probe BB: asked to be null, each
    run, or retry, inserted another)."""
    return InvalidQueryError(
        f"{label} is generated: this upsert's filter holds a condition on it (null or missing, "
        "a range, a pattern...) that the value made for the document it would insert may not "
        "meet, and then never matches: each run, or retry, would insert another. Filter by "
        f"other fields, or by a value of it ({name}=...). (Document.update(upsert=True) of a "
        "document without a key filters by all its values, None included for a field declared "
        "null=True.)"
    )


def _from_update(operations: dict[str, Any], path: str) -> Any:
    """The value the update gives ``path`` (``$set``, ``$setOnInsert``); ``_ABSENT`` if none."""
    return next((operations[op][path] for op in _GIVING if path in operations.get(op, {})), _ABSENT)


def _from_filter(query: dict[str, Any], path: str) -> tuple[Any, bool]:
    """The value an equality of the filter fixes ``path`` to, which the document an upsert
    inserts gets (``path: value``, ``path: {"$eq": value}``, either inside ``$and``), or
    ``_ABSENT`` (also for None, which matches a missing field); and whether it was found
    inside ``$and``."""
    condition = _equal_value(query.get(path, _ABSENT))
    if condition is not _ABSENT and condition is not None and condition != {}:
        return condition, False
    for clause in _clauses(query):
        found = _from_filter(clause, path)[0]
        if found is not _ABSENT:
            return found, True
    return _ABSENT, False
