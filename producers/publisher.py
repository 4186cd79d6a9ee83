"""Publishing wire-format events to Kafka with kafka-python.

Events of one job are keyed by the job id, so they all land in one partition and one
worker sees the whole job. Several events go out as one batch envelope (see
docs/events.md): a Kafka message per step of a job instead of one per rank keeps the
worker's per-message cost low. For a job too large for one worker, events can be keyed
by rank shard instead (``shard_key``, ``shard_ranks``): the shard stage (``stepwatch
shard``, streams/shard.py) then spreads the job over several processes and re-keys it by
job for the worker.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from kafka import KafkaProducer
from kafka.errors import KafkaError

from stepwatch.models.events import encode_events

log = logging.getLogger(__name__)

#: Events per batch envelope: large enough to amortise per-message costs, small enough
#: to stay far below Kafka's default 1 MiB message limit (~250 bytes per event).
MAX_EVENTS_PER_MESSAGE = 256


def shard_key(job: str, rank: int | None, shard_ranks: int = 0) -> str:
    """The Kafka key of an event of ``job`` from ``rank``: the job id, or ``"job/shard"`` with rank shards.

    ``shard_ranks`` > 0: ranks ``[k * shard_ranks, (k + 1) * shard_ranks)`` share the key ``f"{job}/{k}"``, so
    one job's events spread over partitions (and shard-stage processes); events without a rank (job-wide
    ``phase`` events) keep the job id. 0 (the default): every event of the job is keyed by the job id.
    """
    if shard_ranks > 0 and isinstance(rank, int) and not isinstance(rank, bool) and rank >= 0:
        return f"{job}/{rank // shard_ranks}"
    return job


def group_by_key(events: Iterable[dict], shard_ranks: int = 0, *, job: str | None = None) -> dict[str, list[dict]]:
    """Events grouped by their ``shard_key`` (order kept within each key); ``job`` overrides the events' own."""
    out: dict[str, list[dict]] = {}
    for event in events:
        key = shard_key(job if job is not None else event.get("job", ""), event.get("rank"), shard_ranks)
        out.setdefault(key, []).append(event)
    return out


class EventPublisher:
    """Thin wrapper over ``KafkaProducer`` for wire-format events (dicts).

    It never raises on a Kafka outage: a batch that cannot be queued within
    ``max_block_ms`` (buffer full, no metadata) or that fails delivery after the
    producer's own retries is dropped and counted in ``events_dropped``; the rest is
    delivered once the broker is back.
    """

    def __init__(self, *, bootstrap: str, topic: str, linger_ms: int = 20, max_block_ms: int = 2_000,
                 compression_type: str | None = "gzip", shard_ranks: int = 0, **producer_config) -> None:
        self.topic = topic
        #: > 0: ``send_job`` keys each rank's events by its rank shard (``shard_key``), not by the job.
        self.shard_ranks = max(0, int(shard_ranks))
        self._producer = KafkaProducer(
            bootstrap_servers=bootstrap,
            linger_ms=linger_ms,
            max_block_ms=max_block_ms,
            compression_type=compression_type,
            **producer_config,
        )
        self.messages_sent = 0
        self.events_sent = 0
        self.events_delivered = 0
        self.events_dropped = 0

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

    def send_job(self, job: str, events: Iterable[dict]) -> None:
        """Send events of ``job``: under the job id, or per rank shard with ``shard_ranks`` (see ``shard_key``)."""
        if not self.shard_ranks:
            self.send(job, events)
            return
        for key, group in group_by_key(events, self.shard_ranks, job=job).items():
            self.send(key, group)

    def _send(self, key: str, batch: list[dict]) -> None:
        n = len(batch)
        try:
            future = self._producer.send(self.topic, key=key.encode(), value=encode_events(batch))
        except KafkaError as exc:
            self.events_dropped += n
            log.warning("dropped %d events: %s", n, exc)
            return
        future.add_callback(self._delivered, n)
        future.add_errback(self._failed, n)
        self.messages_sent += 1
        self.events_sent += n

    def _delivered(self, n: int, _metadata) -> None:
        self.events_delivered += n

    def _failed(self, n: int, exc) -> None:
        self.events_dropped += n
        log.warning("delivery of %d events failed: %s", n, exc)

    def flush(self, timeout: float | None = 30.0) -> None:
        try:
            self._producer.flush(timeout=timeout)
        except KafkaError as exc:
            log.warning("flush incomplete: %s", exc)

    def close(self, timeout: float = 30.0) -> None:
        self.flush(timeout)
        self._producer.close(timeout=timeout)

    def __enter__(self) -> "EventPublisher":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
