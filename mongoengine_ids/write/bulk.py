"""``Model.objects.insert([...])``: one ``new_values()`` call per field for the whole batch.

MongoEngine's behaviour otherwise: the same checks, signals, ``load_bulk`` and one ordered
``insert_many`` (documents before a failure stay written). What this adds:

* every document's ``_id`` is known before the insert is sent, and kept (with the generated
  values) when the outcome is unknown: the reply was lost, the write concern failed, or pymongo
  raised another error than a ``BulkWriteError`` (which counts the documents inserted; a large
  insert is sent as several commands, and another error may follow some of them) and one of
  the keys sent is found in the collection. The
  application's retry looks them up and sends only those that were not stored
  (:mod:`.landed`), so no document is stored twice. A document found stored counts as written
  when the insert() call returns; one written by a call that then failed (at a later
  document, or reloading them) is taken as stored by the retry of that call;
* a document whose generated value collided (a field that retries) gets a fresh value and the
  insert resumes from it.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from typing import Any

import pymongo.errors
from mongoengine import signals
from mongoengine.base import BaseDocument
from mongoengine.errors import BulkWriteError, NotUniqueError, OperationError, ValidationError

from ..errors import BulkNotUniqueError, BulkRetriesExhaustedError, RetriesExhaustedError
from . import landed, seam, values
from .field import Write
from .save import clear_made_pk, make_pk

_DUPLICATE_KEY_CODES = (11000, 11001)


@contextlib.contextmanager
def _as_insert_error() -> Iterator[None]:
    """What MongoEngine's ``insert()`` raises. For a duplicate key it is a ``BulkWriteError``:
    a field's retries running out in a bulk insert stay one (``BulkRetriesExhaustedError``).
    For a failed database call, MongoEngine's error: one of the package's own (a counter's
    lease, a look-up) raised pymongo's, where ``save()`` raised ``OperationError`` (probe CB)."""
    try:
        yield
    except RetriesExhaustedError as error:
        if isinstance(error, BulkNotUniqueError):
            raise
        raise BulkRetriesExhaustedError(*error.args) from error
    except pymongo.errors.OperationFailure as error:
        raise _operation_error(error) from error


def insert(
    queryset: Any,
    doc_or_docs: Any,
    load_bulk: bool = True,
    write_concern: dict[str, Any] | None = None,
    signal_kwargs: dict[str, Any] | None = None,
) -> Any:
    """MongoEngine's ``QuerySet.insert()``, generating the values of the whole batch at once."""
    query = seam.parts(queryset)
    document_class = query.document_class
    return_one = isinstance(doc_or_docs, BaseDocument)
    if return_one:
        docs = [doc_or_docs]
    elif isinstance(doc_or_docs, list):
        # The caller's list itself, as MongoEngine's: what a pre_bulk_insert handler adds or
        # removes is added or removed there too.
        docs = doc_or_docs
    else:
        docs = list(doc_or_docs)
    for doc in docs:
        if not isinstance(doc, document_class):
            raise OperationError(f"Some documents inserted aren't instances of {document_class}")
        if doc.pk is not None and not seam.is_new(doc) and not _stored_by_failed_insert(doc):
            raise OperationError("Some documents have ObjectIds, use doc.update() instead")
    signal_kwargs = signal_kwargs or {}
    signals.pre_bulk_insert.send(document_class, documents=docs, **signal_kwargs)
    if not docs:  # as the driver's insert_many(), which MongoEngine's insert() calls
        raise TypeError("documents must be a non-empty list")
    _refuse_repeated(docs)  # after the handlers, which may add documents
    _refuse_unkeyed_references(docs)

    batch: Batch | None = None
    try:
        with _as_insert_error():
            batch = Batch(Write(document_class, query.collection, docs), docs)
            ids = batch.insert(write_concern or {})
        results = _reload(queryset, ids) if load_bulk else []  # as MongoEngine's: raw errors
    except BaseException:
        # The documents it wrote are stored: the application's retry of this call (it
        # failed) counts them so, instead of refusing them as saved documents.
        if batch is not None:
            for doc in batch.written:
                written, local = batch.written_as.get(id(doc), (None, None))
                values.stored_by_failed_insert(
                    doc,
                    query.collection,
                    written=landed.snapshot(written, query.collection),
                    local=landed.snapshot(local, query.collection),
                )
        raise
    values.confirm(batch.landed, whole=True)
    if not load_bulk:
        signals.post_bulk_insert.send(document_class, documents=docs, loaded=False, **signal_kwargs)
        return ids[0] if return_one else ids
    signals.post_bulk_insert.send(document_class, documents=results, loaded=True, **signal_kwargs)
    return results[0] if return_one else results


