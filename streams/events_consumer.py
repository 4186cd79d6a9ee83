"""The worker's own events consumer (``STEPWATCH_WORKER_CONSUMER=aiokafka``, the default).

The events topic's consumer unless ``STEPWATCH_WORKER_CONSUMER=faust`` (then the Faust agent of
streams/worker.py): a plain ``AIOKafkaConsumer`` in its own group whose ``getmany`` batches are
go through the worker's ``Pipeline`` (models/pipeline.py) at once, which decodes the step events of
consecutive messages column-wise together and removes Faust's per-message cost. Recovery,
forgetting and publishing are the worker's own methods (streams/worker.py).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque

from stepwatch.models.pipeline import MAX_RUN_EVENTS, step_items
from stepwatch.models.sources import Read

from .decoder import READ_AHEAD, Decoder, decode_processes
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


def install_events_consumer(worker) -> None:
    """Consume the events topic with the worker's own ``AIOKafkaConsumer`` (group ``worker.events_group``).

    Same recovery on assignment and forgetting on revocation as the Faust agent (the worker's
    ``recover_partitions`` and ``forget_partitions``); each ``getmany`` batch of a partition is a ``Read`` of
    the consumer's source, which ``worker.drive`` takes through the pipeline at once (it decodes the step
    events of consecutive messages column-wise together; models/pipeline.py) into the worker's Kafka sink,
    as the Faust agent's ``take_events`` batches. Offsets are committed after processing (at-least-once).
    A ``mode.Service`` of the worker's app: it starts before the worker logs "Ready" and waits (bounded)
    for its first assignment and recovery, so "Ready" still means "consuming". It keeps the worker's
    ``events_owned``, ``events_assigned`` and ``events_rebalancing`` up to date and calls
    ``worker.assignment_changed()`` (the workers registry, streams/registry.py) when partitions move.
    """
    from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener
    from mode import Service

    from stepwatch.security import client_config

    app, settings, metrics = worker.app, worker.settings, worker.metrics
    topic_name, group_id = worker.events_topic.get_topic_name(), worker.events_group
    owned: set[int] = set()
    pending: dict = {}  # TopicPartition -> next offset to commit (processed, not yet committed)
    position: dict = {}  # TopicPartition -> next offset after the last processed message
    lock = asyncio.Lock()  # processing a batch, a rebalance hook and a commit never interleave
    assigned_once = asyncio.Event()
    holder: dict = {"consumer": None, "last_commit": time.monotonic(), "uncommitted": 0,
                    "epoch": 0}  # the epoch: one more at each rebalance (reads fetched before are dropped)
    decoder = worker.decoder = Decoder(decode_processes(settings.worker.decode_processes),
                                       worker.pipeline.max_new_jobs, metrics)

    # Node alerts are spoken by the owner of the node's events partition (streams/telemetry_feed.py):
    # that owner is this consumer's assignment, not the Faust consumer's.
    worker.events_owned = owned

    def partition_count() -> int | None:
        consumer = holder["consumer"]
        parts = consumer.partitions_for_topic(topic_name) if consumer is not None else None
        return len(parts) if parts else None

    worker.events_partition_counter = partition_count

    def lag():
        consumer = holder["consumer"]
        if consumer is None:
            return
        for tp in sorted(consumer.assignment()):
            high = consumer.highwater(tp)
            if high is None or tp not in position:
                continue
            yield tp.topic, tp.partition, max(0, high - position[tp])

    metrics.lag_source = lag

    async def commit(tps=None) -> None:
        offsets = {tp: o for tp, o in pending.items() if tps is None or tp in tps}
        if not offsets:
            return
        try:
            await holder["consumer"].commit(offsets)
        except Exception as exc:  # e.g. during a rebalance: these messages may be processed again
            log.warning("committing events offsets failed (will retry): %r", exc)
            return
        for tp, offset in offsets.items():
            if pending.get(tp) == offset:
                del pending[tp]
        holder["last_commit"] = time.monotonic()
        holder["uncommitted"] = 0

    def faust_committed(partitions: list[int]) -> dict[int, int]:
        """The Faust agent's group's committed offsets (blocking, kafka-python)."""
        from kafka import KafkaConsumer, TopicPartition

        group = KafkaConsumer(bootstrap_servers=settings.kafka.bootstrap, group_id=settings.kafka.app_id,
                              enable_auto_commit=False, **client_config(settings))
        try:
            found = {p: group.committed(TopicPartition(topic_name, p)) for p in partitions}
        finally:
            group.close()
        return {p: o for p, o in found.items() if o is not None}

    async def adopt_faust_offsets(assigned: list) -> None:
        """Switching from the Faust agent: a partition this group never committed starts where the agent's
        group (``<app_id>``) left it, and its recovery reads back the span before that, as after a restart."""
        consumer = holder["consumer"]
        fresh = [tp for tp in assigned if await consumer.committed(tp) is None]
        if not fresh:
            return
        try:
            found = await asyncio.get_running_loop().run_in_executor(
                None, faust_committed, [tp.partition for tp in fresh])
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

    class Rebalance(ConsumerRebalanceListener):
        async def on_partitions_revoked(self, revoked) -> None:
            worker.events_rebalancing = True
            async with lock:
                holder["epoch"] += 1
                await commit(set(revoked))  # what was processed is not read again by the next owner
                gone = {tp.partition for tp in revoked if tp.topic == topic_name}
                owned.difference_update(gone)
                for tp in list(pending):
                    if tp in revoked:
                        del pending[tp]
                for tp in list(position):
                    if tp in revoked:
                        del position[tp]
                worker.forget_partitions(gone)
            if worker.assignment_changed is not None:
                worker.assignment_changed()

        async def on_partitions_assigned(self, assigned) -> None:
            async with lock:
                holder["epoch"] += 1
                mine = {tp.partition for tp in assigned if tp.topic == topic_name}
                owned.clear()
                owned.update(mine)
                if worker.assignment_changed is not None:
                    worker.assignment_changed()  # advertised at once; recovery (below) may take a while
                try:
                    await adopt_faust_offsets([tp for tp in assigned if tp.topic == topic_name])
                    await worker.recover_partitions(mine)
                finally:
                    worker.events_assigned = True
                    worker.events_rebalancing = False
                    assigned_once.set()

    inflight: deque = deque()  # fetched, not yet processed: (epoch, tp, records, arrival, plan future or None)

    async def reads():
        """The events topic as a source (models/sources.py): one ``Read`` per ``getmany`` batch of a partition
        (ConsumerRecords have Message's attributes). A batch's offsets count as processed once the next item
        is asked for (``Worker.drive`` asks after processing, or after logging and counting its failure), and
        are committed after processing; the lock is held while a read is handed on.

        Under load a batch is cut into parts that the decoder process (streams/decoder.py) decodes while the
        worker detects on the part before; the consumer reads ahead (up to ``READ_AHEAD`` parts), so that the
        process always has the next part to decode. Parts fetched before a rebalance are dropped (uncommitted:
        read again by the partition's owner)."""
        consumer = holder["consumer"]
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
                arrival, epoch = time.time(), holder["epoch"]
                for tp, records in batches.items():
                    if tp.topic != topic_name or tp.partition not in owned or not records:
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
            async with lock:
                if inflight and not worker.processing_allowed.is_set():
                    await worker.processing_allowed.wait()
                while inflight:
                    epoch, tp, records, arrival, pending_plan = inflight.popleft()
                    plan = await decoder.plan(pending_plan)
                    if epoch != holder["epoch"] or tp.partition not in owned:
                        continue  # a rebalance came meanwhile: the partition's owner reads these again
                    yield Read(records, arrival, plan=plan)  # a failure is logged and counted by Worker.drive
                    pending[tp] = position[tp] = records[-1].offset + 1
                    holder["uncommitted"] += len(records)
                    if pending_plan is not None:
                        break  # read ahead before the next part
                if pending and (holder["uncommitted"] >= FAST_COMMIT_EVERY
                                or time.monotonic() - holder["last_commit"] >= settings.worker.commit_interval):
                    await commit()

    @app.service
    class EventsConsumer(Service):
        """The events topic's consumer task (see install_events_consumer)."""

        _task: asyncio.Future | None = None

        async def on_start(self) -> None:
            sec = client_config(settings)
            session_ms = int(settings.worker.session_timeout * 1000)
            consumer = AIOKafkaConsumer(
                bootstrap_servers=settings.kafka.bootstrap.split(","), group_id=group_id,
                client_id=f"{settings.kafka.app_id}-events", enable_auto_commit=False,
                auto_offset_reset="earliest", session_timeout_ms=session_ms,
                heartbeat_interval_ms=min(3000, session_ms // 3), max_partition_fetch_bytes=8 << 20,
                fetch_max_bytes=64 << 20, **sec)
            holder["consumer"] = consumer
            await consumer.start()
            consumer.subscribe([topic_name], listener=Rebalance())
            log.info("events consumer (aiokafka) started in group %s", group_id)
            try:  # "Ready" after the first assignment and its recovery, as with the Faust agent
                await asyncio.wait_for(assigned_once.wait(), timeout=max(60.0, 2 * settings.worker.session_timeout))
            except asyncio.TimeoutError:
                log.warning("no events partition assigned yet; consuming once the group assigns some")
            self._task = asyncio.ensure_future(worker.drive(reads(), "events"))

        async def on_stop(self) -> None:
            await cancel(self._task)
            consumer = holder["consumer"]
            if consumer is not None:
                async with lock:
                    await commit()
                await consumer.stop()
            decoder.stop()
