"""``mongoengine-ids compare``: every id strategy of the package, measured side by side.

For each strategy (MongoEngine's default ObjectId, UUIDv4, UUIDv7, the Locality UUID's two
modes, the leased sequence with batches of 1 and 1,000 and with 1,000 sharded ranges, and a
random 12-digit id), on the embedded mongomock database or a server given with ``--uri``:

* **bytes**: the BSON size of the stored ``_id`` value, and of its payload (a UUID is 16 bytes
  of payload in a 21-byte BSON binary value);
* **generate/id**: the cost of making one id in stored form, as ``save()`` does (the field's
  ``new_value``; ``bson.ObjectId()`` for the default), counter round trips included;
* **trips/1k ids**: database calls made by 1,000 ``save()`` calls beyond the 1,000 inserts
  themselves, counted by wrapping the client (mongomock) or with a command listener (server);
* **saves/s**: ``save()`` of new documents, one at a time;
* **time-ordered**: whether the ids of consecutive saves by one process sort in the order they
  were made (and the share of consecutive pairs that do);
* **shard imbalance**: from :mod:`mongoengine_ids.tools.shardsim`, the worst time window's largest
  shard share over the ideal one, for a burst of the strategy's ids written into a collection
  range-sharded on ``_id``.

Times are measured interleaved (every strategy once per round, :func:`~mongoengine_ids.tools.bench.
_core.measure`), so the ratios between rows mean more than the absolute numbers.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import itertools
import json
import sys
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass
from typing import IO, TYPE_CHECKING, Any, Final

from pymongo import monitoring

from . import shardsim
from . import uri as mongo_uri
from .cli import (
    EXIT_USAGE,
    SHOWN_PATH_CHARACTERS,
    CommandError,
    check_output_path,
    machine_mac_quietly,
    shorten,
)

if TYPE_CHECKING:
    from .bench._core import Trial
    from .cli import Subparsers

#: The MongoEngine connection alias of the models measured here.
COMPARE_ALIAS: Final = "mongoengine_ids_compare"
#: The ``format`` version of the JSON document; bumped if a key changes meaning.
JSON_FORMAT_VERSION: Final = 1
#: The most shards ``--shards`` simulates (a sharded cluster has far fewer).
MAX_SHARDS: Final = 10_000

#: The BSON element of ``_id`` costs 5 bytes besides its value (type byte and ``"_id\0"``).
_ID_ELEMENT_OVERHEAD: Final = 5
#: BSON binary values carry a 4-byte length and a subtype byte before their payload.
_BINARY_HEADER: Final = 5
_BSON_TYPES: Final = {0x05: "binData", 0x07: "objectId", 0x10: "int", 0x12: "long", 0x02: "string"}


@dataclass(frozen=True)
class Counts:
    """How much work one run does.

    Attributes:
        generate_number: ids made per round of the generation timing.
        generate_rounds: rounds of the generation timing.
        save_number: saves per round of the throughput timing.
        save_rounds: rounds of the throughput timing.
        order_saves: saves whose ids are checked for creation order (more than 3 blocks of
            1,000, so a sequence leased in blocks from random ranges shows it is unordered).
        trip_saves: saves whose database calls are counted.
        warmup: untimed rounds first.
        shard_ids: ids of the shard-balance burst.
        shard_windows: its time windows.
        shard_history: ids written before it.
        chunk_docs: documents per chunk of the simulated cluster.
    """

    generate_number: int
    generate_rounds: int
    save_number: int
    save_rounds: int
    order_saves: int
    trip_saves: int
    warmup: int
    shard_ids: int
    shard_windows: int
    shard_history: int
    chunk_docs: int


# Full run on the 2-core development machine: about 19 s (generation 7 s, most of it the
# batch-1 sequence's 60,000 counter round trips at 85 us; saves 5 s; order, size and round
# trips 3.5 s; shard balance 3 s). 10,000 ids a round keep the batch-1000 sequences' one lease
# per 1,000 ids inside every round, so their cost is the amortised one.
FULL: Final = Counts(
    generate_number=10_000,
    generate_rounds=5,
    save_number=1_000,
    save_rounds=5,
    order_saves=3_001,
    trip_saves=1_000,
    warmup=1,
    shard_ids=shardsim.DEFAULT_IDS,
    shard_windows=shardsim.DEFAULT_WINDOWS,
    shard_history=shardsim.DEFAULT_HISTORY,
    chunk_docs=shardsim.DEFAULT_CHUNK_DOCS,
)
#: For tests and CI smoke runs: every row and metric, meaningless numbers, about 2 s.
QUICK: Final = Counts(
    generate_number=50,
    generate_rounds=1,
    save_number=10,
    save_rounds=1,
    order_saves=20,
    trip_saves=20,
    warmup=0,
    shard_ids=2_000,
    shard_windows=4,
    shard_history=1_000,
    chunk_docs=100,
)


# -- the strategies ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Candidate:
    """A strategy as a model to save.

    Attributes:
        strategy: the row's name (one of :data:`mongoengine_ids.tools.shardsim.STRATEGIES`).
        declaration: how the primary key is declared.
        model: a Document class with that primary key, a ``name`` and a ``seq`` field.
    """

    strategy: str
    declaration: str
    model: Any


@functools.cache
def candidates() -> tuple[Candidate, ...]:
    """The models of every strategy, made once (importing MongoEngine is deferred to here)."""
    from mongoengine import Document, IntField, StringField

    from ..locality import LocalityUUIDField
    from ..random_unique import RandomUniqueField
    from ..sequence import SequenceField
    from ..standard import UUID4Field, UUID7Field

    def model(class_name: str, collection: str, id_field: Any | None) -> Any:
        attributes: dict[str, Any] = {
            "name": StringField(),
            "seq": IntField(),
            "meta": {"db_alias": COMPARE_ALIAS, "collection": collection},
        }
        if id_field is not None:
            attributes["id"] = id_field
        return type(class_name, (Document,), attributes)

    s = shardsim
    return (
        Candidate(
            s.OBJECT_ID, "(MongoEngine's default)", model("CompareObjectId", "cmp_oid", None)
        ),
        Candidate(
            s.UUID4,
            "UUID4Field(primary_key=True)",
            model("CompareUUID4", "cmp_uuid4", UUID4Field(primary_key=True)),
        ),
        Candidate(
            s.UUID7,
            "UUID7Field(primary_key=True)",
            model("CompareUUID7", "cmp_uuid7", UUID7Field(primary_key=True)),
        ),
        Candidate(
            s.LOCALITY_SPREAD,
            "LocalityUUIDField(primary_key=True)",
            model(
                "CompareLocalitySpread",
                "cmp_locality_spread",
                LocalityUUIDField(primary_key=True, mode="spread"),
            ),
        ),
        Candidate(
            s.LOCALITY_SEQUENTIAL,
            "LocalityUUIDField(primary_key=True, mode='sequential')",
            model(
                "CompareLocalitySequential",
                "cmp_locality_sequential",
                LocalityUUIDField(primary_key=True, mode="sequential"),
            ),
        ),
        Candidate(
            s.SEQUENCE_BATCH_1,
            "SequenceField(primary_key=True)",
            model("CompareSequence1", "cmp_sequence_1", SequenceField(primary_key=True)),
        ),
        Candidate(
            s.SEQUENCE_BATCH_1000,
            "SequenceField(primary_key=True, batch_size=1000, digits=12)",
            model(
                "CompareSequence1000",
                "cmp_sequence_1000",
                SequenceField(primary_key=True, batch_size=1_000, digits=s.SEQUENCE_DIGITS),
            ),
        ),
        Candidate(
            s.SEQUENCE_SHARDED,
            "SequenceField(primary_key=True, batch_size=1000, start=0, digits=12, shards=1000)",
            model(
                "CompareSequenceSharded",
                "cmp_sequence_sharded",
                SequenceField(
                    primary_key=True,
                    batch_size=1_000,
                    start=0,
                    digits=s.SEQUENCE_DIGITS,
                    shards=s.SEQUENCE_RANGES,
                ),
            ),
        ),
        Candidate(
            s.RANDOM_DIGITS,
            "RandomUniqueField(primary_key=True, digits=12)",
            model(
                "CompareRandom",
                "cmp_random",
                RandomUniqueField(primary_key=True, digits=s.RANDOM_DIGITS_COUNT),
            ),
        ),
    )


# -- results -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Row:
    """Everything measured for one strategy.

    Attributes:
        strategy: the strategy's name.
        declaration: how the primary key is declared.
        bson_type: the BSON type of the stored ``_id`` (``objectId``, ``binData``, ``int``,
            ``long``); several joined by ``/`` when the values differ.
        stored_bytes: the BSON size of the ``_id`` value, mean over the saved documents.
        payload_bytes: the same without a binary value's 5-byte header.
        generate_seconds: seconds to make one id in stored form.
        round_trips_per_1000: database calls of 1,000 saves beyond their 1,000 inserts.
        saves_per_second: ``save()`` throughput of new documents.
        time_ordered: whether every id sorted after the one saved before it (one process).
        ordered_share: the share of consecutive saves whose ids are in creation order.
        imbalance_max: the simulated burst's worst window: largest shard share over ideal.
        imbalance_mean: the mean over its windows.
        interleaving: the share of other windows' ids inside a window's key range, mean.
    """

    strategy: str
    declaration: str
    bson_type: str
    stored_bytes: float
    payload_bytes: float
    generate_seconds: float
    round_trips_per_1000: float
    saves_per_second: float
    time_ordered: bool
    ordered_share: float
    imbalance_max: float
    imbalance_mean: float
    interleaving: float

    def as_dict(self) -> dict[str, Any]:
        """The row as JSON-ready data (the keys are the attribute names)."""
        return asdict(self)


@dataclass(frozen=True)
class Comparison:
    """A whole run: the rows, the shard reports, and what they were measured on.

    Attributes:
        rows: one per strategy, in :data:`mongoengine_ids.tools.shardsim.STRATEGIES` order.
        shards: the shard-balance report of each strategy, same order.
        database: ``"mongomock"`` or ``"mongod"``.
        quick: whether the counts were :data:`QUICK` (numbers meaningless).
        counts: the counts used.
        machine: platform, Python and CPU count.
    """

    rows: tuple[Row, ...]
    shards: tuple[shardsim.ShardReport, ...]
    database: str
    quick: bool
    counts: Counts
    machine: dict[str, Any]

    def as_dict(self) -> dict[str, Any]:
        """The run as one JSON-ready document."""
        return {
            "format": JSON_FORMAT_VERSION,
            "machine": self.machine,
            "database": self.database,
            "quick": self.quick,
            "counts": asdict(self.counts),
            "strategies": [row.as_dict() for row in self.rows],
            "shards": [report.as_dict() for report in self.shards],
        }


# -- progress ------------------------------------------------------------------------------------


class Progress:
    """A plain-text progress bar on a stream (stderr), or nothing when disabled.

    On a terminal the bar is redrawn in place (``\\r``); elsewhere (``--progress`` into a file
    or pipe) each step is one line, so a log stays readable.

    Args:
        total: steps in the whole run.
        stream: where to draw; None draws nothing.
        width: characters of the bar.
    """

    def __init__(self, total: int, stream: IO[str] | None, *, width: int = 30) -> None:
        self.total = max(total, 1)
        self.done = 0
        self._stream = stream
        self._width = width
        self._tty = stream is not None and stream.isatty()
        self._shown = 0

    def step(self, label: str) -> None:
        """Count one step done; ``label`` says which."""
        self.done = min(self.done + 1, self.total)
        stream = self._stream
        if stream is None:
            return
        filled = self._width * self.done // self.total
        bar = "#" * filled + "." * (self._width - filled)
        text = f"compare [{bar}] {self.done}/{self.total} {label}"
        if self._tty:
            padding = " " * max(self._shown - len(text), 0)
            stream.write(f"\r{text}{padding}")
            self._shown = len(text)
        else:
            stream.write(text + "\n")
        stream.flush()

    def close(self) -> None:
        """End the bar's line (on a terminal)."""
        if self._stream is not None and self._tty and self._shown:
            self._stream.write("\n")
            self._stream.flush()
            self._shown = 0


