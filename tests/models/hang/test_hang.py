"""Hang detection in the pure core (models/hang/detector.py), on a settable clock, and in replay."""

from __future__ import annotations

import dataclasses

import orjson
import pytest

from stepwatch.config import HangSettings, Settings
from engine_driver import replay
from stepwatch.models.detection import DetectionEngine
from stepwatch.models.wire.events import CollectiveEvent, HeartbeatEvent, PhaseEvent, StepEvent, parse_event
from stepwatch.models.hang.detector import HangDetector
from stepwatch.sim.simulator import ClusterSimulator, HangFault, SimulationSpec

T0 = 1_700_000_000.0
JOB = "job-h"


def node(rank: int) -> str:
    return f"node-{rank // 8:03d}"


class Job:
    """A hand-driven job on a settable clock: steps, heartbeats and checks at chosen times."""

    def __init__(self, ranks: int = 8, **kwargs) -> None:
        self.ranks = ranks
        self.now = T0
        self.step = -1
        self.seq = 0  # collectives completed by everyone
        self.det = HangDetector(job=JOB, **kwargs)
        self.alerts = []

    def feed(self, event) -> list:
        out = self.det.update(event)
        self.alerts.extend(out)
        return out

    def check(self) -> list:
        out = self.det.check(self.now)
        self.alerts.extend(out)
        return out

    def advance(self, seconds: float) -> None:
        self.now += seconds

    def run_steps(self, n: int, step_time: float = 1.0, ranks=None, hb: bool = True) -> None:
        for _ in range(n):
            self.advance(step_time)
            self.step += 1
            self.seq += 2
            for r in ranks if ranks is not None else range(self.ranks):
                self.feed(StepEvent(job=JOB, rank=r, step=self.step, ts=self.now, step_time=step_time, node=node(r),
                                    world_size=self.ranks))
                if hb:
                    self.heartbeat(r)
            self.check()

    def heartbeat(self, rank: int, *, step: int | None = None, seq_started: int | None = None,
                  seq_completed: int | None = None, phase: str | None = None) -> None:
        self.feed(HeartbeatEvent(job=JOB, rank=rank, ts=self.now, step=self.step if step is None else step,
                                 node=node(rank), seq_started=self.seq if seq_started is None else seq_started,
                                 seq_completed=self.seq if seq_completed is None else seq_completed, phase=phase))

    def wait(self, seconds: float, *, every: float = 5.0, heartbeat=None) -> None:
        """Let time pass with heartbeats every ``every`` s (``heartbeat(job, rank)`` or all ranks at the seq)."""
        end = self.now + seconds
        while self.now + every <= end + 1e-9:
            self.advance(every)
            for r in range(self.ranks):
                if heartbeat is None:
                    self.heartbeat(r)
                else:
                    heartbeat(self, r)
            self.check()
        self.now = end
        self.check()

    def phase(self, phase: str) -> list:
        return self.feed(PhaseEvent(job=JOB, ts=self.now, phase=phase))


def stuck_at_collective(culprits: set[int], dead: set[int] = frozenset()):
    """Heartbeats of a job stuck in its next collective: ``culprits`` never issued it; ``dead`` send nothing."""
    def hb(job: Job, rank: int) -> None:
        if rank in dead:
            return
        started = job.seq if rank in culprits else job.seq + 1
        job.heartbeat(rank, seq_started=started, seq_completed=job.seq)
    return hb


def test_warning_then_critical_then_resolved_keeps_one_id():
    job = Job(timeout_seconds=120)
    job.run_steps(30)
    assert job.alerts == []
    hung_at = job.now
    # 1 s steps: k x p99 = 10 s is under the floor, so the warning comes at 30 s.
    job.wait(25, heartbeat=stuck_at_collective({3}))
    assert job.alerts == []
    job.wait(10, heartbeat=stuck_at_collective({3}))
    assert [(a.status, a.severity) for a in job.alerts] == [("firing", "warning")]
    warning = job.alerts[0]
    assert warning.type == "hang" and warning.job == JOB
    assert warning.evidence["warning_after_seconds"] == 30.0
    assert 30 <= warning.starts_at - hung_at <= 31
    job.wait(100, heartbeat=stuck_at_collective({3}))
    assert [(a.status, a.severity) for a in job.alerts] == [("firing", "warning"), ("firing", "critical")]
    critical = job.alerts[1]
    assert 120 <= critical.evidence["checked_at"] - hung_at <= 121
    assert critical.starts_at == warning.starts_at  # same alert, a new version
    assert job.det.firing == {critical.id: critical}
    job.run_steps(1)
    assert [a.status for a in job.alerts] == ["firing", "firing", "resolved"]
    resolved = job.alerts[2]
    assert len({a.id for a in job.alerts}) == 1
    assert resolved.ends_at == job.now and resolved.evidence["resolved_step"] == job.step
    assert job.det.firing == {}
    # It stays resolved while the job steps on.
    job.run_steps(40)
    assert len(job.alerts) == 3


