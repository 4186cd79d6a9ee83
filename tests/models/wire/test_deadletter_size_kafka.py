"""Oversized bad messages on the real broker (issue 44 row 10): a 900 KiB message that is not JSON and a
60 MB one each make a dead letter that arrives, within the producer's request size, saying it was
truncated with the whole message's size and sha256 (models/wire/deadletter.py; pure: test_deadletter_size.py).
"""

from __future__ import annotations

import base64
import hashlib

import pytest

from support import read_alerts

pytestmark = pytest.mark.kafka
#: The events topic takes messages this large (the broker's default is about 1 MB).
TOPIC_MAX = 64 << 20


def _events_topic(bootstrap: str, name: str) -> None:
    from kafka import KafkaAdminClient
    from kafka.admin import NewTopic

    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:  # a segment must hold the largest batch
        admin.create_topics([NewTopic(name, 1, 1, topic_configs={"max.message.bytes": str(TOPIC_MAX),
                                                                  "segment.bytes": str(2 * TOPIC_MAX)})])
    finally:
        admin.close()


def test_an_oversized_bad_message_is_dead_lettered_truncated_with_its_size_and_digest(kafka_bootstrap, topic_prefix,
                                                                                      start_worker):
    from kafka import KafkaProducer

    events = topic_prefix + "events"
    _events_topic(kafka_bootstrap, events)
    start_worker(STEPWATCH_KAFKA_PARTITIONS="1")
    bad = [b"{not json " + b"x" * (900 << 10), b"[" + b"7," * (30_000_000)]  # 900 KiB and 60 MB, neither JSON
    producer = KafkaProducer(bootstrap_servers=kafka_bootstrap, max_request_size=TOPIC_MAX, retries=5)
    for i, value in enumerate(bad):
        producer.send(events, key=f"job-{i}".encode(), value=value).get(timeout=60)
    producer.close()
    dead = read_alerts(kafka_bootstrap, topic_prefix + "deadletter", until=lambda d: len(d) >= 2, timeout=180)
    by_key = {d["key"]: d for d in dead}
    assert sorted(by_key) == ["job-0", "job-1"], [d.get("key") for d in dead]
    for i, (value, why) in enumerate(zip(bad, ("malformed JSON", f"message of {len(bad[1])} bytes exceeds"))):
        d = by_key[f"job-{i}"]
        assert d["truncated"] is True and d["reason"].startswith(why), {**d, "value_b64": "..."}
        assert d["value_size"] == len(value) and d["value_sha256"] == hashlib.sha256(value).hexdigest()
        kept = base64.b64decode(d["value_b64"])
        assert kept == value[:d["value_kept"]] and len(kept) > 500_000  # most of what fits: the message's start
