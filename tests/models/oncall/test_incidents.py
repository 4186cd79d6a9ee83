"""One incident per root cause (models/telemetry/incidents.py, issue 26): a leaf switch fault is one fabric
incident, a node's erring ports are one node alert.

The fleet recordings come from tests/switch_gen.py (built on tests/fabric_gen.py, not the simulator).
"""

from __future__ import annotations

import json

import pytest

from stepwatch.models.wire.events import decode_message
from stepwatch.models.wire.telemetry_events import LinkEvent
from stepwatch.models.telemetry.telemetry_tracker import TelemetryTracker

from engine_driver import replay
from switch_gen import Fleet, events

JOB_LEVEL = ("comm_slowdown", "throughput_drop", "hang")


def run(fleet: Fleet):
    return list(replay(ev for _, ev in events(fleet)))


@pytest.mark.parametrize("topology", [True, False])
def test_a_leaf_switch_fault_under_16_nodes_across_4_jobs_is_one_fabric_incident(topology):
    fleet = Fleet(topology=topology, seed=3)
    alerts = run(fleet)
    ids = {a.id for a in alerts}
    assert len(ids) <= 20, sorted((a.type, a.job, a.nodes[:1]) for a in {a.id: a for a in alerts}.values())
    fabric = [a for a in alerts if a.type == "fabric"]
    assert len({a.id for a in fabric}) == 1
    last = fabric[-1]
    assert set(last.nodes) == set(fleet.faulty_nodes), last.nodes
    assert last.evidence["switch"] == ("leaf-01" if topology else None)
    assert last.evidence["affected_jobs"] == ["job0", "job1"]
    assert {"symbol_error", "link_error_recovery"} <= set(last.evidence["counters"])
    # no page per port or per node, no node blamed or drained
    assert [a for a in alerts if a.type in ("link_errors", "node_suspect")] == []
    for a in alerts:
        assert a.evidence["action"]["kind"] != "drain_node", a.summary
        assert a.evidence["action"]["exclude_nodes"] == [], a.summary
    assert last.evidence["failure_class"] == "fabric" and last.scope == "platform"
    # the affected jobs' job-level alerts name the incident as their cause, and no node
    job_level = [a for a in alerts if a.type in JOB_LEVEL and a.status == "firing"]
    assert {a.job for a in job_level if a.type == "comm_slowdown"} == {"job0", "job1"}
    for a in job_level:
        assert a.job in ("job0", "job1"), a.summary
        assert a.nodes == () and a.evidence["incident"] == last.id, a.summary
        assert a.evidence["suspected_causes"][0]["category"] == "fabric"
        assert a.evidence["action"]["nodes"] == [] and last.id in a.summary
        # Alertmanager groups the incident's alerts by these labels
        assert a.labels["incident"] == last.id == last.labels["incident"]
        assert a.labels["fabric"] == last.labels["fabric"] == ("leaf-01" if topology else "fleet")


def test_the_same_fault_under_three_nodes_is_node_alerts_not_a_fabric_incident():
    # one job of 3 nodes under the failing switch: fewer than min_nodes erring at once
    fleet = Fleet(jobs=2, nodes_per_job=3, faulty_jobs=1, seed=5)
    alerts = run(fleet)
    assert not [a for a in alerts if a.type == "fabric"]
    links = {a.id: a for a in alerts if a.type == "link_errors"}
    # one alert per node, whichever of its four ports err, the ports in its evidence
    assert sorted(a.nodes[0] for a in links.values()) == sorted(fleet.faulty_nodes)
    for a in links.values():
        assert {p["device"] for p in a.evidence["ports"]} == {"mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3"}, a.summary
        assert "4 ports" in a.summary


def port_sample(node: str, device: str, t: float, symbol_error: int) -> LinkEvent:
    k = int(t)
    return LinkEvent(node=node, ts=1_760_000_000.0 + t, device=device, port=1, state="ACTIVE", rate=400.0,
                     counters={"port_xmit_data": k * 10**9, "port_rcv_data": k * 10**9,
                               "port_xmit_wait": k * 200_000, "symbol_error": symbol_error})


