"""The rank monitor against a broker that crashes mid-run (its own broker: this test kills it).

Training goes on at the same pace while the broker is gone: the monitor's calls stay as cheap as
before (they never wait on Kafka), events beyond the bounded queue are dropped and counted, and
once the broker is back the same monitor delivers again without a restart.
"""

from __future__ import annotations

import statistics
import threading
import time

import orjson
import pytest
from kafka import KafkaConsumer

from stepwatch.localkafka import LocalKafka
from stepwatch.producers.monitor import RankMonitor
from stepwatch.topics import create_topics

pytestmark = pytest.mark.kafka

QUEUE = 100


@pytest.fixture
def own_broker():
    """A broker of this test's own: it is killed and restarted, so not the session's."""
    broker = LocalKafka().start()
    try:
        yield broker
    finally:
        broker.stop()


class Training:
    """A training loop of ~5 ms steps; records how long the monitor's own calls took per step."""

    def __init__(self, monitor: RankMonitor) -> None:
        self.monitor = monitor
        self.calls: list[float] = []

    def until(self, condition, *, timeout: float, what: str) -> list[float]:
        start = len(self.calls)
        deadline = time.monotonic() + timeout
        while not condition():
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out after {timeout} s waiting for {what}: {self.monitor.stats()}")
            t0 = time.perf_counter()
            self.monitor.begin_step()
            t1 = time.perf_counter()
            time.sleep(0.005)  # the step's work
            t2 = time.perf_counter()
            self.monitor.end_step(samples=8)
            self.calls.append((t1 - t0) + (time.perf_counter() - t2))
        return self.calls[start:]


def test_rank_monitor_keeps_training_pace_through_a_broker_crash_and_delivers_after_it(own_broker, topic_prefix):
    topic = topic_prefix + "events"
    create_topics(own_broker.bootstrap, [topic], 1)
    m = RankMonitor(job="outage", rank=0, bootstrap=own_broker.bootstrap, topic=topic, heartbeat_interval=0.2,
                    queue_size=QUEUE, flush_interval=0.05, environ={})
    train = Training(m)
    try:
        before = train.until(lambda: m.sent >= 100, timeout=60, what="the first 100 events delivered")
        assert m.dropped == 0

        own_broker.kill()  # SIGKILL: a crash, no goodbye to the clients
        during = train.until(lambda: m.dropped > 0, timeout=60, what="drops while the broker is down")
        restarted = threading.Thread(target=own_broker.start, kwargs={"timeout": 120}, daemon=True)
        restarted.start()
        during += train.until(lambda: not restarted.is_alive(), timeout=180, what="the broker to restart")
        sent_at_restart = m.sent
        # The same monitor (no restart of it) delivers again: 100 more events, and they reach the topic.
        train.until(lambda: m.sent >= sent_at_restart + 100, timeout=120, what="delivery after the restart")
        last_step = m.last_step
        assert m.flush(60), m.stats()  # training stopped: everything queued is delivered (or dropped)
    finally:
        m.close(timeout=10)

    # Training never waited on Kafka: a call that waited would take max_block_ms (1 s) or a bootstrap (2 s).
    assert max(during) < 0.5, f"a monitor call took {max(during) * 1000:.0f} ms while the broker was down"
    assert statistics.median(during) < 0.005 and statistics.median(before) < 0.005
    # Drops are counted, and every event is accounted for.
    stats = m.stats()
    assert stats["dropped"] > 0 and stats["sent"] + stats["dropped"] == stats["produced"], stats
    consumer = KafkaConsumer(topic, bootstrap_servers=own_broker.bootstrap, auto_offset_reset="earliest",
                             group_id=None, consumer_timeout_ms=20_000)
    steps = set()
    try:
        for record in consumer:
            value = orjson.loads(record.value)
            for event in value["events"] if value["kind"] == "batch" else [value]:
                if event["kind"] == "step":
                    steps.add(event["step"])
            if last_step in steps:
                break
    finally:
        consumer.close()
    assert last_step in steps  # the last step, sent after the restart, is in the topic
    assert 0 in steps and len(steps) < last_step + 1  # the first one too, and some in between were dropped
