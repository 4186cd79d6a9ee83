"""Persistent link baselines (models/telemetry/link_baseline.py) and their use in the job-wide comparison
(models/telemetry/fabric.py): a port that is bad from the start of a job with too few peers to stand out is
named from the baseline a worker learned in an earlier job and read back after a restart.

Recordings come from tests/fabric_gen.py, a generator independent of the project's simulator.
"""

from __future__ import annotations

import math

import orjson
import pytest

from stepwatch.models.detection import DetectionEngine
from stepwatch.models.telemetry.link_baseline import LinkBaselines

from fabric_gen import T0, Job, events

JOB_LEVEL = ("comm_slowdown", "throughput_drop")


def feed(engine: DetectionEngine, evs) -> list:
    out = []
    next_tick = None
    for _, ev in evs:
        out.extend(engine.process(ev))
        if next_tick is None:
            next_tick = engine.clock + 1.0
        elif engine.clock >= next_tick:
            out.extend(engine.tick(engine.clock))
            next_tick = engine.clock + 1.0
    return out


def baselines(engine: DetectionEngine) -> LinkBaselines:
    return engine.telemetry.fabric.history.baselines


def restarted(records: list[tuple[str, bytes]]) -> DetectionEngine:
    """A fresh worker that read the baselines topic back (``records``: key, value in topic order)."""
    engine = DetectionEngine()
    for key, value in records:
        assert baselines(engine).load(value, key=key.encode())
    return engine


def written(engine: DetectionEngine) -> list[tuple[str, bytes]]:
    """What the worker would write to the compacted topic: one record per node it learned."""
    b = baselines(engine)
    return [(node, b.record(node)) for node in b.take_dirty()]


@pytest.fixture(scope="module")
def earlier_job_records():
    """An earlier, healthy 8-node job (every port and NVLink clean) learned by a worker."""
    engine = DetectionEngine()
    alerts = feed(engine, events(Job(name="earlier", steps=260, seed=21)))
    assert [a.summary for a in alerts] == []
    return written(engine)


def later_job(**kw) -> Job:
    # Two nodes of the same fleet, an hour later: too few to compare with each other.
    base = dict(name="later", nodes=2, fault_node=1, steps=150, onset=90, telemetry_onset=0, seed=31,
                slow=1.5, t0=T0 + 3600.0)
    base.update(kw)
    return Job(**base)


def job_level(alerts):
    return [a for a in alerts if a.type in JOB_LEVEL and a.status == "firing"]


def first_cause(alert) -> dict:
    return (alert.evidence.get("suspected_causes") or [{}])[0]


# -- the model ------------------------------------------------------------------------------------


def test_a_baseline_learns_the_usual_level_and_a_bad_spell_moves_it_only_slowly():
    b = LinkBaselines(min_samples=50)
    for k in range(300):
        b.observe("n1", "mlx5_0/1", T0 + k, {"xmit_wait": 2e5 * (1 + 0.1 * math.sin(k)), "link_errors": 0.0,
                                             "link_rate": 400.0})
    own = b.value("n1", "mlx5_0/1", "xmit_wait")
    assert own is not None and abs(own.mean - 2e5) < 1e4 and own.samples == 300
    for k in range(300, 600):  # five minutes of 10x transmit wait and errors
        b.observe("n1", "mlx5_0/1", T0 + k, {"xmit_wait": 2e6, "link_errors": 30.0, "link_rate": 200.0})
    assert b.value("n1", "mlx5_0/1", "xmit_wait").mean < 4e5
    assert b.value("n1", "mlx5_0/1", "link_errors").mean < 2.0
    assert b.value("n1", "mlx5_0/1", "link_rate").mean > 380.0
    j = b.judge("n1", "mlx5_0/1", "xmit_wait", 2e6)
    assert j.reference == "own" and j.z > 5
    assert b.judge("n1", "mlx5_0/1", "xmit_wait", 2.2e5).z < 1


def test_the_fleet_baseline_names_a_port_whose_own_baseline_was_always_bad():
    b = LinkBaselines(min_samples=20)
    for i in range(8):
        for k in range(60):
            bad = i == 3
            b.observe(f"n{i}", "mlx5_2/1", T0 + k + 0.3 * i, {"link_errors": 25.0 if bad else 0.0,
                                                               "link_rate": 200.0 if bad else 400.0})
    own = b.judge("n3", "mlx5_2/1", "link_errors", 25.0)
    assert own.reference == "fleet" and own.baseline == 0.0 and own.z > 5
    assert b.judge("n3", "mlx5_2/1", "link_rate", 200.0).reference == "fleet"
    assert b.judge("n4", "mlx5_2/1", "link_errors", 0.0).z <= 0
    # fewer than fleet_min other nodes know the component: no fleet baseline
    assert b.fleet("mlx5_9/1", "link_errors") is None


