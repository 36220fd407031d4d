"""Benchmark group ``random_unique``: ``save()`` with a RandomUniqueField as its space fills.

Rows (names are stable; the tests look for them), for each fill f in 0%, 1%, 10% and 50%:

* ``save() assigned code, <f> full``: the baseline, the same model shape whose unique ``code``
  (``IntField(unique=True)``) the caller assigns from values known to be free: one write per
  document, never a collision;
* ``save() RandomUniqueField code, <f> full``: the candidate, ``code`` drawn at random from the
  same space and retried on collisions; compared with the baseline at the same fill, with the
  measured retries per insert against the expected ``f / (1 - f)`` in the note.

Reported without targets. The rows run on mongomock (or the server given as ``uri``), where
every insert scans the collection for the unique index and a retry costs a failed insert, not
a round trip; what the write path costs against assigned values, with a server's latency, is
the ``writes`` group's. (The target of issue 4, within 1.10x at 1% full on mongomock, is gone
with issue 11.)

The space holds :attr:`_Counts.space` values; a fill is made by inserting that share of them
before timing. Each saved document is deleted again right after its (timed) save, untimed, so
every save meets exactly that fill and expects ``f / (1 - f)`` retries. Baseline and candidate
take turns save by save (:func:`~mongoengine_ids.tools.bench._core.measure_alternating`): the speed
of the machine changes from second to second, and both must meet the same spells for a ratio
to hold within a few percent.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

from mongoengine import Document, IntField, StringField

from ...random_unique import RandomUniqueField
from ._core import (
    BENCH_ALIAS,
    Result,
    Step,
    baseline_row,
    clock,
    compare_row,
    database,
    database_label,
    measure_alternating,
)

GROUP: Final = "random_unique"

#: The fills measured, as shares of the space.
FILLS: Final[tuple[float, ...]] = (0.0, 0.01, 0.10, 0.50)

#: The prefill and the free values are drawn from this seed: runs are comparable.
SEED: Final = 20_240_601


def _percent(fill: float) -> str:
    return f"{fill:.0%}"


def assigned_name(fill: float) -> str:
    """The baseline row's name at ``fill``."""
    return f"save() assigned code, {_percent(fill)} full"


def random_name(fill: float) -> str:
    """The candidate row's name at ``fill``."""
    return f"save() RandomUniqueField code, {_percent(fill)} full"


@dataclass(frozen=True)
class _Counts:
    """One run's sizes.

    Attributes:
        space: values in the space (``min_value=0, max_value=space - 1``).
        number: saves per round, per candidate.
        rounds: timed rounds.
        warmup: untimed rounds first.
    """

    space: int
    number: int
    rounds: int
    warmup: int


# mongomock checks a unique index by scanning the collection, so a save costs time in
# proportion to the documents present (at 50% of 4,000: about 2,000 compared per save), for the
# baseline and the candidate alike; the ratio is what is read. At 1% full a round of 200 saves
# holds 2 retries on average (each costs a failed save, about a save and a half), and their
# count varies from round to round.
_FULL: Final = _Counts(space=4_000, number=200, rounds=9, warmup=1)
_QUICK: Final = _Counts(space=400, number=5, rounds=2, warmup=0)


def _models(fill: float, space: int) -> tuple[type[Document], type[Document]]:
    """The baseline and the candidate model for one fill, each in its own collection."""
    suffix = f"{round(fill * 100):02d}"

    class AssignedThing(Document):  # type: ignore[misc]
        code = IntField(unique=True)
        name = StringField()
        meta = {"db_alias": BENCH_ALIAS, "collection": f"bench_assigned_{suffix}"}

    class RandomThing(Document):  # type: ignore[misc]
        # warn_collision_rate=1.0: a half-full space is the point here, not news (and the group
        # must print nothing). max_retries=64: at 50% full the default 16 gives up once in
        # 130,000 inserts (0.5 ** 17), about once in 65 runs of this group, which then stopped.
        code = RandomUniqueField(
            min_value=0, max_value=space - 1, warn_collision_rate=1.0, max_retries=64
        )
        name = StringField()
        meta = {"db_alias": BENCH_ALIAS, "collection": f"bench_random_{suffix}"}

    return AssignedThing, RandomThing


