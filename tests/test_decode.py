"""describe() and format_text(): Locality UUIDs, ObjectIds and RFC 4122/9562 UUIDs."""

from __future__ import annotations

import datetime as dt
import json
import uuid

import pytest
from bson.objectid import ObjectId
from hypothesis import given
from hypothesis import strategies as st

from mongoengine_ids import InvalidIdError, LocalityUUID
from mongoengine_ids.tools.decode import describe, format_text

BLOG_ID = "20be0ffc-314a-bd53-7a50-013a65ca76d2"
BLOG_MS = 1350327498450  # 2012-10-15T18:58:18.450Z
#: 100-ns intervals from 1582-10-15 (the epoch of UUID versions 1 and 6) to 1970-01-01.
GREGORIAN_OFFSET = 0x01B21DD213814000
RFC_VARIANT = 0b10 << 62


# -- Locality UUID ------------------------------------------------------------------------------


def test_blog_example_decodes_to_every_named_part() -> None:
    described = describe(BLOG_ID)

    assert described["kind"] == "locality_uuid"
    assert described["canonical"] == BLOG_ID
    assert described["version"] == 0xB
    assert described["pid"] == 12618
    assert described["node"] == 0xD537A50
    assert described["mac_fragment"] == "__:__:_d:53:7a:50"
    assert described["timestamp_ms"] == BLOG_MS
    assert described["timestamp"] == "2012-10-15T18:58:18.450Z"
    assert described["spread_counter"] == 0xCFF0EB02
    assert described["sequential_counter"] == 0x20BE0FFC


def test_note_says_the_reading_depends_on_the_mode_and_warns_about_java() -> None:
    note = str(describe(BLOG_ID)["note"])

    assert "spread_counter" in note
    assert "sequential_counter" in note
    assert "mode" in note
    assert "Java" in note
    assert "2**31" in note
    assert "7th digit" in note


@pytest.mark.parametrize(
    ("text", "specific"),
    [
        # 7th digit 'f' and spread reading 0xCFF0EB02 >= 2**31: Java would have written the same.
        (BLOG_ID, True),
        # Spread reading 0x87654321 >= 2**31, but the 7th digit is '7': not Java's output.
        ("12345678-314a-bd53-7a50-013a65ca76d2", False),
        # 7th digit 'f' but spread reading 0x7f... < 2**31: Java's bug cannot have struck.
        ("000000f7-314a-bd53-7a50-013a65ca76d2", False),
    ],
)
def test_java_warning_names_this_id_only_when_its_digit_may_be_lossy(
    text: str, specific: bool
) -> None:
    assert ("This id's 7th digit is 'f'" in str(describe(text)["note"])) is specific


@pytest.mark.parametrize(
    ("text", "fields"),
    [
        # The spec's vectors (pid 12618, MAC 12:34:5d:53:7a:50, time 1350327498450 ms).
        # spread, counter 0x87654321: digits reversed, not bytes.
        (
            "12345678-314a-bd53-7a50-013a65ca76d2",
            {"spread_counter": 0x87654321, "sequential_counter": 0x12345678},
        ),
        # spread, counter 0 (reached by wrapping).
        (
            "00000000-314a-bd53-7a50-013a65ca76d2",
            {"spread_counter": 0, "sequential_counter": 0},
        ),
        # sequential, counter 0xCFF0EB02: written big-endian.
        (
            "cff0eb02-314a-bd53-7a50-013a65ca76d2",
            {"sequential_counter": 0xCFF0EB02, "spread_counter": 0x20BE0FFC},
        ),
        # MAC aa:bb:cc:dd:ee:ff: the node is its low 28 bits.
        (
            "20be0ffc-314a-bcdd-eeff-013a65ca76d2",
            {"node": 0xCDDEEFF, "mac_fragment": "__:__:_c:dd:ee:ff"},
        ),
        # pid 65535.
        ("20be0ffc-ffff-bd53-7a50-013a65ca76d2", {"pid": 65535}),
        # The first sequential id at 2012-10-15T18:58:18.450Z: window hash + 1.
        ("01b85440-314a-bd53-7a50-013a65ca76d2", {"sequential_counter": 28_857_407 + 1}),
    ],
)
def test_spec_vectors(text: str, fields: dict[str, object]) -> None:
    described = describe(text)

    assert {key: described[key] for key in fields} == fields
    assert described["timestamp_ms"] == BLOG_MS


