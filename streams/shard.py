"""The shard stage: spreads one large job over several processes before detection (``stepwatch shard``).

Producers of a very large job key its events by rank shard (``"job/<rank // N>"``, see
``stepwatch.producers.publisher.shard_key``), so they spread over the raw events topic's partitions.
Any number of ``stepwatch shard`` processes consume that topic in one consumer group
(``<app_id>-shard``), validate every message like the worker (bad input goes to the dead-letter
topic with the worker's reason and record), buffer the valid events per job and publish them as
batch envelopes of at most 256 events, sorted by step, **keyed by job**, to the job-events topic
(``<prefix>job-events``). Detection workers read that topic (``STEPWATCH_KAFKA_EVENTS_TOPIC=job-events``):
one Kafka message per 256 events instead of one per event is what lets one worker keep up with a
job of thousands of ranks sending single-event messages.

Two parts: :class:`ShardBuffer` and :class:`OffsetTracker` are pure (an explicit clock, no Kafka,
unit-tested); :class:`ShardStage` is the asyncio adapter (aiokafka consumer and producer).

Guarantees: a job's buffer goes out when it holds ``max_events`` events or its oldest event has
waited ``flush_interval`` seconds (default 0.1: the latency the stage adds); at most
``max_buffered`` events are held per process (buffered plus sent but unacknowledged), beyond which
everything is flushed and consumption waits: nothing is dropped. Consumed offsets are committed only
once every envelope and dead-letter record made from the messages before them was acknowledged by the
broker (at least once: a crash replays, and duplicates are harmless downstream, where the step
assembler keeps the later copy). SIGTERM/SIGINT: flush, wait for acknowledgements, commit, leave.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import signal
import time
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass, field

from stepwatch.config import Settings
# The worker's dead-letter record, byte for byte; the worker's validation.
from stepwatch.models.wire.deadletter import deadletter_budget, deadletter_record
from stepwatch.models.wire.events import decode_message, encode_events, event_to_dict

log = logging.getLogger("stepwatch.shard")

#: getmany: at most this many records per call.
MAX_RECORDS = 1000
#: A dead letter is cut to fit this request size (the broker's default message.max.bytes, under the
#: producer's 8 MiB): one the broker refused would be lost (models/wire/deadletter.py).
DEADLETTER_REQUEST_SIZE = 1_000_000
#: Flush reasons (label values of stepwatch_shard_flushes_total).
FLUSH_REASONS = ("full", "interval", "memory", "drain")


# -- pure parts -----------------------------------------------------------------------------------


@dataclass(slots=True)
class Envelope:
    """Events of one job due for the output topic, with the input messages they came from."""

    job: str
    events: list[dict]
    #: source (e.g. (topic-partition, offset)) -> number of the events that came from it.
    sources: dict = field(default_factory=dict)
    #: Why it went out: full, interval, memory or drain.
    reason: str = "interval"


class _JobBuffer:
    __slots__ = ("items", "sources", "since", "last_step")

    def __init__(self, since: float) -> None:
        self.items: list[tuple[int, dict]] = []  # (sort step, event)
        self.sources: dict = {}
        self.since = since  # clock time of the oldest buffered event
        self.last_step = -1


def event_key(event: dict) -> str:
    """The output key of a wire-form event: its job (node telemetry: its node)."""
    return event.get("job") or event.get("node") or ""


class ShardBuffer:
    """Per-job buffers of wire-form events, flushed as envelopes; driven by an explicit clock.

    ``add(events, now, source)`` buffers events (each under ``event_key``) and returns the envelopes
    due at once: a job's buffer that reached ``max_events``, or every buffer when more than
    ``max_buffered`` events are held. ``due(now)`` returns the buffers whose oldest event has waited
    ``flush_interval``; ``drain()`` returns everything. Within an envelope events are sorted stably
    by ``step`` (an event without one stays next to the event before it), so an envelope is mostly
    one step of the shard's ranks.
    """

    def __init__(self, *, max_events: int = 256, flush_interval: float = 0.1, max_buffered: int = 100_000,
                 key: Callable[[dict], str] = event_key) -> None:
        if max_events < 1 or flush_interval <= 0 or max_buffered < max_events:
            raise ValueError("ShardBuffer: need max_events >= 1, flush_interval > 0, max_buffered >= max_events")
        self.max_events = max_events
        self.flush_interval = flush_interval
        self.max_buffered = max_buffered
        self._key = key
        # Insertion order = order of each buffer's oldest event: due() stops at the first young one.
        self._jobs: collections.OrderedDict[str, _JobBuffer] = collections.OrderedDict()
        self.buffered = 0
        self.flushes: collections.Counter = collections.Counter()

    def __len__(self) -> int:
        return self.buffered

    @property
    def jobs(self) -> int:
        return len(self._jobs)

    def add(self, events: Iterable[dict], now: float, source: Hashable | None = None) -> list[Envelope]:
        out: list[Envelope] = []
        for event in events:
            job = self._key(event)
            buf = self._jobs.get(job)
            if buf is None:
                buf = self._jobs[job] = _JobBuffer(now)
            step = event.get("step")
            if type(step) is int:
                buf.last_step = step
            else:
                step = buf.last_step
            buf.items.append((step, event))
            if source is not None:
                buf.sources[source] = buf.sources.get(source, 0) + 1
            self.buffered += 1
            if len(buf.items) >= self.max_events:
                out.append(self._take(job, "full"))
        if self.buffered > self.max_buffered:
            out.extend(self.drain("memory"))
        return out

    def due(self, now: float) -> list[Envelope]:
        out = []
        limit = now - self.flush_interval
        jobs = self._jobs
        while jobs:
            job = next(iter(jobs))
            if jobs[job].since > limit:
                break
            out.append(self._take(job, "interval"))
        return out

    def next_due(self) -> float | None:
        """Clock time at which the oldest buffer falls due (None: nothing buffered)."""
        for buf in self._jobs.values():
            return buf.since + self.flush_interval
        return None

    def drain(self, reason: str = "drain") -> list[Envelope]:
        return [self._take(job, reason) for job in list(self._jobs)]

    def _take(self, job: str, reason: str) -> Envelope:
        buf = self._jobs.pop(job)
        self.buffered -= len(buf.items)
        items = buf.items
        items.sort(key=_first)  # stable: same step keeps arrival order
        self.flushes[reason] += 1
        return Envelope(job, [event for _, event in items], buf.sources, reason)


def _first(item: tuple[int, dict]) -> int:
    return item[0]


class OffsetTracker:
    """Which input offsets may be committed: those before the oldest message with unacknowledged output.

    ``consumed(tp, offset, units)``: a message was read; ``units`` outputs made from it (events in
    envelopes, dead-letter records) are awaited. ``done(tp, offset, n)``: ``n`` of them were
    acknowledged. ``committable()``: per partition, the offset to commit (Kafka's "next offset to read").
    """

    def __init__(self) -> None:
        self._open: dict[Hashable, collections.deque] = {}  # tp -> offsets in read order (lazily pruned)
        self._units: dict[Hashable, dict[int, int]] = {}  # tp -> offset -> outputs still unacknowledged
        self._next: dict[Hashable, int] = {}  # tp -> offset after the last message read
        #: Messages read per partition (for logs and tests).
        self.read: collections.Counter = collections.Counter()

    def consumed(self, tp: Hashable, offset: int, units: int) -> None:
        self._next[tp] = offset + 1
        self.read[tp] += 1
        if units > 0:
            self._open.setdefault(tp, collections.deque()).append(offset)
            self._units.setdefault(tp, {})[offset] = units

    def done(self, tp: Hashable, offset: int, n: int = 1) -> None:
        units = self._units.get(tp)
        if units is None or offset not in units:
            return  # forgotten (partition revoked)
        left = units[offset] - n
        if left > 0:
            units[offset] = left
        else:
            del units[offset]

    def pending(self) -> int:
        return sum(len(u) for u in self._units.values())

    def position(self, tp: Hashable) -> int | None:
        return self._next.get(tp)

    def committable(self) -> dict:
        out = {}
        for tp, nxt in self._next.items():
            open_ = self._open.get(tp)
            units = self._units.get(tp, {})
            while open_ and open_[0] not in units:
                open_.popleft()
            out[tp] = open_[0] if open_ else nxt
        return out

    def forget(self, tps: Iterable[Hashable]) -> None:
        for tp in tps:
            self._open.pop(tp, None)
            self._units.pop(tp, None)
            self._next.pop(tp, None)


# -- metrics --------------------------------------------------------------------------------------


class ShardMetrics:
    """The stage's Prometheus metrics (``stepwatch_shard_*``, no per-rank or per-job label)."""

    def __init__(self) -> None:
        from prometheus_client import CollectorRegistry, Counter, Gauge

        r = self.registry = CollectorRegistry(auto_describe=True)
        self.messages = Counter("stepwatch_shard_messages_consumed", "Messages consumed from the raw events topic.",
                                registry=r)
        self.events = Counter("stepwatch_shard_events_consumed", "Valid events buffered for the job-events topic.",
                              registry=r)
        self.deadlettered = Counter("stepwatch_shard_events_deadlettered",
                                    "Messages, or events in a batch, that did not decode or validate (sent to the "
                                    "dead-letter topic).", registry=r)
        self.envelopes = Counter("stepwatch_shard_envelopes_published",
                                 "Envelopes acknowledged by the broker on the job-events topic.", registry=r)
        self.published = Counter("stepwatch_shard_events_published",
                                 "Events acknowledged by the broker on the job-events topic.", registry=r)
        self.flushes = Counter("stepwatch_shard_flushes", "Envelopes made, by reason (full, interval, memory, "
                                                          "drain: shutdown or rebalance).", ["reason"], registry=r)
        self.failures = Counter("stepwatch_shard_publish_failures",
                                "Sends that failed and are retried (offsets are not committed past them).",
                                registry=r)
        self.dropped = Counter("stepwatch_shard_events_dropped",
                               "Events the broker refused for good (a single event over its message size limit).",
                               registry=r)
        self.buffered = Gauge("stepwatch_shard_events_buffered", "Events waiting in the per-job buffers.",
                              registry=r)
        self.in_flight = Gauge("stepwatch_shard_events_in_flight", "Events sent and not yet acknowledged.",
                               registry=r)
        self.partitions = Gauge("stepwatch_shard_partitions_assigned", "Raw events partitions assigned.",
                                registry=r)
        self.lag = Gauge("stepwatch_shard_consumer_lag", "Messages of the assigned partitions not consumed yet.",
                         registry=r)
        for reason in FLUSH_REASONS:
            self.flushes.labels(reason)


# -- the asyncio / Kafka adapter ------------------------------------------------------------------


@dataclass(slots=True)
class _Out:
    """One record for the producer, and the input messages waiting for it."""

    topic: str
    key: bytes | None
    value: bytes
    events: int  # events it carries (0 for a dead-letter record)
    sources: dict  # (tp, offset) -> units
    envelope: Envelope | None = None
    retry_at: float = 0.0
    #: An envelope too large for the broker is sent again in halves: their parent's sources are
    #: settled once every part was acknowledged.
    parent: "_Out | None" = None
    parts_left: int = 0


class ShardStage:
    """Consume the raw events topic, publish per-job envelopes to the job-events topic (see module doc)."""

    def __init__(self, settings: Settings, *, metrics: ShardMetrics | None = None) -> None:
        kafka = settings.kafka
        if not kafka.bootstrap:
            raise ValueError("no Kafka bootstrap servers configured (set KAFKA_BOOTSTRAP)")
        self.settings = settings
        self.input_topic = kafka.topic(kafka.events_topic)
        self.output_topic = kafka.topic(kafka.job_events_topic)
        self.deadletter_topic = kafka.topic(kafka.deadletter_topic)
        if self.input_topic == self.output_topic:
            raise ValueError(f"the shard stage would read and write {self.input_topic!r}: set "
                             "STEPWATCH_KAFKA_EVENTS_TOPIC (input) and STEPWATCH_KAFKA_JOB_EVENTS_TOPIC (output) "
                             "to different topics")
        self.group_id = f"{kafka.app_id}-shard"
        s = settings.shard
        self.buffer = ShardBuffer(max_events=s.max_events, flush_interval=s.flush_interval,
                                  max_buffered=s.max_buffered)
        self.tracker = OffsetTracker()
        self.metrics = metrics or ShardMetrics()
        self.in_flight = 0  # events sent, not acknowledged
        self.failed_events = 0  # events whose send failed, waiting to be sent again
        self._outstanding: set[asyncio.Future] = set()
        self._failed: collections.deque[_Out] = collections.deque()
        self._committed: dict = {}
        self._lock = asyncio.Lock()
        self._consumer = None
        self._producer = None
        self._last_commit = time.monotonic()
        self.events_published = 0
        self.envelopes_published = 0
        self.deadlettered = 0

    # -- processing (called with the lock held) ----------------------------------------------------

    def _take_message(self, tp, rec, now: float) -> tuple[list[Envelope], list[_Out]]:
        """One raw message: dead letters for what does not validate, its valid events into the buffer."""
        self.metrics.messages.inc()
        events, rejected = decode_message(rec.value)
        source = (tp, rec.offset)
        self.tracker.consumed(tp, rec.offset, len(events) + len(rejected))
        dead = []
        for bad in rejected:
            self.metrics.deadlettered.inc()
            self.deadlettered += 1
            log.warning("dead-lettered event from %s[%s]@%s: %s", rec.topic, rec.partition, rec.offset, bad.reason)
            record = deadletter_record(bad, topic=rec.topic, partition=rec.partition, offset=rec.offset,
                                       key=rec.key, raw=rec.value,
                                       max_bytes=deadletter_budget(DEADLETTER_REQUEST_SIZE, rec.key))
            dead.append(_Out(self.deadletter_topic, rec.key, record, 0, {source: 1}))
        if not events:
            return [], dead
        self.metrics.events.inc(len(events))
        to_dict = event_to_dict
        return self.buffer.add([to_dict(ev) for ev in events], now, source), dead

    def _out(self, envelope: Envelope) -> _Out:
        self.metrics.flushes.labels(envelope.reason).inc()
        return _Out(self.output_topic, envelope.job.encode(), encode_events(envelope.events), len(envelope.events),
                    envelope.sources, envelope)

    async def _send(self, out: _Out) -> None:
        """Hand one record to the producer; its acknowledgement (or failure) is handled in ``_settled``."""
        self.in_flight += out.events
        try:
            future = await self._producer.send(out.topic, value=out.value, key=out.key)
        except Exception as exc:  # e.g. no metadata in time, record too large for the client
            self._settled(out, None, exc)
            return
        self._outstanding.add(future)
        future.add_done_callback(lambda f, out=out: self._settled(out, f, None))

    def _settled(self, out: _Out, future, error: BaseException | None) -> None:
        if future is not None:
            self._outstanding.discard(future)
            if future.cancelled():
                error = asyncio.CancelledError()
            else:
                error = future.exception()
        self.in_flight -= out.events
        if error is None:
            if out.envelope is not None:
                self.metrics.envelopes.inc()
                self.metrics.published.inc(out.events)
                self.envelopes_published += 1
                self.events_published += out.events
            self._release(out)
            return
        from aiokafka.errors import MessageSizeTooLargeError, RecordTooLargeError

        if isinstance(error, (MessageSizeTooLargeError, RecordTooLargeError)) and out.envelope is not None:
            events = out.envelope.events
            if len(events) > 1:  # send it again in halves; its input is settled once both are acknowledged
                log.warning("envelope of %d events for job %r too large for the broker; splitting it", len(events),
                            out.envelope.job)
                half = len(events) // 2
                out.parts_left = 2
                self._failed.extend([self._part(out, events[:half]), self._part(out, events[half:])])
                self.failed_events += len(events)
                return
            self.metrics.dropped.inc()
            log.error("an event of job %r is too large for %s (%r); dropped", out.envelope.job, out.topic, error)
            self._release(out)
            return
        self.metrics.failures.inc()
        log.warning("publishing %s to %s failed (%r); retrying", "an envelope" if out.envelope else "a dead letter",
                    out.topic, error)
        out.retry_at = time.monotonic() + 1.0
        self._failed.append(out)
        self.failed_events += out.events

    def _release(self, out: _Out) -> None:
        """``out`` is done: its input messages are no longer waiting for it (nor, once all parts are, its parent)."""
        for (tp, offset), n in out.sources.items():
            self.tracker.done(tp, offset, n)
        parent = out.parent
        if parent is not None:
            parent.parts_left -= 1
            if parent.parts_left <= 0:
                self._release(parent)

    def _part(self, out: _Out, events: list[dict]) -> _Out:
        from stepwatch.models.wire.events import encode_events

        env = Envelope(out.envelope.job, events, {}, out.envelope.reason)
        return _Out(out.topic, out.key, encode_events(events), len(events), {}, env, parent=out)

    async def _send_all(self, envelopes: Iterable[Envelope], dead: Iterable[_Out] = ()) -> None:
        for out in dead:
            await self._send(out)
        for envelope in envelopes:
            await self._send(self._out(envelope))

    async def _retry_failed(self, *, force: bool = False) -> None:
        now = time.monotonic()
        for _ in range(len(self._failed)):
            out = self._failed.popleft()
            if not force and out.retry_at > now:
                self._failed.append(out)
                continue
            self.failed_events -= out.events
            await self._send(out)

    async def _settle_all(self, timeout: float) -> bool:
        """Wait until everything sent was acknowledged (failed sends retried); False if time ran out."""
        deadline = time.monotonic() + timeout
        while self._outstanding or self._failed:
            if time.monotonic() >= deadline:
                return False
            if self._failed:
                await self._retry_failed(force=not self._outstanding)
            if self._outstanding:
                await asyncio.wait(set(self._outstanding), timeout=min(1.0, max(0.01, deadline - time.monotonic())))
            else:
                await asyncio.sleep(min(0.5, max(0.0, deadline - time.monotonic())))
        return True

    async def _commit(self, tps=None) -> None:
        offsets = {tp: o for tp, o in self.tracker.committable().items()
                   if (tps is None or tp in tps) and self._committed.get(tp) != o}
        if not offsets:
            self._last_commit = time.monotonic()
            return
        try:
            await self._consumer.commit(offsets)
        except Exception as exc:  # e.g. during a rebalance: those messages may be read again (duplicates are harmless)
            log.warning("committing offsets failed (will retry): %r", exc)
            return
        self._committed.update(offsets)
        self._last_commit = time.monotonic()

    def _update_gauges(self) -> None:
        m = self.metrics
        m.buffered.set(self.buffer.buffered)
        m.in_flight.set(self.in_flight)
        consumer = self._consumer
        if consumer is None:
            return
        lag = 0
        for tp in consumer.assignment():
            high = consumer.highwater(tp)
            pos = self.tracker.position(tp)
            if high is not None and pos is not None:
                lag += max(0, high - pos)
        m.lag.set(lag)

    # -- rebalancing ----------------------------------------------------------------------------------

    def _listener(self):
        from aiokafka import ConsumerRebalanceListener

        stage = self

        class Rebalance(ConsumerRebalanceListener):
            async def on_partitions_revoked(self, revoked) -> None:
                if not revoked:
                    return
                async with stage._lock:  # everything buffered goes out, is acknowledged, then committed
                    await stage._send_all(stage.buffer.drain("drain"))
                    if not await stage._settle_all(timeout=30.0):
                        log.warning("rebalance: envelopes still unacknowledged after 30 s; their input will be "
                                    "read again by the next owner")
                    await stage._commit(set(revoked))
                    stage.tracker.forget(revoked)
                    for tp in revoked:
                        stage._committed.pop(tp, None)

            async def on_partitions_assigned(self, assigned) -> None:
                parts = sorted(tp.partition for tp in assigned)
                stage.metrics.partitions.set(len(parts))
                log.info("assigned partitions %s of %s", parts, stage.input_topic)

        return Rebalance()

    # -- lifecycle ------------------------------------------------------------------------------------

    def ensure_topics(self) -> None:
        """Create the input, output and dead-letter topics if they do not exist (blocking)."""
        from stepwatch.security import client_config
        from stepwatch.topics import create_topics

        kafka = self.settings.kafka
        create_topics(kafka.bootstrap, [self.input_topic, self.output_topic, self.deadletter_topic],
                      kafka.partitions, replication_factor=kafka.replication_factor,
                      client_config=client_config(self.settings), append_time=[self.input_topic, self.output_topic])

    async def run(self, stop: asyncio.Event) -> None:
        """Consume until ``stop`` is set, then flush, wait for acknowledgements, commit and leave the group."""
        from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

        from stepwatch.security import client_config

        settings = self.settings
        sec = client_config(settings)
        bootstrap = settings.kafka.bootstrap.split(",")
        session_ms = int(settings.worker.session_timeout * 1000)
        self._producer = AIOKafkaProducer(bootstrap_servers=bootstrap, client_id=self.group_id, acks="all",
                                          linger_ms=5, max_request_size=8 << 20, **sec)
        self._consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=self.group_id,
                                          client_id=self.group_id, enable_auto_commit=False,
                                          auto_offset_reset="earliest", session_timeout_ms=session_ms,
                                          heartbeat_interval_ms=min(3000, max(100, session_ms // 3)),
                                          max_partition_fetch_bytes=8 << 20, **sec)
        await self._producer.start()
        try:
            await self._consumer.start()
            self._consumer.subscribe([self.input_topic], listener=self._listener())
            log.info("shard stage: reading %s (group %s), writing per-job envelopes of up to %d events to %s "
                     "(flush every %.3g s), dead letters to %s", self.input_topic, self.group_id,
                     settings.shard.max_events, self.output_topic, settings.shard.flush_interval,
                     self.deadletter_topic)
            await self._loop(stop)
        finally:
            await self._shutdown()

    async def _loop(self, stop: asyncio.Event) -> None:
        s = self.settings.shard
        max_wait = max(0.005, s.flush_interval / 2)
        consumer = self._consumer
        while not stop.is_set():
            if self.buffer.buffered + self.in_flight + self.failed_events >= s.max_buffered:
                async with self._lock:  # bounded memory: flush everything, read on once acknowledged
                    await self._send_all(self.buffer.drain("memory"))
                    while self.in_flight + self.failed_events >= s.max_buffered // 2 and not stop.is_set():
                        await self._retry_failed()
                        if self._outstanding:
                            await asyncio.wait(set(self._outstanding), timeout=0.5,
                                               return_when=asyncio.FIRST_COMPLETED)
                        else:
                            await asyncio.sleep(0.1)
            wait = max_wait
            due = self.buffer.next_due()
            if due is not None:
                wait = min(wait, max(0.0, due - time.monotonic()))
            try:
                batches = await consumer.getmany(timeout_ms=int(wait * 1000), max_records=MAX_RECORDS)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("reading %s failed; retrying", self.input_topic)
                await asyncio.sleep(1.0)
                continue
            async with self._lock:
                assigned = consumer.assignment()
                now = time.monotonic()
                envelopes: list[Envelope] = []
                dead: list[_Out] = []
                for tp, records in batches.items():
                    if tp not in assigned:
                        continue  # fetched before a rebalance took the partition away
                    for rec in records:
                        made, bad = self._take_message(tp, rec, now)
                        envelopes.extend(made)
                        dead.extend(bad)
                envelopes.extend(self.buffer.due(time.monotonic()))
                await self._send_all(envelopes, dead)
                if self._failed:
                    await self._retry_failed()
                if time.monotonic() - self._last_commit >= s.commit_interval:
                    await self._commit()
                self._update_gauges()

    async def _shutdown(self) -> None:
        try:
            if self._consumer is not None:
                async with self._lock:
                    await self._send_all(self.buffer.drain("drain"))
                    if not await self._settle_all(timeout=30.0):
                        log.warning("stopping with %d events unacknowledged; their input will be read again",
                                    self.in_flight)
                    await self._commit()
        except Exception:
            log.exception("flushing at shutdown failed")
        finally:
            if self._consumer is not None:
                try:
                    await self._consumer.stop()
                except Exception:
                    log.exception("stopping the consumer failed")
            if self._producer is not None:
                try:
                    await self._producer.stop()
                except Exception:
                    log.exception("stopping the producer failed")
        read = {tp.partition: n for tp, n in sorted(self.tracker.read.items(), key=lambda kv: kv[0].partition)}
        total = sum(read.values())
        log.info("shard stage stopped: consumed %d messages (per partition %s), published %d events in %d "
                 "envelopes, dead-lettered %d", total, read, self.events_published, self.envelopes_published,
                 self.deadlettered)


def run_shard(settings: Settings | None = None) -> None:
    """Run the shard stage in the foreground until SIGINT/SIGTERM (creates its topics first)."""
    settings = settings or Settings.from_env()
    stage = ShardStage(settings)
    stage.ensure_topics()
    if settings.shard.metrics_port > 0:
        from prometheus_client import start_http_server

        start_http_server(settings.shard.metrics_port, registry=stage.metrics.registry)
        log.info("metrics at http://0.0.0.0:%d/metrics", settings.shard.metrics_port)

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            try:
                loop.add_signal_handler(sig, stop.set)
            except (NotImplementedError, RuntimeError):  # not the main thread / platform
                pass
        await stage.run(stop)

    asyncio.run(main())
