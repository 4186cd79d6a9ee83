"""The aiokafka events consumer component (streams/events_consumer.py) in memory, no broker: an in-memory consumer
stands for aiokafka's (its getmany, commits, rebalance listener). Whatever the batches and the rebalances, every
record of an owned partition reaches the road once, in order, before its offset is committed; a revoked
partition is forgotten and its reads dropped; nothing is handed on while a recovery runs (the broker runs:
tests/streams/test_worker_kafka.py, test_decoder_kafka.py)."""

from __future__ import annotations

import asyncio
import random
from typing import NamedTuple

from stepwatch.config import Settings
from stepwatch.streams.decoder import Decoder
from stepwatch.streams.events_consumer import EventsConsumer

TOPIC = "events"
SETTINGS = Settings.from_env({"KAFKA_BOOTSTRAP": "127.0.0.1:9", "STEPWATCH_WORKER_COMMIT_INTERVAL": "0"})
WAIT = 30.0  # a bound on waiting for a condition (never reached when the component works)


class TP(NamedTuple):
    topic: str
    partition: int


class Record(NamedTuple):
    topic: str
    partition: int
    offset: int
    key: bytes
    value: bytes


class MemoryConsumer:
    """aiokafka's consumer as the component uses it, over in-memory partitions."""

    def __init__(self, partitions: int) -> None:
        self.log = {TP(TOPIC, p): [] for p in range(partitions)}
        self.fetched = {tp: 0 for tp in self.log}
        self.offsets: dict[TP, int] = {}  # committed
        self.commits = asyncio.Event()  # set at each commit
        self.assigned: set[TP] = set()
        self.listener = None
        self.arrived = asyncio.Event()
        self.getmany_calls = 0
        self.stopped = False

    def append(self, partition: int, n: int) -> None:
        tp = TP(TOPIC, partition)
        start = len(self.log[tp])
        self.log[tp].extend(Record(TOPIC, partition, start + i, b"j", b"%d" % (start + i)) for i in range(n))
        self.arrived.set()

    async def start(self) -> None:
        pass

    def subscribe(self, topics, listener) -> None:
        self.listener = listener

    async def assign(self, partitions: set[int]) -> None:
        """A rebalance: the group takes the partitions not in ``partitions`` away and gives these."""
        new = {TP(TOPIC, p) for p in partitions}
        if self.assigned:
            await self.listener.on_partitions_revoked(sorted(self.assigned))
        self.assigned = new
        for tp in new:  # a new owner starts from the committed offset
            self.fetched[tp] = self.offsets.get(tp, 0)
        await self.listener.on_partitions_assigned(sorted(new))

    async def getmany(self, timeout_ms: int, max_records: int):
        self.getmany_calls += 1
        out = {}
        for tp in sorted(self.assigned):
            records = self.log[tp][self.fetched[tp]:self.fetched[tp] + max_records]
            if records:
                out[tp] = records
                self.fetched[tp] += len(records)
        if not out and timeout_ms:
            self.arrived.clear()
            try:  # getmany's own wait for records (the broker's long poll)
                await asyncio.wait_for(self.arrived.wait(), timeout_ms / 1000)
            except asyncio.TimeoutError:
                pass
        return out

    async def commit(self, offsets) -> None:
        self.offsets.update(offsets)
        self.commits.set()

    async def committed(self, tp):
        return self.offsets.get(tp)

    def assignment(self):
        return set(self.assigned)

    def highwater(self, tp):
        return len(self.log[tp])

    def partitions_for_topic(self, topic):
        return {tp.partition for tp in self.log}

    def seek(self, tp, offset) -> None:
        self.fetched[tp] = offset

    async def stop(self) -> None:
        self.stopped = True


class Road:
    """The worker's road as the component sees it: ``drive(source, stage)``, recovery and forgetting."""

    def __init__(self) -> None:
        self.reads: list = []
        self.recovered: list[set[int]] = []
        self.forgotten: list[set[int]] = []
        self.changes = 0
        self.progress = asyncio.Event()
        self.recovery_gate = asyncio.Event()
        self.recovery_gate.set()

    async def drive(self, source, stage: str) -> None:
        async for read in source:
            self.reads.append(read)
            self.progress.set()

    async def recover(self, partitions: set[int]) -> None:
        self.recovered.append(partitions)
        await self.recovery_gate.wait()

    def forget(self, partitions: set[int]) -> None:
        self.forgotten.append(partitions)

    def changed(self) -> None:
        self.changes += 1

    def values(self, partition: int) -> list[bytes]:
        return [r.value for read in self.reads for r in read.messages if r.partition == partition]