@given(
    counter=st.integers(0, 2**32 - 1),
    pid=st.integers(0, 2**16 - 1),
    node=st.integers(0, 2**28 - 1),
    timestamp_ms=st.integers(0, 253_402_300_799_999),  # up to 9999-12-31T23:59:59.999Z
    mode=st.sampled_from(["spread", "sequential"]),
)
def test_fields_read_back_as_written(
    counter: int, pid: int, node: int, timestamp_ms: int, mode: str
) -> None:
    value = LocalityUUID.from_fields(
        counter=counter,
        pid=pid,
        node=node,
        timestamp_ms=timestamp_ms,
        mode="spread" if mode == "spread" else "sequential",
    )

    described = describe(str(value))

    assert described[f"{mode}_counter"] == counter
    assert (described["pid"], described["node"], described["timestamp_ms"]) == (
        pid,
        node,
        timestamp_ms,
    )
    moment = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc) + dt.timedelta(
        milliseconds=timestamp_ms
    )
    assert dt.datetime.fromisoformat(str(described["timestamp"])) == moment


@pytest.mark.parametrize(
    "text",
    [
        BLOG_ID.upper(),  # upper case
        BLOG_ID.replace("-", ""),  # 32 hex digits
        BLOG_ID.replace("-", "").upper(),  # both
        "20BE0ffc-314A-bd53-7a50-013A65ca76d2",  # mixed case
    ],
)
def test_every_accepted_shape_gives_the_same_parts(text: str) -> None:
    described = describe(text)

    assert described["input"] == text
    assert {k: v for k, v in described.items() if k != "input"} == {
        k: v for k, v in describe(BLOG_ID).items() if k != "input"
    }


def test_time_beyond_year_9999_is_none_not_a_crash() -> None:
    described = describe("ffffffff-ffff-bfff-ffff-ffffffffffff")  # 48-bit time, all ones

    assert described["timestamp_ms"] == 2**48 - 1
    assert described["timestamp"] is None


# -- ObjectId -----------------------------------------------------------------------------------


def _object_id(seconds: int, random: bytes, counter: int) -> ObjectId:
    return ObjectId(seconds.to_bytes(4, "big") + random + counter.to_bytes(3, "big"))


