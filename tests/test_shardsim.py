"""The shard-balance simulation: BSON order, splits, the balancer, each strategy's figures."""

from __future__ import annotations

import datetime as dt
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
from bson.binary import Binary
from bson.objectid import ObjectId

from mongoengine_ids.tools import shardsim
from mongoengine_ids.tools.shardsim import (
    MIN_KEY,
    Burst,
    Chunk,
    ClusterConfig,
    Migration,
    ShardedCollection,
    bson_sort_key,
    make_burst,
    simulate,
)

# -- BSON order --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("lower", "higher"),
    [
        # numbers numerically, not as text ("10" < "9")
        (9, 10),
        (-1, 0),
        (2**40, 2**62),
        (1.5, 2),
        # binary data: length first, then subtype, then bytes
        (Binary(b"\xff", 0), Binary(b"\x00\x00", 0)),
        (Binary(b"\xff" * 16, 3), Binary(b"\x00" * 16, 4)),
        (Binary(b"\x00" * 15 + b"\x01", 4), Binary(b"\x01" + b"\x00" * 15, 4)),
        # a uuid.UUID is stored as Binary subtype 4: ordered by its bytes
        (uuid.UUID(int=1), Binary(b"\x00" * 15 + b"\x02", 4)),
        # ObjectIds by their 12 bytes: the time first
        (ObjectId("5f0000000000000000000000"), ObjectId("600000000000000000000000")),
        (ObjectId("60000000ffffffffff000001"), ObjectId("600000010000000000000000")),
        # across types, MongoDB's type order: numbers < strings < binary < ObjectId < bool < date
        (2**62, "0"),
        ("zzz", Binary(b"", 0)),
        (Binary(b"\xff" * 16, 4), ObjectId("000000000000000000000000")),
        (ObjectId("ffffffffffffffffffffffff"), False),
        (True, dt.datetime(1970, 1, 2, tzinfo=dt.timezone.utc)),
        # strings by their UTF-8 bytes (no collation): upper case before lower case
        ("Z", "a"),
    ],
)
def test_bson_sort_key_orders_as_mongodb(lower: object, higher: object) -> None:
    assert bson_sort_key(lower) < bson_sort_key(higher)
    assert bson_sort_key(lower) > MIN_KEY


def test_bson_sort_key_equates_a_uuid_and_its_stored_form() -> None:
    value = uuid.uuid4()
    assert bson_sort_key(value) == bson_sort_key(Binary(value.bytes, 4))


@pytest.mark.parametrize("value", [{"a": 1}, [1, 2], float("nan"), object()])
def test_bson_sort_key_rejects_what_ids_are_not_made_of(value: object) -> None:
    with pytest.raises(TypeError, match=r"cannot place .* in BSON order"):
        bson_sort_key(value)


