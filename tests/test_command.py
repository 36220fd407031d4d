"""The installed ``mongoengine-ids`` command, run as a subprocess: how every failure ends.

Every failure is one line on stderr, ``mongoengine-ids: error: ...``, and exit status 2 (usage)
or 1 (runtime); never a traceback, never a password. Each row of :data:`FAILURES` is one
invocation; they run concurrently (a module fixture) so that the table stays fast. Servers are
``127.0.0.1`` ports where nothing listens (refused at once), DNS is never asked: an SRV host is
"resolved" by a stub that answers NXDOMAIN (``sitecustomize.py`` on the child's path).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

PASSWORD = "s3cr3t-Pw"  # in every URI with a user; must never be printed
CLOSED = "127.0.0.1:1"  # nothing listens there: connection refused at once
FAST = "serverSelectionTimeoutMS=100"


def _command() -> list[str]:
    """The installed console script: the venv's, else the one on PATH, else ``python -m``."""
    beside = Path(sys.executable).parent / "mongoengine-ids"
    if beside.exists():
        return [str(beside)]
    found = shutil.which("mongoengine-ids")
    if found:
        return [found]
    return [sys.executable, "-m", "mongoengine_ids.tools.cli"]


COMMAND = _command()

#: Makes every DNS lookup of the child fail as an unknown name would, without asking anyone.
SITECUSTOMIZE = """\
import dns.name
import dns.resolver


def _nxdomain(qname, *args, **kwargs):
    raise dns.resolver.NXDOMAIN(qnames=[dns.name.from_text(str(qname))])


dns.resolver.resolve = _nxdomain
"""


@dataclass(frozen=True)
class Case:
    """One invocation: its arguments, the exit status, what the error line must say."""

    argv: tuple[str, ...]
    status: int
    fragments: tuple[str, ...]
    env: tuple[tuple[str, str], ...] = ()

    @property
    def id(self) -> str:
        text = " ".join(self.argv)
        return text if len(text) <= 80 else text[:77] + "..."


def case(status: int, argv: Sequence[str], *fragments: str, **env: str) -> Case:
    return Case(tuple(argv), status, fragments, tuple(env.items()))


NOT_A_URI = "is not a MongoDB URI: expected 'mongodb://"
NOT_VALID = "is not a valid MongoDB URI: "
X509_URI = f"mongodb://CN=client@{CLOSED}/shop?authMechanism=MONGODB-X509&{FAST}"
EXTERNAL = "authentication source must be $external or None for MONGODB-X509"
LONG_ID = "g" + "0" * 99_999

