"""MongoEngine fields whose values are generated on the write path."""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any, ClassVar, overload

from bson.binary import Binary, UuidRepresentation

from .. import constants as C
from .. import resets
from ..stored import StoredUUID, StoredUUIDText
from ..write import seam
from ..write.field import GeneratedField, Write
from .generator import (
    ACCEPTED_TEXT,
    LocalityUUID,
    LocalityUUIDGenerator,
    Mode,
    _check_mode,
    _int_from_uuid_value,
    machine_mac,
)

if TYPE_CHECKING:
    from typing_extensions import Self

# Guards the lazy creation of the fields' generators.
_generator_lock = resets.ProcessLock()


class UUIDValueField(GeneratedField):
    """A generated field holding a 128-bit UUID-shaped value.

    Stored as BSON Binary subtype 4 (standard byte order) by default: it is written the same way
    whatever the connection's ``uuidRepresentation`` (and under mongomock, which cannot encode a
    native ``uuid.UUID``), and keeps the bytes in the order they sort. ``as_string=True`` stores
    the lower-case 36-character text instead. Reads return :attr:`value_class` instances;
    queries accept an instance, any :class:`uuid.UUID`, 16 bytes or the text.

    As a primary key, ``Model.id`` (the class attribute, which MongoEngine's reference fields
    use to make the DBRef of a stored key) answers ``to_python`` with the key in stored form
    (:meth:`reference_key`); the field in ``Model._fields`` and the documents' attribute are
    not affected (see :func:`mongoengine_ids.write.seam.key_for_references`).
    """

    value_class: ClassVar[type[uuid.UUID]] = uuid.UUID
    kind: ClassVar[str] = "UUID"
    stored_form_differs = True
    #: The version nibble (high half of byte 6) every stored value must carry; None: any.
    _version_nibble: ClassVar[int | None] = None
    #: A value of :attr:`value_class` is this field's if ``value.int & _value_mask`` is
    #: ``_value_bits`` (its version and variant bits; any value by default).
    _value_mask: ClassVar[int] = 0
    _value_bits: ClassVar[int] = 0

    if TYPE_CHECKING:  # the value's type for type checkers; BaseField.__get__ runs

        @overload
        def __get__(self, instance: None, owner: Any) -> Self: ...
        @overload
        def __get__(self, instance: object, owner: Any) -> uuid.UUID | None: ...
        def __get__(self, instance: object, owner: Any) -> Any: ...

    def __init__(self, *, as_string: bool = False, **kwargs: Any) -> None:
        if not isinstance(as_string, bool):
            raise TypeError(f"as_string must be a bool, not {as_string!r}")
        self.as_string = as_string
        super().__init__(**kwargs)

    def _build(self, value: Any) -> uuid.UUID:
        """The value as :attr:`value_class`; raises ValueError or TypeError."""
        if isinstance(value, uuid.UUID):
            return uuid.UUID(int=value.int)
        return uuid.UUID(int=_int_from_uuid_value(value, self.kind))

    def _is_value(self, value: Any) -> bool:
        """Whether ``value`` is already this field's Python value (of the right version)."""
        return type(value) is self.value_class and value.int & self._value_mask == self._value_bits

    def coerce(self, value: Any) -> Any:
        """The value as :attr:`value_class` if it reads as one; anything else unchanged."""
        if value is None or self._is_value(value):
            return value
        if isinstance(value, (StoredUUID, StoredUUIDText)):
            value = value.value
            if type(value) is self.value_class:
                return value
        if isinstance(value, Binary) and value.subtype == C.BSON_UUID_SUBTYPE and len(value) == 16:
            # Stored: read as the driver decodes it (mongomock hands the Binary itself), so a
            # UUID of another kind stored before the field reads as the uuid.UUID it is.
            value = uuid.UUID(bytes=bytes(value))
        try:
            return self._build(value)
        except (ValueError, TypeError):
            return value  # validate() explains what is wrong with it

    def to_python(self, value: Any) -> Any:
        return self.coerce(value)

    def in_own_form(self, stored: Any, uuid_representation: int | None = None) -> bool:
        """Whether ``stored``, a key as read from the database, is in the form this field
        writes: the text it writes with ``as_string`` (lower case, with hyphens), else Binary
        subtype 4, which a server's driver decodes to a ``uuid.UUID`` under
        ``uuid_representation`` ``standard`` only (under the legacy representations, a
        ``uuid.UUID`` read was subtype 3, as MongoEngine's ``UUIDField`` writes it under
        ``pythonLegacy``); a ``uuid.UUID`` decoded under no known representation is taken as
        the field's own."""
        if self.as_string:
            if not isinstance(stored, str):
                return False
            value = self.coerce(stored)
            return not isinstance(value, uuid.UUID) or stored == str(value)
        if isinstance(stored, Binary):
            return stored.subtype == C.BSON_UUID_SUBTYPE
        if isinstance(stored, uuid.UUID):
            return uuid_representation in (None, UuidRepresentation.STANDARD)
        return False

    def reference_key(self, value: Any) -> Any:
        """``value`` as MongoEngine's references hold it: a
        :class:`~mongoengine_ids.stored.StoredUUID` (or ``StoredUUIDText``), which is the stored
        form when sent and compares and hashes as the value."""
        checked = self.coerce(value)
        if not isinstance(checked, uuid.UUID):  # also a key of another kind, kept from before
            return checked
        return StoredUUIDText(checked) if self.as_string else StoredUUID(checked)

    if not TYPE_CHECKING:  # typed by the overloads above
        # MongoEngine's BaseField.__get__, but ``Model.id`` is what its references read (and
        # one Python frame, as before, on every read of ``document.id``).
        __get__ = seam.key_get

    def to_mongo(self, value: Any) -> Any:
        if not self._is_value(value):
            checked = self.coerce(value)
            if not self._is_value(checked):
                self.validate(value)  # raises, saying what is wrong with it
            value = checked
        return self._stored(value)

    def _stored(self, value: uuid.UUID) -> Binary | str:
        if self.as_string:
            return str(value)
        return Binary(value.int.to_bytes(16, "big"), C.BSON_UUID_SUBTYPE)

    def validate(self, value: Any) -> None:
        if self._is_value(self.coerce(value)):
            return
        try:
            self._build(value)
        except (ValueError, TypeError) as error:
            self.error(f"{self._label}: {error}")
        else:  # pragma: no cover - coerce() would have converted it on assignment
            self.error(f"{self._label}: {value!r} is not a {self.kind}")

    def query_value(self, value: Any) -> Any:
        """The stored form of a query value; a value that is no UUID at all raises
        ``ValidationError`` naming the field.

        A UUID of another version is accepted (it matches nothing the field wrote, but finds
        documents stored before the field replaced another kind of id); assigning one is refused.
        """
        try:
            number = _int_from_uuid_value(value, self.kind)
        except (ValueError, TypeError) as error:
            self.query_error(f"cannot query {self._label} by {value!r}: {error}")
        return self._stored(uuid.UUID(int=number))


