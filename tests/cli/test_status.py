"""Status views, runtime settings and the Alertmanager payload, without Kafka."""

from __future__ import annotations

import dataclasses

import numpy as np
import orjson
import pytest

from stepwatch.config import Settings, StragglerSettings
from stepwatch.models.detection import DetectionEngine
from stepwatch.models.wire.events import HeartbeatEvent, PhaseEvent, StepEvent
from stepwatch.models.status import StatusRecorder, heatmap_view, job_view, jobs_view
from stepwatch.models.steps.straggler import StragglerDetector
from stepwatch.runtime_config import GLOBAL, RuntimeConfig, decode, encode, parse_assignments
from stepwatch.streams.alertmanager import am_alert
from stepwatch.streams.dashboard import render_dashboard

T0 = 1_700_000_000.0


def steps(job="j", ranks=16, n=40, slow_rank=5, slow_from=15, factor=1.4, per_node=8, seed=0, tokens=None):
    rng = np.random.default_rng(seed)
    for step in range(n):
        ts = T0 + step
        for rank in range(ranks):
            compute = 0.5 * (1 + 0.01 * rng.standard_normal())
            if rank == slow_rank and step >= slow_from:
                compute *= factor
            yield StepEvent(job=job, rank=rank, step=step, ts=ts, step_time=1.0, compute_time=compute,
                            node=f"node-{rank // per_node:03d}", tokens=tokens)


def run(events, settings=None):
    engine = DetectionEngine(settings or Settings())
    recorder = StatusRecorder(history=30).attach(engine)
    alerts = []
    for ev in events:
        recorder.observe(ev)
        alerts.extend(engine.process(ev))
    return engine, recorder, alerts


def test_job_views_name_the_straggler_with_its_ratio_and_rates():
    engine, recorder, alerts = run(steps(tokens=1000.0))
    assert [(a.status, a.ranks) for a in alerts] == [("firing", (5,))]
    now = T0 + 40
    [summary] = jobs_view(engine, recorder, now)
    assert summary["job"] == "j" and summary["ranks"] == 16 and summary["latest_step"] == 39
    assert summary["step_rate"] == pytest.approx(1.0)
    assert summary["tokens_per_second"] == pytest.approx(16 * 1000.0)
    assert summary["open_alerts"] == 1 and summary["alerts"][0]["ranks"] == [5]

    view = job_view(engine, recorder, "j", now, settings={"source": "default"})
    assert view["rank_count"] == 16 and len(view["ranks"]) == 16
    by_rank = {r["rank"]: r for r in view["ranks"]}
    assert by_rank[5]["ratio"] == pytest.approx(1.4, abs=0.05) and by_rank[5]["robust_z"] > 10
    assert by_rank[5]["alert"] == "straggler" and by_rank[5]["slow"] is True
    assert by_rank[3]["ratio"] == pytest.approx(1.0, abs=0.05) and by_rank[3]["alert"] is None
    assert by_rank[5]["step"] == 39 and by_rank[5]["last_event_age"] == pytest.approx(1.0)
    assert by_rank[5]["node"] == "node-000" and by_rank[5]["phase"] == "train"
    assert view["alerts"][0]["evidence"]["signal"] == "compute_time"
    assert view["detectors"][0]["settings"]["ratio_threshold"] == 1.10
    orjson.dumps(view)  # JSON-serializable as is
    assert job_view(engine, recorder, "nope", now) is None


def test_heatmap_has_the_stripe_and_marks_the_row():
    engine, recorder, _ = run(steps())
    view = heatmap_view(engine, recorder, "j", T0 + 40)
    assert view["level"] == "rank" and len(view["rows"]) == 16
    assert view["steps"] == sorted(view["steps"]) and len(view["steps"]) <= 30
    marked = [r for r in view["rows"] if r["marked"]]
    assert [r["ranks"] for r in marked] == [[5]] and marked[0]["mark"] == "straggler"
    stripe = [v for v in view["values"][5] if v is not None]
    assert min(stripe[-10:]) > 1.3 and max(v for v in view["values"][4] if v is not None) < 1.1
    orjson.dumps(view)


