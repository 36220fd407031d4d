"""The ``mongoengine-ids`` command: parsing, errors, ``inspect`` and ``demo``."""

from __future__ import annotations

import argparse
import itertools
import json
import os
import re
import subprocess
import sys
import types
from typing import Any

import mongoengine
import pytest
from _support import TEST_URI, real_server, refused_client_connect
from mongoengine.connection import ConnectionFailure

import mongoengine_ids
from mongoengine_ids.constants import LOCALITY_COUNTER_MASK, SPREAD_STEP
from mongoengine_ids.testing import Connect
from mongoengine_ids.tools import cli, demo
from mongoengine_ids.tools.decode import describe

BLOG_ID = "20be0ffc-314a-bd53-7a50-013a65ca76d2"
LOCALITY_ID = re.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-b[0-9a-f]{3}-[0-9a-f]{4}-[0-9a-f]{12}\b")


def run_module(*args: str) -> subprocess.CompletedProcess[str]:
    """Run ``python -m mongoengine_ids.tools.cli ARGS`` with this interpreter (no script)."""
    return subprocess.run(
        [sys.executable, "-m", "mongoengine_ids.tools.cli", *args],
        capture_output=True,
        text=True,
        check=False,
    )


def assert_one_error_line(stderr: str, *fragments: str) -> None:
    """``stderr`` is exactly one ``mongoengine-ids: error: ...`` line containing ``fragments``."""
    lines = stderr.splitlines()
    assert len(lines) == 1, stderr
    assert lines[0].startswith("mongoengine-ids: error: ")
    for fragment in fragments:
        assert fragment in lines[0]


# -- the command --------------------------------------------------------------------------------


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["--version"]) == 0

    assert capsys.readouterr().out == f"mongoengine-ids {mongoengine_ids.__version__}\n"


def test_help_lists_the_subcommands(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["--help"]) == 0

    out = capsys.readouterr().out
    assert out.startswith("usage: mongoengine-ids ")
    assert re.search(r"^\s+inspect\s+decode", out, re.MULTILINE)
    assert re.search(r"^\s+demo\s+save", out, re.MULTILINE)


@pytest.mark.parametrize(
    ("argv", "fragments"),
    [
        ([], ["required: COMMAND", "'mongoengine-ids --help'"]),  # no subcommand
        (["frobnicate"], ["invalid choice: 'frobnicate'"]),  # an unknown subcommand
        (["--colour", "inspect", BLOG_ID], ["unrecognized arguments: --colour"]),  # unknown option
        (["inspect"], ["inspect: ", "required: ID", "'mongoengine-ids inspect --help'"]),
        (["inspect", "--yaml", BLOG_ID], ["inspect: unrecognized arguments: --yaml"]),
        (
            ["demo", "extra"],
            ["demo: unrecognized arguments: extra", "'mongoengine-ids demo --help'"],
        ),
        (["demo", "--uri"], ["demo: ", "--uri", "expected one argument"]),
    ],
)
def test_usage_errors_are_one_line_and_exit_2(
    capsys: pytest.CaptureFixture[str], argv: list[str], fragments: list[str]
) -> None:
    assert cli.main(argv) == 2

    captured = capsys.readouterr()
    assert captured.out == ""
    assert_one_error_line(captured.err, *fragments)


def test_every_subcommand_module_has_add_subcommand() -> None:
    for name in cli._SUBCOMMAND_MODULES:
        module = __import__(name, fromlist=["add_subcommand"])
        assert callable(module.add_subcommand), name


