"""Bad input across the public API: each row is one wrong call, with the error it must raise.

Every row asserts the exception type (``TypeError`` for a wrong type, ``ValueError`` for a wrong
value, MongoEngine's ``ValidationError`` for a field's value on save or in a query) and that the
message quotes the bad value with ``repr()``; some rows also check a suggestion or a field name.
"""

from __future__ import annotations

import pickle
import random
import re
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import mongoengine
import pytest
from bson.binary import Binary
from mongoengine import Document, StringField, ValidationError

from mongoengine_ids import (
    InvalidQueryValueError,
    LocalityUUID,
    LocalityUUIDField,
    LocalityUUIDGenerator,
    RandomUniqueField,
    Sequence,
    SequenceField,
    UUID4Field,
    UUID7Field,
    UUID7Generator,
    backfill,
)
from mongoengine_ids.locality.generator import parse_mac, reverse_hex_digits, sequential_start
from mongoengine_ids.random_unique.space import (
    IntegerSpace,
    StringSpace,
    SystemRandomness,
    randbelow_of,
)
from mongoengine_ids.sequence.admin import list_counters, set_next_value, show_counter
from mongoengine_ids.sequence.field import SequenceFormat, luhn_check_digit
from mongoengine_ids.standard.fields import uuid7_timestamp_ms

# -- what the rows call -------------------------------------------------------------------------

LOCALITY_TEXT = "20be0ffc-314a-bd53-7a50-013a65ca76d2"
V4_TEXT = "20be0ffc-314a-4d53-8a50-013a65ca76d2"
V1 = uuid.UUID("5371fdc4-e7c5-11f1-a3b4-02fc00000001")
V4 = uuid.UUID(V4_TEXT)
V7 = uuid.UUID("01890a5d-ac96-774b-bcce-b302099a8057")
NOT_A_FIELD_SCOPE = "tenat"
#: Full-width digits, U+FF11 to U+FF16: str.isdigit() says yes, int() reads 123456.
FULLWIDTH_123456 = "".join(chr(0xFF10 + digit) for digit in range(1, 7))


def time_ms() -> int:
    return 1_700_000_000_000


LOCALITY_GENERATOR = LocalityUUIDGenerator(clock=time_ms)
NOT_HEX = "g" + LOCALITY_TEXT.replace("-", "")[1:]


class _SpaceLacking:
    """A value space of the user's without ``problem()``."""

    size = 10
    description = "0 to 9"

    def value(self, index: int) -> int:
        return index

    def coerce(self, value: Any) -> Any:
        return value

    def __repr__(self) -> str:
        return f"<{type(self).__name__}>"


class _SpaceOfSize(_SpaceLacking):
    def __init__(self, size: Any) -> None:
        self.size = size

    def problem(self, value: Any) -> str | None:
        return None


class BadInputInts(Document):
    code = RandomUniqueField(digits=6)


class BadInputStrings(Document):
    code = RandomUniqueField(length=8)


class BadInputSequence(Document):
    number = SequenceField()


class BadInputFormatted(Document):
    number = SequenceField(prefix="INV-", digits=6, zero_pad=True)


class BadInputUUIDs(Document):
    u4 = UUID4Field()
    u7 = UUID7Field()
    place = LocalityUUIDField()


class BadInputScoped(Document):
    tenant = StringField()
    number = SequenceField(scope=NOT_A_FIELD_SCOPE)


def save(model: type[Document], **values: Any) -> None:
    model(**values).save()


def query(model: type[Document], **filters: Any) -> None:
    list(model.objects(**filters))


def locality_clock(reading: object) -> Callable[[], object]:
    """A generator whose injected clock reads ``reading``; called, it makes one id."""
    return LocalityUUIDGenerator(clock=lambda: reading).generate


def v7_clock(reading: object) -> Callable[[], object]:
    return UUID7Generator(clock=lambda: reading).generate


def v7_random(answer: object) -> Callable[[], object]:
    return UUID7Generator(random_bytes=lambda n: answer).generate


def save_with_rng(draw: object) -> None:
    """Save a document whose RandomUniqueField's injected rng returns ``draw``."""

    class BadInputRng(Document):
        code = RandomUniqueField(digits=6, rng=lambda n: draw)

    BadInputRng().save()


class _ChoosesOutside(random.Random):
    """An injected shard picker that returns a shard the sequence does not have."""

    def choice(self, seq: Any) -> Any:
        return 99


def lease_with_bad_rng() -> None:
    Sequence("bad-rng", database="default", shards=2, rng=_ChoosesOutside()).next()


def database() -> Any:
    return mongoengine.get_db()


# -- the table ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Bad:
    call: Callable[[], object]
    error: type[BaseException]
    quoted: object  # the bad value: its repr() must be in the message
    also: str = ""  # more text the message must hold (a suggestion, the field's name)


