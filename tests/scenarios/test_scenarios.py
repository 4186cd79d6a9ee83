"""The labelled scenario library (stepwatch/sim/scenarios.py) and the quality scorer (bench/quality.py)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest

from stepwatch.models.wire.events import decode_message
from stepwatch.sim import scenarios
from stepwatch.sim.simulator import (ClusterSimulator, DataStall, Drift, IntermittentStraggler, RampStraggler,
                                           SimulationSpec)

REPO = Path(__file__).resolve().parents[2]


def _load_quality():
    spec = importlib.util.spec_from_file_location("bench_quality", REPO / "bench" / "quality.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_suite_covers_the_problem_types_and_sizes():
    suite = scenarios.suite()
    names = [s.name for s in suite]
    assert len(names) == len(set(names))
    kinds = {p.type for s in suite for p in s.problems}
    for kind in ("straggler-5%", "straggler-10%", "straggler-30%", "straggler-2x", "intermittent",
                 "thermal-ramp", "dataloader-stall", "job-slowdown (network)", "job-slowdown (input pipeline)",
                 "job-slowdown (noisy neighbour, 6 of 8 nodes)", "noisy neighbour (1 node)", "checkpoint-stopped"):
        assert kind in kinds
    alert_types = {p.alert_type for s in suite for p in s.problems}
    assert {"straggler", "hang", "throughput_drop", "comm_slowdown", "checkpoint_stale"} <= alert_types
    layers = {p.detail.get("layer") for s in suite for p in s.problems if p.alert_type == "throughput_drop"}
    assert layers == {"communication", "compute", "input pipeline"}
    sizes = [spec.ranks for s in suite for spec in s.specs]
    assert min(sizes) == 8 and max(sizes) == 4096
    assert any(len(s.problems) >= 3 for s in suite) and any(len(s.specs) >= 2 for s in suite)
    assert sum(s.healthy for s in suite) >= 6
    for s in suite:
        for p in s.problems:
            spec = next(x for x in s.specs if x.job == p.job)
            assert all(0 <= r < spec.ranks for r in p.ranks)
            assert p.end_step is None or p.end_step > p.onset_step


def test_registry_is_extensible():
    name = "test-extra-scenario"

    def build():
        return scenarios.Scenario(name=name, description="x", specs=(SimulationSpec(job=name, ranks=8, steps=5),),
                                  tags=("healthy", "test-only"))

    scenarios.register(build)
    try:
        assert scenarios.get(name).name == name
        assert [s.name for s in scenarios.suite(["test-only"])] == [name]
        with pytest.raises(ValueError):
            scenarios.register(build)
    finally:
        scenarios._REGISTRY.pop(name)


def test_write_puts_labels_next_to_a_replayable_recording(tmp_path):
    recording, labels_path = scenarios.write(scenarios.get("multi-job-3"), tmp_path)
    assert recording.parent == labels_path.parent == tmp_path
    labels = json.loads(labels_path.read_text())
    assert labels["recording"] == recording.name and labels["healthy"] is False
    assert {j["job"] for j in labels["jobs"]} == {"mj-healthy-64", "mj-straggler-128", "mj-varlen-64"}
    p = next(p for p in labels["problems"] if p["job"] == "mj-straggler-128")
    assert p["type"] == "straggler-30%" and p["alert_type"] == "straggler" and p["ranks"] == [100]
    assert p["nodes"] == ["node-012"] and p["onset_step"] == 120 and p["end_step"] == 240
    # onset_ts is when step 120 started: every step-120 event ends one step_time after it.
    starts, prev_end, times = [], [], []
    for line in recording.read_bytes().splitlines():
        events, rejected = decode_message(line)
        assert not rejected
        for e in events:
            times.append(e.ts)
            if e.kind == "step" and e.job == p["job"] and e.step == 120:
                starts.append(e.ts - e.step_time)
            if e.kind == "step" and e.job == p["job"] and e.step == 119:
                prev_end.append(e.ts)
    assert p["onset_ts"] == pytest.approx(min(starts))
    assert min(prev_end) == pytest.approx(p["onset_ts"], abs=0.01)
    assert p["onset_ts"] < p["end_ts"] <= max(times)


def test_new_simulator_effects_do_what_they_say():
    base = dict(job="e", ranks=16, steps=60, jitter=0.0, gc_probability=0, hiccup_probability=0, warmup_steps=0,
                seed=3)

    def compute(spec, step, rank, field="compute_time"):
        for e in ClusterSimulator(spec).events():
            if e["kind"] == "step" and e["step"] == step and e["rank"] == rank:
                return e[field]

    flat = SimulationSpec(**base)
    ramp = SimulationSpec(**base, effects=(RampStraggler(rank=2, start_step=10, factor=1.4, ramp_steps=20),))
    assert compute(ramp, 9, 2) == pytest.approx(compute(flat, 9, 2))
    assert compute(ramp, 20, 2) == pytest.approx(1.2 * compute(flat, 20, 2), rel=1e-4)
    assert compute(ramp, 40, 2) == pytest.approx(1.4 * compute(flat, 40, 2), rel=1e-4)
    inter = IntermittentStraggler(rank=1, start_step=10, factor=1.5, burst=3, period=10, end_step=40)
    assert [inter.active(s) for s in (9, 10, 12, 13, 20, 22, 23, 40)] == [0, 1, 1, 0, 1, 1, 0, 0]
    stall = SimulationSpec(**base, effects=(DataStall(rank=4, start_step=5, seconds=0.3, end_step=8),))
    assert compute(stall, 6, 4, "data_time") == pytest.approx(compute(flat, 6, 4, "data_time") + 0.3, rel=1e-4)
    assert compute(stall, 6, 4) == pytest.approx(compute(flat, 6, 4))
    drift = Drift(amplitude=0.02, period_steps=40, node_phase_spread=0.0)
    c = drift.apply(10, np.ones(16), np.zeros(16), flat)[0]
    assert c == pytest.approx(np.full(16, 1.02))


def test_job_wide_causes_collective_events_and_stopped_checkpoints():
    from stepwatch.sim.simulator import CommSlowdown, InputStall, NoisyNeighbour

    base = dict(job="e", ranks=16, steps=40, warmup_steps=0, seed=4)

    def by_step(spec):
        steps, colls, phases = {}, {}, []
        for e in ClusterSimulator(spec).events():
            if e["kind"] == "step":
                steps.setdefault(e["step"], {})[e["rank"]] = e
            elif e["kind"] == "collective":
                colls.setdefault(e["step"], []).append(e)
            elif e["kind"] == "phase":
                phases.append((e["phase"], e.get("step")))
        return steps, colls, phases

    flat_steps, _, _ = by_step(SimulationSpec(**base))
    steps, colls, _ = by_step(SimulationSpec(**base, collective_events=True,
                                             effects=(CommSlowdown(start_step=20, factor=2.0),)))
    # Events of the job are unchanged before the fault, collectives aside.
    assert steps[10][3]["comm_time"] == flat_steps[10][3]["comm_time"]
    for step in (10, 30):
        cs = colls[step]
        assert len(cs) == 2 * 16 and sorted({c["seq"] for c in cs}) == [2 * step + 1, 2 * step + 2]
        assert {(c["op"], c["pg"], c["bytes"]) for c in cs} == {("all_reduce", "default", 25 * 2**20)}
        for rank in range(16):  # a rank's collectives add up to its comm_time
            total = sum(c["duration"] for c in cs if c["rank"] == rank)
            assert total == pytest.approx(steps[step][rank]["comm_time"], abs=1e-5)
    transfer = {s: sum(min(c["duration"] for c in colls[s] if c["seq"] == q) for q in (2 * s + 1, 2 * s + 2))
                for s in (10, 30)}
    assert transfer[30] == pytest.approx(2 * transfer[10], rel=0.1)  # the min over ranks is the transfer
    stalled, _, _ = by_step(SimulationSpec(**base, effects=(InputStall(start_step=20, seconds=0.3),)))
    assert all(0.24 <= stalled[30][r]["data_time"] - flat_steps[30][r]["data_time"] <= 0.36 for r in range(16))
    noisy, _, _ = by_step(SimulationSpec(**base, effects=(NoisyNeighbour(nodes=(1,), start_step=20, factor=1.5),)))
    assert noisy[30][9]["compute_time"] == pytest.approx(1.5 * flat_steps[30][9]["compute_time"], rel=1e-4)
    assert noisy[30][2]["compute_time"] == pytest.approx(flat_steps[30][2]["compute_time"])
    _, _, phases = by_step(SimulationSpec(**base, checkpoint_every=10, checkpoint_until=21))
    assert [s for p, s in phases if p == "checkpoint"] == [10, 20]


def test_scorer_counts_detections_false_alarms_and_ranks():
    q = _load_quality()
    labels = {"scenario": "s", "healthy": False,
              "jobs": [{"job": "j", "ranks": 10, "start_ts": 0.0, "end_ts": 3600.0, "step_time": 1.0}],
              "problems": [{"type": "straggler-30%", "alert_type": "straggler", "job": "j", "ranks": [3],
                            "onset_step": 100, "onset_ts": 100.0, "end_step": 200, "end_ts": 200.0,
                            "deadline_s": 60.0}]}

    def alert(i, t, ranks, status="firing", **ev):
        return {"id": str(i), "status": status, "type": "straggler", "job": "j", "ranks": ranks, "starts_at": t,
                "summary": "x", "evidence": ev}

    alerts = [alert(1, 50.0, [3]),  # before onset: false
              alert(2, 104.0, [3], detected_step=104), alert(2, 104.0, [3], status="resolved"),
              alert(3, 110.0, [7]),  # in the window, wrong rank
              alert(4, 500.0, [1])]  # long after: false
    res = q.score(labels, alerts)
    (p,) = res["problems"]
    assert p["detected"] and p["delay_s"] == 4.0 and p["delay_steps"] == 4
    assert (p["right_rank"], p["in_window"]) == (1, 2)
    assert len(res["false_alarms"]) == 2
    assert res["healthy_rank_hours"] == pytest.approx(10 - 100 / 3600)


def test_scorer_checks_the_layer_of_a_throughput_drop():
    q = _load_quality()
    labels = {"scenario": "s", "healthy": False,
              "jobs": [{"job": "j", "ranks": 8, "start_ts": 0.0, "end_ts": 3600.0, "step_time": 1.0}],
              "problems": [{"type": "job-slowdown (network)", "alert_type": "throughput_drop", "job": "j",
                            "ranks": [], "onset_step": 100, "onset_ts": 100.0, "end_step": 200, "end_ts": 200.0,
                            "deadline_s": 120.0, "detail": {"layer": "communication"}}]}
    drop = {"id": "1", "status": "firing", "type": "throughput_drop", "job": "j", "ranks": [], "starts_at": 105.0,
            "summary": "x", "evidence": {"layer": "compute", "detected_step": 105}}
    (p,) = q.score(labels, [drop])["problems"]
    assert p["detected"] and p["right_layer"] is False and p["delay_steps"] == 5
    drop["evidence"]["layer"] = "communication"
    (p,) = q.score(labels, [drop])["problems"]
    assert p["right_layer"] is True
    assert q.aggregate([q.score(labels, [drop])])["by_type"]["job-slowdown (network)"]["right_layer"] == 1


@pytest.mark.parametrize("name", ["straggler-30pct-8", "healthy-8"])
def test_quality_bench_runs_a_small_scenario_end_to_end(name, tmp_path):
    q = _load_quality()
    res = q.run_one(name, str(tmp_path))
    if name.startswith("healthy"):
        assert res["problems"] == [] and res["false_alarms"] == []
    else:
        assert res["problems"][0]["detected"] and res["problems"][0]["right_rank"] >= 1
    assert (tmp_path / f"{name}.labels.json").exists()


def test_scorer_checks_the_first_suspected_cause():
    q = _load_quality()
    cause = {"category": "host", "node": "node-002", "components": ["io_pressure", "nvme0n1"]}
    labels = {"scenario": "s", "healthy": False,
              "jobs": [{"job": "j", "ranks": 16, "start_ts": 0.0, "end_ts": 3600.0, "step_time": 1.0}],
              "problems": [{"type": "host-io", "alert_type": "straggler", "job": "j", "ranks": [5],
                            "onset_step": 100, "onset_ts": 100.0, "end_step": 200, "end_ts": 200.0,
                            "deadline_s": 60.0, "detail": {"cause": cause}}]}

    def alert(*causes):
        return {"id": "1", "status": "firing", "type": "straggler", "job": "j", "ranks": [5], "starts_at": 104.0,
                "summary": "x", "evidence": {"detected_step": 104, "suspected_causes": [
                    {"category": c, "node": n, "component": k} for c, n, k in causes]}}

    right = alert(("host", "node-002", "nvme0n1"), ("input_pipeline", "node-002", "rank5/data_loader"))
    (p,) = q.score(labels, [right])["problems"]
    assert p["detected"] and p["right_cause"] is True
    for wrong in (alert(("input_pipeline", "node-002", "rank5/data_loader"), ("host", "node-002", "nvme0n1")),
                  alert(("host", "node-003", "nvme0n1")), alert(("host", "node-002", "cpu")), alert()):
        (p,) = q.score(labels, [wrong])["problems"]
        assert p["detected"] and p["right_cause"] is False
    assert q.aggregate([q.score(labels, [right])])["by_type"]["host-io"]["right_cause"] == 1


@pytest.mark.parametrize("name", ["host-io-64", "host-oom-64"])
def test_host_scenarios_are_caught_with_the_right_cause(name, tmp_path):
    q = _load_quality()
    res = q.run_one(name, str(tmp_path))
    (p,) = res["problems"]
    assert p["detected"] and p["right_cause"] is True and res["false_alarms"] == []
