"""Give stored documents that lack a generated value one: for adopting a field on a populated
collection."""

from __future__ import annotations

from functools import partial
from typing import Any

import pymongo.errors
from mongoengine import Document
from mongoengine.base import BaseDocument
from mongoengine.errors import OperationError, ValidationError

from ..errors import unique_index_unbuilt
from . import seam, values
from .field import Write
from .values import Slot


def backfill(document_class: type[BaseDocument], *field_names: str, batch_size: int = 1000) -> int:
    """Fill the named generated fields (all of them by default) of every stored document of
    ``document_class`` that lacks a value, ``batch_size`` documents at a time. The documents
    of the model are those its queries find: with ``allow_inheritance``, its class and its
    subclasses, not the other classes sharing the collection; a field a subclass declares is
    filled in that subclass's documents. The generated fields of the embedded documents they
    hold are filled too (named by their dotted path: ``"items.no"``).

    Each document is updated only where the field is still missing or null (not a list holding
    a null) and its scope still the one read, so a value stored meanwhile (by ``save()`` or
    another backfill) is never replaced, nor a number stored in another scope; the values of
    embedded documents only if the field holding them is still as read (else read again).
    Interrupted, it can simply be run again: it picks up the documents still missing a value.

    Returns:
        How many values were given: one per document for a field of its own, one per embedded
        document for a field of theirs (summed over the fields).

    Raises:
        TypeError: ``document_class`` is not a Document class (or is abstract), ``batch_size``
            is not an int or a field name is not a str.
        ValueError: ``batch_size`` is below 1, or a name is not a generated field of
            ``document_class`` or of a subclass.
        ValidationError: stored documents lack a field a value is made from (a
            ``SequenceField``'s scope); named, once every other document was filled.
    """
    _check_arguments(document_class, field_names, batch_size)
    targets = _targets(document_class)
    names = {name for _, name, _, _ in targets}
    inside = {name for name in field_names if name not in names}
    unknown = [name for name in inside if not seam.generated_named(document_class, name)]
    if unknown:
        accepted = [*sorted(names), *seam.generated_paths(document_class)]
        raise ValueError(
            f"{unknown[0]!r} is not a generated field of {document_class.__name__} or a "
            f"subclass, nor of an embedded document they hold: expected one of "
            f"{accepted!r} (the dotted path of one inside embedded documents: a list's or a "
            "map's items are not named)"
        )
    try:
        collection = seam.class_collection(document_class)
        if seam.auto_create_index(document_class):
            # MongoEngine builds them once, where it first makes the collection: one it could
            # not build (the error below) it would never build again, and a duplicate would
            # be stored once the advice is followed (review 154).
            document_class.ensure_indexes()
    except pymongo.errors.DuplicateKeyError as error:
        where = seam.collection_name(document_class)
        unique = [s["fields"] for s in seam.index_specs(document_class) if s.get("unique")]
        field = unique[0][0][0] if len(unique) == 1 and len(unique[0]) == 1 else None
        raise unique_index_unbuilt(document_class.__name__, where, field, error) from error
    total = 0
    unready: list[str] = []  # raised once every field is filled where it can be
    selected = [t for t in targets if not field_names or t[1] in field_names]
    scopes = _embedding_scopes(selected)
    if scopes:  # a number is made from its scope as stored: with the values inside it
        write = Write(document_class, collection)
        total += _backfill_inside(write, None, batch_size, unready, scopes)
    for kind, name, field, within in selected:
        try:
            total += _backfill_field(Write(kind, collection), name, field, within, batch_size)
        except _Unready as error:
            total += error.filled
            unready.append(error.problem)
    if inside or not field_names:  # (None: every one)
        wanted = inside if field_names else None
        total += _backfill_inside(Write(document_class, collection), wanted, batch_size, unready)
    if unready:
        raise ValidationError(
            f"{unready[0]}: give them one (or delete them), then run backfill() again "
            f"({total} value(s) were given meanwhile, to the other documents and fields)"
        )
    return total


#: The largest ``batch_size``: the cursor's, an int32 to the server.
_MAX_BATCH = 2**31 - 1


def _check_arguments(document_class: Any, field_names: tuple[Any, ...], batch_size: Any) -> None:
    """Raise ``TypeError`` or ``ValueError`` for arguments :func:`backfill` does not take."""
    if not (isinstance(document_class, type) and issubclass(document_class, Document)):
        raise TypeError(f"document_class must be a Document subclass, not {document_class!r}")
    if seam.is_abstract(document_class):  # Document itself too
        raise TypeError(
            f"document_class must be a model with a collection, not {document_class.__name__} "
            "(abstract): backfill each concrete model made from it"
        )
    if not isinstance(batch_size, int) or isinstance(batch_size, bool):
        raise TypeError(f"batch_size must be an int, not {batch_size!r}")
    if not 1 <= batch_size <= _MAX_BATCH:  # (probe BS-4: a server refuses more than int32)
        raise ValueError(f"batch_size={batch_size!r}: expected 1 to {_MAX_BATCH:,}")
    for name in field_names:
        if not isinstance(name, str):
            raise TypeError(f"field names must be str, not {name!r}")


