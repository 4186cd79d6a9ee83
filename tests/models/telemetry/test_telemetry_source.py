"""The telemetry feed as a source (streams/telemetry_feed.py ``TelemetrySource``), broker-free: what its thread
queued goes through the pipeline on the telemetry topic's road at once (a job event there is dead-lettered with
the reason), its positions count as applied only after processing, and a backlog is drained without starving
the worker's other tasks (the events consumer, the group heartbeat)."""

from __future__ import annotations

import asyncio

import orjson

from stepwatch.config import Settings
from stepwatch.models.pipeline import Message, Pipeline
from stepwatch.models.sources import drive
from stepwatch.streams.telemetry_feed import TelemetryFeed, TelemetrySource

T0 = 1_764_000_000.0


class Capture:
    def __init__(self) -> None:
        self.alerts, self.deadletters, self.writes = [], [], 0

    async def write(self, out) -> None:
        self.writes += 1
        self.alerts.extend(out.alerts)
        self.deadletters.extend(out.deadletters)


def gpu(i: int) -> bytes:
    return orjson.dumps({"v": 1, "kind": "gpu", "node": "n1", "ts": T0 + i, "gpu": 0, "temp_c": 60.0})


def queued_feed(values: list[bytes]) -> TelemetryFeed:
    feed = TelemetryFeed(Settings())
    feed._stop.set()  # no thread, no broker: the test queues what the thread would have
    for offset, value in enumerate(values):
        feed._take(Message(value, b"n1", "telemetry", 0, offset))
    feed.positions[0] = len(values)
    return feed


async def until(condition) -> None:
    while not condition():
        await asyncio.sleep(0)


def test_queued_telemetry_takes_the_telemetry_road_and_is_marked_applied_after():
    step = orjson.dumps({"v": 1, "kind": "step", "job": "j", "rank": 0, "step": 1, "ts": T0, "step_time": 1.0})
    feed = queued_feed([gpu(0), step, gpu(1)])
    pipeline = Pipeline()
    marked_during = []

    class Watching(Capture):
        async def write(self, out) -> None:
            marked_during.append(dict(feed.applied))  # while this read is being published
            await Capture.write(self, out)

    sink = Watching()

    async def main() -> None:
        task = asyncio.ensure_future(drive(TelemetrySource(feed, lambda: {0}, 1), pipeline, sink, on_error=None))
        await until(lambda: feed.applied == {0: 3})
        task.cancel()

    asyncio.run(main())
    assert marked_during[0] == {}  # not applied before it was processed
    assert [(d.cause, d.message.offset) for d in sink.deadletters] == [("topic", 1)]
    assert "step" in sink.deadletters[0].rejected.reason and "telemetry" in sink.deadletters[0].rejected.reason
    assert pipeline.engine.events_by_kind["gpu"] == 2


def test_a_backlog_is_drained_without_starving_the_other_tasks():
    feed = queued_feed([gpu(i) for i in range(9_000)])  # 5 drains of at most 2,000
    pipeline, sink = Pipeline(), Capture()
    turns_between: list[int] = []

    async def main() -> None:
        other = {"turns": 0}

        async def events_consumer() -> None:  # another task of the worker's loop
            while True:
                other["turns"] += 1
                await asyncio.sleep(0)

        class Counting(Capture):
            async def write(self, out) -> None:
                turns_between.append(other["turns"])
                await Capture.write(self, out)

        nonlocal sink
        sink = Counting()
        busy = asyncio.ensure_future(events_consumer())
        task = asyncio.ensure_future(drive(TelemetrySource(feed, lambda: {0}, 1), pipeline, sink, on_error=None))
        await until(lambda: feed.applied == {0: 9_000})
        task.cancel()
        busy.cancel()

    asyncio.run(main())
    assert len(turns_between) >= 5
    assert all(b > a for a, b in zip(turns_between, turns_between[1:])), turns_between  # it ran between drains
    assert pipeline.engine.events_by_kind["gpu"] == 9_000
