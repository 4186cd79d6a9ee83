"""The rules on the alerts leaving the engine as ``OutletRule``s (models/rule.py): restarts and the node ledger.

One class per registered outlet rule (models/registry.py ``OUTLET_RULES``): it says what the rule consumes and
declares (``spec``), builds its detector from the settings, feeds it, and lists, closes and reconfigures its
alerts through the common methods. The engine's outlet (``OnCall``, models/oncall/oncall.py) makes one of each
for the worker and drives them; the detectors' own modules keep the maths (models/oncall/restarts.py,
models/oncall/ledger.py).
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING, Any, Protocol

from ..alert_types import AlertStatus, AlertType, facts
from ..alerts import Alert, alert_id
from ..resolution import Resolution
from ..rule import OutletRule, RuleSpec, Signal, closed
from .actions import Classifier
from .budget import DrainBudget, Limits
from .ledger import Incident, NodeLedger, incidents_of
from .oncall import OnCallSettings
from .restarts import Restart, RestartCause, RestartTracker, restart_cause

if TYPE_CHECKING:
    from ..outlet import EngineView
    from .placement import PlacementView

#: A restart names the job's latest firing alert from at most this long before its silence began.
PRECEDING_LOOKBACK_SECONDS = 3600.0


class OutletEnv(Protocol):
    """What an outlet rule may ask of the outlet that makes it (``OnCall``)."""

    settings: Any  # OnCallSettings
    classifier: Classifier
    placement: PlacementView
    view: EngineView | None  # the engine's public facts (models/outlet.py), once bound

    def typical_step_time(self, job: str) -> float:
        """Median duration of the job's recent judged steps (0.0: unknown)."""
        ...

    def with_effective_compute(self, alert: Alert) -> Alert:
        """``alert`` with the job's productive share, as sampled at the latest tick."""
        ...


