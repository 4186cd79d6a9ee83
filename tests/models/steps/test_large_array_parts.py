"""The large-array shortcuts of the step road give what the forms they replace gave (generated variants)."""

from __future__ import annotations

import math
import random

import pytest

from stepwatch.models.steps.robust import upper_middle


def _values(rng: random.Random, n: int) -> list[float]:
    kind = rng.random()
    if kind < 0.3:  # Unix times with jitter (a closed step's ts)
        return [1_764_000_000.0 + rng.uniform(-0.02, 0.02) for _ in range(n)]
    if kind < 0.5:  # many ties
        return [float(rng.choice([0.0, 1.0, 2.5])) for _ in range(n)]
    if kind < 0.6:  # zeros of both signs, and a NaN now and then (the sort's answer stands)
        return [rng.choice([0.0, -0.0, 1.0, math.nan]) for _ in range(n)]
    if kind < 0.8:  # already sorted, or reversed
        out = sorted(rng.uniform(0, 1e9) for _ in range(n))
        return out if rng.random() < 0.5 else out[::-1]
    return [rng.uniform(0, 1e12) for _ in range(n)]


@pytest.mark.parametrize("seed", range(4))
def test_upper_middle_is_the_sorted_middle(seed):
    rng = random.Random(seed)
    for _ in range(60):
        values = _values(rng, rng.choice([1, 2, 5, 64, 65, 100, 1024, 4096]))
        want = sorted(values)[len(values) // 2]
        got = upper_middle(values)
        assert type(got) is float
        assert (got != got and want != want) or (got == want and math.copysign(1, got) == math.copysign(1, want))


def test_same_ranks_is_array_equal():
    import numpy as np

    from stepwatch.models.steps.layout import same_ranks

    rng = random.Random(5)
    for _ in range(500):
        a = np.array([rng.randrange(5) for _ in range(rng.randrange(0, 7))], dtype=np.int64)
        b = np.array([rng.randrange(5) for _ in range(rng.randrange(0, 7))], dtype=np.int64)
        for x, y in ((a, b), (a, a.copy()), (a, a), (a, a[::-1].copy())):
            assert same_ranks(x, y) == np.array_equal(x, y)


def test_all_named_is_none_not_in():
    from stepwatch.models.steps.layout import all_named

    rng = random.Random(6)
    for _ in range(300):
        nodes = [rng.choice([f"n{rng.randrange(9)}", None, "", "ü"]) for _ in range(rng.choice([0, 1, 3, 64, 1024]))]
        assert all_named(nodes) == (None not in nodes)
        assert all_named(tuple(nodes)) == (None not in nodes)
