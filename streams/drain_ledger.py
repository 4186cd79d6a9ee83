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
from collections.abc import Callable

from stepwatch.models.oncall.drain_ledger import FLUSH_SECONDS, TOPIC, DrainRecord

from .component import Send

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


class DrainLedgerSync:
    """The worker's component (streams/component.py) for the ledger: a reader task (every record into the budget,
    ``on_record``) and a writer task (``flush`` every ``FLUSH_SECONDS``).

    ``budget()``: the engine's drain budget, looked up at each use (the rule may be made again, as the releases
    reader does); ``send``: one record to a topic, awaited until written (default: its own producer, ``acks=all``,
    made at the first flush and again after a failure).
    """

    def __init__(self, budget: Callable[[], object], settings, *, send: Send | None = None) -> None:
        self.settings, self._budget, self._send = settings, budget, send
        self.topic = settings.kafka.topic(TOPIC)
        self._producer = None  # the default ``send``'s

    def attach(self, app) -> None:
        app.task(self.read)
        app.task(self.write)

    def on_record(self, record) -> None:
        """One record of the ledger topic (``record.key``, ``record.value``): logged and skipped when unreadable."""
        try:
            if apply_record(self._budget(), record.value):
                log.info("drain ledger: %s drained by another worker, counted", record.key)
        except ValueError as exc:
            log.warning("ignored a drain ledger record: %s", exc)

    async def flush(self) -> int:
        """Send the drains waiting in the budget's outbox (the count); a failure puts them back for the next
        flush (the budget here counts them meanwhile) and is logged."""
        gate = self._budget()
        if not gate.outbox:
            return 0
        records = take_records(gate)
        try:
            send = self._send or self._own_send
            for record in records:
                await send(self.topic, record.node.encode(), record.encode())
            if self._send is None:
                await self._producer.flush()
        except asyncio.CancelledError:
            gate.outbox.extendleft(reversed(records))
            raise
        except Exception as exc:  # the broker away: sent again at the next flush
            gate.outbox.extendleft(reversed(records))
            log.warning("drain ledger: could not write %d record(s) yet: %r", len(records), exc)
            await self._drop_producer()
            return 0
        return len(records)

    async def read(self) -> None:
        """The reader task: the topic made (compacted) if it is not there, then read from its beginning, forever."""
        from .topic_reader import read_topic_forever

        try:
            await asyncio.get_running_loop().run_in_executor(None, self._create)
        except Exception as exc:  # an existing topic: read it all the same
            log.info("could not create %s: %s", self.topic, exc)
        await read_topic_forever(self.settings, self.topic, self.on_record, what="drain ledger reader")

    async def write(self) -> None:
        """The writer task."""
        while True:
            await asyncio.sleep(FLUSH_SECONDS)
            await self.flush()

    def _create(self) -> None:
        from stepwatch.security import client_config
        from stepwatch.topics import create_topics

        kafka = self.settings.kafka
        create_topics(kafka.bootstrap, [], 1, replication_factor=kafka.replication_factor, compacted=[self.topic],
                      timeout=10, client_config=client_config(self.settings))

    async def _own_send(self, topic: str, key: bytes, value: bytes | None) -> None:
        if self._producer is None:
            from aiokafka import AIOKafkaProducer

            from stepwatch.security import client_config

            producer = AIOKafkaProducer(bootstrap_servers=self.settings.kafka.bootstrap.split(","), linger_ms=10,
                                        acks="all", **client_config(self.settings))
            self._producer = producer  # stopped on a failure, started or not
            await producer.start()
        await self._producer.send(topic, key=key, value=value)

    async def _drop_producer(self) -> None:
        producer, self._producer = self._producer, None
        if producer is not None:
            try:
                await producer.stop()
            except Exception:  # silent: dropped, a new one next time (the failure is logged by ``flush``)
                pass
