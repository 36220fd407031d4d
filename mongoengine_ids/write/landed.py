"""After a lost reply: was the earlier insert of a document applied?

A document whose insert's outcome is unknown keeps its ``_id`` and values (see :mod:`.save`).
When the application sends it again, the ``_id`` is looked up first (:func:`earlier_insert`):
absent, the earlier insert was not applied and the document is inserted as new; present, it
was if the stored document is a version an attempt sent (for a model's own ``_save_create``
under a key its field retries, one holding every value of such a version). If not, another
document holds that ``_id``, or this one changed since it landed: for a key its field retries
(a sequence or random one), the field picks a fresh one; any other key the write inserts (one
made for the document alone, which a copy of it saved meanwhile holds too, or one assigned)
is refused, never written over (:func:`held_by_other`).
An ``_id`` no earlier attempt sent (the application changed the key since) cannot be one of
them landed: a document holding it is another's.

What was sent is remembered as a copy in stored form (:func:`snapshot`): the document's own
values may be edited in place before the retry (a ``GeoPointField``'s list, which its
``to_mongo()`` sends as it is), and the version that may land is the one sent, not the edit.
"""

from __future__ import annotations

import dataclasses
import enum
import math
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

import bson
import pymongo.results
from bson.codec_options import DEFAULT_CODEC_OPTIONS, CodecOptions
from mongoengine.errors import OperationError

from . import seam, values

_T = TypeVar("_T")


def _as_stored(son: Any, collection: Any) -> Any:
    """``son`` as the database gives it back (a BSON round trip with its codecs)."""
    options = getattr(collection, "codec_options", None)
    if not isinstance(options, CodecOptions):  # a wrapped collection
        options = DEFAULT_CODEC_OPTIONS
    return bson.decode(bson.encode(son, codec_options=options), codec_options=options)


def snapshot(son: Any, collection: Any) -> Any:
    """What ``son``, sent to ``collection``, stores: a copy the document's later edits leave
    alone; None if it cannot be encoded (the driver could not have sent it: it cannot land)."""
    if son is None:
        return None
    try:
        return _as_stored(son, collection)
    except (bson.errors.InvalidDocument, TypeError, ValueError, OverflowError):
        return None


class Found(enum.Enum):
    """What the look-up of an earlier insert found under the document's key."""

    #: Nothing (or no attempt sent this key: a document holding it is another's).
    NOTHING = "nothing"
    #: A version an attempt sent: the earlier insert landed.
    SENT = "sent"
    #: A document no attempt sent: another document's, or this one changed since it landed.
    OTHER = "other"


def earlier_insert(document: Any, collection: Any) -> Found:
    """What is stored under the key of ``document``, whose insert had its reply lost."""
    return earlier_insert_stored(document, collection)[0]


def earlier_insert_stored(document: Any, collection: Any) -> tuple[Found, Any]:
    """:func:`earlier_insert`, with the document found (as stored), if any."""
    state = seam.state(document)
    key = _as_stored({"_id": seam.stored_pk(document)}, collection)["_id"]
    mine = [
        sent
        for sent in (*state.sent_before, state.sent)
        if sent is not None and _same(sent.get("_id"), key)
    ]
    if not mine:
        return Found.NOTHING, None
    stored = collection.find_one({"_id": key})
    if stored is None:
        return Found.NOTHING, None
    # Even an _id made for this document alone: a copy of it (copy, pickle, from_json) holds
    # it too, and may have been saved meanwhile.
    found = _as_stored(stored, collection)
    # A model's own step may add to what it was given, or write after its insert: for a key
    # its field retries (the other choice: a fresh key, a second copy), a stored copy holding
    # every value sent is taken for its own. (A key made for it alone is compared exactly:
    # the other choice there is a refusal.)
    matches = _holds if state.sent_to_own_step and key_retried(document) else _same
    return (Found.SENT if any(matches(found, sent) for sent in mine) else Found.OTHER), found


