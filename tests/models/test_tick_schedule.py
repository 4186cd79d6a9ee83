"""The timer visits only the jobs that can need it (issue 27 item 4: tick cost O(active), not O(jobs)).

The reference is the tick as it was: every job, every tick, in the order of last activity. The same
recordings replayed with the schedule and with the reference give the same alerts, byte for byte: a
skipped job's rules would have said nothing. The recordings are the independent generator's messy fleet
(tests/gen2: lost and reordered events, clock skew, restarts, hangs, checkpoints, runtime config lines) and
hand-written hang recordings (tests/recordings.py).
"""

from __future__ import annotations

import io
import os

import orjson

from gen2.scenarios import catalog
from gen2.transport import merge
from recordings import hang, straggler_and_slowdown
from stepwatch.config import Settings
from stepwatch.models.detection import DetectionEngine
from stepwatch.models.tick_schedule import by_touch
from stepwatch.models.pipeline import Pipeline, run_recording
from stepwatch.recording import replay


def _every_job(self: DetectionEngine, now: float):
    """The reference: every job on every tick, least recently active first (the tick before the schedule)."""
    self.schedule.take_touched()
    return sorted(self.jobs.values(), key=by_touch)


def _replay(lines: list[bytes], drain: float) -> str:
    out = io.StringIO()
    stats = replay(iter(lines), Settings.from_env(), drain=drain, out=out)
    assert stats["alerts"] > 0  # the comparison below is about something
    return out.getvalue()


#: The fleet CI replays (twice): a job of each kind of quiet the schedule must get right (lost and reordered
#: events, clock skew, restarts, hangs, a slow checkpoint flush, runtime config lines, a fabric fault) among
#: others; ``STEPWATCH_FULL_GRID=1`` replays the whole fleet (34 jobs, 4x the events).
FLEET_SAMPLE = {"healthy", "straggler-2-ranks", "lost-reordered", "clock-skew", "restart-clean", "restart-spare",
                "hang-before-collective", "hang-skew-lossy", "hang-teardown", "checkpoint-marked-slow-flush",
                "threshold-raised", "fabric-a"}


def test_scheduled_ticks_give_the_reference_alerts_on_the_messy_fleet(monkeypatch):
    fleet = [s for s in catalog() if s.arrival]
    assert FLEET_SAMPLE <= {s.name for s in fleet}  # a renamed scenario does not leave the sample unnoticed
    if not os.environ.get("STEPWATCH_FULL_GRID"):
        fleet = [s for s in fleet if s.name in FLEET_SAMPLE]
    lines = merge(s.timed_lines() for s in fleet)
    scheduled = _replay(lines, drain=300)
    monkeypatch.setattr(DetectionEngine, "_jobs_due", _every_job)
    reference = _replay(lines, drain=300)
    assert scheduled == reference
    assert '"type":"hang"' in scheduled.replace(" ", "")  # the fleet's stuck rank is in it


def test_hand_written_hangs_among_quiet_jobs_fire_at_the_same_ticks(monkeypatch):
    """Jobs that stop at different times (one per minute), a healthy one ending, one stuck rank each: each
    hang's warning and critical at the tick the reference gives them."""
    events = straggler_and_slowdown("steady", t0=1_000.0, steps=120)
    for i in range(6):
        events += hang(f"h{i}", t0=1_000.0 + 60 * i, ranks=4, steps=8, stuck_rank=i % 4)
    events.sort(key=lambda e: e["ts"])
    lines = [orjson.dumps(e) for e in events]
    scheduled = _replay(lines, drain=1_500)
    monkeypatch.setattr(DetectionEngine, "_jobs_due", _every_job)
    reference = _replay(lines, drain=1_500)
    assert scheduled == reference
    fired = [orjson.loads(line) for line in scheduled.splitlines()]
    assert {a["job"] for a in fired if a["type"] == "hang" and a["severity"] == "critical"} == {
        f"h{i}" for i in range(6)}


def _step(job: str, rank: int, step: int, ts: float) -> bytes:
    return orjson.dumps({"v": 1, "kind": "step", "job": job, "rank": rank, "step": step, "ts": ts,
                         "step_time": 1.0, "world_size": 2})


def test_a_tick_visits_the_jobs_events_reached_not_every_job():
    """2,000 healthy jobs, 10 of them sending between two ticks: that tick looks at those 10 only; a
    quiet job comes back to the timer at its own deadline (and its hang fires then)."""
    pipeline = Pipeline(settings=Settings.from_env())
    engine = pipeline.engine
    jobs = [f"j{i}" for i in range(2_000)]
    t = 10_000.0
    for step in range(3):
        pipeline.feed([_step(j, r, step, t + step) for j in jobs for r in range(2)], arrival=t + step)
        pipeline.tick(t + step)
        assert engine.last_tick_visits == len(jobs)  # every job had events
    pipeline.feed([_step(j, r, 3, t + 3) for j in jobs[:10] for r in range(2)], arrival=t + 3)
    pipeline.tick(t + 3)
    assert engine.last_tick_visits == 10
    pipeline.tick(t + 4)
    assert engine.last_tick_visits == 0
    # Every job's warning first (a warning before the critical at every pace: at the latest half the timeout) ...
    settings = engine.hang_settings("j99")
    timeout = settings.timeout_seconds
    warned = pipeline.tick(t + 3 + settings.warning_timeout_fraction * timeout + 0.5).alerts
    assert {a.job for a in warned if a.type == "hang"} == set(jobs)
    # ... then no step for the hang timeout: every quiet job is due, and its hang turns critical at that tick.
    fired = pipeline.tick(t + 2 + timeout + 0.5).alerts
    assert {a.job for a in fired if a.type == "hang"} == set(jobs[10:])
    assert not [a for a in fired if a.job in jobs[:10]]  # their own deadline is a second later


def test_run_recording_reference_and_schedule_agree_on_a_runtime_threshold_change(monkeypatch):
    """A hang threshold lowered at run time moves the job's deadline: the job is looked at again at once."""
    def run() -> list[tuple]:
        pipeline = Pipeline(settings=Settings.from_env())
        lines: list = [_step("a", r, s, 5_000.0 + s) for s in range(20) for r in range(2)]
        from stepwatch.models.hang.detector import HangSettings

        lines.append(lambda: pipeline.engine.apply_hang_settings("a", HangSettings(timeout_seconds=30.0)))
        alerts = [a for outputs in run_recording(pipeline, lines, drain=200) for a in outputs.alerts]
        return [(a.type, a.status, a.severity, a.starts_at) for a in alerts]

    scheduled = run()
    monkeypatch.setattr(DetectionEngine, "_jobs_due", _every_job)
    assert scheduled == run()
    assert ("hang", "firing", "critical") in [a[:3] for a in scheduled]