def test_warning_scales_with_the_recent_p99_step_time():
    job = Job(timeout_seconds=600)
    job.run_steps(20, step_time=5.0)  # 10 x 5 s = 50 s, above the 30 s floor
    job.wait(45)
    assert job.alerts == []
    job.wait(10)
    assert [a.severity for a in job.alerts] == ["warning"]
    assert job.alerts[0].evidence["p99_step_time"] == 5.0


def test_no_alert_during_a_checkpoint_shorter_than_its_timeout():
    job = Job(timeout_seconds=600, checkpoint_timeout_seconds=1800)
    job.run_steps(30)
    job.phase("checkpoint")
    job.wait(1500, every=5.0, heartbeat=lambda j, r: j.heartbeat(r, phase="checkpoint"))
    assert job.alerts == []
    job.phase("train")
    job.run_steps(5)
    assert job.alerts == []


def test_a_checkpoint_longer_than_its_timeout_is_a_hang():
    job = Job(timeout_seconds=600, checkpoint_timeout_seconds=1800)
    job.run_steps(30)
    job.phase("checkpoint")
    job.wait(1790)
    assert job.alerts == []
    job.wait(15)
    assert [(a.severity, a.evidence["timeout"]) for a in job.alerts] == [("critical", "checkpoint")]


def test_a_rank_in_checkpoint_by_its_heartbeat_phase_counts_too():
    job = Job(timeout_seconds=600)
    job.run_steps(30)
    job.wait(900, heartbeat=lambda j, r: j.heartbeat(r, phase="checkpoint" if r == 0 else None))
    assert job.alerts == []


def test_no_hang_after_phase_end_and_end_resolves_an_open_one():
    job = Job(timeout_seconds=100)
    job.run_steps(30)
    job.phase("end")
    job.wait(5000, every=50)
    assert job.alerts == []
    # Stray heartbeats after the end do not revive it.
    job.heartbeat(0)
    job.advance(1000)
    assert job.check() == []

    job = Job(timeout_seconds=100)
    job.run_steps(30)
    job.wait(200)
    assert [a.severity for a in job.alerts] == ["warning", "critical"]
    out = job.phase("end")
    assert [(a.status, a.id) for a in out] == [("resolved", job.alerts[0].id)]
    assert "job ended" in out[0].summary


def test_a_restarted_job_is_watched_again():
    job = Job(timeout_seconds=100)
    job.run_steps(10)
    job.phase("end")
    job.advance(50)
    job.step = -1
    job.run_steps(10)
    job.wait(150)
    assert [a.severity for a in job.alerts] == ["warning", "critical"]


def test_culprit_named_when_one_of_64_ranks_lags_by_one_collective():
    job = Job(ranks=64)
    job.run_steps(30)
    job.wait(40, heartbeat=stuck_at_collective({37}))
    (alert,) = job.alerts
    ev = alert.evidence
    assert ev["case"] == "culprit_before_collective"
    assert alert.ranks[0] == 37 and alert.nodes[0] == "node-004"
    assert [c["rank"] for c in ev["culprits"]] == [37]
    assert ev["culprits"][0] | {"state": "behind", "seq_started": job.seq, "seq_completed": job.seq} == ev["culprits"][0]
    assert ev["collective_seq"] == job.seq + 1
    assert ev["waiting"]["count"] == 63 and 37 not in ev["waiting"]["ranks"]
    assert ev["step"] == job.step and ev["silent"] == []
    assert "rank 37 on node-004 never reached collective" in alert.summary


def test_collective_events_feed_the_sequence_numbers():
    job = Job(ranks=8)
    job.run_steps(30, hb=False)
    for r in range(8):  # a per-collective trace: everyone but rank 6 finished one more collective
        if r != 6:
            job.feed(CollectiveEvent(job=JOB, rank=r, seq=job.seq + 1, op="all_reduce", ts=job.now, duration=0.1))
    job.wait(40, heartbeat=lambda j, r: j.heartbeat(r, seq_started=None, seq_completed=None))
    (alert,) = job.alerts
    assert alert.evidence["case"] == "culprit_before_collective"
    assert [c["rank"] for c in alert.evidence["culprits"]] == [6]


