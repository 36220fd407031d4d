"""The benchmark runs and reports every row; its numbers are never asserted on.

Timing on a shared machine is noise for a test: these tests run ``--quick`` (tiny iteration
counts) and check only the structure of what is printed.
"""

from __future__ import annotations

import argparse
import builtins
import io
import json
import math
import re
import sys
import types
from typing import Any

import pytest
from _support import real_server, refused_client_connect

from mongoengine_ids.tools import bench
from mongoengine_ids.tools.bench import _core
from mongoengine_ids.tools.bench import locality as locality_group

EXPECTED_LOCALITY_ROWS = locality_group.expected_rows()


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    status = bench.main(list(argv))
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def _json_results(out: str) -> dict[str, Any]:
    document = json.loads(out)
    assert isinstance(document, dict)
    return document


# -- the command --------------------------------------------------------------------------------


def test_quick_table_has_every_row(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, err = _run(capsys, "--quick")

    assert status == 0, err
    assert err == ""  # no progress: stderr is not a terminal
    lines = out.splitlines()
    assert lines[0].startswith("machine: ")
    assert "CPUs" in lines[0]
    assert "[locality]" in lines
    table = lines[lines.index("[locality]") + 1 :]
    for name, baseline in EXPECTED_LOCALITY_ROWS:
        # A row starts with its name; a compared row also names its baseline and a ratio.
        matching = [
            line
            for line in table
            if line.startswith(name + " ") and (baseline is None or f" {baseline} " in line)
        ]
        assert matching, f"no row {name!r} vs {baseline!r} in:\n{out}"
        if baseline is not None:
            ratios = re.findall(r" (\d+\.\d\d)x ", matching[0])
            assert ratios, matching[0]
            assert math.isfinite(float(ratios[0]))
            assert float(ratios[0]) > 0
    assert re.search(r"^targets: \d+ of \d+ met", out, re.MULTILINE), out


def test_quick_json_names_every_row_and_baseline(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, err = _run(capsys, "--quick", "--json", "--group", "locality")

    assert status == 0, err
    document = _json_results(out)  # nothing but the JSON on stdout
    assert document["format"] == _core.JSON_FORMAT_VERSION
    assert set(document["machine"]) == {"platform", "python", "cpus"}
    results = document["results"]
    assert [(row["name"], row["baseline"]) for row in results] == EXPECTED_LOCALITY_ROWS
    names = {row["name"] for row in results}
    for row in results:
        assert row["group"] == "locality"
        assert row["seconds"] > 0
        assert math.isfinite(row["seconds"])
        if row["baseline"] is None:
            assert row["ratio"] is None
            assert row["target"] is None
            assert row["met"] is None
        else:
            assert row["baseline"] in names  # every baseline is itself a row
            assert isinstance(row["ratio"], float)
            assert math.isfinite(row["ratio"])
            assert row["ratio"] > 0
            assert (row["target"] is None) == (row["met"] is None)
    targets = {(row["name"], row["baseline"]): row["target"] for row in results if row["target"]}
    assert targets == {
        ("generate() spread", "uuid.uuid4()"): "<= 0.50x",
        ("generate() sequential", "uuid.uuid4()"): "<= 0.50x",
    }


def test_group_option_selects_group(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, err = _run(
        capsys, "--quick", "--json", "--group", "locality", "--group", "locality"
    )

    assert status == 0, err
    rows = _json_results(out)["results"]
    assert len(rows) == len(EXPECTED_LOCALITY_ROWS)  # named twice, run once


@pytest.mark.parametrize(
    "argv",
    [
        ["--group", "nope"],  # no such group
        ["--quick", "--group", "locality", "--group", "Locality"],  # names are case-sensitive
    ],
)
def test_unknown_group_is_a_usage_error(
    capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    status, out, err = _run(capsys, *argv)

    assert status == bench.USAGE_ERROR
    assert out == ""  # nothing was run
    assert "--group" in err
    assert "'nope'" in err or "'Locality'" in err  # the bad value, quoted
    assert "'locality'" in err  # and the valid names


def test_bad_option_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    status, _, err = _run(capsys, "--rounds", "3")

    assert status == bench.USAGE_ERROR
    assert "--rounds" in err


def test_missing_group_module_is_skipped_unless_asked_for(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # A group listed before its module is written (as "sequence" once was) is skipped...
    monkeypatch.setattr(bench, "GROUPS", ("locality", "not_written_yet"))
    status, out, err = _run(capsys, "--quick", "--json")
    assert status == 0, err
    assert {row["group"] for row in _json_results(out)["results"]} == {"locality"}

    # ...but asking for it by name is an error, not an empty success.
    status, out, err = _run(capsys, "--quick", "--group", "not_written_yet")
    assert status == bench.USAGE_ERROR
    assert out == ""
    assert "'not_written_yet' is not available" in err


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_on_a_terminal(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    terminal = _Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)

    assert bench.main(["--quick", "--json", "--group", "locality"]) == 0

    json.loads(capsys.readouterr().out)  # stdout stays machine-readable
    shown = terminal.getvalue()
    assert shown.startswith("\rbench: group 1/1, locality")
    assert "\rbench: group 1/1, locality, round 1/" in shown
    assert "\n" not in shown  # redrawn in place
    *_, erased, after = shown.rsplit("\r", 2)
    assert erased.strip() == ""  # erased at the end
    assert after == ""


def test_status_line_fits_the_terminal_and_erases_itself(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import os

    monkeypatch.setattr(_core.shutil, "get_terminal_size", lambda: os.terminal_size((21, 5)))
    terminal = _Terminal()
    status = _core.StatusLine(terminal)
    status.show("a long line of progress")
    status.show("short")
    status.clear()
    status.clear()  # idempotent
    assert terminal.getvalue() == (
        "\ra long line of progr"
        "\rshort               "  # padded over the longer line before
        "\r     \r"
    )
    piped = io.StringIO()
    _core.StatusLine(piped).show("x")
    assert piped.getvalue() == ""


def test_subcommand_has_the_same_options(capsys: pytest.CaptureFixture[str]) -> None:
    parser = argparse.ArgumentParser(prog="mongoengine-ids")
    bench.add_subcommand(parser.add_subparsers(dest="command", required=True))

    args = parser.parse_args(["bench", "--quick", "--json", "--group", "locality"])
    status = args.func(args)

    assert status == 0
    rows = _json_results(capsys.readouterr().out)["results"]
    assert [(row["name"], row["baseline"]) for row in rows] == EXPECTED_LOCALITY_ROWS


@real_server
def test_quick_against_a_real_server(capsys: pytest.CaptureFixture[str]) -> None:
    from _support import TEST_URI

    assert TEST_URI is not None
    status, out, err = _run(capsys, "--quick", "--json", "--uri", TEST_URI)

    assert status == 0, err
    notes = {row["name"]: row["note"] for row in _json_results(out)["results"]}
    assert notes["save() LocalityUUIDField pk"].startswith("mongod")  # the writes group
    assert notes["save() UUIDField pk (Binary 4), assigned"].startswith("mongod")


# -- the helpers --------------------------------------------------------------------------------


def test_measure_interleaves_and_rotates() -> None:
    calls: list[str] = []

    def trial(name: str) -> _core.Trial:
        def run(n: int) -> float:
            calls.append(name)
            return 0.5 * n if name == "a" else 1.0 * n

        return run

    timings = _core.measure(
        {"a": trial("a"), "b": trial("b"), "c": trial("c")}, number=4, rounds=3, warmup=1
    )

    # The warm-up round (index -1) starts at the last trial; then each round starts one later.
    assert calls == ["c", "a", "b", "a", "b", "c", "b", "c", "a", "c", "a", "b"]
    assert timings["a"].samples == (0.5, 0.5, 0.5)  # per operation, warm-up dropped
    assert timings["b"].seconds == 1.0
    assert timings["a"].number == 4


@pytest.mark.parametrize(
    ("statistic", "expected"),
    [
        ("min", 1.0),  # bursts of load only add time: the minimum is the cleanest sample
        ("median", 3.0),
    ],
)
def test_timing_statistic(statistic: _core.Statistic, expected: float) -> None:
    assert _core.Timing((5.0, 1.0, 3.0, 9.0, 2.0), statistic, 1).seconds == expected


@pytest.mark.parametrize(
    ("number", "rounds", "warmup"),
    [
        (0, 1, 1),  # no operations
        (1, 0, 1),  # no rounds
        (1, 1, -1),  # negative warm-up
    ],
)
def test_measure_rejects_bad_counts(number: int, rounds: int, warmup: int) -> None:
    with pytest.raises(ValueError, match="must be"):
        _core.measure({"a": _core.loop(lambda: None)}, number=number, rounds=rounds, warmup=warmup)


def test_measure_needs_a_trial() -> None:
    with pytest.raises(ValueError, match="at least one trial"):
        _core.measure({}, number=1, rounds=1)


def test_measure_alternating_takes_turns_operation_by_operation() -> None:
    calls: list[tuple[str, int]] = []

    def step(name: str, seconds: float) -> _core.Step:
        def run(index: int) -> float:
            calls.append((name, index))
            return seconds * (index + 1)  # operation i takes (i + 1) x seconds

        return run

    timings = _core.measure_alternating(
        {"a": step("a", 1.0), "b": step("b", 2.0)}, number=3, rounds=2, warmup=1
    )

    # Operation i of both steps before operation i + 1 of either, the order rotated each time;
    # the same in every round, warm-up included.
    one_round = [("a", 0), ("b", 0), ("b", 1), ("a", 1), ("a", 2), ("b", 2)]
    assert calls == one_round * 3
    assert timings["a"].samples == (2.0, 2.0)  # (1 + 2 + 3) / 3 per operation
    assert timings["b"].samples == (4.0, 4.0)
    assert timings["a"].statistic == "median"
    assert timings["b"].number == 3


def test_measure_alternating_checks_its_arguments_and_restores_the_collector() -> None:
    import gc

    with pytest.raises(ValueError, match="at least one step"):
        _core.measure_alternating({}, number=1, rounds=1)
    with pytest.raises(ValueError, match="must be"):
        _core.measure_alternating({"a": lambda index: 0.0}, number=0, rounds=1)
    seen: list[bool] = []
    _core.measure_alternating(
        {"a": lambda index: seen.append(gc.isenabled()) or 0.0}, number=2, rounds=1
    )
    assert seen == [False] * 4  # off while timing (warm-up and the round)...
    assert gc.isenabled()  # ...and on again afterwards


def test_loop_calls_the_function_n_times(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[None] = []
    # A clock reading the calls made so far: the trial times exactly its n calls.
    clock = types.SimpleNamespace(perf_counter=lambda: float(len(calls)))
    monkeypatch.setattr(_core, "time", clock)
    elapsed = _core.loop(lambda: calls.append(None))(7)
    assert len(calls) == 7
    assert elapsed == 7.0


def test_measure_restores_the_garbage_collector() -> None:
    import gc

    seen: list[bool] = []
    _core.measure({"a": _core.loop(lambda: seen.append(gc.isenabled()))}, number=1, rounds=1)
    assert seen == [False, False]  # off while timing (warm-up and the round)...
    assert gc.isenabled()  # ...and on again afterwards


def test_compare_row_ratio_and_target() -> None:
    timings = {
        "mine": _core.Timing((0.48,), "min", 1),
        "theirs": _core.Timing((1.0,), "min", 1),
    }

    met = _core.compare_row("g", "mine", timings, "theirs", max_ratio=0.5)
    missed = _core.compare_row("g", "mine", timings, "theirs", max_ratio=0.4, label="mine, again")
    reported = _core.compare_row("g", "mine", timings, "theirs")

    assert (met.ratio, met.target, met.met, met.baseline) == (0.48, "<= 0.50x", True, "theirs")
    assert (missed.name, missed.target, missed.met) == ("mine, again", "<= 0.40x", False)
    assert (reported.target, reported.met) == (None, None)


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (6.59e-7, "0.659 us"),  # sub-microsecond stays in us, to line up with the baselines
        (1.34e-6, "1.34 us"),
        (4.99e-5, "49.9 us"),
        (1.03e-4, "103 us"),
        (2.04e-2, "20.4 ms"),
        (3.0, "3.00 s"),
    ],
)
def test_format_seconds(seconds: float, text: str) -> None:
    assert _core.format_seconds(seconds) == text


def test_format_ratio() -> None:
    assert _core.format_ratio(0.4812) == "0.48x"


def test_table_columns_are_aligned() -> None:
    rows = [
        _core.Result("g", "base", 1e-6),
        _core.Result("g", "a much longer name", 5e-7, "base", 0.5, "<= 0.50x", True, "a note"),
        _core.Result("g", "other", 2e-6, "base", 2.0, "<= 1.15x", False),
    ]

    lines = _core.format_table(rows).splitlines()

    assert len(lines) == 2 + len(rows)
    header, rule = lines[0], lines[1]
    # The rule's dashes span each column exactly; the cells line up under them.
    spans = [match.span() for match in re.finditer(r"-+", rule)]
    (time_start, time_end), (baseline_start, _), (ratio_start, ratio_end) = spans[1:4]
    for line, row in zip(lines[2:], rows, strict=True):
        assert line.startswith(row.name + " ")
        assert line[time_start:time_end].strip() == _core.format_seconds(row.seconds)
        assert line[time_end - 1] != " "  # times are right-aligned
        if row.baseline is not None:
            assert line[baseline_start:].startswith(row.baseline + " ")
            assert line[ratio_start:ratio_end].endswith("x")  # ratios are right-aligned
    assert header.split() == ["candidate", "time/op", "baseline", "ratio", "target", "met", "note"]
    assert "0.50x" in lines[3]
    assert lines[3].split()[-3:] == ["yes", "a", "note"]
    assert lines[4].rstrip().endswith("NO")


def test_to_json_round_trips() -> None:
    row = _core.Result("g", "mine", 1e-6, "theirs", 0.5, "<= 0.50x", True, "note")

    document = json.loads(_core.to_json([row], machine={"platform": "p", "python": "x", "cpus": 2}))

    assert document == {
        "format": _core.JSON_FORMAT_VERSION,
        "machine": {"platform": "p", "python": "x", "cpus": 2},
        "results": [row.as_dict()],
    }
    assert _core.Result(**document["results"][0]) == row


def test_run_from_args_checks_group_names_itself(capsys: pytest.CaptureFixture[str]) -> None:
    # A namespace built by hand has not been through argparse's choices.
    args = argparse.Namespace(quick=True, json=False, uri=None, groups=["nope"])

    assert bench.run_from_args(args) == bench.USAGE_ERROR
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "unknown group 'nope'; expected one of: locality" in captured.err


def test_unreachable_server_is_one_line_error(capsys: pytest.CaptureFixture[str]) -> None:
    # Port 1 on the loopback interface: refused at once, nothing is listening there.
    uri = "mongodb://admin:s3cret@127.0.0.1:1/?serverSelectionTimeoutMS=200"

    status, out, err = _run(capsys, "--quick", "--uri", uri)

    assert status == bench.FAILURE
    assert out == ""  # checked before anything runs
    assert err.startswith(
        "mongoengine-ids: error: bench: cannot use the server at "
        "'mongodb://admin:***@127.0.0.1:1/?serverSelectionTimeoutMS=200': "
    )
    assert len(err.splitlines()) == 1
    assert "s3cret" not in err


@pytest.mark.parametrize(
    "uri", ["mongodb://127.0.0.1:99999/x", "localhost:27017", "mongodb://db/?bogus=1"]
)
def test_a_bad_uri_is_a_usage_error_before_anything_runs(
    capsys: pytest.CaptureFixture[str], uri: str
) -> None:
    status, out, err = _run(capsys, "--quick", "--uri", uri)

    assert status == bench.USAGE_ERROR
    assert out == ""  # not even the machine line
    assert err.startswith(f"mongoengine-ids: error: bench: --uri {uri!r} is not a ")
    assert len(err.splitlines()) == 1


def test_database_leaves_the_uri_database_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    # MongoEngine takes the URI's database over the one it is given: the benchmark must not
    # write into the user's database, so it connects without it.
    import mongoengine

    connected: dict[str, Any] = {}

    def connect(name: str, **settings: Any) -> None:
        connected.update(settings, name=name)
        raise _core.BenchError("stop here")

    monkeypatch.setattr(mongoengine, "connect", connect)

    with pytest.raises(_core.BenchError), _core.database("mongodb://u:p@db/shop"):
        pass

    assert connected["name"].startswith("mongoengine_ids_bench_")
    assert connected["host"] == "mongodb://u:p@db/?authSource=shop"
    assert connected["serverSelectionTimeoutMS"] == _core.SERVER_SELECTION_TIMEOUT_MS


def test_database_reports_a_client_mongoengine_could_not_make_in_one_line(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Probe BE: MongoEngine wraps pymongo's refusal of the client's options in its own
    # ConnectionFailure, which escaped as an internal error.
    import mongoengine

    monkeypatch.setattr(mongoengine, "connect", refused_client_connect)

    with (
        pytest.raises(_core.BenchError) as caught,
        _core.database("mongodb://CN=client@db/shop?authMechanism=MONGODB-X509"),
    ):
        pass

    assert str(caught.value) == (
        "cannot use the server at 'mongodb://CN=client@db/shop?authMechanism=MONGODB-X509': "
        "authentication source must be $external or None for MONGODB-X509"
    )


# -- without mongomock (probe BE) ----------------------------------------------------------------


@pytest.fixture
def no_mongomock(monkeypatch: pytest.MonkeyPatch) -> None:
    """The package's imports of mongomock fail, as where it is not installed."""
    real_import = builtins.__import__

    def guarded(name: str, globals: Any = None, *args: Any, **kwargs: Any) -> Any:
        importer = str((globals or {}).get("__name__", ""))
        if name.partition(".")[0] == "mongomock" and importer.startswith("mongoengine_ids"):
            raise ModuleNotFoundError("No module named 'mongomock'", name="mongomock")
        return real_import(name, globals, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", guarded)


@pytest.mark.parametrize("group", ["sequence", "random_unique", "writes"])
@pytest.mark.usefixtures("no_mongomock")
def test_without_mongomock_a_database_group_says_so_in_one_line(
    capsys: pytest.CaptureFixture[str], group: str
) -> None:
    # The sequence and writes groups failed as an internal error (ModuleNotFoundError).
    status, out, err = _run(capsys, "--quick", "--group", group)

    assert status == bench.FAILURE
    assert err == f"mongoengine-ids: error: bench: {_core.NEEDS_MONGOMOCK}\n"
    assert f"[{group}]" not in out
