"""The one place that touches MongoEngine's internals.

Everything the write path needs of MongoEngine beyond its public API is named here and checked
when this module is imported: the methods it wraps or calls (:data:`INTERNALS`, with their
parameters) and the attributes it reads as data (:data:`DATA_ATTRIBUTES` and its siblings). A
MongoEngine that lacks one (or changed its parameters) fails at import with an error naming
its version, not with a wrong write later. The rest of the package reaches MongoEngine's
internals only through the functions below; the wrappers this module installs (in
:mod:`.save`, :mod:`.bulk`, :mod:`.upsert`, :mod:`.references`, :mod:`.queryset`) call the
method they replace, the model's own or its parent's.

How the package plugs in, per model class (never globally, but for two class-creation hooks on
``Document``, one for ``drop_collection`` and one added the first time an embedded document
declares a generated field, one on ``EmbeddedDocument`` that checks the classes made
(:func:`_check_embedded`), the two places MongoEngine makes a queryset,
``SortedListField.to_mongo``, and the reference fields' methods of the last item):

* ``_save_create`` and ``_save_update``, the two steps of ``Document.save()`` that write, are
  wrapped on the class that declares a generated field: by then ``pre_save``, ``validate()``
  and ``pre_save_post_validation`` have run, so the values are filled in right before the
  write, with the write's own collection (:mod:`.save`); so is ``_get_update_doc``, the update
  ``_save_update`` sends (an upsert), which sets the generated values it does not write on
  insert; so are ``_object_key`` and ``delete``, which first settle a document whose insert
  lost its reply, ``update``, which gives new embedded documents values, and ``__getstate__``
  and ``__setstate__``, so that a pickled or copied document keeps the record of the fields a
  projection left out of it; ``drop_collection`` forgets what was cached of the collection;
* its querysets (made generating where MongoEngine makes them: :func:`hook_queryset_makers`)
  get ``insert()`` (:mod:`.bulk`), ``update()`` and ``modify()``
  (:mod:`.upsert`), ``in_bulk()`` and ``distinct()`` (:mod:`.references`), and records which
  fields a projection loaded (:func:`note_loaded`);
* ``_from_son``, which builds loaded documents: the embedded documents their dynamic
  attributes hold are loaded ones (:func:`note_loaded_dynamic`), and a key read in another
  form than its field's is recorded (:func:`note_stored_key`; :mod:`.references`); and
  ``from_json`` (also the queryset's), whose documents take a key the JSON holds as text or a
  number as a value of the field (:func:`note_json_key`);
* on the class that declares a generated primary key stored in another form than its value
  (a UUID), ``to_mongo`` and ``to_dbref`` are wrapped so that they give the key in stored form;
* when the first UUID field of the package is made, these methods of MongoEngine's reference
  and dict fields and ``DeReference.__call__`` are wrapped, once (:func:`hook_reference_fields`):
  ``to_python`` of ``ReferenceField``, ``LazyReferenceField`` and ``GenericReferenceField`` (a
  stored DBRef), ``to_mongo`` of ``ReferenceField`` (a DBRef made by hand from the key),
  ``prepare_query_value`` of ``CachedReferenceField``, ``to_mongo`` and
  ``build_lazyref`` of ``GenericLazyReferenceField``, ``prepare_query_value`` of ``DictField``
  (a query of one key's value: ``refs__x=``), and the DBRefs ``distinct()`` hands to
  ``DeReference``. They act only on references to a model keyed by such a field
  (:func:`uuid_key`; ``ReferenceField.to_mongo``, by any field of the package), and on
  values of the package's fields that a cached reference or a path into a map sends; anything
  else gets what MongoEngine's own method returns, unchanged.

References rely on MongoEngine building a reference's DBRef from the referenced model's
``id.to_python(stored)`` (``ReferenceField``, ``LazyReferenceField``, ``CachedReferenceField``)
and on nothing else in MongoEngine reading a model's key field as a class attribute
(:func:`key_for_references`); the places that take the key from elsewhere (a stored DBRef, the
document's ``pk``) are the wrapped methods above. The signatures are checked below, the
behaviour by ``tests/test_references.py``.
"""

from __future__ import annotations

import dataclasses
import datetime
import functools
import inspect
import uuid
import weakref
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, Literal, TypeGuard, TypeVar, cast, overload

import mongoengine
from bson import DBRef, ObjectId
from bson.binary import Binary
from bson.son import SON
from mongoengine.base import BaseDocument, BaseField, BaseList, ComplexBaseField
from mongoengine.base.common import _document_registry, get_document
from mongoengine.connection import DEFAULT_CONNECTION_NAME, get_db
from mongoengine.context_managers import set_write_concern as set_write_concern
from mongoengine.dereference import DeReference
from mongoengine.document import (
    Document,
    DynamicDocument,
    DynamicEmbeddedDocument,
    EmbeddedDocument,
)
from mongoengine.errors import NotRegistered
from mongoengine.fields import (
    CachedReferenceField,
    DictField,
    DynamicField,
    EmbeddedDocumentField,
    GenericEmbeddedDocumentField,
    GenericLazyReferenceField,
    GenericReferenceField,
    LazyReferenceField,
    ListField,
    MapField,
    ReferenceField,
    SequenceField,
    SortedListField,
    StringField,
)
from mongoengine.queryset import QuerySet, QuerySetManager, transform
from mongoengine.queryset.base import BaseQuerySet
from mongoengine.queryset.field_list import QueryFieldList
from pymongo import ReadPreference, WriteConcern
from pymongo.read_concern import ReadConcern

from ..constants import COUNTERS_COLLECTION
from ..resets import ProcessLock, collection_dropped
from ..stored import StoredUUID, StoredUUIDText

if TYPE_CHECKING:
    from .field import GeneratedField

# -- what is relied on, checked at import ----------------------------------------------------------

#: (owner, attribute, the parameters it must take after self/cls, in order).
INTERNALS: tuple[tuple[Any, str, tuple[str, ...]], ...] = (
    (Document, "_save_create", ("doc", "force_insert", "write_concern")),
    (Document, "_save_update", ("doc", "save_condition", "write_concern")),
    (Document, "_get_update_doc", ()),
    (Document, "_integrate_shard_key", ("doc", "select_dict")),
    (Document, "_get_collection", ()),
    (Document, "_get_collection_name", ()),
    (Document, "_get_db", ()),
    (Document, "_mark_as_changed", ("key",)),
    (Document, "update", ("kwargs",)),
    (Document, "delete", ("signal_kwargs", "write_concern")),
    (Document, "drop_collection", ()),
    (BaseDocument, "_get_changed_fields", ()),
    (Document, "to_dbref", ()),
    (BaseDocument, "to_mongo", ("use_db_field", "fields")),
    (BaseDocument, "_from_son", ("son", "_auto_dereference", "created")),
    (BaseDocument, "from_json", ("json_data", "created")),
    (BaseDocument, "_lookup_field", ("parts",)),
    (BaseDocument, "__getstate__", ()),
    (BaseDocument, "__setstate__", ("data",)),
    (BaseField, "__get__", ("instance", "owner")),
    (ReferenceField, "to_mongo", ("document",)),
    (ReferenceField, "to_python", ("value",)),
    (LazyReferenceField, "to_python", ("value",)),
    (CachedReferenceField, "to_python", ("value",)),
    (CachedReferenceField, "prepare_query_value", ("op", "value")),
    (GenericLazyReferenceField, "to_mongo", ("document",)),
    (GenericLazyReferenceField, "build_lazyref", ("value",)),
    (GenericReferenceField, "to_python", ("value",)),
    (DynamicField, "to_python", ("value",)),
    (DictField, "prepare_query_value", ("op", "value")),
    (SortedListField, "to_mongo", ("value", "use_db_field", "fields")),
    (DeReference, "__call__", ("items", "max_depth", "instance", "name")),
    (BaseQuerySet, "insert", ("doc_or_docs", "load_bulk", "write_concern", "signal_kwargs")),
    (BaseQuerySet, "update", ("upsert", "multi", "write_concern", "read_concern")),
    (BaseQuerySet, "modify", ("upsert", "full_response", "remove", "new")),
    (BaseQuerySet, "upsert_one", ("write_concern", "read_concern")),
    (BaseQuerySet, "in_bulk", ("object_ids",)),
    (BaseQuerySet, "from_json", ("json_data",)),
    (BaseQuerySet, "distinct", ("field",)),
    (BaseQuerySet, "__next__", ()),
    (BaseQuerySet, "__getitem__", ("key",)),
    (BaseQuerySet, "_clone_into", ("new_qs",)),
    (QuerySetManager, "__get__", ("instance", "owner")),
    (transform, "update", ("_doc_cls",)),
    (transform, "query", ("_doc_cls",)),
)
#: Query operators matching text (MongoEngine's own list): a value given to one is not a key.
STRING_OPERATORS: tuple[str, ...] = tuple(transform.STRING_OPERATORS)

#: Attributes read as data, by what has them. Document instances:
DATA_ATTRIBUTES = (
    "_data",
    "_created",
    "_changed_fields",
    "_fields",
    "_meta",
    "_instance",
    "_class_name",
)
#: Document classes (a ``DynamicDocument``'s ``_dynamic`` is true):
CLASS_ATTRIBUTES = ("_subclasses", "_dynamic", "_fields", "_meta", "_class_name")
#: Fields (``_ordering``: a ``SortedListField``'s):
FIELD_ATTRIBUTES = ("_auto_gen",)
#: Querysets (``_query`` and ``_collection`` are properties), and ``ONLY``/``EXCLUDE`` and
#: ``as_dict()`` of QueryFieldList:
QUERYSET_ATTRIBUTES = (
    "_document",
    "_query",
    "_collection",
    "_collection_obj",
    "_loaded_fields",
    "_ordering",
)


def check_internals() -> None:
    """Raise ImportError if the installed MongoEngine lacks an internal this package uses."""
    problems = []
    for owner, name, parameters in INTERNALS:
        function = getattr(owner, name, None)
        if function is None:
            problems.append(f"{getattr(owner, '__name__', owner)}.{name} is missing")
            continue
        found = [p for p in inspect.signature(function).parameters if p not in ("self", "cls")]
        if tuple(found[: len(parameters)]) != parameters:
            problems.append(f"{owner.__name__}.{name}{tuple(found)}, expected {parameters}")
    problems.extend(_missing_attributes())
    if not hasattr(QueryFieldList, "ONLY") or not hasattr(QueryFieldList, "as_dict"):
        problems.append("QueryFieldList.ONLY / as_dict() is missing")
    for name in ("_qs", "_object_key"):
        if not isinstance(vars(Document).get(name), property):
            problems.append(f"Document.{name} is not a property")
    if not isinstance(getattr(mongoengine.connection, "_connections", None), dict):
        problems.append("mongoengine.connection._connections is not a dict")
    if problems:
        raise ImportError(
            f"mongoengine-ids does not support MongoEngine {mongoengine.__version__}: "
            + "; ".join(problems)
            + " (supported: 0.27 to 0.29)"
        )


def _missing_attributes() -> list[str]:
    """The data attributes of :data:`DATA_ATTRIBUTES` and its siblings that a throwaway
    document, its class, fields and queryset lack."""
    document = _probe_document()
    queryset = BaseQuerySet(type(document), None)
    sorted_list = SortedListField(StringField(), ordering="name")
    found = [
        *(("a document", name, hasattr(document, name)) for name in DATA_ATTRIBUTES),
        *(("a document class", name, hasattr(type(document), name)) for name in CLASS_ATTRIBUTES),
        *(("a field", name, hasattr(StringField(), name)) for name in FIELD_ATTRIBUTES),
        ("a SortedListField", "_ordering", hasattr(sorted_list, "_ordering")),
        *(
            ("a queryset", name, name in vars(queryset) or hasattr(BaseQuerySet, name))
            for name in QUERYSET_ATTRIBUTES
        ),
    ]
    return [f"{what} has no {name}" for what, name, present in found if not present]


def _probe_document() -> BaseDocument:
    """An embedded document of a throwaway class: enough to see the attributes MongoEngine
    gives every document instance."""

    class _Probe(EmbeddedDocument):  # type: ignore[misc]
        meta = {"allow_inheritance": False}

    return _Probe()


check_internals()

update_operations = transform.update


#: What MongoEngine reads as a comparison operator at the end of an update keyword.
_COMPARISON_OPERATORS: Final = frozenset(transform.COMPARISON_OPERATORS)


def update_path(name: str) -> str:
    """``name``, a field's path in an update keyword (``part__code``), as MongoEngine reads it
    back: a last part named like one of its comparison operators (``part__type``) escaped with
    a trailing ``__`` (review BX), which a top-level name needs not (nor a name ending in
    ``_``, which the escape would break: review CA-3)."""
    parts = name.split("__")
    return f"{name}__" if len(parts) > 1 and parts[-1] in _COMPARISON_OPERATORS else name


def update_operator(key: str) -> str:
    """The operator of an update keyword (``push__tags`` -> ``push``); a key without one is a
    ``set``, as MongoEngine reads it."""
    head = key.split("__", 1)[0]
    return head if head in transform.UPDATE_OPERATORS else "set"


def acknowledged(collection: Any, write_concern: dict[str, Any] | None) -> bool:
    """Whether a write to ``collection`` with MongoEngine's ``write_concern`` option (added to
    the collection's own, as MongoEngine adds it) is acknowledged: not ``w=0``, whose result
    says nothing of what it wrote."""
    if write_concern and "w" in write_concern:
        return bool(write_concern["w"] != 0)
    return bool(collection.write_concern.acknowledged)


def acknowledging(collection: Any) -> Any:
    """``collection``, or, if its writes are not acknowledged (``w=0``), the same collection
    with ``w=1``."""
    if acknowledged(collection, None):
        return collection
    return collection.with_options(write_concern=WriteConcern(w=1))


