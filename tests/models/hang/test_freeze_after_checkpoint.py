"""A rank that freezes right after a checkpoint is a hang, not a checkpoint (the metamorphic grid's
library:hang-frozen-64 at 0.1 s steps: no alert at all for its 11-minute hang).

Its last heartbeat still said ``checkpoint`` when it froze (less than a heartbeat period of training between the
checkpoint's end and the freeze), and a rank's own ``checkpoint`` kept the whole job on the 30-minute checkpoint
timeout. Generated jobs (pace, steps between the checkpoint and the freeze, heartbeat period) hold the invariant:
the hang warns within the warning floor plus a heartbeat timeout, naming the frozen rank, as a freeze later in
training does.
"""

from __future__ import annotations

import random

import pytest

from hang_recordings import Job, culprits, hangs, replay

FROZEN = 5


def _cases(n: int = 5, seed: int = 71) -> list[tuple[float, int, float]]:
    rng = random.Random(seed)
    out = [(0.1, 20, 5.0)]
    while len(out) < n:
        hb = rng.choice((2.0, 5.0, 10.0))
        pace = rng.choice((0.05, 0.1, 0.2, 0.5))
        steps = rng.randint(1, max(1, int(0.4 * hb / pace)))  # the freeze within one heartbeat period
        out.append((pace, steps, hb))
    return out


@pytest.mark.parametrize("pace, steps, hb", _cases())
def test_a_rank_frozen_right_after_a_checkpoint_is_a_hang(pace, steps, hb):
    job = Job(ranks=16, step=pace, hb=hb)
    job.steps(max(20, int(20 / pace)))
    job.pause(20.0)  # every rank's heartbeats say ``checkpoint``, then the job-wide ``train``
    job.steps(steps)
    start = job.now
    job.wait(400.0, lambda r, t: None if r == FROZEN else {})  # the others alive, waiting, no step
    versions = hangs(replay(job.recording()))
    assert versions, "no hang alert: the job read as still in the checkpoint"
    first = versions[0]
    assert first["severity"] == "warning" and first["starts_at"] - start <= 30.0 + 3 * hb + 10.0, first["summary"]
    assert culprits(first) == [FROZEN], first["summary"]