def _prefill(model: type[Document], taken: list[int]) -> None:
    collection = model._get_collection()  # first access: indexes are created here, untimed
    collection.delete_many({})
    if taken:
        collection.insert_many([{"code": value, "name": "prefill"} for value in taken])


def _save_step(model: type[Document], make: Callable[[int], Document]) -> Step:
    """Save the ``i``-th new document, timing the save only; delete it again (untimed) so that
    the fill every save meets is exactly the prefill."""
    collection = model._get_collection()

    def step(index: int) -> float:
        document = make(index)
        start = clock()
        document.save()
        elapsed = clock() - start
        collection.delete_one({"_id": document.pk})
        return elapsed

    return step


def _assigned_step(model: type[Document], free: list[int]) -> Step:
    return _save_step(model, lambda index: model(code=free[index % len(free)], name="bench"))


def _random_step(model: type[Document]) -> Step:
    return _save_step(model, lambda index: model(name="bench"))


def expected_retries(fill: float) -> float:
    """Mean retries per insert at ``fill``: attempts are geometric, ``f / (1 - f)``."""
    return fill / (1 - fill)


def _one_fill(fill: float, counts: _Counts, label: str) -> list[Result]:
    rng = random.Random(SEED)
    values = list(range(counts.space))
    rng.shuffle(values)
    taken_count = round(fill * counts.space)
    taken, free = values[:taken_count], values[taken_count:]
    assigned, candidate = _models(fill, counts.space)
    _prefill(assigned, taken)
    _prefill(candidate, taken)
    field: Any = candidate._fields["code"]
    field.reset_stats()
    baseline, name = assigned_name(fill), random_name(fill)
    number, rounds = counts.number, counts.rounds
    timings = measure_alternating(
        {baseline: _assigned_step(assigned, free), name: _random_step(candidate)},
        number=number,
        rounds=rounds,
        warmup=counts.warmup,
        statistic="median",
    )
    stats = field.stats()
    inserts = stats.attempts - stats.collisions
    measured = stats.collisions / inserts if inserts else 0.0
    expected = expected_retries(taken_count / counts.space)
    note = (
        f"{label}; retries/insert {measured:.4f} measured, {expected:.4f} expected f/(1-f); "
        f"median of {rounds} rounds x {number:,}"
    )
    base_note = f"{label}; space {counts.space:,}; median of {rounds} x {number:,}"
    return [
        baseline_row(GROUP, baseline, timings[baseline], note=base_note),
        compare_row(GROUP, name, timings, baseline, note=note),
    ]


def run(*, quick: bool, uri: str | None) -> list[Result]:
    """Measure the group; return its rows (prints nothing).

    Args:
        quick: tiny iteration counts (the rows appear, the numbers mean nothing).
        uri: a MongoDB URI for the database rows, or None for mongomock.

    Returns:
        Two rows per fill of :data:`FILLS`: the baseline, then the candidate compared with it.
    """
    counts = _QUICK if quick else _FULL
    label = database_label(uri)
    rows: list[Result] = []
    with database(uri):
        for fill in FILLS:
            rows.extend(_one_fill(fill, counts, label))
    return rows


def expected_rows() -> list[tuple[str, str | None]]:
    """The (name, baseline) of every row :func:`run` returns, in order."""
    rows: list[tuple[str, str | None]] = []
    for fill in FILLS:
        rows.append((assigned_name(fill), None))
        rows.append((random_name(fill), assigned_name(fill)))
    return rows


__all__ = ["FILLS", "GROUP", "expected_retries", "expected_rows", "run"]