def test_heatmap_of_4096_ranks_aggregates_per_node_then_per_node_range():
    events = list(steps(job="big", ranks=4096, n=14, slow_rank=1234, slow_from=0, factor=1.5, per_node=8))
    engine, recorder, alerts = run(events, dataclasses.replace(
        Settings(), straggler=StragglerSettings(warmup_steps=2)))
    assert any(a.ranks == (1234,) for a in alerts)
    view = heatmap_view(engine, recorder, "big", T0 + 14, max_rows=256)
    assert view["rank_count"] == 4096 and view["level"] == "node-range" and len(view["rows"]) == 256
    [marked] = [i for i, r in enumerate(view["rows"]) if r["marked"]]
    row = view["rows"][marked]
    assert row["ranks"][0] <= 1234 <= row["ranks"][1] and row["marked_ranks"] == [1234]
    assert max(v for v in view["values"][marked] if v is not None) > 1.4  # max per row keeps the straggler
    per_node = heatmap_view(engine, recorder, "big", T0 + 14, max_rows=600)
    assert per_node["level"] == "node" and len(per_node["rows"]) == 512
    assert len(orjson.dumps(view)) < 300_000


def test_recorder_tracks_heartbeats_phases_and_stays_bounded():
    engine, recorder, _ = run(steps(n=80))
    for ev in [HeartbeatEvent(job="j", rank=3, ts=T0 + 100, step=79, phase="checkpoint"),
               PhaseEvent(job="j", ts=T0 + 100, phase="checkpoint")]:
        recorder.observe(ev)
        engine.process(ev)
    view = job_view(engine, recorder, "j", T0 + 101)
    by_rank = {r["rank"]: r for r in view["ranks"]}
    assert by_rank[3]["phase"] == "checkpoint" and by_rank[3]["last_event_age"] == pytest.approx(1.0)
    assert view["phase"] == "checkpoint"
    state = recorder.jobs["j"]
    assert len(state.steps) <= 30 and len(state.ratios) <= 30


def test_reconfigure_keeps_history_and_applies_new_thresholds():
    engine, recorder, alerts = run(steps(n=30))
    assert [a.status for a in alerts] == ["firing"]
    detector = engine.jobs["j"].stragglers[""]
    detector.reconfigure(window=8, evidence_window=10, min_flagged=4)
    verdicts = detector.window_verdicts(5)
    assert len(verdicts) == 8 and detector.evidence_window == 10
    assert verdicts.sum() == 5  # the last 5 verdicts were kept
    with pytest.raises(ValueError):
        detector.reconfigure(min_flagged=9)
    # A threshold above the straggler's ratio: it is clean from now on and resolves after clear_after.
    engine.apply_settings("j", dataclasses.replace(StragglerSettings(), ratio_threshold=1.6))
    assert detector.ratio_threshold == 1.6 and detector.window == 5
    later = [e for e in steps(n=45) if e.step >= 30]
    resolved = [a for e in later for a in engine.process(e)]
    assert [a.status for a in resolved] == ["resolved"]