def test_records_round_trip_and_bad_records_are_counted_not_raised():
    b = LinkBaselines(min_samples=5)
    for k in range(10):
        b.observe("n1", "gpu2/nvlink1", T0 + k, {"nvlink_errors": 0.5 * k})
        b.observe("n1", "mlx5_0/1", T0 + k, {"xmit_wait": 1e5})
    assert b.take_dirty() == ["n1"] and b.take_dirty() == []
    raw = b.record("n1")
    other = LinkBaselines(min_samples=5)
    assert other.load(raw, key=b"n1")
    for comp, f in (("gpu2/nvlink1", "nvlink_errors"), ("mlx5_0/1", "xmit_wait")):
        assert other.value("n1", comp, f) == b.value("n1", comp, f)
    # learning resumes on the node's own clock: an older sample than the record's is not learned twice
    other.observe("n1", "mlx5_0/1", T0 + 5, {"xmit_wait": 9e9})
    assert other.value("n1", "mlx5_0/1", "xmit_wait").mean == pytest.approx(1e5)
    for bad in (b"not json", b"[]", orjson.dumps({"v": 1, "node": "n2"}),
                orjson.dumps({"v": 1, "node": "n2", "components": {"p": {"stats": {"xmit_wait": [1, -1, 3]}}}}),
                orjson.dumps({"v": 99, "node": "n2", "components": {}})):
        assert not other.load(bad, key=b"n2")
    assert other.rejected == 5 and other.nodes() == ("n1",)
    assert other.load(None, key=b"n1") and other.nodes() == ()  # a tombstone forgets the node


def test_memory_is_bounded():
    b = LinkBaselines(max_nodes=10, max_components=4)
    for i in range(50):
        for c in range(9):
            b.observe(f"n{i}", f"mlx5_{c}/1", T0, {"xmit_wait": 1.0})
    assert len(b.nodes()) == 10 and b.nodes()[-1] == "n49"
    assert len(orjson.loads(b.record("n49"))["components"]) == 4


# -- in the engine: a job too small to compare, after a restart -----------------------------------


@pytest.mark.parametrize("kind,component,signal", [("ib", "mlx5_2/1", "link_errors"),
                                                   ("rate", "mlx5_2/1", "link_rate"),
                                                   ("nvlink", "gpu5/nvlink1", "nvlink_errors")])
def test_a_port_bad_from_the_start_of_a_small_job_is_named_from_its_persisted_baseline(
        earlier_job_records, kind, component, signal):
    job = later_job(fault=kind)
    engine = restarted(earlier_job_records)
    fired = job_level(feed(engine, events(job)))
    assert any(a.type == "comm_slowdown" for a in fired), "the slowdown fires"
    cause = first_cause(fired[-1])
    assert (cause.get("node"), cause.get("component")) == (job.node(1), component), fired[-1].summary
    moved = {e["signal"]: e for e in cause["evidence"]}
    assert moved[signal]["reference"] == "baseline" and moved[signal]["baseline"] in ("own", "fleet")
    assert moved[signal]["peer_comparison"] is False
    assert fired[-1].nodes[0] == job.node(1) and "baseline" in fired[-1].summary
    assert fired[-1].evidence["nodes_compared"] == 2


def test_without_the_persisted_baselines_the_same_job_is_not_named_from_a_baseline(earlier_job_records):
    # The control: a worker that lost the topic learns the bad port as it is; two nodes make no fleet.
    job = later_job(fault="rate")
    fired = job_level(feed(DetectionEngine(), events(job)))
    assert fired
    for a in fired:
        for cause in a.evidence.get("suspected_causes") or []:
            assert all(e.get("reference") != "baseline" for e in cause["evidence"])
        assert (first_cause(a).get("node"), first_cause(a).get("component")) != (job.node(1), "mlx5_2/1")


def test_a_port_bad_for_as_long_as_the_worker_knows_it_is_named_against_the_fleet():
    # The earlier 8-node job already ran with the port trained down (no slowdown then): its own
    # baseline learned it bad; the same port on the fleet's other nodes says what it should be.
    engine = DetectionEngine()
    feed(engine, events(Job(name="earlier-bad", steps=260, seed=23, fault="rate", fault_node=1,
                            telemetry_onset=0, onset=10_000)))
    assert baselines(engine).value("gpu-051", "mlx5_2/1", "link_rate").mean == 200.0
    job = later_job(fault="rate")
    fired = job_level(feed(restarted(written(engine)), events(job)))
    cause = first_cause(fired[-1])
    assert (cause.get("node"), cause.get("component")) == (job.node(1), "mlx5_2/1"), fired[-1].summary
    moved = {e["signal"]: e for e in cause["evidence"]}
    assert moved["link_rate"]["baseline"] == "fleet" and moved["link_rate"]["baseline_value"] == 400.0
    assert "fleet baseline" in fired[-1].summary


