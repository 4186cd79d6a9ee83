"""On-call outlet: scope and action on every alert, job attribution, job_restart, node ledger (issue 16).

Pure core, no broker: fleet recordings from tests/fleet.py (a generator written for these
tests) replayed through the detection engine.
"""

from __future__ import annotations

import dataclasses
import json
import re

import orjson
import pytest

from stepwatch.models.registry import type_classes
from stepwatch.config import OnCallSettings, Settings
from stepwatch.models.oncall.actions import ACTION_KINDS, FAILURE_CLASSES, SCOPES, Classifier
from stepwatch.models.alerts import Alert
from engine_driver import replay
from stepwatch.models.detection import DetectionEngine
from stepwatch.models.wire.events import parse_event
from stepwatch.models.wire.step_columns import decode_message_columns
from stepwatch.models.oncall.ledger import Incident, NodeLedger

from fleet import Job, agent_reports, job_events, merge, xid_event

T0 = 1_764_000_000.0


def run(events: list[dict], settings: Settings | None = None, engine: DetectionEngine | None = None) -> list[dict]:
    return [a.to_dict() for a in replay((parse_event(e) for e in events), settings=settings, engine=engine)]


def fleet(*jobs: Job, extra: list[dict] | None = None) -> list[dict]:
    """The jobs' events, with their nodes' agents reporting before them (only agents speak for nodes)."""
    return merge(agent_reports(*jobs), *(job_events(j) for j in jobs), *([extra] if extra else []))


def firing(alerts: list[dict], kind: str) -> list[dict]:
    return [a for a in alerts if a["type"] == kind and a["status"] == "firing"]


# -- node ledger --------------------------------------------------------------------------------


def test_node_culprit_in_two_jobs_gives_one_node_suspect_naming_both():
    a = Job("job-a", ["n1", "n2", "n3"], slow_node="n2")
    b = Job("job-b", ["n2", "n4", "n5"], slow_node="n2", start=T0 + 400)
    c = Job("job-c", ["n6", "n7"], start=T0 + 30)  # healthy, on other nodes
    alerts = run(fleet(a, b, c))
    stragglers = firing(alerts, "straggler")
    assert {s["job"] for s in stragglers} == {"job-a", "job-b"} and {s["nodes"][0] for s in stragglers} == {"n2"}
    suspects = firing(alerts, "node_suspect")
    assert len({s["id"] for s in suspects}) == 1
    s = suspects[-1]
    assert s["nodes"] == ["n2"] and s["job"] == "" and s["severity"] == "warning"
    assert s["labels"]["scope"] == "device"
    assert [j["job"] for j in s["evidence"]["jobs"]] == ["job-a", "job-b"]
    # the slow rank is GPU 0 of n2: rank 4 in job-a (third..sixth ranks on n2), rank 0 in job-b
    assert {j["job"]: j["ranks"] for j in s["evidence"]["jobs"]} == {"job-a": [4], "job-b": [0]}
    assert {i["job"] for i in s["evidence"]["incidents"]} == {"job-a", "job-b"}
    assert {i["id"] for i in s["evidence"]["incidents"]} == {x["id"] for x in stragglers}
    # The ladder (models/oncall/ladder.py): job-b still runs on n2 and reports no checkpoints (a restart's cost
    # unknown), so its owner is told; the drain waits until it has moved off (tests/models/oncall/test_ladder.py).
    assert s["evidence"]["action"] == {"kind": "notify_owner", "nodes": ["n2"], "retryable": False,
                                       "exclude_nodes": []}
    assert s["evidence"]["decision"]["step"] == "notify_owner" and "job-b" in s["evidence"]["decision"]["jobs_on_node"]


def test_node_implicated_once_is_not_suspect():
    a = Job("job-a", ["n1", "n2", "n3"], slow_node="n2")
    b = Job("job-b", ["n4", "n5", "n6"], start=T0 + 400)
    alerts = run(fleet(a, b))
    assert len(firing(alerts, "straggler")) == 1
    assert firing(alerts, "node_suspect") == []