ROWS = [
    # -- LocalityUUID(value) ----------------------------------------------------------------
    # text that is not hex at all
    pytest.param(Bad(lambda: LocalityUUID("abc"), ValueError, "abc"), id="uuid-text-junk"),
    # the empty string
    pytest.param(Bad(lambda: LocalityUUID(""), ValueError, ""), id="uuid-text-empty"),
    # one hex digit short
    pytest.param(
        Bad(lambda: LocalityUUID(LOCALITY_TEXT[:-1]), ValueError, LOCALITY_TEXT[:-1]),
        id="uuid-text-35-chars",
    ),
    # well-formed, but version 4, not b
    pytest.param(Bad(lambda: LocalityUUID(V4_TEXT), ValueError, V4_TEXT), id="uuid-text-v4"),
    # a non-hex letter among 32 characters
    pytest.param(
        Bad(lambda: LocalityUUID(NOT_HEX), ValueError, NOT_HEX),
        id="uuid-text-not-hex",
    ),
    # a leading space is not trimmed
    pytest.param(
        Bad(lambda: LocalityUUID(" " + LOCALITY_TEXT), ValueError, " " + LOCALITY_TEXT),
        id="uuid-text-space",
    ),
    # full-width digits are not hex digits
    pytest.param(
        Bad(
            lambda: LocalityUUID("\uff12" + LOCALITY_TEXT[1:]),
            ValueError,
            "\uff12" + LOCALITY_TEXT[1:],
        ),
        id="uuid-text-fullwidth",
    ),
    # 15 bytes
    pytest.param(
        Bad(lambda: LocalityUUID(b"\x00" * 15), ValueError, b"\x00" * 15), id="uuid-15-bytes"
    ),
    # 16 bytes of BSON Binary subtype 3 (legacy byte order)
    pytest.param(
        Bad(lambda: LocalityUUID(Binary(b"\xbb" * 16, 3)), ValueError, Binary(b"\xbb" * 16, 3)),
        id="uuid-binary-subtype-3",
    ),
    # a uuid.UUID of version 0
    pytest.param(
        Bad(lambda: LocalityUUID(uuid.UUID(int=0)), ValueError, uuid.UUID(int=0)), id="uuid-nil"
    ),
    # an int is not accepted (from_int is)
    pytest.param(Bad(lambda: LocalityUUID(12345), TypeError, 12345), id="uuid-int"),
    # a float
    pytest.param(Bad(lambda: LocalityUUID(1.5), TypeError, 1.5), id="uuid-float"),
    # None
    pytest.param(Bad(lambda: LocalityUUID(None), TypeError, None), id="uuid-none"),
    # a list holding the text
    pytest.param(
        Bad(lambda: LocalityUUID([LOCALITY_TEXT]), TypeError, [LOCALITY_TEXT]),
        id="uuid-list",
    ),
    # -- LocalityUUID.from_int --------------------------------------------------------------
    # a str (was: "'<=' not supported")
    pytest.param(Bad(lambda: LocalityUUID.from_int("abc"), TypeError, "abc"), id="from-int-str"),
    # a float (was: failed inside a shift)
    pytest.param(Bad(lambda: LocalityUUID.from_int(1.5), TypeError, 1.5), id="from-int-float"),
    # a bool is not a number here
    pytest.param(Bad(lambda: LocalityUUID.from_int(True), TypeError, True), id="from-int-bool"),
    # None
    pytest.param(Bad(lambda: LocalityUUID.from_int(None), TypeError, None), id="from-int-none"),
    # negative
    pytest.param(Bad(lambda: LocalityUUID.from_int(-1), ValueError, -1), id="from-int-negative"),
    # 129 bits
    pytest.param(
        Bad(lambda: LocalityUUID.from_int(1 << 128), ValueError, 1 << 128), id="from-int-129-bits"
    ),
    # version nibble 0
    pytest.param(Bad(lambda: LocalityUUID.from_int(0), ValueError, 0), id="from-int-version-0"),
    # a version 4 number
    pytest.param(Bad(lambda: LocalityUUID.from_int(V4.int), ValueError, V4.int), id="from-int-v4"),
    # -- LocalityUUID.from_fields -----------------------------------------------------------
    # pid as text (was: "'<=' not supported")
    pytest.param(
        Bad(
            lambda: LocalityUUID.from_fields(counter=1, pid="x", node=1, timestamp_ms=1),
            TypeError,
            "x",
        ),
        id="fields-pid-str",
    ),
    # a float counter
    pytest.param(
        Bad(
            lambda: LocalityUUID.from_fields(counter=1.5, pid=1, node=1, timestamp_ms=1),
            TypeError,
            1.5,
        ),
        id="fields-counter-float",
    ),
    # node None
    pytest.param(
        Bad(
            lambda: LocalityUUID.from_fields(counter=1, pid=1, node=None, timestamp_ms=1),
            TypeError,
            None,
        ),
        id="fields-node-none",
    ),
    # the time as text
    pytest.param(
        Bad(
            lambda: LocalityUUID.from_fields(counter=1, pid=1, node=1, timestamp_ms="0"),
            TypeError,
            "0",
        ),
        id="fields-time-str",
    ),
    # a bool counter
    pytest.param(
        Bad(
            lambda: LocalityUUID.from_fields(counter=True, pid=1, node=1, timestamp_ms=1),
            TypeError,
            True,
        ),
        id="fields-counter-bool",
    ),
    # a negative counter
    pytest.param(
        Bad(
            lambda: LocalityUUID.from_fields(counter=-1, pid=1, node=1, timestamp_ms=1),
            ValueError,
            -1,
        ),
        id="fields-counter-negative",
    ),
    # a 33-bit counter
    pytest.param(
        Bad(
            lambda: LocalityUUID.from_fields(counter=1 << 32, pid=1, node=1, timestamp_ms=1),
            ValueError,
            1 << 32,
        ),
        id="fields-counter-33-bits",
    ),
    # a 17-bit pid
    pytest.param(
        Bad(
            lambda: LocalityUUID.from_fields(counter=1, pid=1 << 16, node=1, timestamp_ms=1),
            ValueError,
            1 << 16,
        ),
        id="fields-pid-17-bits",
    ),
    # a 29-bit node
    pytest.param(
        Bad(
            lambda: LocalityUUID.from_fields(counter=1, pid=1, node=1 << 28, timestamp_ms=1),
            ValueError,
            1 << 28,
        ),
        id="fields-node-29-bits",
    ),
    # a 49-bit time
    pytest.param(
        Bad(
            lambda: LocalityUUID.from_fields(counter=1, pid=1, node=1, timestamp_ms=1 << 48),
            ValueError,
            1 << 48,
        ),
        id="fields-time-49-bits",
    ),
    # a time before 1970
    pytest.param(
        Bad(
            lambda: LocalityUUID.from_fields(counter=1, pid=1, node=1, timestamp_ms=-5),
            ValueError,
            -5,
        ),
        id="fields-time-negative",
    ),
    # an unknown mode
    pytest.param(
        Bad(
            lambda: LocalityUUID.from_fields(counter=1, pid=1, node=1, timestamp_ms=1, mode="fast"),
            ValueError,
            "fast",
        ),
        id="fields-mode-unknown",
    ),
    # a mode that is not text
    pytest.param(
        Bad(
            lambda: LocalityUUID.from_fields(counter=1, pid=1, node=1, timestamp_ms=1, mode=1),
            TypeError,
            1,
        ),
        id="fields-mode-int",
    ),
    # -- LocalityUUIDGenerator(...) ---------------------------------------------------------
    # an unknown mode
    pytest.param(
        Bad(lambda: LocalityUUIDGenerator(mode="random"), ValueError, "random"),
        id="gen-mode-unknown",
    ),
    # mode None
    pytest.param(
        Bad(lambda: LocalityUUIDGenerator(mode=None), TypeError, None), id="gen-mode-none"
    ),
    # the pid as text
    pytest.param(Bad(lambda: LocalityUUIDGenerator(pid="12"), TypeError, "12"), id="gen-pid-str"),
    # a float pid
    pytest.param(Bad(lambda: LocalityUUIDGenerator(pid=1.0), TypeError, 1.0), id="gen-pid-float"),
    # a negative pid would wrap to 65531
    pytest.param(Bad(lambda: LocalityUUIDGenerator(pid=-1), ValueError, -1), id="gen-pid-negative"),
    # no OS has 33-bit process ids
    pytest.param(
        Bad(lambda: LocalityUUIDGenerator(pid=1 << 32), ValueError, 1 << 32), id="gen-pid-33-bits"
    ),
    # a negative counter would wrap
    pytest.param(
        Bad(lambda: LocalityUUIDGenerator(counter=-1), ValueError, -1), id="gen-counter-negative"
    ),
    # a 33-bit counter would wrap
    pytest.param(
        Bad(lambda: LocalityUUIDGenerator(counter=1 << 32), ValueError, 1 << 32),
        id="gen-counter-33-bits",
    ),
    # a float counter
    pytest.param(
        Bad(lambda: LocalityUUIDGenerator(counter=1.5), TypeError, 1.5), id="gen-counter-float"
    ),
    # a 49-bit MAC
    pytest.param(
        Bad(lambda: LocalityUUIDGenerator(mac=1 << 48), ValueError, 1 << 48), id="gen-mac-49-bits"
    ),
    # a negative MAC
    pytest.param(Bad(lambda: LocalityUUIDGenerator(mac=-1), ValueError, -1), id="gen-mac-negative"),
    # 5 bytes of MAC
    pytest.param(
        Bad(lambda: LocalityUUIDGenerator(mac=b"\x00" * 5), ValueError, b"\x00" * 5),
        id="gen-mac-5-bytes",
    ),
    # the MAC as text (parse_mac reads text)
    pytest.param(
        Bad(lambda: LocalityUUIDGenerator(mac="12:34:56:78:9a:bc"), TypeError, "12:34:56:78:9a:bc"),
        id="gen-mac-str",
    ),
    # a float MAC
    pytest.param(Bad(lambda: LocalityUUIDGenerator(mac=1.5), TypeError, 1.5), id="gen-mac-float"),
    # a clock that is not callable
    pytest.param(Bad(lambda: LocalityUUIDGenerator(clock=5), TypeError, 5), id="gen-clock-int"),
    # a misspelt keyword: the closest is named
    pytest.param(
        Bad(lambda: LocalityUUIDGenerator(clok=time_ms), TypeError, "clok", "did you mean 'clock'"),
        id="gen-typo-clok",
    ),
    # node is not an argument (mac is); mode is the closest name
    pytest.param(
        Bad(lambda: LocalityUUIDGenerator(node=1), TypeError, "node", "did you mean 'mode'"),
        id="gen-typo-node",
    ),
    # sequential mode reads the clock at once: a bad reading raises there
    pytest.param(
        Bad(lambda: LocalityUUIDGenerator(mode="sequential", clock=lambda: -1), ValueError, -1),
        id="gen-sequential-clock-negative",
    ),
    # -- the injected clock, checked at every call ------------------------------------------
    # before 1970: would have written year 10889 (wrapped)
    pytest.param(Bad(locality_clock(-5), ValueError, -5), id="clock-negative"),
    # past the 48-bit field: would have wrapped to 5
    pytest.param(Bad(locality_clock(2**48 + 5), ValueError, 2**48 + 5), id="clock-49-bits"),
    # seconds as a float (time.time) instead of int milliseconds
    pytest.param(Bad(locality_clock(1.5), TypeError, 1.5), id="clock-float"),
    # text
    pytest.param(Bad(locality_clock("x"), TypeError, "x"), id="clock-str"),
    # None
    pytest.param(Bad(locality_clock(None), TypeError, None), id="clock-none"),
    # a bool
    pytest.param(Bad(locality_clock(True), TypeError, True), id="clock-bool"),
    # switching to sequential reads the clock too
    pytest.param(
        Bad(lambda: LocalityUUIDGenerator(clock=lambda: -1).use_sequential(), ValueError, -1),
        id="clock-negative-on-switch",
    ),
    # -- locality helpers -------------------------------------------------------------------
    # a MAC cut short
    pytest.param(Bad(lambda: parse_mac("12:34"), ValueError, "12:34"), id="parse-mac-short"),
    # a MAC as an int
    pytest.param(Bad(lambda: parse_mac(123), TypeError, 123), id="parse-mac-int"),
    # a MAC of non-hex digits
    pytest.param(
        Bad(lambda: parse_mac("zz:zz:zz:zz:zz:zz"), ValueError, "zz:zz:zz:zz:zz:zz"),
        id="parse-mac-not-hex",
    ),
    # a negative counter to reverse
    pytest.param(Bad(lambda: reverse_hex_digits(-1), ValueError, -1), id="reverse-negative"),
    # a 33-bit counter to reverse
    pytest.param(
        Bad(lambda: reverse_hex_digits(1 << 32), ValueError, 1 << 32), id="reverse-33-bits"
    ),
    # text to reverse
    pytest.param(Bad(lambda: reverse_hex_digits("1"), TypeError, "1"), id="reverse-str"),
    # a float time for the sequential start
    pytest.param(Bad(lambda: sequential_start(1.5), TypeError, 1.5), id="sequential-start-float"),
    # a negative time for the sequential start
    pytest.param(Bad(lambda: sequential_start(-1), ValueError, -1), id="sequential-start-negative"),
    # -- UUID7Generator ---------------------------------------------------------------------
    # a clock that is not callable
    pytest.param(Bad(lambda: UUID7Generator(clock=5), TypeError, 5), id="v7-clock-int"),
    # random bytes that are not callable
    pytest.param(Bad(lambda: UUID7Generator(random_bytes="x"), TypeError, "x"), id="v7-random-str"),
    # a misspelt keyword
    pytest.param(
        Bad(
            lambda: UUID7Generator(randombytes=bytes),
            TypeError,
            "randombytes",
            "did you mean 'random_bytes'",
        ),
        id="v7-typo",
    ),
    # the clock before 1970
    pytest.param(Bad(v7_clock(-1), ValueError, -1), id="v7-clock-negative"),
    # the clock past 48 bits
    pytest.param(Bad(v7_clock(2**48), ValueError, 2**48), id="v7-clock-49-bits"),
    # the clock as a float
    pytest.param(Bad(v7_clock(1.5), TypeError, 1.5), id="v7-clock-float"),
    # the clock as text
    pytest.param(Bad(v7_clock("1"), TypeError, "1"), id="v7-clock-str"),
    # random bytes too short: would have made a zero counter
    pytest.param(Bad(v7_random(b""), ValueError, b""), id="v7-random-short"),
    # random text instead of bytes
    pytest.param(Bad(v7_random("x" * 10), TypeError, "x" * 10), id="v7-random-text"),
    # a list of ints instead of bytes
    pytest.param(Bad(v7_random([0] * 10), TypeError, [0] * 10), id="v7-random-list"),
    # the timestamp of text
    pytest.param(Bad(lambda: uuid7_timestamp_ms("x"), TypeError, "x"), id="v7-timestamp-str"),
    # the timestamp of a version 4 UUID
    pytest.param(Bad(lambda: uuid7_timestamp_ms(V4), ValueError, str(V4)), id="v7-timestamp-v4"),
    # -- LocalityUUIDField(...) and MongoEngine's own options -------------------------------
    # an unknown mode
    pytest.param(
        Bad(lambda: LocalityUUIDField(mode="fast"), ValueError, "fast"), id="lf-mode-unknown"
    ),
    # a mode that is not text
    pytest.param(Bad(lambda: LocalityUUIDField(mode=1), TypeError, 1), id="lf-mode-int"),
    # a generator that is not one
    pytest.param(
        Bad(lambda: LocalityUUIDField(generator="spread"), TypeError, "spread"),
        id="lf-generator-str",
    ),
    # as_string as text
    pytest.param(
        Bad(lambda: LocalityUUIDField(as_string="yes"), TypeError, "yes"), id="lf-as-string-str"
    ),
    # misspelt mode
    pytest.param(
        Bad(lambda: LocalityUUIDField(mdoe="spread"), TypeError, "mdoe", "did you mean 'mode'"),
        id="lf-typo-mode",
    ),
    # misspelt generator
    pytest.param(
        Bad(
            lambda: LocalityUUIDField(generater=None),
            TypeError,
            "generater",
            "did you mean 'generator'",
        ),
        id="lf-typo-generator",
    ),
    # misspelt as_string (a UUIDValueField option: found through the class's bases)
    pytest.param(
        Bad(
            lambda: LocalityUUIDField(as_str=True), TypeError, "as_str", "did you mean 'as_string'"
        ),
        id="lf-typo-as-string",
    ),
    # misspelt MongoEngine option
    pytest.param(
        Bad(
            lambda: LocalityUUIDField(primary=True),
            TypeError,
            "primary",
            "did you mean 'primary_key'",
        ),
        id="lf-typo-primary-key",
    ),
    # primary_key as text
    pytest.param(
        Bad(lambda: LocalityUUIDField(primary_key="yes"), TypeError, "yes"), id="lf-primary-key-str"
    ),
    # db_field as an int
    pytest.param(Bad(lambda: LocalityUUIDField(db_field=5), TypeError, 5), id="lf-db-field-int"),
    # db_field with a dot
    pytest.param(
        Bad(lambda: LocalityUUIDField(db_field="a.b"), ValueError, "a.b"), id="lf-db-field-dot"
    ),
    # db_field starting with $
    pytest.param(
        Bad(lambda: LocalityUUIDField(db_field="$x"), ValueError, "$x"), id="lf-db-field-dollar"
    ),
    # an empty db_field
    pytest.param(
        Bad(lambda: LocalityUUIDField(db_field=""), ValueError, ""), id="lf-db-field-empty"
    ),
    # unique as 1
    pytest.param(Bad(lambda: LocalityUUIDField(unique=1), TypeError, 1), id="lf-unique-int"),
    # required as text
    pytest.param(
        Bad(lambda: LocalityUUIDField(required="no"), TypeError, "no"), id="lf-required-str"
    ),
    # sparse as text
    pytest.param(Bad(lambda: LocalityUUIDField(sparse="no"), TypeError, "no"), id="lf-sparse-str"),
    # null as 0
    pytest.param(Bad(lambda: LocalityUUIDField(null=0), TypeError, 0), id="lf-null-int"),
    # validation that is not callable
    pytest.param(
        Bad(lambda: LocalityUUIDField(validation=5), TypeError, 5), id="lf-validation-int"
    ),
    # choices as one string
    pytest.param(
        Bad(lambda: LocalityUUIDField(choices="abc"), TypeError, "abc"), id="lf-choices-str"
    ),
    # unique_with as an int
    pytest.param(
        Bad(lambda: LocalityUUIDField(unique_with=5), TypeError, 5), id="lf-unique-with-int"
    ),
    # -- UUID4Field / UUID7Field ------------------------------------------------------------
    # UUID4Field has no generator
    pytest.param(
        Bad(lambda: UUID4Field(generator=UUID7Generator()), TypeError, "generator"),
        id="u4-generator",
    ),
    # as_string as 1
    pytest.param(Bad(lambda: UUID4Field(as_string=1), TypeError, 1), id="u4-as-string-int"),
    # a generator of text
    pytest.param(Bad(lambda: UUID7Field(generator="x"), TypeError, "x"), id="u7-generator-str"),
    # a generator of the wrong kind
    pytest.param(
        Bad(lambda: UUID7Field(generator=LOCALITY_GENERATOR), TypeError, LOCALITY_GENERATOR),
        id="u7-generator-locality",
    ),
    # misspelt generator
    pytest.param(
        Bad(lambda: UUID7Field(genrator=None), TypeError, "genrator", "did you mean 'generator'"),
        id="u7-typo-generator",
    ),
    # -- RandomUniqueField(...) -------------------------------------------------------------
    # misspelt max_retries (was silently stored as an attribute)
    pytest.param(
        Bad(
            lambda: RandomUniqueField(digits=6, max_retry=3),
            TypeError,
            "max_retry",
            "did you mean 'max_retries'",
        ),
        id="ru-typo-max-retries",
    ),
    # misspelt length: reported as such, not as "no value space"
    pytest.param(
        Bad(lambda: RandomUniqueField(lenght=8), TypeError, "lenght", "did you mean 'length'"),
        id="ru-typo-length",
    ),
    # misspelt reserve_in
    pytest.param(
        Bad(
            lambda: RandomUniqueField(digits=6, reserve="ids"),
            TypeError,
            "reserve",
            "did you mean 'reserve_in'",
        ),
        id="ru-typo-reserve-in",
    ),
    # an unknown alphabet name (was: the alphabet "h", "e", "x")
    pytest.param(
        Bad(lambda: RandomUniqueField(length=8, alphabet="hex"), ValueError, "hex"),
        id="ru-alphabet-hex",
    ),
    # an encoding's name whose letters ascend (was: the alphabet "H", "e", "x")
    pytest.param(
        Bad(lambda: RandomUniqueField(length=8, alphabet="Hex"), ValueError, "Hex"),
        id="ru-alphabet-Hex",
    ),
    pytest.param(
        Bad(lambda: StringSpace(4, "bin"), ValueError, "bin", "names an encoding"),
        id="string-space-bin",
    ),
    # a near miss of a known name
    pytest.param(
        Bad(
            lambda: RandomUniqueField(length=8, alphabet="base64"),
            ValueError,
            "base64",
            "did you mean 'base62'",
        ),
        id="ru-alphabet-base64",
    ),
    # a known name in the wrong case
    pytest.param(
        Bad(
            lambda: RandomUniqueField(length=8, alphabet="Decimal"),
            ValueError,
            "Decimal",
            "did you mean 'decimal'",
        ),
        id="ru-alphabet-case",
    ),
    # a known name cut short
    pytest.param(
        Bad(
            lambda: RandomUniqueField(length=8, alphabet="crockford"),
            ValueError,
            "crockford",
            "did you mean 'crockford32'",
        ),
        id="ru-alphabet-crockford",
    ),
    # an alphabet that repeats a character
    pytest.param(
        Bad(lambda: RandomUniqueField(length=8, alphabet="0112"), ValueError, "0112"),
        id="ru-alphabet-repeat",
    ),
    # a one-character alphabet
    pytest.param(
        Bad(lambda: RandomUniqueField(length=8, alphabet="x"), ValueError, "x"),
        id="ru-alphabet-one",
    ),
    # an alphabet that is not text
    pytest.param(
        Bad(lambda: RandomUniqueField(length=8, alphabet=32), TypeError, 32), id="ru-alphabet-int"
    ),
    # Luhn over an odd alphabet misses errors
    pytest.param(
        Bad(lambda: RandomUniqueField(length=8, alphabet="012", luhn=True), ValueError, "012"),
        id="ru-alphabet-odd-luhn",
    ),
    # zero digits
    pytest.param(Bad(lambda: RandomUniqueField(digits=0), ValueError, 0), id="ru-digits-0"),
    # 19 digits do not fit an int64
    pytest.param(Bad(lambda: RandomUniqueField(digits=19), ValueError, 19), id="ru-digits-19"),
    # digits as text
    pytest.param(Bad(lambda: RandomUniqueField(digits="6"), TypeError, "6"), id="ru-digits-str"),
    # digits as a float
    pytest.param(Bad(lambda: RandomUniqueField(digits=6.0), TypeError, 6.0), id="ru-digits-float"),
    # digits as a bool
    pytest.param(Bad(lambda: RandomUniqueField(digits=True), TypeError, True), id="ru-digits-bool"),
    # one digit cannot hold a check digit and a payload
    pytest.param(
        Bad(lambda: RandomUniqueField(digits=1, luhn=True), ValueError, 1), id="ru-digits-1-luhn"
    ),
    # length zero
    pytest.param(Bad(lambda: RandomUniqueField(length=0), ValueError, 0), id="ru-length-0"),
    # length as text
    pytest.param(Bad(lambda: RandomUniqueField(length="8"), TypeError, "8"), id="ru-length-str"),
    # bounds the wrong way round
    pytest.param(
        Bad(lambda: RandomUniqueField(min_value=5, max_value=1), ValueError, 5),
        id="ru-bounds-reversed",
    ),
    # a bound as text
    pytest.param(
        Bad(lambda: RandomUniqueField(min_value="1", max_value=5), TypeError, "1"),
        id="ru-bound-str",
    ),
    # a bound past int64
    pytest.param(
        Bad(lambda: RandomUniqueField(min_value=0, max_value=2**63), ValueError, 2**63),
        id="ru-bound-past-int64",
    ),
    # two value spaces
    pytest.param(
        Bad(lambda: RandomUniqueField(digits=6, length=8), ValueError, 8), id="ru-two-spaces"
    ),
    # a space that is not one
    pytest.param(Bad(lambda: RandomUniqueField(space="x"), TypeError, "x"), id="ru-space-str"),
    # a space lacking a member, or of no size (probe BD: the member, the size were not named)
    pytest.param(
        Bad(
            lambda: RandomUniqueField(space=_SpaceLacking()),
            TypeError,
            _SpaceLacking(),
            also="lacks problem",
        ),
        id="ru-space-lacking",
    ),
    pytest.param(
        Bad(lambda: RandomUniqueField(space=_SpaceOfSize(0)), ValueError, 0, also="space.size"),
        id="ru-space-empty",
    ),
    pytest.param(
        Bad(lambda: RandomUniqueField(space=_SpaceOfSize("9")), TypeError, "9"),
        id="ru-space-size-str",
    ),
    # an rng that is neither callable nor has randbelow
    pytest.param(Bad(lambda: RandomUniqueField(digits=6, rng=5), TypeError, 5), id="ru-rng-int"),
    # negative retries
    pytest.param(
        Bad(lambda: RandomUniqueField(digits=6, max_retries=-1), ValueError, -1),
        id="ru-retries-negative",
    ),
    # retries as text
    pytest.param(
        Bad(lambda: RandomUniqueField(digits=6, max_retries="3"), TypeError, "3"),
        id="ru-retries-str",
    ),
    # retries as a float
    pytest.param(
        Bad(lambda: RandomUniqueField(digits=6, max_retries=1.5), TypeError, 1.5),
        id="ru-retries-float",
    ),
    # a share above 1
    pytest.param(
        Bad(lambda: RandomUniqueField(digits=6, warn_collision_rate=2), ValueError, 2),
        id="ru-rate-2",
    ),
    # a share as text
    pytest.param(
        Bad(lambda: RandomUniqueField(digits=6, warn_collision_rate="1%"), TypeError, "1%"),
        id="ru-rate-str",
    ),
    # a share that is not a number
    pytest.param(
        Bad(
            lambda: RandomUniqueField(digits=6, warn_collision_rate=float("nan")),
            ValueError,
            float("nan"),
        ),
        id="ru-rate-nan",
    ),
    # a proxy collection named by an int
    pytest.param(
        Bad(lambda: RandomUniqueField(digits=6, reserve_in=5), TypeError, 5), id="ru-reserve-int"
    ),
    # an empty proxy collection name
    pytest.param(
        Bad(lambda: RandomUniqueField(digits=6, reserve_in=""), ValueError, ""),
        id="ru-reserve-empty",
    ),
    # a proxy collection name with $
    pytest.param(
        Bad(lambda: RandomUniqueField(digits=6, reserve_in="$bad"), ValueError, "$bad"),
        id="ru-reserve-dollar",
    ),
    # a reserved system collection
    pytest.param(
        Bad(lambda: RandomUniqueField(digits=6, reserve_in="system.ids"), ValueError, "system.ids"),
        id="ru-reserve-system",
    ),
    # without its unique index the field cannot see collisions
    pytest.param(
        Bad(lambda: RandomUniqueField(digits=6, unique=False), ValueError, False),
        id="ru-unique-false",
    ),
    # a compound unique index does not make the value unique
    pytest.param(
        Bad(lambda: RandomUniqueField(digits=6, unique_with="x"), ValueError, "x"),
        id="ru-unique-with",
    ),
    # luhn as text
    pytest.param(
        Bad(lambda: RandomUniqueField(digits=6, luhn="yes"), TypeError, "yes"), id="ru-luhn-str"
    ),
    # a prefix that is not text
    pytest.param(
        Bad(lambda: RandomUniqueField(length=8, prefix=5), TypeError, 5), id="ru-prefix-int"
    ),
    # an alphabet without a string length
    pytest.param(
        Bad(lambda: RandomUniqueField(digits=6, alphabet="abc"), ValueError, "abc"),
        id="ru-alphabet-with-digits",
    ),
    # -- an injected rng, checked at every draw ---------------------------------------------
    # below the space
    pytest.param(Bad(lambda: save_with_rng(-1), ValueError, -1), id="rng-negative"),
    # past the space (900,000 six-digit values)
    pytest.param(Bad(lambda: save_with_rng(900_000), ValueError, 900_000), id="rng-past-space"),
    # a float
    pytest.param(Bad(lambda: save_with_rng(1.5), TypeError, 1.5), id="rng-float"),
    # text
    pytest.param(Bad(lambda: save_with_rng("1"), TypeError, "1"), id="rng-str"),
    # a bool
    pytest.param(Bad(lambda: save_with_rng(True), TypeError, True), id="rng-bool"),
    # -- value spaces -----------------------------------------------------------------------
    # luhn as text
    pytest.param(Bad(lambda: IntegerSpace(1, 5, luhn="y"), TypeError, "y"), id="space-luhn-str"),
    # misspelt luhn
    pytest.param(
        Bad(lambda: IntegerSpace(1, 5, lun=True), TypeError, "lun", "did you mean 'luhn'"),
        id="space-typo-luhn",
    ),
    # an index below the space (would give a value outside it)
    pytest.param(
        Bad(lambda: IntegerSpace.of_digits(6).value(-1), ValueError, -1), id="space-index-negative"
    ),
    # an index past the space
    pytest.param(
        Bad(lambda: IntegerSpace.of_digits(6).value(900_000), ValueError, 900_000),
        id="space-index-past",
    ),
    # a float index
    pytest.param(
        Bad(lambda: IntegerSpace.of_digits(6).value(1.0), TypeError, 1.0), id="space-index-float"
    ),
    # a string index past the space (would have wrapped to 0000)
    pytest.param(
        Bad(lambda: StringSpace(4).value(32**4), ValueError, 32**4), id="string-space-index-past"
    ),
    # an unknown alphabet name
    pytest.param(Bad(lambda: StringSpace(4, "hex"), ValueError, "hex"), id="string-space-hex"),
    # misspelt prefix
    pytest.param(
        Bad(lambda: StringSpace(4, prefx="A"), TypeError, "prefx", "did you mean 'prefix'"),
        id="string-space-typo",
    ),
    # a bound of zero
    pytest.param(Bad(lambda: SystemRandomness().randbelow(0), ValueError, 0), id="randbelow-0"),
    # a float bound
    pytest.param(
        Bad(lambda: SystemRandomness().randbelow(2.5), TypeError, 2.5), id="randbelow-float"
    ),
    # a bound as text
    pytest.param(
        Bad(lambda: SystemRandomness().randbelow("5"), TypeError, "5"), id="randbelow-str"
    ),
    # a source of randomness that is none
    pytest.param(Bad(lambda: randbelow_of(5), TypeError, 5), id="randbelow-of-int"),
    # -- values assigned to an integer RandomUniqueField, then saved ------------------------
    # a doubled sign (was: a bare int() ValueError)
    pytest.param(
        Bad(lambda: save(BadInputInts, code="--5"), ValidationError, "--5", "code"),
        id="save-int-double-minus",
    ),
    # a superscript two (was: a bare int() ValueError)
    pytest.param(
        Bad(lambda: save(BadInputInts, code="²"), ValidationError, "²", "code"),
        id="save-int-superscript",
    ),
    # Arabic-Indic digits (were: silently 123456)
    pytest.param(
        Bad(lambda: save(BadInputInts, code="١٢٣٤٥٦"), ValidationError, "١٢٣٤٥٦", "code"),
        id="save-int-arabic-indic",
    ),
    # full-width digits
    pytest.param(
        Bad(
            lambda: save(BadInputInts, code=FULLWIDTH_123456),
            ValidationError,
            FULLWIDTH_123456,
            "code",
        ),
        id="save-int-fullwidth",
    ),
    # Devanagari digits
    pytest.param(
        Bad(lambda: save(BadInputInts, code="१२३४५६"), ValidationError, "१२३४५६", "code"),
        id="save-int-devanagari",
    ),
    # digits with a space inside
    pytest.param(
        Bad(lambda: save(BadInputInts, code="123 456"), ValidationError, "123 456", "code"),
        id="save-int-inner-space",
    ),
    # a decimal point
    pytest.param(
        Bad(lambda: save(BadInputInts, code="123456.0"), ValidationError, "123456.0", "code"),
        id="save-int-decimal",
    ),
    # underscores, which int() would take
    pytest.param(
        Bad(lambda: save(BadInputInts, code="123_456"), ValidationError, "123_456", "code"),
        id="save-int-underscore",
    ),
    # five digits for a six-digit space
    pytest.param(
        Bad(lambda: save(BadInputInts, code=12345), ValidationError, 12345, "code"),
        id="save-int-short",
    ),
    # a float
    pytest.param(
        Bad(lambda: save(BadInputInts, code=1.5), ValidationError, 1.5, "code"), id="save-int-float"
    ),
    # bytes
    pytest.param(
        Bad(lambda: save(BadInputInts, code=b"123456"), ValidationError, b"123456", "code"),
        id="save-int-bytes",
    ),
    # -- ... and queried --------------------------------------------------------------------
    # a doubled sign (was: a bare int() ValueError)
    pytest.param(
        Bad(lambda: query(BadInputInts, code="--5"), ValidationError, "--5", "BadInputInts.code"),
        id="query-int-double-minus",
    ),
    # a superscript two
    pytest.param(
        Bad(lambda: query(BadInputInts, code="²"), ValidationError, "²", "BadInputInts.code"),
        id="query-int-superscript",
    ),
    # Arabic-Indic digits (matched 123456 before)
    pytest.param(
        Bad(
            lambda: query(BadInputInts, code="١٢٣٤٥٦"),
            ValidationError,
            "١٢٣٤٥٦",
            "BadInputInts.code",
        ),
        id="query-int-arabic-indic",
    ),
    # one bad value in a list
    pytest.param(
        Bad(
            lambda: query(BadInputInts, code__in=["123456", "--5"]),
            ValidationError,
            "--5",
            "BadInputInts.code",
        ),
        id="query-int-in-list",
    ),
    # bytes
    pytest.param(
        Bad(lambda: query(BadInputInts, code=b"1"), ValidationError, b"1", "BadInputInts.code"),
        id="query-int-bytes",
    ),
    # a UUID
    pytest.param(
        Bad(lambda: query(BadInputInts, code=V4), ValidationError, V4, "BadInputInts.code"),
        id="query-int-uuid",
    ),
    # a comparison with text that is no number
    pytest.param(
        Bad(lambda: query(BadInputInts, code__gt="x"), ValidationError, "x", "BadInputInts.code"),
        id="query-int-gt-text",
    ),
    # -- a string RandomUniqueField ---------------------------------------------------------
    # an int for a string id
    pytest.param(
        Bad(lambda: save(BadInputStrings, code=12345678), ValidationError, 12345678, "code"),
        id="save-str-int",
    ),
    # too short
    pytest.param(
        Bad(lambda: save(BadInputStrings, code="ABC"), ValidationError, "ABC", "code"),
        id="save-str-short",
    ),
    # U is not in Crockford's alphabet
    pytest.param(
        Bad(lambda: save(BadInputStrings, code="ABCDEFGU"), ValidationError, "ABCDEFGU", "code"),
        id="save-str-letter",
    ),
    # queried by an int
    pytest.param(
        Bad(
            lambda: query(BadInputStrings, code=12345678),
            ValidationError,
            12345678,
            "BadInputStrings.code",
        ),
        id="query-str-int",
    ),
    # queried by bytes
    pytest.param(
        Bad(
            lambda: query(BadInputStrings, code=b"ABCDEFGH"),
            ValidationError,
            b"ABCDEFGH",
            "BadInputStrings.code",
        ),
        id="query-str-bytes",
    ),
    # -- SequenceField values ---------------------------------------------------------------
    # a doubled sign
    pytest.param(
        Bad(lambda: save(BadInputSequence, number="--5"), ValidationError, "--5", "number"),
        id="save-seq-double-minus",
    ),
    # a superscript
    pytest.param(
        Bad(lambda: save(BadInputSequence, number="²"), ValidationError, "²", "number"),
        id="save-seq-superscript",
    ),
    # Arabic-Indic digits
    pytest.param(
        Bad(lambda: save(BadInputSequence, number="١٢٣"), ValidationError, "١٢٣", "number"),
        id="save-seq-arabic-indic",
    ),
    # negative
    pytest.param(
        Bad(lambda: save(BadInputSequence, number=-1), ValidationError, -1, "number"),
        id="save-seq-negative",
    ),
    # a float
    pytest.param(
        Bad(lambda: save(BadInputSequence, number=1.5), ValidationError, 1.5, "number"),
        id="save-seq-float",
    ),
    # past int64
    pytest.param(
        Bad(lambda: save(BadInputSequence, number=2**63), ValidationError, 2**63, "number"),
        id="save-seq-past-int64",
    ),
    # queried by a doubled sign
    pytest.param(
        Bad(lambda: query(BadInputSequence, number="--5"), ValidationError, "--5", "number"),
        id="query-seq-double-minus",
    ),
    # queried by Arabic-Indic digits
    pytest.param(
        Bad(lambda: query(BadInputSequence, number="١٢٣"), ValidationError, "١٢٣", "number"),
        id="query-seq-arabic-indic",
    ),
    # queried by a float
    pytest.param(
        Bad(lambda: query(BadInputSequence, number=1.5), ValidationError, 1.5, "number"),
        id="query-seq-float",
    ),
    # a formatted value of the wrong width
    pytest.param(
        Bad(lambda: save(BadInputFormatted, number="INV-12"), ValidationError, "INV-12", "number"),
        id="save-fmt-width",
    ),
    # a formatted value with Arabic-Indic digits
    pytest.param(
        Bad(
            lambda: save(BadInputFormatted, number="INV-١٢٣٤٥٦"),
            ValidationError,
            "INV-١٢٣٤٥٦",
            "number",
        ),
        id="save-fmt-arabic-indic",
    ),
    # another prefix
    pytest.param(
        Bad(
            lambda: query(BadInputFormatted, number="XYZ-000001"),
            ValidationError,
            "XYZ-000001",
            "number",
        ),
        id="query-fmt-prefix",
    ),
    # a scope naming no field of the model
    pytest.param(
        Bad(lambda: save(BadInputScoped, tenant="a"), ValueError, NOT_A_FIELD_SCOPE, "tenant"),
        id="save-seq-scope-missing-field",
    ),
    # -- UUID field values ------------------------------------------------------------------
    # a version 1 UUID in a UUID4Field (was: stored)
    pytest.param(
        Bad(lambda: save(BadInputUUIDs, u4=V1), ValidationError, V1, "u4"), id="save-u4-v1"
    ),
    # a version 7 UUID, as text, in a UUID4Field
    pytest.param(
        Bad(lambda: save(BadInputUUIDs, u4=str(V7)), ValidationError, str(V7), "u4"),
        id="save-u4-v7-text",
    ),
    # a version 4 UUID in a UUID7Field (was: stored)
    pytest.param(
        Bad(lambda: save(BadInputUUIDs, u7=V4), ValidationError, V4, "u7"), id="save-u7-v4"
    ),
    # a Locality UUID in a UUID7Field
    pytest.param(
        Bad(
            lambda: save(BadInputUUIDs, u7=LocalityUUID(LOCALITY_TEXT)),
            ValidationError,
            LocalityUUID(LOCALITY_TEXT),
            "u7",
        ),
        id="save-u7-locality",
    ),
    # junk text in a UUID7Field
    pytest.param(
        Bad(lambda: save(BadInputUUIDs, u7="not a uuid"), ValidationError, "not a uuid", "u7"),
        id="save-u7-junk",
    ),
    # a version 4 UUID in a LocalityUUIDField
    pytest.param(
        Bad(lambda: save(BadInputUUIDs, place=V4), ValidationError, V4, "place"),
        id="save-locality-v4",
    ),
    # version 4 text in a LocalityUUIDField
    pytest.param(
        Bad(lambda: save(BadInputUUIDs, place=V4_TEXT), ValidationError, V4_TEXT, "place"),
        id="save-locality-v4-text",
    ),
    # an int in a LocalityUUIDField
    pytest.param(
        Bad(lambda: save(BadInputUUIDs, place=5), ValidationError, 5, "place"),
        id="save-locality-int",
    ),
    # queried by junk text
    pytest.param(
        Bad(
            lambda: query(BadInputUUIDs, u4="not-a-uuid"),
            ValidationError,
            "not-a-uuid",
            "BadInputUUIDs.u4",
        ),
        id="query-u4-junk",
    ),
    # queried by an int
    pytest.param(
        Bad(
            lambda: query(BadInputUUIDs, place=12345), ValidationError, 12345, "BadInputUUIDs.place"
        ),
        id="query-locality-int",
    ),
    # queried by 5 bytes
    pytest.param(
        Bad(
            lambda: query(BadInputUUIDs, u7=b"short"), ValidationError, b"short", "BadInputUUIDs.u7"
        ),
        id="query-u7-bytes",
    ),
    # -- SequenceField(...) -----------------------------------------------------------------
    # misspelt batch_size (was: silently stored, the setting lost)
    pytest.param(
        Bad(
            lambda: SequenceField(batchsize=1000),
            TypeError,
            "batchsize",
            "did you mean 'batch_size'",
        ),
        id="sf-typo-batch-size",
    ),
    # misspelt sequence_name
    pytest.param(
        Bad(
            lambda: SequenceField(sequence_nam="x"),
            TypeError,
            "sequence_nam",
            "did you mean 'sequence_name'",
        ),
        id="sf-typo-sequence-name",
    ),
    # misspelt digits
    pytest.param(
        Bad(lambda: SequenceField(digit=6), TypeError, "digit", "did you mean 'digits'"),
        id="sf-typo-digits",
    ),
    # a block larger than the int64 counter
    pytest.param(
        Bad(lambda: SequenceField(batch_size=10**30), ValueError, 10**30), id="sf-batch-size-huge"
    ),
    # an empty block
    pytest.param(Bad(lambda: SequenceField(batch_size=0), ValueError, 0), id="sf-batch-size-0"),
    # the block size as text
    pytest.param(
        Bad(lambda: SequenceField(batch_size="10"), TypeError, "10"), id="sf-batch-size-str"
    ),
    # a counter collection named by an int
    pytest.param(
        Bad(lambda: SequenceField(collection_name=5), TypeError, 5), id="sf-collection-int"
    ),
    # a counter collection name with $
    pytest.param(
        Bad(lambda: SequenceField(collection_name="$bad"), ValueError, "$bad"),
        id="sf-collection-dollar",
    ),
    # an empty collection name (was: silently the default)
    pytest.param(
        Bad(lambda: SequenceField(collection_name=""), ValueError, ""), id="sf-collection-empty"
    ),
    # a reserved system collection
    pytest.param(
        Bad(
            lambda: SequenceField(collection_name="system.counters"), ValueError, "system.counters"
        ),
        id="sf-collection-system",
    ),
    # a collection name ending with a dot
    pytest.param(
        Bad(lambda: SequenceField(collection_name="counters."), ValueError, "counters."),
        id="sf-collection-dot",
    ),
    # an empty sequence name
    pytest.param(
        Bad(lambda: SequenceField(sequence_name=""), ValueError, ""), id="sf-sequence-name-empty"
    ),
    # a sequence name as an int
    pytest.param(
        Bad(lambda: SequenceField(sequence_name=5), TypeError, 5), id="sf-sequence-name-int"
    ),
    # an alias as an int
    pytest.param(Bad(lambda: SequenceField(db_alias=5), TypeError, 5), id="sf-db-alias-int"),
    # an empty scope field name
    pytest.param(Bad(lambda: SequenceField(scope=""), ValueError, ""), id="sf-scope-empty"),
    # a prefix as an int
    pytest.param(Bad(lambda: SequenceField(prefix=5), TypeError, 5), id="sf-prefix-int"),
    # zero_pad as text
    pytest.param(
        Bad(lambda: SequenceField(zero_pad="yes"), TypeError, "yes"), id="sf-zero-pad-str"
    ),
    # luhn as 1
    pytest.param(Bad(lambda: SequenceField(luhn=1), TypeError, 1), id="sf-luhn-int"),
    # allow_explicit as text
    pytest.param(
        Bad(lambda: SequenceField(allow_explicit="no"), TypeError, "no"), id="sf-allow-explicit-str"
    ),
    # 19 digits do not fit an int64
    pytest.param(Bad(lambda: SequenceField(digits=19), ValueError, 19), id="sf-digits-19"),
    # digits as text
    pytest.param(Bad(lambda: SequenceField(digits="6"), TypeError, "6"), id="sf-digits-str"),
    # a negative start
    pytest.param(Bad(lambda: SequenceField(start=-1), ValueError, -1), id="sf-start-negative"),
    # the start as text
    pytest.param(Bad(lambda: SequenceField(start="1"), TypeError, "1"), id="sf-start-str"),
    # no shards
    pytest.param(Bad(lambda: SequenceField(shards=0), ValueError, 0), id="sf-shards-0"),
    # more shards than allowed
    pytest.param(Bad(lambda: SequenceField(shards=10**7), ValueError, 10**7), id="sf-shards-huge"),
    # negative retries
    pytest.param(Bad(lambda: SequenceField(retries=-1), ValueError, -1), id="sf-retries-negative"),
    # retries whose back-off would exceed 51 s
    pytest.param(Bad(lambda: SequenceField(retries=11), ValueError, 11), id="sf-retries-11"),
    # retries as text (was: a ValueError)
    pytest.param(Bad(lambda: SequenceField(retries="3"), TypeError, "3"), id="sf-retries-str"),
    # a write concern as a dict
    pytest.param(
        Bad(lambda: SequenceField(write_concern={"w": 1}), TypeError, {"w": 1}),
        id="sf-write-concern-dict",
    ),
    # prefetch as 1
    pytest.param(Bad(lambda: SequenceField(prefetch=1), TypeError, 1), id="sf-prefetch-int"),
    # padding without a width
    pytest.param(
        Bad(lambda: SequenceField(zero_pad=True), ValueError, True), id="sf-zero-pad-no-digits"
    ),
    # MongoEngine's option as the wrong type
    pytest.param(Bad(lambda: SequenceField(primary_key=1), TypeError, 1), id="sf-primary-key-int"),
    # -- Sequence(...) ----------------------------------------------------------------------
    # an empty name
    pytest.param(
        Bad(lambda: Sequence("", database="default"), ValueError, ""), id="seq-name-empty"
    ),
    # a name as an int
    pytest.param(Bad(lambda: Sequence(5, database="default"), TypeError, 5), id="seq-name-int"),
    # a database that is neither a Database nor an alias
    pytest.param(Bad(lambda: Sequence("x", database=5), TypeError, 5), id="seq-database-int"),
    # an empty alias
    pytest.param(Bad(lambda: Sequence("x", database=""), ValueError, ""), id="seq-database-empty"),
    # a collection name with $
    pytest.param(
        Bad(lambda: Sequence("x", database="default", collection="$x"), ValueError, "$x"),
        id="seq-collection-dollar",
    ),
    # a collection named by an int
    pytest.param(
        Bad(lambda: Sequence("x", database="default", collection=5), TypeError, 5),
        id="seq-collection-int",
    ),
    # a block larger than the int64 counter
    pytest.param(
        Bad(lambda: Sequence("x", database="default", batch_size=10**30), ValueError, 10**30),
        id="seq-batch-size-huge",
    ),
    # retries whose back-off would not fit a float
    pytest.param(
        Bad(lambda: Sequence("x", database="default", retries=100), ValueError, 100),
        id="seq-retries-100",
    ),
    # an rng without choice()
    pytest.param(
        Bad(lambda: Sequence("x", database="default", rng=5), TypeError, 5), id="seq-rng-int"
    ),
    # a sleep that is not callable
    pytest.param(
        Bad(lambda: Sequence("x", database="default", sleep=5), TypeError, 5), id="seq-sleep-int"
    ),
    # a write concern as text
    pytest.param(
        Bad(
            lambda: Sequence("x", database="default", write_concern="majority"),
            TypeError,
            "majority",
        ),
        id="seq-write-concern-str",
    ),
    # misspelt batch_size
    pytest.param(
        Bad(
            lambda: Sequence("x", database="default", batchsize=10),
            TypeError,
            "batchsize",
            "did you mean 'batch_size'",
        ),
        id="seq-typo-batch-size",
    ),
    # a count as text
    pytest.param(
        Bad(lambda: Sequence("x", database="default").next_values("3"), TypeError, "3"),
        id="seq-next-values-str",
    ),
    # a negative count
    pytest.param(
        Bad(lambda: Sequence("x", database="default").next_values(-1), ValueError, -1),
        id="seq-next-values-negative",
    ),
    # an empty lease
    pytest.param(
        Bad(lambda: Sequence("x", database="default").lease(0), ValueError, 0), id="seq-lease-0"
    ),
    # a float lease
    pytest.param(
        Bad(lambda: Sequence("x", database="default").lease(1.5), TypeError, 1.5),
        id="seq-lease-float",
    ),
    # a value to move past, as text
    pytest.param(
        Bad(lambda: Sequence("x", database="default").raise_to("5"), TypeError, "5"),
        id="seq-raise-to-str",
    ),
    # an injected rng picking a shard that does not exist
    pytest.param(Bad(lease_with_bad_rng, ValueError, 99), id="seq-rng-bad-shard"),
    # -- formatting -------------------------------------------------------------------------
    # a check digit of letters
    pytest.param(Bad(lambda: luhn_check_digit("12a"), ValueError, "12a"), id="luhn-letters"),
    # a check digit of an int
    pytest.param(Bad(lambda: luhn_check_digit(123), TypeError, 123), id="luhn-int"),
    # a check digit of Arabic-Indic digits
    pytest.param(Bad(lambda: luhn_check_digit("١٢٣"), ValueError, "١٢٣"), id="luhn-arabic-indic"),
    # a prefix as an int
    pytest.param(Bad(lambda: SequenceFormat(prefix=5), TypeError, 5), id="format-prefix-int"),
    # a width of zero
    pytest.param(Bad(lambda: SequenceFormat(width=0), ValueError, 0), id="format-width-0"),
    # luhn as text
    pytest.param(Bad(lambda: SequenceFormat(luhn="y"), TypeError, "y"), id="format-luhn-str"),
    # -- backfill ---------------------------------------------------------------------------
    # not a model
    pytest.param(Bad(lambda: backfill(object), TypeError, object), id="backfill-object"),
    # a field name as an int
    pytest.param(Bad(lambda: backfill(BadInputInts, 5), TypeError, 5), id="backfill-name-int"),
    # a field that is not generated
    pytest.param(
        Bad(lambda: backfill(BadInputInts, "nope"), ValueError, "nope"), id="backfill-name-unknown"
    ),
    # an empty batch
    pytest.param(
        Bad(lambda: backfill(BadInputInts, batch_size=0), ValueError, 0), id="backfill-batch-0"
    ),
    # a batch a server's cursor cannot take (probe BS-4: refused inside pymongo, unnamed)
    pytest.param(
        Bad(lambda: backfill(BadInputInts, batch_size=2**64), ValueError, 2**64),
        id="backfill-batch-int64",
    ),
    # a batch as text
    pytest.param(
        Bad(lambda: backfill(BadInputInts, batch_size="10"), TypeError, "10"),
        id="backfill-batch-str",
    ),
    # -- counter administration -------------------------------------------------------------
    # a sequence name as an int
    pytest.param(
        Bad(lambda: set_next_value(database(), 5, 10), TypeError, 5), id="admin-set-name-int"
    ),
    # a next value as text
    pytest.param(
        Bad(lambda: set_next_value(database(), "x", "10"), TypeError, "10"),
        id="admin-set-value-str",
    ),
    # a next value below zero
    pytest.param(
        Bad(lambda: set_next_value(database(), "x", -1), ValueError, -1), id="admin-set-value--1"
    ),
    # force as text
    pytest.param(
        Bad(lambda: set_next_value(database(), "x", 10, force="yes"), TypeError, "yes"),
        id="admin-set-force-str",
    ),
    # a counter collection name with $
    pytest.param(
        Bad(lambda: show_counter(database(), "x", collection="$bad"), ValueError, "$bad"),
        id="admin-show-collection",
    ),
    # an empty counter collection name
    pytest.param(
        Bad(lambda: list_counters(database(), collection=""), ValueError, ""),
        id="admin-list-collection-empty",
    ),
    # an empty sequence name
    pytest.param(
        Bad(lambda: show_counter(database(), ""), ValueError, ""), id="admin-show-name-empty"
    ),
]


