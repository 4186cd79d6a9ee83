"""The telemetry feed's observable position (broker-free): what ``stepwatch_telemetry_feed_offset`` and
``stepwatch_telemetry_feed_lag`` report, the signal tests and operators wait on instead of sleeping."""

from __future__ import annotations

import orjson
from prometheus_client.parser import text_string_to_metric_families

from stepwatch.config import Settings
from stepwatch.models.detection import DetectionEngine
from stepwatch.streams.metrics import WorkerMetrics
from stepwatch.streams.telemetry_feed import TelemetryFeed


def gpu(node: str, ts: float) -> bytes:
    return orjson.dumps({"v": 1, "kind": "gpu", "node": node, "ts": ts, "gpu": 0, "temp_c": 61.0})


def take(feed: TelemetryFeed, partition: int, *values: bytes) -> None:
    """What the feed's thread does with one poll of a partition: queue the records, then move the position on."""
    for raw in values:
        feed._take(raw)
    feed.positions[partition] += len(values)


def test_the_position_moves_only_once_the_queue_was_emptied_and_applied():
    feed = TelemetryFeed(Settings())
    feed.positions, feed.highwater = {0: 0, 1: 0}, {0: 3, 1: None}
    take(feed, 0, gpu("n1", 1.0))
    events, read = feed.drain()
    assert [orjson.loads(m.value)["node"] for m in events] == ["n1"] and read == {0: 1, 1: 0}
    assert feed.applied == {}  # drained is not applied: the worker marks them after feeding its engine
    feed.mark_applied(read)
    assert list(feed.lag()) == [(0, 2)]  # partition 1: no end known yet, no lag reported

    take(feed, 0, gpu("n1", 2.0), gpu("n2", 2.0))
    events, read = feed.drain(limit=1)  # more queued than taken: no position to report yet
    assert len(events) == 1 and read is None
    feed.mark_applied(read)
    assert feed.applied == {0: 1, 1: 0}
    events, read = feed.drain()
    assert [orjson.loads(m.value)["node"] for m in events] == ["n2"] and read == {0: 3, 1: 0}
    feed.mark_applied(read)
    feed.highwater[1] = 0
    assert list(feed.lag()) == [(0, 0), (1, 0)]


def test_the_worker_metrics_expose_the_feed_position_and_lag():
    feed = TelemetryFeed(Settings())
    feed.applied, feed.highwater = {0: 5, 1: 7}, {0: 9, 1: 7}
    metrics = WorkerMetrics(DetectionEngine())
    metrics.telemetry_lag_source = feed.lag
    metrics.telemetry_offset_source = lambda: sorted(feed.applied.items())
    samples = {(f.name, s.labels["partition"]): s.value for f in text_string_to_metric_families(
        metrics.render().decode()) if f.name.startswith("stepwatch_telemetry_feed") for s in f.samples}
    assert samples == {("stepwatch_telemetry_feed_lag", "0"): 4.0, ("stepwatch_telemetry_feed_lag", "1"): 0.0,
                       ("stepwatch_telemetry_feed_offset", "0"): 5.0, ("stepwatch_telemetry_feed_offset", "1"): 7.0}
