"""Standard RFC 9562 UUIDs: version 4 (random) and version 7 (time-ordered).

UUIDv7 layout (RFC 9562, section 5.7), with the monotonic counter of its section 6.2, method 1
(a fixed-length counter in the leftmost random bits), as CPython 3.14's ``uuid.uuid7`` does::

    bits 127-80  unix_ts_ms   48 bits  Unix epoch milliseconds
    bits  79-76  version       4 bits  0b0111
    bits  75-64  counter_hi   12 bits  \\
    bits  63-62  variant       2 bits  0b10   > a 42-bit counter, seeded at random (top bit 0)
    bits  61-32  counter_lo   30 bits  /      each millisecond, then incremented
    bits  31-0   random       32 bits  fresh for every id
"""

from __future__ import annotations

import os
import time
import uuid
import weakref
from collections.abc import Callable
from typing import Any, Final

from .. import resets
from .._checks import check_callable, check_int, check_room, is_int, suggest_keywords
from ..errors import IdSpaceExhaustedError, invalid_id
from ..locality.field import UUIDValueField
from ..locality.generator import Clock, _int_from_uuid_value, before_1970
from ..resets import NotCopied
from ..write.field import Write

V7_COUNTER_BITS: Final = 42
V7_COUNTER_MAX: Final = (1 << V7_COUNTER_BITS) - 1
V7_SEED_MASK: Final = (1 << (V7_COUNTER_BITS - 1)) - 1  # top bit 0: room to count up
V7_TIME_MASK: Final = (1 << 48) - 1
_V7_FLAGS: Final = (0x7 << 76) | (0b10 << 62)
_LOW30: Final = (1 << 30) - 1

RandomBytes = Callable[[int], bytes]

_generators: weakref.WeakSet[UUID7Generator] = weakref.WeakSet()


def _checked_clock(clock: Clock) -> Clock:
    """``clock``, whose every reading is checked: never wrapped into the 48-bit time field."""

    def read() -> int:
        now = clock()
        if type(now) is not int:
            raise TypeError(
                f"the clock returned {now!r} ({type(now).__name__}): expected an int, Unix "
                "epoch milliseconds"
            )
        if not 0 <= now <= V7_TIME_MASK:
            raise ValueError(
                f"the clock returned {now!r}: expected Unix epoch milliseconds from 0 to "
                f"{V7_TIME_MASK} (the 48-bit time field)"
            )
        return now

    return read


def _checked_random(random_bytes: RandomBytes) -> RandomBytes:
    """``random_bytes``, whose every answer is checked to be ``n`` bytes."""

    def read(n: int) -> bytes:
        data = random_bytes(n)
        if not isinstance(data, (bytes, bytearray)):
            raise TypeError(
                f"random_bytes({n}) returned {data!r} ({type(data).__name__}): expected bytes"
            )
        if len(data) != n:
            raise ValueError(f"random_bytes({n}) returned {data!r}: expected exactly {n} bytes")
        return bytes(data)

    return read


