"""Shared pieces of the benchmark: interleaved timing, result rows, the table and JSON.

The API the group modules (``locality``, ``sequence``, ``random_unique``) build on; it is kept
stable so that they can be written independently.

Writing a group
    A group is a module ``mongoengine_ids.tools.bench.<name>`` listed in
    :data:`mongoengine_ids.tools.bench.GROUPS`, exposing::

        def run(*, quick: bool, uri: str | None) -> list[Result]: ...

    ``run`` **prints nothing**: it returns its rows in the order they should be shown, and
    :func:`mongoengine_ids.tools.bench.main` prints the machine, then one table per group (or all
    rows as one JSON document with ``--json``). ``quick=True`` asks for tiny iteration counts
    (tests and CI smoke runs: the numbers are meaningless, only the rows matter). ``uri`` is a
    MongoDB URI for the database parts, or None for mongomock; :func:`database` connects
    either (models declare ``meta = {"db_alias": BENCH_ALIAS}``). For a problem the user can
    fix (a server that does not answer, a missing optional package) raise :class:`BenchError`:
    the command prints its message as one line and exits with status 1.

Timing
    :func:`measure` takes named :data:`Trial` functions (a trial performs ``n`` operations and
    returns the seconds they took, its own set-up left out), runs every one of them once per
    round, in an order rotated each round, and keeps :attr:`Timing.samples` (seconds per
    operation, one per round). On a shared 2-core machine bursts of load from other processes
    only ever make an operation look slower, and interleaving puts every candidate and its
    baselines through the same bursts; the default statistic is therefore the minimum over
    rounds (``statistic="median"`` is available for operations whose cost varies by itself,
    such as database writes). :func:`loop` turns a zero-argument callable into a trial.

    A ratio is only meaningful between timings from the **same** :func:`measure` call.

    :func:`measure_alternating` takes :data:`Step` functions instead (one operation each) and
    lets the candidates take turns operation by operation: for ratios that must hold within a
    few percent on a machine whose speed changes from second to second.

Rows
    :class:`Result` is one row: a named candidate, its seconds per operation, and optionally
    the baseline it is compared with, the ratio (candidate / baseline), the target as text and
    whether it is met. Build rows with :func:`baseline_row` and :func:`compare_row`. A
    candidate compared with two baselines is two rows of the same name.

Output
    :func:`format_table` (aligned columns, ratios written ``0.48x``), :func:`machine_info`,
    :func:`to_json` (``{"machine": {...}, "results": [Result.as_dict(), ...]}``).

Example::

    timings = measure({"mine": loop(make_id), "uuid4": loop(uuid.uuid4)}, number=10_000, rounds=7)
    rows = [
        baseline_row("demo", "uuid4", timings["uuid4"]),
        compare_row("demo", "mine", timings, "uuid4", max_ratio=0.5),
    ]
    print(format_table(rows))
"""

from __future__ import annotations

import contextlib
import gc
import itertools
import json
import math
import os
import platform
import shutil
import statistics
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import IO, Any, Final, Literal

from .. import uri as _uri

#: A timed batch: perform ``n`` operations, return the seconds they took (set-up excluded).
Trial = Callable[[int], float]
#: One operation, the ``i``-th of its round: perform it, return the seconds to count (its own
#: set-up, such as making the document, left out). See :func:`measure_alternating`.
Step = Callable[[int], float]
Statistic = Literal["min", "median"]

#: The MongoEngine connection alias of the benchmark's models (see :func:`database`).
BENCH_ALIAS: Final = "mongoengine_ids_bench"

#: The ``format`` version of :func:`to_json`'s document; bumped if a key changes meaning.
JSON_FORMAT_VERSION: Final = 1


@dataclass(frozen=True)
class Timing:
    """Seconds per operation of one candidate, one sample per round.

    Attributes:
        samples: seconds per operation measured in each round, in round order.
        statistic: how :attr:`seconds` summarises the samples.
        number: operations per round.
    """

    samples: tuple[float, ...]
    statistic: Statistic
    number: int

    @property
    def seconds(self) -> float:
        """The summary: the minimum or the median of :attr:`samples`."""
        if self.statistic == "min":
            return min(self.samples)
        return statistics.median(self.samples)


