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
  GPU; and ``hbm_full``, a job's alert about one GPU) opens an incident for that ``(node, component)`` or
  joins the one already open there;
* so does a job alert (``straggler``, ``comm_slowdown``, ``throughput_drop``, ``hang``) whose first
  suspected cause names a node and component: a straggler's alert can come before its GPU's own (the
  telemetry arrives later), and the GPU's alerts then cite the straggler's;
* otherwise a job's ``comm_slowdown`` and communication ``throughput_drop`` cite the job's open
  communication incident (the first of them), or open it;
* an alert that already cites an incident (a fabric incident, a node straggler incident:
  models/telemetry/incidents.py) keeps it, and its resolution cites what its firing versions cited.

**A job's slowdown that is its straggler's.** In a job of two ranks (or whenever open stragglers are half
its ranks) the median compute time moves with the slow rank, so the throughput rule sees a compute-layer
``throughput_drop`` that is only the straggler's cost, which its alert already states (``job_slowdown``,
``gpu_hours_lost_per_day``). ``absorbs`` says so for such a drop that fires while the straggler is open;
the outlet leaves every version of it out (counted in ``absorbed``): one slow rank, one alert. The drop's
change-point test often fires a step or two before the straggler rule has seen enough slow steps, so in a
job of at most two ranks such a drop is held (``HOLD_STEPS`` of the job's steps, at least
``HOLD_MIN_SECONDS``): a straggler firing meanwhile absorbs it, else ``release`` hands it back to be
published, late by the hold (a drop still held when a replay without ``--drain`` ends is not, as a hang would
not fire there). With more ranks one slow rank does not move the median, and a drop beside a
straggler is another problem.

Bounded: an incident is forgotten when its last alert resolves; at most ``max_open`` alerts are remembered
(the oldest dropped first: a forgotten node never resolves its alerts).
"""

from __future__ import annotations

from dataclasses import replace

from ..alert_types import AlertStatus, AlertType, facts
from ..alerts import Alert

#: A two-rank job's compute-layer drop waits this many of its steps for a straggler to explain it ...
HOLD_STEPS = 10
#: ... and at least this many seconds (the worker's timer clock).
HOLD_MIN_SECONDS = 5.0


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
        #: drops held for a straggler to explain them: id -> (job, held since (timer clock; None until the next
        #: ``release``), their versions so far)
        self._held: dict[str, tuple[str, float | None, list[Alert]]] = {}
        self.absorbed = 0  # versions left out

    def absorbs(self, alert: Alert, *, ranks_of=None) -> bool:
        """Whether the outlet leaves ``alert`` out for now: a version of a compute-layer throughput drop that is
        the cost of the job's open straggler (left out for good), or of one in a job of at most two ranks
        (``ranks_of(job)``) that no straggler explains yet (held until ``release``; see the module doc)."""
        if alert.id in self._absorbed:
            if alert.status == AlertStatus.RESOLVED:
                del self._absorbed[alert.id]
            self.absorbed += 1
            return True
        if alert.id in self._held:
            self._held[alert.id][2].append(alert)
            return True
        if not alert.job:
            return False
        if alert.type == AlertType.STRAGGLER:
            self._straggler(alert)
            return False
        if alert.type != AlertType.THROUGHPUT_DROP or alert.status != AlertStatus.FIRING \
                or alert.evidence.get("layer") != "compute":
            return False
        if self._explained(alert.job):
            self._absorb(alert.id)
            return True
        if ranks_of is not None and 0 < ranks_of(alert.job) <= 2:
            if len(self._held) >= self.max_open:  # bound: past it, a new drop is published at once
                return False
            self._held[alert.id] = (alert.job, None, [alert])
            return True
        return False

    def release(self, now: float, hold_seconds) -> list[Alert]:
        """Held drops that no straggler explained within ``hold_seconds(job)`` of the first ``now`` after they were
        held (the worker's timer clock): their versions so far, in order, to publish."""
        out: list[Alert] = []
        for ident, (job, since, versions) in list(self._held.items()):
            if since is None:
                self._held[ident] = (job, now, versions)
            elif now - since >= hold_seconds(job):
                del self._held[ident]
                out.extend(versions)
        return out

    def _straggler(self, alert: Alert) -> None:
        open_ = self._stragglers.setdefault(alert.job, {})
        gpus = alert.evidence.get("cost_gpus")
        if alert.status == AlertStatus.FIRING and isinstance(gpus, int):
            open_[alert.id] = (len(alert.ranks), gpus)
            if self._explained(alert.job):  # the held drops of its job were its cost
                for ident in [i for i, (job, _, _) in self._held.items() if job == alert.job]:
                    versions = self._held.pop(ident)[2]
                    self.absorbed += len(versions)
                    if versions[-1].status != AlertStatus.RESOLVED:  # its later versions are left out too
                        self._absorb(ident, count=False)
        else:
            open_.pop(alert.id, None)
        if not open_:
            del self._stragglers[alert.job]

    def _explained(self, job: str) -> bool:
        return any(2 * ranks >= gpus for ranks, gpus in self._stragglers.get(job, {}).values())

    def _absorb(self, ident: str, *, count: bool = True) -> None:
        if len(self._absorbed) >= self.max_open:
            self._absorbed.pop(next(iter(self._absorbed)))
        self._absorbed[ident] = None
        if count:
            self.absorbed += 1

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
        elif len(alert.nodes) == 1 and ((not alert.job and alert.facts.node_component) or alert.facts.job_component):
            pairs = _components(alert)
            open_ = [self._by_component[p] for p in pairs if p in self._by_component]
            incident = known or (open_[0] if open_ else alert.id)
            for pair in pairs:
                self._by_component.setdefault(pair, incident)
        elif alert.job and facts(alert.type).symptom:
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
                "absorbed": len(self._absorbed), "held": len(self._held)}
