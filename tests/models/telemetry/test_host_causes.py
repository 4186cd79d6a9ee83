"""Host signals as causes, on recordings from an independent generator (tests/host_recording.py) and by hand."""

from __future__ import annotations

import pytest

from stepwatch.config import Settings
from engine_driver import replay
from stepwatch.models.detection import DetectionEngine
from stepwatch.models.wire.events import parse_event
from stepwatch.models.wire.telemetry_events import HostEvent
from stepwatch.models.telemetry.host import HostTracker

from host_recording import recording


def run(events: list[dict]):
    engine = DetectionEngine(Settings())
    alerts = list(replay([parse_event(e) for e in events], engine=engine))
    return engine, alerts


def latest(alerts, kind: str, rank: int | None = None):
    found = [a for a in alerts if a.type == kind and a.status == "firing" and (rank is None or rank in a.ranks)]
    assert found, f"no firing {kind} alert in {[(a.type, a.ranks, a.status) for a in alerts]}"
    return found[-1]


def test_io_stall_straggler_names_its_nodes_disk_or_io_pressure_first():
    engine, alerts = run(recording("io", culprit=11))
    alert = latest(alerts, "straggler", 11)
    assert alert.evidence["signal"] == "data_time"
    first = alert.evidence["suspected_causes"][0]
    assert first["category"] == "host" and first["node"] == "h-1"
    assert first["component"] in ("nvme0n1", "io_pressure")
    by_component = {c["component"]: c for c in alert.evidence["suspected_causes"] if c["category"] == "host"}
    assert {"nvme0n1", "io_pressure"} <= by_component.keys()
    disk = by_component["nvme0n1"]["evidence"][0]
    assert disk["read_ms_per_read"] > 5 and disk["baseline_ms_per_read"] < 0.2  # with the numbers
    assert by_component["io_pressure"]["evidence"][0]["some_avg10_peak"] >= 38
    assert all(c["node"] == "h-1" for c in alert.evidence["suspected_causes"] if c["category"] == "host")
    assert "host:" in alert.summary
    assert engine.telemetry.host.resets == 0  # the wrapped read_ms counter was a wrap, not a reset


def test_cpu_saturation_straggler_names_the_cpu():
    _, alerts = run(recording("cpu", culprit=3))
    alert = latest(alerts, "straggler", 3)
    first = alert.evidence["suspected_causes"][0]
    assert (first["category"], first["component"], first["node"]) == ("host", "cpu", "h-0")
    assert first["evidence"][0]["busy_peak"] >= 0.99
    assert not any(c["component"] in ("io_pressure", "nvme0n1") for c in alert.evidence["suspected_causes"])


def test_rank_killed_by_the_oom_killer_is_silent_with_the_oom_as_cause():
    _, alerts = run(recording("oom", culprit=11, steps=150))
    hang = latest(alerts, "hang")
    assert hang.evidence["case"] == "silent_ranks" and [s["rank"] for s in hang.evidence["silent"]] == [11]
    first = hang.evidence["suspected_causes"][0]
    assert (first["category"], first["component"], first["node"]) == ("host", "oom_kill", "h-1")
    assert first["evidence"][0]["oom_kills"] == 1 and 0 <= first["evidence"][0]["seconds_after_last_event"] <= 5


def test_shared_storage_stall_gives_the_input_layer_throughput_drop_host_causes():
    _, alerts = run(recording("shared_io"))
    drop = latest(alerts, "throughput_drop")
    assert drop.evidence["layer"] == "input pipeline"
    causes = drop.evidence["suspected_causes"]
    assert causes and causes[0]["category"] == "host" and causes[0]["component"] in ("nvme0n1", "io_pressure")
    assert {c["node"] for c in causes} == {"h-0", "h-1"}


@pytest.mark.parametrize("seed", [5, 6, 7])
def test_healthy_job_with_host_noise_raises_nothing(seed):
    engine, alerts = run(recording(None, seed=seed))
    assert alerts == []
    assert engine.telemetry.host.events_seen > 200