@pytest.mark.parametrize("bad", ROWS)
def test_bad_input_is_refused_with_the_value_quoted(bad: Bad, mongoengine_db: Any) -> None:
    with pytest.raises(bad.error) as info:
        bad.call()
    message = str(info.value)
    assert repr(bad.quoted) in message, message
    assert bad.also in message, message


def test_the_table_has_at_least_150_rows() -> None:
    assert len(ROWS) >= 150


def test_documented_metadata_is_still_accepted() -> None:
    # MongoEngine's docs name verbose_name and help_text; Flask-MongoEngine's forms read them.
    field = SequenceField(verbose_name="Invoice number", help_text="from the counter")
    assert (field.verbose_name, field.help_text) == ("Invoice number", "from the counter")


def test_a_uuid_of_another_version_can_still_be_queried(mongoengine_db: Any) -> None:
    # Documents stored before the field replaced another kind of id are still found; only
    # assigning one is refused (rows save-u4-v1, save-locality-v4).
    mongoengine_db[BadInputUUIDs._get_collection_name()].insert_one({"place": Binary(V4.bytes, 4)})
    assert BadInputUUIDs.objects(place=V4).count() == 1
    assert BadInputUUIDs.objects(u4=V1).count() == 0


def test_ascii_digits_and_spaces_are_still_read_as_numbers(mongoengine_db: Any) -> None:
    document = BadInputInts(code=" 123456 ")
    assert document.code == 123456
    document.save()
    assert mongoengine_db["bad_input_ints"].find_one()["code"] == 123456
    assert BadInputInts.objects(code="123456").count() == 1