# -- measurements --------------------------------------------------------------------------------


def _generator(candidate: Candidate) -> Callable[[], object]:
    """What ``save()`` calls to make one id in stored form."""
    import bson

    from ..write import Write

    model = candidate.model
    if candidate.strategy == shardsim.OBJECT_ID:
        return bson.ObjectId  # what pymongo calls for a document without _id
    field = model._fields["id"]
    document = model(name="generate")
    write = Write(model, model._get_collection(), [document])
    return lambda: field.new_values(write, 1)[0]


def _new_documents(model: Any, count: int) -> list[Any]:
    return [model(name=f"row {i}", seq=i) for i in range(count)]


def _clear(model: Any) -> None:
    # delete_many, not drop: the collection object and its indexes stay cached; an empty
    # collection keeps mongomock's linear scans from charging later rounds more.
    model._get_collection().delete_many({})


def _save_trial(model: Any) -> Trial:
    def trial(n: int) -> float:
        _clear(model)
        documents = _new_documents(model, n)
        start = time.perf_counter()
        for document in documents:
            document.save()
        return time.perf_counter() - start

    return trial


def _ticking(trial: Trial, progress: Progress, label: str) -> Trial:
    def ticked(n: int) -> float:
        elapsed = trial(n)
        progress.step(label)  # after the clock stopped
        return elapsed

    return ticked