def test_objectid_built_from_known_fields() -> None:
    oid = _object_id(BLOG_MS // 1000, bytes.fromhex("0123456789"), 0xABCDEF)

    described = describe(str(oid))

    assert described["kind"] == "objectid"
    assert described["canonical"] == str(oid)
    assert described["timestamp_s"] == BLOG_MS // 1000
    assert described["timestamp"] == "2012-10-15T18:58:18Z"
    assert described["random"] == 0x0123456789
    assert described["counter"] == 0xABCDEF
    assert dt.datetime.fromisoformat(str(described["timestamp"])) == oid.generation_time


@pytest.mark.parametrize(
    ("seconds", "expected"),
    [
        # The ObjectID spec's test plan: the timestamp is an unsigned 32-bit number.
        (0x00000000, "1970-01-01T00:00:00Z"),
        (0x7FFFFFFF, "2038-01-19T03:14:07Z"),
        (0x80000000, "2038-01-19T03:14:08Z"),
        (0xFFFFFFFF, "2106-02-07T06:28:15Z"),
    ],
)
def test_objectid_timestamp_is_unsigned(seconds: int, expected: str) -> None:
    described = describe(str(_object_id(seconds, bytes(5), 0xFFFFFF)))

    assert described["timestamp"] == expected
    assert described["counter"] == 0xFFFFFF


def test_objectid_accepts_upper_case() -> None:
    oid = _object_id(1, bytes.fromhex("a1b2c3d4e5"), 7)

    described = describe(str(oid).upper())

    assert described["canonical"] == str(oid)
    assert described["random"] == 0xA1B2C3D4E5


# -- RFC 4122 / 9562 UUIDs ----------------------------------------------------------------------

#: 2012-10-15T18:58:18.4501234Z, in 100-ns intervals since 1582-10-15.
TICKS = (BLOG_MS * 10_000 + 1234) + GREGORIAN_OFFSET
CLOCK_SEQ = 0x1234
NODE = 0x123456789ABC


def test_v1_built_from_a_known_time() -> None:
    value = uuid.UUID(
        fields=(
            TICKS & 0xFFFFFFFF,
            (TICKS >> 32) & 0xFFFF,
            (TICKS >> 48) | 0x1000,
            0x80 | CLOCK_SEQ >> 8,
            CLOCK_SEQ & 0xFF,
            NODE,
        )
    )
    assert value.version == 1  # the construction above is right

    described = describe(str(value))

    assert described["kind"] == "uuid"
    assert (described["variant"], described["version"]) == ("rfc9562", 1)
    assert described["timestamp_100ns"] == TICKS == value.time
    assert described["timestamp"] == "2012-10-15T18:58:18.4501234Z"
    assert described["clock_seq"] == CLOCK_SEQ == value.clock_seq
    assert described["node"] == NODE == value.node


def test_v6_built_from_the_same_time_reads_the_same() -> None:
    number = (
        (TICKS >> 28) << 96
        | ((TICKS >> 12) & 0xFFFF) << 80
        | 6 << 76
        | (TICKS & 0xFFF) << 64
        | RFC_VARIANT
        | CLOCK_SEQ << 48
        | NODE
    )

    described = describe(str(uuid.UUID(int=number)))

    assert described["version"] == 6
    assert described["timestamp_100ns"] == TICKS
    assert described["timestamp"] == "2012-10-15T18:58:18.4501234Z"
    assert (described["clock_seq"], described["node"]) == (CLOCK_SEQ, NODE)


def test_v7_built_by_hand_from_a_known_millisecond() -> None:
    number = BLOG_MS << 80 | 7 << 76 | 0xABC << 64 | RFC_VARIANT | 0x0123456789ABCDEF >> 2

    described = describe(f"{number:032x}")

    assert (described["variant"], described["version"]) == ("rfc9562", 7)
    assert described["timestamp_ms"] == BLOG_MS
    assert described["timestamp"] == "2012-10-15T18:58:18.450Z"
    assert "clock_seq" not in described


@pytest.mark.parametrize(
    "text",
    [
        # RFC 9562 Appendix A: v1, v6 and v7 examples, all "2022-02-22 2:22:22 PM GMT-05:00".
        "C232AB00-9414-11EC-B3C8-9F6BDECED846",
        "1EC9414C-232A-6B00-B3C8-9F6BDECED846",
        "017F22E2-79B0-7CC3-98C4-DC0C0C07398F",
    ],
)
def test_rfc9562_examples(text: str) -> None:
    assert str(describe(text)["timestamp"]).startswith("2022-02-22T19:22:22.000")


@pytest.mark.parametrize(
    ("version", "name"),
    [
        (3, "name-based (MD5)"),
        (4, "random"),
        (5, "name-based (SHA-1)"),
        (8, "custom"),
        (0, "unassigned"),  # not defined by RFC 9562
    ],
)
def test_versions_without_time_are_named_only(version: int, name: str) -> None:
    number = 0x0123456789ABCDEF << 64 | RFC_VARIANT | 42
    number = number & ~(0xF << 76) | version << 76

    described = describe(str(uuid.UUID(int=number)))

    assert (described["version"], described["version_name"]) == (version, name)
    assert "timestamp" not in described


@pytest.mark.parametrize(
    ("byte8", "variant"),
    [
        (0x00, "ncs"),  # 0xxx
        (0x7F, "ncs"),
        (0x80, "rfc9562"),  # 10xx
        (0xBF, "rfc9562"),
        (0xC0, "microsoft"),  # 110x
        (0xDF, "microsoft"),
        (0xE0, "future"),  # 111x
    ],
)
def test_variant_bits(byte8: int, variant: str) -> None:
    described = describe(f"12345678-9abc-4def-{byte8:02x}00-0123456789ab")

    assert described["variant"] == variant
    assert described["version"] == (4 if variant == "rfc9562" else None)


def test_nil_and_max_uuids_are_named() -> None:
    nil = describe("00000000-0000-0000-0000-000000000000")
    top = describe("ffffffff-ffff-ffff-ffff-ffffffffffff")

    assert (nil["variant"], nil["version"]) == ("ncs", None)
    assert "Nil UUID" in str(nil["note"])
    assert (top["variant"], top["version"]) == ("future", None)
    assert "Max UUID" in str(top["note"])


# -- bad input and the result's shape -----------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("", "it is empty"),  # nothing at all
        (BLOG_ID[:-1] + "g", "character 36 is 'g'"),  # a letter beyond f (Ruby accepted it)
        (" " + BLOG_ID, "character 1 is ' '"),  # surrounding space is not stripped
        (BLOG_ID + "\n", "character 37 is '\\n'"),  # nor a newline (Ruby accepted it)
        (BLOG_ID.replace("-", "_"), "character 9 is '_'"),  # another separator
        ("{" + BLOG_ID + "}", "character 1 is '{'"),  # braces, which uuid.UUID would accept
        ("20be0ffc314a-bd53-7a50-013a65ca76d2", "35 characters in the wrong shape"),
        ("20be-0ffc-314a-bd53-7a50013a65ca76d2", "36 characters in the wrong shape"),
        ("507f1f77bcf86cd79943901", "23 characters in the wrong shape"),  # an ObjectId, short
    ],
)
def test_bad_text_raises_invalid_id_error_saying_why(text: str, reason: str) -> None:
    with pytest.raises(InvalidIdError) as caught:
        describe(text)

    message = str(caught.value)
    assert isinstance(caught.value, ValueError)
    assert message.startswith(f"{text!r} is not a valid id")
    assert reason in message
    assert "32 hex digits" in message
    assert "24 hex digits" in message


