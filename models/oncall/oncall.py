"""Where alerts leave the engine: scope, action, job attribution, restarts, the node ledger.

``DetectionEngine.process``, ``process_batch`` and ``tick`` are wrapped by
:func:`leaving_engine`, so every alert they return, whatever detector made it, passes
through :meth:`OnCall.finish` once:

1. node alerts (job empty) get ``evidence.jobs``: the jobs with ranks on the node (and GPU)
   around the alert (``models/oncall/placement.py``), also named in the summary;
2. every alert is classified (``models/oncall/actions.py``): ``labels.scope``, ``evidence.onset_ts``,
   ``evidence.failure_class``, ``evidence.action`` and ``annotations.recommended_action``;
3. every alert goes to the outlet rules (``OutletRule``s: models/rule.py, models/oncall/outlet_rules.py), made
   from the registry's ``OUTLET_RULES`` (models/registry.py) and fed what they declare: the node ledger
   (``models/oncall/ledger.py``) records firing alerts that implicate nodes and may add a ``node_suspect``;
   restarts seen in the input (``models/oncall/restarts.py``) become ``job_restart`` alerts at the end of the
   call, fired and resolved at once, naming the alert that preceded them;
4. an open node alert is published again (same id) with the new job when a job starts on
   its node.

The worker shares placement and incidents with the other workers (streams/oncall_feed.py):
``new_incidents`` and ``placement.changed`` are what it has to send.
"""

from __future__ import annotations

import functools
from typing import Any

from ..tunable import MAX_SECONDS, runtime
from ..alert_types import AlertStatus, AlertType
from .actions import Classifier, load_overrides
from .escalation import Escalation
from .citations import HOLD_MIN_SECONDS, HOLD_STEPS, Citations
from ..alerts import Alert
from ..wire.events import StepEvent
from .ledger import Incident, NodeLedger
from .placement import PlacementView
from ..rule import OutletRule, Signal, capped_of, dependency_order, open_alerts_of, reconfigure_rules
from ..wire.step_columns import StepColumns
from dataclasses import dataclass


@dataclass(frozen=True, kw_only=True)
class OnCallSettings:
    """Scope and action on every alert, restarts, the node ledger and action hooks (docs/operations.md, "On call")."""

    #: Overrides of the failure-class table (models/oncall/actions.py): JSON, or ``@path`` of a JSON file.
    failure_classes: str = ""
    #: The node ledger counts a node's incidents over this sliding window (seconds) ...
    ledger_window_seconds: float = runtime(24 * 3600.0, low=1.0, high=MAX_SECONDS)
    #: ... and a node implicated in this many distinct jobs within it is a ``node_suspect``.
    ledger_min_jobs: int = runtime(2, low=1, high=10_000)
    #: Compacted topic of incidents (keyed by node and alert): every worker's ledger reads it whole.
    ledger_topic: str = "ledger"
    #: Compacted topic of job placement (keyed by job), written by each job's owner, read by every worker.
    placement_topic: str = "placement"
    #: A node alert names the jobs that had ranks on the node within this many seconds of it.
    placement_window_seconds: float = 300.0
    #: A job restarted when its step counter goes back by more than this many steps ...
    restart_min_steps_back: int = runtime(2, low=1, high=1_000_000)
    #: ... after at least this many seconds without events from the rank that reports it.
    restart_min_silence_seconds: float = runtime(30.0, low=0.0, high=86_400.0)
    #: Action hooks: off by default. On: ``evidence.action`` of new node_suspect and critical device
    #: alerts goes to the actions topic (and the webhook, if set).
    hooks_enabled: bool = False
    actions_topic: str = "actions"
    #: Optional webhook URL (JSON POST) for actions.
    webhook_url: str = ""
    #: Dry run (the default): commands are rendered into the payload, never executed.
    dry_run: bool = True
    #: Executor command run with the rendered command appended, only when dry_run is off; empty: none.
    executor: str = ""
    #: Command templates ({node}, {reason}) rendered into each action.
    slurm_template: str = "scontrol update nodename={node} state=drain reason=\"{reason}\""
    kubernetes_template: str = "kubectl cordon {node}"
    #: Optional file of the nodes actions may name (one a line); others are refused (docs/security.md).
    node_inventory_file: str = ""
    #: Compacted topic of humans' releases of held drains (``stepwatch actions release``), read by every worker.
    releases_topic: str = "releases"
    #: The drain budget (models/oncall/budget.py): at most this many nodes drained by stepwatch per hour ...
    drain_budget_per_hour: int = runtime(2, low=0, high=10_000)
    #: ... this many per job per hour ...
    drain_budget_per_job_hour: int = runtime(1, low=0, high=10_000)
    #: ... and this share (%) of the nodes seen drained at once (at least one node); beyond: held for a human.
    drain_budget_fleet_percent: float = runtime(5.0, low=0.0, high=100.0)
    #: The escalation ladder for slow nodes (models/oncall/ladder.py): a straggler's loss is counted over this
    #: horizon (or the job's remaining time, from its ``total_steps``, when shorter) ...
    ladder_horizon_seconds: float = runtime(6 * 3600.0, low=60.0, high=MAX_SECONDS)
    #: ... against a restart's cost: the work since the job's last checkpoint plus this restart time (when the
    #: job's own restarts have not taught one) ...
    ladder_restart_seconds: float = runtime(600.0, low=0.0, high=86_400.0)
    #: ... and a loss below this many GPU-hours is only observed (above: the job's owner is notified).
    ladder_notify_gpu_hours: float = runtime(1.0, low=0.0, high=1e9)


