"""One incident per root cause: many nodes' ports erring together are one ``fabric`` incident.

A leaf switch that degrades makes every port cabled to it log errors at once, on every node
under it, across whatever jobs run there. Paging per port (or per node) gives the SRE dozens of
pages and, through the node ledger, drain suggestions for healthy nodes. Here, the node
``link_errors`` alerts of the telemetry tracker (models/telemetry/telemetry_tracker.py, one per node) are
grouped before they leave the engine:

* when a node's ``link_errors`` fires, the nodes whose ports are erring now are counted: each node judged on
  its own clock (a bad port sample within ``window`` seconds, at least two of its agent's sampling periods, of
  its latest sample: agents' clocks may be 30 s apart, so one node's stamp says nothing of another's), the same
  kind of error counter, and under the same switch where the agents' topology events name the switch at the
  other end of each cable; ``min_nodes`` or more is a **fabric incident**: one ``fabric`` alert (job empty,
  ``nodes`` = the nodes, ``evidence.switch`` when known with ``evidence.switch_ports`` the switch
  ports the members' cables end in where the agents' topology says, ``evidence.affected_jobs``
  the jobs running there) instead of the node alerts. Later members join it (the alert is published
  again, same id, with the longer node list);
* fewer: the node's alert waits ``hold`` seconds of the worker's clock (Alertmanager's group_wait) for the other
  nodes' samples, which may come that late (a stalled agent, a slow link to the broker), and is counted again
  then: a fabric incident with it among its members, or its own page. So a node of a fabric fault is never paged
  on its own first. Without a timer (no ``tick`` yet) nothing waits. A node alert published before its incident
  (its hold ran out first) resolves with ``evidence.resolution = "grouped"`` and the incident's id;
* the fabric incident implicates no node in the node ledger (models/oncall/ledger.py): no drain;
* it resolves once every member's node alert has resolved (ports clean again);
* job-level alerts (comm_slowdown, a communication throughput_drop, a hang with no culprit)
  on nodes of an open fabric incident name it as their cause and no node
  (:meth:`FabricIncidents.covering`, used by models/telemetry/telemetry_hub.py).

Bounded: one open incident per switch (or one fleet-wide without topology), members and held
alerts per node of the fleet, ``max_incidents`` open at most.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Callable

from ..alert_types import AlertStatus, AlertType, Severity
from ..alerts import Alert, alert_id
from ..evidence import Horizon, StragglerEvidence
from ..resolution import Resolution
from .causes import SuspectedCause
from .link_evidence import LinkErrorsEvidence
from ..steps.cost import cost

#: The group of nodes without a known switch: the whole fleet.
FLEET = ""


@dataclass(frozen=True, slots=True)
class FabricIncident:
    """An open (or just resolved) fabric incident, as job-level alerts cite it."""

    id: str
    switch: str | None
    nodes: tuple[str, ...]
    counters: tuple[str, ...]
    began_at: float
    ended_at: float | None = None  # node time its last member's ports were clean again; None: open

    def cause(self) -> SuspectedCause:
        where = f"under switch {self.switch}" if self.switch else "across the fabric"
        hint = (f"fabric: {', '.join(self.counters) or 'link errors'} on {len(self.nodes)} nodes at once "
                f"{where} (incident {self.id}); no single node to blame")
        return SuspectedCause(category="fabric", node=None, component=f"switch {self.switch}" if self.switch
                              else "fabric", score=100.0, began_at=self.began_at, hint=hint,
                              evidence=({"signal": "fabric_incident", "incident": self.id, "switch": self.switch,
                                         "nodes": list(self.nodes[:64]), "node_count": len(self.nodes)},))


@dataclass(slots=True)
class _Open:
    key: str
    id: str
    began_at: float
    starts_at: float
    counters: set[str]
    members: dict[str, None]  # node -> None, in the order they joined
    held: dict[str, Alert] = field(default_factory=dict)  # member node -> its node alert, not published
    alert: Alert | None = None
    updates: int = 0


class FabricIncidents:
    """Groups node ``link_errors`` alerts into fabric incidents (see the module doc).

    Hyperparameters:

    * ``min_nodes``: nodes erring at once that make a fabric incident (fewer: node alerts);
    * ``window``: seconds (each node's own clock) within which a node's errors count as "now";
    * ``hold``: seconds (the worker's clock) a node alert waits for other nodes' errors before it is published;
    * ``max_updates``: re-publications of an incident as members join;
    * ``jobs_on``: ``nodes -> jobs running there`` (the hub's placement), for the evidence.
    """

    def __init__(self, tracker, *, min_nodes: int = 4, window: float = 30.0, hold: float = 45.0, max_updates: int = 8,
                 max_incidents: int = 1000, jobs_on: Callable[[tuple[str, ...]], list[str]] | None = None) -> None:
        if min_nodes < 2:
            raise ValueError("fabric incidents need min_nodes >= 2")
        self.tracker = tracker
        self.min_nodes = min_nodes
        self.window = window
        # An agent's samples stalled up to 30 s (a producer's retries, a broker's leader moving) and a tick of the
        # worker's timer: the other nodes' samples of the same moment are in by then.
        self.hold = hold
        self.max_updates = max_updates
        self.max_incidents = max_incidents
        self.jobs_on = jobs_on
        self._open: dict[str, _Open] = {}  # group key -> incident
        self._member_of: dict[str, str] = {}  # node -> group key of its incident
        self._paged: dict[str, Alert] = {}  # node -> its published, firing node alert
        self._recent: dict[str, FabricIncident] = {}  # group key -> the last resolved incident (for late alerts)
        self._waiting: dict[str, tuple[Alert, float]] = {}  # node -> its node alert, not published, and since when
        self._now: float | None = None  # the worker's clock as of the latest tick (None: no timer)

    # -- node alerts in, node or fabric alerts out ----------------------------------------------

    def filter(self, alerts: list[Alert]) -> list[Alert]:
        """The tracker's alerts as they should leave: node ``link_errors`` grouped, the rest as they are."""
        if not alerts:
            return alerts
        out: list[Alert] = []
        for alert in alerts:
            if alert.type != AlertType.LINK_ERRORS or not alert.nodes:
                out.append(alert)
            elif alert.status == AlertStatus.FIRING:
                out.extend(self._firing(alert.nodes[0], alert))
            else:
                out.extend(self._resolved(alert.nodes[0], alert))
        return out

    def _key(self, node: str, alert: Alert) -> str:
        """The switch the node's erring ports are cabled to (FLEET when the topology does not say)."""
        state = self.tracker._nodes.get(node)
        if state is None or not state.nic_switch:
            return FLEET
        devices = [p.device for p in LinkErrorsEvidence.of(alert).ports]
        switches = sorted({state.nic_switch[d] for d in devices if d in state.nic_switch})
        return switches[0] if switches else FLEET

    @staticmethod
    def _kinds(alert: Alert) -> set[str]:
        return LinkErrorsEvidence.of(alert).error_kinds

    def _firing(self, node: str, alert: Alert) -> list[Alert]:
        key = self._key(node, alert)
        inc = self._open.get(key)
        if inc is not None:  # a node of an open incident: it joins, its own alert is held back
            self._waiting.pop(node, None)
            inc.held[node] = alert
            inc.counters.update(self._kinds(alert))
            if node not in inc.members:
                inc.members[node] = None
                self._member_of[node] = key
                return self._publish(inc)
            return []
        out = self._gather(node, key, alert)
        if out is not None:
            return out
        if self._now is not None and self.hold > 0:  # the other nodes' samples may be late: wait for them
            self._waiting[node] = (alert, self._now)
            return []
        self._paged[node] = alert
        return [alert]

    def _gather(self, node: str, key: str, alert: Alert) -> list[Alert] | None:
        """The fabric incident ``node``'s firing ``alert`` makes with the nodes erring now (its alerts out), or None:
        fewer than ``min_nodes``."""
        kinds = self._kinds(alert)
        # the worker's clock: a node whose latest bad sample came long before (its agent silent since) is not "now"
        seen = None if self._now is None else self._now - self.hold - 2 * self.window
        trouble = self.tracker.link_trouble(self.window, seen)
        together = [n for n, moved in trouble.items()
                    if (moved & kinds or not kinds) and (key == FLEET or key in self.tracker.switches(n))
                    and n not in self._member_of]
        if node not in together:
            together.append(node)
        if len(together) < self.min_nodes or len(self._open) >= self.max_incidents:
            return None
        # The incident is as old as the first of its members' alerts (one waiting, or published when its wait ran out).
        earlier = [a for n in together if n != node
                   for a in (self._waiting.get(n, (None,))[0], self._paged.get(n)) if a is not None]
        first = min([alert, *earlier], key=lambda a: a.starts_at)
        began = LinkErrorsEvidence.of(first).began_at
        began = first.starts_at if began is None else float(began)
        at = alert.starts_at
        inc = _Open(key=key, id=alert_id("", "fabric", key or "fleet", round(began, 3)), began_at=began,
                    starts_at=first.starts_at, counters=set(kinds), members=dict.fromkeys(sorted(together)))
        inc.held[node] = alert
        self._waiting.pop(node, None)
        self._open[key] = inc
        out: list[Alert] = []
        for n in inc.members:
            self._member_of[n] = key
            waiting = self._waiting.pop(n, None)
            if waiting is not None:  # never published: the incident speaks for it
                inc.held[n] = waiting[0]
                inc.counters.update(self._kinds(waiting[0]))
            paged = self._paged.pop(n, None)
            if paged is not None:  # published before the incident was seen: it is this incident now
                evidence = {**paged.evidence, "resolution": Resolution.GROUPED, "incident": inc.id}
                out.append(paged.resolved(at=at, evidence=evidence,
                                          summary=f"resolved (grouped into fabric incident {inc.id}): {paged.summary}"))
                inc.held[n] = paged
        return self._publish(inc) + out

    def tick(self, now: float) -> list[Alert]:
        """The node alerts whose wait ran out: counted again (a fabric incident now), else published."""
        self._now = now
        out: list[Alert] = []
        for node, (alert, since) in list(self._waiting.items()):
            if now - since < self.hold or node not in self._waiting:  # (taken by an incident formed just before)
                continue
            key = self._key(node, alert)
            inc = self._open.get(key)
            if inc is not None:
                out.extend(self._firing(node, alert))
                continue
            made = self._gather(node, key, alert)
            if made is not None:
                out.extend(made)
                continue
            del self._waiting[node]
            self._paged[node] = alert
            out.append(alert)
        return out

    def _resolved(self, node: str, alert: Alert) -> list[Alert]:
        key = self._member_of.get(node)
        inc = self._open.get(key) if key is not None else None
        if inc is None:
            waiting = self._waiting.pop(node, None)
            if waiting is not None:  # over before its wait: its page and its end, together
                return [waiting[0], alert]
            paged = self._paged.pop(node, None)
            return [alert] if paged is not None or key is None else []
        inc.held.pop(node, None)
        if inc.held:
            return []
        # every member's ports are clean again: the incident is over
        del self._open[key]
        for n in inc.members:
            self._member_of.pop(n, None)
        self._recent[key] = replace(self._record(inc), ended_at=alert.ends_at or alert.starts_at)
        if len(self._recent) > self.max_incidents:
            self._recent.pop(next(iter(self._recent)))
        last = inc.alert
        evidence = {**last.evidence, "resolution": Resolution.CLEAN}
        return [last.resolved(at=alert.ends_at or alert.starts_at, evidence=evidence,
                              summary=f"resolved: every port clean again ({last.summary})")]

    def _publish(self, inc: _Open) -> list[Alert]:
        if inc.alert is not None and inc.updates >= self.max_updates:
            return []
        nodes = tuple(inc.members)
        jobs = sorted(self.jobs_on(nodes)) if self.jobs_on is not None else []
        where = f"under switch {inc.key}" if inc.key else "across the fabric"
        cabled = []  # the switch's ports the members are cabled to (topology from ibnetdiscover, LLDP or a map)
        if inc.key:
            for n in nodes:
                cabled.extend({"node": n, "device": dev, "switch_port": port}
                              for dev, port in sorted(self.tracker.switch_ports(n, inc.key).items()))
            if cabled:
                where += f", its ports {_port_list(c['switch_port'] for c in cabled)}"
        counters = ", ".join(sorted(inc.counters)) or "link errors"
        shown = ", ".join(nodes[:8]) + (f" and {len(nodes) - 8} more" if len(nodes) > 8 else "")
        evidence: dict[str, Any] = {
            "incident": inc.id, "fabric": inc.key or "fleet", "switch": inc.key or None, "nodes": list(nodes[:256]), "node_count": len(nodes),
            "counters": sorted(inc.counters), "affected_jobs": jobs[:64], "began_at": round(inc.began_at, 3)}
        if cabled:
            evidence["switch_ports"] = cabled[:256]
        alert = Alert(id=inc.id, status="firing", type="fabric", severity="critical", job="", ranks=(),
                      nodes=nodes, starts_at=inc.starts_at, evidence=evidence,
                      summary=(f"fabric: {counters} on {len(nodes)} nodes at once {where} ({shown})"
                               + (f", jobs {', '.join(jobs[:8])}" if jobs else "")
                               + "; one fault of the shared fabric, no node to drain"))
        if inc.alert is not None:
            inc.updates += 1
        inc.alert = alert
        return [alert]

    @staticmethod
    def _record(inc: _Open) -> FabricIncident:
        return FabricIncident(id=inc.id, switch=inc.key or None, nodes=tuple(inc.members),
                              counters=tuple(sorted(inc.counters)), began_at=inc.began_at)

    # -- what job-level alerts cite ------------------------------------------------------------

    def covering(self, nodes: tuple[str, ...], at: float) -> FabricIncident | None:
        """The open fabric incident with the most of ``nodes`` among its members, else one that ended
        within ``2 * window`` before ``at`` (the job's alert may be judged late); None: none."""
        best, overlap = None, 0
        wanted = set(nodes)
        for pool, is_open in ((self._open, True), (self._recent, False)):
            for key, inc in pool.items():
                if not is_open and (inc.ended_at or 0.0) < at - 2 * self.window:
                    continue
                members = inc.members if is_open else inc.nodes
                n = sum(1 for m in members if m in wanted)
                if n > overlap:
                    best, overlap = (self._record(inc) if is_open else inc), n
            if best is not None:
                return best
        return None

    @property
    def open_incidents(self) -> tuple[FabricIncident, ...]:
        return tuple(self._record(inc) for inc in self._open.values())

    def firing(self) -> list[Alert]:
        """The open incidents' alerts (latest version)."""
        return [inc.alert for inc in self._open.values() if inc.alert is not None]

    def close(self, at: float, reason: str) -> list[Alert]:
        """Resolve every open incident at ``at`` (``reason`` in the summary) and forget it."""
        out = [a.resolved(at=at, summary=f"resolved ({reason}): {a.summary}") for a in self.firing()]
        self._open.clear()
        self._member_of.clear()
        self._waiting.clear()  # (their node alerts are the telemetry rule's to close)
        return out


def _port_list(ports) -> str:
    """``["1", "2", "3", "7", "Eth1/9"]`` -> ``"1-3, 7, Eth1/9"`` (numbers as ranges, names as they are)."""
    numbers, names = set(), set()
    for item in ports:
        for p in str(item).split(", "):
            if p.isdigit():
                numbers.add(int(p))
            else:
                names.add(p)
    out, run = [], []
    for n in sorted(numbers):
        if run and n != run[-1] + 1:
            out.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
            run = []
        run.append(n)
    if run:
        out.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
    shown = out + sorted(names)
    return ", ".join(shown[:12]) + (f" and {len(shown) - 12} more" if len(shown) > 12 else "")


# -- node incidents: stragglers on most ranks of one node -----------------------------------------


@dataclass(slots=True)
class _NodeOpen:
    alert: Alert
    members: dict[str, Alert]  # alert id -> a member straggler alert (held back, or resolved as grouped)
    open_ids: set[str]
    updates: int = 0


def _first_cause(alert: Alert) -> tuple:
    causes = alert.evidence.get("suspected_causes") or []
    first = causes[0] if causes and isinstance(causes[0], dict) else {}
    return (first.get("category"), first.get("component"), first.get("node"))


class NodeIncidents:
    """Stragglers on most ranks of one node with one shared cause are one node incident.

    A slow host (CPU saturated, a throttled power shelf, a bad PCIe switch) slows every rank on it:
    the straggler rule finds each of them, and paging per rank tells the SRE eight times what is one
    problem. Here, when firing straggler alerts of one job on one node (counting those already open)
    cover at least ``min_share`` of the job's ranks on that node (and at least ``min_ranks``, or every
    rank of a node with fewer, but never one rank alone), with the
    same kind of first suspected cause (or none), they become one ``straggler`` alert of the node:
    ``evidence.incident_scope = "node"``, the ranks in ``ranks`` and ``evidence.node_ranks``, the
    members' ``job_slowdown`` the largest of theirs. Its members' own alerts are held back (those
    already published resolve with ``evidence.resolution = "grouped"``); it resolves with its last
    member. ``ranks_on``: ``(job, node) -> the job's ranks there`` (the hub's placement).
    """

    def __init__(self, ranks_on: Callable[[str, str], tuple[int, ...]], *, min_share: float = 0.5,
                 min_ranks: int = 3, max_updates: int = 8, max_open: int = 10_000) -> None:
        self.ranks_on = ranks_on
        self.min_share = min_share
        self.min_ranks = min_ranks
        self.max_updates = max_updates
        self.max_open = max_open
        self._open: dict[tuple[str, str, str], _NodeOpen] = {}  # (job, node, cause kind) -> incident
        self._member_of: dict[str, tuple[str, str, str]] = {}  # member alert id -> incident key
        self._paged: dict[str, Alert] = {}  # alert id -> a published, firing straggler alert not grouped

    @staticmethod
    def _cause_kind(alert: Alert) -> str:
        causes = alert.evidence.get("suspected_causes") or []
        first = causes[0] if causes and isinstance(causes[0], dict) else {}
        return str(first.get("category") or "unknown")

    def filter(self, alerts: list[Alert]) -> list[Alert]:
        if not alerts:
            return alerts
        out: list[Alert] = []
        firing: dict[tuple[str, str, str], list[Alert]] = {}
        for alert in alerts:
            if alert.type != AlertType.STRAGGLER or len(alert.ranks) != 1 or not alert.nodes or \
                    StragglerEvidence.of(alert).horizon is Horizon.LONG:
                out.append(alert)
            elif alert.status == AlertStatus.FIRING and alert.id in self._member_of:
                # a new version of a member (its causes enriched later): the incident speaks for it
                key = self._member_of[alert.id]
                inc = self._open.get(key)
                if inc is not None:
                    inc.members[alert.id] = alert
                    # its first cause changed (host samples 10-30 s apart come after the onset): the incident says
                    # so too, a new version under its id, not its first member's cause forever
                    worst = max(inc.members.values(), key=lambda a: StragglerEvidence.of(a).ratio or 0.0)
                    if _first_cause(worst) != _first_cause(inc.alert):
                        out.extend(self._publish(key, inc))
            elif alert.status == AlertStatus.FIRING:
                key = (alert.job, alert.nodes[0], self._cause_kind(alert))
                firing.setdefault(key, []).append(alert)
            else:
                out.extend(self._resolved(alert))
        for key, batch in firing.items():
            out.extend(self._firing(key, batch))
        return out

    def _firing(self, key: tuple[str, str, str], batch: list[Alert]) -> list[Alert]:
        job, node, _ = key
        inc = self._open.get(key)
        if inc is not None:  # more ranks of an open node incident
            grew = {a.ranks[0] for a in batch} - {a.ranks[0] for a in inc.members.values()}
            for alert in batch:
                inc.members[alert.id] = alert
                inc.open_ids.add(alert.id)
                self._member_of[alert.id] = key
            return self._publish(key, inc) if grew else []
        open_here = {i: a for i, a in self._paged.items() if a.job == job and a.nodes[:1] == (node,)
                     and self._cause_kind(a) == key[2]}
        members = {**open_here, **{a.id: a for a in batch}}
        ranks = {a.ranks[0] for a in members.values()}
        on_node = self.ranks_on(job, node) or tuple(ranks)
        # A node of 2 GPUs has fewer ranks than min_ranks: both of them slow is the whole node (found by
        # tests/gen3's slow_node_2gpu); one rank alone is never a node incident.
        need = max(min(self.min_ranks, len(on_node)), 2, self.min_share * len(on_node))
        if len(ranks) < need or len(self._open) >= self.max_open:
            for alert in batch:
                self._paged[alert.id] = alert
            return list(batch)
        first = min(members.values(), key=lambda a: a.starts_at)
        inc = _NodeOpen(alert=first, members=dict(members), open_ids=set(members))
        self._open[key] = inc
        grouped: list[Alert] = []
        for ident in members:
            self._member_of[ident] = key
            paged = self._paged.pop(ident, None)
            if paged is not None:  # published before the node's other ranks were slow too
                grouped.append(paged)
        published = self._publish(key, inc)  # the incident's id is known once it is published
        at = max(a.starts_at for a in batch)
        out = [paged.resolved(at=at, evidence={**paged.evidence, "resolution": Resolution.GROUPED,
                                               "incident": inc.alert.id},
                              summary=f"resolved (grouped into the node incident of {node}): {paged.summary}")
               for paged in grouped]
        return published + out

    def _publish(self, key: tuple[str, str, str], inc: _NodeOpen) -> list[Alert]:
        if inc.updates >= self.max_updates:
            return []
        job, node, kind = key
        members = sorted(inc.members.values(), key=lambda a: (a.ranks[0], a.id))
        ranks = tuple(sorted({a.ranks[0] for a in members}))
        first = min(members, key=lambda a: a.starts_at)
        read = {a.id: StragglerEvidence.of(a) for a in members}  # the member alerts' evidence, typed
        worst = max(members, key=lambda a: read[a.id].ratio or 0.0)
        w = read[worst.id]
        slowdowns = [e.job_slowdown for e in read.values() if e.job_slowdown is not None]
        on_node = self.ranks_on(job, node)
        evidence = dict(worst.evidence)
        evidence.update({"incident_scope": "node", "node": node, "node_ranks": list(ranks),
                         "ranks_on_node": len(on_node) if on_node else None,
                         "rank_ratios": {str(a.ranks[0]): read[a.id].ratio for a in members},
                         "member_alerts": len(members),
                         "first_step": min(read[a.id].first_step or 0 for a in members)})
        # The node's cost: the job would go at its other ranks' pace without the node's excess (every
        # rank of it alike slow: without any one of them the job is no faster, so theirs says ~1x).
        step_times = [e.cost_step_time for e in read.values()]
        if None not in step_times and w.peer_median is not None and slowdowns:
            node_cost = cost(max(step_times), max(float(e.rank_median or 0.0) for e in read.values()) - w.peer_median,
                             w.cost_gpus or 0)
            if node_cost is not None:
                evidence.update(node_cost.to_evidence())
        hint = evidence.get("cause_hint") or "unknown"
        alert = Alert(id=alert_id(job, "straggler", "node", node, kind, round(first.starts_at, 3)),
                      status="firing", type="straggler",
                      severity="critical" if any(a.severity == Severity.CRITICAL for a in members) else "warning",
                      job=job, ranks=ranks, nodes=(node,), starts_at=first.starts_at, evidence=evidence,
                      summary=(f"straggler: node {node}: {len(ranks)} of its "
                               f"{len(on_node) if on_node else len(ranks)} ranks of job {job} (ranks "
                               f"{_span(ranks)}) are up to {w.ratio or 0:.2f}x slower than their "
                               f"peers; one node incident; suspected cause: {hint}"))
        if inc.alert.type == AlertType.STRAGGLER and inc.alert.evidence.get("incident_scope") == "node":
            inc.updates += 1
        inc.alert = alert
        return [alert]

    def firing(self) -> list[Alert]:
        """The node incidents now firing (their latest published version)."""
        return [inc.alert for inc in self._open.values() if inc.alert.evidence.get("incident_scope") == "node"]

    def close(self, at: float, reason: str) -> list[Alert]:
        """Resolve every open node incident and forget it (its members' alerts stay with the straggler rule)."""
        out = [a.resolved(at=at, summary=f"resolved ({reason}): {a.summary}") for a in self.firing()]
        self._open.clear()
        self._member_of.clear()
        return out

    def _resolved(self, alert: Alert) -> list[Alert]:
        key = self._member_of.get(alert.id)
        inc = self._open.get(key) if key is not None else None
        if inc is None:
            self._paged.pop(alert.id, None)
            return [alert]
        inc.open_ids.discard(alert.id)
        if inc.open_ids:
            return []
        del self._open[key]
        for ident in inc.members:
            self._member_of.pop(ident, None)
        last = inc.alert
        # The last member's reason is the incident's (back in line, or the job ended or was forgotten).
        # (A member's resolution is always set where it resolves: models/resolution.py's with_resolution.)
        reason = Resolution.of(alert.evidence.get("resolution"), Resolution.CLEAN)
        if alert.summary.startswith("resolved ("):
            why = alert.summary[len("resolved ("):].split(")", 1)[0]
            return [last.resolved(at=alert.ends_at or alert.starts_at,
                                  evidence={**last.evidence, "resolution": reason},
                                  summary=f"resolved ({why}): {last.summary}")]
        return [last.resolved(at=alert.ends_at or alert.starts_at,
                              evidence={**last.evidence, "resolution": reason},
                              summary=f"resolved: every rank of {key[1]} back in line ({last.summary})")]


def _span(ranks: tuple[int, ...]) -> str:
    if len(ranks) > 2 and ranks[-1] - ranks[0] == len(ranks) - 1:
        return f"{ranks[0]}-{ranks[-1]}"
    return ", ".join(map(str, ranks[:16])) + (" ..." if len(ranks) > 16 else "")


# -- intermittent faults: one incident while the pattern holds --------------------------------------


@dataclass(frozen=True, slots=True)
class EpisodesEvidence:
    """What ``IntermittentIncidents`` adds to a re-firing straggler's evidence (``evidence.episodes``,
    ``evidence.intermittent``): the rule's own evidence stays as it wrote it."""

    episodes: int  # this episode's number in the incident (2, 3, ...)

    def to_dict(self) -> dict[str, Any]:
        return {"episodes": self.episodes, "intermittent": True}

    @classmethod
    def from_dict(cls, ev: dict[str, Any]) -> "EpisodesEvidence | None":
        """The record of an alert's episodes; None when it is a rank's first (or only) episode."""
        if ev.get("intermittent") is not True:
            return None
        return cls(episodes=int(ev["episodes"]))


@dataclass(slots=True)
class _Episodes:
    id: str  # the incident's id: its first episode's
    starts_at: float
    ends_at: float | None  # the latest episode's end (None: one is firing)
    episodes: int
    end_step: int | None = None  # the step the latest episode resolved at


class IntermittentIncidents:
    """A rank that straggles again within ``hold_steps`` of its last episode's end is the same incident.

    A flaky GPU (slow one step in a few) makes the straggler rule fire, resolve "back in line",
    fire again a few steps later: each episode a new alert id, a new page. Here a per-rank
    straggler that fires again for the same job, group and rank with its first slow step within
    ``hold_steps`` of the step the previous episode resolved at (``hold_seconds`` of event time
    when the steps are not known) is published under the first episode's id and start, with
    ``evidence.episodes`` (2, 3, ...) and ``evidence.intermittent: true``; its resolution too. An
    episode that ended because the job ended or was forgotten (``resolved (...)``) ends the incident.
    Bounded: ``max_ranks`` (job, group, rank) entries, the oldest forgotten first.
    """

    def __init__(self, *, hold_steps: int = 25, hold_seconds: float = 60.0, max_ranks: int = 100_000) -> None:
        self.hold_steps = hold_steps
        self.hold_seconds = hold_seconds
        self.max_ranks = max_ranks
        self._last: dict[tuple[str, str, int], _Episodes] = {}
        self._alias: dict[str, tuple[str, str, int]] = {}  # episode alert id -> its (job, group, rank)

    def filter(self, alerts: list[Alert]) -> list[Alert]:
        if not alerts:
            return alerts
        return [self._one(a, ev) if a.type == AlertType.STRAGGLER and len(a.ranks) == 1 and
                (ev := StragglerEvidence.of(a)).short and not ev.node_incident else a for a in alerts]

    def _one(self, alert: Alert, ev: StragglerEvidence) -> Alert:
        key = (alert.job, ev.group or "", alert.ranks[0])
        ep = self._last.get(key)
        if alert.id not in self._alias:
            if alert.status != AlertStatus.FIRING:
                return alert
            if ep is None or ep.ends_at is None or not self._soon(ep, alert, ev):
                ep = _Episodes(id=alert.id, starts_at=alert.starts_at, ends_at=None, episodes=1)
                self._remember(key, ep)
                self._alias[alert.id] = key
                return alert
            ep.episodes += 1  # the pattern holds: the same incident
            ep.ends_at = None
            self._alias[alert.id] = key
        elif ep is None:
            self._alias.pop(alert.id, None)
            return alert
        if alert.status != AlertStatus.FIRING:
            self._alias.pop(alert.id, None)
            ep.ends_at = alert.ends_at or alert.starts_at
            ep.end_step = ev.resolved_step
            if alert.summary.startswith("resolved ("):  # the job ended or was forgotten: so is the incident
                self._last.pop(key, None)
        if ep.episodes == 1:
            return alert
        evidence = {**alert.evidence, **EpisodesEvidence(ep.episodes).to_dict()}
        return replace(alert, id=ep.id, starts_at=ep.starts_at, evidence=evidence,
                       summary=f"{alert.summary}; intermittent: episode {ep.episodes}, each within "
                               f"{self.hold_steps} steps of the last")

    def _soon(self, ep: _Episodes, alert: Alert, ev: StragglerEvidence) -> bool:
        if ep.end_step is not None and ev.first_step is not None:
            return ev.first_step - ep.end_step <= self.hold_steps
        return alert.starts_at - (ep.ends_at or 0.0) <= self.hold_seconds

    def _remember(self, key: tuple[str, str, int], ep: _Episodes) -> None:
        self._last.pop(key, None)
        self._last[key] = ep
        while len(self._last) > self.max_ranks:
            self._last.pop(next(iter(self._last)))
        while len(self._alias) > self.max_ranks:
            self._alias.pop(next(iter(self._alias)))

    def forget(self, ids: set[str]) -> None:
        """Forget the incidents of these ids (their first episodes' ids): a rank's next episode starts anew."""
        for key in [k for k, ep in self._last.items() if ep.id in ids]:
            del self._last[key]