def test_same_node_twice_in_one_job_is_not_suspect():
    # two episodes in one job: one job, not two
    a = Job("job-a", ["n1", "n2", "n3"], slow_node="n2", steps=200, slow_until=70, slow_again=130)
    alerts = run(job_events(a))
    assert len({a["id"] for a in firing(alerts, "straggler")}) == 2
    assert firing(alerts, "node_suspect") == []


def test_healthy_fleet_has_no_incidents():
    jobs = [Job(f"job-{i}", [f"n{2 * i}", f"n{2 * i + 1}"], start=T0 + 37 * i) for i in range(4)]
    alerts = run(fleet(*jobs))
    assert [a for a in alerts if a["type"] in ("node_suspect", "straggler", "job_restart", "gpu_fault")] == []


def test_xid79_on_a_running_job_names_the_job_and_drains_the_node():
    c = Job("job-c", ["n6", "n7"], start=T0)
    alerts = run(fleet(c, extra=[xid_event("n7", 1, 79, T0 + 40.0)]))
    faults = firing(alerts, "gpu_fault")
    assert len(faults) == 1
    f = faults[0]
    assert f["evidence"]["jobs"] == [{"job": "job-c", "ranks": [5]}]  # GPU 1 of n7: rank 5
    assert "job-c" in f["summary"]
    action = f["evidence"]["action"]
    assert action["kind"] in ("drain_node", "reset_gpu") and action["retryable"] is False
    assert action["exclude_nodes"] == ["n7"]
    assert f["labels"]["scope"] == "device" and f["evidence"]["failure_class"] == "xid_79_off_bus"
    assert f["annotations"]["recommended_action"].startswith("GPU fell off the bus")
    # non-recoverable: node_suspect at once, critical, though only one job was hit
    suspects = firing(alerts, "node_suspect")
    assert len(suspects) == 1 and suspects[0]["severity"] == "critical" and suspects[0]["nodes"] == ["n7"]


def test_fault_before_the_job_is_republished_when_a_job_starts_on_the_node():
    late = Job("job-late", ["n6", "n7"], start=T0 + 60)
    alerts = run(fleet(late, extra=[xid_event("n7", 1, 79, T0 + 50.0)]))
    faults = firing(alerts, "gpu_fault")
    assert len({f["id"] for f in faults}) == 1 and len(faults) == 2
    assert faults[0]["evidence"]["jobs"] == []
    assert faults[1]["evidence"]["jobs"] == [{"job": "job-late", "ranks": [5]}]


# -- restarts -----------------------------------------------------------------------------------


def restart_job() -> Job:
    return Job("job-r", ["n1", "n2"], crash_at=90, resume_at=61, downtime=120.0, lost=[(3, 50), (5, 91)])


def expected_restart(events: list[dict]) -> tuple[float, int, int]:
    """By hand: the first event that goes back, its rank's previous event, the highest step before."""
    last: dict[int, float] = {}
    high = -1
    for e in events:
        if e.get("kind") != "step" or e["job"] != "job-r":
            continue
        if high >= 0 and e["step"] <= high - 2:
            return e["ts"] - last[e["rank"]], high - e["step"] + 1, e["rank"]
        high = max(high, e["step"])
        last[e["rank"]] = e["ts"]
    raise AssertionError("no restart in the recording")


def check_restart(alerts: list[dict], events: list[dict]) -> None:
    restarts = [a for a in alerts if a["type"] == "job_restart"]
    assert [a["status"] for a in restarts] == ["firing", "resolved"]
    assert restarts[0]["id"] == restarts[1]["id"]
    downtime, recomputed, rank = expected_restart(events)
    ev = restarts[0]["evidence"]
    assert recomputed == 30
    assert ev["steps_recomputed"] == recomputed and ev["reporting_rank"] == rank
    assert ev["downtime_seconds"] == pytest.approx(downtime, abs=1e-3)
    assert 120 < ev["downtime_seconds"] < 130
    # 8 ranks x (downtime + 30 steps of ~1 s)
    assert ev["gpu_hours_lost"] == pytest.approx(8 * (downtime + 30 * ev["step_time"]) / 3600, rel=1e-3)
    assert restarts[0]["labels"]["scope"] == "job" and restarts[0]["severity"] == "warning"
    assert restarts[1]["ends_at"] - restarts[0]["starts_at"] == pytest.approx(downtime, abs=1e-3)
    assert "preceding_alert" in ev and "failure_class" in ev


