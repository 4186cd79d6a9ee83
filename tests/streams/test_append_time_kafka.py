"""The topics training hosts write take the broker's time on each record (stepwatch/topics.py ``APPEND_TIME``),
on the real broker.

A producer sets a record's time from its own host's clock (Kafka's ``CreateTime``); a training host or node agent
whose clock runs an hour off would then move what ``stepwatch record`` writes as ``_arrival`` and what recovery
rebuilds on, and replay would not see what the live worker saw (it reads by its own clock). The events topic as
the worker creates it and the telemetry topic as ``stepwatch publish`` creates it keep the broker's time whatever
time the producer sends; the alerts topic (written by workers) is left as it was.
"""

from __future__ import annotations

import time

import orjson

from stepwatch.config import Settings
from stepwatch.recording import publish
from stepwatch.topics import ensure_topics
from support import run_stepwatch, stepwatch_env


def test_records_on_the_input_topics_take_the_brokers_time_not_the_producers(kafka_bootstrap, topic_prefix,
                                                                             tmp_path):
    from kafka import KafkaConsumer, KafkaProducer

    env = stepwatch_env(kafka_bootstrap, topic_prefix)
    settings = Settings.from_env(env)
    ensure_topics(settings.kafka)  # as the worker creates them
    publish([], settings)  # (and the telemetry topic, as ``stepwatch publish`` does)
    k = settings.kafka
    events, telemetry, alerts = (k.topic(k.events_topic), k.topic(settings.telemetry.topic), k.topic(k.alerts_topic))

    hour_ago_ms = int((time.time() - 3600) * 1000)
    step = {"v": 1, "kind": "step", "job": "j", "rank": 0, "step": 1, "ts": time.time(), "step_time": 1.0}
    host = {"v": 1, "kind": "host", "node": "n0", "ts": time.time(), "psi": {"cpu": {"some_avg10": 1.0}}}
    producer = KafkaProducer(bootstrap_servers=kafka_bootstrap)
    sent_at = time.time()
    for topic, key, event in ((events, b"j", step), (telemetry, b"n0", host), (alerts, b"j", {"v": 1})):
        producer.send(topic, key=key, value=orjson.dumps(event), timestamp_ms=hour_ago_ms)
    producer.flush()
    producer.close()

    consumer = KafkaConsumer(events, telemetry, alerts, bootstrap_servers=kafka_bootstrap, group_id=None,
                             auto_offset_reset="earliest", consumer_timeout_ms=10_000)
    stamps = {}
    for record in consumer:
        stamps[record.topic] = record.timestamp / 1000
        if len(stamps) == 3:
            break
    consumer.close()
    assert abs(stamps[events] - sent_at) < 120 and abs(stamps[telemetry] - sent_at) < 120, stamps
    assert stamps[alerts] == hour_ago_ms / 1000  # (a topic without it keeps the producer's time)

    recording = tmp_path / "events.jsonl"
    run_stepwatch("record", "-o", str(recording), env=env)
    arrivals = [orjson.loads(line)["_arrival"] for line in recording.read_bytes().splitlines() if line.strip()]
    assert len(arrivals) == 2 and all(abs(a - sent_at) < 120 for a in arrivals), arrivals
