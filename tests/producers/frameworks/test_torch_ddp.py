"""Real DDP training (torch.distributed, gloo, 4 CPU processes) monitored by stepwatch.

Each rank is an OS process running tests/train_rank.py: a small MLP under
DistributedDataParallel with the stepwatch comm hook, publishing through RankMonitor to
the real broker, judged by a running ``stepwatch worker``. Skipped without torch
(``pip install -e '.[train-test]'``).
"""

from __future__ import annotations

import statistics
import time
import uuid
from collections import defaultdict

import pytest

pytest.importorskip("torch", reason="torch not installed (pip install -e '.[train-test]')")

from kafka import KafkaConsumer  # noqa: E402
from support import read_all_alerts, stepwatch_env  # noqa: E402
from train_support import run_ddp_job  # noqa: E402

from stepwatch.models.wire.events import decode_message  # noqa: E402

pytestmark = pytest.mark.kafka

WORLD = 4
STEPS = "70"


def read_events(bootstrap: str, topic: str, *, idle_s: float = 3.0, timeout: float = 60) -> list:
    """Every event on ``topic`` (batch envelopes decoded), until nothing new for ``idle_s``; asserts none is rejected."""
    consumer = KafkaConsumer(topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest",
                             enable_auto_commit=False, group_id=None, consumer_timeout_ms=int(idle_s * 1000))
    events, rejected = [], []
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            before = len(events) + len(rejected)
            for record in consumer:
                good, bad = decode_message(record.value)
                events.extend(good)
                rejected.extend(bad)
            if len(events) + len(rejected) == before and events:
                break
    finally:
        consumer.close()
    assert not rejected, rejected[:3]
    return events


def by_rank(events, kind: str, field: str, phase: str = "train") -> dict[int, list[float]]:
    out: dict[int, list[float]] = defaultdict(list)
    for e in events:
        if e.kind == kind and getattr(e, "phase", None) == phase and e.step >= 10:
            out[e.rank].append(getattr(e, field))
    return out


#: These jobs' steps take ~0.07 s of CPU: the machine's other load slows the whole job by 20 % and more at
#: times, which the throughput rule rightly reports (seen under a parallel full run). It is not these tests'
#: subject, so it is set out of reach here, and the alert lists are compared whole.
NO_JOB_WIDE_RULE = {"STEPWATCH_JOB_HEALTH_THROUGHPUT_MIN_EFFECT": "10"}


@pytest.fixture(scope="module")
def healthy_then_slow(kafka_bootstrap, tmp_path_factory):
    """One worker judging a healthy job, then a job whose rank 2 is slow (the slow-rank test's job, and for the
    healthy test the marker that proves the worker got past the healthy job's events): (prefix, worker, stats
    of the slow job, every alert once the slow job's straggler resolved)."""
    from support import WorkerProcess

    tmp = tmp_path_factory.mktemp("ddp")
    prefix = f"t-ddp-{uuid.uuid4().hex[:8]}."
    env = stepwatch_env(kafka_bootstrap, prefix, STEPWATCH_WORKER_DATADIR=str(tmp / "faust"), **NO_JOB_WIDE_RULE)
    worker = WorkerProcess(env, tmp / "worker.log").wait_ready()
    try:
        (tmp / "healthy").mkdir()
        run_ddp_job(dict(env, STEPWATCH_JOB="ddp-healthy"), tmp / "healthy", world=WORLD, args=("--steps", STEPS))
        (tmp / "slow").mkdir()
        stats = run_ddp_job(dict(env, STEPWATCH_JOB="ddp-slow"), tmp / "slow", world=WORLD,
                            args=("--steps", STEPS, "--slow-rank", "2"))
        # The slow job ends (its ``end`` phase), which resolves its straggler.
        alerts = read_all_alerts(kafka_bootstrap, prefix + "alerts", until=lambda a: any(
            x["job"] == "ddp-slow" and x["type"] == "straggler" and x["status"] == "resolved" for x in a))
        yield prefix, worker, stats, alerts
    finally:
        worker.discard()


