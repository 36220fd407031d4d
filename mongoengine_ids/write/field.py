"""The contract between the write path and a generated field.

A field of this package is asked three things, always with a :class:`Write` saying what the
write knows (never read from ambient state):

* :meth:`GeneratedField.new_values`: values for N documents of one write;
* :meth:`GeneratedField.is_collision`: whether a duplicate-key error is this field's value
  colliding (then the write is retried with a fresh value);
* :meth:`GeneratedField.release_values`: values that were not written, given back.

and told one more: :meth:`GeneratedField.note_assigned`, the values a user assigned, so that a
counter never hands them out later.
"""

from __future__ import annotations

import copy
import re
from collections import abc
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Final, NoReturn, overload

from bson.regex import Regex
from mongoengine.base import BaseDocument, BaseField
from mongoengine.errors import ValidationError

from .._checks import check_bool, keyword_names, unexpected_keywords
from ..errors import InvalidQueryValueError
from . import seam

if TYPE_CHECKING:
    from pymongo.collection import Collection
    from pymongo.database import Database
    from pymongo.errors import DuplicateKeyError
    from typing_extensions import Self


def _equal_in_mongodb(one: Any, other: Any) -> bool:
    """Whether two values are one value as MongoDB compares them: numbers by value whatever
    their type (not booleans), arrays (lists, tuples) item by item, documents key by key in
    their order; anything else as Python compares it (probe BD: Python equality took a tuple
    for another value than the array it is stored as, and a sub-document for one whose keys
    are in another order)."""
    if isinstance(one, bool) or isinstance(other, bool):
        return type(one) is type(other) and one == other
    if isinstance(one, (int, float)) and isinstance(other, (int, float)):
        return one == other
    if isinstance(one, (list, tuple)) and isinstance(other, (list, tuple)):
        return len(one) == len(other) and all(map(_equal_in_mongodb, one, other))
    if isinstance(one, abc.Mapping) and isinstance(other, abc.Mapping):
        return list(one) == list(other) and all(_equal_in_mongodb(one[k], other[k]) for k in one)
    return bool(one == other)


@dataclass(slots=True)
class Write:
    """What one write knows, handed to the fields.

    Attributes:
        document_class: the class whose fields are asked: the model, or the embedded document
            class for values of an embedded document.
        collection: the collection the write goes to (follows ``db_alias``, ``switch_db``,
            ``switch_collection``), read on the primary (see :func:`.seam.primary`); its
            database is not: a collection a field takes from it sets its own read preference.
        documents: the documents (or embedded documents) the values are for, in order.
        owners: see below.
    """

    document_class: type[BaseDocument]
    collection: Collection[Any]
    documents: Sequence[BaseDocument] = ()
    #: Told with assigned values (:meth:`GeneratedField.note_assigned`): whom each value is
    #: for, in order: its place (this field of that document) in this write. The same across
    #: the application's retries of one write (the same document object, or the same upsert),
    #: so that what a field recorded for a value (a reservation) in an attempt whose outcome is
    #: unknown is found to be its own; another place's, even of the same write, is not.
    owners: Sequence[str] = ()
    #: Where the documents are in the documents written, as a query and an index name it
    #: (:attr:`.values.Slot.place`): "" for the documents written, ``"lines"`` for embedded
    #: documents in their list ``lines``.
    place: str = ""
    #: The documents written, if the documents are embedded in them (else the documents).
    roots: Sequence[BaseDocument] = ()

    @property
    def database(self) -> Database[Any]:
        """The database the documents are written to."""
        return self.collection.database

    def path(self, db_field: str) -> str:
        """The path of the documents' ``db_field`` in the documents written (:attr:`place`),
        as a query and an index name it."""
        return f"{self.place}.{db_field}" if self.place else db_field

    def held_by_others(self, db_field: str, stored: Any) -> dict[str, Any]:
        """A filter for documents other than this write's own that hold ``stored`` as their
        ``db_field`` (at :attr:`place`).

        A collision probe must not find the write's own document: if a later write (in a
        ``_save_create`` override, say) failed after the document was inserted, the value is
        the document's, not taken by another.
        """
        path = self.path(db_field)
        own = [seam.stored_pk(document) for document in self.roots or self.documents]
        known = [pk for pk in own if pk is not None]
        if not known or path == "_id":
            return {path: stored}
        return {path: stored, "_id": {"$nin": known}}

    def of(
        self,
        document_class: type[BaseDocument],
        documents: Sequence[BaseDocument],
        *,
        place: str = "",
        roots: Sequence[BaseDocument] = (),
    ) -> Write:
        """The same write, for other documents (one field's share of a batch; embedded
        documents at ``place`` in ``roots``); without ``owners``, which only
        :meth:`GeneratedField.note_assigned` is told."""
        return Write(document_class, self.collection, documents, place=place, roots=roots)