def background() -> list[dict]:
    """A healthy job alongside: its events move the replay's clock through the other's silence."""
    return job_events(Job("job-bg", ["n5", "n6"], steps=260))


def test_restart_from_checkpoint_is_a_job_restart():
    events = merge(job_events(restart_job()), background())
    alerts = run(events)
    check_restart(alerts, events)
    ev = [a for a in alerts if a["type"] == "job_restart"][0]["evidence"]
    # the job was silent for 120 s: the hang rule fired first, and is named as the reason
    assert ev["preceding_alert"]["type"] == "hang"
    assert ev["failure_class"].startswith("hang_")


def test_restart_after_xid_names_the_fault():
    job = restart_job()
    events = merge(job_events(job), background(), [xid_event("n2", 2, 79, T0 + 94.0)])
    alerts = run(events)
    check_restart(alerts, events)
    ev = [a for a in alerts if a["type"] == "job_restart"][0]["evidence"]
    assert ev["preceding_alert"]["type"] == "gpu_fault" and ev["failure_class"] == "xid_79_off_bus"
    # a lone job replayed: no clock moves through its silence, no hang fired; the restart is still seen
    alone = run(job_events(restart_job()))
    assert [a["evidence"]["preceding_alert"] for a in alone if a["type"] == "job_restart"] == [None, None]


def test_restart_seen_the_same_through_batch_envelopes():
    events = job_events(restart_job())
    engine = DetectionEngine(Settings())
    alerts = []
    runs: list[list[dict]] = []  # consecutive events of one step: one envelope, as rank-side batching sends
    for e in events:
        if runs and e.get("kind") == "step" and runs[-1][0].get("step") == e["step"]:
            runs[-1].append(e)
        else:
            runs.append([e])
    for group in runs:
        if group[0].get("kind") != "step":
            alerts.extend(engine.process(parse_event(group[0])))
            continue
        cols, rejected = decode_message_columns(orjson.dumps({"v": 1, "kind": "batch", "events": group}))
        assert not rejected and cols is not None
        alerts.extend(engine.process_batch(cols))
        alerts.extend(engine.tick(max(x["ts"] for x in group)))
    restarts = [a.to_dict() for a in alerts if a.type == "job_restart"]
    assert len(restarts) == 2
    downtime, recomputed, _ = expected_restart(events)
    assert restarts[0]["evidence"]["steps_recomputed"] == recomputed == 30
    assert restarts[0]["evidence"]["downtime_seconds"] == pytest.approx(downtime, abs=0.05)


def test_late_and_reordered_events_are_not_restarts():
    job = Job("job-l", ["n1", "n2"])
    events = job_events(job)
    steps = [e for e in events if e.get("kind") == "step"]
    # a few events of old steps arrive much later (stamped with their own, earlier, time)
    late = [dict(steps[10]), dict(steps[200])]
    events = events[:-1] + late + events[-1:]
    alerts = run(events)
    assert [a for a in alerts if a["type"] == "job_restart"] == []


# -- every alert ---------------------------------------------------------------------------------


def test_every_alert_has_scope_onset_action_and_sentence():
    a = Job("job-a", ["n1", "n2", "n3"], slow_node="n2")
    b = Job("job-b", ["n2", "n4", "n5"], slow_node="n2", start=T0 + 400)
    r = dataclasses.replace(restart_job(), name="job-r2", nodes=["n8", "n9"], start=T0 + 200)
    alerts = run(fleet(a, b, r, extra=[xid_event("n9", 0, 48, T0 + 250.0)]))
    assert {x["type"] for x in alerts} >= {"straggler", "node_suspect", "job_restart", "gpu_fault", "hang"}
    for x in alerts:
        assert x["labels"]["scope"] in SCOPES, x
        ev = x["evidence"]
        assert isinstance(ev["onset_ts"], float) and ev["onset_ts"] <= x["starts_at"] + 1e-6
        assert set(ev["action"]) == {"kind", "nodes", "retryable", "exclude_nodes"}
        assert ev["action"]["kind"] in ACTION_KINDS and isinstance(ev["action"]["retryable"], bool)
        assert ev["failure_class"] in FAILURE_CLASSES
        assert x["annotations"]["recommended_action"].endswith(".")
    straggler = firing(alerts, "straggler")[0]
    # about (detected - first) steps of ~1 s before it was detected
    assert straggler["starts_at"] - straggler["evidence"]["onset_ts"] > 1.0


