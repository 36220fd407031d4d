"""``mongoengine-ids compare``: every strategy, every metric, exact sizes; never wall-clock time."""

from __future__ import annotations

import argparse
import io
import json
import math
import sys
from typing import Any

import pytest
from _support import TEST_URI

from mongoengine_ids.tools import compare, shardsim
from mongoengine_ids.tools.cli import CommandError

URI_ARGS = ["--uri", TEST_URI] if TEST_URI else []

METRICS = {
    "strategy": str,
    "declaration": str,
    "bson_type": str,
    "stored_bytes": float,
    "payload_bytes": float,
    "generate_seconds": float,
    "round_trips_per_1000": float,
    "saves_per_second": float,
    "time_ordered": bool,
    "ordered_share": float,
    "imbalance_max": float,
    "imbalance_mean": float,
    "interleaving": float,
}

#: (BSON type, BSON size of the _id value, payload): ObjectId is 12 bytes; a UUID is 16 bytes
#: in a binary value with a 4-byte length and a subtype byte; counters below 2**31 are int32,
#: 12-digit values int64.
SIZES = {
    "ObjectId": ("objectId", 12, 12),
    "UUIDv4": ("binData", 21, 16),
    "UUIDv7": ("binData", 21, 16),
    "Locality spread": ("binData", 21, 16),
    "Locality sequential": ("binData", 21, 16),
    "sequence batch=1": ("int", 4, 4),
    "sequence batch=1000": ("int", 4, 4),
    "sequence batch=1000 shards=1000": ("long", 8, 8),
    "random digits=12": ("long", 8, 8),
}


def _main(argv: list[str]) -> int:
    return compare.main([*argv, *URI_ARGS])


@pytest.fixture(scope="module")
def quick_json() -> dict[str, Any]:
    out = io.StringIO()
    saved = sys.stdout
    sys.stdout = out
    try:
        assert _main(["--quick", "--json"]) == 0
    finally:
        sys.stdout = saved
    document: dict[str, Any] = json.loads(out.getvalue())
    return document


