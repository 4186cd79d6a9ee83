"""Hand-written hang recordings for the hang rule's pace, pause and teardown tests (issue 39 items 1-4).

A second generator, independent of stepwatch's simulator: wire-form dicts of a job of ``ranks`` ranks on nodes
of 8, stepping every ``step`` seconds with heartbeats every ``hb`` seconds (the default group's sequence
numbers, 2 collectives a step), and, where asked, node ``host`` samples. ``replay`` runs them through the
pipeline ``stepwatch replay`` uses (models/pipeline.py ``run_recording``).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

import orjson

T0 = 1_790_000_000.0


def node(rank: int) -> str:
    return f"n{rank // 8}"


@dataclass
class Job:
    """A job written event by event; ``now`` is its clock, ``seq`` the collectives every rank completed."""

    ranks: int
    step: float = 1.0
    hb: float = 2.0
    job: str = "job-h"
    seed: int = 3
    hb_lag: float = 0.0  # heartbeats report the step (and sequence numbers) of this many seconds before
    incarnation: int | None = None  # the monitors' process start (ms), when they send it
    events: list[dict] = field(default_factory=list)
    now: float = T0
    n: int = -1  # the last completed step
    seq: int = 0
    next_hb: float = T0
    history: list[tuple[float, int, int]] = field(default_factory=list)  # (time, step, seq) after each step

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)

    def emit(self, event: dict) -> None:
        self.events.append({"v": 1, "job": self.job, **event})

    def heartbeat(self, rank: int, t: float, *, started: int | None = None, done: int | None = None,
                  step: int | None = None, phase: str | None = "train") -> None:
        event = {"kind": "heartbeat", "rank": rank, "ts": round(t, 6), "node": node(rank),
                 "step": self.n if step is None else step,
                 "seq_started": self.seq if started is None else started,
                 "seq_completed": self.seq if done is None else done}
        if phase is not None:
            event["phase"] = phase
        if self.incarnation is not None:
            event["incarnation"] = self.incarnation
        self.emit(event)

    def _lagged(self, t: float) -> tuple[int, int]:
        """(step, seq) as a heartbeat thread that read them ``hb_lag`` seconds before ``t`` saw them."""
        step, seq = -1, 0
        for when, s, q in self.history:
            if when > t - self.hb_lag:
                break
            step, seq = s, q
        return step, seq

    def steps(self, count: int, *, phase: str = "train") -> None:
        for _ in range(count):
            self.now += self.step
            self.n += 1
            self.seq += 2
            for r in range(self.ranks):
                event = {"kind": "step", "rank": r, "step": self.n, "ts": round(self.now + self.rng.uniform(0, 0.001), 6),
                         "step_time": self.step, "node": node(r), "world_size": self.ranks}
                if self.incarnation is not None:
                    event["incarnation"] = self.incarnation
                self.emit(event)
            self.history.append((self.now, self.n, self.seq))
            while self.next_hb <= self.now:
                t = self.next_hb
                step, seq = self._lagged(t) if self.hb_lag else (self.n, self.seq)
                for r in range(self.ranks if step >= 0 else 0):  # (a lagging thread's first read: no step yet)
                    self.heartbeat(r, t, step=step, started=seq, done=seq, phase=phase)
                self.next_hb += self.hb

    def warmup(self, seconds: list[float]) -> None:
        """Warm-up steps of ``seconds`` each (step events and heartbeats say ``phase: warmup``, as gen3's and
        torch's do); the job's pace is kept for the steps after."""
        pace = self.step
        for s in seconds:
            self.step = s
            first = len(self.events)
            self.steps(1, phase="warmup")
            for e in self.events[first:]:
                if e["kind"] == "step":
                    e["phase"] = "warmup"
        self.step = pace

    def phase(self, phase: str) -> None:
        self.emit({"kind": "phase", "ts": round(self.now, 6), "phase": phase, "step": self.n})

    def pause(self, seconds: float, phase: str = "checkpoint") -> None:
        """A marked pause every rank goes through in ``seconds`` (heartbeats say so), then training again."""
        self.phase(phase)
        end = self.now + seconds
        t = self.now + self.hb / 2
        while t < end:
            for r in range(self.ranks):
                self.heartbeat(r, t, phase=phase)
            t += self.hb
        self.now = end
        self.phase("train")
        self.next_hb = self.now + self.hb / 2

    def wait(self, seconds: float, who, *, until: float | None = None) -> None:
        """Time passes with no step: ``who(rank, t)`` gives a heartbeat's fields for ``rank`` at ``t`` seconds in
        (a dict, or None: the rank sends nothing)."""
        start = self.now
        t = self.hb
        while t <= seconds:
            for r in range(self.ranks):
                fields = who(r, t)
                if fields is not None:
                    self.heartbeat(r, start + t, **fields)
            t += self.hb
        self.now = start + seconds

    def host(self, at: float, io: dict[str, float]) -> None:
        """A host sample of every node at ``at``: IO pressure ``io[node]`` (default 1 %)."""
        for k in range((self.ranks + 7) // 8):
            name = f"n{k}"
            some = io.get(name, 1.0)
            self.events.append({"v": 1, "kind": "host", "node": name, "ts": round(at, 6),
                                "psi": {"cpu": {"some_avg10": 2.0}, "io": {"some_avg10": some, "full_avg10": some * 0.8},
                                        "memory": {"some_avg10": 0.0, "full_avg10": 0.0}}})

    def recording(self) -> list[bytes]:
        return [orjson.dumps(e) for e in sorted(self.events, key=lambda e: e["ts"])]


def steps_beats_before(job: Job, count: int, seconds: float | None = None) -> None:
    """``count`` steps of ``seconds`` (the job's pace by default), every rank's heartbeats during a step saying the
    step before (``Job.steps`` sends them after the step, with its number: ahead of the step events at a slow pace,
    so the counter would move on heartbeats and learn no step time); none before the job's first step."""
    for _ in range(count):
        length = job.step if seconds is None else seconds
        end = job.now + length
        while job.next_hb < end:
            for r in range(job.ranks if job.n >= 0 else 0):
                job.heartbeat(r, job.next_hb)
            job.next_hb += job.hb
        job.now, job.n, job.seq = end, job.n + 1, job.seq + 2
        for r in range(job.ranks):
            job.emit({"kind": "step", "rank": r, "step": job.n, "ts": round(end + job.rng.uniform(0, 0.001), 6),
                      "step_time": round(length, 6), "node": node(r), "world_size": job.ranks})


def warning_after(pace: float) -> float:
    """When the hang rule warns at a learned pace (no pause learned): ``warning_factor`` x the pace, at least the
    floor, at the latest a share of the timeout (or ``pause_factor`` x the pace)."""
    from stepwatch.models.hang.settings import HangSettings

    d = HangSettings()
    latest = max(d.warning_timeout_fraction * d.timeout_seconds, d.pause_factor * pace)
    return min(max(d.warning_factor * pace, d.warning_floor_seconds), latest)


def replay(lines: list[bytes], *, settings=None, drain: float = 0.0, pipeline=None) -> list[dict]:
    """The alerts of a recording through the replay pipeline (``pipeline``, or a fresh one), as dicts, in order."""
    from stepwatch.models.pipeline import Pipeline, run_recording

    out = []
    pipeline = pipeline if pipeline is not None else Pipeline(settings=settings)
    for outputs in run_recording(pipeline, lines, drain=drain):
        out.extend(a.to_dict() for a in outputs.alerts)
    return out


def hangs(alerts: list[dict], job: str = "job-h") -> list[dict]:
    return [a for a in alerts if a["type"] == "hang" and a["job"] == job]


def culprits(alert: dict) -> list[int]:
    return [c["rank"] for c in alert["evidence"]["culprits"]]