def alert(kind: str, **evidence) -> Alert:
    return Alert(id="x", status="firing", type=kind, severity="warning", job="j" if kind != "gpu_fault" else "",
                 ranks=(1,), nodes=("n1",), starts_at=100.0, summary=kind, evidence=evidence)


@pytest.mark.parametrize(("evidence", "cls", "kind", "retryable"), [
    ({"fault": "xid", "xid": 79}, "xid_79_off_bus", "drain_node", False),
    ({"fault": "xid", "xid": 74}, "xid_74_nvlink", "reset_gpu", False),
    ({"fault": "xid", "xid": 48}, "xid_48_dbe", "reset_gpu", False),
    ({"fault": "xid", "xid": 63}, "xid_63_row_remap", "reset_gpu", True),
    ({"fault": "xid", "xid": 64}, "xid_64_row_remap_failure", "replace_gpu", False),
    ({"fault": "xid", "xid": 94}, "xid_94_contained_ecc", "restart_job", True),
    ({"fault": "xid", "xid": 95}, "xid_95_uncontained_ecc", "reset_gpu", False),
    ({"fault": "xid", "xid": 31}, "app_xid", "fix_application", False),
    ({"fault": "xid", "xid": 999}, "xid_other", "investigate", False),
    ({"fault": "ecc_dbe"}, "ecc_dbe", "reset_gpu", False),
    ({"fault": "nvlink_down"}, "nvlink_down", "drain_node", False),
    ({"fault": "throttle", "reasons": ["HW thermal slowdown"]}, "thermal_throttle", "investigate", False),
    ({"fault": "throttle", "reasons": ["SW power cap"]}, "power_throttle", "investigate", False),
])
def test_gpu_fault_classes(evidence, cls, kind, retryable):
    out = Classifier(types=type_classes()).annotate(alert("gpu_fault", **evidence))
    assert out.evidence["failure_class"] == cls
    assert out.evidence["action"]["kind"] == kind and out.evidence["action"]["retryable"] is retryable


def test_causes_hang_cases_and_unknown_types():
    c = Classifier(types=type_classes())
    cause = {"rank": 1, "category": "network", "node": "n9", "component": "mlx5_0/1", "hint": "x",
             "evidence": [{"signal": "symbol_error"}]}
    s = c.annotate(alert("straggler", suspected_causes=[cause]))
    assert s.evidence["failure_class"] == "link_errors" and s.scope == "platform"
    assert s.evidence["action"]["nodes"] == ["n1", "n9"]
    cause["evidence"] = [{"signal": "port_xmit_wait"}]
    assert c.annotate(alert("straggler", suspected_causes=[cause])).evidence["failure_class"] == "network_congestion"
    assert c.annotate(alert("straggler", signal="data_time")).evidence["failure_class"] == "input_pipeline"
    assert c.annotate(alert("hang", case="silent_ranks")).evidence["failure_class"] == "hang_silent_ranks"
    assert c.annotate(alert("link_errors", state="DOWN")).evidence["failure_class"] == "link_down"
    new = c.annotate(alert("some_new_type"))
    assert new.evidence["action"]["kind"] == "investigate" and new.scope == "job"
    assert c.annotate(alert("imbalance")).evidence["action"]["kind"] == "repartition"


def test_a_rules_own_remedy_survives_the_annotation():
    """The imbalance rule says what to do (which stages to move layers out of; or that the ranks are of different
    classes); the annotation sets the failure class's kind, nodes and retry, keeps the rule's words as the
    action's detail, and is idempotent."""
    c = Classifier(types=type_classes())
    placement = {"kind": "placement", "detail": "per-rank straggler alerts now compare ranks within their class"}
    once = c.annotate(alert("imbalance", action=placement))
    assert once.evidence["action"] == {"kind": "repartition", "nodes": [], "retryable": True,
                                       "exclude_nodes": [], "detail": placement["detail"]}
    assert c.annotate(once).evidence == once.evidence
    mine = Classifier(types=type_classes(), overrides={"imbalance": {"kind": "investigate"}}).annotate(alert("imbalance", action=placement))
    assert mine.evidence["action"]["kind"] == "investigate" and mine.evidence["action"]["detail"] == placement["detail"]
    assert "detail" not in c.annotate(alert("straggler")).evidence["action"]


