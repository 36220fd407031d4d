"""The write-path hook shared by every id field of this package.

MongoEngine offers one hook for generated values: a field with ``_auto_gen = True`` has its
``generate()`` called from ``to_mongo()`` whenever its value is missing. ``to_mongo()`` also runs
for ``to_json()`` and other reads, and ``generate()`` is told nothing of the document, its
database or the batch it belongs to. So this package never generates there. It adds, per model
class and without touching MongoEngine itself:

* a ``save()`` wrapper that opens a :class:`WriteContext` for the document being saved, writes a
  generated primary key with insert semantics (``force_insert``: a collision raises
  ``NotUniqueError`` instead of silently replacing the existing document, MongoEngine issue
  1472), and puts the document back as it was if the write fails;
* a ``to_mongo()`` wrapper: ``save()`` serialises the document right after ``pre_save`` and
  ``validate()``, where MongoEngine itself would generate, so the missing values are filled in
  at the first ``to_mongo()`` of the document being saved, and of no other document;
* a ``queryset_class`` whose ``insert()`` asks each field for the ids of the whole batch in one
  call, so that a counter leases once per bulk insert;
* a ``cascade_save`` wrapper that tells ``save()`` its write has happened.

A duplicate key raised by the document's own insert is marked as such (:data:`OWN_INSERT`),
read from the error's traceback, which passes through that document's ``_save_create()``.

All are installed by :meth:`GeneratedField.__set_name__` on the class that declares the field
(or on each Document made from a plain mixin declaring it), and inherited by its subclasses.
"""

from __future__ import annotations

import functools
import inspect
import logging
import os
import re
import threading
import weakref
from collections.abc import Callable, Iterable, Sequence
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, ClassVar, cast

import pymongo.errors
from mongoengine import signals
from mongoengine.base import BaseDocument, BaseField
from mongoengine.document import Document
from mongoengine.errors import BulkWriteError, NotUniqueError, OperationError
from mongoengine.queryset import QuerySet

from .errors import (
    BulkNotUniqueError,
    PartialBulkInsertError,
    PartialBulkNotUniqueError,
)

if TYPE_CHECKING:
    from pymongo.database import Database

_INSTALLED = "_mongoengine_ids_installed"
_MIXIN_INSTALLED = "_mongoengine_ids_mixin_installed"
_DUPLICATE_KEY_CODES = (11000, 11001)


class WriteContext:
    """What a field needs to know to generate ids for one write.

    Attributes:
        document_class: the model class being written.
        documents: the documents of this write (one for ``save()``, the batch for ``insert()``).
    """

    # Class-level defaults: save() makes one of these per call, so __init__ stores only what
    # every write has (measured: half the cost of seven slot stores).

    #: Set when save() cascades, which it does only after writing the document: whatever fails
    #: later must neither retry nor undo the generated values.
    written = False
    #: save() only: the document whose first to_mongo() fills in the generated values (None
    #: once they are), and the (name, field) pairs to fill.
    filling: Any = None  # a Document
    pending: Sequence[tuple[str, GeneratedField]] = ()
    #: save() only: force_insert was set by this package, not by the caller (cascaded saves of
    #: other documents must not inherit it).
    forced_insert = False
    #: save() only: the (field, value) pairs the user gave the document, announced to
    #: note_assigned(); a value assigned after save() began joins them at the fill.
    assigned: list[tuple[GeneratedField, Any]]
    #: save() only, after a collision: the values this save() generated and keeps, by name.
    kept: dict[str, Any] | None = None

    def __init__(
        self,
        document_class: type[BaseDocument],
        documents: Sequence[BaseDocument],
        database: Callable[[], Database[Any]] | None = None,
    ) -> None:
        self.document_class = document_class
        self.documents = documents
        self._database = database

    @property
    def database(self) -> Database[Any]:
        """The database the documents are written to (follows ``db_alias`` and ``switch_db``).

        Without a ``database`` callable, that of the first document's collection.
        """
        if self._database is None:
            return cast("Database[Any]", self.documents[0]._get_collection().database)
        return self._database()


_active: ContextVar[WriteContext | None] = ContextVar("mongoengine_ids_write", default=None)


_reset_callbacks: list[Callable[[], None]] = []


def on_reset(callback: Callable[[], None]) -> Callable[[], None]:
    """Register ``callback`` to drop per-process state (leased blocks, caches) on reset."""
    _reset_callbacks.append(callback)
    return callback


def reset_process_state() -> None:
    """Drop every per-process cache of this package (the test fixtures call it after a test)."""
    for callback in _reset_callbacks:
        callback()


def current_write() -> WriteContext | None:
    """The write in progress in this thread, or None outside ``save()`` and ``insert()``."""
    return _active.get()


