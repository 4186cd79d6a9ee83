"""The tests' "exactly these alerts" reader (support.read_all_alerts) against the real broker: an alert
that arrives after the expected ones is in its list, so a test comparing the whole list catches it."""

from __future__ import annotations

import threading

import orjson
import pytest
from kafka import KafkaProducer

from stepwatch.topics import create_topics
from support import read_alerts, read_all_alerts

pytestmark = pytest.mark.kafka


def test_a_spurious_alert_behind_the_expected_one_is_read(kafka_bootstrap, topic_prefix):
    topic = topic_prefix + "alerts"
    create_topics(kafka_bootstrap, [topic], 1)
    producer = KafkaProducer(bootstrap_servers=kafka_bootstrap)

    def publish(status: str) -> None:
        producer.send(topic, orjson.dumps({"status": status, "ranks": [13]})).get(timeout=30)

    publish("firing")
    late = threading.Timer(2.0, publish, args=("firing",))  # a second, spurious firing, 2 s later
    late.start()
    try:
        first = read_alerts(kafka_bootstrap, topic, until=bool)
        everything = read_all_alerts(kafka_bootstrap, topic, until=bool)
    finally:
        late.join()
        producer.close()
    assert [a["status"] for a in first] == ["firing"]  # stops at the first match: blind to the second
    assert [a["status"] for a in everything] == ["firing", "firing"]
