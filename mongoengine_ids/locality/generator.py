"""The Locality UUID: counter, process id, node and millisecond time in 128 bits.

The layout is Groupon's (``shared/spec/locality-uuid.md`` fixes every bit); ids made here decode
with the original Java and Ruby libraries and theirs decode here. Unlike the originals, a
generator never repeats a value: not across threads, not after ``fork()``, not across mode
switches and not when the clock steps backwards.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import os
import re
import secrets
import time
import uuid
import warnings
import weakref
from array import array
from collections.abc import Callable
from typing import Final, Literal

from bson.binary import Binary

from .. import constants as C
from .. import resets
from .._checks import (
    check_callable,
    check_int,
    check_room,
    is_int,
    suggest_keywords,
    user_stacklevel,
)
from ..errors import IdSpaceExhaustedError, InvalidIdError, invalid_id
from ..resets import NotCopied

Mode = Literal["spread", "sequential"]
Clock = Callable[[], int]

#: An OS process id fits 32 unsigned bits (Linux caps them at 2**22, Windows uses a DWORD); the
#: id keeps it mod 65536.
PID_MAX: Final = (1 << 32) - 1

_MODES: Final = ("spread", "sequential")
_FIXED_VERSION: Final = C.LOCALITY_VERSION << C.LOCALITY_VERSION_SHIFT
_VERSION_FIELD_MASK: Final = C.LOCALITY_VERSION_MASK << C.LOCALITY_VERSION_SHIFT
_CANONICAL: Final = re.compile(
    r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"
)
_COMPACT: Final = re.compile(r"[0-9a-fA-F]{32}")
ACCEPTED_TEXT: Final = (
    "36 characters 'xxxxxxxx-xxxx-bxxx-xxxx-xxxxxxxxxxxx' or 32 hex digits (either case), "
    "16 bytes, or a uuid.UUID"
)
#: The same, for a UUID of any version.
ACCEPTED_UUID_TEXT: Final = ACCEPTED_TEXT.replace("-bxxx-", "-xxxx-")

_time_ns = time.time_ns
_getpid = os.getpid
_COUNTER_MASK: Final = C.LOCALITY_COUNTER_MASK
_TIME_MASK: Final = C.LOCALITY_TIME_MASK
_COUNTER_SHIFT: Final = C.LOCALITY_COUNTER_SHIFT
_SPREAD_STEP: Final = C.SPREAD_STEP
_new_object = object.__new__
_set_slot = object.__setattr__
_SAFE_UNKNOWN: Final = uuid.SafeUUID.unknown


def reverse_hex_digits(value: int) -> int:
    """Reverse the 8 hex digits of a 32-bit value (0x87654321 -> 0x12345678).

    Spread mode writes the counter this way so that the first characters of consecutive ids
    differ, which spreads writes across range-based shards. It is its own inverse.

    Raises:
        TypeError: ``value`` is not an int.
        ValueError: ``value`` does not fit 32 unsigned bits.
    """
    check_int("value", value, 0, C.LOCALITY_COUNTER_MASK)
    # Swap the nibbles of each byte, then the bytes of each half, then the halves: 3 steps of
    # integer arithmetic, about 4x cheaper than formatting and reversing a string.
    value = ((value & 0x0F0F0F0F) << 4) | ((value >> 4) & 0x0F0F0F0F)
    value = ((value & 0x00FF00FF) << 8) | ((value >> 8) & 0x00FF00FF)
    return ((value & 0xFFFF) << 16) | (value >> 16)


def _reverse_byte_digits(byte: int) -> int:
    return ((byte & 0xF) << 4) | (byte >> 4)


# The hex digits of every 16-bit value, reversed: two look-ups reverse a 32-bit counter in about
# 0.06 us, against 0.13 us for the arithmetic of reverse_hex_digits (128 KiB, built in ~4 ms).
_REVERSED_HALF: Final = array(
    "H",
    [
        (_reverse_byte_digits(low) << 8) | _reverse_byte_digits(high)
        for high in range(256)
        for low in range(256)
    ],
)


_EPOCH: Final = _dt.datetime(1970, 1, 1, tzinfo=_dt.timezone.utc)


def sequential_start(epoch_ms: int) -> int:
    """The counter state that sequential mode starts from at ``epoch_ms``.

    MD5 of the UTC time formatted ``yyyyMMddHHm`` (the 10-minute window), first 4 bytes read as
    a little-endian unsigned integer: machines that switch in the same window start together.

    Raises:
        TypeError: ``epoch_ms`` is not an int.
        ValueError: ``epoch_ms`` does not fit the 48-bit time field.
    """
    check_int("epoch_ms", epoch_ms, 0, C.LOCALITY_TIME_MASK)
    window = _window(epoch_ms)
    digest = hashlib.md5(window.encode("ascii"), usedforsecurity=False).digest()
    return int.from_bytes(digest[:4], "little")


def _window(epoch_ms: int) -> str:
    """The 10-minute window of ``epoch_ms``: the UTC time as ``yyyyMMddHHmm`` without its last
    digit. Computed from the day count (proleptic Gregorian calendar, H. Hinnant's
    ``civil_from_days``): the 48-bit time field reaches the year 10889, past ``datetime``'s
    9999; a year of five digits is written whole, as Java's ``SimpleDateFormat`` writes it."""
    days, ms_of_day = divmod(epoch_ms, 86_400_000)
    minute_of_day = ms_of_day // 60_000
    era, day_of_era = divmod(days + 719_468, 146_097)
    year_of_era = (
        day_of_era - day_of_era // 1_460 + day_of_era // 36_524 - day_of_era // 146_096
    ) // 365
    day_of_year = day_of_era - (365 * year_of_era + year_of_era // 4 - year_of_era // 100)
    month_index = (5 * day_of_year + 2) // 153  # from March
    day = day_of_year - (153 * month_index + 2) // 5 + 1
    month = month_index + 3 if month_index < 10 else month_index - 9
    year = year_of_era + era * 400 + (month <= 2)
    hour, minute = divmod(minute_of_day, 60)
    return f"{year:04d}{month:02d}{day:02d}{hour:02d}{minute // 10}"


def _int_from_uuid_value(value: object, kind: str = "Locality UUID") -> int:
    """Read 128 bits from any accepted shape; raise TypeError or InvalidIdError (naming
    ``kind``, what the value was meant to be) otherwise."""
    if isinstance(value, uuid.UUID):
        return value.int
    accepted = ACCEPTED_TEXT if kind == "Locality UUID" else ACCEPTED_UUID_TEXT
    if isinstance(value, str):
        if _CANONICAL.fullmatch(value) or _COMPACT.fullmatch(value):
            return int(value.replace("-", ""), 16)
        raise invalid_id(value, kind, accepted)
    if isinstance(value, (bytes, bytearray, memoryview)):
        raw = bytes(value)
        if isinstance(value, Binary) and value.subtype not in (0, C.BSON_UUID_SUBTYPE):
            raise invalid_id(value, kind, f"BSON Binary of subtype 0 or {C.BSON_UUID_SUBTYPE}")
        if len(raw) != C.UUID_BYTES:
            raise invalid_id(value, kind, accepted)
        return int.from_bytes(raw, "big")
    raise TypeError(
        f"a {kind} is built from a str, bytes or uuid.UUID, not {type(value).__name__}: {value!r}"
    )


class LocalityUUID(uuid.UUID):
    """A Locality UUID value; a :class:`uuid.UUID`, with its fields readable.

    Build one from text (``'20be0ffc-314a-bd53-7a50-013a65ca76d2'``, or the same 32 hex digits
    without hyphens, either case), 16 bytes (big-endian, as stored) or a :class:`uuid.UUID`.
    Anything else, or a value whose version nibble is not ``b``, raises ``ValueError``
    (:class:`~mongoengine_ids.errors.InvalidIdError`) quoting it; a wrong type raises
    ``TypeError``.

    The id does not record the mode that made it, so the counter has two readings:
    :attr:`spread_counter` and :attr:`sequential_counter`.
    """

    __slots__ = ()
    # A class attribute instead of the inherited slot: one store less per generated id.
    is_safe = _SAFE_UNKNOWN  # type: ignore[misc]

    def __init__(self, value: str | bytes | uuid.UUID) -> None:
        number = _int_from_uuid_value(value)
        if (number >> C.LOCALITY_VERSION_SHIFT) & C.LOCALITY_VERSION_MASK != C.LOCALITY_VERSION:
            version = (number >> C.LOCALITY_VERSION_SHIFT) & C.LOCALITY_VERSION_MASK
            raise invalid_id(
                value,
                "Locality UUID",
                f"version nibble b (the 13th hex digit), found {version:x}",
            )
        _set_slot(self, "int", number)

    def __setstate__(self, state: dict[str, object]) -> None:
        # uuid.UUID's would store is_safe, which is a class attribute here.
        _set_slot(self, "int", state["int"])

    @classmethod
    def from_int(cls, number: int) -> LocalityUUID:
        """The id whose 128-bit big-endian value is ``number``.

        Raises:
            TypeError: ``number`` is not an int.
            ValueError: ``number`` is out of range or its version nibble is not ``b``.
        """
        if not is_int(number):
            raise TypeError(
                f"a Locality UUID's number must be an int, not {type(number).__name__}: {number!r}"
            )
        if not 0 <= number < 1 << 128:
            raise invalid_id(number, "Locality UUID", "a 128-bit unsigned int")
        if (number >> C.LOCALITY_VERSION_SHIFT) & C.LOCALITY_VERSION_MASK != C.LOCALITY_VERSION:
            raise invalid_id(
                number, "Locality UUID", f"version nibble b, found {uuid.UUID(int=number)}"
            )
        return cls._from_int(number)

    @classmethod
    def _from_int(cls, number: int) -> LocalityUUID:
        # uuid.UUID.__init__ costs about 0.7 us; this about 0.1 us.
        value = _new_object(cls)
        _set_slot(value, "int", number)
        return value

    @classmethod
    def from_fields(
        cls, *, counter: int, pid: int, node: int, timestamp_ms: int, mode: Mode = "spread"
    ) -> LocalityUUID:
        """Assemble an id from its fields, as a generator in ``mode`` would write them.

        Raises:
            TypeError: a field is not an int, or ``mode`` is not a str.
            ValueError: a field does not fit its width, or ``mode`` is unknown.
        """
        _check_mode(mode)
        for name, field_value, bits in (
            ("counter", counter, C.LOCALITY_COUNTER_BITS),
            ("pid", pid, C.LOCALITY_PID_BITS),
            ("node", node, C.LOCALITY_NODE_BITS),
            ("timestamp_ms", timestamp_ms, C.LOCALITY_TIME_BITS),
        ):
            if not is_int(field_value):
                raise TypeError(
                    f"{name} must be an int, not {type(field_value).__name__}: {field_value!r}"
                )
            if not 0 <= field_value < 1 << bits:
                raise ValueError(
                    f"{name}={field_value!r} does not fit in {bits} unsigned bits: expected an "
                    f"int from 0 to {(1 << bits) - 1}"
                )
        written = reverse_hex_digits(counter) if mode == "spread" else counter
        return cls._from_int(
            (written << C.LOCALITY_COUNTER_SHIFT)
            | (pid << C.LOCALITY_PID_SHIFT)
            | _FIXED_VERSION
            | (node << C.LOCALITY_NODE_SHIFT)
            | timestamp_ms
        )

    @property
    def version(self) -> int:
        """The version nibble: always 0xb (11) for a Locality UUID."""
        return (self.int >> C.LOCALITY_VERSION_SHIFT) & C.LOCALITY_VERSION_MASK

    @property
    def pid(self) -> int:
        """The process id of the generator, mod 65536."""
        return (self.int >> C.LOCALITY_PID_SHIFT) & C.LOCALITY_PID_MASK

    @property
    def node(self) -> int:
        """The node: the low 28 bits of the generator's MAC address."""
        return (self.int >> C.LOCALITY_NODE_SHIFT) & C.LOCALITY_NODE_MASK

    @property
    def timestamp_ms(self) -> int:
        """Unix epoch milliseconds (UTC) when the id was made."""
        return self.int & C.LOCALITY_TIME_MASK

    @property
    def timestamp(self) -> _dt.datetime:
        """When the id was made, as an aware UTC datetime (millisecond precision).

        Raises:
            OverflowError: the time is past the year 9999, which ``datetime`` cannot hold (the
                48-bit time field reaches the year 10889); :attr:`timestamp_ms` gives it.
        """
        try:
            return _EPOCH + _dt.timedelta(milliseconds=self.timestamp_ms)
        except OverflowError:
            raise OverflowError(
                f"{self}: its time, {self.timestamp_ms} ms after the Unix epoch, is past the "
                "year 9999, which datetime cannot hold; read timestamp_ms instead"
            ) from None

    @property
    def sequential_counter(self) -> int:
        """The counter, read as an id made in sequential mode (bytes 0-3 big-endian)."""
        return self.int >> C.LOCALITY_COUNTER_SHIFT

    @property
    def spread_counter(self) -> int:
        """The counter, read as an id made in spread mode (hex digits of bytes 0-3 reversed).

        Lossy for ids made by the original Java library with a counter >= 2**31: it wrote the
        7th character as ``f`` (a sign-extension bug), so that digit cannot be recovered.
        """
        return reverse_hex_digits(self.int >> C.LOCALITY_COUNTER_SHIFT)


def _check_mode(mode: object) -> None:
    if not isinstance(mode, str):
        raise TypeError(f"mode must be a str, 'spread' or 'sequential', not {mode!r}")
    if mode not in _MODES:
        raise ValueError(f"mode={mode!r} is not a Locality UUID mode: expected one of {_MODES}")


def parse_mac(value: str) -> int:
    """Read a MAC written ``aa:bb:cc:dd:ee:ff``, ``aa-bb-cc-dd-ee-ff`` or as 12 hex digits.

    Raises:
        TypeError: ``value`` is not a str.
        ValueError: it is not a MAC in one of those forms.
    """
    if not isinstance(value, str):
        raise TypeError(f"a MAC address to parse must be a str, not {value!r}")
    written = value.strip()
    if not _MAC_FORMS.fullmatch(written):
        raise invalid_id(
            value, "MAC address", "'aa:bb:cc:dd:ee:ff', 'aa-bb-cc-dd-ee-ff' or 12 hex digits"
        )
    return int(re.sub("[:-]", "", written), 16)


#: Six pairs of hex digits, all separated by ``:`` or all by ``-``, or none separated: a
#: separator anywhere else (``a:bb:cc:dd:ee:ff0``) is a typing error, not another address.
_MAC_FORMS: Final = re.compile(
    r"[0-9a-fA-F]{2}(?:([:-])[0-9a-fA-F]{2}(?:\1[0-9a-fA-F]{2}){4}|[0-9a-fA-F]{10})"
)


_machine_mac: int | None = None
_machine_mac_lock = resets.ProcessLock()


def machine_mac() -> int:
    """The MAC this machine's generators use by default: ``$MONGOENGINE_IDS_MAC`` or the NIC's.

    Read once per process, with no lock held: :func:`uuid.getnode` may run ``ip`` or
    ``ifconfig``, and a subprocess under gevent or eventlet switches to other green threads,
    which waited forever for a lock made before the patching (an OS lock; probe BH). Threads
    reading it together each read it; the first one kept is every thread's.
    """
    global _machine_mac
    if _machine_mac is not None:
        return _machine_mac
    override = os.environ.get(C.MAC_ENV_VAR)
    read = _mac_from_environment(override) if override else uuid.getnode()
    with _machine_mac_lock:
        if _machine_mac is None:
            _machine_mac = read
            if not override:
                # Once kept: with warnings as errors, only the first id fails.
                _warn_if_shared(read)
        return _machine_mac


def _mac_from_environment(value: str) -> int:
    try:
        return parse_mac(value)
    except InvalidIdError as error:
        raise InvalidIdError(f"${C.MAC_ENV_VAR}: {error}") from None


def _warn_if_shared(mac: int) -> None:
    # uuid.getnode() sets the multicast bit on the random number it falls back to: random per
    # process, which is fine. A locally administered address (second-lowest bit of the first
    # octet) is what containers and VMs get, often the same on every one of them.
    if mac & C.MAC_LOCAL_BIT and not mac & C.MAC_MULTICAST_BIT:
        octets = ":".join(f"{byte:02x}" for byte in mac.to_bytes(6, "big"))
        warnings.warn(
            f"the node of Locality UUIDs comes from a locally administered MAC ({octets}), which "
            f"containers and virtual machines often share: set {C.MAC_ENV_VAR} to an address "
            "unique to this machine, or pass mac= to LocalityUUIDGenerator",
            RuntimeWarning,
            stacklevel=user_stacklevel(),
        )


def _mac_to_int(mac: int | bytes) -> int:
    if isinstance(mac, (bytes, bytearray)):
        if len(mac) != 6:
            raise ValueError(f"mac={mac!r} must be exactly 6 bytes, got {len(mac)}")
        return int.from_bytes(mac, "big")
    if not is_int(mac):
        raise TypeError(f"mac must be a 48-bit int or 6 bytes, not {type(mac).__name__}: {mac!r}")
    if not 0 <= mac <= C.MAC_MASK:
        raise ValueError(f"mac={mac!r} must be a 48-bit unsigned int (0 to 0x{C.MAC_MASK:x})")
    return mac


def before_1970(now: int) -> ValueError:
    """The error for a system clock reading before 1970 (probe BR-2: -1 was ORed into every
    id, which was the same for all)."""
    return ValueError(
        f"the system clock reads {now} ms since 1970, before it: an id holds Unix epoch "
        "milliseconds from 0; set the system clock"
    )


def _bad_clock(value: object) -> Exception:
    """The error for what an injected clock returned: never wrapped into the 48-bit field."""
    if not is_int(value):
        return TypeError(
            f"the clock returned {value!r} ({type(value).__name__}): expected an int, Unix "
            "epoch milliseconds"
        )
    return ValueError(
        f"the clock returned {value!r}: expected Unix epoch milliseconds from 0 to "
        f"{C.LOCALITY_TIME_MASK} (the 48-bit time field)"
    )


def _time_exhausted() -> IdSpaceExhaustedError:
    return IdSpaceExhaustedError(
        f"the 48-bit time field is used up (millisecond {C.LOCALITY_TIME_MASK}): no later "
        "Locality UUID exists"
    )


# Every live generator, so that a forked child can give each one its own pid and fresh state.
_generators: weakref.WeakSet[LocalityUUIDGenerator] = weakref.WeakSet()


class LocalityUUIDGenerator(NotCopied):
    """Makes Locality UUIDs; thread-safe, fork-safe, never repeats a value.

    A forked child takes its own pid and a fresh counter before it makes an id, also when the
    fork skipped Python's at-fork hooks (the C ``fork()`` of uWSGI's default prefork): each call
    compares ``os.getpid()`` with the process the state belongs to
    (:func:`mongoengine_ids.resets.check_process`). A generator cannot be copied or pickled: a
    copy would repeat its ids.

    Args:
        pid: process id written into the ids (used mod 65536). Default: ``os.getpid()``, read
            again in a forked child. A forked child always uses its real pid, explicit or not:
            two processes writing the same pid and node could repeat each other's ids.
        mac: the 48-bit MAC address (int or 6 bytes) whose low 28 bits are the node. Default:
            ``$MONGOENGINE_IDS_MAC`` if set, else the machine's (:func:`uuid.getnode`).
        clock: callable returning Unix epoch milliseconds as an int. Default: the wall clock.
        counter: the counter state before the next id; the next id uses ``counter + step``
            (mod 2**32). Default: random in spread mode, the 10-minute-window hash of
            ``clock()`` in sequential mode.
        mode: ``"spread"`` (step 0x0BD4BCB5, digits reversed: spreads writes over range shards)
            or ``"sequential"`` (step 1: ids made at the same time sort together).

    Uniqueness: within one generator, an id is never repeated. The time field never goes
    backwards: if the clock steps back, ids keep the highest millisecond already used until the
    clock passes it, and a mode switch moves on to a millisecond no earlier id used. Two
    generators in one process share pid and node, so give every model writing to the same
    collection the same generator.

    The injected ``clock`` is checked each time it is called: a value that is not an int, or
    outside 0 to 2**48 - 1, raises (``TypeError``, ``ValueError``) instead of being wrapped into
    the time field.

    Raises:
        TypeError: an argument has the wrong type, or an unknown keyword (the closest is named).
        ValueError: ``mode`` is unknown, ``pid`` is negative or beyond 32 bits, ``mac`` does not
            fit 48 bits, or ``counter`` does not fit 32 bits.
    """

    # A copy would go on from the same pid, node, counter and millisecond as the original, and
    # make the ids it makes (BG-3). Returning the original instead would be a copy whose
    # use_sequential() switches the original: refused, as deepcopy and pickle always were.
    _COPIED = (
        "the copy would repeat its ids (the same pid, node and counter). Share the one "
        "generator (the same object for every model writing a collection); in another "
        "process, make one there"
    )

    __slots__ = (
        "__weakref__",
        "_clock",
        "_counter",
        "_first",
        "_fixed",
        "_lock",
        "_mode",
        "_ms",
        "_node",
        "_pid",
        "_step",
        "_text_middle",
    )

    @suggest_keywords
    def __init__(
        self,
        *,
        pid: int | None = None,
        mac: int | bytes | None = None,
        clock: Clock | None = None,
        counter: int | None = None,
        mode: Mode = "spread",
    ) -> None:
        # Made after this process made the package's state its own: in a child forked without
        # Python's hooks, the first check would reset a generator made before it, its pid= and
        # counter= with it (probe 40c).
        resets.check_process()
        _check_mode(mode)
        if pid is not None:
            check_int("pid", pid, 0, PID_MAX)
        if counter is not None:
            check_int("counter", counter, 0, C.LOCALITY_COUNTER_MASK)
        if clock is not None:
            check_callable("clock", clock, "a callable returning epoch milliseconds (an int)")
        self._node = (_mac_to_int(mac) if mac is not None else machine_mac()) & C.LOCALITY_NODE_MASK
        self._clock = clock
        self._lock = resets.ProcessLock()
        self._mode: Mode = mode
        self._step = C.SPREAD_STEP if mode == "spread" else C.SEQUENTIAL_STEP
        if counter is not None:
            self._counter = counter & C.LOCALITY_COUNTER_MASK
        else:
            self._counter = self._fresh_counter()
        # _ms: the millisecond of the latest id (or the floor after a mode switch). _first: the
        # counter state before the first id made at _ms; when the counter comes back to it,
        # every counter value has been used at _ms.
        self._ms = -1
        self._first = self._counter
        self._set_pid(pid if pid is not None else os.getpid())
        _generators.add(self)

    # -- state ----------------------------------------------------------------------------------

    def _set_pid(self, pid: int) -> None:
        self._pid = pid & C.LOCALITY_PID_MASK
        self._fixed = (
            (self._pid << C.LOCALITY_PID_SHIFT)
            | _FIXED_VERSION
            | (self._node << C.LOCALITY_NODE_SHIFT)
        )
        # The constant middle of the text form, so generate_str formats only counter and time.
        middle = f"{self._fixed >> C.LOCALITY_NODE_SHIFT:012x}"
        self._text_middle = f"-{middle[:4]}-{middle[4:8]}-{middle[8:]}-"

    def _now(self) -> int:
        if self._clock is None:
            now = _time_ns() // 1_000_000
            if now < 0:
                raise before_1970(now)
            return now
        now = self._clock()
        if type(now) is not int or not 0 <= now <= _TIME_MASK:
            raise _bad_clock(now)
        return now

    def _fresh_counter(self) -> int:
        if self._mode == "sequential":
            return sequential_start(self._now())
        return secrets.randbits(C.LOCALITY_COUNTER_BITS)

    def _after_fork_in_child(self) -> None:
        self._set_pid(os.getpid())
        self._ms = -1
        try:
            self._counter = self._fresh_counter()
        except Exception:  # a clock failing in the child: the other generators are reset too
            self._counter = secrets.randbits(C.LOCALITY_COUNTER_BITS)
        self._first = self._counter

    def _switch(self, mode: Mode, step: int, counter: int) -> None:
        """Switch to ``mode`` (under the lock), ``counter`` its next state; if it raises,
        nothing has changed.

        After a mode switch the counter may revisit values used before; moving on to a
        millisecond that no earlier id used keeps every (counter, time) pair distinct. Java's
        library skipped this and repeated an id after sequential -> spread -> sequential.
        """
        if self._ms >= _TIME_MASK:
            raise _time_exhausted()
        self._mode, self._step, self._counter = mode, step, counter
        self._ms += 1
        self._first = counter

    @property
    def mode(self) -> Mode:
        """The current mode, ``"spread"`` or ``"sequential"``."""
        return self._mode

    @property
    def pid(self) -> int:
        """The process id written into ids (mod 65536)."""
        resets.check_process()  # a child forked without the hooks: its own, as its ids will
        return self._pid

    @property
    def node(self) -> int:
        """The 28-bit node written into ids."""
        return self._node

    def use_sequential(self) -> None:
        """Switch to sequential mode, restarting from the current 10-minute-window hash.

        A no-op if the generator is already sequential.
        """
        with self._lock:
            if self._mode == "sequential":
                return
            self._switch("sequential", C.SEQUENTIAL_STEP, sequential_start(self._now()))

    def use_spread(self) -> None:
        """Switch to spread mode; the counter carries on. A no-op if already spread."""
        with self._lock:
            if self._mode == "spread":
                return
            self._switch("spread", C.SPREAD_STEP, self._counter)

    # -- generation -----------------------------------------------------------------------------

    def generate(self) -> LocalityUUID:
        """Make the next id."""
        # The benchmark's hot path (target: half the cost of uuid.uuid4()). Slots, one lock, the
        # wall clock read inline, a table look-up for the digit reversal and no helper calls
        # took it from 0.76x to under 0.5x of uuid4 on the 2-core development machine.
        if _getpid() != resets.owner_pid:
            # Forked without Python's at-fork hooks: the pid, counter and lock are the parent's,
            # which every sibling shares. The check costs one getpid() (about 0.2 us), as in
            # bson.ObjectId(). Then the lock inside the ProcessLock, taken without its check
            # again: a `with` of it costs 0.25 us more.
            resets.adopt_process()
        lock = self._lock.lock
        lock.acquire()
        try:
            clock = self._clock
            if clock is None:
                now = _time_ns() // 1_000_000
                if now < 0:
                    raise before_1970(now)
            else:
                # Checked, never masked: a clock at -5 would otherwise write year 10889.
                now = clock()
                if type(now) is not int or not 0 <= now <= _TIME_MASK:
                    raise _bad_clock(now)
            previous = self._counter
            step = self._step
            counter = (previous + step) & _COUNTER_MASK
            if now > self._ms:
                self._ms = now
                self._first = previous
            elif counter == self._first:
                # 2**32 ids in one millisecond (only possible while the clock stands still or
                # is behind): this counter was used at this millisecond, so move to the next.
                if self._ms >= _TIME_MASK:
                    raise _time_exhausted()  # nothing changed: every later call raises too
                self._ms += 1
                self._first = previous
            self._counter = counter
            ms = self._ms
        finally:
            lock.release()
        if step == _SPREAD_STEP:
            counter = (_REVERSED_HALF[counter & 0xFFFF] << 16) | _REVERSED_HALF[counter >> 16]
        value = _new_object(LocalityUUID)
        _set_slot(value, "int", (counter << _COUNTER_SHIFT) | self._fixed | ms)
        return value

    def generate_many(self, count: int) -> list[LocalityUUID]:
        """Make the next ``count`` ids, as ``count`` calls of :meth:`generate` would, under one
        lock and one clock reading (a bulk insert's).

        Raises:
            TypeError: ``count`` is not an int.
            ValueError: ``count`` is negative, or more ids than memory holds.
            IdSpaceExhaustedError: as :meth:`generate` (no id is made).
        """
        if not is_int(count) or count < 0:
            check_int("count", count, 0)
        check_room("count", count)  # before the lock, which other threads wait for
        made: list[tuple[int, int]] = []
        with self._lock:
            now = self._now()  # once for the batch: generate()'s reading, inline there
            counter, step, ms, first = self._counter, self._step, self._ms, self._first
            for _ in range(count):
                previous = counter
                counter = (previous + step) & _COUNTER_MASK
                if now > ms:
                    ms, first = now, previous
                elif counter == first:  # as generate(): this counter was used at ms
                    if ms >= _TIME_MASK:
                        raise _time_exhausted()
                    ms, first = ms + 1, previous
                made.append((counter, ms))
            self._counter, self._ms, self._first = counter, ms, first
        fixed = self._fixed
        ids = []
        for counter, ms in made:
            if step == _SPREAD_STEP:
                counter = (_REVERSED_HALF[counter & 0xFFFF] << 16) | _REVERSED_HALF[counter >> 16]
            value = _new_object(LocalityUUID)
            _set_slot(value, "int", (counter << _COUNTER_SHIFT) | fixed | ms)
            ids.append(value)
        return ids

    def generate_str(self) -> str:
        """Make the next id in its lower-case 36-character text form."""
        # Formatting the two variable parts around a precomputed middle is about half the cost
        # of str(uuid.UUID).
        number = self.generate().int
        return f"{number >> _COUNTER_SHIFT:08x}{self._text_middle}{number & _TIME_MASK:012x}"

    def __repr__(self) -> str:
        return (
            f"LocalityUUIDGenerator(pid={self._pid}, node=0x{self._node:07x}, mode={self._mode!r})"
        )


@resets.on_fork
def _reinit_generators_in_child() -> None:
    for generator in list(_generators):
        generator._after_fork_in_child()