@dataclass(frozen=True)
class Result:
    """One row of the benchmark.

    Attributes:
        group: the group module that produced the row (``"locality"``, ...).
        name: the candidate measured, e.g. ``"LocalityUUIDGenerator().generate()"``.
        seconds: seconds per operation.
        baseline: the name of the row it is compared with, or None for a plain measurement.
        ratio: ``seconds / baseline seconds``, from the same interleaved run; None without a
            baseline.
        target: the target in words, e.g. ``"<= 0.50x"``; None when only reported.
        met: whether the target is met; None without a target.
        note: anything a reader needs to interpret the row (database, batch size, ...).
    """

    group: str
    name: str
    seconds: float
    baseline: str | None = None
    ratio: float | None = None
    target: str | None = None
    met: bool | None = None
    note: str = ""

    def as_dict(self) -> dict[str, Any]:
        """The row as JSON-ready data (the keys are the attribute names)."""
        return asdict(self)


# -- progress -----------------------------------------------------------------------------------

#: Told what :func:`measure` and :func:`measure_alternating` are doing, round by round, between
#: timed rounds (see :func:`reporting`); None when nobody listens.
_listener: Callable[[str], None] | None = None


@contextlib.contextmanager
def reporting(listener: Callable[[str], None]) -> Iterator[None]:
    """Tell ``listener`` which round of which candidates the timing functions run, meanwhile.

    The groups' ``run()`` print nothing; this is how ``mongoengine-ids bench`` shows progress
    on a terminal without them knowing. ``listener`` is called between rounds, never inside a
    timed trial.
    """
    global _listener
    previous, _listener = _listener, listener
    try:
        yield
    finally:
        _listener = previous


def _report(names: Sequence[str], round_index: int, warmup: int, rounds: int) -> None:
    listener = _listener
    if listener is not None:
        done = round_index + warmup + 1
        listener(f"round {done}/{warmup + rounds}: {', '.join(names)}")


class StatusLine:
    """One line of progress, redrawn in place on a terminal; nothing on anything else.

    Args:
        stream: where to draw (stderr); nothing is drawn unless it is a terminal, so piped or
            redirected output gets nothing extra.
    """

    def __init__(self, stream: IO[str] | None) -> None:
        self._stream = stream if stream is not None and stream.isatty() else None
        self._shown = 0

    def show(self, text: str) -> None:
        """Replace the line with ``text``, cut to the terminal's width."""
        stream = self._stream
        if stream is None:
            return
        text = text[: max(shutil.get_terminal_size().columns - 1, 10)]
        stream.write(f"\r{text}{' ' * max(self._shown - len(text), 0)}")
        stream.flush()
        self._shown = len(text)

    def clear(self) -> None:
        """Erase the line, so that what is printed next starts on a clean one."""
        stream = self._stream
        if stream is not None and self._shown:
            stream.write(f"\r{' ' * self._shown}\r")
            stream.flush()
            self._shown = 0


#: Seconds a simulated server has spent on calls so far (:func:`add_server_time`).
_server_seconds = [0.0]


def clock() -> float:
    """:func:`time.perf_counter`, stopped while a simulated server works: behind the simulated
    network (:class:`._latency.CountingLatency`) a call costs its round trip, which includes
    the server's work; mongomock's own work, which is no server's (a linear scan per unique
    index, a copy of every document), is left out of every timing (review BP: it was counted,
    and took most of a bulk insert's time on both sides of its ratio)."""
    return time.perf_counter() - _server_seconds[0]


def add_server_time(seconds: float) -> None:
    """Stop :func:`clock` for ``seconds``: a simulated server spent them on a call."""
    _server_seconds[0] += seconds


def loop(func: Callable[[], object]) -> Trial:
    """A trial calling ``func()`` ``n`` times; the loop's own cost is in every candidate alike."""

    def trial(n: int) -> float:
        calls = itertools.repeat(None, n)
        start = clock()
        for _ in calls:
            func()
        return clock() - start

    return trial


#: Makes ``count`` new, unsaved documents of ``model`` (each group fills in its own fields).
NewDocuments = Callable[[Any, int], list[Any]]


def clear(model: Any) -> None:
    """Empty ``model``'s collection before a timed round.

    ``delete_many``, not ``drop_collection()``: dropping forgets the cached collection, and the
    next access (inside the timed loop) would check the indexes again. An empty collection also
    keeps mongomock's linear scans from charging later rounds more than earlier ones.
    """
    model._get_collection().delete_many({})


def save_trial(model: Any, new_documents: NewDocuments) -> Trial:
    """Save ``n`` new documents into an emptied collection; time the saves only."""

    def trial(n: int) -> float:
        clear(model)
        documents = new_documents(model, n)  # built outside the clock: save() is measured
        start = clock()
        for document in documents:
            document.save()
        return clock() - start

    return trial