def _targets(
    document_class: type[BaseDocument],
) -> list[tuple[type[BaseDocument], str, Any, dict[str, Any]]]:
    """The generated fields of ``document_class`` and of its subclasses (whose documents its
    queries find), each with the class that first has it and the filter of the documents that
    hold it: of that class and its subclasses, but those that declare another field under its
    name (whose own counter numbers them)."""
    found: list[tuple[type[BaseDocument], str, Any, dict[str, Any]]] = []
    for kind in seam.with_subclasses(document_class):
        for name, field in seam.generated_fields(kind):
            if all(field is not other for _, _, other, _ in found):
                found.append((kind, name, field, _holding(kind, name, field)))
    # A field another's values are made from (its scope) is filled first, whatever their order.
    ordered: list[tuple[type[BaseDocument], str, Any, dict[str, Any]]] = []
    while found:
        pending = {name for _, name, _, _ in found}
        ready = [t for t in found if not pending & (set(t[2].depends_on) - {t[1]})] or found
        ordered += ready
        found = [t for t in found if t not in ready]
    return ordered


def _embedding_scopes(
    targets: list[tuple[type[BaseDocument], str, Any, dict[str, Any]]],
) -> set[str]:
    """The db fields that the ``targets`` read (their scopes) whose values may hold embedded
    documents with generated fields: filled before the targets, whose values are made from
    them as stored (else numbered in the counter of the scope without those values, which
    the scope as it is then stored never tells: numbers handed out again, probe AJ)."""
    return {
        source.db_field
        for kind, _, field, _ in targets
        for name in field.depends_on
        if seam.embeds_generated(source := seam.read_field(kind, field, name))
    }


def _holding(kind: type[BaseDocument], name: str, field: Any) -> dict[str, Any]:
    within = seam.class_filter(kind)
    if not within:
        return within
    holding = [k for k in seam.with_subclasses(kind) if seam.fields(k).get(name) is field]
    return {"_cls": {"$in": [k._class_name for k in holding]}}


class _Unready(Exception):
    """Documents lacking a field a value is made from (see :func:`_refuse_unready`), after
    ``filled`` others were filled."""

    def __init__(self, problem: str, filled: int) -> None:
        super().__init__(problem)
        self.problem, self.filled = problem, filled


def _all_set(paths: list[str]) -> dict[str, Any]:
    """A filter of the documents holding a value at each of ``paths``: not null, or a list (one
    holding a null: ``$ne: null`` would leave it out, as it leaves out a list holding one)."""
    if not paths:
        return {}
    held = [{"$or": [{path: {"$type": "array"}}, {path: {"$ne": None}}]} for path in paths]
    return {"$and": held}


#: The start of a pass over the documents lacking a value, in _id order.
_START: Any = object()


def _backfill_field(
    write: Write, name: str, field: Any, within: dict[str, Any], batch_size: int
) -> int:
    path = field.db_field
    if path == "_id":
        return 0  # every stored document has one
    read = {dep: seam.read_field(write.document_class, field, dep) for dep in field.depends_on}
    projection = {"_id": 1, **{source.db_field: 1 for source in read.values()}}
    lacking = {**within, **lacks(path)}  # the documents holding the field only
    # A value made from other fields (a scope) needs them, with the generated values inside
    # them (review H: a document inserted after those were filled was numbered from a scope
    # then given a value): documents lacking one are left out, and named once the others
    # are filled.
    needed = [p for source in read.values() for p in seam.paths_to_hold(source)]
    ready = {**lacking, **_all_set(needed)}
    filled_count = 0
    missed: dict[Any, int] = {}  # the conditional writes that matched nothing, per document
    # Each batch reads on from the last _id of the one before, by the _id index: a query of
    # the documents lacking the value alone cannot use the field's (sparse) index, and read
    # again from the start, it would scan past every document filled so far (quadratic over
    # a large collection, probe AJ). A pass ends with one more from the start: documents
    # behind the cursor, and keys of another BSON type, which $gt does not reach.
    after: Any = _START
    while True:
        query = ready if after is _START else {**ready, "_id": {"$gt": after}}
        found = list(write.collection.find(query, projection).sort("_id", 1).limit(batch_size))
        if not found:
            if after is not _START:
                after = _START
                continue
            _refuse_unready(write, field, lacking, needed, filled_count)
            return filled_count
        after = found[-1]["_id"]
        ids = [stored["_id"] for stored in found]
        holders = [values.Holder(_read_values(field, stored, read)) for stored in found]
        slots = [Slot(h, h, name, field, write.document_class) for h in holders]
        values.fill(write, slots)
        for position, (doc_id, slot) in enumerate(zip(ids, slots, strict=True)):
            # Its scope as read, as stored: moved since, it is read again (by the next pass).
            scope = {
                source.db_field: found[position].get(source.db_field) for source in read.values()
            }
            try:
                stored = fill_if_missing(write, doc_id, slot, scope=scope)
            except BaseException:
                # The batch's values not sent yet are free (the failed one's, its write decides).
                values.give_back(write, slots[position + 1 :])
                raise
            if stored:
                filled_count += 1
                continue
            values.give_back(write, [slot])  # stored meanwhile by another writer, or moved
            missed[doc_id] = missed.get(doc_id, 0) + 1
            if missed[doc_id] >= _ATTEMPTS:  # (review 5: a NaN scope on mongomock looped)
                raise OperationError(
                    f"{write.document_class.__name__}.{name} of the document {doc_id!r}: "
                    f"{_ATTEMPTS} conditional writes found it changed since it was read "
                    f"(its scope as read: {scope!r}); run backfill() again, or fill it by hand"
                )