def _warm_up(candidate: Candidate) -> None:
    """First save: creates the collection, its indexes, the counter documents."""
    model = candidate.model
    model(name="warm-up", seq=-1).save()
    _clear(model)


@dataclass(frozen=True)
class _Stored:
    bson_type: str
    stored_bytes: float
    payload_bytes: float
    time_ordered: bool
    ordered_share: float


def _stored_facts(model: Any, saves: int) -> _Stored:
    """Save ``saves`` documents in order; read the raw ``_id`` back: sizes, type, order."""
    import bson
    from bson.binary import UuidRepresentation
    from bson.codec_options import CodecOptions

    _clear(model)
    for document in _new_documents(model, saves):
        document.save()
    raw = sorted(model._get_collection().find({}, {"_id": 1, "seq": 1}), key=lambda d: d["seq"])
    options: CodecOptions[Any] = CodecOptions(uuid_representation=UuidRepresentation.STANDARD)
    empty = len(bson.encode({}))
    types: dict[str, None] = {}
    stored = payload = 0
    for document in raw:
        encoded = bson.encode({"_id": document["_id"]}, codec_options=options)
        size = len(encoded) - empty - _ID_ELEMENT_OVERHEAD
        code = encoded[4]
        types[_BSON_TYPES.get(code, f"0x{code:02x}")] = None
        stored += size
        payload += size - _BINARY_HEADER if code == 0x05 else size
    keys = [shardsim.bson_sort_key(document["_id"]) for document in raw]
    pairs = max(len(keys) - 1, 1)
    in_order = sum(1 for before, after in itertools.pairwise(keys) if before < after)
    _clear(model)
    return _Stored(
        bson_type="/".join(types),
        stored_bytes=stored / len(raw),
        payload_bytes=payload / len(raw),
        time_ordered=in_order == len(keys) - 1,
        ordered_share=in_order / pairs,
    )