class UUID7Generator(NotCopied):
    """Makes RFC 9562 version 7 UUIDs, strictly increasing within the generator.

    Args:
        clock: callable returning Unix epoch milliseconds as an int. Default: the wall clock.
        random_bytes: callable returning n random bytes. Default: :func:`os.urandom`.

    Each millisecond seeds a 42-bit counter at random (top bit clear) and increments it for
    every further id in that millisecond; when the clock stands still or steps back, the last
    millisecond is kept and the counter goes on, and when the counter runs out the time field
    moves on one millisecond. So ids sort in the order they were made, and a generator never
    repeats one. A forked child starts afresh. Between generators (and processes), uniqueness
    rests on 73 random bits per millisecond (41 of the counter's seed, 32 per id).

    An injected ``clock`` or ``random_bytes`` is checked each time it is called: a clock reading
    that is not an int from 0 to 2**48 - 1, or random bytes of the wrong type or length, raise
    ``TypeError`` or ``ValueError`` instead of making an id.

    Raises:
        TypeError: ``clock`` or ``random_bytes`` is not callable, or an unknown keyword (the
            closest is named).
    """

    # A copy would go on from this one's millisecond and counter (a shallow one sharing its
    # lock), outside the fork reset: ids of one millisecond apart by 32 random bits only, where
    # two generators have 73 (probe BR-1). As a LocalityUUIDGenerator, it is not copied.
    _COPIED = (
        "the copy would go on from its millisecond and counter. Share the one generator, or "
        "make a new UUID7Generator()"
    )

    __slots__ = ("__weakref__", "_clock", "_counter", "_last_ms", "_lock", "_random")

    @suggest_keywords
    def __init__(
        self, *, clock: Clock | None = None, random_bytes: RandomBytes | None = None
    ) -> None:
        resets.check_process()  # (made as the process's own: see LocalityUUIDGenerator)
        if clock is not None:
            check_callable("clock", clock, "a callable returning epoch milliseconds (an int)")
        if random_bytes is not None:
            check_callable("random_bytes", random_bytes, "a callable like os.urandom")
        self._clock = None if clock is None else _checked_clock(clock)
        self._random: RandomBytes = (
            os.urandom if random_bytes is None else _checked_random(random_bytes)
        )
        self._lock = resets.ProcessLock()
        self._last_ms = -1
        self._counter = 0
        _generators.add(self)

    def _after_fork_in_child(self) -> None:
        self._last_ms = -1

    def __repr__(self) -> str:
        clock = "time.time_ns" if self._clock is None else repr(self._clock)
        return f"UUID7Generator(clock={clock}, last_ms={self._last_ms})"

    def generate(self) -> uuid.UUID:
        """Make the next id."""
        (value,) = self.generate_many(1)
        return value

    def generate_many(self, count: int) -> list[uuid.UUID]:
        """Make the next ``count`` ids, as ``count`` calls of :meth:`generate` would, reading the
        clock once and the random bits of their low 32 bits in one call.

        Raises:
            TypeError: ``count`` is not an int.
            ValueError: ``count`` is negative, or more ids than memory holds.
            IdSpaceExhaustedError: the 48-bit time field is used up (no id is made).
        """
        if not is_int(count) or count < 0:
            check_int("count", count, 0)
        check_room("count", count)
        clock = self._clock
        now = clock() if clock is not None else time.time_ns() // 1_000_000
        if now < 0:  # the system clock (an injected one is checked by _checked_clock)
            raise before_1970(now)
        numbers = []
        with self._lock:  # random_bytes is called under it, as it always was
            tails = self._random(4 * count) if count else b""
            counter, ms = self._counter, self._last_ms
            for at in range(0, 4 * count, 4):
                if now > ms:  # a new millisecond: the counter starts at a random seed
                    ms = now
                    counter = int.from_bytes(self._random(6), "big") & V7_SEED_MASK
                else:
                    counter += 1
                    if counter > V7_COUNTER_MAX:
                        # 2**41 or more ids in one millisecond: move the time on, reseed.
                        if ms >= V7_TIME_MASK:
                            raise IdSpaceExhaustedError(
                                f"the 48-bit time field is used up (millisecond {V7_TIME_MASK}):"
                                " no later version 7 UUID exists"
                            )
                        ms += 1
                        counter = int.from_bytes(self._random(6), "big") & V7_SEED_MASK
                tail = int.from_bytes(tails[at : at + 4], "big")
                numbers.append(
                    (ms << 80) | ((counter >> 30) << 64) | ((counter & _LOW30) << 32) | tail
                )
            self._counter, self._last_ms = counter, ms
        return [_uuid_from_int(number | _V7_FLAGS) for number in numbers]


def _reinit_in_child() -> None:
    for generator in list(_generators):
        generator._after_fork_in_child()


resets.on_fork(_reinit_in_child)


def uuid7_timestamp_ms(value: uuid.UUID) -> int:
    """The Unix epoch milliseconds embedded in a version 7 UUID.

    Raises:
        TypeError: ``value`` is not a :class:`uuid.UUID`.
        InvalidIdError: ``value`` is not a version 7 RFC 9562 UUID (a ``ValueError``).
    """
    if not isinstance(value, uuid.UUID):
        raise TypeError(f"value must be a uuid.UUID, not {value!r}")
    if value.variant != uuid.RFC_4122 or value.version != 7:
        raise invalid_id(
            str(value),
            f"version 7 UUID (it is of version {value.version or 'none: not RFC 9562'})",
            "a UUID7Field's value, or a uuid.UUID of version 7 and the RFC 9562 variant",
        )
    return value.int >> 80