FAILURES: tuple[Case, ...] = (
    # -- usage: bad URIs, the same answer in every subcommand ---------------------------------
    case(2, ["counters", "--uri", "localhost:27017/shop", "list"], "counters: ", NOT_A_URI),
    case(2, ["counters", "--uri", "http://x/shop", "list"], "'http://x/shop' " + NOT_A_URI),
    case(2, ["counters", "--uri", "", "list"], "--uri '' " + NOT_A_URI),
    case(2, ["counters", "--uri", "mongodb:///shop", "list"], NOT_VALID + "Empty host"),
    case(2, ["counters", "--uri", "mongodb://", "list"], NOT_VALID),
    case(2, ["counters", "--uri", "mongodb://db/shop?bogus=1", "list"], "Unknown option"),
    case(2, ["counters", "--uri", "mongodb://db:99999/shop", "list"], "Port must be an integer"),
    case(2, ["counters", "--uri", "mongodb://db:x/shop", "list"], NOT_VALID),
    case(2, ["counters", "--uri", "mongodb://[::1/shop", "list"], NOT_VALID),
    case(2, ["counters", "--uri", "mongodb://db/sh$op", "list"], "Bad database name"),
    case(2, ["counters", "--uri", "mongodb+srv://db:27017/shop", "list"], "port number"),
    case(2, ["counters", "--uri", f"mongodb://admin:{PASSWORD}@db:99999/shop", "list"], "***@"),
    case(2, ["counters", "--uri", f"mongodb://admin:{PASSWORD}@db/sh$op", "list"], "***@"),
    case(2, ["counters", "--uri", "mongodb://admin:s3cr/3t@db/shop", "list"], "***@"),
    case(2, ["counters", "--uri", f"mongodb://admin:{PASSWORD}%zz@db/shop", "list"], "***@"),
    case(2, ["counters", "--uri", f"http://admin:{PASSWORD}@db/shop", "list"], "admin:***@db"),
    case(2, ["counters", "--uri", "mongodb://db:99999/" + "x" * 5000, "list"], "characters)"),
    case(2, ["counters", "--uri", "mongodb://db\n:1/x", "list"], "'db\\n' has spaces or control"),
    case(2, ["counters", "--uri", "mongodb://:27017/x", "list"], NOT_VALID + "a host is empty"),
    case(2, ["bench", "--quick", "--uri", "mongodb://127.0.0.1:99999/x"], "bench: ", "Port must"),
    case(2, ["compare", "--quick", "--uri", "mongodb://127.0.0.1:99999/x"], "compare: ", "Port"),
    case(2, ["demo", "--uri", "mongodb://127.0.0.1:99999/x"], "demo: --uri ", "Port must"),
    case(2, ["demo", "--uri", f"mongodb://admin:{PASSWORD}@db/?bogus=1"], "Unknown option"),
    case(2, ["bench", "--uri", f"localhost:1/?password={PASSWORD}"], NOT_A_URI),
    case(2, ["compare", "--uri", f"mongodb://admin:{PASSWORD}@:1/x"], "admin:***@:1/x", "empty"),
    case(
        2,
        ["counters", "list"],
        "$MONGOENGINE_IDS_URI 'mongodb://admin:***@db:0/shop' " + NOT_VALID,
        MONGOENGINE_IDS_URI=f"mongodb://admin:{PASSWORD}@db:0/shop",
    ),
    # -- usage: database names, paths, ids, arguments ------------------------------------------
    case(2, ["counters", "--db", "a/b", "list"], "--db 'a/b' is not a valid database name"),
    case(2, ["counters", "--db", "", "list"], "--db '' is not a valid database name"),
    case(2, ["counters", "--db", "x" * 64, "list"], "longer than 63 bytes"),
    case(2, ["counters", "--uri", f"mongodb://admin:{PASSWORD}@{CLOSED}", "list"], "no database"),
    case(2, ["compare", "--chart", "/nonexistent/dir/x.png"], "the directory '/nonexistent/dir'"),
    case(2, ["compare", "--chart", "/"], "--chart '/' is a directory"),
    case(2, ["compare", "--shards", "0"], "--shards 0: expected 1 to 10,000"),
    case(2, ["compare", "--shards", "9" * 30], "expected 1 to 10,000"),
    case(2, ["counters", "--collection", "", "list"], "--collection '' is not a valid collection"),
    case(2, ["counters", "--collection", "a$b", "list"], "it contains '$' or NUL"),
    case(2, ["inspect", "nope\x1b[31m"], "inspect: 'nope\\x1b[31m' is not a valid id"),
    case(2, ["inspect", LONG_ID], "... (100,000 characters) is not a valid id"),
    case(2, [], "required: COMMAND"),
    case(2, ["frobnicate"], "invalid choice: 'frobnicate'"),
    case(2, ["counters"], "counters: ", "required: {list,show,set}"),
    case(2, ["counters", "set", "x", "many"], "'many' is not a number from 0 to"),
    case(2, ["counters", "set", "", "5"], "set: the sequence name is empty"),
    case(2, ["bench", "--group", "nope"], "invalid choice: 'nope'"),
    case(2, ["demo", "--uri"], "expected one argument"),
    # -- usage, probe BE: an unencoded '/' or '?' in a password was said to be a bad port;
    # what pymongo's client refuses (not its parser) was an internal error; counters' options
    # after the action were unrecognized
    case(2, ["counters", "--uri", f"mongodb://admin:{PASSWORD}/x@db/shop", "list"], "encode"),
    case(2, ["counters", "--uri", f"mongodb://admin:{PASSWORD}?x@db/shop", "list"], "encode"),
    case(2, ["bench", "--quick", "--uri", f"{X509_URI}&authSource=admin"], "bench: ", EXTERNAL),
    case(2, ["compare", "--quick", "--uri", f"{X509_URI}&authSource=admin"], EXTERNAL),
    case(2, ["demo", "--uri", f"{X509_URI}&authSource=admin"], "demo: ", NOT_VALID + EXTERNAL),
    case(2, ["counters", "--uri", f"{X509_URI}&authSource=admin", "list"], EXTERNAL),
    case(2, ["counters", "list", "--uri", "localhost:27017/shop"], "counters: ", NOT_A_URI),
    case(2, ["counters", "set", "x", "5", "--db", "a/b"], "--db 'a/b' is not a valid database"),
    # -- runtime: no server, no DNS, no counter ------------------------------------------------
    case(
        1,
        ["counters", "--uri", f"mongodb://admin:{PASSWORD}@{CLOSED}/shop?{FAST}", "list"],
        f"counters: cannot use the server at 'mongodb://admin:***@{CLOSED}/shop?{FAST}': ",
        "Connection refused",
    ),
    case(
        1,
        ["demo", "--uri", f"mongodb://admin:{PASSWORD}@{CLOSED}/shop?{FAST}"],
        f"demo: cannot use the server at 'mongodb://admin:***@{CLOSED}/shop?{FAST}': ",
    ),
    case(
        1,
        ["bench", "--quick", "--uri", f"mongodb://admin:{PASSWORD}@{CLOSED}/shop?{FAST}"],
        f"bench: cannot use the server at 'mongodb://admin:***@{CLOSED}/shop?{FAST}': ",
    ),
    case(
        1,
        ["compare", "--quick", "--uri", f"mongodb://admin:{PASSWORD}@{CLOSED}/shop?{FAST}"],
        f"compare: cannot use the server at 'mongodb://admin:***@{CLOSED}/shop?{FAST}': ",
    ),
    case(
        1,
        ["counters", "--uri", f"mongodb+srv://admin:{PASSWORD}@db.nowhere.invalid/shop", "list"],
        "--uri 'mongodb+srv://admin:***@db.nowhere.invalid/shop': cannot resolve the host: ",
        STUB_DNS="1",
    ),
    case(
        1,
        ["demo", "--uri", f"mongodb+srv://admin:{PASSWORD}@db.nowhere.invalid/"],
        "cannot resolve the host",
        STUB_DNS="1",
    ),
    case(1, ["counters", "show", "order.id"], "counters: show: no counter 'order.id'"),
    # Probe BE: a shard's _id made an unbounded counter, which its field then refused.
    case(1, ["counters", "set", "card.number#1", "5"], "set: no counter 'card.number#1' in "),
)

