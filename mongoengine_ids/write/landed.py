"""After a lost reply: was the earlier insert of a document applied?

A document whose insert's outcome is unknown keeps its ``_id`` and values (see :mod:`.save`).
When the application sends it again, the ``_id`` is looked up first: absent, the earlier insert
was not applied and the document is inserted as new; present, it was, unless the ``_id`` is a
value that can collide (a field that retries collisions generated it) and the stored document
is not the one sent: then another document holds that ``_id`` and the field picks a fresh one.
"""

from __future__ import annotations

from typing import Any

import bson
from bson.codec_options import DEFAULT_CODEC_OPTIONS, CodecOptions
from pymongo import ReadPreference

from . import seam


def _as_stored(son: Any, collection: Any) -> Any:
    """``son`` as the database gives it back (a BSON round trip with its codecs)."""
    options = getattr(collection, "codec_options", None)
    if not isinstance(options, CodecOptions):  # a wrapped collection
        options = DEFAULT_CODEC_OPTIONS
    return bson.decode(bson.encode(son, codec_options=options), codec_options=options)


def primary(collection: Any) -> Any:
    """``collection`` read on the primary: a secondary may not have a write just applied."""
    return collection.with_options(read_preference=ReadPreference.PRIMARY)


def earlier_insert_landed(document: Any, collection: Any) -> bool:
    """Whether the insert of ``document`` whose reply was lost was applied."""
    state = seam.state(document)
    stored = primary(collection).find_one({"_id": seam.stored_pk(document)})
    if stored is None:
        return False
    if not _pk_can_collide(document):
        return True  # no other document can hold an _id made for this one
    found = _as_stored(stored, collection)
    return any(
        found == _as_stored(sent, collection)
        for sent in (*state.sent_before, state.sent)
        if sent is not None
    )


def _pk_can_collide(document: Any) -> bool:
    """Whether a document other than this one may hold its ``_id``."""
    state = seam.state(document)
    if state.made_pk:
        return False  # an ObjectId made for it
    if getattr(seam.pk_field(type(document)), "collision_retries", 0):
        return True  # a sequence or random key
    # A UUID the write path generated for it is its own; one the user assigned may be another
    # document's (an idempotency key, say).
    name = seam.shape(type(document)).pk_name
    return not any(slot.holder is document and slot.name == name for slot, _ in state.generated)


def stored(document: Any, collection: Any) -> bool:
    """Whether the key of ``document`` is in ``collection`` (one look-up, on the primary);
    False for a document without a key."""
    pk = seam.stored_pk(document)
    return pk is not None and primary(collection).find_one({"_id": pk}, {"_id": 1}) is not None