def insert_trial(model: Any, new_documents: NewDocuments, bulk_size: int) -> Trial:
    """``n`` bulk inserts of ``bulk_size`` new documents, each into an emptied collection."""

    def trial(n: int) -> float:
        elapsed = 0.0
        for _ in range(n):
            clear(model)
            documents = new_documents(model, bulk_size)
            start = clock()
            model.objects.insert(documents, load_bulk=False)
            elapsed += clock() - start
        return elapsed

    return trial


def measure(
    trials: Mapping[str, Trial],
    *,
    number: int,
    rounds: int,
    warmup: int = 1,
    statistic: Statistic = "min",
    disable_gc: bool = True,
) -> dict[str, Timing]:
    """Time every trial ``rounds`` times, interleaved, ``number`` operations per round.

    Args:
        trials: the candidates and their baselines, by name.
        number: operations per round for each trial.
        rounds: rounds; each runs every trial once, in an order rotated by one each round so
            that no trial always runs first (after a set-up) or last.
        warmup: untimed rounds first (imports, caches, first collection access).
        statistic: how :attr:`Timing.seconds` summarises the rounds.
        disable_gc: switch the cyclic garbage collector off while a trial runs, as
            :mod:`timeit` does: a collection triggered by one trial's garbage would otherwise
            be charged to whichever trial happens to run next.

    Returns:
        A :class:`Timing` per name, in the order of ``trials``.

    Raises:
        ValueError: ``number`` or ``rounds`` is below 1, ``warmup`` below 0, or no trials.
    """
    if not trials:
        raise ValueError("measure() needs at least one trial")
    _check_counts(number, rounds, warmup)
    names = list(trials)
    samples: dict[str, list[float]] = {name: [] for name in names}
    for round_index in range(-warmup, rounds):
        _report(names, round_index, warmup, rounds)
        shift = round_index % len(names)
        for name in names[shift:] + names[:shift]:
            elapsed = _run_trial(trials[name], number, disable_gc=disable_gc)
            if round_index >= 0:
                samples[name].append(elapsed / number)
    return {name: Timing(tuple(samples[name]), statistic, number) for name in names}


def measure_alternating(
    steps: Mapping[str, Step],
    *,
    number: int,
    rounds: int,
    warmup: int = 1,
    statistic: Statistic = "median",
    disable_gc: bool = True,
) -> dict[str, Timing]:
    """Like :func:`measure`, but the candidates take turns one operation at a time.

    :func:`measure` runs each trial's whole batch in turn. On a shared virtual machine the speed
    can change by half from one second to the next, so two batches run one after the other may
    meet different machines: the ratio of a candidate's round to its baseline's then moves by
    +-20% (seen on the 2-core development machine). Here operation ``i`` of every step runs
    before operation ``i + 1`` of any, in an order rotated by one each operation, so each round
    puts every step through the same spells: the ratio holds even when the times do not (same
    machine: rounds' ratios within +-3%).

    Args:
        steps: the candidates and their baselines, by name.
        number: operations per round for each step.
        rounds: timed rounds.
        warmup: untimed rounds first.
        statistic: how :attr:`Timing.seconds` summarises the rounds.
        disable_gc: switch the cyclic garbage collector off during a round, as :func:`measure`
            does.

    Returns:
        A :class:`Timing` per name, in the order of ``steps``.

    Raises:
        ValueError: ``number`` or ``rounds`` is below 1, ``warmup`` below 0, or no steps.
    """
    if not steps:
        raise ValueError("measure_alternating() needs at least one step")
    _check_counts(number, rounds, warmup)
    names = list(steps)
    samples: dict[str, list[float]] = {name: [] for name in names}
    for round_index in range(-warmup, rounds):
        _report(names, round_index, warmup, rounds)
        totals = dict.fromkeys(names, 0.0)
        with _collector_off(disable_gc):
            for index in range(number):
                shift = index % len(names)
                for name in names[shift:] + names[:shift]:
                    totals[name] += steps[name](index)
        if round_index >= 0:
            for name in names:
                samples[name].append(totals[name] / number)
    return {name: Timing(tuple(samples[name]), statistic, number) for name in names}


def _check_counts(number: int, rounds: int, warmup: int) -> None:
    if number < 1 or rounds < 1 or warmup < 0:
        raise ValueError(
            f"number={number!r} and rounds={rounds!r} must be >= 1 and warmup={warmup!r} >= 0"
        )


