"""The issue-26 scenarios of the labelled library (stepwatch/sim/scenarios.py, stepwatch/sim/scenario_recordings.py)
and the root-cause scoring of bench/quality.py: labels, recordings, and a scorer that can say no."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from stepwatch.models.wire.events import decode_message
from stepwatch.sim import scenarios
from stepwatch.sim.scenario_recordings import Pipeline, Restart, pipeline_p2p, restart_onto_spare

REPO = Path(__file__).resolve().parents[2]
NEW = ("hang-teardown-64", "restart-spare-64", "pipeline-p2p-slow-stage-32", "healthy-pipeline-p2p-32",
       "fabric-switch-4jobs")


def _quality():
    spec = importlib.util.spec_from_file_location("bench_quality_rc", REPO / "bench" / "quality.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_the_new_scenarios_are_registered_and_labelled_with_their_root_cause():
    got = {s.name: s for s in scenarios.suite(["root-cause"])}
    assert set(got) == set(NEW)
    kinds = {p.root_cause["kind"] for s in got.values() for p in s.problems}
    assert kinds == {"hang_culprit", "lost_node", "fabric", "stage_compute"}
    fabric = got["fabric-switch-4jobs"]
    assert len(fabric.specs) == 4 and len({n for spec in fabric.specs for n in map(spec.node_of, range(64))}) == 32
    [switch, *jobs] = fabric.problems
    assert switch.alert_type == "fabric" and len(switch.nodes) == 16 and switch.root_cause["switch"] == "leaf-01"
    assert [p.job for p in jobs] == [fabric.specs[0].job, fabric.specs[1].job] and all(p.nodes == () for p in jobs)
    assert {id(p.root_cause) for p in fabric.problems} == {id(switch.root_cause)}  # one cause, counted together


def test_restart_recording_dies_restarts_from_the_checkpoint_on_the_spare():
    r = Restart(seed=3)
    events = [e for _, batch in restart_onto_spare(r) for e in batch]
    steps = [e for e in events if e["kind"] == "step"]
    before = [e for e in steps if e["node"] != r.spare and e["ts"] < r.start + r.die_at * 1.1]
    assert max(e["step"] for e in before) == r.die_at - 1
    on_spare = {e["rank"] for e in steps if e["node"] == r.spare}
    assert on_spare == set(range(40, 48)) and min(e["step"] for e in steps if e["node"] == r.spare) == r.checkpoint + 1
    fresh = [e for e in events if e["kind"] == "heartbeat" and e["seq_completed"] == 0 and e["step"] == r.checkpoint]
    assert len(fresh) == r.ranks
    for _, batch in restart_onto_spare(r):  # valid on the wire
        assert decode_message(json.dumps({"v": 1, "kind": "batch", "events": batch}).encode())[1] == []


def test_pipeline_recording_slows_the_receives_after_the_slow_rank_not_the_transfers():
    def recv_wait(slow: bool, rank: int) -> float:
        p = Pipeline(slow_rank=11 if slow else None, steps=100, onset=50, seed=1)
        return sum(e["duration"] for _, batch in pipeline_p2p(p) for e in batch
                   if e["kind"] == "collective" and e["op"] == "recv" and e["rank"] == rank
                   and e["ts"] > p.start + 60 * 0.8)

    # rank 19 (stage 2 of replica 3) receives from the slow rank 11: it waits longer; replica 0's does not
    assert recv_wait(True, 19) > 1.1 * recv_wait(False, 19)
    assert recv_wait(True, 16) == pytest.approx(recv_wait(False, 16), rel=0.05)


def _alert(id, type, job="j", status="firing", ranks=(), nodes=(), t=100.0, **evidence):
    return {"id": id, "type": type, "job": job, "status": status, "ranks": list(ranks), "nodes": list(nodes),
            "starts_at": t, "summary": "", "evidence": {"action": {"kind": "none"}, **evidence}}


def _problem(kind, **cause):
    return {"type": "t", "alert_type": "hang", "job": "j", "ranks": [21], "onset_ts": 50.0, "end_ts": 500.0,
            "detail": {}, "root_cause": {"id": "x", "kind": kind, **cause}}


def test_the_root_cause_scorer_says_no_when_the_diagnosis_drifts():
    q = _quality()
    culprit = _problem("hang_culprit", ranks=[21])
    kept = _alert("h", "hang", culprits=[{"rank": 21}], torn_down={"count": 63})
    dropped = _alert("h", "hang", culprits=[{"rank": r} for r in range(21)])  # the teardown replaced the culprit
    assert q._right_root_cause(culprit, [kept]) is True
    assert q._right_root_cause(culprit, [kept, dropped]) is False
    lost = _problem("lost_node", node="node-005", spare="spare-1")
    hang = _alert("h", "hang", culprits=[{"rank": 40, "node": "node-005"}])
    assert q._right_root_cause(lost, [hang, _alert("r", "job_restart", cause="lost_node")]) is True
    assert q._right_root_cause(lost, [hang, _alert("r", "job_restart", cause="hang_culprit")]) is False
    assert q._right_root_cause(lost, [hang, _alert("s", "node_suspect", job="", nodes=["spare-1"])]) is False
    fab = dict(_problem("fabric", switch="leaf-01"), alert_type="fabric", detail={"jobs": ["j"]})
    incident = _alert("f", "fabric", job="", nodes=["n1", "n2"], switch="leaf-01")
    cites = _alert("c", "comm_slowdown", incident="f")
    assert q._right_root_cause(fab, [incident, cites]) is True
    assert q._right_root_cause(fab, [incident, _alert("c", "comm_slowdown", nodes=["n1"], incident="f")]) is False
    assert q._right_root_cause(fab, [_alert("f", "fabric", job="", switch=None), cites]) is False
    drain = _alert("l", "link_errors", job="", nodes=["n1"])
    drain["evidence"]["action"] = {"kind": "drain_node"}
    assert q._right_root_cause(fab, [incident, cites, drain]) is False
    stage = dict(_problem("stage_compute", ranks=[11]), alert_type="straggler")
    slow = _alert("s", "straggler", ranks=[11])
    assert q._right_root_cause(stage, [slow]) is True
    assert q._right_root_cause(stage, [slow, _alert("c", "comm_slowdown")]) is False
    assert q._right_root_cause(stage, [slow, _alert("t", "throughput_drop", layer="communication")]) is False
    with pytest.raises(ValueError):
        q._right_root_cause(_problem("bogus"), [])


@pytest.mark.parametrize("name", ["hang-teardown-64", "restart-spare-64"])
def test_teardown_and_restart_through_the_replay_tell_their_root_cause_in_one_alert(name, tmp_path):
    result = _quality().run_one(name, str(tmp_path))
    [p] = result["problems"]
    assert p["detected"] and p["right_root_cause"] is True and p["ids"] == 1, p
    assert result["false_alarms"] == []
