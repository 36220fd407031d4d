"""``Model.objects.insert([...])``: one ``new_values()`` call per field for the whole batch.

MongoEngine's behaviour otherwise: the same checks, signals, ``load_bulk`` and one ordered
``insert_many`` (documents before a failure stay written). What this adds:

* every document's ``_id`` is known before the insert is sent, and kept (with the generated
  values) when the reply is lost: the application's retry inserts the same documents again and
  cannot store a copy (:class:`~mongoengine_ids.UnconfirmedWriteError` at the first one
  already stored);
* a document whose generated value collided (a field that retries) gets a fresh value and the
  insert resumes from it.
"""

from __future__ import annotations

from typing import Any

import pymongo.errors
from mongoengine import signals
from mongoengine.base import BaseDocument
from mongoengine.errors import BulkWriteError, OperationError

from ..errors import BulkNotUniqueError, UnconfirmedWriteError
from . import seam, values
from .field import Write
from .save import clear_made_pk, make_pk

_DUPLICATE_KEY_CODES = (11000, 11001)


def insert(
    queryset: Any,
    doc_or_docs: Any,
    load_bulk: bool = True,
    write_concern: dict[str, Any] | None = None,
    signal_kwargs: dict[str, Any] | None = None,
) -> Any:
    """MongoEngine's ``QuerySet.insert()``, generating the values of the whole batch at once."""
    document_class = queryset._document
    return_one = isinstance(doc_or_docs, BaseDocument)
    docs = [doc_or_docs] if return_one else list(doc_or_docs)
    for doc in docs:
        if not isinstance(doc, document_class):
            raise OperationError(f"Some documents inserted aren't instances of {document_class}")
        if doc.pk is not None and not seam.is_new(doc):
            raise OperationError("Some documents have ObjectIds, use doc.update() instead")
    signal_kwargs = signal_kwargs or {}
    signals.pre_bulk_insert.send(document_class, documents=docs, **signal_kwargs)

    ids = Batch(Write(document_class, queryset._collection, docs), docs).insert(write_concern or {})
    for doc, doc_id in zip(docs, ids, strict=True):
        doc.pk = doc_id
    if not load_bulk:
        signals.post_bulk_insert.send(document_class, documents=docs, loaded=False, **signal_kwargs)
        return ids[0] if return_one else ids
    results = _reload(queryset, ids)
    signals.post_bulk_insert.send(document_class, documents=results, loaded=True, **signal_kwargs)
    return results[0] if return_one else results


class Batch:
    """The documents of one bulk insert and the values generated for them."""

    def __init__(self, write: Write, docs: list[Any]) -> None:
        self.write = write
        self.docs = docs
        self.states = [seam.state(doc) for doc in docs]
        every = [slot for doc in docs for slot in values.slots(doc)]
        unconfirmed = {id(doc) for doc, st in zip(docs, self.states, strict=True) if st.unconfirmed}
        self.noted = values.note_assigned(
            write, [s for s in every if s.value is not None and id(s.root) not in unconfirmed]
        )
        try:
            self.filled = values.fill(write, [s for s in every if s.value is None])
        except BaseException:
            values.release(write, self.noted)
            raise
        for doc, st in zip(docs, self.states, strict=True):
            st.made_pk = make_pk(doc) or st.made_pk
        self.written = 0  # docs[:written] are in the database
        self.attempts: dict[int, int] = {}

    def insert(self, write_concern: dict[str, Any]) -> list[Any]:
        """Insert every document, resuming after each collision given a fresh value."""
        try:
            while self.written < len(self.docs):
                self._send(write_concern)
        except BaseException as error:
            self._after_failure(error)
            raise
        for st in self.states:
            st.unconfirmed = st.made_pk = False
        return [doc.pk for doc in self.docs]

    def _send(self, write_concern: dict[str, Any]) -> None:
        raw = [doc.to_mongo() for doc in self.docs[self.written :]]
        try:
            with seam.set_write_concern(self.write.collection, write_concern) as collection:
                collection.insert_many(raw, ordered=True)
        except pymongo.errors.BulkWriteError as error:
            self._written(self.written + int(error.details.get("nInserted", 0)))
            first = (error.details.get("writeErrors") or [{}])[0]
            if first.get("code") not in _DUPLICATE_KEY_CODES:
                raise BulkWriteError(f"Bulk write error: ({error.details})") from error
            self._retry(pymongo.errors.DuplicateKeyError(first.get("errmsg", ""), 11000, first))
        else:
            self._written(len(self.docs))

    def _retry(self, duplicate: pymongo.errors.DuplicateKeyError) -> None:
        """Give the document that collided a fresh value, or raise."""
        position = self.written
        if self.states[position].unconfirmed:
            raise UnconfirmedWriteError(
                f"{self.write.document_class.__name__}: document #{position} of the batch is "
                "already stored: the earlier insert whose reply was lost was probably applied "
                "(or another document holds its values); it and the documents after it were "
                f"not written ({duplicate})"
            ) from duplicate
        doc = self.docs[position]
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
        values.refill(self.write, slot)

    def _written(self, count: int) -> None:
        for doc in self.docs[self.written : count]:
            values.mark_written(doc)
        self.written = count

    def _after_failure(self, error: BaseException) -> None:
        """Keep the unwritten documents' values if the outcome is unknown, else give back."""
        rest = self.docs[self.written :]
        if values.outcome_unknown(error):
            for st in self.states[self.written :]:
                st.unconfirmed = True
            return
        if isinstance(error, UnconfirmedWriteError):
            return  # kept: the document may well be stored
        values.give_back(self.write, [s for s in self.filled if any(s.root is d for d in rest)])
        values.release(
            self.write, [(s, v) for s, v in self.noted if any(s.root is d for d in rest)]
        )
        for doc, st in zip(rest, self.states[self.written :], strict=True):
            if not st.unconfirmed:
                clear_made_pk(doc, st)


def _reload(queryset: Any, ids: list[Any]) -> list[Any]:
    """The inserted documents as stored, in order (looked up by their stored ``_id``)."""
    document_class = queryset._document
    pk_field = document_class._fields[seam.id_field(document_class) or "id"]
    loaded = {str(doc.pk): doc for doc in queryset.in_bulk(ids).values()}
    return [loaded.get(str(pk_field.to_python(pk_field.to_mongo(key)))) for key in ids]
