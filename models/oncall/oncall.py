"""Where alerts leave the engine: scope, action, job attribution, restarts, the node ledger.

``DetectionEngine.process``, ``process_batch`` and ``tick`` are wrapped by
:func:`leaving_engine`, so every alert they return, whatever detector made it, passes
through :meth:`OnCall.finish` once:

1. node alerts (job empty) get ``evidence.jobs``: the jobs with ranks on the node (and GPU)
   around the alert (``models/oncall/placement.py``), also named in the summary;
2. every alert is classified (``models/oncall/actions.py``): ``labels.scope``, ``evidence.onset_ts``,
   ``evidence.failure_class``, ``evidence.action`` and ``annotations.recommended_action``;
3. firing alerts that implicate nodes are recorded in the node ledger (``models/oncall/ledger.py``),
   which may add a ``node_suspect`` alert;
4. restarts seen in the input (``models/oncall/restarts.py``) become ``job_restart`` alerts, fired
   and resolved at once, naming the alert that preceded them;
5. an open node alert is published again (same id) with the new job when a job starts on
   its node.

The worker shares placement and incidents with the other workers (streams/oncall_feed.py):
``new_incidents`` and ``placement.changed`` are what it has to send.
"""

from __future__ import annotations

import functools
from collections import deque
from typing import Any

from ..alert_types import AlertStatus, AlertType
from .actions import Classifier, load_overrides
from ..alerts import Alert, alert_id
from ..wire.events import StepEvent
from .ledger import Incident, NodeLedger, incidents_of
from .placement import PlacementView
from .restarts import Restart, RestartCause, RestartTracker, restart_cause
from ..wire.step_columns import StepColumns
from dataclasses import dataclass


@dataclass(frozen=True, kw_only=True)
class OnCallSettings:
    """Scope and action on every alert, restarts, the node ledger and action hooks (docs/operations.md, "On call")."""

    #: Overrides of the failure-class table (models/oncall/actions.py): JSON, or ``@path`` of a JSON file.
    failure_classes: str = ""
    #: The node ledger counts a node's incidents over this sliding window (seconds) ...
    ledger_window_seconds: float = 24 * 3600.0
    #: ... and a node implicated in this many distinct jobs within it is a ``node_suspect``.
    ledger_min_jobs: int = 2
    #: Compacted topic of incidents (keyed by node and alert): every worker's ledger reads it whole.
    ledger_topic: str = "ledger"
    #: Compacted topic of job placement (keyed by job), written by each job's owner, read by every worker.
    placement_topic: str = "placement"
    #: A node alert names the jobs that had ranks on the node within this many seconds of it.
    placement_window_seconds: float = 300.0
    #: A job restarted when its step counter goes back by more than this many steps ...
    restart_min_steps_back: int = 2
    #: ... after at least this many seconds without events from the rank that reports it.
    restart_min_silence_seconds: float = 30.0
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

#: A restart names the job's latest firing alert from at most this long before its silence began.


PRECEDING_LOOKBACK_SECONDS = 3600.0


