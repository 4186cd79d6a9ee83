"""The detection core: routes events to per-job detectors, driven by an explicit clock.

``DetectionEngine`` knows nothing of Kafka or Faust. The Faust worker feeds it decoded
events and calls ``tick(now)`` from a timer with the wall clock; ``stepwatch replay`` feeds
it a recording and ticks it with the recording's own event time. Both publish exactly what
it returns, so every live alert can be reproduced offline.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Iterable, Iterator

from stepwatch.config import Settings

from .alerts import Alert
from .assembly import GroupStep, StepAssembler
from .events import Event, PhaseEvent, StepEvent
from .straggler import StragglerDetector


class JobState:
    """Everything the engine holds for one job."""

    __slots__ = ("job", "assemblers", "stragglers", "phase", "ended", "last_ts", "latest_step", "ranks")

    def __init__(self, job: str) -> None:
        self.job = job
        self.assemblers: dict[str, StepAssembler] = {}
        self.stragglers: dict[str, StragglerDetector] = {}
        self.phase = "train"
        self.ended = False
        self.last_ts = 0.0
        self.latest_step = -1
        self.ranks: set[int] = set()


class DetectionEngine:
    def __init__(self, settings: Settings | None = None) -> None:
        self.settings = settings or Settings()
        self.jobs: dict[str, JobState] = {}
        self.events_by_kind: Counter[str] = Counter()
        self.clock = 0.0  # latest time seen: event time in replay, wall time when ticked live

    # -- input ----------------------------------------------------------------------------

    def process(self, event: Event) -> list[Alert]:
        """Feed one valid event; return the alerts it caused (firing or resolved)."""
        self.events_by_kind[event.kind] += 1
        if event.ts > self.clock:
            self.clock = event.ts
        job = self.jobs.get(event.job)
        if job is None:
            job = self.jobs[event.job] = JobState(event.job)
        if event.ts > job.last_ts:
            job.last_ts = event.ts
        if isinstance(event, StepEvent):
            return self._on_step(job, event)
        if isinstance(event, PhaseEvent):
            return self._on_phase(job, event)
        return []

    def process_many(self, events: Iterable[Event]) -> list[Alert]:
        out: list[Alert] = []
        for event in events:
            out.extend(self.process(event))
        return out

    def tick(self, now: float) -> list[Alert]:
        """Run the time-driven rules at ``now`` (close steps that waited too long)."""
        if now > self.clock:
            self.clock = now
        out: list[Alert] = []
        for job in self.jobs.values():
            for assembler in job.assemblers.values():
                out.extend(self._judge(job, assembler.flush(now)))
        return out

    # -- handlers -------------------------------------------------------------------------

    def _on_step(self, job: JobState, event: StepEvent) -> list[Alert]:
        if job.ended:
            job.ended = False  # a job id that reports steps again was restarted
        job.ranks.add(event.rank)
        if event.step > job.latest_step:
            job.latest_step = event.step
        if event.phase == "train" and job.phase != "train":
            # Job-wide phase markers cover steps that do not carry a phase of their own.
            event = dataclasses.replace(event, phase=job.phase)
        group = event.group or ""
        assembler = job.assemblers.get(group)
        if assembler is None:
            a = self.settings.assembly
            assembler = job.assemblers[group] = StepAssembler(
                job=job.job, group=group, max_lag_steps=a.max_lag_steps, max_wait_seconds=a.max_wait_seconds,
                max_pending_steps=a.max_pending_steps)
        return self._judge(job, assembler.add(event))

    def _judge(self, job: JobState, steps: list[GroupStep]) -> list[Alert]:
        out: list[Alert] = []
        for step in steps:
            detector = job.stragglers.get(step.group)
            if detector is None:
                s = self.settings.straggler
                detector = job.stragglers[step.group] = StragglerDetector(
                    job=job.job, group=step.group, ratio_threshold=s.ratio_threshold, z_threshold=s.z_threshold,
                    min_flagged=s.min_flagged, window=s.window, clear_after=s.clear_after,
                    spread_floor=s.spread_floor, min_peers=s.min_peers, warmup_steps=s.warmup_steps,
                    critical_ratio=s.critical_ratio, evidence_window=s.evidence_window)
            out.extend(detector.update(step))
        return out

    def _on_phase(self, job: JobState, event: PhaseEvent) -> list[Alert]:
        if event.rank is not None:
            return []  # a single rank's phase is carried by its own step events
        if event.phase == "end":
            job.ended = True
            job.phase = "train"
            out: list[Alert] = []
            for detector in job.stragglers.values():
                out.extend(detector.close_all(at=event.ts, reason="job ended"))
            return out
        job.phase = event.phase
        return []

    # -- views ----------------------------------------------------------------------------

    def open_alerts(self) -> list[Alert]:
        return [a for job in self.jobs.values() for d in job.stragglers.values() for a in d.firing.values()]


def replay(events: Iterable[Event], *, settings: Settings | None = None,
           engine: DetectionEngine | None = None) -> Iterator[Alert]:
    """Run the core over recorded events on their own clock, yielding alerts in order.

    The clock is the latest event time seen; the timer rules run whenever it has moved
    on by ``worker.tick_interval``, as the live worker's timer would.
    """
    engine = engine or DetectionEngine(settings)
    interval = engine.settings.worker.tick_interval
    next_tick: float | None = None
    for event in events:
        yield from engine.process(event)
        if next_tick is None:
            next_tick = engine.clock + interval
        elif engine.clock >= next_tick:
            yield from engine.tick(engine.clock)
            next_tick = engine.clock + interval
