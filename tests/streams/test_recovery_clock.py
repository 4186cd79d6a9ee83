"""Restart recovery and the clock of a job whose events are stamped in the past (broker-free).

The live worker judges each job on its own clock: the wall clock minus the job's arrival lag
(models/engine.py). A restarted worker rebuilds its windows from a span read back from Kafka
(streams/recovery.py ``rebuild``); each replayed message arrives at the broker's record time, so
the rebuilt job keeps its clock offset. Without it, the first tick after recovery judged a job
whose events are from 2023 against the 2026 wall clock: a critical hang and a stale checkpoint,
resolved as soon as its next live event came (seen in tests/streams/test_reliability_kafka.py).
"""

from __future__ import annotations

import pytest

from stepwatch.models.wire.events import encode_events
from stepwatch.models.pipeline import Message, Outputs, Pipeline
from stepwatch.streams.recovery import RecoverySpan, rebuild

from test_pipeline import job_steps

EVENTS_T0 = 1_700_000_000.0  # the job's own clock (November 2023): a recording replayed live, or a skewed host
LIVE_T0 = 1_790_000_000.0  # the worker's (and broker's) clock when the job ran: explicit, not the wall clock
LATENCY = 0.05  # from a step's end to the broker


def messages(steps: int, first: int = 0) -> list[tuple[bytes, float]]:
    """(message, broker time) per step: one batch message for 8 ranks, 1 s steps."""
    out = []
    for batch in job_steps("job-a", ranks=8, steps=first + steps)[first:]:
        step = batch[0]["step"]
        out.append((encode_events(batch), LIVE_T0 + step + 1.0 + LATENCY))
    return out


def collect(*outputs: Outputs) -> list[tuple]:
    return [(a.status, a.type, a.severity) for o in outputs for a in o.alerts]


def run_live(pipeline: Pipeline, span: list[tuple[bytes, float]]) -> list[tuple]:
    """Feed as the live consumer does (arrival: the worker's clock), ticking once a second."""
    seen = []
    for raw, arrival in span:
        seen += collect(pipeline.feed([Message(raw)], arrival=arrival), pipeline.tick(arrival))
    return seen


def restarted(span: list[tuple[bytes, float]]) -> tuple[Pipeline, list]:
    pipeline = Pipeline()
    _, reconcile = rebuild(pipeline, RecoverySpan(partitions=(0,), event_messages=[(0, raw, at) for raw, at in span],
                                                  alerts=[]))
    return pipeline, reconcile


def test_a_recovered_job_from_the_past_is_judged_on_its_own_clock():
    before = messages(120)
    assert run_live(Pipeline(), before) == []  # the first worker: nothing wrong with this job
    last_arrival = before[-1][1]

    pipeline, reconcile = restarted(before)
    assert reconcile == []
    # The restarted worker ticks 20 s after the job's last message, before the job's next events are read.
    assert collect(pipeline.tick(last_arrival + 20.0)) == []
    # Then the job's events from while the worker was down, and the live ones, as they come.
    assert run_live(pipeline, messages(60, first=120)) == []


def test_a_job_that_stopped_before_the_crash_still_hangs_after_recovery():
    """The rebuilt clock goes on with the worker's: a job silent since before the crash is a hang all the same."""
    before = messages(120)
    last_arrival = before[-1][1]
    pipeline, _ = restarted(before)
    seen = []
    for t in range(1, 700):
        seen += collect(pipeline.tick(last_arrival + t))
    # 1 s steps: the early warning at its 30 s floor, critical at the 600 s timeout (config.HangSettings).
    assert [s for s in seen if s[1] == "hang"] == [("firing", "hang", "warning"), ("firing", "hang", "critical")]


def test_replay_without_record_times_keeps_the_old_behaviour_of_no_offset():
    """Messages without a broker time (old message format): no offset is learnt, as before."""
    before = messages(10)
    pipeline = Pipeline()
    rebuild(pipeline, RecoverySpan(partitions=(0,), event_messages=[(0, raw, None) for raw, _ in before], alerts=[]))
    assert pipeline.engine.jobs["job-a"].clock_offset() == 0.0


@pytest.mark.parametrize("behind", [60.0, 3600.0, 86_400.0])
def test_a_span_the_worker_is_behind_on_is_judged_on_the_clock_the_live_road_resumes_on(behind):
    """Restarted ``behind`` seconds after its partition's next record reached the broker (a backlog, or a crash
    during catch-up: issue 44 row 8): the span's record times move on by that lag, as the live reads that follow
    will have it, so neither the first tick nor the catch-up calls the job hung."""
    before, rest = messages(120), messages(60, first=120)
    now = rest[0][1] + behind
    pipeline = Pipeline()
    _, reconcile = rebuild(pipeline, RecoverySpan(partitions=(0,), event_messages=[(0, raw, at) for raw, at in before],
                                                  alerts=[], resume_at={0: rest[0][1]}), now=now)
    assert reconcile == [] and collect(pipeline.tick(now)) == []
    # The backlog read at once (catch-up), ticking as it goes; then the job goes on live.
    assert run_live(pipeline, [(raw, now + i * 0.01) for i, (raw, _) in enumerate(rest)]) == []
    # Taken on the records' own times instead (the span not moved on), the first tick calls it hung.
    stale, _ = restarted(before)
    assert "hang" in {t for _, t, _ in collect(stale.tick(now))}