class _CallCounter(monitoring.CommandListener):
    """Counts database calls: as the hook of the instrumented mongomock client, or as a pymongo
    command listener (the commands a server is sent)."""

    #: Commands a driver sends on its own (handshakes, sessions), not for the application.
    IGNORED: Final = frozenset({"hello", "ismaster", "isMaster", "ping", "endSessions"})

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, collection: str, method: str, call: Callable[[], Any]) -> Any:
        """The instrumented client's hook: count, then make the call."""
        self.calls += 1
        return call()

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        """A command was sent to the server: count it, unless the driver sent it for itself."""
        if event.command_name not in self.IGNORED:
            self.calls += 1

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        """Nothing to count."""

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        """Nothing to count."""


@contextlib.contextmanager
def _counting_database(uri: str | None, counter: _CallCounter) -> Iterator[Any]:
    """Connect :data:`COMPARE_ALIAS` to a fresh database whose calls ``counter`` counts.

    Raises:
        CommandError: mongomock is missing, or the server does not answer.
    """
    import mongoengine
    import pymongo.errors
    from mongoengine.connection import ConnectionFailure

    name = f"mongoengine_ids_compare_{uuid.uuid4().hex[:12]}"
    target = None if uri is None else mongo_uri.parse(uri)
    try:
        if target is None:
            from ..instrumented import instrumented_client_class

            mongoengine.connect(
                name,
                alias=COMPARE_ALIAS,
                mongo_client_class=instrumented_client_class(hook=counter),
                uuidRepresentation="standard",
            )
        else:
            # Without the URI's database: MongoEngine would use it instead of the new one.
            mongoengine.connect(
                name,
                alias=COMPARE_ALIAS,
                host=target.without_database(),
                event_listeners=[counter],
                uuidRepresentation="standard",
                **target.client_options(),
            )
            mongoengine.get_db(COMPARE_ALIAS).command("ping")
    except ImportError as error:
        mongoengine.disconnect(COMPARE_ALIAS)
        raise CommandError(
            f"without --uri, compare needs mongomock ({error}): pip install 'mongoengine-ids[demo]'"
        ) from error
    except (pymongo.errors.PyMongoError, ConnectionFailure) as error:
        mongoengine.disconnect(COMPARE_ALIAS)
        where = "mongomock" if target is None else f"the server at {target.shown}"
        raise CommandError(f"cannot use {where}: {mongo_uri.connect_message(error)}") from error
    try:
        yield mongoengine.get_db(COMPARE_ALIAS)
    finally:
        if target is not None:
            with contextlib.suppress(Exception):
                mongoengine.get_connection(COMPARE_ALIAS).drop_database(name)
        mongoengine.disconnect(COMPARE_ALIAS)