def refused(
    found: Found | None, document: Any, *, insert: bool, filled: Iterable[Any] = ()
) -> bool:
    """Whether the retry of ``document`` refuses what :func:`earlier_insert` ``found``: another
    document under a key the write inserts that no fresh value may replace (one made for the
    document alone, or assigned). Not inserting, MongoEngine's save of an assigned key writes
    over what holds it. ``filled``: the slots the retry filled (:func:`key_retried`)."""
    return found is Found.OTHER and insert and not key_retried(document, filled)


def held_by_other(document: Any, collection: Any) -> str:
    """The error text for ``document`` when :func:`earlier_insert` found ``Found.OTHER``."""
    model = type(document).__name__
    step = seam.state(document).sent_to_own_step
    changed = f", or by {model}'s own _save_create()" if step else ""
    return (
        f"{model} {seam.key(document)!r}: its insert had its reply lost, and "
        f"{collection.full_name!r} holds under that key a document that no attempt sent: this "
        f"one, changed since it landed (by another writer{changed}), or another document "
        "holding the key (a copy of this one saved meanwhile, or one given that key); nothing "
        "was written. Load the document that collection holds under that key to see which; to "
        "store this one as a new document, give it another key (a generated key: set it to "
        "None), set to None the other generated values it shares with that document, and "
        "save() it"
    )


def _holds(stored: Any, sent: Any) -> bool:
    """Whether ``stored`` holds every value of ``sent`` (a model's own step may have added to
    what it was given, or written more after its insert)."""
    return all(name in stored and _same(stored[name], value) for name, value in sent.items())


def _same(stored: Any, sent: Any) -> bool:
    """Whether two values in stored form are the same BSON: ``==``, except that a NaN double
    is the same as a NaN (``nan != nan`` in Python)."""
    if isinstance(stored, float) and isinstance(sent, float):
        return stored == sent or (math.isnan(stored) and math.isnan(sent))
    if isinstance(stored, dict) and isinstance(sent, dict):
        return stored.keys() == sent.keys() and all(_same(stored[k], sent[k]) for k in stored)
    if isinstance(stored, list) and isinstance(sent, list):
        return len(stored) == len(sent) and all(map(_same, stored, sent))
    return bool(stored == sent)


def pk_can_collide(document: Any) -> bool:
    """Whether a document other than this one may hold its ``_id``."""
    if seam.state(document).made_pk:
        return False  # an ObjectId made for it
    if getattr(seam.pk_field(type(document)), "collision_retries", 0):
        return True  # a sequence or random key
    # A UUID the write path generated for it is its own; one the user assigned may be another
    # document's (an idempotency key, say).
    return not _key_generated(document, ())


def key_retried(document: Any, filled: Iterable[Any] = ()) -> bool:
    """Whether the key of ``document`` is one its field made and retries on a collision (a
    sequence or random key, not assigned): another document holding it means a fresh key.
    ``filled``: the slots the write under way filled (one refilled after a collision is not in
    the record of the earlier attempts)."""
    return (
        not seam.state(document).made_pk
        and bool(getattr(seam.pk_field(type(document)), "collision_retries", 0))
        and _key_generated(document, filled)
    )


def _key_generated(document: Any, filled: Iterable[Any]) -> bool:
    """Whether the write path generated the key ``document`` holds: an earlier attempt (its
    record), or the write under way (``filled``). Probe 40d: a retry that met a duplicate of a
    key it refilled, one an earlier attempt had sent, took that key for assigned and refused
    the document (``NotUniqueError``) where a fresh value was the answer."""
    name = seam.shape(type(document)).pk_name
    key = seam.key(document)
    made = [(slot, slot.value) for slot in filled]
    earlier = [(slot, value) for slot, value, _ in seam.state(document).generated]
    return any(
        slot.holder is document and slot.name == name and value == key
        for slot, value in (*earlier, *made)
    )


