"""Decode ids into their parts: :func:`describe` and the ``mongoengine-ids inspect`` command.

Three kinds of id are read:

* a Locality UUID (version nibble ``b``, ``shared/spec/locality-uuid.md``);
* a MongoDB ObjectId (24 hex digits: seconds, a 5-byte per-process random value, a counter);
* an RFC 4122 / RFC 9562 UUID of any version, with the embedded time of versions 1, 6 and 7.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import re
import textwrap
import uuid
from typing import TYPE_CHECKING, Final

from .. import constants as C
from ..errors import InvalidIdError
from ..locality import LocalityUUID
from .cli import EXIT_USAGE, print_error, shorten

if TYPE_CHECKING:
    from .cli import Subparsers

ACCEPTED: Final = (
    "a UUID (Locality or RFC 4122/9562) as 36 characters 'xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx' "
    "or 32 hex digits, or an ObjectId as 24 hex digits (either case)"
)

_UUID_TEXT: Final = re.compile(
    r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"
    r"|[0-9a-fA-F]{32}"
)
_OBJECTID_TEXT: Final = re.compile(r"[0-9a-fA-F]{24}")
_ID_CHARACTERS: Final = frozenset("0123456789abcdefABCDEF-")

# ObjectId (the ObjectID spec, shared/seeds/004): bytes 0-3 seconds since the Unix epoch,
# 4-8 a random value unique to a machine and process, 9-11 a counter; all big-endian.
_OBJECTID_SECONDS: Final = slice(0, 4)
_OBJECTID_RANDOM: Final = slice(4, 9)
_OBJECTID_COUNTER: Final = slice(9, 12)

# RFC 9562 fields, as shifts and masks of the 128-bit value.
_VERSION_SHIFT: Final = 76
_NIBBLE: Final = 0xF
_CLOCK_SEQ_SHIFT: Final = 48
_CLOCK_SEQ_MASK: Final = (1 << 14) - 1
_NODE_MASK: Final = (1 << 48) - 1
_V7_TIME_SHIFT: Final = 80
#: 100-nanosecond intervals from the Gregorian epoch of versions 1 and 6 (1582-10-15) to 1970.
_GREGORIAN_TO_UNIX_100NS: Final = 0x01B21DD213814000
_100NS_PER_SECOND: Final = 10_000_000

_VERSION_NAMES: Final = {
    1: "time-based (Gregorian time, clock sequence, node)",
    2: "DCE security",
    3: "name-based (MD5)",
    4: "random",
    5: "name-based (SHA-1)",
    6: "reordered time-based (Gregorian time, clock sequence, node)",
    7: "Unix epoch time-based (milliseconds, random)",
    8: "custom",
}

_EPOCH: Final = _dt.datetime(1970, 1, 1, tzinfo=_dt.timezone.utc)

_COUNTER_NOTE: Final = (
    "The id does not record the mode that made it: spread_counter is the counter of an id made "
    "in spread mode (the default), sequential_counter of one made in sequential mode. Ids made "
    "by the original Java library with a counter >= 2**31 have a lossy 7th digit (written as "
    "'f'), so their spread_counter may be wrong in its second-highest hex digit."
)
_JAVA_NOTE: Final = (
    " This id's 7th digit is 'f' and its spread_counter is >= 2**31: if the Java library made "
    "it, that digit is unknown."
)


def _iso(seconds: int, fraction: int = 0, digits: int = 0) -> str | None:
    """``seconds`` since the Unix epoch plus ``fraction`` (``digits`` decimals) as ISO 8601 UTC.

    Returns None when the moment is beyond what :class:`datetime.datetime` holds (year 9999).
    """
    try:
        moment = _EPOCH + _dt.timedelta(seconds=seconds)
    except OverflowError:
        return None
    whole = moment.replace(tzinfo=None).isoformat()  # always YYYY-MM-DDTHH:MM:SS here
    return f"{whole}.{fraction:0{digits}d}Z" if digits else f"{whole}Z"


def _iso_ms(epoch_ms: int) -> str | None:
    seconds, ms = divmod(epoch_ms, 1000)
    return _iso(seconds, ms, 3)


def _reason(text: str) -> str:
    """Say briefly why ``text`` is not an id (its shape was already rejected)."""
    if not text:
        return "it is empty"
    for position, character in enumerate(text, start=1):
        if character not in _ID_CHARACTERS:
            return f"character {position} is {character!r}, not a hex digit"
    return f"{len(text)} characters in the wrong shape"


def describe(text: str) -> dict[str, object]:
    """Decode an id given as text into its named parts.

    Every value is JSON-ready: ints as ints, times as ISO 8601 UTC strings ending in ``Z`` (or
    None beyond year 9999). Keys common to every kind: ``input`` (``text`` as given), ``kind``
    and ``canonical`` (the lower-case text form). Then, by ``kind``:

    ``"locality_uuid"`` (version nibble ``b``)
        ``version``, ``pid``, ``node`` (28 bits), ``mac_fragment`` (``__:__:_d:53:7a:50``),
        ``timestamp_ms``, ``timestamp``, ``spread_counter``, ``sequential_counter``, ``note``
        (the id does not record which of the two counter readings applies).
    ``"objectid"`` (24 hex digits)
        ``timestamp_s``, ``timestamp``, ``random`` (the 5-byte per-process value), ``counter``.
    ``"uuid"`` (any other UUID)
        ``variant`` (``"rfc9562"``, ``"ncs"``, ``"microsoft"`` or ``"future"``), ``version``
        (None unless the variant is RFC 9562) and ``version_name``; versions 1 and 6 add
        ``timestamp_100ns`` (since 1582-10-15), ``timestamp``, ``clock_seq`` and ``node``;
        version 7 adds ``timestamp_ms`` and ``timestamp``; the Nil and Max UUIDs add ``note``.

    Args:
        text: a UUID as 36 characters with hyphens or 32 hex digits, or an ObjectId as 24 hex
            digits; either case, nothing around it.

    Returns:
        The parts, in display order.

    Raises:
        InvalidIdError: ``text`` has none of the accepted shapes (a ValueError).
        TypeError: ``text`` is not a str.
    """
    if not isinstance(text, str):
        raise TypeError(f"describe() takes the id as a str, not {type(text).__name__}: {text!r}")
    if _OBJECTID_TEXT.fullmatch(text):
        return _describe_objectid(text)
    if _UUID_TEXT.fullmatch(text):
        number = int(text.replace("-", ""), 16)
        if (number >> _VERSION_SHIFT) & _NIBBLE == C.LOCALITY_VERSION:
            return _describe_locality(text, LocalityUUID(text))
        return _describe_uuid(text, number)
    # Quoted with repr (one line, control characters escaped) and cut short: the text may be
    # anything pasted on a command line.
    raise InvalidIdError(
        f"{shorten(text)} is not a valid id ({_reason(text)}): expected {ACCEPTED}"
    )


def _describe_locality(text: str, value: LocalityUUID) -> dict[str, object]:
    node = f"{value.node:07x}"
    canonical = str(value)
    note = _COUNTER_NOTE
    if canonical[6] == "f" and value.spread_counter >= 1 << (C.LOCALITY_COUNTER_BITS - 1):
        note += _JAVA_NOTE
    return {
        "input": text,
        "kind": "locality_uuid",
        "canonical": canonical,
        "version": value.version,
        "pid": value.pid,
        "node": value.node,
        "mac_fragment": f"__:__:_{node[0]}:{node[1:3]}:{node[3:5]}:{node[5:7]}",
        "timestamp_ms": value.timestamp_ms,
        "timestamp": _iso_ms(value.timestamp_ms),
        "spread_counter": value.spread_counter,
        "sequential_counter": value.sequential_counter,
        "note": note,
    }


def _describe_objectid(text: str) -> dict[str, object]:
    raw = bytes.fromhex(text)
    seconds = int.from_bytes(raw[_OBJECTID_SECONDS], "big")
    return {
        "input": text,
        "kind": "objectid",
        "canonical": text.lower(),
        "timestamp_s": seconds,
        "timestamp": _iso(seconds),
        "random": int.from_bytes(raw[_OBJECTID_RANDOM], "big"),
        "counter": int.from_bytes(raw[_OBJECTID_COUNTER], "big"),
    }


def _variant(number: int) -> str:
    top = number >> 61  # the three most significant bits of byte 8
    if top < 0b100:
        return "ncs"
    if top < 0b110:
        return "rfc9562"
    return "microsoft" if top == 0b110 else "future"


def _describe_uuid(text: str, number: int) -> dict[str, object]:
    variant = _variant(number & ((1 << 64) - 1))
    version = (number >> _VERSION_SHIFT) & _NIBBLE if variant == "rfc9562" else None
    described: dict[str, object] = {
        "input": text,
        "kind": "uuid",
        "canonical": str(uuid.UUID(int=number)),
        "variant": variant,
        "version": version,
        "version_name": _VERSION_NAMES.get(version, "unassigned") if version is not None else None,
    }
    if version in (1, 6):
        high, middle, low = number >> 96, (number >> 80) & 0xFFFF, (number >> 64) & 0xFFF
        # Version 1 writes time_low, time_mid, then the top 12 bits; version 6 the same 60
        # bits, most significant first (so that ids sort by time).
        ticks = (
            (low << 48 | middle << 32 | high) if version == 1 else (high << 28 | middle << 12 | low)
        )
        seconds, fraction = divmod(ticks - _GREGORIAN_TO_UNIX_100NS, _100NS_PER_SECOND)
        described["timestamp_100ns"] = ticks
        described["timestamp"] = _iso(seconds, fraction, 7)
        described["clock_seq"] = (number >> _CLOCK_SEQ_SHIFT) & _CLOCK_SEQ_MASK
        described["node"] = number & _NODE_MASK
    elif version == 7:
        epoch_ms = number >> _V7_TIME_SHIFT
        described["timestamp_ms"] = epoch_ms
        described["timestamp"] = _iso_ms(epoch_ms)
    elif number == 0:
        described["note"] = "the Nil UUID (RFC 9562, section 5.9)"
    elif number == (1 << 128) - 1:
        described["note"] = "the Max UUID (RFC 9562, section 5.10)"
    return described


# -- text output ------------------------------------------------------------------------------

_KIND_LABELS: Final = {
    "locality_uuid": "Locality UUID",
    "objectid": "ObjectId",
    "uuid": "UUID",
}

#: The fields shown in hex too, with their width in hex digits, by kind.
_HEX_DIGITS: Final[dict[str, dict[str, int]]] = {
    "locality_uuid": {
        "version": 1,
        "pid": C.LOCALITY_PID_BITS // 4,
        "node": C.LOCALITY_NODE_BITS // 4,
        "spread_counter": C.LOCALITY_COUNTER_BITS // 4,
        "sequential_counter": C.LOCALITY_COUNTER_BITS // 4,
    },
    "objectid": {"random": 10, "counter": 6},
    "uuid": {"clock_seq": 4, "node": 12},
}
_TEXT_WIDTH: Final = 100


def _format_value(kind: str, key: str, value: object) -> str:
    if value is None:
        return "beyond year 9999" if key == "timestamp" else "-"
    width = _HEX_DIGITS[kind].get(key)
    if width is not None and isinstance(value, int):
        return f"{value} (0x{value:0{width}x})"
    return str(value)


def format_text(described: dict[str, object]) -> str:
    """Lay out the result of :func:`describe` for a terminal: a heading, then aligned fields.

    Args:
        described: what :func:`describe` returned.

    Returns:
        The lines, joined with newlines, without a final newline.
    """
    kind = str(described["kind"])
    rows = [
        (key, _format_value(kind, key, value))
        for key, value in described.items()
        if key not in ("input", "kind", "canonical")
    ]
    if described["input"] != described["canonical"]:
        rows.insert(0, ("input", repr(described["input"])))
    label_width = max(len(key) for key, _ in rows)
    indent = " " * (2 + label_width + 2)
    lines = [f"{described['canonical']}  {_KIND_LABELS[kind]}"]
    for key, shown in rows:
        lines.append(
            textwrap.fill(
                shown,
                width=_TEXT_WIDTH,
                initial_indent=f"  {key.ljust(label_width)}  ",
                subsequent_indent=indent,
            )
        )
    return "\n".join(lines)


# -- the inspect subcommand -------------------------------------------------------------------


def add_subcommand(subparsers: Subparsers) -> None:
    """Add ``inspect ID...`` to the ``mongoengine-ids`` command.

    Args:
        subparsers: the command's subparsers.
    """
    parser = subparsers.add_parser(
        "inspect",
        help="decode Locality UUIDs, ObjectIds and UUIDs into their parts",
        description=(
            "Decode each ID: a Locality UUID (version nibble b) into process id, node, time and "
            "its two counter readings; an ObjectId into time, random value and counter; any "
            "other UUID into variant and version, with the time of versions 1, 6 and 7."
        ),
        epilog=(
            "Exit status: 0 if every ID was decoded, 2 if any could not be (the others are "
            "still decoded; each failure is reported on stderr)."
        ),
    )
    parser.add_argument(
        "ids",
        nargs="+",
        metavar="ID",
        help=(
            "a UUID as 36 characters with hyphens or 32 hex digits, or an ObjectId as 24 hex "
            "digits; either case"
        ),
    )
    parser.add_argument(
        "--json",
        action="store_true",
        help=(
            "print one JSON array, always (even for one ID), with one object per ID in the "
            "order given: ints as ints, times as ISO 8601 UTC ending in Z; an ID that could "
            'not be decoded gives {"input": ID, "error": MESSAGE}'
        ),
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Decode ``args.ids`` and print them, as text or (``args.json``) as one JSON array.

    Args:
        args: the parsed arguments: ``ids`` (list of str) and ``json`` (bool).

    Returns:
        0 if every id was decoded, 2 otherwise.
    """
    results: list[dict[str, object]] = []
    failed = False
    for text in args.ids:
        try:
            described = describe(text)
        except InvalidIdError as error:
            print_error(f"inspect: {error}")
            described = {"input": text, "error": str(error)}
            failed = True
        results.append(described)
    if args.json:
        print(json.dumps(results, indent=2))
    else:
        shown = [format_text(result) for result in results if "error" not in result]
        if shown:
            print("\n\n".join(shown))
    return EXIT_USAGE if failed else 0