class Batch:
    """The documents of one bulk insert and the values generated for them."""

    def __init__(self, write: Write, docs: list[Any]) -> None:
        self.write = write
        self.docs = docs
        #: Positions still to insert, in order; a document sent before whose reply was lost
        #: and that is found stored is not sent again.
        self.pending: list[int] = []
        #: Documents an earlier attempt stored (found by a look-up, or known): counted written
        #: when this insert() returns, else again by the next attempt.
        self.landed: list[Any] = []
        #: Each document stored so far (by id): what is stored, if known (as an earlier call
        #: wrote it, or as a look-up found it; as this call sent the others), and what the
        #: object held then, if known (see ``landed.still_stored``).
        self.written_as: dict[int, tuple[Any, Any]] = {}
        states, not_landed = self._sort()
        docs_left = [docs[position] for position in self.pending]
        self.noted, self.filled = values.prepare(write, docs_left, states)
        #: The documents not yet written whose key (left to the driver) is made here, now or
        #: by an earlier attempt.
        shapes = {kind: seam.shape(kind) for kind in set(map(type, docs))}
        self.made_pk = {
            id(doc)
            for doc, earlier in zip(docs_left, states, strict=True)
            if make_pk(doc, shapes[type(doc)]) or getattr(earlier, "made_pk", False)
        }
        for doc in not_landed:
            # Not before: if making the values failed, an earlier insert may still land, and
            # the next attempt must look for it again.
            seam.state(doc).unconfirmed = False
        #: The documents whose earlier insert's reply was lost and which were not found: that
        #: insert may still land, so a duplicate key may be it, and their values are kept.
        self.retrying = {id(doc) for doc in not_landed}
        self.attempts: dict[int, int] = {}
        #: Each pending document as last sent, by position (kept if the outcome is unknown).
        self.sent: dict[int, Any] = {}
        #: The last send failed with its outcome unknown (see the module's docstring).
        self.unknown = False
        #: The documents stored so far: found, then written.
        self.written: list[Any] = list(self.landed)
        #: The classes whose unset key the driver makes, not this package (see ``make_pk``).
        self.keyed_by_driver = {
            kind
            for kind, shape in shapes.items()
            if not shape.pk_left_to_driver and not shape.generates_pk
        }

    def _sort(self) -> tuple[list[seam.State | None], list[Any]]:
        """Sort the documents by what earlier attempts of them did: those stored are counted
        landed (:attr:`landed`, :attr:`written_as`), the others are pending (:attr:`pending`).
        Returns the records of the pending ones, in order, and those of them whose earlier
        insert had its reply lost and was not found (it may still land)."""
        states: list[seam.State | None] = []
        not_landed: list[Any] = []
        for position, doc in enumerate(self.docs):
            earlier = seam.state(doc, create=False)
            if earlier is not None:
                if earlier.stored_by_failed_insert:
                    # Written by that call: stored unless deleted since, or this insert writes
                    # to another collection (refused if another version is stored there).
                    if landed.still_stored(doc, self.write.collection):
                        self.landed.append(doc)
                        record = earlier.stored_by_failed_insert
                        self.written_as[id(doc)] = (record.written, record.local)
                        continue
                    # Sent again, new.
                    values.new_again(doc, self.write.collection)
                if earlier.unconfirmed:
                    found, stored = landed.earlier_insert_stored(doc, self.write.collection)
                    if found is landed.Found.SENT:
                        self.landed.append(doc)
                        self.written_as[id(doc)] = self._taken_as_stored(doc, stored)
                        continue
                    not_landed.append(doc)
            self.pending.append(position)
            states.append(earlier)
        return states, not_landed

    def insert(self, write_concern: dict[str, Any]) -> list[Any]:
        """Insert every pending document, resuming after each collision given a fresh value."""
        try:
            while self.pending:
                self._send(write_concern)
        except BaseException as error:
            self._after_failure(error)
            raise
        return seam.keys(self.docs)

    def _send(self, write_concern: dict[str, Any]) -> None:
        raw = [self.docs[position].to_mongo() for position in self.pending]
        self.sent = dict(zip(self.pending, raw, strict=True))
        concern = values.acknowledged_concern(self.write, self.filled, write_concern)
        with seam.set_write_concern(self.write.collection, concern) as collection:
            try:
                collection.insert_many(raw, ordered=True)
            except pymongo.errors.BulkWriteError as error:
                self._refused(error)
                return
            except Exception as error:
                # A large insert goes as several commands: another error than a BulkWriteError
                # (which counts what was inserted) may follow some of them.
                self.unknown = self._any_stored()
                if isinstance(error, pymongo.errors.OperationFailure):
                    raise _operation_error(error) from error
                raise
        self._written(len(self.pending))

    def _any_stored(self) -> bool:
        """Whether the key of a document just sent is in the collection (one look-up): then
        which were stored is not known; True if the look-up fails too."""
        keys = [self.sent[position].get("_id") for position in self.pending]
        try:
            found = self.write.collection.find_one({"_id": {"$in": keys}}, {"_id": 1})
        except Exception:
            return True
        return found is not None

    def _refused(self, error: pymongo.errors.BulkWriteError) -> None:
        """The server refused a document (and the rest were not sent), or the write concern
        failed: the documents before it are written, or their outcome is unknown; a refused
        document whose field claims the duplicate key gets a fresh value."""
        details = error.details
        inserted = int(details.get("nInserted", 0))
        if details.get("writeConcernErrors"):
            # Applied on the primary, not known to be replicated (a failover may roll them back).
            # A document refused (a write error), and those after it, never sent, are no
            # version that may land (the review of session 39: the refused one was taken for
            # its own insert landed, a document another writer stored with the same data).
            self.unknown = True
            if details.get("writeErrors"):
                for position in self.pending[inserted:]:
                    self.sent.pop(position, None)
            raise BulkWriteError(f"Bulk write error: ({details})") from error
        self._written(inserted)
        self.sent = {}  # ordered: the first one left was refused, the others never sent
        first = (details.get("writeErrors") or [{}])[0]
        if first.get("code") not in _DUPLICATE_KEY_CODES:
            raise BulkWriteError(f"Bulk write error: ({details})") from error
        self._retry(pymongo.errors.DuplicateKeyError(first.get("errmsg", ""), 11000, first))

    def _retry(self, duplicate: pymongo.errors.DuplicateKeyError) -> None:
        """Give the document that collided a fresh value, or raise."""
        doc = self.docs[self.pending[0]]
        if id(doc) in self.retrying:
            found, stored = landed.earlier_insert_stored(doc, self.write.collection)
            if found is landed.Found.SENT:
                # Its earlier insert landed after the look-up: it is stored.
                written_as = self._taken_as_stored(doc, stored)
                self._written(1)
                self.written_as[id(doc)] = written_as
                return
        slot = values.collided(self.write, duplicate, [s for s in self.filled if s.root is doc])
        if slot is None:
            raise BulkNotUniqueError(f"Could not save document ({duplicate})") from duplicate
        tried = self.attempts.get(id(slot), 1)
        if tried > slot.field.collision_retries:
            self.filled.remove(slot)
            slot.value = None  # taken by another document: not released
            raise slot.field.retries_exhausted(
                BulkNotUniqueError(f"Could not save document ({duplicate})"), tried
            ) from duplicate
        self.attempts[id(slot)] = tried + 1
        values.refill(self.write, slot, self.filled)

    def _taken_as_stored(self, doc: Any, stored: Any) -> tuple[Any, Any]:
        """``doc``, found stored by its earlier insert (whose reply was lost), is counted
        written: returns what is stored and what the object holds (as found, unless a model's
        own step wrote it, which may have added to it), for :attr:`written_as`.

        Raises:
            OperationError: the object changed since (:func:`.landed.check_unchanged`): the
                change would be left unwritten (the reviews of session 38, whether the look-up
                or the retry's duplicate key finds it).
        """
        local = None if seam.state(doc).sent_to_own_step else stored
        landed.check_unchanged(doc, local, self.write.collection)
        return stored, local

    def _written(self, count: int) -> None:
        written = [self.docs[position] for position in self.pending[:count]]
        self.written += written
        for position, doc in zip(self.pending[:count], written, strict=True):
            sent = self.sent.get(position)
            if type(doc) in self.keyed_by_driver and seam.key(doc) is None and sent:
                seam.set_key(doc, sent.get("_id"))  # the ObjectId the driver made
            self.written_as[id(doc)] = (sent, sent)
        values.confirm(written, whole=True)
        if self.made_pk:
            self.made_pk.difference_update([id(doc) for doc in written])
        self.pending = self.pending[count:]

    def _after_failure(self, error: BaseException) -> None:
        """Keep the values of the documents not written if the outcome is unknown (or if an
        earlier insert of theirs may still land), and give back the others'."""
        unknown = self.unknown or values.outcome_unknown(error)
        dropped = []
        for position in self.pending:
            doc = self.docs[position]
            mine = [slot for slot in self.filled if slot.root is doc]
            if unknown or id(doc) in self.retrying:
                values.unconfirmed(
                    doc,
                    sent=landed.snapshot(self.sent.get(position), self.write.collection),
                    made_pk=id(doc) in self.made_pk,
                    filled=mine,
                    noted=[(s, v) for s, v in self.noted if s.root is doc],
                )
                continue
            values.give_back(self.write, mine)
            dropped.append(doc)
            if id(doc) in self.made_pk:
                clear_made_pk(doc)
        values.release(
            self.write, [(s, v) for s, v in self.noted if any(s.root is d for d in dropped)]
        )


