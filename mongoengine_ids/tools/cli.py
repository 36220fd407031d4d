"""The ``mongoengine-ids`` command.

Each subcommand lives in its own module, listed in :data:`_SUBCOMMAND_MODULES`. A subcommand
module exposes ``add_subcommand(subparsers) -> None``, which adds its parser with
``subparsers.add_parser(...)`` and sets ``func`` with ``set_defaults(func=run)``, where
``run(args: argparse.Namespace) -> int`` returns the exit status. For an error the user caused
(a bad argument, a missing optional dependency, an unreachable server), ``run`` raises
:class:`CommandError`.

:func:`main` is the one place where errors are printed: every failure is one line on stderr,
``mongoengine-ids: error: COMMAND: MESSAGE``, never a traceback. A :class:`CommandError` gives
its message and status; a pymongo error that escapes a subcommand is a failed operation
(status 1); any other exception is a bug, reported in one line that asks for ``--debug``,
which prints the traceback too. Passwords of the URIs on the command line (the values of
``--uri``, arguments with a scheme, ``mongodb://...``) and in ``$MONGOENGINE_IDS_URI`` are
masked in every message, whatever raised it.

Exit status: 0 on success, 1 when an operation failed (:class:`CommandError`'s default),
2 for invalid usage or input, 130 when stopped with Ctrl-C, 141 when the reader of the output
went away (a closed pipe).
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import traceback
import warnings
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final, NoReturn

from .. import __version__

if TYPE_CHECKING:
    from typing import TypeAlias

    Subparsers: TypeAlias = argparse._SubParsersAction[argparse.ArgumentParser]

PROG: Final = "mongoengine-ids"

#: The modules that add subcommands, in the order ``--help`` lists them. They are imported when
#: the parser is built, not when this module is imported, and keep their own heavy imports
#: (mongomock, a database connection) inside the functions that need them, so ``--help`` and
#: ``inspect`` stay fast.
_SUBCOMMAND_MODULES: Final = (
    "mongoengine_ids.tools.demo",
    "mongoengine_ids.tools.decode",
    "mongoengine_ids.tools.bench",
    "mongoengine_ids.tools.compare",
    "mongoengine_ids.tools.sequence_cli",
)

EXIT_FAILURE: Final = 1
EXIT_USAGE: Final = 2
#: What shells report for a command stopped with Ctrl-C: 128 + SIGINT.
EXIT_INTERRUPTED: Final = 130
#: ... and for one whose output pipe was closed (``yes | head -1``): 128 + SIGPIPE.
EXIT_BROKEN_PIPE: Final = 141
#: How many characters of a value given on the command line an error message quotes.
SHOWN_CHARACTERS: Final = 60
#: ... and of a file path.
SHOWN_PATH_CHARACTERS: Final = 200


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
    one_line = " ".join(message.split("\n"))
    print(f"{PROG}: error: {one_line}", file=sys.stderr)


def shorten(text: str, limit: int = SHOWN_CHARACTERS, *, quoted: bool = True) -> str:
    """``text`` as an error message shows it: on one line, at most ``limit`` characters of it.

    Args:
        text: a value from the command line (an id, a URI, a path), or a message.
        limit: how many characters to keep; the rest is counted, not shown.
        quoted: quote it with :func:`repr` (control characters escaped); else only newlines
            are replaced.

    Returns:
        ``'abc'``, or ``'abcd...'... (1,234 characters)`` when cut.
    """
    cut = text[:limit]
    shown = repr(cut) if quoted else " ".join(cut.splitlines())
    if len(text) > limit:
        shown += f"... ({len(text):,} characters)"
    return shown


def check_output_path(path: str, *, option: str) -> None:
    """Check, before any work, that the file ``path`` given with ``option`` can be written.

    A new file is created and removed again; an existing one must be a writable file.

    Raises:
        CommandError: (status 2) ``path`` is a directory, its directory does not exist, or it
            cannot be written there.
    """
    shown = shorten(path, SHOWN_PATH_CHARACTERS)
    if os.path.isdir(path):
        raise CommandError(f"{option} {shown} is a directory, not a file", status=EXIT_USAGE)
    directory = os.path.dirname(path) or os.curdir
    if not os.path.isdir(directory):
        raise CommandError(
            f"{option} {shown}: the directory {shorten(directory, SHOWN_PATH_CHARACTERS)} "
            "does not exist",
            status=EXIT_USAGE,
        )
    try:
        if os.path.exists(path):
            with open(path, "ab"):
                pass
        else:
            with open(path, "xb"):
                pass
            os.unlink(path)
    except OSError as error:
        raise CommandError(
            f"{option} {shown} cannot be written: {error.strerror or error}", status=EXIT_USAGE
        ) from None


def machine_mac_quietly() -> tuple[int, bool]:
    """The MAC this process's Locality UUID generators use, read without their warning.

    The generators warn (a RuntimeWarning, once per process) when the MAC is a locally
    administered one, as containers and virtual machines get; a subcommand reads it first with
    this function, so the warning is not printed in the middle of its output, and says it in
    words where it matters (``demo``) or not at all (``bench``, ``compare``: their ids are
    thrown away).

    Returns:
        The MAC, and whether it is a shared-looking one that ``$MONGOENGINE_IDS_MAC`` does not
        override (locally administered, not the random multicast one of :func:`uuid.getnode`).
    """
    from .. import constants as C
    from ..errors import InvalidIdError
    from ..locality.generator import machine_mac

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        try:
            mac = machine_mac()
        except InvalidIdError as error:  # $MONGOENGINE_IDS_MAC: the user's input
            raise CommandError(str(error), status=EXIT_USAGE) from None
    shared = (
        not os.environ.get(C.MAC_ENV_VAR)
        and bool(mac & C.MAC_LOCAL_BIT)
        and not mac & C.MAC_MULTICAST_BIT
    )
    return mac, shared


class _UsageError(Exception):
    """A usage error that argparse found, as its one line: :func:`main` prints it with the
    passwords masked (argparse quotes the arguments it refuses, a URI given in the wrong place
    among them)."""


class _ArgumentParser(argparse.ArgumentParser):
    """An argparse parser whose usage errors are one line: ``mongoengine-ids: error: ...``."""

    def error(self, message: str) -> NoReturn:
        """Raise ``message`` as one line (naming the subcommand, if any), which :func:`main`
        prints, exit status 2."""
        command = self.prog.removeprefix(PROG).strip()
        where = f"{command}: " if command else ""
        raise _UsageError(f"{where}{message} (see '{self.prog} --help')")

    def parse_args(self, args: Any = None, namespace: Any = None) -> Any:
        """As argparse's; an argument no parser took is reported by the subcommand's parser,
        which names it (``mongoengine-ids: error: demo: unrecognized arguments: extra``)."""
        parsed, extras = self.parse_known_args(args, namespace)
        if extras:
            self._subparser(getattr(parsed, "command", None)).error(
                f"unrecognized arguments: {' '.join(extras)}"
            )
        return parsed

    def _subparser(self, command: str | None) -> argparse.ArgumentParser:
        for action in self._actions:
            if isinstance(action, argparse._SubParsersAction) and command in action.choices:
                found: argparse.ArgumentParser = action.choices[command]
                return found
        return self


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
    parser.add_argument(
        "--debug",
        action="store_true",
        help="on an error, print the traceback too (for a bug report)",
    )
    _add_debug_everywhere(subparsers)
    return parser


def _add_debug_everywhere(subparsers: argparse._SubParsersAction[Any]) -> None:
    """Accept ``--debug`` after any subcommand too (``mongoengine-ids counters list --debug``)."""
    for parser in subparsers.choices.values():
        if not any("--debug" in action.option_strings for action in parser._actions):
            parser.add_argument(
                "--debug",
                action="store_true",
                default=argparse.SUPPRESS,  # absent here: keep the top-level parser's value
                help="on an error, print the traceback too (for a bug report)",
            )
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                _add_debug_everywhere(action)


def main(argv: list[str] | None = None) -> int:
    """Run the ``mongoengine-ids`` command.

    Args:
        argv: the arguments after the program name; None for ``sys.argv[1:]``.

    Returns:
        The exit status: 0 on success, 1 when an operation failed, 2 for invalid usage or
        input (``--help`` and ``--version`` return 0), 130 when stopped with Ctrl-C, 141 when
        the output pipe was closed.
    """
    argv = sys.argv[1:] if argv is None else list(argv)
    # Until the arguments are parsed (a broken installation fails before), trust the word.
    debug = "--debug" in argv
    command = ""
    try:
        parser = build_parser()
        try:
            args = parser.parse_args(argv)
        except _UsageError as error:
            print_error(_without_secrets(str(error), argv))
            return EXIT_USAGE
        except SystemExit as exit_:  # --help, --version
            return exit_.code if isinstance(exit_.code, int) else EXIT_USAGE
        debug = bool(getattr(args, "debug", False))
        command = str(getattr(args, "command", "") or "")
        run: Callable[[argparse.Namespace], int] = args.func
        status = run(args)
        # Flush here, so that a closed pipe is reported below and not at interpreter exit.
        sys.stdout.flush()
    except BrokenPipeError:
        # The reader went away (`mongoengine-ids inspect ... | head -1`): stop quietly, with the
        # status of a command that SIGPIPE stopped, as for Ctrl-C. Python flushes stdout once
        # more at exit; point it at /dev/null so that flush cannot fail.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_BROKEN_PIPE
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except Exception as error:
        if debug:
            traceback.print_exc()
        message, status = _explain(error, debug=debug)
        where = f"{command}: " if command else ""
        print_error(_without_secrets(f"{where}{message}", argv))
        return status
    return status


def _explain(error: Exception, *, debug: bool) -> tuple[str, int]:
    """The one-line message and the exit status for an exception that ended the command."""
    if isinstance(error, CommandError):
        return str(error), error.status
    pymongo_errors = sys.modules.get("pymongo.errors")
    if pymongo_errors is not None and isinstance(error, pymongo_errors.PyMongoError):
        from .uri import server_message

        return f"the database failed: {type(error).__name__}: {server_message(error)}", (
            EXIT_FAILURE
        )
    text = shorten(str(error), 200, quoted=False)
    hint = "" if debug else "; run it again with --debug for the traceback, and report it"
    return f"internal error: {type(error).__name__}: {text}{hint}", EXIT_FAILURE


def _without_secrets(message: str, argv: list[str]) -> str:
    """``message`` with the passwords of URIs in ``argv`` and the environment masked (only of
    URIs: a sequence name or an id shaped as ``a:b@c`` is shown as given)."""
    from .uri import given_uris, scrub, secrets

    hidden: list[str] = []
    for text in (*given_uris(argv), os.environ.get("MONGOENGINE_IDS_URI", "")):
        hidden += secrets(text)
    return scrub(message, sorted(set(hidden), key=len, reverse=True))


if __name__ == "__main__":
    # Run the main() of the imported module, not of this __main__ copy: subcommand modules
    # import CommandError from mongoengine_ids.tools.cli: `except CommandError` must be it.
    from mongoengine_ids.tools.cli import main as _main

    raise SystemExit(_main())
