"""Value spaces of :class:`~mongoengine_ids.RandomUniqueField`: what a random id can look like.

A space numbers its values ``0 .. size - 1`` and turns an index into a value, so one
``randbelow(size)`` call makes one candidate: uniform over the space, and trivially scripted in
tests (inject a callable that returns the indexes you want).

* :class:`IntegerSpace`: integers from ``min_value`` to ``max_value`` (or exactly ``digits``
  decimal digits), optionally ending in a Luhn check digit.
* :class:`StringSpace`: an optional prefix, then ``length`` characters over an alphabet
  (decimal, Crockford base32, base62 or one supplied), optionally the last one a Luhn mod N
  check character.
"""

from __future__ import annotations

import functools
import os
import random
import re
import secrets
import weakref
from collections.abc import Callable
from typing import Any, Final, Protocol, cast, runtime_checkable

from .. import resets
from .._checks import check_bool, check_int, closest, integer_like, is_int, suggest_keywords
from ..resets import on_reset

# -- constants (candidates for mongoengine_ids.constants) ---------------------------------------

DECIMAL: Final = "0123456789"
#: Crockford's base32: no I, L, O, U (read as 1, 1, 0 and avoided), so ids survive being read
#: aloud and typed back.
CROCKFORD32: Final = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
BASE62: Final = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"

#: The alphabets known by name.
ALPHABETS: Final[dict[str, str]] = {
    "decimal": DECIMAL,
    "crockford32": CROCKFORD32,
    "base62": BASE62,
}

#: BSON stores integers as signed 64-bit (int64); a larger Python int cannot be written.
INT64_MIN: Final = -(1 << 63)
INT64_MAX: Final = (1 << 63) - 1
#: 10**18 - 1 is the widest all-nines value below INT64_MAX (about 9.22e18).
MAX_DIGITS: Final = 18

#: Crockford decoding: lower case is accepted, and the look-alikes read as the digit.
_CROCKFORD_READ: Final = str.maketrans("ILO", "110")

#: What an alphabet *name* looks like: a short word, maybe ending in digits ("hex", "base64",
#: "Decimal"). Such a string is read as a name unless its characters are in ascending order, as
#: the characters of a real alphabet are written ("abcdef"): so a misspelt or unknown name is
#: refused instead of becoming an alphabet of its letters ("hex" as the 3 characters h, e, x).
_NAME_LIKE: Final = re.compile(r"[a-zA-Z]+[0-9]*")
_NAME_MAX: Final = 12
#: Names of encodings that are refused in any case, though their letters may ascend ("Hex",
#: "bin", "Oct" would be alphabets of 3 characters).
_ENCODING_NAMES: Final = frozenset({"hex", "bin", "oct", "binary", "octal", "hexadecimal"})

#: An integer in text: optional sign, then ASCII digits only (``str.isdigit`` also takes "²"
#: and Arabic-Indic digits, which ``int()`` refuses or reads as another number).
_ASCII_INT: Final = re.compile(r"-?[0-9]+")


#: The longest string id (characters after the prefix).
MAX_LENGTH: Final = 128


class RandBelow(Protocol):
    """An object with ``randbelow(n)``, like :mod:`secrets` or ``random.SystemRandom``-based."""

    def randbelow(self, n: int, /) -> int:
        """A uniformly random integer ``0 <= r < n``."""
        ...


#: Where randomness comes from: ``randbelow(n)`` as a function, an object that has it, or a
#: ``random.Random`` (seeded, for tests: its ``randrange`` is used).
Randomness = Callable[[int], int] | RandBelow | random.Random


@runtime_checkable
class ValueSpace(Protocol):
    """A finite set of id values numbered ``0 .. size - 1``."""

    @property
    def size(self) -> int:
        """How many distinct values the space holds."""
        ...

    @property
    def description(self) -> str:
        """What the values look like, in words (used in error messages)."""
        ...

    def value(self, index: int) -> Any:
        """The value numbered ``index`` (``0 <= index < size``), in stored form."""
        ...

    def coerce(self, value: Any) -> Any:
        """A loosely typed value in canonical form, or ``value`` unchanged if it is junk."""
        ...

    def problem(self, value: Any) -> str | None:
        """Why ``value`` is not in the space, or None if it is."""
        ...


# -- Luhn ---------------------------------------------------------------------------------------