def acknowledging_queryset(queryset: Any) -> Any:
    """``queryset``, or, if its collection's writes are not acknowledged (``w=0``), a clone
    writing to the same collection with ``w=1`` (``modify()`` has no ``write_concern``)."""
    collection = acknowledging(queryset._collection)
    if collection is queryset._collection:
        return queryset
    clone = queryset.clone()
    clone._collection_obj = collection
    return clone


def condition_filter(document_class: type[BaseDocument], condition: Any) -> dict[str, Any]:
    """``save(save_condition=...)`` (MongoEngine's query keywords) as a filter."""
    return {} if condition is None else dict(transform.query(document_class, **condition))


def _options_of(method: Callable[..., Any]) -> tuple[str, ...]:
    """The parameters of a queryset write method after ``upsert``, in order (the update itself
    comes as keywords after them)."""
    return tuple(
        parameter.name
        for parameter in inspect.signature(method).parameters.values()
        if parameter.kind is parameter.POSITIONAL_OR_KEYWORD
        and parameter.name not in ("self", "upsert")
    )


#: The options of MongoEngine's ``QuerySet.update()`` and ``modify()``, in the installed order.
UPDATE_OPTIONS = _options_of(BaseQuerySet.update)
MODIFY_OPTIONS = _options_of(BaseQuerySet.modify)

# -- documents ----------------------------------------------------------------------------------


def data(document: BaseDocument) -> dict[str, Any]:
    """The document's values by field name, in Python form (MongoEngine's ``_data``)."""
    return document._data  # type: ignore[no-any-return]


def is_new(document: BaseDocument) -> bool:
    """Whether ``save()`` will insert the document (MongoEngine's ``_created``)."""
    return bool(document._created)


def keys(documents: list[Any]) -> list[Any]:
    """The primary keys of documents of one model (or its subclasses), in Python form."""
    if not documents:
        return []
    name = shape(type(documents[0])).pk_name  # subclasses keep the model's key
    return [document._data.get(name) for document in documents]


def key(document: BaseDocument) -> Any:
    """The document's primary key, in Python form (None if unset)."""
    return document._data.get(shape(type(document)).pk_name)


def set_key(document: BaseDocument, stored: Any) -> None:
    """Give ``document`` the ``_id`` the driver made for it, as it is, as MongoEngine's
    ``insert()`` does (``doc.pk = inserted_id``: a key field does not convert it)."""
    document._data[shape(type(document)).pk_name] = stored


#: Set on a document the write path stored (see :func:`never_stored`): ``(key,)``, the key it
#: was stored under (see :func:`key_changed`).
_WRITTEN = "_mongoengine_ids_written"


def mark_written(documents: Iterable[BaseDocument], *, settle: bool = False) -> None:
    """The documents are in the database now: a later ``save()`` updates each. With
    ``settle``, their write is known to be settled too (:meth:`State.settle`)."""
    for document in documents:
        # What BaseDocument.__setattr__ does for a name starting with "_" that is not the key.
        object.__setattr__(document, "_created", False)
        object.__setattr__(document, _WRITTEN, (key(document),))
        if (found := getattr(document, _STATE, None)) is not None:
            found.stored_key = None  # stored under its key as its field writes it
            if settle:
                found.settle()


def settle_new(document: BaseDocument) -> None:
    """The write of the new ``document`` (an embedded one an update left unwritten) is settled
    (:meth:`State.settle`); it stays new."""
    if (found := getattr(document, _STATE, None)) is not None:
        found.settle()


def writes_whole(document: BaseDocument) -> bool:
    """Whether MongoEngine's update of ``document`` writes all it holds, not what changed: a
    document it never loaded nor saved (its ``insert()`` does not mark them), which it takes as
    stored once its key is assigned."""
    return not hasattr(document, "_changed_fields")


def key_changed(document: BaseDocument) -> bool:
    """Whether the key of ``document``, a stored one, is not the one it was loaded or stored
    with: its update would write it under another key. (A document that records no changes,
    which ``insert()`` wrote, is compared with the key it was written under.)"""
    written = getattr(document, _WRITTEN, None)
    if not writes_whole(document) and not (written is None and _built_new(document)):
        return "_id" in changed(document)
    return isinstance(written, tuple) and written[0] != key(document)


def never_stored(document: BaseDocument) -> bool:
    """Whether ``document`` was never loaded nor stored: MongoEngine takes it as stored only
    because its key was assigned after it was built (or it was made with ``_created=False``)."""
    return (writes_whole(document) or _built_new(document)) and not getattr(
        document, _WRITTEN, False
    )


def _built_new(document: BaseDocument) -> bool:
    return bool(getattr(document, _BUILT_NEW, False))


#: Set on a document MongoEngine's ``_from_son(created=True)`` built (see :func:`built_new`).
_BUILT_NEW = "_mongoengine_ids_built_new"


def built_new(document: BaseDocument) -> None:
    """``document`` was built as new by MongoEngine's ``_from_son(created=True)`` (as
    ``from_json(created=True)`` does), which records its changes from the start, as a loaded
    one's: a key assigned to it after is no change of a stored document's key, and it was
    never stored (:func:`never_stored`), as one the constructor built."""
    object.__setattr__(document, _BUILT_NEW, True)


def mark_new(document: BaseDocument) -> None:
    """The document is not in the database (any more): ``save()`` and ``insert()`` insert it."""
    object.__setattr__(document, "_created", True)


def mark_changed(document: BaseDocument, name: str) -> None:
    """Make ``save()`` of an existing document write field ``name``."""
    document._mark_as_changed(name)


def changed_here(document: BaseDocument) -> Iterable[str]:
    """The fields of ``document`` itself that the user changed (db field names; not those
    inside its embedded documents)."""
    return getattr(document, "_changed_fields", ())


def changed(document: BaseDocument) -> list[str]:
    """The paths the user changed since the document was loaded or saved (dotted db field
    names, with those inside embedded documents), as ``save()`` will write them."""
    return list(document._get_changed_fields())


def id_field(document_class: type[BaseDocument]) -> str | None:
    """The name of the primary key field (None for embedded documents)."""
    return document_class._meta.get("id_field")  # type: ignore[no-any-return]


def values_field_at(document_class: Any, path: str) -> Any:
    """The field whose values the dotted ``path`` names, as ``distinct()`` returns them: the
    items' field of a list or map (``tags``, ``codes.a``); None for a path that leads nowhere.
    A path may name fields by their stored names (``db_field``, ``_id``), as MongoEngine's
    ``distinct()`` passes it, or by their names; it is read through subclasses, generic
    choices and cached references (see :func:`_fields_at`)."""
    kind = document_class if isinstance(document_class, type) else type(document_class)
    if not issubclass(kind, BaseDocument):  # not a document (DeReference's instance: None)
        return None
    found = _fields_at(kind, path, names=True)
    return items_field(found[0][2]) if found else None


def is_list_at(document_class: Any, path: str) -> bool:
    """Whether the dotted ``path`` (by names or stored names, list indexes left out) of
    ``document_class`` leads to a list field: a digit step after it is an item's index, where
    after a map it is a key."""
    found = _fields_at(document_class, path, names=True) if path else []
    return bool(found) and isinstance(found[0][2], ListField)


def items_field(field: Any) -> Any:
    """The field of the items of a list or map field (at any depth); any other field itself."""
    while isinstance(field, (ListField, DictField)):
        field = field.field
    return field


def stored_pk(document: Any) -> Any:
    """The primary key of a Document in stored form (None if unset or not a Document)."""
    if not isinstance(document, Document):
        return None
    name = id_field(type(document))
    value = document._data.get(name) if name else None
    return None if value is None else pk_field(type(document)).to_mongo(value)


def collection_of(document: BaseDocument) -> Any:
    """The collection ``save()`` writes ``document`` to, read on the primary (:func:`primary`)."""
    return primary(document._get_collection())


def class_collection(document_class: type[Document]) -> Any:
    """The collection of a model class (follows ``db_alias`` and ``switch_db``), read on the
    primary (:func:`primary`)."""
    return primary(document_class._get_collection())


def primary(collection: Any) -> Any:
    """``collection``, its reads sent to the primary whatever the read preference of the
    connection, database or model: the write path reads to decide what it writes (whether a
    value is taken, whether an insert landed, which values to give back), and a secondary may
    lack a write just applied. The read concern is ``local``: a ``majority`` read misses a
    write the primary applied but has not replicated yet, the very state of a write whose
    reply was lost or whose write concern timed out (probe AT: the retry took its own insert
    for another document's, and stored a second copy). Its write concern and codecs are
    kept."""
    if collection.read_preference == ReadPreference.PRIMARY and (
        collection.read_concern.level in (None, "local")
    ):
        return collection
    return collection.with_options(
        read_preference=ReadPreference.PRIMARY, read_concern=ReadConcern("local")
    )


def class_filter(document_class: type[Document]) -> dict[str, Any]:
    """The filter MongoEngine adds to a model's queries to keep to the model and its subclasses
    (``_cls``, as ``BaseQuerySet.__init__`` builds it); {} for a model without inheritance."""
    if document_class._meta.get("allow_inheritance") is not True:
        return {}
    names = list(document_class._subclasses)
    return {"_cls": names[0] if len(names) == 1 else {"$in": names}}


def replaced_by(document: Document) -> dict[str, Any] | None:
    """The filter by which MongoEngine's ``save()`` of a new ``document`` with a key replaces
    the document stored under it: the key, and the shard key's values (on a sharded cluster,
    a key is unique per shard only). None if a value of the shard key is still to be made:
    then no stored document holds it, and the save inserts."""
    if not shard_key(type(document)):
        return {"_id": stored_pk(document)}
    try:
        select = document._integrate_shard_key(document.to_mongo(), {"_id": stored_pk(document)})
    except (KeyError, TypeError):
        return None
    return dict(select)


def shard_key(document_class: type[BaseDocument]) -> tuple[str, ...]:
    """The paths of the model's ``meta["shard_key"]`` (MongoEngine adds them to the filter of
    the update of a stored document, from the document it serialised)."""
    return tuple(document_class._meta.get("shard_key", ()))


def field_of(document_class: type[BaseDocument], name: str) -> Any:
    """The field ``name`` of ``document_class`` (None if it has none)."""
    return document_class._fields.get(name)


def field_in_family(kind: type[BaseDocument], name: str) -> Any:
    """The field ``name`` of ``kind``, or of the first class derived from it that declares one
    (an embedded document loaded without its ``_cls`` may be stored as one: a projection
    records its fields too); None if none does."""
    return next((f for each in with_subclasses(kind) if (f := field_of(each, name))), None)


def read_field(document_class: type[BaseDocument], field: Any, name: str) -> Any:
    """The field ``name`` of ``document_class`` that its generated ``field`` reads (one of its
    ``depends_on``: a counter's scope). Every path reads it so, and refuses alike a scope
    naming no declared field (a typo, or a dynamic attribute).

    Raises:
        ValueError: ``document_class`` declares no field ``name``.
    """
    found = document_class._fields.get(name)
    if found is None:
        kind = document_class.__name__
        raise ValueError(
            f"{kind}.{field.name} has scope={name!r}, which is not a field of {kind}: expected "
            f"one of {sorted(document_class._fields)} (a dynamic attribute cannot be a scope)"
        )
    return found


def fields(document_class: type[BaseDocument]) -> dict[str, Any]:
    """The fields of ``document_class``, by name (MongoEngine's own dict: not to be changed)."""
    return cast("dict[str, Any]", document_class._fields)


def is_abstract(document_class: type[BaseDocument]) -> bool:
    """Whether ``document_class`` is abstract (``Document`` itself is): no collection of its
    own."""
    return bool(document_class._meta.get("abstract"))


def update_doc(document: Document) -> dict[str, Any]:
    """The update MongoEngine's ``save()`` of the stored ``document`` would send now (its
    ``_get_update_doc()``, wrapped to set generated values on insert)."""
    return cast("dict[str, Any]", document._get_update_doc())


def db_alias(document_class: type[BaseDocument]) -> str:
    """The connection alias of ``document_class`` (its ``meta["db_alias"]``, or the default)."""
    return str(document_class._meta.get("db_alias", DEFAULT_CONNECTION_NAME))


def forget_collection(document_class: type[Document]) -> None:
    """Make ``document_class`` look its collection up again on next use (after a disconnect:
    MongoEngine's own reset misses a model whose class name another model reused)."""
    document_class._collection = None


def is_generated(field: Any) -> TypeGuard[GeneratedField]:
    """Whether ``field`` is a field of this package."""
    from .field import GeneratedField

    return isinstance(field, GeneratedField)


def holds_generated(field: Any) -> bool:
    """Whether ``field`` is a field of this package, or a list or map of its values (at any
    depth)."""
    return is_generated(items_field(field))


def pk_field(document_class: type[BaseDocument]) -> Any:
    """The primary key field of a model class."""
    return document_class._fields[id_field(document_class) or "id"]


def generated_key(document_class: Any) -> GeneratedField | None:
    """The primary key field of ``document_class`` if it is a field of this package (also of an
    abstract model, which MongoEngine gives no ``id_field``); None for any other class or key."""
    from .field import GeneratedField

    meta = getattr(document_class, "_meta", None)
    if meta is None:
        return None
    name = meta.get("id_field")
    if name is not None:
        field = document_class._fields.get(name)
    else:
        field = next((f for f in document_class._fields.values() if f.primary_key), None)
    return field if isinstance(field, GeneratedField) and field.primary_key else None


def uuid_key(document_class: Any) -> GeneratedField | None:
    """The primary key field of ``document_class`` if it is a generated field stored in another
    form than its value (a UUID key of this package); None for any other class or key."""
    field = generated_key(document_class)
    return field if field is not None and field.stored_form_differs else None


def uuid_keyed_models_of(collection_name: str) -> list[type[Document]]:
    """The models stored in ``collection_name`` whose key is a UUID of this package
    (:func:`uuid_key`), one per key field (a model and its subclasses share theirs)."""
    registered = tuple(_document_registry.values())  # a model made again replaces its entry
    return _uuid_keyed_models(registered).get(collection_name, [])


