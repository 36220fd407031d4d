"""``mongoengine-ids counters list|show|set``: the sequence counters from the command line.

::

    mongoengine-ids counters list                                   # an embedded database
    mongoengine-ids counters --uri mongodb://localhost:27017/shop list
    mongoengine-ids counters --uri mongodb://localhost:27017/shop show invoice.number --scope acme
    mongoengine-ids counters --uri mongodb://localhost:27017/shop set order.id 100000
    mongoengine-ids counters --uri mongodb://localhost:27017/shop set order.id 10 --force

Without ``--uri`` (and without ``$MONGOENGINE_IDS_URI``) the command works on an embedded
mongomock database, empty when it starts and gone when it ends, as ``demo`` and ``compare`` do:
enough to try it. ``set`` only moves a counter up unless ``--force`` is given: processes
holding leased blocks keep handing them out, so moving it down can hand a value out twice.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from typing import Any, Final, TextIO

from ..sequence import DEFAULT_COLLECTION
from ..sequence.admin import (
    CounterInfo,
    list_counters,
    set_next_value,
    show_counter,
)
from ..sequence.field import INT64_MAX, counter_id
from . import uri
from .cli import EXIT_USAGE, CommandError, shorten

#: Environment variable read when ``--uri`` is not given.
URI_ENV_VAR: Final = "MONGOENGINE_IDS_URI"
#: The database of the embedded mongomock client, unless ``--db`` names one.
EMBEDDED_DATABASE: Final = "mongoengine_ids_counters"

#: Said after the output when no server was named.
EMBEDDED_NOTE: Final = (
    "an embedded mongomock database, empty at the start and gone at the end: "
    "give --uri for a server"
)

#: Exit statuses: success, a refused or failed operation, a usage error (argparse's).
OK: Final = 0
FAILED: Final = 1
USAGE_ERROR: Final = EXIT_USAGE

#: The lowest ``next`` the package writes: a field with ``start=0`` before its first value
#: (``next`` is the last value handed out). One below it was set by hand.
LOWEST_NEXT: Final = -1
#: The next value and headroom of a counter with a corrupted document (a CORRUPTED line).
CORRUPTED_NOTE: Final = "unknown: a counter document is not as the package writes it (below)"

#: ``open_database(args)`` -> (pymongo Database, close function).
OpenDatabase = Callable[[argparse.Namespace], "tuple[Any, Callable[[], None]]"]

_DESCRIPTION: Final = (
    "List, show or set the counters of SequenceField: one document per counter (or per range "
    "of a sharded one) in the counter collection. Without --uri (or $MONGOENGINE_IDS_URI) it "
    "works on an embedded mongomock database, empty at the start and gone at the end, so it "
    "can be tried at once; give --uri for a server."
)
_EPILOG: Final = """\
examples:
  mongoengine-ids counters list
  mongoengine-ids counters --uri mongodb://localhost:27017/shop list
  mongoengine-ids counters --uri mongodb://localhost:27017/shop show invoice.number --scope acme
  mongoengine-ids counters --uri mongodb://localhost:27017/shop set order.id 100000

