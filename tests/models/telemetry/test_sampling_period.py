"""A GPU's heat and throttling are judged alike at every sampling period of the node agent (neighbours6, issue 39's
method): a run of bad samples is sustained by its count or by the seconds it spans (counters.sustained), so a 60 s
fault seen by two samples of a 30 s agent is the fault three samples of a 5 s agent see; one bad sample never is."""

from __future__ import annotations

import pytest

from stepwatch.config import Settings
from stepwatch.models.detection import DetectionEngine
from stepwatch.models.wire.events import StepEvent
from stepwatch.models.wire.telemetry_events import GpuEvent

T0 = 1_000.0


def _alerts(period: float, hot_from: float, hot_for: float, end: float = 400.0, phase: float = 0.0) -> set[str]:
    """A job of 4 ranks on node a stepping every second; node a's GPUs sampled every ``period`` s (from ``phase``),
    GPU 1 at 90 C, throttled to 60% of its clock, from ``hot_from`` for ``hot_for`` seconds."""
    engine = DetectionEngine(Settings())
    got: set[str] = set()
    samples = [phase + k * period for k in range(int((end - phase) / period) + 1)]
    s, step = 0, 0
    for t in range(int(end)):
        for rank in range(4):
            for a in engine.process(StepEvent(job="j", rank=rank, step=step, ts=T0 + t, step_time=1.0, node="a",
                                              gpu=rank, compute_time=0.8)):
                got.add(str(a.type.value if hasattr(a.type, "value") else a.type))
        step += 1
        while s < len(samples) and samples[s] < t + 1:
            ts = samples[s]
            for g in range(4):
                hot = g == 1 and hot_from <= ts < hot_from + hot_for
                ev = GpuEvent(node="a", ts=T0 + ts, gpu=g, util=98.0, temp=90.0 if hot else 60.0, power=500.0,
                              power_limit=700.0, sm_clock=1200.0 if hot else 1980.0, sm_clock_max=1980.0,
                              throttle=0x40 if hot else 0)
                for a in engine.process(ev):
                    got.add(str(a.type.value if hasattr(a.type, "value") else a.type))
            s += 1
    return got


@pytest.mark.parametrize("period,phase", [(1.0, 0.0), (5.0, 2.0), (10.0, 7.0), (30.0, 0.0), (30.0, 13.0)])
def test_a_60s_fault_is_hot_and_throttled_at_every_period(period, phase):
    got = _alerts(period, hot_from=200.0, hot_for=60.0, phase=phase)
    assert {"gpu_hot", "gpu_fault"} <= got, (period, got)


@pytest.mark.parametrize("period,phase", [(1.0, 0.0), (5.0, 2.0), (30.0, 0.0), (30.0, 13.0)])
def test_one_bad_sample_is_never_sustained(period, phase):
    got = _alerts(period, hot_from=200.0 + (phase % period), hot_for=min(period, 1.0) * 0.5 + 0.01, phase=phase)
    assert not {"gpu_hot", "gpu_fault"} & got, (period, got)


@pytest.mark.parametrize("samples", [1, 2, 3, 5])
def test_sustained_is_the_count_or_two_samples_spanning_its_seconds(samples):
    from stepwatch.models.telemetry.counters import sustained

    assert sustained(samples, samples, 0.0)
    assert not sustained(1, samples, 1e6) or samples == 1
    assert sustained(2, samples, 5.0 * (samples - 1)) and not sustained(samples - 1, samples, 4.9 * (samples - 1)) or samples == 1