def still_stored(document: Any, collection: Any) -> bool:
    """Whether ``document``, stored by an insert whose call failed (its
    ``State.stored_by_failed_insert``), is still stored in ``collection``, the collection of
    the application's retry of that insert, as that insert wrote it; False if it is not there
    (deleted since, or the retry writes to a collection of another name: inserted again, new).

    Raises:
        OperationError: its key changed since, it changed since (the retry would not write
            the change: probe BY-1d), or ``collection`` holds under its key another
            document than the one that insert wrote (probe BY-1: one given the key after this
            one was deleted, or this one changed since; it was taken for this one, which was
            then written nowhere): nothing is written.
    """
    record = seam.state(document).stored_by_failed_insert
    assert record is not None
    if record.collection.full_name != collection.full_name:
        # (Another client of the same name may be the same server, reconnected: review CA-5;
        # the stored copy decides.)
        return False
    model = type(document).__name__
    if not where_failed_insert_stored(document, collection):  # its key changed since
        raise OperationError(
            f"{model} {seam.key(document)!r} was stored under the key {record.key!r} by the "
            "insert() that failed, and its key changed since: it cannot be inserted again "
            "under another (it would be stored twice); nothing was written. Leave it out of "
            "the retry, or set its key back"
        )
    found = collection.find_one({"_id": record.key})
    if found is None:
        return False
    if _holds_another(record, found, collection):
        raise OperationError(
            f"{model} {seam.key(document)!r} was stored by the insert() that failed, and "
            f"{collection.full_name!r} holds under its key a document other than the one that "
            "insert wrote: this one, changed since, or another document given the key after "
            "this one was deleted; nothing was written. Load the document under that key to see "
            "which: if it is this one, leave it out of the retry; if not, set this one's key to "
            "None (and the other generated values it shares with that one) and insert it again"
        )
    check_unchanged(document, record.local, collection)
    return True


def _holds_another(record: seam.FailedInsert, found: Any, collection: Any) -> bool:
    """Whether ``found``, stored under ``record``'s key in ``collection``, is not what the
    record says is stored there (never, when it does not know: updated since through the
    document itself)."""
    return record.written is not None and not _same(_as_stored(found, collection), record.written)


def check_unchanged(document: Any, local: Any, collection: Any) -> None:
    """Raise if ``document``, found stored by the retry of an insert whose call failed, changed
    since it held ``local`` (in stored form; None: not known, not checked): the retry inserts
    no document twice, so it would leave the change unwritten (probe BY-1d).

    Raises:
        OperationError: it changed; nothing is written.
    """
    if local is None or _same(snapshot(document.to_mongo(), collection), local):
        return
    raise OperationError(
        f"{type(document).__name__} {seam.key(document)!r} was stored by the insert() that "
        "failed, and it changed since: the retry would leave the change unwritten (it inserts "
        "no document twice); nothing was written. save() it to write the change, and leave it "
        "out of the retry"
    )


def through_itself(document: Any, write: Callable[[], _T], *, reloads: bool = False) -> _T:
    """``write()``, an update of ``document`` through its own object (``doc.update()``;
    ``reloads``: ``doc.modify()``, which sets the object from the stored copy), recorded by
    :func:`updated_through_itself` if it may have written (:func:`_may_have_written`), or
    failed with its outcome unknown."""
    try:
        result = write()
    except BaseException as error:
        if values.outcome_unknown(error):
            updated_through_itself(document)
        raise
    if _may_have_written(result):
        updated_through_itself(document, reloaded=reloads)
    return result


def _may_have_written(result: Any) -> bool:
    """Whether an update that returned ``result`` may have written: only a count of 0 and
    False say it did not. pymongo's result (``full_result=True``) says by its count matched,
    unless unacknowledged; None is what MongoEngine returns under ``w=0``, and what a model's
    own ``update()`` returns that does not pass the count on (the third review of session 38:
    a result always truthy, or always None, was taken for the wrong answer)."""
    if isinstance(result, pymongo.results.UpdateResult):
        return not result.acknowledged or result.matched_count > 0
    return result is None or bool(result)


