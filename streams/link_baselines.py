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


def install_link_baselines(app, engine, settings: Settings, *, owned: Callable[[], set[int] | None]) -> None:
    """Read the baselines topic back at start and write the nodes this worker owns (see the module doc).

    ``owned()``: this worker's events partitions now (None: not known yet; nothing is written then).
    """
    from mode import Service

    from stepwatch.security import client_config

    from .telemetry_feed import partition_of

    kafka = settings.kafka
    topic = kafka.topic(kafka.link_baselines_topic)
    baselines = engine.telemetry.fabric.history.baselines
    if baselines is None:
        return
    interval = max(0.1, settings.telemetry.link_baseline_publish_interval)
    holder: dict = {"producer": None, "read": False}
    unsent: set[str] = set()

    async def publish() -> int:
        mine = owned()
        unsent.update(baselines.take_dirty())
        if mine is None or not unsent:
            return 0
        n_partitions = kafka.partitions
        sent = 0
        for node in sorted(unsent):
            if partition_of(node, n_partitions) in mine:  # the owner of the node's partition speaks for it
                value = baselines.record(node)
                if value is not None:
                    await holder["producer"].send(topic, key=node.encode(), value=value)
                    sent += 1
        await holder["producer"].flush()
        unsent.clear()  # the others' owners write theirs
        return sent

    async def run() -> None:
        from aiokafka import AIOKafkaProducer

        while holder["producer"] is None:  # the broker may be away at start: detection does not wait
            producer = AIOKafkaProducer(bootstrap_servers=kafka.bootstrap.split(","), linger_ms=50,
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
                holder["producer"] = producer
        while True:
            try:
                count = await read_baselines(settings, topic, baselines)
                log.info("link baselines: read %d records back from %s (%d nodes known, %d rejected)",
                         count, topic, len(baselines.nodes()), baselines.rejected)
                holder["read"] = True
                break
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the broker is away: try again (detection runs meanwhile)
                log.warning("reading the link baselines back failed (will retry): %r", exc)
                await asyncio.sleep(2.0)
        while True:
            await asyncio.sleep(interval)
            try:
                sent = await publish()
                if sent:
                    log.debug("link baselines: wrote %d node records", sent)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # kept in ``unsent``: the next round tries again
                log.warning("writing link baselines failed (will retry): %r", exc)

    async def start() -> None:
        try:
            await asyncio.get_running_loop().run_in_executor(None, ensure_topic)
        except Exception as exc:  # the reader and writer retry; the topic may appear later
            log.warning("could not create the link baselines topic %s: %r", topic, exc)
        await run()

    def ensure_topic() -> None:
        from stepwatch.topics import ensure_link_baselines_topic

        ensure_link_baselines_topic(kafka, client_config=client_config(settings))

    @app.service
    class LinkBaselinesService(Service):
        """Reads the link baselines back at start and writes the owned nodes' (see install_link_baselines)."""

        _task = None

        async def on_start(self) -> None:
            self._task = asyncio.ensure_future(start())

        async def on_stop(self) -> None:
            await cancel(self._task)
            producer = holder["producer"]
            if producer is None:
                return
            try:  # a clean stop: what was learned since the last round is not lost
                if not holder["read"]:
                    return  # never overwrite a record this worker did not read back first
                await asyncio.wait_for(publish(), timeout=5.0)
            except Exception as exc:
                log.warning("could not write the link baselines on stop: %r", exc)
            finally:
                await producer.stop()