def test_failure_classes_overridable_in_configuration(tmp_path):
    table = {"xid_79_off_bus": {"kind": "replace_gpu"}, "my_class": {"scope": "platform", "kind": "check_link"},
             "types": {"some_new_type": "my_class"}}
    path = tmp_path / "classes.json"
    path.write_text(json.dumps(table))
    settings = Settings.from_env({"STEPWATCH_ONCALL_FAILURE_CLASSES": f"@{path}"})
    engine = DetectionEngine(settings)
    c = engine.oncall.classifier
    assert c.annotate(alert("gpu_fault", fault="xid", xid=79)).evidence["action"]["kind"] == "replace_gpu"
    assert c.annotate(alert("some_new_type")).scope == "platform"
    with pytest.raises(ValueError):
        Classifier(types=type_classes(), overrides={"xid_79_off_bus": {"kind": "reboot_the_world"}})
    with pytest.raises(ValueError):
        DetectionEngine(Settings.from_env({"STEPWATCH_ONCALL_FAILURE_CLASSES": "{not json"}))


# -- the ledger alone ------------------------------------------------------------------------------


def incident(node: str, ident: str, job: str, at: float, cls: str = "straggler_unexplained") -> Incident:
    return Incident(node=node, id=ident, type="straggler", job=job, starts_at=at, failure_class=cls,
                    jobs=((job, (0,)),))


def test_ledger_window_and_resolution():
    ledger = NodeLedger(window_seconds=3600.0, min_jobs=2)
    assert ledger.add(incident("n1", "a", "j1", 0.0)) == (True, [])
    assert ledger.add(incident("n1", "a", "j1", 0.0)) == (False, [])  # the same alert again
    # the second job comes after the first incident left the window: still one job
    ledger.tick(4000.0)
    assert ledger.add(incident("n1", "b", "j2", 4000.0))[1] == []
    new, fired = ledger.add(incident("n1", "c", "j3", 4500.0))
    assert new and len(fired) == 1 and fired[0].status == "firing"
    assert [j["job"] for j in fired[0].evidence["jobs"]] == ["j2", "j3"]
    assert ledger.tick(4500.0 + 3599.0) == []  # j3's incident is still in the window
    resolved = ledger.tick(4500.0 + 3601.0)
    assert len(resolved) == 1 and resolved[0].status == "resolved" and resolved[0].id == fired[0].id


def test_ledger_rebuilt_from_its_records_keeps_its_verdicts():
    """What a restarted worker does: read the incidents topic back into a fresh ledger."""
    first = NodeLedger(window_seconds=86_400.0)
    first.add(incident("n1", "a", "j1", 10.0))
    records = [json.loads(json.dumps(i.to_dict())) for k in first.incidents.values() for i in k.values()]
    second = NodeLedger(window_seconds=86_400.0)
    for r in records:
        second.add(Incident.from_dict(r))
    _, fired = second.add(incident("n1", "b", "j2", 20.0))
    assert len(fired) == 1 and {j["job"] for j in fired[0].evidence["jobs"]} == {"j1", "j2"}


def test_ledger_owner_publishes():
    ledger = NodeLedger(min_jobs=2)
    ledger.owns = lambda node: node != "n1"
    ledger.add(incident("n1", "a", "j1", 0.0))
    assert ledger.add(incident("n1", "b", "j2", 1.0))[1] == []  # another worker speaks for n1
    assert "n1" in ledger.open  # but the verdict is known here too


def test_oncall_settings_and_failure_classes_documented():
    from pathlib import Path

    ops = (Path(__file__).resolve().parents[3] / "docs" / "operations.md").read_text()
    for f in dataclasses.fields(OnCallSettings):
        var = f"STEPWATCH_ONCALL_{f.name.upper()}"
        assert var in ops or (f.name == "placement_topic" and "_PLACEMENT_TOPIC" in ops), var
    for name, fc in FAILURE_CLASSES.items():
        assert f"| `{name}` | {fc.scope} | `{fc.kind}` |" in ops, name