class GeneratedField(BaseField):  # type: ignore[misc]
    """Base class of the fields whose value is produced when the document is written.

    A subclass implements :meth:`new_values` (Python values, one per document) and the usual
    MongoEngine field methods. Values are produced by ``save()`` and ``Model.objects.insert()``
    only: reading the attribute, ``pk``, ``==``, ``hash``, ``to_json``, pickling and copying
    never produce one. A value the user assigned is kept and validated.
    """

    _auto_gen = True

    #: The type of the Python value; reads and assignments of it skip :meth:`coerce`.
    python_type: type | None = None

    # -- the strategy interface -----------------------------------------------------------------

    #: How many times a write is retried with a fresh value when :meth:`is_collision` says a
    #: duplicate-key error was this field's (0: never, the error propagates).
    collision_retries: int = 0

    def new_values(self, context: WriteContext, count: int) -> list[Any]:
        """Return ``count`` new values, in Python form, for the documents of ``context``."""
        raise NotImplementedError

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if hasattr(cls, "new_stored_value"):  # in the class or a mixin of it
            # Renamed: an override under the old name would be ignored, silently.
            raise TypeError(
                f"{cls.__name__}.new_stored_value() is no longer called: override "
                "new_value(context), which returns the Python value"
            )

    def new_value(self, context: WriteContext) -> Any:
        """One new value, in Python form, for ``save()``; override to skip work on that path."""
        return self.new_values(context, 1)[0]

    def note_assigned(self, context: WriteContext, values: list[Any]) -> None:
        """Called before a new document is written with a value the user assigned.

        A counter moves past such values here, so that it never generates them later.
        """

    def check_unconfirmed(self, context: WriteContext, document: BaseDocument, value: Any) -> None:
        """Called before ``save()`` sends ``value`` again: an earlier write of ``document`` with
        it may have been applied (its reply was lost, see :func:`_mark_unconfirmed`).

        A primary key (inserted, never replaced) or a unique index refuses a second copy by
        itself. Otherwise the value is looked up: the field generated it for this document
        alone, so a document holding it is the earlier write, applied.

        Raises:
            NotUniqueError: the earlier write is in the database.
        """
        if self.primary_key or self.unique:
            return
        collection = document._get_collection()
        if collection.find_one({self.db_field: self.to_mongo(value)}, {"_id": 1}) is not None:
            raise NotUniqueError(
                f"{type(document).__name__}.{self.name}: {value!r} is already written: the "
                "earlier write of this document whose reply was lost was applied, so it is not "
                "written twice"
            )

    def is_collision(self, error: NotUniqueError, document: BaseDocument) -> bool:
        """Whether ``error`` was a duplicate of this field's generated value in ``document``."""
        return False

    def retries_exhausted(
        self, error: NotUniqueError, document: BaseDocument, attempts: int
    ) -> Exception:
        """The error to raise when every one of ``attempts`` writes collided."""
        return cast(Exception, error)

    def release_values(self, context: WriteContext, values: list[Any]) -> None:
        """Called with values of this field that were not written: the write failed.

        The values came from :meth:`new_values` or were announced to :meth:`note_assigned`;
        values that :meth:`is_collision` attributed to this field are not passed (they are
        taken). A field that reserved values elsewhere releases them here. Default: nothing.
        """

    def coerce(self, value: Any) -> Any:
        """Turn a stored or loosely typed value into the Python value; return junk unchanged.

        Called on assignment and on reads of values written straight into the document's data,
        so it must be cheap and must not raise: :meth:`validate` reports what it leaves alone.
        """
        return value

    # -- MongoEngine's hooks --------------------------------------------------------------------

    def generate(self) -> Any:
        """MongoEngine's auto-generation hook, called by ``to_mongo()``: never produces a value.

        ``to_mongo()`` serves reads too (``to_json()``, a log line in a signal handler) and does
        not say which document it serialises, so values are filled in by ``save()`` (at the
        saved document's own first ``to_mongo()``) and ``insert()`` instead. ``_auto_gen``
        stays set: MongoEngine's ``validate()`` then accepts the empty value of a required
        field (a primary key).
        """
        return None

    def __set_name__(self, owner: type, name: str) -> None:
        if issubclass(owner, Document):
            install(owner)
        elif issubclass(owner, BaseDocument):
            # Saving the parent document would leave the value missing, silently.
            raise TypeError(
                f"{type(self).__name__} {name!r} generates its value when a Document is saved "
                f"and cannot be declared on {owner.__name__!r}, an embedded document: "
                "declare it on the top-level Document, or assign values to a plain field"
            )
        else:
            install_on_subclasses(owner)  # a mixin: hook the Documents made from it

    def __get__(self, instance: Any, owner: type) -> Any:
        if instance is None:
            return self
        value = instance._data.get(self.name)
        if value is None or type(value) is self.python_type:
            return value
        coerced = self.coerce(value)
        if coerced is not value:
            # A stored form written straight into _data is converted once, on its first read.
            instance._data[self.name] = coerced
        return coerced

    def __set__(self, instance: Any, value: Any) -> None:
        if value is not None and type(value) is not self.python_type:
            value = self.coerce(value)
        super().__set__(instance, value)


# -- installation on a model class --------------------------------------------------------------

_FIELDS_ATTR = "_mongoengine_ids_fields"


def generated_fields(document_class: type[BaseDocument]) -> tuple[tuple[str, GeneratedField], ...]:
    """The (name, field) pairs of ``document_class`` whose values this package generates."""
    # Cached on the class itself (not inherited: each subclass has its own fields); a class
    # attribute look-up is about 0.3 us cheaper per save() than a WeakKeyDictionary.
    found: tuple[tuple[str, GeneratedField], ...] | None = document_class.__dict__.get(_FIELDS_ATTR)
    if found is None:
        found = tuple(
            (name, field)
            for name, field in document_class._fields.items()
            if isinstance(field, GeneratedField)
        )
        setattr(document_class, _FIELDS_ATTR, found)
    return found


class _SavePlan:
    """What ``save()`` needs to know of a model class, worked out once."""

    __slots__ = ("fields", "generated_id", "only")

    def __init__(self, document_class: type[BaseDocument]) -> None:
        self.fields = generated_fields(document_class)
        id_field = document_class._meta.get("id_field")
        #: The name of the primary key if this package generates it, else None.
        self.generated_id: str | None = (
            id_field if any(name == id_field for name, _ in self.fields) else None
        )
        #: The name of the one generated field, if there is exactly one (the common case).
        self.only: str | None = self.fields[0][0] if len(self.fields) == 1 else None


_PLAN_ATTR = "_mongoengine_ids_save_plan"


def _save_plan(document_class: type[BaseDocument]) -> _SavePlan:
    # Cached on the class itself, like generated_fields().
    plan = _SavePlan(document_class)
    setattr(document_class, _PLAN_ATTR, plan)
    return plan


