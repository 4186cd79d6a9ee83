"""The step rules' shortcuts for the usual step of a healthy job (issue 41 item 5, replay at fleet speed) leave the
state the long way leaves, and give its floats: on generated jobs (sizes, slow ranks, lost events), every alert and
every ring, CUSUM and rate after every step are those of the rules with their shortcuts off; numpy's median of
NaN-free rows is nanmedian's float (the imbalance rule's class split); the throughput sample of a step is the float
the numpy way gives, the sign of a zero included."""

from __future__ import annotations

import random

import numpy as np
import pytest

from stepwatch.models.jobhealth import throughput
from stepwatch.models.steps.assembly import GroupStep
from stepwatch.models.steps.robust import step_median, time_before

NAN = float("nan")


def _floats(a: np.ndarray) -> list[str]:
    return [repr(v) for v in np.asarray(a, dtype=float).ravel().tolist()]


@pytest.mark.parametrize("seed", range(3))
def test_median_of_rows_without_nan_is_nanmedians_float(seed):
    """Invariant: ``np.median(a, axis=0)`` of a NaN-free array is ``np.nanmedian``'s float, bit for bit (both take the
    middle one, or ``(a + b) / 2`` of the middle two), so the class split takes the cheap one when no row has a hole."""
    rng = random.Random(seed)
    specials = [-0.0, 0.0, 1e300, float("inf"), 5e-324, 1.0, 1.0 + 2 ** -52, 3.0]
    for _ in range(300):
        rows, cols = rng.choice([1, 2, 3, 4, 5, 8, 16, 64]), rng.choice([1, 7, 10, 200])
        a = np.array([[rng.choice(specials) if rng.random() < 0.2 else round(rng.uniform(0, 10 ** rng.randint(-3, 3)),
                                                                              rng.randint(0, 9))
                       for _ in range(cols)] for _ in range(rows)])
        assert _floats(np.median(a, axis=0)) == _floats(np.nanmedian(a, axis=0))
        assert _floats(np.median(a, axis=1)) == _floats(np.nanmedian(a, axis=1))


def _sample_the_numpy_way(step: GroupStep) -> throughput.StepSample:
    """``sample_from`` before its Python path for a few ranks (numpy reductions throughout)."""
    step_time = step_median(step, "step_time")
    typical = step_time
    before, complete = time_before(step)
    median_before = slowest = NAN
    if before.size and complete:
        median_before, slowest = step_median(step, "before", before), float(np.max(before))
        typical = float(median_before + np.min(step.comm_time))
    tokens = step.tokens[~np.isnan(step.tokens)]
    tps = float(tokens.sum() / typical) if tokens.size and typical > 0 else NAN
    per_rank = tps / tokens.size if tokens.size else NAN
    comm = step.comm_time[~np.isnan(step.comm_time)]
    transfer = float(comm.min()) if comm.size else NAN
    return throughput.StepSample(step.step, step.ts, step_time, typical, step_median(step, "compute_time"), transfer,
                                 step_median(step, "data_time"), tps, per_rank, step.missing, step.group or "",
                                 median_before, float(tokens.sum()) if tokens.size else NAN, slowest)


@pytest.mark.parametrize("seed", range(3))
def test_throughput_sample_is_the_numpy_ways_float(seed):
    """Invariant: for any step (1 to 20 ranks, holes, zeros of either sign, ties), the throughput sample's fields
    are the floats of numpy's reductions."""
    rng = random.Random(seed)
    specials = [NAN, -0.0, 0.0, 1e16, 1.0, 4096.0, 0.25]

    def column(n: int, hole: float) -> np.ndarray:
        return np.array([rng.choice(specials) if rng.random() < hole else round(rng.uniform(0, 2), rng.randint(1, 9))
                         for _ in range(n)])

    for _ in range(2000):
        n = rng.choice([1, 2, 3, 4, 5, 7, 8, 9, 16, 20])
        hole = rng.choice([0.0, 0.0, 0.1, 0.4])
        step = GroupStep(job="j", group=rng.choice(["", "pp1"]), step=rng.randint(0, 99), ts=1000.0,
                         ranks=np.arange(n), step_time=column(n, hole), compute_time=column(n, hole),
                         comm_time=column(n, hole), data_time=column(n, hole), tokens=column(n, hole),
                         nodes=("a",) * n, phase="train")
        twin = GroupStep(**{k: getattr(step, k) for k in ("job", "group", "step", "ts", "ranks", "step_time",
                                                          "compute_time", "comm_time", "data_time", "tokens",
                                                          "nodes", "phase")})
        got, want = throughput.sample_from(step), _sample_the_numpy_way(twin)
        assert repr(got) == repr(want), (step.step_time, step.comm_time, step.tokens)

