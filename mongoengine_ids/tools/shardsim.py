"""Shard balance: a collection range-sharded on its id, simulated, fed with each strategy's ids.

Groupon's article (``shared/seeds/003_...``) says it in words: ids that begin with the time send
every write of a moment to one shard (a "hot shard"); spread-mode Locality UUIDs do not. This
module measures it with a small, deterministic model of a sharded cluster.

The model
    MongoDB's, simplified; every number is a parameter of :class:`ClusterConfig`.

    * **Chunks** cover the whole key space, from MinKey up, as contiguous ranges; each is owned
      by one of ``shards`` shards. A new collection is one chunk on shard 0 (what
      ``shardCollection`` makes for a range key on an empty collection).
    * **Splits**: a chunk that passes ``chunk_docs`` documents splits at its median key into
      two chunks on the same shard (the auto-splitter of MongoDB before 6.0, with documents
      standing in for bytes: 1,000 documents for its 64 MB chunk keeps 100,000 ids at about
      150 chunks, the count of a 10 GB collection).
    * **Balancer**: every ``balancer_interval`` writes, a round. While the shard with the most
      documents has at least ``threshold_chunks * chunk_docs`` more than the one with the
      fewest (MongoDB 6.0's migration threshold: 3 times the chunk size), the donor's chunk
      with the lowest key moves to the recipient. A shard takes part in at most one migration
      per round, so a round makes at most ``shards // 2`` of them (MongoDB's limit). The
      lowest-key chunk is a simple, deterministic choice; which chunk moves does not change
      where the writes of a window go, only how fast the documents even out.
    * A migration is instantaneous; a write goes to the shard owning its key's chunk at the
      moment it is made.

The feed
    A :class:`Burst`: ids in stored form (``bson.ObjectId``, ``bson.Binary`` subtype 4 for
    UUIDs, ``int`` for counters), grouped in time windows, after a *history* of earlier ids of
    the same strategy. The history is written first and the balancer run until it has nothing
    left to move: the burst hits a live, balanced collection, not the first minutes of an
    empty one (where every strategy is on one shard). Keys are compared as MongoDB compares
    BSON values (:func:`bson_sort_key`). :func:`make_burst` makes the burst of each strategy of
    the package with injected clocks and seeded randomness, from several writer processes.

The result
    A :class:`ShardReport`: for each window, each shard's share of the writes and the
    imbalance, the largest share divided by the ideal ``1 / shards`` (1.0 is perfect, ``shards``
    means every write of the window went to one shard); also how many chunks a window touched
    and its *interleaving*, the share of the other windows' ids that sort inside the window's
    key range (0.0: the window's ids are together; near 1.0: spread over the whole key space).
    As data (:meth:`ShardReport.as_dict`), as text (:func:`format_summary`,
    :func:`format_windows`) and as a chart (:func:`plot` writes a PNG, :func:`chart_figure`
    returns the matplotlib ``Figure``; both need matplotlib: the ``plot`` extra).
"""

from __future__ import annotations

import datetime as _dt
import random
import struct
import uuid
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from bson.binary import Binary
from bson.objectid import ObjectId

from .. import constants as C
from ..errors import MongoEngineIdsError

if TYPE_CHECKING:
    from matplotlib.figure import Figure

# -- the numbers of the model ------------------------------------------------------------------

#: Shards of the simulated cluster: 4 is enough to tell "one shard" (imbalance 4.0) from "all
#: of them" (1.0) at a glance, and small enough that 10,000 writes a window give each shard
#: about 2,500, whose random spread (about +-1%) stays far below the 1.2x being checked.
DEFAULT_SHARDS: Final = 4
#: Documents per chunk before it splits (stands in for MongoDB's 64 MB).
DEFAULT_CHUNK_DOCS: Final = 1_000
#: Writes between balancer rounds: about one split's worth of writes, so the balancer keeps up
#: with a collection growing evenly and never lags more than one chunk per shard.
DEFAULT_BALANCER_INTERVAL: Final = 1_000
#: MongoDB 6.0: a collection is balanced while shards differ by less than 3 chunk sizes.
MIGRATION_THRESHOLD_CHUNKS: Final = 3

#: The burst: 100,000 ids in 10 windows of one minute, by 4 writer processes, after a history
#: of 50,000 ids. With 1,000-document chunks, 50,000 documents are 50 to 100 chunks: enough for
#: the 3-chunk threshold to mean at most about 15% of a shard's documents. Made and simulated,
#: the 150,000 ids of a strategy take 0.2 s (a sequence) to 2 s (UUIDv7: its generator is most
#: of it), 7 s for all nine, on a shared 2-core machine.
DEFAULT_IDS: Final = 100_000
DEFAULT_WINDOWS: Final = 10
DEFAULT_HISTORY: Final = 50_000
DEFAULT_PROCESSES: Final = 4
DEFAULT_WINDOW_MS: Final = 60_000
#: When the burst starts (2023-11-14T22:13:20Z): a fixed instant, so a seed fixes every id.
DEFAULT_START_MS: Final = 1_700_000_000_000
DEFAULT_SEED: Final = 0

#: The strategies :func:`make_burst` knows, by the names ``mongoengine-ids compare`` shows.
OBJECT_ID: Final = "ObjectId"
UUID4: Final = "UUIDv4"
UUID7: Final = "UUIDv7"
LOCALITY_SPREAD: Final = "Locality spread"
LOCALITY_SEQUENTIAL: Final = "Locality sequential"
SEQUENCE_BATCH_1: Final = "sequence batch=1"
SEQUENCE_BATCH_1000: Final = "sequence batch=1000"
SEQUENCE_SHARDED: Final = "sequence batch=1000 shards=1000"
RANDOM_DIGITS: Final = "random digits=12"
STRATEGIES: Final[tuple[str, ...]] = (
    OBJECT_ID,
    UUID4,
    UUID7,
    LOCALITY_SPREAD,
    LOCALITY_SEQUENTIAL,
    SEQUENCE_BATCH_1,
    SEQUENCE_BATCH_1000,
    SEQUENCE_SHARDED,
    RANDOM_DIGITS,
)