def install(owner: type[Document]) -> None:
    """Install the write-path hook on ``owner``; idempotent, inherited by subclasses."""
    # Inserting through a parent's queryset (Root.objects.insert([Sub()])) must generate too:
    # the owner and the ancestors whose collection it shares, never Document itself.
    for klass in owner.__mro__:
        if not issubclass(klass, Document) or klass is Document or "_meta" not in vars(klass):
            continue
        meta = vars(klass)["_meta"]
        if klass is owner or meta.get("allow_inheritance"):
            meta["queryset_class"] = generating_queryset(meta.get("queryset_class", QuerySet))
    if any(_INSTALLED in vars(klass) for klass in owner.__mro__):
        return
    owner.save = _wrap_save(owner.save)
    owner.to_mongo = _fill_on_serialising(owner.to_mongo)
    owner.cascade_save = _record_cascade(owner.cascade_save)

    def hook_subclass(cls: type[Any]) -> None:
        # A subclass may name its own queryset_class in meta: give it our insert() too.
        meta = cls._meta
        meta["queryset_class"] = generating_queryset(meta.get("queryset_class", QuerySet))
        # And it may override to_mongo() (itself or through a mixin), even without calling
        # super(): the values are filled in before whichever to_mongo() save() calls.
        if not getattr(cls.to_mongo, _FILLS, False):
            cls.to_mongo = _fill_on_serialising(cls.to_mongo)

    _on_subclass(owner, hook_subclass)
    setattr(owner, _INSTALLED, True)


def install_on_subclasses(mixin: type[Any]) -> None:
    """Install the hook on every Document made from ``mixin``, a plain class declaring a field.

    MongoEngine copies the fields of plain mixin classes into the models built from them, but
    the field only ever sees the mixin: hook the models as they are created.
    """
    if _MIXIN_INSTALLED in vars(mixin):
        return

    def install_on_documents(cls: type[Any]) -> None:
        if issubclass(cls, Document):
            install(cls)

    _on_subclass(mixin, install_on_documents)
    setattr(mixin, _MIXIN_INSTALLED, True)


def _on_subclass(klass: type[Any], hook: Callable[[type[Any]], None]) -> None:
    """Run ``hook(subclass)`` for every subclass of ``klass`` created from now on, after the
    ``__init_subclass__`` that ``klass`` (or its bases) already had."""
    previous = klass.__dict__.get("__init_subclass__")

    def __init_subclass__(cls: type[Any], /, **kwargs: Any) -> None:
        if previous is not None:
            previous.__func__(cls, **kwargs)
        else:
            super(klass, cls).__init_subclass__(**kwargs)
        hook(cls)

    klass.__init_subclass__ = classmethod(__init_subclass__)  # type: ignore[assignment]


#: Marks the to_mongo() wrappers, so that a subclass's own to_mongo() is wrapped once.
_FILLS = "_mongoengine_ids_fills"


def _fill_on_serialising(original: Callable[..., Any]) -> Callable[..., Any]:
    # save() serialises the document right after pre_save and validate(), and that is where
    # MongoEngine itself would generate: fill in the values at the first to_mongo() of the
    # document being saved. Another document serialised during the save (a to_json() in a
    # signal handler) gets nothing. Also with save(validate=False), and with a save() override
    # that serialises the document itself.
    if original in _MONGOENGINE_TO_MONGO:
        # MongoEngine's own, passed its arguments as they are: through *args and **kwargs, the
        # two calls of every save() cost a quarter of the hook (measured in instructions).
        @functools.wraps(original)
        def to_mongo(self: Document, use_db_field: bool = True, fields: Any = None) -> Any:
            context = _active.get()
            if context is not None and context.filling is self:
                _fill(context, self)
            return original(self, use_db_field, fields)

    else:  # a subclass's or a mixin's own

        @functools.wraps(original)
        def to_mongo(self: Document, *args: Any, **kwargs: Any) -> Any:
            context = _active.get()
            if context is not None and context.filling is self:
                _fill(context, self)
            return original(self, *args, **kwargs)

    setattr(to_mongo, _FILLS, True)
    return to_mongo


def _fill(context: WriteContext, document: Document) -> None:
    data = document._data
    late: list[tuple[str, GeneratedField]] | None = None
    for entry in context.pending:
        name, field = entry
        value = data.get(name)
        if value is None:  # a retry refills only the field that collided
            data[name] = field.new_value(context)
        elif context.kept is None or context.kept.get(name) is not value:
            late = [entry] if late is None else [*late, entry]
    if late is not None:
        _note_late(context, data, late)
    context.filling = None  # after the values: if one fails, nothing is half-filled


def _note_late(
    context: WriteContext, data: dict[str, Any], late: list[tuple[str, GeneratedField]]
) -> None:
    """Values assigned after save() began (a ``pre_save`` handler, ``clean()``, a ``save()``
    override): the user's, like values assigned before. They are no longer this save()'s to
    generate, retry, clear or release, and are announced to ``note_assigned()`` (with
    ``reserve_in``, reserved) before anything is written."""
    context.pending = [entry for entry in context.pending if entry not in late]
    for name, field in late:
        value = data[name]
        field.note_assigned(context, [value])
        context.assigned.append((field, value))


#: MongoEngine's own to_mongo() methods: both take (use_db_field=True, fields=None).
_MONGOENGINE_TO_MONGO = (BaseDocument.to_mongo, Document.to_mongo)


#: Set on a pymongo error raised by the insert of a document itself (save()'s _save_create(), or
#: that document's write error in a bulk insert), to that document: a field may then reason
#: from the collection's indexes alone. A duplicate key raised by any other write during the
#: save (a signal handler writing elsewhere) carries no such mark.
OWN_INSERT = "_mongoengine_ids_own_insert"


#: MongoEngine's own insert step. A model's override of ``_save_create()`` may write something
#: else first (an outbox record): only a duplicate key raised inside MongoEngine's own step,
#: called for the document, is the document's.
_SAVE_CREATE_CODE = Document._save_create.__code__


