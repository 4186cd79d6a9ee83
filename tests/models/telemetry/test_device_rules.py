"""Seed 003's device-layer rules (gpu_idle, gpu_hot, hbm_full) through the detection engine, by hand."""

from __future__ import annotations

import dataclasses

import pytest

from stepwatch.config import HostSettings, Settings
from stepwatch.models.detection import DetectionEngine
from stepwatch.models.wire.events import StepEvent
from stepwatch.models.wire.telemetry_events import GpuEvent

GIB = 2**30


class Cluster:
    """Two nodes of 4 GPUs, a job of 4 ranks on node a (GPUs 0-3), node b idle; one sample a second."""

    def __init__(self, **host) -> None:
        settings = Settings()
        if host:
            settings = dataclasses.replace(settings, host=dataclasses.replace(HostSettings(), **host))
        self.engine = DetectionEngine(settings)
        self.t = 1_000.0
        self.step = 0
        self.alerts = []

    def tick(self, *, util=None, temp=None, mem_used=None, step_time=1.0, stepping=True, gpu=1, node="a"):
        if stepping:
            for rank in range(4):
                self.alerts += self.engine.process(StepEvent(job="j", rank=rank, step=self.step, ts=self.t,
                                                             step_time=step_time, node="a", gpu=rank,
                                                             compute_time=0.8 * step_time))
            self.step += 1
        for n in ("a", "b"):
            for g in range(4):
                hit = (n, g) == (node, gpu)
                self.alerts += self.engine.process(GpuEvent(
                    node=n, ts=self.t + (0.5 if n == "b" else 0.0), gpu=g,
                    util=util if hit and util is not None else 97.0,
                    temp=temp if hit and temp is not None else 62.0,
                    mem_used=mem_used if hit and mem_used is not None else 60 * GIB, mem_total=80 * GIB))
        self.t += 1.0

    def of(self, kind):
        return [a for a in self.alerts if a.type == kind]


def test_gpu_hot_needs_three_consecutive_hot_samples_and_resolves():
    c = Cluster()
    for temp in (84, 86, 86, 84, 86, 86):
        c.tick(temp=temp)
    assert c.of("gpu_hot") == []
    c.tick(temp=87)
    [hot] = c.of("gpu_hot")
    assert hot.status == "firing" and hot.nodes == ("a",) and hot.job == ""  # a node alert
    assert hot.evidence["gpu"] == 1 and hot.evidence["temp_c"] == 87 and hot.evidence["job"] == "j"
    assert hot.evidence["rank"] == 1
    for _ in range(5):
        c.tick(temp=70)
    # hysteresis (issue 39): 5 clean samples are not enough, a minute of them is (device_clear_seconds)
    assert [a.status for a in c.of("gpu_hot")] == ["firing"]
    for _ in range(56):
        c.tick(temp=70)
    assert [a.status for a in c.of("gpu_hot")] == ["firing", "resolved"]


@pytest.mark.parametrize("seed", range(4))
def test_a_temperature_hovering_at_the_threshold_is_one_gpu_hot(seed):
    import math

    c = Cluster()
    for i in range(600):  # ten minutes at 85 C +- 1.5 C (and brief dips to 83 C): one incident
        c.tick(temp=round(85.0 + 1.5 * math.sin((i + 13 * seed) / 7.0) - (2.0 if (i + seed) % 53 == 0 else 0.0), 1))
    assert [a.status for a in c.of("gpu_hot")] == ["firing"]
    for _ in range(70):  # well below (past the clear threshold): resolved, once
        c.tick(temp=80.0)
    assert [a.status for a in c.of("gpu_hot")] == ["firing", "resolved"]


def test_gpu_idle_on_a_ranks_gpu_while_the_job_steps():
    c = Cluster(gpu_idle_seconds=60.0)
    for _ in range(20):
        c.tick()
    for _ in range(60):  # idle from the first low sample: 59 s at the 60th
        c.tick(util=3.0, gpu=2)
    assert c.of("gpu_idle") == []
    c.tick(util=4.0, gpu=2)
    [idle] = c.of("gpu_idle")
    assert idle.job == "j" and idle.ranks == (2,) and idle.nodes == ("a",)
    assert idle.evidence["idle_seconds"] >= 60 and idle.evidence["util"] == 4.0
    for _ in range(61):  # a minute past the clear threshold (device_clear_seconds)
        c.tick(util=95.0, gpu=2)
    assert [a.status for a in c.of("gpu_idle")] == ["firing", "resolved"]


def test_no_gpu_idle_for_a_gpu_without_a_rank_or_a_job_that_stopped():
    c = Cluster(gpu_idle_seconds=30.0, gpu_hot_samples=3)
    for _ in range(10):
        c.tick()
    for _ in range(60):
        c.tick(util=0.0, gpu=3, node="b")  # no rank on b
    for _ in range(200):
        c.tick(util=0.0, gpu=1, stepping=False)  # the job stopped (a hang, the end): not this rule
    assert c.of("gpu_idle") == []


def test_hbm_full_only_with_the_step_time_growing():
    c = Cluster()
    for _ in range(40):
        c.tick(mem_used=76 * GIB, step_time=1.0)  # 95% used, steady: big models do that
    assert c.of("hbm_full") == []
    for _ in range(12):
        c.tick(mem_used=77 * GIB, step_time=1.3)
    [full] = c.of("hbm_full")
    assert full.job == "j" and full.evidence["used_ratio"] > 0.9 and full.evidence["step_time_growth"] >= 1.1
    assert full.evidence["rank"] == 1