def test_any_other_missing_module_is_an_error(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(
        cli, "_SUBCOMMAND_MODULES", (*cli._SUBCOMMAND_MODULES, "mongoengine_ids.no_such_module")
    )

    assert cli.main(["--help"]) == 1
    assert_one_error_line(
        capsys.readouterr().err, "internal error: ModuleNotFoundError", "no_such_module", "--debug"
    )

    assert cli.main(["--debug", "--help"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("Traceback (most recent call last):")
    assert err.splitlines()[-1].startswith("mongoengine-ids: error: internal error: ")


def _install_fake_subcommand(monkeypatch: pytest.MonkeyPatch, run: Any, name: str = "fake") -> None:
    """Register a subcommand ``name`` whose ``func`` is ``run``, the way a real module does."""

    def add_subcommand(subparsers: Any) -> None:
        subparsers.add_parser(name).set_defaults(func=run)

    module = types.ModuleType("fake_subcommand")
    module.add_subcommand = add_subcommand  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "fake_subcommand", module)
    monkeypatch.setattr(cli, "_SUBCOMMAND_MODULES", (*cli._SUBCOMMAND_MODULES, "fake_subcommand"))


@pytest.mark.parametrize("status", [1, 2, 3])
def test_command_error_is_one_line_with_its_status(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], status: int
) -> None:
    def run(args: argparse.Namespace) -> int:
        raise cli.CommandError(f"{'x'!r} is not accepted: expected 'y'", status=status)

    _install_fake_subcommand(monkeypatch, run)

    assert cli.main(["fake"]) == status

    assert_one_error_line(capsys.readouterr().err, "'x' is not accepted: expected 'y'")


def test_command_error_defaults_to_status_1(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def run(args: argparse.Namespace) -> int:
        raise cli.CommandError("it failed")

    _install_fake_subcommand(monkeypatch, run)

    assert cli.main(["fake"]) == 1
    assert_one_error_line(capsys.readouterr().err, "it failed")


def test_ctrl_c_exits_130_quietly(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def run(args: argparse.Namespace) -> int:
        raise KeyboardInterrupt

    _install_fake_subcommand(monkeypatch, run)

    assert cli.main(["fake"]) == 130
    assert capsys.readouterr().err == ""


def test_the_subcommand_status_is_the_exit_status(monkeypatch: pytest.MonkeyPatch) -> None:
    _install_fake_subcommand(monkeypatch, lambda args: 7)

    assert cli.main(["fake"]) == 7


def test_a_bug_is_one_line_that_asks_for_debug(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def run(args: argparse.Namespace) -> int:
        raise KeyError("surprise\nsecond line")

    _install_fake_subcommand(monkeypatch, run)

    assert cli.main(["fake"]) == 1
    assert_one_error_line(
        capsys.readouterr().err, "fake: internal error: KeyError: ", "surprise", "--debug"
    )


@pytest.mark.parametrize("argv", [["--debug", "fake"], ["fake", "--debug"]])
def test_debug_prints_the_traceback_too(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    def run(args: argparse.Namespace) -> int:
        raise cli.CommandError("bad input", status=2)

    _install_fake_subcommand(monkeypatch, run)

    assert cli.main(argv) == 2
    lines = capsys.readouterr().err.splitlines()
    assert lines[0] == "Traceback (most recent call last):"
    assert "CommandError: bad input" in lines[-2]
    assert lines[-1] == "mongoengine-ids: error: fake: bad input"


def test_debug_is_accepted_after_a_nested_subcommand(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["counters", "list", "--debug"]) == 0
    assert cli.main(["counters", "--debug", "show", "x"]) == 1
    assert cli.main(["inspect", BLOG_ID, "--debug"]) == 0


def test_a_database_error_that_escapes_is_a_failed_operation(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import pymongo.errors

    def run(args: argparse.Namespace) -> int:
        raise pymongo.errors.AutoReconnect("db:27017: connection closed, full error: {...}")

    _install_fake_subcommand(monkeypatch, run)

    assert cli.main(["fake"]) == 1
    err = capsys.readouterr().err
    assert err == (
        "mongoengine-ids: error: fake: the database failed: AutoReconnect: db:27017: "
        "connection closed\n"
    )


def test_passwords_on_the_command_line_never_reach_a_message(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def run(args: argparse.Namespace) -> int:
        raise RuntimeError(f"something quoted {args.uri} and s3cr%2Ft, decoded s3cr/t")

    def add_subcommand(subparsers: Any) -> None:
        parser = subparsers.add_parser("fake")
        parser.add_argument("--uri")
        parser.set_defaults(func=run)

    module = types.ModuleType("fake_subcommand")
    module.add_subcommand = add_subcommand  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "fake_subcommand", module)
    monkeypatch.setattr(cli, "_SUBCOMMAND_MODULES", (*cli._SUBCOMMAND_MODULES, "fake_subcommand"))

    assert cli.main(["fake", "--uri", "mongodb://admin:s3cr%2Ft@db/shop"]) == 1

    err = capsys.readouterr().err
    assert "s3cr" not in err
    assert "mongodb://admin:***@db/shop" in err
    assert "decoded ***" in err


@pytest.mark.parametrize(
    ("text", "limit", "shown"),
    [
        ("abc", 60, "'abc'"),
        ("a\nb\x1b[31m", 60, "'a\\nb\\x1b[31m'"),  # control characters escaped
        ("x" * 61, 60, f"'{'x' * 60}'... (61 characters)"),
        ("y" * 5000, 3, "'yyy'... (5,000 characters)"),
    ],
)
def test_shorten(text: str, limit: int, shown: str) -> None:
    assert cli.shorten(text, limit) == shown


def test_check_output_path(tmp_path: Any) -> None:
    cli.check_output_path(str(tmp_path / "new.png"), option="--chart")
    assert not (tmp_path / "new.png").exists()  # created and removed again
    (tmp_path / "old.png").write_bytes(b"kept")
    cli.check_output_path(str(tmp_path / "old.png"), option="--chart")
    assert (tmp_path / "old.png").read_bytes() == b"kept"

    for path, fragment in [
        (tmp_path, "is a directory"),
        (tmp_path / "missing" / "x.png", "does not exist"),
        (tmp_path / ("n" * 300), "cannot be written: File name too long"),
    ]:
        with pytest.raises(cli.CommandError, match=fragment) as caught:
            cli.check_output_path(str(path), option="--chart")
        assert caught.value.status == 2
        assert str(caught.value).startswith("--chart '")


# -- as a program -------------------------------------------------------------------------------


def test_python_m_runs_inspect() -> None:
    result = run_module("inspect", "--json", BLOG_ID)

    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    [described] = json.loads(result.stdout)
    assert described == describe(BLOG_ID)


def test_python_m_reports_a_bad_id_without_traceback() -> None:
    result = run_module("inspect", "not-an-id")

    assert result.returncode == 2
    assert result.stdout == ""
    assert_one_error_line(result.stderr, "'not-an-id'")


def test_help_does_not_import_mongomock() -> None:
    code = (
        "import sys\n"
        "from mongoengine_ids.tools.cli import main\n"
        "assert main(['--help']) == 0\n"
        "assert 'mongomock' not in sys.modules, 'mongomock imported by --help'\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False
    )

    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize(
    "count",
    [
        1,  # less than a buffer of output
        400,  # more than a pipe buffer (64 KiB) of output
    ],
)
def test_a_closed_pipe_ends_the_output_quietly(count: int) -> None:
    # The read end is closed before the child starts, so its first write to stdout must fail.
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        result = subprocess.run(
            [sys.executable, "-m", "mongoengine_ids.tools.cli", "inspect", *[BLOG_ID] * count],
            stdout=write_end,
            stderr=subprocess.PIPE,
            text=True,
            check=False,
        )
    finally:
        os.close(write_end)

    # 128 + SIGPIPE, what a shell reports for `yes | head -1`, as 130 is 128 + SIGINT.
    assert result.returncode == 141
    assert result.stderr == ""


def test_only_the_passwords_of_uris_are_masked(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Probe: a sequence name shaped as ``user:password@host`` was shown as ``user:***@host``."""
    monkeypatch.delenv("MONGOENGINE_IDS_URI", raising=False)

    assert cli.main(["counters", "show", "app:tenant@eu"]) == 1
    assert_one_error_line(capsys.readouterr().err, "show: no counter 'app:tenant@eu' in ")


@pytest.mark.parametrize(
    "argv",
    [
        # Review S: a URI given in the wrong place, refused by argparse, which quotes it (it
        # printed the password: its usage errors were never scrubbed).
        ["demo", "mongodb://admin:hunter22@localhost:1/x"],
        ["bench", "--group", "mongodb://admin:hunter22@localhost:1/x"],
        # ... or as another option's value, written with "=" (shown since the probe's fix).
        ["counters", "--db=mongodb://admin:hunter22@localhost:1/x", "list"],
    ],
)
def test_a_password_given_in_the_wrong_place_is_masked(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    monkeypatch.delenv("MONGOENGINE_IDS_URI", raising=False)

    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert_one_error_line(err, f"{argv[0]}: ")
    assert "admin:***@localhost:1/x" in err
    assert "hunter22" not in err


# -- inspect ------------------------------------------------------------------------------------


def test_inspect_shows_every_part_of_a_locality_uuid(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["inspect", BLOG_ID]) == 0

    captured = capsys.readouterr()
    assert captured.err == ""
    out = captured.out
    assert out.startswith(f"{BLOG_ID}  Locality UUID\n")
    assert re.search(r"^  pid +12618 \(0x314a\)$", out, re.MULTILINE)
    assert re.search(r"^  node +223574608 \(0xd537a50\)$", out, re.MULTILINE)
    assert re.search(r"^  mac_fragment +__:__:_d:53:7a:50$", out, re.MULTILINE)
    assert re.search(r"^  timestamp_ms +1350327498450$", out, re.MULTILINE)
    assert re.search(r"^  timestamp +2012-10-15T18:58:18\.450Z$", out, re.MULTILINE)
    assert re.search(r"^  spread_counter +3488672514 \(0xcff0eb02\)$", out, re.MULTILINE)
    assert re.search(r"^  sequential_counter +549326844 \(0x20be0ffc\)$", out, re.MULTILINE)
    assert "Java" in out


def test_inspect_shows_objectid_and_uuid_parts(capsys: pytest.CaptureFixture[str]) -> None:
    objectid = "507f1f77bcf86cd799439011"
    v7 = "017f22e2-79b0-7cc3-98c4-dc0c0c07398f"  # RFC 9562 Appendix A.6

    assert cli.main(["inspect", objectid, v7]) == 0

    first, second = capsys.readouterr().out.split("\n\n")
    assert first.startswith(f"{objectid}  ObjectId\n")
    assert re.search(r"^  timestamp +2012-10-17T21:13:27Z$", first, re.MULTILINE)
    assert re.search(r"^  random +811621734297 \(0xbcf86cd799\)$", first, re.MULTILINE)
    assert re.search(r"^  counter +4427793 \(0x439011\)$", first, re.MULTILINE)
    assert second.startswith(f"{v7}  UUID\n")
    assert re.search(r"^  version +7$", second, re.MULTILINE)
    assert re.search(r"^  timestamp +2022-02-22T19:22:22\.000Z$", second, re.MULTILINE)


def test_inspect_json_is_always_an_array(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["inspect", "--json", BLOG_ID]) == 0

    parsed = json.loads(capsys.readouterr().out)
    assert parsed == [describe(BLOG_ID)]
    assert parsed[0]["pid"] == 12618  # an int, not text
    assert parsed[0]["timestamp"] == "2012-10-15T18:58:18.450Z"


def test_inspect_json_keeps_the_order_and_marks_failures(
    capsys: pytest.CaptureFixture[str],
) -> None:
    objectid = "507F1F77BCF86CD799439011"

    assert cli.main(["inspect", "--json", BLOG_ID, "nope", objectid]) == 2

    captured = capsys.readouterr()
    first, failed, third = json.loads(captured.out)
    assert first == describe(BLOG_ID)
    assert failed["input"] == "nope"
    assert failed["error"].startswith("'nope' is not a valid id")
    assert set(failed) == {"input", "error"}
    assert third == describe(objectid)
    assert_one_error_line(captured.err, "'nope'")


def test_inspect_decodes_the_good_ids_around_a_bad_one(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert cli.main(["inspect", BLOG_ID, "xyz", "507f1f77bcf86cd799439011"]) == 2

    captured = capsys.readouterr()
    assert f"{BLOG_ID}  Locality UUID" in captured.out
    assert "507f1f77bcf86cd799439011  ObjectId" in captured.out
    assert "xyz" not in captured.out
    assert_one_error_line(captured.err, "'xyz'")


@pytest.mark.parametrize(
    "bad",
    [
        "",  # empty
        "nope",  # not hex at all
        BLOG_ID[:-1],  # one digit short
        BLOG_ID + "0",  # one digit too many
        BLOG_ID[:-1] + "g",  # a letter beyond f
        BLOG_ID.replace("-", ":"),  # the wrong separator
        "20be0ffc314a-bd53-7a50-013a65ca76d2",  # a hyphen missing, 35 characters
        "-" + BLOG_ID.replace("-", ""),  # a stray hyphen in front (an option without "--")
        f" {BLOG_ID} ",  # spaces around it
        BLOG_ID + "\n",  # a trailing newline
        f"urn:uuid:{BLOG_ID}",  # the URN form, not accepted
        f"ObjectId('{'507f1f77bcf86cd799439011'}')",  # pasted from the mongo shell
        "507f1f77bcf86cd79943901",  # an ObjectId one digit short
        "\uff12\uff10be0ffc-314a-bd53-7a50-013a65ca76d2",  # full-width digits: int() takes them
        "20be0ffc_314a_bd53_7a50_013a65ca",  # underscores, which int(x, 16) would accept
        "0x20be0ffc314abd537a50013a65ca76",  # a 0x prefix, which int(x, 16) would accept
    ],
)
def test_inspect_bad_input_table(capsys: pytest.CaptureFixture[str], bad: str) -> None:
    assert cli.main(["inspect", "--", bad]) == 2

    captured = capsys.readouterr()
    assert captured.out == ""
    assert_one_error_line(captured.err, "inspect: ", repr(bad), "is not a valid id", "expected")


def test_inspect_cuts_a_long_input_short(capsys: pytest.CaptureFixture[str]) -> None:
    bad = "g" + "0" * 99_999

    assert cli.main(["inspect", "--json", bad]) == 2

    captured = capsys.readouterr()
    assert_one_error_line(
        captured.err, f"{'g' + '0' * 59!r}... (100,000 characters) is not a valid id"
    )
    assert len(captured.err) < 400
    [failed] = json.loads(captured.out)
    assert failed["input"] == bad  # the data keeps what was given
    assert len(failed["error"]) < 400


# -- demo ---------------------------------------------------------------------------------------


def _section(out: str, number: int) -> str:
    """The text of section ``number`` of the demo's output."""
    parts = re.split(r"^\d+\. ", out, flags=re.MULTILINE)
    return parts[number]


def _table_rows(section: str) -> list[list[str]]:
    """The rows of the first table in ``section`` whose second cell is an id."""
    return [line.split() for line in section.splitlines() if LOCALITY_ID.search(line)]


def test_demo_saves_documents_and_shows_their_ids(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["demo"]) == 0

    captured = capsys.readouterr()
    out = captured.out
    assert captured.err == ""
    assert out.startswith("mongoengine-ids demo: database 'mongoengine_ids_demo' on an embedded")

    saved = _section(out, 1)
    rows = [row for row in _table_rows(saved) if row[0] in ("Lisbon", "Oslo", "Quito")]
    assert [row[0] for row in rows] == ["Lisbon", "Oslo", "Quito"]
    counters = []
    for _, text, timestamp, pid, node, spread_counter in rows:
        described = describe(text)
        assert described["kind"] == "locality_uuid"
        assert (timestamp, int(pid)) == (described["timestamp"], described["pid"])
        assert int(node, 16) == described["node"]
        assert int(spread_counter, 16) == described["spread_counter"]
        counters.append(int(spread_counter, 16))
    # One generator made the three ids, one spread step apart.
    assert [(b - a) & LOCALITY_COUNTER_MASK for a, b in itertools.pairwise(counters)] == [
        SPREAD_STEP
    ] * 2
    assert "DemoPlace.objects.count() -> 3" in saved

    inserted = _section(out, 2)
    rows = _table_rows(inserted)
    assert [row[0] for row in rows] == ["opened", "paid", "packed", "shipped", "delivered"]
    sequential = [int(row[3], 16) for row in rows]
    assert sequential == [describe(row[1])["sequential_counter"] for row in rows]
    assert [(b - a) & LOCALITY_COUNTER_MASK for a, b in itertools.pairwise(sequential)] == [1] * 4
    assert "DemoEvent.objects.count() -> 5" in inserted

    stored = _section(out, 3)
    binary_row = next(line for line in stored.splitlines() if line.startswith("  DemoTicket"))
    string_row = next(line for line in stored.splitlines() if line.startswith("  DemoLabel"))
    assert re.search(r"Binary, subtype 4 +[0-9a-f]{32} +1$", binary_row)
    assert LOCALITY_ID.search(string_row)
    assert re.search(r"str +'[0-9a-f-]{36}' +1$", string_row)

    never = _section(out, 4)
    city = next(line for line in never.splitlines() if line.startswith("  DemoCity"))
    plain = next(line for line in never.splitlines() if line.startswith("  DemoPlainCity"))
    assert "raised NotUniqueError" in city
    assert "name='written elsewhere'" in city
    assert city.endswith("None")
    assert "returned normally" in plain
    assert "name='new'" in plain

    assert "Dropped the demo's " in out


def test_demo_says_in_words_when_the_mac_may_be_shared(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import uuid

    from mongoengine_ids.locality import generator as locality

    # A container's MAC, read afresh (the MAC is read once per process, and restored after).
    monkeypatch.delenv("MONGOENGINE_IDS_MAC")
    monkeypatch.setattr(locality, "_machine_mac", None)
    monkeypatch.setattr(uuid, "getnode", lambda: 0x02FC00000001)

    # pytest turns warnings into errors: the generators' RuntimeWarning would fail this.
    assert cli.main(["demo"]) == 0

    captured = capsys.readouterr()
    assert captured.err == ""
    first = " ".join(_section(captured.out, 1).split())
    assert "this machine's MAC, 02:fc:00:00:00:01, a locally administered address" in first
    assert "set MONGOENGINE_IDS_MAC to an address unique to each machine" in first
    assert captured.out.count("MONGOENGINE_IDS_MAC") == 1  # said once


def test_demo_says_nothing_of_a_mac_set_on_purpose(capsys: pytest.CaptureFixture[str]) -> None:
    assert os.environ["MONGOENGINE_IDS_MAC"]  # set by conftest.py

    assert cli.main(["demo"]) == 0

    assert "MAC" not in capsys.readouterr().out


def test_demo_disconnects_what_it_connected(capsys: pytest.CaptureFixture[str]) -> None:
    settings_before = dict(mongoengine.connection._connection_settings)

    assert cli.main(["demo"]) == 0

    with pytest.raises(ConnectionFailure):
        mongoengine.get_connection(demo.ALIAS)
    assert mongoengine.connection._connection_settings == settings_before
    assert demo.ALIAS not in mongoengine.connection._connections
    assert demo.ALIAS not in mongoengine.connection._dbs


def test_demo_leaves_other_connections_alone(
    capsys: pytest.CaptureFixture[str], mongoengine_db: Any
) -> None:
    mongoengine_db.things.insert_one({"_id": 1})

    assert cli.main(["demo"]) == 0

    assert mongoengine.get_db().things.find_one() == {"_id": 1}


def test_demo_runs_twice_in_one_process(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["demo"]) == 0
    first = capsys.readouterr().out
    assert cli.main(["demo"]) == 0
    second = capsys.readouterr().out

    run_ids = [re.findall(r"demo_\*_([0-9a-f]+)", out) for out in (first, second)]
    assert len(run_ids[0]) == len(run_ids[1]) == 1
    assert run_ids[0] != run_ids[1]
    # Each run's table holds only its own three places.
    assert "DemoPlace.objects.count() -> 3" in second


def test_demo_refuses_an_alias_already_in_use(
    capsys: pytest.CaptureFixture[str], mongoengine_connect: Connect
) -> None:
    database = mongoengine_connect(demo.ALIAS)

    assert cli.main(["demo"]) == 1

    assert_one_error_line(capsys.readouterr().err, repr(demo.ALIAS), "already connected")
    assert mongoengine.get_db(demo.ALIAS) is database  # still the test's connection


def test_demo_without_mongomock_says_how_to_install_it(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "mongomock", None)  # import raises ModuleNotFoundError

    assert cli.main(["demo"]) == 1

    captured = capsys.readouterr()
    assert captured.out == ""
    assert_one_error_line(captured.err, "pip install 'mongoengine-ids[demo]'")
    with pytest.raises(ConnectionFailure):
        mongoengine.get_connection(demo.ALIAS)


@pytest.mark.parametrize(
    ("uri", "status", "fragment"),
    [
        ("localhost:27017", 2, "'localhost:27017' is not a MongoDB URI"),  # no scheme
        ("http://localhost", 2, "'http://localhost' is not a MongoDB URI"),  # another scheme
        ("mongodb://:::", 2, "'mongodb://:::' is not a valid MongoDB URI"),  # unparseable
        ("mongodb://db/shop?bogus=1", 2, "Unknown option"),
        # Nothing listens on port 1: refused; the URI's short timeout is kept.
        (
            "mongodb://admin:s3cret@127.0.0.1:1/?serverSelectionTimeoutMS=50",
            1,
            "cannot use the server at 'mongodb://admin:***@127.0.0.1:1/",
        ),
    ],
)
def test_demo_with_an_unusable_uri_fails_in_one_line(
    capsys: pytest.CaptureFixture[str], uri: str, status: int, fragment: str
) -> None:
    assert cli.main(["demo", "--uri", uri]) == status

    captured = capsys.readouterr()
    assert captured.out == ""
    assert_one_error_line(captured.err, "demo: ", fragment)
    assert "s3cret" not in captured.err
    with pytest.raises(ConnectionFailure):
        mongoengine.get_connection(demo.ALIAS)


@real_server
def test_demo_on_a_real_server_drops_its_collections(capsys: pytest.CaptureFixture[str]) -> None:
    assert TEST_URI is not None
    assert cli.main(["demo", "--uri", TEST_URI]) == 0

    out = capsys.readouterr().out
    [run_id] = re.findall(r"demo_\*_([0-9a-f]+)", out)
    database = re.findall(r"database '([^']+)'", out)[0]
    client: Any = mongoengine.connect(database, alias="demo_check", host=TEST_URI)
    try:
        names = client[database].list_collection_names()
    finally:
        mongoengine.disconnect("demo_check")
    assert [name for name in names if name.endswith(f"_{run_id}")] == []
    assert "raised NotUniqueError" in out


@pytest.mark.parametrize(
    ("argv", "quoted"),
    [
        (["counters", "set", "order.id", "-5"], "'-5'"),
        (["counters", "set", "order.id", "-0"], "'-0'"),
        (["counters", "set", "order.id", "\uff15"], "'\uff15'"),  # a full-width 5
        (["counters", "show", "order.id", "--digits", "0"], "'0'"),
        (["counters", "show", "order.id", "--digits", "25"], "'25'"),
        (["counters", "--collection", "system.counters", "list"], "'system.counters'"),
    ],
)
def test_counters_refuses_bad_input_with_status_2(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    argv: list[str],
    quoted: str,
) -> None:
    monkeypatch.delenv("MONGOENGINE_IDS_URI", raising=False)
    assert cli.main(argv) == cli.EXIT_USAGE
    err = capsys.readouterr().err
    assert quoted in err
    assert "Traceback" not in err


@pytest.mark.parametrize("subcommand", [["demo"], ["bench", "--quick"], ["compare", "--quick"]])
def test_a_bad_mac_in_the_environment_is_a_usage_error(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], subcommand: list[str]
) -> None:
    """Found by a probe: it was reported as an internal error (exit 1, "report it"), without
    naming the variable."""
    from mongoengine_ids.locality import generator

    monkeypatch.setenv("MONGOENGINE_IDS_MAC", "zz")
    monkeypatch.setattr(generator, "_machine_mac", None)  # read again, once per process
    assert cli.main(subcommand) == cli.EXIT_USAGE
    err = capsys.readouterr().err
    assert f"error: {subcommand[0]}: $MONGOENGINE_IDS_MAC: 'zz' is not a valid MAC address" in err
    assert "internal error" not in err


# -- against a server: mongomock under pymongo's name (probe BE) --------------------------------

#: A user authenticated by a certificate: on $external, whatever the URI's database.
X509_URI = "mongodb://CN=client@db.example:27017/shop?authMechanism=MONGODB-X509"


@pytest.fixture
def fake_server(monkeypatch: pytest.MonkeyPatch) -> None:
    """pymongo's client is mongomock's, after pymongo's own client checked its URI and options
    (without connecting): a server that takes any credential pymongo would send."""
    import mongoengine.connection
    import mongomock
    import pymongo

    real_client = pymongo.MongoClient

    class Server(mongomock.MongoClient):  # type: ignore[misc]
        def __init__(self, host: Any = None, *args: Any, **kwargs: Any) -> None:
            kwargs.pop("event_listeners", None)  # compare's call counter: mongomock has none
            real_client(host, *args, connect=False, **kwargs).close()
            super().__init__(host, *args, **kwargs)

    monkeypatch.setattr(pymongo, "MongoClient", Server)
    monkeypatch.setattr(mongoengine.connection, "MongoClient", Server)


@pytest.mark.parametrize(
    "argv",
    [
        ["demo", "--uri", X509_URI],
        ["counters", "--uri", X509_URI, "list"],
        ["compare", "--quick", "--uri", X509_URI],
        ["bench", "--quick", "--group", "random_unique", "--uri", X509_URI],
    ],
)
@pytest.mark.usefixtures("fake_server")
def test_a_uri_authenticating_on_external_is_used_as_given(
    capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    # compare and bench rewrote the URI with authSource=shop, which pymongo refuses for
    # MONGODB-X509: an internal error.
    assert cli.main(argv) == 0, capsys.readouterr().err
    assert capsys.readouterr().err == ""


@pytest.mark.usefixtures("fake_server")
def test_bench_on_a_server_needs_no_mongomock(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # The sequence group's hand-out rows leased their block from mongomock, imported whatever
    # --uri said: without it, an internal error.
    import builtins

    real_import = builtins.__import__

    def guarded(name: str, globals: Any = None, *args: Any, **kwargs: Any) -> Any:
        importer = str((globals or {}).get("__name__", ""))
        if name.partition(".")[0] == "mongomock" and importer.startswith("mongoengine_ids"):
            raise ModuleNotFoundError("No module named 'mongomock'", name="mongomock")
        return real_import(name, globals, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", guarded)

    status = cli.main(["bench", "--quick", "--group", "sequence", "--uri", "mongodb://db/shop"])

    captured = capsys.readouterr()
    assert status == 0, captured.err
    assert captured.err == ""
    assert "\n[sequence]\n" in captured.out
    assert "\nSequence.next() from a leased block " in captured.out


def test_compare_reports_a_client_mongoengine_could_not_make_in_one_line(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Probe BE: MongoEngine's ConnectionFailure, wrapping pymongo's refusal of the client's
    # options, escaped as an internal error.
    from mongoengine_ids.tools import compare

    monkeypatch.setattr(mongoengine, "connect", refused_client_connect)

    with (
        pytest.raises(cli.CommandError) as caught,
        compare._counting_database(X509_URI, compare._CallCounter()),
    ):
        pass

    assert str(caught.value) == (
        f"cannot use the server at {X509_URI!r}: "
        "authentication source must be $external or None for MONGODB-X509"
    )