def _round_trips(candidate: Candidate, counter: _CallCounter, saves: int) -> float:
    """Database calls of ``saves`` saves beyond one insert each, per 1,000 saves."""
    _warm_up(candidate)
    documents = _new_documents(candidate.model, saves)
    before = counter.calls
    for document in documents:
        document.save()
    extra = counter.calls - before - saves
    _clear(candidate.model)
    return extra * 1_000 / saves


def compare(
    *,
    uri: str | None = None,
    quick: bool = False,
    shards: int = shardsim.DEFAULT_SHARDS,
    seed: int = shardsim.DEFAULT_SEED,
    progress: Progress | None = None,
) -> Comparison:
    """Measure every strategy; see the module docstring for what and how.

    Args:
        uri: a MongoDB URI (a fresh database is made and dropped), or None for mongomock.
        quick: tiny counts (:data:`QUICK`): every row and metric, meaningless numbers.
        shards: shards of the simulated cluster.
        seed: seeds the shard-balance bursts.
        progress: where to report progress (None: nowhere).

    Returns:
        The comparison.

    Raises:
        CommandError: mongomock is missing without ``uri``, or the server does not answer.
    """
    from .bench._core import BenchError, database, database_label, loop, machine_info, measure

    counts = QUICK if quick else FULL
    chosen = candidates()
    names = [candidate.strategy for candidate in chosen]
    if progress is None:
        progress = Progress(0, None)
    # Steps: warm-up, generation and save rounds (warm-up rounds included), order and size,
    # round trips, shard balance: per strategy; then "done".
    timed_rounds = 2 * counts.warmup + counts.generate_rounds + counts.save_rounds
    progress.total = len(chosen) * (4 + timed_rounds) + 1

    try:
        with database(uri, alias=COMPARE_ALIAS):
            for candidate in chosen:
                _warm_up(candidate)
                progress.step(f"warm-up: {candidate.strategy}")
            generators = {c.strategy: _generator(c) for c in chosen}
            generation = measure(
                {
                    name: _ticking(loop(generators[name]), progress, f"generate: {name}")
                    for name in names
                },
                number=counts.generate_number,
                rounds=counts.generate_rounds,
                warmup=counts.warmup,
            )
            saving = measure(
                {
                    c.strategy: _ticking(_save_trial(c.model), progress, f"save: {c.strategy}")
                    for c in chosen
                },
                number=counts.save_number,
                rounds=counts.save_rounds,
                warmup=counts.warmup,
                statistic="median",  # a write's cost varies by itself, not only by load
            )
            stored: dict[str, _Stored] = {}
            for candidate in chosen:
                progress.step(f"order and size: {candidate.strategy}")
                stored[candidate.strategy] = _stored_facts(candidate.model, counts.order_saves)
    except BenchError as error:
        raise CommandError(str(error)) from error

    counter = _CallCounter()
    trips: dict[str, float] = {}
    with _counting_database(uri, counter):
        for candidate in chosen:
            progress.step(f"round trips: {candidate.strategy}")
            trips[candidate.strategy] = _round_trips(candidate, counter, counts.trip_saves)

    config = shardsim.ClusterConfig(
        shards=shards,
        chunk_docs=counts.chunk_docs,
        balancer_interval=counts.chunk_docs,
    )
    reports = shardsim.run(
        names,
        config=config,
        ids=counts.shard_ids,
        windows=counts.shard_windows,
        history=counts.shard_history,
        seed=seed,
        progress=lambda name: progress.step(f"shard balance: {name}"),
    )
    progress.step("done")
    progress.close()

    rows = tuple(
        Row(
            strategy=candidate.strategy,
            declaration=candidate.declaration,
            bson_type=stored[candidate.strategy].bson_type,
            stored_bytes=stored[candidate.strategy].stored_bytes,
            payload_bytes=stored[candidate.strategy].payload_bytes,
            generate_seconds=generation[candidate.strategy].seconds,
            round_trips_per_1000=trips[candidate.strategy],
            saves_per_second=1 / saving[candidate.strategy].seconds,
            time_ordered=stored[candidate.strategy].time_ordered,
            ordered_share=stored[candidate.strategy].ordered_share,
            imbalance_max=report.imbalance_max,
            imbalance_mean=report.imbalance_mean,
            interleaving=report.interleaving_mean,
        )
        for candidate, report in zip(chosen, reports, strict=True)
    )
    return Comparison(
        rows=rows,
        shards=tuple(reports),
        database=database_label(uri),
        quick=quick,
        counts=counts,
        machine=machine_info(),
    )