class Stored:
    """A value of a generated field in stored form, made by the write path and given to
    MongoEngine in an update (an upsert's ``set_on_insert__``): sent as it is. The generated
    field unwraps it; a field MongoEngine puts in its place (a ``DynamicField``, for a path into
    a dynamic embedded document of a dynamic document) serialises it by its ``to_mongo()``."""

    __slots__ = ("stored",)

    def __init__(self, stored: Any) -> None:
        self.stored = stored

    def __repr__(self) -> str:
        return f"Stored({self.stored!r})"

    def to_mongo(self, *args: Any, **kwargs: Any) -> Any:
        """The stored form (MongoEngine's ``DynamicField`` serialises a value so)."""
        return self.stored


#: The options MongoEngine's ``BaseField.__init__`` takes by name (read from its signature, so
#: a MongoEngine that adds one is followed).
BASE_FIELD_OPTIONS: Final = frozenset(keyword_names(BaseField.__init__))
#: The metadata MongoEngine's documentation names (``BaseField`` stores any unknown keyword as an
#: attribute; Flask-MongoEngine's forms read these two). Any other unknown keyword is refused:
#: MongoEngine would store a typo (``batchsize=``) silently and the setting would be lost.
FIELD_METADATA: Final = frozenset({"verbose_name", "help_text"})
_FLAG_OPTIONS: Final = ("required", "unique", "primary_key", "null", "sparse")
#: MongoEngine's update operators that write the value given, as ``transform.update`` names them
#: when it asks ``prepare_query_value()``.
_WRITING_OPS: Final = frozenset({"set", "setOnInsert", "push", "pushAll", "addToSet"})


_own_options_cache: dict[type, frozenset[str]] = {}


def _own_options(field_class: type) -> frozenset[str]:
    """The keyword parameters of the ``__init__`` of ``field_class`` and of its bases below
    :class:`GeneratedField` (what it takes besides MongoEngine's options)."""
    known = _own_options_cache.get(field_class)
    if known is not None:
        return known
    names: set[str] = set()
    for klass in field_class.__mro__:
        if klass is GeneratedField:
            break
        init = klass.__dict__.get("__init__")
        if init is not None:
            names.update(keyword_names(init))
    # Filled only on an error path; a lost race computes the same value twice.
    known = _own_options_cache[field_class] = frozenset(names)
    return known


def _check_base_options(options: dict[str, Any]) -> None:
    """Types and values of MongoEngine's own field options, checked with the value quoted
    (MongoEngine's own messages for ``db_field`` do not show it; the others it takes blindly)."""
    for name in _FLAG_OPTIONS:
        if name in options:
            check_bool(name, options[name])
    db_field = options.get("db_field")
    if db_field is not None:
        if not isinstance(db_field, str):
            raise TypeError(f"db_field must be a str, not {db_field!r}")
        if not db_field or "." in db_field or "\0" in db_field or db_field.startswith("$"):
            raise ValueError(
                f"db_field={db_field!r} is not a usable field name: expected a non-empty name "
                "without '.' or NUL, not starting with '$'"
            )
    unique_with = options.get("unique_with")
    if unique_with is not None and not (
        isinstance(unique_with, str)
        or (
            isinstance(unique_with, (list, tuple))
            and all(isinstance(name, str) for name in unique_with)
        )
    ):
        raise TypeError(
            f"unique_with must be a field name or a list of field names, not {unique_with!r}"
        )
    validation = options.get("validation")
    if validation is not None and not callable(validation):
        raise TypeError(
            f"validation must be a callable taking the value (or None), not {validation!r}"
        )
    choices = options.get("choices")
    if choices is not None and (
        not isinstance(choices, abc.Collection) or isinstance(choices, (str, bytes))
    ):
        raise TypeError(
            f"choices must be a list, tuple or set of values (or None), not {choices!r}"
        )
    # MongoEngine validates before the write path makes the values: a default or choices would
    # apply to no generated value (a default would even replace every one with itself).
    for name in ("default", "choices"):
        if options.get(name) is not None:
            raise ValueError(
                f"{name}={options[name]!r}: a generated field makes its own values, which no "
                f"{name} applies to; leave it out (give a value to a document instead)"
            )


