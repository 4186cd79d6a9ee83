"""Warm-up steps that vary severalfold are steps, not a hang, at every pace (the metamorphic grid's
gen3:link_down_hang at 60 s steps: warm-up steps of 2.0, 2.0, 4.2 s at 0.7 s steps, under the 30 s floor, are
163, 163, 350 s at 60 s steps; the third warned as a hang at half the timeout, 1.5x the longest before it).

Generated jobs (pace, first warm-up steps, the growth of the next one) hold the invariant: a healthy job whose
warm-up step grows up to 2.5x the longest before it gets no hang alert while that stays under 3/4 of the
timeout; a job that hangs after such warm-up steps still warns before the critical."""

from __future__ import annotations

import random

import pytest

from hang_recordings import Job, hangs, replay
from stepwatch.models.hang.detector import EARLY_STEP_FACTOR, EARLY_WARNING_SHARE
from stepwatch.models.hang.settings import HangSettings

_D = HangSettings()


def _cases(n: int = 6, seed: int = 39) -> list[tuple[float, float, float]]:
    """(pace s, first warm-up steps in paces, growth of the next): the grown step past where the warning fell
    before (half the timeout, 1.5x the longest) and within the rule (2.5x, 3/4 of the timeout)."""
    rng = random.Random(seed)
    out = [(60.0, 2.72, 2.14)]  # the grid's case
    critical = _D.timeout_seconds
    while len(out) < n:
        pace = rng.choice((30.0, 45.0, 60.0, 90.0))
        first = rng.uniform(1.0, 3.0)
        growth = rng.uniform(1.6, EARLY_STEP_FACTOR - 0.1)
        longest, grown = first * pace, first * pace * growth
        old = max(_D.warning_timeout_fraction * critical, _D.pause_factor * longest)
        if old + 5.0 < grown < min(EARLY_STEP_FACTOR * longest, EARLY_WARNING_SHARE * critical) - 5.0:
            out.append((pace, round(first, 2), round(growth, 2)))
    return out


@pytest.mark.parametrize("pace, first, growth", _cases())
def test_a_warmup_step_longer_than_the_ones_before_is_no_hang(pace, first, growth):
    job = Job(ranks=8, step=pace, hb=min(10.0, max(1.0, pace / 6)))
    job.warmup([first * pace, first * pace, first * pace * growth])
    job.steps(8)
    job.phase("end")
    alerts = hangs(replay(job.recording()))
    assert not alerts, [a["summary"] for a in alerts]


@pytest.mark.parametrize("pace, first, growth", _cases())
def test_a_hang_after_the_first_warmup_steps_still_warns_before_the_critical(pace, first, growth):
    job = Job(ranks=8, step=pace, hb=min(10.0, max(1.0, pace / 6)))
    job.warmup([first * pace, first * pace])
    job.wait(_D.timeout_seconds + 120.0, lambda r, t: {})  # every rank alive, none completes a step
    versions = hangs(replay(job.recording()))
    assert versions and versions[0]["severity"] == "warning", [a["summary"] for a in versions]
    assert versions[-1]["severity"] == "critical", [a["summary"] for a in versions]
