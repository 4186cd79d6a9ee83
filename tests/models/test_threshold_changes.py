"""A raised threshold ends an open alert of the job-wide rules with that reason (issue 26 item 8):
``evidence.resolution = threshold_changed`` and a summary that says so, not "back to baseline" while the
condition still holds. Throughput drop and communication slowdown through the config path
(``RuntimeConfig.apply``, the ``job_health`` section, as a ``stepwatch config set`` message), stage
imbalance and rank classes at the rule. Recordings from tests/step_gen.py, tests/fabric_gen.py and
steps written here (not the simulator).
"""

from __future__ import annotations

import numpy as np
import pytest

from engine_driver import replay
from fabric_gen import Job, events as fabric_events
from step_gen import SyncJob
from stepwatch.config import Settings
from stepwatch.models.steps.assembly import GroupStep
from stepwatch.models.detection import DetectionEngine
from stepwatch.models.wire.events import parse_event
from stepwatch.models.steps.imbalance import ImbalanceDetector
from stepwatch.runtime_config import RuntimeConfig, encode, parse_assignments


def _with_change(events, step_of, at_step: int, engine, assignments: list[str], key: str):
    """The events, with ``stepwatch config set --job KEY ASSIGNMENTS`` applied once the job reaches ``at_step``."""
    runtime = RuntimeConfig(Settings())
    done = False
    for event in events:
        if not done and (step_of(event) or -1) >= at_step:
            runtime.apply(engine, key, encode(parse_assignments(assignments)))
            done = True
        yield event


def _of(alerts, kind):
    return [a for a in alerts if a.type == kind]


def _slow_job(**kw) -> list:
    job = SyncJob(job="tp-8", ranks=8, steps=220, jobwide_factor=1.3, jobwide_from=60, **kw)
    return [parse_event(e) for e in job.events()]


def test_a_throughput_drop_resolves_when_its_threshold_is_raised_past_it():
    engine = DetectionEngine()
    feed = _with_change(_slow_job(), lambda e: getattr(e, "step", None), 140, engine,
                        ["job_health.throughput_min_effect=0.5"], "tp-8")
    alerts = _of(list(replay(feed, engine=engine)), "throughput_drop")
    assert [a.status for a in alerts] == ["firing", "resolved"], [a.summary for a in alerts]
    fired, resolved = alerts
    assert fired.evidence["min_effect"] == 0.1
    ev = resolved.evidence
    assert ev["resolution"] == "threshold_changed"
    assert ev["resolution_detail"] == "job_health.throughput_min_effect 0.1 -> 0.5"
    assert 0.2 <= ev["recent_slowdown"] <= 0.4  # still ~30% slower
    assert resolved.summary.startswith("resolved: threshold changed") and "back to baseline" not in resolved.summary
    assert engine.job_health_settings("tp-8").throughput_min_effect == 0.5


def test_a_throughput_drop_that_ends_resolves_as_recovered():
    events = [e for e in _slow_job() if not (getattr(e, "step", 0) or 0) >= 150]  # the slowdown lasts to 150 ...
    back = [parse_event(e) for e in SyncJob(job="tp-8", ranks=8, steps=240, seed=5).events()]
    events += [e for e in back if (getattr(e, "step", 0) or 0) >= 150 and e.kind == "step"]  # ... back to normal
    alerts = _of(list(replay(events)), "throughput_drop")
    assert [a.status for a in alerts] == ["firing", "resolved"], [a.summary for a in alerts]
    assert alerts[1].evidence["resolution"] == "recovered" and "back to baseline" in alerts[1].summary


def test_a_lowered_threshold_leaves_the_alert_open():
    engine = DetectionEngine()
    feed = _with_change(_slow_job(), lambda e: getattr(e, "step", None), 140, engine,
                        ["job_health.throughput_min_effect=0.05"], "tp-8")
    alerts = _of(list(replay(feed, engine=engine)), "throughput_drop")
    assert [a.status for a in alerts] == ["firing"], [a.summary for a in alerts]


