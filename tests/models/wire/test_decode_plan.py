"""A read decoded by a plan (``models.wire.decode_plan``, worked out in the live worker's decoder process) goes
through the pipeline exactly as the read decoded in process: the same alerts, dead letters, state, status and
counters, on clean, mixed and broken reads. The plans cross a real pickle round trip, as from the process."""

from __future__ import annotations

import dataclasses
import pickle

import orjson
import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from stepwatch.models.detection import DetectionEngine
from stepwatch.models.settings import DetectionSettings
from stepwatch.models.pipeline import Message, Pipeline
from stepwatch.models.status import StatusRecorder
from stepwatch.models.wire.decode_plan import plan_read
from stepwatch.sim import scenarios
from stepwatch.streams.metrics import WorkerMetrics

from test_batch_path import _state

T0 = 1_700_000_000.0


def _env(events: list[dict]) -> bytes:
    return orjson.dumps({"v": 1, "kind": "batch", "events": events})


def _step(job="j", rank=0, step=1, ts=T0, **kw) -> dict:
    return {"v": 1, "kind": "step", "job": job, "rank": rank, "step": step, "ts": ts, "step_time": 1.0, **kw}


def _reads_of(scenario, per_message: int, per_read: int) -> list[list[bytes]]:
    """The scenario's events as envelopes of ``per_message`` (other kinds as their own messages, as a rank
    monitor sends them), ``per_read`` messages a read."""
    messages: list[bytes] = []
    for _, batch in scenarios.batches(scenario):
        run: list[dict] = []
        for event in batch:
            if event["kind"] != "step":
                messages.append(orjson.dumps(event))
                continue
            run.append(event)
            if len(run) >= per_message:
                messages.append(_env(run))
                run = []
        if run:
            messages.append(_env(run) if len(run) > 1 else orjson.dumps(run[0]))
    return [messages[i:i + per_read] for i in range(0, len(messages), per_read)]


def _pipeline(max_ranks: int | None = None) -> tuple[Pipeline, WorkerMetrics]:
    settings = DetectionSettings()
    if max_ranks is not None:
        settings = dataclasses.replace(settings, retention=dataclasses.replace(settings.retention,
                                                                             max_ranks_per_job=max_ranks))
    engine = DetectionEngine(settings)
    metrics = WorkerMetrics(engine)
    return Pipeline(engine, recorder=StatusRecorder(60).attach(engine), metrics=metrics), metrics


def _counters(metrics: WorkerMetrics) -> dict:
    text = generate_latest(metrics.registry).decode()
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name.endswith("_total") and "seconds" not in s.name:
                out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def _without_ts(record: bytes) -> dict:
    out = orjson.loads(record)
    out.pop("ts")  # when the dead letter was written
    return out


def _run(reads: list[list[bytes]], planned: bool, arrival_step: float = 0.5, max_ranks: int | None = None):
    pipeline, metrics = _pipeline(max_ranks)
    outputs, plans = [], 0
    for i, values in enumerate(reads):
        arrival = T0 + 30 + arrival_step * i
        messages = [Message(v, None, "events", 0, i * 10_000 + k) for k, v in enumerate(values)]
        if planned:
            plan = plan_read(values, pipeline.max_new_jobs)
            if plan is not None:
                plan = pickle.loads(pickle.dumps(plan))  # as from the decoder process
                plans += 1
                out = pipeline.feed_planned(messages, plan, arrival)
            else:
                out = pipeline.feed(messages, arrival)
        else:
            out = pipeline.feed(messages, arrival)
        outputs.append(([a.to_dict() for a in out.alerts],
                        [(d.cause, _without_ts(d.record())) for d in out.deadletters]))
        if i % 4 == 3:
            outputs.append(([a.to_dict() for a in pipeline.tick(pipeline.engine.clock).alerts], []))
    return outputs, _state(pipeline.engine, pipeline.recorder), _counters(metrics), plans