# -- configuration -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "error", "message"),
    [
        ({"shards": 0}, ValueError, r"shards=0 must be >= 1"),
        ({"chunk_docs": 1}, ValueError, r"chunk_docs=1 must be >= 2"),
        ({"balancer_interval": -5}, ValueError, r"balancer_interval=-5"),
        ({"threshold_chunks": 2.5}, TypeError, r"threshold_chunks must be an int.*2\.5"),
        ({"shards": True}, TypeError, r"shards must be an int"),
    ],
)
def test_cluster_config_rejects_bad_numbers(
    options: dict[str, object], error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        ClusterConfig(**options)  # type: ignore[arg-type]


def test_threshold_is_counted_in_chunks_of_documents() -> None:
    # MongoDB 6.0: 3 chunk sizes.
    assert ClusterConfig().threshold_docs == 3 * 1_000
    assert ClusterConfig(chunk_docs=10, threshold_chunks=2).threshold_docs == 20


# -- chunk splits ------------------------------------------------------------------------------


def _keys(*values: int) -> list[tuple[object, ...]]:
    return [bson_sort_key(value) for value in values]


def test_a_chunk_splits_at_its_median_once_it_passes_the_size() -> None:
    collection = ShardedCollection(ClusterConfig(shards=2, chunk_docs=4))
    for key in _keys(5, 1, 4, 2):
        assert collection.insert(key) == (0, 0)
    assert collection.chunks() == [Chunk(0, MIN_KEY, 4, 0)]  # at the size: not past it
    assert collection.insert(bson_sort_key(3)) == (0, 0)  # the write lands, then the split
    assert collection.chunks() == [
        Chunk(0, MIN_KEY, 2, 0),  # 1, 2
        Chunk(1, bson_sort_key(3), 3, 0),  # 3, 4, 5
    ]
    assert collection.splits == 1
    assert collection.insert(bson_sort_key(0)) == (0, 0)
    assert collection.insert(bson_sort_key(100)) == (0, 1)
    assert collection.shard_docs() == (7, 0)


def test_a_chunk_of_one_repeated_key_cannot_split() -> None:
    collection = ShardedCollection(ClusterConfig(shards=2, chunk_docs=2))
    for key in _keys(7, 7, 7, 7):
        collection.insert(key)
    assert collection.chunks() == [Chunk(0, MIN_KEY, 4, 0)]
    assert collection.splits == 0


def test_repeated_keys_never_straddle_a_split() -> None:
    collection = ShardedCollection(ClusterConfig(shards=2, chunk_docs=4))
    for key in _keys(1, 2, 2, 2, 3):
        collection.insert(key)
    # The median (a 2) would put 2s on both sides: the split moves to the first 3.
    assert collection.chunks() == [Chunk(0, MIN_KEY, 4, 0), Chunk(1, bson_sort_key(3), 1, 0)]


# -- the balancer ------------------------------------------------------------------------------


def _chunks_of_one(collection: ShardedCollection, count: int) -> None:
    """With chunk_docs=2, writing 1..count in order leaves chunks [1] [2] ... [count-1, count]."""
    for key in _keys(*range(1, count + 1)):
        collection.insert(key)


def test_the_balancer_moves_lowest_chunks_from_most_to_least_loaded_until_within_threshold() -> (
    None
):
    collection = ShardedCollection(ClusterConfig(shards=3, chunk_docs=2, threshold_chunks=1))
    _chunks_of_one(collection, 6)
    assert [chunk.docs for chunk in collection.chunks()] == [1, 1, 1, 1, 2]
    assert collection.shard_docs() == (6, 0, 0)
    # Threshold: 1 chunk of 2 documents. A shard takes part in one migration per round, so
    # each round moves one chunk off shard 0, the donor, to the emptiest shard (ties: lowest).
    assert collection.balance_round() == [Migration(0, 1, 0, 1)]
    assert collection.balance_round() == [Migration(1, 1, 0, 2)]
    assert collection.balance_round() == [Migration(2, 1, 0, 1)]
    assert collection.balance_round() == [Migration(3, 1, 0, 2)]
    assert collection.balance_round() == []  # 2, 2, 2: balanced
    assert collection.shard_docs() == (2, 2, 2)
    assert collection.shard_chunks() == (1, 2, 2)
    assert [chunk.shard for chunk in collection.chunks()] == [1, 2, 1, 2, 0]
    assert collection.migrations == 4


def test_balance_runs_rounds_until_nothing_moves() -> None:
    collection = ShardedCollection(ClusterConfig(shards=3, chunk_docs=2, threshold_chunks=1))
    _chunks_of_one(collection, 6)
    assert collection.balance() == 4
    assert collection.shard_docs() == (2, 2, 2)


def test_the_balancer_waits_for_the_threshold() -> None:
    collection = ShardedCollection(ClusterConfig(shards=2, chunk_docs=2, threshold_chunks=2))
    _chunks_of_one(collection, 3)
    assert collection.shard_docs() == (3, 0)
    assert collection.balance_round() == []  # 3 apart, the threshold is 4
    collection.insert(bson_sort_key(4))
    assert collection.balance_round() == [Migration(0, 1, 0, 1)]  # 4 apart: move
    assert collection.shard_docs() == (3, 1)


def test_a_round_makes_at_most_one_migration_per_shard() -> None:
    collection = ShardedCollection(ClusterConfig(shards=4, chunk_docs=2, threshold_chunks=1))
    _chunks_of_one(collection, 8)
    # Shard 0 is the only donor: one migration, though three shards are empty.
    assert collection.balance_round() == [Migration(0, 1, 0, 1)]
    # Later, two donors and two recipients: two migrations in one round.
    collection.balance()
    for key in _keys(*range(100, 140)):
        collection.insert(key)
    docs_before = collection.shard_docs()
    moved = collection.balance_round()
    assert 1 <= len(moved) <= 2
    involved = [migration.donor for migration in moved] + [m.recipient for m in moved]
    assert len(involved) == len(set(involved))
    assert sum(collection.shard_docs()) == sum(docs_before)


# -- the simulation on a hand-made feed --------------------------------------------------------


def test_simulate_reports_shares_imbalance_chunks_and_interleaving_exactly() -> None:
    config = ClusterConfig(shards=2, chunk_docs=2, balancer_interval=1_000, threshold_chunks=1)
    # History 10, 20, 30, 40 makes chunks [10] [20] [30, 40] on shard 0; balancing moves the
    # two lowest to shard 1: keys below 30 live on shard 1, the rest on shard 0.
    burst = Burst.of([[1, 25, 35, 45], [50, 60, 5, 80]], history=[10, 20, 30, 40], strategy="ints")
    report = simulate(burst, config)
    first, second = report.windows
    assert first.shares == (0.5, 0.5)  # 35 and 45 on shard 0; 1 and 25 on shard 1
    assert first.imbalance == 1.0
    assert second.shares == (0.75, 0.25)  # 5 is the only one below 30
    assert second.imbalance == 1.5
    # Window 0 spans 1..45, which holds the 5 of window 1; window 1 spans 5..80, which holds
    # 25, 35 and 45 of window 0.
    assert first.interleaving == 0.25
    assert second.interleaving == 0.75
    assert first.chunks_touched == 4
    assert report.history == 4
    assert report.strategy == "ints"
    assert sum(report.shard_docs) == 12


def test_simulate_needs_non_empty_windows() -> None:
    with pytest.raises(ValueError, match=r"window sizes: \[2, 0\]"):
        simulate(Burst.of([[1, 2], []]))
    with pytest.raises(ValueError, match=r"window sizes: \[\]"):
        simulate(Burst.of([]))


# -- bursts ------------------------------------------------------------------------------------


def test_make_burst_rejects_unknown_strategies_and_bad_counts() -> None:
    with pytest.raises(ValueError, match=r"strategy='snowflake' is unknown"):
        make_burst("snowflake")
    with pytest.raises(ValueError, match=r"windows=20 exceeds ids=10"):
        make_burst("ObjectId", ids=10, windows=20)
    with pytest.raises(ValueError, match=r"history=-1"):
        make_burst("ObjectId", history=-1)
    with pytest.raises(TypeError, match=r"processes must be an int"):
        make_burst("ObjectId", processes="4")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"history must be an int, not str: '5'"):
        make_burst("ObjectId", history="5")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"start_ms must be an int, not str: 'x'"):
        make_burst("UUIDv4", ids=10, windows=2, start_ms="x")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"start_ms=-5 leaves no room for the history"):
        make_burst("ObjectId", ids=10, windows=2, start_ms=-5)