def _operation_error(error: pymongo.errors.OperationFailure) -> OperationError:
    """MongoEngine's error for a failed insert (as its ``insert()`` raises it)."""
    if isinstance(error, pymongo.errors.DuplicateKeyError):
        return NotUniqueError(f"Could not save document ({error})")
    if re.match("^E1100[01] duplicate key", str(error)):
        return NotUniqueError(f"Tried to save duplicate unique keys ({error})")
    return OperationError(f"Could not save document ({error})")


def _refuse_repeated(docs: list[Any]) -> None:
    """Raise ``OperationError`` if one document object is in ``docs`` twice: it is one
    document, which its values and key are made for once."""
    first_at: dict[int, int] = {}
    for position, doc in enumerate(docs):
        earlier = first_at.setdefault(id(doc), position)
        if earlier != position:
            raise OperationError(
                f"insert() was given the same document object twice, at positions {earlier} "
                f"and {position} ({doc!r}): each object is one document; make another for a "
                "second one"
            )


def _refuse_unkeyed_references(docs: list[Any]) -> None:
    """Refuse, as MongoEngine does, documents referencing a document that has no key yet
    (another of this insert's, whose key it would make: were that one not written, or given
    another key after a collision, the reference would point at no document, or another).

    Raises:
        ValidationError: such a reference, naming the position of the document holding it.
    """
    shapes = [seam.shape(kind) for kind in set(map(type, docs))]
    if all(shape.referencing == () and shape.embedding == () for shape in shapes):
        return  # no class of the batch can hold a reference
    for position, doc in enumerate(docs):
        for holder in (doc, *values.embedded(doc)):
            for referenced in seam.referenced_documents(holder):
                if seam.key(referenced) is None:
                    where = "" if holder is doc else f" (in its {type(holder).__name__})"
                    raise ValidationError(
                        f"the {type(doc).__name__} at position {position} of insert() "
                        f"references a {type(referenced).__name__} that has no key yet{where}: "
                        "save or insert that one first, in an earlier call (as in MongoEngine, "
                        "documents are referenced once they have been saved)"
                    )


def _stored_by_failed_insert(doc: Any) -> bool:
    """Whether ``doc`` was stored by a bulk insert that then failed (see :func:`insert`)."""
    state = seam.state(doc, create=False)
    return state is not None and state.stored_by_failed_insert is not None


def _reload(queryset: Any, ids: list[Any]) -> list[Any]:
    """The inserted documents as stored, in order (looked up by their stored ``_id``)."""
    pk_field = seam.pk_field(seam.parts(queryset).document_class)
    loaded = {str(doc.pk): doc for doc in queryset.in_bulk(ids).values()}
    return [loaded.get(str(pk_field.to_python(pk_field.to_mongo(key)))) for key in ids]
