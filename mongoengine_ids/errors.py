"""The package's exceptions.

Each one derives from :class:`MongoEngineIdsError` and from the builtin or MongoEngine error that
existing code already catches: a bad id is a :class:`ValueError`, running out of retries is a
:class:`mongoengine.errors.NotUniqueError`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from mongoengine.errors import BulkWriteError, NotUniqueError, OperationError, ValidationError

if TYPE_CHECKING:
    pass


class MongoEngineIdsError(Exception):
    """Base class of every error raised by ``mongoengine_ids``."""


class InvalidIdError(MongoEngineIdsError, ValueError):
    """A value could not be read as an id of the expected kind."""


class IdSpaceExhaustedError(MongoEngineIdsError, RuntimeError):
    """No more unique values can be handed out (a range or a value space is used up)."""


class RetriesExhaustedError(MongoEngineIdsError, NotUniqueError):  # type: ignore[misc]
    """Every attempt to write a fresh value collided with an existing one (a random value, or
    a counter's value held by documents written without it)."""


class CorruptedCounterError(MongoEngineIdsError, ValueError):
    """A counter document is not what the sequence wrote: ``next`` not an integer, bounds
    missing or inconsistent. Nothing is handed out from it until it is repaired."""


class _FieldValidationError(ValidationError, MongoEngineIdsError):  # type: ignore[misc]
    """A ``ValidationError`` naming the field (MongoEngine's, built as its fields build one)."""

    field_name: str | None  # set by ValidationError (declared for stubs that omit it)

    def __init__(self, message: str, *, field_name: str | None = None) -> None:
        ValidationError.__init__(self, message, field_name=field_name)


class ExplicitValueError(_FieldValidationError):
    """A document was saved with an explicit value for a field that forbids them
    (``allow_explicit=False``); caught as MongoEngine's ``ValidationError`` too."""


class InvalidQueryValueError(_FieldValidationError, InvalidIdError):
    """A query by a value the field can never hold (``objects(id="abc")``); caught as
    MongoEngine's ``ValidationError`` (what a query of an ObjectId key by one raises) and as
    ``ValueError`` (what MongoEngine's ``SequenceField`` and ``UUIDField`` raise)."""


class UniqueIndexMissingError(MongoEngineIdsError, OperationError):  # type: ignore[misc]
    """A random field's unique index does not exist and may not be created automatically, or
    a unique index cannot be built over the stored documents."""


def unique_index_unbuilt(
    who: str, collection: str, field: str | None, error: Exception
) -> UniqueIndexMissingError:
    """The error for a unique index (on ``field``, if known) that ``collection`` cannot have:
    two stored documents hold one value, null most often (probe 40, B: the server's bare
    ``DuplicateKeyError``, or MongoEngine's ``NotUniqueError`` as if a new document collided)."""
    name = "field" if field is None else repr(field)
    on = "a uniquely indexed field" if field is None else repr(field)
    return UniqueIndexMissingError(
        f"{who}: a unique index of collection {collection!r} cannot be built: two documents "
        f"hold one value in {on} ({error}). A sparse index skips the documents lacking the "
        f"field, not those holding null: unset the nulls (update_many({{{name}: None}}, "
        f"{{'$unset': {{{name}: ''}}}})), give the other duplicates values of their own, then "
        "save() or backfill() again (it fills the documents lacking a value)"
    )


def invalid_id(value: object, kind: str, accepted: str) -> InvalidIdError:
    """Build the one "invalid id" error, quoting the bad value and what is accepted."""
    return InvalidIdError(f"{value!r} is not a valid {kind}: expected {accepted}")


class BulkNotUniqueError(MongoEngineIdsError, NotUniqueError, BulkWriteError):  # type: ignore[misc]
    """A bulk insert hit duplicate keys; caught as NotUniqueError and as MongoEngine's
    BulkWriteError (what ``QuerySet.insert`` raised for it)."""


class BulkRetriesExhaustedError(RetriesExhaustedError, BulkNotUniqueError):
    """Every attempt to give a document of a bulk insert a fresh value collided; caught as
    RetriesExhaustedError, NotUniqueError and MongoEngine's BulkWriteError."""
