"""Checkpoint staleness: a job that stopped checkpointing is one fault away from losing days.

A checkpoint starts with a job-wide ``phase: checkpoint`` event and succeeds when the job
returns to ``train`` (or another non-end phase) afterwards. The detector fires
``checkpoint_stale`` when

* the last successful checkpoint (or the job's start, if there was none) is older than
  ``max_age_seconds`` or ``max_age_steps`` (0 disables either), checked by the timer, but only
  on evidence that the job should checkpoint: it has reported a checkpoint before (then
  stopped), or a configured policy requires one (``required``). A job whose producer never
  sends checkpoint phases is not stale, it is silent about checkpoints. The alert says which
  (``evidence.basis``: ``"reported"`` or ``"policy"``). Without a policy the age limit is at
  least ``CADENCE_FACTOR`` x the job's own checkpoint interval (``age_limit``): a job of 60 s
  steps that checkpoints every 100 steps has not stopped checkpointing after an hour. Nor is a job
  that has not stepped its own usual steps between checkpoints since the last one (``steps_due``):
  no checkpoint was due, whatever the clock says (a hung job's unprotected work does not grow:
  its hang is the hang rule's); or
* a checkpoint took more than ``slow_factor`` times the median of the previous ones
  (at least ``min_history`` of them).

The age alert resolves at the next successful checkpoint; the slow one when a checkpoint
takes a normal time again. Both resolve when the job ends.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import numpy as np

from ..alerts import Alert, alert_id


#: Without a policy, a job that reported checkpoints is stale only once it went this many times its own usual
#: interval between checkpoint starts without one (a missed checkpoint and then some): "stopped checkpointing"
#: is judged against the job's cadence, as the other rules judge against its step time.
CADENCE_FACTOR = 2.0
#: Checkpoint intervals kept (their median is the job's cadence).
INTERVALS_KEPT = 16


class StaleReason(StrEnum):
    """Why a checkpoint_stale alert fired (``evidence.reason``)."""

    AGE = "age"  # the last successful checkpoint is too old
    SLOW = "slow"  # a checkpoint took much longer than the job's usual


class Basis(StrEnum):
    """Why the job is expected to checkpoint at all (``evidence.basis``)."""

    REPORTED = "reported"  # it reported checkpoints before, then stopped
    POLICY = "policy"  # the configured policy requires one


def _reason(ev: dict[str, Any], reason: StaleReason) -> None:
    if ev.get("reason") != reason.value:
        raise ValueError(f"not a {reason.value} checkpoint alert's evidence: reason {ev.get('reason')!r}")


@dataclass(frozen=True, slots=True)
class CheckpointAgeEvidence:
    """The last successful checkpoint is too old (``evidence.reason: "age"``)."""

    basis: Basis
    age_seconds: float  # since the last successful checkpoint (or the job's start)
    steps_since: int | None  # steps since it (None: no checkpoint yet)
    last_checkpoint_step: int | None
    max_age_seconds: float  # the limits it fired with (0: that one off)
    max_age_steps: int

    def to_dict(self) -> dict[str, Any]:
        return {"reason": StaleReason.AGE.value, "basis": self.basis.value, "age_seconds": self.age_seconds,
                "steps_since": self.steps_since, "last_checkpoint_step": self.last_checkpoint_step,
                "max_age_seconds": self.max_age_seconds, "max_age_steps": self.max_age_steps}

    @classmethod
    def from_dict(cls, ev: dict[str, Any]) -> "CheckpointAgeEvidence":
        _reason(ev, StaleReason.AGE)
        return cls(basis=Basis(ev["basis"]), age_seconds=ev["age_seconds"], steps_since=ev["steps_since"],
                   last_checkpoint_step=ev["last_checkpoint_step"], max_age_seconds=ev["max_age_seconds"],
                   max_age_steps=ev["max_age_steps"])


@dataclass(frozen=True, slots=True)
class SlowCheckpointEvidence:
    """A checkpoint took more than ``slow_factor`` times the job's usual (``evidence.reason: "slow"``)."""

    duration_seconds: float
    typical_seconds: float  # the median of the previous checkpoints
    slow_factor: float  # the setting it fired with
    step: int | None  # the step it checkpointed

    def to_dict(self) -> dict[str, Any]:
        return {"reason": StaleReason.SLOW.value, "duration_seconds": self.duration_seconds,
                "typical_seconds": self.typical_seconds, "slow_factor": self.slow_factor, "step": self.step}

    @classmethod
    def from_dict(cls, ev: dict[str, Any]) -> "SlowCheckpointEvidence":
        _reason(ev, StaleReason.SLOW)
        return cls(duration_seconds=ev["duration_seconds"], typical_seconds=ev["typical_seconds"],
                   slow_factor=ev["slow_factor"], step=ev["step"])