def test_silent_rank_named_with_its_last_heartbeat():
    job = Job(ranks=16)
    job.run_steps(30)
    last_heard = job.now
    job.wait(40, heartbeat=stuck_at_collective(set(), dead={11}))
    (alert,) = job.alerts
    ev = alert.evidence
    assert ev["case"] == "silent_ranks"
    assert alert.ranks[0] == 11 and alert.nodes[0] == "node-001"
    assert ev["silent"] == [dict(ev["silent"][0], rank=11, last_heartbeat=last_heard)]
    assert ev["culprits"][0]["state"] == "silent"
    assert ev["heartbeat_timeout_seconds"] == 15.0
    assert "silent: rank 11 on node-001 (last heartbeat at" in alert.summary


def test_heartbeat_timeout_follows_the_observed_interval():
    job = Job(ranks=4)
    job.run_steps(30)
    job.wait(200, every=10.0, heartbeat=stuck_at_collective(set()))  # 10 s heartbeats: silent after 30 s
    assert job.det.heartbeat_timeout() == 30.0


def test_partial_hang_some_ranks_step_while_others_are_stuck():
    job = Job(ranks=8)
    job.run_steps(30)
    stuck_step = job.step
    for _ in range(60):  # ranks 0-3 keep stepping, ranks 4-7 only send heartbeats
        job.run_steps(1, ranks=range(4))
        for r in range(4, 8):
            job.heartbeat(r, step=stuck_step)
        job.check()
    assert job.alerts, "partial hang not detected"
    alert = job.alerts[0]
    ev = alert.evidence
    assert ev["case"] == "partial_hang" and alert.severity == "warning"
    assert sorted(c["rank"] for c in ev["culprits"]) == [4, 5, 6, 7]
    assert ev["stepping"] == {"count": 4, "ranks": [0, 1, 2, 3]}
    assert ev["step"] == stuck_step
    assert "while 4 still step" in alert.summary
    # The stuck ranks step again: resolved, same id.
    job.run_steps(1)
    assert [a.status for a in job.alerts][-1] == "resolved"
    assert {a.id for a in job.alerts} == {alert.id}


def test_undetermined_without_heartbeats_says_so():
    job = Job(ranks=8)
    job.run_steps(30, hb=False)
    job.advance(40)
    job.check()
    (alert,) = job.alerts
    assert alert.evidence["case"] == "undetermined"
    assert alert.evidence["culprits"] == [] and alert.ranks == ()
    assert "no heartbeats" in alert.summary


def test_undetermined_when_every_live_rank_is_at_the_same_collective():
    job = Job(ranks=8)
    job.run_steps(30)
    job.wait(40, heartbeat=stuck_at_collective(set()))
    (alert,) = job.alerts
    assert alert.evidence["case"] == "undetermined"
    assert "cannot tell" in alert.evidence["reason"]


def test_first_step_timeout_covers_model_loading():
    job = Job(ranks=4, timeout_seconds=600, first_step_timeout_seconds=1200)
    job.heartbeat(0, step=0, seq_started=0, seq_completed=0)  # the first heartbeat's step is a baseline
    job.wait(1190, every=5.0, heartbeat=lambda j, r: j.heartbeat(r, step=0, seq_started=0, seq_completed=0))
    assert job.alerts == []
    job.wait(15, heartbeat=lambda j, r: j.heartbeat(r, step=0, seq_started=0, seq_completed=0))
    (alert,) = job.alerts
    assert alert.severity == "critical" and alert.evidence["timeout"] == "first_step"
    assert "has not completed its first step 1200s after it started" in alert.summary
    job.run_steps(1)
    assert job.alerts[-1].status == "resolved"


def test_per_job_timeout_from_settings_and_env():
    hang = Settings.from_env({"STEPWATCH_HANG_JOB_TIMEOUTS": "fast=100, slow=900"}).hang
    assert hang.job_timeout_map() == {"fast": 100.0, "slow": 900.0}
    assert hang.timeout_for("fast") == 100.0 and hang.timeout_for("other") == 600.0
    with pytest.raises(ValueError, match="job_timeouts"):
        Settings.from_env({"STEPWATCH_HANG_JOB_TIMEOUTS": "fast=soon"})

    engine = DetectionEngine(Settings(hang=HangSettings(job_timeouts="fast=100", warning_floor_seconds=1000)))
    for job in ("fast", "other"):
        for step in range(10):
            engine.process(StepEvent(job=job, rank=0, step=step, ts=T0 + step, step_time=1.0))
    assert engine.tick(T0 + 150) and [a.job for a in engine.open_alerts()] == ["fast"]
    assert engine.open_alerts()[0].severity == "critical"
    assert [a.job for a in engine.tick(T0 + 700)] == ["other"]


