"""Id strategies for MongoEngine: declare the field, get the id when the document is written.

>>> from mongoengine import Document
>>> from mongoengine_ids import LocalityUUIDField
>>> class Place(Document):
...     id = LocalityUUIDField(primary_key=True)
"""

from __future__ import annotations

from .errors import (
    BulkNotUniqueError,
    BulkRetriesExhaustedError,
    CorruptedCounterError,
    ExplicitValueError,
    IdSpaceExhaustedError,
    InvalidIdError,
    InvalidQueryValueError,
    MongoEngineIdsError,
    RetriesExhaustedError,
    UniqueIndexMissingError,
)
from .locality import LocalityUUID, LocalityUUIDField, LocalityUUIDGenerator, UUIDValueField
from .random_unique import RandomFieldStats, RandomUniqueField
from .sequence import Sequence, SequenceField
from .standard import UUID4Field, UUID7Field, UUID7Generator
from .stored import StoredUUID, StoredUUIDText
from .write import GeneratedField, Write, backfill

__version__ = "0.1.0"

__all__ = [
    "BulkNotUniqueError",
    "BulkRetriesExhaustedError",
    "CorruptedCounterError",
    "ExplicitValueError",
    "GeneratedField",
    "IdSpaceExhaustedError",
    "InvalidIdError",
    "InvalidQueryValueError",
    "LocalityUUID",
    "LocalityUUIDField",
    "LocalityUUIDGenerator",
    "MongoEngineIdsError",
    "RandomFieldStats",
    "RandomUniqueField",
    "RetriesExhaustedError",
    "Sequence",
    "SequenceField",
    "StoredUUID",
    "StoredUUIDText",
    "UUID4Field",
    "UUID7Field",
    "UUID7Generator",
    "UUIDValueField",
    "UniqueIndexMissingError",
    "Write",
    "__version__",
    "backfill",
]
