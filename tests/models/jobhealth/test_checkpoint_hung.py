"""A job that stops stepping has not stopped checkpointing (metamorphic grid, library:host-oom-64 at 10 s steps:
a checkpoint_stale an hour into its hang, beside the critical hang).

The work a checkpoint protects is steps: a job that hung fewer of its own usual steps between checkpoints after
its last one missed no checkpoint, however long the hang lasts; one that stepped past its cadence and then hung
did miss one and is stale at the clock's limit as before. Generated over paces of 20 ms to 120 s, cadences of
20 to 1000 steps and hangs at several points of the interval."""

from __future__ import annotations

import itertools
import math

import pytest

from stepwatch.models.jobhealth.checkpoint import CheckpointDetector

MAX_AGE = 3600.0
PACES = (0.02, 1.0, 10.0, 60.0, 120.0)
CADENCES = (20, 100, 1000)
SAVE_SECONDS = 20.0


def _hung(step_time: float, every: int, checkpoints: int, after: int, hang_seconds: float) -> list:
    """``checkpoints`` checkpoints every ``every`` steps, then ``after`` more steps, then no step for
    ``hang_seconds`` (the timer ticking every 5 s, or every step when steps are longer; a due time is kept)."""
    det = CheckpointDetector(job="j", max_age_seconds=MAX_AGE)
    per_tick = min(every, max(1, math.ceil(5.0 / step_time)))  # (a tick sees each checkpoint's step)
    now, step, fired = 0.0, 0, []
    det.observe(now, 0)
    last = every * checkpoints + after
    while step < last:
        nxt = min(step + per_tick, last)
        now += (nxt - step) * step_time
        det.observe(now, nxt)
        if nxt // every > step // every and nxt // every <= checkpoints:
            fired += det.on_phase(now, "checkpoint", nxt)
            now += SAVE_SECONDS
            fired += det.on_phase(now, "train", nxt)
        step = nxt
        fired += det.check(now)
    end = now + hang_seconds
    tick = max(5.0, step_time)
    while now < end:
        now += tick
        if det.check_due() <= now:
            fired += det.check(now)
    return [a for a in fired if a.status == "firing" and a.evidence.get("reason") == "age"]


@pytest.mark.parametrize("step_time,every,share", list(itertools.product(PACES, CADENCES, (0.1, 0.5, 0.9))))
def test_a_job_hung_before_its_next_checkpoint_was_due_is_never_stale(step_time: float, every: int, share: float):
    after = max(1, int(share * every))
    hang = 3 * max(MAX_AGE, 2 * (every * step_time + SAVE_SECONDS))
    got = _hung(step_time, every, checkpoints=2, after=after, hang_seconds=hang)
    assert got == [], f"{step_time}s steps, every {every}, hung {after} steps after: {got[0].summary}"


@pytest.mark.parametrize("step_time,every", list(itertools.product(PACES, CADENCES)))
def test_a_job_that_missed_its_checkpoint_and_then_hung_is_still_stale(step_time: float, every: int):
    """The step rule silences nothing it should not: past its cadence in steps, the clock's limit holds."""
    interval = every * step_time + SAVE_SECONDS
    limit = max(MAX_AGE, 2 * interval)
    got = _hung(step_time, every, checkpoints=2, after=every + 1, hang_seconds=2 * limit)
    assert len(got) == 1, f"{step_time}s steps, every {every}: {len(got)} age alerts"
    assert limit <= got[0].evidence["age_seconds"] <= limit + max(5.0, step_time) + step_time