@pytest.mark.parametrize("name,per_message,per_read", [
    ("straggler-30pct-64", 64, 40), ("multi-problem-256", 256, 200), ("multi-job-3", 16, 7),
    ("hang-hang-64", 64, 9), ("intermittent-64", 32, 100), ("healthy-pipeline-64", 200, 3)])
def test_a_planned_read_gives_what_the_read_gives(name, per_message, per_read):
    reads = _reads_of(scenarios.get(name), per_message, per_read)
    plain, plain_state, plain_counts, _ = _run(reads, planned=False)
    planned, planned_state, planned_counts, plans = _run(reads, planned=True)
    assert plans == len(reads)
    assert planned == plain
    assert planned_state == plain_state
    assert planned_counts == plain_counts
    if "hang" in name or "30pct" in name:
        assert any(a["status"] == "firing" for alerts, _ in plain for a in alerts)


def _messy_reads() -> list[list[bytes]]:
    good = [_env([_step(rank=r, step=s, ts=T0 + s, node=f"n{r // 4}") for r in range(8)]) for s in range(1, 40)]
    lone = [orjson.dumps(_step(rank=r, step=40, ts=T0 + 40)) for r in range(8)]
    bad_event = _env([_step(rank=0, step=41, ts=T0 + 41), _step(rank="x", step=41), _step(rank=2, step=41)])
    future = _env([_step(rank=r, step=42, ts=T0 + 10 ** 6) for r in range(8)])
    extra = _env([_step(rank=r, step=43, ts=T0 + 43, extra_field=r) for r in range(8)])
    big = [_env([_step(rank=r, step=s, ts=T0 + s) for r in range(8)] * 40) for s in range(44, 50)]
    many_jobs = _env([_step(job=f"j{k}", rank=0, step=1) for k in range(300)])
    rank_cap = _env([_step(job="wide", rank=r, step=1) for r in range(200)])
    heartbeat = orjson.dumps({"v": 1, "kind": "heartbeat", "job": "j", "rank": 0, "ts": T0 + 44})
    return [good[:10], good[10:11], [good[11], b"{not json", good[12], good[13]], lone[:4] + good[14:16] + lone[4:],
            [good[16], bad_event, good[17], heartbeat, good[18]], [good[19], future, good[20]],
            [good[21], extra, good[22], None, b""], big, [many_jobs], [good[23], many_jobs, good[24]],
            [rank_cap, good[25]], good[26:]]


def test_messy_reads_planned_give_what_they_give_in_process():
    reads = _messy_reads()
    # A state cap refuses rows of a planned run: they are dead-lettered by index, from the bytes parsed again.
    plain, plain_state, plain_counts, _ = _run(reads, planned=False, max_ranks=100)
    planned, planned_state, planned_counts, plans = _run(reads, planned=True, max_ranks=100)
    assert plans == len(reads) - 2  # the reads with a message naming 300 jobs are fed as they come
    assert planned == plain
    assert planned_state == plain_state
    assert planned_counts == plain_counts
    causes = {cause for _, dead in plain for cause, _ in dead}
    assert {"decode", "future", "capped"} <= causes


def test_a_plan_cuts_a_read_as_the_pipeline_does():
    env = _env([_step(rank=r) for r in range(4)])
    big = _env([_step(rank=r) for r in range(1000)])
    lone = orjson.dumps(_step())
    plan = plan_read([env, lone, b"nope", env, env, big, big, lone], max_new_jobs=256)
    assert [(p.messages, p.columns is not None, p.shapes) for p in plan.parts] == [
        (2, True, ((4, 0), (1, None))), (1, False, ()), (3, True, ((4, 0), (4, 0), (1000, 0))),
        (2, True, ((1000, 0), (1, None)))]
    assert [(p.messages, p.columns is not None, p.shapes) for p in plan_read([lone, b"[]", big], 256).parts] == [
        (1, False, ()), (1, False, ()), (1, True, ((1000, 0),))]  # a lone step event: one event at a time
    assert plan_read([_env([_step(job=f"j{k}") for k in range(300)])], 256) is None
