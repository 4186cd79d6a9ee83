"""Node telemetry in the pure core: counters, rates, spikes, GPU/link alerts, correlation, simulator."""

from __future__ import annotations

import dataclasses

import orjson
import pytest

from stepwatch.config import Settings, TelemetrySettings
from stepwatch.models.alerts import Alert
from engine_driver import replay
from stepwatch.models.detection import DetectionEngine
from stepwatch.models.wire.events import decode_message, parse_event
from stepwatch.models.wire.telemetry_events import GpuEvent, LinkEvent
from stepwatch.models.wire.wire import InvalidEvent
from stepwatch.models.telemetry.counters import CounterTrack, counter_delta
from stepwatch.models.telemetry.telemetry_correlator import TelemetryCorrelator
from stepwatch.models.telemetry.telemetry_tracker import TelemetryTracker
from stepwatch.sim.simulator import SimulationSpec
from stepwatch.sim.telemetry_sim import TelemetryFault, TelemetrySimulator, TelemetrySpec

T0 = 1_700_000_000.0
HEALTHY_PORT = {"port_xmit_data": 0, "port_rcv_data": 0, "port_xmit_wait": 0, "symbol_error": 0,
                "link_error_recovery": 0, "port_rcv_errors": 0}


def link(ts: float, node: str = "n1", device: str = "mlx5_0", state: str = "ACTIVE", rate: float = 400.0,
         **counters: int) -> LinkEvent:
    return LinkEvent(node=node, ts=T0 + ts, device=device, port=1, state=state, rate=rate, counters=counters)


def healthy_link_series(n: int, *, start: int = 0, words_per_s: int = 6_000_000_000, wait_per_s: int = 200_000,
                        **fixed: int):
    """``n`` one-second samples of a busy, clean port (xmit_wait with +-10% noise)."""
    out = []
    wait = start * wait_per_s
    for i in range(start, start + n):
        wait += int(wait_per_s * (1.0 + 0.1 * ((i * 7) % 3 - 1)))
        out.append(link(i, port_xmit_data=i * words_per_s, port_rcv_data=i * words_per_s,
                        port_xmit_wait=wait, **{"symbol_error": 0, **fixed}))
    return out


# -- counters -----------------------------------------------------------------------------------


def test_counter_delta_handles_wrap_around_and_resets():
    assert counter_delta(10, 25) == (15, "ok")
    assert counter_delta(2**32 - 100, 50) == (150, "wrap")  # 32-bit counter past its top
    assert counter_delta(2**64 - 1, 9) == (10, "wrap")
    assert counter_delta(5_000, 12) == (None, "reset")  # driver reload / perfquery -R: unknown
    assert counter_delta(2**31, 3) == (None, "reset")  # not near the top: a reset, not a wrap


def test_counter_track_rates_skip_the_first_sample_and_resets():
    track = CounterTrack()
    assert track.update(1_000, 0.0) == (None, None)
    assert track.update(3_000, 2.0) == (2_000, 1_000.0)
    assert track.update(40, 3.0) == (None, None)  # reset: history restarts
    assert track.update(140, 4.0) == (100, 100.0)
    assert track.update(2**32 - 10, 5.0)[0] == 2**32 - 150
    assert track.update(90, 6.0) == (100, 100.0)  # wrapped
    assert (track.resets, track.wraps) == (1, 1)


def test_a_counter_reset_or_wrap_raises_no_spike():
    tracker = TelemetryTracker()
    events = healthy_link_series(20, symbol_error=1234)
    # The HCA's counters reset (driver reload): every counter drops to a small value.
    events.append(link(20, port_xmit_data=5, port_rcv_data=5, port_xmit_wait=3, symbol_error=0))
    events += [link(21 + i, port_xmit_data=5 + (i + 1) * 6_000_000_000, port_rcv_data=5 + (i + 1) * 6_000_000_000,
                    port_xmit_wait=3 + (i + 1) * 200_000, symbol_error=0) for i in range(5)]
    # Another port's 32-bit xmit_wait wraps at its top: the rate through the wrap is the usual one.
    base = 2**32 - 15 * 200_000
    events += [link(i, device="mlx5_1", port_xmit_data=i * 6_000_000_000, port_rcv_data=i * 6_000_000_000,
                    port_xmit_wait=(base + i * 200_000) % 2**32, symbol_error=0) for i in range(30)]
    alerts = [a for ev in events for a in tracker.update(ev)]
    assert alerts == []
    assert tracker.spikes("n1", 0, T0 + 100) == []