class CheckpointDetector:
    """Checkpoint staleness rule for one job: steps and phases as they come, ``check(now)`` on a timer.

    Example: a job checkpoints once at step 1, then no more; the age limit is 10 minutes.

    >>> detector = CheckpointDetector(job="j", max_age_seconds=600.0)
    >>> for n in range(5):
    ...     detector.observe(1000.0 + 100 * n, step=n)
    >>> detector.on_phase(1100.0, "checkpoint", 1) + detector.on_phase(1110.0, "train", 1)
    []
    >>> detector.check(1700.0)
    []
    >>> [(str(a.type), str(a.status)) for a in detector.check(1800.0)]
    [('checkpoint_stale', 'firing')]
    """

    def __init__(self, *, job: str, max_age_seconds: float = 3600.0, max_age_steps: int = 0,
                 slow_factor: float = 3.0, min_history: int = 3, history: int = 20, required: bool = False) -> None:
        self.job = job
        #: A policy requires checkpoints of this job: the age rule runs even before the first one.
        self.required = required
        self.seen_checkpoint = False  # the job reported a checkpoint phase at least once
        self.max_age_seconds = max_age_seconds
        self.max_age_steps = max_age_steps
        self.slow_factor = slow_factor
        self.min_history = min_history
        self.history = history
        self._durations: deque[float] = deque(maxlen=history)
        self._intervals: deque[float] = deque(maxlen=INTERVALS_KEPT)  # between the starts of checkpoints
        self._step_intervals: deque[int] = deque(maxlen=INTERVALS_KEPT)  # the same in steps
        self._last_start: float | None = None  # when the latest checkpoint started
        self._last_start_step: int | None = None  # the step it started at
        self._first_step: int | None = None  # the job's first step seen
        self._started: tuple[float, int | None] | None = None  # (ts, step) of a checkpoint in progress
        self.last_success_ts: float | None = None
        self.last_success_step: int | None = None
        self._job_start: float | None = None
        self._latest_step = -1
        self._age_alert: Alert | None = None
        self._slow_alert: Alert | None = None

    @property
    def latest_step(self) -> int | None:
        """The job's highest step seen (None: none yet)."""
        return self._latest_step if self._latest_step >= 0 else None

    def observe(self, ts: float, step: int | None = None) -> None:
        """Any event of the job: learns its start time and latest step."""
        if self._job_start is None:
            self._job_start = ts
        if step is not None and step > self._latest_step:
            self._latest_step = step
        if step is not None and self._first_step is None:
            self._first_step = step

    def on_phase(self, ts: float, phase: str, step: int | None) -> list[Alert]:
        self.observe(ts, step)
        if phase == "checkpoint":
            self.seen_checkpoint = True
            if self._started is None:
                self._started = (ts, step)
                if self._last_start is not None and ts > self._last_start:
                    self._intervals.append(ts - self._last_start)
                at = step if step is not None else self.latest_step
                if at is not None and self._last_start_step is not None and at > self._last_start_step:
                    self._step_intervals.append(at - self._last_start_step)
                self._last_start = ts
                self._last_start_step = at
            return []
        if self._started is None or phase == "end":
            return []
        started_ts, started_step = self._started
        self._started = None
        duration = max(ts - started_ts, 0.0)
        out: list[Alert] = []
        previous = list(self._durations)
        self._durations.append(duration)
        self.last_success_ts = ts
        self.last_success_step = started_step if started_step is not None else self._latest_step
        if self._age_alert is not None:
            alert, self._age_alert = self._age_alert, None
            out.append(alert.resolved(at=ts, summary=f"resolved: job {self.job} checkpointed at step "
                                                     f"{self.last_success_step} ({alert.summary})"))
        typical = float(np.median(previous)) if len(previous) >= self.min_history else None
        if typical and duration > self.slow_factor * typical and self._slow_alert is None:
            self._slow_alert = Alert(
                id=alert_id(self.job, "checkpoint_stale", "slow", started_ts),
                status="firing", type="checkpoint_stale", severity="warning", job=self.job, ranks=(), nodes=(),
                starts_at=ts,
                summary=(f"checkpoint slow: job {self.job} took {duration:.1f}s to checkpoint at step "
                         f"{self.last_success_step}, {duration / typical:.1f}x its usual {typical:.1f}s"),
                evidence=SlowCheckpointEvidence(duration_seconds=round(duration, 3), typical_seconds=round(typical, 3),
                                                slow_factor=self.slow_factor, step=self.last_success_step).to_dict())
            out.append(self._slow_alert)
        elif self._slow_alert is not None and typical and duration <= self.slow_factor * typical:
            alert, self._slow_alert = self._slow_alert, None
            out.append(alert.resolved(at=ts, summary=f"resolved: checkpoint time back to {duration:.1f}s "
                                                     f"({alert.summary})"))
        return out

    def usual_interval(self) -> float:
        """The job's usual time between checkpoint starts (the median of the recent intervals; before a second
        checkpoint, from the job's start to the first; 0: no checkpoint yet)."""
        if self._intervals:
            return float(np.median(np.fromiter(self._intervals, float)))
        if self._last_start is not None and self._job_start is not None:
            return max(self._last_start - self._job_start, 0.0)
        return 0.0

    def usual_steps(self) -> int | None:
        """The job's usual steps between checkpoint starts (the median of the recent ones; before a second
        checkpoint, from its first step seen to the first; None: not known, e.g. no steps reported)."""
        if self._step_intervals:
            return int(np.median(np.fromiter(self._step_intervals, float)))
        if self._last_start_step is not None and self._first_step is not None:
            return self._last_start_step - self._first_step if self._last_start_step > self._first_step else None
        return None

    def steps_due(self) -> bool:
        """Whether a checkpoint was due by the job's own step cadence: without a policy, a job stale by the clock
        must also have stepped past its usual steps between checkpoints since the last one. A job that stopped
        stepping (a hang, a stall) or slowed has not missed a checkpoint it would have taken: the work a
        checkpoint protects is steps, and the clock alone is one pace's measure (the hang's tail at 10 s steps is
        an hour). True where no cadence in steps is known or a policy sets the limit (the user's word)."""
        usual = self.usual_steps()
        if self.required or usual is None or self.last_success_step is None or self._latest_step < 0:
            return True
        return self._latest_step - self.last_success_step > usual

    def age_limit(self) -> float:
        """The age past which the last checkpoint is stale (0: off): ``max_age_seconds``, and without a policy
        at least ``CADENCE_FACTOR`` x the job's usual interval (a job that always checkpointed every 2 h is
        not late after one; a policy's limit is the user's word)."""
        if self.max_age_seconds <= 0 or self.required:
            return self.max_age_seconds
        return max(self.max_age_seconds, CADENCE_FACTOR * self.usual_interval())

    def check_due(self) -> float:
        """The earliest time ``check`` can fire (``inf``: not before an event changes this rule's state)."""
        if self._age_alert is not None or self._job_start is None or not (self.seen_checkpoint or self.required):
            return float("inf")
        if self.max_age_seconds <= 0 or not self.steps_due():
            return float("inf")  # only steps, which events bring (``max_age_steps``, ``steps_due``)
        since_ts = self.last_success_ts if self.last_success_ts is not None else self._job_start
        limit = self.age_limit()
        return max(since_ts, self._started[0] if self._started is not None else since_ts) + limit

    def check(self, now: float) -> list[Alert]:
        """Timer rule: is the last successful checkpoint too old?"""
        if self._age_alert is not None or self._job_start is None:
            return []
        if not (self.seen_checkpoint or self.required):
            return []  # no evidence this job checkpoints at all (or must)
        since_ts = self.last_success_ts if self.last_success_ts is not None else self._job_start
        since_step = self.last_success_step if self.last_success_step is not None else None
        age = now - since_ts
        steps = self._latest_step - since_step if since_step is not None else None
        limit = self.age_limit()
        if self._started is not None and now - self._started[0] <= limit:
            return []  # checkpointing on time now: one that never ends is the hang rule's (its checkpoint timeout)
        too_old = limit > 0 and age > limit and self.steps_due()
        too_many = self.max_age_steps > 0 and steps is not None and steps > self.max_age_steps
        if not (too_old or too_many):
            return []
        what = (f"last successful checkpoint at step {since_step}, {age / 60:.0f} min and {steps} steps ago"
                if since_step is not None else f"no checkpoint since the job started {age / 60:.0f} min ago")
        if too_old and limit > self.max_age_seconds:
            what += f" (over {CADENCE_FACTOR:g}x its usual {self.usual_interval() / 60:.0f} min between checkpoints)"
        basis = Basis.REPORTED if self.seen_checkpoint else Basis.POLICY
        why = ("the job reported checkpoints before, then stopped" if basis is Basis.REPORTED
               else "the checkpoint policy requires one")
        self._age_alert = Alert(
            id=alert_id(self.job, "checkpoint_stale", "age", since_ts),
            status="firing", type="checkpoint_stale", severity="warning", job=self.job, ranks=(), nodes=(),
            starts_at=now, summary=f"checkpoint stale: job {self.job}: {what} ({why})",
            evidence=CheckpointAgeEvidence(basis=basis, age_seconds=round(age, 1), steps_since=steps,
                                           last_checkpoint_step=since_step, max_age_seconds=round(limit, 1),
                                           max_age_steps=self.max_age_steps).to_dict())
        return [self._age_alert]

    def open_alerts(self) -> list[Alert]:
        return [a for a in (self._age_alert, self._slow_alert) if a is not None]

    def close(self, *, at: float, reason: str) -> list[Alert]:
        out = [a.resolved(at=at, summary=f"resolved ({reason}): {a.summary}") for a in self.open_alerts()]
        self._age_alert = self._slow_alert = None
        return out