# -- output --------------------------------------------------------------------------------------


def _number(value: float) -> str:
    return f"{value:.0f}" if value == int(value) else f"{value:.1f}"


_HEADERS: Final = (
    "strategy",
    "bytes",
    "payload",
    "BSON type",
    "generate/id",
    "trips/1k ids",
    "saves/s",
    "time-ordered",
    "shard imbalance",
)


def format_table(comparison: Comparison) -> str:
    """The rows as an aligned text table, with the machine line and a legend."""
    from .bench._core import format_machine, format_seconds

    rows = [
        (
            row.strategy,
            _number(row.stored_bytes),
            _number(row.payload_bytes),
            row.bson_type,
            format_seconds(row.generate_seconds),
            _number(row.round_trips_per_1000),
            f"{row.saves_per_second:,.0f}",
            "yes" if row.time_ordered else f"no ({row.ordered_share:.1%})",
            f"{row.imbalance_max:.2f}x",
        )
        for row in comparison.rows
    ]
    right = {1, 2, 4, 5, 6, 8}
    widths = [max(len(row[i]) for row in [_HEADERS, *rows]) for i in range(len(_HEADERS))]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(
            cell.rjust(width) if i in right else cell.ljust(width)
            for i, (cell, width) in enumerate(zip(cells, widths, strict=True))
        ).rstrip()

    counts = comparison.counts
    config = comparison.shards[0].config
    quick = "; --quick: the numbers mean nothing" if comparison.quick else ""
    lines = [
        format_machine(comparison.machine),
        f"database: {comparison.database}{quick}",
        "",
        line(_HEADERS),
        "  ".join("-" * width for width in widths),
        *(line(row) for row in rows),
        "",
        "bytes: BSON size of the stored _id value (payload: without a binary value's 5-byte "
        "header).",
        "generate/id: making one id (and its stored form) as save() does, counter round trips "
        f"included (best of {counts.generate_rounds} rounds).",
        f"trips/1k ids: database calls of {counts.trip_saves:,} save()s beyond one insert "
        "each, per 1,000.",
        f"saves/s: save() of new documents, one at a time (median of {counts.save_rounds} rounds).",
        f"time-ordered: the ids of {counts.order_saves:,} consecutive saves by one process "
        "sort in creation order (else: the share of consecutive pairs that do).",
        f"shard imbalance: largest shard share over the ideal 1/{config.shards}, worst of "
        f"{counts.shard_windows} windows of a simulated burst of {counts.shard_ids:,} ids "
        f"(after {counts.shard_history:,}) from {shardsim.DEFAULT_PROCESSES} writers; "
        f"1.00x is even, {config.shards:.2f}x one hot shard.",
        "",
        "shard balance (mongoengine_ids.tools.shardsim):",
        shardsim.format_summary(comparison.shards),
    ]
    return "\n".join(lines)


