"""checkpoint_stale judges "stopped checkpointing" against the job's own cadence (metamorphic grid leftover a):
at any pace, a job that keeps its cadence is never stale, and one that stops is stale within
max(1 h, 2x its cadence) of its last checkpoint. Generated over step times of 20 ms to 120 s and cadences of
50 to 1000 steps."""

from __future__ import annotations

import itertools
import math

import pytest

from stepwatch.models.jobhealth.checkpoint import CADENCE_FACTOR, CheckpointDetector

MAX_AGE = 3600.0
PACES = (0.02, 0.5, 2.0, 10.0, 60.0, 120.0)
CADENCES = (50, 100, 1000)
SAVE_SECONDS = 30.0


def _run(step_time: float, every: int, checkpoints: int, seconds: float) -> tuple[list, float]:
    """Steps at ``step_time`` for ``seconds``, a checkpoint every ``every`` steps for the first ``checkpoints``;
    the timer ticks every step or every 5 s of steps, the longer (the steps between ticks seen at the tick).
    Returns (alerts, the interval between checkpoint starts)."""
    det = CheckpointDetector(job="j", max_age_seconds=MAX_AGE)
    per_tick = max(1, math.ceil(5.0 / step_time))
    tick = per_tick * step_time
    now, step, done, fired = 0.0, 0, 0, []
    while now < seconds:
        now += tick
        nxt = step + per_tick
        det.observe(now, nxt)
        if nxt // every > step // every and done < checkpoints:
            fired += det.on_phase(now, "checkpoint", nxt)
            now += SAVE_SECONDS
            fired += det.on_phase(now, "train", nxt)
            done += 1
        step = nxt
        fired += det.check(now)
    return fired, every * step_time + SAVE_SECONDS


@pytest.mark.parametrize("step_time,every", list(itertools.product(PACES, CADENCES)))
def test_a_job_on_its_cadence_is_never_stale_and_one_that_stops_is(step_time: float, every: int):
    interval = every * step_time + SAVE_SECONDS
    limit = max(MAX_AGE, CADENCE_FACTOR * interval)
    kept, _ = _run(step_time, every, checkpoints=10 ** 9, seconds=8 * max(interval, 600.0))
    assert kept == [], f"{step_time}s steps, every {every}: {kept[0].summary}"
    stopped, _ = _run(step_time, every, checkpoints=3, seconds=3 * interval + 2 * limit)
    ages = [a for a in stopped if a.status == "firing" and a.evidence["reason"] == "age"]
    assert len(ages) == 1, f"{step_time}s steps, every {every}: {len(ages)} age alerts"
    tick = max(1, math.ceil(5.0 / step_time)) * step_time
    assert limit - 0.1 <= ages[0].evidence["age_seconds"] <= limit + tick + SAVE_SECONDS


def test_a_policy_keeps_its_absolute_limit():
    """``required``: the user's limit holds whatever the job's cadence."""
    det = CheckpointDetector(job="j", max_age_seconds=MAX_AGE, required=True)
    det.observe(0.0, 0)
    det.on_phase(5000.0, "checkpoint", 100)
    det.on_phase(5030.0, "train", 100)
    assert det.check(5030.0 + MAX_AGE + 1)[0].evidence["max_age_seconds"] == MAX_AGE