def _mark_own_insert(error: NotUniqueError, document: Document) -> bool | None:
    """Mark the pymongo error behind ``error`` with :data:`OWN_INSERT` if ``document``'s own
    insert raised it: its traceback passes through MongoEngine's ``Document._save_create()``,
    called with that document.

    Read from the traceback, on the collision path only: a wrapper around ``_save_create()``
    would cost every save a call.

    Returns:
        True if marked; False if another write inside a ``_save_create()`` override of the
        document raised it (before or after the insert: whether the document was written is
        unknown); None if it came from anywhere else.
    """
    cause = error.__cause__ or error.__context__
    trace = getattr(cause, "__traceback__", None)
    in_override = False
    while trace is not None:
        frame = trace.tb_frame
        if frame.f_locals.get("self") is document:
            if frame.f_code is _SAVE_CREATE_CODE:
                setattr(cause, OWN_INSERT, document)
                return True
            in_override = in_override or frame.f_code.co_name == "_save_create"
        trace = trace.tb_next
    return False if in_override else None


def _record_cascade(original: Callable[..., Any]) -> Callable[..., Any]:
    # save() cascades right after its write, before it sets the pk (which is what tells a
    # written document from an unwritten one otherwise). Only cascading saves pay for this.
    @functools.wraps(original)
    def cascade_save(self: Document, *args: Any, **kwargs: Any) -> Any:
        context = _active.get()
        if context is not None and context.documents[0] is self:
            context.written = True
            if context.forced_insert and kwargs.get("force_insert"):
                # MongoEngine passes save()'s force_insert on to the referenced documents:
                # the one this package set concerns this document only.
                kwargs["force_insert"] = False
        return original(self, *args, **kwargs)

    return cascade_save


def _wrap_save(original: Callable[..., Any]) -> Callable[..., Any]:
    # Runs on every save() of the model: kept lean, since the work around a ~50 us mongomock
    # save shows up in the benchmark's ratios.
    position = _force_insert_position(original)  # a model's own save() may differ
    @functools.wraps(original)
    def save(self: Document, *args: Any, **kwargs: Any) -> Any:
        plan: _SavePlan = type(self).__dict__.get(_PLAN_ATTR) or _save_plan(type(self))
        fields = plan.fields
        if not fields:
            return original(self, *args, **kwargs)
        data = self._data
        only = plan.only
        context = WriteContext(type(self), (self,))
        # The values the user gave a new document.
        assigned: list[tuple[GeneratedField, Any]] = []
        context.assigned = assigned
        pending: Sequence[tuple[str, GeneratedField]]
        if (
            only is not None
            and data.get(only) is None
            and self._created
            and not _unconfirmed_documents
            and (plan.generated_id is None or not (args or kwargs))
        ):
            # The common case, in few steps: one generated field, missing on a new document;
            # nothing assigned to note, nothing unconfirmed, and for a primary key no arguments
            # to look through for force_insert.
            created = True
            pending = context.pending = fields
            unconfirmed = _NONE
            if plan.generated_id is not None:
                kwargs["force_insert"] = context.forced_insert = True
        else:
            created = self._created
            if only is None:
                pending = [entry for entry in fields if data.get(entry[0]) is None]
            else:
                pending = fields if data.get(only) is None else ()
            context.pending = pending
            unconfirmed = _unconfirmed(self)
            if created and len(pending) < len(fields):
                try:
                    for name, field in fields:
                        value = data.get(name)
                        if value is None:
                            continue
                        if name in unconfirmed:  # from an interrupted save() of this document
                            field.check_unconfirmed(context, self, value)
                        else:
                            field.note_assigned(context, [value])
                            assigned.append((field, value))
                except BaseException:
                    _give_back(context, data, [], assigned)
                    raise
            # A generated pk is inserted, never written over a document that has it; so is one
            # an interrupted save() may have written (if it did, NotUniqueError, not a copy).
            id_field = plan.generated_id
            force_insert = id_field is not None and (
                data.get(id_field) is None or id_field in unconfirmed
            )
            if force_insert:
                if args or kwargs:
                    args = _force_insert(position, args, kwargs, context)
                    cascade_kwargs = kwargs.get("cascade_kwargs")
                    if cascade_kwargs is None and position == 0 and len(args) > 5:
                        cascade_kwargs = args[5]  # MongoEngine's sixth parameter
                    if cascade_kwargs and "force_insert" in cascade_kwargs:
                        context.forced_insert = False  # the caller chose for the cascade
                else:
                    kwargs["force_insert"] = context.forced_insert = True
            if not created:
                for name, _ in pending:
                    # An existing document gaining a generated value: MongoEngine writes
                    # changed fields only, so mark the field before validate() fills it in.
                    self._mark_as_changed(name)
        attempts: dict[str, int] | None = None  # per field: one's retries don't use another's
        while True:
            context.filling = self
            token = _active.set(context)
            try:
                result = original(self, *args, **kwargs)
                if unconfirmed:
                    _confirm(self)
                return result
            except NotUniqueError as error:
                if _written(context, created, self):
                    raise  # e.g. a cascaded save failed: this document is in the database
                pending = context.pending  # less any value the user assigned meanwhile
                culprit = None
                if created:
                    if _mark_own_insert(error, self) is False:
                        # Another write of a _save_create() override: the document may be in
                        # the database already. Keep the values, and insert next time.
                        _mark_unconfirmed(self, unconfirmed | {name for name, _ in pending})
                        raise
                    culprit = _collided_field(error, self, pending)
                if culprit is None:
                    _give_back(context, data, pending, assigned)
                    raise
                name, field = culprit
                if attempts is None:
                    attempts = {}
                tried = attempts.get(name, 1)
                if tried <= field.collision_retries:
                    attempts[name] = tried + 1
                    context.kept = {other: data.get(other) for other, _ in pending if other != name}
                    data[name] = None  # the next to_mongo() fills in a fresh value
                    continue
                _give_back(context, data, pending, assigned, taken=name)
                exhausted = field.retries_exhausted(error, self, tried)
                if exhausted is error:
                    raise
                raise exhausted from error
            except BaseException as error:
                if _written(context, created, self):
                    raise
                pending = context.pending
                if _outcome_unknown(error):
                    # The server may have applied the write: keep every value (and whatever
                    # was reserved for it), and make the next save() insert, not replace.
                    _mark_unconfirmed(self, unconfirmed | {name for name, _ in pending})
                else:  # certainly not written: as it was before save()
                    _give_back(context, data, pending, assigned)
                raise
            finally:
                _active.reset(token)

    return save


