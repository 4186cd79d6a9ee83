"""The escalation ladder applied to the alerts leaving the engine: what the outlet knows, into ``decide``.

A firing straggler classified ``straggler_unexplained`` (no device or platform fault explains it),
and a ``node_suspect`` that is not a non-recoverable fault (warning: implicated in several jobs'
slowdowns), get their action from the ladder (models/oncall/ladder.py) instead of the failure-class
table: ``evidence.action.kind`` is the rung, ``evidence.decision`` its figures, and the recommended
action says why. Straggler figures: the alert's ``job_slowdown`` and ``cost_gpus``
(models/steps/cost.py); the job's last successful checkpoint (models/jobhealth/checkpoint.py: its
phase markers) and highest step; its monitor's ``total_steps``; its learned restart time
(models/oncall/restarts.py). A node_suspect drains once no job is on the node (placement); else it
takes the strongest rung decided for the jobs still on it (notify their owners when none was).

Applied before the drain budget (models/oncall/budget.py), so a drain the ladder chooses still
counts against it. Bounded: at most ``MAX_REMEMBERED`` (job, node) decisions are kept.
"""

from __future__ import annotations

import dataclasses
from collections import OrderedDict
from typing import Any, Protocol

from ..alert_types import AlertStatus, AlertType, Severity
from ..alerts import Alert
from ..evidence import StragglerEvidence
from .ladder import Basis, Decision, Figures, Rung, decide, stronger

MAX_REMEMBERED = 10_000
#: The classes the ladder decides (others keep the failure-class table's action: a fault has its own remedy).
LADDER_CLASSES = frozenset({"straggler_unexplained", "node_suspect"})


class JobFacts(Protocol):
    """What the ladder asks of the outlet (``OnCall``) about a job."""

    settings: Any  # OnCallSettings: ladder_horizon_seconds, ladder_restart_seconds, ladder_notify_gpu_hours

    def now(self) -> float | None: ...

    def checkpoint_of(self, job: str) -> tuple[float | None, int | None]:
        """(time of the last successful checkpoint or None, the job's highest step or None)."""
        ...

    def total_steps(self, job: str) -> int | None: ...

    def restart_seconds(self, job: str) -> float | None: ...

    def typical_step_time(self, job: str) -> float: ...

    def jobs_on(self, node: str, at: float) -> list[str]: ...