@pytest.mark.parametrize("kind", ["fabric", "nccl"])
def test_a_healthy_fleet_or_a_fabric_wide_lift_names_nobody(earlier_job_records, kind):
    # fabric: every node's transmit wait 5x (congestion); nccl: the collectives slow, the links are clean
    job = later_job(fault=kind, telemetry_onset=None)
    fired = job_level(feed(restarted(earlier_job_records), events(job)))
    assert any(a.type == "comm_slowdown" for a in fired)
    for a in fired:
        assert a.nodes == (), a.summary
        for cause in a.evidence.get("suspected_causes") or []:
            assert all(e.get("reference") != "baseline" for e in cause["evidence"]), a.summary
    if kind == "nccl":
        assert all(a.evidence["cause_hint"] == "unknown" for a in fired)


# -- issue 39 item 5: a link's traffic judged against its own usual pattern --------------------------------------

def _bursty_roce(port_seed: int, *, seconds: int = 3600, collapse_at: int | None = None):
    """An hour of one RoCE port's samples as a real collector sends them (not the simulator): 1 s samples, bursty
    collective traffic (an all-reduce of ~0.4 s at ~45 GB/s every 1.3-1.7 s step, near idle between), idle
    checkpoints of 20-60 s every ~10 minutes, and collector gaps of 5 s to 3 minutes. ``collapse_at``: from then
    on a steady busy link's bandwidth falls to 5% (the collapse that must still be seen)."""
    from stepwatch.models.wire.telemetry_events import LinkEvent

    state = port_seed * 7919 + 17

    def rnd() -> float:  # a small LCG: the same recording every run, no shared random state
        nonlocal state
        state = (state * 1103515245 + 12345) % 2**31
        return state / 2**31

    words, t, out = 0, 0.0, []
    step_end, busy_until, idle_until, next_ckpt, gap_until = 0.0, 0.0, -1.0, 300 + 600 * rnd(), -1.0
    while t < seconds:
        t_next = t + 1.0 + 0.02 * (rnd() - 0.5)
        moved = 0.0
        sub = t
        while sub < t_next:  # integrate the traffic over the sample in 50 ms slices
            if sub >= step_end:
                step_end = sub + 1.3 + 0.4 * rnd()
                busy_until = sub + 0.35 + 0.1 * rnd()
            if sub >= next_ckpt and idle_until < sub:
                idle_until, next_ckpt = sub + 20 + 40 * rnd(), sub + 500 + 200 * rnd()
            rate = 45e9 if sub < busy_until else 2e7
            if sub < idle_until:
                rate = 1e6
            if collapse_at is not None:
                rate = 40e9 if sub < collapse_at else 2e9  # steady busy, then a collapse
            moved += rate * 0.05
            sub += 0.05
        words += int(moved / 4)
        t = t_next
        if t >= gap_until and rnd() < 0.01:  # the collector misses 5 s to 3 minutes
            gap_until = t + 5 + 175 * rnd() ** 2
        if t < gap_until:
            continue
        out.append(LinkEvent(node=f"roce-{port_seed // 2:03d}", ts=1_765_000_000.0 + t, device=f"mlx5_{port_seed % 2}",
                             port=1, state="ACTIVE", rate=400.0,
                             counters={"port_xmit_data": words, "port_rcv_data": words, "symbol_error": 0}))
    return out


@pytest.mark.parametrize("ports", [range(0, 4), range(4, 8)])
def test_bursty_roce_traffic_with_collector_gaps_is_no_bandwidth_collapse(ports):
    from stepwatch.models.telemetry.telemetry_tracker import TelemetryTracker

    tracker = TelemetryTracker()
    for p in ports:
        for ev in _bursty_roce(p, seconds=1800):
            tracker.update(ev)
    spikes = [s for n in tracker.nodes for s in tracker.spikes(n, 0.0, 2e9) if s.signal == "bandwidth"]
    assert spikes == [], [(s.node, s.component, s.samples, s.detail) for s in spikes[:5]]


def test_a_steady_link_that_collapses_is_still_a_spike():
    from stepwatch.models.telemetry.telemetry_tracker import TelemetryTracker

    tracker = TelemetryTracker()
    for ev in _bursty_roce(3, seconds=900, collapse_at=600):
        tracker.update(ev)
    spikes = [s for n in tracker.nodes for s in tracker.spikes(n, 0.0, 2e9) if s.signal == "bandwidth"]
    assert spikes and all(s.began >= 1_765_000_000.0 + 600 for s in spikes)  # (a collector gap may split it)
    assert spikes[0].detail["usual_low_bytes_per_s"] > 1e10 and sum(s.samples for s in spikes) > 100
