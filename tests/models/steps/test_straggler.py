"""The straggler rule in the pure core: driven by events and explicit time, no Kafka."""

from __future__ import annotations

import dataclasses

import pytest

from stepwatch.config import Settings, StragglerSettings
from engine_driver import replay
from support import full_or
from stepwatch.models.detection import DetectionEngine
from stepwatch.models.wire.events import parse_event
from stepwatch.sim.simulator import ClusterSimulator, JobSlowdown, SimulationSpec, StragglerFault


class CapturingEngine:
    """The engine with a capturing sink: every alert it returns, in order."""

    def __init__(self, settings: Settings | None = None) -> None:
        self.engine = DetectionEngine(settings)
        self.alerts = []

    def run(self, spec: SimulationSpec):
        for event in ClusterSimulator(spec).events():
            self.alerts.extend(self.engine.process(parse_event(event)))
        return self.alerts


def straggler_alerts(alerts, status=None):
    return [a for a in alerts if a.type == "straggler" and (status is None or a.status == status)]


def test_persistent_15_percent_compute_slowdown_is_flagged_within_a_handful_of_steps():
    spec = SimulationSpec(ranks=64, steps=200, stragglers=(StragglerFault(rank=23, start_step=80, factor=1.15),))
    alerts = CapturingEngine().run(spec)
    firing = straggler_alerts(alerts, "firing")
    assert len(firing) == 1
    alert = firing[0]
    assert alert.ranks == (23,)
    assert alert.nodes == ("node-002",)
    assert alert.evidence["signal"] == "compute_time"
    assert alert.evidence["first_step"] == 80
    assert alert.evidence["detected_step"] - 80 <= 4  # 3 of 5 slow steps
    assert 1.12 <= alert.evidence["ratio"] <= 1.18
    assert "rank 23" in alert.summary and "node-002" in alert.summary and "since step 80" in alert.summary
    assert alert.to_dict()["labels"]["alertname"] == "stepwatch_straggler"
    assert "ranks" not in alert.to_dict()["labels"]  # per-rank detail stays out of labels


@pytest.mark.parametrize("seed", full_or([1, 2, 3], [1]))  # CI: one seed; STEPWATCH_FULL_GRID=1: three
def test_healthy_noise_over_thousands_of_steps_raises_nothing(seed):
    # 1% jitter, GC spikes, frequent data-loader hiccups, warm-up and checkpoint pauses: all normal.
    spec = SimulationSpec(ranks=32, steps=3000, checkpoint_every=250, seed=seed, hiccup_probability=0.02)
    assert CapturingEngine().run(spec) == []


def test_every_rank_slowing_down_together_is_not_a_straggler():
    spec = SimulationSpec(ranks=64, steps=300, slowdowns=(JobSlowdown(start_step=50, factor=1.6, end_step=200),))
    alerts = CapturingEngine().run(spec)
    assert straggler_alerts(alerts) == []
    # It is a job-wide throughput drop instead, in the compute layer.
    assert [(a.type, a.status) for a in alerts] == [("throughput_drop", "firing"), ("throughput_drop", "resolved")]
    assert alerts[0].evidence["layer"] == "compute" and alerts[0].evidence["onset_step"] == 50


def test_checkpoint_phase_is_skipped():
    # Rank 0 writes the checkpoint metadata and takes 20% longer in the checkpoint step.
    spec = SimulationSpec(ranks=16, steps=400, checkpoint_every=20, checkpoint_seconds=30)
    assert CapturingEngine().run(spec) == []


def test_job_level_checkpoint_phase_covers_steps_without_a_phase():
    engine = DetectionEngine()
    alerts = []
    base = 1000.0
    for step in range(40):
        if step == 20:
            alerts += engine.process(parse_event({"v": 1, "kind": "phase", "job": "j", "ts": base, "phase": "checkpoint"}))
        if step == 30:
            alerts += engine.process(parse_event({"v": 1, "kind": "phase", "job": "j", "ts": base, "phase": "train"}))
        for rank in range(8):
            slow = 20 <= step < 30 and rank == 3  # this rank writes the checkpoint
            alerts += engine.process(parse_event({
                "v": 1, "kind": "step", "job": "j", "rank": rank, "step": step, "ts": base + 1,
                "step_time": 1.0, "compute_time": 2.0 if slow else 0.8 + 0.001 * rank}))
        base += 1
    assert alerts == []