def test_run_rejects_one_name_and_a_bad_config() -> None:
    with pytest.raises(TypeError, match=r"not one name: 'UUIDv4' \(write \['UUIDv4'\]\)"):
        shardsim.run("UUIDv4", ids=10, windows=2)
    with pytest.raises(TypeError, match=r"config must be a ClusterConfig, not 'x'"):
        shardsim.run(["UUIDv4"], ids=10, windows=2, config="x")  # type: ignore[arg-type]


@pytest.mark.parametrize("strategy", shardsim.STRATEGIES)
def test_make_burst_is_deterministic_given_a_seed(strategy: str) -> None:
    options = {"ids": 2_000, "windows": 4, "history": 500}
    first = make_burst(strategy, seed=7, **options)
    assert first == make_burst(strategy, seed=7, **options)
    assert [len(window) for window in first.windows] == [500] * 4
    assert len(first.history) == 500
    every = [*first.history, *(value for window in first.windows for value in window)]
    assert len(set(every)) == len(every)  # ids are unique
    config = ClusterConfig(chunk_docs=100, balancer_interval=100)
    assert simulate(first, config) == simulate(first, config)


@pytest.mark.parametrize(
    "strategy", [s for s in shardsim.STRATEGIES if not s.startswith("sequence")]
)
def test_a_different_seed_gives_different_ids(strategy: str) -> None:
    assert make_burst(strategy, ids=100, windows=1, history=0, seed=1) != make_burst(
        strategy, ids=100, windows=1, history=0, seed=2
    )