def test_alphabets_written_in_ascending_order_are_characters() -> None:
    # A short lower-case word is read as a name only when its letters are not in order.
    assert StringSpace(4, "abcdef").alphabet == "abcdef"
    assert StringSpace(4, "0123456789abcdef").alphabet == "0123456789abcdef"


def test_unknown_keywords_reach_no_field_attribute() -> None:
    with pytest.raises(TypeError):
        SequenceField(batchsize=1000)
    assert "batchsize" not in vars(SequenceField())


@pytest.mark.parametrize("junk", ["--5", -1, "١٢٣٤٥٦"], ids=["dashes", "negative", "arabic-indic"])
def test_a_bulk_insert_refuses_a_junk_assigned_value_before_writing(
    mongoengine_db: Any, junk: object
) -> None:
    """MongoEngine's insert() does not validate: the write path checks assigned values."""
    import mongoengine as me

    from mongoengine_ids import SequenceField

    class JunkNumbered(me.Document):
        number = SequenceField()

    with pytest.raises(me.ValidationError) as raised:
        JunkNumbered.objects.insert([JunkNumbered(), JunkNumbered(number=junk)])
    assert repr(junk) in str(raised.value)
    assert mongoengine_db["junk_numbered"].count_documents({}) == 0


# -- values in queries and updates ------------------------------------------------------------


