"""The package's exceptions.

Each one derives from :class:`MongoEngineIdsError` and from the builtin or MongoEngine error that
existing code already catches: a bad id is a :class:`ValueError`, running out of retries is a
:class:`mongoengine.errors.NotUniqueError`.
"""

from __future__ import annotations

from mongoengine.errors import BulkWriteError, NotUniqueError


class MongoEngineIdsError(Exception):
    """Base class of every error raised by ``mongoengine_ids``."""


class InvalidIdError(MongoEngineIdsError, ValueError):
    """A value could not be read as an id of the expected kind."""


class IdSpaceExhaustedError(MongoEngineIdsError, RuntimeError):
    """No more unique values can be handed out (a range or a value space is used up)."""


class RetriesExhaustedError(MongoEngineIdsError, NotUniqueError):  # type: ignore[misc]
    """Every attempt to write a fresh random value collided with an existing one."""


def invalid_id(value: object, kind: str, accepted: str) -> InvalidIdError:
    """Build the one "invalid id" error, quoting the bad value and what is accepted."""
    return InvalidIdError(f"{value!r} is not a valid {kind}: expected {accepted}")


class BulkNotUniqueError(MongoEngineIdsError, NotUniqueError, BulkWriteError):  # type: ignore[misc]
    """A bulk insert hit duplicate keys; caught as NotUniqueError and as MongoEngine's
    BulkWriteError (what ``QuerySet.insert`` raised for it)."""
