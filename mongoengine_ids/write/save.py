"""``save()``: values filled in at the write itself.

MongoEngine's ``save()`` runs ``pre_save``, ``validate()``, ``pre_save_post_validation``,
serialises the document, then writes it with ``_save_create()`` (a new document) or
``_save_update()`` (an existing one). Those two are wrapped, so the values are made right
before the write, after every user hook, and with the collection the write goes to.

A new document: every empty generated value is filled (embedded documents included), an
ObjectId primary key left to the driver is made here, and the document is inserted (never
written over another) when its key is generated or made here. A collision of a value the
field generated is retried with a fresh one; an error that wrote nothing gives the values back;
an error whose outcome is unknown keeps them, so that the application's retry finds the
document stored (:mod:`.landed`) or inserts it with the same key: never a second copy.

An existing document: generated fields it did not load (a projection) are left alone; new
embedded documents get values; a loaded document whose stored copy lacks a value (the field was
added later) gets one with a conditional write, or takes the value another process stored.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from bson import ObjectId
from mongoengine.base import BaseDocument
from mongoengine.document import Document
from mongoengine.errors import (
    NotUniqueError,
    OperationError,
    SaveConditionError,
    ValidationError,
)
from mongoengine.fields import EmbeddedDocumentField

from . import landed, seam, values
from .backfill import fill_if_missing
from .field import Stored, Write
from .values import Slot

_logger = logging.getLogger(__name__)

SaveCreate = Callable[[Document, Any, bool, Any], Any]
SaveUpdate = Callable[[Document, Any, Any, Any], Any]


def wrap_save_create(owner: type[Document], own: SaveCreate | None) -> SaveCreate:
    """``_save_create`` for ``owner``, calling ``own`` (the class's own) or the parent's."""

    def _save_create(self: Document, doc: Any, force_insert: bool, write_concern: Any) -> Any:
        earlier = seam.state(self, create=False)
        if force_insert and earlier is not None and earlier.stored_by_failed_insert is not None:
            collection = seam.collection_of(self)
            if landed.where_failed_insert_stored(self, collection):
                # MongoEngine would insert it again, refused as a duplicate of itself: say why.
                refused = landed.force_insert_refused(self, collection)
                if refused is not None:
                    raise NotUniqueError(refused)
                values.new_again(self, collection)  # deleted since: inserted again, as new
        if earlier is not None and earlier.over_own_copy:
            # The application's retry of a save() that found its insert landed, and failed
            # writing over that copy (``force_insert`` keeps MongoEngine from seeing it is
            # stored): an update of it. (MongoEngine's step returns the key and whether the
            # document was created.)
            return self._save_update(doc, None, write_concern)[0]

        def write_next(son: Any, insert: bool, concern: Any = write_concern) -> Any:
            if own is not None:
                return own(self, son, insert, concern)
            written = super(owner, self)._save_create(son, insert, concern)
            # MongoEngine's step returns the _id it sent, and save() sets the key to its
            # to_python(): the key the document holds already (not decoded again).
            key = seam.key(self)
            return written if key is None else key

        # MongoEngine's own step is one insert: if it fails, nothing was written. A model's
        # own step may write more after its insert, so a failure there may follow a write.
        return save_create(
            self,
            doc,
            force_insert,
            write_next,
            may_write_more=own is not None,
            write_concern=write_concern,
        )

    return _save_create


def wrap_save_update(owner: type[Document], own: SaveUpdate | None) -> SaveUpdate:
    """``_save_update`` for ``owner``, calling ``own`` (the class's own) or the parent's."""
    # MongoEngine's step reads the key and the shard key of ``doc``; a model's own may read
    # anything of it (the class's, or a base's).
    own_step = own is not None or seam.base_defines(owner, "_save_update")

    def _save_update(self: Document, doc: Any, save_condition: Any, write_concern: Any) -> Any:
        generated_key = seam.shape(type(self)).generates_pk
        earlier = seam.state(self, create=False)
        if earlier is not None and earlier.unconfirmed:
            if save_condition is None:
                # The retry of an insert whose reply was lost (of a loaded document given a new
                # key, which MongoEngine takes as stored): that insert again, which finds it if
                # it landed. (MongoEngine's step returns the key and whether it was created.)
                return self._save_create(doc, True, write_concern), True
            # A conditional update goes by the key: only if it is this document's, landed
            # (review CA-2: it went to the document holding the key, the condition met).
            settle_unconfirmed(self)
        _refuse_update_elsewhere(self, generated_key)
        if save_condition is None and generated_key and seam.never_stored(self):
            # A generated key assigned after the document was built (or by pre_save): MongoEngine
            # takes the document as stored and would upsert it over the holder of that key. It is
            # new: inserted, as when the key is given to the constructor. (MongoEngine's step
            # returns the key and whether the document was created.)
            return self._save_create(doc, True, write_concern), True

        def write_next(son: Any, concern: Any) -> Any:
            if own is not None:
                return own(self, son, save_condition, concern)
            return super(owner, self)._save_update(son, save_condition, concern)

        left_out = seam.left_out_values(self) if save_condition is None else []
        if left_out:
            # MongoEngine's upsert would insert the document without the values a projection
            # left out, if it is not stored (deleted since it was loaded, or saved to another
            # collection: the probe of session 39): an update of the stored one only, as with
            # a save_condition (which write_next passes on), acknowledged to tell.
            save_condition = {}
            write_concern = values.acknowledged_option(seam.collection_of(self), write_concern)
        # What MongoEngine writes is computed from the changed fields; with a generated field
        # in the shard key, ``doc`` needs the values made.
        reads_values = own_step or bool(seam.shard_key(type(self)))
        try:
            return save_update(
                self,
                doc,
                save_condition,
                write_next,
                reads_values=reads_values,
                write_concern=write_concern,
            )
        except SaveConditionError as error:
            if not left_out:
                raise
            raise _loaded_in_part_and_gone(self, left_out) from error

    return _save_update


def _refuse_update_elsewhere(document: Document, generated_key: bool) -> None:
    """Refuse an update of the stored ``document`` that MongoEngine would send to another
    document: by its key in the field's form, where it is stored in another (a second copy),
    or by a generated key changed since it was stored (the document holding the new key).

    Raises:
        ValidationError, OperationError: so; nothing is written.
    """
    if seam.stored_key(document, seam.collection_of(document)) is not None:
        raise _stored_in_another_form(document)
    if generated_key and seam.key_changed(document):
        raise OperationError(
            f"{type(document).__name__}: the key of a stored document cannot change (to "
            f"{seam.key(document)!r}); to store a copy under a new key, set the key to None "
            + (
                # (probe BU-1: cleared in pre_save_post_validation, after MongoEngine took the
                # document for a stored one)
                "before save() or in a pre_save handler, not later: save() has taken it for "
                "the stored document by then"
                if seam.key(document) is None
                else "and save() it as a new document"
            )
        )


def _loaded_in_part_and_gone(document: Document, left_out: list[str]) -> OperationError:
    """The error for ``save()`` of ``document``, loaded in part (``left_out``: the generated
    values the projection left out), that matched no stored document."""
    return OperationError(
        f"{type(document).__name__} {seam.key(document)!r} was loaded in part (only(), "
        f"exclude() or fields() left out {', '.join(left_out)}) and no document stored in "
        f"{seam.collection_of(document).full_name!r} matches it (deleted since it was loaded, "
        "or this save() writes to another collection): MongoEngine would insert it without "
        "those fields (generated values, or what they are made from); nothing was written. To "
        "store it, load it whole (or build it anew) and save() that"
    )


def _stored_in_another_form(document: Document) -> ValidationError:
    """The error for a write of ``document``, whose key is stored in another form than its
    field writes (:func:`.seam.note_stored_key`), that would store a second copy of it."""
    return ValidationError(
        f"{type(document).__name__}: its key {seam.key(document)!r} is stored as "
        f"{seam.stored_key(document)!r}, another form than its field writes; this save() "
        "would store a second copy under the field's form. Convert the stored key first: insert "
        "the stored document again under the key in the field's form, then delete the one "
        "stored under the old form (docs/migration.md, 'Keys stored in another form')"
    )


def wrap_object_key(owner: type[Document], own: property | None) -> property:
    """``_object_key`` for ``owner``: the filter by which MongoEngine's ``update()``,
    ``modify()``, ``delete()`` and ``reload()`` address the stored document (``own``: the
    class's own property, or the parent's), once the document is known to be the one stored
    under its key (:func:`settle_unconfirmed`)."""

    def _object_key(self: Document) -> Any:
        settle_unconfirmed(self)
        key: dict[str, Any] = (
            own.fget(self)  # type: ignore[misc]
            if own is not None
            else super(owner, self)._object_key
        )
        return _in_stored_form(self, key)

    return property(_object_key)


def _in_stored_form(document: Document, key: dict[str, Any]) -> dict[str, Any]:
    """``key``, the filter MongoEngine addresses ``document`` by (``pk``, and the shard key's
    fields), with the values of generated fields as the document holds them, in stored form:
    sent so, not read as query values (probe BK-3: with ``value_decorator=lambda n: str(n +
    1000)``, the key "1001" was read as the number 1001 and looked for as "2001", so
    ``reload()``, ``update()`` and ``delete()`` went to that document). A key stored in
    another form than its field writes is sent as stored (:func:`.seam.stored_key`). The key
    goes by its field's name, which ``modify()`` sets too (beside "pk", both were asked)."""
    kind = type(document)
    pk_name = seam.shape(kind).pk_name
    stored_key = seam.stored_key(document, document._get_collection())
    found: dict[str, Any] = {}
    for name, value in key.items():
        field_name = pk_name if name == "pk" else name
        field = seam.field_of(kind, field_name)
        if field_name == pk_name and stored_key is not None:
            found[field_name] = Stored(stored_key)
        elif value is not None and seam.is_generated(field):
            try:
                found[field_name] = Stored(field.to_mongo(value))
            except (ValidationError, ValueError, TypeError):
                found[name] = value  # no value of the field (a UUID of another version)
        else:
            found[name] = value
    return found


def wrap_reload(owner: type[Document], own: Callable[..., Any] | None) -> Callable[..., Any]:
    """``reload`` for ``owner``: the fields it reloads count as loaded (a scope a projection
    left out was still taken for one after ``reload()``, which its refusal advises: review E)."""

    def reload(self: Document, *fields: Any, **kwargs: Any) -> Any:
        if own is not None:
            result = own(self, *fields, **kwargs)
        else:
            result = super(owner, self).reload(*fields, **kwargs)
        # MongoEngine takes a first int for max_depth (reload(2)), not a field (review F).
        named = fields[1:] if fields and isinstance(fields[0], int) else fields
        seam.loaded_again(self, named)
        if not named:
            landed.reloaded_whole(self)
        return result

    return reload


def wrap_modify(owner: type[Document], own: Callable[..., Any] | None) -> Callable[..., Any]:
    """``modify`` for ``owner``: a document it modified is reloaded whole (MongoEngine sets
    every field from the document it returns)."""

    def modify(self: Document, *args: Any, **kwargs: Any) -> Any:
        def write() -> Any:
            if own is not None:
                return own(self, *args, **kwargs)
            return super(owner, self).modify(*args, **kwargs)

        result = landed.through_itself(self, write, reloads=True)
        if result:
            seam.loaded_again(self, ())
        return result

    return modify


def wrap_delete(owner: type[Document], own: Callable[..., Any] | None) -> Callable[..., Any]:
    """``delete`` for ``owner``: MongoEngine's sends ``pre_delete`` and deletes the document's
    GridFS files before it reads ``_object_key``; the key is settled first."""

    def delete(self: Document, *args: Any, **kwargs: Any) -> Any:
        settle_unconfirmed(self)
        if own is not None:
            return own(self, *args, **kwargs)
        return super(owner, self).delete(*args, **kwargs)

    return delete


def settle_unconfirmed(document: Document) -> None:
    """If the insert of ``document`` had its reply lost, find out whether it was applied: then
    the document is the one stored under its key. Else refuse if its key may be another
    document's: a sequence or random key (one the field would have retried had the insert's
    error come back), or any key a document holds that this one did not send (a copy of it,
    saved meanwhile). A key made for the document alone and not stored addresses nothing.

    Raises:
        OperationError: the insert was not applied (or not yet): nothing is done; ``save()`` it
            again first, which inserts it.
        pymongo.errors.PyMongoError: the look-up failed (nothing is done).
    """
    state = seam.state(document, create=False)
    if state is None or not state.unconfirmed:
        return
    collection = seam.collection_of(document)
    found, stored = landed.earlier_insert_stored(document, collection)
    if found is landed.Found.OTHER:
        raise OperationError(landed.held_by_other(document, collection))
    if found is landed.Found.NOTHING:
        if not landed.pk_can_collide(document):
            return  # made for it alone: it addresses nothing
        raise OperationError(
            f"{type(document).__name__} {seam.key(document)!r}: its insert had its reply lost "
            f"and is not stored in {collection.full_name!r} (its key may be another "
            "document's); save() it again first, where its insert was sent (under the same "
            "switch_db() or switch_collection(), if any), then update(), modify(), delete() or "
            "reload()"
        )
    values.confirm([document], whole=True)
    # Stored by an insert whose call failed, as found: the application's retry of a bulk
    # insert() counts it stored if it still finds it so (an update through the document, about
    # to run, drops the comparison: :func:`.landed.updated_through_itself`; a delete or a
    # reload keeps it: the review of session 38). What the object held when that insert was
    # sent is not known here (its copy found may hold what a model's own step added).
    values.stored_by_failed_insert(document, collection, written=stored, local=None)


def save_create(
    document: Document,
    son: Any,
    force_insert: bool,
    write_next: Callable[..., Any],
    *,
    may_write_more: bool = False,
    write_concern: Any = None,
) -> Any:
    """Fill the document's values and insert it (``write_next(son, insert, concern)``); returns
    what the write step returned. Sent with ``write_concern`` (MongoEngine's option), but
    acknowledged if a value it generated may collide (:func:`values.acknowledged_concern`)."""
    shape = seam.shape(type(document))
    write = Write(type(document), seam.collection_of(document), (document,))
    earlier = seam.state(document, create=False)
    _refuse_second_copy(document, shape, write, earlier)
    retrying = earlier is not None and earlier.unconfirmed  # an insert whose reply was lost
    # MongoEngine's step replaces the document stored under a key given to a new document
    # (not generated, no force_insert): the values that one holds are this one's own, not new
    # (probe BJ-3: a copy carrying its reserve_in values was refused as taken).
    replaces = not (force_insert or shape.generates_pk) and seam.stored_pk(document) is not None
    # Values changed since an earlier attempt are told to the fields (a counter moves past
    # them), values cleared are made again: whether or not the earlier insert landed.

    def new(assigned: list[Slot]) -> list[Slot]:
        if not any(slot.field.tracks_assigned for slot in assigned):
            return assigned  # nothing to look up (review X: the filter serialised it again)
        select = seam.replaced_by(document)
        return assigned if select is None else _new_values(write, document, assigned, select)

    noted, filled = values.prepare(write, [document], [earlier], new=new if replaces else None)
    made_pk = make_pk(document, shape) or (earlier is not None and earlier.made_pk)
    found = _landed(document, write, made_pk, filled, noted) if retrying else None
    if found is landed.Found.SENT:
        return _over_own_copy(document, write, filled, noted, earlier, write_next)
    # A key of a generated field is inserted, never written over a document holding it (also
    # one the user assigned: MongoEngine's replace would silently overwrite, its issue 1472).
    insert = made_pk or force_insert or shape.generates_pk
    if landed.refused(found, document, insert=insert, filled=filled):
        values.unconfirmed(document, sent=None, made_pk=made_pk, filled=filled, noted=noted)
        raise NotUniqueError(landed.held_by_other(document, write.collection))
    if earlier is not None:
        # Not before: if making the values failed, the earlier insert may still land, and the
        # next attempt must look for it again.
        earlier.unconfirmed = False
    step = _Insert(
        document,
        shape,
        write,
        son,
        insert,
        filled,
        noted,
        made_pk,
        write_next,
        may_write_more,
        concern=values.acknowledged_concern(write, filled, write_concern),
    )
    try:
        written = step.send(retrying)
    except values.EarlierInsertLanded:
        # As if the look-up above had found it.
        return _over_own_copy(document, write, filled, noted, earlier, write_next)
    # Nothing of earlier attempts, or of reservations, is pending.
    values.confirm([document], whole=True)
    return written


def _refuse_second_copy(
    document: Document, shape: seam.Shape, write: Write, earlier: seam.State | None
) -> None:
    """Refuse to insert ``document`` where it would be a second copy of a stored one: stored
    under its key in another form (``save(force_insert=True)``), or loaded without its key.

    Raises:
        ValidationError, OperationError: so; nothing is written.
    """
    if seam.stored_key(document, write.collection) is not None:
        raise _stored_in_another_form(document)  # save(force_insert=True): a second copy
    if earlier is not None and shape.pk_name in earlier.unloaded:
        raise OperationError(
            f"{type(document).__name__} was loaded without its key (exclude({shape.pk_name!r})): "
            "save() would insert it as a copy under a new key; load the key, or set it to None "
            "(and the unique generated values it holds, which the copy would share) to insert "
            "a copy"
        )


@dataclass(slots=True)
class _Insert:
    """The insert of one new document by ``save()``, attempt by attempt (:func:`values.send`
    retries it after a collision of a value it filled)."""

    document: Document
    shape: seam.Shape
    write: Write
    #: MongoEngine's serialisation of the document, made before its values were.
    son: Any
    #: Whether the write inserts (else MongoEngine's step may replace a document).
    insert: bool
    filled: list[Slot]
    noted: list[tuple[Slot, Any]]
    made_pk: bool
    #: Writes the SON, inserting or not, with a write concern (MongoEngine's step, or the
    #: model's own).
    write_next: Callable[[Any, bool, Any], Any]
    #: The step is a model's own, which may write more after its insert.
    may_write_more: bool
    #: What the last attempt sent.
    sent: Any = None
    #: The server refused the last attempt (a duplicate key): it cannot land.
    refused: bool = False
    #: The write concern it is sent with (MongoEngine's option).
    concern: Any = None

    def send(self, retrying: bool) -> Any:
        """Insert the document (:func:`values.send`: retried after a collision of a value it
        filled); ``retrying``: the insert of an earlier attempt had its reply lost, and may
        land. If nothing was written, the key made here is cleared and the values noted are
        released: as before ``save()``.

        Raises:
            values.EarlierInsertLanded: the duplicate key met is that earlier insert, landed.
        """
        try:
            return values.send(
                self.write,
                self.filled,
                self.attempt,
                stored=self.stored,
                on_unknown=self.unknown,
                earlier_landed=self.earlier_landed if retrying else None,
                may_land=retrying,
            )
        except values.EarlierInsertLanded:
            raise
        except BaseException:
            state = seam.state(self.document, create=False)
            if state is None or not state.unconfirmed:  # nothing written: as before save()
                if self.made_pk:
                    clear_made_pk(self.document)
                values.release(self.write, self.noted)
            raise

    def stored(self) -> bool:
        """After a failure no field claims: did the insert land? Only a model's own step may
        fail after its insert; MongoEngine's is the insert alone."""
        if not (self.may_write_more and self.insert):
            return False
        try:
            return landed.stored(self.document, self.write.collection)
        except values.OUTCOME_UNKNOWN:
            return True  # cannot tell: as if it were (its key and values are kept)

    def earlier_landed(self) -> bool:
        """A duplicate key while an earlier insert of the document (whose reply was lost) may
        land: is it that insert, landed late? A document no attempt sent under the key is
        refused as :func:`save_create`'s look-up refuses it (a fresh value is no answer for a
        key made for it alone)."""
        found = landed.earlier_insert(self.document, self.write.collection)
        if landed.refused(found, self.document, insert=self.insert, filled=self.filled):
            raise NotUniqueError(landed.held_by_other(self.document, self.write.collection))
        return found is landed.Found.SENT

    def attempt(self) -> Any:
        """One attempt. The first completes MongoEngine's serialisation; a retry after a
        collision serialises afresh (a model's own step may have changed the SON it got)."""
        document = self.document
        if self.sent is None:
            self.sent = with_values(document, self.shape, self.son, self.filled)
        else:
            self.sent = document.to_mongo()
        try:
            return self.write_next(self.sent, self.insert, self.concern)
        except BaseException as error:
            self.refused = not self.may_write_more and values.duplicate_key(error) is not None
            raise

    def unknown(self) -> None:
        """The outcome of the last attempt is unknown: recorded for the application's retry."""
        values.unconfirmed(
            self.document,
            sent=None if self.refused else landed.snapshot(self.sent, self.write.collection),
            made_pk=self.made_pk,
            filled=self.filled,
            noted=self.noted,
        )
        seam.state(self.document).sent_to_own_step = self.may_write_more


def _over_own_copy(
    document: Document,
    write: Write,
    filled: list[Slot],
    noted: list[tuple[Slot, Any]],
    earlier: Any,
    write_next: Callable[[Any, bool], Any],
) -> Any:
    """The earlier insert of ``document`` was applied: the stored document is this one, so it is
    replaced by the current version (the application may have changed it since). A value made
    again for it by this attempt (one the application cleared) that collides is retried with a
    fresh one, as in any write; the values its stored copy holds (the key, those ``earlier``
    made) are its own, never taken for colliding. On another failure the values are kept, not
    given back (the replace may land), as the document's own for its next save: those made
    again and those assigned since (``noted``: told to their fields, reserved for it). That
    save updates the stored copy, ``save(force_insert=True)`` too (:attr:`.State.over_own_copy`;
    probe CB-2: it inserted again, and was refused its own copy as a duplicate)."""
    key = seam.shape(type(document)).pk_name
    _, _, again = values.split_kept(filled, [earlier])
    again = [slot for slot in again if not (slot.holder is document and slot.name == key)]
    values.confirm([document], whole=True)
    try:
        return values.send(
            write, again, lambda: write_next(document.to_mongo(), False), may_land=True
        )
    except BaseException:
        # Stored, with these values or not (the replace may have landed): they stay its own,
        # so that its next save takes the stored ones where they differ, or keeps them.
        values.pending(document, again, noted)
        seam.state(document).over_own_copy = True
        raise


def _landed(
    document: Document,
    write: Write,
    made_pk: bool,
    filled: list[Slot],
    noted: list[tuple[Slot, Any]],
) -> landed.Found:
    """What is stored under the key of ``document``, whose earlier insert had its reply lost;
    if the look-up fails, the values of this attempt are kept with the earlier ones (that
    insert may still land)."""
    try:
        return landed.earlier_insert(document, write.collection)
    except BaseException:
        values.unconfirmed(document, sent=None, made_pk=made_pk, filled=filled, noted=noted)
        raise


def with_values(document: Document, shape: seam.Shape, son: Any, filled: list[Slot]) -> Any:
    """``son``, MongoEngine's serialisation of ``document`` made before its values were, with
    them: each value of its own fields (and a key made here) set in stored form, as its
    ``to_mongo()`` would. A key or value that ``son`` lacked comes after the others (the driver
    sends ``_id`` first all the same). A model that serialises itself, and values inside
    embedded documents, are serialised again instead."""
    if shape.serialises_itself:
        return document.to_mongo()
    for slot in filled:
        if slot.holder is not document:
            return document.to_mongo()
        son[slot.field.db_field] = slot.field.to_mongo(slot.value)
    if "_id" not in son:
        pk = seam.stored_pk(document)
        if pk is not None:
            son["_id"] = pk
    return son


def make_pk(document: Document, shape: seam.Shape) -> bool:
    """Give a new document whose key is left to the driver one now; True if made.

    The driver would put an ObjectId in its ``_id`` inside ``insert_one()`` and forget it if
    the reply is lost: known beforehand, the application's retry inserts the same ``_id`` and
    cannot store a copy. The key holds that ObjectId, as it would hold the driver's after the
    insert (whatever its field: MongoEngine sets it from the ``_id`` inserted).
    """
    data = seam.data(document)
    if not shape.pk_left_to_driver or data.get(shape.pk_name) is not None:
        return False
    data[shape.pk_name] = ObjectId()
    return True


def clear_made_pk(document: BaseDocument) -> None:
    """Forget the ObjectId :func:`make_pk` gave a document that was not written."""
    seam.data(document)[seam.shape(type(document)).pk_name] = None
    state = seam.state(document, create=False)
    if state is not None:
        state.made_pk = False


# -- existing documents -------------------------------------------------------------------------


def save_update(
    document: Document,
    son: Any,
    save_condition: Any,
    write_next: Callable[[Any, Any], Any],
    *,
    reads_values: bool = True,
    write_concern: Any = None,
) -> Any:
    """Values for an existing document, then its update (``write_next``, given ``son``:
    MongoEngine's serialisation of the document, made before its values were, with them if
    the step ``reads_values``; and MongoEngine's ``write_concern`` option, acknowledged if a
    value the update writes was made by it and may collide: probe CB-1, under ``w=0`` such a
    value was refused unseen and kept as stored, and the change written with it lost).

    New embedded documents get values, written by the update; a field the stored copy lacks
    gets one with a conditional write of its own, which never replaces a value another writer
    stored (nor writes if ``save_condition`` fails). Values the user assigned are told to their
    fields. Fields a projection left out are not touched. If the outcome of a write is unknown
    (a lost reply), the values are kept as the document's own for the application's retry;
    if nothing was written, they are given back. Not acknowledged (``w=0``), any failure
    leaves the outcome unknown (MongoEngine may fail reading the reply of an update it sent).
    """
    write = Write(type(document), seam.collection_of(document), [document])
    _tell_untold(write, document)
    plan = _Existing(write, document, _named_by(type(document), save_condition))
    concern = values.acknowledged_concern(write, [*plan.embedded, *plan.missing], write_concern)
    acknowledged = seam.acknowledged(write.collection, concern)
    try:
        for slot in plan.missing:
            if _fill_missing(write, document, slot, save_condition, plan.updating):
                plan.stored.append(slot)
        # The values MongoEngine's update writes (made here, or kept from an earlier attempt
        # whose outcome is unknown): a collision of one is retried with a fresh value, the
        # update computed again from the document. (Another document holds the value: the
        # earlier attempt did not store it here.) A failure gives back nothing here: failed()
        # knows which values are this attempt's.
        written = [s for s in (*plan.embedded, *plan.missing) if s not in plan.stored]
        shape = seam.shape(type(document))

        def attempt() -> Any:
            # ``son`` lacks the values made here (and, after a collision, holds the old one).
            held = [s for s in (*plan.embedded, *plan.missing) if s.value is not None]
            if not (reads_values and held):
                return write_next(son, concern)
            return write_next(with_values(document, shape, son, held), concern)

        result = values.send(
            write, [s for s in written if s.value is not None], attempt, may_land=True
        )
    except BaseException as error:
        unknown = not acknowledged or values.outcome_unknown(error)
        plan.failed(error, unknown=unknown)
        if unknown and save_condition is None:
            _untold(document, plan.made)
        raise
    if save_condition is None and (_created(result) or not acknowledged):  # w=0: no reply
        _untold(document, plan.made)
    values.confirm([document], unwritten=plan.unwritten)
    seam.written_whole(document)
    _tell_untold(write, document)
    # Stored by their own conditional write, not MongoEngine's update: changes all the same,
    # for what reads the changes after the write (post_save handlers, CachedReferenceField).
    for slot in plan.stored:
        seam.mark_changed(slot.holder, slot.name)
    return result


# -- the upsert of save() --------------------------------------------------------------------


def wrap_get_update_doc(owner: type[Document], own: Callable[[Document], Any] | None) -> Any:
    """``_get_update_doc`` for ``owner``: MongoEngine's update of a stored document (which
    ``_save_update`` sends as an upsert unless a ``save_condition`` is given), with the
    generated values the document holds but the update does not write set on insert
    (``$setOnInsert``). When the document is not stored (built with ``created=False``, as
    ``from_json()`` does, or deleted by another process since it was loaded), the document the
    upsert inserts holds them; a stored copy keeps its own. Nothing changed: no update."""

    def _get_update_doc(self: Document) -> Any:
        update = own(self) if own is not None else super(owner, self)._get_update_doc()
        held = held_on_insert(self, update) if update else {}
        if held:
            update["$setOnInsert"] = {**update.get("$setOnInsert", {}), **held}
        return update

    return _get_update_doc


def held_on_insert(document: Document, update: dict[str, Any]) -> dict[str, Any]:
    """The generated values ``document`` holds that ``update`` (an upsert, if the document is
    not stored) does not write, by db path, in stored form: those of its own fields but its
    key (which the upsert's filter holds), and those of the single embedded documents (at any
    depth) it creates through a path inside them (``$set`` of ``part.label``)."""
    written = [path for operator in ("$set", "$unset") for path in update.get(operator, ())]
    found: dict[str, Any] = {}
    for path, holder, name, field in _held_places(document):
        if any(_overlap(path, p) for p in written):
            continue  # written by the update (or a document it lies in, whole)
        place = path.rpartition(".")[0]
        if place and not any(p.startswith(f"{place}.") for p in update.get("$set", ())):
            continue  # an embedded document the update does not create
        found[path] = field.to_mongo(_held(document, path, field, seam.data(holder)[name]))
    return found


def _held(document: Document, path: str, field: Any, value: Any) -> Any:
    """``value``, held at ``path`` and about to be set on insert, validated even under
    ``save(validate=False)``: the package adds it to MongoEngine's update, and the document
    may be inserted with it (deleted since it was loaded); junk there (a number stored as
    ``3.0``, a ``Decimal128``) would be told to no field and made again (review P).

    Raises:
        ValidationError: the value quoted, and how to change such a document.
    """
    try:
        field.validate(value)
    except ValidationError as error:
        raise ValidationError(
            f"{type(document).__name__}: save() sets {path}={value!r} on insert (the document "
            f"may have been deleted since it was loaded), and its field refuses it, even with "
            f"validate=False ({error}); change such a document with an update "
            f"({type(document).__name__}.objects(pk=...).update_one(...)), or give "
            f"{path} a value its field accepts",
            field_name=path,
        ) from error
    return value


def _overlap(one: str, other: str) -> bool:
    """Whether two dotted paths name the same value or one lies inside the other."""
    return one == other or one.startswith(f"{other}.") or other.startswith(f"{one}.")


def _held_places(document: BaseDocument, prefix: str = "") -> Iterable[tuple[str, Any, str, Any]]:
    """(db path, holder, name, field) of each generated value ``document`` holds, but its key,
    and of those in its single embedded documents (``EmbeddedDocumentField``), at any depth."""
    shape = seam.shape(type(document))
    held = seam.data(document)
    for name, field in shape.generated:
        if held.get(name) is not None and not (not prefix and name == shape.pk_name):
            yield f"{prefix}{field.db_field}", document, name, field
    for name in tuple(held) if shape.embedding is None else shape.embedding:
        field = seam.field_of(type(document), name)
        inner = held.get(name)
        if isinstance(field, EmbeddedDocumentField) and isinstance(inner, BaseDocument):
            yield from _held_places(inner, f"{prefix}{field.db_field}.")


def _created(result: Any) -> bool:
    """Whether MongoEngine's ``_save_update`` says its upsert inserted the document (it returns
    the key and that; a model's own step may return something else: then it may have)."""
    if isinstance(result, tuple) and len(result) == 2 and isinstance(result[1], bool):
        return result[1]
    return True


def _untold(document: Document, made: list[Slot]) -> None:
    """MongoEngine's upsert may have inserted the document: record the values it held from
    elsewhere (not ``made`` by this ``save()``) that the upsert inserted, of fields that track
    the values given to them (a counter), for those fields to be told (:func:`_tell_untold`)
    now, or by the document's next write if telling fails: those it set on insert, and the
    generated key, which its filter holds."""
    shape = seam.shape(type(document))
    key_field = seam.pk_field(type(document))
    tell_key = shape.generates_pk and key_field.tracks_assigned
    places = [place for place in _held_places(document) if place[3].tracks_assigned]
    if not places and not tell_key:
        return
    on_insert = seam.update_doc(document).get("$setOnInsert", {})
    ours = {(id(slot.holder), slot.name) for slot in made}
    inserted = [
        (holder, name, field)
        for path, holder, name, field in places
        if path in on_insert and (id(holder), name) not in ours
    ]
    if tell_key:
        inserted.append((document, shape.pk_name, key_field))
    # The values as they are now (a scope too), for the stored document of this key, whichever
    # attempt tells them.
    key = f"{seam.collection_of(document).full_name}/{seam.stored_pk(document)!r}"
    untold = []
    for holder, name, field in inserted:
        snapshot = values.Holder(dict(seam.data(holder)), owner=key)
        untold.append(Slot(snapshot, snapshot, name, field, type(holder)))
    if untold:
        seam.state(document).untold = untold


def _tell_untold(write: Write, document: Document) -> None:
    """Tell their fields the values an earlier upsert of ``document`` may have inserted (see
    :func:`_untold`); kept to tell again if that fails."""
    state = seam.state(document, create=False)
    if state is None or not state.untold:
        return
    for slot in list(state.untold):
        try:
            values.note_assigned(write, [slot])
        except NotUniqueError:
            pass  # reserved already: never handed out again, which is what telling is for
        except ValidationError:
            # The field takes no such value (allow_explicit=False: ExplicitValueError; a
            # value_decorator's number of another type), stored all the same, as the document
            # was built as stored: a unique index refuses the counter's copy of it.
            _logger.warning(
                "%s: %r was stored by an upsert and not told", slot.field._label, slot.value
            )
        state.untold.remove(slot)


def _named_by(document_class: type[Document], save_condition: Any) -> frozenset[str]:
    """The top-level db fields ``save_condition`` reads (``"$"``: any, through an operator)."""
    found = seam.condition_filter(document_class, save_condition)
    return frozenset("$" if key.startswith("$") else key.partition(".")[0] for key in found)


class _Existing:
    """The generated values of one ``save()`` of an existing document."""

    def __init__(self, write: Write, document: Document, conditioned: frozenset[str]) -> None:
        self.write = write
        self.document = document
        state = seam.state(document, create=False)
        unloaded = state.unloaded if state is not None else frozenset()
        changed = seam.changed(document)
        #: Whether MongoEngine's update writes anything: the fields the user changed, or all
        #: it holds (a document never loaded nor stored, whose key was assigned).
        self.updating = bool(changed) or seam.writes_whole(document)
        # Values of an earlier attempt whose outcome is unknown (it may have landed): still the
        # document's own, never given back here.
        kept, self.kept_noted, others = values.split_kept(values.slots(document), [state])
        # The document's own kept values: of fields the stored copy lacks (a conditional
        # write each), or of fields the user cleared (written by the update, as made anew).
        cleared = [s for s in kept if s.holder is document and s.field.db_field in changed]
        #: Fields the stored copy lacks (a conditional write each), filled or kept.
        self.missing = [s for s in kept if s.holder is document and s not in cleared]
        #: The values kept of embedded documents and of cleared fields.
        self.kept = [s for s in kept if s.holder is not document or s in cleared]
        #: New embedded documents the update leaves unwritten (by id): new still after it.
        self.unwritten = _new_and_unwritten(document, changed)
        assigned, empty, missing = _sort(document, others, changed, unloaded, self.unwritten)
        # A field the stored copy lacks that the save's condition reads is not filled by this
        # save: its write, made first, would change what the condition then reads (the next
        # save without one fills it, as backfill() does).
        self.missing += [
            slot
            for slot in missing
            if "$" not in conditioned and slot.field.db_field not in conditioned
        ]
        assigned = _new_values(write, document, assigned)
        #: Values assigned, told to their fields; values made by this attempt.
        self.noted, self.made = values.note_and_fill(
            write, assigned, [*empty, *(slot for slot in self.missing if slot.value is None)]
        )
        #: Values written by the update: of new embedded documents, and of fields cleared.
        self.embedded = [*self.kept, *(slot for slot in self.made if slot not in self.missing)]
        _mark_written_by_update(document, self.embedded, changed)
        #: Missing fields whose conditional write is done.
        self.stored: list[Slot] = []

    def failed(self, error: BaseException, *, unknown: bool) -> None:
        """Keep the values not known to be stored if the outcome is ``unknown``; else give back
        those this attempt made (a missing field whose write was refused gave its own back).
        Values kept from an earlier attempt stay the document's: that attempt may have landed."""
        pending = [s for s in (*self.embedded, *self.missing) if s not in self.stored]
        noted = [*self.kept_noted, *self.noted]
        if unknown:
            values.pending(self.document, pending, noted)
            return
        mine = [slot for slot in self.made if slot in pending and slot.value is not None]
        values.give_back(self.write, mine)
        values.release(self.write, self.noted)
        kept = [slot for slot in pending if slot not in mine]
        if kept or self.kept_noted:
            values.pending(self.document, kept, self.kept_noted)


def _sort(
    document: Document,
    others: list[Slot],
    changed: list[str],
    unloaded: Iterable[str],
    unwritten: set[int],
) -> tuple[list[Slot], list[Slot], list[Slot]]:
    """Sort the slots of an existing ``document`` (those no earlier attempt kept) by what its
    save does with each: a value to tell its field (assigned by the user), an empty one of a
    new embedded document to fill, or one of its own fields its stored copy lacks (filled by a
    conditional write). Slots of a loaded embedded document holding nothing of note are left,
    and so are those of the new ones the update leaves ``unwritten`` (by id).

    Raises:
        OperationError: a value a projection left out is needed (:func:`_refuse_unloaded`).
    """
    _refuse_in_sliced(document, changed)
    assigned: list[Slot] = []
    empty: list[Slot] = []
    missing: list[Slot] = []
    rewritten = _Rewritten(document, changed)
    left_out = _left_out(document)
    for slot in _of_subclasses(document, left_out):
        _refuse_unloaded(document, slot, changed, rewritten)
    _refuse_left_out_inside(document, left_out, rewritten)
    whole = seam.writes_whole(document)
    for slot in others:
        own_field = slot.holder is document
        if id(slot.holder) in unwritten and not (
            slot.value is not None and slot.field.db_field in seam.changed_here(slot.holder)
        ):
            _refuse_scope_moved_in_default(slot)
            continue  # not written: none made (a value assigned inside is written: told)
        value = slot.value
        _refuse_unloaded(document, slot, changed, rewritten)
        if not own_field and not seam.is_new(slot.holder):
            # A loaded embedded document: its fields may not have been loaded. A value the
            # user assigned to it is noted, and so is one of a field that tracks its values
            # that the update writes again (the embedded document may come from another
            # document): unless the stored copy holds it (see _new_values).
            here = seam.changed_here(slot.holder)
            if value is None:
                if slot.field.db_field in here:  # cleared by the user: a new value, as above
                    empty.append(slot)
            elif (
                slot.field.db_field in here
                or _reads_changed(slot, seam.changed(slot.holder))  # (place.city: in place)
                or (slot.field.tracks_assigned and rewritten.holds(slot.holder))
            ):
                assigned.append(slot)
        elif value is None:
            if not own_field or slot.field.db_field in changed or _reads_changed(slot, changed):
                # A new embedded document's, one the user cleared, or one whose scope moved
                # (the stored number is the old scope's): a new value, which the update writes
                # (as MongoEngine's SequenceField makes a new one).
                empty.append(slot)
            elif slot.name not in unloaded:
                missing.append(slot)
        elif (
            not own_field
            or whole
            or slot.field.db_field in changed
            or _reads_changed(slot, changed)
        ):
            # By the user (a loaded value is not marked changed; a document MongoEngine
            # writes whole writes them all: _new_values tells its own from new ones), or
            # moved to another scope, where it is the user's number as if assigned there.
            assigned.append(slot)
    for slot in (*assigned, *empty):
        _refuse_unloaded_scope(slot)
        _refuse_scope_written_in_part(slot, unwritten)
    return assigned, empty, missing


def _refuse_scope_moved_in_default(slot: Slot) -> None:
    """Refuse a save that changes the scope of a number in an embedded document a field's
    default made on the load for a value a projection left out: a number may be stored there,
    which MongoEngine's write of the change would move to another numbering, its counter not
    told (probe BQ-1: it was handed out again there). Made for a value not stored (a field
    added since), it holds no number (review 4: that was refused too).

    Raises:
        OperationError: so; nothing is written.
    """
    if seam.made_for_left_out(slot.holder) and _reads_changed(slot, seam.changed(slot.holder)):
        kind = slot.kind.__name__
        names = ", ".join(repr(name) for name in slot.field.depends_on)
        raise OperationError(
            f"{kind}.{slot.name} is numbered per {names}, changed in a {kind} its field's "
            "default made when the document was loaded without that value (only(), "
            "exclude()): the number stored there would move to another numbering, its "
            f"counter not told; reload() the document, or assign the {kind} whole (a new "
            f"{kind}(...)), before this change"
        )


def _refuse_scope_written_in_part(slot: Slot, unwritten: set[int]) -> None:
    """Refuse a save that makes or tells a number whose scope is read in an embedded document
    a field's default made on the load (the scope holds one, or the number is in one: see
    :func:`_new_and_unwritten`), where the scope stored would not be the one the number is
    told under: MongoEngine writes only the changes made inside it, so what the default holds
    besides them (a value its own default gives; what a projection left out is stored) is not
    written (review 3 of session 35: the counter of a scope never stored was told, and the
    scope's own counter handed the number out again).

    Raises:
        OperationError: so; nothing is written.
    """
    if not slot.field.depends_on or not unwritten:
        return
    # The scope is read in the holder, or inside the values it reads.
    in_holder = id(slot.holder) in unwritten
    # In the holder: its scope is written only where changed (review 3: left empty, the
    # scope of a number given there was None).
    scope_unset = in_holder and not all(
        seam.read_field(slot.kind, slot.field, name).db_field in seam.changed_here(slot.holder)
        for name in slot.field.depends_on
    )
    for inner in [slot.holder] if in_holder else values.read_inside(slot):
        if id(inner) in unwritten and (scope_unset or not _written_as_held(inner)):
            names = ", ".join(repr(name) for name in slot.field.depends_on)
            kind = type(inner).__name__
            whole = (
                f"the {slot.kind.__name__} it is in"
                if in_holder
                else " and ".join(repr(name) for name in slot.field.depends_on)
            )
            raise OperationError(
                f"{slot.kind.__name__}.{slot.name} is numbered per {names}, read in a {kind} "
                "its field's default made when the document was loaded: this save writes only "
                "the changes made in it, and the number would be told to the counter of a "
                f"scope not stored; reload() the document and assign {whole} whole instead "
                "(a value equal to what it holds now is no change)"
            )


def _written_as_held(inner: BaseDocument) -> bool:
    """Whether the update's writes of the changes in the new embedded document ``inner`` (one
    an update leaves unwritten: MongoEngine writes each path changed in it) store all it
    holds, and no value a projection left out is stored there (review 4 of session 35: an
    empty default, unchanged, is not written, where a scope holds it; its ``_cls`` is not
    written either)."""
    if seam.made_for_left_out(inner):
        return False
    held = inner.to_mongo().to_dict()
    written: dict[str, Any] = {}
    for path in seam.changed(inner):  # what MongoEngine writes: each path changed, as held
        value: Any = held
        for step in path.split("."):
            if not isinstance(value, dict) or step not in value:
                return False  # unset, or in a list: not compared
            value = value[step]
        *above, last = path.split(".")
        place = written
        for step in above:
            place = place.setdefault(step, {})
        place[last] = value
    # (Review 5: a change by a path inside a value, extra.k, was taken for none of it.)
    return bool(written) and written == held


def _new_and_unwritten(document: Document, changed: list[str]) -> set[int]:
    """The new embedded documents (by id) of an existing ``document`` that its update does not
    write whole: no change is at their path or above it, at any of their places. MongoEngine
    made them from a field's ``default`` for a value the document was loaded without (left out
    by a projection, or not stored): it writes nothing of them but the changes made inside, at
    their paths, and the package fills none of their values (review of session 35: such a
    default was filled and written whole, over the stored value, or as ``{"0": ...}`` where
    the list was not stored; review 2: over what another writer stored there since the load)."""
    if seam.writes_whole(document):
        return set()
    written: set[int] = set()
    unwritten: set[int] = set()
    for path, _, inner in seam.embedded_places(document):
        if seam.is_new(inner):
            covered = any(path == done or path.startswith(f"{done}.") for done in changed)
            (written if covered else unwritten).add(id(inner))
    # One placed at a place written too is written (probe BO-2: a default moved into a list
    # of its document was skipped there, its values neither made nor told: one held twice).
    return unwritten - written


def _refuse_in_sliced(document: Document, changed: list[str]) -> None:
    """Refuse a save that writes a list holding generated values that a projection loaded in
    part (``fields(slice__lines=...)``, ``elemMatch__lines=``) whole (the stored items not
    loaded would go, their values with them), or, its items being out of their stored places
    (an ``$elemMatch``, a ``$slice`` that skips or counts from the end), writes into an item:
    MongoEngine addresses it by its place in the list loaded, which is another stored item's
    (probe BJ-2: a value made for a cleared field replaced another item's).

    Raises:
        OperationError: so; nothing is written.
    """
    for path, out_of_place in sorted(seam.sliced(document)):
        for change in changed:
            found = _against(type(document), change, path)
            if found == "whole" or (out_of_place and found == "inside"):
                how = (
                    "this save writes the list whole, which would drop the stored items not "
                    "loaded, their generated values with them"
                    if found == "whole"
                    else f"its items are not at their stored places: this save writes "
                    f"{change!r}, which is another stored item's"
                )
                raise OperationError(
                    f"{type(document).__name__}: {path!r} was loaded in part (a $slice, "
                    f"$elemMatch or positional projection), and {how}; load it whole (reload()) "
                    "before this change"
                )


def _against(kind: type[Document], change: str, path: str) -> str | None:
    """Where the dotted ``change`` lies against the ``path`` of a list loaded in part: "whole"
    (the list itself, or above it), "inside" (an item, or in one), or None (elsewhere). The
    list may be inside a list: the indexes of ``change`` (``boxes.0.lines``) are skipped; a
    step of digits after a map is a key, matched as any other step (review of session 35:
    ``m.7.lines`` was taken for another list, and an append dropped its stored items; ``m.8``
    was taken for a write of it)."""
    want = path.split(".")
    reached = 0  # the steps of ``path`` matched so far
    for step in change.split("."):
        if reached == len(want):
            return "inside"  # deeper than the list: an item (lines.0), or in one
        if step == want[reached]:
            reached += 1
        elif not (step.isdigit() and seam.is_list_at(kind, ".".join(want[:reached]))):
            return None
    return "whole"  # the list, or above it (boxes.0 holds boxes.0.lines)


def _refuse_unloaded_scope(slot: Slot) -> None:
    """Refuse a save that makes or tells a number in a scope a projection did not load whole
    (``exclude("tenant")``, ``only("place.city")``): its counter is named by the scope, which
    the document does not hold (review D: a part of ``place`` named another counter, and one
    number was stored twice). A scope set whole since is the user's.

    Raises:
        OperationError: so; nothing is written.
    """
    for name in slot.field.depends_on:
        if not seam.loaded_whole(slot.holder, name, slot.kind):
            raise OperationError(
                f"{slot.kind.__name__}.{name} was not loaded whole (only(), exclude()), and "
                f"{slot.kind.__name__}.{slot.name}, numbered per it, gets a number on this save "
                "from the counter it names; load it (reload()) before this change"
            )


def _left_out(document: Document) -> list[tuple[str, BaseDocument, seam.State]]:
    """The embedded documents of ``document`` a projection left fields out of (see
    :func:`.seam.note_loaded`), with their paths and records."""
    found = []
    for path, _, inner in seam.embedded_places(document):
        record = seam.state(inner, create=False)
        if record is not None and record.unloaded:
            found.append((path, inner, record))
    return found


def _of_subclasses(
    document: Document, left_out: list[tuple[str, BaseDocument, seam.State]]
) -> list[Slot]:
    """Slots of the generated fields a subclass of an embedded document's class declares, which
    a projection left out of it (loaded without its ``_cls``, it is of its field's declared
    class, but may be stored as such a subclass: see :func:`.seam.note_loaded`). They hold no
    value here; the save must not clear or move the stored one (:func:`_refuse_unloaded`)."""
    found: list[Slot] = []
    for _, inner, record in left_out:
        declared = seam.fields(type(inner))
        for kind in seam.with_subclasses(type(inner))[1:]:
            for name, field in seam.generated_fields(kind):
                if name in record.unloaded and name not in declared:
                    found.append(Slot(document, inner, name, field, kind))
    return found


def _refuse_unloaded(
    document: Document, slot: Slot, changed: list[str], rewritten: _Rewritten
) -> None:
    """Refuse a save that needs a generated value a projection (``only()``, ``exclude()``)
    left out of ``document`` or of an embedded document loaded in it: its scope changed (the
    number kept would belong to a counter not told of it), or MongoEngine writes its embedded
    document whole (the stored value would be cleared).

    Raises:
        OperationError: so; nothing is written.
    """
    holder = slot.holder
    found = seam.state(holder, create=False)
    if slot.value is not None or found is None or slot.name not in found.unloaded:
        return
    own = holder is document
    moved = _reads_changed(slot, changed if own else seam.changed(holder))
    if not moved and (own or not rewritten.holds(holder)):
        return
    where = f"{slot.kind.__name__}.{slot.name}" + (
        "" if own else f" in a {type(document).__name__}"
    )
    if slot.kind is not type(holder):
        where += (
            f" (loaded without its _cls as {type(holder).__name__}, it may be stored as "
            f"{slot.kind.__name__})"
        )
    why = (
        "the field it is numbered by changed: its number would then belong to another "
        "numbering, whose counter was not told of it"
        if moved
        # The embedded document may have been read in another document (session 34's BJ-5).
        else f"MongoEngine writes the {type(holder).__name__} whole on this save, without "
        "that value: it would be cleared or lost"
    )
    raise OperationError(
        f"{where} was not loaded (only(), exclude()) where it was read, and {why}; load it "
        "(reload() the document it was read from) before this change"
    )


def _refuse_left_out_inside(
    document: Document,
    left_out: list[tuple[str, BaseDocument, seam.State]],
    rewritten: _Rewritten,
) -> None:
    """Refuse a save that makes MongoEngine write whole an embedded document a projection
    loaded without a field that may hold generated values (``only("parts.label")`` leaves
    ``parts.boxes`` out, and an append writes ``parts`` whole): the values stored in it would
    be cleared. A field the user set since is theirs to replace: it counts as loaded from now
    on, as a generated field assigned does.

    Raises:
        OperationError: so; nothing is written.
    """
    for path, inner, record in left_out:
        here = set(seam.changed_here(inner))
        for name in sorted(record.unloaded):
            field = seam.field_in_family(type(inner), name)
            if field is None or seam.is_generated(field):
                continue  # a generated field: its slot is refused (_refuse_unloaded)
            if field.db_field in here:
                record.unloaded = record.unloaded - {name}
            elif rewritten.holds(inner):
                cleared = (
                    "the generated values stored in it"
                    if seam.embeds_generated(field)
                    else "it (a counter's scope: the numbers would move to none)"
                )
                raise OperationError(
                    f"{type(inner).__name__}.{name} at {path}.{field.db_field} in a "
                    f"{type(document).__name__} was not loaded (only(), exclude()), and "
                    f"MongoEngine writes its embedded document whole on this save, which would "
                    f"clear {cleared}; load it (reload()) before this change"
                )


def _reads_changed(slot: Slot, changed: Iterable[str]) -> bool:
    """Whether a field the slot's field reads (a scope), or a path inside it (an embedded
    document's field: ``place.city``), is among ``changed`` (db paths of the slot's holder):
    its value, kept, now belongs to another scope."""
    names = slot.field.depends_on
    if not names:
        return False
    scopes = [seam.read_field(slot.kind, slot.field, name).db_field for name in names]
    return any(path.partition(".")[0] in scopes for path in changed)


class _Rewritten:
    """The embedded documents of ``document`` that MongoEngine's update writes again: those
    under a path it saw change (all of them, for a document it writes whole). Found on the
    first question."""

    def __init__(self, document: Document, changed: list[str]) -> None:
        self.document = document
        self.changed = changed
        self.found: set[int] | None = None

    def holds(self, embedded: BaseDocument) -> bool:
        if self.found is None:
            whole = seam.writes_whole(self.document)
            self.found = {
                id(inner)
                for path, _, inner in seam.embedded_places(self.document)
                if whole or any(path == c or path.startswith(f"{c}.") for c in self.changed)
            }
        return id(embedded) in self.found


def _new_values(
    write: Write, document: Document, assigned: list[Slot], stored: dict[str, Any] | None = None
) -> list[Slot]:
    """The slots of ``assigned`` whose value is new to ``document``: not one its stored copy
    already holds in that field (set back after a change, kept in a replaced, rebuilt or
    reordered embedded document; a scoped counter's number in the same scope), unless the
    document now holds it twice. Only the fields that track assigned values are looked up, in
    one read of the stored copy (``stored``: the filter it is found by; default, its key)."""
    tracked = [slot for slot in assigned if slot.field.tracks_assigned]
    if not tracked:
        return assigned
    twice = values.repeated(slot for slot in values.slots(document) if slot.value is not None)
    looked_up = [slot for slot in tracked if values.identity_key(slot) not in twice]
    held = _held_by_stored_copy(write, document, looked_up, stored)
    return [slot for slot in assigned if id(slot) not in held]


def _held_by_stored_copy(
    write: Write, document: Document, slots: list[Slot], select: dict[str, Any] | None = None
) -> set[int]:
    """The slots (by id) whose value the stored copy of ``document`` holds where their holder
    could sit: the document itself, or, for an embedded document, any place of the document
    that holds its kind (:func:`.seam.places_of`: moved from one field to another, or within
    one; probe BJ-1: a move between two fields was refused), and the place it is at (nowhere
    if it is not in ``document``). One read."""
    ways = {id(inner): way for _, way, inner in seam.embedded_places(document)}
    placed: list[tuple[tuple[str, ...], Slot]] = []
    for slot in slots:
        if slot.holder is document:
            placed.append(((), slot))
        elif (way := ways.get(id(slot.holder))) is not None:
            places = seam.places_of(type(document), type(slot.holder))
            placed += [(steps, slot) for steps in (way, *(p for p in places if p != way))]
    tops = {steps[0] for steps, _ in placed if steps}  # (what read_for() gives for those)
    tops.update(*(values.read_for(slot, ()) for steps, slot in placed if not steps))
    if not tops:
        return set()
    select = {"_id": seam.stored_pk(document)} if select is None else select
    stored = write.collection.find_one(select, dict.fromkeys(tops, 1))
    return values.held(stored or {}, placed)


def _mark_written_by_update(document: Document, filled: list[Slot], changed: list[str]) -> None:
    """Make the update write the values of ``filled``: a field of the document's own is marked
    changed; for embedded documents, MongoEngine writes the paths it saw change, which hold a
    new embedded document as a whole (an assignment, an append: only those are filled, see
    :func:`_new_and_unwritten`); a value filled in a loaded one is marked at its own path,
    never a wider one (the update would replace what another writer stored beside it)."""
    for slot in filled:
        if slot.holder is document and slot.field.db_field not in changed:
            seam.mark_changed(document, slot.name)  # a value of its own made anew
            changed.append(slot.field.db_field)
    by_holder: dict[int, list[Slot]] = {}
    for slot in filled:
        if slot.holder is not document:
            by_holder.setdefault(id(slot.holder), []).append(slot)
    for path, _, embedded in seam.embedded_places(document):
        slots = by_holder.get(id(embedded), [])
        if not slots or seam.is_new(embedded):
            continue  # a new one is written whole by the change that placed it (_sort)
        # Of a loaded one, the fields filled (written whole, it would lose what a projection
        # left out of it: review E).
        for target in (f"{path}.{slot.field.db_field}" for slot in slots):
            if not any(target == done or target.startswith(f"{done}.") for done in changed):
                seam.mark_changed(document, target)
                changed.append(target)


def _scope_as_stored(
    write: Write, pk: Any, document: Document, slot: Slot
) -> dict[str, Any] | None:
    """The fields ``slot``'s value is made from (its scope), by db field, as the stored copy of
    ``document`` holds them, if that is the scope ``document`` holds (read as its fields read
    it: the stored form may be another, a field added to an embedded scope since); None if it
    moved to another since the load. (One read, for a scoped field only. Review 5: compared
    in the form the fields write, a scope stored in another form never matched, and the value
    was silently not filled.)"""
    sources = [seam.read_field(type(document), slot.field, name) for name in slot.field.depends_on]
    if not sources:
        return {}
    stored = write.collection.find_one({"_id": pk}, {source.db_field: 1 for source in sources})
    if stored is None:
        return {}  # no such document: the fill finds none (see _fill_missing)
    found = {}
    for name, source in zip(slot.field.depends_on, sources, strict=True):
        raw = stored.get(source.db_field)
        held = seam.data(document).get(name)
        as_read = (
            None if raw is None else seam.scope_form(source, source.to_mongo(source.to_python(raw)))
        )
        if as_read != (None if held is None else seam.scope_form(source, source.to_mongo(held))):
            return None
        found[source.db_field] = raw
    return found


def _fill_missing(
    write: Write, document: Document, slot: Slot, save_condition: Any, updating: bool
) -> bool:
    """Store ``slot``'s value in ``document``, whose stored copy lacks one, unless another
    writer stored one (then the document takes it) or ``save_condition`` fails.

    Returns whether that is settled; False if no document has this key (one built with
    ``created=False``, ``from_json()``'s default) and MongoEngine's update inserts it (an upsert
    of the changed fields, ``updating``): the value is made part of that update. (With nothing
    changed, MongoEngine writes nothing, and neither does this.)
    """
    pk = seam.stored_pk(document)
    condition = seam.condition_filter(type(document), save_condition)
    scope = _scope_as_stored(write, pk, document, slot)
    if scope is None:  # moved to another scope meanwhile: not filled here (probe BS-1)
        values.give_back(write, [slot])
        return True
    if fill_if_missing(write, pk, slot, condition, scope=scope):
        return True
    db_field = slot.field.db_field
    found = write.collection.find_one({"_id": pk}, {db_field: 1})
    if found is None and save_condition is None and updating:
        seam.mark_changed(document, slot.name)
        return False
    stored = (found or {}).get(db_field)
    if stored is not None and stored == slot.field.to_mongo(slot.value):
        return True  # an earlier attempt stored it (its reply was lost)
    values.give_back(write, [slot])
    if stored is not None:
        slot.value = slot.field.to_python(stored)  # another writer's: the document takes it
    return True