def luhn_check_index(codes: list[int], base: int) -> int:
    """The Luhn mod N check character (as an index into the alphabet) for ``codes``.

    For ``base=10`` this is the ordinary Luhn check digit of card numbers. For an even ``base``
    it catches every single-character error and most swaps of adjacent characters (for an odd
    one the doubling step is not a permutation, so :class:`StringSpace` refuses it).

    Args:
        codes: the payload, each character as its index in the alphabet.
        base: the size of the alphabet.

    Returns:
        The index of the check character, ``0 <= index < base``.
    """
    total = 0
    factor = 2  # the rightmost payload character is doubled: the check character follows it
    for code in reversed(codes):
        addend = factor * code
        total += addend // base + addend % base
        factor = 3 - factor
    return (base - total % base) % base


def luhn_valid(codes: list[int], base: int) -> bool:
    """Whether ``codes`` (payload then check character, as alphabet indexes) pass Luhn mod N."""
    if not codes:
        return False
    return luhn_check_index(codes[:-1], base) == codes[-1]


def _digits_of(number: int) -> list[int]:
    return [int(char) for char in str(number)]


# -- integer space ------------------------------------------------------------------------------


class IntegerSpace:
    """Integers from ``min_value`` to ``max_value`` inclusive, optionally Luhn-checked.

    Args:
        min_value: the smallest value (without check digit: the smallest payload).
        max_value: the largest value (likewise).
        luhn: append a Luhn check digit (``value = payload * 10 + check``); payloads must then
            be non-negative.

    Raises:
        TypeError: a bound is not an int.
        ValueError: ``min_value > max_value``, a value would not fit BSON's int64, or a
            negative payload with ``luhn``.
    """

    __slots__ = ("_description", "_luhn", "_max", "_min", "_size")

    @suggest_keywords
    def __init__(self, min_value: int, max_value: int, *, luhn: bool = False) -> None:
        check_bool("luhn", luhn)
        for name, bound in (("min_value", min_value), ("max_value", max_value)):
            if not isinstance(bound, int) or isinstance(bound, bool):
                raise TypeError(f"{name} must be an int, not {bound!r}")
        if min_value > max_value:
            raise ValueError(
                f"min_value={min_value!r} is above max_value={max_value!r}: "
                "expected min_value <= max_value"
            )
        top = max_value * 10 + 9 if luhn else max_value
        if min_value < INT64_MIN or top > INT64_MAX:
            raise ValueError(
                f"min_value={min_value!r}, max_value={max_value!r} (luhn={luhn!r}) do not fit "
                f"BSON's signed 64-bit integer: expected values from {INT64_MIN} to {INT64_MAX}"
            )
        if luhn and min_value < 0:
            raise ValueError(
                f"min_value={min_value!r} is negative: a Luhn check digit needs payloads >= 0"
            )
        self._min = min_value
        self._max = max_value
        self._luhn = luhn
        self._size = max_value - min_value + 1
        shown = f"integers from {min_value} to {max_value}"
        if luhn:
            shown = (
                f"integers made of a payload from {min_value} to {max_value} "
                "followed by its Luhn check digit"
            )
        self._description = shown

    @classmethod
    def of_digits(cls, digits: int, *, luhn: bool = False) -> IntegerSpace:
        """Positive integers of exactly ``digits`` decimal digits (check digit included).

        ``digits=1`` is 1 to 9, ``digits=6`` is 100000 to 999999: no value has a leading zero,
        so every value prints with exactly ``digits`` digits.

        Raises:
            TypeError: ``digits`` is not an int.
            ValueError: ``digits`` is below 1 (2 with ``luhn``) or above 18.
        """
        if not isinstance(digits, int) or isinstance(digits, bool):
            raise TypeError(f"digits must be an int, not {digits!r}")
        check_bool("luhn", luhn)
        lowest = 2 if luhn else 1
        if not lowest <= digits <= MAX_DIGITS:
            raise ValueError(
                f"digits={digits!r} is out of range: expected {lowest} to {MAX_DIGITS}"
                + (" (one digit is the Luhn check digit)" if luhn else "")
            )
        payload = digits - 1 if luhn else digits
        return cls(10 ** (payload - 1), 10**payload - 1, luhn=luhn)

    @property
    def size(self) -> int:
        """How many values the space holds."""
        return self._size

    @property
    def description(self) -> str:
        """The values in words."""
        return self._description

    @property
    def luhn(self) -> bool:
        """Whether the last digit is a Luhn check digit."""
        return self._luhn

    def value(self, index: int) -> int:
        """The value numbered ``index``.

        Raises:
            TypeError: ``index`` is not an int.
            ValueError: ``index`` is not in ``0 .. size - 1``.
        """
        if type(index) is not int or not 0 <= index < self._size:
            raise _bad_index(index, self._size)
        payload = self._min + index
        if not self._luhn:
            return payload
        return payload * 10 + luhn_check_index(_digits_of(payload), 10)

    def coerce(self, value: Any) -> Any:
        """An int (bools excluded) as a plain int (a ``bson.Int64``, as a server's reply
        decodes an int64, as MongoEngine's ``IntField`` does); a string of ASCII digits
        (optional ``-``, surrounding spaces) as its int; anything else as is."""
        if isinstance(value, int) and not isinstance(value, bool):
            return int(value)
        if isinstance(value, str):
            text = value.strip()
            if _ASCII_INT.fullmatch(text):
                return int(text)
        number = integer_like(value)  # NumPy's int64, an integral Decimal (probe BT)
        return value if number is None else number

    def problem(self, value: Any) -> str | None:
        """Why ``value`` is not in the space, or None."""
        if isinstance(value, str):
            return "not an int (a string is read as one only if it is ASCII digits 0-9)"
        if not isinstance(value, int) or isinstance(value, bool):
            return "not an int"
        payload = value
        if self._luhn:
            if value < 0 or not luhn_valid(_digits_of(value), 10):
                return "its last digit is not the Luhn check digit"
            payload = value // 10
        if not self._min <= payload <= self._max:
            return "out of range"
        return None


