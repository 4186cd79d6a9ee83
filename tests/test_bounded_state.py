"""Bounded state that never silences an alert (issue 27 findings 4 and 6).

The engine's job cap (``retention.max_jobs``) evicts the least recently active job *without* an open
alert: a flood of new job ids cannot resolve a hung job's alert as "state evicted". The jobs are an
LRU (an ``OrderedDict`` moved on every event), so a new job costs a bounded number of probes, not a
scan of every job (counted here, not timed).
"""

from __future__ import annotations

import dataclasses

from stepwatch.config import RetentionSettings, Settings
from stepwatch.models.engine import DetectionEngine
from stepwatch.models.events import parse_event

T0 = 1_764_000_000.0


def hung_engine(max_jobs: int) -> tuple[DetectionEngine, float]:
    settings = dataclasses.replace(Settings(), retention=RetentionSettings(max_jobs=max_jobs))
    engine = DetectionEngine(settings)
    for step in range(30):
        for rank in range(4):
            engine.process(parse_event({"v": 1, "kind": "step", "job": "hung", "rank": rank, "step": step,
                                        "ts": T0 + step, "step_time": 1.0}))
        engine.tick(T0 + step)
    now = T0 + 30 + settings.hang.timeout_seconds + 60
    fired = engine.tick(now)
    assert [(a.type, a.status) for a in fired if a.job == "hung"] == [("hang", "firing")]
    return engine, now


def test_new_job_ids_do_not_evict_a_hung_job():
    engine, now = hung_engine(max_jobs=100)
    out = []
    for i in range(10_001):  # finding 4: one message with 10,001 new job ids
        out.extend(engine.process(parse_event({"v": 1, "kind": "phase", "job": f"new-{i}", "ts": now,
                                               "phase": "train"})))
    assert "hung" in engine.jobs and len(engine.jobs) == 100
    assert [a for a in out if a.job == "hung"] == []  # not resolved "state evicted"
    assert [a.type for a in engine.open_alerts() if a.job == "hung"] == ["hang"]
    assert engine.jobs_refused == 0  # the others, without alerts, made room


def test_a_cap_full_of_alerting_jobs_refuses_the_new_one_and_counts_it():
    engine, now = hung_engine(max_jobs=1)
    assert engine.process(parse_event({"v": 1, "kind": "phase", "job": "new", "ts": now, "phase": "train"})) == []
    assert list(engine.jobs) == ["hung"] and engine.jobs_refused == 1


def test_a_new_job_costs_a_bounded_number_of_probes(monkeypatch):
    """Work per new job at the cap, counted as jobs looked at (open-alert probes, ``last_seen`` reads):
    a full scan (the old ``min`` over every job) would look at all 2000 for each of the 4000 new jobs."""
    from stepwatch.models.engine import JobState

    engine = DetectionEngine(dataclasses.replace(Settings(), retention=RetentionSettings(max_jobs=2000)))
    looked = []
    original = DetectionEngine._job_open_alerts
    monkeypatch.setattr(DetectionEngine, "_job_open_alerts", staticmethod(lambda job: looked.append(1) or original(job)))
    slot = JobState.__dict__["last_seen"]
    monkeypatch.setattr(JobState, "last_seen", property(lambda job: looked.append(1) or slot.__get__(job, JobState),
                                                        lambda job, value: slot.__set__(job, value)))
    for i in range(6000):
        engine.process(parse_event({"v": 1, "kind": "phase", "job": f"j{i}", "ts": T0 + i, "phase": "train"}))
    assert len(engine.jobs) == 2000 and list(engine.jobs)[0] == "j4000"  # least recently active went first
    assert len(looked) <= 2 * 4000  # the probe and the evicted job's alerts: O(1) per new job
