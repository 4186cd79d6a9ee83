"""A stop the job went on from by itself warns once, not at each time it comes again, at every pace (the
metamorphic grid's gen2:flaky-gpu at 120 s steps: rank 6's flaky GPU makes every 7th step 303-315 s long, over
half the timeout, the warning's ceiling; ``pause_factor`` x the stop lay above that ceiling and was cut to it, so
each of the seven slow steps warned as a hang).

Generated jobs (pace 20 ms-120 s, a stop over half the timeout, the warning threshold at every pace, but under
the timeout / pause_factor, coming back three times a few percent longer or shorter) hold the invariant: one hang warning, the first stop's,
resolved by the job's next step; a job that then hangs for good still warns before the critical."""

from __future__ import annotations

import random

import pytest

from hang_recordings import T0, Job, hangs, replay, steps_beats_before, warning_after
from stepwatch.models.hang.detector import EARLY_WARNING_SHARE
from stepwatch.models.hang.settings import HangSettings

_D = HangSettings()


def _old_threshold(pace: float) -> float:
    """The learned-pace warning before any stop: 10x p99 (the floor), at the latest half the timeout."""
    return warning_after(pace)


def _cases(seed: int = 41) -> list[tuple[float, float]]:
    """(pace s, stop s): the stop warns the first time (over half the timeout: the threshold before it at every
    pace); 1.5x it is past that ceiling (where the second one warned), and 1.5x the stop 3% longer, which the job's
    own steps now include, is within the timeout (else the rule for steps taking most of it: critical only)."""
    rng = random.Random(seed)
    out = [(120.0, 303.0)]  # the grid's case
    low = _D.warning_timeout_fraction * _D.timeout_seconds + 5.0
    top = min(EARLY_WARNING_SHARE * _D.timeout_seconds, _D.timeout_seconds / _D.pause_factor) / 1.03 - 5.0
    for pace in (0.02, 0.5, 2.0, 10.0, 45.0, 60.0, 90.0):
        assert _old_threshold(pace) < low
        out.append((pace, round(rng.uniform(low, top), 1)))
    return out


def _job(pace: float, stop: float, *, hang: bool) -> Job:
    hb = min(10.0, max(1.0, pace / 6))
    job = Job(ranks=8, step=pace, hb=hb, next_hb=T0 + hb / 2)  # (heartbeats between the steps' ends)
    steps_beats_before(job, 12)
    for share in (1.0, 1.02, 0.97, 1.03):  # the stop again, a few percent longer or shorter
        steps_beats_before(job, 1, stop * share)
        steps_beats_before(job, 6 if pace >= 10 else max(6, int(60 / pace)))
    if hang:
        job.wait(_D.timeout_seconds + 120.0, lambda r, t: {})
    else:
        job.phase("end")
    return job


@pytest.mark.parametrize("pace, stop", _cases())
def test_a_stop_that_comes_again_warns_once(pace, stop):
    versions = hangs(replay(_job(pace, stop, hang=False).recording()))
    fired = {a["id"] for a in versions if a["status"] == "firing"}
    assert len(fired) == 1, [a["summary"] for a in versions]
    assert all(a["severity"] == "warning" for a in versions), [a["summary"] for a in versions]


@pytest.mark.parametrize("pace, stop", _cases())
def test_a_hang_after_the_stops_still_warns_before_the_critical(pace, stop):
    versions = hangs(replay(_job(pace, stop, hang=True).recording()))
    last = [a for a in versions if a["id"] == versions[-1]["id"]]
    assert last[0]["severity"] == "warning" and last[-1]["severity"] == "critical", \
        [(a["severity"], a["summary"]) for a in last]