#: Attempts at one document's embedded values while the field holding them changes under each.
_ATTEMPTS = 10


def _backfill_inside(
    write: Write,
    wanted: set[str] | None,
    batch_size: int,
    unready: list[str],
    only: set[str] | None = None,
) -> int:
    """Fill the ``wanted`` generated fields (dotted names; None: all) of the stored embedded
    documents of ``write``'s model that lack a value, in the fields of db names ``only`` (None:
    all): the fields holding them are read ``batch_size`` documents at a time. Documents
    lacking a value's scope are added to ``unready``."""
    document_class = write.document_class
    holding = {
        (name, field.db_field): field
        for kind in seam.with_subclasses(document_class)
        for name, field in seam.fields(kind).items()
        if not seam.is_generated(field)
        and (only is None or field.db_field in only)
        and seam.embeds_generated(field)
    }
    if not holding:
        return 0
    projection = {"_cls": 1, **{db_field: 1 for _, db_field in holding}}
    embeds: dict[int, bool] = {}  # embeds_generated() of the fields met, for lacking_inside()
    filled = 0
    found = write.collection.find(seam.class_filter(document_class), projection)
    for stored in found.batch_size(batch_size):
        kind = seam.registered(stored.get("_cls")) or document_class
        for name, field in seam.fields(kind).items():
            if (name, field.db_field) in holding:
                filled += _fill_inside(write, stored, name, field, wanted, unready, embeds)
    return filled


def _fill_inside(
    write: Write,
    stored: dict[str, Any],
    name: str,
    field: Any,
    wanted: set[str] | None,
    unready: list[str],
    embeds: dict[int, bool],
) -> int:
    """Fill the embedded documents in field ``name`` of the stored document ``stored`` that lack
    a ``wanted`` value, with one update conditioned on the field as read (read again if it
    changed meanwhile); returns how many values were given."""
    db_field, doc_id = field.db_field, stored["_id"]
    for _ in range(_ATTEMPTS):
        value = stored.get(db_field)
        slots, paths = _lacking_slots(value, name, field, wanted, doc_id, unready, embeds)
        if not slots:
            return 0
        values.fill(write, slots)
        as_read = {"_id": doc_id, db_field: value}
        result = values.send(write, slots, partial(_set_inside, write, as_read, slots, paths))
        if result.matched_count:
            return len(slots)
        values.give_back(write, slots)  # changed (or deleted) meanwhile: read again
        again = write.collection.find_one({"_id": doc_id}, {db_field: 1})
        if again is None:
            return 0
        stored = again
    raise OperationError(
        f"{write.document_class.__name__} _id {doc_id!r}: its field {name!r} changed under "
        f"each of {_ATTEMPTS} attempts to give its embedded documents their values; run "
        "backfill() again"
    )


def _set_inside(write: Write, as_read: dict[str, Any], slots: list[Slot], paths: list[str]) -> Any:
    """Set the values of ``slots`` at their ``paths`` in the document matching ``as_read``, the
    package's own conditional write: acknowledged whatever the collection's (w=0), so that
    whether it matched is known."""
    update = {
        f"{path}.{slot.field.db_field}": slot.field.to_mongo(slot.value)
        for slot, path in zip(slots, paths, strict=True)
    }
    return seam.acknowledging(write.collection).update_one(as_read, {"$set": update})