class Queried(Document):
    seq = SequenceField(sequence_name="queried_seq")
    luhn = SequenceField(luhn=True, sequence_name="queried_luhn")
    ri = RandomUniqueField(digits=6)
    rs = RandomUniqueField(length=8)
    u4 = UUID4Field()
    u7 = UUID7Field()
    loc = LocalityUUIDField()


@pytest.mark.parametrize("field", ["seq", "ri", "rs", "u4", "u7", "loc"])
def test_a_query_by_a_bool_is_refused(mongoengine_db: Any, field: str) -> None:
    Queried().save()
    with pytest.raises(ValidationError, match=rf"Queried\.{field}.*True|True.*Queried\.{field}"):
        list(Queried.objects(**{field: True}))


@pytest.mark.parametrize("field", ["seq", "luhn", "ri", "rs", "u4", "u7", "loc"])
@pytest.mark.parametrize("operator", ["", "__ne", "__in"])
def test_a_query_by_a_dict_is_refused_not_sent_as_operators(
    mongoengine_db: Any, field: str, operator: str
) -> None:
    # Probe AY-1: {"$ne": None} was sent as it is, and delete() removed every document
    # (MongoEngine's SequenceField and IntField refuse a dict).
    Queried().save()
    Queried().save()
    value: Any = {"$ne": None}
    with pytest.raises(InvalidQueryValueError, match=rf"Queried\.{field}.*\{{'\$ne': None\}}"):
        Queried.objects(**{field + operator: [value] if operator == "__in" else value}).delete()
    assert mongoengine_db["queried"].count_documents({}) == 2


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("seq", True),
        ("seq", -5),
        ("seq", 2**64),
        ("seq", {"x": 1}),
        ("ri", 5),
        ("ri", -5),
        ("rs", "0000000!"),
        ("rs", ""),
        ("u4", True),
        ("u4", {"x": 1}),
        ("loc", True),
    ],
)
@pytest.mark.parametrize("operator", ["set", "set_on_insert"])
def test_an_update_refuses_what_save_refuses(
    mongoengine_db: Any, field: str, value: Any, operator: str
) -> None:
    document = Queried().save()
    with pytest.raises(ValidationError):  # save() refuses it
        Queried(**{field: value}).validate()
    before = mongoengine_db["queried"].find_one({"_id": document.id})
    with pytest.raises(ValidationError, match=rf"Queried\.{field}") as caught:
        Queried.objects(id=document.id).update(**{f"{operator}__{field}": value})
    assert repr(value) in str(caught.value)
    assert mongoengine_db["queried"].find_one({"_id": document.id}) == before
    assert mongoengine_db["queried"].count_documents({}) == 1


