"""One root cause, one incident id: the alerts that are symptoms of another alert's cause cite it.

A thermally throttled GPU raises ``gpu_fault`` (its clocks), ``gpu_hot`` (its temperature) and a ``straggler``
(the rank on it, whose first suspected cause is that GPU); an erring port raises ``link_errors`` and the
job's ``comm_slowdown`` (its first suspected cause that port); a slower fabric raises a job's ``comm_slowdown``
and a ``throughput_drop`` of the communication layer. Each is right on its own, and each is a page. Here every
such alert carries the id of the root cause's first alert as ``evidence.incident`` (and so the label
``incident``, models/alerts.py): Alertmanager groups them by it and inhibits the symptoms with it
(deploy/alertmanager/alertmanager.yml), and ``stepwatch report`` and the quality suite can count one
incident per root cause.

Who cites whom, as alerts leave the engine (models/oncall/oncall.py ``OnCall.finish``):

* a node alert about one component (``link_errors``: each of its ports, ``gpu_fault`` / ``gpu_hot``: its
  GPU) opens an incident for that ``(node, component)`` or joins the one already open there;
* so does a job alert (``straggler``, ``comm_slowdown``, ``throughput_drop``, ``hang``) whose first
  suspected cause names a node and component: a straggler's alert can come before its GPU's own (the
  telemetry arrives later), and the GPU's alerts then cite the straggler's;
* otherwise a job's ``comm_slowdown`` and communication ``throughput_drop`` cite the job's open
  communication incident (the first of them), or open it;
* an alert that already cites an incident (a fabric incident, a node straggler incident:
  models/oncall/incidents.py) keeps it, and its resolution cites what its firing versions cited.

**A job's slowdown that is its straggler's.** In a job of two ranks (or whenever open stragglers are half
its ranks) the median compute time moves with the slow rank, so the throughput rule sees a compute-layer
``throughput_drop`` that is only the straggler's cost, which its alert already states (``job_slowdown``,
``gpu_hours_lost_per_day``). ``absorbs`` says so for such a drop that fires while the straggler is open;
the outlet leaves every version of it out (counted in ``absorbed``): one slow rank, one alert. With more
ranks one slow rank does not move the median, and a drop beside a straggler is another problem.

Bounded: an incident is forgotten when its last alert resolves; at most ``max_open`` alerts are remembered
(the oldest dropped first: a forgotten node never resolves its alerts).
"""

from __future__ import annotations

from dataclasses import replace

from ..alert_types import AlertStatus, AlertType
from ..alerts import Alert

#: Node alerts about one component that a job alert's suspected cause can point at.
COMPONENT_TYPES = frozenset({AlertType.LINK_ERRORS, AlertType.GPU_FAULT, AlertType.GPU_HOT})
#: Job alerts that name their cause's node and component (models/telemetry/telemetry_hub.py).
SYMPTOM_TYPES = frozenset({AlertType.STRAGGLER, AlertType.COMM_SLOWDOWN, AlertType.THROUGHPUT_DROP, AlertType.HANG})


def _components(alert: Alert) -> list[tuple[str, str]]:
    """The ``(node, component)`` pairs a node alert is about, spelled as suspected causes spell them."""
    node, ev = alert.nodes[0], alert.evidence
    if alert.type == AlertType.LINK_ERRORS:
        return [(node, f"{p['device']}/{p['port']}") for p in ev.get("ports") or ()
                if isinstance(p, dict) and "device" in p and "port" in p]
    gpu = ev.get("gpu")
    return [(node, f"gpu{gpu}")] if isinstance(gpu, int) else []


def _is_comm(alert: Alert) -> bool:
    return alert.type == AlertType.COMM_SLOWDOWN or (
        alert.type == AlertType.THROUGHPUT_DROP and alert.evidence.get("layer") == "communication")


