"""Id strategies for MongoEngine: declare the field, get the id when the document is written.

>>> from mongoengine import Document
>>> from mongoengine_ids import LocalityUUIDField
>>> class Place(Document):
...     id = LocalityUUIDField(primary_key=True)
"""

from __future__ import annotations

from .errors import (
    BulkNotUniqueError,
    IdSpaceExhaustedError,
    InvalidIdError,
    MongoEngineIdsError,
    RetriesExhaustedError,
)
from .fields import LocalityUUIDField, UUIDValueField
from .locality import LocalityUUID, LocalityUUIDGenerator
from .sequence import CorruptedCounterError, ExplicitValueError, Sequence, SequenceField
from .standard import UUID4Field, UUID7Field, UUID7Generator
from .writepath import GeneratedField, WriteContext, current_write

__version__ = "0.1.0"

__all__ = [
    "BulkNotUniqueError",
    "CorruptedCounterError",
    "ExplicitValueError",
    "GeneratedField",
    "IdSpaceExhaustedError",
    "InvalidIdError",
    "LocalityUUID",
    "LocalityUUIDField",
    "LocalityUUIDGenerator",
    "MongoEngineIdsError",
    "RetriesExhaustedError",
    "Sequence",
    "SequenceField",
    "UUID4Field",
    "UUID7Field",
    "UUID7Generator",
    "UUIDValueField",
    "WriteContext",
    "__version__",
    "current_write",
]
