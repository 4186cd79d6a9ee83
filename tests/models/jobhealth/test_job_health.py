"""Job-wide rules on recorded sequences: throughput drop, communication slowdown, checkpoint staleness."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from stepwatch.models.steps.assembly import GroupStep
from stepwatch.models.jobhealth.checkpoint import CheckpointDetector
from stepwatch.models.jobhealth.comm import CommSlowdownDetector
from stepwatch.models.wire.events import CollectiveEvent
from stepwatch.models.jobhealth.throughput import ThroughputDetector, sample_from


def group_step(step, *, ranks=16, compute=0.8, comm=0.15, data=0.02, tokens=4096.0, rng):
    compute_v = compute * (1 + 0.01 * rng.standard_normal(ranks))
    data_v = data * (1 + 0.05 * rng.standard_normal(ranks))
    step_time = float((compute_v + data_v).max() + comm)
    return GroupStep(job="j", group="", step=step, ts=1000.0 + step, ranks=np.arange(ranks),
                     step_time=np.full(ranks, step_time), compute_time=compute_v,
                     comm_time=step_time - compute_v - data_v, data_time=data_v,
                     tokens=np.full(ranks, tokens), nodes=(None,) * ranks, phase="train")


def run_throughput(profile, **kwargs):
    """profile(step) -> dict of group_step keyword overrides."""
    rng = np.random.default_rng(0)
    detector = ThroughputDetector(job="j", **kwargs)
    alerts = []
    for step in range(400):
        alerts += detector.update(sample_from(group_step(step, rng=rng, **profile(step))))
    return alerts


def test_30_percent_compute_drop_is_reported_within_a_few_steps_with_the_layer():
    alerts = run_throughput(lambda s: {"compute": 0.8 * (1.3 if 200 <= s < 300 else 1.0)})
    assert [a.status for a in alerts] == ["firing", "resolved"]
    firing = alerts[0]
    assert firing.type == "throughput_drop" and firing.evidence["layer"] == "compute"
    assert 200 <= firing.evidence["onset_step"] <= 201
    assert firing.evidence["detected_step"] - 200 <= 5
    assert 0.2 <= firing.evidence["slowdown"] <= 0.35
    assert firing.evidence["recent_tokens_per_second"] < firing.evidence["baseline_tokens_per_second"]


def test_communication_and_input_pipeline_layers_are_named():
    comm = run_throughput(lambda s: {"comm": 0.15 + (0.35 if s >= 200 else 0.0)})
    assert comm and comm[0].evidence["layer"] == "communication"
    data = run_throughput(lambda s: {"data": 0.02 + (0.4 if s >= 200 else 0.0)})
    assert data and data[0].evidence["layer"] == "input pipeline"


def test_diurnal_drift_and_single_slow_steps_stay_quiet():
    # A 2% sinusoidal drift over the run, and a 3x step every 50 steps (GC, hiccups).
    def profile(s):
        factor = 1 + 0.02 * np.sin(2 * np.pi * s / 400)
        if s % 50 == 25:
            factor *= 3
        return {"compute": 0.8 * factor}

    assert run_throughput(profile) == []


def test_tokens_per_second_drop_without_step_time_change():
    alerts = run_throughput(lambda s: {"tokens": 4096.0 if s < 200 else 2048.0})
    assert alerts and alerts[0].type == "throughput_drop"


def test_steps_closed_without_some_ranks_are_not_a_throughput_drop():
    # A quarter of the ranks' events arrive too late for 40 steps (e.g. a shard stage process died and
    # its partitions moved on): their steps close with 12 of 16 ranks. Fewer tokens are counted, but
    # every rank that reported ran at full speed.
    assert run_throughput(lambda s: {"ranks": 12 if 200 <= s < 240 else 16}) == []


def test_steps_missing_the_last_rank_to_arrive_are_left_out_for_a_while():
    # The slowest rank (1.3x compute) stops reporting for 40 steps: the last rank present waited for
    # it, so those steps would read as a 20-30% slower job. They are left out; the same steps for
    # longer than max_incomplete_steps become the job's new normal and are judged.
    def slow_rank_missing(s, last):
        rng = np.random.default_rng(s)
        step = group_step(s, rng=rng)
        compute = step.compute_time.copy()
        compute[-1] *= 1.3
        step_time = float((compute + step.data_time).max() + 0.15)
        keep = slice(0, 15) if 200 <= s < last else slice(0, 16)
        return dataclasses.replace(
            step, ranks=step.ranks[keep], compute_time=compute[keep], data_time=step.data_time[keep],
            step_time=np.full(16, step_time)[keep], comm_time=(step_time - compute - step.data_time)[keep],
            tokens=step.tokens[keep], missing=1 if 200 <= s < last else 0)

    for last, expect in ((240, []), (400, ["firing"])):
        detector = ThroughputDetector(job="j", max_incomplete_steps=100)
        alerts = [a for s in range(400) for a in detector.update(sample_from(slow_rank_missing(s, last)))]
        assert [a.status for a in alerts] == expect


def collectives(detector, seq_range, *, ranks=8, base=0.010, slow_from=None, factor=1.0, straggler=None):
    alerts = []
    rng = np.random.default_rng(1)
    for seq in seq_range:
        transfer = base * (factor if slow_from is not None and seq >= slow_from else 1.0)
        for rank in range(ranks):
            wait = 0.0 if rank == straggler else (0.05 if straggler is not None else rng.uniform(0, 0.002))
            alerts += detector.update(CollectiveEvent(
                job="j", rank=rank, seq=seq, op="all_reduce", ts=1000.0 + seq * 0.1,
                duration=transfer * (1 + 0.02 * rng.standard_normal()) + wait, node=f"n{rank // 4}",
                bytes=25 * 2**20))
    return alerts


def test_35_percent_all_reduce_latency_rise_fires_and_10_percent_does_not():
    fired = collectives(CommSlowdownDetector(job="j"), range(300), slow_from=150, factor=1.35)
    assert [a.type for a in fired] == ["comm_slowdown"]
    assert fired[0].evidence["op"] == "all_reduce" and fired[0].evidence["increase"] >= 0.3
    assert fired[0].evidence["detected_seq"] - 150 <= 25
    assert collectives(CommSlowdownDetector(job="j"), range(300), slow_from=150, factor=1.10) == []


def test_a_straggler_does_not_look_like_a_network_problem():
    # Everyone but rank 3 waits 50 ms in each collective for rank 3: durations balloon, transfer doesn't.
    detector = CommSlowdownDetector(job="j")
    collectives(detector, range(100))
    assert collectives(detector, range(100, 300), straggler=3) == []


def test_checkpoint_staleness_fires_at_its_threshold_and_resolves_at_the_next_checkpoint():
    det = CheckpointDetector(job="j", max_age_seconds=600)
    det.observe(0.0, 0)
    assert det.on_phase(10.0, "checkpoint", 10) == []
    assert det.on_phase(40.0, "train", 10) == []
    det.observe(590.0, 25)  # stepping on past its usual 10 steps between checkpoints (a hung job is not stale)
    assert det.check(600.0) == []  # 560 s since the checkpoint ended
    fired = det.check(641.0)
    assert [a.type for a in fired] == ["checkpoint_stale"] and fired[0].evidence["reason"] == "age"
    assert fired[0].evidence["basis"] == "reported" and "reported checkpoints before" in fired[0].summary
    assert det.check(700.0) == []  # still open: not fired twice
    det.on_phase(900.0, "checkpoint", 900)
    resolved = det.on_phase(930.0, "train", 900)
    assert [(a.status, a.id) for a in resolved] == [("resolved", fired[0].id)]


def test_checkpoint_staleness_by_steps_and_without_any_checkpoint():
    det = CheckpointDetector(job="j", max_age_seconds=0, max_age_steps=1000)
    det.observe(0.0, 0)
    det.on_phase(5.0, "checkpoint", 0)
    det.on_phase(6.0, "train", 0)
    det.observe(100.0, 1000)
    assert det.check(100.0) == []
    det.observe(101.0, 1001)
    assert det.check(101.0)[0].evidence["steps_since"] == 1001
    # A job that never reported a checkpoint is stale only where a policy requires checkpoints.
    silent = CheckpointDetector(job="k", max_age_seconds=3600)
    silent.observe(0.0, 0)
    assert silent.check(3601.0) == [] and silent.check(99_999.0) == []
    never = CheckpointDetector(job="k", max_age_seconds=3600, required=True)
    never.observe(0.0, 0)
    alert = never.check(3601.0)[0]
    assert "no checkpoint since the job started" in alert.summary and "policy requires" in alert.summary
    assert alert.evidence["basis"] == "policy"


def test_a_checkpoint_much_slower_than_usual_fires():
    det = CheckpointDetector(job="j", max_age_seconds=0)
    t = 0.0
    for i in range(4):
        det.on_phase(t, "checkpoint", i * 100)
        assert det.on_phase(t + 20.0, "train", i * 100) == []
        t += 1000
    det.on_phase(t, "checkpoint", 400)
    slow = det.on_phase(t + 90.0, "train", 400)
    assert [a.evidence["reason"] for a in slow] == ["slow"]
    det.on_phase(t + 1000, "checkpoint", 500)
    assert [a.status for a in det.on_phase(t + 1020, "train", 500)] == ["resolved"]


def test_slis_measure_straggler_waste_productive_share_and_mfu():
    from stepwatch.models.detection import DetectionEngine
    from stepwatch.models.wire.events import parse_event
    from stepwatch.sim.simulator import ClusterSimulator, SimulationSpec, StragglerFault

    def run(spec, extra=None):
        engine = DetectionEngine()
        for event in ClusterSimulator(spec).events():
            if extra and event["kind"] == "step":
                event.update(extra)
            engine.process(parse_event(event))
        return engine.job_sli("sim-job")

    healthy = run(SimulationSpec(ranks=16, steps=200, checkpoint_every=100),
                  {"model_flops_per_token": 6e9, "peak_flops_per_gpu": 1e15})
    slow = run(SimulationSpec(ranks=16, steps=200, checkpoint_every=100,
                              stragglers=(StragglerFault(rank=3, start_step=20, factor=1.5),)))
    # Rank 3 is 0.4 s late on each of ~170 train steps, and 16 GPUs wait for it.
    assert slow["straggler_gpu_seconds"] > healthy["straggler_gpu_seconds"] + 0.35 * 16 * 150
    assert 0.8 < healthy["steps_per_second"] < 1.1  # ~0.97 s steps
    # Written out from the simulation's parameters (not from the other outputs): 16 ranks x 4096 tokens per
    # 0.97 s step (0.80 compute + 0.02 data + 0.15 comm) = 67,563 tokens/s; the noise makes it a little less.
    assert healthy["tokens_per_second"] == pytest.approx(67_563, rel=0.05)
    assert 0.85 < healthy["productive_share"] < 1.0  # a 20 s checkpoint pause in ~200 s
    # MFU: 67,563 tokens/s x 6 GFLOP per token over 16 GPUs x 1 PFLOP/s = 0.0253.
    assert healthy["mfu"] == pytest.approx(0.0253, rel=0.05)
    assert slow["mfu"] is None


def test_idle_and_ended_jobs_are_evicted_and_their_alerts_resolved():
    from stepwatch.config import RetentionSettings, Settings
    from stepwatch.models.detection import DetectionEngine
    from stepwatch.models.wire.events import parse_event
    from stepwatch.sim.simulator import ClusterSimulator, SimulationSpec, StragglerFault
    import dataclasses

    settings = dataclasses.replace(Settings(), retention=RetentionSettings(job_idle_seconds=600,
                                                                           ended_job_seconds=60, max_jobs=2))
    engine = DetectionEngine(settings)
    spec = SimulationSpec(job="idle", ranks=8, steps=60, stragglers=(StragglerFault(rank=1, start_step=20,
                                                                                    factor=1.5),))
    events = [parse_event(e) for e in ClusterSimulator(spec).events() if e.get("phase") != "end"]
    now = events[0].ts
    for event in events:
        engine.process(event)
        if event.ts - now >= 1:
            now = event.ts
            engine.tick(now)
    assert [a.type for a in engine.open_alerts()] == ["straggler"]
    hang = engine.tick(now + 599)  # the job stopped stepping without an end: a hang first
    assert [(a.type, a.status) for a in hang] == [("hang", "firing")] and "idle" in engine.jobs
    evicted = engine.tick(now + 601)
    assert sorted((a.status, a.type) for a in evicted) == [("resolved", "hang"), ("resolved", "straggler")]
    assert all("state evicted" in a.summary for a in evicted) and "idle" not in engine.jobs
    # A job that ended goes sooner; more jobs than max_jobs pushes out the least recently active.
    for job in ("a", "b", "c"):
        engine.process(parse_event({"v": 1, "kind": "phase", "job": job, "ts": now + 700, "phase": "train"}))
        engine.tick(now + 700 + ord(job))
    assert set(engine.jobs) == {"b", "c"}
    engine.process(parse_event({"v": 1, "kind": "phase", "job": "c", "ts": now + 900, "phase": "end"}))
    engine.tick(now + 900)
    engine.tick(now + 1000)
    assert set(engine.jobs) == {"b"}


def test_producer_clock_offset_is_allowed_for_by_time_driven_rules():
    # A live worker ticks with its wall clock; a job whose clock is far behind (or whose
    # recording is replayed into a live worker) is neither idle nor hung because of it.
    from stepwatch.models.detection import DetectionEngine
    from stepwatch.models.wire.events import parse_event

    engine = DetectionEngine()
    offset = 7.0e8
    for step in range(30):
        for rank in range(8):
            ts = 1.0e9 + step
            engine.process(parse_event({"v": 1, "kind": "step", "job": "old", "rank": rank, "step": step,
                                        "ts": ts, "step_time": 1.0, "compute_time": 0.8}), arrival=ts + offset)
        assert engine.tick(1.0e9 + step + offset + 0.5) == []
    assert "old" in engine.jobs
    # Then the job stops stepping: on its own clock, the hang warning still comes.
    alerts = [a for t in range(1, 120) for a in engine.tick(1.0e9 + 30 + offset + t)]
    assert [(a.type, a.severity) for a in alerts][:1] == [("hang", "warning")]


def test_input_stall_is_not_blamed_on_the_network_when_single_ranks_hiccup():
    # 256 ranks: in 4 steps out of 10 one rank's data loader hiccups (+0.5 s) and every other rank
    # waits for it inside the collectives: the median rank's comm_time jumps with that wait, the
    # transfer does not. A job-wide input stall (+0.15 s data on every rank) is the input pipeline,
    # also when most of the few steps since its onset had a hiccup.
    rng = np.random.default_rng(3)
    detector = ThroughputDetector(job="j")
    alerts = []
    for step in range(300):
        ranks = 256
        compute = 0.8 * (1 + 0.01 * rng.standard_normal(ranks))
        data = np.full(ranks, 0.02) + (0.15 * rng.uniform(0.8, 1.2, ranks) if step >= 150 else 0.0)
        if step % 10 in (0, 2, 4, 5):
            data = data + (np.arange(ranks) == step * 7 % ranks) * 0.5
        step_time = float((compute + data).max() + 0.15)
        gs = GroupStep(job="j", group="", step=step, ts=1000.0 + step, ranks=np.arange(ranks),
                       step_time=np.full(ranks, step_time), compute_time=compute,
                       comm_time=step_time - compute - data, data_time=data, tokens=np.full(ranks, 4096.0),
                       nodes=(None,) * ranks, phase="train")
        alerts += detector.update(sample_from(gs))
    firing = [a for a in alerts if a.status == "firing"]
    assert firing and firing[0].evidence["layer"] == "input pipeline"
    assert abs(firing[0].evidence["layer_deltas_seconds"]["communication"]) < 0.02


def test_a_job_that_never_reports_checkpoints_is_not_stale_unless_a_policy_requires_them():
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from steady_jobs import SteadyJob, firing

    from stepwatch.config import JobHealthSettings, Settings
    from stepwatch.models.detection import DetectionEngine

    job = SteadyJob(ranks=8, steps=2500, compute=1.5, noise=0.015, seed=4)  # 75 min, no checkpoint phases
    _, alerts = job.run()
    assert firing(alerts, "checkpoint_stale") == []
    policy = dataclasses.replace(Settings(), job_health=JobHealthSettings(checkpoint_required=True))
    _, alerts = job.run(DetectionEngine(policy))
    stale = firing(alerts, "checkpoint_stale")
    assert len(stale) == 1 and stale[0].evidence["basis"] == "policy"