class LocalityUUIDField(UUIDValueField):
    """A field holding a :class:`~mongoengine_ids.LocalityUUID`, generated when written.

    Args:
        mode: ``"spread"`` (default) or ``"sequential"``; the field makes its own generator.
        generator: a :class:`~mongoengine_ids.LocalityUUIDGenerator` to use instead (share one
            between models that write to the same collection). Exclusive with ``mode``.
        as_string: store the 36-character text instead of BSON Binary subtype 4.
        **kwargs: any MongoEngine field option (``primary_key``, ``db_field``, ...).

    Raises:
        TypeError: ``generator`` is not a LocalityUUIDGenerator, ``mode`` is not a str, or an
            unknown keyword argument (the closest valid name is suggested).
        ValueError: ``mode`` is unknown, or both ``mode`` and ``generator`` are given.
    """

    value_class = LocalityUUID
    kind = "Locality UUID"
    _version_nibble = C.LOCALITY_VERSION

    if TYPE_CHECKING:  # the value's type for type checkers; BaseField.__get__ runs

        @overload
        def __get__(self, instance: None, owner: Any) -> Self: ...
        @overload
        def __get__(self, instance: object, owner: Any) -> LocalityUUID | None: ...
        def __get__(self, instance: object, owner: Any) -> Any: ...

    def _build(self, value: Any) -> LocalityUUID:
        return LocalityUUID(value)

    def __init__(
        self,
        *,
        mode: Mode | None = None,
        generator: LocalityUUIDGenerator | None = None,
        as_string: bool = False,
        **kwargs: Any,
    ) -> None:
        if generator is not None and mode is not None:
            raise ValueError(
                f"give mode={mode!r} or generator={generator!r}, not both: "
                "a generator has its own mode"
            )
        if generator is not None and not isinstance(generator, LocalityUUIDGenerator):
            raise TypeError(f"generator must be a LocalityUUIDGenerator, not {generator!r}")
        if mode is not None:
            _check_mode(mode)
        self.mode: Mode = mode or (generator.mode if generator is not None else "spread")
        #: The field's one generator, made on first use: a list, which the field's copies
        #: share (``copy.deepcopy``), so that they use the same generator even if made later.
        self._generator: list[LocalityUUIDGenerator] = [] if generator is None else [generator]
        super().__init__(as_string=as_string, **kwargs)

    @property
    def generator(self) -> LocalityUUIDGenerator:
        """The generator of this field (made on first use: reading the MAC can be slow)."""
        made = self._generator
        if not made:
            machine_mac()  # read first, with no lock held (see machine_mac)
            with _generator_lock:
                # Two generators in one process would share pid and node: make exactly one.
                if not made:
                    made.append(LocalityUUIDGenerator(mode=self.mode))
        return made[0]

    def new_values(self, write: Write, count: int) -> list[Any]:
        return self.generator.generate_many(count)


__all__ = ["ACCEPTED_TEXT", "LocalityUUIDField", "UUIDValueField"]