def _force_insert(
    position: int | None, args: tuple[Any, ...], kwargs: dict[str, Any], context: WriteContext
) -> tuple[Any, ...]:
    """Set ``force_insert`` in the arguments of a ``save()`` whose ``force_insert`` parameter
    is at ``position`` (see :func:`_force_insert_position`); returns the positional arguments
    (``kwargs`` is updated)."""
    if position is not None and position < len(args):
        if not args[position]:
            context.forced_insert = True
            args = (*args[:position], True, *args[position + 1 :])
        return args
    if not kwargs.get("force_insert"):
        context.forced_insert = True
        kwargs["force_insert"] = True  # an override must take **kwargs and pass them on
    return args


parameter_kind = inspect.Parameter


def _force_insert_position(save: Callable[..., Any]) -> int | None:
    """The index of ``force_insert`` among the positional arguments of ``save`` after ``self``
    (0 for MongoEngine's), or None if it cannot be given positionally."""
    position: int | None = None
    try:
        parameters = list(inspect.signature(save).parameters.values())
    except (TypeError, ValueError):  # pragma: no cover - a builtin or an odd callable
        parameters = []
    if parameters and parameters[0].kind is parameter_kind.VAR_POSITIONAL:
        return 0  # save(*args, **kwargs), e.g. a decorator without functools.wraps: forwards
    for index, parameter in enumerate(parameters[1:]):  # after self
        if parameter.kind is parameter.VAR_POSITIONAL:
            # save(self, *args, **kwargs) passing them on to MongoEngine's, whose first is it.
            return index
        if parameter.kind not in (parameter.POSITIONAL_ONLY, parameter.POSITIONAL_OR_KEYWORD):
            break
        if parameter.name == "force_insert":
            position = index
            break
    return position


#: Errors after which a write may or may not have been applied: the reply was lost, or the
#: write concern timed out after the primary applied it.
_OUTCOME_UNKNOWN = (pymongo.errors.ConnectionFailure, pymongo.errors.WriteConcernError)

#: The documents whose last write may or may not have been applied, by id(): each weakly held,
#: with the names of the generated fields whose values that write may have stored. (Kept out
#: of _data, which MongoEngine serialises, and out of the documents themselves: save() checks
#: every document, and an empty registry answers for all of them at once.)
_unconfirmed_documents: dict[int, tuple[weakref.ref[BaseDocument], frozenset[str]]] = {}
#: Held to change the registry. Reentrant: a collection run while it is held may call the
#: weak reference's callback in the same thread.
_unconfirmed_lock = threading.RLock()


def _new_unconfirmed_lock() -> None:
    # A forked child gets a copy of the lock as it was: held, if another thread of the parent
    # held it at the fork, and by no thread of the child. A new one, then.
    global _unconfirmed_lock
    _unconfirmed_lock = threading.RLock()


os.register_at_fork(after_in_child=_new_unconfirmed_lock)


def _outcome_unknown(error: BaseException) -> bool:
    """Whether ``error`` (or what MongoEngine wrapped in it) leaves the write's fate unknown."""
    seen: BaseException | None = error
    for _ in range(4):  # MongoEngine wraps pymongo's error once; a little slack beyond that
        if seen is None:
            return False
        if isinstance(seen, _OUTCOME_UNKNOWN):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


_NONE: frozenset[str] = frozenset()


def _unconfirmed(document: BaseDocument) -> frozenset[str]:
    """The names :func:`_mark_unconfirmed` gave ``document`` (none once confirmed)."""
    entry = _unconfirmed_documents.get(id(document)) if _unconfirmed_documents else None
    if entry is None or entry[0]() is not document:
        return _NONE
    return entry[1]


def _mark_unconfirmed(document: BaseDocument, names: Iterable[str]) -> None:
    key = id(document)

    def forget(reference: weakref.ref[BaseDocument]) -> None:  # the document was collected
        with _unconfirmed_lock:  # not a new object's mark under the same id
            entry = _unconfirmed_documents.get(key)
            if entry is not None and entry[0] is reference:
                del _unconfirmed_documents[key]

    entry = (weakref.ref(document, forget), frozenset(names))
    with _unconfirmed_lock:
        _unconfirmed_documents[key] = entry


def _confirm(document: BaseDocument) -> None:
    """``document``'s write was acknowledged: drop its mark."""
    with _unconfirmed_lock:
        entry = _unconfirmed_documents.get(id(document))
        if entry is not None and entry[0]() is document:
            del _unconfirmed_documents[id(document)]


def _written(context: WriteContext, created: bool, document: Document) -> bool:
    # Right after its write, save() sets the pk, which turns _created off; only a cascade runs
    # between the two, and the wrapped cascade_save() records that.
    return context.written or (created and not document._created)


def _collided_field(
    error: NotUniqueError, document: Document, pending: Sequence[tuple[str, GeneratedField]]
) -> tuple[str, GeneratedField] | None:
    for name, field in pending:
        if field.collision_retries and field.is_collision(error, document):
            return name, field
    return None


