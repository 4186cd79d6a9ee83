"""The shortcuts replay at fleet speed takes (issue 41 item 5) give what the long way gives, on generated inputs:
numpy's p99 of the step times (the hang rule's thresholds), the clock offsets of a run of several steps (a replay's
merged lines, in arrival order), and the future-timestamp check of merged rows."""

from __future__ import annotations

import random

import numpy as np
import pytest

from stepwatch.models.steps.clocks import ClockOffsets
from stepwatch.models.steps.robust import list_median, median, nan_max, nan_median, nan_sum, sorted_percentile
from stepwatch.models.wire.step_columns import _step_columns


def _values(rng: random.Random, n: int) -> list[float]:
    shape = rng.randrange(3)
    if shape == 0:  # any scale
        return [rng.uniform(0, 10 ** rng.randint(-3, 3)) for _ in range(n)]
    if shape == 1:  # step times, rounded (ties)
        return [abs(round(rng.gauss(1.0, 0.1), rng.randint(0, 6))) for _ in range(n)]
    return [rng.choice([0.5, 1.0, 1.25, 3.0]) for _ in range(n)]  # few distinct values


@pytest.mark.parametrize("seed", range(2))
def test_sorted_percentile_is_numpys_float(seed):
    rng = random.Random(seed)
    for _ in range(500):
        values = _values(rng, rng.choice([1, 2, 3, 7, 99, 100, 101, 256]))
        for q in (99, 90, 50, 1, 0, 100):
            assert sorted_percentile(sorted(values), q) == float(np.percentile(np.array(values), q))


@pytest.mark.parametrize("seed", range(6))
def test_clock_offsets_of_a_run_of_several_steps_are_those_of_one_event_at_a_time(seed):
    rng = random.Random(seed)
    nodes = [f"n{i}" for i in range(rng.randint(3, 12))]
    skew = {n: rng.uniform(-2, 2) for n in nodes}
    events = []  # (node, step, ts), in a broker's arrival order: steps mostly together, some late, a restart
    for step in list(range(40)) + list(range(30, 45)):
        for node in nodes:
            for _ in range(rng.randint(1, 4)):  # ranks of the node
                events.append((rng.choice(nodes) if rng.random() < 0.05 else node, step,
                               1000.0 + step + skew[node] + rng.random() * 0.01))
    for i in range(len(events) - 1):  # a few neighbours swapped (late events)
        if rng.random() < 0.05:
            events[i], events[i + 1] = events[i + 1], events[i]
    one, many = ClockOffsets(), ClockOffsets()
    for e in events:
        one.observe(*e)
    lo = 0
    while lo < len(events):  # runs of any length, as merged reads cut them
        hi = min(len(events), lo + rng.choice([1, 5, 9, 64, 300]))
        many.observe_many(*map(list, zip(*events[lo:hi])))
        lo = hi
    assert many.offsets == one.offsets
    assert many._ends == one._ends


def test_rows_ahead_of_their_arrival_are_found_by_the_array_too():
    rng = random.Random(3)
    for n in (1, 15, 16, 200):
        items = [{"v": 1, "kind": "step", "job": "j", "rank": r, "step": 1, "ts": 100.0 + rng.random(),
                  "step_time": 1.0} for r in range(n)]
        cols = _step_columns(items)
        for slack in (0.0, 0.5, 2.0):
            arrivals = [100.5 + rng.uniform(-1, 1) for _ in range(n)]
            assert cols.ahead_of(arrivals, slack) == any(t > a + slack for t, a in zip(cols.ts, arrivals))


@pytest.mark.parametrize("seed", range(3))
def test_nan_sum_is_numpys_float(seed):
    rng = random.Random(seed)
    specials = [float("nan"), -0.0, 0.0, 1e16, -1e16, 1.0, 1e-300, 3.0]
    for _ in range(3000):
        n = rng.choice([0, 1, 2, 3, 4, 5, 7, 8, 9, 16, 40])
        values = [rng.choice(specials) if rng.random() < 0.3 else rng.uniform(-1, 1) * 10 ** rng.randint(-8, 17)
                  for _ in range(n)]
        array = np.array(values, dtype=float)
        got, want = nan_sum(array), float(np.nansum(array))
        assert repr(got) == repr(want), values  # the same float, the sign of a zero included


def _partition_median(values: np.ndarray) -> float:
    """The median by numpy's partition (robust.median before its small path): the float to keep, a zero's sign too."""
    n, k = len(values), len(values) // 2
    if n % 2:
        return float(np.partition(values, k)[k])
    part = np.partition(values, (k - 1, k))
    return float((part[k - 1] + part[k]) / 2)


@pytest.mark.parametrize("seed", range(3))
def test_medians_of_a_few_values_are_the_partitions_float(seed):
    rng = random.Random(seed)
    specials = [-0.0, 0.0, 1e300, -1e300, float("inf"), 5e-324, 1.0, 1.0 + 2 ** -52]
    for _ in range(1500):
        n = rng.choice([rng.randint(1, 20), 255, 256])  # (a job's clock offset: 256 lags)
        values = [rng.choice(specials) if rng.random() < 0.3 else round(rng.uniform(-1, 1) * 10 ** rng.randint(-6, 6),
                                                                          rng.randint(0, 12)) for _ in range(n)]
        array = np.array(values, dtype=float)
        assert repr(median(array)) == repr(_partition_median(array)), values
        assert median(array) == float(np.median(array))
        if np.isfinite(array).all():
            assert repr(list_median(values)) == repr(_partition_median(array)), values
        holes = array.copy()
        holes[[i for i in range(n) if rng.random() < 0.3]] = np.nan
        kept = holes[~np.isnan(holes)]
        want = _partition_median(kept) if len(kept) else float("nan")
        assert repr(nan_median(holes)) == repr(want), holes.tolist()
        top = float(np.nanmax(holes)) if len(kept) else float("nan")
        assert repr(nan_max(holes)) == repr(top), holes.tolist()
