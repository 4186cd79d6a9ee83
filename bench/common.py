"""What the throughput benchmark's parts (bench/throughput.py) share: the simulated load and how it gets onto
a topic, and stepwatch workers run as child processes (bench/children/worker_progress.py) of one group."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PY = sys.executable
BATCH = 256

#: The worker's events consumers compared in (b), (d) and (f): STEPWATCH_WORKER_CONSUMER values.
CONSUMERS = ("faust", "aiokafka")


def sim_events(ranks: int, steps: int, seed: int = 1) -> list[dict]:
    from stepwatch.sim.simulator import ClusterSimulator, SimulationSpec

    spec = SimulationSpec(job=f"bench-{ranks}", ranks=ranks, steps=steps, seed=seed, checkpoint_every=0,
                          warmup_steps=0)
    return [e for e in ClusterSimulator(spec).events() if e["kind"] == "step"]


def encode(events: list[dict], per_message: int) -> list[bytes]:
    from stepwatch.models.wire.events import encode_events

    return [encode_events(events[i:i + per_message]) for i in range(0, len(events), per_message)]


def sim_events_job(job: str, ranks: int, steps: int, seed: int) -> list[dict]:
    events = sim_events(ranks, steps, seed=seed)
    for e in events:
        e["job"] = job
    return events


def produce(bootstrap: str, topic: str, messages: list[bytes]) -> None:
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=20, batch_size=1 << 20,
                             max_request_size=8 << 20, acks=1)
    for m in messages:
        producer.send(topic, key=b"bench", value=m)
    producer.flush()
    producer.close()


def produce_keyed(bootstrap: str, topic: str, messages: list[tuple[bytes, bytes]]) -> None:
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=20, batch_size=1 << 20,
                             max_request_size=8 << 20, acks=1)
    for key, m in messages:
        producer.send(topic, key=key, value=m)
    producer.flush()
    producer.close()


def ensure_topics(bootstrap: str, prefix: str, partitions: int) -> None:
    """The stepwatch topics of ``prefix``, as `stepwatch worker` creates them."""
    from stepwatch import topics
    from stepwatch.config import Settings

    topics.ensure_topics(Settings.from_env({"KAFKA_BOOTSTRAP": bootstrap, "STEPWATCH_KAFKA_TOPIC_PREFIX": prefix,
                                     "STEPWATCH_KAFKA_PARTITIONS": str(partitions)}).kafka)


class Workers:
    """Worker processes of one consumer group, read through their progress files."""

    def __init__(self, bootstrap: str, prefix: str, partitions: int, count: int, tmp: Path,
                 consumer: str = "aiokafka", env: dict | None = None) -> None:
        self.outs = [tmp / f"{prefix}w{i}.json" for i in range(count)]
        env = dict(os.environ, STEPWATCH_WORKER_CONSUMER=consumer, **(env or {}))
        self.procs = [subprocess.Popen([PY, "-m", "bench.children.worker_progress", bootstrap, prefix,
                                        str(partitions), str(o)],
                                       stdout=open(str(o) + ".log", "w"), stderr=subprocess.STDOUT, cwd=REPO, env=env)
                      for o in self.outs]

    def states(self) -> list[dict]:
        out = []
        for o in self.outs:
            try:
                out.append(json.loads(o.read_text()))
            except (OSError, ValueError):
                out.append({"n": 0, "assigned": [], "first": None, "last": None})
        return out

    def wait(self, cond, timeout: float, what: str) -> list[dict]:
        end = time.time() + timeout
        while time.time() < end:
            st = self.states()
            if cond(st):
                return st
            for p, o in zip(self.procs, self.outs):
                if p.poll() is not None:
                    raise RuntimeError(f"worker exited: {Path(str(o) + '.log').read_text()[-2000:]}")
            time.sleep(0.05)
        raise RuntimeError(f"timed out waiting for {what}: {self.states()}")

    def stop(self) -> None:
        terminate(self.procs, 20)


def terminate(procs: list[subprocess.Popen], timeout: float) -> None:
    """SIGTERM them all, then SIGKILL whichever has not exited after ``timeout`` seconds."""
    for p in procs:
        p.terminate()
    for p in procs:
        try:
            p.wait(timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