def test_runtime_config_scopes_and_validation():
    assert parse_assignments(["straggler.ratio_threshold=1.2", "window=6"]) == {
        "straggler": {"ratio_threshold": 1.2, "window": 6}}
    for bad in (["straggler.nope=1"], ["hang.step_history=1"], ["telemetry.rate_factor=2"], ["straggler.window=x"],
                ["ratio_threshold"],
                ["straggler.min_flagged=9"], ["straggler.coincidence_p=0"], ["straggler.long_min_effect=-0.1"]):
        with pytest.raises(ValueError):
            parse_assignments(bad)
    assert parse_assignments(["straggler.long_min_effect=0.05", "straggler.holdoff_steps=50"]) == {
        "straggler": {"long_min_effect": 0.05, "holdoff_steps": 50}}
    assert decode(None) is None
    assert decode(encode({"straggler": {"z_threshold": 2.5}})) == {"straggler": {"z_threshold": 2.5}}
    with pytest.raises(ValueError):
        decode(b"{nope")

    engine, recorder, _ = run(steps(n=20))
    rc = RuntimeConfig(Settings())
    rc.apply(engine, GLOBAL, encode({"straggler": {"ratio_threshold": 1.3}}))
    rc.apply(engine, "other", encode({"straggler": {"z_threshold": 9.0}}))
    assert engine.jobs["j"].stragglers[""].ratio_threshold == 1.3
    assert rc.effective("other").ratio_threshold == 1.3 and rc.effective("other").z_threshold == 9.0
    assert rc.source("j") == "global" and rc.source("other") == "job"
    rc.apply(engine, "j", encode({"straggler": {"ratio_threshold": 2.0}}))
    assert engine.jobs["j"].stragglers[""].ratio_threshold == 2.0 and rc.source("j") == "job"
    with pytest.raises(ValueError):  # an unusable combination changes nothing
        rc.apply(engine, "j", encode({"straggler": {"min_flagged": 5, "window": 3}}))
    assert engine.jobs["j"].stragglers[""].ratio_threshold == 2.0 and rc.errors
    rc.apply(engine, "j", None)  # tombstone: back to the global value
    assert engine.jobs["j"].stragglers[""].ratio_threshold == 1.3 and rc.source("j") == "global"
    assert rc.as_dict()["global"] == {"straggler": {"ratio_threshold": 1.3}}


def test_alertmanager_payload_is_rfc3339_with_end_times():
    _, _, alerts = run(steps(n=30))
    firing = alerts[0]
    body = am_alert(firing, now=T0 + 100, resend_interval=60)
    # scope (device, platform, job: issue 16) is a label, for routing to the right on-call team
    assert body["labels"] == {"alertname": "stepwatch_straggler", "job": "j", "severity": firing.severity,
                              "source": "stepwatch", "alert_id": firing.id, "scope": "device"}
    assert body["annotations"]["recommended_action"].endswith(".")
    assert body["startsAt"].endswith("Z") and body["startsAt"].startswith("2023-11-14T22:")
    assert body["endsAt"] == "2023-11-14T22:19:00.000Z"  # now + 4 x resend interval: expires if we vanish
    assert body["annotations"]["ranks"] == "5" and "compute_time" in body["annotations"]["evidence"]
    resolved = am_alert(firing.resolved(at=T0 + 50), now=T0 + 100, resend_interval=60)
    assert resolved["endsAt"] == "2023-11-14T22:14:10.000Z"


def test_dashboard_page_is_self_contained_and_escapes_the_job():
    page = render_dashboard('evil</script><b>"x"')
    assert "</script><b>" not in page.split("<script>")[1].split("const POLL_MS")[0]
    assert "http://" not in page and "https://" not in page  # nothing fetched from elsewhere
    assert "src=" not in page
    assert "const JOB = null" in render_dashboard(None)


def test_engine_hands_its_verdict_listener_to_every_detector():
    seen = []
    engine = DetectionEngine(dataclasses.replace(Settings(), straggler=StragglerSettings(warmup_steps=0)))
    engine.verdict_listener = lambda detector, verdict: seen.append((detector.group, verdict.step))
    for ev in steps(n=8, ranks=8):
        engine.process(ev)
    assert seen == [("", s) for s in range(len(seen))] and len(seen) >= 4
    assert isinstance(engine.jobs["j"].stragglers[""], StragglerDetector)


def test_recorder_forgets_jobs_the_engine_evicted():
    engine, recorder, _ = run(steps(n=12))
    recorder.observe(PhaseEvent(job="gone", ts=T0, phase="train"))
    recorder.prune(engine.jobs)
    assert set(recorder.jobs) == {"j"}
