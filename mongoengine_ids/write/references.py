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

and, on MongoEngine's reference fields (wrapped once, acting only on references to such a
model; see :func:`.seam.hook_reference_fields`):

* ``ReferenceField.to_mongo`` (and so its queries) sends a DBRef or ``LazyReference`` made by
  hand from the key (``DBRef(collection, pk)``) with the id as given: it gets the key as
  references hold it (:func:`keyed_dbref`);
* ``ReferenceField.to_python`` and ``LazyReferenceField.to_python`` leave a stored DBRef
  (``dbref=True``) as the driver decoded it: its id a ``Binary`` or ``str``, which the documents
  ``DeReference`` loads for a list or dict of references never equal, so the items stayed
  DBRefs. The DBRef gets the key as references hold it (:func:`keyed_dbref`);
* ``GenericReferenceField.to_mongo`` (and so its queries, and ``GenericLazyReferenceField``'s)
  sends a DBRef made by hand as given: it gets the key as references hold it, for the model
  keyed by a UUID of this package stored in the DBRef's collection;
* ``CachedReferenceField.prepare_query_value`` puts ``document.pk`` in the ``_id`` that a query
  by the document, its ``auto_sync`` and ``sync_all()`` send;
* ``GenericLazyReferenceField.to_mongo`` of a ``LazyReference`` (what it holds for a document
  assigned and read back before ``save()``) writes ``DBRef(collection, reference.pk)``, and its
  ``build_lazyref`` makes the ``LazyReference`` of a stored reference with the key as decoded.
"""

from __future__ import annotations

import functools
import uuid
from collections.abc import Callable, Iterable
from typing import Any

from bson import DBRef
from bson.binary import Binary
from mongoengine.base import LazyReference
from mongoengine.document import Document
from mongoengine.errors import ValidationError
from mongoengine.fields import LazyReferenceField, ReferenceField

from ..stored import StoredUUID, StoredUUIDText
from . import seam

ToMongo = Callable[..., Any]
ToDBRef = Callable[[Any], DBRef]
#: The keys of a DBRef's document that are not extra fields (``cls`` of an abstract reference).
_DBREF_KEYS = frozenset({"$ref", "$id", "$db"})


def wrap_to_mongo(owner: type[Document], own: ToMongo | None) -> ToMongo:
    """``to_mongo`` for ``owner``, calling ``own`` (the class's own) or the parent's."""

    def to_mongo(self: Document, use_db_field: bool = True, fields: Any = None) -> Any:
        if own is not None:
            data = own(self, use_db_field, fields)
        else:
            data = super(owner, self).to_mongo(use_db_field, fields)
        if isinstance(data.get("_id"), uuid.UUID):
            # Document.to_mongo() copies _data["id"] as it is into _id when the fields leave
            # the key out, or when the key is written under its name: never in stored form.
            data["_id"] = seam.pk_field(type(self)).to_mongo(data["_id"])
        return data

    setattr(to_mongo, seam.WRAPS_OWN, own)
    return to_mongo


def wrap_from_son(owner: type[Document], own: Any) -> Any:
    """``_from_son`` for ``owner`` (``own``: the class's own classmethod, or None): a document
    loaded whose key is stored in another form than its field writes is recorded so
    (:func:`.seam.note_stored_key`); the embedded documents its dynamic attributes hold are
    loaded ones (:func:`.seam.note_loaded_dynamic`), unless it is built as new
    (``created=True``): then it is as the constructor makes one (:func:`.seam.built_new`)."""

    def _from_son(cls: type[Document], son: Any, *args: Any, **kwargs: Any) -> Any:
        if own is not None:
            document = own.__func__(cls, son, *args, **kwargs)
        else:
            document = super(owner, cls)._from_son(son, *args, **kwargs)
        seam.note_stored_key(document, son.get("_id"))
        if kwargs.get("created", args[1] if len(args) > 1 else False):
            seam.built_new(document)
        else:
            seam.note_loaded_dynamic(document)
        return document

    return classmethod(_from_son)


def wrap_from_json(owner: type[Document], own: Any) -> Any:
    """``from_json`` for ``owner`` (``own``: the class's own classmethod, or None): a key the
    JSON holds as text or a number is the application's, a value of the field in any form it
    accepts (an API's text of a UUID, a number as text), not a form read from the database
    (probe AZ: taken for one, the document's ``save()`` was refused and its ``delete()`` found
    nothing), as MongoEngine's own fields take it (:func:`.seam.note_json_key`)."""

    def from_json(cls: type[Document], json_data: Any, *args: Any, **kwargs: Any) -> Any:
        if own is not None:
            document = own.__func__(cls, json_data, *args, **kwargs)
        else:
            document = super(owner, cls).from_json(json_data, *args, **kwargs)
        seam.note_json_key(document)
        return document

    return classmethod(from_json)


def wrap_to_dbref(owner: type[Document], own: ToDBRef | None) -> ToDBRef:
    """``to_dbref`` for ``owner``: the DBRef holds the key as references hold it."""

    def to_dbref(self: Document) -> DBRef:
        ref = own(self) if own is not None else super(owner, self).to_dbref()
        return DBRef(ref.collection, seam.pk_field(type(self)).reference_key(ref.id))

    return to_dbref


def reference_key(document_class: Any, key: Any) -> Any:
    """``key``, a key of a ``document_class`` as found in a stored reference, as references
    hold it (a :class:`~mongoengine_ids.stored.StoredUUID`: the stored form when sent, equal to
    the key and hashing as it); ``key`` itself if it is one already, if it is no key at all, or
    if the model's key is not a UUID of this package."""
    field = seam.uuid_key(document_class)
    if field is None or isinstance(key, (StoredUUID, StoredUUIDText)):
        return key
    return field.reference_key(key)


def keyed_dbref(document_class: Any, ref: DBRef) -> DBRef:
    """``ref``, a DBRef to a ``document_class`` (a ``LazyReference`` too: the DBRef it is), with
    its id as references hold the key (:func:`reference_key`); ``ref`` itself if that is the
    id it has and it is a plain DBRef."""
    key = reference_key(document_class, ref.id)
    if key is ref.id and type(ref) is DBRef:
        return ref
    extra = {name: value for name, value in ref.as_doc().items() if name not in _DBREF_KEYS}
    return DBRef(ref.collection, key, ref.database, **extra)


def wrap_dict_query_value(own: Callable[[Any, str, Any], Any]) -> Callable[[Any, str, Any], Any]:
    """``prepare_query_value`` of ``DictField`` (and ``MapField``), which MongoEngine also asks
    for the value at one key's path (``refs__x=``, ``set__codes__x=``): it sent the value as
    given (a ``uuid.UUID``, which matches no stored form on mongomock, nor text). A value of a
    field of this package (``MapField(UUID4Field())``), or of references to a model whose key is
    stored in another form, is prepared by that field, which sends it as stored."""

    @functools.wraps(own)
    def prepare_query_value(self: Any, op: str, value: Any) -> Any:
        inner = getattr(self, "field", None)
        if (
            value is not None
            and not isinstance(value, dict)
            and not (isinstance(value, str) and op in seam.STRING_OPERATORS)  # a text match: as is
            and (
                seam.is_generated(inner)
                or (
                    isinstance(inner, (ReferenceField, LazyReferenceField))
                    and seam.uuid_key(seam.referenced_class(inner)) is not None
                )
            )
        ):
            return inner.prepare_query_value(op, value)
        return own(self, op, value)

    return prepare_query_value


def wrap_reference_to_mongo(own: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Any]:
    """``to_mongo`` of ``ReferenceField``, which its ``prepare_query_value`` calls too: a DBRef
    (or a ``LazyReference``, which is one) made by hand from a document's key
    (``DBRef(collection, pk)``, ``LazyReference(Model, pk)``) is sent with its id as references
    hold the key (:func:`keyed_dbref`), as a document is: MongoEngine sent the id as given, which
    the driver cannot encode, or encodes in another form than the key's (a query matched
    nothing)."""

    @functools.wraps(own)
    def to_mongo(self: Any, document: Any) -> Any:
        if isinstance(document, DBRef):
            referenced = seam.referenced_class(self)
            if seam.generated_key(referenced) is not None:  # a LazyReference: the DBRef it is
                document = keyed_dbref(referenced, document)
        return own(self, document)

    return to_mongo


def wrap_reference_to_python(own: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Any]:
    """``to_python`` of ``ReferenceField`` or ``LazyReferenceField``: a stored DBRef gets the
    key as references hold it, so that ``DeReference`` finds the documents it loads for it."""

    @functools.wraps(own)
    def to_python(self: Any, value: Any) -> Any:
        found = own(self, value)
        if type(value) is DBRef and type(found) is DBRef:  # as decoded; not a LazyReference
            return keyed_dbref(seam.referenced_class(self), found)
        return found

    return to_python


def wrap_generic_reference_to_python(own: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Any]:
    """``to_python`` of ``GenericReferenceField``: the DBRef of a stored reference (``{"_cls":
    ..., "_ref": DBRef}``, what the field holds until it is read with dereferencing on, and
    under ``no_dereference()``) gets the key as references hold it, as a ``ReferenceField``'s
    DBRef does: equal to the document's key (the driver's Binary or text is not)."""

    @functools.wraps(own)
    def to_python(self: Any, value: Any) -> Any:
        found = own(self, value)
        if isinstance(found, dict) and type(found.get("_ref")) is DBRef:
            document_class = seam.registered(found.get("_cls"))
            ref = found["_ref"]
            keyed = ref if document_class is None else _as_referenced(document_class, ref)
            if keyed is not ref:
                found = type(found)(found)
                found["_ref"] = keyed
        return found

    return to_python


def wrap_dynamic_to_python(own: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Any]:
    """``to_python`` of ``DynamicField``, which stores a document as ``{"_cls": ..., "_ref":
    DBRef}`` and reads it by dereferencing that DBRef at once: the DBRef gets the key as
    references hold it first (probe BL-1: ``from_json()`` decodes a UUID key to a
    ``uuid.UUID``, which mongomock, and a server under ``pythonLegacy``, never match to the
    stored form; the document was not found)."""

    @functools.wraps(own)
    def to_python(self: Any, value: Any) -> Any:
        if isinstance(value, dict) and type(value.get("_ref")) is DBRef:
            document_class = seam.registered(value.get("_cls"))
            ref = value["_ref"]
            keyed = ref if document_class is None else _as_referenced(document_class, ref)
            if keyed is not ref:
                value = {**value, "_ref": keyed}
        return own(self, value)

    return to_python


def wrap_dereference(own: Callable[..., Any]) -> Callable[..., Any]:
    """``DeReference.__call__``: DBRefs of a ``ReferenceField(dbref=True)`` as the driver decoded
    them (what ``distinct()`` passes; a loaded document's went through ``to_python``) get the
    key as references hold it, so that the documents loaded for them are found."""

    @functools.wraps(own)
    def __call__(
        self: Any, items: Any, max_depth: int = 1, instance: Any = None, name: Any = None
    ) -> Any:
        # A plain list: what distinct() passes (a document's values are a BaseList or BaseDict).
        if type(items) is not list or not isinstance(name, str):
            return own(self, items, max_depth, instance, name)
        field = seam.values_field_at(instance, name)  # a path into embedded documents too
        if seam.is_generated(field):
            # A field of the package, or a list or map of one (of any model: one that declares
            # nothing else of the package has MongoEngine's distinct()).
            return [field.to_python(item) for item in items]
        lazy = isinstance(field, LazyReferenceField)
        referenced = (
            seam.referenced_class(field) if isinstance(field, ReferenceField) or lazy else None
        )
        if seam.uuid_key(referenced) is None:
            return own(self, items, max_depth, instance, name)
        # The stored keys (or DBRefs) as references hold them: equal to the documents' keys, as
        # an ObjectId key is, and the DBRefs find the documents loaded for them. Lazy: nothing
        # to load (MongoEngine's own pass would find the DBRefs and fail looking them up).
        items = [_as_referenced(referenced, item) for item in items]
        return items if lazy else own(self, items, max_depth, instance, name)

    return __call__


def _as_referenced(document_class: Any, stored: Any) -> Any:
    """A stored key or DBRef of a ``document_class`` as references hold it (in a dict or list
    of them: each); as it is if it is no key of the model's (a value stored by other means)."""
    if isinstance(stored, dict):
        return {name: _as_referenced(document_class, item) for name, item in stored.items()}
    if isinstance(stored, list):
        return [_as_referenced(document_class, item) for item in stored]
    try:
        if type(stored) is DBRef:
            return keyed_dbref(document_class, stored)
        return reference_key(document_class, stored)
    except ValidationError:
        return stored


def wrap_cached_query_value(own: Callable[..., Any]) -> Callable[..., Any]:
    """``prepare_query_value`` of ``CachedReferenceField``: the ``_id``, and the values of the
    referenced document's fields of this package it caches (or lists and maps of them), in
    stored form (MongoEngine copies the attribute values, which the driver encodes by the
    connection's ``uuidRepresentation`` or cannot encode: its ``sync_all()`` and an update
    setting the reference send them)."""

    @functools.wraps(own)
    def prepare_query_value(self: Any, op: str, value: Any) -> Any:
        found = own(self, op, value)
        if not isinstance(found, dict):
            return found
        referenced = seam.referenced_class(self)
        if found.get("_id") is not None:
            field = seam.uuid_key(referenced)
            if field is not None:
                found["_id"] = field.to_mongo(found["_id"])
        for name in self.fields:
            field = seam.field_of(referenced, name)
            if seam.holds_generated(field) and found.get(name) is not None:
                found[name] = field.to_mongo(found[name])
        return found

    return prepare_query_value


def wrap_generic_lazy_build(own: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Any]:
    """``build_lazyref`` of ``GenericLazyReferenceField``: the ``LazyReference`` it makes of a
    stored reference (``{"_cls": ..., "_ref": DBRef}``) has its ``pk`` as references hold the
    key, as a ``LazyReferenceField``'s has."""

    @functools.wraps(own)
    def build_lazyref(self: Any, value: Any) -> Any:
        found = own(self, value)
        if isinstance(value, dict) and isinstance(found, LazyReference):
            key = reference_key(found.document_type, found.pk)
            if key is not found.pk:
                return LazyReference(found.document_type, key, passthrough=found.passthrough)
        return found

    return build_lazyref


def wrap_generic_to_mongo(own: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Any]:
    """``to_mongo`` of ``GenericReferenceField`` (and so of its queries, and of
    ``GenericLazyReferenceField``'s): a DBRef made by hand (``DBRef(collection, pk)``) to a model
    keyed by a UUID of this package is sent with its id as references hold the key
    (:func:`keyed_dbref`): MongoEngine sent the id as given, which the driver cannot encode, or
    encodes in another form than the key's (a query matched nothing). A ``LazyReference``
    names its model; a DBRef's collection may hold several models keyed so (probe AN): their
    form is taken if they all give the id one form."""

    @functools.wraps(own)
    def to_mongo(self: Any, document: Any) -> Any:
        if isinstance(document, LazyReference):
            if seam.uuid_key(document.document_type) is not None:
                document = keyed_dbref(document.document_type, document)
        elif isinstance(document, DBRef):
            document = keyed_by_collection(document)
        return own(self, document)

    return to_mongo


def keyed_by_collection(ref: DBRef, models: list[Any] | None = None) -> DBRef:
    """``ref``, a DBRef made by hand or by MongoEngine from a document's ``pk`` (its id a
    ``uuid.UUID``), or read back (its id as stored), with its id as references hold the key of
    the models keyed by a UUID of this package whose collection it names, if they all give it
    one form; else ``ref`` itself. An id read back is converted only by a model whose key field
    stores it so (review Q: a text key of a plain model, in a collection of the same name in
    another database, was taken for a UUID key's and pointed at no document). ``models``: those
    of ``ref.collection``, if known."""
    if models is None:
        models = seam.uuid_keyed_models_of(ref.collection)
    if not isinstance(ref.id, uuid.UUID):
        models = [kind for kind in models if _stores(kind, ref.id)]
    refs = [keyed_dbref(kind, ref) for kind in models]
    # (By type: a StoredUUID and a StoredUUIDText of one key compare equal.)
    if refs and len({type(each.id) for each in refs}) == 1:
        return refs[0]
    return ref


def wrap_untyped_container(own: Callable[..., Any]) -> Callable[..., Any]:
    """``to_python`` and ``to_mongo`` of MongoEngine's list and dict fields. An untyped one
    (``ListField()``, ``DictField()``) turns a document it holds into ``DBRef(collection, pk)``,
    the key as the document holds it: the driver cannot encode a UUID under no
    ``uuidRepresentation``, and encodes it in another form than the key's under
    ``pythonLegacy`` (a reference never found again). Such DBRefs get the key as references
    hold it (:func:`keyed_by_collection`; probe AN). Typed ones are as MongoEngine makes them."""

    @functools.wraps(own)
    def convert(self: Any, value: Any, *args: Any, **kwargs: Any) -> Any:
        found = own(self, value, *args, **kwargs)
        if self.field is not None:
            return found
        if isinstance(found, list) and any(_may_hold_uuid_key(item) for item in found):
            rekey = _Rekey()
            return [rekey(item) for item in found]
        if isinstance(found, dict) and any(_may_hold_uuid_key(item) for item in found.values()):
            rekey = _Rekey()
            return {key: rekey(item) for key, item in found.items()}
        return found

    return convert


def _stores(document_class: Any, key: Any) -> bool:
    """Whether the key field of ``document_class`` (a UUID of this package) stores a key so."""
    field = seam.uuid_key(document_class)
    return field is not None and field.in_own_form(key)


class _Rekey:
    """:func:`keyed_by_collection` of the items of one container that may hold a UUID key,
    each collection's models looked up once (review Q: once per item cost 5 us on a long
    list)."""

    def __init__(self) -> None:
        self._models: dict[str, list[Any]] = {}

    def __call__(self, item: Any) -> Any:
        if not _may_hold_uuid_key(item):
            return item
        models = self._models.get(item.collection)
        if models is None:
            models = self._models[item.collection] = seam.uuid_keyed_models_of(item.collection)
        return keyed_by_collection(item, models)


def _may_hold_uuid_key(value: Any) -> bool:
    """Whether ``value`` is a DBRef whose id may be a UUID key not held as references hold it:
    one MongoEngine made from the key as a document holds it (a ``uuid.UUID``), or one read
    back from a server (review BF: the driver decodes the stored form to a ``Binary`` or, under
    ``standard``, a ``uuid.UUID``; the text of an ``as_string`` key to a ``str``), which
    ``DeReference`` matched to no document it loaded. mongomock hands back the objects sent.
    Any other (an ObjectId's) is left alone at no cost."""
    return (
        isinstance(value, DBRef)
        and not isinstance(value, LazyReference)
        and isinstance(value.id, (uuid.UUID, Binary, str))
        and not isinstance(value.id, (StoredUUID, StoredUUIDText))
    )


def wrap_generic_lazy_to_mongo(own: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Any]:
    """``to_mongo`` of ``GenericLazyReferenceField``: a ``LazyReference`` is written with its
    key in stored form, as a document is."""

    @functools.wraps(own)
    def to_mongo(self: Any, document: Any) -> Any:
        found = own(self, document)
        if isinstance(document, LazyReference):
            field = seam.uuid_key(document.document_type)
            ref = found["_ref"]
            if field is not None and ref.id is not None:
                found["_ref"] = DBRef(ref.collection, field.to_mongo(ref.id))
        return found

    return to_mongo


def in_bulk(
    document_class: type[Document], object_ids: Iterable[Any], load: Callable[[list[Any]], Any]
) -> dict[Any, Any]:
    """MongoEngine's ``in_bulk()`` (``load``) with the ids in stored form, keyed as given.

    An id is a key as a document holds it, or in another form the field takes for one (text,
    the stored form): never a counter number to decorate (``value_decorator``), which a query
    by the key takes it for, as MongoEngine's; its ``in_bulk()`` sends the ids as given."""
    field = seam.pk_field(document_class)
    given_for: dict[Any, list[Any]] = {}
    for given in object_ids:
        given_for.setdefault(_stored_key(field, given), []).append(given)
    found = load(list(given_for))
    # The keys of ``found`` are the stored _id values as the driver decodes them (a uuid.UUID
    # under uuidRepresentation="standard"): back to the stored form to find the ids given.
    return {
        given: document
        for key, document in found.items()
        for given in given_for.get(_stored_key(field, key), ())
    }


def _stored_key(field: Any, given: Any) -> Any:
    """``given``, a key of ``field`` in any form it takes, in stored form; not a key at all:
    as it is (as MongoEngine sends it, it matches nothing)."""
    try:
        value = field.to_python(given)
        field.validate(value)
        return field.to_mongo(value)
    except ValidationError:
        return given


def distinct_values(document_class: type[Document], path: str, values: list[Any]) -> list[Any]:
    """``values`` of ``distinct(path)`` as the field's values, if ``path`` names a generated
    field, or a list or map of one."""
    field = seam.values_field_at(document_class, path)
    if not seam.is_generated(field):
        return values
    return [field.to_python(value) for value in values]
