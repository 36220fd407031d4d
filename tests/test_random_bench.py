"""The ``random_unique`` benchmark group runs and reports every row (numbers not asserted)."""

from __future__ import annotations

import math
import re

import pytest

from mongoengine_ids.tools.bench import random_unique


def test_quick_run_has_every_row_in_order() -> None:
    rows = random_unique.run(quick=True, uri=None)
    assert [(row.name, row.baseline) for row in rows] == random_unique.expected_rows()
    for row in rows:
        assert row.group == "random_unique"
        assert math.isfinite(row.seconds)
        assert row.seconds > 0
        if row.baseline is None:
            continue
        assert row.ratio is not None
        assert math.isfinite(row.ratio)
        assert row.target is None  # reported only: mongomock's retries are no server's
        measured, expected = map(
            float,
            re.findall(r"retries/insert (\d+\.\d+) measured, (\d+\.\d+) expected", row.note)[0],
        )
        fill = int(re.findall(r"(\d+)% full", row.name)[0]) / 100
        if fill == 0:
            assert measured == 0.0  # nothing taken (each save is deleted again): no retry
        assert expected == pytest.approx(fill / (1 - fill), abs=5e-5)


@pytest.mark.parametrize(("fill", "retries"), [(0.0, 0.0), (0.01, 1 / 99), (0.5, 1.0)])
def test_expected_retries(fill: float, retries: float) -> None:
    assert random_unique.expected_retries(fill) == pytest.approx(retries)