def test_counters_wrap_reset_and_disk_appearing_in_the_tracker():
    tracker = HostTracker(baseline_min_samples=2)

    def host(ts, reads, read_ms, idle, disks=("nvme0n1",), oom=0):
        return HostEvent(node="n", ts=ts, cpu={"user": 100 + int(ts) * 50, "idle": idle},
                         disks=tuple({"device": d, "reads": reads, "read_ms": read_ms} for d in disks), oom_kills=oom)

    tracker.update(host(0, 2**32 - 100, 2**32 - 50, 1000))
    tracker.update(host(1, 100, 150, 1050))  # both wrapped at 2**32
    s = tracker.node("n").samples[-1]
    assert s.disks["nvme0n1"] == pytest.approx(200 / 200) and s.cpu_busy == pytest.approx(0.5)
    tracker.update(host(2, 5, 5, 10))  # reboot: counters start again, no value, no crash
    assert "nvme0n1" not in tracker.node("n").samples[-1].disks and tracker.resets == 1
    tracker.update(host(3, 50, 50, 60, disks=("nvme0n1", "nvme1n1")))  # a disk appears: first sample, no rate
    assert set(tracker.node("n").samples[-1].disks) == {"nvme0n1"}
    tracker.update(host(4, 100, 100, 110, disks=("nvme0n1", "nvme1n1"), oom=2))
    assert set(tracker.node("n").samples[-1].disks) == {"nvme0n1", "nvme1n1"}
    assert tracker.ooms("n") == [(4, 2, 2)]
    tracker.update(host(5, 150, 150, 160, oom=3))
    assert tracker.ooms("n") == [(4, 2, 2), (5, 1, 3)]
    tracker.update(HostEvent(node="m", ts=0, oom_kills=7))  # kills before the agent started are no news
    assert tracker.ooms("m") == []


def test_a_disk_slow_from_the_start_is_judged_against_its_peers():
    from stepwatch.models.alerts import Alert
    from stepwatch.models.telemetry.host import HostCorrelator

    tracker = HostTracker()
    reads = {"a": 0, "b": 0, "c": 0}
    read_ms = {"a": 0, "b": 0, "c": 0}
    for i in range(8):  # too few samples for any baseline: only the peers can tell
        for node, per_read in (("a", 6.0), ("b", 0.12), ("c", 0.15)):
            reads[node] += 1000
            read_ms[node] += int(1000 * per_read)
            tracker.update(HostEvent(node=node, ts=100.0 + i + (0.3 if node == "b" else 0.0),
                                     disks=({"device": "nvme0n1", "reads": reads[node], "read_ms": read_ms[node]},)))
    corr = HostCorrelator(tracker)
    alert = Alert(id="x", status="firing", type="straggler", severity="warning", job="j", ranks=(3,), nodes=("a",),
                  starts_at=105.0, summary="s", evidence={"signal": "data_time"})
    [cause] = corr.suspects(alert, at=105.0, placement=lambda job, rank: (None, None), job_nodes=lambda job: [])
    assert (cause.category, cause.component, cause.node) == ("host", "nvme0n1", "a")
    ev = cause.evidence[0]
    assert ev["read_ms_per_read"] == 6.0 and 0.12 <= ev["peers_ms_per_read"] <= 0.15
    assert "baseline_ms_per_read" not in ev
    healthy = Alert(id="y", status="firing", type="straggler", severity="warning", job="j", ranks=(9,), nodes=("b",),
                    starts_at=105.0, summary="s", evidence={"signal": "data_time"})
    assert corr.suspects(healthy, at=105.0, placement=lambda job, rank: (None, None), job_nodes=lambda job: []) == []


def test_causes_stay_once_the_window_closed_and_the_samples_are_gone():
    from stepwatch.models.alerts import Alert
    from stepwatch.models.telemetry.host import HostCorrelator

    tracker = HostTracker(history=100)
    corr = HostCorrelator(tracker, window=60.0)
    alert = Alert(id="x", status="firing", type="straggler", severity="warning", job="j", ranks=(3,), nodes=("a",),
                  starts_at=20.0, summary="s", evidence={"signal": "data_time"})

    def causes():
        return corr.suspects(alert, at=20.0, placement=lambda job, rank: (None, None), job_nodes=lambda job: [])

    for i in range(300):
        io = 45.0 if 15 <= i < 25 else 1.0
        tracker.update(HostEvent(node="a", ts=float(i), psi={"io": {"some_avg10": io}}))
        if i in (30, 85):
            first = causes()
            assert [c.component for c in first] == ["io_pressure"]
    assert len(tracker.node("a").samples) == 100 and tracker.node("a").samples[0].ts == 200.0
    assert causes() == first  # computed at sample 85, when the window had closed