def to_json(comparison: Comparison) -> str:
    """The comparison as one JSON document (see :meth:`Comparison.as_dict`)."""
    return json.dumps(comparison.as_dict(), indent=2)


# -- the subcommand ------------------------------------------------------------------------------


def add_options(parser: argparse.ArgumentParser) -> None:
    """Add the options of ``compare`` to ``parser``."""
    parser.add_argument(
        "--uri",
        metavar="URI",
        default=None,
        help="measure on this MongoDB server (a fresh database, dropped after) "
        "instead of an embedded mongomock database",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    parser.add_argument(
        "--quick",
        action="store_true",
        help="tiny counts: checks that every row runs, the numbers mean nothing",
    )
    parser.add_argument(
        "--progress",
        action="store_true",
        help="draw the progress bar on stderr even when it is not a terminal",
    )
    parser.add_argument(
        "--chart",
        metavar="PNG",
        default=None,
        help="also draw each strategy's shard shares per window into this PNG file (*.png) "
        f"(needs matplotlib: {shardsim.PLOT_INSTALL})",
    )
    parser.add_argument(
        "--shards",
        metavar="N",
        type=int,
        default=shardsim.DEFAULT_SHARDS,
        help=f"shards of the simulated cluster (default {shardsim.DEFAULT_SHARDS})",
    )
    parser.add_argument(
        "--seed",
        metavar="N",
        type=int,
        default=shardsim.DEFAULT_SEED,
        help="seed of the simulated bursts (the same seed, the same ids)",
    )


def add_subcommand(subparsers: Subparsers) -> None:
    """Add ``compare`` to the ``mongoengine-ids`` command.

    Args:
        subparsers: the command's subparsers.
    """
    parser = subparsers.add_parser(
        "compare",
        help="measure every id strategy side by side: size, cost, round trips, shard balance",
        description=(
            "Measure every id strategy of the package on this machine: bytes per id, the "
            "cost of making one, database round trips per 1,000 ids, save() throughput, "
            "whether ids sort by creation time, and the write imbalance of a simulated "
            "collection range-sharded on _id. Uses an embedded mongomock database, or the "
            "server given with --uri. About 20 s; --quick for a smoke run."
        ),
    )
    add_options(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Run ``compare`` as the parsed ``args`` say; print the table or the JSON.

    Args:
        args: ``uri``, ``json``, ``quick``, ``progress``, ``chart``, ``shards``, ``seed``.

    Returns:
        0.

    Raises:
        CommandError: checked before anything runs (status 2): bad ``--shards``, a ``--uri``
            that is not a MongoDB URI, ``--chart`` to a name not ending in ``.png``, without
            matplotlib or to a file that cannot be written. Then (status 1): mongomock
            missing, the server does not answer, the chart cannot be written after all.
    """
    if not 1 <= args.shards <= MAX_SHARDS:
        raise CommandError(
            f"--shards {shorten(str(args.shards), quoted=False)}: expected 1 to {MAX_SHARDS:,}",
            status=EXIT_USAGE,
        )
    if args.uri is not None:
        mongo_uri.parse(args.uri)
    chart = None if args.chart is None else shorten(args.chart, SHOWN_PATH_CHARACTERS)
    if args.chart is not None:
        check_output_path(args.chart, option="--chart")
        problem = shardsim.not_a_png_name(args.chart)
        if problem is not None:
            raise CommandError(f"--chart {chart}: {problem}", status=EXIT_USAGE)
        try:
            import matplotlib  # noqa: F401
        except ImportError as error:
            raise CommandError(
                f"--chart {chart} needs matplotlib: {shardsim.PLOT_INSTALL}",
                status=EXIT_USAGE,
            ) from error
    machine_mac_quietly()  # the ids are thrown away: no warning about a shared MAC
    stream = sys.stderr if (args.progress or sys.stderr.isatty()) else None
    progress = Progress(0, stream)
    try:
        comparison = compare(
            uri=args.uri, quick=args.quick, shards=args.shards, seed=args.seed, progress=progress
        )
    finally:
        progress.close()
    if args.chart is not None:
        try:
            path = shardsim.plot(comparison.shards, args.chart)
        except OSError as error:
            raise CommandError(
                f"--chart {chart} cannot be written: {error.strerror or error}"
            ) from error
        print(
            f"shard chart written to {shorten(str(path), SHOWN_PATH_CHARACTERS)}", file=sys.stderr
        )
    print(to_json(comparison) if args.json else format_table(comparison))
    return 0


def main(argv: list[str] | None = None) -> int:
    """``python -m mongoengine_ids.tools.compare``: ``mongoengine-ids compare`` with ``argv``."""
    from .cli import main as cli_main

    return cli_main(["compare", *(sys.argv[1:] if argv is None else argv)])


__all__ = [
    "COMPARE_ALIAS",
    "FULL",
    "JSON_FORMAT_VERSION",
    "QUICK",
    "Candidate",
    "Comparison",
    "Counts",
    "Progress",
    "Row",
    "add_options",
    "add_subcommand",
    "candidates",
    "compare",
    "format_table",
    "main",
    "run",
    "to_json",
]

if __name__ == "__main__":
    # Run the imported module's main(), not this __main__ copy's: CommandError must be one class.
    from mongoengine_ids.tools.compare import main as _main

    sys.exit(_main())