# -- link spikes and alerts ------------------------------------------------------------------------


def test_healthy_port_traffic_has_no_spike():
    tracker = TelemetryTracker()
    for ev in healthy_link_series(120):
        assert tracker.update(ev) == []
    assert tracker.spikes("n1", 0, T0 + 1000) == []


def test_any_error_increase_is_a_spike_and_sustained_errors_fire_link_errors_then_resolve():
    tracker = TelemetryTracker(clear_after=5)
    for ev in healthy_link_series(15):
        tracker.update(ev)
    alerts = []
    sym = 0
    for i in range(15, 20):
        sym += 40
        ev = healthy_link_series(1, start=i, symbol_error=sym)[0]
        alerts += tracker.update(ev)
    [fired] = alerts
    assert fired.type == "link_errors" and fired.status == "firing" and fired.nodes == ("n1",)
    assert fired.evidence["device"] == "mlx5_0" and fired.evidence["errors"] == {"symbol_error": 120}
    assert fired.evidence["began_at"] == T0 + 15
    [spike] = tracker.spikes("n1", T0, T0 + 100)
    assert (spike.signal, spike.component, spike.began, spike.count) == ("symbol_error", "mlx5_0/1", T0 + 15, 200)
    resolved = [a for ev in healthy_link_series(5, start=20, symbol_error=sym) for a in tracker.update(ev)]
    assert [(a.id, a.status) for a in resolved] == [(fired.id, "resolved")]


def test_transmit_wait_far_above_its_baseline_is_a_spike():
    tracker = TelemetryTracker()
    events = healthy_link_series(30)
    wait = events[-1].counters["port_xmit_wait"]
    for i in range(30, 33):
        wait += 2_000_000  # 10x the usual 200k/s
        events.append(link(i, port_xmit_data=i * 6_000_000_000, port_rcv_data=i * 6_000_000_000,
                           port_xmit_wait=wait, symbol_error=0))
    for ev in events:
        tracker.update(ev)
    [spike] = tracker.spikes("n1", T0, T0 + 100)
    assert spike.signal == "port_xmit_wait" and spike.began == T0 + 30 and spike.samples == 3
    assert 8 < spike.peak < 12


def test_bandwidth_collapse_link_down_and_renegotiation_are_spikes():
    tracker = TelemetryTracker(link_error_min_samples=2)
    events = healthy_link_series(20)
    events.append(link(20, port_xmit_data=19 * 6_000_000_000 + 10, port_rcv_data=19 * 6_000_000_000 + 10,
                       port_xmit_wait=events[-1].counters["port_xmit_wait"] + 200_000, symbol_error=0))
    events.append(link(21, state="DOWN", symbol_error=0))
    events.append(link(22, state="DOWN", symbol_error=0))
    events.append(link(23, rate=200.0, symbol_error=0))
    alerts = [a for ev in events for a in tracker.update(ev)]
    signals = [s.signal for s in tracker.spikes("n1", T0, T0 + 100)]
    assert signals == ["bandwidth", "link_down", "rate_down"]
    assert [(a.type, a.severity) for a in alerts] == [("link_errors", "critical")]


# -- GPU faults ------------------------------------------------------------------------------------


def gpu(ts: float, **fields) -> GpuEvent:
    base = dict(node="n1", ts=T0 + ts, gpu=3, util=98.0, sm_clock=1980.0, sm_clock_max=1980.0, throttle=0,
                temp=62.0, ecc_sbe=0, ecc_dbe=0, pcie_gen=5, pcie_gen_max=5, pcie_width=16, pcie_width_max=16)
    base.update(fields)
    return GpuEvent(**base)


