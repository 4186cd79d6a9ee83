"""Publishing wire-format events to Kafka (through the producer transport, producers/transport.py).

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

from stepwatch.config import Settings

from .transport import MAX_EVENTS_PER_MESSAGE, WAIT, Transport

log = logging.getLogger(__name__)



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
    """Wire-format events (dicts) to Kafka through the producer transport in its wait mode.

    ``send`` waits while the transport's queue is full (Kafka slow or away) instead of
    dropping: nothing to protect here but the data. It never raises on a Kafka outage; a
    message the producer could not deliver after its own retries, or still undelivered
    when ``close`` times out, is counted in ``events_dropped``. Connection settings,
    TLS/SASL included, come from ``settings`` (default ``Settings.from_env()``, the
    worker's); ``producer_config`` keywords (kafka-python) win over them.
    """

    def __init__(self, *, bootstrap: str, topic: str, linger_ms: int = 20, max_block_ms: int = 2_000,
                 compression_type: str | None = "gzip", shard_ranks: int = 0, settings: Settings | None = None,
                 queue_size: int = 1000, **producer_config) -> None:
        self.topic = topic
        #: > 0: ``send_job`` keys each rank's events by its rank shard (``shard_key``), not by the job.
        self.shard_ranks = max(0, int(shard_ranks))
        self._transport = Transport(
            topic=topic, bootstrap=bootstrap, settings=settings, mode=WAIT, queue_size=queue_size,
            flush_interval=max(0.005, linger_ms / 1000), linger_ms=linger_ms, max_block_ms=max_block_ms,
            compression_type=compression_type, acks=producer_config.pop("acks", 1), producer_config=producer_config,
            name="stepwatch-publisher")

    @property
    def messages_sent(self) -> int:
        """Messages handed to the producer."""
        return self._transport.messages

    @property
    def events_sent(self) -> int:
        """Events accepted by ``send`` (delivered, dropped or still on their way)."""
        return self._transport.offered

    @property
    def events_delivered(self) -> int:
        return self._transport.sent

    @property
    def events_dropped(self) -> int:
        return self._transport.dropped

    def send(self, key: str, events: Iterable[dict]) -> None:
        """Send events under one key, in batch envelopes of at most MAX_EVENTS_PER_MESSAGE."""
        batch: list[dict] = []
        for event in events:
            batch.append(event)
            if len(batch) >= MAX_EVENTS_PER_MESSAGE:
                self._transport.offer(key, batch)
                batch = []
        if batch:
            self._transport.offer(key, batch)

    def send_job(self, job: str, events: Iterable[dict]) -> None:
        """Send events of ``job``: under the job id, or per rank shard with ``shard_ranks`` (see ``shard_key``)."""
        if not self.shard_ranks:
            self.send(job, events)
            return
        for key, group in group_by_key(events, self.shard_ranks, job=job).items():
            self.send(key, group)

    def flush(self, timeout: float | None = 30.0) -> bool:
        done = self._transport.flush(1e9 if timeout is None else timeout)
        if not done:
            log.warning("flush incomplete after %s s", timeout)
        return done

    def close(self, timeout: float = 30.0) -> None:
        self.flush(timeout)
        self._transport.close(timeout)

    def __enter__(self) -> "EventPublisher":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