def test_a_query_keeps_values_outside_the_space_and_operators(mongoengine_db: Any) -> None:
    # A value of the field's kind outside its space, or an operator, finds what it finds.
    stored = Queried().save()
    assert list(Queried.objects(ri=5)) == []
    assert list(Queried.objects(seq=-5)) == []
    assert [d.id for d in Queried.objects(seq__gt=-1)] == [stored.id]
    assert [d.id for d in Queried.objects(seq__exists=True)] == [stored.id]
    assert [d.id for d in Queried.objects(ri__in=[stored.ri, 5])] == [stored.id]


@pytest.mark.parametrize(
    ("field", "value"),
    [("seq", "abc"), ("luhn", -5), ("ri", "x5"), ("rs", 5), ("u4", "1"), ("u7", 7), ("loc", "no")],
)
def test_a_query_by_a_value_the_field_never_holds_is_a_value_error_too(
    mongoengine_db: Any, field: str, value: Any
) -> None:
    """Probe AD: MongoEngine's SequenceField and UUIDField raise ValueError here (a view's
    ``except ValueError`` answers 404); an ObjectId key raises ValidationError: both catch it."""
    Queried().save()
    with pytest.raises(
        ValueError, match=rf"cannot query Queried\.{field} by {re.escape(repr(value))}"
    ) as caught:
        list(Queried.objects(**{field: value}))
    assert isinstance(caught.value, ValidationError)
    assert isinstance(caught.value, InvalidQueryValueError)
    assert caught.value.field_name == field
    copied = pickle.loads(pickle.dumps(caught.value))  # as it travels between processes
    assert (type(copied), str(copied), copied.field_name) == (
        InvalidQueryValueError,
        str(caught.value),
        field,
    )