@contextlib.contextmanager
def _collector_off(disable_gc: bool) -> Iterator[None]:
    """Switch the cyclic garbage collector off for the block (if ``disable_gc``), then back to
    how it was."""
    was_enabled = gc.isenabled()
    if disable_gc:
        gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def _run_trial(trial: Trial, number: int, *, disable_gc: bool) -> float:
    with _collector_off(disable_gc):
        return trial(number)


def baseline_row(group: str, name: str, timing: Timing, *, note: str = "") -> Result:
    """A row that is only measured: a baseline, or a candidate without a comparison."""
    return Result(group=group, name=name, seconds=timing.seconds, note=note)


def compare_row(
    group: str,
    name: str,
    timings: Mapping[str, Timing],
    baseline: str,
    *,
    max_ratio: float | None = None,
    label: str | None = None,
    note: str = "",
) -> Result:
    """A row comparing ``timings[name]`` with ``timings[baseline]`` (same :func:`measure` run).

    Args:
        group: the group module producing the row.
        name: the key of the candidate in ``timings``.
        timings: the result of one :func:`measure` call.
        baseline: the key of the baseline in ``timings``.
        max_ratio: the target, if any: the candidate may take at most this many times the
            baseline's time.
        label: the row's name if not ``name``; the baseline keeps its key as its name.
        note: as :attr:`Result.note`.

    Raises:
        KeyError: ``name`` or ``baseline`` is not in ``timings``.
    """
    seconds = timings[name].seconds
    ratio = seconds / timings[baseline].seconds
    return Result(
        group=group,
        name=label or name,
        seconds=seconds,
        baseline=baseline,
        ratio=ratio,
        target=None if max_ratio is None else f"<= {format_ratio(max_ratio)}",
        met=None if max_ratio is None else ratio <= max_ratio,
        note=note,
    )


# -- output -------------------------------------------------------------------------------------


def format_ratio(ratio: float) -> str:
    """``0.4812`` -> ``"0.48x"``."""
    return f"{ratio:.2f}x"


def format_seconds(seconds: float) -> str:
    """Seconds per operation to 3 significant digits: ``"0.659 us"``, ``"49.9 us"``, ``"20.4 ms"``.

    Anything under a millisecond is written in microseconds, so that the id generators and
    their baselines line up in one unit.
    """
    if not math.isfinite(seconds):
        return str(seconds)
    unit, scale = "us", 1e-6
    for larger_unit, larger_scale in (("s", 1.0), ("ms", 1e-3)):
        if seconds >= larger_scale:
            unit, scale = larger_unit, larger_scale
            break
    value = seconds / scale
    decimals = 0 if value >= 100 else 1 if value >= 10 else 2 if value >= 1 else 3
    return f"{value:.{decimals}f} {unit}"


_HEADERS: Final = ("candidate", "time/op", "baseline", "ratio", "target", "met", "note")


def format_table(results: Sequence[Result]) -> str:
    """The rows as an aligned text table (no trailing newline); times right-aligned."""
    rows = [
        (
            result.name,
            format_seconds(result.seconds),
            result.baseline or "",
            "" if result.ratio is None else format_ratio(result.ratio),
            result.target or "",
            "" if result.met is None else ("yes" if result.met else "NO"),
            result.note,
        )
        for result in results
    ]
    widths = [max(len(row[i]) for row in [_HEADERS, *rows]) for i in range(len(_HEADERS))]
    right_aligned = {1, 3}

    def line(cells: Sequence[str]) -> str:
        text = "  ".join(
            cell.rjust(width) if i in right_aligned else cell.ljust(width)
            for i, (cell, width) in enumerate(zip(cells, widths, strict=True))
        )
        return text.rstrip()

    rule = "  ".join("-" * width for width in widths)
    return "\n".join([line(_HEADERS), rule, *(line(row) for row in rows)])


def machine_info() -> dict[str, Any]:
    """Platform, Python and CPU count: the context every number depends on."""
    return {
        "platform": platform.platform(),
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "cpus": os.cpu_count(),
    }


def format_machine(info: Mapping[str, Any]) -> str:
    """One line: ``machine: Linux-...; CPython 3.11.9; 2 CPUs``."""
    return f"machine: {info['platform']}; {info['python']}; {info['cpus']} CPUs"


