"""The ``mongoengine-ids`` command.

Each subcommand lives in its own module, listed in :data:`_SUBCOMMAND_MODULES`. A subcommand
module exposes ``add_subcommand(subparsers) -> None``, which adds its parser with
``subparsers.add_parser(...)`` and sets ``func`` with ``set_defaults(func=run)``, where
``run(args: argparse.Namespace) -> int`` returns the exit status. For an error the user caused
(a bad argument, a missing optional dependency, an unreachable server), ``run`` raises
:class:`CommandError`: the command prints it as one line, without a traceback.

Exit status: 0 on success, 1 when an operation failed (:class:`CommandError`'s default),
2 for invalid usage or input.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Final, NoReturn

from . import __version__

if TYPE_CHECKING:
    from typing import TypeAlias

    Subparsers: TypeAlias = argparse._SubParsersAction[argparse.ArgumentParser]

PROG: Final = "mongoengine-ids"

#: The modules that add subcommands, in the order ``--help`` lists them. They are imported when
#: the parser is built, not when this module is imported, and keep their own heavy imports
#: (mongomock, a database connection) inside the functions that need them, so ``--help`` and
#: ``inspect`` stay fast.
_SUBCOMMAND_MODULES: Final = (
    "mongoengine_ids.demo",
    "mongoengine_ids.decode",
    "mongoengine_ids.bench",
    "mongoengine_ids.compare",
    "mongoengine_ids.sequence_cli",
)

EXIT_FAILURE: Final = 1
EXIT_USAGE: Final = 2


class CommandError(Exception):
    """An error the user caused; printed as one line ``mongoengine-ids: error: ...``.

    Args:
        message: what went wrong, quoting the bad value with ``!r`` and saying what is accepted.
        status: the exit status (1: an operation failed; 2: invalid usage or input).
    """

    def __init__(self, message: str, *, status: int = EXIT_FAILURE) -> None:
        super().__init__(message)
        self.status = status


def print_error(message: str) -> None:
    """Print ``message`` to stderr as the command's one-line error."""
    print(f"{PROG}: error: {message}", file=sys.stderr)


class _ArgumentParser(argparse.ArgumentParser):
    """An argparse parser whose usage errors are one line: ``mongoengine-ids: error: ...``."""

    def error(self, message: str) -> NoReturn:
        """Print ``message`` as one line (naming the subcommand, if any) and exit with 2."""
        command = self.prog.removeprefix(PROG).strip()
        where = f"{command}: " if command else ""
        self.exit(EXIT_USAGE, f"{PROG}: error: {where}{message} (see '{self.prog} --help')\n")


def build_parser() -> argparse.ArgumentParser:
    """Build the parser, with a subcommand from each module of ``_SUBCOMMAND_MODULES``.

    Returns:
        The ``mongoengine-ids`` argument parser.

    Raises:
        ImportError: a subcommand module (other than one still being written) cannot be
            imported.
    """
    parser = _ArgumentParser(
        prog=PROG,
        description="Inspect ids and try the id fields of mongoengine-ids.",
        epilog=(
            "Exit status: 0 on success, 1 when an operation failed, 2 for invalid usage or "
            "input. Run 'mongoengine-ids COMMAND --help' for the options of a command."
        ),
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    subparsers = parser.add_subparsers(
        title="commands", dest="command", metavar="COMMAND", required=True
    )
    for name in _SUBCOMMAND_MODULES:
        importlib.import_module(name).add_subcommand(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the ``mongoengine-ids`` command.

    Args:
        argv: the arguments after the program name; None for ``sys.argv[1:]``.

    Returns:
        The exit status: 0 on success, 1 when an operation failed, 2 for invalid usage or
        input (``--help`` and ``--version`` return 0).
    """
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exit_:  # --help, --version, or a usage error already printed
        return exit_.code if isinstance(exit_.code, int) else EXIT_USAGE
    run: Callable[[argparse.Namespace], int] = args.func
    try:
        status = run(args)
        # Flush here, so that a closed pipe is reported below and not at interpreter exit.
        sys.stdout.flush()
    except CommandError as error:
        print_error(str(error))
        return error.status
    except BrokenPipeError:
        # The reader went away (`mongoengine-ids inspect ... | head -1`): stop quietly. Python
        # flushes stdout once more at exit; point it at /dev/null so that flush cannot fail.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_FAILURE
    except KeyboardInterrupt:
        return 130  # 128 + SIGINT, what shells report for a command stopped with Ctrl-C
    return status


if __name__ == "__main__":
    # Run the main() of the imported module, not of this __main__ copy: subcommand modules
    # import CommandError from mongoengine_ids.cli, and `except CommandError` must be that class.
    from mongoengine_ids.cli import main as _main

    raise SystemExit(_main())
