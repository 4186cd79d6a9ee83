"""The worker's global view of node telemetry.

Job events are keyed by job and node telemetry by node, so a job's events and its nodes'
telemetry usually sit in different partitions, handled by different workers. Every worker
therefore reads **all** partitions of the telemetry topic (a consumer without a group, in
a daemon thread, starting ``feed_lookback_seconds`` back) and feeds them to its own
engine, so correlation works whatever partition a job is on. Node alerts (``gpu_fault``,
``link_errors``) are published only by the worker that owns the node's partition of the
events topic (the same hash Kafka's default partitioner uses), so each goes out once.

The thread only reads: it queues the records as they are and wakes the worker's loop, where
``TelemetrySource`` (a source, models/sources.py) hands them to the worker's ``Pipeline``
(models/pipeline.py) at once on the telemetry topic's road, as the events topic's messages: the
same decode, the same future-timestamp check against the wall clock, and dead letters with the
reason for what does not decode or does not belong there (a job's event sent to the telemetry
topic). Every worker reads every message, so one of them reports each dead letter: the owner of
the events partition with the telemetry partition's number (modulo the events topic's partitions).

``TelemetryRoad(settings, drive=..., owned=...)`` is this part of a worker (``streams.worker.Worker`` composes
it); ``python -m stepwatch.streams.worker`` runs such a worker.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
import time

from stepwatch.config import Settings
from stepwatch.models.alert_types import NODE_TYPES
from stepwatch.models.pipeline import TELEMETRY_ROAD, Message
from stepwatch.models.sources import Read

log = logging.getLogger("stepwatch.worker.telemetry")

NODE_ALERT_TYPES = NODE_TYPES


class TelemetryFeed:
    """A daemon thread reading every partition of the telemetry topic into a bounded queue of records
    (``maxsize`` messages; ``dropped`` counts those a full queue turned away)."""

    def __init__(self, settings: Settings, *, maxsize: int = 20_000) -> None:
        self.settings = settings
        self.topic = settings.kafka.topic(settings.telemetry.topic)
        self._queue: queue.Queue = queue.Queue(maxsize=maxsize)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="stepwatch-telemetry-feed", daemon=True)
        self.received = 0
        self.dropped = 0
        #: partition -> next offset the feed will read (its events are in the queue or applied); the thread's.
        self.positions: dict[int, int] = {}
        #: partition -> latest end offset the broker reported to the feed (None: not fetched yet).
        self.highwater: dict[int, int | None] = {}
        #: partition -> next offset whose events are not all applied to the engine yet: the feed's
        #: observable position (``stepwatch_telemetry_feed_offset``), set by the worker after draining.
        self.applied: dict[int, int] = {}
        #: Called by the thread after queueing a poll's records (thread-safe; ``TelemetrySource`` sets it).
        self.wakeup = None

    def start(self) -> "TelemetryFeed":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()

    def drain(self, limit: int = 2_000) -> tuple[list, dict[int, int] | None]:
        """Up to ``limit`` queued records (``Message``s or Kafka records: value, key, topic, partition, offset),
        and the positions whose events they complete (None: more are queued).

        The positions are read before the queue is emptied, and the thread moves them on only after
        queueing a record's events: once the caller applied these events, every event before them is
        applied (the caller then passes them to ``mark_applied``).
        """
        read = dict(self.positions)
        out = []
        try:
            while len(out) < limit:
                out.append(self._queue.get_nowait())
        except queue.Empty:
            return out, read
        return out, None

    def mark_applied(self, positions: dict[int, int] | None) -> None:
        if positions:
            self.applied.update(positions)

    def lag(self):
        """(partition, messages of the topic after the applied position) per partition whose end is known."""
        for partition, applied in sorted(self.applied.items()):
            high = self.highwater.get(partition)
            if high is not None:
                yield partition, max(0, high - applied)

    def _consumer(self):
        from kafka import KafkaConsumer, TopicPartition

        from stepwatch.security import client_config
        from stepwatch.topics import create_topics

        k = self.settings.kafka
        security = client_config(self.settings)
        create_topics(k.bootstrap, [self.topic], k.partitions, replication_factor=k.replication_factor,
                      client_config=security, append_time=[self.topic])
        consumer = KafkaConsumer(bootstrap_servers=k.bootstrap, group_id=None, enable_auto_commit=False,
                                 auto_offset_reset="earliest", **security)
        partitions = consumer.partitions_for_topic(self.topic) or set()
        tps = [TopicPartition(self.topic, p) for p in sorted(partitions)]
        consumer.assign(tps)
        since_ms = int((time.time() - self.settings.telemetry.feed_lookback_seconds) * 1000)
        offsets = consumer.offsets_for_times({tp: since_ms for tp in tps})
        for tp in tps:
            found = offsets.get(tp)
            if found is not None:
                consumer.seek(tp, found.offset)
            else:
                consumer.seek_to_end(tp)  # nothing that recent: only what comes next
        for tp in tps:
            self.positions[tp.partition] = consumer.position(tp)
        return consumer

    def _run(self) -> None:
        backoff = 1.0
        while not self._stop.is_set():
            try:
                consumer = self._consumer()
            except Exception as exc:
                log.warning("telemetry feed cannot start (%s); retrying", exc)
                self._stop.wait(backoff)
                backoff = min(backoff * 2, 30.0)
                continue
            backoff = 1.0
            try:
                while not self._stop.is_set():
                    polled = consumer.poll(timeout_ms=500)
                    for tp, records in polled.items():
                        for record in records:
                            self._take(record)
                        if records:
                            self.positions[tp.partition] = records[-1].offset + 1
                    if polled and self.wakeup is not None:
                        self.wakeup()
                    for tp in consumer.assignment():
                        self.highwater[tp.partition] = consumer.highwater(tp)
            except Exception as exc:
                log.warning("telemetry feed failed (%s); reconnecting", exc)
            finally:
                try:
                    consumer.close()
                except Exception:  # silent: closing a consumer that already failed (logged above); a new one follows
                    pass

    def _take(self, record) -> None:
        """Queue one record undecoded (the worker's pipeline decodes it); bare bytes become a ``Message``."""
        if record is None or type(record) is bytes:
            record = Message(record, topic=self.topic)
        self.received += 1
        try:
            self._queue.put_nowait(record)
        except queue.Full:
            self.dropped += 1


def owned_partitions(app, topic: str) -> set[int] | None:
    """Partitions of ``topic`` assigned to this worker (None when unknown)."""
    try:
        return {tp.partition for tp in app.consumer.assignment() if tp.topic == topic}
    except Exception:  # silent: no assignment while the consumer (re)starts: unknown, as documented
        return None


def partition_of(key: str, partitions: int) -> int:
    """The partition the producers' default partitioner puts ``key`` in (murmur2, as Kafka's Java client)."""
    from kafka.partitioner.default import murmur2

    return (murmur2(key.encode()) & 0x7FFFFFFF) % partitions


class TelemetrySource:
    """The telemetry topic as a source (models/sources.py): a ``Read`` per drain of the feed's queue, on the
    telemetry topic's road, as soon as the feed's thread queued records (or every ``interval`` seconds at
    the latest). Every worker reads every message: node alerts are spoken by the owner of the node's events
    partition and each dead letter reported by one worker (``owned()``: this worker's events partitions,
    None: unknown; ``partitions``: the events topic's). A drain's records count as applied once the next
    item is asked for (``Worker.drive`` asks after processing them, or after logging and counting a failure).
    """

    def __init__(self, feed: TelemetryFeed, owned, partitions: int, *, interval: float = 0.25) -> None:
        self.feed, self.owned, self.partitions, self.interval = feed, owned, partitions, interval

    async def __aiter__(self):
        feed, n_partitions = self.feed, self.partitions
        loop = asyncio.get_running_loop()
        ready = asyncio.Event()
        feed.wakeup = lambda: loop.call_soon_threadsafe(ready.set)
        if not feed._thread.is_alive() and not feed._stop.is_set():
            feed.start()
        while True:
            ready.clear()
            records, read = feed.drain()
            if records:
                mine = self.owned()

                def speaks_for(alert, mine=mine) -> bool:  # every worker sees every node; the owner speaks
                    return not (alert.type in NODE_ALERT_TYPES and mine is not None and alert.nodes
                                and partition_of(alert.nodes[0], n_partitions) not in mine)

                def reports(message, mine=mine) -> bool:  # every worker reads the message; one dead-letters it
                    return mine is None or message.partition % n_partitions in mine

                yield Read(records, time.time(), TELEMETRY_ROAD, speaks_for, reports)
            feed.mark_applied(read)  # applied, or logged as failed: either way not waiting any more
            if read is None:  # more queued than one drain takes: the next drain after the loop's other work
                await asyncio.sleep(0)  # (a backlog must not starve the events consumer or its group heartbeat)
                continue
            try:
                await asyncio.wait_for(ready.wait(), timeout=self.interval)
            except asyncio.TimeoutError:
                pass  # silent: nothing came within the interval; drain again (positions move on)


class TelemetryRoad:
    """The global telemetry view as a component (streams/component.py): ``feed`` (a ``TelemetryFeed``) drained
    by an app task into ``drive(source, stage)`` (the worker's road, ``streams.worker.Worker.drive``: its
    ``Pipeline`` and Kafka sink), so the telemetry topic's messages take the same road as the events topic's.
    ``owned()``: the worker's events partitions now (None: unknown)."""

    def __init__(self, settings: Settings, *, drive, owned) -> None:
        self.settings, self._drive, self._owned = settings, drive, owned
        self.feed = TelemetryFeed(settings)

    def attach(self, app) -> None:
        app.task(self.road)

    async def road(self) -> None:
        await self._drive(TelemetrySource(self.feed, self._owned, self.settings.kafka.partitions), "telemetry")