# -- string space -------------------------------------------------------------------------------


class StringSpace:
    """``prefix`` + ``length`` characters over ``alphabet``, the last one optionally a check.

    Args:
        length: characters after the prefix, the check character included.
        alphabet: ``"decimal"``, ``"crockford32"``, ``"base62"``, or the characters themselves
            (at least 2, all distinct).
        prefix: text in front of every value (not random, not part of the check).
        luhn: make the last character a Luhn mod N check character over the alphabet.

    Raises:
        TypeError: an argument has the wrong type.
        ValueError: ``length`` is below 1 (2 with ``luhn``), the alphabet is unknown, too short
            or repeats a character, or ``luhn`` with an odd number of characters.
    """

    __slots__ = (
        "_alphabet",
        "_base",
        "_crockford",
        "_description",
        "_index",
        "_length",
        "_luhn",
        "_prefix",
        "_random_length",
        "_size",
    )

    @suggest_keywords
    def __init__(
        self, length: int, alphabet: str = "crockford32", *, prefix: str = "", luhn: bool = False
    ) -> None:
        if not isinstance(length, int) or isinstance(length, bool):
            raise TypeError(f"length must be an int, not {length!r}")
        if not isinstance(alphabet, str):
            raise TypeError(f"alphabet must be a str, not {alphabet!r}")
        if not isinstance(prefix, str):
            raise TypeError(f"prefix must be a str, not {prefix!r}")
        check_bool("luhn", luhn)
        lowest = 2 if luhn else 1
        if length < lowest:
            raise ValueError(
                f"length={length!r} is too short: expected at least {lowest}"
                + (" (one character is the Luhn check)" if luhn else "")
            )
        if length > MAX_LENGTH:
            raise ValueError(
                f"length={length!r} is too long: expected at most {MAX_LENGTH} characters"
            )
        chars = _alphabet_chars(alphabet)
        if len(chars) < 2 or len(set(chars)) != len(chars):
            raise ValueError(
                f"alphabet={alphabet!r} is not usable: expected one of "
                f"{', '.join(map(repr, ALPHABETS))} or at least 2 distinct characters"
            )
        if luhn and len(chars) % 2:
            # Doubling then summing the base-N digits permutes the characters only for an even
            # N: with 7 characters, 1 and 4 both become 2, and swapping them goes unnoticed.
            raise ValueError(
                f"alphabet={alphabet!r} has {len(chars)} characters: luhn=True needs an even "
                "number of characters (Luhn mod N catches every single error only then)"
            )
        self._alphabet = chars
        self._base = len(chars)
        self._index = {char: position for position, char in enumerate(chars)}
        self._crockford = chars == CROCKFORD32
        self._length = length
        self._luhn = luhn
        self._prefix = prefix
        self._random_length = length - 1 if luhn else length
        self._size: int = self._base**self._random_length
        name = next((key for key, known in ALPHABETS.items() if known == chars), repr(chars))
        lead = f"{prefix!r} followed by " if prefix else ""
        check = ", the last a Luhn check character" if luhn else ""
        self._description = f"strings of {lead}{length} characters over {name}{check}"

    @property
    def size(self) -> int:
        """How many values the space holds."""
        return self._size

    @property
    def description(self) -> str:
        """The values in words."""
        return self._description

    @property
    def alphabet(self) -> str:
        """The characters a value is made of (after the prefix)."""
        return self._alphabet

    @property
    def prefix(self) -> str:
        """The fixed text in front of every value."""
        return self._prefix

    def value(self, index: int) -> str:
        """The value numbered ``index``: its base-N digits, most significant first.

        Raises:
            TypeError: ``index`` is not an int.
            ValueError: ``index`` is not in ``0 .. size - 1``.
        """
        if type(index) is not int or not 0 <= index < self._size:
            raise _bad_index(index, self._size)
        base = self._base
        codes = [0] * self._random_length
        for position in range(self._random_length - 1, -1, -1):
            index, codes[position] = divmod(index, base)
        if self._luhn:
            codes.append(luhn_check_index(codes, base))
        alphabet = self._alphabet
        return self._prefix + "".join([alphabet[code] for code in codes])

    def coerce(self, value: Any) -> Any:
        """Crockford text read leniently (lower case, I/L as 1, O as 0); anything else as is."""
        if not self._crockford or not isinstance(value, str):
            return value
        prefix = self._prefix
        if not value.startswith(prefix):
            return value
        body = value[len(prefix) :]
        canonical = body.upper().translate(_CROCKFORD_READ)
        return value if canonical == body else prefix + canonical

    def problem(self, value: Any) -> str | None:
        """Why ``value`` is not in the space, or None."""
        if not isinstance(value, str):
            return "not a str"
        if not value.startswith(self._prefix):
            return f"it does not start with {self._prefix!r}"
        body = value[len(self._prefix) :]
        if len(body) != self._length:
            return f"it has {len(body)} characters after the prefix, not {self._length}"
        index = self._index
        bad = sorted({char for char in body if char not in index})
        if bad:
            return f"{''.join(bad)!r} not in the alphabet"
        if self._luhn and not luhn_valid([index[char] for char in body], self._base):
            return "its last character is not the Luhn check character"
        return None


