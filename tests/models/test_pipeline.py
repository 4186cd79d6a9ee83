"""The broker-free ``Pipeline`` (models/pipeline.py): an in-memory source and a capturing sink, the Bytewax way.

The worker's consumers only move its outputs to Kafka, so what is asserted here is what the
live worker does between "bytes arrived" and "publish these"."""

from __future__ import annotations

import dataclasses

import orjson
import pytest

from stepwatch.config import HangSettings, Settings
from stepwatch.models.wire.events import encode_events
from stepwatch.models.pipeline import Message, Outputs, Pipeline, run_recording
from stepwatch.models.status import StatusRecorder
from stepwatch.sim import scenarios
from support import full_or

T0 = 1_700_000_000.0


def capture(outputs) -> Outputs:
    """The capturing sink: every output of a run, in order."""
    out = Outputs()
    for o in outputs:
        out.extend(o)
    return out


def key(alert) -> tuple:
    return alert.id, alert.status, alert.type, alert.ranks, alert.severity


def job_steps(job: str, *, ranks: int, steps: int, t0: float = T0, dt: float = 1.0, stop_at: int | None = None,
              stopped: tuple[int, ...] = ()) -> list[list[dict]]:
    """A second generator (not the simulator): per step, one event per rank; ranks in ``stopped`` send nothing
    from step ``stop_at`` on; a little deterministic noise on the step times."""
    out = []
    for step in range(steps):
        batch = []
        for rank in range(ranks):
            if stop_at is not None and step >= stop_at and rank in stopped:
                continue
            noise = ((rank * 7 + step * 13) % 11) / 1000
            batch.append({"v": 1, "kind": "step", "job": job, "rank": rank, "step": step,
                          "ts": t0 + step * dt + noise, "step_time": dt - 0.005 + noise, "node": f"n{rank // 4}"})
        out.append(batch)
    return out


#: CI: each scenario once and each message size twice (the many-job read with single events, the heaviest);
#: ``STEPWATCH_FULL_GRID=1``: every pair.
GETMANY = [(s, n) for n in (1, 16) for s in ("straggler-30pct-64", "multi-job-3", "straggler-2x-8")]


@pytest.mark.parametrize("scenario,per_message", full_or(GETMANY, [("straggler-30pct-64", 16), ("multi-job-3", 1),
                                                                   ("straggler-2x-8", 16)]))
def test_a_getmany_at_once_gives_the_alerts_of_one_message_at_a_time(scenario, per_message):
    """The aiokafka consumer feeds a partition's whole ``getmany`` (merged into column batches); the Faust
    agent one message at a time. Both call ``Pipeline.feed``; both must give the same alerts and state."""
    messages = []
    for _, batch in scenarios.batches(scenarios.get(scenario)):
        for i in range(0, len(batch), per_message):
            messages.append(encode_events(batch[i:i + per_message]))
    one, merged = Pipeline(), Pipeline()
    got_one, got_merged = Outputs(), Outputs()
    group = 50  # messages per getmany
    for g in range(0, len(messages), group):
        arrival = T0 + g
        chunk = messages[g:g + group]
        for raw in chunk:
            got_one.extend(one.feed([raw], arrival=arrival))
        got_merged.extend(merged.feed(chunk, arrival=arrival))
    assert [key(a) for a in got_merged.alerts] == [key(a) for a in got_one.alerts]
    assert got_one.alerts  # each scenario has a problem to find
    assert merged.engine.events_by_kind == one.engine.events_by_kind
    assert not got_one.deadletters and not got_merged.deadletters


def test_bad_input_becomes_dead_letters_with_reasons_and_coordinates():
    good = job_steps("j", ranks=2, steps=3)
    bad_in_batch = dict(good[1][0], step_time=-1.0)
    messages = [
        Message(encode_events(good[0]), b"j", "ev", 3, 10),
        Message(b"{not json", b"j", "ev", 3, 11),
        Message(encode_events([bad_in_batch, good[1][1]]), b"j", "ev", 3, 12),
        Message(None, None, "ev", 3, 13),
        Message(encode_events(good[2]), b"j", "ev", 3, 14),
    ]
    pipeline = Pipeline()
    pipeline.recorder = StatusRecorder(60).attach(pipeline.engine)
    out = pipeline.feed(messages, arrival=T0 + 5)
    dead = [(d.cause, d.message.offset) for d in out.deadletters]
    assert dead == [("decode", 11), ("decode", 12), ("decode", 13)]
    assert "malformed JSON" in out.deadletters[0].rejected.reason
    assert out.deadletters[1].rejected.payload == bad_in_batch  # only the bad event, not its batch
    record = orjson.loads(out.deadletters[1].record())
    assert (record["topic"], record["partition"], record["offset"], record["key"]) == ("ev", 3, 12, "j")
    assert pipeline.engine.events_by_kind["step"] == 5  # the good events went on
    assert pipeline.job_partition == {"j": 3}


