"""The checkpoint hang with teardown, live on the broker (issue 39, Tests; items 1 and 3).

A hand-written job (not the simulator) publishes to the real broker at wall-clock time, as its monitors would:
32 ranks on nodes of 8, ~0.3 s steps, heartbeats every 0.5 s, two healthy 1 s checkpoints, then a third in which
node n3's 8 ranks never finish the save while the 24 others leave it and wait in the collective after it. Once
the worker warns, the waiting ranks go silent (NCCL's watchdog tearing them down); the stuck ones live on.
Settings scaled down (pause-hang floor 2 s, heartbeat timeout 2 s, half-second ticks) keep it to seconds.
"""

from __future__ import annotations

import threading
import time

import orjson
import pytest
from kafka import KafkaProducer

from hang_recordings import node
from support import read_alerts

pytestmark = pytest.mark.kafka

RANKS = 32
STUCK = [r for r in range(RANKS) if node(r) == "n3"]
JOB = "ckpt-live"
ENV = {
    "STEPWATCH_HANG_TIMEOUT_SECONDS": "300",
    "STEPWATCH_HANG_PAUSE_HANG_FACTOR": "3",
    "STEPWATCH_HANG_PAUSE_HANG_FLOOR_SECONDS": "2",
    "STEPWATCH_HANG_HEARTBEAT_TIMEOUT_SECONDS": "2",
    "STEPWATCH_HANG_STACK_TIMEOUT_SECONDS": "2",
    # The first request asks 4 culprits (and 3 waiting ranks); the rest of the culprits are asked this long after it,
    # once the teardown is known: that request must leave the torn-down ranks out.
    "STEPWATCH_HANG_STACK_MIN_INTERVAL_SECONDS": "8",
    "STEPWATCH_WORKER_TICK_INTERVAL": "0.5",
}
STEP = 0.3
HB = 0.5