def test_a_nodes_erring_ports_are_one_alert_that_resolves_once_all_are_clean():
    tracker = TelemetryTracker(clear_after=10)
    alerts = []
    for t in range(45):
        for d, dev in enumerate(("mlx5_0", "mlx5_1")):
            bad_until = 20 if d == 0 else 26  # the second port stays bad longer
            errors = 10 * min(max(t - 10, 0), bad_until - 10)
            alerts += tracker.update(port_sample("n1", dev, t, errors))
    assert [(a.type, a.status) for a in alerts] == [("link_errors", "firing"), ("link_errors", "resolved")]
    fired, resolved = alerts
    assert fired.id == resolved.id and fired.nodes == ("n1",)
    assert [p["device"] for p in fired.evidence["ports"]] == ["mlx5_0", "mlx5_1"]
    # resolved only when the second port, too, was clean for clear_after samples
    assert resolved.ends_at == 1_760_000_000.0 + 26 + 10


def test_topology_names_the_switch_on_the_wire():
    msg = {"v": 1, "kind": "topology", "node": "n1", "ts": 1.0,
           "nics": [{"device": "mlx5_0", "ports": [1], "switch": "leaf-07"}]}
    [ev], rejected = decode_message(json.dumps(msg).encode())
    assert rejected == [] and ev.nics[0]["switch"] == "leaf-07"
    tracker = TelemetryTracker()
    tracker.update(ev)
    assert tracker.switches("n1") == ("leaf-07",)


# -- node incidents ----------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", [0, 1])
def test_a_slow_host_is_one_node_incident_not_a_page_per_rank(seed):
    from fabric_gen import Job, events as job_events

    job = Job(slow_node=2, straggler_factor=1.15, seed=seed, steps=200, onset=50)
    alerts = list(replay(ev for _, ev in job_events(job)))
    stragglers = [a for a in alerts if a.type == "straggler"]
    node = [a for a in stragglers if a.evidence.get("incident_scope") == "node"]
    assert len({a.id for a in node}) == 1 and node[-1].nodes == (job.node(2),)
    assert node[-1].ranks == tuple(range(16, 24)) and node[-1].evidence["node_ranks"] == list(range(16, 24))
    assert node[-1].scope == "device" and node[-1].evidence["job_slowdown"] > 1.05
    assert node[-1].labels["node"] == job.node(2) and node[-1].labels["scope"] == "device"
    # per-rank pages: none left firing (any published before the node was seen resolve as grouped)
    per_rank = {a.id: a for a in stragglers if a.evidence.get("incident_scope") != "node"}
    assert all(a.status == "resolved" and a.evidence["resolution"] == "grouped" for a in per_rank.values())
    assert len({a.id for a in alerts}) <= 1 + len(per_rank) and len(per_rank) <= 2


def test_a_single_straggler_is_still_a_rank_alert():
    from fabric_gen import Job, events as job_events

    alerts = list(replay(ev for _, ev in job_events(Job(straggler=21, straggler_factor=1.3, seed=1, steps=140))))
    stragglers = [a for a in alerts if a.type == "straggler"]
    assert stragglers and all(a.ranks == (21,) and "incident_scope" not in a.evidence for a in stragglers)


