"""A control-topic flood cannot take a rank's CPU (issue 44: 109 KB ``stack_request``s on the job's partition
slowed training 43%). A real broker: 400 records of 100 KB flood the job's partition; the rank's listener drops
them unread (too large, and beyond its records-per-second budget the backlog is skipped), counts them, and still
answers a real request sent after the flood."""

from __future__ import annotations

import orjson
import pytest
from kafka import KafkaProducer
from kafka.admin import KafkaAdminClient, NewTopic

from opsupport import wait_for
from stepwatch.models.hang.stacks import StackRequest
from stepwatch.producers.monitor import RankMonitor
from stepwatch.producers.stacks import MAX_RECORDS_PER_SECOND, ControlListener

pytestmark = pytest.mark.kafka


def test_a_flood_of_large_records_is_dropped_unread_and_a_real_request_still_answered(kafka_bootstrap, topic_prefix):
    control = topic_prefix + "control"
    admin = KafkaAdminClient(bootstrap_servers=kafka_bootstrap)
    admin.create_topics([NewTopic(control, num_partitions=1, replication_factor=1)])
    admin.close()
    sent: list = []
    m = RankMonitor(job="flood", rank=0, world_size=2, node="n1", sink=sent.extend, heartbeat_interval=0,
                    bootstrap=kafka_bootstrap)
    listener = ControlListener(m, control, poll_seconds=0.2, environ={"STEPWATCH_MONITOR_STACK_MIN_INTERVAL": "0"})
    producer = KafkaProducer(bootstrap_servers=kafka_bootstrap, max_request_size=4 << 20)
    try:
        listener.start()
        assert listener.ready.wait(60)
        junk = orjson.dumps({"v": 1, "kind": "stack_request", "job": "flood", "ranks": [0], "request_id": "x" * 100_000,
                             "ts": 1.0})
        for _ in range(400):
            producer.send(control, key=b"flood", value=junk)
        producer.flush()
        wait_for(lambda: listener.dropped >= 400 - MAX_RECORDS_PER_SECOND * 30 and listener.dropped > 0,
                 what="the flood dropped")
        assert listener.answered == 0  # nothing of the flood parsed into an answer

        def answered() -> bool:  # asked again while the listener may still be skipping a second's backlog
            request = StackRequest(job="flood", ranks=(0,), request_id=f"real/{len(sent)}", ts=1.0)
            producer.send(control, key=b"flood", value=orjson.dumps(request.to_dict())).get(30)
            return listener.answered >= 1

        wait_for(answered, what="a real request answered after the flood")
        assert m.flush(10)
        assert any(e["kind"] == "stack" and e["request_id"].startswith("real/") for e in sent)
    finally:
        producer.close()
        m.close()
