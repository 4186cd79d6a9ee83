"""The network layer (models/telemetry/fabric.py, models/steps/arrival.py): job-level alerts point at the node, port or
NVLink that caused them; collective-only stragglers; node clocks seconds apart.

Recordings come from tests/fabric_gen.py, a generator independent of the project's simulator.
"""

from __future__ import annotations

import pytest

from stepwatch.models.detection import DetectionEngine

from fabric_gen import Job, events, onset_time

JOB_LEVEL = ("comm_slowdown", "throughput_drop")


def run(job: Job):
    """Feed the recording in delivery order, ticking every second of the engine's clock; ``(true_time, alert)``."""
    engine = DetectionEngine()
    evs = events(job)
    out = []
    next_tick = None
    for t, ev in evs:
        out.extend((t, a) for a in engine.process(ev))
        if next_tick is None:
            next_tick = engine.clock + 1.0
        elif engine.clock >= next_tick:
            out.extend((t, a) for a in engine.tick(engine.clock))
            next_tick = engine.clock + 1.0
    return job, evs, out


def named(alert) -> tuple[str | None, str | None]:
    causes = alert.evidence.get("suspected_causes") or []
    if not causes or not alert.nodes:
        return None, None
    return causes[0]["node"], causes[0]["component"]


CASES = [("ib", 1, "mlx5_2/1"), ("ib", 6, "mlx5_2/1"), ("ib", 4, "mlx5_2/1"),
         ("rate", 2, "mlx5_2/1"), ("rate", 7, "mlx5_2/1"), ("rate", 0, "mlx5_2/1"),
         ("nvlink", 5, "gpu5/nvlink1"), ("nvlink", 0, "gpu5/nvlink1"), ("nvlink", 3, "gpu5/nvlink1")]


@pytest.mark.parametrize("kind,node,component", CASES)
def test_a_bad_link_that_slows_every_collective_is_named_in_the_job_level_alert(kind, node, component):
    job, evs, alerts = run(Job(fault=kind, fault_node=node, seed=node * 7 + len(kind),
                               slow=1.4 + 0.05 * (node % 5)))
    onset = onset_time(job, evs)
    fired = [(t, a) for t, a in alerts if a.type in JOB_LEVEL and a.status == "firing"]
    assert any(a.type == "comm_slowdown" for _, a in fired), "the slowdown fires"
    assert all(t >= onset for t, _ in fired), "nothing before the fault"
    right = [(t, a) for t, a in fired if named(a) == (job.node(node), component)]
    assert right and right[0][0] - onset <= 60.0, [(t - onset, a.summary) for t, a in fired]
    first = right[0][1]
    assert first.nodes[0] == job.node(node) and job.node(node) in first.summary
    assert component.split("/")[0] in first.summary or "GPU 5 NVLink 1" in first.summary
    # no version of any job-level alert points at another node
    assert {named(a)[0] for _, a in fired} <= {None, job.node(node)}


def test_a_fabric_wide_slowdown_names_no_node():
    job, evs, alerts = run(Job(fault="fabric", seed=11, slow=1.5))
    fired = [a for _, a in alerts if a.type in JOB_LEVEL and a.status == "firing"]
    assert any(a.type == "comm_slowdown" for a in fired)
    for a in fired:
        assert a.nodes == () and a.ranks == (), a.summary
        assert a.evidence["cause_hint"] == "unknown" and "suspected cause: unknown" in a.summary


def test_a_link_down_before_an_all_ranks_waiting_hang_is_named_even_on_a_late_node():
    # node 6 hosts ranks 48-55: beyond the 32 ranks a hang alert lists
    job, evs, alerts = run(Job(fault="down", fault_node=6, seed=3, steps=80, onset=60))
    hangs = [a for _, a in alerts if a.type == "hang" and a.status == "firing"]
    assert hangs and all(a.evidence["case"] == "undetermined" for a in hangs)
    last = hangs[-1]
    assert named(last) == (job.node(6), "mlx5_2/1"), last.summary
    assert last.nodes[0] == job.node(6) and "port down" in last.summary


@pytest.mark.parametrize("coll_step", [True, False])
def test_a_straggler_seen_only_in_collective_events_is_found_by_arrival(coll_step):
    job, evs, alerts = run(Job(step_fields="step", straggler=21, straggler_factor=1.12, onset=40, steps=80,
                               coll_step=coll_step, seed=5))
    fired = [a for _, a in alerts if a.type == "straggler" and a.status == "firing"]
    assert [a.ranks for a in fired] == [(21,)], [a.summary for a in fired]
    ev = fired[0].evidence
    assert ev["signal"] == "arrival" and ev["arrival_source"] == "collective"
    assert (ev["process_group"], ev["op"]) == ("default", "all_reduce")
    assert ev["detected_step"] - job.onset <= 15


