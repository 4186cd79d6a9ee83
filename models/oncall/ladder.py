"""The escalation ladder for slow nodes (issue 42, item 2): what to do about a straggler, from what it costs.

A drain is rarely the first right step for a slow node: a 5% slow node costs its job 5% of its
speed, and a restart that leaves the node out costs the work since the job's last checkpoint plus
the restart itself. :func:`decide` climbs the ladder from the alert's own figures:

1. ``observe``: the loss over the horizon is below ``notify_gpu_hours``;
2. ``notify_owner``: the loss is worth a human's look, but a restart would cost more than it saves
   (or the job reports no checkpoints, so the restart's cost is unknown);
3. ``restart_job`` (excluding the node): the job's **loss** over the horizon exceeds the restart's
   **cost**;
4. ``drain_node``: no job is on the node any more (the job moved off it): nothing is lost by draining.

* loss (GPU-hours) = ``gpus * horizon * (1 - 1 / job_slowdown)``: the share of every GPU's time spent
  waiting for the straggler (models/steps/cost.py), over the horizon: a setting (e.g. 6 h), or the
  job's remaining time where its monitor says its ``total_steps`` (whichever is shorter);
* cost (GPU-hours) = ``gpus * (checkpoint_age + restart_seconds)``: the work redone since the last
  checkpoint plus the time to restart (learned from the job's previous restarts, else a setting).

The decision is monotone (tests/models/oncall/test_ladder.py checks it on a generated sweep): more loss never
de-escalates, more cost never escalates. Pure: the on-call outlet gathers the figures
(models/oncall/outlet_rules.py ``LadderRule``) and puts :meth:`Decision.to_evidence` in the alert's
``evidence.decision``.

>>> fresh = Figures(job_slowdown=1.1, gpus=64, horizon_seconds=6 * 3600.0, checkpoint_age_seconds=300.0,
...                 restart_seconds=600.0)
>>> decide(fresh, notify_gpu_hours=1.0).step
<Rung.RESTART: 'restart_job'>
>>> decide(dataclasses.replace(fresh, checkpoint_age_seconds=3 * 3600.0), notify_gpu_hours=1.0).step
<Rung.NOTIFY: 'notify_owner'>
>>> decide(dataclasses.replace(fresh, job_on_node=False), notify_gpu_hours=1.0).step
<Rung.DRAIN: 'drain_node'>
"""

from __future__ import annotations

import dataclasses  # noqa: F401 (the doctest's)
import math
from dataclasses import dataclass
from enum import StrEnum
from typing import Any


class Rung(StrEnum):
    """A step of the ladder (``evidence.decision.step``); its value is the action kind it recommends."""

    OBSERVE = "observe"
    NOTIFY = "notify_owner"
    RESTART = "restart_job"
    DRAIN = "drain_node"


#: The ladder's order: a later rung is a stronger action.
ORDER = (Rung.OBSERVE, Rung.NOTIFY, Rung.RESTART, Rung.DRAIN)


class Basis(StrEnum):
    """Where a figure came from (``evidence.decision.horizon_basis`` / ``restart_basis``)."""

    SETTING = "setting"
    TOTAL_STEPS = "total_steps"  # the job's remaining steps (its monitor's ``total_steps``)
    LEARNED = "learned"  # the job's previous restarts (models/oncall/restarts.py)


@dataclass(frozen=True, slots=True)
class Figures:
    """What the ladder compares, for one job and one slow node."""

    job_slowdown: float | None  # models/steps/cost.py; None: unknown
    gpus: int
    horizon_seconds: float
    checkpoint_age_seconds: float | None  # since the job's last successful checkpoint; None: it reports none
    restart_seconds: float
    job_on_node: bool = True
    horizon_basis: Basis = Basis.SETTING
    restart_basis: Basis = Basis.SETTING


@dataclass(frozen=True, slots=True)
class Decision:
    step: Rung
    loss_gpu_hours: float | None  # None: the slowdown is unknown
    cost_gpu_hours: float | None  # None: the checkpoint age is unknown
    figures: Figures
    reason: str

    def to_evidence(self) -> dict[str, Any]:
        f = self.figures
        return {"step": self.step.value, "loss_gpu_hours": _round(self.loss_gpu_hours),
                "cost_gpu_hours": _round(self.cost_gpu_hours), "job_slowdown": f.job_slowdown, "gpus": f.gpus,
                "horizon_seconds": round(f.horizon_seconds, 1), "horizon_basis": f.horizon_basis.value,
                "checkpoint_age_seconds": None if f.checkpoint_age_seconds is None
                else round(f.checkpoint_age_seconds, 1),
                "restart_seconds": round(f.restart_seconds, 1), "restart_basis": f.restart_basis.value,
                "job_on_node": f.job_on_node, "reason": self.reason}


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


def decide(f: Figures, *, notify_gpu_hours: float) -> Decision:
    """The ladder's step for ``f`` (see the module doc)."""
    gpus = max(int(f.gpus), 1)
    loss = None
    if f.job_slowdown is not None and math.isfinite(f.job_slowdown) and f.job_slowdown > 0:
        loss = gpus * max(f.horizon_seconds, 0.0) / 3600.0 * max(1.0 - 1.0 / f.job_slowdown, 0.0)
    cost = None
    if f.checkpoint_age_seconds is not None:
        cost = gpus * (max(f.checkpoint_age_seconds, 0.0) + max(f.restart_seconds, 0.0)) / 3600.0
    if not f.job_on_node:
        return Decision(Rung.DRAIN, loss, cost, f, "no job is on the node any more: draining it costs no work")
    if loss is None:
        return Decision(Rung.NOTIFY, loss, cost, f, "the job's slowdown is unknown: its owner decides")
    if cost is not None and loss > cost:
        return Decision(Rung.RESTART, loss, cost, f,
                        f"the loss over the horizon ({loss:.2f} GPU-h) exceeds a restart's cost ({cost:.2f} GPU-h)")
    if loss >= notify_gpu_hours:
        why = ("the job reports no checkpoints, so a restart's cost is unknown" if cost is None
               else f"a restart ({cost:.2f} GPU-h) costs more than the loss ({loss:.2f} GPU-h)")
        return Decision(Rung.NOTIFY, loss, cost, f, why)
    return Decision(Rung.OBSERVE, loss, cost, f,
                    f"the loss over the horizon ({loss:.2f} GPU-h) is below {notify_gpu_hours:g} GPU-h")


def stronger(a: Rung, b: Rung) -> Rung:
    return a if ORDER.index(a) >= ORDER.index(b) else b