def test_stored_forms_are_what_the_fields_write() -> None:
    def first(strategy: str) -> object:
        return make_burst(strategy, ids=10, windows=1, history=0).windows[0][0]

    assert isinstance(first("ObjectId"), ObjectId)
    for strategy in ("UUIDv4", "UUIDv7", "Locality spread", "Locality sequential"):
        value = first(strategy)
        assert isinstance(value, Binary)
        assert (value.subtype, len(value)) == (4, 16)
    for strategy, version in (("UUIDv4", 4), ("UUIDv7", 7)):
        value = first(strategy)
        assert isinstance(value, Binary)
        assert uuid.UUID(bytes=bytes(value)).version == version
    assert first("sequence batch=1") == 1
    assert 10**11 <= first("random digits=12") < 10**12  # type: ignore[operator]


def test_windows_follow_the_injected_clock() -> None:
    burst = make_burst("ObjectId", ids=600, windows=3, history=0, window_ms=60_000)
    seconds = [
        {ObjectId(value.binary).generation_time.timestamp() for value in window}
        for window in burst.windows
    ]
    start = shardsim.DEFAULT_START_MS // 1000
    for index, window_seconds in enumerate(seconds):
        assert min(window_seconds) >= start + 60 * index
        assert max(window_seconds) < start + 60 * (index + 1)


# -- the expectations, asserted as ranges ---------------------------------------------
# Default burst: 4 shards, 100,000 ids in 10 one-minute windows from 4 writers, after 50,000.
# Measured with seed 0: ObjectId, UUIDv7, sequences and Locality sequential 4.00x in every
# window; Locality spread 1.04x-1.07x; UUIDv4 and random 1.02x-1.10x.


@pytest.fixture(scope="module")
def reports() -> dict[str, shardsim.ShardReport]:
    return {
        report.strategy: report
        for report in shardsim.run(
            [
                "ObjectId",
                "UUIDv4",
                "Locality spread",
                "Locality sequential",
                "sequence batch=1",
                "sequence batch=1000",
                "random digits=12",
            ]
        )
    }


@pytest.mark.parametrize("strategy", ["ObjectId", "sequence batch=1", "sequence batch=1000"])
def test_time_ordered_ids_put_nearly_every_write_of_a_window_on_one_shard(
    reports: dict[str, shardsim.ShardReport], strategy: str
) -> None:
    report = reports[strategy]
    for window in report.windows:
        assert window.top_share >= 0.9
        assert 3.6 <= window.imbalance <= 4.0


@pytest.mark.parametrize("strategy", ["Locality spread", "UUIDv4", "random digits=12"])
def test_spread_ids_stay_within_1_2x_of_the_ideal(
    reports: dict[str, shardsim.ShardReport], strategy: str
) -> None:
    report = reports[strategy]
    assert 1.0 <= report.imbalance_max <= 1.2
    for window in report.windows:
        assert all(0.2 <= share <= 0.3 for share in window.shares)
        assert window.interleaving > 0.95  # a window's ids cover the whole key space


