"""Persistent link baselines on Kafka: the compacted topic ``<prefix>link-baselines``, keyed by node.

Every worker learns every node's link baselines (models/telemetry/link_baseline.py) from the global telemetry
feed (streams/telemetry_feed.py). The worker that owns a node's partition of the events topic (the
same rule that decides who publishes the node's ``link_errors`` alerts) writes the node's record
every ``telemetry.link_baseline_publish_interval`` seconds when it learned something, and once more
on a clean stop. At start, every worker reads the whole topic back without a consumer group (like
the config and workers topics, streams/topic_reader.py), up to the end it found, so a restarted
worker (or a new one) knows the ports' usual levels and the fleet's before the next job starts.
Compaction keeps the latest record per node; a node's record is a few kB.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from stepwatch.config import Settings

from .supervise import cancel

log = logging.getLogger("stepwatch.worker.link_baselines")


async def read_baselines(settings: Settings, topic: str, baselines) -> int:
    """Load every record of ``topic`` (all partitions, no group) up to its end offsets at the call; the count."""
    from aiokafka import AIOKafkaConsumer

    from stepwatch.security import client_config

    kafka = settings.kafka
    # Subscribed without a group, the consumer takes every partition itself (as streams/topic_reader.py).
    consumer = AIOKafkaConsumer(topic, bootstrap_servers=kafka.bootstrap.split(","), group_id=None,
                                enable_auto_commit=False, auto_offset_reset="earliest", **client_config(settings))
    await consumer.start()
    try:
        for _ in range(100):  # the assignment follows the first metadata update
            if consumer.assignment():
                break
            await asyncio.sleep(0.1)
        tps = sorted(consumer.assignment())
        if not tps:
            return 0  # no such topic (yet): nothing was written
        ends = await consumer.end_offsets(tps)
        await consumer.seek_to_beginning(*tps)
        count = 0
        pending = {tp for tp in tps if ends[tp] > 0}
        while pending:
            for tp, records in (await consumer.getmany(*pending, timeout_ms=1000)).items():
                for record in records:
                    if record.offset < ends[tp]:
                        baselines.load(record.value, key=record.key)
                        count += 1
            for tp in list(pending):
                if await consumer.position(tp) >= ends[tp]:
                    pending.discard(tp)
        return count
    finally:
        await consumer.stop()


class LinkBaselinesSync:
    """Reads the baselines topic back at start and writes the nodes this worker owns (see the module doc); a
    component (streams/component.py) whose ``start()``/``stop()`` run as a service of the app, or nothing when
    the engine keeps no baselines.

    ``baselines``: the engine's link baselines (``engine.telemetry.fabric.history.baselines``; None: off);
    ``owned()``: this worker's events partitions now (None: not known yet; nothing is written then).
    """

    def __init__(self, baselines, settings: Settings, *, owned: Callable[[], set[int] | None]) -> None:
        kafka = settings.kafka
        self.baselines, self.settings, self._owned = baselines, settings, owned
        self.topic = kafka.topic(kafka.link_baselines_topic)
        self.interval = max(0.1, settings.telemetry.link_baseline_publish_interval)
        self._producer = None
        self._read = False  # read back once: never overwrite a record this worker did not read back first
        self._unsent: set[str] = set()
        self._task = None

    def attach(self, app) -> None:
        if self.baselines is None:
            return
        from .component import as_service

        as_service(app, self, "LinkBaselinesService")

    async def publish(self) -> int:
        from .telemetry_feed import partition_of

        mine = self._owned()
        self._unsent.update(self.baselines.take_dirty())
        if mine is None or not self._unsent:
            return 0
        n_partitions = self.settings.kafka.partitions
        sent = 0
        for node in sorted(self._unsent):
            if partition_of(node, n_partitions) in mine:  # the owner of the node's partition speaks for it
                value = self.baselines.record(node)
                if value is not None:
                    await self._producer.send(self.topic, key=node.encode(), value=value)
                    sent += 1
        await self._producer.flush()
        self._unsent.clear()  # the others' owners write theirs
        return sent

    async def run(self) -> None:
        from aiokafka import AIOKafkaProducer

        from stepwatch.security import client_config

        settings, baselines = self.settings, self.baselines
        while self._producer is None:  # the broker may be away at start: detection does not wait
            producer = AIOKafkaProducer(bootstrap_servers=settings.kafka.bootstrap.split(","), linger_ms=50,
                                        **client_config(settings))
            try:
                await producer.start()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("link baselines: no producer yet (will retry): %r", exc)
                await producer.stop()
                await asyncio.sleep(2.0)
            else:
                self._producer = producer
        while True:
            try:
                count = await read_baselines(settings, self.topic, baselines)
                log.info("link baselines: read %d records back from %s (%d nodes known, %d rejected)",
                         count, self.topic, len(baselines.nodes()), baselines.rejected)
                self._read = True
                break
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the broker is away: try again (detection runs meanwhile)
                log.warning("reading the link baselines back failed (will retry): %r", exc)
                await asyncio.sleep(2.0)
        while True:
            await asyncio.sleep(self.interval)
            try:
                sent = await self.publish()
                if sent:
                    log.debug("link baselines: wrote %d node records", sent)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # kept in ``unsent``: the next round tries again
                log.warning("writing link baselines failed (will retry): %r", exc)

    def _ensure_topic(self) -> None:
        from stepwatch.security import client_config
        from stepwatch.topics import ensure_link_baselines_topic

        ensure_link_baselines_topic(self.settings.kafka, client_config=client_config(self.settings))

    async def _begin(self) -> None:
        try:
            await asyncio.get_running_loop().run_in_executor(None, self._ensure_topic)
        except Exception as exc:  # the reader and writer retry; the topic may appear later
            log.warning("could not create the link baselines topic %s: %r", self.topic, exc)
        await self.run()

    async def start(self) -> None:
        self._task = asyncio.ensure_future(self._begin())

    async def stop(self) -> None:
        await cancel(self._task)
        producer = self._producer
        if producer is None:
            return
        try:  # a clean stop: what was learned since the last round is not lost
            if not self._read:
                return  # never overwrite a record this worker did not read back first
            await asyncio.wait_for(self.publish(), timeout=5.0)
        except Exception as exc:
            log.warning("could not write the link baselines on stop: %r", exc)
        finally:
            await producer.stop()