def consumer_for(memory: MemoryConsumer, road: Road, allowed: asyncio.Event | None = None) -> EventsConsumer:
    return EventsConsumer(SETTINGS, topic=TOPIC, group_id="g-events", drive=road.drive, recover=road.recover,
                          forget=road.forget, allowed=allowed or asyncio.Event(), decoder=Decoder(0, 256),
                          assignment_changed=road.changed, consumer_factory=lambda: memory,
                          faust_offsets=lambda partitions: {})


async def settle(memory: MemoryConsumer, counts: dict[int, int]) -> None:
    """Until every partition's records are handed on and committed (woken by each commit; bounded by ``WAIT``)."""
    async def done() -> None:
        while not all(memory.offsets.get(TP(TOPIC, p), 0) == n for p, n in counts.items()):
            memory.commits.clear()
            await memory.commits.wait()
    await asyncio.wait_for(done(), WAIT)


async def turns(condition, limit: int = 10_000) -> None:
    """Let the loop run until ``condition()`` (at most ``limit`` turns: no time passes)."""
    for _ in range(limit):
        if condition():
            return
        await asyncio.sleep(0)
    raise AssertionError("condition not met")


async def started(part: EventsConsumer, memory: MemoryConsumer, partitions: set[int]) -> None:
    """``part`` started, with ``partitions`` assigned by the group."""
    start = asyncio.ensure_future(part.start())
    await turns(lambda: memory.listener is not None)  # subscribed (start's first awaits)
    await memory.assign(partitions)
    await start


def test_every_record_reaches_the_road_once_in_order_then_is_committed():
    async def run(seed: int) -> None:
        rng = random.Random(seed)
        memory, road, allowed = MemoryConsumer(3), Road(), asyncio.Event()
        allowed.set()
        part = consumer_for(memory, road, allowed)
        await started(part, memory, {0, 1, 2})
        assert part.ready() and part.owned() == {0, 1, 2} and road.recovered == [{0, 1, 2}]
        counts = {0: 0, 1: 0, 2: 0}
        for _ in range(rng.randrange(3, 12)):
            p, n = rng.randrange(3), rng.randrange(1, 2500)  # more than one getmany's worth at times
            memory.append(p, n)
            counts[p] += n
        await settle(memory, counts)
        for p, n in counts.items():
            assert road.values(p) == [b"%d" % i for i in range(n)]  # once each, in order
        assert list(part.lag()) == [(TOPIC, p, 0) for p in range(3) if counts[p]]  # read to the end
        await part.stop()
        assert memory.stopped

    for seed in range(4):
        asyncio.run(run(seed))


def test_a_revoked_partition_is_forgotten_and_its_reads_dropped():
    async def run() -> None:
        memory, road, allowed = MemoryConsumer(2), Road(), asyncio.Event()
        allowed.set()
        part = consumer_for(memory, road, allowed)
        await started(part, memory, {0, 1})
        memory.append(0, 5)
        memory.append(1, 5)
        await settle(memory, {0: 5, 1: 5})
        changes = road.changes
        await memory.assign({0})  # partition 1 goes to another worker (eager: all revoked, then 0 given back)
        assert road.forgotten == [{0, 1}] and road.recovered[-1] == {0} and part.owned() == {0}
        assert road.changes == changes + 2  # the registry advertises both moves
        memory.log[TP(TOPIC, 1)].extend(Record(TOPIC, 1, 5 + i, b"j", b"x") for i in range(3))  # not ours now
        memory.append(0, 2)
        await settle(memory, {0: 7})
        assert road.values(1) == [b"%d" % i for i in range(5)]
        await part.stop()

    asyncio.run(run())


def test_nothing_is_handed_on_while_a_recovery_runs():
    async def run() -> None:
        memory, road, allowed = MemoryConsumer(1), Road(), asyncio.Event()
        allowed.set()
        part = consumer_for(memory, road, allowed)
        await started(part, memory, {0})
        road.recovery_gate.clear()  # the next assignment's recovery waits
        rebalance = asyncio.ensure_future(memory.assign({0}))
        await turns(lambda: len(road.recovered) == 2)
        memory.append(0, 4)
        for _ in range(200):  # many turns of the loop: without the recovery's lock they would be handed on
            await asyncio.sleep(0)
        assert road.reads == [] and not part.ready()
        road.recovery_gate.set()
        await rebalance
        await settle(memory, {0: 4})
        assert road.values(0) == [b"%d" % i for i in range(4)] and part.ready()
        await part.stop()

    asyncio.run(run())