def test_a_formatted_sequence_queried_by_a_negative_number_names_the_field(
    mongoengine_db: Any,
) -> None:
    with pytest.raises(ValidationError, match=r"cannot query Queried\.luhn by -5: expected"):
        list(Queried.objects(luhn=-5))


# -- options and arguments that would write wrong things ---------------------------------------


def test_reserve_in_the_models_own_collection_is_refused(mongoengine_db: Any) -> None:
    class OwnReserved(Document):
        number = RandomUniqueField(digits=6, reserve_in="own_reserved")

    with pytest.raises(ValueError, match=r"OwnReserved\.number: reserve_in='own_reserved' is"):
        OwnReserved().save()
    with pytest.raises(ValueError, match="reserve_in='own_reserved'"):
        OwnReserved(number=123456).save()
    assert mongoengine_db["own_reserved"].count_documents({}) == 0


def test_counters_in_the_models_own_collection_are_refused(mongoengine_db: Any) -> None:
    class OwnCounted(Document):
        number = SequenceField(collection_name="own_counted")
        meta = {"collection": "own_counted"}

    with pytest.raises(ValueError, match=r"OwnCounted\.number: collection_name='own_counted'") as e:
        OwnCounted().save()
    assert "Copy the counter documents kept there (_id 'own_counted.number')" in str(e.value)
    with pytest.raises(ValueError, match="collection_name='own_counted'"):
        OwnCounted(number=5).save()
    assert mongoengine_db["own_counted"].count_documents({}) == 0