def test_thermal_throttling_with_a_clock_drop_is_a_gpu_fault_and_without_one_is_not():
    tracker = TelemetryTracker(clear_after=3)
    alerts = []
    for i in range(15):
        alerts += tracker.update(gpu(i, throttle=0x4 if i % 5 == 0 else 0))  # power cap at full clock: normal
    assert alerts == [] and tracker.spikes("n1", 0, T0 + 100) == []
    for i in range(15, 19):
        alerts += tracker.update(gpu(i, throttle=0x60, sm_clock=1095.0, temp=90.0))
    [fault] = alerts
    assert fault.type == "gpu_fault" and fault.evidence["fault"] == "throttle" and fault.evidence["gpu"] == 3
    assert "thermal throttling" in fault.summary and "1095 MHz" in fault.summary
    for i in range(19, 22):
        alerts += tracker.update(gpu(i))
    assert [a.status for a in alerts] == ["firing", "resolved"]


def test_critical_xid_ecc_dbe_pcie_and_nvlink_faults_but_not_application_xids():
    from stepwatch.models.wire.telemetry_events import XidEvent

    tracker = TelemetryTracker(fault_hold_seconds=60, throttle_min_samples=2)
    nv = lambda up, replay=0: ({"link": 0, "up": up, "replay_errors": replay},)  # noqa: E731
    alerts = tracker.update(gpu(0, nvlinks=nv(True)))
    alerts += tracker.update(XidEvent(node="n1", ts=T0 + 1, gpu=3, xid=13))  # the application's fault
    alerts += tracker.update(XidEvent(node="n1", ts=T0 + 2, gpu=3, xid=79))
    alerts += tracker.update(gpu(3, ecc_dbe=1, nvlinks=nv(True, 5)))
    alerts += tracker.update(gpu(4, ecc_dbe=1, pcie_width=8, nvlinks=nv(False, 9)))
    alerts += tracker.update(gpu(5, ecc_dbe=0, pcie_width=8, nvlinks=nv(False, 9)))  # ECC reset: no new DBE
    faults = sorted(a.evidence["fault"] for a in alerts)
    assert faults == ["ecc_dbe", "nvlink_down", "pcie_downgrade", "xid"]
    assert all(a.severity == "critical" for a in alerts if a.evidence["fault"] != "pcie_downgrade")
    signals = {s.signal for s in tracker.spikes("n1", 0, T0 + 100)}
    assert signals == {"app_xid", "xid", "ecc_dbe", "nvlink_errors", "nvlink_down", "pcie_downgrade"}
    # Xid and ECC faults resolve once not seen again for the hold time (node clock).
    tracker.update(gpu(70, pcie_width=8))
    resolved = tracker.tick(T0 + 70)
    assert sorted(a.evidence["fault"] for a in resolved) == ["ecc_dbe", "xid"]


# -- correlation -----------------------------------------------------------------------------------


def straggler(rank: int, node: str, at: float, job: str = "j") -> Alert:
    return Alert(id=f"s{rank}", status="firing", type="straggler", severity="warning", job=job, ranks=(rank,),
                 nodes=(node,), starts_at=T0 + at, summary=f"straggler: rank {rank}", evidence={})