def test_without_collectives_or_comm_time_there_is_no_arrival_signal():
    job, evs, alerts = run(Job(step_fields="step", straggler=9, onset=40, steps=70, collectives=False, seed=2))
    fired = [a for _, a in alerts if a.type == "straggler" and a.status == "firing"]
    # without comm_time nor collectives, step_time cannot show a straggler in a synchronous job
    assert all(a.evidence["signal"] != "arrival" for a in fired)


SKEW = {1: 4.0, 3: -2.5, 5: 5.0, 6: -5.0}


@pytest.mark.parametrize("fields", ["compute", "step"])
def test_a_healthy_job_with_node_clocks_seconds_apart_raises_nothing(fields):
    job, evs, alerts = run(Job(skew=SKEW, step_fields=fields, seed=8, steps=120))
    assert [a.summary for _, a in alerts] == []


def test_a_straggler_in_a_job_with_skewed_clocks_is_still_found():
    job, evs, alerts = run(Job(skew=SKEW, step_fields="step", straggler=42, onset=40, steps=80, seed=9))
    fired = [a for _, a in alerts if a.status == "firing"]
    assert [(a.type, a.ranks) for a in fired] == [("straggler", (42,))], [a.summary for a in fired]


def test_a_link_down_hang_with_skewed_clocks_is_still_named():
    job, evs, alerts = run(Job(fault="down", fault_node=5, seed=13, steps=80, onset=60, skew=SKEW))
    hangs = [a for _, a in alerts if a.type == "hang" and a.status == "firing"]
    assert hangs and all(a.evidence["case"] == "undetermined" for a in hangs)
    assert named(hangs[-1]) == (job.node(5), "mlx5_2/1")


def test_a_bad_port_on_a_skewed_node_is_still_named():
    job, evs, alerts = run(Job(skew=SKEW, fault="ib", fault_node=5, seed=4))
    fired = [a for _, a in alerts if a.type == "comm_slowdown" and a.status == "firing"]
    assert fired and named(fired[-1]) == (job.node(5), "mlx5_2/1")


def test_step_events_with_comm_time_use_the_step_arrival_source():
    from stepwatch.models.steps.assembly import GroupStep  # noqa: F401 - the field is part of the step

    job = Job(step_fields="compute", straggler=30, onset=40, steps=70, seed=12)
    # drop compute_time: only step_time and comm_time remain (today's step_time - comm_time path)
    evs = [(t, e if type(e).__name__ != "StepEvent" else __import__("dataclasses").replace(e, compute_time=None))
           for t, e in events(job)]
    engine = DetectionEngine()
    fired = [a for _, e in evs for a in engine.process(e) if a.type == "straggler" and a.status == "firing"]
    assert [a.ranks for a in fired] == [(30,)]
    assert fired[0].evidence["signal"] == "arrival" and fired[0].evidence["arrival_source"] == "step"


def test_a_lost_collective_event_does_not_make_its_rank_look_late():
    from stepwatch.models.steps.arrival import CollectiveArrival
    from stepwatch.models.wire.events import CollectiveEvent
    import numpy as np

    arrival = CollectiveArrival()
    for rank in range(4):
        for seq in range(2 if rank else 1):  # rank 0 lost one of its two collectives
            arrival.observe_collective(CollectiveEvent(job="j", rank=rank, seq=seq, op="all_reduce", ts=10.0 + seq,
                                                       duration=0.1, step=7))
    assert arrival.comm_times(7, np.arange(4)) is None
    # seq-only collectives are placed by the rank's own clock: before its step end, in that step
    arrival = CollectiveArrival()
    arrival.observe_collective(CollectiveEvent(job="j", rank=0, seq=0, op="all_reduce", ts=100.5, duration=0.2))
    arrival.observe_step(0, 3, 101.0)
    arrival.observe_collective(CollectiveEvent(job="j", rank=0, seq=1, op="all_reduce", ts=100.8, duration=0.3))
    arrival.observe_collective(CollectiveEvent(job="j", rank=0, seq=2, op="all_reduce", ts=101.5, duration=0.4))
    arrival.observe_step(0, 4, 102.0)
    assert arrival.comm_times(3, np.array([0])).tolist() == pytest.approx([0.5])
    assert arrival.comm_times(4, np.array([0])).tolist() == pytest.approx([0.4])


