"""Sources and sinks (issue 25 item 1): every road is a source (models/sources.py), the one ``Pipeline`` and a
sink (models/sinks.py). The same messages give the same outputs from a list, from a recording, and on the live
road's loop (``drive``, what the worker runs for its consumers and the telemetry feed), and a failure of one
item on the live road is handed on, never ends the road, and releases a source's lock."""

from __future__ import annotations

import asyncio

import orjson

from stepwatch.models.pipeline import Pipeline, run_recording
from stepwatch.models.sinks import CapturingSink, drain
from stepwatch.models.sources import ListSource, Read, RecordingSource, Tick, drive, run

from fleet import Job, job_events

T0 = 1_764_000_000.0


def lines() -> list[bytes]:
    """A job whose rank on GPU 0 of n1 straggles, then goes silent without ending (a hang); one undecodable line."""
    events = job_events(Job("srcjob", ["n0", "n1"], steps=80, slow_node="n1", end=False, start=T0))
    out = [orjson.dumps(e) for e in events]
    out.insert(len(out) // 2, b"{not json")
    return out


def key(alert) -> tuple:
    return alert.id, alert.type, alert.status, alert.ranks


class AsyncCapture(CapturingSink):
    async def write(self, out) -> None:  # the AsyncSink protocol on the tests' capturing sink
        CapturingSink.write(self, out)


def test_a_list_a_recording_and_the_live_loop_give_the_same_outputs():
    messages = lines()
    ticks = [T0 + 85 + 5 * i for i in range(1, 40)]
    from_list = drain(run(ListSource(messages, per_read=7, ticks=ticks), Pipeline()), CapturingSink())
    live = AsyncCapture()
    asyncio.run(drive(ListSource(messages, per_read=7, ticks=ticks), Pipeline(), live, on_error=None))
    assert [key(a) for a in from_list.alerts] == [key(a) for a in live.alerts]
    assert [d.message.value for d in from_list.deadletters] == [b"{not json"]
    assert [d.message.value for d in live.deadletters] == [b"{not json"]
    types = {a.type for a in from_list.alerts}
    assert "straggler" in types, types

    # a recording on its own clock: the same alerts as run_recording (replay), which is this source
    pipeline = Pipeline()
    source = RecordingSource(messages, clock=lambda: pipeline.engine.clock, tick_interval=1.0, drain=120.0)
    items = []
    recorded = CapturingSink()
    for item in source:
        items.append(type(item))
        recorded.write(pipeline.take(item))
    replayed = drain(run_recording(Pipeline(), messages, tick_interval=1.0, drain=120.0), CapturingSink())
    assert [key(a) for a in recorded.alerts] == [key(a) for a in replayed.alerts]
    assert Read in items and Tick in items
    assert {a.type for a in recorded.alerts} >= {"straggler", "hang"}


def test_a_failing_item_is_handed_on_and_the_live_road_goes_on_with_the_source_closed():
    messages = lines()
    lock = asyncio.Lock()
    closed = []

    class Source:  # holds a lock across its items, as the aiokafka consumer's source does
        async def __aiter__(self):
            try:
                async with lock:
                    for lo in range(0, len(messages), 50):
                        yield Read(messages[lo:lo + 50], T0)
                    yield Tick(T0 + 400)
            finally:
                closed.append(True)

    class FlakySink(AsyncCapture):
        writes = 0

        async def write(self, out) -> None:
            self.writes += 1
            if self.writes == 2:
                raise RuntimeError("broker away")
            await AsyncCapture.write(self, out)

    failed = []
    sink = FlakySink()
    asyncio.run(drive(Source(), Pipeline(), sink, on_error=lambda item, exc: failed.append((type(item), str(exc)))))
    assert failed == [(Read, "broker away")]
    assert sink.writes == len(messages) // 50 + (len(messages) % 50 > 0) + 1  # every item, the tick too
    assert closed and not lock.locked()

    async def cancelled() -> bool:
        async def slow_source():
            async with lock:
                yield Read(messages[:1], T0)
                await asyncio.sleep(3600)
                yield Tick(T0)

        task = asyncio.ensure_future(drive(slow_source(), Pipeline(), AsyncCapture(), on_error=None))
        while not lock.locked():
            await asyncio.sleep(0)
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            pass  # silent: the cancellation this test asked for
        return lock.locked()

    assert asyncio.run(cancelled()) is False  # a stopped road leaves no lock held (the consumer's stop commits)
