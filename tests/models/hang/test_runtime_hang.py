"""Hang thresholds changed at run time (config topic semantics, no Kafka needed)."""

from __future__ import annotations

import pytest

from stepwatch.config import Settings
from stepwatch.models.detection import DetectionEngine
from stepwatch.models.wire.events import parse_event
from stepwatch.runtime_config import GLOBAL, RuntimeConfig, encode, parse_assignments


def feed_then_stall(engine: DetectionEngine, job: str, *, steps: int = 20) -> float:
    for step in range(steps):
        for rank in range(4):
            engine.process(parse_event({"v": 1, "kind": "step", "job": job, "rank": rank, "step": step,
                                        "ts": 1000.0 + step, "step_time": 1.0, "compute_time": 0.8}))
    return 1000.0 + steps


def test_a_job_hang_timeout_set_at_run_time_takes_effect_on_its_running_detector():
    engine = DetectionEngine()
    runtime = RuntimeConfig(Settings())
    last = feed_then_stall(engine, "j")
    assert [a for t in range(1, 100) for a in engine.tick(last + t) if a.severity == "critical"] == []
    runtime.apply(engine, "j", encode(parse_assignments(["hang.timeout_seconds=120"])))
    assert engine.jobs["j"].hang.timeout_seconds == 120
    critical = [a for t in range(100, 130) for a in engine.tick(last + t) if a.severity == "critical"]
    assert critical and critical[0].type == "hang"
    runtime.apply(engine, "j", None)  # tombstone: back to the default
    assert engine.jobs["j"].hang.timeout_seconds == 600.0  # the default (config.HangSettings), written out


def test_global_hang_override_reaches_jobs_without_their_own_and_new_jobs():
    engine = DetectionEngine()
    runtime = RuntimeConfig(Settings())
    feed_then_stall(engine, "a")
    runtime.apply(engine, "b", encode(parse_assignments(["hang.warning_factor=3"])))
    runtime.apply(engine, GLOBAL, encode(parse_assignments(["hang.timeout_seconds=300"])))
    feed_then_stall(engine, "b")
    feed_then_stall(engine, "c")
    assert engine.jobs["a"].hang.timeout_seconds == 300
    assert engine.jobs["c"].hang.timeout_seconds == 300  # created after the change
    assert (engine.jobs["b"].hang.timeout_seconds, engine.jobs["b"].hang.warning_factor) == (300, 3)
    assert runtime.as_dict()["effective_default"]["hang"]["timeout_seconds"] == 300


@pytest.mark.parametrize("item, message", [
    ("hang.step_history=10", "can only be set at start-up (STEPWATCH_HANG_STEP_HISTORY)"),
    ("hang.timeout_seconds=0", r"hang.timeout_seconds=0.0: expected more than 0"),
    ("hang.nonsense=1", "unknown setting hang.nonsense"),
])
def test_unusable_hang_settings_are_refused(item, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        RuntimeConfig(Settings()).apply(DetectionEngine(), "j", encode(parse_assignments([item])))