'set' only moves a counter up unless --force is given: processes holding leased blocks keep
handing them out, so moving it down can hand a value out twice.
Exit status: 0 on success, 1 when the operation failed, 2 for invalid usage or input."""


_SCOPE_HELP: Final = (
    "the scope value of a scoped sequence, as text (as the counter's _id holds it: 7 names "
    "the counter of the number 7 too)"
)


def _target(args: argparse.Namespace) -> uri.MongoURI | None:
    """The server the options name (``--uri``, else ``$MONGOENGINE_IDS_URI``), or None."""
    if args.uri is not None:
        return uri.parse(args.uri)
    from_environment = os.environ.get(URI_ENV_VAR)
    if from_environment:
        return uri.parse(from_environment, source=f"${URI_ENV_VAR}")
    return None


def _open_database(args: argparse.Namespace) -> tuple[Any, Callable[[], None]]:
    """Open the database the options name: a server's, or an embedded mongomock one.

    Raises:
        CommandError: a bad URI or database name (status 2), mongomock missing, a server that
            does not answer (status 1).
    """
    if args.db is not None:
        uri.check_database_name(args.db)
    target = _target(args)
    if target is None:
        try:
            import mongomock
        except ModuleNotFoundError as error:
            if error.name != "mongomock":
                raise
            raise CommandError(
                "the embedded database needs mongomock: pip install 'mongoengine-ids[demo]' "
                "(or give --uri mongodb://HOST/DATABASE to use a server)"
            ) from None
        args.embedded_database = True  # run() says so after the output
        embedded: Any = mongomock.MongoClient()
        return embedded[args.db or EMBEDDED_DATABASE], embedded.close

    name = args.db or target.database
    if not name:
        raise CommandError(
            f"no database: give --db NAME or name one in the URI ({target.shown})",
            status=EXIT_USAGE,
        )
    client = uri.open_client(target)
    return client[name], client.close


def _open_with_pymongo(args: argparse.Namespace) -> tuple[Any, Callable[[], None]]:
    return _open_database(args)


def add_subcommand(subparsers: Any, *, open_database: OpenDatabase = _open_with_pymongo) -> None:
    """Register ``counters`` on the CLI's ``subparsers`` (from ``parser.add_subparsers()``).

    Args:
        subparsers: where to add the ``counters`` parser.
        open_database: how to reach the database from the parsed options (tests pass one
            returning a mongomock database).
    """
    parser = subparsers.add_parser(
        "counters",
        help="list, show or set sequence counters",
        description=_DESCRIPTION,
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _add_target_options(parser)
    actions = parser.add_subparsers(dest="action", metavar="{list,show,set}")
    actions.required = True

    list_help = "every counter: next value, shards, headroom"
    list_ = actions.add_parser("list", help=list_help, description=list_help.capitalize())
    _add_target_options(list_, after_action=True)

    show_help = "one counter: value, shards, headroom"
    show = actions.add_parser("show", help=show_help, description=show_help.capitalize())
    _add_target_options(show, after_action=True)
    show.add_argument("name", help='the sequence name, e.g. "order.id"')
    show.add_argument("--scope", default=None, help=_SCOPE_HELP)
    show.add_argument(
        "--digits",
        type=_ascii_int(1, 18),
        default=None,
        help="the field's digits, for the headroom of an unsharded counter (default: int64)",
    )

    set_help = "set the next value (upwards only unless --force)"
    set_ = actions.add_parser("set", help=set_help, description=set_help.capitalize())
    _add_target_options(set_, after_action=True)
    set_.add_argument("name", help='the sequence name, e.g. "order.id"')
    set_.add_argument(
        "value", type=_ascii_int(0, INT64_MAX), help="the next value a lease hands out"
    )
    set_.add_argument("--scope", default=None, help=_SCOPE_HELP)
    set_.add_argument(
        "--force",
        action="store_true",
        help="allow moving the counter down (values may then be handed out twice)",
    )

    def handler(args: argparse.Namespace) -> int:
        return run(args, open_database=open_database)

    parser.set_defaults(func=handler)


def _add_target_options(parser: argparse.ArgumentParser, *, after_action: bool = False) -> None:
    """Add ``--uri``, ``--db`` and ``--collection`` to ``parser``: the ``counters`` parser's, or
    (``after_action``) an action's, so that they are taken after the action too
    (``counters list --uri URI``), as ``--help`` lists them. An action's default is to leave
    the attribute out: a value given before the action is kept, one given after it wins."""

    def default(value: object) -> object:
        return argparse.SUPPRESS if after_action else value

    parser.add_argument(
        "--uri",
        metavar="URI",
        default=default(None),
        help=(
            "a MongoDB URI, mongodb://HOST[:PORT]/DATABASE (default: $MONGOENGINE_IDS_URI, "
            "else an embedded mongomock database)"
        ),
    )
    parser.add_argument(
        "--db", metavar="NAME", default=default(None), help="database name (default: the URI's)"
    )
    parser.add_argument(
        "--collection",
        metavar="NAME",
        default=default(DEFAULT_COLLECTION),
        help=f"counter collection (default: {DEFAULT_COLLECTION})",
    )


def _ascii_int(low: int, high: int) -> Callable[[str], int]:
    """An argparse ``type``: an int written in ASCII digits from ``low`` to ``high`` (``int()``
    would read any Unicode digit, which no id of the package holds)."""

    def parse(text: str) -> int:
        digits = text.isascii() and text.isdigit() and len(text.lstrip("0")) <= len(str(high))
        if not digits or not low <= int(text) <= high:
            raise argparse.ArgumentTypeError(
                f"{shorten(text)} is not a number from {low} to {high} (ASCII digits)"
            )
        return int(text)

    return parse


def run(
    args: argparse.Namespace,
    *,
    open_database: OpenDatabase = _open_with_pymongo,
    out: TextIO | None = None,
) -> int:
    """Carry out the parsed ``counters`` command; return the exit status.

    Raises:
        CommandError: a bad ``--collection`` name or an empty sequence name (status 2); the
            database cannot be opened
            (see :func:`_open_database`), the counter does not exist, ``set`` would move it
            down without ``--force``, or the database failed (status 1).
    """
    import pymongo.errors

    out = out or sys.stdout
    uri.check_collection_name(args.collection)
    if args.action != "list" and not args.name:
        raise CommandError(
            f"{args.action}: the sequence name is empty: expected one, e.g. order.id",
            status=EXIT_USAGE,
        )
    database, close = open_database(args)
    try:
        if args.action == "list":
            infos = list_counters(database, collection=args.collection)
            print(_table(infos, _not_named(database, args.collection)), file=out)
        elif args.action == "show":
            try:
                info = show_counter(
                    database, args.name, scope=args.scope, collection=args.collection
                )
            except LookupError:
                _refuse_not_named(database, args)
                raise
            high = None if args.digits is None else 10**args.digits - 1
            print(_details(info, high), file=out)
        else:
            created = not _exists(database, args)
            info = set_next_value(
                database,
                args.name,
                args.value,
                scope=args.scope,
                force=args.force,
                collection=args.collection,
            )
            print(_details(info, None), file=out)
            if created:
                print(f"\n{_created_note(args, sharded=info.sharded)}", file=out)
    except LookupError as error:
        # KeyError's str() is the repr of its argument: take the message itself.
        message = error.args[0] if error.args else str(error)
        if getattr(args, "embedded_database", False):
            message += f" ({EMBEDDED_NOTE})"
        raise CommandError(f"{args.action}: {message}") from error
    except (ValueError, TypeError) as error:
        raise CommandError(f"{args.action}: {error}") from error
    except pymongo.errors.PyMongoError as error:
        # An unreachable server, refused credentials: one line, no traceback.
        raise CommandError(
            f"{args.action}: {type(error).__name__}: {uri.server_message(error)}"
        ) from error
    finally:
        close()
    if getattr(args, "embedded_database", False):
        print(f"\n({EMBEDDED_NOTE})", file=out)
    return OK


def _exists(database: Any, args: argparse.Namespace) -> bool:
    """Whether the counter ``counters set`` names exists already."""
    try:
        show_counter(database, args.name, scope=args.scope, collection=args.collection)
    except LookupError:
        return False
    return True


#: Added to the note on a new unsharded counter: the command cannot tell a sharded field's
#: sequence that has made no counter yet, and that field refuses the one made (probe BE).
SHARDED_NOTE: Final = (
    "A sharded field's counters (shards=) are made by the field, with their bounds, and it "
    "refuses this one: for such a field, delete this counter by hand, save a document first, "
    "then set it"
)


#: Added to the note on a new counter whose ``--scope`` reads as a number (probe: a field with
#: an IntField scope stores ``scope: 7``; the ``_id`` is the same either way).
TEXT_SCOPE_NOTE: Final = (
    "--scope is text: the scope is stored as {scope!r} (a field whose scope holds numbers "
    "stores a number, in the same counter: the _id is the same); to store a number, use "
    "set_next_value(..., scope={scope}) in Python"
)


def _reads_as_number(text: str) -> bool:
    """Whether ``text`` is an int or a float as the field writes it in a counter's ``_id``
    (``7``, ``-2``, ``7.5``; not ``07``, which is another counter than the number 7's)."""
    if not (text.isascii() and any(character.isdigit() for character in text)):
        return False
    for kind in (int, float):
        try:
            if str(kind(text)) == text:
                return True
        except ValueError:
            pass
    return False


def _created_note(args: argparse.Namespace, *, sharded: bool = False) -> str:
    """Said after ``counters set`` made a counter: a misspelt name makes one too, which no
    field uses, while the counter meant stays where it was; and an unsharded one is not what a
    sharded field uses (``sharded``: it is a shard). (A missing ``--scope`` on a name numbered
    per scope is refused by ``set_next_value()``.)"""
    scope = "" if args.scope is None else f" with scope {args.scope!r}"
    after = "" if sharded else f". {SHARDED_NOTE}"
    if args.scope is not None and _reads_as_number(args.scope):
        after += f". {TEXT_SCOPE_NOTE.format(scope=args.scope)}"
    return (
        f"(a new counter: there was none named {args.name!r}{scope}; if that name is misspelt, "
        f"the counter meant did not move: `counters list` shows them all{after})"
    )


def _text(value: object) -> str:
    return "-" if value is None else f"{value:,}" if isinstance(value, int) else str(value)


def _below_start(info: CounterInfo) -> int | None:
    """The ``next`` of an unsharded counter below any field's start, or None."""
    value = info.next_value
    if info.problems or value is None or value - 1 >= LOWEST_NEXT:
        return None
    return value - 1


def _headroom(info: CounterInfo, high: int | None) -> int | None:
    """:meth:`CounterInfo.headroom`, counted from :data:`LOWEST_NEXT` for a counter below it
    (the field moves it up to its start)."""
    if _below_start(info) is not None:
        return (INT64_MAX if high is None else high) - LOWEST_NEXT
    return info.headroom(high)


def _notes(info: CounterInfo, not_named: dict[str, Any]) -> list[str]:
    """What is odd about ``info`` and is no corruption: a ``next`` below any start, an ``_id``
    that is not a str (``not_named``: such ``_id`` values by their text)."""
    notes = []
    below = _below_start(info)
    if below is not None:
        notes.append(
            f"'next' is {below!r}, below the start of any field (the package writes "
            f"{LOWEST_NEXT} at the lowest): set by hand; the field moves it up to its start "
            "when it next leases"
        )
    if info.scope is None and info.name in not_named:
        notes.append(_not_named_note(not_named[info.name]))
    return notes


def _not_named_note(document_id: object) -> str:
    return (
        f"_id {document_id!r} is {type(document_id).__name__}, not str: no field's counter (a "
        "counter's _id is its sequence name)"
    )


def _not_named(database: Any, collection: str) -> dict[str, Any]:
    """The ``_id`` values that are not a str in the counter collection, by their text (as
    ``counters list`` shows them)."""
    found = database.get_collection(collection).find(
        {"_id": {"$not": {"$type": "string"}}}, {"_id": 1}
    )
    return {str(document["_id"]): document["_id"] for document in found}


def _refuse_not_named(database: Any, args: argparse.Namespace) -> None:
    """For ``counters show`` of a name that has no counter: if a document's ``_id`` reads as
    that name but is not a str (``{_id: 42}``, listed as ``42``), say so.

    Raises:
        LookupError: such a document exists.
    """
    text = counter_id(args.name, scope=args.scope)
    found = _not_named(database, args.collection)
    if text in found:
        raise LookupError(
            f"no counter {text!r} in {database.name}.{args.collection}: "
            f"{_not_named_note(found[text])}; fix or delete it by hand"
        )


def _table(infos: list[CounterInfo], not_named: dict[str, Any]) -> str:
    headers = ("counter", "scope", "next value", "shards", "headroom", "problem")
    rows = [
        (
            info.name,
            "" if info.scope is None else str(info.scope),
            "-" if info.problems or _below_start(info) is not None else _text(info.next_value),
            str(len(info.shards)) if info.sharded else "",
            _text(_headroom(info, None)),
            "; ".join([*info.problems, *_notes(info, not_named)]),
        )
        for info in infos
    ]
    if not rows:
        return "no counters"
    widths = [max(len(row[i]) for row in [headers, *rows]) for i in range(len(headers))]
    lines = [
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        for row in [headers, *rows]
    ]
    lines.insert(1, "  ".join("-" * width for width in widths))
    return "\n".join(lines)


def _details(info: CounterInfo, high: int | None) -> str:
    lines = [f"counter:    {info.name}"]
    if info.scope is not None:
        lines.append(f"scope:      {info.scope}")
    lines.append(f"last value: {_text(info.last)}  (highest handed out or leased)")
    if info.sharded:
        exhausted = sum(1 for shard in info.shards if shard.headroom() == 0)
        # A shard's counter is made when the field first uses it: the others are not known.
        lines.append(f"shards:     {len(info.shards)} made so far ({exhausted} exhausted)")
    elif info.problems:
        lines.append(f"next value: {CORRUPTED_NOTE}")
    elif _below_start(info) is not None:
        lines.append("next value: the field's start")
    else:
        lines.append(f"next value: {_text(info.next_value)}")
    of = " (in the shards made so far)" if info.sharded else ""
    if info.problems:
        lines.append(f"headroom:   {CORRUPTED_NOTE}")
    else:
        lines.append(f"headroom:   {_text(_headroom(info, high))} values before exhaustion{of}")
    if info.sharded:
        for shard in info.shards:
            lines.append(
                f"  {shard.document_id}: last {_text(shard.last)}, owns "
                f"{_text(shard.low)}..{_text(shard.high)}, headroom {_text(shard.headroom())}"
            )
    for note in _notes(info, {}):
        lines.append(f"note:       {note}")
    for problem in info.problems:
        lines.append(f"CORRUPTED {problem}")
    return "\n".join(lines)


__all__ = ["add_subcommand", "run"]