@pytest.mark.parametrize("value", [b"20be0ffc314abd537a50013a65ca76d2", None, 42])
def test_a_value_that_is_not_text_is_a_type_error(value: object) -> None:
    with pytest.raises(TypeError, match="str"):
        describe(value)  # type: ignore[arg-type]


INT_FIELDS = frozenset(
    {
        "pid",
        "node",
        "timestamp_ms",
        "timestamp_s",
        "timestamp_100ns",
        "spread_counter",
        "sequential_counter",
        "counter",
        "random",
        "clock_seq",
    }
)


@pytest.mark.parametrize(
    "text",
    [
        BLOG_ID,
        "ffffffff-ffff-bfff-ffff-ffffffffffff",
        "507f1f77bcf86cd799439011",
        "C232AB00-9414-11EC-B3C8-9F6BDECED846",
        "017F22E2-79B0-7CC3-98C4-DC0C0C07398F",
        "00000000-0000-0000-0000-000000000000",
    ],
)
def test_result_is_json_ready(text: str) -> None:
    described = describe(text)

    assert json.loads(json.dumps(described)) == described
    for key, value in described.items():
        if key in INT_FIELDS:
            assert isinstance(value, int), key
        elif key == "version":
            assert value is None or isinstance(value, int)
        else:
            assert value is None or isinstance(value, str), key
        if key == "timestamp" and value is not None:
            assert str(value).endswith("Z")
            assert dt.datetime.fromisoformat(str(value)).utcoffset() == dt.timedelta(0)


# -- format_text --------------------------------------------------------------------------------


def test_format_text_aligns_values_and_shows_hex() -> None:
    lines = format_text(describe(BLOG_ID)).splitlines()

    assert lines[0] == f"{BLOG_ID}  Locality UUID"
    rows = {line.split()[0]: line for line in lines[1:] if not line.startswith(" " * 4)}
    assert rows["node"].endswith("223574608 (0xd537a50)")
    assert rows["spread_counter"].endswith("3488672514 (0xcff0eb02)")
    assert rows["sequential_counter"].endswith("549326844 (0x20be0ffc)")
    assert rows["timestamp"].endswith("2012-10-15T18:58:18.450Z")
    value_columns = {
        line.index(line.split()[1], len(line.split()[0]) + 2) for line in rows.values()
    }
    assert len(value_columns) == 1


def test_format_text_shows_the_input_only_when_not_canonical() -> None:
    upper = format_text(describe(BLOG_ID.upper())).splitlines()

    assert "input" not in format_text(describe(BLOG_ID))
    assert upper[0] == f"{BLOG_ID}  Locality UUID"
    assert upper[1].split() == ["input", repr(BLOG_ID.upper())]


def test_format_text_says_when_the_time_is_out_of_range() -> None:
    text = format_text(describe("ffffffff-ffff-bfff-ffff-ffffffffffff"))

    assert "beyond year 9999" in text
