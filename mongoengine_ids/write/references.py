"""References to a model keyed by a generated field: the key in stored form wherever MongoEngine
sends it.

MongoEngine sends a referenced document's key to the database as the reference holds it. The
references it builds from a stored key hold the stored form (see
:func:`.seam.key_for_references`); the places where MongoEngine takes the key from the
document's attribute instead, or hands stored keys back to the user, are mended here, on the
model that declares the key:

* ``to_mongo(fields=[...])`` without the key (what ``CachedReferenceField`` stores) and
  ``to_mongo(use_db_field=False)`` put the attribute value in ``_id``, not its stored form;
* ``to_dbref()`` builds its DBRef from the attribute value;
* its queryset's ``in_bulk()`` matches ids given in any accepted form and keys the result by
  the ids as given (MongoEngine looks the loaded documents up by the DBRef ids it passed), and
  ``distinct()`` of a generated field returns the field's values, not the stored ones.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from bson import DBRef
from mongoengine.document import Document

from . import seam

ToMongo = Callable[..., Any]
ToDBRef = Callable[[Any], DBRef]


def wrap_to_mongo(owner: type[Document], own: ToMongo | None) -> ToMongo:
    """``to_mongo`` for ``owner``, calling ``own`` (the class's own) or the parent's."""

    def to_mongo(self: Document, use_db_field: bool = True, fields: Any = None) -> Any:
        if own is not None:
            data = own(self, use_db_field, fields)
        else:
            data = super(owner, self).to_mongo(use_db_field, fields)
        if data.get("_id") is not None and data["_id"] is seam.data(self).get("id"):
            # Document.to_mongo() copies _data["id"] as it is into _id when the fields leave
            # the key out, or when the key is written under its name.
            data["_id"] = seam.key_field(type(self)).to_mongo(data["_id"])
        return data

    setattr(to_mongo, seam.WRAPS_OWN, own)
    return to_mongo


def wrap_to_dbref(owner: type[Document], own: ToDBRef | None) -> ToDBRef:
    """``to_dbref`` for ``owner``: the DBRef holds the key as references hold it."""

    def to_dbref(self: Document) -> DBRef:
        ref = own(self) if own is not None else super(owner, self).to_dbref()
        return DBRef(ref.collection, seam.key_field(type(self)).reference_key(ref.id))

    return to_dbref


def in_bulk(
    document_class: type[Document], object_ids: Iterable[Any], load: Callable[[list[Any]], Any]
) -> dict[Any, Any]:
    """MongoEngine's ``in_bulk()`` (``load``) with the ids in stored form, keyed as given."""
    field = seam.key_field(document_class)
    given_for: dict[Any, list[Any]] = {}
    for given in object_ids:
        given_for.setdefault(field.prepare_query_value("in", given), []).append(given)
    found = load(list(given_for))
    # The keys of ``found`` are the stored _id values as the driver decodes them (a uuid.UUID
    # under uuidRepresentation="standard"): back to the stored form to find the ids given.
    return {
        given: document
        for key, document in found.items()
        for given in given_for.get(field.prepare_query_value("in", key), ())
    }


def distinct_values(document_class: type[Document], path: str, values: list[Any]) -> list[Any]:
    """``values`` of ``distinct(path)`` as the field's values, if ``path`` is a generated one."""
    field = seam.generated_field_at(document_class, path)
    if field is None:
        return values
    return [field.coerce(value) for value in values]
