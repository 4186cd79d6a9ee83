"""The column-wise batch path (``decode_message_columns`` + ``DetectionEngine.process_batch``) gives
exactly what decoding and processing one event at a time gives: alerts and state."""

from __future__ import annotations

import orjson
import pytest

from stepwatch.models.detection import DetectionEngine
from stepwatch.models.wire.events import decode_message
from stepwatch.models.wire.step_columns import StepColumns, decode_message_columns
from stepwatch.models.status import StatusRecorder
from stepwatch.sim import scenarios
from support import full_or

SCENARIOS = ["straggler-30pct-64", "multi-problem-256", "multi-job-3", "healthy-pipeline-64", "intermittent-64",
             "job-slowdown-64", "hang-hang-64", "hang-frozen-64", "hang-dead-64", "straggler-2x-8"]


def _messages(scenario, per_message: int) -> list[bytes]:
    """The recording as envelopes of up to ``per_message`` events; step events are kept apart from the
    other kinds so that the columns path meets them (and the hang scenarios' open hangs) often."""
    out = []
    for _, batch in scenarios.batches(scenario):
        run: list[dict] = []
        for event in batch:
            if run and ((run[-1]["kind"] == "step") != (event["kind"] == "step") or len(run) >= per_message):
                out.append(_encode(run))
                run = []
            run.append(event)
        if run:
            out.append(_encode(run))
    return out


def _encode(events: list[dict]) -> bytes:
    return orjson.dumps({"v": 1, "kind": "batch", "events": events})


def _run(messages: list[bytes], *, batched: bool):
    engine = DetectionEngine()
    recorder = StatusRecorder(60).attach(engine)
    interval = engine.settings.worker.tick_interval
    alerts, next_tick, columns = [], None, 0
    for i, raw in enumerate(messages):
        arrival = 1_700_000_000.0 + 0.5 * i  # some clock offset, so that the lags matter
        if batched:
            events, rejected = decode_message_columns(raw)
            if isinstance(events, StepColumns):
                columns += 1
                recorder.observe_steps(events)
            else:
                for ev in events:
                    recorder.observe(ev)
            alerts.extend(engine.process_batch(events, arrival=arrival))
        else:
            events, rejected = decode_message(raw)
            for ev in events:
                recorder.observe(ev)
                alerts.extend(engine.process(ev, arrival=arrival))
        assert not rejected
        if next_tick is None:
            next_tick = engine.clock + interval
        elif engine.clock >= next_tick:
            alerts.extend(engine.tick(engine.clock))
            next_tick = engine.clock + interval
    return engine, recorder, [a.to_dict() for a in alerts], columns


def _state(engine: DetectionEngine, recorder: StatusRecorder) -> dict:
    out = {"kinds": dict(engine.events_by_kind), "clock": engine.clock}
    for name, job in engine.jobs.items():
        h = job.hang.progress
        n = h.n
        out[name] = {
            "job": (job.last_ts, job.latest_step, sorted(job.ranks), list(job.lags), job.phases.phase, job.ended),
            "sli": job.sli.snapshot(),
            "hang": (h.started_at, h.latest_ts, h.max_step, h.progress_ts, h.completed_any, h.world_size,
                     list(h.step_times), list(h.advances), dict(h.slot_of_rank), h.nodes[:n],
                     h.last_step[:n].tolist(), h.rank_progress[:n].tolist(), h.stepped[:n].tolist(),
                     h.last_seen[:n].tolist()),
            "assemblers": {g: (sorted(a.members), a.world_size_hint, sorted(a._open), a.last_closed, a.late_events,
                               a.restarts, a._newest_step, a._quorum_step, a._extra_lag, a._extra_seen, a.pending_bound,
                               a._pace) for g, a in job.assemblers.items()},
            "checkpoint": (job.checkpoint._job_start, job.checkpoint._latest_step),
        }
    for name, job in recorder.jobs.items():
        out["rec-" + name] = ({r: (v.step, v.ts, v.node, v.group, v.phase) for r, v in job.ranks.items()},
                              job.steps, {s: [(a.tolist(), b.tolist()) for a, b in rows] for s, rows in
                                          job.ratios.items()})
    corr = engine.telemetry.correlator
    out["placement"] = corr._placement
    out["data_time"] = {j: corr.data_times(j) for j in corr._data_time}
    return out


#: CI: the many-rank and many-job recordings at both sizes (where the two paths have come apart), the others at one
#: size each, alternating; ``STEPWATCH_FULL_GRID=1``: every pair.
BOTH_SIZES = {"multi-problem-256", "multi-job-3"}
CASES = [(n, s) for n in (64, 256) for s in SCENARIOS]
SAMPLE = [(n, s) for n, s in CASES if s in BOTH_SIZES or n == (64, 256)[SCENARIOS.index(s) % 2]]


@pytest.mark.parametrize("per_message,name", full_or(CASES, SAMPLE))
def test_batch_path_gives_the_same_alerts_and_state(name, per_message):
    messages = _messages(scenarios.get(name), per_message)
    one_engine, one_recorder, one, _ = _run(messages, batched=False)
    engine, recorder, batched, columns = _run(messages, batched=True)
    assert columns  # the columns path was taken
    assert batched == one
    assert _state(engine, recorder) == _state(one_engine, one_recorder)
    if "hang" in name or "2x" in name or "30pct" in name:
        assert any(a["status"] == "firing" for a in one)


def _step(**kw) -> dict:
    e = {"v": 1, "kind": "step", "job": "j", "rank": 0, "step": 1, "ts": 100.0, "step_time": 1.0}
    e.update(kw)
    return e


@pytest.mark.parametrize("odd", [
    {"rank": 1.0}, {"rank": True}, {"rank": -1}, {"step": 2**60}, {"step": 2**64 - 1}, {"ts": "1"}, {"ts": -1},
    {"step_time": 90_000}, {"compute_time": -0.1}, {"data_time": None}, {"tokens": 1e300}, {"node": ""},
    {"node": 3}, {"gpu": 1.5}, {"gpu": None}, {"group": 2}, {"group": True}, {"group": "x" * 300},
    {"world_size": 1}, {"world_size": 4}, {"phase": "eval"}, {"phase": "end"}, {"phase": None}, {"loss": "x"},
    {"loss": -3}, {"v": True}, {"v": 1.0}, {"kind": "heartbeat"}, {"extra_field": 1}, {"job": ""},
])
def test_columns_decode_like_the_per_event_path(odd):
    """Whatever one odd event does, the envelope decodes to the same events and rejections."""
    items = [_step(rank=r, node=f"n{r}", gpu=r, world_size=8, tokens=10, group="g") for r in range(4)]
    items[2] = dict(items[2], **odd)
    raw = orjson.dumps({"v": 1, "kind": "batch", "events": items})
    events, rejected = decode_message(raw)
    got, got_rejected = decode_message_columns(raw)
    if isinstance(got, StepColumns):
        assert not rejected
        assert len(got) == len(events) and got.job_runs() == [("j", 0, len(events))]
        got = got.events()
    assert got == events
    assert [r.reason for r in got_rejected] == [r.reason for r in rejected]


def test_single_events_and_other_messages_are_unchanged():
    for raw in (orjson.dumps(_step()), b"{not json", b"[1]", orjson.dumps({"v": 1, "kind": "batch", "events": []}),
                orjson.dumps({"v": 2, "kind": "batch", "events": [_step()]})):
        assert decode_message_columns(raw) == decode_message(raw)
