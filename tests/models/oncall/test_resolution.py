"""Why an alert resolved (``evidence.resolution``, models/resolution.py; issue 26 item 8): a raised
threshold, the job's end and a forgotten job say so instead of "back in line with its peers".
Recordings from tests/step_gen.py (not the simulator)."""

from __future__ import annotations

import dataclasses

from step_gen import SyncJob
from stepwatch.config import Settings
from stepwatch.models.detection import DetectionEngine
from stepwatch.models.wire.events import parse_event

JOB = "res-8"


def drive(engine: DetectionEngine, events: list[dict], *, at_step=None, action=None) -> list:
    """Feed the events, ticking on their clock each second; ``action(engine)`` once the job reaches ``at_step``."""
    out, next_tick, done = [], None, False
    for raw in events:
        if action is not None and not done and raw.get("step", -1) >= at_step:
            action(engine)
            done = True
        out.extend(engine.process(parse_event(raw)))
        if next_tick is None or engine.clock >= next_tick:
            out.extend(engine.tick(engine.clock))
            next_tick = engine.clock + 1.0
    return out


def short(alerts) -> list:
    return [a for a in alerts if a.type == "straggler" and a.evidence.get("horizon") == "short"]


def slow_job(**kw) -> SyncJob:
    return SyncJob(job=JOB, ranks=8, steps=160, slow_rank=5, slow_factor=1.39, slow_from=20, **kw)


def test_a_raised_threshold_resolves_with_the_reason_not_back_in_line():
    engine = DetectionEngine()
    raise_it = lambda e: e.apply_settings(JOB, dataclasses.replace(e.straggler_settings(JOB), ratio_threshold=1.5))
    alerts = short(drive(engine, slow_job().events(), at_step=60, action=raise_it))
    assert [a.status for a in alerts] == ["firing", "resolved"], [a.summary for a in alerts]
    fired, resolved = alerts
    assert fired.ranks == (5,) and fired.evidence["ratio_threshold"] == 1.1
    ev = resolved.evidence
    assert ev["resolution"] == "threshold_changed"
    assert ev["resolution_detail"] == "straggler.ratio_threshold 1.1 -> 1.5"
    assert 1.3 <= ev["recent_ratio"] <= 1.45
    assert "threshold changed" in resolved.summary and "still 1.3" in resolved.summary
    assert "back in line" not in resolved.summary.split(" (")[0]


def test_a_rank_that_recovers_resolves_as_recovered():
    alerts = short(drive(DetectionEngine(), slow_job(slow_until=70).events()))
    assert [a.status for a in alerts] == ["firing", "resolved"]
    assert alerts[1].evidence["resolution"] == "recovered" and "back in line" in alerts[1].summary


def test_the_end_of_the_job_and_a_forgotten_job_say_so():
    events = slow_job().events()
    end = {"v": 1, "kind": "phase", "job": JOB, "ts": events[-1]["ts"] + 0.5, "phase": "end"}
    alerts = drive(DetectionEngine(), events + [end])
    resolved = [a for a in alerts if a.status == "resolved"]
    assert resolved and all(a.evidence["resolution"] == "job_ended" for a in resolved), \
        [(a.type, a.evidence.get("resolution")) for a in resolved]
    assert any(a.type == "straggler" for a in resolved)

    engine = DetectionEngine(Settings())
    alerts = drive(engine, events)
    assert any(a.status == "firing" and a.type == "straggler" for a in alerts)
    later = engine.tick(engine.clock + engine.settings.retention.job_idle_seconds + 60)
    gone = [a for a in later if a.status == "resolved" and a.job == JOB]
    assert gone and all(a.evidence["resolution"] == "forgotten" for a in gone)
    assert all("state evicted" in a.summary for a in gone)