def collection_user(name: str, database: Any) -> str | None:
    """What keeps documents of its own in the collection ``name`` of ``database``, said for a
    message; None if nothing registered does: a model stored there (on that database, by its
    ``db_alias``) that could not load other documents (not dynamic, ``strict``, without the
    fields ``ns`` and ``at`` of a reservation: its queries would raise), or the counters of a
    ``SequenceField`` (MongoEngine's or this package's, by name whatever the database)."""
    if name == COUNTERS_COLLECTION:  # MongoEngine's SequenceField's default (and ours)
        return "the counters of SequenceFields"
    for kind, field_name in _collection_users(tuple(_document_registry.values())).get(name, ()):
        if field_name is not None:
            return f"the counters of {kind.__name__}.{field_name}"
        if _database_name(kind) == database.name:
            return f"the collection of {kind.__name__}"
    return None


@functools.lru_cache(maxsize=1)
def _collection_users(
    registered: tuple[Any, ...],
) -> dict[str, list[tuple[type[BaseDocument], str | None]]]:
    """:func:`collection_user`'s candidates by collection name, the ``registered`` classes
    given: (a model that cannot load a reservation, None), (a class, its SequenceField)."""
    found: dict[str, list[tuple[type[BaseDocument], str | None]]] = {}
    for kind in registered:
        collection = kind._meta.get("collection")
        if issubclass(kind, Document) and collection and not _loads_any(kind):
            found.setdefault(collection, []).append((kind, None))
        for field_name, field in kind._fields.items():
            counters = getattr(field, "collection_name", None)
            if isinstance(counters, str) and (
                isinstance(field, SequenceField) or is_generated(field)
            ):
                found.setdefault(counters, []).append((kind, field_name))
    return found


def _loads_any(kind: type[BaseDocument]) -> bool:
    """Whether ``kind`` loads a reservation (``_id``, ``ns``, ``at``, ``by``) without raising."""
    declared = {field.db_field for field in kind._fields.values()}
    return bool(kind._dynamic) or kind._meta.get("strict") is False or {"ns", "at"} <= declared


def _database_name(kind: type[BaseDocument]) -> str | None:
    """The name of the database ``kind``'s ``db_alias`` is connected to; None if not."""
    try:
        return str(get_db(kind._meta.get("db_alias", DEFAULT_CONNECTION_NAME)).name)
    except mongoengine.connection.ConnectionFailure:
        return None


@functools.lru_cache(maxsize=1)
def _uuid_keyed_models(registered: tuple[Any, ...]) -> dict[str, list[type[Document]]]:
    """:func:`uuid_keyed_models_of` for every collection, the ``registered`` models given."""
    found: dict[str, dict[int, type[Document]]] = {}
    for kind in registered:
        collection = kind._meta.get("collection")
        field = uuid_key(kind) if issubclass(kind, Document) and collection else None
        if field is not None and not kind._meta.get("abstract"):
            found.setdefault(collection, {}).setdefault(id(field), kind)
    return {name: list(kinds.values()) for name, kinds in found.items()}


def referenced_class(reference_field: Any) -> Any:
    """The model a reference field refers to (None if its name is not registered yet)."""
    try:
        return reference_field.document_type
    except NotRegistered:
        return None


@dataclass(frozen=True)
class QuerySetParts:
    """What the write path reads of a queryset."""

    document_class: type[Document]
    collection: Any
    query: dict[str, Any]
    loaded: QueryFieldList
    #: The sort of ``order_by()`` (``modify()`` writes the first document in that order).
    ordering: Any = None


def parts(queryset: Any) -> QuerySetParts:
    """The model, collection (read on the primary: :func:`primary`), filter, projection and
    sort of ``queryset``."""
    return QuerySetParts(
        queryset._document,
        primary(queryset._collection),
        queryset._query,
        queryset._loaded_fields,
        queryset._ordering,
    )


def owner_of(field: Any) -> type[BaseDocument] | None:
    """The class MongoEngine made the owner of ``field`` (``BaseField.owner_document``).

    The class that declared it; for a field of an abstract base, the base, shared by every
    subclass; for a field of a plain mixin, the first ``Document`` made from the mixin.
    """
    return getattr(field, "owner_document", None)


def counter_prefix(owner: type[BaseDocument]) -> str:
    """The name MongoEngine's ``SequenceField.get_sequence_name()`` gives the counters of the
    fields ``owner`` owns: the collection of a concrete ``Document``, else the class name in
    snake case (an abstract base, an embedded document)."""
    if issubclass(owner, Document) and not owner._meta.get("abstract"):
        return str(owner._get_collection_name())
    class_name: str = owner._class_name
    return "".join(f"_{c}" if c.isupper() else c for c in class_name).strip("_").lower()


def collection_name(document_class: Any) -> str:
    """The collection ``document_class`` writes to now (a ``switch_collection()`` context's)."""
    return str(document_class._get_collection_name())


def default_database(owner: type[BaseDocument]) -> Any:
    """The database ``owner``'s documents go to without ``switch_db``: its ``meta["db_alias"]``
    for a ``Document``, the default alias for anything else (an embedded document)."""
    if issubclass(owner, Document):
        return owner._get_db()
    return get_db(DEFAULT_CONNECTION_NAME)


def index_specs(document_class: type[BaseDocument]) -> list[dict[str, Any]]:
    """The indexes MongoEngine creates for ``document_class``: ``meta["indexes"]`` with the
    unique indexes of its fields merged in (``{"fields": [(name, direction)], ...options}``)."""
    return list(document_class._meta.get("index_specs") or [])


_TEXT = StringField()


def text_query(op: str, value: str) -> Any:
    """The query value of a string operator (:data:`STRING_OPERATORS`) as a ``StringField``
    makes it: a regex (``startswith`` escapes ``value``; ``regex`` takes it as a pattern)."""
    return _TEXT.prepare_query_value(op, value)


def connected_clients() -> list[Any]:
    """The clients of MongoEngine's connections: ``connect()``'s, until ``disconnect()``."""
    return list(mongoengine.connection._connections.values())


def auto_create_index(document_class: type[BaseDocument]) -> bool:
    return bool(document_class._meta.get("auto_create_index", True))  # as MongoEngine reads it


@dataclass(frozen=True)
class Shape:
    """What the write path needs to know of a document class, worked out once."""

    #: The (name, field) pairs whose values this package generates.
    generated: tuple[tuple[str, GeneratedField], ...]
    #: Whether the primary key is one of them.
    generates_pk: bool
    #: The fields whose values may hold embedded documents (None: any, a dynamic document).
    embedding: tuple[str, ...] | None
    #: Whether the class (or a base) overrides MongoEngine's ``to_mongo()``.
    serialises_itself: bool
    #: Whether an unset primary key is left to the driver, which makes an ObjectId ``_id``,
    #: and the write path can make it first: a ``Document``'s key generated neither here nor
    #: by MongoEngine (``_auto_gen``), whose field sends an ObjectId as it is.
    pk_left_to_driver: bool
    #: The name of the primary key field ("id" for an embedded document, which has none).
    pk_name: str
    #: The fields whose values may hold referenced documents (None: any, a dynamic document).
    referencing: tuple[str, ...] | None
    #: The (name, field) of each field, by its db field name (the stored name).
    by_db_field: dict[str, tuple[str, BaseField]]
    #: A dynamic class: the db fields of its generated fields, and of the fields they read,
    #: that differ from their names, with those names (see :func:`shadowing`).
    guarded: dict[str, str]


_SHAPE = "_mongoengine_ids_shape"


def shape(document_class: type[BaseDocument]) -> Shape:
    """The :class:`Shape` of ``document_class`` (its fields are fixed once it is made)."""
    found: Shape | None = document_class.__dict__.get(_SHAPE)  # its own, not a base class's
    if found is None:
        from .field import GeneratedField

        fields = document_class._fields
        generated = tuple(
            (name, field) for name, field in fields.items() if isinstance(field, GeneratedField)
        )
        pk = id_field(document_class)
        dynamic = document_class._dynamic
        found = Shape(
            generated,
            any(name == pk for name, _ in generated),
            None if dynamic else tuple(name for name, f in fields.items() if _may_embed(f)),
            _serialises_itself(document_class),
            issubclass(document_class, Document) and _keeps_object_ids(fields.get(pk or "id")),
            pk or "id",
            None if dynamic else tuple(name for name, f in fields.items() if _may_reference(f)),
            {f.db_field: (name, f) for name, f in reversed(fields.items())},
            _guarded(fields, generated) if dynamic else {},
        )
        setattr(document_class, _SHAPE, found)
    return found


def _guarded(fields: dict[str, Any], generated: tuple[tuple[str, Any], ...]) -> dict[str, str]:
    """The db fields of ``generated`` and of the fields they read that differ from their names
    (a dynamic attribute named so would be stored there), with those names."""
    read = (each for name, field in generated for each in (name, *field.depends_on))
    return {
        fields[name].db_field: name
        for name in read
        if name in fields and fields[name].db_field != name
    }


def shadowing(document: BaseDocument) -> tuple[str, str] | None:
    """A dynamic attribute of ``document`` named as the db field of a generated field, or of a
    field one reads (a scope), and the name of that field; None if none. MongoEngine stores
    dynamic attributes after the declared fields, under their names: its value would be
    stored over the one the write path made, or read as the scope."""
    guarded = shape(type(document)).guarded
    if guarded:
        for name in document._dynamic_fields:
            if name in guarded:
                return name, guarded[name]
    return None


#: Set on the ``to_mongo`` wrappers of :func:`hook_key`: the class's own method it calls (None:
#: MongoEngine's, through the base classes).
WRAPS_OWN = "_mongoengine_ids_wraps_own"


def _keeps_object_ids(field: Any) -> bool:
    """Whether a key field left unset is the driver's to fill (no value of its own, not
    ``_auto_gen``) and sends an ObjectId as it is (a ``StringField`` or ``IntField`` does; a
    ``DecimalField`` cannot take one, a ``UUIDField(binary=False)`` turns it into text)."""
    if field is None or field._auto_gen:
        return False
    probe = ObjectId()
    try:
        return bool(field.to_mongo(probe) == probe)
    except Exception:
        return False


#: MongoEngine's own document classes: any other in a model's MRO is the user's. (Not told by
#: its module: a class made by ``type()`` takes the module of MongoEngine's metaclass, which
#: made it; probe 40a.)
_MONGOENGINE_CLASSES: Final = frozenset(
    {BaseDocument, Document, DynamicDocument, EmbeddedDocument, DynamicEmbeddedDocument}
)


def _is_users(klass: type) -> bool:
    """Whether ``klass``, in the MRO of a document class, is the user's (a model, an embedded
    document, a mixin), not MongoEngine's nor ``object``."""
    return klass not in _MONGOENGINE_CLASSES and klass is not object


def base_defines(document_class: type[BaseDocument], name: str) -> bool:
    """Whether a base class of ``document_class`` other than MongoEngine's defines ``name``
    (a model's own step, which the package's wrapper on ``document_class`` calls)."""
    return any(name in vars(klass) and _is_users(klass) for klass in document_class.__mro__[1:])


def _serialises_itself(document_class: type[BaseDocument]) -> bool:
    """Whether a class in the MRO of ``document_class`` defines its own ``to_mongo()``."""
    for klass in document_class.__mro__:
        method = vars(klass).get("to_mongo")
        if method is None or not _is_users(klass):
            continue
        if getattr(method, WRAPS_OWN, True) is not None:
            return True  # the class's own, or this package's wrapper of it
    return False


def _may_embed(field: Any) -> bool:
    """Whether a field's value may hold embedded documents."""
    from mongoengine.base import ComplexBaseField

    if isinstance(field, (GenericEmbeddedDocumentField, DynamicField)) or any(
        True for _ in _embedded_types(field)
    ):
        return True
    if isinstance(field, ComplexBaseField):  # a list or dict: untyped, or of what it holds
        return field.field is None or _may_embed(field.field)
    return False


def _may_reference(field: Any) -> bool:
    """Whether a field's value may hold referenced documents."""
    from mongoengine.base import ComplexBaseField

    references = (ReferenceField, LazyReferenceField, GenericReferenceField, DynamicField)
    if isinstance(field, (*references, GenericLazyReferenceField, CachedReferenceField)):
        return True
    if isinstance(field, ComplexBaseField):  # a list or dict: untyped, or of what it holds
        return field.field is None or _may_reference(field.field)
    return False


def referenced_documents(document: BaseDocument) -> Iterator[Document]:
    """The documents ``document`` itself references (lists and dicts searched; not those
    inside its embedded documents)."""
    names = shape(type(document)).referencing
    data = document._data
    for value in data.values() if names is None else (data.get(name) for name in names):
        yield from _instances_in(value, Document)


def generated_fields(
    document_class: type[BaseDocument],
) -> tuple[tuple[str, GeneratedField], ...]:
    """The (name, field) pairs of ``document_class`` whose values this package generates."""
    return shape(document_class).generated


def generated_at(
    document_class: type[BaseDocument], path: str
) -> list[tuple[type[BaseDocument], str, GeneratedField]]:
    """The generated fields that a dotted db path of an update (``p.c``, ``parts.$.code``,
    ``by_key.k.code``) may lead to, through embedded documents, list items and map keys, each
    with the class that declares it and its name; [] if it leads to none. Each class the path
    may pass through counts (see :func:`_fields_at`): more than one field only when classes
    the path may reach declare different fields under one name."""
    from .field import GeneratedField

    return [
        (kind, name, field)
        for kind, name, field, item in _fields_at(document_class, path)
        if not item and isinstance(field, GeneratedField)
    ]


def embedded_field_at(document_class: type[BaseDocument], path: str) -> bool:
    """Whether a dotted db path leads to an ``EmbeddedDocumentField`` (not an item of a list)."""
    return any(
        not item and isinstance(field, EmbeddedDocumentField)
        for _, _, field, item in _fields_at(document_class, path)
    )