#: Without a timeout in the URI: the command's own (3 s) bounds the wait.
DEFAULT_TIMEOUT = case(
    1, ["counters", "--uri", f"mongodb://{CLOSED}/shop", "list"], "Connection refused"
)


@dataclass(frozen=True)
class Ran:
    status: int
    out: str
    err: str


def _run(item: Case, stub_dir: Path) -> Ran:
    env = dict(os.environ)
    env.pop("MONGOENGINE_IDS_URI", None)
    env.pop("PYTHONWARNINGS", None)
    env.update(item.env)
    if env.pop("STUB_DNS", None):
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(stub_dir), env.get("PYTHONPATH")]))
    result = subprocess.run(
        [*COMMAND, *item.argv],
        capture_output=True,
        text=True,
        errors="backslashreplace",
        env=env,
        stdin=subprocess.DEVNULL,
        timeout=60,
        check=False,
    )
    return Ran(result.returncode, result.stdout, result.stderr)


@pytest.fixture(scope="module")
def ran(tmp_path_factory: pytest.TempPathFactory) -> dict[Case, Ran]:
    """Every row of :data:`FAILURES` and :data:`DEFAULT_TIMEOUT`, run concurrently."""
    stub_dir = tmp_path_factory.mktemp("stub_dns")
    (stub_dir / "sitecustomize.py").write_text(SITECUSTOMIZE)
    cases = [*FAILURES, DEFAULT_TIMEOUT]
    with ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(lambda item: _run(item, stub_dir), cases))
    return dict(zip(cases, results, strict=True))


def assert_one_error_line(result: Ran, item: Case) -> None:
    assert result.status == item.status, result.err
    assert "Traceback" not in result.err
    lines = result.err.splitlines()
    assert len(lines) == 1, result.err
    assert lines[0].startswith("mongoengine-ids: error: "), lines[0]
    for fragment in item.fragments:
        assert fragment in lines[0], lines[0]
    assert len(lines[0]) < 600
    assert PASSWORD not in result.out + result.err
    assert "3t@" not in result.err  # nor a part of it
    assert "s3cr" not in result.err


