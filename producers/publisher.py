"""Publishing wire-format events to Kafka with kafka-python.

Events of one job are keyed by the job id, so they all land in one partition and one
worker sees the whole job. Several events go out as one batch envelope (see
docs/events.md): a Kafka message per step of a job instead of one per rank keeps the
worker's per-message cost low.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from kafka import KafkaProducer

from stepwatch.models.events import encode_events

log = logging.getLogger(__name__)

#: Events per batch envelope: large enough to amortise per-message costs, small enough
#: to stay far below Kafka's default 1 MiB message limit (~250 bytes per event).
MAX_EVENTS_PER_MESSAGE = 256


class EventPublisher:
    """Thin wrapper over ``KafkaProducer`` for wire-format events (dicts)."""

    def __init__(self, *, bootstrap: str, topic: str, linger_ms: int = 20, max_block_ms: int = 10_000,
                 compression_type: str | None = "gzip", **producer_config) -> None:
        self.topic = topic
        self._producer = KafkaProducer(
            bootstrap_servers=bootstrap,
            linger_ms=linger_ms,
            max_block_ms=max_block_ms,
            compression_type=compression_type,
            **producer_config,
        )
        self.messages_sent = 0
        self.events_sent = 0

    def send(self, key: str, events: Iterable[dict]) -> None:
        """Send events under one key, in batch envelopes of at most MAX_EVENTS_PER_MESSAGE."""
        batch: list[dict] = []
        for event in events:
            batch.append(event)
            if len(batch) >= MAX_EVENTS_PER_MESSAGE:
                self._send(key, batch)
                batch = []
        if batch:
            self._send(key, batch)

    def _send(self, key: str, batch: list[dict]) -> None:
        self._producer.send(self.topic, key=key.encode(), value=encode_events(batch))
        self.messages_sent += 1
        self.events_sent += len(batch)

    def flush(self, timeout: float | None = 30.0) -> None:
        self._producer.flush(timeout=timeout)

    def close(self, timeout: float = 30.0) -> None:
        self._producer.flush(timeout=timeout)
        self._producer.close(timeout=timeout)

    def __enter__(self) -> "EventPublisher":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
