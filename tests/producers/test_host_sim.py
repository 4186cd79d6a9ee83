"""The simulator's host events and ``--host-fault`` (stepwatch/sim/host_sim.py)."""

from __future__ import annotations

import orjson
import pytest

from stepwatch.models.wire.events import decode_message
from stepwatch.sim.host_sim import HostFault, HostSimulator
from stepwatch.sim.simulator import SimulationSpec

from support import run_stepwatch, stepwatch_env


def test_host_faults_change_the_nodes_signals_and_the_job():
    spec = SimulationSpec(job="j", ranks=16, steps=60, seed=1)
    sim = HostSimulator(spec, (HostFault(kind="io", node=1, start_step=20, end_step=40),
                               HostFault(kind="oom", node="node-000", start_step=50)))
    hosts, steps = [], []
    for event in sim.events():
        (hosts if event["kind"] == "host" else steps).append(event)
    assert {h["node"] for h in hosts} == {"node-000", "node-001"}
    io = [h["psi"]["io"]["some_avg10"] for h in hosts if h["node"] == "node-001"]
    assert max(io) > 35 and sorted(io)[len(io) // 2] < 5  # only while the fault lasts
    stalled = [s for s in steps if s["kind"] == "step" and 25 <= s["step"] < 40]
    assert all(s["data_time"] > 0.3 for s in stalled if s["node"] == "node-001")
    healthy = sorted(s["data_time"] for s in stalled if s["node"] == "node-000")
    assert healthy[len(healthy) // 2] < 0.1  # (the simulator's own data-loader hiccups aside)
    ooms = [h["oom_kills"] for h in hosts if h["node"] == "node-000"]
    assert ooms[0] == 0 and ooms[-1] == 1
    assert not any(s["kind"] == "step" and s["rank"] == 0 and s["step"] >= 50 for s in steps)  # rank 0 was killed
    for h in hosts[:20]:
        events, rejected = decode_message(orjson.dumps(h))
        assert events and not rejected


def test_a_host_fault_on_a_node_without_ranks_is_refused():
    with pytest.raises(ValueError, match="no rank"):
        HostSimulator(SimulationSpec(ranks=8, steps=5), (HostFault(kind="cpu", node=3, start_step=1),))
    with pytest.raises(ValueError):
        HostFault(kind="disk", node=0, start_step=1)


def test_simulate_cli_host_fault(tmp_path):
    env = stepwatch_env("", "x.")
    out = tmp_path / "rec.jsonl"
    run_stepwatch("simulate", "--ranks", "16", "--steps", "40", "--host-fault", "cpu:node-001:10:30", "--out",
                  str(out), env=env)
    kinds = set()
    for line in out.read_text().splitlines():
        events, rejected = decode_message(line.encode())
        assert not rejected
        kinds.update(e.kind for e in events)
    assert {"step", "host"} <= kinds
    bad = run_stepwatch("simulate", "--ranks", "16", "--steps", "4", "--host-fault", "disk:1:2", "--out", str(out),
                        env=env, check=False)
    assert bad.returncode != 0 and "KIND:NODE:START" in bad.stderr