class Escalation:
    def __init__(self, facts: JobFacts) -> None:
        self.facts = facts
        self._decided: OrderedDict[tuple[str, str], Decision] = OrderedDict()  # (job, node) -> latest decision

    def apply(self, alerts: list[Alert]) -> list[Alert]:
        return [self._one(a) for a in alerts]

    def _one(self, alert: Alert) -> Alert:
        if alert.status != AlertStatus.FIRING or alert.evidence.get("failure_class") not in LADDER_CLASSES:
            return alert
        if alert.type == AlertType.STRAGGLER and alert.job:
            return self._straggler(alert)
        if alert.type == AlertType.NODE_SUSPECT and alert.severity != Severity.CRITICAL and alert.nodes:
            return self._suspect(alert)
        return alert

    def figures(self, alert: Alert) -> Figures:
        """A straggler's figures, from its evidence and what the outlet knows about its job."""
        f, s, job = self.facts, self.facts.settings, alert.job
        e = StragglerEvidence.of(alert)
        now = f.now()
        now = alert.starts_at if now is None else max(now, alert.starts_at)
        last_ts, latest = f.checkpoint_of(job)
        horizon, horizon_basis = float(s.ladder_horizon_seconds), Basis.SETTING
        total = f.total_steps(job)
        step = latest if latest is not None else e.detected_step
        step_time = e.cost_step_time or f.typical_step_time(job)
        if total is not None and step is not None and step_time and step_time > 0:
            remaining = max(total - step, 0) * float(step_time)
            if remaining < horizon:
                horizon, horizon_basis = remaining, Basis.TOTAL_STEPS
        learned = f.restart_seconds(job)
        restart = (learned, Basis.LEARNED) if learned is not None else (float(s.ladder_restart_seconds),
                                                                         Basis.SETTING)
        return Figures(job_slowdown=e.job_slowdown, gpus=int(e.cost_gpus or len(alert.ranks) or 1),
                       horizon_seconds=horizon, horizon_basis=horizon_basis,
                       checkpoint_age_seconds=None if last_ts is None else max(now - last_ts, 0.0),
                       restart_seconds=restart[0], restart_basis=restart[1])

    def _straggler(self, alert: Alert) -> Alert:
        decision = decide(self.figures(alert), notify_gpu_hours=float(self.facts.settings.ladder_notify_gpu_hours))
        for node in alert.nodes:
            self._remember(alert.job, node, decision)
        return _with(alert, decision.step, decision.to_evidence(), _sentence(alert, decision))

    def _suspect(self, alert: Alert) -> Alert:
        node = alert.nodes[0]
        now = self.facts.now()
        jobs = self.facts.jobs_on(node, alert.starts_at if now is None else max(now, alert.starts_at))
        if not jobs:
            decision = {"step": Rung.DRAIN.value, "job_on_node": False, "jobs_on_node": [],
                        "reason": "no job is on the node any more: draining it costs no work"}
            return _with(alert, Rung.DRAIN, decision,
                         f"No job runs on {node} any more and it kept slowing jobs down: drain it and run "
                         "diagnostics.")
        known = [(j, self._decided[(j, node)]) for j in jobs if (j, node) in self._decided]
        step = Rung.NOTIFY
        for _, d in known:
            step = stronger(step, d.step)
        step = Rung.RESTART if step is Rung.DRAIN else step  # a job is still on it: not drained under it
        decision = {"step": step.value, "job_on_node": True, "jobs_on_node": jobs[:64],
                    "jobs": {j: d.to_evidence() for j, d in known[:64]},
                    "reason": ("the strongest step decided for the jobs still on the node" if known
                               else "jobs still run on the node and no straggler figures are known for them")}
        where = ", ".join(jobs[:5])
        sentence = {Rung.RESTART: f"{node} keeps slowing jobs down: restart {where} without {node} (its loss "
                                  f"exceeds a restart's cost), then drain it.",
                    Rung.NOTIFY: f"{node} keeps slowing jobs down: tell the owners of {where}; drain it once they "
                                 "have moved off.",
                    Rung.OBSERVE: f"{node} keeps slowing jobs down a little: observe; drain it once {where} "
                                  "moved off."}[step]
        return _with(alert, step, decision, sentence)

    def _remember(self, job: str, node: str, decision: Decision) -> None:
        key = (job, node)
        self._decided.pop(key, None)
        self._decided[key] = decision
        while len(self._decided) > MAX_REMEMBERED:
            self._decided.popitem(last=False)

    def forget(self, job: str) -> None:
        for key in [k for k in self._decided if k[0] == job]:
            del self._decided[key]


def _with(alert: Alert, step: Rung, decision: dict[str, Any], sentence: str) -> Alert:
    ev = dict(alert.evidence)
    nodes = list(ev.get("action", {}).get("nodes") or alert.nodes)
    action = {**ev.get("action", {}), "kind": step.value, "nodes": nodes,
              "retryable": step is Rung.RESTART,
              "exclude_nodes": nodes if step in (Rung.RESTART, Rung.DRAIN) else []}
    ev["action"], ev["decision"] = action, decision
    return dataclasses.replace(alert, evidence=ev, recommended_action=sentence)


def _sentence(alert: Alert, d: Decision) -> str:
    nodes = ", ".join(alert.nodes) or "the node"
    f = d.figures
    loss = f"{d.loss_gpu_hours:.1f} GPU-hours over {f.horizon_seconds / 3600:.1f} h" if d.loss_gpu_hours is not None \
        else "an unknown loss"
    cost = f"{d.cost_gpu_hours:.1f} GPU-hours" if d.cost_gpu_hours is not None else "an unknown cost (no checkpoints)"
    return {Rung.RESTART: f"Restart job {alert.job} from its checkpoint without {nodes}: the slow node costs it {loss}, "
                          f"more than a restart ({cost}).",
            Rung.NOTIFY: f"A rank on {nodes} slows job {alert.job} ({loss}); a restart would cost {cost}: tell the "
                         "job's owner, and restart without the node at the next checkpoint.",
            Rung.OBSERVE: f"A rank on {nodes} is a little slower than its peers ({loss}): observe.",
            Rung.DRAIN: f"No job runs on {nodes} any more: drain it and run diagnostics."}[d.step]
