"""The drain ledger on Kafka: the compacted ``<prefix>drain-ledger`` topic, keyed by node.

Every worker writes the drains its budget let through (``DrainBudget.outbox``, every ``FLUSH_SECONDS``) and reads
the whole topic, from its beginning and then as it grows, counting the other workers' drains in its own budget
(``DrainBudget.observe``): one drain budget fleet-wide (models/oncall/drain_ledger.py states the bound when two
workers decide at once). A record it cannot read is logged and skipped: the topic is written by workers only
(stepwatch/acls.py).
"""

from __future__ import annotations

import asyncio
import logging

from stepwatch.models.oncall.drain_ledger import FLUSH_SECONDS, TOPIC, DrainRecord

log = logging.getLogger("stepwatch.worker.drain_ledger")


def apply_record(budget, value: bytes | None) -> bool:
    """One ledger record into ``budget`` (a ``DrainBudget``): True when it counted something new.
    ``ValueError``: not a ledger record."""
    return budget.observe(DrainRecord.decode(value))


def take_records(budget) -> list[DrainRecord]:
    """The drain records waiting in ``budget.outbox``, which is emptied."""
    out = list(budget.outbox)
    budget.outbox.clear()
    return out


def install_drain_ledger(app, engine, settings) -> None:
    """Write this worker's drains to the ledger topic and count every other worker's (see the module doc)."""
    from .topic_reader import read_topic_forever

    kafka = settings.kafka
    topic = kafka.topic(TOPIC)

    def budget():  # looked up at each use, as the releases reader does (the rule may be made again)
        return engine.oncall.rule("drain_budget").budget

    def handle(record) -> None:
        try:
            if apply_record(budget(), record.value):
                log.info("drain ledger: %s drained by another worker, counted", record.key)
        except ValueError as exc:
            log.warning("ignored a drain ledger record: %s", exc)

    def create() -> None:
        from stepwatch.security import client_config
        from stepwatch.topics import create_topics

        create_topics(kafka.bootstrap, [], 1, replication_factor=kafka.replication_factor, compacted=[topic],
                      timeout=10, client_config=client_config(settings))

    @app.task
    async def drain_ledger_reader() -> None:
        try:
            await asyncio.get_running_loop().run_in_executor(None, create)
        except Exception as exc:  # an existing topic: read it all the same
            log.info("could not create %s: %s", topic, exc)
        await read_topic_forever(settings, topic, handle, what="drain ledger reader")

    @app.task
    async def drain_ledger_writer() -> None:
        from aiokafka import AIOKafkaProducer

        from stepwatch.security import client_config

        producer = None
        while True:
            await asyncio.sleep(FLUSH_SECONDS)
            gate = budget()
            if not gate.outbox:
                continue
            records = take_records(gate)
            try:
                if producer is None:
                    producer = AIOKafkaProducer(bootstrap_servers=kafka.bootstrap.split(","), linger_ms=10,
                                                acks="all", **client_config(settings))
                    await producer.start()
                for record in records:
                    await producer.send(topic, key=record.node.encode(), value=record.encode())
                await producer.flush()
            except asyncio.CancelledError:
                gate.outbox.extendleft(reversed(records))
                raise
            except Exception as exc:  # the broker away: sent again at the next flush (the budget here counts them)
                gate.outbox.extendleft(reversed(records))
                log.warning("drain ledger: could not write %d record(s) yet: %r", len(records), exc)
                if producer is not None:
                    try:
                        await producer.stop()
                    except Exception:  # silent: dropped, a new one next time (the failure is logged above)
                        pass
                producer = None