def test_prometheus_incident_metrics():
    from stepwatch.streams.metrics import WorkerMetrics

    r = dataclasses.replace(restart_job(), name="job-r")
    engine = DetectionEngine(Settings())
    metrics = WorkerMetrics(engine)
    a = Job("job-a", ["n1", "n3", "n4"], slow_node="n3", start=T0 + 300)
    b = Job("job-b", ["n3", "n5", "n6"], slow_node="n3", start=T0 + 500)
    events = merge(agent_reports(a, b, ts=T0 - 60), job_events(r), background(), job_events(a), job_events(b),
                   [xid_event("n2", 2, 79, T0 + 94.0)])
    alerts = list(replay((parse_event(e) for e in events), engine=engine))
    for x in alerts:
        metrics.alert_published(x)
    text = metrics.render().decode()
    restart = next(x for x in alerts if x.type == "job_restart")
    hang = [x for x in alerts if x.type == "hang" and x.job == "job-r" and x.status == "resolved"]
    assert hang  # the silence was a hang too, counted once (in the restart)
    lost = re.search(r'stepwatch_gpu_seconds_lost_total\{cause="xid_79_off_bus"\} (\S+)', text)
    assert float(lost.group(1)) == pytest.approx(restart.evidence["gpu_hours_lost"] * 3600, rel=1e-6)
    assert re.search(r'stepwatch_incident_duration_seconds_count\{scope="job",type="job_restart"\} 1.0', text)
    assert re.search(r'stepwatch_incident_duration_seconds_count\{scope="device",type="straggler"\} 2.0', text)
    assert re.search(r"^stepwatch_node_suspects 2.0$", text, re.M)  # n2 (Xid 79) and n3 (two jobs)
    assert not re.search(r'\{[^}]*\b(job|rank|node)="', text)  # no per-job, per-rank or per-node label
    assert "job-r" not in text and 'cause="' in text


def test_placement_shared_between_two_engines_names_the_job_on_a_fault():
    """What two workers do through the placement topic: the job's owner writes its placement, the
    node's owner reads it, and its open fault is published again naming the job."""
    job_owner, node_owner = DetectionEngine(Settings()), DetectionEngine(Settings())
    c = Job("job-c", ["n6", "n7"], start=T0)
    for e in job_events(c)[:40]:
        job_owner.process(parse_event(e))
    fault = node_owner.process(parse_event(xid_event("n7", 1, 79, T0 + 5.0)))
    assert [a.evidence["jobs"] for a in fault if a.type == "gpu_fault"] == [[]]
    records = [json.loads(json.dumps(job_owner.oncall.placement.snapshot(j)))
               for j in sorted(job_owner.oncall.placement.changed)]
    assert [r["job"] for r in records] == ["job-c"]
    for r in records:
        node_owner.oncall.merge_placement(r)
    again = node_owner.oncall.finish([])
    faults = [a for a in again if a.type == "gpu_fault"]
    assert len(faults) == 1 and faults[0].id == fault[0].id and faults[0].status == "firing"
    assert faults[0].evidence["jobs"] == [{"job": "job-c", "ranks": [5]}]
    assert node_owner.oncall.finish([]) == []  # nothing new: not published again


def test_placement_records_that_add_ranks_on_a_known_node_republish_the_fault():
    node_owner = DetectionEngine(Settings())
    fault = node_owner.process(parse_event(xid_event("n7", 1, 79, T0 + 5.0)))[0]
    first = {"job": "j", "nodes": [{"node": "n7", "ranks": [[4, 0]], "last_ts": T0 + 6}]}
    node_owner.oncall.merge_placement(first)
    assert node_owner.oncall.finish([]) == []  # rank 4 is on GPU 0, not on the faulty GPU 1
    node_owner.oncall.merge_placement({"job": "j", "nodes": [{"node": "n7", "ranks": [[4, 0], [5, 1]],
                                                              "last_ts": T0 + 7}]})
    again = [a for a in node_owner.oncall.finish([]) if a.type == "gpu_fault"]
    assert [(a.id, a.evidence["jobs"]) for a in again] == [(fault.id, [{"job": "j", "ranks": [5]}])]