def _alphabet_chars(alphabet: str) -> str:
    """The characters of ``alphabet``: a known name, or the characters themselves.

    Raises:
        ValueError: ``alphabet`` looks like a name (see :data:`_NAME_LIKE`) but is none known.
    """
    known = ALPHABETS.get(alphabet)
    if known is not None:
        return known
    if alphabet.lower() in _ENCODING_NAMES:
        raise ValueError(
            f"alphabet={alphabet!r} names an encoding, which is no alphabet of this package: "
            f"expected one of {', '.join(map(repr, ALPHABETS))}, or the characters themselves "
            "(e.g. '0123456789abcdef' for lower-case hexadecimal)"
        )
    if (
        len(alphabet) <= _NAME_MAX
        and _NAME_LIKE.fullmatch(alphabet)
        and list(alphabet) != sorted(set(alphabet))
    ):
        match = closest(alphabet.lower(), ALPHABETS)
        hint = f" (did you mean {match!r}?)" if match else ""
        raise ValueError(
            f"alphabet={alphabet!r} is not a known alphabet name{hint}: expected one of "
            f"{', '.join(map(repr, ALPHABETS))}, or the characters themselves (a short word "
            "is read as a name: write its characters in ascending order, e.g. "
            "'0123456789abcdef' for lower-case hexadecimal)"
        )
    return alphabet


def _bad_index(index: object, size: int) -> Exception:
    """The error for an index outside a space (never wrapped into it)."""
    if not is_int(index):
        return TypeError(f"index must be an int, not {type(index).__name__}: {index!r}")
    return ValueError(f"index={index!r} is out of range: expected an int from 0 to {size - 1}")


# -- the default randomness ---------------------------------------------------------------------

#: Bytes read from the operating system at a time: 512 draws per system call.
POOL_BYTES: Final = 4096
_WORD: Final = 1 << 64
_getpid = os.getpid