def _give_back(
    context: WriteContext,
    data: dict[str, Any],
    pending: Sequence[tuple[str, GeneratedField]],
    assigned: list[tuple[GeneratedField, Any]],
    *,
    taken: str | None = None,
) -> None:
    """Undo a save() that wrote nothing: clear generated values, release what was reserved.

    Releasing a reservation this save() made is always safe: nobody else holds it. ``taken``
    names the field whose value collided: that value is in use, so it stays reserved.
    """
    # Clear first: a release that fails (the network) must not leave an unwritten generated
    # value behind, which the next save() would take for an assigned one.
    releases = [(field, data.get(name)) for name, field in pending if name != taken]
    for name, _ in pending:
        data[name] = None
    releases += assigned
    for field, value in releases:
        if value is not None:
            try:
                field.release_values(context, [field.coerce(value)])
            except Exception:  # a leaked reservation, never a duplicate: keep the first error
                _logger.warning("could not release %r of %s", value, field.name, exc_info=True)


# -- bulk insert --------------------------------------------------------------------------------

_queryset_classes: weakref.WeakKeyDictionary[type, type] = weakref.WeakKeyDictionary()


def generating_queryset(base: type[QuerySet]) -> type[QuerySet]:
    """``base`` with an ``insert()`` that generates the ids of a whole batch at once."""
    if issubclass(base, GeneratingQuerySetMixin):
        return base
    try:
        return _queryset_classes[base]
    except KeyError:
        klass = type(f"Generating{base.__name__}", (GeneratingQuerySetMixin, base), {})
        _queryset_classes[base] = klass
        return klass


class GeneratingQuerySetMixin:
    """Bulk insert that hands each id field the whole batch (one lease per batch).

    Otherwise MongoEngine's ``QuerySet.insert``: signals, ``load_bulk``, the same errors (with the
    pymongo error kept as ``__cause__``). Documents are inserted, never replaced.

    When a value the batch generated belongs to a field that retries collisions
    (``collision_retries > 0``), the batch is inserted with ``ordered=False``: the documents
    whose write error that field's :meth:`~GeneratedField.is_collision` claims get a fresh value
    of that field only and are inserted again, up to ``collision_retries`` times each. Every
    other document is written once. If some documents still cannot be written, the others are
    in the database and :class:`PartialBulkInsertError` (or :class:`PartialBulkNotUniqueError`
    when every failure is a duplicate key) lists the failed ones.
    """

    _document: ClassVar[type[Document]]
    _collection: Any

    def insert(
        self,
        doc_or_docs: Document | Iterable[Document],
        load_bulk: bool = True,
        write_concern: dict[str, Any] | None = None,
        signal_kwargs: dict[str, Any] | None = None,
    ) -> Any:
        """Insert ``doc_or_docs``, generating the missing ids of the whole batch at once.

        Args:
            doc_or_docs: a document or an iterable of documents of this queryset's class.
            load_bulk: return the documents reloaded from the database (else their ids).
            write_concern: the write concern of the insert.
            signal_kwargs: extra keyword arguments for the bulk-insert signals.

        Returns:
            The documents (or ids), in the order given; one if one document was given.

        Raises:
            OperationError: a document is of the wrong class or already saved.
            NotUniqueError: a duplicate key (the only document, or an ordered batch).
            PartialBulkNotUniqueError: some documents of a retrying batch hit duplicate keys
                that cannot be retried, or ran out of retries; the others were inserted.
            PartialBulkInsertError: likewise, with at least one failure of another kind.
            BulkWriteError: an ordered batch failed, or a write concern was not satisfied.
        """
        return_one = isinstance(doc_or_docs, BaseDocument)
        docs: list[Document] = [doc_or_docs] if return_one else list(doc_or_docs)
        for doc in docs:
            if not isinstance(doc, self._document):
                raise OperationError(
                    f"Some documents inserted aren't instances of {self._document}"
                )
            if doc.pk is not None and not doc._created:
                raise OperationError("Some documents have ObjectIds, use doc.update() instead")
        signal_kwargs = signal_kwargs or {}
        signals.pre_bulk_insert.send(self._document, documents=docs, **signal_kwargs)

        collection = self._collection
        context = WriteContext(self._document, docs, lambda: collection.database)
        generated = _generate_batch(context, docs)
        token = _active.set(context)
        try:
            if _retries_collisions(generated):
                ids = _insert_retrying(context, collection, docs, generated, write_concern or {})
            else:
                ids = _insert_once(context, collection, docs, generated, write_concern or {})
        finally:
            _active.reset(token)

        for doc, doc_id in zip(docs, ids, strict=True):
            doc.pk = doc_id
        if _unconfirmed_documents:  # documents sent again after a lost reply: written now
            for doc in docs:
                _confirm(doc)
        if not load_bulk:
            signals.post_bulk_insert.send(
                self._document, documents=docs, loaded=False, **signal_kwargs
            )
            pks = [doc.pk for doc in docs]  # Python values (LocalityUUID, not the stored Binary)
            return pks[0] if return_one else pks
        results = _reload(self, ids)
        signals.post_bulk_insert.send(
            self._document, documents=results, loaded=True, **signal_kwargs
        )
        return results[0] if return_one else results


#: Failed documents named in a partial-insert message; the rest are in ``failed``.
_SHOWN_FAILURES = 10

_logger = logging.getLogger(__name__)


def _retries_collisions(generated: list[tuple[int, Document, str]]) -> bool:
    """Whether a value the batch generated belongs to a field that retries collisions."""
    for _, doc, name in generated:
        field = type(doc)._fields.get(name)
        if isinstance(field, GeneratedField) and field.collision_retries > 0:
            return True
    return False


def _insert_once(
    context: WriteContext,
    collection: Any,
    docs: list[Document],
    generated: list[tuple[int, Document, str]],
    write_concern: dict[str, Any],
) -> list[Any]:
    """One ordered ``insert_many`` (MongoEngine's behaviour); unwritten documents are put back,
    the written ones (the first ``nInserted``) get their pk. If the outcome is unknown (a lost
    reply), every document keeps its values and inserts, never replaces, on its next save()."""
    raw: list[Any] = []
    try:
        raw = [doc.to_mongo() for doc in docs]
        return _insert_raw(collection, raw, write_concern, ordered=True)
    except BaseException as error:
        if raw and _outcome_unknown(error):
            for _, doc, name in generated:
                _mark_unconfirmed(doc, _unconfirmed(doc) | {name})
            raise
        written = _inserted_count(error) if raw else 0
        for doc, son in zip(docs[:written], raw, strict=False):
            doc.pk = son["_id"]  # in the database now: a later save() must update it
        _unwind(context, docs, generated, range(written, len(docs)))
        raise