def test_events_stamped_too_far_ahead_are_dead_lettered_only_when_the_arrival_is_known():
    late_clock = job_steps("j", ranks=2, steps=2, t0=T0 + 3_600)
    raw = [encode_events(b) for b in late_clock]
    live = Pipeline(max_future_seconds=60)
    out = live.feed(raw, arrival=T0)
    # One dead letter per message (issue 27 item 7), each listing its two events by index.
    assert [(d.cause, [r.index for r in d.rejects]) for d in out.deadletters] == [("future", [0, 1])] * 2
    assert "ahead of the worker's clock" in out.deadletters[0].rejected.reason
    assert live.engine.events_by_kind["step"] == 0
    replayed = Pipeline(max_future_seconds=60)
    assert not replayed.feed(raw).deadletters  # no arrival: the event's own time is the clock
    assert replayed.engine.events_by_kind["step"] == 4


def test_what_was_already_published_is_not_published_again_and_keeps_its_id():
    scenario = scenarios.get("straggler-2x-8")
    messages = [encode_events(batch) for _, batch in scenarios.batches(scenario)]
    first = capture(run_recording(Pipeline(), messages))
    firing = [a for a in first.alerts if a.status == "firing"]
    assert firing
    # A restarted worker that re-derives an alert open on the topic: the record of what is there drops it.
    again = Pipeline()
    again.published.remember(firing[0].to_dict())
    repeated = capture(run_recording(again, messages)).alerts
    assert key(firing[0]) not in [key(a) for a in repeated]
    assert [key(a) for a in repeated] == [key(a) for a in first.alerts if key(a) != key(firing[0])]
    # One that names the open problem differently publishes it under the published id.
    renamed = Pipeline()
    renamed.published.alias[firing[0].id] = ("published-id", 123.0)
    got = capture(run_recording(renamed, messages)).alerts
    assert "published-id" in {a.id for a in got} and firing[0].id not in {a.id for a in got}


def _hang_settings() -> Settings:
    return dataclasses.replace(Settings(), hang=HangSettings(timeout_seconds=20.0, warning_floor_seconds=8.0,
                                                             first_step_timeout_seconds=20.0))


def test_replay_drains_the_clock_past_the_last_event_so_a_hang_at_the_end_fires():
    """An incident recording ends inside the hang (rank 3 stopped, the others wait in the collective)."""
    lines = [encode_events(b) for b in job_steps("stuck", ranks=4, steps=30, stop_at=25, stopped=(3,))]
    quiet = capture(run_recording(Pipeline(settings=_hang_settings()), lines))
    assert not [a for a in quiet.alerts if a.type == "hang"]  # the clock stopped at the last event
    drained = capture(run_recording(Pipeline(settings=_hang_settings()), lines, drain=60))
    hangs = [a for a in drained.alerts if a.type == "hang" and a.severity == "critical"]
    assert hangs and hangs[0].job == "stuck"
    until = capture(run_recording(Pipeline(settings=_hang_settings()), lines, until=T0 + 29 + 60))
    assert [key(a) for a in until.alerts] == [key(a) for a in drained.alerts]


def test_replay_uses_the_recorded_arrival_as_the_clock():
    """The job's clock is 1000 s behind the broker's: with ``_arrival`` the lag is learnt as live, so a tick on the
    arrival clock does not see a hang that is not there; the future check uses the arrival too."""
    lines = []
    for batch in job_steps("skewed", ranks=4, steps=30):
        value = orjson.loads(encode_events(batch))
        value["_arrival"] = batch[0]["ts"] + 1_000.0
        lines.append(orjson.dumps(value))
    pipeline = Pipeline(settings=_hang_settings())
    out = capture(run_recording(pipeline, lines))
    assert not [a for a in out.alerts if a.type == "hang"]
    assert pipeline.engine.events_by_kind["step"] == 120
    assert pipeline.engine.jobs["skewed"].clock_offset() == pytest.approx(1_000.0, abs=1.0)


def test_forget_drops_the_jobs_of_revoked_partitions():
    pipeline = Pipeline()
    pipeline.feed([Message(encode_events(job_steps("a", ranks=2, steps=1)[0]), partition=0),
                   Message(encode_events(job_steps("b", ranks=2, steps=1)[0]), partition=1)])
    pipeline.forget({1})
    assert set(pipeline.engine.jobs) == {"a"} and pipeline.job_partition == {"a": 0}


def test_speaks_for_keeps_back_the_alerts_another_worker_publishes():
    scenario = scenarios.get("straggler-2x-8")
    messages = [encode_events(batch) for _, batch in scenarios.batches(scenario)]
    everything = capture(run_recording(Pipeline(), messages)).alerts
    assert everything
    quiet = Pipeline(speaks_for=lambda alert: alert.type != "straggler")
    assert [key(a) for a in capture(run_recording(quiet, messages)).alerts] == [
        key(a) for a in everything if a.type != "straggler"]
    assert not quiet.published.open  # what it keeps back is not recorded as published either