def test_locality_sequential_keeps_the_ids_of_a_window_together(
    reports: dict[str, shardsim.ShardReport],
) -> None:
    report = reports["Locality sequential"]
    for window in report.windows:
        assert window.interleaving < 0.01  # no other window's ids among this one's
        assert window.top_share >= 0.9  # ...so one shard takes the window
    spread = reports["Locality spread"]
    assert report.windows[-1].chunks_touched * 10 < spread.windows[-1].chunks_touched


# -- output ------------------------------------------------------------------------------------


def test_tables_and_data(reports: dict[str, shardsim.ShardReport]) -> None:
    summary = shardsim.format_summary(list(reports.values()))
    lines = summary.splitlines()
    assert lines[0].split()[:3] == ["strategy", "imbalance", "max"]
    assert len(lines) == 2 + len(reports)
    assert any(line.startswith("ObjectId") and "4.00x" in line for line in lines)
    windows = shardsim.format_windows(reports["ObjectId"]).splitlines()
    assert len(windows) == 2 + 10
    assert "shard 3" in windows[0]
    data = reports["Locality spread"].as_dict()
    assert data["config"] == {
        "shards": 4,
        "chunk_docs": 1_000,
        "balancer_interval": 1_000,
        "threshold_chunks": 3,
    }
    assert len(data["windows"]) == 10
    assert sum(data["windows"][0]["shares"]) == pytest.approx(1.0)
    assert data["imbalance_max"] == reports["Locality spread"].imbalance_max


def test_plot_without_matplotlib_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib -> ImportError
    report = simulate(Burst.of([[1, 2]]), ClusterConfig(chunk_docs=2))
    with pytest.raises(ImportError, match=r"pip install 'mongoengine-ids\[plot\]'") as caught:
        shardsim.plot([report], tmp_path / "chart.png")
    assert isinstance(caught.value, shardsim.PlottingUnavailableError)
    assert not (tmp_path / "chart.png").exists()


def test_plot_refuses_a_file_name_of_another_format(tmp_path: Path) -> None:
    """Probe: ``chart.svg`` got PNG data. Refused before matplotlib is needed."""
    report = simulate(Burst.of([[1, 2]]), ClusterConfig(chunk_docs=2))
    with pytest.raises(ValueError, match=r"the chart is a PNG: expected a file name ending in"):
        shardsim.plot([report], tmp_path / "chart.svg")
    assert list(tmp_path.iterdir()) == []