def to_json(results: Sequence[Result], *, machine: Mapping[str, Any] | None = None) -> str:
    """All rows as one JSON document: ``{"format", "machine", "results": [...]}``."""
    document = {
        "format": JSON_FORMAT_VERSION,
        "machine": dict(machine if machine is not None else machine_info()),
        "results": [result.as_dict() for result in results],
    }
    return json.dumps(document, indent=2)


# -- database -----------------------------------------------------------------------------------


class BenchError(RuntimeError):
    """A problem the user can fix (no mongomock, an unreachable server); printed as one line."""


#: Said when the benchmark runs on mongomock (no ``--uri``) and it is not installed.
NEEDS_MONGOMOCK: Final = (
    "without --uri the benchmark needs mongomock: pip install 'mongoengine-ids[demo]' "
    "(or give --uri mongodb://HOST to use a server)"
)


def require_mongomock() -> Any:
    """The ``mongomock`` module, for the benchmark's runs without a server.

    Raises:
        BenchError: it is not installed (:data:`NEEDS_MONGOMOCK`).
    """
    try:
        import mongomock
    except ModuleNotFoundError as error:
        if error.name != "mongomock":
            raise  # mongomock is there, something it imports is not: a broken installation
        raise BenchError(NEEDS_MONGOMOCK) from None
    return mongomock


#: How long to wait for a server given with ``--uri`` unless the URI says otherwise: pymongo's
#: default of 30 s is a long time to stare at a benchmark that cannot start.
SERVER_SELECTION_TIMEOUT_MS: Final = _uri.SERVER_SELECTION_TIMEOUT_MS


@contextlib.contextmanager
def database(uri: str | None, *, alias: str = BENCH_ALIAS) -> Iterator[Any]:
    """Connect MongoEngine's ``alias`` to a new, empty database; yield it; clean up on exit.

    Benchmark models should declare ``meta = {"db_alias": BENCH_ALIAS}``: a program that runs
    the benchmark in-process keeps its own ``default`` connection untouched.

    Args:
        uri: a MongoDB URI (the server is pinged first, the database dropped on exit), or None
            for an in-memory mongomock database. The URI's own database is not used (only
            authenticated against, when the URI has a user).
        alias: the MongoEngine connection alias to connect.

    Raises:
        CommandError: (status 2) ``uri`` is not a valid MongoDB URI.
        BenchError: ``uri`` is None and mongomock is not installed, or the server does not
            answer.
    """
    import mongoengine
    import pymongo.errors
    from mongoengine.connection import ConnectionFailure

    name = f"mongoengine_ids_bench_{uuid.uuid4().hex[:12]}"
    target = None if uri is None else _uri.parse(uri)
    try:
        if target is None:
            mongoengine.connect(
                name,
                alias=alias,
                mongo_client_class=require_mongomock().MongoClient,
                uuidRepresentation="standard",
            )
        else:
            # Without the URI's database: MongoEngine would use it instead of the new one.
            mongoengine.connect(
                name,
                alias=alias,
                host=target.without_database(),
                uuidRepresentation="standard",
                **target.client_options(),
            )
            # Fail here, once and clearly, rather than inside the first timed write.
            mongoengine.get_db(alias).command("ping")
    except (pymongo.errors.PyMongoError, ConnectionFailure) as error:
        mongoengine.disconnect(alias)
        where = "mongomock" if target is None else f"the server at {target.shown}"
        raise BenchError(f"cannot use {where}: {_uri.connect_message(error)}") from error
    except BaseException:
        mongoengine.disconnect(alias)
        raise
    try:
        yield mongoengine.get_db(alias)
    finally:
        if target is not None:
            with contextlib.suppress(Exception):
                mongoengine.get_connection(alias).drop_database(name)
        mongoengine.disconnect(alias)


def database_label(uri: str | None) -> str:
    """``"mongomock"`` or ``"mongod"``: the note for rows measured against the database."""
    return "mongomock" if uri is None else "mongod"


__all__ = [
    "BENCH_ALIAS",
    "SERVER_SELECTION_TIMEOUT_MS",
    "BenchError",
    "StatusLine",
    "JSON_FORMAT_VERSION",
    "NEEDS_MONGOMOCK",
    "Result",
    "Statistic",
    "Step",
    "Timing",
    "NewDocuments",
    "Trial",
    "baseline_row",
    "clear",
    "compare_row",
    "database",
    "database_label",
    "format_machine",
    "format_ratio",
    "format_seconds",
    "format_table",
    "insert_trial",
    "loop",
    "machine_info",
    "measure",
    "measure_alternating",
    "reporting",
    "require_mongomock",
    "save_trial",
]