def test_slow_rank_is_named_by_compute_time_while_step_times_look_alike(kafka_bootstrap, healthy_then_slow):
    prefix, worker, stats, alerts = healthy_then_slow
    alerts = [a for a in alerts if a["job"] == "ddp-slow"]
    # Exactly one alert: firing, then resolved by the job's end, rank 2 only. A firing alert is published again
    # when its figures move (docs/detection.md; under load they do): the same id, so one state, not a second alert.
    states = [(a["status"], a["type"], a["ranks"]) for i, a in enumerate(alerts)
              if i == 0 or a["status"] != alerts[i - 1]["status"]]
    assert states == [("firing", "straggler", [2]), ("resolved", "straggler", [2])] and \
        len({a["id"] for a in alerts}) == 1 and {tuple(a["ranks"]) for a in alerts} == {(2,)}, \
        f"{[a['summary'] for a in alerts]}; worker log:\n{worker.log_text()[-3000:]}"
    assert alerts[0]["evidence"]["signal"] == "compute_time"

    # What the worker saw: every event well formed; step_time alike on all ranks, compute_time not.
    events = [e for e in read_events(kafka_bootstrap, prefix + "events") if e.job == "ddp-slow"]
    step_time = {r: statistics.median(v) for r, v in by_rank(events, "step", "step_time").items()}
    compute = {r: statistics.median(v) for r, v in by_rank(events, "step", "compute_time").items()}
    assert sorted(step_time) == list(range(WORLD))
    assert max(step_time.values()) / min(step_time.values()) < 1.10, step_time
    others = statistics.median(compute[r] for r in compute if r != 2)
    assert compute[2] / others > 1.3, compute
    kinds = {e.kind for e in events}
    assert {"step", "heartbeat", "phase"} <= kinds
    assert {e.phase for e in events if e.kind == "phase"} >= {"warmup", "train", "end"}
    # Every rank numbered the same all-reduces and completed them all.
    assert len({(s["seq_started"], s["seq_completed"]) for s in stats}) == 1 and stats[0]["seq_started"] > 0
    steps = [e for e in events if e.kind == "step"]
    assert all(e.extra.get("comm_calls", 0) >= 1 for e in steps if e.step > 0)
    for s in stats:
        assert s["dropped"] == 0 and s["sent"] == s["produced"], s


def test_healthy_ddp_run_raises_no_alert(healthy_then_slow):
    _prefix, _worker, _stats, alerts = healthy_then_slow
    # The slow job's straggler resolved when it ended (the worker got that far), and nothing else: no alert for
    # the healthy job, none without a job. (Exactly the slow job's two alerts: the slow-rank test.)
    assert any(a["job"] == "ddp-slow" and a["status"] == "resolved" for a in alerts)
    assert {(a["job"], a["type"]) for a in alerts} == {("ddp-slow", "straggler")}, \
        [(a["job"], a["summary"]) for a in alerts]


def test_broker_down_training_completes_and_counts_every_drop(tmp_path):
    from train_support import free_port

    env = stepwatch_env(f"127.0.0.1:{free_port()}", "t-down.", STEPWATCH_JOB="ddp-down")  # nothing listens there
    started = time.monotonic()
    # Nothing can be delivered: close gives up after 1 s (its 10 s default would only be waited out).
    stats = run_ddp_job(env, tmp_path, world=WORLD, args=("--steps", "40", "--close-timeout", "1"))
    assert time.monotonic() - started < 120
    for s in stats:
        assert s["sent"] == 0 and not s["connected"], s
        # 40 steps + phases (warmup, train, end) + heartbeats: all produced, none sent, all counted as dropped.
        assert s["produced"] >= 43
        assert s["dropped"] == s["produced"], s
        assert s["seq_started"] == s["seq_completed"] > 0