def _lacking_slots(
    value: Any,
    name: str,
    field: Any,
    wanted: set[str] | None,
    doc_id: Any,
    unready: list[str],
    embeds: dict[int, bool],
) -> tuple[list[Slot], list[str]]:
    """The slots to fill in the stored ``value`` of field ``name`` (with the dotted db path of
    each embedded document); one whose scope is missing is reported in ``unready``."""
    found = [
        each
        for each in seam.lacking_inside(field, value, field.db_field, name, embeds)
        if wanted is None or each[5] in wanted
    ]
    # One holder per stored embedded document: a value made from a sibling filled here (a
    # counter scoped by a generated field) reads it once made (values.fill orders them).
    holders: dict[int, values.Holder] = {}
    filling = {(id(stored), inner) for _, inner, _, stored, _, _ in found}
    slots: list[Slot] = []
    paths: list[str] = []
    for kind, inner, generated, stored, path, _ in found:
        held = holders.get(id(stored))
        if held is None:
            read = {
                each: f
                for generated_name, generated_field in seam.generated_fields(kind)
                for each, f in values.reads(kind, generated_name, generated_field).items()
            }
            held = holders[id(stored)] = values.Holder(values.python_values(stored, read))
        lacking = [
            each
            for each in generated.depends_on
            if seam.data(held).get(each) is None and (id(stored), each) not in filling
        ]
        if lacking:
            unready.append(
                f"{generated._label} is made from {sorted(generated.depends_on)!r}, which the "
                f"embedded document at {path!r} of _id {doc_id!r} lacks"
            )
            continue
        slots.append(Slot(held, held, inner, generated, kind))
        paths.append(path)
    return slots, paths


def _read_values(field: Any, stored: dict[str, Any], read: dict[str, Any]) -> dict[str, Any]:
    """The values of the fields ``field`` reads (``read``) in the stored document, in Python
    form.

    Raises:
        ValidationError: one is no value of its field (review H: MongoEngine's bare error
            named neither the document nor the field, and stopped every later run there).
    """
    try:
        return values.python_values(stored, read)
    except Exception as error:
        raise ValidationError(
            f"{field._label} is made from {sorted(read)!r}: the stored document _id "
            f"{stored['_id']!r} holds no value of those fields there ({error}); correct it "
            "(or delete it), then run backfill() again",
            field_name=field.name,
        ) from error


def _refuse_unready(
    write: Write, field: Any, lacking: dict[str, Any], needed: list[str], filled: int
) -> None:
    """Raise if stored documents lacking ``field``'s value also lack a value it is made from
    (at the db paths ``needed``: its scope, and the generated values inside it).

    Raises:
        _Unready: naming the field, the paths it needs and a few of those documents.
    """
    if not needed:
        return
    unready = {**lacking, "$nor": [_all_set(needed)]}
    shown = [doc["_id"] for doc in write.collection.find(unready, {"_id": 1}).limit(3)]
    if shown:
        problem = (
            f"{field._label} is made from {needed!r}, which stored documents lack, "
            f"e.g. _id {', '.join(map(repr, shown))}"
        )
        raise _Unready(problem, filled)


def lacks(path: str) -> dict[str, Any]:
    """The filter of a document lacking a value at ``path``: missing or null, not a list
    holding a null, which ``{path: None}`` matches too (probe BS-2: such a list was replaced)."""
    return {path: {"$eq": None, "$not": {"$type": "array"}}}


def fill_if_missing(
    write: Write,
    doc_id: Any,
    slot: Slot,
    condition: dict[str, Any] | None = None,
    *,
    scope: dict[str, Any],
) -> bool:
    """Store ``slot``'s value in the document ``doc_id`` if it still lacks one (missing or
    null), its ``scope`` (the fields the value was made from, by db field, as stored) is still
    the one it was made in, and it matches ``condition``; a collision the field claims is
    retried with a fresh value.

    Returns:
        Whether it was stored (False: another writer stored one meanwhile, or moved it to
        another scope, the condition failed, or no such document).
    """
    path = slot.field.db_field
    # The package's own conditional write: acknowledged, whatever the collection's (w=0), so
    # that whether it stored the value is known.
    collection = seam.acknowledging(write.collection)

    def attempt() -> Any:
        # The scope as the value was made in: moved meanwhile, the value would be stored in
        # another numbering, its counter not told (probe BS-1: handed out there again).
        # (With $and: the scope and the condition may name one field: review 5, a failing
        # save_condition on the scope was replaced by it, and the value stored.)
        clauses = [part for part in (condition, scope) if part]
        return collection.update_one(
            {"_id": doc_id, **lacks(path), **({"$and": clauses} if clauses else {})},
            {"$set": {path: slot.field.to_mongo(slot.value)}},
        )

    return bool(values.send(write, [slot], attempt).matched_count)
