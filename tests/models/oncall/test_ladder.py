"""The escalation ladder for slow nodes (issue 42, item 2): a straggler's action follows from its cost.

Driven through the engine (tests/engine_driver.py) on fleet recordings with checkpoint phase markers;
the decision's monotonicity on a generated sweep of the pure ``decide``.
"""

from __future__ import annotations

import dataclasses
import random

import pytest

from engine_driver import replay
from fleet import Job, agent_reports, job_events, merge
from stepwatch.models.oncall.ladder import ORDER, Basis, Figures, Rung, decide
from stepwatch.models.wire.events import parse_event
from stepwatch.models.wire.wire import InvalidEvent

T0 = 1_764_000_000.0
FIGURES = ("loss_gpu_hours", "cost_gpu_hours", "job_slowdown", "gpus", "horizon_seconds", "horizon_basis",
           "checkpoint_age_seconds", "restart_seconds", "restart_basis", "step", "reason")


def checkpoint(job: str, at: float, step: int) -> list[dict]:
    """A successful job-wide checkpoint: its phase markers (docs/events.md)."""
    return [{"v": 1, "kind": "phase", "job": job, "phase": "checkpoint", "ts": at, "step": step},
            {"v": 1, "kind": "phase", "job": job, "phase": "train", "ts": at + 1.0, "step": step}]


def straggler(*, checkpoint_at: float, total_steps: int | None = None) -> dict:
    """The firing straggler of a 16-GPU job whose rank on n2 runs 1.3x slow from step 40."""
    job = Job("job-a", ["n0", "n1", "n2", "n3"], steps=120, slow_node="n2", slow_factor=1.3, checkpoint_at=None)
    events = job_events(job)
    if total_steps is not None:
        events = [dict(e, total_steps=total_steps) if e["kind"] == "step" else e for e in events]
    stream = merge(agent_reports(job, ts=min(T0, checkpoint_at) - 60.0), events,
                   checkpoint("job-a", checkpoint_at, 28 if checkpoint_at > T0 else 0))
    alerts = [a for a in replay(parse_event(e) for e in stream) if a.type == "straggler" and a.status == "firing"]
    assert alerts and {tuple(a.nodes) for a in alerts} == {("n2",)}
    return alerts[0].to_dict()


def test_small_straggler_on_a_long_job_with_a_fresh_checkpoint_restarts_without_its_node():
    a = straggler(checkpoint_at=T0 + 30.0)
    ev = a["evidence"]
    assert ev["action"]["kind"] == "restart_job" and ev["action"]["exclude_nodes"] == ["n2"]
    d = ev["decision"]
    assert set(FIGURES) <= set(d) and d["step"] == "restart_job"
    assert d["loss_gpu_hours"] > d["cost_gpu_hours"] and d["checkpoint_age_seconds"] < 60.0
    assert d["horizon_basis"] == "setting" and d["restart_basis"] == "setting" and d["gpus"] == 16
    assert "without n2" in a["annotations"]["recommended_action"]


def test_the_same_straggler_after_a_checkpoint_3_hours_ago_does_not_restart():
    a = straggler(checkpoint_at=T0 - 3 * 3600.0)
    d = a["evidence"]["decision"]
    assert d["step"] != "restart_job" and a["evidence"]["action"]["kind"] == d["step"]
    assert a["evidence"]["action"]["exclude_nodes"] == []
    assert d["checkpoint_age_seconds"] > 3 * 3600.0 and d["cost_gpu_hours"] >= d["loss_gpu_hours"]


def test_the_same_straggler_on_a_job_ending_in_20_minutes_does_not_restart():
    a = straggler(checkpoint_at=T0 + 30.0, total_steps=1000)  # ~950 steps of ~1.3 s left: ~20 min
    d = a["evidence"]["decision"]
    assert d["horizon_basis"] == "total_steps" and 15 * 60 < d["horizon_seconds"] < 25 * 60
    assert d["step"] != "restart_job" and d["cost_gpu_hours"] >= d["loss_gpu_hours"]


@pytest.mark.parametrize("bad", [-1, 2.5, "many", True])
def test_a_bad_total_steps_is_refused_with_its_reason(bad):
    event = {"v": 1, "kind": "step", "job": "j", "rank": 0, "step": 1, "ts": T0, "step_time": 1.0,
             "total_steps": bad}
    with pytest.raises(InvalidEvent, match="total_steps"):
        parse_event(event)
    assert parse_event(dict(event, total_steps=500)).total_steps == 500


def test_the_decision_is_monotone_in_loss_and_cost():
    rng = random.Random(42)
    rank = ORDER.index
    for _ in range(2000):
        f = Figures(job_slowdown=1.0 + rng.uniform(0.0, 1.0), gpus=rng.choice((1, 8, 64, 1024)),
                    horizon_seconds=rng.uniform(60.0, 48 * 3600.0),
                    checkpoint_age_seconds=rng.choice((None, rng.uniform(0.0, 12 * 3600.0))),
                    restart_seconds=rng.uniform(0.0, 3600.0), job_on_node=rng.random() > 0.1,
                    horizon_basis=Basis.SETTING)
        notify = rng.choice((0.0, 1.0, 50.0))
        base = decide(f, notify_gpu_hours=notify)
        more_loss = (dataclasses.replace(f, job_slowdown=f.job_slowdown * rng.uniform(1.0, 2.0)),
                     dataclasses.replace(f, horizon_seconds=f.horizon_seconds * rng.uniform(1.0, 3.0)))
        for g in more_loss:
            assert rank(decide(g, notify_gpu_hours=notify).step) >= rank(base.step), (f, g)
        more_cost = [dataclasses.replace(f, restart_seconds=f.restart_seconds + rng.uniform(0.0, 3600.0))]
        if f.checkpoint_age_seconds is not None:
            more_cost.append(dataclasses.replace(f, checkpoint_age_seconds=f.checkpoint_age_seconds
                                                 + rng.uniform(0.0, 3600.0)))
        for g in more_cost:
            assert rank(decide(g, notify_gpu_hours=notify).step) <= rank(base.step), (f, g)
        moved_off = decide(dataclasses.replace(f, job_on_node=False), notify_gpu_hours=notify)
        assert moved_off.step is Rung.DRAIN


def test_a_node_suspect_drains_only_once_no_job_is_on_the_node():
    from stepwatch.models.detection import DetectionEngine

    a = Job("job-a", ["n1", "n2", "n3"], slow_node="n2")
    b = Job("job-b", ["n2", "n4", "n5"], slow_node="n2", start=T0 + 400)
    engine = DetectionEngine()
    alerts = list(replay((parse_event(e) for e in merge(agent_reports(a, b), job_events(a), job_events(b))),
                         engine=engine))
    suspect = [x for x in alerts if x.type == "node_suspect" and x.status == "firing"][-1]
    assert suspect.severity == "warning" and suspect.evidence["action"]["kind"] != "drain_node"
    assert "job-b" in suspect.evidence["decision"]["jobs_on_node"]
    engine.tick(engine.clock + engine.settings.oncall.placement_window_seconds + 1.0)  # the jobs are gone
    again = engine.oncall.gate([suspect])[0]
    d = again.evidence["decision"]
    assert d["step"] == "drain_node" and d["jobs_on_node"] == [] and not d["job_on_node"]
    assert again.evidence["action"]["exclude_nodes"] == ["n2"]