def test_scoped_counters_in_the_models_own_collection_are_named_per_scope(
    mongoengine_db: Any,
) -> None:
    # The message named the counter without scope, which a scoped field never keeps.
    class OwnScoped(Document):
        room = StringField()
        number = SequenceField(collection_name="own_scoped", scope="room")
        meta = {"collection": "own_scoped"}

    with pytest.raises(ValueError, match=r"OwnScoped\.number: collection_name=") as e:
        OwnScoped(room="A").save()
    assert "(_id own_scoped.number@<scope>, one per scope)" in str(e.value)
    assert mongoengine_db["own_scoped"].count_documents({}) == 0


def test_backfill_of_an_abstract_model_is_refused(mongoengine_db: Any) -> None:
    class AbstractNumbered(Document):
        number = SequenceField()
        meta = {"abstract": True}

    for model in (AbstractNumbered, Document):
        with pytest.raises(TypeError, match=rf"not {model.__name__} \(abstract\)"):
            backfill(model)


@pytest.mark.parametrize(
    ("count", "error"),
    [(-1, ValueError), ("3", TypeError), (1.5, TypeError), (True, TypeError)],
)
def test_generate_many_checks_its_count(count: Any, error: type[Exception]) -> None:
    with pytest.raises(error, match=re.escape(repr(count))):
        UUID7Generator().generate_many(count)


def test_more_values_than_memory_holds_are_refused_before_any_is_made(
    mongoengine_db: Any,
) -> None:
    """Probe V: next_values(2**62) moved the counter by 2**62 (half its space, for good), then
    raised an empty MemoryError; LocalityUUIDGenerator.generate_many(2**70) held its lock,
    every other save waiting, until memory ran out."""
    sequence = Sequence("huge", database=mongoengine_db)
    assert sequence.next() == 1
    locality = LocalityUUIDGenerator(clock=time_ms, mode="sequential")
    uuid7 = UUID7Generator()
    before = locality.generate()
    for ask in (sequence.next_values, locality.generate_many, uuid7.generate_many):
        with pytest.raises(ValueError, match=r"count=4,611,686,018,427,387,904: a list of"):
            ask(2**62)
    assert mongoengine_db["mongoengine.counters"].find_one({"_id": "huge"})["next"] == 1
    assert sequence.next() == 2
    assert locality.generate().sequential_counter == before.sequential_counter + 1


class IntScoped(Document):
    tenant = mongoengine.IntField()
    number = SequenceField(scope="tenant")


class TextScoped(Document):
    tenant = StringField()
    number = SequenceField(scope="tenant")


@pytest.mark.parametrize(("model", "scope"), [(IntScoped, "abc"), (TextScoped, [1])])
def test_set_next_value_refuses_a_scope_no_document_can_hold(
    mongoengine_db: Any, model: Any, scope: Any
) -> None:
    with pytest.raises(ValidationError, match=re.escape(f"scope={scope!r} is not a value of")):
        model.number.set_next_value(10, scope=scope)
    assert mongoengine_db["mongoengine.counters"].count_documents({}) == 0


class MisspeltScope(Document):
    tenant = StringField()
    number = SequenceField(scope="tenantt")


@pytest.mark.parametrize(
    "call",
    [
        lambda: MisspeltScope.number.get_next_value(scope="acme"),
        lambda: MisspeltScope.number.set_next_value(10, scope="acme"),
        lambda: MisspeltScope(tenant="acme").save(),
        lambda: MisspeltScope.objects.insert([MisspeltScope(tenant="acme")]),
        lambda: MisspeltScope.objects(tenant="acme").update_one(upsert=True, set__tenant="acme"),
        lambda: MisspeltScope.objects(tenant="acme").upsert_one(set__tenant="acme"),
        lambda: MisspeltScope.objects(tenant="acme").modify(upsert=True, set__tenant="acme"),
        lambda: MisspeltScope.objects(tenant="acme").update(set__number=3),
        lambda: backfill(MisspeltScope),
    ],
    ids=[
        "get_next_value",
        "set_next_value",
        "save",
        "insert",
        "update_one-upsert",
        "upsert_one",
        "modify-upsert",
        "update",
        "backfill",
    ],
)
def test_a_scope_that_is_no_field_is_refused_by_every_path(
    mongoengine_db: Any, call: Callable[[], Any]
) -> None:
    with pytest.raises(ValueError, match=r"scope='tenantt', which is not a field of MisspeltScope"):
        call()
    assert mongoengine_db["mongoengine.counters"].count_documents({}) == 0
    assert mongoengine_db["misspelt_scope"].count_documents({}) == 0


def test_set_next_value_takes_a_scope_as_documents_store_it(mongoengine_db: Any) -> None:
    # An IntField stores 5.5 as 5: the counter is the one documents with tenant=5.5 use.
    IntScoped.number.set_next_value(10, scope=5.5)
    assert IntScoped(tenant=5.5).save().number == 11


@pytest.mark.parametrize("option", [{"default": 5}, {"choices": [100, 200]}])
def test_default_and_choices_are_refused_on_a_generated_field(option: dict[str, Any]) -> None:
    ((name, value),) = option.items()
    with pytest.raises(ValueError, match=re.escape(f"{name}={value!r}: a generated field")):
        SequenceField(**option)


def test_connected_threadsafe_checks_its_hook() -> None:
    from mongoengine_ids.testing import connected_threadsafe

    threadsafe = connected_threadsafe(hook=5)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"hook must be a callable .*, not 5"):
        threadsafe.__enter__()


def test_stored_uuid_keys_are_made_of_uuids_only() -> None:
    from mongoengine_ids import StoredUUID, StoredUUIDText

    for kind in (StoredUUID, StoredUUIDText):
        with pytest.raises(TypeError, match=r"value must be a uuid\.UUID .*, not 5"):
            kind(5)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("make", "suggested", "not_listed"),
    [
        (lambda: SequenceField(verbose=1), "verbose_name", ["default", "choices"]),
        (lambda: SequenceField(defualt=1), None, ["default", "choices"]),
        (lambda: RandomUniqueField(digits=6, uniqe_with="a"), "unique", ["unique_with", "default"]),
    ],
)
def test_a_misspelt_option_names_only_options_the_field_takes(
    make: Callable[[], Any], suggested: str | None, not_listed: list[str]
) -> None:
    """The options a field always refuses are neither suggested nor listed as accepted, and
    MongoEngine's metadata (``verbose_name``, ``help_text``) is (review AI)."""
    with pytest.raises(TypeError) as caught:
        make()
    message = str(caught.value)
    accepted = message.split("accepted: ", 1)[1].split(", ")
    assert "verbose_name" in accepted
    assert "help_text" in accepted
    assert not set(not_listed) & set(accepted)
    if suggested is None:
        assert "did you mean" not in message
    else:
        assert f"(did you mean {suggested!r}?)" in message