class GeneratedField(BaseField):  # type: ignore[misc]
    """Base class of the fields whose value is produced when the document is written.

    Values are produced by ``save()``, ``Model.objects.insert()`` and upserts only: reading the
    attribute, ``pk``, ``==``, ``hash``, ``to_json``, ``to_mongo``, pickling and copying never
    produce one. A value the user assigned is kept and validated.
    """

    #: MongoEngine's flag for fields that fill themselves: its ``validate()`` then accepts the
    #: empty value of a required field (a primary key) before the write gives it one.
    _auto_gen = True

    #: Whether a value's stored form differs from the value (a UUID stored as Binary or text):
    #: then, as a primary key, MongoEngine's references need it put right (see
    #: :mod:`mongoengine_ids.write.references`).
    stored_form_differs: ClassVar[bool] = False

    #: MongoEngine's options the field refuses whatever their value (never suggested for a
    #: misspelt one).
    _refused_options: ClassVar[frozenset[str]] = frozenset({"default", "choices"})

    #: How many times a write is retried with a fresh value when :meth:`is_collision` claims a
    #: duplicate-key error (0: never, the error propagates).
    collision_retries: int = 0

    if TYPE_CHECKING:
        # For type checkers only: MongoEngine sets both on a field of a model (its source types
        # them loosely), and stubs of it (mongo-types) declare a BaseField.__new__ taking only
        # MongoEngine's options, which would refuse each field's own (probe AD).
        name: str
        db_field: str

        def __new__(cls, *args: Any, **kwargs: Any) -> Self: ...

    def __init__(self, **kwargs: Any) -> None:
        """Check MongoEngine's options, then hand them to ``BaseField``.

        Every field of the package passes the keyword arguments it did not take itself here,
        so this is the one place an unknown one is caught.

        Raises:
            TypeError: a keyword is neither a MongoEngine option nor one of the field's (the
                closest valid name is suggested), or an option has the wrong type.
            ValueError: ``db_field`` is not a usable field name.
        """
        unknown = [name for name in kwargs if name not in BASE_FIELD_OPTIONS | FIELD_METADATA]
        if unknown:
            accepted = BASE_FIELD_OPTIONS | FIELD_METADATA | _own_options(type(self))
            raise unexpected_keywords(
                f"{type(self).__name__}()", unknown, accepted - self._refused_options
            )
        _check_base_options(kwargs)
        super().__init__(**kwargs)
        if self.stored_form_differs:
            # Its values in a map (a path to one key) or cached by a reference go through
            # MongoEngine's reference and dict fields, which send them as given.
            seam.hook_reference_fields()

    def lookup_member(self, member_name: str) -> None:
        """A value of this field has no members (MongoEngine asks, for a path through a map of
        such values: ``set__codes__x=``, ``codes__x=``): the path ends at the map's key, whose
        value this field, or the map asking it, prepares in stored form."""

    def query_error(self, message: str) -> NoReturn:
        """Raise :class:`~mongoengine_ids.errors.InvalidQueryValueError` for a query value the
        field can never hold (``ValidationError`` and ``ValueError`` both catch it)."""
        raise InvalidQueryValueError(message, field_name=getattr(self, "name", None))

    @property
    def _label(self) -> str:
        """``Model.field`` for messages (the field's name alone before it is bound)."""
        owner = getattr(self, "owner_document", None)
        name = getattr(self, "name", None)
        if name is None and owner is not None:  # the items' field of a list or map field
            fields = seam.fields(owner).items()
            holding = (key for key, f in fields if getattr(f, "field", 0) is self)
            name = next((f"{key}[*]" for key in holding), None)
        name = name or f"<unbound {type(self).__name__}>"
        return f"{owner.__name__}.{name}" if owner is not None else name

    @property
    def depends_on(self) -> tuple[str, ...]:
        """The names of the fields of a document whose values :meth:`new_values` reads (a
        counter's scope). An upsert and a backfill, which have no document, give them from the
        filter and the update, or from the stored document. Default: none."""
        return ()

    def new_values(self, write: Write, count: int) -> list[Any]:
        """Return ``count`` new values, in Python form, for ``write.documents``."""
        raise NotImplementedError

    @property
    def values_unique(self) -> bool:
        """Whether no two documents may hold one value of the field (a key, ``unique``; not
        ``unique_with``, which makes the value unique with others only)."""
        return bool(self.primary_key or (self.unique and not self.unique_with))

    @property
    def tracks_assigned(self) -> bool:
        """Whether :meth:`note_assigned` does more than nothing (a counter, a proxy): where it
        does not, the write path spares the look-ups that tell a new value from one a document
        already holds. Default: False."""
        return False

    def note_assigned(self, write: Write, values: list[Any]) -> None:
        """Called before new documents holding values the user assigned are written.

        ``write.documents`` are those documents, in the order of ``values``.
        """

    def is_collision(self, write: Write, error: DuplicateKeyError, value: Any) -> bool:
        """Whether ``error``, raised by this write, was ``value`` of this field colliding."""
        return False

    def retries_exhausted(self, error: Exception, attempts: int) -> Exception:
        """The error to raise when every one of ``attempts`` writes collided."""
        return error

    def release_values(self, write: Write, values: list[Any]) -> None:
        """Values of this field that were not written (the write failed). Default: nothing."""

    def settled(self, holders: list[Any]) -> None:
        """The writes of ``holders`` (documents or embedded documents holding this field) are
        settled, or the values this field gave them given back: nothing of them is pending.
        Default: nothing."""

    def in_own_form(self, stored: Any, uuid_representation: int | None = None) -> bool:
        """Whether ``stored``, a key as read from the database, is in the form this field writes
        the value it reads it as (a query by that value finds it): if not, the document is
        addressed as stored and its ``save()`` refused (:func:`.seam.note_stored_key`).
        Default: True (a field of yours: its values are taken as stored)."""
        return True

    def _written_back(self, stored: Any) -> bool:
        """:meth:`in_own_form` of a field whose stored values are ints or text: the value read,
        written again, equals ``stored`` (``7.0`` is ``7``, as MongoDB compares them; the text
        ``"12345"`` is not the number a SequenceField reads it as, nor ``"k7m2q9"`` the
        Crockford id ``"K7M2Q9"``; a tuple is the array stored, a sub-document's keys in another
        order another sub-document). A value the field cannot write is taken as its own: the
        document's ``validate()`` refuses its save."""
        try:
            written = self.to_mongo(self.to_python(stored))
        except (ValidationError, ValueError, TypeError):
            return True
        return _equal_in_mongodb(written, stored)

    def reference_key(self, value: Any) -> Any:
        """``value``, as a key of this field, in the form MongoEngine's references (DBRefs) hold
        and send back to the database. Default: the Python value, which is also the stored one
        (ints and strings)."""
        return self.to_python(self.to_mongo(value))

    def coerce(self, value: Any) -> Any:
        """Turn a stored or loosely typed value into the Python value; junk unchanged (then
        :meth:`validate` reports it). Applied to every assignment."""
        return value

    if TYPE_CHECKING:
        # For type checkers only (MongoEngine's BaseField.__get__ runs): on the class, the field;
        # on a document, its value. Each field narrows the value's type.
        @overload
        def __get__(self, instance: None, owner: Any) -> Self: ...
        @overload
        def __get__(self, instance: object, owner: Any) -> Any: ...
        def __get__(self, instance: object, owner: Any) -> Any: ...

    def __set__(self, instance: Any, value: Any) -> None:
        super().__set__(instance, None if value is None else self.coerce(value))
        if value is None and seam.left_out(instance, self.name):
            # None over a value a projection left out (None too) is no change to MongoEngine:
            # marked, it is a value cleared, made anew as after a whole load (probe BN-2: an
            # embedded document written whole lost its stored value, and got none).
            seam.mark_changed(instance, self.name)
        seam.value_set(instance, self.name)

    def __deepcopy__(self, memo: dict[int, Any]) -> Self:
        """A field of the same options (MongoEngine copies a model's fields for
        ``no_dereference()``; a model may be built from copies of another's). Its runtime
        state, which holds locks and cannot be copied, is shared or made anew
        (:meth:`_copied`); the write path generates with the model's own fields only."""
        copied = copy.copy(self)
        memo[id(self)] = copied
        copied._copied()
        return copied

    def _copied(self) -> None:
        """Called on a copy just made: give it the runtime state it must not share with the
        field it was copied from. Default: nothing (a generator is shared: one per process)."""

    def prepare_query_value(self, op: str, value: Any) -> Any:
        """A value of this field in a query or an update, in stored form (MongoEngine asks).

        An update that writes the value (``set__``, ``set_on_insert__``, ``push__``...) gets
        it checked as ``save()`` checks a value you assign; a bool is never a value (MongoEngine
        asks for none with ``__exists``); a query value goes to :meth:`query_value`.

        Raises:
            InvalidQueryValueError: the value is not one the field accepts, quoted, saying what
                is (a ``ValidationError`` and a ``ValueError``: what MongoEngine's fields raise).
        """
        if op in seam.STRING_OPERATORS and op != "exact" and self.stores_text:
            return self._text_query(op, value)  # None too: refused, never sent as null
        if value is None:
            return value
        if isinstance(value, Stored):
            return value.stored  # the write path's own, in stored form
        if isinstance(value, bool):
            self.query_error(f"{self._label}: {value!r} is not a value of this field (a bool)")
        try:
            if op in _WRITING_OPS:
                self.validate(self.coerce(value))  # as an assignment coerces it, then save()
            elif isinstance(value, dict):
                # Sent as it is, MongoDB would take it for operators: id={"$ne": None} would
                # match every document (MongoEngine's SequenceField and IntField refuse it).
                name = getattr(self, "name", None) or "field"
                self.query_error(
                    f"cannot query {self._label} by the dict {value!r}: a dict is no value of "
                    f"this field; for an operator, use MongoEngine's ({name}__ne=, "
                    f"{name}__in=[...]) or __raw__"
                )
            return self.query_value(value)
        except InvalidQueryValueError:
            raise
        except ValidationError as error:  # a field's own validate() or query_value()
            raise InvalidQueryValueError(str(error), field_name=error.field_name) from error

    #: Whether the values are stored as text (a formatted number, a string space): then a
    #: string operator but ``exact`` matches the text as stored, as a ``StringField``'s does.
    stores_text: bool = False

    def _text_query(self, op: str, value: Any) -> Any:
        """A string operator's value (``code__startswith="T-4"``, ``icontains``, ``regex``...):
        text makes a regex of it as it is, as a ``StringField``'s does (a part of a value is no
        value of the field, to read leniently); a compiled pattern is sent as it is."""
        if isinstance(value, (re.Pattern, Regex)):
            return value
        if not isinstance(value, str):
            self.query_error(
                f"cannot query {self._label} by {op} {value!r}: expected a str or a compiled "
                "pattern"
            )
        return seam.text_query(op, value)

    def query_value(self, value: Any) -> Any:
        """A query value (not None, not a bool, not a dict) in stored form. Default: its stored
        form if it is a value of the field, else a ``ValidationError``."""
        self.validate(value)
        return self.to_mongo(value)

    def generate(self) -> None:
        """MongoEngine's generation hook, called by ``to_mongo()``: never produces a value.

        ``to_mongo()`` also serves ``to_json()`` and other reads; the write path fills values
        in instead, right before the write. A subclass cannot override it (see
        :meth:`__init_subclass__`).
        """
        return

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """Refuse a subclass overriding :meth:`generate`, which would never make the values
        (MongoEngine's ``SequenceField`` subclasses do so to shape them).

        Raises:
            TypeError: naming the class and what to use instead.
        """
        super().__init_subclass__(**kwargs)
        if cls.generate is not GeneratedField.generate:  # its own, or a mixin's
            raise TypeError(
                f"{cls.__qualname__} overrides generate(), which makes no value here: the "
                "write path makes them (generate() is MongoEngine's hook, which to_mongo() "
                "calls on reads too). To shape a SequenceField's stored value, pass "
                "value_decorator="
            )

    def check_embedded_in(self, owner: type[BaseDocument], name: str) -> None:
        """Called when an embedded document class holding this field as ``name`` is made
        (declared there, or from a mixin or a base); raises ``TypeError`` if the field cannot
        serve one. Every field can, by default."""

    def __set_name__(self, owner: type, name: str) -> None:
        seam.declared(self, owner, name)