class SystemRandomness:
    """``randbelow(n)`` from :func:`os.urandom`, the source :mod:`secrets` uses, read
    :data:`POOL_BYTES` at a time.

    ``secrets.randbelow`` makes one system call per draw (0.8 us, measured); this makes one per
    512 draws of a space up to 2**64 (larger spaces call ``secrets.randbelow``). Each 64-bit word
    is used once: ``list.pop()`` is atomic, so threads never share one. A forked child drops the
    unread words it inherited before its first draw, or parent and child would draw the same
    values; also after a fork that skipped Python's at-fork hooks (each draw compares
    ``os.getpid()`` with the process the words were read in, see
    :func:`mongoengine_ids.resets.check_process`). Unbiased: words at or above the largest
    multiple of ``n`` are thrown away.
    """

    def __init__(self) -> None:
        self._words: list[int] = []
        _randomness.add(self)

    def forget(self) -> None:
        """Drop the unread words (called in a forked child, and on reset)."""
        self._words = []

    def randbelow(self, n: int) -> int:
        """A uniformly random integer ``0 <= r < n``.

        Raises:
            ValueError: ``n`` is not positive.
        """
        return self.below(n)()

    def below(self, n: int) -> Callable[[], int]:
        """A function drawing uniformly from ``range(n)``: :meth:`randbelow` with its set-up
        done once, for a caller that draws from one range many times (a field's space).

        Raises:
            TypeError: ``n`` is not an int.
            ValueError: ``n`` is not positive.
        """
        check_int("n", n, 1)
        if n > _WORD:
            return functools.partial(secrets.randbelow, n)
        limit = _WORD - _WORD % n  # the largest multiple of n not above 2**64

        def draw() -> int:
            if _getpid() != resets.owner_pid:
                # Forked without Python's at-fork hooks: the words are the parent's, which every
                # sibling would draw again. One getpid() (about 0.2 us) per draw.
                resets.adopt_process()
            words = self._words
            for _ in range(_MAX_THROWN):
                try:
                    word = words.pop()
                except IndexError:
                    words = self._words = _read_words()
                    word = words.pop()
                if word < limit:
                    return word % n
            raise RuntimeError(
                f"os.urandom gave {_MAX_THROWN} words in a row at or above {limit:#x} (each one "
                "is below it with probability 1/2 at least): it is not random; is it patched "
                "(a test pinning it)? Give the field rng= instead"
            )

        return draw


#: Words thrown away in a row before the source is taken for broken: 2**-128 by chance.
_MAX_THROWN: Final = 128

#: Every live :class:`SystemRandomness`: a forked child drops their words. (Each used to
#: register its own at-fork hook, which kept it alive for the life of the process.)
_randomness: weakref.WeakSet[SystemRandomness] = weakref.WeakSet()


@resets.on_fork
def _forget_in_child() -> None:
    for randomness in list(_randomness):
        randomness.forget()


def _read_words() -> list[int]:
    """:data:`POOL_BYTES` bytes of :func:`os.urandom` as 64-bit words.

    Raises:
        RuntimeError: it returned another number of bytes (it is patched).
    """
    read = os.urandom(POOL_BYTES)
    if not isinstance(read, bytes) or len(read) != POOL_BYTES:
        got = f"{len(read)} bytes" if isinstance(read, bytes) else f"a {type(read).__name__}"
        raise RuntimeError(
            f"os.urandom({POOL_BYTES}) returned {got}, not {POOL_BYTES} random bytes: is it "
            "patched (a test pinning it)? Give the field rng= instead"
        )
    words = list(memoryview(read).cast("Q"))
    if len(set(words)) < len(words):  # 512 random 64-bit words repeat one: odds about 2**-47
        raise RuntimeError(
            f"os.urandom({POOL_BYTES}) repeated a 64-bit word: it is not random; is it patched "
            "(a test pinning it)? Give the field rng= instead"
        )
    return words


#: The randomness of every field built without ``rng``. A reset (the test fixtures', after each
#: test) drops its unread words, which a test may have read under a patched ``os.urandom``.
SYSTEM_RANDOMNESS: Final = SystemRandomness()
on_reset(SYSTEM_RANDOMNESS.forget)


def randbelow_of(source: Randomness | None) -> Callable[[int], int]:
    """``source`` as a ``randbelow(n)`` function; None is :data:`SYSTEM_RANDOMNESS`.

    Raises:
        TypeError: ``source`` is neither callable nor has a ``randbelow`` method.
    """
    if source is None:
        return SYSTEM_RANDOMNESS.randbelow
    method = getattr(source, "randbelow", None)
    if callable(method):
        return cast(Callable[[int], int], method)
    if isinstance(source, random.Random):  # random.Random(seed): its randbelow is private
        return source.randrange
    if callable(source):
        return source
    raise TypeError(
        f"rng={source!r} is not a source of randomness: expected a callable randbelow(n) -> int "
        "or an object with a randbelow(n) method (e.g. the secrets module), or a random.Random"
    )


__all__ = [
    "ALPHABETS",
    "BASE62",
    "CROCKFORD32",
    "DECIMAL",
    "IntegerSpace",
    "POOL_BYTES",
    "SYSTEM_RANDOMNESS",
    "RandBelow",
    "Randomness",
    "StringSpace",
    "SystemRandomness",
    "ValueSpace",
    "luhn_check_index",
    "luhn_valid",
    "randbelow_of",
]