_VERSION_VARIANT_MASK: Final = (0xF << 76) | (0b11 << 62)
_RANDOM_BITS: Final = ((1 << 128) - 1) ^ _VERSION_VARIANT_MASK
_UNKNOWN_SAFETY: Final = uuid.SafeUUID.unknown


def _uuid_from_int(number: int) -> uuid.UUID:
    """``uuid.UUID(int=number)`` for a ``number`` known to be a 128-bit unsigned int."""
    value = object.__new__(uuid.UUID)
    object.__setattr__(value, "int", number)
    object.__setattr__(value, "is_safe", _UNKNOWN_SAFETY)
    return value


class _StandardUUIDField(UUIDValueField):
    version: int = 0
    # A uuid.UUID of another version is of the value class too: the version and variant bits
    # (0b10 at 63-62) are checked, as uuid.UUID's .version and .variant would.
    _value_mask = _VERSION_VARIANT_MASK
    _value_bits = -1  # none matches

    def _build(self, value: Any) -> uuid.UUID:
        if isinstance(value, uuid.UUID):
            result = value
        else:
            result = uuid.UUID(int=_int_from_uuid_value(value, self.kind))
        if result.variant != uuid.RFC_4122 or result.version != self.version:
            raise ValueError(
                f"{value!r} is not a version {self.version} UUID "
                f"(found version {result.version}, variant {result.variant!r})"
            )
        return result if type(result) is uuid.UUID else uuid.UUID(int=result.int)


class UUID4Field(_StandardUUIDField):
    """A random RFC 9562 version 4 UUID, generated when the document is written.

    Stored as BSON Binary subtype 4 (or text with ``as_string=True``) whatever the connection's
    ``uuidRepresentation``; reads return :class:`uuid.UUID`.

    Args:
        random_bytes: callable returning n random bytes, checked on every call. Default:
            :func:`os.urandom`, as :func:`uuid.uuid4` uses.
        **kwargs: ``as_string=True`` to store the 36-character text instead of BSON Binary
            subtype 4, and any MongoEngine field option.
    """

    version = 4
    kind = "version 4 UUID"
    _version_nibble = 4
    _value_bits = (4 << 76) | (0b10 << 62)

    def __init__(self, *, random_bytes: RandomBytes | None = None, **kwargs: Any) -> None:
        if random_bytes is not None:
            check_callable("random_bytes", random_bytes, "a callable like os.urandom")
        self._random: RandomBytes = (
            os.urandom if random_bytes is None else _checked_random(random_bytes)
        )
        super().__init__(**kwargs)

    def new_values(self, write: Write, count: int) -> list[Any]:
        # uuid.uuid4(), for count values at once: one read of random bytes, the version and
        # variant bits set, and no uuid.UUID.__init__ (which checks what is known here).
        data, bits = self._random(16 * count), self._value_bits
        return [
            _uuid_from_int((int.from_bytes(data[at : at + 16], "big") & _RANDOM_BITS) | bits)
            for at in range(0, 16 * count, 16)
        ]


class UUID7Field(_StandardUUIDField):
    """A time-ordered RFC 9562 version 7 UUID, generated when the document is written.

    Args:
        generator: a :class:`UUID7Generator` (share one between models writing the same
            collection); default: one per field.
        **kwargs: ``as_string=True`` to store the 36-character text instead of BSON Binary
            subtype 4, and any MongoEngine field option.
    """

    version = 7
    kind = "version 7 UUID"
    _version_nibble = 7
    _value_bits = (7 << 76) | (0b10 << 62)

    def __init__(self, *, generator: UUID7Generator | None = None, **kwargs: Any) -> None:
        if generator is not None and not isinstance(generator, UUID7Generator):
            raise TypeError(f"generator must be a UUID7Generator, not {generator!r}")
        self.generator = generator if generator is not None else UUID7Generator()
        super().__init__(**kwargs)

    def new_values(self, write: Write, count: int) -> list[Any]:
        return self.generator.generate_many(count)