#: The sharded sequence of the articles (and of ``docs/sequence.md``): 12-digit values in
#: 1,000 ranges of 10**9, a lease picking a range at random.
SEQUENCE_DIGITS: Final = 12
SEQUENCE_RANGES: Final = 1_000
RANDOM_DIGITS_COUNT: Final = 12

# -- BSON order --------------------------------------------------------------------------------

#: A value's place in MongoDB's order: a tuple whose first item is the type's rank.
SortKey = tuple[Any, ...]

# MongoDB's canonical type ranks (the server's canonicalizeBSONType): types compare by these
# first, values of one rank by value.
_RANK_MIN_KEY: Final = -1
_RANK_NULL: Final = 5
_RANK_NUMBER: Final = 10
_RANK_STRING: Final = 15
_RANK_BINARY: Final = 30
_RANK_OBJECT_ID: Final = 35
_RANK_BOOL: Final = 40
_RANK_DATE: Final = 45

#: Sorts before every id: the lower bound of the first chunk.
MIN_KEY: Final[SortKey] = (_RANK_MIN_KEY,)


def bson_sort_key(value: object) -> SortKey:
    """The key that orders ``value`` as MongoDB orders an ``_id`` (and a range shard key).

    Numbers compare numerically (``9 < 10``), strings by their UTF-8 bytes, binary data by
    length, then subtype, then bytes (so 16-byte UUIDs of subtype 4 by their bytes),
    ObjectIds by their 12 bytes; values of different types by MongoDB's type order (numbers
    < strings < binary < ObjectId < booleans < dates). A :class:`uuid.UUID` is taken as
    stored, Binary subtype 4.

    Raises:
        TypeError: ``value`` is of a type ids are not made of (dict, list, float NaN...).
    """
    if value is None:
        return (_RANK_NULL,)
    if isinstance(value, bool):
        return (_RANK_BOOL, value)
    if isinstance(value, int):
        return (_RANK_NUMBER, value)
    if isinstance(value, float) and value == value:
        return (_RANK_NUMBER, value)
    if isinstance(value, str):
        return (_RANK_STRING, value.encode("utf-8"))
    if isinstance(value, Binary):
        return (_RANK_BINARY, len(value), value.subtype, bytes(value))
    if isinstance(value, (bytes, bytearray)):
        # pymongo stores plain bytes as Binary subtype 0.
        return (_RANK_BINARY, len(value), 0, bytes(value))
    if isinstance(value, uuid.UUID):
        return (_RANK_BINARY, C.UUID_BYTES, C.BSON_UUID_SUBTYPE, value.bytes)
    if isinstance(value, ObjectId):
        return (_RANK_OBJECT_ID, value.binary)
    if isinstance(value, _dt.datetime):
        return (_RANK_DATE, value.timestamp())
    raise TypeError(
        f"cannot place {value!r} ({type(value).__name__}) in BSON order: expected an int, str, "
        "bytes, bson.Binary, uuid.UUID, bson.ObjectId or datetime"
    )


# -- configuration -----------------------------------------------------------------------------