def test_resolves_after_recovery_with_the_same_id():
    spec = SimulationSpec(ranks=32, steps=200,
                          stragglers=(StragglerFault(rank=5, start_step=40, factor=1.3, end_step=90),))
    alerts = straggler_alerts(CapturingEngine().run(spec))
    assert [a.status for a in alerts] == ["firing", "resolved"]
    firing, resolved = alerts
    assert firing.id == resolved.id
    assert resolved.ends_at is not None and resolved.ends_at > firing.starts_at
    assert resolved.evidence["resolved_step"] >= 90
    assert resolved.evidence["resolved_step"] - 90 <= 11  # 10 clean steps clear it (the default clear_after)


def test_straggler_still_slow_at_job_end_is_resolved_by_the_end():
    spec = SimulationSpec(ranks=16, steps=60, stragglers=(StragglerFault(rank=2, start_step=20, factor=1.6),))
    alerts = straggler_alerts(CapturingEngine().run(spec))
    assert [a.status for a in alerts] == ["firing", "resolved"]
    assert "job ended" in alerts[1].summary
    assert alerts[0].severity == "critical"  # 1.6x is above the critical ratio (1.5)


def test_peers_are_compared_within_their_pipeline_stage():
    # Later stages are slower by design (15% per stage): comparing across stages would flag
    # the whole last stage forever; within a stage only the real straggler stands out.
    spec = SimulationSpec(ranks=32, stages=4, steps=200,
                          stragglers=(StragglerFault(rank=9, start_step=50, factor=1.2),))
    firing = straggler_alerts(CapturingEngine().run(spec), "firing")
    assert [a.ranks for a in firing] == [(9,)]
    assert firing[0].evidence["group"] == "stage1"


def test_arrival_skew_is_used_when_compute_time_is_absent():
    spec = SimulationSpec(ranks=32, steps=150, stragglers=(StragglerFault(rank=11, start_step=50, factor=1.25),))
    engine = DetectionEngine()
    alerts = []
    for event in ClusterSimulator(spec).events():
        event.pop("compute_time", None)
        alerts += engine.process(parse_event(event))
    firing = straggler_alerts(alerts, "firing")
    assert [a.ranks for a in firing] == [(11,)]
    assert firing[0].evidence["signal"] == "arrival"


def test_thresholds_come_from_settings():
    strict = dataclasses.replace(Settings(), straggler=StragglerSettings(ratio_threshold=1.5))
    spec = SimulationSpec(ranks=32, steps=150, stragglers=(StragglerFault(rank=4, start_step=40, factor=1.3),))
    # The short rule stays quiet; the long-horizon rule (info) still reports the steady 30% waste.
    assert [(a.severity, a.evidence["horizon"]) for a in CapturingEngine(strict).run(spec) if a.status == "firing"] \
        == [("info", "long")]
    no_long = dataclasses.replace(strict, straggler=dataclasses.replace(strict.straggler, long_min_effect=0.0))
    assert CapturingEngine(no_long).run(spec) == []
    assert straggler_alerts(CapturingEngine().run(spec), "firing")


def test_settings_env_overrides_and_errors():
    s = Settings.from_env({"STEPWATCH_STRAGGLER_RATIO_THRESHOLD": "1.25", "KAFKA_BOOTSTRAP": "h:1"})
    assert s.straggler.ratio_threshold == 1.25
    assert s.kafka.bootstrap == "h:1"
    with pytest.raises(ValueError, match="STEPWATCH_STRAGGLER_WINDOW"):
        Settings.from_env({"STEPWATCH_STRAGGLER_WINDOW": "five"})


def test_missing_rank_does_not_stall_detection():
    # Rank 7 stops reporting; steps close by lag and the other ranks are still judged.
    spec = SimulationSpec(ranks=16, steps=120, stragglers=(StragglerFault(rank=3, start_step=60, factor=1.3),))
    engine = DetectionEngine()
    alerts = []
    for event in ClusterSimulator(spec).events():
        if event.get("rank") == 7 and event.get("step", 0) >= 30:
            continue
        alerts += engine.process(parse_event(event))
    assert [a.ranks for a in straggler_alerts(alerts, "firing")] == [(3,)]