def _insert_retrying(
    context: WriteContext,
    collection: Any,
    docs: list[Document],
    generated: list[tuple[int, Document, str]],
    write_concern: dict[str, Any],
) -> list[Any]:
    """Insert unordered; re-insert, with a fresh value, the documents that collided on a
    generated field that claims the collision. Returns the ``_id`` of every document."""
    names_of: dict[int, set[str]] = {}
    for position, _, name in generated:
        names_of.setdefault(position, set()).add(name)
    failed: dict[int, Exception] = {}
    taken: set[tuple[int, str]] = set()  # (position, field): the value collided, it is in use
    attempts: dict[tuple[int, str], int] = {}
    concern_errors: list[Any] = []
    pending: list[int] = list(range(len(docs)))  # never written (yet), or fate unknown
    raw: list[Any] = []
    inserting = False
    try:
        raw = [doc.to_mongo() for doc in docs]
        while pending:
            inserting = True
            write_errors, concern = _insert_unordered(
                collection, [raw[position] for position in pending], write_concern
            )
            inserting = False
            concern_errors.extend(concern)
            retry: dict[int, tuple[str, GeneratedField, list[int]]] = {}
            for index, write_error in write_errors:
                position = pending[index]
                doc = docs[position]
                error = _write_error(write_error)
                setattr(error.__cause__, OWN_INSERT, doc)
                culprit = _bulk_culprit(error, doc, names_of.get(position, set()))
                if culprit is None:
                    failed[position] = error
                    continue
                name, field = culprit
                count = attempts.get((position, name), 1)
                if count > field.collision_retries:
                    taken.add((position, name))
                    exhausted = field.retries_exhausted(error, doc, count)
                    if exhausted is not error:
                        exhausted.__cause__ = error
                    failed[position] = exhausted
                    continue
                attempts[(position, name)] = count + 1
                retry.setdefault(id(field), (name, field, []))[2].append(position)
            # From here on only the documents to retry are unwritten: if making their fresh
            # values fails, the rest of this round stays written.
            pending = sorted(
                {position for _, _, positions in retry.values() for position in positions}
            )
            for name, field, positions in retry.values():
                # Only this field of only these documents: the others keep what they were given.
                batch = [docs[position] for position in positions]
                retry_context = WriteContext(context.document_class, batch, context._database)
                values = field.new_values(retry_context, len(positions))
                for position, value in zip(positions, values, strict=True):
                    docs[position]._data[name] = value
            for position in pending:
                raw[position] = docs[position].to_mongo()
    except BaseException as error:
        unwritten = set(pending) | set(failed)
        for position, son in enumerate(raw):
            if position not in unwritten:
                docs[position].pk = son["_id"]  # written in an earlier round
        _unwind(context, docs, generated, failed, taken)
        if inserting and _outcome_unknown(error):
            # The server may have written them: keep their values, insert (never replace) on
            # their next save().
            for position in pending:
                names = names_of.get(position, set())
                _mark_unconfirmed(docs[position], _unconfirmed(docs[position]) | names)
        else:
            _unwind(context, docs, generated, pending, release=False)
        raise
    if failed:
        _unwind(context, docs, generated, failed, taken)
        inserted = [position for position in range(len(docs)) if position not in failed]
        for position in inserted:
            docs[position].pk = raw[position]["_id"]
        if len(docs) == 1:
            raise failed[0]
        raise _partial_error(docs, failed, inserted, concern_errors)
    if concern_errors:
        raise BulkWriteError(f"Bulk write error: ({{'writeConcernErrors': {concern_errors!r}}})")
    return [raw[position]["_id"] for position in range(len(docs))]


def _bulk_culprit(
    error: Exception, doc: Document, generated_names: set[str]
) -> tuple[str, GeneratedField] | None:
    """The generated field of ``doc`` that claims ``error`` as its collision, if any."""
    if not isinstance(error, NotUniqueError):
        return None
    for name, field in generated_fields(type(doc)):
        if (
            name in generated_names
            and field.collision_retries > 0
            and field.is_collision(error, doc)
        ):
            return name, field
    return None


def _insert_unordered(
    collection: Any, raw: list[Any], write_concern: dict[str, Any]
) -> tuple[list[tuple[int, dict[str, Any]]], list[Any]]:
    """``insert_many(ordered=False)``; returns (index in ``raw``, write error) pairs and the
    write concern errors. pymongo sets ``_id`` in each raw document it sends."""
    from mongoengine.context_managers import set_write_concern

    with set_write_concern(collection, write_concern) as target:
        try:
            target.insert_many(raw, ordered=False)
        except pymongo.errors.BulkWriteError as err:
            details = err.details
            write_errors = [(int(e["index"]), e) for e in details.get("writeErrors", [])]
            return write_errors, list(details.get("writeConcernErrors", []))
        except pymongo.errors.OperationFailure as err:
            raise OperationError(f"Could not save document ({err})") from err
    return [], []


def _write_error(write_error: dict[str, Any]) -> Exception:
    """One document's write error as the exception MongoEngine raises for it.

    A duplicate key becomes ``NotUniqueError`` whose ``__cause__`` is a ``DuplicateKeyError``
    carrying the write error as ``details`` (``keyPattern``/``keyValue`` on a real server), as
    ``save()`` would have raised it: ``is_collision`` reads both the same way.
    """
    code = write_error.get("code")
    message = str(write_error.get("errmsg", ""))
    error: Exception
    cause: Exception
    if code in _DUPLICATE_KEY_CODES:
        cause = pymongo.errors.DuplicateKeyError(message, code, write_error)
        error = NotUniqueError(f"Tried to save duplicate unique keys ({message})")
    else:
        cause = pymongo.errors.WriteError(message, code, write_error)
        error = OperationError(f"Could not save document ({message})")
    error.__cause__ = cause
    return error