def _positive(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, not {type(value).__name__}: {value!r}")
    if value < 1:
        raise ValueError(f"{name}={value!r} must be >= 1")
    return value


@dataclass(frozen=True)
class ClusterConfig:
    """The simulated cluster's numbers (see the module docstring for the rules).

    Attributes:
        shards: how many shards.
        chunk_docs: a chunk with more documents than this splits in two.
        balancer_interval: writes between balancer rounds.
        threshold_chunks: the balancer moves chunks while the most and least loaded shards
            differ by at least this many times ``chunk_docs`` documents.

    Raises:
        TypeError: a number is not an int.
        ValueError: a number is below 1, or ``chunk_docs`` is below 2 (nothing to split).
    """

    shards: int = DEFAULT_SHARDS
    chunk_docs: int = DEFAULT_CHUNK_DOCS
    balancer_interval: int = DEFAULT_BALANCER_INTERVAL
    threshold_chunks: int = MIGRATION_THRESHOLD_CHUNKS

    def __post_init__(self) -> None:
        for name in ("shards", "chunk_docs", "balancer_interval", "threshold_chunks"):
            _positive(name, getattr(self, name))
        if self.chunk_docs < 2:
            raise ValueError(f"chunk_docs={self.chunk_docs!r} must be >= 2: a chunk splits in two")

    @property
    def threshold_docs(self) -> int:
        """The difference in documents from which the balancer moves a chunk."""
        return self.threshold_chunks * self.chunk_docs


# -- the cluster -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Chunk:
    """One chunk: the keys from :attr:`min_key` up to the next chunk's ``min_key``.

    Attributes:
        chunk_id: a number unique in the cluster (a split keeps it on the lower half).
        min_key: the lowest key of the range (:data:`MIN_KEY` for the first chunk).
        docs: documents in the chunk.
        shard: the shard that owns it.
    """

    chunk_id: int
    min_key: SortKey
    docs: int
    shard: int


@dataclass(frozen=True)
class Migration:
    """A chunk the balancer moved.

    Attributes:
        chunk_id: the chunk moved.
        docs: its documents.
        donor: the shard it left.
        recipient: the shard it went to.
    """

    chunk_id: int
    docs: int
    donor: int
    recipient: int


class ShardedCollection:
    """A collection range-sharded on its key: chunks, splits and the balancer.

    Keys are :data:`SortKey` tuples (:func:`bson_sort_key`); documents are only counted, not
    stored, but each chunk keeps its keys to find its median when it splits.

    Args:
        config: the cluster's numbers.
    """

    def __init__(self, config: ClusterConfig | None = None) -> None:
        self.config = config if config is not None else ClusterConfig()
        # Parallel lists, one entry per chunk in key order: bisect over _mins finds a key's
        # chunk in about 1 us for 200 chunks, where a list of Chunk objects costs 5x that.
        self._mins: list[SortKey] = [MIN_KEY]
        self._keys: list[list[SortKey]] = [[]]
        self._owners: list[int] = [0]
        self._ids: list[int] = [0]
        self._next_id = 1
        self._docs = [0] * self.config.shards
        self.splits = 0
        self.migrations = 0

    # -- writes ---------------------------------------------------------------------------------

    def insert(self, key: SortKey) -> tuple[int, int]:
        """Write a document with ``key``; split its chunk if it passed the size.

        Returns:
            The shard and the id of the chunk that took the write.
        """
        index = bisect_right(self._mins, key) - 1
        keys = self._keys[index]
        keys.append(key)
        shard = self._owners[index]
        self._docs[shard] += 1
        chunk_id = self._ids[index]
        if len(keys) > self.config.chunk_docs:
            self._split(index)
        return shard, chunk_id

    def _split(self, index: int) -> None:
        keys = sorted(self._keys[index])
        middle = len(keys) // 2
        # The split key must differ from the key before it, or equal keys would straddle the
        # boundary; ids are unique, so this moves only for repeated keys.
        while 0 < middle < len(keys) and keys[middle] == keys[middle - 1]:
            middle += 1
        if middle >= len(keys):
            middle = len(keys) // 2
            while middle > 0 and keys[middle] == keys[middle - 1]:
                middle -= 1
        if middle == 0:
            self._keys[index] = keys
            return  # every key is the same: a jumbo chunk, which MongoDB cannot split either
        self._keys[index] = keys[:middle]
        self._keys.insert(index + 1, keys[middle:])
        self._mins.insert(index + 1, keys[middle])
        self._owners.insert(index + 1, self._owners[index])
        self._ids.insert(index + 1, self._next_id)
        self._next_id += 1
        self.splits += 1

    # -- the balancer ---------------------------------------------------------------------------

    def balance_round(self) -> list[Migration]:
        """One balancer round: migrations from the most to the least loaded shards.

        Returns:
            The migrations made, in order (empty when the collection is balanced).
        """
        threshold = self.config.threshold_docs
        busy: set[int] = set()
        moved: list[Migration] = []
        docs = self._docs
        while True:
            free = [shard for shard in range(self.config.shards) if shard not in busy]
            if len(free) < 2:
                break
            # Ties go to the lowest shard number: the same input always moves the same chunk.
            donor = max(free, key=lambda shard: (docs[shard], -shard))
            recipient = min(free, key=lambda shard: (docs[shard], shard))
            if docs[donor] - docs[recipient] < threshold:
                break
            index = self._owners.index(donor)  # the donor's chunk with the lowest key
            count = len(self._keys[index])
            self._owners[index] = recipient
            docs[donor] -= count
            docs[recipient] += count
            busy.update((donor, recipient))
            self.migrations += 1
            moved.append(Migration(self._ids[index], count, donor, recipient))
        return moved

    def balance(self, *, max_rounds: int = 10_000) -> int:
        """Run balancer rounds until one moves nothing; return the migrations made.

        Raises:
            RuntimeError: still moving after ``max_rounds`` rounds (a bug: every migration
                narrows the gap between donor and recipient).
        """
        total = 0
        for _ in range(max_rounds):
            moved = self.balance_round()
            if not moved:
                return total
            total += len(moved)
        raise RuntimeError(f"the balancer did not settle in max_rounds={max_rounds!r} rounds")

    # -- views ----------------------------------------------------------------------------------

    def chunks(self) -> list[Chunk]:
        """Every chunk, in key order."""
        return [
            Chunk(chunk_id, min_key, len(keys), owner)
            for chunk_id, min_key, keys, owner in zip(
                self._ids, self._mins, self._keys, self._owners, strict=True
            )
        ]

    def shard_docs(self) -> tuple[int, ...]:
        """Documents per shard."""
        return tuple(self._docs)

    def shard_chunks(self) -> tuple[int, ...]:
        """Chunks per shard."""
        counts = [0] * self.config.shards
        for owner in self._owners:
            counts[owner] += 1
        return tuple(counts)


# -- the feed ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Burst:
    """Ids to write, in stored form: a history, then windows of a burst.

    Attributes:
        strategy: what made the ids (a name of :data:`STRATEGIES`, or anything for a feed of
            your own).
        history: ids written before the burst (not reported); the collection is balanced
            after them.
        windows: the burst's ids, one tuple per time window, each in the order written.
        window_ms: the length of a window, for the record (0 when not made by a clock).
    """

    strategy: str
    history: tuple[Any, ...]
    windows: tuple[tuple[Any, ...], ...]
    window_ms: int = 0

    @classmethod
    def of(
        cls, windows: Iterable[Iterable[Any]], *, history: Iterable[Any] = (), strategy: str = ""
    ) -> Burst:
        """A burst from hand-made windows of ids (ints, ObjectIds, Binary...)."""
        return cls(strategy, tuple(history), tuple(tuple(window) for window in windows))

    @property
    def size(self) -> int:
        """Ids in the windows (the history left out)."""
        return sum(len(window) for window in self.windows)


class _Clock:
    """A clock the burst sets before each id: ``clock()`` is epoch milliseconds."""

    __slots__ = ("now",)

    def __init__(self, now: int) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


Maker = Callable[[], Any]
#: Builds one id maker per writer process: ``(rng, clock, processes) -> makers``.
MakerFactory = Callable[[random.Random, _Clock, int], list[Maker]]


def _object_id_makers(rng: random.Random, clock: _Clock, processes: int) -> list[Maker]:
    # bson.ObjectId's layout, with the clock injected: 4 bytes of seconds, 5 random bytes per
    # process, a 3-byte counter that starts at random and goes up by one per id.
    def maker() -> Maker:
        process = rng.randbytes(5)
        state = [rng.getrandbits(24)]
        pack = struct.Struct(">I").pack

        def make() -> ObjectId:
            state[0] = (state[0] + 1) & 0xFFFFFF
            return ObjectId(pack(clock() // 1000) + process + state[0].to_bytes(3, "big"))

        return make

    return [maker() for _ in range(processes)]


def _uuid4_makers(rng: random.Random, clock: _Clock, processes: int) -> list[Maker]:
    clear = ~((0xF << 76) | (0x3 << 62))
    flags = (0x4 << 76) | (0x2 << 62)

    def make() -> Binary:
        number = (rng.getrandbits(128) & clear) | flags
        return Binary(number.to_bytes(16, "big"), C.BSON_UUID_SUBTYPE)

    return [make] * processes


def _uuid7_makers(rng: random.Random, clock: _Clock, processes: int) -> list[Maker]:
    from ..standard import UUID7Generator

    def maker() -> Maker:
        generate = UUID7Generator(clock=clock, random_bytes=rng.randbytes).generate

        def make() -> Binary:
            return Binary(generate().bytes, C.BSON_UUID_SUBTYPE)

        return make

    return [maker() for _ in range(processes)]


def _locality_makers(mode: str) -> MakerFactory:
    from ..locality import LocalityUUIDGenerator

    def factory(rng: random.Random, clock: _Clock, processes: int) -> list[Maker]:
        def maker(process: int) -> Maker:
            # Each writer on a machine of its own: its own pid and MAC. Spread mode starts at a
            # seeded counter; sequential mode at the hash of the clock's 10-minute window, the
            # same for every writer (that is the mode's point).
            generator = LocalityUUIDGenerator(
                pid=1_000 + process,
                mac=rng.getrandbits(48),
                clock=clock,
                counter=rng.getrandbits(32) if mode == "spread" else None,
                mode="spread" if mode == "spread" else "sequential",
            )
            generate = generator.generate

            def make() -> Binary:
                return Binary(generate().bytes, C.BSON_UUID_SUBTYPE)

            return make

        return [maker(process) for process in range(processes)]

    return factory


class _Counters:
    """The counter documents of a sequence, shared by its writers: leases of ``batch`` values.

    The same rules as :class:`~mongoengine_ids.sequence.CounterStore` without a database: the
    value space of :class:`~mongoengine_ids.sequence.Space`, a lease from a range picked at
    random when there are several.
    """

    def __init__(self, rng: random.Random, *, batch: int, digits: int | None, ranges: int) -> None:
        from ..sequence.field import Space

        self._rng = rng
        self._batch = batch
        self._space = Space.build(start=1 if ranges == 1 else 0, digits=digits, shards=ranges)
        self._bounds = [self._space.bounds(shard) for shard in range(ranges)]
        self._next = [low for low, _ in self._bounds]

    def lease(self) -> range:
        shard = self._rng.randrange(len(self._bounds)) if len(self._bounds) > 1 else 0
        low = self._next[shard]
        high = min(low + self._batch, self._bounds[shard][1] + 1)
        if low >= high:
            raise RuntimeError(f"range {shard!r} of the simulated sequence is exhausted")
        self._next[shard] = high
        return range(low, high)


def _sequence_makers(*, batch: int, digits: int | None, ranges: int) -> MakerFactory:
    def factory(rng: random.Random, clock: _Clock, processes: int) -> list[Maker]:
        counters = _Counters(rng, batch=batch, digits=digits, ranges=ranges)

        def maker() -> Maker:
            block: list[Any] = [iter(())]

            def make() -> int:
                for value in block[0]:
                    return int(value)
                block[0] = iter(counters.lease())
                return int(next(block[0]))

            return make

        return [maker() for _ in range(processes)]

    return factory


def _random_makers(rng: random.Random, clock: _Clock, processes: int) -> list[Maker]:
    from ..random_unique.space import IntegerSpace

    space = IntegerSpace.of_digits(RANDOM_DIGITS_COUNT)
    size = space.size
    value = space.value

    def make() -> int:
        return int(value(rng.randrange(size)))

    return [make] * processes


_FACTORIES: Final[Mapping[str, MakerFactory]] = {
    OBJECT_ID: _object_id_makers,
    UUID4: _uuid4_makers,
    UUID7: _uuid7_makers,
    LOCALITY_SPREAD: _locality_makers("spread"),
    LOCALITY_SEQUENTIAL: _locality_makers("sequential"),
    SEQUENCE_BATCH_1: _sequence_makers(batch=1, digits=None, ranges=1),
    SEQUENCE_BATCH_1000: _sequence_makers(batch=1_000, digits=SEQUENCE_DIGITS, ranges=1),
    SEQUENCE_SHARDED: _sequence_makers(batch=1_000, digits=SEQUENCE_DIGITS, ranges=SEQUENCE_RANGES),
    RANDOM_DIGITS: _random_makers,
}


def make_burst(
    strategy: str,
    *,
    ids: int = DEFAULT_IDS,
    windows: int = DEFAULT_WINDOWS,
    history: int = DEFAULT_HISTORY,
    processes: int = DEFAULT_PROCESSES,
    window_ms: int = DEFAULT_WINDOW_MS,
    start_ms: int = DEFAULT_START_MS,
    seed: int = DEFAULT_SEED,
) -> Burst:
    """The ids ``processes`` writers of ``strategy`` make in a burst, deterministically.

    Writers take turns, one id each; the ``i``-th id of the burst is made at
    ``start_ms + i * windows * window_ms // ids`` by an injected clock, so each window holds
    ``ids / windows`` ids. The history is made the same way, at the same rate, just before
    ``start_ms``, by the same writers (their counters carry on into the burst). The
    generators are the package's own where they take a clock (Locality UUID, UUIDv7); the
    ObjectId and counter layouts are rebuilt here around the injected clock and ``seed``.

    Args:
        strategy: one of :data:`STRATEGIES`.
        ids: ids in the burst.
        windows: time windows the burst is divided into.
        history: ids written before the burst.
        processes: writer processes (machines), each with its own generator.
        window_ms: the length of a window in milliseconds.
        start_ms: when the burst starts, Unix epoch milliseconds.
        seed: seeds every random choice: the same arguments give the same ids.

    Returns:
        The burst, ids in stored form.

    Raises:
        ValueError: ``strategy`` is unknown, a count is out of range, or ``start_ms`` leaves
            the history before 1970.
        TypeError: a count or ``start_ms`` is not an int.
    """
    factory = _FACTORIES.get(strategy)
    if factory is None:
        raise ValueError(f"strategy={strategy!r} is unknown: expected one of {STRATEGIES!r}")
    _positive("ids", ids)
    _positive("windows", windows)
    _positive("processes", processes)
    _positive("window_ms", window_ms)
    if isinstance(history, bool) or not isinstance(history, int):
        raise TypeError(f"history must be an int, not {type(history).__name__}: {history!r}")
    if history < 0:
        raise ValueError(f"history={history!r} must be >= 0")
    if isinstance(start_ms, bool) or not isinstance(start_ms, int):
        raise TypeError(f"start_ms must be an int, not {type(start_ms).__name__}: {start_ms!r}")
    if windows > ids:
        raise ValueError(f"windows={windows!r} exceeds ids={ids!r}: some windows would be empty")
    span = windows * window_ms
    history_start = start_ms - history * span // ids
    if history_start < 0:
        raise ValueError(
            f"start_ms={start_ms!r} leaves no room for the history ({history!r} ids before it, "
            f"from {history_start!r}): expected a time after 1970 for every id"
        )
    clock = _Clock(history_start)
    makers = factory(random.Random(seed), clock, processes)

    made_history: list[Any] = []
    for i in range(history):
        clock.now = history_start + i * span // ids
        made_history.append(makers[i % processes]())
    made: list[list[Any]] = [[] for _ in range(windows)]
    for i in range(ids):
        offset = i * span // ids
        clock.now = start_ms + offset
        made[offset // window_ms].append(makers[(history + i) % processes]())
    return Burst(strategy, tuple(made_history), tuple(tuple(window) for window in made), window_ms)


# -- the simulation ----------------------------------------------------------------------------


@dataclass(frozen=True)
class WindowShares:
    """Where the writes of one window went.

    Attributes:
        index: the window's number, from 0.
        writes: ids written in the window.
        shares: each shard's share of them (sums to 1.0).
        imbalance: the largest share divided by the ideal ``1 / shards``.
        chunks_touched: distinct chunks that took a write in the window.
        interleaving: the share of the other windows' ids whose keys fall between this
            window's lowest and highest key (0.0: the window's ids sit together).
    """

    index: int
    writes: int
    shares: tuple[float, ...]
    imbalance: float
    chunks_touched: int
    interleaving: float

    @property
    def top_share(self) -> float:
        """The largest shard's share of the window's writes."""
        return max(self.shares)


@dataclass(frozen=True)
class ShardReport:
    """The outcome of :func:`simulate` for one feed.

    Attributes:
        strategy: what made the ids.
        config: the cluster's numbers.
        windows: per window, where the writes went.
        history: ids written before the burst.
        shard_docs: documents per shard at the end.
        shard_chunks: chunks per shard at the end.
        splits: chunk splits during the whole run (history included).
        migrations: chunk migrations during the whole run.
    """

    strategy: str
    config: ClusterConfig
    windows: tuple[WindowShares, ...]
    history: int
    shard_docs: tuple[int, ...]
    shard_chunks: tuple[int, ...]
    splits: int
    migrations: int

    @property
    def imbalance_max(self) -> float:
        """The worst window's imbalance."""
        return max(window.imbalance for window in self.windows)

    @property
    def imbalance_mean(self) -> float:
        """The mean of the windows' imbalances."""
        return sum(window.imbalance for window in self.windows) / len(self.windows)

    @property
    def interleaving_mean(self) -> float:
        """The mean of the windows' interleaving."""
        return sum(window.interleaving for window in self.windows) / len(self.windows)

    def as_dict(self) -> dict[str, Any]:
        """The report as JSON-ready data."""
        return {
            "strategy": self.strategy,
            "config": {
                "shards": self.config.shards,
                "chunk_docs": self.config.chunk_docs,
                "balancer_interval": self.config.balancer_interval,
                "threshold_chunks": self.config.threshold_chunks,
            },
            "history": self.history,
            "imbalance_max": self.imbalance_max,
            "imbalance_mean": self.imbalance_mean,
            "interleaving_mean": self.interleaving_mean,
            "windows": [
                {
                    "index": window.index,
                    "writes": window.writes,
                    "shares": list(window.shares),
                    "imbalance": window.imbalance,
                    "chunks_touched": window.chunks_touched,
                    "interleaving": window.interleaving,
                }
                for window in self.windows
            ],
            "shard_docs": list(self.shard_docs),
            "shard_chunks": list(self.shard_chunks),
            "splits": self.splits,
            "migrations": self.migrations,
        }


def simulate(burst: Burst, config: ClusterConfig | None = None) -> ShardReport:
    """Write ``burst`` into a simulated sharded collection; report where each window went.

    The history is written first (balancer rounds included), then the balancer runs until it
    has nothing left to move, then the windows are written in order.

    Args:
        burst: the ids (see :func:`make_burst`, :meth:`Burst.of`).
        config: the cluster's numbers (default :class:`ClusterConfig`).

    Returns:
        The report.

    Raises:
        ValueError: the burst has no window, or an empty one.
        TypeError: an id is of a type BSON does not order here (see :func:`bson_sort_key`).
    """
    config = config if config is not None else ClusterConfig()
    if not burst.windows or any(not window for window in burst.windows):
        sizes = [len(window) for window in burst.windows]
        raise ValueError(f"every window needs at least one id; window sizes: {sizes!r}")
    collection = ShardedCollection(config)
    interval = config.balancer_interval
    insert = collection.insert
    written = 0
    for value in burst.history:
        insert(bson_sort_key(value))
        written += 1
        if written % interval == 0:
            collection.balance_round()
    collection.balance()

    window_keys: list[list[SortKey]] = []
    results: list[tuple[int, list[int], int]] = []
    for window in burst.windows:
        counts = [0] * config.shards
        touched: set[int] = set()
        keys = [bson_sort_key(value) for value in window]
        for key in keys:
            shard, chunk_id = insert(key)
            counts[shard] += 1
            touched.add(chunk_id)
            written += 1
            if written % interval == 0:
                collection.balance_round()
        window_keys.append(keys)
        results.append((len(keys), counts, len(touched)))

    interleaving = _interleaving(window_keys)
    windows = tuple(
        WindowShares(
            index=index,
            writes=writes,
            shares=tuple(count / writes for count in counts),
            imbalance=max(counts) / writes * config.shards,
            chunks_touched=touched,
            interleaving=interleaving[index],
        )
        for index, (writes, counts, touched) in enumerate(results)
    )
    return ShardReport(
        strategy=burst.strategy,
        config=config,
        windows=windows,
        history=len(burst.history),
        shard_docs=collection.shard_docs(),
        shard_chunks=collection.shard_chunks(),
        splits=collection.splits,
        migrations=collection.migrations,
    )


def _interleaving(window_keys: Sequence[Sequence[SortKey]]) -> list[float]:
    """Per window: the share of the other windows' keys inside its key range."""
    everything = sorted(key for keys in window_keys for key in keys)
    total = len(everything)
    shares: list[float] = []
    for keys in window_keys:
        others = total - len(keys)
        if others == 0:
            shares.append(0.0)
            continue
        inside = bisect_right(everything, max(keys)) - bisect_left(everything, min(keys))
        shares.append((inside - len(keys)) / others)
    return shares


def run(
    strategies: Iterable[str] = STRATEGIES,
    *,
    config: ClusterConfig | None = None,
    ids: int = DEFAULT_IDS,
    windows: int = DEFAULT_WINDOWS,
    history: int = DEFAULT_HISTORY,
    processes: int = DEFAULT_PROCESSES,
    seed: int = DEFAULT_SEED,
    progress: Callable[[str], None] | None = None,
) -> list[ShardReport]:
    """:func:`make_burst` then :func:`simulate` for each strategy.

    Args:
        strategies: names from :data:`STRATEGIES`.
        config: the cluster's numbers.
        ids: ids per burst.
        windows: windows per burst.
        history: ids written before each burst.
        processes: writer processes.
        seed: seeds every burst.
        progress: called with each strategy's name before it runs.

    Returns:
        One report per strategy, in order.

    Raises:
        TypeError: ``strategies`` is one name, ``config`` no ClusterConfig, a count no int.
        ValueError: an unknown strategy or a bad count (see :func:`make_burst`).
    """
    if isinstance(strategies, str):
        raise TypeError(
            f"strategies must be a list of names, not one name: {strategies!r} (write "
            f"[{strategies!r}])"
        )
    if config is not None and not isinstance(config, ClusterConfig):
        raise TypeError(f"config must be a ClusterConfig, not {config!r}")
    reports: list[ShardReport] = []
    for strategy in strategies:
        if progress is not None:
            progress(strategy)
        burst = make_burst(
            strategy, ids=ids, windows=windows, history=history, processes=processes, seed=seed
        )
        reports.append(simulate(burst, config))
    return reports


# -- output ------------------------------------------------------------------------------------


def _table(headers: Sequence[str], rows: Sequence[Sequence[str]], right: set[int]) -> str:
    widths = [max(len(row[i]) for row in [headers, *rows]) for i in range(len(headers))]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(
            cell.rjust(width) if i in right else cell.ljust(width)
            for i, (cell, width) in enumerate(zip(cells, widths, strict=True))
        ).rstrip()

    rule = "  ".join("-" * width for width in widths)
    return "\n".join([line(headers), rule, *(line(row) for row in rows)])


def format_summary(reports: Sequence[ShardReport]) -> str:
    """One line per strategy: imbalance (worst and mean window), top share, interleaving."""
    headers = ("strategy", "imbalance max", "mean", "top shard share", "interleaving", "chunks")
    rows = [
        (
            report.strategy,
            f"{report.imbalance_max:.2f}x",
            f"{report.imbalance_mean:.2f}x",
            f"{min(w.top_share for w in report.windows):.0%}"
            f"-{max(w.top_share for w in report.windows):.0%}",
            f"{report.interleaving_mean:.3f}",
            str(sum(report.shard_chunks)),
        )
        for report in reports
    ]
    return _table(headers, rows, {1, 2, 3, 4, 5})


def format_windows(report: ShardReport) -> str:
    """One line per window of ``report``: each shard's share, imbalance, chunks, interleaving."""
    shards = report.config.shards
    headers = (
        "window",
        "writes",
        *(f"shard {shard}" for shard in range(shards)),
        "imbalance",
        "chunks",
        "interleaving",
    )
    rows = [
        (
            str(window.index),
            f"{window.writes:,}",
            *(f"{share:.1%}" for share in window.shares),
            f"{window.imbalance:.2f}x",
            str(window.chunks_touched),
            f"{window.interleaving:.3f}",
        )
        for window in report.windows
    ]
    return _table(headers, rows, set(range(1, len(headers))))


class PlottingUnavailableError(MongoEngineIdsError, ImportError):
    """The chart needs matplotlib, which is not installed (the ``plot`` extra)."""


#: What to install for :func:`plot`.
PLOT_INSTALL: Final = "pip install 'mongoengine-ids[plot]'"
#: The chart is a PNG: the name of its file ends so (any case), not in another format's suffix.
PLOT_SUFFIX: Final = ".png"


def not_a_png_name(path: str | Path) -> str | None:
    """Why the chart cannot be written to ``path`` (a name not ending in :data:`PLOT_SUFFIX`:
    ``chart.svg`` would hold PNG data), or None."""
    if str(path).lower().endswith(PLOT_SUFFIX):
        return None
    return f"the chart is a PNG: expected a file name ending in {PLOT_SUFFIX}"


#: Layout of the chart, in inches: each panel, the legend's column on the right, the title's
#: band at the top; the caption's band grows with its lines.
_PANEL_SIZE: Final = (4.2, 2.8)
_LEGEND_WIDTH: Final = 1.6
_TITLE_LINE_HEIGHT: Final = 0.2
_CAPTION_LINE_HEIGHT: Final = 0.17
#: Characters per inch of figure width of the 8-point caption and the 10-point title (DejaVu
#: Sans, with a margin).
_CAPTION_CHARACTERS_PER_INCH: Final = 14
_TITLE_CHARACTERS_PER_INCH: Final = 11
#: Up to this many windows, a tick each; beyond, matplotlib picks (integers still).
_TICK_EVERY_WINDOW: Final = 12
#: Shards named in the legend; one more line names the rest (whose colours repeat from shard
#: 10: matplotlib's cycle has 10).
_LEGEND_SHARDS: Final = 8


def _span(values: Iterable[int]) -> str:
    """``"500"`` when every value is 500, ``"498-502"`` when they differ (thousands separated)."""
    distinct = sorted(set(values))
    if len(distinct) == 1:
        return f"{distinct[0]:,}"
    return f"{distinct[0]:,}-{distinct[-1]:,}"


def chart_title(reports: Sequence[ShardReport]) -> str:
    """What the chart shows and what was simulated: the collection, the shards, the windows."""
    shards = _span(report.config.shards for report in reports)
    writes = _span(window.writes for report in reports for window in report.windows)
    noun = "shard" if shards == "1" else "shards"
    return (
        f"Where each window's writes went: a collection range-sharded on its id, "
        f"{shards} {noun}, windows of {writes} writes"
    )


def chart_caption(reports: Sequence[ShardReport]) -> str:
    """The chart's caption: how to read a bar, the ideal line and the imbalance figure."""
    shards = sorted({report.config.shards for report in reports})
    ideal = "1/" + _span(shards)
    worst = f"{shards[-1]:.2f}x"
    history = _span(report.history for report in reports)
    chunk_docs = _span(report.config.chunk_docs for report in reports)
    return (
        "Each bar is one window of consecutive writes, stacked by the shard that took them; "
        f"the dashed line is the ideal share, {ideal} of a window's writes per shard. "
        "Imbalance, in each panel's title, is the largest shard's share of a window divided by "
        f"that ideal share, in the worst window: 1.00x is perfectly even, {worst} means every "
        "write of the window went to one shard. Before the windows, "
        f"{history} earlier ids of the same strategy were written and the balancer run until "
        f"it had nothing to move; chunks split at {chunk_docs} documents."
    )


def chart_figure(reports: Sequence[ShardReport]) -> Figure:
    """The chart :func:`plot` writes, as a matplotlib ``Figure`` (nothing drawn to a screen).

    One panel per strategy stacks the shards' shares of every window (a single colour filling
    a bar is a hot shard) over a dashed line at the ideal share ``1 / shards``. Above the
    panels, a title says what was simulated (:func:`chart_title`); to their right, the legend
    (outside every panel, so it hides no bar); under them, the caption explaining the
    imbalance (:func:`chart_caption`). Windows are numbered from 0, on integer ticks.

    Args:
        reports: from :func:`simulate` or :func:`run`.

    Returns:
        The figure; save it with ``figure.savefig(path)``.

    Raises:
        PlottingUnavailableError: matplotlib is not installed (also an ``ImportError``).
        ValueError: ``reports`` is empty.
    """
    if not reports:
        raise ValueError("plot() needs at least one report")
    try:
        from matplotlib.figure import Figure
        from matplotlib.patches import Patch
        from matplotlib.ticker import MaxNLocator, PercentFormatter
    except ImportError as error:
        raise PlottingUnavailableError(
            f"drawing the shard chart needs matplotlib, which is not installed: {PLOT_INSTALL}"
        ) from error
    import textwrap

    columns = min(3, len(reports))
    rows = (len(reports) + columns - 1) // columns
    panels_width = _PANEL_SIZE[0] * columns
    width = panels_width + _LEGEND_WIDTH
    caption = textwrap.fill(chart_caption(reports), int(width * _CAPTION_CHARACTERS_PER_INCH))
    caption_height = _CAPTION_LINE_HEIGHT * (caption.count("\n") + 1) + 0.2
    title = textwrap.fill(chart_title(reports), int(width * _TITLE_CHARACTERS_PER_INCH))
    title_height = _TITLE_LINE_HEIGHT * (title.count("\n") + 1) + 0.15
    height = _PANEL_SIZE[1] * rows + title_height + caption_height
    figure = Figure(figsize=(width, height))
    axes = figure.subplots(rows, columns, squeeze=False, sharey=True)
    legend: list[tuple[Any, str]] = []
    for position, report in enumerate(reports):
        ax = axes[position // columns][position % columns]
        indexes = [window.index for window in report.windows]
        bottom = [0.0] * len(indexes)
        shards = report.config.shards
        bars = []
        for shard in range(shards):
            heights = [window.shares[shard] for window in report.windows]
            bars.append(ax.bar(indexes, heights, bottom=bottom, label=f"shard {shard}", width=0.9))
            bottom = [b + h for b, h in zip(bottom, heights, strict=True)]
        line = ax.axhline(
            1 / shards,
            color="black",
            linestyle="--",
            linewidth=1.0,
            label=f"ideal share, 1/{shards}",
        )
        if position == 0:
            legend = [(line, line.get_label())]
            legend += [(bar, f"shard {shard}") for shard, bar in enumerate(bars[:_LEGEND_SHARDS])]
            if shards > _LEGEND_SHARDS:
                rest = f"... shards {_LEGEND_SHARDS}-{shards - 1}"
                if shards > 10:
                    rest += "\n(colours repeat)"
                legend.append((Patch(visible=False), rest))
        ax.set_title(f"{report.strategy}: imbalance {report.imbalance_max:.2f}x", fontsize=9)
        ax.set_xlabel("window", fontsize=8)
        if len(indexes) <= _TICK_EVERY_WINDOW:
            ax.set_xticks(indexes)
        else:
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.yaxis.set_major_formatter(PercentFormatter(1.0))
        ax.tick_params(labelsize=8)
        ax.set_ylim(0, 1)
    for position in range(len(reports), rows * columns):
        axes[position // columns][position % columns].axis("off")
    for row in axes:
        row[0].set_ylabel("share of the window's writes", fontsize=8)

    right = panels_width / width
    figure.suptitle(title, fontsize=10, y=1 - 0.1 / height, va="top")
    figure.text(0.01, 0.08 / height, caption, fontsize=8, va="bottom", ha="left")
    figure.tight_layout(
        pad=0.6, rect=(0, caption_height / height, right, 1 - title_height / height)
    )
    # In the column right of the panels, level with the top of the first row: over no bar.
    figure.legend(
        [handle for handle, _ in legend],
        [label for _, label in legend],
        loc="upper left",
        bbox_to_anchor=(right + 0.05 / width, axes[0][-1].get_position().y1),
        fontsize=8,
        frameon=False,
    )
    return figure


def plot(reports: Sequence[ShardReport], path: str | Path) -> Path:
    """Write :func:`chart_figure`'s chart of ``reports`` to ``path`` as a PNG.

    Args:
        reports: from :func:`simulate` or :func:`run`.
        path: the PNG file to write, ending in ``.png``.

    Returns:
        The path written.

    Raises:
        PlottingUnavailableError: matplotlib is not installed (also an ``ImportError``).
        ValueError: ``reports`` is empty, or ``path`` does not end in ``.png`` (``chart.svg``
            would hold PNG data).
    """
    target = Path(path)
    problem = not_a_png_name(path)
    if problem is not None:
        raise ValueError(f"path={str(path)!r}: {problem}")
    figure = chart_figure(reports)
    figure.savefig(target, format="png", dpi=100)
    return target


__all__ = [
    "DEFAULT_BALANCER_INTERVAL",
    "DEFAULT_CHUNK_DOCS",
    "DEFAULT_HISTORY",
    "DEFAULT_IDS",
    "DEFAULT_PROCESSES",
    "DEFAULT_SEED",
    "DEFAULT_SHARDS",
    "DEFAULT_START_MS",
    "DEFAULT_WINDOWS",
    "DEFAULT_WINDOW_MS",
    "LOCALITY_SEQUENTIAL",
    "LOCALITY_SPREAD",
    "MIGRATION_THRESHOLD_CHUNKS",
    "MIN_KEY",
    "OBJECT_ID",
    "PLOT_INSTALL",
    "PLOT_SUFFIX",
    "RANDOM_DIGITS",
    "SEQUENCE_BATCH_1",
    "SEQUENCE_BATCH_1000",
    "SEQUENCE_SHARDED",
    "STRATEGIES",
    "UUID4",
    "UUID7",
    "Burst",
    "Chunk",
    "ClusterConfig",
    "Migration",
    "PlottingUnavailableError",
    "ShardReport",
    "ShardedCollection",
    "SortKey",
    "WindowShares",
    "bson_sort_key",
    "chart_caption",
    "chart_figure",
    "chart_title",
    "format_summary",
    "format_windows",
    "make_burst",
    "not_a_png_name",
    "plot",
    "run",
    "simulate",
]