def test_plot_writes_a_png(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    reports = shardsim.run(["ObjectId", "Locality spread"], ids=2_000, history=500)
    path = shardsim.plot(reports, tmp_path / "chart.png")
    assert path.read_bytes().startswith(b"\x89PNG\r\n\x1a\n")


def test_plot_needs_a_report(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="at least one report"):
        shardsim.plot([], tmp_path / "chart.png")


# -- the chart (issue 13: what a person sees); skipped without matplotlib, as in CI -------------


def _flat(text: str) -> str:
    return " ".join(text.split())  # the title and the caption are wrapped to the figure's width


@pytest.fixture(scope="module")
def chart() -> tuple[Any, Any]:
    """Two strategies, 4 shards, 4 windows of 500 writes: the figure, drawn, and its renderer."""
    pytest.importorskip("matplotlib")
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    reports = shardsim.run(["ObjectId", "Locality spread"], ids=2_000, windows=4, history=500)
    figure = shardsim.chart_figure(reports)
    canvas = FigureCanvasAgg(figure)
    canvas.draw()  # lays out tick labels and the legend, as savefig does
    return figure, canvas.get_renderer()


def _panels(figure: Any) -> list[Any]:
    return [ax for ax in figure.axes if ax.get_visible() and ax.axison]


def test_chart_title_says_what_was_simulated(chart: tuple[Any, Any]) -> None:
    figure, renderer = chart
    # the suptitle is one of the figure's texts (Figure.get_suptitle is matplotlib >= 3.8 only)
    (title,) = [text for text in figure.texts if "range-sharded" in text.get_text()]
    assert _flat(title.get_text()) == (
        "Where each window's writes went: a collection range-sharded on its id, 4 shards, "
        "windows of 500 writes"
    )
    box = title.get_window_extent(renderer)
    for ax in _panels(figure):
        assert box.y0 > ax.get_tightbbox(renderer).y1  # above every panel and its title


def test_chart_has_a_labelled_ideal_share_line_in_every_panel(chart: tuple[Any, Any]) -> None:
    figure, _ = chart
    panels = _panels(figure)
    assert len(panels) == 2
    for ax in panels:
        ideal = [line for line in ax.get_lines() if line.get_label().startswith("ideal share")]
        assert len(ideal) == 1
        assert ideal[0].get_label() == "ideal share, 1/4"
        assert list(ideal[0].get_ydata()) == [0.25, 0.25]
    (legend,) = figure.legends
    assert "ideal share, 1/4" in [text.get_text() for text in legend.get_texts()]


def test_chart_window_ticks_are_integers(chart: tuple[Any, Any]) -> None:
    figure, _ = chart
    for ax in _panels(figure):
        low, high = ax.get_xlim()
        shown = [tick for tick in ax.get_xticks() if low <= tick <= high]
        assert shown == [0, 1, 2, 3]
        labels = [label.get_text() for label in ax.get_xticklabels() if label.get_text()]
        assert labels == ["0", "1", "2", "3"]


def test_chart_legend_covers_no_panel_and_stays_on_the_figure(chart: tuple[Any, Any]) -> None:
    figure, renderer = chart
    (legend,) = figure.legends
    box = legend.get_window_extent(renderer)
    assert [text.get_text() for text in legend.get_texts()] == [
        "ideal share, 1/4",
        "shard 0",
        "shard 1",
        "shard 2",
        "shard 3",
    ]
    for ax in _panels(figure):
        # not only the data area: the panel's title and tick labels too
        assert not box.overlaps(ax.get_tightbbox(renderer))
    assert figure.bbox.contains(box.x0, box.y0)
    assert figure.bbox.contains(box.x1, box.y1)


def test_chart_caption_explains_the_imbalance_under_the_panels(chart: tuple[Any, Any]) -> None:
    figure, renderer = chart
    (caption,) = [text for text in figure.texts if "Imbalance" in text.get_text()]
    words = _flat(caption.get_text())
    assert "largest shard's share of a window divided by that ideal share" in words
    assert "1.00x is perfectly even, 4.00x means every write of the window went to one shard" in (
        words
    )
    box = caption.get_window_extent(renderer)
    for ax in _panels(figure):
        assert box.y1 < ax.get_tightbbox(renderer).y0  # below every panel, labels included
    assert figure.bbox.contains(box.x0, box.y0)
    assert figure.bbox.contains(box.x1, box.y1)


def test_chart_legend_names_at_most_eight_shards() -> None:
    pytest.importorskip("matplotlib")
    many = simulate(make_burst("UUIDv4", ids=1_000, windows=2, history=0), ClusterConfig(shards=16))
    figure = shardsim.chart_figure([many])
    (legend,) = figure.legends
    labels = [text.get_text() for text in legend.get_texts()]
    assert labels[0] == "ideal share, 1/16"
    assert labels[1:9] == [f"shard {shard}" for shard in range(8)]
    assert labels[9] == "... shards 8-15\n(colours repeat)"


def test_chart_title_and_caption_without_matplotlib() -> None:
    # Text only: these run in CI too, where matplotlib is not installed.
    one = simulate(Burst.of([[1, 2], [3, 4, 5]]), ClusterConfig(shards=1, chunk_docs=2))
    assert shardsim.chart_title([one]) == (
        "Where each window's writes went: a collection range-sharded on its id, "
        "1 shard, windows of 2-3 writes"
    )
    caption = shardsim.chart_caption([one])
    assert "the ideal share, 1/1 of a window's writes per shard" in caption
    assert "1.00x means every write of the window went to one shard" in caption