class OnCall:
    """The engine's outlet: see the module doc. ``settings``: ``OnCallSettings``."""

    def __init__(self, settings=None) -> None:
        if settings is None:
            settings = OnCallSettings()
        self.settings = settings
        self.classifier = Classifier(overrides=load_overrides(settings.failure_classes))
        self.placement = PlacementView(window=settings.placement_window_seconds)
        self.restarts = RestartTracker(min_steps_back=settings.restart_min_steps_back,
                                       min_silence_seconds=settings.restart_min_silence_seconds)
        self.ledger = NodeLedger(window_seconds=settings.ledger_window_seconds, min_jobs=settings.ledger_min_jobs)
        self.depth = 0  # nesting of wrapped engine calls: only the outermost one finishes alerts
        self._restarts: list[Restart] = []
        self._new_pairs: list[tuple[str, str]] = []  # (job, node) first seen in this call
        self._latest: dict[str, deque] = {}  # job -> recent firing alerts (starts_at, id, type, class)
        self.open_node_alerts: dict[str, Alert] = {}  # firing node alerts by id (latest version)
        #: Incidents recorded here that other workers have not seen yet (the worker sends them).
        self.new_incidents: list[Incident] = []
        self.restarts_seen = 0
        #: job -> its SLI snapshot (the engine's ``job_sli``): resolved job alerts carry its effective compute.
        self.sli_of = None
        self.engine = None  # the engine it serves (set on its first call)
        self._share: dict[str, float] = {}  # job -> productive share at the latest tick

    # -- input --------------------------------------------------------------------------------

    def observe(self, item: Any) -> None:
        """An event or a StepColumns batch about to enter the engine."""
        if isinstance(item, StepEvent):
            if self.placement.observe_one(item.job, item.rank, item.node, item.gpu, item.ts):
                self._new_pairs.append((item.job, item.node))
            found = self.restarts.update(item.job, item.rank, item.step, item.ts)
            if found is not None:
                self._restarts.append(found)
        elif isinstance(item, StepColumns):
            runs = item.job_runs()
            for job, lo, hi in runs:
                if len(runs) == 1:  # the usual envelope: one job, no copies
                    ranks, ts, nodes, gpus, steps = item.rank, item.ts, item.node, item.gpu, item.step
                else:
                    ranks, ts, nodes = item.rank[lo:hi], item.ts[lo:hi], item.node[lo:hi]
                    gpus, steps = item.gpu[lo:hi], item.step[lo:hi]
                if self.placement.observe_run(job, ranks, nodes, gpus, max(ts)):
                    self._new_pairs.extend((job, node) for node in set(nodes) if node)
                found = self.restarts.update_many(job, ranks, steps, ts)
                if found:
                    self._restarts.extend(found)
        elif isinstance(item, list):
            for one in item:
                self.observe(one)

    def merge_placement(self, record: dict[str, Any]) -> None:
        """Another worker's placement record (streams/oncall_feed.py)."""
        self._new_pairs.extend(self.placement.merge(record))

    def add_incident(self, incident: Incident) -> list[Alert]:
        """An incident recorded by another worker (or this one before a restart)."""
        _, alerts = self.ledger.add(incident)
        return [self.classifier.annotate(a) for a in alerts]

    # -- output -------------------------------------------------------------------------------

    def finish(self, alerts: list[Alert]) -> list[Alert]:
        out: list[Alert] = []
        for alert in alerts:
            if not alert.job and alert.nodes and alert.type not in (AlertType.NODE_SUSPECT, AlertType.FABRIC):
                alert = self._attribute(alert)  # a fabric incident names its jobs itself (models/oncall/incidents.py)
            elif alert.job and "onset_ts" not in alert.evidence:
                alert = self._onset_from_steps(alert)
            alert = self.classifier.annotate(alert)
            if alert.job and alert.status == AlertStatus.RESOLVED:
                alert = self._with_effective_compute(alert)
            out.append(alert)
            self._remember(alert)
            out.extend(self._record(alert))
        for restart in self._restarts:
            out.extend(self._restart_alerts(restart))
        self._restarts = []
        if self._new_pairs:
            pairs, self._new_pairs = self._new_pairs, []
            out.extend(self._republish(pairs))
        return out

    def tick(self, now: float) -> list[Alert]:
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
        return [self.classifier.annotate(a) for a in self.ledger.tick(now)]

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

    def _with_effective_compute(self, alert: Alert) -> Alert:
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
        if alert.status != AlertStatus.FIRING or alert.type in (AlertType.JOB_RESTART, AlertType.NODE_SUSPECT):
            return
        ev = alert.evidence
        # What classifies a restart after it (models/oncall/restarts.py ``restart_cause``).
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

    def _record(self, alert: Alert) -> list[Alert]:
        out = []
        for incident in incidents_of(alert):
            new, suspects = self.ledger.add(incident)
            if new:
                self.new_incidents.append(incident)
                if len(self.new_incidents) > 10_000:
                    del self.new_incidents[: len(self.new_incidents) - 10_000]
            out.extend(self.classifier.annotate(a) for a in suspects)
        return out

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

    def _typical_step_time(self, job: str) -> float:
        """Median duration of the job's recent judged steps (models/jobhealth/sli.py; a restart's resumed steps are
        not judged again until they pass the old highest step, so these are the steps before it)."""
        state = self.engine.jobs.get(job) if self.engine is not None else None
        if state is None or not state.sli._steps:
            return 0.0
        durations = sorted(d for _, _, d, _ in state.sli._steps)
        return round(durations[len(durations) // 2], 6)

    def _restart_alerts(self, r: Restart) -> list[Alert]:
        self.restarts_seen += 1
        preceding = self._preceding(r)
        cls = preceding["failure_class"] if preceding else "unknown"
        cause, blamed = restart_cause(preceding)
        nodes = tuple(self.placement.nodes_of(r.job))[:64]
        step_time = self._typical_step_time(r.job)
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
        fc = self.classifier.classes.get("job_restart")
        fired = self.classifier.annotate(fired)
        if fc is not None:
            action = dict(fired.evidence["action"], kind=fc.kind, retryable=fc.retryable)
            fired = fired.__class__(**{**_fields(fired), "scope": fc.scope, "recommended_action":
                                       fc.sentence.replace("{nodes}", ", ".join(nodes) or "the nodes"),
                                       "evidence": {**fired.evidence, "action": action}})
        return [fired, self._with_effective_compute(fired.resolved(at=r.at, summary=f"resolved: job resumed ({summary})"))]

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
                    out.extend(self._record(again))
        return out


def _priority(kind: str) -> int:
    # A device fault or hang explains a restart better than a slowdown that preceded it.
    return {"gpu_fault": 4, "hang": 3, "link_errors": 3}.get(kind, 1)


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
