"""A marked eval or checkpoint pause longer than the hang warning must not make a warning when training resumes.

Found by the third generator (tests/gen3, scenario pauses_marked_unmarked): 2 s steps (warning after 30 s),
a job-wide ``eval`` phase of 60 s, then ``train``: the stall was counted from the step before the pause, so
the warning fired at the ``train`` marker, a second before the first step after it completed.
"""
from __future__ import annotations

import pytest

from engine_driver import replay
from stepwatch.models.wire.events import HeartbeatEvent, PhaseEvent, StepEvent

JOB = "pause-job"
T0 = 1_798_000_000.0
RANKS = 4


def _job(pause_phase: str, pause: float, after: float, hang_after_resume: bool = False):
    """40 steps of 2 s, a marked pause of ``pause`` s, `train`, then the next step ``after`` s later (or none)."""
    events, t, seq = [], T0, 0
    for step in range(40):
        t += 2.0
        seq += 1
        for r in range(RANKS):
            events.append(StepEvent(job=JOB, rank=r, step=step, ts=t, step_time=2.0, node=f"n{r // 2}",
                                    compute_time=1.8, comm_time=0.2))
            if step % 3 == 0:
                events.append(HeartbeatEvent(job=JOB, rank=r, ts=t + 0.1, step=step, node=f"n{r // 2}",
                                             seq_started=seq, seq_completed=seq))
    events.append(PhaseEvent(job=JOB, ts=t + 0.2, phase=pause_phase, step=39))
    end = t + pause
    hb = t + 5
    while hb < end:
        events += [HeartbeatEvent(job=JOB, rank=r, ts=hb, step=39, node=f"n{r // 2}", seq_started=seq,
                                  seq_completed=seq, phase=pause_phase) for r in range(RANKS)]
        hb += 5
    events.append(PhaseEvent(job=JOB, ts=end, phase="train"))
    # the ranks' heartbeats say `train` again right away (no rank is in a checkpoint any more)
    events += [HeartbeatEvent(job=JOB, rank=r, ts=end + 0.5, step=39, node=f"n{r // 2}", seq_started=seq,
                              seq_completed=seq, phase="train") for r in range(RANKS)]
    if hang_after_resume:  # nothing more but heartbeats: every rank waits in the next collective
        for k in range(1, 20):
            events += [HeartbeatEvent(job=JOB, rank=r, ts=end + 5 * k, step=39, node=f"n{r // 2}",
                                      seq_started=seq + 1, seq_completed=seq) for r in range(RANKS)]
    else:
        for r in range(RANKS):
            events.append(StepEvent(job=JOB, rank=r, step=40, ts=end + after, step_time=after,
                                    node=f"n{r // 2}", compute_time=after - 0.2, comm_time=0.2))
    return events


@pytest.mark.parametrize("phase", ["eval", "checkpoint"])
def test_no_hang_warning_when_training_resumes_after_a_marked_pause(phase):
    # The first step after the pause completes 4 s after the `train` marker (64 s after the last one).
    alerts = [a for a in replay(_job(phase, 60.0, 4.0)) if a.type == "hang"]
    assert alerts == []


def test_a_hang_right_after_the_pause_still_warns_counted_from_the_resume():
    alerts = [a for a in replay(_job("eval", 60.0, 0.0, hang_after_resume=True)) if a.type == "hang"]
    assert alerts, "a job that resumes and never steps again is hung"
    first = alerts[0]
    resume = T0 + 80.0 + 60.0
    assert first.severity.value == "warning"
    # warned 30 s (the floor) after the resume, not at it
    assert first.starts_at >= resume + 30.0 - 1.0
    assert first.evidence["stalled_since"] == pytest.approx(resume)