def test_a_node_incident_resolves_when_its_ranks_do_with_their_reason():
    from stepwatch.models.alerts import Alert
    from stepwatch.models.telemetry.incidents import NodeIncidents

    def rank_alert(r: int, status: str = "firing", summary: str = "straggler") -> Alert:
        return Alert(id=f"r{r}", status=status, type="straggler", severity="warning", job="j", ranks=(r,),
                     nodes=("n1",), starts_at=10.0, summary=summary, ends_at=20.0 if status == "resolved" else None,
                     evidence={"ratio": 1.2, "rank_median": 1.2, "peer_median": 1.0, "first_step": 5,
                               "job_slowdown": 1.0, "cost_step_time": 1.5, "cost_gpus": 16})

    grouper = NodeIncidents(lambda job, node: (0, 1, 2, 3))
    [node] = grouper.filter([rank_alert(r) for r in range(4)])
    assert node.ranks == (0, 1, 2, 3) and node.evidence["incident_scope"] == "node"
    # the node's cost: the job would run at the other ranks' pace, 1.5 s - 0.2 s
    assert node.evidence["job_slowdown"] == pytest.approx(1.5 / 1.3, rel=1e-3)
    assert grouper.filter([rank_alert(r, "resolved", "resolved: back in line") for r in range(3)]) == []
    [done] = grouper.filter([rank_alert(3, "resolved", "resolved (state evicted: no events for 900 s): x")])
    assert done.id == node.id and done.status == "resolved"
    assert done.summary.startswith("resolved (state evicted: no events for 900 s)")
    # two ranks of four: below the share, rank alerts as they are
    assert [a.id for a in grouper.filter([rank_alert(5), rank_alert(6)])] == ["r5", "r6"]


def test_a_fabric_incident_resolves_once_every_members_ports_are_clean():
    from stepwatch.models.telemetry.incidents import FabricIncidents

    tracker = TelemetryTracker(clear_after=10)
    grouper = FabricIncidents(tracker, min_nodes=4)
    out = []
    for t in range(60):
        for i in range(6):
            errors = 10 * min(max(t - 10, 0), 10 + i)  # node i's ports err from t=11 to t=20+i
            out += grouper.filter(tracker.update(port_sample(f"n{i}", "mlx5_0", t, errors)))
    assert [(a.type, a.status) for a in out] == [("fabric", "firing"), ("fabric", "resolved")], \
        [(a.type, a.status, a.nodes) for a in out]
    fired, done = out
    assert set(fired.nodes) == {f"n{i}" for i in range(6)} and fired.evidence["switch"] is None
    assert fired.labels["fabric"] == "fleet" and done.id == fired.id
    # resolved with the last node's clean ports: n5 erred until t=25, clean for 10 samples
    assert done.ends_at == 1_760_000_000.0 + 25 + 10 and done.evidence["resolution"] == "clean"


# -- intermittent faults -----------------------------------------------------------------------------


def _flaky_job():
    from steady_jobs import SteadyJob

    # rank 5 slow for steps 50-80, fine for 20 steps, slow again (1.45x, clearly worse: the rule re-fires)
    return SteadyJob(ranks=32, steps=260, noise=0.01, slow={5: 1.25}, slow_from=50, slow_until=80,
                     episodes=[(100, 200, {5: 1.45})], seed=3)


def test_a_rank_slow_again_soon_after_is_the_same_incident():
    _, alerts = _flaky_job().run()
    straggler = [a for a in alerts if a.type == "straggler"]
    assert [(a.status, a.ranks) for a in straggler] == [("firing", (5,)), ("resolved", (5,)),
                                                        ("firing", (5,)), ("resolved", (5,))]
    assert len({a.id for a in straggler}) == 1
    again = straggler[2]
    assert again.evidence["episodes"] == 2 and again.evidence["intermittent"] is True
    assert again.starts_at == straggler[0].starts_at and again.evidence["first_step"] >= 100
    assert "intermittent: episode 2" in again.summary and straggler[3].evidence["episodes"] == 2


def test_a_rank_slow_again_long_after_is_a_new_incident():
    from stepwatch.models.detection import DetectionEngine

    engine = DetectionEngine()
    engine.telemetry.intermittent.hold_steps = 5  # the clean steps between are more than that
    _, alerts = _flaky_job().run(engine)
    firing = [a for a in alerts if a.type == "straggler" and a.status == "firing"]
    assert len(firing) == 2 and len({a.id for a in firing}) == 2
    assert all("episodes" not in a.evidence for a in firing)
