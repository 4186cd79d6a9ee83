"""What a slow rank or stage costs its job: the job's slowdown and the GPU-hours it wastes a day.

A synchronous job runs at the pace of its slowest member: every other rank waits for the
straggler's excess at the next collective, every step. So with ``T`` the job's step time and
``excess`` the seconds per step by which the slow rank (or the slowest pipeline stage) exceeds
its peers, the job without that excess would take ``T - excess`` a step, and

* ``job_slowdown = T / (T - excess)``: how many times slower the job runs because of it;
* ``gpu_hours_lost_per_day = gpus * 24 * (1 - 1 / job_slowdown)``: the share of every GPU's day
  spent waiting, over the job's GPUs.

Used by the straggler alerts (models/steps/straggler.py, one call) and the stage imbalance alert
(models/steps/imbalance.py); ``stepwatch report`` sums ``gpu_hours_lost_per_day`` (stepwatch/report.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True, slots=True)
class Cost:
    job_slowdown: float
    seconds_lost_per_step: float
    gpu_hours_lost_per_day: float
    gpus: int
    step_time: float = float("nan")

    def to_evidence(self) -> dict[str, Any]:
        return {"job_slowdown": round(self.job_slowdown, 4), "seconds_lost_per_step": round(self.seconds_lost_per_step, 5),
                "gpu_hours_lost_per_day": round(self.gpu_hours_lost_per_day, 2), "cost_gpus": self.gpus,
                "cost_step_time": round(self.step_time, 5)}


def cost(step_time: float, excess: float, gpus: int) -> Cost | None:
    """The cost of ``excess`` seconds per step in a job of ``gpus`` GPUs whose step takes ``step_time``;
    None when the numbers do not allow one (no step time)."""
    if not (step_time > 0) or math.isnan(excess):
        return None
    excess = min(max(excess, 0.0), step_time * 0.99)  # a step is never all wait
    slowdown = step_time / (step_time - excess)
    return Cost(job_slowdown=slowdown, seconds_lost_per_step=excess,
                gpu_hours_lost_per_day=gpus * 24.0 * (1.0 - 1.0 / slowdown), gpus=int(gpus), step_time=step_time)


def straggler_cost(evidence: dict[str, Any], step, values: np.ndarray | None = None,
                   slot: int | None = None) -> dict[str, Any]:
    """``evidence.job_slowdown`` and ``gpu_hours_lost_per_day`` of a straggler alert; empty when unknown.

    ``values``: the straggler rule's signal of every rank (rows) over the steps that made it fire
    (columns), ``slot`` the straggler's row. Each of those steps the job went at the pace of its
    slowest rank, and would have gone at the pace of the slowest *other* rank without the
    straggler: the excess is the median over the steps of that difference (the peers' own spread
    and pauses included, which ``rank_median - peer_median`` would leave out). Without ``values``,
    the excess is ``rank_median - peer_median``. The job's step time is the step's ranks' median
    (``step``, a ``GroupStep``), or the rank's own when the signal is the step time itself (the
    job then finishes with its slowest rank)."""
    rank, peer = evidence.get("rank_median"), evidence.get("peer_median")
    if not isinstance(rank, (int, float)) or not isinstance(peer, (int, float)):
        return {}
    excess = float(rank) - float(peer)
    if values is not None and slot is not None and values.shape[0] > 1:
        mine = values[slot]
        cols = ~np.isnan(mine)
        others = np.delete(values[:, cols], slot, axis=0)
        seen = ~np.all(np.isnan(others), axis=0)
        if seen.any():
            paced = np.maximum(mine[cols][seen], np.nanmax(others[:, seen], axis=0))
            excess = float(np.median(paced - np.nanmax(others[:, seen], axis=0)))
    times = np.asarray(step.step_time, dtype=float)
    times = times[~np.isnan(times)]
    step_time = float(np.median(times)) if len(times) else math.nan
    if evidence.get("signal") == "step_time" or math.isnan(step_time):
        step_time = max(float(rank), step_time if not math.isnan(step_time) else 0.0)
    if evidence.get("signal") == "data_time" and isinstance(evidence.get("compute_median"), (int, float)):
        # the rank's data wait comes on top of a typical step
        step_time = max(step_time, float(evidence["compute_median"]) + float(rank))
    found = cost(step_time, excess, len(step.ranks))
    return found.to_evidence() if found is not None else {}