def _unwind(
    context: WriteContext,
    docs: Sequence[Document],
    generated: list[tuple[int, Document, str]],
    positions: Iterable[int],
    taken: set[tuple[int, str]] | None = None,
    *,
    release: bool = True,
) -> None:
    """Put the unwritten documents at ``positions`` back as before ``insert()``.

    Their generated values are cleared, and each field is given the values of these documents
    it may release (generated or assigned; not those in ``taken``).
    """
    unwritten = set(positions)
    if not unwritten:
        return
    to_release: dict[int, tuple[GeneratedField, list[Any]]] = {}
    if release:
        for position in sorted(unwritten):
            doc = docs[position]
            for name, field in generated_fields(type(doc)):
                value = doc._data.get(name)
                if value is not None and (taken is None or (position, name) not in taken):
                    to_release.setdefault(id(field), (field, []))[1].append(value)
    for position, doc, name in generated:
        if position in unwritten:
            doc._data[name] = None
    for field, values in to_release.values():
        try:
            field.release_values(context, values)
        except Exception:  # a failed release must not hide why the insert failed
            _logger.warning("could not release values of %s", field.name, exc_info=True)


def _partial_error(
    docs: Sequence[Document],
    failed: dict[int, Exception],
    inserted: list[int],
    concern_errors: list[Any],
) -> PartialBulkInsertError:
    shown = "; ".join(
        f"#{position}: {failed[position]}" for position in sorted(failed)[:_SHOWN_FAILURES]
    )
    if len(failed) > _SHOWN_FAILURES:
        shown += f"; and {len(failed) - _SHOWN_FAILURES} more (see .failed)"
    message = (
        f"{len(failed)} of {len(docs)} documents were not inserted (the other "
        f"{len(inserted)} were): {shown}"
    )
    if concern_errors:
        message += f"; write concern errors: {concern_errors!r}"
    klass = (
        PartialBulkNotUniqueError
        if all(isinstance(error, NotUniqueError) for error in failed.values())
        else PartialBulkInsertError
    )
    return klass(
        message,
        [(position, docs[position], failed[position]) for position in sorted(failed)],
        [docs[position] for position in inserted],
    )


def _generate_batch(
    context: WriteContext, docs: Sequence[Document]
) -> list[tuple[int, Document, str]]:
    """Fill the missing generated values of ``docs``: one new_values() call per field.

    Returns (position in ``docs``, document, field name) for every value filled in.
    """
    by_field: dict[int, tuple[str, GeneratedField, list[tuple[int, Document]]]] = {}
    assigned: dict[int, tuple[GeneratedField, list[Any]]] = {}
    for position, doc in enumerate(docs):
        unconfirmed = _unconfirmed(doc)
        for name, field in generated_fields(type(doc)):
            value = doc._data.get(name)
            if value is None:
                by_field.setdefault(id(field), (name, field, []))[2].append((position, doc))
            elif name in unconfirmed:  # from an insert of this document whose reply was lost
                field.check_unconfirmed(context, doc, value)  # before anything is reserved
            else:
                assigned.setdefault(id(field), (field, []))[1].append(value)
    for field, values in assigned.values():
        field.note_assigned(context, values)
    generated: list[tuple[int, Document, str]] = []
    try:
        for name, field, pending in by_field.values():
            values = field.new_values(context, len(pending))
            for (position, doc), value in zip(pending, values, strict=True):
                doc._data[name] = value
                generated.append((position, doc, name))
    except BaseException:
        for _, doc, name in generated:
            doc._data[name] = None
        raise
    return generated


def _insert_raw(
    collection: Any, raw: list[Any], write_concern: dict[str, Any], *, ordered: bool
) -> list[Any]:
    from mongoengine.context_managers import set_write_concern

    with set_write_concern(collection, write_concern) as target:
        try:
            if len(raw) == 1:
                return [target.insert_one(raw[0]).inserted_id]
            return list(target.insert_many(raw, ordered=ordered).inserted_ids)
        except pymongo.errors.DuplicateKeyError as err:
            raise NotUniqueError(f"Could not save document ({err})") from err
        except pymongo.errors.BulkWriteError as err:
            if all(
                e.get("code") in _DUPLICATE_KEY_CODES for e in err.details.get("writeErrors", [])
            ):
                raise BulkNotUniqueError(f"Bulk write error: ({err.details})") from err
            raise BulkWriteError(f"Bulk write error: ({err.details})") from err
        except pymongo.errors.OperationFailure as err:
            if re.match("^E1100[01] duplicate key", str(err)):
                raise NotUniqueError(f"Tried to save duplicate unique keys ({err})") from err
            raise OperationError(f"Could not save document ({err})") from err


def _inserted_count(error: BaseException) -> int:
    """How many leading documents of a failed ordered insert were written."""
    cause = error.__cause__
    if isinstance(cause, pymongo.errors.BulkWriteError):
        return int(cause.details.get("nInserted", 0))
    return 0


def _reload(queryset: Any, raw_ids: list[Any]) -> list[Any]:
    # MongoEngine's insert() looks reloaded documents up by the raw _id it sent; with
    # uuidRepresentation="standard" a stored UUID comes back as uuid.UUID, not the Binary that
    # was sent, and the look-up misses. Key both sides by the Python value instead.
    to_python = queryset._document._fields[queryset._document._meta["id_field"]].to_python
    loaded = {to_python(key): doc for key, doc in queryset.in_bulk(raw_ids).items()}
    return [loaded.get(to_python(raw_id)) for raw_id in raw_ids]