def test_replay_is_deterministic():
    spec = SimulationSpec(ranks=32, steps=200, seed=7,
                          stragglers=(StragglerFault(rank=1, start_step=40, factor=1.2, end_step=120),))
    events = [parse_event(e) for e in ClusterSimulator(spec).events()]
    first = [a.to_dict() for a in replay(events)]
    second = [a.to_dict() for a in replay(events)]
    assert first and first == second


def test_a_rank_whose_input_pipeline_stalls_is_a_straggler_named_by_data_time():
    from stepwatch.sim.simulator import DataStall

    spec = SimulationSpec(ranks=32, steps=160, effects=(DataStall(rank=9, start_step=60, seconds=0.4,
                                                                   end_step=110),))
    alerts = straggler_alerts(CapturingEngine().run(spec))
    assert [(a.status, a.ranks) for a in alerts] == [("firing", (9,)), ("resolved", (9,))]
    firing = alerts[0]
    assert firing.evidence["signal"] == "data_time" and firing.evidence["cause"] == "input pipeline"
    assert firing.evidence["first_step"] == 60 and firing.evidence["detected_step"] <= 60 + 5
    assert "input data" in firing.summary and 1.3 < firing.evidence["ratio"] < 1.6


def test_frequent_single_data_loader_hiccups_are_not_a_stall():
    spec = SimulationSpec(ranks=32, steps=3000, seed=4, hiccup_probability=0.05)
    assert straggler_alerts(CapturingEngine().run(spec)) == []


def test_steps_overtaken_by_the_jobs_end_do_not_reopen_its_alerts():
    # With the shard stage, a job's `end` (keyed by job) can reach the worker before the last steps of
    # ranks on other shards. Those steps are stamped before the end: late, not a restart.
    spec = SimulationSpec(ranks=16, steps=80, stragglers=(StragglerFault(rank=3, start_step=30, factor=1.5),))
    events = [parse_event(e) for e in ClusterSimulator(spec).events()]
    end = next(i for i, e in enumerate(events) if e.kind == "phase" and e.phase == "end")
    held = [e for e in events[:end] if e.kind == "step" and e.step >= 78 and e.rank >= 8]
    order = [e for e in events[:end] if e not in held] + [events[end]] + held + events[end + 1:]
    engine = DetectionEngine()
    alerts = [a for e in order for a in engine.process(e)]
    assert [(a.status, a.ranks) for a in alerts] == [("firing", (3,)), ("resolved", (3,))]
    assert "job ended" in alerts[-1].summary
    assert engine.jobs[spec.job].late_after_end == len(held)
    # A step after the end is a restart: the job is watched again.
    restart = dataclasses.replace(held[0], step=0, ts=events[end].ts + 60)
    engine.process(restart)
    assert not engine.jobs[spec.job].ended


def test_a_steps_medians_are_taken_once_by_all_the_rules_and_a_replaced_step_takes_its_own():
    """The step rules share a closed step's medians (models/steps/robust.py ``step_median``): the same floats as
    np.median / np.nanmedian, kept on the step; a step made by ``dataclasses.replace`` (the engine's arrival
    signal) has its own."""
    import numpy as np

    from stepwatch.models.jobhealth.throughput import sample_from
    from stepwatch.models.steps.assembly import GroupStep
    from stepwatch.models.steps.robust import step_median
    from stepwatch.models.steps.straggler import StragglerDetector

    n = 9
    step = GroupStep(job="j", group="", step=50, ts=1000.0, ranks=np.arange(n), step_time=np.linspace(1.0, 1.8, n),
                     compute_time=np.linspace(0.5, 0.9, n) ** 2, comm_time=np.full(n, 0.3),
                     data_time=np.array([0.01, np.nan] * 4 + [0.02]), tokens=np.full(n, 10.0), nodes=("a",) * n,
                     phase="train")
    StragglerDetector(job="j", warmup_steps=0).update(step)
    sample = sample_from(step)
    assert step.medians["compute_time"] == float(np.median(step.compute_time)) == sample.compute
    assert step.medians["data_time"] == float(np.nanmedian(step.data_time)) == sample.data
    assert step.medians["before"] == float(np.median(step.step_time - step.comm_time))
    step.compute_time[:] = 7.0  # taken once: the kept median stays (a closed step's columns never change)
    assert step_median(step, "compute_time") == float(np.median(np.linspace(0.5, 0.9, n) ** 2))
    other = dataclasses.replace(step, comm_time=np.full(n, 0.1))
    assert other.medians == {} and step_median(other, "compute_time") == 7.0