def updated_through_itself(document: Any, *, reloaded: bool = False) -> None:
    """``document`` was updated through its own object (``doc.update()``, ``doc.modify()``),
    or may have been (the outcome unknown), in its collection: if an insert whose call failed
    stored it there, the retry of that call takes what is stored under its key for it, as
    that call wrote it or not (:func:`still_stored`); ``reloaded``: the object was set from the
    stored copy (``modify()``), and a change of it made later is one the retry would not write.
    Called only when the update may have written: one that wrote nothing (refused, matching
    nothing) keeps the comparison (the review of session 38: the retry took another document
    given the key since for this one)."""
    state = seam.state(document, create=False)
    record = None if state is None else state.stored_by_failed_insert
    if (
        state is None
        or record is None
        or record.collection.full_name != seam.collection_of(document).full_name
    ):
        return
    local = snapshot(document.to_mongo(), record.collection) if reloaded else record.local
    state.stored_by_failed_insert = dataclasses.replace(record, written=None, local=local)


def reloaded_whole(document: Any) -> None:
    """``document`` was set whole from its stored copy (``reload()``): if a write whose call
    failed stored it, what the object holds now is no change of it the retry of that write
    would leave unwritten (the third review of session 38: ``update()`` then ``reload()``, the
    usual way, was refused as a change). What is stored is compared as before."""
    state = seam.state(document, create=False)
    record = None if state is None else state.stored_by_failed_insert
    if state is None or record is None:
        return
    local = snapshot(document.to_mongo(), record.collection)
    state.stored_by_failed_insert = dataclasses.replace(record, local=local)


def where_failed_insert_stored(document: Any, collection: Any) -> bool:
    """Whether a write of ``document`` to ``collection`` goes where an insert whose call failed
    stored it (its ``State.stored_by_failed_insert``): a collection of the same name, under
    the same key (not one the application changed or cleared since: a new document)."""
    record = seam.state(document).stored_by_failed_insert
    return (
        record is not None
        and record.collection.full_name == collection.full_name
        and _same(_as_stored({"_id": seam.stored_pk(document)}, collection)["_id"], record.key)
    )


def force_insert_refused(document: Any, collection: Any) -> str | None:
    """Why ``save(force_insert=True)`` of ``document``, stored by a write whose call failed
    (its ``State.stored_by_failed_insert``: a bulk insert() that failed at a later document or
    reloading them, or an insert whose reply was lost, found landed since), is refused: its
    key is in ``collection`` (one look-up); None if it is not (deleted since: inserted again).
    """
    record = seam.state(document).stored_by_failed_insert
    assert record is not None
    found = collection.find_one({"_id": record.key})
    if found is None:
        return None
    where = f"{type(document).__name__} {seam.key(document)!r}"
    if _holds_another(record, found, collection):
        # (The third review of session 38: "save() it" wrote over the other document.)
        return (
            f"{where}: {collection.full_name!r} holds under its key a document other than the "
            "one a write of it whose call failed stored: this one, changed since, or another "
            "document given the key after this one was deleted; nothing was written. Load the "
            "document under that key to see which: if it is another, set this one's key to "
            "None (and the other generated values it shares with that one) and save it"
        )
    return (
        f"{where} is stored: a write of it whose call failed stored it; "
        "save(force_insert=True) does not insert it again, and nothing was written. save() it "
        "without force_insert to write a change (or retry a failed insert() call, which counts "
        "it stored)"
    )


def stored(document: Any, collection: Any) -> bool:
    """Whether the key of ``document`` is in ``collection`` (one look-up; the write's
    collection reads on the primary); False for a document without a key."""
    pk = seam.stored_pk(document)
    return pk is not None and collection.find_one({"_id": pk}, {"_id": 1}) is not None
