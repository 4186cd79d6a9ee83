"""A rank saving alone is in its checkpoint whatever the order of its phase event and its step's end (the
metamorphic grid's gen3:rank0_long_save_marked with hosts' clocks +-2 s: a hang warning 30 s into rank 0's
marked 300 s save, twice).

Rank 0 says ``checkpoint`` at step N with a rank phase event stamped when the save starts, the same moment its
step N ends; a host clock offset or a clock correction that moves one of the two puts the step's end after the
phase event, which read as "completed a step after saying so": the save was over, and the others waiting for it
in the next collective were a hang. Generated jobs (pace, heartbeat period, save length, how far the step's end
lands after the phase event) hold the invariant: no hang alert during the save (it is under the checkpoint
timeout), as with the two in order; a rank that then freezes in training is still a hang."""

from __future__ import annotations

import random

import pytest

from hang_recordings import Job, culprits, hangs, replay

SAVER = 0


def _cases(n: int = 5, seed: int = 52) -> list[tuple[float, float, float, float]]:
    rng = random.Random(seed)
    out = [(0.57, 5.0, 300.0, 0.5)]  # the grid's case
    while len(out) < n:
        out.append((rng.choice((0.05, 0.2, 0.5, 2.0)), rng.choice((2.0, 5.0, 10.0)), rng.uniform(60.0, 600.0),
                    round(rng.uniform(0.05, 3.0), 2)))
    return out


def _saves_alone(job: Job, seconds: float, skew: float) -> None:
    """Rank 0 saves for ``seconds`` after the job's last step, its phase event stamped ``skew`` s before that
    step's end; the others wait for it in the next collective."""
    job.emit({"kind": "phase", "rank": SAVER, "ts": round(job.now - skew, 6), "phase": "checkpoint", "step": job.n})
    seq = job.seq
    job.wait(seconds, lambda r, t: {"phase": "checkpoint"} if r == SAVER else {"started": seq + 1, "done": seq})
    job.emit({"kind": "phase", "rank": SAVER, "ts": round(job.now, 6), "phase": "train", "step": job.n})
    job.next_hb = job.now + job.hb / 2


@pytest.mark.parametrize("pace, hb, save, skew", _cases())
def test_a_rank_saving_alone_is_no_hang_whatever_the_order_of_its_events(pace, hb, save, skew):
    job = Job(ranks=8, step=pace, hb=hb)
    job.steps(max(20, int(30 / pace)))
    _saves_alone(job, save, skew)
    job.steps(max(20, int(30 / pace)))
    job.phase("end")
    alerts = hangs(replay(job.recording()))
    assert not alerts, [a["summary"] for a in alerts]


@pytest.mark.parametrize("pace, hb, save, skew", _cases()[:2])
def test_a_rank_frozen_after_its_own_save_is_still_a_hang(pace, hb, save, skew):
    job = Job(ranks=8, step=pace, hb=hb)
    job.steps(max(20, int(30 / pace)))
    _saves_alone(job, save, skew)
    job.steps(3)
    job.wait(300.0, lambda r, t: None if r == SAVER else {})  # the saver froze; the others alive, no step
    versions = hangs(replay(job.recording()))
    assert versions and culprits(versions[0]) == [SAVER], [a["summary"] for a in versions]