class RestartRule(OutletRule):
    """A job's step counter going back after a silence: a ``job_restart`` alert, fired and resolved at once, naming
    the job's alert that preceded it (models/oncall/restarts.py)."""

    spec = RuleSpec(name="restarts", consumes=frozenset({Signal.RANK_STEPS, Signal.ALERTS}),
                    alert_types=(AlertType.JOB_RESTART,), failure_classes=("job_restart",), settings=OnCallSettings)

    def __init__(self, env: OutletEnv, needs: dict[str, OutletRule]) -> None:
        s = env.settings
        self.env = env
        self.tracker = RestartTracker(min_steps_back=s.restart_min_steps_back,
                                      min_silence_seconds=s.restart_min_silence_seconds)
        self._found: list[Restart] = []  # restarts seen in this engine call's input
        self._latest: dict[str, deque] = {}  # job -> recent firing alerts (starts_at, id, type, class, detail)
        self._downtimes: dict[str, deque] = {}  # job -> its recent restarts' downtimes (the ladder's restart time)
        self.seen = 0

    def restart_seconds(self, job: str) -> float | None:
        """The median downtime of the job's recent restarts (None: none seen): what its next restart costs."""
        times = sorted(self._downtimes.get(job) or ())
        return times[len(times) // 2] if times else None

    def on_steps(self, job: str, ranks, steps, ts, layout=None) -> None:
        if len(ranks) == 1:  # a lone event: the tracker's one-event path (the same verdicts, less bookkeeping)
            found = self.tracker.update(job, ranks[0], steps[0], ts[0])
            if found is not None:
                self._found.append(found)
            return
        many = self.tracker.update_many(job, ranks, steps, ts, layout)
        if many:
            self._found.extend(many)

    def update(self, alert: Alert) -> list[Alert]:
        """Remember the job's firing alerts: what classifies a restart after them (``restart_cause``)."""
        if alert.status != AlertStatus.FIRING or facts(alert.type).derived:
            return []
        ev = alert.evidence
        detail = {"case": ev.get("case"), "lost_nodes": list(ev.get("lost_nodes") or ()),
                  "nodes": [c["node"] for c in ev.get("culprits") or () if isinstance(c, dict) and c.get("node")]
                  if alert.type == AlertType.HANG else list(alert.nodes)}
        entry = (alert.starts_at, alert.id, alert.type, ev.get("failure_class", "unknown"), detail)
        jobs = [alert.job] if alert.job else [j["job"] for j in alert.evidence.get("jobs") or ()]
        for job in jobs:
            ring = self._latest.get(job)
            if ring is None:
                if len(self._latest) >= 10_000:
                    self._latest.pop(next(iter(self._latest)))
                ring = self._latest[job] = deque(maxlen=16)
            ring.append(entry)
        return []

    def flush(self) -> list[Alert]:
        if not self._found:
            return []
        found, self._found = self._found, []
        return [a for r in found for a in self._alerts(r)]

    def open_alerts(self) -> list[Alert]:
        return []  # a restart's alert is fired and resolved at once

    def close(self, *, at: float, resolution: Resolution, reason: str) -> list[Alert]:
        return []

    def reconfigure(self, settings: OnCallSettings) -> None:
        self.tracker.min_steps_back = settings.restart_min_steps_back
        self.tracker.min_silence_seconds = settings.restart_min_silence_seconds

    def _preceding(self, restart: Restart) -> dict[str, Any] | None:
        ring = self._latest.get(restart.job) or ()
        lo = restart.silence_began_at - PRECEDING_LOOKBACK_SECONDS
        # Alert times and the restart come from the job's own ranks (node alerts: within minutes).
        best = None
        for starts_at, ident, kind, cls, detail in ring:
            if lo <= starts_at <= restart.at and (best is None or _priority(kind) >= _priority(best[2])):
                best = (starts_at, ident, kind, cls, detail)
        if best is None:
            return None
        return {"id": best[1], "type": best[2], "failure_class": best[3], "starts_at": best[0], **best[4]}

    def _alerts(self, r: Restart) -> list[Alert]:
        env, classifier = self.env, self.env.classifier
        self.seen += 1
        ring = self._downtimes.get(r.job)
        if ring is None:
            if len(self._downtimes) >= 10_000:
                self._downtimes.pop(next(iter(self._downtimes)))
            ring = self._downtimes[r.job] = deque(maxlen=8)
        ring.append(r.downtime_seconds)
        preceding = self._preceding(r)
        cls = preceding["failure_class"] if preceding else "unknown"
        cause, blamed = restart_cause(preceding)
        # Where the job ran until it went down: nodes first seen after the middle of its silence are where it
        # resumed (a spare), known or not by now depending on how its first steps were batched.
        nodes = tuple(env.placement.nodes_of(r.job, before=(r.silence_began_at + r.at) / 2))[:64]
        step_time = env.typical_step_time(r.job)
        lost = r.cost(step_time)
        evidence = {
            "downtime_seconds": r.downtime_seconds, "steps_recomputed": r.steps_recomputed,
            "gpu_hours_lost": lost, "highest_step": r.highest_step, "resumed_step": r.resumed_step,
            "ranks": r.ranks, "step_time": step_time, "reporting_rank": r.rank,
            "preceding_alert": preceding, "failure_class": cls, "onset_ts": r.silence_began_at,
            "silence_began_at": r.silence_began_at, "cause": cause.value, "cause_nodes": list(blamed),
        }
        if preceding:
            preceding = {k: preceding[k] for k in ("id", "type", "failure_class", "starts_at")}
            evidence["preceding_alert"] = preceding
        what = {RestartCause.LOST_NODE: f"a lost node ({', '.join(blamed)})",
                RestartCause.HANG_CULPRIT: "a hang with a named culprit", RestartCause.HANG: "a hang",
                RestartCause.DEVICE_FAULT: f"a GPU fault ({', '.join(blamed)})",
                RestartCause.CRASH: "a crash (no alert before it)"}[cause]
        why = f" after {what}" + (f": {preceding['type']} ({cls})" if preceding else "")
        summary = (f"job_restart: job {r.job} restarted{why}: down {r.downtime_seconds:.0f} s, resumed at step "
                   f"{r.resumed_step} (had reached {r.highest_step}: {r.steps_recomputed} steps recomputed), "
                   f"{lost:.2f} GPU-hours lost")
        fired = Alert(id=alert_id(r.job, "job_restart", r.resumed_step, round(r.at, 3)), status="firing",
                      type="job_restart", severity="warning", job=r.job, ranks=(), nodes=nodes,
                      starts_at=r.silence_began_at, summary=summary, evidence=evidence)
        # The class decides nothing here: a restart is the job's own incident, whatever caused it.
        fc = classifier.classes.get("job_restart")
        fired = classifier.annotate(fired)
        if fc is not None:
            action = dict(fired.evidence["action"], kind=fc.kind, retryable=fc.retryable)
            fired = fired.__class__(**{**_fields(fired), "scope": fc.scope, "recommended_action":
                                       fc.sentence.replace("{nodes}", ", ".join(nodes) or "the nodes"),
                                       "evidence": {**fired.evidence, "action": action}})
        return [fired, env.with_effective_compute(fired.resolved(at=r.at,
                                                                 summary=f"resolved: job resumed ({summary})"))]


class LedgerRule(OutletRule):
    """Incidents per node across jobs (models/oncall/ledger.py): a node implicated in several jobs' incidents, or in
    one non-recoverable fault, is a ``node_suspect``; it resolves once clean for the window."""

    spec = RuleSpec(name="node_ledger", consumes=frozenset({Signal.ALERTS, Signal.TICKS}),
                    alert_types=(AlertType.NODE_SUSPECT,), failure_classes=("node_suspect",), settings=OnCallSettings)

    def __init__(self, env: OutletEnv, needs: dict[str, OutletRule]) -> None:
        s = env.settings
        self.classifier = env.classifier
        self.ledger = NodeLedger(window_seconds=s.ledger_window_seconds, min_jobs=s.ledger_min_jobs)
        #: Incidents recorded here that other workers have not seen yet (the worker sends them).
        self.new_incidents: list[Incident] = []

    def update(self, alert: Alert) -> list[Alert]:
        """The incidents ``alert`` records (one per implicated node) and the node_suspect verdicts they cause."""
        out = []
        for incident in incidents_of(alert):
            new, suspects = self.ledger.add(incident)
            if new:
                self.new_incidents.append(incident)
                if len(self.new_incidents) > 10_000:
                    del self.new_incidents[: len(self.new_incidents) - 10_000]
            out.extend(self.classifier.annotate(a) for a in suspects)
        return out

    def add_incident(self, incident: Incident) -> list[Alert]:
        """An incident recorded by another worker (or this one before a restart)."""
        _, alerts = self.ledger.add(incident)
        return [self.classifier.annotate(a) for a in alerts]

    def tick(self, now: float) -> list[Alert]:
        return [self.classifier.annotate(a) for a in self.ledger.tick(now)]

    def open_alerts(self) -> list[Alert]:
        owns = self.ledger.owns
        return [a for node, a in self.ledger.open.items() if owns is None or owns(node)]

    def close(self, *, at: float, resolution: Resolution, reason: str) -> list[Alert]:
        """Resolve the open verdicts and forget their nodes' incidents (a node is suspect anew only on new ones)."""
        out = self.open_alerts()
        for node in list(self.ledger.open):
            self.ledger.open.pop(node)
            self.ledger.incidents.pop(node, None)
        return closed([a.resolved(at=at, summary=f"resolved ({reason}): {a.summary}") for a in out], resolution,
                      reason)

    def reconfigure(self, settings: OnCallSettings) -> None:
        """Window and job count apply from the next incident or tick (a shorter window prunes at the next tick)."""
        if settings.ledger_window_seconds <= 0 or settings.ledger_min_jobs < 1:
            raise ValueError("oncall: need ledger_window_seconds > 0 and ledger_min_jobs >= 1")
        self.ledger.window_seconds = settings.ledger_window_seconds
        self.ledger.min_jobs = settings.ledger_min_jobs


class DrainBudgetRule(OutletRule):
    """The drain budget (models/oncall/budget.py): drains beyond it are held for a human, with one
    ``action_budget`` alert; fabric incidents never drain."""

    spec = RuleSpec(name="drain_budget", consumes=frozenset({Signal.ALERTS, Signal.TICKS}),
                    alert_types=(AlertType.ACTION_BUDGET,), failure_classes=("action_budget",),
                    settings=OnCallSettings)

    def __init__(self, env: OutletEnv, needs: dict[str, OutletRule]) -> None:
        self.env = env

        def covered(nodes, at):  # (the engine's facts, once the outlet is bound to it: models/outlet.py)
            return env.view.incident_covering(nodes, at) if env.view is not None else None

        def seen() -> int:
            return env.view.reported_nodes() if env.view is not None else 0

        self.budget = DrainBudget(_limits(env.settings), covered=covered, seen_nodes=seen)

    def gate(self, alerts: list[Alert]) -> list[Alert]:
        return self.budget.gate(alerts)

    def release(self, ident: str, *, by: str = "", at: float | None = None) -> bool:
        """A human lets a held drain through (``stepwatch actions release``); published at the next tick."""
        return self.budget.release(ident, by=by, at=at)

    def tick(self, now: float) -> list[Alert]:
        return self.budget.tick(now)

    def open_alerts(self) -> list[Alert]:
        return [self.budget.alert] if self.budget.alert is not None else []

    def close(self, *, at: float, resolution: Resolution, reason: str) -> list[Alert]:
        return closed(self.budget.close(at), resolution, reason)

    def reconfigure(self, settings: OnCallSettings) -> None:
        """New limits apply to the next drain asked for (held alerts stay held until released)."""
        self.budget.limits = _limits(settings)


def _limits(s: OnCallSettings) -> Limits:
    return Limits(per_hour=int(s.drain_budget_per_hour), per_job_hour=int(s.drain_budget_per_job_hour),
                  fleet_percent=float(s.drain_budget_fleet_percent))


def _priority(kind: str) -> int:
    # A device fault or hang explains a restart better than a slowdown that preceded it.
    return {"gpu_fault": 4, "hang": 3, "link_errors": 3}.get(kind, 1)


def _fields(alert: Alert) -> dict[str, Any]:
    return {name: getattr(alert, name) for name in Alert.__slots__}