def test_a_comm_slowdown_resolves_when_its_threshold_is_raised_past_it():
    job = Job(name="net", fault="fabric", slow=1.6, seed=7, steps=200, onset=60)
    engine = DetectionEngine()
    feed = _with_change((ev for _, ev in fabric_events(job)), lambda e: getattr(e, "step", None), 130, engine,
                        ["job_health.comm_threshold=2.0"], "*")
    alerts = _of(list(replay(feed, engine=engine)), "comm_slowdown")
    keys = {a.id for a in alerts}
    assert [a for a in alerts if a.status == "firing"], "the slowdown fired before the change"
    resolved = [a for a in alerts if a.status == "resolved"]
    assert resolved and len(resolved) == len(keys), [a.summary for a in alerts]
    for a in resolved:
        assert a.evidence["resolution"] == "threshold_changed"
        assert a.evidence["resolution_detail"] == "comm.threshold 0.3 -> 2"
        assert a.evidence["recent_increase"] >= 0.3  # still slow: the threshold moved, not the network
        assert a.summary.startswith("resolved: threshold changed") and "back to baseline" not in a.summary


def test_bad_job_health_values_are_refused():
    with pytest.raises(ValueError, match="comm_window"):
        parse_assignments(["job_health.comm_window=0"])
    with pytest.raises(ValueError, match="start-up"):
        parse_assignments(["job_health.checkpoint_required=true"])


# -- imbalance, at the rule -----------------------------------------------------------------------


def _group_step(step: int, group: str, ranks: np.ndarray, compute: np.ndarray) -> GroupStep:
    n = len(ranks)
    nan = np.full(n, np.nan)
    return GroupStep(job="j", group=group, step=step, ts=1000.0 + step, ranks=ranks, step_time=np.full(n, 1.0),
                     compute_time=compute, comm_time=nan, data_time=nan, tokens=nan,
                     nodes=tuple(f"n{r // 4}" for r in ranks), phase="train")


def test_a_stage_imbalance_resolves_when_its_threshold_is_raised_past_it():
    rng = np.random.default_rng(3)
    detector = ImbalanceDetector(job="j")
    out = []
    for s in range(120):
        if s == 80:
            detector.reconfigure(stage_min_effect=1.0)
        for g in range(4):
            ranks = np.arange(8 * g, 8 * g + 8, dtype=np.int64)
            compute = 0.3 * (1.6 if g == 3 else 1.0) * (1.0 + 0.01 * rng.standard_normal(8))
            out.extend(detector.update(_group_step(s, str(g), ranks, compute)))
    stage = [a for a in out if a.evidence["kind"] == "stage"]
    assert [a.status for a in stage] == ["firing", "resolved"], [a.summary for a in stage]
    assert stage[1].evidence["resolution"] == "threshold_changed"
    assert stage[1].evidence["resolution_detail"] == "imbalance.stage_min_effect 0.1 -> 1"
    assert stage[1].summary.startswith("resolved: threshold changed")
    assert stage[1].ends_at - stage[0].starts_at < 80 - stage[0].evidence["steps"] + 20  # at once, not later


def test_rank_classes_resolve_when_the_class_gap_is_raised_past_them():
    rng = np.random.default_rng(4)
    detector = ImbalanceDetector(job="j")
    ranks = np.arange(16, dtype=np.int64)
    out = []
    for s in range(300):
        if s == 250:
            detector.reconfigure(class_gap=5.0)
        compute = 0.3 * np.where(ranks % 2 == 1, 3.0, 1.0) * (1.0 + 0.01 * rng.standard_normal(16))
        out.extend(detector.update(_group_step(s, "", ranks, compute)))
    assert [a.status for a in out] == ["firing", "resolved"], [a.summary for a in out]
    assert out[1].evidence["resolution"] == "threshold_changed" and out[1].ends_at == 1000.0 + 250
    assert out[1].evidence["resolution_detail"] == "imbalance.class_gap 1.5 -> 5"
