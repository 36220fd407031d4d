"""The benchmark: each id strategy timed against named baselines, as ratios from one run.

Run it as ``mongoengine-ids bench``, or without the command as ``python -m
mongoengine_ids.tools.bench`` (``bench/__main__.py``)::

    mongoengine-ids bench                      # every group, mongomock, a table per group
    mongoengine-ids bench --quick --json       # tiny counts, one JSON document (CI smoke run)
    mongoengine-ids bench --group locality --uri mongodb://localhost:27017

The groups are the modules named in :data:`GROUPS`; one that is not part of this installation
yet is skipped. How a group is written, and how the numbers are taken, is in
:mod:`mongoengine_ids.tools.bench._core`. The exit status is 0 whether or not the targets are met (a
noisy machine must not fail a build); read the ``met`` column, or ``met`` in the JSON.
"""

from __future__ import annotations

import argparse
import functools
import importlib
import sys
from collections.abc import Sequence
from types import ModuleType
from typing import Any, Final

from .. import uri
from ..cli import machine_mac_quietly
from ._core import (
    BenchError,
    Result,
    StatusLine,
    format_machine,
    format_table,
    machine_info,
    reporting,
    to_json,
)

#: The group modules, in the order they run; a missing one is skipped.
GROUPS: Final[tuple[str, ...]] = ("locality", "sequence", "random_unique", "writes")

_PACKAGE: Final = "mongoengine_ids.tools.bench"

#: Exit status when the benchmark cannot run (BenchError: no server, no mongomock).
FAILURE: Final = 1
#: Exit status for a usage error (argparse's).
USAGE_ERROR: Final = 2


def _load_group(name: str) -> ModuleType | None:
    """The group's module, or None if it is not part of this installation (yet)."""
    module_name = f"{_PACKAGE}.{name}"
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as error:
        if error.name != module_name:
            raise  # the group exists but something it imports is missing: say so
        return None


def add_options(parser: argparse.ArgumentParser) -> None:
    """Add the benchmark's options to ``parser`` (shared by :func:`main` and the CLI)."""
    parser.add_argument(
        "--quick",
        action="store_true",
        help="tiny iteration counts: checks that every row runs, the numbers mean nothing",
    )
    parser.add_argument(
        "--json", action="store_true", help="print one JSON document instead of tables"
    )
    parser.add_argument(
        "--uri",
        metavar="URI",
        default=None,
        help="run the database parts against this MongoDB server instead of mongomock",
    )
    parser.add_argument(
        "--group",
        metavar="NAME",
        action="append",
        dest="groups",
        default=None,
        # choices: argparse rejects an unknown name before anything runs, with the valid ones.
        choices=GROUPS,
        help=f"run only this group (repeatable); one of: {', '.join(GROUPS)}. Default: all",
    )


def add_subcommand(subparsers: Any) -> None:
    """Register ``bench`` on the CLI's ``subparsers`` (from ``parser.add_subparsers()``).

    The subcommand's ``func`` default takes the parsed namespace and returns the exit status.
    """
    parser = subparsers.add_parser(
        "bench",
        help="time the id strategies against named baselines",
        description=__doc__.splitlines()[0] if __doc__ else None,
    )
    add_options(parser)
    parser.set_defaults(func=run_from_args)


def run_from_args(args: argparse.Namespace) -> int:
    """Run the benchmark as the parsed options say; return the exit status.

    Raises:
        CommandError: checked before anything runs: ``--uri`` is not a valid MongoDB URI
            (status 2), or its server does not answer (status 1).
    """
    if args.uri is not None:
        uri.open_client(uri.parse(args.uri)).close()
    machine_mac_quietly()  # the ids are thrown away: no warning about a shared MAC
    requested: list[str] = list(args.groups) if args.groups else list(GROUPS)
    unknown = [name for name in requested if name not in GROUPS]
    if unknown:  # a Namespace built without add_options()' choices
        _print_error(
            f"unknown group {', '.join(map(repr, unknown))}; expected one of: {', '.join(GROUPS)}"
        )
        return USAGE_ERROR
    modules: list[tuple[str, ModuleType]] = []
    for name in dict.fromkeys(requested):  # a group named twice runs once
        module = _load_group(name)
        if module is not None:
            modules.append((name, module))
        elif args.groups:
            # Asked for by name: an empty result would look like success.
            _print_error(f"group {name!r} is not available in this installation")
            return USAGE_ERROR

    machine = machine_info()
    results: list[Result] = []
    if not args.json:
        print(format_machine(machine))
        print(
            "ratio: time/op of the candidate over its baseline's, both measured interleaved "
            "in the same run"
        )
    # On a terminal, stderr shows which group and round is running; piped, nothing extra.
    status = StatusLine(sys.stderr)
    try:
        for index, (name, module) in enumerate(modules, start=1):
            where = f"bench: group {index}/{len(modules)}, {name}"
            status.show(where)
            try:
                with reporting(functools.partial(_show_round, status, where)):
                    rows: list[Result] = module.run(quick=args.quick, uri=args.uri)
            except BenchError as error:
                status.clear()
                _print_error(str(error))
                return FAILURE
            status.clear()
            results.extend(rows)
            if not args.json:
                # Printed as each group finishes, so a long run shows progress.
                print(f"\n[{name}]")
                print(format_table(rows), flush=True)
    finally:
        status.clear()
    if args.json:
        print(to_json(results, machine=machine))
    else:
        print(f"\n{_summary(results)}")
    return 0


def _show_round(status: StatusLine, where: str, text: str) -> None:
    status.show(f"{where}, {text}")


def _print_error(message: str) -> None:
    # The one-line form of the mongoengine-ids command's errors.
    print(f"mongoengine-ids: error: bench: {message}", file=sys.stderr)


def _summary(results: Sequence[Result]) -> str:
    judged = [result for result in results if result.met is not None]
    missed = [result for result in judged if not result.met]
    text = f"targets: {len(judged) - len(missed)} of {len(judged)} met"
    if missed:
        text += "; missed: " + ", ".join(f"{r.name} vs {r.baseline}" for r in missed)
    return text


def main(argv: list[str] | None = None) -> int:
    """``python -m mongoengine_ids.tools.bench``: ``mongoengine-ids bench`` with ``argv``."""
    from ..cli import main as cli_main

    return cli_main(["bench", *(sys.argv[1:] if argv is None else argv)])


__all__ = [
    "FAILURE",
    "GROUPS",
    "USAGE_ERROR",
    "add_options",
    "add_subcommand",
    "main",
    "run_from_args",
]

if __name__ == "__main__":
    # Run the main() of the imported package, not of this __main__ copy, whose group modules
    # would otherwise be looked up under "__main__".
    from mongoengine_ids.tools.bench import main as _main

    sys.exit(_main())