def test_causes_are_ranked_by_locality_and_limited_to_the_window():
    from stepwatch.models.wire.events import StepEvent
    from stepwatch.models.wire.telemetry_events import TopologyEvent

    tracker = TelemetryTracker()
    corr = TelemetryCorrelator(tracker, window=60)
    tracker.update(TopologyEvent(node="n1", ts=T0, gpus=({"gpu": 1, "nics": ["mlx5_0"]},
                                                         {"gpu": 5, "nics": ["mlx5_1"]}),
                                 nics=({"device": "mlx5_0", "ports": [1]}, {"device": "mlx5_1", "ports": [1]})))
    for dev in ("mlx5_0", "mlx5_1"):
        tracker.update(link(0, device=dev, symbol_error=0))
        tracker.update(link(100, device=dev, symbol_error=50))  # both ports erroring, same size
    tracker.update(link(300, device="mlx5_0", symbol_error=90))  # far outside the window
    for rank in range(8):
        corr.observe_step(StepEvent(job="j", rank=rank, step=1, ts=T0 + 100, step_time=1.0, node="n1", gpu=rank,
                                    data_time=0.02))
    causes = corr.suspects(straggler(5, "n1", 110))
    assert [(c.component, c.near_rank) for c in causes] == [("mlx5_1/1", True), ("mlx5_0/1", False)]
    assert causes[0].hint == "network: mlx5_1/1 symbol errors" and causes[0].began_at == T0 + 100
    assert corr.suspects(straggler(5, "n2", 110)) != [] and corr.suspects(straggler(5, "n1", 200)) == []


def test_slow_input_pipeline_is_a_cause():
    from stepwatch.models.wire.events import StepEvent

    corr = TelemetryCorrelator(TelemetryTracker())
    for step in range(5):
        for rank in range(8):
            corr.observe_step(StepEvent(job="j", rank=rank, step=step, ts=T0 + step, step_time=1.0, node="n1",
                                        gpu=rank, data_time=0.16 if rank == 2 else 0.02))
    [cause] = corr.suspects(straggler(2, "n1", 5))
    assert cause.category == "input_pipeline" and cause.hint == "input pipeline: data_time 8x peers"


def test_enrichment_arriving_after_the_alert_is_a_new_version_of_the_same_alert():
    events = list(TelemetrySimulator(SimulationSpec(ranks=16, ranks_per_node=8, steps=70),
                                     TelemetrySpec(faults=(TelemetryFault(kind="ib_errors", rank=11,
                                                                          start_step=30),))).events())
    steps = [e for e in events if e["kind"] not in ("gpu", "link", "xid", "topology") and e.get("phase") != "end"]
    telemetry = [e for e in events if e["kind"] in ("gpu", "link", "xid", "topology")]
    engine = DetectionEngine()
    fired = [a for e in steps for a in engine.process(parse_event(e))]
    fired = [a for a in fired if a.type == "straggler" and a.status == "firing"]
    assert len(fired) == 1 and "suspected_causes" not in fired[0].evidence  # no telemetry seen yet
    for e in telemetry:
        engine.process(parse_event(e))
    updates = [a for a in engine.tick(engine.clock) if a.type == "straggler"]
    assert len(updates) == 1
    update = updates[0]
    assert (update.id, update.status) == (fired[0].id, "firing")
    top = update.evidence["suspected_causes"][0]
    assert (top["node"], top["component"], top["category"]) == ("node-001", "mlx5_0/1", "network")
    assert update.summary.endswith("suspected cause: network: mlx5_0/1 symbol errors")
    assert engine.tick(engine.clock) == []  # unchanged causes: no further version


# -- simulator through the core --------------------------------------------------------------------


def run_sim(faults=(), steps=110) -> tuple[list[Alert], DetectionEngine]:
    sim = TelemetrySimulator(SimulationSpec(ranks=16, ranks_per_node=8, steps=steps), TelemetrySpec(faults=faults))
    engine = DetectionEngine()

    def events():
        for _, batch in sim.steps():
            decoded, rejected = decode_message(orjson.dumps({"v": 1, "kind": "batch", "events": batch}))
            assert rejected == []
            yield from decoded

    return list(replay(events(), engine=engine)), engine


def test_simulated_healthy_cluster_has_no_spike_and_no_alert():
    alerts, engine = run_sim()
    assert [a for a in alerts if a.type in ("straggler", "hang", "gpu_fault", "link_errors")] == []
    tracker = engine.telemetry.tracker
    assert set(tracker.nodes) == {"node-000", "node-001"}
    assert all(tracker.spikes(n, 0, T0 + 10_000) == [] for n in tracker.nodes)