class Citations:
    """See the module doc. ``max_open``: alerts remembered at most."""

    def __init__(self, *, max_open: int = 100_000) -> None:
        self.max_open = max_open
        self._cited: dict[str, str] = {}  # alert id -> the incident its versions cite
        self._members: dict[str, set[str]] = {}  # incident id -> its open alerts' ids
        self._by_component: dict[tuple[str, str], str] = {}  # (node, component) -> open incident id
        self._by_job: dict[str, str] = {}  # job -> its open communication incident id
        #: job -> its firing stragglers: id -> (ranks named, the job's GPUs from the alert's cost)
        self._stragglers: dict[str, dict[str, tuple[int, int]]] = {}
        self._absorbed: dict[str, None] = {}  # ids of throughput drops left out (insertion order: oldest first)
        self.absorbed = 0  # versions left out

    def absorbs(self, alert: Alert) -> bool:
        """Whether ``alert`` is a version of a compute-layer throughput drop that is the cost of the job's open
        straggler (see the module doc): the outlet leaves it out."""
        if alert.id in self._absorbed:
            if alert.status == AlertStatus.RESOLVED:
                del self._absorbed[alert.id]
            self.absorbed += 1
            return True
        if not alert.job:
            return False
        if alert.type == AlertType.STRAGGLER:
            open_ = self._stragglers.setdefault(alert.job, {})
            gpus = alert.evidence.get("cost_gpus")
            if alert.status == AlertStatus.FIRING and isinstance(gpus, int):
                open_[alert.id] = (len(alert.ranks), gpus)
            else:
                open_.pop(alert.id, None)
            if not open_:
                del self._stragglers[alert.job]
            return False
        if (alert.type == AlertType.THROUGHPUT_DROP and alert.status == AlertStatus.FIRING
                and alert.evidence.get("layer") == "compute"
                and any(2 * ranks >= gpus for ranks, gpus in self._stragglers.get(alert.job, {}).values())):
            if len(self._absorbed) >= self.max_open:
                self._absorbed.pop(next(iter(self._absorbed)))
            self._absorbed[alert.id] = None
            self.absorbed += 1
            return True
        return False

    def cite(self, alert: Alert) -> Alert:
        """``alert`` with ``evidence.incident`` set where it belongs to an incident (the same alert otherwise)."""
        incident = self._incident_of(alert)
        if alert.status == AlertStatus.RESOLVED:
            self._leave(alert.id)
        if incident is None or alert.evidence.get("incident") == incident:
            return alert
        return replace(alert, evidence={**alert.evidence, "incident": incident})

    def _incident_of(self, alert: Alert) -> str | None:
        own = alert.evidence.get("incident")
        known = self._cited.get(alert.id)
        if alert.status == AlertStatus.RESOLVED:
            return own if isinstance(own, str) else known
        if isinstance(own, str):  # cited by the rule that made it (a fabric or node incident): kept
            incident = own
            if alert.job and _is_comm(alert):  # the job's other communication alert cites it too
                self._by_job.setdefault(alert.job, own)
        elif not alert.job and len(alert.nodes) == 1 and alert.type in COMPONENT_TYPES:
            pairs = _components(alert)
            open_ = [self._by_component[p] for p in pairs if p in self._by_component]
            incident = known or (open_[0] if open_ else alert.id)
            for pair in pairs:
                self._by_component.setdefault(pair, incident)
        elif alert.job and alert.type in SYMPTOM_TYPES:
            causes = alert.evidence.get("suspected_causes") or ()
            first = causes[0] if causes and isinstance(causes[0], dict) else {}
            key = (first.get("node"), first.get("component"))
            named = isinstance(key[0], str) and isinstance(key[1], str)
            comm = _is_comm(alert)
            incident = self._by_component.get(key) if named else None
            if incident is None and comm:
                incident = known or self._by_job.get(alert.job)
            # A later version whose cause changed keeps what an earlier one cited; the first alert of a cause
            # (a straggler can come before its GPU's own alert: telemetry arrives later) opens its incident.
            incident = incident or known or (alert.id if named or comm else None)
            if incident is not None and named:
                self._by_component.setdefault(key, incident)
            if incident is not None and comm:
                self._by_job.setdefault(alert.job, incident)
        else:
            return None
        if incident is not None and known != incident:
            if known is not None:
                self._leave(alert.id)
            self._join(alert.id, incident)
        return incident

    def _join(self, ident: str, incident: str) -> None:
        if len(self._cited) >= self.max_open:
            self._leave(next(iter(self._cited)))
        self._cited[ident] = incident
        self._members.setdefault(incident, set()).add(ident)

    def _leave(self, ident: str) -> None:
        incident = self._cited.pop(ident, None)
        members = self._members.get(incident)
        if members is None:
            return
        members.discard(ident)
        if not members:  # its last alert resolved: the incident is over
            del self._members[incident]
            self._by_component = {k: v for k, v in self._by_component.items() if v != incident}
            self._by_job = {k: v for k, v in self._by_job.items() if v != incident}

    def state_size(self) -> dict[str, int]:
        return {"alerts": len(self._cited), "incidents": len(self._members), "components": len(self._by_component),
                "jobs": len(self._by_job), "stragglers": sum(map(len, self._stragglers.values())),
                "absorbed": len(self._absorbed)}