def generated_under(document_class: type[BaseDocument], path: str) -> list[str]:
    """What a value written whole at the dotted db ``path`` (an update pipeline's stage writes
    so; ``""``: the whole document, whose key no update changes) may replace or copy, said of
    each field: one that is generated (or holds a list or map of generated values), or that
    may hold embedded documents with generated fields, "holds generated values"; for the whole
    document, also one its generated fields read, "is a counter's scope". [] if none (a path
    no class declares, a dynamic attribute, is not known: see docs/guarantees.md). The fields
    that read the field at a path: :func:`reading_at`."""
    if not path:
        return [
            f"{kind.__name__}.{name} is a counter's scope"
            if name in scopes(kind)
            else f"{kind.__name__}.{name} holds generated values"
            for kind in with_subclasses(document_class)  # the documents its queryset matches
            for name, field in kind._fields.items()
            if name in scopes(kind)
            or (name != shape(kind).pk_name and (holds_generated(field) or embeds_generated(field)))
        ]
    return [
        f"{kind.__name__}.{name} holds generated values"
        for kind, name, field, _ in _fields_at(document_class, path)
        if holds_generated(field) or embeds_generated(field)
    ]


def shares_path(document_class: type[BaseDocument], path: str) -> bool:
    """Whether a dotted db path that leads to a generated field (see :func:`generated_at`) may
    also lead to another field (two classes a value there may be declare the name each)."""
    from .field import GeneratedField

    return any(
        item or not isinstance(field, GeneratedField)
        for _, _, field, item in _fields_at(document_class, path)
    )


def _fields_at(
    document_class: type[BaseDocument], path: str, *, names: bool = False
) -> list[tuple[type[BaseDocument], str, BaseField, bool]]:
    """What a dotted db path may lead to: each field it may name last (for an item, the list's
    or map's field of items) with the class declaring it, its name, and whether the path ends
    at an item (a list index, ``$``, a map key); [] if it leads nowhere. With ``names``, a
    step may also be a field's name (``pk`` the key's), and a cached reference's stored
    sub-document (its model's fields) is read too, as queries and ``distinct()`` name them.

    A step may be read in any class a value there may be: ``document_class`` or a subclass
    (the documents an update of its queryset matches), an embedded document's declared class
    or a subclass, any choice of a ``GenericEmbeddedDocumentField`` or a subclass, as
    MongoEngine resolves a path (``lookup_member``)."""
    steps = path.split(".")
    found: list[tuple[type[BaseDocument], str, BaseField, bool]] = []
    seen: set[int] = set()
    places = [(kind, 0) for kind in with_subclasses(document_class)]
    queued = set(places)  # each class at each step once: a field is inherited by many
    expanded: set[tuple[int, int]] = set()  # each field's classes once
    while places:
        kind, at = places.pop(0)
        named = _field_named(kind, steps[at], names)
        if named is None:
            continue
        name, field = named
        at += 1
        item = False
        while at < len(steps) and isinstance(field, (ListField, MapField, DictField)):
            step = steps[at]
            if isinstance(field, ListField) and not (step.isdigit() or step.startswith("$")):
                field = field.field  # a path into every item (a query's, distinct()'s)
                continue
            at += 1  # the item's index (or $), or the key
            field, item = field.field, True
        if at < len(steps):
            if (id(field), at) in expanded:
                continue
            expanded.add((id(field), at))
            for inner in _classes_held(field, cached=names):
                if (inner, at) not in queued:
                    queued.add((inner, at))
                    places.append((inner, at))
        elif field is not None and id(field) not in seen:  # a base's, inherited: once
            seen.add(id(field))
            found.append((kind, name, field, item))
    return found


def _field_named(kind: Any, step: str, names: bool) -> tuple[str, BaseField] | None:
    """The (name, field) of ``kind`` whose db field is ``step``; with ``names``, else the one
    named ``step`` (``pk``: the key); None if none is."""
    found = shape(kind).by_db_field.get(step)
    if found is not None or not names:
        return found
    name = kind._meta.get("id_field") if step == "pk" else step
    field = kind._fields.get(name)
    return None if field is None else (name, field)


def _classes_held(field: Any, *, cached: bool = False) -> list[type[BaseDocument]]:
    """The classes an embedded document held by ``field`` may be, subclasses included (none
    known for a ``GenericEmbeddedDocumentField`` without ``choices``, which MongoEngine does not
    resolve a path into either: only ``__raw__`` reaches it); with ``cached``, the model of a
    ``CachedReferenceField``, whose stored sub-document holds its fields' values."""
    if isinstance(field, EmbeddedDocumentField) or (
        cached and isinstance(field, CachedReferenceField)
    ):
        declared = [field.document_type]
    elif isinstance(field, GenericEmbeddedDocumentField):
        declared = [kind for kind in field.choices or () if isinstance(kind, type)]
    else:
        return []
    return list(dict.fromkeys(each for kind in declared for each in with_subclasses(kind)))


def reading_at(
    document_class: type[BaseDocument], path: str
) -> list[tuple[type[BaseDocument], str, GeneratedField]]:
    """The generated fields that read (``depends_on``) the field a dotted db ``path`` of an
    update names (a counter's scope), of the class that declares it or of its subclasses
    (which the documents written may be): (class, name, field) each, once per field; [] if
    none, or if the path ends at an item of a list or map."""
    seen: set[int] = set()
    reading = []
    for declaring, name, _, item in _fields_at(document_class, path):
        if item:
            continue
        for kind in with_subclasses(declaring):
            for each, field in shape(kind).generated:
                if name in field.depends_on and id(field) not in seen:
                    seen.add(id(field))
                    reading.append((kind, each, field))
    return reading


def reading_above(
    document_class: type[BaseDocument], path: str
) -> list[tuple[type[BaseDocument], str, GeneratedField]]:
    """The generated fields that read (``depends_on``) a field holding the value a dotted db
    ``path`` leads into (``place.city`` changes the scope ``place``), as :func:`reading_at`
    gives them for each shorter path; [] if none."""
    steps = path.split(".")
    found: dict[int, tuple[type[BaseDocument], str, GeneratedField]] = {}
    for end in range(1, len(steps)):
        for each in reading_at(document_class, ".".join(steps[:end])):
            found.setdefault(id(each[2]), each)
    return list(found.values())


def paths_to_hold(field: Any) -> list[str]:
    """The db paths a stored document must hold for ``field``'s value to be whole: its own, and,
    for an embedded document (or a list of them), those of the generated fields its declared
    class holds that every subclass generates too (a subclass's own, or one it declares plain,
    its documents lack). One level deep."""
    paths = [field.db_field]
    inner = field.field if isinstance(field, ListField) else field
    if isinstance(inner, EmbeddedDocumentField):
        kinds = with_subclasses(inner.document_type)
        for _, generated in shape(inner.document_type).generated:
            if all(_generates_at(kind, generated.db_field) for kind in kinds):
                paths.append(f"{field.db_field}.{generated.db_field}")
    return paths


#: How many times one embedded class may hold itself along a place :func:`places_of` gives
#: (a tree of ``Node.kids``: ``kids.*.kids.*`` ... to this depth).
PLACES_DEPTH: Final = 4


def places_of(
    document_class: type[BaseDocument], kind: type[BaseDocument]
) -> tuple[tuple[str, ...], ...]:
    """:func:`_places_of`, worked out once per pair of classes while no class is made (a new
    subclass may add places; review X: it was worked out again for every slot)."""
    made = _classes_made[0]
    known = _PLACES.get(document_class)
    if known is None:
        known = _PLACES[document_class] = {}
    found = known.get(kind)
    if found is None or found[0] is not made:
        found = known[kind] = (made, _places_of(document_class, kind))
    return found[1]


#: :func:`places_of` of a model class, by embedded class: (:data:`_classes_made` when worked
#: out, the places).
_PLACES: weakref.WeakKeyDictionary[type, dict[type, tuple[object, tuple[tuple[str, ...], ...]]]] = (
    weakref.WeakKeyDictionary()
)


def _places_of(
    document_class: type[BaseDocument], kind: type[BaseDocument]
) -> tuple[tuple[str, ...], ...]:
    """The stored steps (db field names; ``"*"``, any item of a list or map) at which documents
    of ``document_class`` hold embedded documents of ``kind`` or of a class it derives from or
    that derives from it, in typed fields at any depth (:data:`PLACES_DEPTH` levels of a
    class that holds itself). Places a field does not type (a ``DynamicField``, a list or
    map of anything, a dynamic document's attribute) are not among them."""
    family = {*with_subclasses(kind), *(b for b in kind.__mro__ if _derived_embedded(b))}
    found: list[tuple[str, ...]] = []

    def visit(holder: type[BaseDocument], prefix: tuple[str, ...], path: tuple[type, ...]) -> None:
        for field in holder._fields.values():
            steps, inner = (*prefix, field.db_field), field
            while isinstance(inner, ComplexBaseField) and inner.field is not None:
                steps, inner = (*steps, "*"), inner.field
            for each in _embedded_types(inner):
                embedded = registered(each) if isinstance(each, str) else each
                if embedded is None:
                    continue
                if embedded in family and steps not in found:
                    found.append(steps)
                for sub in with_subclasses(embedded):
                    if path.count(sub) < PLACES_DEPTH:  # a class that holds itself: a bound
                        visit(sub, steps, (*path, sub))

    visit(document_class, (), (document_class,))
    return tuple(found)


def _derived_embedded(kind: type) -> bool:
    """Whether ``kind`` is an embedded document class of the user's (not MongoEngine's)."""
    return issubclass(kind, EmbeddedDocument) and _is_users(kind)


def _generates_at(kind: type[BaseDocument], db_field: str) -> bool:
    found = shape(kind).by_db_field.get(db_field)
    return found is not None and is_generated(found[1])


def models_made_from(owner: type) -> list[type[Document]]:
    """The concrete models made from ``owner``, an abstract model or a plain mixin (whose
    fields MongoEngine copies into them); [] for any other class (a model, an embedded
    document)."""
    abstract_model = issubclass(owner, Document) and is_abstract(owner)
    if issubclass(owner, BaseDocument) and not abstract_model:
        return []
    return [
        kind
        for kind in with_subclasses(cast("type[BaseDocument]", owner))
        if issubclass(kind, Document) and not is_abstract(kind)
    ]


def is_dynamic(kind: type[BaseDocument]) -> bool:
    """Whether ``kind`` is a ``DynamicDocument`` (or ``DynamicEmbeddedDocument``): its
    documents hold any attribute."""
    return bool(kind._dynamic)


def document_classes() -> tuple[type[BaseDocument], ...]:
    """Every document class alive (models and embedded), MongoEngine's own left out, however
    it is named. MongoEngine's registry keeps one class per name, the last made: a model that
    another class's name hid (a test's scratch model, another module's ``Order``) is still in
    use, and was left unhooked, its embedded documents stored without their values (probe
    40a). Walked at each call (0.2 ms for 800 classes): only where an embedded class with
    generated fields is made; kept nowhere, so that a class dropped can be freed (review 152:
    a cache of every class kept every class ever made alive)."""
    return tuple(
        kind
        for root in (Document, EmbeddedDocument)
        for kind in with_subclasses(root)
        if _is_users(kind)
    )


#: A new object each time a document class is made (not the size of MongoEngine's registry,
#: which keeps one class per name; one assignment, so threads making classes together leave a
#: new one whatever their order): :func:`places_of` works its places out again.
_classes_made: list[object] = [object()]


def _class_made(cls: type) -> None:
    _classes_made[0] = object()


def with_subclasses(kind: type[BaseDocument]) -> list[type[BaseDocument]]:
    """``kind`` and every class derived from it, bases first."""
    found: dict[type[BaseDocument], None] = {}

    def visit(each: type[BaseDocument]) -> None:
        if each not in found:
            found[each] = None
            for sub in each.__subclasses__():
                visit(sub)

    visit(kind)
    return list(found)


