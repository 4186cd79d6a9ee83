"""A stop in the throughput rule's baseline (models/jobhealth/throughput.py ``STOP_FACTOR``): one step of the whole
job tens of seconds long (an eval or a checkpoint no ``phase`` event marks) is no measure of the job's pace; kept in
the baseline's mean it raised it by half and hid a later real drop (the metamorphic grid's "unmarked eval",
tests/metamorphic/test_noise.py). Generated: step times, jitter, the stops' number, lengths and places, the drop."""

from __future__ import annotations

import random

import numpy as np
import pytest

from stepwatch.models.jobhealth.throughput import ThroughputDetector, sample_from
from stepwatch.models.steps.assembly import GroupStep

RANKS = np.arange(8)


def _step(n: int, t: float) -> GroupStep:
    return GroupStep(job="j", group="", step=n, ts=1000.0 + n, ranks=RANKS, step_time=np.full(8, t),
                     compute_time=np.full(8, t - 0.05 * t), comm_time=np.full(8, 0.05 * t),
                     data_time=np.full(8, 0.0), tokens=None, nodes=("node-0",) * 8, phase="train")


def _fired(times: list[float]) -> list[int]:
    detector = ThroughputDetector(job="j")
    return [n for n, t in enumerate(times) for a in detector.update(sample_from(_step(n, t)))
            if str(a.status) == "firing"]


def _job(seed: int, *, drop: float) -> tuple[list[float], int]:
    rng = random.Random(seed)
    pace = rng.choice([0.25, 0.5, 1.0, 2.0])
    jitter = rng.uniform(0.0, 0.03)
    n, at = 400, 300
    times = [pace * (1 + rng.uniform(-jitter, jitter)) * (1 + drop if i >= at else 1) for i in range(n)]
    for _ in range(rng.randint(1, 3)):  # stops of 20-120 s among the baseline's steps
        times[rng.randrange(120, at - 20)] += rng.uniform(20.0, 120.0)
    return times, at


@pytest.mark.parametrize("seed", range(8))
def test_a_stop_in_the_baseline_hides_no_later_drop(seed: int):
    times, at = _job(seed, drop=0.2)
    fired = _fired(times)
    assert fired and fired[0] >= at, f"a 20% drop at step {at}: fired at {fired}"


@pytest.mark.parametrize("seed", range(8))
def test_stops_alone_are_no_drop(seed: int):
    times, _ = _job(seed, drop=0.0)
    assert not _fired(times)
