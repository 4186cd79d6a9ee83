"""A rank killed as a job-wide checkpoint ends is a hang, not a 30-minute checkpoint (the metamorphic grid's
gen3:oom_killed_rank / checkpoint 60 s before the fault, once the pause's heartbeats said the step the ranks were
at: the OOM-killed rank's last heartbeat said ``checkpoint`` at the job's last step, it never completed a step past
it, and its own checkpoint held the job on the checkpoint timeout: critical 29 minutes late, no warning).

A saving rank's heartbeats go on (the monitor's timer thread); a killed one's stop. Generated jobs (pace, heartbeat
period, checkpoint length, steps between the checkpoint's end and the kill, none included) hold the invariant: the
hang warns before the critical and before the hang timeout, naming the killed rank (a rank still saving alone after
the others left the checkpoint is the pause rule's, docs/hang.md).
"""

from __future__ import annotations

import random

import pytest

from hang_recordings import Job, culprits, hangs, replay
from stepwatch.models.hang.settings import HangSettings

KILLED = 3
_D = HangSettings()


def _cases(n: int = 8, seed: int = 73) -> list[tuple[float, float, float, int]]:
    rng = random.Random(seed)
    out = [(0.34, 5.0, 60.0, 0)]  # the grid's pair
    while len(out) < n:
        pace = rng.choice((0.1, 0.5, 2.0, 10.0, 30.0))
        hb = rng.choice((2.0, 5.0, 10.0))
        out.append((pace, hb, rng.choice((30.0, 60.0, 240.0)), rng.choice((0, 0, 1))))
    return out


@pytest.mark.parametrize("pace, hb, pause, steps", _cases())
def test_a_rank_killed_as_the_checkpoint_ends_is_a_hang(pace, hb, pause, steps):
    job = Job(ranks=8, step=pace, hb=hb)
    job.steps(max(30, int(30 / pace)))
    job.pause(pause)  # every rank's heartbeats say ``checkpoint`` at the job's step, then the job-wide ``train``
    job.steps(steps)
    start = job.now
    nxt = job.seq + 1  # the others issued the next collective and wait in it, alive
    job.wait(_D.timeout_seconds + 120.0, lambda r, t: None if r == KILLED else {"started": nxt})
    versions = hangs(replay(job.recording()))
    assert versions, "no hang alert: the job read as still in the checkpoint"
    first = versions[0]
    assert first["severity"] == "warning" and first["starts_at"] - start < _D.timeout_seconds, first["summary"]
    assert culprits(first) == [KILLED], first["summary"]