@pytest.mark.parametrize("kind, hint", [
    ("ib_errors", "network: mlx5_0/1 symbol errors"),
    ("thermal", "compute: GPU 2 thermal throttling"),
    ("congestion", "network: mlx5_0/1 transmit wait"),
])
def test_simulated_fault_is_the_top_cause_of_its_straggler(kind, hint):
    alerts, _ = run_sim((TelemetryFault(kind=kind, rank=10, start_step=40, end_step=80),))
    firing = [a for a in alerts if a.type == "straggler" and a.status == "firing"]
    assert firing and firing[0].ranks == (10,)
    assert firing[-1].evidence["cause_hint"] == hint
    assert firing[-1].evidence["suspected_causes"][0]["near_rank"] is True


# -- wire format -----------------------------------------------------------------------------------


def test_telemetry_events_parse_and_reject_bad_counters():
    ev = parse_event({"v": 1, "kind": "link", "node": "n", "ts": 1.0, "device": "mlx5_0", "port": 1,
                      "counters": {"symbol_error": 2**40}, "fw": "28.39"})
    assert ev.counters == {"symbol_error": 2**40} and ev.extra == {"fw": "28.39"}
    for bad in ({"symbol_error": -1}, {"symbol_error": "N/A"}, {"symbol_error": 1.5}, [1]):
        with pytest.raises(InvalidEvent):
            parse_event({"v": 1, "kind": "link", "node": "n", "ts": 1.0, "device": "d", "port": 1, "counters": bad})
    with pytest.raises(InvalidEvent, match="node"):
        parse_event({"v": 1, "kind": "gpu", "ts": 1.0, "gpu": 0})
    with pytest.raises(InvalidEvent, match="xid"):
        parse_event({"v": 1, "kind": "xid", "node": "n", "ts": 1.0, "gpu": 0})
    topo = parse_event({"v": 1, "kind": "topology", "node": "n", "ts": 1.0,
                        "gpus": [{"gpu": 0, "nics": ["mlx5_0"]}], "nics": [{"device": "mlx5_0", "ports": [1]}]})
    assert topo.gpus[0]["nics"] == ["mlx5_0"]


def test_telemetry_settings_from_env():
    s = Settings.from_env({"STEPWATCH_TELEMETRY_CORRELATION_WINDOW": "30", "STEPWATCH_TELEMETRY_APP_XIDS": "13,31"})
    assert s.telemetry.correlation_window == 30.0 and s.telemetry.app_xid_set() == {13, 31}
    assert TelemetrySettings().agent_interval == 1.0
    with pytest.raises(ValueError):
        dataclasses.replace(TelemetrySettings(), app_xids="x").app_xid_set()


def test_simulate_cli_injects_faults_that_replay_attributes(tmp_path):
    from support import run_stepwatch, stepwatch_env

    recording = tmp_path / "run.jsonl"
    env = stepwatch_env("unused:1", "x.")
    run_stepwatch("simulate", "--ranks", "16", "--steps", "100", "--gpu-fault", "thermal:5:40:1.3",
                  "--out", str(recording), env=env)
    out = run_stepwatch("replay", str(recording), env=env).stdout
    alerts = [orjson.loads(line) for line in out.splitlines()]
    straggler = next(a for a in alerts if a["type"] == "straggler" and a["status"] == "firing")
    assert straggler["ranks"] == [5] and straggler["evidence"]["cause_hint"] == "compute: GPU 5 thermal throttling"
    assert any(a["type"] == "gpu_fault" for a in alerts)


