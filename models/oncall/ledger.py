"""The node ledger: per node, the incidents that implicated it, across jobs; ``node_suspect``.

A bad node shows up again and again in different jobs: a straggler culprit today, a hang
culprit tomorrow, a ``link_errors`` next week (seed 000, section 10; seed 003, 4.3 and 5.4).
An alert implicates a node when the node hosts one of its culprit ranks, is the node of its
first suspected cause, or is the node of a node alert (``gpu_fault``, ``link_errors``)
(``models.oncall.actions.implicated_nodes``). Incidents whose class blames the job itself (input
pipeline, application Xids, a host OOM kill) implicate no node, and neither do ``info`` alerts.

A ``node_suspect`` alert (job empty, scope device; id from the node) fires when a node was
implicated in ``min_jobs`` or more distinct jobs within ``window_seconds``, or at once on a
non-recoverable fault (Xid 79, ECC double-bit, NVLink down; critical then, else warning). It
is published again (same id, firing) when a new incident adds to it, and resolves when the
node has had no incident for the window.

Pure: incidents are small dicts (``Incident.to_dict``), so the worker can share them through
a compacted topic (each worker's ledger reads all of them: jobs on different workers add up,
and a restarted worker reads its ledger back).
"""

from __future__ import annotations

import math

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .actions import NON_RECOVERABLE, implicated_nodes
from ..alert_types import AlertStatus, AlertType, IMPLICATING_TYPES, Severity
from ..alerts import Alert, alert_id

# Alert types whose nodes are implicated (plus any alert carrying suspected causes): IMPLICATING_TYPES.
#: Failure classes that blame the job, not the node.
JOB_CLASSES = frozenset({"input_pipeline", "app_xid", "host_oom"})


@dataclass(frozen=True, slots=True)
class Incident:
    node: str
    id: str
    type: str
    job: str
    starts_at: float
    failure_class: str
    jobs: tuple[tuple[str, tuple[int, ...]], ...]  # (job, ranks on this node) implicated

    def to_dict(self) -> dict[str, Any]:
        return {"node": self.node, "id": self.id, "type": self.type, "job": self.job, "starts_at": self.starts_at,
                "failure_class": self.failure_class, "jobs": [{"job": j, "ranks": list(r)} for j, r in self.jobs]}

    @staticmethod
    def from_dict(d: dict[str, Any]) -> "Incident":
        return Incident(node=str(d["node"]), id=str(d["id"]), type=str(d.get("type", "")), job=str(d.get("job", "")),
                        starts_at=float(d["starts_at"]), failure_class=str(d.get("failure_class", "unknown")),
                        jobs=tuple((str(j["job"]), tuple(int(r) for r in j.get("ranks") or ()))
                                   for j in d.get("jobs") or () if j.get("job")))


def incidents_of(alert: Alert) -> list[Incident]:
    """The incidents an alert (already classified: ``evidence.failure_class``) records, one per implicated node."""
    ev = alert.evidence
    # info: steady waste worth a ticket, not an incident
    if alert.status != AlertStatus.FIRING or alert.severity == Severity.INFO:
        return []
    if alert.type not in IMPLICATING_TYPES and not ev.get("suspected_causes"):
        return []
    cls = str(ev.get("failure_class", "unknown"))
    if cls in JOB_CLASSES:
        return []
    out = []
    for node in implicated_nodes(alert):
        if alert.job:
            ranks = _ranks_on(alert, node)
            jobs = ((alert.job, ranks),)
        else:
            jobs = tuple((str(j["job"]), tuple(j.get("ranks") or ())) for j in ev.get("jobs") or ()
                         if isinstance(j, dict) and j.get("job"))
        out.append(Incident(node=node, id=alert.id, type=alert.type, job=alert.job, starts_at=alert.starts_at,
                            failure_class=cls, jobs=jobs))
    return out