def simulate(**kwargs) -> list[dict]:
    spec = SimulationSpec(**{"ranks": 16, "steps": 40, "compute_time": 0.2, "heartbeat_interval": 5.0,
                             "warmup_steps": 3, **kwargs})
    return list(ClusterSimulator(spec).events())


def replay_recording(recording: list[dict], settings: Settings | None = None) -> list[dict]:
    events = [parse_event(orjson.loads(orjson.dumps(e))) for e in recording]
    return [a.to_dict() for a in replay(events, settings=settings)]


@pytest.mark.parametrize("kind, case", [("hang", "culprit_before_collective"), ("frozen", "silent_ranks"),
                                        ("dead", "silent_ranks")])
def test_replay_of_a_simulated_hang_names_the_culprit(kind, case):
    recording = simulate(hangs=(HangFault(kind=kind, rank=9, step=20, duration=700),))
    alerts = [a for a in replay_recording(recording) if a["type"] == "hang"]
    assert [(a["status"], a["severity"]) for a in alerts] == (
        [("firing", "warning"), ("firing", "critical")] + ([("resolved", "critical")] if kind != "dead" else []))
    assert len({a["id"] for a in alerts}) == 1
    for alert in alerts:
        assert alert["evidence"]["case"] == case
        assert alert["ranks"][0] == 9 and alert["nodes"][0] == "node-001"
        assert alert["evidence"]["culprits"][0]["rank"] == 9
        assert alert["evidence"]["step"] == 19 and alert["evidence"]["collective_seq"] == 41
    warning = alerts[0]
    # Warning at the 30 s floor after the last completed step (the culprit stops a moment later).
    assert 30 <= warning["evidence"]["stalled_seconds"] <= 35  # replay ticks on events: 5 s heartbeats
    assert 600 <= alerts[1]["evidence"]["stalled_seconds"] <= 605
    assert replay_recording(recording) == replay_recording(recording)  # same input, same alerts


def test_replay_of_a_slow_checkpoint_raises_no_hang():
    recording = simulate(checkpoint_every=20, checkpoint_seconds=900.0)
    assert any(e["kind"] == "phase" and e["phase"] == "checkpoint" for e in recording)
    step_times = [e["step_time"] for e in recording if e["kind"] == "step" and e.get("phase") == "checkpoint"]
    assert min(step_times) > 600  # longer than the hang timeout, shorter than the checkpoint timeout
    assert [a for a in replay_recording(recording) if a["type"] == "hang"] == []


def test_simulator_is_deterministic_and_keeps_the_straggler_run_unchanged():
    base = SimulationSpec(ranks=8, steps=30)
    plain = list(ClusterSimulator(base).events())
    with_hb = list(ClusterSimulator(dataclasses.replace(base, heartbeat_interval=2.0)).events())
    assert [e for e in with_hb if e["kind"] != "heartbeat"] == plain
    assert list(ClusterSimulator(dataclasses.replace(base, heartbeat_interval=2.0)).events()) == with_hb
    ts = [e["ts"] for e in with_hb]
    assert ts == sorted(ts) or max(a - b for a, b in zip(ts, ts[1:])) < 0.01


def test_cli_simulate_hang_scenario_replays_to_the_culprit(tmp_path, capsys):
    from stepwatch.cli import main

    out = tmp_path / "hang.jsonl"
    assert main(["simulate", "--scenario", "hang", "--ranks", "16", "--steps", "40", "--compute-time", "0.2",
                 "--hang", "12:15:100", "--heartbeat-interval", "2", "--out", str(out)]) == 0
    assert main(["replay", str(out)]) == 0
    alerts = [orjson.loads(line) for line in capsys.readouterr().out.splitlines()]
    hang = [a for a in alerts if a["type"] == "hang"]
    assert [(a["status"], a["severity"]) for a in hang] == [("firing", "warning"), ("resolved", "warning")]
    assert hang[0]["ranks"][0] == 12 and hang[0]["evidence"]["case"] == "culprit_before_collective"
