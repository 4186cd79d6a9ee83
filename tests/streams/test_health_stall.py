"""/health sees a stalled consumer (issue 44 row 13 and item 6): messages waiting and none consumed for
``STALL_SECONDS`` make it say degraded (503 on the page), and the next consumed message makes it ok again.
The clock is passed in; the live broker-side checks: tests/streams/test_broker_away.py."""

from __future__ import annotations

import random

from stepwatch.models.detection import DetectionEngine
from stepwatch.streams.metrics import STALL_SECONDS, WorkerMetrics


def _metrics():
    metrics = WorkerMetrics(DetectionEngine())
    state = {"lag": 0}
    metrics.ready_source = lambda: True
    metrics.lag_source = lambda: [("events", 0, state["lag"])]
    return metrics, state


def test_lag_that_grows_with_nothing_consumed_is_degraded_until_a_message_is_consumed():
    metrics, state = _metrics()
    now = 1000.0
    for second in range(0, int(STALL_SECONDS) + 10, 5):
        state["lag"] = 100 + 40 * second  # producers go on, the worker does not
        health = metrics.health(now=now + second)
        assert (health["status"] == "degraded") == (second >= STALL_SECONDS), (second, health)
    assert health["stalled_seconds"] >= STALL_SECONDS and health["lag"] == state["lag"]
    metrics.messages.inc()  # progress
    health = metrics.health(now=now + STALL_SECONDS + 20)
    assert health["status"] == "ok" and "stalled_seconds" not in health


def test_stalled_exactly_when_behind_without_progress_for_the_whole_window():
    rng = random.Random(13)
    for _ in range(200):
        metrics, state = _metrics()
        now, since, last_consumed = 0.0, 0.0, None  # the first look starts the watch
        for _ in range(rng.randint(1, 40)):
            now += rng.choice([0.5, 5.0, 20.0, 45.0])
            if rng.random() < 0.3:
                metrics.messages.inc(rng.randint(1, 5))
            state["lag"] = rng.choice([0, 0, 3, 500])
            consumed = metrics.registry.get_sample_value("stepwatch_messages_consumed_total")
            if consumed != last_consumed or state["lag"] == 0:  # the reference: when did it last move on
                since, last_consumed = now, consumed
            expected = state["lag"] > 0 and now - since >= STALL_SECONDS
            health = metrics.health(now=now)
            assert (health["status"] == "degraded") == expected, (now, since, health)


def test_not_consuming_yet_is_starting_not_stalled():
    metrics, state = _metrics()
    metrics.ready_source = lambda: False
    state["lag"] = 10_000
    for second in range(0, 200, 20):
        assert metrics.health(now=float(second))["status"] == "starting"
