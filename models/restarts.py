"""Job restarts: the step counter goes back after a silence.

A job that crashed and was relaunched resumes from its last checkpoint: its ranks fall silent,
then report step numbers lower than the ones they reported before. That is an incident (seed
003, section 6: failures, MTTR; seed 000, 13: effective GPU-hours): ``RestartTracker`` notices
it from the step events and says how much it cost:

* ``downtime_seconds``: from the reporting rank's last event before the silence to its first
  after (one rank's own clock: never two hosts' timestamps subtracted);
* ``steps_recomputed``: the highest step reached before minus the step resumed at, plus one
  (steps ``resumed .. highest`` are done twice);
* ``gpu_hours_lost``: ranks (one GPU each) x (downtime + steps_recomputed x typical step time),
  with the typical step time given by the caller (``cost``; the engine's judged steps).

Late or reordered events are not restarts: a rank's event stamped no later than that rank's
previous one never counts, and neither does a small step back.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Any


class RestartCause(str, Enum):
    """What made a job restart (``job_restart`` alerts' ``evidence.cause``), from the alert before it."""

    LOST_NODE = "lost_node"  # every rank of a node went silent (node down or unreachable)
    HANG_CULPRIT = "hang_culprit"  # a hang with a named culprit (rank stuck before a collective)
    HANG = "hang"  # a hang without a named culprit
    DEVICE_FAULT = "device_fault"  # a GPU fault on the job's nodes
    CRASH = "crash"  # nothing before it: the processes died and were relaunched


def restart_cause(preceding: dict[str, Any] | None) -> tuple[RestartCause, tuple[str, ...]]:
    """The cause of a restart and the nodes it blames, from the job's alert before the silence
    (``{"type", "failure_class", "case", "lost_nodes", "nodes"}``; None: no alert). Only the nodes
    that were lost (or faulty) are blamed, never the ones the restarted ranks moved to."""
    if preceding is None:
        return RestartCause.CRASH, ()
    kind = preceding.get("type")
    if kind == "hang":
        lost = tuple(preceding.get("lost_nodes") or ())
        if lost:
            return RestartCause.LOST_NODE, lost
        if preceding.get("case") == "culprit_before_collective":
            return RestartCause.HANG_CULPRIT, tuple(preceding.get("nodes") or ())
        return RestartCause.HANG, ()
    if kind == "gpu_fault":
        return RestartCause.DEVICE_FAULT, tuple(preceding.get("nodes") or ())
    return RestartCause.CRASH, ()


@dataclass(frozen=True, slots=True)
class Restart:
    job: str
    rank: int
    at: float  # event time of the first event after the silence
    silence_began_at: float  # the same rank's last event before it
    downtime_seconds: float
    highest_step: int
    resumed_step: int
    steps_recomputed: int
    ranks: int

    def cost(self, step_time: float) -> float:
        """GPU-hours lost: every rank idle through the downtime, then redoing the recomputed steps."""
        return round(self.ranks * (self.downtime_seconds + self.steps_recomputed * step_time) / 3600.0, 6)


class _Job:
    __slots__ = ("high", "last_ts")

    def __init__(self) -> None:
        self.high = -1
        self.last_ts: dict[int, float] = {}  # rank -> time of its latest event (in arrival order)


class RestartTracker:
    """Notices job restarts in step events; feed them in arrival order.

    Hyperparameters (keyword-only):

    * ``min_steps_back``: a step this many steps (or more) below the highest seen is a candidate;
    * ``min_silence_seconds``: ... when the reporting rank was silent at least this long before it;
    * ``max_jobs``: jobs remembered (the least recently active is forgotten beyond).
    """

    def __init__(self, *, min_steps_back: int = 2, min_silence_seconds: float = 30.0, max_jobs: int = 10_000) -> None:
        self.min_steps_back = min_steps_back
        self.min_silence_seconds = min_silence_seconds
        self.max_jobs = max_jobs
        self._jobs: dict[str, _Job] = {}

    def _job(self, name: str) -> _Job:
        job = self._jobs.get(name)
        if job is None:
            if len(self._jobs) >= self.max_jobs:
                self._jobs.pop(next(iter(self._jobs)))
            job = self._jobs[name] = _Job()
        return job

    def update(self, job: str, rank: int, step: int, ts: float) -> Restart | None:
        """One step event; the restart it reveals, if any."""
        state = self._job(job)
        prev = state.last_ts.get(rank)
        found = None
        if (state.high >= 0 and step <= state.high - self.min_steps_back and prev is not None
                and ts - prev >= self.min_silence_seconds):
            found = Restart(job=job, rank=rank, at=ts, silence_began_at=prev, downtime_seconds=round(ts - prev, 3),
                            highest_step=state.high, resumed_step=step, steps_recomputed=state.high - step + 1,
                            ranks=max(len(state.last_ts), 1))
            state.high = step
        elif step > state.high:
            state.high = step
        state.last_ts[rank] = ts
        return found

    def update_many(self, job: str, ranks, steps, ts) -> list[Restart]:
        """``update`` for a run of one job's step events (cheap when no step goes back)."""
        state = self._jobs.get(job)
        if state is not None and state.high >= 0 and min(steps) > state.high - self.min_steps_back:
            # Nothing can be a restart: the same bookkeeping, in bulk.
            state.high = max(state.high, max(steps))
            state.last_ts.update(zip(ranks, ts))
            return []
        out = []
        for args in zip(ranks, steps, ts):
            found = self.update(job, *args)
            if found is not None:
                out.append(found)
        return out

    def forget(self, job: str) -> None:
        self._jobs.pop(job, None)
