"""The Faust worker: a thin adapter between Kafka and the pure detection core.

One agent consumes the events topic (keyed by job, so a job's events stay in one
partition and one worker), decodes each message (single event or batch envelope), feeds
the valid events to the ``DetectionEngine`` and publishes the alerts it returns. What does
not decode or validate goes to the dead-letter topic with the reason and its source
coordinates; the worker never stops on bad input. A timer runs the time-driven rules
with the wall clock.
"""

from __future__ import annotations

import base64
import logging
import time
from collections import Counter
from pathlib import Path

import faust
import orjson

from stepwatch.config import Settings
from stepwatch.models.alerts import Alert
from stepwatch.models.engine import DetectionEngine
from stepwatch.models.events import Rejected, decode_message

log = logging.getLogger("stepwatch.worker")


class WorkerStats:
    """Counters behind the worker's metrics (no per-rank labels)."""

    def __init__(self) -> None:
        self.messages = 0
        self.events_by_kind: Counter[str] = Counter()
        self.rejected = 0
        self.deadlettered = 0
        self.alerts: Counter[tuple[str, str]] = Counter()  # (type, status)
        self.detection_seconds = 0.0


def deadletter_record(rejected: Rejected, *, topic: str, partition: int | None, offset: int | None,
                      key: bytes | None, raw: bytes | None) -> bytes:
    """The dead-letter message: the reason, where it came from, and the original bytes."""
    original = rejected.payload if rejected.payload is not None and not isinstance(rejected.payload, bytes) else None
    record = {
        "v": 1,
        "kind": "deadletter",
        "reason": rejected.reason,
        "topic": topic,
        "partition": partition,
        "offset": offset,
        "key": key.decode("utf-8", "replace") if key else None,
        "ts": time.time(),
        # The whole message as sent, base64 so that invalid UTF-8 survives too.
        "value_b64": base64.b64encode(raw).decode() if raw is not None else None,
        # For a bad event inside a good batch: that event alone.
        "event": original,
    }
    return orjson.dumps(record, option=orjson.OPT_PASSTHROUGH_DATACLASS, default=str)


def create_app(settings: Settings | None = None) -> faust.App:
    settings = settings or Settings.from_env()
    kafka = settings.kafka
    if not kafka.bootstrap:
        raise ValueError("no Kafka bootstrap servers configured (set KAFKA_BOOTSTRAP)")
    datadir = Path(settings.worker.datadir or Path.home() / ".cache" / "stepwatch" / kafka.app_id)
    app = faust.App(
        kafka.app_id,
        broker=[f"kafka://{b.strip()}" for b in kafka.bootstrap.split(",")],
        key_serializer="raw",
        value_serializer="raw",
        topic_partitions=kafka.partitions,
        topic_replication_factor=kafka.replication_factor,
        consumer_auto_offset_reset="earliest",
        web_enabled=settings.worker.web_port > 0,
        web_port=settings.worker.web_port or 6066,
        web_host="127.0.0.1",
        datadir=str(datadir),
        # Faust's own leader-election topic is not needed: no agent here relies on it.
        topic_disable_leader=True,
    )
    events_topic = app.topic(kafka.topic(kafka.events_topic), value_serializer="raw", key_serializer="raw")
    alerts_topic = app.topic(kafka.topic(kafka.alerts_topic), value_serializer="raw", key_serializer="raw")
    deadletter_topic = app.topic(kafka.topic(kafka.deadletter_topic), value_serializer="raw",
                                 key_serializer="raw")
    engine = DetectionEngine(settings)
    stats = WorkerStats()
    app.stepwatch_engine = engine  # type: ignore[attr-defined]
    app.stepwatch_stats = stats  # type: ignore[attr-defined]

    async def publish(alerts: list[Alert]) -> None:
        for alert in alerts:
            stats.alerts[(alert.type, alert.status)] += 1
            log.info("alert %s %s %s: %s", alert.status, alert.type, alert.id, alert.summary)
            await alerts_topic.send(key=alert.job.encode(), value=orjson.dumps(alert.to_dict()))

    @app.agent(events_topic, name="stepwatch-detect")
    async def detect(stream):
        async for event in stream.events():
            message = event.message
            raw = message.value
            stats.messages += 1
            events, rejected = decode_message(raw)
            for bad in rejected:
                stats.rejected += 1
                stats.deadlettered += 1
                log.warning("dead-lettered event from %s[%s]@%s: %s", message.topic, message.partition,
                            message.offset, bad.reason)
                await deadletter_topic.send(
                    key=message.key,
                    value=deadletter_record(bad, topic=message.topic, partition=message.partition,
                                            offset=message.offset, key=message.key, raw=raw))
            if not events:
                continue
            started = time.perf_counter()
            alerts = []
            for ev in events:
                stats.events_by_kind[ev.kind] += 1
                try:
                    alerts.extend(engine.process(ev))
                except Exception as exc:  # a detector bug must not stop the worker; keep the event
                    log.exception("detector failed on an event")
                    await deadletter_topic.send(
                        key=message.key,
                        value=deadletter_record(Rejected(f"detector error: {exc!r}", None), topic=message.topic,
                                                partition=message.partition, offset=message.offset,
                                                key=message.key, raw=raw))
                    stats.deadlettered += 1
            stats.detection_seconds += time.perf_counter() - started
            await publish(alerts)

    @app.timer(interval=settings.worker.tick_interval)
    async def tick():
        try:
            alerts = engine.tick(time.time())
        except Exception:
            log.exception("timer rules failed")
            return
        await publish(alerts)

    return app


def run_worker(settings: Settings | None = None, *, loglevel: str = "info") -> None:
    """Run the worker in the foreground until SIGINT/SIGTERM."""
    from faust.worker import Worker

    from stepwatch.topics import ensure_topics

    settings = settings or Settings.from_env()
    ensure_topics(settings.kafka)
    app = create_app(settings)
    Worker(app, loglevel=loglevel, quiet=True).execute_from_commandline()
