"""On call: what the outlet chain (models/outlet.py) does to every alert leaving the detection core.

:class:`OnCall` holds the state the on-call stages share (placement, citations, the classifier, the outlet rules,
the escalation ladder, the open node alerts); its stages (models/oncall/stages.py), listed in the registry's
``OUTLET_STAGES`` (models/registry.py), do, in this order:

1. ``attribute``: node alerts (job empty) get ``evidence.jobs``: the jobs with ranks on the node (and GPU)
   around the alert (``models/oncall/placement.py``), also named in the summary;
2. ``onset``: job alerts that name the step a problem began at get ``evidence.onset_ts``;
3. ``cite``: the incident each alert belongs to (``models/oncall/citations.py``); a drop that may be a straggler's
   own cost is held, and released at a tick if no straggler explained it;
4. ``classify``: ``labels.scope``, ``evidence.failure_class``, ``evidence.action`` and
   ``annotations.recommended_action`` (``models/oncall/actions.py``);
5. ``effective_compute``: resolved job alerts carry the job's productive share at the latest tick;
6. ``outlet_rules``: the ``OutletRule``s (models/rule.py, models/oncall/outlet_rules.py), made from the registry's
   ``OUTLET_RULES`` and fed what they declare: the node ledger (``models/oncall/ledger.py``) records firing alerts
   that implicate nodes and may add a ``node_suspect``; restarts seen in the input (``models/oncall/restarts.py``)
   become ``job_restart`` alerts at the end of the call; an open node alert is published again (same id) with the
   new job when a job starts on its node;
7. ``gate``: the escalation ladder (models/oncall/escalation.py), then the drain budget (models/oncall/budget.py).

The worker shares placement and incidents with the other workers (streams/oncall_feed.py):
``new_incidents`` and ``placement.changed`` are what it has to send.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .settings import OnCallSettings  # noqa: F401  (defined in a light module; re-exported here)
from ..alert_types import AlertStatus
from .actions import Classifier, load_overrides
from .escalation import Escalation
from .citations import HOLD_MIN_SECONDS, HOLD_STEPS, Citations
from ..alerts import Alert
from ..wire.events import StepEvent
from .ledger import Incident, NodeLedger
from .placement import PlacementView
from ..rule import OutletRule, Signal, capped_of, dependency_order, open_alerts_of, reconfigure_rules
from ..wire.step_columns import StepColumns

if TYPE_CHECKING:
    from ..outlet import EngineView




class OnCall:
    """The on-call stages' shared state: see the module doc. ``settings``: ``OnCallSettings``."""

    def __init__(self, settings=None, *, rules, stages=(), types: dict[str, str] | None = None) -> None:
        """``rules``: the outlet rules' classes, in feeding order (the registry's ``OUTLET_RULES``); ``stages``: the
        on-call stages' classes, in chain order (the registry's ``OUTLET_STAGES``); ``types``: the alert types'
        failure classes by type alone (the registry's ``type_classes()``)."""
        if settings is None:
            settings = OnCallSettings()
        self.settings = settings
        self.classifier = Classifier(types=types or {}, overrides=load_overrides(settings.failure_classes))
        self.placement = PlacementView(window=settings.placement_window_seconds)
        #: (job, node) first seen since the alerts last left (the ``outlet_rules`` stage republishes their nodes').
        self.new_pairs: list[tuple[str, str]] = []
        self.open_node_alerts: dict[str, Alert] = {}  # firing node alerts by id (latest version)
        self.citations = Citations()  # the incident each alert belongs to (models/oncall/citations.py)
        #: The engine's public job facts (models/outlet.py ``EngineView``), once ``bind`` gave them.
        self.view: EngineView | None = None
        #: job -> productive share at the latest tick (the ``effective_compute`` stage keeps it).
        self.shares: dict[str, float] = {}
        self.escalation = Escalation(self)  # the ladder for slow nodes (models/oncall/ladder.py)
        self._total_steps: dict[str, int] = {}  # job -> its monitor's ``total_steps`` (the ladder's horizon)
        classes = tuple(rules)
        made: dict[str, OutletRule] = {}
        by_name = {c.spec.name: c for c in classes}
        for spec in dependency_order([c.spec for c in classes]):  # each after the rules it needs
            made[spec.name] = by_name[spec.name](self, {n: made[n] for n in spec.needs})
        #: The outlet rules, in feeding order.
        self.rules: tuple[OutletRule, ...] = tuple(made[c.spec.name] for c in classes)
        self.step_rules = [r for r in self.rules if Signal.RANK_STEPS in r.spec.consumes]
        self.alert_rules = [r for r in self.rules if Signal.ALERTS in r.spec.consumes]
        self.tick_rules = [r for r in self.rules if Signal.TICKS in r.spec.consumes]
        self.flush_rules = [r for r in self.rules if type(r).flush is not OutletRule.flush]  # once per engine call
        self._gate_rules = [r for r in self.rules if type(r).gate is not OutletRule.gate]  # last, on all leaving
        #: The on-call stages of the outlet chain, in order (models/oncall/stages.py).
        self.stages = tuple(stage(self) for stage in stages)

    def bind(self, view: EngineView) -> None:
        """The engine's facts to read (models/outlet.py): its jobs, and whose agents reported (node_suspect)."""
        self.view = view
        if any(r.spec.name == "node_ledger" for r in self.rules):
            self.ledger.vouched = view.agent_reported

    def rule(self, name: str) -> OutletRule:
        """The outlet rule registered as ``name``."""
        for rule in self.rules:
            if rule.spec.name == name:
                return rule
        raise KeyError(name)

    @property
    def ledger(self) -> NodeLedger:
        """The node ledger (the ``node_ledger`` rule's), shared with the other workers (streams/oncall_feed.py)."""
        return self.rule("node_ledger").ledger

    @property
    def new_incidents(self) -> list[Incident]:
        """Incidents recorded here that other workers have not seen yet (the worker sends them)."""
        return self.rule("node_ledger").new_incidents

    @new_incidents.setter
    def new_incidents(self, value: list[Incident]) -> None:
        self.rule("node_ledger").new_incidents = value

    @property
    def restarts_seen(self) -> int:
        return self.rule("restarts").seen

    def reconfigure(self, settings: OnCallSettings) -> None:
        """New settings to every outlet rule that takes them (state and open alerts kept)."""
        reconfigure_rules(self.rules, settings)
        self.settings = settings

    def open_alerts(self) -> list[Alert]:
        """The outlet rules' alerts now firing."""
        return open_alerts_of(self.rules)

    def capped(self) -> dict[str, int]:
        return capped_of(self.rules)

    # -- input --------------------------------------------------------------------------------

    def observe_placement(self, item: Any, layouts) -> None:
        """Where the ranks of an event, a list of events or a StepColumns batch the engine took run
        (``layouts``: the batch's run layouts, ``EngineView.layouts``), and their jobs' ``total_steps``."""
        if isinstance(item, StepEvent):
            if item.total_steps is not None:
                self._note_total_steps(item.job, item.total_steps)
            if self.placement.observe_one(item.job, item.rank, item.node, item.gpu, item.ts):
                self.new_pairs.append((item.job, item.node))
        elif isinstance(item, StepColumns):
            runs = item.job_runs()
            for job, lo, hi in runs:
                if len(runs) == 1:  # the usual envelope: one job, no copies
                    ranks, ts, nodes, gpus = item.rank, item.ts, item.node, item.gpu
                else:
                    ranks, ts, nodes, gpus = item.rank[lo:hi], item.ts[lo:hi], item.node[lo:hi], item.gpu[lo:hi]
                if self.placement.observe_run(job, ranks, nodes, gpus, max(ts), layouts.get((lo, hi))):
                    self.new_pairs.extend((job, node) for node in set(nodes) if node)
        elif isinstance(item, list):
            for one in item:
                self.observe_placement(one, layouts)

    def observe_steps(self, item: Any, layouts) -> None:
        """The same input's rank steps, to the outlet rules that take them (restarts)."""
        if not self.step_rules:
            return
        if isinstance(item, StepEvent):
            for rule in self.step_rules:
                rule.on_steps(item.job, (item.rank,), (item.step,), (item.ts,))
        elif isinstance(item, StepColumns):
            runs = item.job_runs()
            for job, lo, hi in runs:
                if len(runs) == 1:
                    ranks, ts, steps = item.rank, item.ts, item.step
                else:
                    ranks, ts, steps = item.rank[lo:hi], item.ts[lo:hi], item.step[lo:hi]
                for rule in self.step_rules:
                    rule.on_steps(job, ranks, steps, ts, layouts.get((lo, hi)))
        elif isinstance(item, list):
            for one in item:
                self.observe_steps(one, layouts)

    def _note_total_steps(self, job: str, total: int) -> None:
        if job not in self._total_steps and len(self._total_steps) >= 10_000:
            self._total_steps.pop(next(iter(self._total_steps)))  # bounded: the oldest job forgotten
        self._total_steps[job] = total

    def total_steps(self, job: str) -> int | None:
        """The job's total steps as its monitor last said (``total_steps`` on step events); None: not told."""
        return self._total_steps.get(job)

    def merge_placement(self, record: dict[str, Any]) -> None:
        """Another worker's placement record (streams/oncall_feed.py)."""
        self.new_pairs.extend(self.placement.merge(record))

    def add_incident(self, incident: Incident) -> list[Alert]:
        """An incident recorded by another worker (or this one before a restart)."""
        return self.gate(self.rule("node_ledger").add_incident(incident))

    def gate(self, alerts: list[Alert]) -> list[Alert]:
        """The alerts leaving, through the gating rules (the drain budget: models/oncall/budget.py)."""
        alerts = self.escalation.apply(alerts)  # first: a drain the ladder chooses counts against the budget
        for rule in self._gate_rules:
            alerts = rule.gate(alerts)
        return alerts

    def finish(self, alerts: list[Alert]) -> list[Alert]:
        """``alerts`` through the on-call stages, in order (``finish([])``: what a merged placement republishes)."""
        for stage in self.stages:
            alerts = stage.process(alerts, self.view)
        return alerts

    # -- what the escalation ladder asks about a job (models/oncall/escalation.py ``JobFacts``) ------------------

    def now(self) -> float | None:
        return self.view.clock if self.view is not None else None

    def checkpoint_of(self, job: str) -> tuple[float | None, int | None]:
        return self.view.checkpoint_of(job) if self.view is not None else (None, None)

    def restart_seconds(self, job: str) -> float | None:
        try:
            return self.rule("restarts").restart_seconds(job)
        except KeyError:  # an outlet made without the restarts rule
            return None

    def jobs_on(self, node: str, at: float) -> list[str]:
        return [j["job"] for j in self.placement.jobs_on(node, at=at)]

    def ranks_of(self, job: str) -> int:
        return self.view.ranks_of(job) if self.view is not None else 0

    def typical_step_time(self, job: str) -> float:
        """Median duration of the job's recent judged steps (models/jobhealth/sli.py; a restart's resumed steps are
        not judged again until they pass the old highest step, so these are the steps before it)."""
        steps = self.view.recent_steps(job) if self.view is not None else ()
        if not steps:
            return 0.0
        durations = sorted(d for _, _, d, _ in steps)
        return round(durations[len(durations) // 2], 6)

    # -- what the stages share ----------------------------------------------------------------

    def attribute(self, alert: Alert, jobs: list[dict] | None = None) -> Alert:
        """A node alert naming the jobs with ranks on its node (and GPU) around its start."""
        gpu = alert.evidence.get("gpu")
        if jobs is None:
            jobs = self.placement.jobs_on(alert.nodes[0], at=alert.starts_at,
                                          gpu=gpu if isinstance(gpu, int) else None)
        evidence = dict(alert.evidence)
        evidence["jobs"] = jobs
        summary = alert.summary.split("; jobs: ", 1)[0]
        if jobs:  # with the rank counts: a version naming more ranks is a new version, not a repeat
            summary += "; jobs: " + ", ".join(f"{j['job']} ({len(j['ranks'])} rank{'s' * (len(j['ranks']) != 1)})"
                                              for j in jobs)
        return alert.__class__(**{**fields_of(alert), "evidence": evidence, "summary": summary})

    def with_effective_compute(self, alert: Alert) -> Alert:
        """The job's productive share (models/jobhealth/sli.py) as sampled at the latest timer tick: the timer runs
        between messages, so events one by one and batch envelopes give the same value."""
        share = self.shares.get(alert.job)
        if share is None:
            return alert
        return alert.__class__(**{**fields_of(alert), "evidence": {**alert.evidence, "effective_compute": share}})

    def remember(self, alert: Alert) -> None:
        """An alert leaving: a firing node alert is kept (republished when a job starts on its node)."""
        if is_node_alert(alert):
            if alert.status == AlertStatus.FIRING:
                self.open_node_alerts[alert.id] = alert
                if len(self.open_node_alerts) > 100_000:  # bound: a forgotten node's faults never resolve
                    self.open_node_alerts.pop(next(iter(self.open_node_alerts)))
            else:
                self.open_node_alerts.pop(alert.id, None)


def is_node_alert(alert: Alert) -> bool:
    """A node's own alert (no job; not an incident, which names its jobs itself: models/telemetry/incidents.py)."""
    return not alert.job and bool(alert.nodes) and not (alert.facts.derived or alert.facts.multi_node_incident)


def fields_of(alert: Alert) -> dict[str, Any]:
    return {name: getattr(alert, name) for name in Alert.__slots__}