def test_the_table_runs_the_installed_command() -> None:
    # Worth knowing when it falls back: the test is then less than it says.
    assert COMMAND[0].endswith("mongoengine-ids"), COMMAND


@pytest.mark.parametrize("item", FAILURES, ids=[item.id for item in FAILURES])
def test_every_failure_is_one_line(ran: dict[Case, Ran], item: Case) -> None:
    result = ran[item]

    assert_one_error_line(result, item)
    assert result.out == ""


def test_a_server_that_does_not_answer_fails_fast_without_a_timeout_in_the_uri(
    ran: dict[Case, Ran],
) -> None:
    result = ran[DEFAULT_TIMEOUT]

    assert_one_error_line(result, DEFAULT_TIMEOUT)


def test_without_a_timeout_in_the_uri_the_client_gets_the_commands_own(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """What makes the row above fail fast (pymongo alone would wait 30 s), run in-process: the
    client is built with the command's server selection timeout."""
    import pymongo.errors

    from mongoengine_ids.tools import cli

    built: list[tuple[tuple[Any, ...], dict[str, Any]]] = []

    class Unreachable:
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            built.append((args, kwargs))
            self.admin = self

        def command(self, *args: Any, **kwargs: Any) -> Any:
            raise pymongo.errors.ServerSelectionTimeoutError(f"{CLOSED}: Connection refused")

        def close(self) -> None:
            pass

    monkeypatch.setattr(pymongo, "MongoClient", Unreachable)
    monkeypatch.delenv("MONGOENGINE_IDS_URI", raising=False)

    assert cli.main(list(DEFAULT_TIMEOUT.argv)) == 1
    # 3 s (docs/command-line.md), not pymongo's 30 s.
    assert built == [((f"mongodb://{CLOSED}/shop",), {"serverSelectionTimeoutMS": 3000})]
    out, err = capsys.readouterr()
    assert out == ""
    assert err == (
        f"mongoengine-ids: error: counters: cannot use the server at 'mongodb://{CLOSED}/shop': "
        f"{CLOSED}: Connection refused\n"
    )


# -- --debug and success ------------------------------------------------------------------------


def test_debug_shows_the_traceback(tmp_path: Path) -> None:
    result = _run(case(2, ["counters", "--uri", "http://x", "list", "--debug"]), tmp_path)

    assert result.status == 2
    lines = result.err.splitlines()
    assert lines[0] == "Traceback (most recent call last):"
    assert lines[-1].startswith("mongoengine-ids: error: counters: --uri 'http://x' is not a ")


def test_counters_help_is_help(tmp_path: Path) -> None:
    result = _run(case(0, ["counters", "--help"]), tmp_path)

    assert result.status == 0
    assert result.err == ""
    assert result.out.startswith("usage: mongoengine-ids counters")
    assert "``" not in result.out


def test_counters_works_at_once_on_its_embedded_database(tmp_path: Path) -> None:
    result = _run(case(0, ["counters", "set", "order.id", "100"]), tmp_path)

    assert result.status == 0, result.err
    assert result.err == ""
    assert "next value: 100" in result.out
    assert "embedded mongomock database" in result.out


def test_demo_prints_no_warning(tmp_path: Path) -> None:
    # Without MONGOENGINE_IDS_MAC: on a container or VM the MAC is locally administered, and
    # the demo says so in its output, not as a RuntimeWarning.
    result = _run(case(0, ["demo"], MONGOENGINE_IDS_MAC=""), tmp_path)

    assert result.status == 0, result.err
    assert result.err == ""
    assert "Warning" not in result.out


@pytest.mark.parametrize(
    "argv", [["bench", "--quick", "--group", "locality"], ["compare", "--quick"]]
)
def test_long_runs_add_nothing_when_piped(tmp_path: Path, argv: list[str]) -> None:
    result = _run(case(0, argv, MONGOENGINE_IDS_MAC=""), tmp_path)

    assert result.status == 0, result.err
    assert result.err == ""  # no progress, no warning: stderr is not a terminal
    assert result.out.startswith("machine: ")