def _ranks_on(alert: Alert, node: str) -> tuple[int, ...]:
    ev = alert.evidence
    if alert.type == AlertType.HANG:
        return tuple(int(c["rank"]) for c in ev.get("culprits") or ()
                     if isinstance(c, dict) and c.get("node") == node and isinstance(c.get("rank"), int))
    if node in alert.nodes and len(alert.nodes) == 1:
        return tuple(alert.ranks)
    causes = ev.get("suspected_causes") or ()
    return tuple(int(c["rank"]) for c in causes[:1] if isinstance(c, dict) and c.get("node") == node
                 and isinstance(c.get("rank"), int))


class NodeLedger:
    """Incidents per node over a sliding window; fires and resolves ``node_suspect``.

    Hyperparameters (keyword-only):

    * ``window_seconds``: how long an incident counts (default 24 h);
    * ``min_jobs``: distinct implicated jobs within the window that make a node suspect;
    * ``max_incidents``: incidents kept per node (oldest dropped first);
    * ``max_nodes``: nodes kept (the one with the oldest last incident dropped first).

    ``owns(node)``: whether this ledger's owner publishes the node's alerts (None: all).
    ``vouched(node, ts)``: whether the node's own agent had reported before ``ts`` (None: not checked). Only an
    agent speaks for its node: job events name nodes the training processes chose to name, so they can implicate
    a node, never condemn it alone (issue 44 finding 1); a node no agent vouches for gets no verdict, its
    incidents kept (counted in ``unvouched``) until its agent reports and a later incident is judged.
    State: ``incidents`` (node -> {alert id: Incident}) and ``open`` (node -> its firing alert).
    """

    def __init__(self, *, window_seconds: float = 86_400.0, min_jobs: int = 2, max_incidents: int = 256,
                 max_nodes: int = 100_000) -> None:
        self.window_seconds = window_seconds
        self.min_jobs = min_jobs
        self.max_incidents = max_incidents
        self.max_nodes = max_nodes
        self.incidents: dict[str, dict[str, Incident]] = {}
        self.open: dict[str, Alert] = {}
        self.owns: Callable[[str], bool] | None = None
        self.vouched: Callable[[str, float], bool] | None = None
        #: Verdicts not given because no agent of the node had reported (``vouched``).
        self.unvouched = 0
        self.clock = 0.0  # latest time seen (incidents, ticks)
        #: (node, alert id) of incidents that left the window since last cleared (the worker tombstones them).
        self.pruned: list[tuple[str, str]] = []

    def add(self, incident: Incident) -> tuple[bool, list[Alert]]:
        """Record one incident (idempotent per node and alert id); the node_suspect alerts it causes."""
        if incident.starts_at < self.clock - self.window_seconds:
            return False, []  # already out of the window (read back after a restart)
        self.clock = max(self.clock, incident.starts_at)
        known = self.incidents.get(incident.node)
        if known is None:
            if len(self.incidents) >= self.max_nodes:
                oldest = min(self.incidents, key=lambda n: max((i.starts_at for i in self.incidents[n].values()),
                                                               default=0.0))
                self.incidents.pop(oldest)
            known = self.incidents[incident.node] = {}
        previous = known.get(incident.id)
        if previous is not None and set(previous.jobs) >= set(incident.jobs):
            return False, []
        if previous is not None:  # the same alert again, naming more jobs (a node alert re-published)
            merged = dict(previous.jobs)
            merged.update(dict(incident.jobs))
            incident = Incident(**{**_fields(incident), "jobs": tuple(sorted(merged.items()))})
        known[incident.id] = incident
        while len(known) > self.max_incidents:
            known.pop(min(known, key=lambda k: known[k].starts_at))
        return True, self._judge(incident.node, incident.starts_at)

    def _judge(self, node: str, at: float) -> list[Alert]:
        known = self.incidents.get(node) or {}
        recent = sorted((i for i in known.values() if i.starts_at >= at - self.window_seconds),
                        key=lambda i: (i.starts_at, i.id))
        jobs: dict[str, set[int]] = {}
        for inc in recent:
            for job, ranks in inc.jobs:
                jobs.setdefault(job, set()).update(ranks)
        fatal = [i for i in recent if i.failure_class in NON_RECOVERABLE]
        if len(jobs) < self.min_jobs and not fatal and node not in self.open:
            return []
        if not recent:
            return []
        if node not in self.open and not self._vouched(node, at):
            self.unvouched += 1
            return []
        severity = "critical" if fatal else "warning"
        hours = self.window_seconds / 3600
        reason = (f"non-recoverable fault ({fatal[-1].failure_class})" if fatal else
                  f"implicated in {len(jobs)} jobs")
        summary = (f"node_suspect: node {node} {reason}; {len(recent)} incident(s) in {len(jobs)} job(s) in the last "
                   f"{hours:g} h: " + ", ".join(f"{i.type} ({i.job or 'node'})" for i in recent[-5:]))
        first = recent[0].starts_at
        evidence = {
            "node": node,
            "jobs": [{"job": j, "ranks": sorted(r)} for j, r in sorted(jobs.items())],
            "incidents": [{"id": i.id, "type": i.type, "job": i.job, "starts_at": i.starts_at} for i in recent],
            "window_seconds": self.window_seconds,
            "reason": reason,
            "failure_class": "node_suspect",
            "onset_ts": first,
        }
        prev = self.open.get(node)
        alert = Alert(id=alert_id("", "node_suspect", node), status="firing", type="node_suspect",
                      severity=severity if prev is None or prev.severity != Severity.CRITICAL else "critical",
                      job="", ranks=(), nodes=(node,), starts_at=prev.starts_at if prev is not None else at,
                      summary=summary, evidence=evidence)
        self.open[node] = alert
        return [alert] if self.owns is None or self.owns(node) else []

    def _vouched(self, node: str, at: float) -> bool:
        """Whether the node's agent vouches for it by ``at``; asked by the node's owner only (another worker does
        not read the node's telemetry: it keeps the verdict, the owner checks before publishing it)."""
        if self.vouched is None or (self.owns is not None and not self.owns(node)):
            return True
        return self.vouched(node, at)

    def tick(self, now: float) -> list[Alert]:
        """Forget incidents older than the window; resolve the suspects whose node has been clean for it."""
        out = []
        self.clock = max(self.clock, now)
        horizon = now - self.window_seconds
        for node in list(self.incidents):
            known = self.incidents[node]
            for key in [k for k, i in known.items() if i.starts_at < horizon]:
                del known[key]
                if len(self.pruned) < 100_000:
                    self.pruned.append((node, key))
            if not known:
                del self.incidents[node]
                alert = self.open.pop(node, None)
                if alert is not None and (self.owns is None or self.owns(node)):
                    out.append(alert.resolved(at=now, summary=f"resolved: node {node} clean for "
                                                              f"{self.window_seconds / 3600:g} h ({alert.summary})"))
        return out

    def took_over(self, gained: Callable[[str], bool]) -> list[Alert]:
        """Ownership changed: the open verdicts of the nodes for which ``gained(node)`` (this ledger's owner
        speaks for them now, and did not before), to publish again: a verdict judged while another owner spoke
        for the node, or while none did (a rebalance), was published by nobody."""
        return [alert for node, alert in self.open.items()
                if gained(node) and (self.vouched is None or self.vouched(node, math.inf))]

    def worst(self, limit: int = 20) -> list[dict[str, Any]]:
        """Nodes with the most incidents now, worst first."""
        rows = [{"node": n, "incidents": len(k), "jobs": sorted({j for i in k.values() for j, _ in i.jobs})}
                for n, k in self.incidents.items()]
        rows.sort(key=lambda r: (-r["incidents"], -len(r["jobs"]), r["node"]))
        return rows[:limit]


def _fields(incident: Incident) -> dict[str, Any]:
    return {name: getattr(incident, name) for name in Incident.__slots__}