class OnCall:
    """The engine's outlet: see the module doc. ``settings``: ``OnCallSettings``."""

    def __init__(self, settings=None, *, rules) -> None:
        """``rules``: the outlet rules' classes, in feeding order (the registry's ``OUTLET_RULES``)."""
        if settings is None:
            settings = OnCallSettings()
        self.settings = settings
        self.classifier = Classifier(overrides=load_overrides(settings.failure_classes))
        self.placement = PlacementView(window=settings.placement_window_seconds)
        self.depth = 0  # nesting of wrapped engine calls: only the outermost one finishes alerts
        self._new_pairs: list[tuple[str, str]] = []  # (job, node) first seen in this call
        self.open_node_alerts: dict[str, Alert] = {}  # firing node alerts by id (latest version)
        self.citations = Citations()  # the incident each alert belongs to (models/oncall/citations.py)
        #: job -> its SLI snapshot (the engine's ``job_sli``): resolved job alerts carry its effective compute.
        self.sli_of = None
        self.engine = None  # the engine it serves (set on its first call)
        self._share: dict[str, float] = {}  # job -> productive share at the latest tick
        self.escalation = Escalation(self)  # the ladder for slow nodes (models/oncall/ladder.py)
        self._total_steps: dict[str, int] = {}  # job -> its monitor's ``total_steps`` (the ladder's horizon)
        classes = tuple(rules)
        made: dict[str, OutletRule] = {}
        by_name = {c.spec.name: c for c in classes}
        for spec in dependency_order([c.spec for c in classes]):  # each after the rules it needs
            made[spec.name] = by_name[spec.name](self, {n: made[n] for n in spec.needs})
        #: The outlet rules, in feeding order.
        self.rules: tuple[OutletRule, ...] = tuple(made[c.spec.name] for c in classes)
        self._step_rules = [r for r in self.rules if Signal.RANK_STEPS in r.spec.consumes]
        self._alert_rules = [r for r in self.rules if Signal.ALERTS in r.spec.consumes]
        self._tick_rules = [r for r in self.rules if Signal.TICKS in r.spec.consumes]
        self._flush_rules = [r for r in self.rules if type(r).flush is not OutletRule.flush]  # once per engine call
        self._gate_rules = [r for r in self.rules if type(r).gate is not OutletRule.gate]  # last, on all leaving

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

    def observe(self, item: Any) -> None:
        """An event or a StepColumns batch about to enter the engine."""
        if isinstance(item, StepEvent):
            if item.total_steps is not None:
                self._note_total_steps(item.job, item.total_steps)
            if self.placement.observe_one(item.job, item.rank, item.node, item.gpu, item.ts):
                self._new_pairs.append((item.job, item.node))
            for rule in self._step_rules:
                rule.on_steps(item.job, (item.rank,), (item.step,), (item.ts,))
        elif isinstance(item, StepColumns):
            runs = item.job_runs()
            layouts = self.engine.layouts(item) if self.engine is not None else {}
            for job, lo, hi in runs:
                if len(runs) == 1:  # the usual envelope: one job, no copies
                    ranks, ts, nodes, gpus, steps = item.rank, item.ts, item.node, item.gpu, item.step
                else:
                    ranks, ts, nodes = item.rank[lo:hi], item.ts[lo:hi], item.node[lo:hi]
                    gpus, steps = item.gpu[lo:hi], item.step[lo:hi]
                layout = layouts.get((lo, hi))
                if self.placement.observe_run(job, ranks, nodes, gpus, max(ts), layout):
                    self._new_pairs.extend((job, node) for node in set(nodes) if node)
                for rule in self._step_rules:
                    rule.on_steps(job, ranks, steps, ts, layout)
        elif isinstance(item, list):
            for one in item:
                self.observe(one)

    def _note_total_steps(self, job: str, total: int) -> None:
        if job not in self._total_steps and len(self._total_steps) >= 10_000:
            self._total_steps.pop(next(iter(self._total_steps)))  # bounded: the oldest job forgotten
        self._total_steps[job] = total

    def total_steps(self, job: str) -> int | None:
        """The job's total steps as its monitor last said (``total_steps`` on step events); None: not told."""
        return self._total_steps.get(job)

    def merge_placement(self, record: dict[str, Any]) -> None:
        """Another worker's placement record (streams/oncall_feed.py)."""
        self._new_pairs.extend(self.placement.merge(record))

    def add_incident(self, incident: Incident) -> list[Alert]:
        """An incident recorded by another worker (or this one before a restart)."""
        return self.gate(self.rule("node_ledger").add_incident(incident))

    def gate(self, alerts: list[Alert]) -> list[Alert]:
        """The alerts leaving, through the gating rules (the drain budget: models/oncall/budget.py)."""
        alerts = self.escalation.apply(alerts)  # first: a drain the ladder chooses counts against the budget
        for rule in self._gate_rules:
            alerts = rule.gate(alerts)
        return alerts

    # -- what the escalation ladder asks about a job (models/oncall/escalation.py ``JobFacts``) ------------------

    def now(self) -> float | None:
        return self.engine.clock if self.engine is not None else None

    def checkpoint_of(self, job: str) -> tuple[float | None, int | None]:
        state = self.engine.jobs.get(job) if self.engine is not None else None
        if state is None:
            return None, None
        detector = state.checkpoint
        return detector.last_success_ts, detector.latest_step

    def restart_seconds(self, job: str) -> float | None:
        try:
            return self.rule("restarts").restart_seconds(job)
        except KeyError:  # an outlet made without the restarts rule
            return None

    def jobs_on(self, node: str, at: float) -> list[str]:
        return [j["job"] for j in self.placement.jobs_on(node, at=at)]

    # -- output -------------------------------------------------------------------------------

    def finish(self, alerts: list[Alert]) -> list[Alert]:
        out: list[Alert] = []
        for alert in alerts:
            if not alert.job and alert.nodes and alert.type not in (AlertType.NODE_SUSPECT, AlertType.FABRIC):
                alert = self._attribute(alert)  # a fabric incident names its jobs itself (models/telemetry/incidents.py)
            elif alert.job and "onset_ts" not in alert.evidence:
                alert = self._onset_from_steps(alert)
            if self.citations.absorbs(alert, ranks_of=self._ranks_of):
                continue  # a drop that is (or may be) a straggler's own cost (models/oncall/citations.py)
            self._publish(alert, out)
        for rule in self._flush_rules:
            out.extend(rule.flush())
        if self._new_pairs:
            pairs, self._new_pairs = self._new_pairs, []
            out.extend(self._republish(pairs))
        return self.gate(out)

    def _publish(self, alert: Alert, out: list[Alert]) -> None:
        """One alert leaving: cited, classified, remembered, shown to the outlet rules (their alerts after it)."""
        alert = self.classifier.annotate(self.citations.cite(alert))
        if alert.job and alert.status == AlertStatus.RESOLVED:
            alert = self.with_effective_compute(alert)
        out.append(alert)
        self._remember(alert)
        for rule in self._alert_rules:
            out.extend(rule.update(alert))

    def _ranks_of(self, job: str) -> int:
        state = self.engine.jobs.get(job) if self.engine is not None else None
        return len(state.ranks) if state is not None else 0

    def _hold_seconds(self, job: str) -> float:
        return max(HOLD_MIN_SECONDS, HOLD_STEPS * self.typical_step_time(job))

    def tick(self, now: float) -> list[Alert]:
        out: list[Alert] = []
        for alert in self.citations.release(now, self._hold_seconds):  # drops no straggler explained
            self._publish(alert, out)
        if self.engine is not None:
            # Only the jobs the engine's timer just visited: a job's share moves only with its events, and every
            # job an event reached is visited (models/engine.py ``tick``): O(jobs due), not O(jobs).
            shares, jobs = self._share, self.engine.jobs
            for job in self.engine.last_tick_jobs:
                name, sli = job.job, job.sli
                if jobs.get(name) is job and sli.first_ts is not None and sli.last_ts is not None \
                        and sli.last_ts > sli.first_ts:
                    shares[name] = round(min(sli.productive_seconds / (sli.last_ts - sli.first_ts), 1.0), 4)
                else:
                    shares.pop(name, None)  # evicted at this tick, or no span yet
            if len(shares) > 2 * len(jobs) + 1024:  # jobs forgotten without a tick (revoked partitions)
                self._share = {name: share for name, share in shares.items() if name in jobs}
        for rule in self._tick_rules:
            out.extend(rule.tick(now))
        return self.gate(out)

    def _attribute(self, alert: Alert, jobs: list[dict] | None = None) -> Alert:
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
        return alert.__class__(**{**_fields(alert), "evidence": evidence, "summary": summary})

    def with_effective_compute(self, alert: Alert) -> Alert:
        """The job's productive share (models/jobhealth/sli.py) as sampled at the latest timer tick: the timer runs
        between messages, so events one by one and batch envelopes give the same value."""
        share = self._share.get(alert.job)
        if share is None:
            return alert
        return alert.__class__(**{**_fields(alert), "evidence": {**alert.evidence, "effective_compute": share}})

    def _onset_from_steps(self, alert: Alert) -> Alert:
        """Rules that name the step a problem began at (straggler, throughput drop): when that step ended,
        minus its duration, from the job's recent judged steps (models/jobhealth/sli.py); older than those: the
        detection time minus the steps since at their median duration."""
        ev = alert.evidence
        first = ev.get("first_step", ev.get("onset_step"))
        detected = ev.get("detected_step")
        job = self.engine.jobs.get(alert.job) if self.engine is not None else None
        if not isinstance(first, int) or not isinstance(detected, int) or job is None:
            return alert
        steps = list(job.sli._steps)  # (step, end ts, step time, tokens), oldest first
        onset = None
        for step, end, duration, _ in steps:
            if step == first:
                onset = end - duration
                break
        if onset is None and steps:
            typical = sorted(d for _, _, d, _ in steps)[len(steps) // 2]
            onset = alert.starts_at - max(detected - first + 1, 0) * typical
        if onset is None:
            return alert
        return alert.__class__(**{**_fields(alert), "evidence": {**ev, "onset_ts": round(min(onset, alert.starts_at), 6)}})

    def _remember(self, alert: Alert) -> None:
        if not alert.job and alert.nodes and alert.type not in (AlertType.NODE_SUSPECT, AlertType.FABRIC):
            if alert.status == AlertStatus.FIRING:
                self.open_node_alerts[alert.id] = alert
                if len(self.open_node_alerts) > 100_000:  # bound: a forgotten node's faults never resolve
                    self.open_node_alerts.pop(next(iter(self.open_node_alerts)))
            else:
                self.open_node_alerts.pop(alert.id, None)

    def typical_step_time(self, job: str) -> float:
        """Median duration of the job's recent judged steps (models/jobhealth/sli.py; a restart's resumed steps are
        not judged again until they pass the old highest step, so these are the steps before it)."""
        state = self.engine.jobs.get(job) if self.engine is not None else None
        if state is None or not state.sli._steps:
            return 0.0
        durations = sorted(d for _, _, d, _ in state.sli._steps)
        return round(durations[len(durations) // 2], 6)

    def _republish(self, pairs: list[tuple[str, str]]) -> list[Alert]:
        nodes = {node for _, node in pairs}
        out = []
        for ident, alert in list(self.open_node_alerts.items()):
            if alert.nodes and alert.nodes[0] in nodes:
                again = self._attribute(alert)
                if again.evidence.get("jobs") != alert.evidence.get("jobs"):
                    again = self.classifier.annotate(again)
                    self.open_node_alerts[ident] = again
                    self._remember(again)
                    out.append(again)
                    for rule in self._alert_rules:
                        out.extend(rule.update(again))
        return out


def _fields(alert: Alert) -> dict[str, Any]:
    return {name: getattr(alert, name) for name in Alert.__slots__}


def leaving_engine(method):
    """Wrap an engine method so the alerts it returns pass through ``self.oncall`` once."""
    name = method.__name__

    @functools.wraps(method)
    def wrapper(self, *args, **kwargs):
        oncall: OnCall = self.oncall
        if oncall.engine is None:
            oncall.engine = self
            oncall.sli_of = self.job_sli
        if oncall.depth:
            return method(self, *args, **kwargs)
        oncall.depth += 1
        try:
            if name in ("process", "process_batch") and args:
                oncall.observe(args[0])
            out = method(self, *args, **kwargs)
            out = oncall.finish(out)
            if name == "tick":
                out.extend(oncall.tick(args[0] if args else kwargs["now"]))
            return out
        finally:
            oncall.depth -= 1

    return wrapper
