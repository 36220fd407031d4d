"""UUID keys in stored form, as MongoEngine carries them in references.

MongoEngine builds the ``DBRef`` of a reference from the referenced model's key field
(``Model.id.to_python(stored)``) and later sends ``DBRef.id`` to the database as it is: in
``dereference()``, in the ``$in`` query that loads a list of references, in the document that
``save()`` writes back. It then matches the documents it loaded to the references by
``document.id == DBRef.id`` and by hash. A UUID key of this package is stored as BSON Binary
subtype 4 (or its text with ``as_string=True``) whatever the connection's
``uuidRepresentation``, so a plain :class:`uuid.UUID` in a DBRef is sent as something else
(subtype 3 under ``pythonLegacy``, an encoding error under ``unspecified``, a value mongomock
never finds).

So the references MongoEngine builds hold the key in one of these two types (see
:func:`mongoengine_ids.write.seam.key_for_references`): BSON-encoded, it is exactly the stored
value; compared, ordered or hashed, it is the key's :class:`uuid.UUID`. They are what a user
sees in a DBRef read with ``no_dereference()`` and in ``LazyReference.pk``; ``.value`` is the key.
Assigning one to a document stores the plain value, so ``document.id`` is always a
:class:`~mongoengine_ids.LocalityUUID` or :class:`uuid.UUID`.

Warning:
    A stored key equals the plain ``Binary`` (or ``str``) of the same content, as the database
    compares them, but hashes as the UUID: a dict or set keyed by plain ``Binary`` values does
    not find it.
"""

from __future__ import annotations

import uuid
from typing import Any

from bson.binary import Binary

from . import constants as C


def _uuid_of(value: object) -> uuid.UUID | None:
    """The UUID ``value`` is or holds (a stored key's); None for anything else."""
    if isinstance(value, _ComparesAsUUID):
        return value._value
    return value if isinstance(value, uuid.UUID) else None


class _ComparesAsUUID:
    """What both stored forms share: they compare and hash as the UUID they hold."""

    _value: uuid.UUID

    @property
    def value(self) -> uuid.UUID:
        """The key, as the document's attribute holds it."""
        return self._value

    def __eq__(self, other: object) -> bool:
        if isinstance(other, uuid.UUID):
            return self._value == other
        return super().__eq__(other)

    def __ne__(self, other: object) -> bool:
        return not self == other

    def __hash__(self) -> int:
        return hash(self._value)

    # Ordered as the UUID too, against UUIDs and stored keys (probe AN: ``sorted()`` of the
    # keys of references beside documents' keys raised TypeError).
    def __lt__(self, other: object) -> bool:
        value = _uuid_of(other)
        return self._value < value if value is not None else super().__lt__(other)  # type: ignore[misc]

    def __le__(self, other: object) -> bool:
        value = _uuid_of(other)
        return self._value <= value if value is not None else super().__le__(other)  # type: ignore[misc]

    def __gt__(self, other: object) -> bool:
        value = _uuid_of(other)
        return self._value > value if value is not None else super().__gt__(other)  # type: ignore[misc]

    def __ge__(self, other: object) -> bool:
        value = _uuid_of(other)
        return self._value >= value if value is not None else super().__ge__(other)  # type: ignore[misc]

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self._value,))


class StoredUUID(_ComparesAsUUID, Binary):
    """A UUID key as BSON Binary subtype 4 that compares and hashes as the UUID.

    Args:
        value: the key (a :class:`uuid.UUID`, a :class:`~mongoengine_ids.LocalityUUID`...).
    """

    def __new__(cls, value: uuid.UUID) -> StoredUUID:
        _check(value)
        self = super().__new__(cls, value.bytes, C.BSON_UUID_SUBTYPE)
        self._value = value
        return self

    def __str__(self) -> str:
        return str(self._value)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({str(self._value)!r})"


class StoredUUIDText(_ComparesAsUUID, str):
    """A UUID key stored as its text (``as_string=True``) that compares and hashes as the UUID.

    Args:
        value: the key (a :class:`uuid.UUID`, a :class:`~mongoengine_ids.LocalityUUID`...).
    """

    def __new__(cls, value: uuid.UUID) -> StoredUUIDText:
        _check(value)
        self = super().__new__(cls, str(value))
        self._value = value
        return self

    def __repr__(self) -> str:
        return f"{type(self).__name__}({str(self)!r})"


def _check(value: object) -> None:
    if not isinstance(value, uuid.UUID):
        raise TypeError(f"value must be a uuid.UUID (a key of the model), not {value!r}")


__all__ = ["StoredUUID", "StoredUUIDText"]
