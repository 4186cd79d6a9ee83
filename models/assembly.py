"""Gathering per-rank step events into one comparable step per peer group.

Ranks report the same step at slightly different times (and over different Kafka
messages). Peer comparison needs all of a step's ranks side by side, so each group keeps a
small, bounded set of open steps and closes one when every known rank has reported, when a
step ``max_lag_steps`` newer has arrived, or when it has waited ``max_wait_seconds``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .events import StepEvent

NAN = float("nan")


@dataclass(frozen=True, slots=True, eq=False)
class GroupStep:
    """One step of one peer group, all reporting ranks side by side (NaN where not reported)."""

    job: str
    group: str
    step: int
    ts: float  # latest step-end time among the ranks
    ranks: np.ndarray  # int64, sorted
    step_time: np.ndarray
    compute_time: np.ndarray
    comm_time: np.ndarray
    data_time: np.ndarray
    tokens: np.ndarray
    nodes: tuple[str | None, ...]
    phase: str  # "train" unless some rank reported another phase


class _OpenStep:
    __slots__ = ("rows", "first_seen", "phase")

    def __init__(self, first_seen: float) -> None:
        self.rows: dict[int, StepEvent] = {}
        self.first_seen = first_seen
        self.phase = "train"


class StepAssembler:
    """Per (job, group) step gathering; ``add`` and ``flush`` return the steps that closed."""

    def __init__(self, *, job: str, group: str, max_lag_steps: int = 3, max_wait_seconds: float = 30.0,
                 max_pending_steps: int = 16) -> None:
        self.job = job
        self.group = group
        self.max_lag_steps = max_lag_steps
        self.max_wait_seconds = max_wait_seconds
        self.max_pending_steps = max_pending_steps
        self.members: set[int] = set()
        self.world_size_hint: int | None = None
        self._open: dict[int, _OpenStep] = {}
        self._first_step: int | None = None
        self._newest_step = -1
        self.last_closed = -1
        self.late_events = 0
        self.restarts = 0

    def _expected(self) -> int | None:
        """How many ranks a complete step has, once membership is known."""
        if self.world_size_hint is not None and self.group == "":
            return self.world_size_hint
        # Membership is learned from the first few steps; before that, only lag closes steps.
        if self._first_step is None or self._newest_step < self._first_step + self.max_lag_steps:
            return None
        return len(self.members)

    def add(self, event: StepEvent) -> list[GroupStep]:
        step = event.step
        if step <= self.last_closed:
            if step < self.last_closed - self.max_pending_steps:
                # The step counter went far back: the job restarted from a checkpoint.
                self._reset()
                self.restarts += 1
            else:
                self.late_events += 1
                return []
        if self._first_step is None:
            self._first_step = step
        self.members.add(event.rank)
        if event.world_size is not None:
            self.world_size_hint = event.world_size
        if step > self._newest_step:
            self._newest_step = step
        open_step = self._open.get(step)
        if open_step is None:
            open_step = self._open[step] = _OpenStep(event.ts)
        open_step.rows[event.rank] = event  # a duplicate replaces the earlier copy
        if event.phase != "train":
            open_step.phase = event.phase
        closed = []
        expected = self._expected()
        if expected is not None and len(open_step.rows) >= expected:
            closed.extend(self._close_through(step))
        limit = self._newest_step - self.max_lag_steps
        if self._open and min(self._open) <= limit:  # usually nothing is due: skip the sort
            closed.extend(self._close_through(limit))
        while len(self._open) > self.max_pending_steps:
            closed.extend(self._close_through(min(self._open)))
        return closed

    def flush(self, now: float) -> list[GroupStep]:
        """Close steps that have waited too long (called from the timer)."""
        stale = [s for s, o in self._open.items() if now - o.first_seen >= self.max_wait_seconds]
        return self._close_through(max(stale)) if stale else []

    def _close_through(self, step: int) -> list[GroupStep]:
        """Close every open step up to and including ``step``, oldest first."""
        due = sorted(s for s in self._open if s <= step)
        out = []
        for s in due:
            out.append(self._build(s, self._open.pop(s)))
            self.last_closed = max(self.last_closed, s)
        return out

    def _build(self, step: int, open_step: _OpenStep) -> GroupStep:
        rows = [open_step.rows[r] for r in sorted(open_step.rows)]
        return GroupStep(
            job=self.job,
            group=self.group,
            step=step,
            ts=max(e.ts for e in rows),
            ranks=np.fromiter((e.rank for e in rows), dtype=np.int64, count=len(rows)),
            step_time=_column(rows, "step_time"),
            compute_time=_column(rows, "compute_time"),
            comm_time=_column(rows, "comm_time"),
            data_time=_column(rows, "data_time"),
            tokens=_column(rows, "tokens"),
            nodes=tuple(e.node for e in rows),
            phase=open_step.phase,
        )

    def _reset(self) -> None:
        self._open.clear()
        self._first_step = None
        self._newest_step = -1
        self.last_closed = -1


def _column(rows: list[StepEvent], name: str) -> np.ndarray:
    return np.fromiter(
        (NAN if (v := getattr(e, name)) is None else v for e in rows), dtype=np.float64, count=len(rows)
    )