class LiveJob:
    """Publishes the job's events at wall-clock time from a thread; ``stuck`` and ``torn_down`` steer it."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=5)
        self.topic = topic
        self.n = -1
        self.seq = 0
        self.stop = threading.Event()
        self.torn_down = threading.Event()
        self.hang_started_at: float | None = None
        self.torn_down_at: float | None = None
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)

    def send(self, events: list[dict]) -> None:
        batch = [{"v": 1, "job": JOB, **e} for e in events]
        self.producer.send(self.topic, key=JOB.encode(), value=orjson.dumps({"v": 1, "kind": "batch", "events": batch}))

    def heartbeats(self, ranks, *, phase: str, started: int | None = None) -> None:
        now = time.time()
        self.send([{"kind": "heartbeat", "rank": r, "ts": now, "node": node(r), "step": self.n, "phase": phase,
                    "seq_started": self.seq if started is None else started, "seq_completed": self.seq}
                   for r in ranks])

    def train(self, steps: int) -> None:
        next_hb = 0.0
        for _ in range(steps):
            time.sleep(STEP)  # the job's own pace, not a wait in an assertion
            self.n += 1
            self.seq += 2
            now = time.time()
            self.send([{"kind": "step", "rank": r, "step": self.n, "ts": now, "step_time": STEP, "node": node(r),
                        "world_size": RANKS} for r in range(RANKS)])
            if now >= next_hb:
                self.heartbeats(range(RANKS), phase="train")
                next_hb = now + HB

    def phase(self, phase: str) -> None:
        self.send([{"kind": "phase", "ts": time.time(), "phase": phase, "step": self.n}])

    def checkpoint(self, seconds: float) -> None:
        self.phase("checkpoint")
        end = time.time() + seconds
        while time.time() < end:
            time.sleep(HB)
            self.heartbeats(range(RANKS), phase="checkpoint")
        self.phase("train")

    def _run(self) -> None:
        try:
            self.train(12)
            for _ in range(2):
                self.checkpoint(1.0)
                self.train(6)
            self.phase("checkpoint")
            self.hang_started_at = time.time()
            others = [r for r in range(RANKS) if r not in STUCK]
            while not self.stop.is_set():
                time.sleep(HB)
                self.heartbeats(STUCK, phase="checkpoint")
                if self.torn_down.is_set():
                    if self.torn_down_at is None:
                        self.torn_down_at = time.time()
                    continue
                if time.time() - self.hang_started_at < 1.0:
                    self.heartbeats(others, phase="checkpoint")
                else:  # saved; waiting in the collective after the checkpoint
                    self.heartbeats(others, phase="train", started=self.seq + 1)
                self.producer.flush()
        except BaseException as exc:  # surfaced by the test
            self.error = exc
        finally:
            self.producer.flush()

    def close(self) -> None:
        self.stop.set()
        self.thread.join(30)
        self.producer.close()


def hangs(alerts: list[dict]) -> list[dict]:
    return [a for a in alerts if a["type"] == "hang" and a["job"] == JOB]


def test_live_checkpoint_hang_warns_naming_the_stuck_node_and_keeps_it_across_the_teardown(kafka_bootstrap,
                                                                                           topic_prefix, start_worker):
    worker = start_worker(**ENV)
    job = LiveJob(kafka_bootstrap, topic_prefix + "events")
    job.thread.start()
    try:
        alerts = read_alerts(kafka_bootstrap, topic_prefix + "alerts", timeout=60, until=lambda a: bool(hangs(a)))
        versions = hangs(alerts)
        assert versions, f"no hang warning: {alerts}\n{worker.log_text()[-3000:]}"
        warning = versions[0]
        assert job.error is None, job.error
        assert warning["severity"] == "warning" and warning["evidence"]["case"] == "culprit_before_collective"
        assert [c["rank"] for c in warning["evidence"]["culprits"]] == STUCK and warning["nodes"][0] == "n3"
        assert "still in the checkpoint" in warning["summary"], warning["summary"]
        job.torn_down.set()  # NCCL's watchdog kills the 24 waiting ranks
        alerts = read_alerts(kafka_bootstrap, topic_prefix + "alerts", timeout=60,
                             until=lambda a: any("torn_down" in v["evidence"] for v in hangs(a)))
        torn = [v for v in hangs(alerts) if "torn_down" in v["evidence"]]
        assert torn, f"no teardown version: {[v['summary'] for v in hangs(alerts)]}\n{worker.log_text()[-3000:]}"
        known_at = torn[0]["evidence"]["stalled_since"] + torn[0]["evidence"]["stalled_seconds"]

        def second_round(got):
            return any(r.get("kind") == "stack_request" and STUCK[-1] in r["ranks"] for r in got)

        requests = [r for r in read_alerts(kafka_bootstrap, topic_prefix + "control", timeout=30, until=second_round)
                    if r.get("kind") == "stack_request"]
        assert second_round(requests), f"no second stack request: {requests}\n{worker.log_text()[-3000:]}"
        alerts = read_alerts(kafka_bootstrap, topic_prefix + "alerts", timeout=30, quiet=3.0,
                             until=lambda a: any(STUCK[-1] in v["evidence"].get("stack_request", {}).get("ranks", [])
                                                 for v in hangs(a)))
        assert job.error is None, job.error
    finally:
        job.close()
    versions = hangs(alerts)
    torn = [v for v in versions if "torn_down" in v["evidence"]]
    assert len({v["id"] for v in versions}) == 1
    # The culprits survive the teardown: every version names n3's 8 ranks, never the torn-down ones.
    for v in versions:
        assert [c["rank"] for c in v["evidence"]["culprits"]] == STUCK, v["summary"]
        assert v["nodes"][0] == "n3" and v["evidence"]["case"] == "culprit_before_collective", v["summary"]
    last = torn[-1]["evidence"]["torn_down"]
    assert last["count"] == RANKS - len(STUCK) and last["culprits_alive"] is True
    assert f"job torn down: {RANKS - len(STUCK)}" in torn[-1]["summary"]
    # No stack request to a torn-down rank: the request made once the teardown was known names stuck ranks only
    # (the first, before the teardown, asked a few waiting ranks too, as it should).
    assert requests[0]["ts"] < job.torn_down_at and set(requests[0]["ranks"]) & set(STUCK), requests
    later = [r for r in requests if r["ts"] >= known_at]
    assert later, (known_at, requests)
    for request in later:
        assert set(request["ranks"]) <= set(STUCK), request
    # And the alert asks no new stacks of them: its stack request lists only ranks alive when asked.
    asked = set(torn[-1]["evidence"].get("stack_request", {}).get("ranks", []))
    assert asked == {r for q in requests for r in q["ranks"]}, (asked, requests)
    print(f"warning {warning['evidence']['stalled_seconds']:.1f} s into the checkpoint; requests "
          f"{[(round(r['ts'] - job.hang_started_at, 1), r['ranks']) for r in requests]}; teardown at "
          f"{job.torn_down_at - job.hang_started_at:.1f} s, known at {known_at - job.hang_started_at:.1f} s; "
          f"{len(versions)} versions")