def test_simulator_clock_skew_moves_timestamps_of_one_node_only():
    from stepwatch.sim.simulator import apply_clock_skew

    batch = [{"kind": "collective", "node": "a", "ts": 10.0, "start_ts": 9.5, "duration": 0.5},
             {"kind": "step", "node": "b", "ts": 10.0, "step_time": 1.0}, {"kind": "phase", "ts": 10.0}]
    out = apply_clock_skew(batch, {"a": -2.5})
    assert out[0] == {"kind": "collective", "node": "a", "ts": 7.5, "start_ts": 7.0, "duration": 0.5}
    assert out[1:] == batch[1:] and batch[0]["ts"] == 10.0


@pytest.mark.parametrize("kind,rank,node,component,spawn", [("ib_errors", 26, "node-003", "mlx5_0/1", True),
                                                            ("rate_down", 50, "node-006", "mlx5_0/1", False),
                                                            ("nvlink_errors", 13, "node-001", "gpu5/nvlink0", False)])
def test_simulator_comm_faults_are_named_by_replay(tmp_path, capsys, kind, rank, node, component, spawn):
    # One fault runs ``stepwatch simulate`` and ``replay`` as subprocesses (the installed command's road); the
    # others call the same ``main`` in this process (two interpreter starts fewer each, the same code).
    import orjson
    from stepwatch.cli import main
    from support import run_stepwatch, stepwatch_env

    recording = tmp_path / "run.jsonl"
    simulate = ["simulate", "--ranks", "64", "--steps", "130", "--comm-fault", f"{kind}:{rank}:60",
                "--clock-skew", "node-002:4", "--clock-skew", f"{node}:-2.5", "--out", str(recording)]
    if spawn:
        env = stepwatch_env("unused:1", "x.")
        run_stepwatch(*simulate, env=env)
        out = run_stepwatch("replay", str(recording), env=env).stdout
    else:
        assert main(simulate) == 0
        capsys.readouterr()
        assert main(["replay", str(recording)]) == 0
        out = capsys.readouterr().out
    alerts = [orjson.loads(line) for line in out.splitlines()]
    comm = [a for a in alerts if a["type"] == "comm_slowdown" and a["status"] == "firing"]
    assert comm and comm[-1]["nodes"][0] == node
    assert comm[-1]["evidence"]["suspected_causes"][0]["component"] == component
    assert not [a for a in alerts if a["type"] in ("straggler", "hang")]


def test_quality_scorer_right_node():
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "bench"))
    from quality import _right_node

    p = {"job": "j", "alert_type": "comm_slowdown", "onset_ts": 100.0, "end_ts": 200.0, "right_node": ["n3"]}

    def alert(nodes, at=150.0):
        return {"job": "j", "type": "comm_slowdown", "status": "firing", "starts_at": at, "nodes": nodes}

    assert _right_node(p, [alert([]), alert(["n3"])]) is True
    assert _right_node(p, [alert(["n1"]), alert(["n3"])]) is False
    assert _right_node(p, [alert([])]) is False
    assert _right_node(dict(p, right_node=[]), [alert([])]) is True
    assert _right_node(dict(p, right_node=[]), [alert(["n1"])]) is False
    assert _right_node(dict(p, right_node=None), [alert(["n1"])]) is None


def test_peer_comparison_rules():
    """Unit level: one node's bad port stands out; a lift on every node, an idle port, or too few nodes do not."""
    from stepwatch.models.wire.telemetry_events import LinkEvent
    from stepwatch.models.telemetry.fabric import FabricCorrelator, FabricHistory

    def feed(history, node, port, t, *, errors=0, wait=2e5, words=3e9, rate=400.0):
        c = feed.c.setdefault((node, port), {"symbol_error": 0, "port_xmit_wait": 0, "port_xmit_data": 0,
                                             "port_rcv_data": 0})
        c["symbol_error"] += errors
        c["port_xmit_wait"] += int(wait)
        c["port_xmit_data"] += int(words)
        c["port_rcv_data"] += int(words)
        history.update(LinkEvent(node=node, ts=t, device=port, port=1, state="ACTIVE", rate=rate, counters=dict(c)))

    def build(bad=None, lift=1.0, idle=None, nodes=8):
        feed.c = {}
        history = FabricHistory()
        for t in range(300):
            for i in range(nodes):
                for port in ("mlx5_0", "mlx5_1"):
                    after = t >= 200
                    wait = 2e5 * (1 + 0.1 * ((i + t) % 3)) * (lift if after else 1.0)
                    errors = 30 if after and (i, port) == bad else 0
                    words = 0 if (i, port) == idle else 3e9
                    feed(history, f"n{i}", port, 1000.0 + t, errors=errors, wait=wait * (8 if errors else 1),
                         words=words)
        return FabricCorrelator(history).suspects(tuple(f"n{i}" for i in range(nodes)), 1230.0)

    found = build(bad=(5, "mlx5_1"))
    assert [(s.node, s.component) for s in found][:1] == [("n5", "mlx5_1/1")]
    assert {m.feature for m in found[0].moved} == {"link_errors", "xmit_wait"}
    assert build(lift=5.0) == []  # fabric-wide: nobody
    assert build(idle=(2, "mlx5_0")) == []  # a port this node never uses is not a cause
    assert build(bad=(1, "mlx5_0"), nodes=2) is None  # too few nodes to compare


