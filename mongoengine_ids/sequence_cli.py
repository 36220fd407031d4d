"""``mongoengine-ids counters list|show|set``: the sequence counters from the command line.

::

    mongoengine-ids counters --uri mongodb://localhost:27017/shop list
    mongoengine-ids counters --uri mongodb://localhost:27017/shop show invoice.number --scope acme
    mongoengine-ids counters --uri mongodb://localhost:27017/shop set order.id 100000
    mongoengine-ids counters --uri mongodb://localhost:27017/shop set order.id 10 --force

``set`` only moves a counter up unless ``--force`` is given: processes holding leased blocks
keep handing them out, so moving it down can hand a value out twice.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from typing import Any, Final, TextIO

import pymongo.errors

from .sequence import DEFAULT_COLLECTION
from .sequence_admin import CounterInfo, list_counters, set_next_value, show_counter

#: Environment variable read when ``--uri`` is not given.
URI_ENV_VAR: Final = "MONGOENGINE_IDS_URI"
DEFAULT_URI: Final = "mongodb://localhost:27017"

#: Exit statuses: success, a refused or failed operation, a usage error (argparse's).
OK: Final = 0
FAILED: Final = 1
USAGE_ERROR: Final = 2

#: ``open_database(args)`` -> (pymongo Database, close function).
OpenDatabase = Callable[[argparse.Namespace], "tuple[Any, Callable[[], None]]"]


def _open_with_pymongo(args: argparse.Namespace) -> tuple[Any, Callable[[], None]]:
    import pymongo
    from pymongo.uri_parser import parse_uri

    uri: str = args.uri or os.environ.get(URI_ENV_VAR) or DEFAULT_URI
    name = args.db or parse_uri(uri).get("database")
    if not name:
        raise ValueError(f"no database: give --db NAME or put it in the URI ({uri!r})")
    client: pymongo.MongoClient[Any] = pymongo.MongoClient(uri, serverSelectionTimeoutMS=5000)
    return client[name], client.close


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
        description=(__doc__ or "").splitlines()[0],
    )
    parser.add_argument(
        "--uri",
        default=None,
        help=f"MongoDB URI (default: ${URI_ENV_VAR}, else {DEFAULT_URI})",
    )
    parser.add_argument("--db", default=None, help="database name (default: the URI's)")
    parser.add_argument(
        "--collection",
        default=DEFAULT_COLLECTION,
        help=f"counter collection ({DEFAULT_COLLECTION})",
    )
    actions = parser.add_subparsers(dest="action", metavar="{list,show,set}")
    actions.required = True

    actions.add_parser("list", help="every counter: next value, shards, headroom")

    show = actions.add_parser("show", help="one counter: value, shards, headroom")
    show.add_argument("name", help='the sequence name, e.g. "order.id"')
    show.add_argument("--scope", default=None, help="the scope value of a scoped sequence")
    show.add_argument(
        "--digits",
        type=int,
        default=None,
        help="the field's digits, for the headroom of an unsharded counter (default: int64)",
    )

    set_ = actions.add_parser("set", help="set the next value (upwards only unless --force)")
    set_.add_argument("name", help='the sequence name, e.g. "order.id"')
    set_.add_argument("value", type=int, help="the next value a lease hands out")
    set_.add_argument("--scope", default=None, help="the scope value of a scoped sequence")
    set_.add_argument(
        "--force",
        action="store_true",
        help="allow moving the counter down (values may then be handed out twice)",
    )

    def handler(args: argparse.Namespace) -> int:
        return run(args, open_database=open_database)

    parser.set_defaults(func=handler)


def run(
    args: argparse.Namespace,
    *,
    open_database: OpenDatabase = _open_with_pymongo,
    out: TextIO | None = None,
    err: TextIO | None = None,
) -> int:
    """Carry out the parsed ``counters`` command; return the exit status."""
    out = out or sys.stdout
    err = err or sys.stderr
    try:
        database, close = open_database(args)
    except ValueError as error:
        print(f"mongoengine-ids counters: {error}", file=err)
        return USAGE_ERROR
    try:
        if args.action == "list":
            print(_table(list_counters(database, collection=args.collection)), file=out)
        elif args.action == "show":
            info = show_counter(database, args.name, scope=args.scope, collection=args.collection)
            high = None if args.digits is None else 10**args.digits - 1
            print(_details(info, high), file=out)
        else:
            info = set_next_value(
                database,
                args.name,
                args.value,
                scope=args.scope,
                force=args.force,
                collection=args.collection,
            )
            print(_details(info, None), file=out)
    except (LookupError, ValueError, TypeError) as error:
        print(f"mongoengine-ids counters {args.action}: {error}", file=err)
        return FAILED
    except pymongo.errors.PyMongoError as error:
        # An unreachable server, refused credentials: one line, no traceback.
        print(f"mongoengine-ids counters {args.action}: {type(error).__name__}: {error}", file=err)
        return FAILED
    finally:
        close()
    return OK


def _text(value: object) -> str:
    return "-" if value is None else f"{value:,}" if isinstance(value, int) else str(value)


def _table(infos: list[CounterInfo]) -> str:
    headers = ("counter", "scope", "next value", "shards", "headroom", "problem")
    rows = [
        (
            info.name,
            "" if info.scope is None else str(info.scope),
            _text(info.next_value),
            str(len(info.shards)) if info.sharded else "",
            _text(info.headroom()),
            "; ".join(info.problems),
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
        lines.append(f"shards:     {len(info.shards)} ({exhausted} exhausted)")
    else:
        lines.append(f"next value: {_text(info.next_value)}")
    lines.append(f"headroom:   {_text(info.headroom(high))} values before exhaustion")
    if info.sharded:
        for shard in info.shards:
            lines.append(
                f"  {shard.document_id}: next {_text(shard.next)}, owns {_text(shard.low)}.."
                f"{_text(shard.high)}, headroom {_text(shard.headroom())}"
            )
    for problem in info.problems:
        lines.append(f"CORRUPTED {problem}")
    return "\n".join(lines)


__all__ = ["add_subcommand", "run"]
