"""Warm-up steps at a long pace are steps, not a hang (the metamorphic grid's gen3:tp_dp_hang at 120 s steps).

A job's first steps take a few times its pace (compilation, allocator warm-up): at 1 s steps they are 2-3 s,
at 120 s steps 5-6 minutes, past the half-timeout warning that applies before the pace is learned. Generated
jobs (pace, warm-up factor, warm-up steps) hold the invariant: a healthy job whose every step ends within the
timeout gets no hang alert, whatever its pace; a job that hangs in its warm-up still warns before the critical
where 1.5 warm-up steps come before the timeout (docs/hang.md, "A warning before the critical").
"""

from __future__ import annotations

import random

import pytest

from hang_recordings import Job, hangs, replay
from stepwatch.models.hang.settings import HangSettings

_D = HangSettings()


def _cases(n: int = 6, seed: int = 45) -> list[tuple[float, float, int]]:
    """(pace s, warm-up factor, warm-up steps): warm-up steps between half the timeout and the timeout (where the
    half-timeout warning fell inside a step), and one under it."""
    rng = random.Random(seed)
    out = [(120.0, 2.75, 3), (20.0, 3.0, 2)]
    while len(out) < n:
        pace = rng.choice((60.0, 90.0, 120.0, 150.0, 180.0))
        factor = rng.uniform(0.5, 0.95) * _D.timeout_seconds / pace
        if factor > 1.5 and factor * pace > _D.warning_timeout_fraction * _D.timeout_seconds:
            out.append((pace, round(factor, 2), rng.randint(1, 3)))
    return out


@pytest.mark.parametrize("pace, factor, warm", _cases())
def test_warmup_steps_at_any_pace_are_no_hang(pace, factor, warm):
    job = Job(ranks=8, step=pace, hb=min(10.0, max(1.0, pace / 6)))
    job.warmup([factor * pace] * warm)
    job.steps(8)
    job.phase("end")
    alerts = hangs(replay(job.recording()))
    assert not alerts, [a["summary"] for a in alerts]


@pytest.mark.parametrize("pace, factor, warm", _cases())
def test_a_hang_in_the_warmup_still_warns_before_the_critical(pace, factor, warm):
    job = Job(ranks=8, step=pace, hb=min(10.0, max(1.0, pace / 6)))
    job.warmup([factor * pace] * warm)
    job.wait(_D.timeout_seconds + 120.0, lambda r, t: {})  # every rank alive, none completes a step
    versions = hangs(replay(job.recording()))
    assert versions and versions[-1]["severity"] == "critical", [a["summary"] for a in versions]
    if _D.pause_factor * factor * pace < _D.timeout_seconds:
        assert versions[0]["severity"] == "warning", [a["summary"] for a in versions]
        assert versions[0]["evidence"]["stalled_seconds"] >= _D.pause_factor * factor * pace - 1.0