@pytest.mark.parametrize("fields", ["compute", "step"])
def test_a_communication_throughput_drop_names_the_node_too(fields):
    # all-reduces 2x slower: the step takes ~25% longer; with steps carrying only step_time, the
    # communication layer is seen through the ranks' own collective durations
    job, evs, alerts = run(Job(fault="rate", fault_node=4, slow=2.0, seed=3, step_fields=fields))
    drops = [(t, a) for t, a in alerts if a.type == "throughput_drop" and a.status == "firing"]
    assert drops and drops[0][1].evidence["layer"] == "communication"
    assert named(drops[0][1]) == (job.node(4), "mlx5_2/1")
    assert drops[0][0] - onset_time(job, evs) <= 60.0


@pytest.mark.parametrize("coll_step", [True, False])
def test_collective_arrival_through_batch_envelopes_of_steps(coll_step):
    """The worker's columnar path: each step's step events as one batch envelope (StepColumns),
    collectives as their own messages, as a rank-sharded producer would send them."""
    import orjson

    from stepwatch.models.wire.events import event_to_dict
    from stepwatch.models.wire.step_columns import StepColumns, decode_message_columns

    job = Job(step_fields="step", straggler=13, onset=40, steps=80, coll_step=coll_step, seed=21, lose=0.0)
    engine = DetectionEngine()
    fired, pending, columnar = [], [], 0

    def flush():
        nonlocal columnar
        if pending:
            decoded, rejected = decode_message_columns(orjson.dumps(
                {"v": 1, "kind": "batch", "events": [event_to_dict(e) for e in pending]}))
            assert not rejected
            columnar += isinstance(decoded, StepColumns)
            fired.extend(engine.process_batch(decoded))
            pending.clear()

    for _, ev in events(job):
        if type(ev).__name__ == "StepEvent":
            if pending and pending[-1].step != ev.step:
                flush()
            pending.append(ev)
        else:
            fired.extend(engine.process(ev))
    flush()
    stragglers = [a for a in fired if a.type == "straggler" and a.status == "firing"]
    assert columnar > 50
    assert [a.ranks for a in stragglers] == [(13,)]
    assert stragglers[0].evidence["arrival_source"] == "collective"
    assert stragglers[0].evidence["detected_step"] - job.onset <= 15


def test_an_all_ranks_waiting_hang_with_healthy_links_names_no_node():
    job, evs, alerts = run(Job(fault="stall", seed=17, steps=80, onset=60))
    hangs = [a for _, a in alerts if a.type == "hang" and a.status == "firing"]
    assert hangs and all(a.evidence["case"] == "undetermined" for a in hangs)
    assert all(a.evidence["cause_hint"] == "unknown" for a in hangs), [a.summary for a in hangs]


def test_comm_slowdown_names_ranks_only_when_their_growth_stands_out():
    import numpy as np

    from stepwatch.models.jobhealth.comm import CommSlowdownDetector
    from stepwatch.models.wire.events import CollectiveEvent

    def feed(own_factor):
        det = CommSlowdownDetector(job="j")
        rng = np.random.default_rng(4)
        out = []
        for seq in range(200):
            slow = seq >= 100
            transfer = 0.01 * (1.6 if slow else 1.0)
            for rank in range(16):
                extra = own_factor(rank) if slow else 1.0
                out += det.update(CollectiveEvent(job="j", rank=rank, seq=seq, op="all_reduce", ts=1e9 + seq,
                                                  duration=transfer * extra * (1 + 0.02 * rng.standard_normal()),
                                                  node=f"n{rank // 4}", bytes=2**20))
        return [a for a in out if a.status == "firing"]

    uniform = feed(lambda r: 1.0)
    assert uniform and uniform[0].ranks == () and uniform[0].nodes == ()
    assert "every rank slowed alike" in uniform[0].summary
    # ranks 4 and 5 (on n1) also wait on their own slow path: their growth stands out
    skewed = feed(lambda r: 1.5 if r in (4, 5) else 1.0)
    assert skewed and set(skewed[0].ranks) == {4, 5} and skewed[0].nodes == ("n1",)
