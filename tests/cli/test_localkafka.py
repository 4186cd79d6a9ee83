"""The local Kafka 4.x broker works, and so do the clients stepwatch uses on it.

kafka-python and aiokafka round trips, plus a smoke test that a trivial
faust-streaming app (the stream processor stepwatch is built on) consumes and
produces against Kafka 4.x, which removed old protocol versions (KIP-896).
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
import time
import uuid

import pytest

from stepwatch.localkafka import LocalKafka, LocalKafkaError, create_topics

pytestmark = pytest.mark.kafka


def _produce(bootstrap: str, topic: str, values: list[bytes]) -> None:
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=0)
    try:
        for v in values:
            producer.send(topic, value=v, key=v)
        producer.flush(timeout=30)
    finally:
        producer.close(timeout=10)


def _consume(bootstrap: str, topic: str, group: str, n: int, timeout: float = 60) -> list[bytes]:
    from kafka import KafkaConsumer

    consumer = KafkaConsumer(
        topic,
        bootstrap_servers=bootstrap,
        group_id=group,
        auto_offset_reset="earliest",
        consumer_timeout_ms=1000,
    )
    got: list[bytes] = []
    deadline = time.monotonic() + timeout
    try:
        while len(got) < n and time.monotonic() < deadline:
            for msg in consumer:
                got.append(msg.value)
                if len(got) >= n:
                    break
    finally:
        consumer.close()
    return got


def test_broker_answers_metadata(kafka_bootstrap: str, topic_prefix: str) -> None:
    from kafka import KafkaAdminClient
    from kafka.admin import ConfigResource, ConfigResourceType

    names = [topic_prefix + "a", topic_prefix + "b"]
    compacted = topic_prefix + "c"
    create_topics(kafka_bootstrap, names, partitions=3, compacted=[compacted])
    create_topics(kafka_bootstrap, names, partitions=3)  # already exists: no error
    admin = KafkaAdminClient(bootstrap_servers=kafka_bootstrap)
    try:
        topics = {t["name"]: t for t in admin.describe_topics(names + [compacted])}
        configs = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, compacted)])
    finally:
        admin.close()
    assert all(len(topics[n]["partitions"]) == 3 for n in names + [compacted])
    assert "'compact'" in repr(configs), configs


def test_kafka_python_round_trip(kafka_bootstrap: str, topic_prefix: str, consumer_group: str) -> None:
    topic = topic_prefix + "rt"
    create_topics(kafka_bootstrap, [topic])
    values = [f"m{i}".encode() for i in range(5)]
    _produce(kafka_bootstrap, topic, values)
    assert _consume(kafka_bootstrap, topic, consumer_group, len(values)) == values


def test_aiokafka_round_trip(kafka_bootstrap: str, topic_prefix: str, consumer_group: str) -> None:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

    topic = topic_prefix + "aio"
    create_topics(kafka_bootstrap, [topic])
    _produce(kafka_bootstrap, topic, [b"from-kafka-python"])

    async def main() -> list[bytes]:
        producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap)
        await producer.start()
        try:
            await producer.send_and_wait(topic, b"from-aiokafka")
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(
            topic,
            bootstrap_servers=kafka_bootstrap,
            group_id=consumer_group,
            auto_offset_reset="earliest",
        )
        await consumer.start()
        try:
            got = []
            while len(got) < 2:
                msg = await asyncio.wait_for(consumer.getone(), timeout=30)
                got.append(msg.value)
            await consumer.commit()
            return got
        finally:
            await consumer.stop()

    assert asyncio.run(main()) == [b"from-kafka-python", b"from-aiokafka"]


FAUST_APP = """
import faust

app = faust.App(
    {app_id!r},
    broker="kafka://{bootstrap}",
    store="memory://",
    datadir={datadir!r},
    topic_replication_factor=1,
    topic_partitions=1,
    web_enabled=False,
)
source = app.topic({source!r}, value_type=bytes, value_serializer="raw")
sink = app.topic({sink!r}, value_type=bytes, value_serializer="raw")
# A table too: exercises changelog topic creation (compacted) by Faust itself.
seen = app.Table("seen", default=int, partitions=1)


@app.agent(source)
async def forward(stream):
    async for value in stream:
        seen["n"] += 1
        await sink.send(value=b"fwd:%d:" % seen["n"] + value)


if __name__ == "__main__":
    app.main()
"""


def test_faust_app_forwards(kafka_bootstrap: str, topic_prefix: str, consumer_group: str, tmp_path) -> None:
    """faust-streaming + aiokafka against Kafka 4.x: an agent forwards records."""
    source, sink = topic_prefix + "in", topic_prefix + "out"
    create_topics(kafka_bootstrap, [source, sink])
    script = tmp_path / "fwd_app.py"
    script.write_text(
        textwrap.dedent(FAUST_APP).format(
            app_id=consumer_group,
            bootstrap=kafka_bootstrap,
            datadir=str(tmp_path / "faust-data"),
            source=source,
            sink=sink,
        )
    )
    log = tmp_path / "faust.log"
    with open(log, "wb") as out:
        worker = subprocess.Popen(
            [sys.executable, str(script), "worker", "-l", "info", "--without-web"],
            cwd=tmp_path,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        values = [f"v{i}".encode() for i in range(5)]
        _produce(kafka_bootstrap, source, values)
        got = _consume(kafka_bootstrap, sink, consumer_group + "-check", len(values), timeout=90)
        assert worker.poll() is None, "faust worker died:\n" + log.read_text(errors="replace")[-4000:]
        assert got == [b"fwd:%d:" % (i + 1) + v for i, v in enumerate(values)], log.read_text(
            errors="replace"
        )[-4000:]
    finally:
        if worker.poll() is None:
            os.killpg(worker.pid, signal.SIGTERM)
            try:
                worker.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(worker.pid, signal.SIGKILL)
                worker.wait()
    text = log.read_text(errors="replace")
    assert "Traceback" not in text and "[ERROR]" not in text, text[-4000:]
    # Offsets were committed (OffsetCommit/OffsetFetch versions Kafka 4 still has).
    from kafka import KafkaConsumer
    from kafka.structs import TopicPartition

    probe = KafkaConsumer(bootstrap_servers=kafka_bootstrap, group_id=consumer_group)
    try:
        committed = probe.committed(TopicPartition(source, 0))
        topics = probe.topics()
    finally:
        probe.close()
    assert committed == len(values), committed
    assert f"{consumer_group}-seen-changelog" in topics


def test_restart_keeps_data(tmp_path) -> None:
    """A dedicated broker: restart() keeps data and ports; stop() leaves no JVM."""
    with LocalKafka(data_dir=tmp_path / "kafka") as kafka:
        bootstrap = kafka.bootstrap
        assert kafka.startup_seconds is not None and kafka.startup_seconds < 60
        topic = "restart-" + uuid.uuid4().hex[:8]
        create_topics(bootstrap, [topic])
        _produce(bootstrap, topic, [b"before"])
        pid = kafka.proc.pid
        kafka.restart()
        assert kafka.bootstrap == bootstrap and kafka.proc.pid != pid
        _produce(bootstrap, topic, [b"after"])
        assert _consume(bootstrap, topic, "g-restart", 2) == [b"before", b"after"]
    assert kafka.proc is None
    with pytest.raises(ProcessLookupError):
        os.killpg(pid, 0)


def test_missing_java_is_a_clear_error(monkeypatch) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.delenv("JAVA_HOME", raising=False)
    with pytest.raises(LocalKafkaError, match="Java 17\\+ not found: install openjdk-17-jre-headless"):
        LocalKafka().start()