def as_stored(value: Any) -> Any:
    """A value in stored form as the server keeps it and gives it back, so that values equal
    in the database compare (and name a counter) the same here, whichever path made them: a
    datetime to the millisecond, in UTC without a time zone (BSON has no finer, and stores
    UTC); a UUID key in this package's stored form (:class:`~mongoengine_ids.stored.StoredUUID`,
    :class:`~mongoengine_ids.stored.StoredUUIDText`, which a query or an update holds) as the
    plain ``Binary`` or ``str`` a document's ``to_mongo()`` gives and the server returns; the
    same inside a ``DBRef``, a dict (a generic reference's) or a list; a float zero unsigned."""
    if isinstance(value, datetime.datetime):
        if value.tzinfo is not None:
            value = value.astimezone(datetime.timezone.utc).replace(tzinfo=None)
        return value.replace(microsecond=value.microsecond // 1000 * 1000)
    if type(value) is float and value == 0.0:
        return 0.0  # -0.0, which the server matches as 0.0
    if isinstance(value, StoredUUID):
        return Binary(bytes(value), value.subtype)
    if isinstance(value, StoredUUIDText):
        return str.__str__(value)
    if isinstance(value, DBRef):
        fields = value.as_doc()
        ref, key, database = fields.pop("$ref"), fields.pop("$id"), fields.pop("$db", None)
        return DBRef(ref, as_stored(key), database, **fields)
    if isinstance(value, dict):
        return type(value)((name, as_stored(item)) for name, item in value.items())
    if isinstance(value, list):
        return [as_stored(item) for item in value]
    return value


def scope_form(field: Any, value: Any) -> Any:
    """A scope's value in stored form (:func:`as_stored`) as it names its counter. A generic
    reference comes as a document (its field's ``to_mongo()`` gives a ``SON`` of ``_cls``
    and ``_ref``) or as its stored dict (a backfill's, a raw update's, a ``no_dereference()``
    copy's): given as that ``SON`` both ways, else one scope named two counters, which handed
    out the same numbers (probe AI). An embedded document likewise: its stored dict is given
    as the ``SON`` its document's ``to_mongo()`` makes (probe AM: a stored dict given to
    ``set_next_value(scope=...)`` had named a second counter). Another field's dicts are left
    as they are (their counters keep their names)."""
    stored = as_stored(value)
    inner = items_field(field)
    if isinstance(inner, (GenericReferenceField, GenericLazyReferenceField)):
        return _as_reference_son(stored)
    if isinstance(inner, EmbeddedDocumentField):
        if _holds_plain_dict(stored):
            try:  # the documents it stands for, serialised as a document's scope is
                stored = as_stored(field.to_mongo(field.to_python(stored)))
            except Exception:  # not a document of the field's class: named as it comes
                return stored
        # A generic reference inside, at any depth (its field leaves a stored dict as it is).
        return _as_reference_son(stored)
    return stored


def holds_embedded(field: Any) -> bool:
    """Whether the values of ``field`` (or the items of its list or map) are embedded
    documents."""
    return isinstance(items_field(field), (EmbeddedDocumentField, GenericEmbeddedDocumentField))


def _holds_plain_dict(value: Any) -> bool:
    """Whether ``value`` is, or a list or map holds, a dict that is not a ``SON``."""
    if isinstance(value, list):
        return any(_holds_plain_dict(item) for item in value)
    if isinstance(value, SON):
        return False
    return isinstance(value, dict)


def _as_reference_son(value: Any) -> Any:
    if isinstance(value, dict) and value.keys() == {"_cls", "_ref"}:
        return SON([("_cls", value["_cls"]), ("_ref", value["_ref"])])
    if isinstance(value, list):
        return [_as_reference_son(item) for item in value]
    if isinstance(value, dict):  # a map of references
        return type(value)((key, _as_reference_son(item)) for key, item in value.items())
    return value


def generated_in(
    document_class: type[BaseDocument], path: str, value: Any, *, item: bool = False
) -> list[tuple[type[BaseDocument], str, GeneratedField, dict[str, Any], tuple[str, ...]]]:
    """The generated values inside ``value``, embedded documents in stored form (dicts) that an
    update writes at the dotted db ``path``, at any depth; with ``item``, ``value`` is an item
    added to the list at ``path``. Each as (class, field name, field, the stored embedded
    document holding it (its value may be None: a null written), steps to it as stored:
    ``"*"`` for any item of a list or map); [] if
    ``path`` leads to no embedded document (a generated field itself among them). A dict's
    ``_cls`` names its class (a subclass, or any for ``GenericEmbeddedDocumentField``); where
    no field is declared (a dynamic attribute, a ``DynamicField``, an untyped list or map),
    only a dict's ``_cls`` names one."""
    found: list[
        tuple[type[BaseDocument], str, GeneratedField, dict[str, Any], tuple[str, ...]]
    ] = []
    seen: set[tuple[int, int]] = set()
    fields: list[Any] = [each[2] for each in _fields_at(document_class, path)]
    if not fields and _in_cached_copy(document_class, path):
        # Only a cached reference's copy of another document's values, which that document's
        # own writes made (another class of the queryset declaring the path: read there).
        return []
    # A path no class declares (a dynamic attribute) holds any value: None, untyped.
    for field in fields or [None]:
        steps = tuple(path.split("."))
        if item and isinstance(field, (ListField, MapField, DictField)):
            field, steps = field.field, (*steps, "*")
        for each in _generated_inside(field, value, steps):
            if (id(each[2]), id(each[3])) not in seen:  # (a field, in one stored dict) once
                seen.add((id(each[2]), id(each[3])))
                found.append(each)
    return found


def _in_cached_copy(document_class: type[BaseDocument], path: str) -> bool:
    """Whether the dotted db ``path`` leads into what a ``CachedReferenceField`` stores: the
    copy of the referenced document's fields that MongoEngine's ``auto_sync`` updates
    (``set__owner__part=``), which :func:`_fields_at` does not enter (probe BC: read as an
    untyped path, the copy's embedded document was taken as a new one, its values claimed
    again, and the owner's ``save()`` raised after it was written)."""
    steps = path.split(".")
    return any(
        isinstance(field, CachedReferenceField)
        for end in range(1, len(steps))
        for _, _, field, _ in _fields_at(document_class, ".".join(steps[:end]))
    )


def _generated_inside(
    field: Any, value: Any, steps: tuple[str, ...]
) -> Iterator[tuple[type[BaseDocument], str, GeneratedField, dict[str, Any], tuple[str, ...]]]:
    from .field import GeneratedField

    # No field (a dynamic attribute, a path no class declares), a DynamicField, or the items of
    # an untyped list or map: any value; only a dict's _cls names an embedded document's class.
    untyped = field is None or isinstance(field, DynamicField)
    if isinstance(field, (ListField, MapField, DictField)) or (
        untyped and (isinstance(value, list) or (isinstance(value, dict) and "_cls" not in value))
    ):
        items = (
            value if isinstance(value, list) else value.values() if isinstance(value, dict) else ()
        )
        for inner in items:
            yield from _generated_inside(None if untyped else field.field, inner, (*steps, "*"))
        return
    kind = _embedded_class(field, value)
    if kind is None:
        return
    declared = set()
    for name, inner_field in kind._fields.items():
        declared.add(inner_field.db_field)
        stored = value.get(inner_field.db_field)
        if isinstance(inner_field, GeneratedField):
            if inner_field.db_field in value:  # None too: a null written, not a value left out
                yield kind, name, inner_field, value, steps
        elif stored is not None:
            yield from _generated_inside(inner_field, stored, (*steps, inner_field.db_field))
    if kind._dynamic:  # its dynamic attributes
        for key, stored in value.items():
            if key not in declared and key != "_cls":
                yield from _generated_inside(None, stored, (*steps, key))


def _held_through(field: Any) -> list[type[BaseDocument]]:
    """The embedded document classes ``field`` holds, through its lists and maps."""
    while isinstance(field, (ListField, MapField, DictField)):
        field = field.field
    return _classes_held(field)


def generated_named(document_class: type[BaseDocument], dotted: str) -> bool:
    """Whether ``dotted`` attribute names (``lines.no``: a list's or a map's items are not
    named) lead from ``document_class`` (or a subclass) through typed fields holding embedded
    documents (of a subclass, a generic choice too) to a generated field of one, as
    :func:`lacking_inside` names them."""
    *steps, last = dotted.split(".")
    kinds = with_subclasses(document_class)
    for step in steps:
        held: list[type[BaseDocument]] = []
        for kind in kinds:
            held.extend(_held_through(kind._fields.get(step)))
        kinds = list(dict.fromkeys(held))
    return bool(steps) and any(is_generated(kind._fields.get(last)) for kind in kinds)


def generated_paths(document_class: type[BaseDocument]) -> list[str]:
    """The dotted names :func:`generated_named` takes, to :data:`PLACES_DEPTH` steps of
    embedded documents (for a message listing them)."""
    found: set[str] = set()
    frontier: list[tuple[str, list[type[BaseDocument]]]] = [("", with_subclasses(document_class))]
    for _ in range(PLACES_DEPTH):
        below = []
        for prefix, kinds in frontier:
            held_by: dict[str, list[type[BaseDocument]]] = {}
            for kind in kinds:
                for name, field in kind._fields.items():
                    held_by.setdefault(name, []).extend(_held_through(field))
            for name, held in held_by.items():
                inner = list(dict.fromkeys(held))
                path = f"{prefix}{name}"
                found.update(
                    f"{path}.{each}"
                    for kind in inner
                    for each, field in kind._fields.items()
                    if is_generated(field)
                )
                if inner:
                    below.append((f"{path}.", inner))
        frontier = below
    return sorted(found)


def lacking_inside(
    field: Any, value: Any, path: str, name: str, embeds: dict[int, bool]
) -> Iterator[tuple[type[BaseDocument], str, GeneratedField, dict[str, Any], str, str]]:
    """The generated fields that the stored embedded documents in ``value`` (stored at the
    dotted db ``path`` in a field ``field`` named ``name``, dotted attribute names) lack (missing
    or null), at any depth, of the class each is (its ``_cls``): (class, field name, field, the
    embedded document as stored, its dotted db path, the field's dotted attribute name).
    ``embeds``: :func:`embeds_generated` of the fields met so far, by id (kept by the caller
    across the documents of one run)."""
    if isinstance(field, (ListField, MapField, DictField)):
        items = (
            enumerate(value)
            if isinstance(value, list)
            else (value.items() if isinstance(value, dict) else ())
        )
        for key, item in items:
            yield from lacking_inside(field.field, item, f"{path}.{key}", name, embeds)
        return
    kind = _embedded_class(field, value)
    if kind is None:
        return
    for inner_name, inner_field in kind._fields.items():
        stored = value.get(inner_field.db_field)
        if is_generated(inner_field):
            if stored is None:
                yield kind, inner_name, inner_field, value, path, f"{name}.{inner_name}"
            continue
        if stored is None:
            continue
        found = embeds.get(id(inner_field))
        if found is None:
            found = embeds[id(inner_field)] = embeds_generated(inner_field)
        if found:
            yield from lacking_inside(
                inner_field,
                stored,
                f"{path}.{inner_field.db_field}",
                f"{name}.{inner_name}",
                embeds,
            )


def _embedded_class(field: Any, value: Any) -> type[BaseDocument] | None:
    """The class of the stored embedded document ``value`` in ``field`` (None if it is none):
    the field's, or the subclass its ``_cls`` names; for no field or a ``DynamicField`` (a
    dynamic attribute), the class its ``_cls`` names."""
    typed = isinstance(field, (EmbeddedDocumentField, GenericEmbeddedDocumentField))
    if not isinstance(value, dict) or not (
        typed or field is None or isinstance(field, DynamicField)
    ):
        return None
    declared = (
        getattr(field, "document_type", None) if isinstance(field, EmbeddedDocumentField) else None
    )
    named = registered(value["_cls"]) if isinstance(value.get("_cls"), str) else None
    if named is not None and issubclass(named, declared or EmbeddedDocument):
        return named
    return declared


def embedded_places(
    document: BaseDocument, *, keys: bool = False
) -> Iterator[tuple[str, tuple[str, ...], BaseDocument]]:
    """Every embedded document inside ``document``, at any depth, with its path as
    :func:`changed` names paths (db field names, list indexes and map keys, dotted) and its
    steps as stored (a db field name per field, ``"*"`` per item of a list or map; with
    ``keys``, a map's item by its key, as a projection names it)."""
    names = shape(type(document)).embedding
    for name in document._data if names is None else names:
        field = document._fields.get(name)
        db_field = getattr(field, "db_field", name)
        yield from _places_in(document._data.get(name), db_field, (db_field,), keys)


def _places_in(
    value: Any, path: str, steps: tuple[str, ...], keys: bool = False
) -> Iterator[tuple[str, tuple[str, ...], BaseDocument]]:
    if isinstance(value, EmbeddedDocument):
        yield path, steps, value
        for inner_path, inner_steps, inner in embedded_places(value, keys=keys):
            yield f"{path}.{inner_path}", (*steps, *inner_steps), inner
    elif isinstance(value, (list, tuple, BaseList)):
        for index, item in enumerate(value):
            yield from _places_in(item, f"{path}.{index}", (*steps, "*"), keys)
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _places_in(item, f"{path}.{key}", (*steps, str(key) if keys else "*"), keys)


def embedded_places_in(
    value: Any, path: str
) -> Iterator[tuple[str, tuple[str, ...], BaseDocument]]:
    """Every embedded document inside ``value`` (a field's value written at the dotted db
    ``path``), at any depth, as :func:`embedded_places` gives them."""
    return _places_in(value, path, tuple(path.split(".")))


def embedded_documents(value: Any) -> Iterator[BaseDocument]:
    """The embedded documents directly inside a field value (lists and dicts searched)."""
    return _instances_in(value, EmbeddedDocument)


_K = TypeVar("_K")


def _instances_in(value: Any, kind: type[_K]) -> Iterator[_K]:
    """The ``kind`` objects a field value is or holds in its lists and dicts (not inside them)."""
    if isinstance(value, kind):
        yield value
    elif isinstance(value, (list, tuple)):  # a BaseList too
        for item in value:
            yield from _instances_in(item, kind)
    elif isinstance(value, dict):
        for item in value.values():
            yield from _instances_in(item, kind)


# -- per-document state -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class FailedInsert:
    """A document known stored by an insert whose call failed (see ``State``)."""

    #: The collection it was stored in.
    collection: Any
    #: The values it was stored with, as (slot, value, identity).
    held: list[Any]
    #: Its ``_id`` as stored.
    key: Any
    #: What is stored under its key, in stored form: as that insert wrote it, or as an update
    #: through the document left it; None if not known (an update through it, whose result
    #: is not returned).
    written: Any
    #: The document object as it was then, in stored form: changed since, the retry of the
    #: insert would not write the change (see ``landed.still_stored``).
    local: Any


@dataclass(slots=True)
class State:
    """What the write path remembers of one document object between writes."""

    #: Generated fields a projection (``only``/``exclude``) left out when it was loaded; of
    #: an embedded document, also fields that may hold generated values, left out whole.
    unloaded: frozenset[str] = frozenset()
    #: Lists holding generated values that a projection loaded in part (``$slice``,
    #: ``$elemMatch``): (dotted db path, whether the items loaded are out of their stored
    #: places). See :func:`sliced`.
    sliced: frozenset[tuple[str, bool]] = frozenset()
    #: Of a new embedded document: a field's ``default`` made it, on a load, for a value the
    #: projection left out (see :func:`made_for_left_out`).
    for_left_out: bool = False
    #: Its last insert may or may not have been applied (the reply was lost): its values were
    #: generated for it and are kept, and the next ``save()`` inserts them again.
    unconfirmed: bool = False
    #: The primary key was made by the write path (an ObjectId), not assigned by the user.
    made_pk: bool = False
    #: Known stored by an insert whose call failed (a bulk insert that failed at a later
    #: document or the reload; an insert whose reply was lost, found stored before an update
    #: by its key): the application's retry of that insert counts it as stored, if it finds
    #: it there (see ``values.stored_by_failed_insert``).
    stored_by_failed_insert: FailedInsert | None = None
    #: Its save() found its earlier insert landed (the reply lost) and failed writing over that
    #: copy: the document is stored, and the application's retry of that save, with
    #: ``force_insert`` too, updates it (see ``save._over_own_copy``).
    over_own_copy: bool = False
    #: While unconfirmed: the document as last sent (see :mod:`.landed`).
    sent: Any = None
    #: Every earlier version sent while unconfirmed: any of them may still land.
    sent_before: list[Any] = dataclasses.field(default_factory=list)
    #: While unconfirmed: the versions were given to a model's own ``_save_create``, which may
    #: have added to them or written more after its insert.
    sent_to_own_step: bool = False
    #: While unconfirmed, as (slot, value, identity) triples (identity: the value with its
    #: scope, as stored, see ``values.identity_key``): the values the write path generated for it
    #: (still its own to retry), and the assigned values the fields were told of. A value
    #: the application changed since is no longer the document's: it is left to the insert
    #: that may still land, never released.
    generated: list[Any] = dataclasses.field(default_factory=list)
    noted: list[Any] = dataclasses.field(default_factory=list)
    #: Whom the values assigned to it are for, once it had one (see ``Write.owners``).
    owner: str | None = None
    #: Values its last ``save()`` may have inserted by MongoEngine's upsert (set on insert)
    #: whose fields were not told of them yet, as slots holding them: told by its next write.
    untold: list[Any] = dataclasses.field(default_factory=list)
    #: Values ``doc.update(upsert=True)`` made for its embedded documents while its outcome is
    #: unknown, by (id of the embedded document, field name): their ``values.identity_key``.
    upserted: dict[tuple[int, str], Any] = dataclasses.field(default_factory=dict)
    #: Its key as read, when stored in another form than its field writes (see
    #: :func:`note_stored_key`); None if in the field's own.
    stored_key: StoredKey | None = None

    def settle(self) -> None:
        """The document is known to be stored: nothing of an earlier attempt is pending, and
        its assigned values are its own by being stored, no longer by a reservation."""
        self.unconfirmed = self.made_pk = self.over_own_copy = False
        self.stored_by_failed_insert = None
        self.sent, self.sent_before, self.generated, self.noted = None, [], [], []
        self.sent_to_own_step = False
        self.owner = None
        self.upserted = {}


_STATE = "_mongoengine_ids_state"


@overload
def state(document: BaseDocument) -> State: ...
@overload
def state(document: BaseDocument, *, create: Literal[False]) -> State | None: ...
def state(document: BaseDocument, *, create: bool = True) -> State | None:
    """The write path's record of ``document``, made on first use (with ``create=False``:
    None if the document has none yet)."""
    # getattr, not document.__dict__: reading __dict__ makes CPython build a dict for the
    # instance's attributes, about 6,000 instructions per save() (measured with cachegrind).
    found: State | None = getattr(document, _STATE, None)
    if found is None and create:
        found = State()
        object.__setattr__(document, _STATE, found)
    return found


#: The key of a pickled (or copied) document's state under which its record's ``unloaded`` goes,
#: and the one under which those of its embedded documents go, by path (:func:`embedded_places`).
_UNLOADED = "_mongoengine_ids_unloaded"
_UNLOADED_INSIDE = "_mongoengine_ids_unloaded_inside"
_SLICED = "_mongoengine_ids_sliced"
#: ... and the paths of its new embedded documents (MongoEngine's copy builds them as loaded).
_NEW_INSIDE = "_mongoengine_ids_new_inside"
#: ... and the generated fields changed in its embedded documents (MongoEngine's copy drops them).
_CHANGED_INSIDE = "_mongoengine_ids_changed_inside"
#: ... and the new ones made for a value a projection left out (see made_for_left_out).
_LEFT_OUT_INSIDE = "_mongoengine_ids_left_out_inside"
#: ... its key as stored, when in another form than its field writes (see note_stored_key).
_STORED_KEY = "_mongoengine_ids_stored_key"


def _wrap_getstate(owner: type[BaseDocument], own: Callable[[Any], Any] | None) -> Any:
    """``__getstate__`` for ``owner``: what pickle and ``copy`` take of a document, with the
    generated fields a projection left out of it and of its embedded documents (MongoEngine's
    takes its data only, and makes the embedded documents of a copy anew)."""

    def __getstate__(self: Document) -> Any:
        data = own(self) if own is not None else super(owner, self).__getstate__()
        found = state(self, create=False)
        if found is not None and found.unloaded:
            data[_UNLOADED] = sorted(found.unloaded)
        if found is not None and found.sliced:
            data[_SLICED] = sorted(found.sliced)
        places = list(embedded_places(self))
        inside = {
            path: sorted(record.unloaded)
            for path, _, embedded in places
            if (record := state(embedded, create=False)) is not None and record.unloaded
        }
        if inside:
            data[_UNLOADED_INSIDE] = inside
        changed_inside = {
            path: generated_here
            for path, _, embedded in places
            if (generated_here := _generated_changed_here(embedded))
        }
        if changed_inside:  # (probe BN-1: a value cleared in one was stored as no value)
            data[_CHANGED_INSIDE] = changed_inside
        new_inside = [path for path, _, embedded in places if is_new(embedded)]
        if new_inside:
            data[_NEW_INSIDE] = new_inside  # (probe BL-2: a copy saved them without values)
            left_out = [path for path, _, embedded in places if made_for_left_out(embedded)]
            if left_out:
                data[_LEFT_OUT_INSIDE] = left_out
        written = getattr(self, _WRITTEN, None)
        if written:
            data[_WRITTEN] = written  # a copy of a stored document is one (see never_stored)
        if _built_new(self):
            data[_BUILT_NEW] = True  # and a copy of one built new is new
        if found is not None and found.stored_key is not None:
            data[_STORED_KEY] = found.stored_key
        return data

    return __getstate__


def _generated_changed_here(document: BaseDocument) -> list[str]:
    """The generated fields of the embedded ``document`` the user changed (db field names)."""
    here = changed_here(document)
    if not here:
        return []
    generated = {field.db_field for _, field in shape(type(document)).generated}
    return [db_field for db_field in here if db_field in generated]


def _wrap_setstate(owner: type[BaseDocument], own: Callable[[Any, Any], None] | None) -> Any:
    """``__setstate__`` for ``owner``: a copy of a partially loaded document is one too (its
    ``save()`` leaves the fields it lacks alone), its new embedded documents are new (its
    ``save()`` fills them), and the generated fields changed in its embedded documents are
    changed (a value cleared gets a new one, as in the document copied)."""

    def __setstate__(self: Document, data: Any) -> None:
        if own is not None:
            own(self, data)
        else:
            super(owner, self).__setstate__(data)
        if not isinstance(data, dict):
            return
        unloaded = data.get(_UNLOADED)
        if unloaded:
            state(self).unloaded = frozenset(unloaded)
        if data.get(_SLICED):
            state(self).sliced = frozenset(map(tuple, data[_SLICED]))
        inside = data.get(_UNLOADED_INSIDE) or {}
        new_inside = set(data.get(_NEW_INSIDE) or ())
        changed_inside = data.get(_CHANGED_INSIDE) or {}
        left_out = set(data.get(_LEFT_OUT_INSIDE) or ())
        if inside or new_inside or changed_inside:
            for path, _, embedded in embedded_places(self):
                if path in left_out:
                    state(embedded).for_left_out = True
                for db_field in changed_inside.get(path, ()):
                    mark_changed(embedded, db_field)
                if path in inside:
                    state(embedded).unloaded = frozenset(inside[path])
                if path in new_inside:
                    object.__setattr__(embedded, "_created", True)
        if data.get(_WRITTEN):
            object.__setattr__(self, _WRITTEN, data[_WRITTEN])
        if data.get(_BUILT_NEW):
            built_new(self)
        if data.get(_STORED_KEY) is not None:
            state(self).stored_key = data[_STORED_KEY]

    return __setstate__


@dataclass(frozen=True)
class StoredKey:
    """A key read in another form than its field writes (see :func:`note_stored_key`)."""

    #: The key as stored (sent as it is to address the document).
    stored: Any
    #: The key as read: the record holds while the document holds this key.
    value: Any
    #: The collection it was read from (``full_name``); None if not known (built from a row).
    collection: str | None


def note_loaded_dynamic(document: BaseDocument, *, inside: bool = False) -> None:
    """Mark the embedded documents held by dynamic attributes of ``document``, just loaded (or
    of the embedded documents in it), loaded: MongoEngine builds them with their constructor,
    which marks them new (``_created``), and the write path fills new ones only. (Those in
    declared fields are built loaded; one a field's ``default`` made is new.)"""
    dynamic = document._dynamic_fields if document._dynamic else {}
    names = shape(type(document)).embedding
    for name in document._data if names is None else names:
        held = inside or name in dynamic
        for inner in embedded_documents(document._data.get(name)):
            if held:
                inner._created = False
            note_loaded_dynamic(inner, inside=held)


def note_stored_key(document: Any, stored: Any) -> None:
    """Record the key of ``document``, just loaded, if it is stored in another form than its
    field writes (a UUID: subtype 3, text under a binary field, binary or other text under
    ``as_string``; a number stored as text, a Crockford id in lower case, a number under a
    field given a format since: :meth:`.GeneratedField.in_own_form`): MongoEngine would
    address it by the field's form, and its ``save()`` would upsert a second copy."""
    found = shape(type(document))
    if stored is None or not found.generates_pk:
        return
    field = type(document)._fields[found.pk_name]
    as_string = getattr(field, "as_string", False)  # a UUID field of this package's option
    if field.stored_form_differs and isinstance(stored, uuid.UUID) and not as_string:
        # Decoded: by the driver (from subtype 4 under ``standard``, from subtype 3 under the
        # legacy representations) or by json_util. Which one, the collection that read it
        # says: the queryset's (note_read), else the document's own (stored_key).
        object.__setattr__(document, _DECODED_KEY, stored)
    elif not field.in_own_form(stored):
        # The queryset reading it, if any, names its collection (note_read); _from_son() does
        # not (nor connect: from_json() needs no connection).
        _record(document, stored, None)


def note_json_key(document: Any) -> None:
    """``document`` was built from JSON (``from_json()``): a key it holds as text or a number is
    the application's, a value of its field in any form the field accepts (an API's text of a
    UUID, a number as text), not a form read from the database; a ``Binary`` key, or one
    decoded to a ``uuid.UUID`` (JSON of a raw row: ``QuerySet.to_json()``, a backup), is judged
    as stored (:func:`note_stored_key`)."""
    found = state(document, create=False)
    if found is not None and isinstance(
        getattr(found.stored_key, "stored", None), (str, int, float)
    ):
        found.stored_key = None


def _record(document: Any, stored: Any, collection: Any) -> None:
    name = None if collection is None else collection.full_name
    state(document).stored_key = StoredKey(stored, key(document), name)


#: Set by :func:`note_stored_key` on a document whose key was read as a ``uuid.UUID``.
_DECODED_KEY = "_mongoengine_ids_decoded_key"


def _judge_decoded(document: Any, collection: Any) -> None:
    """Judge the key of ``document`` read as a ``uuid.UUID`` by the representation of
    ``collection``: the field's own form under ``standard`` (and under none: a driver decodes
    no UUID then, so it was not read so), another under the legacy ones."""
    decoded = getattr(document, _DECODED_KEY, None)
    if decoded is None:
        return
    object.__delattr__(document, _DECODED_KEY)
    representation = collection.codec_options.uuid_representation
    field = type(document)._fields[shape(type(document)).pk_name]
    if representation and not field.in_own_form(decoded, representation):
        _record(document, decoded, collection)


def note_read(document: Any, query: QuerySetParts) -> None:
    """``document`` was read by the queryset ``query``: record the generated fields its
    projection left out (:func:`note_loaded`), judge its key if read as a ``uuid.UUID``, and
    note the collection a key in another form was read from."""
    note_loaded(document, query.loaded)
    if not isinstance(document, Document):
        return
    _judge_decoded(document, query.collection)
    found = state(document, create=False)
    if found is not None and found.stored_key is not None:
        found.stored_key = dataclasses.replace(
            found.stored_key, collection=query.collection.full_name
        )


def stored_key(document: Any, collection: Any = None) -> Any:
    """The key of ``document`` as stored, if in another form than its field writes (see
    :func:`note_stored_key`) and the document still holds that key; with ``collection``, only
    if read from it. Else None."""
    if getattr(document, _DECODED_KEY, None) is not None:  # built from a row, not a queryset
        _judge_decoded(document, type(document)._get_collection())
    found = state(document, create=False)
    record = None if found is None else found.stored_key
    if record is None or record.value != key(document):
        return None
    if collection is not None and record.collection not in (None, collection.full_name):
        return None
    return record.stored


def note_loaded(document: Any, loaded: QueryFieldList) -> None:
    """Record which generated fields, and fields they read (a counter's scope), a projection
    left out of a document it loaded, and of the embedded documents loaded inside it
    (``only("parts.kind")`` leaves ``parts.n`` out; one loaded without its ``_cls`` may be a
    subclass: theirs too). Of an embedded document, also the fields that may hold embedded
    documents with generated fields, left out whole (``only("parts.label")`` leaves
    ``parts.boxes`` out): written whole, it would clear them."""
    if not isinstance(document, Document) or not loaded:
        return
    projection = loaded.as_dict()
    present = _Projection(projection)
    kind = type(document)
    record = state(document)
    # A scope loaded in part (only("place.city"), exclude("place.zip"), a $slice) names
    # another counter: left out as well.
    record.unloaded = frozenset(
        [
            *(name for name, field in generated_fields(kind) if not present((field.db_field,))),
            *(name for name in scopes(kind) if not present.whole((field_of(kind, name).db_field,))),
        ]
    )
    record.sliced = _sliced(kind, projection)
    # Per class: its fields of note, and its subclasses' too (once for the document).
    of_note: dict[tuple[type[BaseDocument], bool], set[tuple[str, str, str]]] = {}
    for _, steps, inner in embedded_places(document, keys=True):
        if is_new(inner):
            # A field's default made it: nothing of it was loaded, nor left out; for a value
            # the projection left out, a value may be stored where it is.
            if present.left_out(steps):
                state(inner).for_left_out = True
            continue
        # Loaded without its _cls (only("parts.label")), it is of its field's class as far as
        # MongoEngine knows: stored, it may be a subclass, with fields of its own.
        family = (type(inner), not present((*steps, "_cls")))
        if family not in of_note:
            kinds = with_subclasses(family[0]) if family[1] else [family[0]]
            of_note[family] = {
                (name, field.db_field, _noted_as(kind, name, field))
                for kind in kinds
                for name, field in kind._fields.items()
                if _noted_as(kind, name, field)
            }
        unloaded = frozenset(
            name
            for name, db_field, noted in of_note[family]
            if (
                not present((*steps, db_field))
                if noted == "generated"
                else not present.whole((*steps, db_field))
                if noted == "scope"
                else present.left_out((*steps, db_field))
            )
        )
        if unloaded:
            state(inner).unloaded = unloaded


def _sliced(kind: type[BaseDocument], projection: dict[str, Any]) -> frozenset[tuple[str, bool]]:
    """The lists of embedded documents holding generated values that ``projection`` loads in
    part, by dotted db path, each with whether the items loaded are out of their stored
    places: an ``$elemMatch``, a positional ``lines.$``, or a ``$slice`` that skips items or
    counts from the end (MongoEngine addresses an item by its place in the list loaded). (A
    list of a generated field's values holds the user's: none is made in one.)"""
    found = set()
    for path, spec in projection.items():
        if path.endswith(".$"):  # only("lines.$"): the item the filter matched, as lines[0]
            path, spec = path[:-2], {"$elemMatch": None}
        if isinstance(spec, dict) and embeds_generated(values_field_at(kind, path)):
            cut = spec.get("$slice", 0)
            skips = cut[0] != 0 if isinstance(cut, (list, tuple)) else cut < 0
            found.add((path, "$elemMatch" in spec or bool(skips)))
    return frozenset(found)


def sliced(document: Any) -> frozenset[tuple[str, bool]]:
    """The lists holding generated values a projection loaded in part into ``document``
    (:func:`_sliced`), unless reloaded since."""
    found = state(document, create=False)
    return frozenset() if found is None else found.sliced


def _noted_as(kind: type[BaseDocument], name: str, field: Any) -> str:
    """What :func:`note_loaded` records of an embedded document's field left out: a generated
    one ("generated"), one its generated fields read ("scope": loaded in part, it is left out
    too), one that may hold embedded documents with generated fields ("holder"); "" if none."""
    if is_generated(field):
        return "generated"
    if name in scopes(kind):
        return "scope"
    return "holder" if embeds_generated(field) else ""


def scopes(kind: type[BaseDocument]) -> frozenset[str]:
    """The names of the fields of ``kind`` its generated fields read (``depends_on``: a
    counter's scope)."""
    return frozenset(name for _, field in shape(kind).generated for name in field.depends_on)


class _Projection:
    """Whether a projection (``QueryFieldList.as_dict()``) returns the value at stored steps
    (db field names and map keys; ``"*"``, any item of a list, is not part of its paths)."""

    def __init__(self, projection: dict[str, Any]) -> None:
        self.projection = projection
        self.only = any(
            value == QueryFieldList.ONLY for value in projection.values() if value in (0, 1)
        )
        #: The paths above a path the projection returns (``only``), for :meth:`left_out`.
        self.above = {
            path.rsplit(".", end)[0]
            for path, value in projection.items()
            if value == QueryFieldList.ONLY or isinstance(value, dict)
            for end in range(1, path.count(".") + 1)
        }

    def __call__(self, steps: tuple[str, ...]) -> bool:
        if steps == ("_id",):
            return bool(self.projection.get("_id", 1) != 0)
        names = [step for step in steps if step != "*"]
        # The value at a path, or at any path it lies under ($slice, $elemMatch: whole items).
        given = [self.projection.get(".".join(names[:end])) for end in range(1, len(names) + 1)]
        if self.only:
            return any(value == QueryFieldList.ONLY or isinstance(value, dict) for value in given)
        return QueryFieldList.EXCLUDE not in given

    def whole(self, steps: tuple[str, ...]) -> bool:
        """Whether the projection returns the value at ``steps`` whole: returned, and neither
        sliced (``$slice``, ``$elemMatch``) nor a path under it excluded or chosen."""
        if not self(steps):
            return False
        path = ".".join(s for s in steps if s != "*")
        return not any(
            (key == path and isinstance(value, dict)) or key.startswith(f"{path}.")
            for key, value in self.projection.items()
        )

    def left_out(self, steps: tuple[str, ...]) -> bool:
        """Whether the projection returns nothing of the value at ``steps``: neither it nor a
        path under it (``only("parts.boxes.label")`` returns part of ``parts.boxes``)."""
        if self(steps):
            return False
        # Excluded (or under a path excluded); or, for only(), no path under it returned.
        return not self.only or ".".join(s for s in steps if s != "*") not in self.above


def left_out_values(document: Any) -> list[str]:
    """The generated fields a projection left out of ``document`` and of the embedded documents
    it holds (and, of those, the fields that may hold generated values, left out whole), by
    path: ``number``, ``parts.0.code``."""
    holders = [("", document), *((path, inner) for path, _, inner in embedded_places(document))]
    return [
        f"{path}.{name}" if path else name
        for path, holder in holders
        for name in sorted(getattr(state(holder, create=False), "unloaded", ()))
    ]


def loaded_again(document: Any, names: Iterable[str]) -> None:
    """``reload(*names)`` (all fields: none named) loaded these fields of ``document`` whole:
    none is one a projection left out any more."""
    found = state(document, create=False)
    if found is not None and (found.unloaded or found.sliced):
        named = set(names)
        found.unloaded = found.unloaded - named if named else frozenset()
        db_fields = {f.db_field for name in named if (f := field_of(type(document), name))}
        found.sliced = frozenset(
            (path, out_of_place)
            for path, out_of_place in found.sliced
            if named and path.partition(".")[0] not in db_fields
        )


def loaded_whole(holder: Any, name: str, kind: type[BaseDocument]) -> bool:
    """Whether field ``name`` (declared by ``kind``: the holder's class, or a subclass it may be
    stored as) of a document or embedded document holds what is stored, or what the user set:
    no projection left it out (see :func:`note_loaded`), or it was set whole since."""
    found = state(holder, create=False)
    if found is None or name not in found.unloaded:
        return True
    return field_of(kind, name).db_field in changed_here(holder)


def written_whole(document: Any) -> None:
    """After a write of ``document``: a field set whole since it was loaded, in it or in an
    embedded document inside it, holds what is stored now, no longer one a projection left
    out (the scope a user set whole and saved was still refused on the next save)."""
    holders = [document, *(inner for _, _, inner in embedded_places(document))]
    for holder in holders:
        found = state(holder, create=False)
        if found is None or not found.unloaded:
            continue
        here = set(changed_here(holder))
        kind = type(holder)
        found.unloaded = frozenset(
            name
            for name in found.unloaded
            if (field := field_of(kind, name)) is None or field.db_field not in here
        )


def made_for_left_out(document: Any) -> bool:
    """Whether a field's ``default`` made the embedded ``document`` on a load, for a value the
    projection left out (``only("name")`` and ``line = EmbeddedDocumentField(Line,
    default=Line)``): a value may be stored where it is."""
    found = state(document, create=False)
    return found is not None and found.for_left_out


def left_out(document: Any, name: str) -> bool:
    """Whether field ``name`` of ``document`` is one a projection left out (not set since)."""
    found = state(document, create=False)
    return found is not None and name in found.unloaded


def value_set(document: Any, name: str) -> None:
    """A value was set on field ``name`` of ``document`` (assigned, or loaded into it by
    ``reload()`` or ``modify()``): it is no longer one a projection left out."""
    found = state(document, create=False)
    if found is not None and name in found.unloaded:
        found.unloaded = found.unloaded - {name}


# -- references ---------------------------------------------------------------------------------

# Not in the field's __dict__, which the twin shares (and MongoEngine deep-copies fields).
_twins: weakref.WeakKeyDictionary[GeneratedField, GeneratedField] = weakref.WeakKeyDictionary()
_twin_classes: dict[type, type] = {}


class _ForReferences:
    """Mixed into a key field's class for :func:`key_for_references`."""

    def to_python(self, value: Any) -> Any:
        return self.reference_key(value)  # type: ignore[attr-defined]


def key_get(field: GeneratedField, instance: Any, owner: type) -> Any:
    """``__get__`` of a key field whose stored form differs from its value: MongoEngine's
    ``BaseField.__get__``, but ``Model.id`` is :func:`key_for_references`."""
    if instance is None:
        return key_for_references(field) if field.primary_key else field
    return instance._data.get(field.name)


def key_for_references(field: GeneratedField) -> GeneratedField:
    """What ``Model.id`` gives for a key field whose stored form differs from its value.

    MongoEngine's ``ReferenceField``, ``LazyReferenceField`` and ``CachedReferenceField`` turn a
    stored key into the id of a DBRef with ``Model.id.to_python(stored)``, then send that id as
    it is (``dereference()``, the ``$in`` that loads a list of references, the documents that
    hold the reference) and match the documents they load to it by ``==`` and hash. Nothing
    else in MongoEngine reads the key field as a class attribute. So the class attribute is the
    field with one difference: its ``to_python`` is the field's ``reference_key`` (the stored
    form, comparing and hashing as the value). Loading a document goes through the field itself
    (``Model._fields``) and is not affected.

    The twin is an instance of a subclass of the field's class that shares the field's
    ``__dict__``: every attribute, its generator included, is the field's own.
    """
    found = _twins.get(field)
    if found is not None:
        return found
    with _lock:
        klass = type(field)
        twin_class = _twin_classes.get(klass)
        if twin_class is None:
            name, module = klass.__name__, klass.__module__
            twin_class = type(name, (_ForReferences, klass), {"__module__": module})
            _twin_classes[klass] = twin_class
        twin = _twins.get(field)
        if twin is None:
            twin = object.__new__(twin_class)
            object.__setattr__(twin, "__dict__", field.__dict__)
            _twins[field] = twin
        return twin


# -- installation -------------------------------------------------------------------------------

_HOOKED = "_mongoengine_ids_hooked"
_lock = ProcessLock(reentrant=True)


def declared(field: GeneratedField, owner: type, name: str) -> None:
    """A generated field was declared on ``owner``: hook the documents that will write it, and
    have every embedded document class made from now on checked (:func:`_check_embedded`)."""
    with _lock:
        if not getattr(EmbeddedDocument, _CHECKS_EMBEDDED, False):
            _on_subclass(EmbeddedDocument, _check_embedded)
            setattr(EmbeddedDocument, _CHECKS_EMBEDDED, True)
    key = bool(getattr(field, "primary_key", False)) and field.stored_form_differs
    if isinstance(owner, type) and issubclass(owner, Document):
        hook(owner)
        if key:
            hook_key(owner)
    elif isinstance(owner, type) and issubclass(owner, EmbeddedDocument):
        _embedded_declared(owner)
    else:  # a plain mixin: MongoEngine copies its fields into the Documents made from it
        _on_subclass(owner, _hook_key_if_document if key else _hook_if_document)


_CHECKS_EMBEDDED = "_mongoengine_ids_checks_embedded"


def _check_embedded(cls: type) -> None:
    """Ask each generated field of the embedded document class ``cls``, just made, whether it
    can serve one (:meth:`.field.GeneratedField.check_embedded_in`): its own, a mixin's or a
    base's. Run by ``__init_subclass__``, after the fields' ``__set_name__`` (an error raised
    there, Python < 3.12 wraps in a RuntimeError). A class that declares none but holds an
    embedded document that may have some (``leaf = EmbeddedDocumentField(Leaf)``) makes the
    Documents naming it, or a base class of it, write values too."""
    for name, field in fields(cls).items():
        if is_generated(field):
            field.check_embedded_in(cls, name)
    if issubclass(cls, EmbeddedDocument) and _embeds_generated(cls, set()):
        _embedded_declared(cls)


def _hook_if_document(cls: type) -> None:
    if issubclass(cls, Document):
        hook(cls)
    elif issubclass(cls, EmbeddedDocument):  # the documents holding it write its values
        _embedded_declared(cls)


def _hook_key_if_document(cls: type) -> None:
    if issubclass(cls, Document):
        hook(cls)
        hook_key(cls)


_KEY_HOOKED = "_mongoengine_ids_key_hooked"


def hook_key(document_class: type[Document]) -> None:
    """Make ``to_mongo`` and ``to_dbref`` of ``document_class``, whose primary key is a
    generated field stored in another form than its value, give the key in stored form
    (idempotent; inherited by subclasses), and MongoEngine's reference fields send it so."""
    from . import references

    hook_reference_fields()
    with _lock:
        if getattr(document_class, _KEY_HOOKED, False):  # itself, or a base class
            return
        for name, wrap in (
            ("to_mongo", references.wrap_to_mongo),
            ("to_dbref", references.wrap_to_dbref),
        ):
            own = vars(document_class).get(name)
            setattr(document_class, name, wrap(document_class, own))
        setattr(document_class, _KEY_HOOKED, True)


#: Set on the package's wrappers of MongoEngine's own methods (installed once per process).
_WRAPPER = "_mongoengine_ids_wrapper"


def hook_reference_fields() -> None:
    """Wrap the methods of MongoEngine's reference fields that send a referenced document's key
    as they find it (see :mod:`.references`), once per process."""
    from . import references

    with _lock:
        for owner, name, wrap in (
            (ReferenceField, "to_mongo", references.wrap_reference_to_mongo),
            (ReferenceField, "to_python", references.wrap_reference_to_python),
            (LazyReferenceField, "to_python", references.wrap_reference_to_python),
            (CachedReferenceField, "prepare_query_value", references.wrap_cached_query_value),
            (GenericReferenceField, "to_mongo", references.wrap_generic_to_mongo),
            (GenericLazyReferenceField, "to_mongo", references.wrap_generic_lazy_to_mongo),
            (GenericLazyReferenceField, "build_lazyref", references.wrap_generic_lazy_build),
            (DeReference, "__call__", references.wrap_dereference),
            (GenericReferenceField, "to_python", references.wrap_generic_reference_to_python),
            (DynamicField, "to_python", references.wrap_dynamic_to_python),
            (DictField, "prepare_query_value", references.wrap_dict_query_value),
            (ComplexBaseField, "to_python", references.wrap_untyped_container),
            (ComplexBaseField, "to_mongo", references.wrap_untyped_container),
        ):
            own = getattr(owner, name)  # its own, or the one it inherits (to_python)
            if not getattr(own, _WRAPPER, False):
                wrapper = wrap(own)
                setattr(wrapper, _WRAPPER, True)
                setattr(owner, name, wrapper)


def registered(class_name: Any) -> type[BaseDocument] | None:
    """The model MongoEngine loads a ``_cls`` of ``class_name`` as, or None: the one registered
    under it, or under a name ending like it (``"Item.SubItem"``, MongoEngine's older form)."""
    if not isinstance(class_name, str):
        return None
    try:
        return cast("type[BaseDocument]", get_document(class_name))
    except NotRegistered:
        return None


def hook(document_class: type[Document]) -> None:
    """Install the write path on ``document_class`` (idempotent; inherited by subclasses)."""
    from . import references, save, upsert

    with _lock:
        _hook_querysets(document_class)
        _hook_drop_collection(document_class)
        if getattr(document_class, _HOOKED, False):  # itself, or a base class
            return
        for name, wrap in (
            ("_save_create", save.wrap_save_create),
            ("_save_update", save.wrap_save_update),
            ("_get_update_doc", save.wrap_get_update_doc),
            ("_object_key", save.wrap_object_key),
            ("delete", save.wrap_delete),
            ("reload", save.wrap_reload),
            ("modify", save.wrap_modify),
            ("update", upsert.wrap_document_update),
            ("__getstate__", _wrap_getstate),
            ("__setstate__", _wrap_setstate),
            ("_from_son", references.wrap_from_son),
            ("from_json", references.wrap_from_json),
        ):
            own = vars(document_class).get(name)
            setattr(document_class, name, wrap(document_class, own))
        setattr(document_class, _HOOKED, True)  # its subclasses' querysets generate too


#: Set on a model whose querysets are the package's (see :func:`_hook_querysets`).
_QUERYSETS = "_mongoengine_ids_querysets"


def _hook_querysets(document_class: type[Document]) -> None:
    """Make the querysets of ``document_class`` the package's: where MongoEngine makes one
    (a manager's ``__get__``, ``Document._qs``), it is turned into the generating version of
    its own class (see :func:`generating_instance`), whatever that class is: the manager's
    ``default``, your ``meta["queryset_class"]``, ``QuerySet``. Nothing of ``meta`` changes."""
    hook_queryset_makers()
    # Inserting through a parent's queryset (Root.objects.insert([Sub()])) must generate too:
    # the class and the concrete ancestors whose collection it shares, never Document itself.
    for klass in document_class.__mro__:
        if not issubclass(klass, Document) or klass is Document or "_meta" not in vars(klass):
            continue
        meta = vars(klass)["_meta"]
        shares = meta.get("allow_inheritance") and not meta.get("abstract")
        if klass is document_class or shares:
            setattr(klass, _QUERYSETS, True)


def makes_generating_querysets(document_class: Any) -> bool:
    """Whether the querysets of ``document_class`` are the package's: it is marked itself (an
    ancestor sharing its collection with a hooked model), or it is a hooked model or inherits
    from one (also where an ``__init_subclass__`` of a mixin kept the hook from seeing it made).
    A plain subclass of a marked ancestor keeps MongoEngine's."""
    return bool(
        vars(document_class).get(_QUERYSETS, False) or getattr(document_class, _HOOKED, False)
    )


_MAKERS_HOOKED = "_mongoengine_ids_makes_querysets"


def hook_queryset_makers() -> None:
    """Wrap the two places MongoEngine makes a model's queryset, once per process: a manager's
    ``__get__`` and ``Document._qs`` (``doc.update()``, ``modify()``, ``reload()``...). For a
    model with generated fields they hand out the generating version of the queryset MongoEngine
    made; for any other model, MongoEngine's own."""
    with _lock:
        get = vars(QuerySetManager)["__get__"]
        if getattr(get, _MAKERS_HOOKED, False):
            return

        @functools.wraps(get)
        def __get__(self: Any, instance: Any, owner: Any) -> Any:
            found = get(self, instance, owner)
            if instance is None and makes_generating_querysets(owner):
                # A queryset_manager function of more arguments comes as a partial of it.
                for made in found.args if isinstance(found, functools.partial) else (found,):
                    generating_instance(made)
            return found

        own_qs = vars(Document)["_qs"].fget

        @functools.wraps(own_qs)
        def _qs(self: Any) -> Any:
            found = own_qs(self)
            return generating_instance(found) if makes_generating_querysets(type(self)) else found

        setattr(__get__, _MAKERS_HOOKED, True)
        QuerySetManager.__get__ = __get__
        Document._qs = property(_qs)


_DROP_HOOKED = "_mongoengine_ids_drop_hooked"


def _hook_drop_collection(document_class: Any) -> None:
    """Wrap every ``drop_collection`` of ``document_class`` and its bases, ``Document``'s
    included: a model's own may drop the collection without MongoEngine's. From the first call
    on, each ``Document`` made is wrapped so too. Whatever model drops a collection (one without
    generated fields too, sharing it with one that has some), what the package cached of it is
    forgotten (the indexes a field found, which the drop removes)."""
    if not vars(Document).get(_DROP_HOOKED, False):
        setattr(Document, _DROP_HOOKED, True)
        _on_subclass(Document, _hook_drop_collection)
    for klass in document_class.__mro__:
        own = vars(klass).get("drop_collection")
        if not isinstance(own, classmethod) or getattr(own.__func__, _DROP_HOOKED, False):
            continue  # none, already wrapped, or not MongoEngine's kind (a staticmethod)
        function = own.__func__
        klass.drop_collection = classmethod(_dropping(function))


def _dropping(function: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(function)
    def drop_collection(cls: type[Document], *args: Any, **kwargs: Any) -> Any:
        result = function(cls, *args, **kwargs)
        collection_dropped(cls._get_db(), cls._get_collection_name())
        return result

    setattr(drop_collection, _DROP_HOOKED, True)
    return drop_collection


def _on_subclass(klass: type, callback: Callable[[type], None]) -> None:
    """Run ``callback(subclass)`` for every subclass of ``klass`` created from now on, after the
    ``__init_subclass__`` that ``klass`` (or its bases) already had."""
    previous = klass.__dict__.get("__init_subclass__")

    def __init_subclass__(cls: type, /, **kwargs: Any) -> None:
        if previous is not None:
            previous.__func__(cls, **kwargs)
        else:
            super(klass, cls).__init_subclass__(**kwargs)  # type: ignore[arg-type]
        callback(cls)

    klass.__init_subclass__ = classmethod(__init_subclass__)  # type: ignore[assignment]


_on_subclass(BaseDocument, _class_made)


# Embedded documents: the Document holding one is what is saved, and it may declare nothing of
# this package. MongoEngine calls nothing of the embedded class when such a Document is made,
# so the first embedded declaration adds one class-creation hook to Document.
_embedded_classes: set[str] = set()


def _embedded_declared(embedded_class: type[EmbeddedDocument]) -> None:
    with _lock:
        first = not _embedded_classes
        # A field typed with a base class may hold this subclass.
        _embedded_classes.update(
            klass.__name__
            for klass in embedded_class.__mro__
            if isinstance(klass, type)
            and issubclass(klass, EmbeddedDocument)
            and klass is not EmbeddedDocument
        )
        if first:
            _on_subclass(Document, _hook_if_embeds)
            _hook_sorted_lists()
            _hook_embedded_copies()
        for document_class in document_classes():
            if not getattr(document_class, _HOOKED, False):  # (a hooked one writes values)
                _hook_if_embeds(document_class)


def _hook_embedded_copies() -> None:
    """Wrap ``EmbeddedDocument.__getstate__``/``__setstate__`` (once per process), as each hooked
    model's are (see :func:`hook`): an embedded document copied, or pickled, on its own is built
    anew from its data, and its copy would lose what a projection left out of it and of the
    embedded documents inside it (a save writing it whole would then clear the stored values)."""
    for name, wrap in (("__getstate__", _wrap_getstate), ("__setstate__", _wrap_setstate)):
        own = getattr(EmbeddedDocument, name)  # its own, or BaseDocument's
        if not getattr(own, _WRAPPER, False):
            wrapper = wrap(EmbeddedDocument, own)
            setattr(wrapper, _WRAPPER, True)
            setattr(EmbeddedDocument, name, wrapper)


def _hook_sorted_lists() -> None:
    """Wrap ``SortedListField.to_mongo`` (once per process): ``save()`` serialises a document
    before the write path fills its values in, and a list ordered by a generated field of its
    embedded documents has no key to sort new ones by yet. That serialisation is left unsorted;
    the write serialises the document again once the values are made (see ``save.py``)."""
    own = vars(SortedListField)["to_mongo"]
    if getattr(own, _WRAPPER, False):
        return

    @functools.wraps(own)
    def to_mongo(self: Any, value: Any, use_db_field: bool = True, fields: Any = None) -> Any:
        try:
            return own(self, value, use_db_field, fields)
        except KeyError:
            if not _to_be_filled(self, value):
                raise
            return ListField.to_mongo(self, value, use_db_field, fields)

    setattr(to_mongo, _WRAPPER, True)
    SortedListField.to_mongo = to_mongo


def _to_be_filled(field: Any, items: Any) -> bool:
    """Whether ``items``, a ``SortedListField``'s list, lacks values of its ordering field only
    in new embedded documents whose field is a generated one (the write fills them)."""
    from .field import GeneratedField

    ordering = getattr(field, "_ordering", None)
    for item in items:
        if not isinstance(item, BaseDocument):
            return False
        # The item's own class: the list's may be a base class, or a generic field's choices.
        found = [f for f in item._fields.values() if f.db_field == ordering]
        if len(found) == 1 and item._data.get(found[0].name) is not None:
            continue
        if len(found) != 1 or not isinstance(found[0], GeneratedField) or not is_new(item):
            return False
    return True


def _hook_if_embeds(cls: type) -> None:
    if issubclass(cls, Document) and _embeds_generated(cls, set()):
        hook(cls)


def _embeds_generated(document_class: type[BaseDocument], seen: set[type]) -> bool:
    """Whether a document of ``document_class`` may hold an embedded document with a generated
    field in a field naming its class, a base class or a subclass of it, at any depth, also
    in a field only a subclass of an embedded class declares (an untyped container, or a
    dynamic document's attribute, names none: see docs/guarantees.md)."""
    fields = getattr(document_class, "_fields", {}).values()
    return any(embeds_generated(field, seen) for field in fields)


def embeds_generated(field: Any, seen: set[type] | None = None) -> bool:
    """Whether values of ``field`` may hold an embedded document with a generated field, as
    :func:`_embeds_generated` tells it of a class (``seen``: the classes looked into)."""
    seen = set() if seen is None else seen
    for embedded in _embedded_types(field):
        name = embedded if isinstance(embedded, str) else embedded.__name__
        if name in _embedded_classes:
            return True
        if isinstance(embedded, str):  # named before it was made: made since?
            embedded = registered(embedded)
        if embedded is None:
            continue
        for kind in with_subclasses(embedded):  # a subclass may hold one in its own field
            if kind in seen:  # (by class: two may share a name)
                continue
            seen.add(kind)
            if shape(kind).generated or _embeds_generated(kind, seen):
                return True  # (a subclass of a class declaring one)
    return False


def _embedded_types(field: Any) -> Iterator[Any]:
    """The embedded document classes (or their names) a field can hold."""
    inner = getattr(field, "field", None)
    if inner is not None:
        yield from _embedded_types(inner)
    document_type = getattr(field, "document_type_obj", None)
    if isinstance(document_type, str) or (
        isinstance(document_type, type) and issubclass(document_type, EmbeddedDocument)
    ):
        yield document_type
    for choice in getattr(field, "choices", None) or ():
        if isinstance(choice, type) and issubclass(choice, EmbeddedDocument):
            yield choice


# -- the queryset -------------------------------------------------------------------------------

_queryset_classes: dict[type, type] = {}


def generating_queryset(base: type[QuerySet]) -> type[QuerySet]:
    """``base`` with this package's ``insert()``, ``update()``, ``modify()`` and loading."""
    from .queryset import GeneratingQuerySetMixin

    if issubclass(base, GeneratingQuerySetMixin):
        return base
    with _lock:
        klass = _queryset_classes.get(base)
        if klass is None:
            # After base's own classes, before MongoEngine's BaseQuerySet (see the mixin).
            klass = type(f"Generating{base.__name__}", (base, GeneratingQuerySetMixin), {})
            _queryset_classes[base] = klass
        return klass


def made_from(queryset_class: type) -> type | None:
    """The class :func:`generating_queryset` made ``queryset_class`` from (None if it did not
    make it)."""
    return next((base for base, made in _queryset_classes.items() if made is queryset_class), None)


def generating_instance(queryset: Any) -> Any:
    """``queryset``, a queryset MongoEngine made for a model with generated fields (by a
    manager, ``_qs``, ``no_cache()``, ``cache()``), turned into the generating version of its
    class; anything else (what a ``queryset_manager`` function returned) as it is."""
    from .queryset import GeneratingQuerySetMixin

    if isinstance(queryset, BaseQuerySet) and not isinstance(queryset, GeneratingQuerySetMixin):
        queryset.__class__ = generating_queryset(type(queryset))
    return queryset
