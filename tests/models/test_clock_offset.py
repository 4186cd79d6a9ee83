"""A job's clock offset (``JobState.clock_offset``, the median of its recent arrival lags) is ``np.median``'s
float, bit for bit, whatever the lags: the time-driven rules judge the job at the same instant as before."""

from __future__ import annotations

import random

import numpy as np
import pytest

from stepwatch.models.engine import JobEngine, JobState


def _lags(rng: random.Random) -> list[float]:
    n = rng.choice([1, 2, 3, rng.randint(1, 256), 255, 256])
    kind = rng.choice(["live", "skewed", "ties", "absurd", "replay"])
    if kind == "live":  # a worker's wall time minus event time: small, positive, noisy
        return [rng.uniform(0.001, 0.5) for _ in range(n)]
    if kind == "skewed":  # a producer's clock ahead or behind by seconds, jittered
        base = rng.uniform(-30, 30)
        return [base + rng.gauss(0, 0.01) for _ in range(n)]
    if kind == "ties":  # the same lag repeated, an even count's middle two often equal
        return [rng.choice([0.1, 0.2, 1 / 3]) for _ in range(n)]
    if kind == "absurd":  # a few events with absurd timestamps among sane ones
        return [rng.choice([rng.uniform(0, 1), rng.uniform(-1e9, 1e9)]) for _ in range(n)]
    return [0.0] * n


@pytest.mark.parametrize("seed", range(4))
def test_the_clock_offset_is_numpys_median_bit_for_bit(seed):
    rng = random.Random(seed)
    job = JobState("j", JobEngine())
    assert job.clock_offset() == 0.0  # no lag yet: the job's clock is the timer's
    for _ in range(150):
        lags = _lags(rng)
        job.lags.clear()
        job.add_lags(lags)  # the engine's road in: it forgets the kept offset
        got, want = job.clock_offset(), float(np.median(lags))
        assert got == want and type(got) is float, (lags, got, want)