@pytest.fixture(scope="module")
def rows(quick_json: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {row["strategy"]: row for row in quick_json["strategies"]}


def test_json_has_every_strategy_in_order(quick_json: dict[str, Any]) -> None:
    assert [row["strategy"] for row in quick_json["strategies"]] == list(shardsim.STRATEGIES)
    assert [report["strategy"] for report in quick_json["shards"]] == list(shardsim.STRATEGIES)
    assert quick_json["format"] == compare.JSON_FORMAT_VERSION
    assert quick_json["quick"] is True
    assert quick_json["database"] == ("mongod" if TEST_URI else "mongomock")
    assert set(quick_json["machine"]) == {"platform", "python", "cpus"}
    assert quick_json["counts"]["order_saves"] == compare.QUICK.order_saves


@pytest.mark.parametrize("strategy", shardsim.STRATEGIES)
def test_every_metric_is_there_with_its_type(
    rows: dict[str, dict[str, Any]], strategy: str
) -> None:
    row = rows[strategy]
    assert set(row) == set(METRICS)
    for name, kind in METRICS.items():
        value = row[name]
        if kind is float:
            assert isinstance(value, (int, float)), name
            assert not isinstance(value, bool), name
            assert math.isfinite(value), name  # json.dumps would write NaN, not JSON
        else:
            assert isinstance(value, kind), name
    assert 0.0 <= row["ordered_share"] <= 1.0
    assert 1.0 <= row["imbalance_mean"] <= row["imbalance_max"] <= shardsim.DEFAULT_SHARDS


@pytest.mark.parametrize(("strategy", "expected"), SIZES.items())
def test_sizes_are_exact(
    rows: dict[str, dict[str, Any]], strategy: str, expected: tuple[str, int, int]
) -> None:
    row = rows[strategy]
    assert (row["bson_type"], row["stored_bytes"], row["payload_bytes"]) == expected


def test_round_trips_per_thousand_ids(rows: dict[str, dict[str, Any]]) -> None:
    # Client-side ids cost nothing beyond the insert; MongoEngine's behaviour (batch 1) one
    # counter round trip per id. The quick run's 20 saves come from the block leased by the
    # warm-up save, so the leased sequences make no call at all.
    for strategy in ("ObjectId", "UUIDv4", "UUIDv7", "Locality spread", "Locality sequential"):
        assert rows[strategy]["round_trips_per_1000"] == 0, strategy
    assert rows["random digits=12"]["round_trips_per_1000"] == 0
    assert rows["sequence batch=1"]["round_trips_per_1000"] == 1_000
    assert rows["sequence batch=1000"]["round_trips_per_1000"] == 0
    assert rows["sequence batch=1000 shards=1000"]["round_trips_per_1000"] == 0


def test_time_order(rows: dict[str, dict[str, Any]]) -> None:
    for strategy in ("ObjectId", "UUIDv7", "Locality sequential", "sequence batch=1"):
        assert rows[strategy]["time_ordered"] is True, strategy
        assert rows[strategy]["ordered_share"] == 1.0
    # 20 random ids in order: 1 chance in 20! (the spread mode's bias makes it likelier there).
    for strategy in ("UUIDv4", "random digits=12"):
        assert rows[strategy]["time_ordered"] is False, strategy


def test_shard_reports_match_the_rows(quick_json: dict[str, Any]) -> None:
    for row, report in zip(quick_json["strategies"], quick_json["shards"], strict=True):
        assert row["imbalance_max"] == report["imbalance_max"]
        assert len(report["windows"]) == compare.QUICK.shard_windows
        assert report["config"]["shards"] == shardsim.DEFAULT_SHARDS
        for window in report["windows"]:
            assert sum(window["shares"]) == pytest.approx(1.0)


def test_table_for_people(capsys: pytest.CaptureFixture[str]) -> None:
    assert _main(["--quick"]) == 0
    captured = capsys.readouterr()
    assert captured.err == ""  # no progress bar: stderr is not a terminal
    lines = captured.out.splitlines()
    assert lines[0].startswith("machine: ")
    assert "--quick: the numbers mean nothing" in lines[1]
    header = lines[3]
    for column in ("strategy", "bytes", "payload", "generate/id", "trips/1k ids", "saves/s"):
        assert column in header
    assert "time-ordered" in header
    assert "shard imbalance" in header
    table = lines[5 : 5 + len(shardsim.STRATEGIES)]
    for line, strategy in zip(table, shardsim.STRATEGIES, strict=True):
        assert line.startswith(strategy)
    object_id = table[0].split()
    assert object_id[1:4] == ["12", "12", "objectId"]
    assert "shard balance (mongoengine_ids.tools.shardsim):" in lines


def test_progress_bar_on_request(capsys: pytest.CaptureFixture[str]) -> None:
    assert _main(["--quick", "--json", "--progress"]) == 0
    captured = capsys.readouterr()
    json.loads(captured.out)  # stdout stays machine-readable
    progress = captured.err.splitlines()
    assert progress[0].startswith("compare [")
    assert progress[-1].endswith(" done")
    total = len(shardsim.STRATEGIES) * (4 + 2) + 1  # quick: 1 generation and 1 save round
    assert progress[-1] == f"compare [{'#' * 30}] {total}/{total} done"
    assert any("shard balance: Locality spread" in line for line in progress)


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_redraws_in_place_on_a_terminal() -> None:
    stream = _Terminal()
    progress = compare.Progress(4, stream, width=4)
    progress.step("a long label")
    progress.step("b")
    progress.close()
    progress.close()  # idempotent
    text = stream.getvalue()
    assert text == (
        "\rcompare [#...] 1/4 a long label"
        "\rcompare [##..] 2/4 b           "  # padded over the longer line before
        "\n"
    )


def test_no_progress_without_a_stream() -> None:
    progress = compare.Progress(2, None)
    progress.step("x")
    progress.close()
    assert progress.done == 1


def test_chart_without_matplotlib_is_a_one_line_usage_error(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Any
) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    monkeypatch.chdir(tmp_path)
    assert compare.main(["--quick", "--chart", "shards.png"]) == 2
    err = capsys.readouterr().err
    assert err == (
        "mongoengine-ids: error: compare: --chart 'shards.png' needs matplotlib: "
        "pip install 'mongoengine-ids[plot]'\n"
    )
    assert list(tmp_path.iterdir()) == []


def test_bad_shard_count_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert compare.main(["--shards", "0"]) == 2
    assert "--shards 0: expected 1 to 10,000" in capsys.readouterr().err
    assert compare.main(["--shards", "9" * 30]) == 2
    assert f"--shards {'9' * 30}: expected 1 to 10,000" in capsys.readouterr().err


def test_run_raises_command_error_for_the_cli() -> None:
    args = argparse.Namespace(
        uri=None, json=False, quick=True, progress=False, chart=None, shards=-1, seed=0
    )
    with pytest.raises(CommandError, match=r"--shards -1") as caught:
        compare.run(args)
    assert caught.value.status == 2


def test_unreachable_server_is_a_command_error() -> None:
    with pytest.raises(CommandError, match=r"cannot use the server at 'mongodb://u:\*\*\*@"):
        compare.compare(uri="mongodb://u:pw@127.0.0.1:9/?serverSelectionTimeoutMS=100", quick=True)


def test_the_chart_path_is_checked_before_the_work(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    def never(**kwargs: Any) -> Any:
        raise AssertionError("compare() ran")

    monkeypatch.setattr(compare, "compare", never)
    chart = str(tmp_path / "missing" / "x.png")

    assert compare.main(["--quick", "--chart", chart]) == 2
    assert capsys.readouterr().err == (
        f"mongoengine-ids: error: compare: --chart {chart!r}: the directory "
        f"{str(tmp_path / 'missing')!r} does not exist\n"
    )


@pytest.mark.parametrize("name", ["shards.svg", "shards.pdf", "shards"])
def test_a_chart_not_named_png_is_a_usage_error_before_the_work(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Any, name: str
) -> None:
    """Probe: ``--chart x.svg`` wrote PNG data into x.svg, after the 20 s of work."""

    def never(**kwargs: Any) -> Any:
        raise AssertionError("compare() ran")

    monkeypatch.setattr(compare, "compare", never)
    monkeypatch.chdir(tmp_path)

    assert compare.main(["--quick", "--chart", name]) == 2
    assert capsys.readouterr().err == (
        f"mongoengine-ids: error: compare: --chart {name!r}: the chart is a PNG: expected a "
        "file name ending in .png\n"
    )
    assert list(tmp_path.iterdir()) == []


def test_a_chart_named_png_in_capitals_is_taken(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # the next check: fails, but after
    monkeypatch.chdir(tmp_path)
    assert compare.main(["--quick", "--chart", "SHARDS.PNG"]) == 2
    assert "--chart 'SHARDS.PNG' needs matplotlib" in capsys.readouterr().err


def test_a_bad_uri_is_a_usage_error_before_the_work(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def never(**kwargs: Any) -> Any:
        raise AssertionError("compare() ran")

    monkeypatch.setattr(compare, "compare", never)

    assert compare.main(["--uri", "mongodb://admin:s3cret@db:99999/x"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(
        "mongoengine-ids: error: compare: --uri 'mongodb://admin:***@db:99999/x' is not a valid "
        "MongoDB URI: Port must be an integer"
    )
    assert "s3cret" not in err


def test_add_subcommand_registers_compare(capsys: pytest.CaptureFixture[str]) -> None:
    parser = argparse.ArgumentParser(prog="mongoengine-ids")
    subparsers = parser.add_subparsers(dest="command", required=True)
    compare.add_subcommand(subparsers)
    args = parser.parse_args(["compare", "--quick", "--json", *URI_ARGS])
    assert args.func is compare.run
    assert args.func(args) == 0
    assert len(json.loads(capsys.readouterr().out)["strategies"]) == len(shardsim.STRATEGIES)
