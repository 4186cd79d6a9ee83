"""A marked eval or checkpoint pause longer than the hang warning must not make a warning when training resumes.

Found by the third generator (tests/gen3, scenario pauses_marked_unmarked): 2 s steps (warning after 30 s),
a job-wide ``eval`` phase of 60 s, then ``train``: the stall was counted from the step before the pause, so
the warning fired at the ``train`` marker, a second before the first step after it completed. The same for
rank 0 writing a checkpoint alone (rank0_long_save_marked): the warning fired as its heartbeats left the
`checkpoint` phase, 5 minutes after the last step.
"""
from __future__ import annotations

import pytest

from engine_driver import replay
from stepwatch.models.wire.events import HeartbeatEvent, PhaseEvent, StepEvent

JOB = "pause-job"
T0 = 1_798_000_000.0
RANKS = 4


def _healthy_steps():
    """40 steps of 2 s, every rank, heartbeats every third step: (events, the last step's end, collective seq)."""
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
    return events, t, seq


def _job(pause_phase: str, pause: float, after: float, hang_after_resume: bool = False):
    """40 steps of 2 s, a marked pause of ``pause`` s, `train`, then the next step ``after`` s later (or none)."""
    events, t, seq = _healthy_steps()
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


def _rank0_saves(minutes: float, by_phase_event: bool):
    """Rank 0 alone writes a checkpoint for ``minutes`` after step 39 (its heartbeats say `checkpoint`; with
    ``by_phase_event`` it also sends rank `phase` events), the others wait for it in the next all-reduce; the
    next step completes 2 s after the save."""
    events, t, seq = _healthy_steps()
    if by_phase_event:
        events.append(PhaseEvent(job=JOB, rank=0, ts=t + 0.2, phase="checkpoint", step=39))
    end = t + 60 * minutes
    hb = t + 5
    while hb < end:
        events.append(HeartbeatEvent(job=JOB, rank=0, ts=hb, step=39, node="n0", seq_started=seq,
                                     seq_completed=seq, phase="checkpoint"))
        events += [HeartbeatEvent(job=JOB, rank=r, ts=hb, step=39, node=f"n{r // 2}", seq_started=seq + 1,
                                  seq_completed=seq, phase="train") for r in range(1, RANKS)]
        hb += 5
    if by_phase_event:
        events.append(PhaseEvent(job=JOB, rank=0, ts=end, phase="train"))
    events += [HeartbeatEvent(job=JOB, rank=r, ts=end + 0.5, step=39, node=f"n{r // 2}",
                              seq_started=seq + (r > 0), seq_completed=seq, phase="train") for r in range(RANKS)]
    for r in range(RANKS):
        events.append(StepEvent(job=JOB, rank=r, step=40, ts=end + 2.0, step_time=2.0, node=f"n{r // 2}",
                                compute_time=1.8, comm_time=0.2))
    return events


@pytest.mark.parametrize("by_phase_event", [True, False], ids=["rank-phase-event", "heartbeats-only"])
def test_no_hang_warning_when_rank0_ends_its_own_long_checkpoint(by_phase_event):
    # tests/gen3 rank0_long_save_marked: the checkpoint timeout held while rank 0 saved, and the warning
    # fired the moment its heartbeats (or its phase event) said `train` again, 5 minutes after the last step
    assert [a for a in replay(_rank0_saves(5.0, by_phase_event)) if a.type == "hang"] == []
