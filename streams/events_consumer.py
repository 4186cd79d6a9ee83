"""The worker's own events consumer (``STEPWATCH_WORKER_CONSUMER=aiokafka``, the default).

The events topic's consumer unless ``STEPWATCH_WORKER_CONSUMER=faust`` (then the Faust agent of
streams/worker.py): a plain ``AIOKafkaConsumer`` in its own group whose ``getmany`` batches are
go through the worker's ``Pipeline`` (models/pipeline.py) at once, which decodes the step events of
consecutive messages column-wise together and removes Faust's per-message cost. Recovery,
forgetting and publishing are the worker's own methods (streams/worker.py), given to the component as callables.

A component (streams/component.py): built from explicit dependencies, ``start()``/``stop()`` run as a service of
the worker's app; ``consumer_factory`` and ``faust_offsets`` are the only parts that touch Kafka, so a test
drives the component with an in-memory consumer (tests/streams/test_events_consumer.py).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any

from stepwatch.models.pipeline import MAX_RUN_EVENTS, step_items
from stepwatch.models.sources import Read

from .component import as_service
from .decoder import READ_AHEAD, Decoder
from .supervise import cancel

log = logging.getLogger("stepwatch.worker")

#: getmany: at most this many messages per call, and this long a wait for the first one.
FAST_MAX_RECORDS = 1000
FAST_TIMEOUT_MS = 200
#: Commit processed offsets every STEPWATCH_WORKER_COMMIT_INTERVAL seconds, after this many messages, on revoke
#: and on stop.
FAST_COMMIT_EVERY = 20_000
#: Step events merged into one column batch at most (models/pipeline.py merges them).
FAST_MAX_RUN_EVENTS = MAX_RUN_EVENTS
_step_items = step_items  # its former name


class EventsConsumer:
    """Consume the events topic with the worker's own ``AIOKafkaConsumer`` (group ``group_id``).

    Same recovery on assignment and forgetting on revocation as the Faust agent (``recover(partitions)`` and
    ``forget(partitions)``: the worker's); each ``getmany`` batch of a partition is a ``Read`` of ``reads()``,
    which ``drive(source, stage)`` takes through the pipeline at once (it decodes the step events of
    consecutive messages column-wise together; models/pipeline.py) into the worker's Kafka sink, as the Faust
    agent's ``take_events`` batches. Offsets are committed after processing (at-least-once). ``start()`` waits
    (bounded) for the first assignment and its recovery, so the worker's "Ready" still means "consuming";
    ``assignment_changed()`` (the workers registry, streams/registry.py) is called when partitions move.
    ``allowed``: cleared while a recovery runs (the consumer waits).
    """

    def __init__(self, settings, *, topic: str, group_id: str, drive: Callable[[Any, str], Awaitable[None]],
                 recover: Callable[[set[int]], Awaitable[None]], forget: Callable[[set[int]], None],
                 allowed: asyncio.Event, decoder: Decoder, assignment_changed: Callable[[], None] = lambda: None,
                 consumer_factory: Callable[[], Any] | None = None,
                 faust_offsets: Callable[[list[int]], dict[int, int]] | None = None) -> None:
        self.settings, self.topic, self.group_id = settings, topic, group_id
        self._drive, self._recover, self._forget, self._allowed = drive, recover, forget, allowed
        self.decoder = decoder
        self._assignment_changed = assignment_changed
        self._consumer_factory = consumer_factory or self._aiokafka_consumer
        self._faust_offsets = faust_offsets or self._faust_committed
        self._owned: set[int] = set()
        self._pending: dict = {}  # TopicPartition -> next offset to commit (processed, not yet committed)
        self._position: dict = {}  # TopicPartition -> next offset after the last processed message
        self._lock = asyncio.Lock()  # processing a batch, a rebalance hook and a commit never interleave
        self._assigned_once = asyncio.Event()
        self._consumer = None
        self._last_commit = time.monotonic()
        self._uncommitted = 0
        self._epoch = 0  # one more at each rebalance (reads fetched before are dropped)
        self._inflight: deque = deque()  # fetched, not yet processed: (epoch, tp, records, arrival, plan or None)
        self._task: asyncio.Future | None = None
        self.assigned = False  # got its first assignment (and recovered it)
        self.rebalancing = False

    def attach(self, app) -> None:
        as_service(app, self, "EventsConsumer")

    # -- what the worker asks --------------------------------------------------------------

    def ready(self) -> bool:
        """Consuming: it has its partitions and is not rebalancing."""
        return self.assigned and not self.rebalancing

    def owned(self) -> set[int]:
        """This consumer's events partitions now (node alerts are spoken by the owner of the node's partition,
        streams/telemetry_feed.py: that owner is this assignment, not the Faust consumer's)."""
        return set(self._owned)

    node_partitions = owned  # node alerts: spoken by the owner of the node's partition in this assignment

    def partition_count(self) -> int | None:
        consumer = self._consumer
        parts = consumer.partitions_for_topic(self.topic) if consumer is not None else None
        return len(parts) if parts else None

    def lag(self):
        """(topic, partition, lag) per assigned partition: highwater - next offset to process."""
        consumer = self._consumer
        if consumer is None:
            return
        for tp in sorted(consumer.assignment()):
            high = consumer.highwater(tp)
            if high is None or tp not in self._position:
                continue
            yield tp.topic, tp.partition, max(0, high - self._position[tp])

    # -- Kafka ------------------------------------------------------------------------------

    def _aiokafka_consumer(self):
        from aiokafka import AIOKafkaConsumer

        from stepwatch.security import client_config

        settings = self.settings
        session_ms = int(settings.worker.session_timeout * 1000)
        return AIOKafkaConsumer(
            bootstrap_servers=settings.kafka.bootstrap.split(","), group_id=self.group_id,
            client_id=f"{settings.kafka.app_id}-events", enable_auto_commit=False,
            auto_offset_reset="earliest", session_timeout_ms=session_ms,
            heartbeat_interval_ms=min(3000, session_ms // 3), max_partition_fetch_bytes=8 << 20,
            fetch_max_bytes=64 << 20, **client_config(settings))

    def _faust_committed(self, partitions: list[int]) -> dict[int, int]:
        """The Faust agent's group's committed offsets (blocking, kafka-python)."""
        from kafka import KafkaConsumer, TopicPartition

        from stepwatch.security import client_config

        settings = self.settings
        group = KafkaConsumer(bootstrap_servers=settings.kafka.bootstrap, group_id=settings.kafka.app_id,
                              enable_auto_commit=False, **client_config(settings))
        try:
            found = {p: group.committed(TopicPartition(self.topic, p)) for p in partitions}
        finally:
            group.close()
        return {p: o for p, o in found.items() if o is not None}

    async def commit(self, tps=None) -> None:
        """Commit the processed offsets (of ``tps`` only, when given)."""
        offsets = {tp: o for tp, o in self._pending.items() if tps is None or tp in tps}
        if not offsets:
            return
        try:
            await self._consumer.commit(offsets)
        except Exception as exc:  # e.g. during a rebalance: these messages may be processed again
            log.warning("committing events offsets failed (will retry): %r", exc)
            return
        for tp, offset in offsets.items():
            if self._pending.get(tp) == offset:
                del self._pending[tp]
        self._last_commit = time.monotonic()
        self._uncommitted = 0

    async def _adopt_faust_offsets(self, assigned: list) -> None:
        """Switching from the Faust agent: a partition this group never committed starts where the agent's
        group (``<app_id>``) left it, and its recovery reads back the span before that, as after a restart."""
        consumer = self._consumer
        fresh = [tp for tp in assigned if await consumer.committed(tp) is None]
        if not fresh:
            return
        try:
            found = await asyncio.get_running_loop().run_in_executor(
                None, self._faust_offsets, [tp.partition for tp in fresh])
            offsets = {tp: found[tp.partition] for tp in fresh if tp.partition in found}
            if not offsets:
                return
            await consumer.commit(offsets)
            for tp, offset in offsets.items():
                consumer.seek(tp, offset)
            log.info("events partitions %s: starting from the Faust agent group's committed offsets %s",
                     sorted(tp.partition for tp in offsets), {tp.partition: o for tp, o in offsets.items()})
        except Exception:  # then from this group's own start (auto_offset_reset)
            log.exception("could not adopt the Faust agent group's offsets")

    async def on_partitions_revoked(self, revoked) -> None:
        self.rebalancing = True
        async with self._lock:
            self._epoch += 1
            await self.commit(set(revoked))  # what was processed is not read again by the next owner
            gone = {tp.partition for tp in revoked if tp.topic == self.topic}
            self._owned.difference_update(gone)
            for ledger in (self._pending, self._position):
                for tp in list(ledger):
                    if tp in revoked:
                        del ledger[tp]
            self._forget(gone)
        self._assignment_changed()

    async def on_partitions_assigned(self, assigned) -> None:
        async with self._lock:
            self._epoch += 1
            mine = {tp.partition for tp in assigned if tp.topic == self.topic}
            self._owned.clear()
            self._owned.update(mine)
            self._assignment_changed()  # advertised at once; recovery (below) may take a while
            try:
                await self._adopt_faust_offsets([tp for tp in assigned if tp.topic == self.topic])
                await self._recover(mine)
            finally:
                self.assigned = True
                self.rebalancing = False
                self._assigned_once.set()

    async def reads(self):
        """The events topic as a source (models/sources.py): one ``Read`` per ``getmany`` batch of a partition
        (ConsumerRecords have Message's attributes). A batch's offsets count as processed once the next item
        is asked for (``drive`` asks after processing, or after logging and counting its failure), and
        are committed after processing; the lock is held while a read is handed on.

        Under load a batch is cut into parts that the decoder process (streams/decoder.py) decodes while the
        worker detects on the part before; the consumer reads ahead (up to ``READ_AHEAD`` parts), so that the
        process always has the next part to decode. Parts fetched before a rebalance are dropped (uncommitted:
        read again by the partition's owner)."""
        consumer, inflight, decoder = self._consumer, self._inflight, self.decoder
        while True:
            if not inflight or (len(inflight) < READ_AHEAD and inflight[-1][4] is not None):
                try:
                    batches = await consumer.getmany(timeout_ms=0 if inflight else FAST_TIMEOUT_MS,
                                                     max_records=FAST_MAX_RECORDS)
                except asyncio.CancelledError:
                    raise
                except Exception:
                    log.exception("reading the events topic failed; retrying")
                    await asyncio.sleep(1.0)
                    continue
                arrival, epoch = time.time(), self._epoch
                for tp, records in batches.items():
                    if tp.topic != self.topic or tp.partition not in self._owned or not records:
                        continue  # fetched before a rebalance took the partition away
                    values = [r.value for r in records]
                    cuts = decoder.parts(values)
                    if not cuts:  # decoded in process, whole
                        inflight.append((epoch, tp, records, arrival, None))
                    for lo, hi in cuts:
                        inflight.append((epoch, tp, records[lo:hi], arrival, decoder.submit(values[lo:hi])))
                # Let the fetcher send its next request before the CPU-bound processing below, so the broker
                # reads the next records while these are processed (nothing else yields to the loop).
                await asyncio.sleep(0)
            async with self._lock:
                if inflight and not self._allowed.is_set():
                    await self._allowed.wait()
                while inflight:
                    epoch, tp, records, arrival, pending_plan = inflight.popleft()
                    plan = await decoder.plan(pending_plan)
                    if epoch != self._epoch or tp.partition not in self._owned:
                        continue  # a rebalance came meanwhile: the partition's owner reads these again
                    yield Read(records, arrival, plan=plan)  # a failure is logged and counted by drive
                    self._pending[tp] = self._position[tp] = records[-1].offset + 1
                    self._uncommitted += len(records)
                    if pending_plan is not None:
                        break  # read ahead before the next part
                if self._pending and (self._uncommitted >= FAST_COMMIT_EVERY or time.monotonic() - self._last_commit
                                      >= self.settings.worker.commit_interval):
                    await self.commit()

    # -- running ----------------------------------------------------------------------------

    async def start(self) -> None:
        from aiokafka import ConsumerRebalanceListener

        part = self

        class Rebalance(ConsumerRebalanceListener):
            async def on_partitions_revoked(self, revoked) -> None:
                await part.on_partitions_revoked(revoked)

            async def on_partitions_assigned(self, assigned) -> None:
                await part.on_partitions_assigned(assigned)

        consumer = self._consumer = self._consumer_factory()
        await consumer.start()
        consumer.subscribe([self.topic], listener=Rebalance())
        log.info("events consumer (aiokafka) started in group %s", self.group_id)
        session = self.settings.worker.session_timeout
        try:  # "Ready" after the first assignment and its recovery, as with the Faust agent
            await asyncio.wait_for(self._assigned_once.wait(), timeout=max(60.0, 2 * session))
        except asyncio.TimeoutError:
            log.warning("no events partition assigned yet; consuming once the group assigns some")
        self._task = asyncio.ensure_future(self._drive(self.reads(), "events"))

    async def stop(self) -> None:
        await cancel(self._task)
        consumer = self._consumer
        if consumer is not None:
            async with self._lock:
                await self.commit()
            await consumer.stop()
        self.decoder.stop()