def test_communication_slowdown_is_joined_with_link_spikes_on_its_nodes():
    from stepwatch.models.wire.events import CollectiveEvent

    engine = DetectionEngine()
    engine.process(parse_event({"v": 1, "kind": "topology", "node": "n1", "ts": T0,
                                "gpus": [{"gpu": 0, "nics": ["mlx5_0"]}],
                                "nics": [{"device": "mlx5_0", "ports": [1]}]}))
    alerts = []
    for seq in range(200):
        at = 0.1 * seq
        if seq % 10 == 0:  # the port's symbol errors climb once the slowdown starts
            engine.process(link(at, symbol_error=0 if seq < 100 else seq * 10))
        for rank in range(8):
            slow = 2.0 if seq >= 100 else 1.0
            alerts += engine.process(CollectiveEvent(job="j", rank=rank, seq=seq, op="all_reduce", ts=T0 + at,
                                                     duration=0.01 * slow * (1 + 0.01 * rank), node="n1",
                                                     bytes=2**20))
    fired = [a for a in alerts if a.type == "comm_slowdown" and a.status == "firing"]
    assert fired, "the slowdown fires"
    causes = fired[-1].evidence.get("suspected_causes", [])
    assert causes and causes[0]["component"] == "mlx5_0/1" and "symbol errors" in fired[-1].summary


@pytest.mark.parametrize("fault, component, hint", [
    # What an operator would read next to the straggler: the faulty part of the straggler's own GPU.
    ("nvlink_down", "gpu5/nvlink2", "compute: GPU 5 NVLink 2 down"),
    ("nvlink_errors", "gpu5/nvlink2", "compute: GPU 5 NVLink 2 errors"),
    ("ecc_dbe", "gpu5", "compute: GPU 5 ECC double-bit errors"),
    ("xid", "gpu5", "compute: GPU 5 Xid 79 (GPU has fallen off the bus)"),
])
def test_nvlink_ecc_and_xid_faults_of_its_gpu_are_the_top_suspected_cause_of_a_straggler(fault, component, hint):
    """Rank 5 runs on GPU 5 of n1; GPU 5 has the fault, and GPU 1 of the same node the same fault, smaller or
    later, so only locality and size (not being the only candidate) put GPU 5's first."""
    from stepwatch.models.wire.events import StepEvent
    from stepwatch.models.wire.telemetry_events import XidEvent

    tracker = TelemetryTracker()
    corr = TelemetryCorrelator(tracker, window=60)
    links = lambda up, replay: ({"link": 2, "up": up, "replay_errors": replay},)  # noqa: E731
    for g in (1, 5):  # healthy baselines
        tracker.update(gpu(0, gpu=g, nvlinks=links(True, 0)))
    for g, size in ((1, 1), (5, 40)):
        if fault == "nvlink_down":
            tracker.update(gpu(90, gpu=g, nvlinks=links(False, 0)))
        elif fault == "nvlink_errors":
            tracker.update(gpu(90, gpu=g, nvlinks=links(True, size * 1000)))
        elif fault == "ecc_dbe":
            tracker.update(gpu(90, gpu=g, ecc_dbe=size, nvlinks=links(True, 0)))
        else:
            tracker.update(XidEvent(node="n1", ts=T0 + 90 + (5 if g == 1 else 0), gpu=g, xid=79))
    for rank in range(8):
        corr.observe_step(StepEvent(job="j", rank=rank, step=1, ts=T0 + 100, step_time=1.0, node="n1", gpu=rank,
                                    data_time=0.02))
    causes = corr.suspects(straggler(5, "n1", 100))
    assert causes, "no suspected cause"
    top = causes[0]
    assert (top.component, top.near_rank, top.hint) == (component, True, hint), causes
    assert {c.component.split("/")[0] for c in causes} <= {"gpu1", "gpu5"}


def test_models_telemetry_still_exports_every_part_from_its_own_module():
    # models/telemetry/__init__.py was split by concept; code written against it keeps importing from it.
    from stepwatch.models import telemetry
    from stepwatch.models.telemetry.causes import SuspectedCause
    from stepwatch.models.telemetry.telemetry_hub import TelemetryHub

    assert (telemetry.CounterTrack, telemetry.counter_delta, telemetry.TelemetryCorrelator,
            telemetry.TelemetryTracker, telemetry.SuspectedCause, telemetry.TelemetryHub,
            telemetry.TelemetrySettings) == (CounterTrack, counter_delta, TelemetryCorrelator, TelemetryTracker,
                                             SuspectedCause, TelemetryHub, TelemetrySettings)
    assert all(hasattr(telemetry, name) for name in telemetry.__all__)
