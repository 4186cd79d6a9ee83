"""Only a node's own agent speaks for the node (issue 44 finding 1, "What to build" 2).

Training processes name their node in their step events; nothing stops one from naming any node. Two forged
16-rank jobs, each with a 1.5x straggler on node-003, once made a ``node_suspect`` and a rendered
``scontrol ... state=drain`` for a node no agent had ever reported. Job events may implicate a node, never
condemn it alone: without the node's agent no ``node_suspect`` and no drain; with it, as before. Replayed
through the engine (tests/engine_driver.py), the action hooks as the worker builds them (dry run, an
inventory, the telemetry's ``reported_before``).
"""

from __future__ import annotations

import pytest

from engine_driver import replay
from fleet import Job, agent_reports, job_events, merge
from stepwatch.models.detection import DetectionEngine
from stepwatch.models.oncall.action_hooks import ActionHooks
from stepwatch.models.wire.events import parse_event

T0 = 1_764_000_000.0
NODES = [f"node-00{i}" for i in range(1, 7)]


def _forged_jobs() -> list[Job]:
    """Two 16-rank jobs (4 nodes of 4 ranks), the rank on node-003's GPU 0 1.5x slow in each."""
    return [Job("forged-a", NODES[:4], slow_node="node-003", slow_factor=1.5),
            Job("forged-b", NODES[2:], slow_node="node-003", slow_factor=1.5, start=T0 + 400)]


def _run(agents: list[str]) -> tuple[list, list[dict]]:
    jobs = _forged_jobs()
    reports = [r for r in agent_reports(*jobs) if r["node"] in agents]
    engine = DetectionEngine()
    hooks = ActionHooks(dry_run=True, inventory=frozenset(NODES), reported=engine.telemetry.reported_before)
    alerts = list(replay((parse_event(e) for e in merge(reports, *(job_events(j) for j in jobs))), engine=engine))
    return alerts, [r for a in alerts if (r := hooks.record(a)) is not None]


def _drains(records: list[dict], node: str) -> list[str]:
    return [c for r in records for c in r["commands"]["slurm"] + r["commands"]["kubernetes"] if node in c]


@pytest.mark.parametrize("agents", [[], [n for n in NODES if n != "node-003"]], ids=["no-agent", "others-only"])
def test_job_events_alone_never_condemn_a_node(agents):
    alerts, records = _run(agents)
    stragglers = {a.job for a in alerts if a.type == "straggler" and a.status == "firing"}
    assert stragglers == {"forged-a", "forged-b"}  # implicated: both jobs' alerts name the rank on node-003
    assert [a for a in alerts if a.type == "node_suspect"] == []
    assert _drains(records, "node-003") == []


def test_with_the_nodes_agent_reporting_the_node_is_suspect_as_before():
    alerts, records = _run(NODES)
    suspects = [a for a in alerts if a.type == "node_suspect" and a.status == "firing"]
    assert {a.nodes for a in suspects} == {("node-003",)}
    assert [j["job"] for j in suspects[-1].evidence["jobs"]] == ["forged-a", "forged-b"]
    # its action follows the escalation ladder (issue 42): jobs still run on it, so not a drain yet
    # (tests/models/oncall/test_ladder.py drains it once they moved off)
    action, decision = suspects[-1].evidence["action"], suspects[-1].evidence["decision"]
    assert action["kind"] == decision["step"]
    assert (action["kind"] == "drain_node") == any("nodename=node-003 state=drain" in c
                                                    for c in _drains(records, "node-003"))
