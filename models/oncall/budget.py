"""The drain budget: stepwatch never asks for more drains than a human agreed to (issue 42).

A bad driver rollout, a power event on a row of racks or a wrong threshold makes many nodes look
faulty at once; a drainer that follows every alert then takes the fleet down faster than any fault.
Every alert leaving the engine that asks to keep jobs off nodes (a firing ``node_suspect`` or
critical device alert whose ``evidence.action.kind`` drains: models/oncall/action_hooks.py
``DRAINING_KINDS``) passes :meth:`DrainBudget.gate` first:

* a node whose open **fabric incident** (models/telemetry/incidents.py: its switch neighbours failing
  together) covers it is never drained: the action becomes ``check_link`` with no node to exclude
  and ``evidence.action_held = {"budget": "fabric", ...}``;
* a node already counted (another alert asked for it and was let through) counts once: allowed;
* else its new nodes must fit three budgets: ``per_hour`` drains fleet-wide in the last hour,
  ``per_job_hour`` drains per job (the alert's job, or the jobs on the node) in the last hour, and
  ``at_once``: nodes drained now (asked for by a firing alert) at most ``fleet_percent`` % of the
  nodes seen (at least one node);
* beyond a budget the alert is **held**: ``evidence.action.kind = "hold_for_human"`` (its nodes stay
  in ``exclude_nodes``: a restart should still avoid them), ``evidence.action_held`` names the budget
  with its limit and use, and one ``action_budget`` alert (job empty, scope ``fleet``, critical)
  lists the held alert ids and nodes. A held alert stays held, whatever its later versions, until a
  human releases it (:meth:`release`, ``stepwatch actions release ALERT_ID``) or it resolves.

Drains are counted when stepwatch asks for them, executed or not: dry run shows what execution
would do. Pure and bounded: the drain log keeps the last hour, the held and decided ids are capped.

One budget fleet-wide: the drains this worker lets through go out as ledger records (``outbox``, written to the
drain-ledger topic: models/oncall/drain_ledger.py, which states the bound in a race), and the other workers'
records read back are counted here too (``observe``).

The ``action_budget`` alert is published when it opens, resolves or a held drain leaves it; drains held within
``COALESCE_SECONDS`` of its last publication join it at the first tick after (counted in ``updates_held``):
a rollout holding 20 nodes over a minute is two pages' worth of updates, not twenty.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import re
import socket
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from ..alert_types import AlertStatus, AlertType, Scope, Severity, facts
from ..alerts import Alert, alert_id
from .action_hooks import DRAINING_KINDS
from .drain_ledger import DrainRecord

HOUR = 3600.0
#: An alert id as stepwatch makes them (``alert_id``: hex), or anything as plain: refused otherwise.
SAFE_ID = re.compile(r"[A-Za-z0-9._:-]{1,128}")
#: The action kind of a held alert (models/oncall/actions.py ``ACTION_KINDS``).
HOLD = "hold_for_human"
#: Held drains added within this many seconds of the action_budget alert's last publication wait for the next.
COALESCE_SECONDS = 30.0
#: Bounds on what the ledger brings in (other workers' drains) and on what waits to go out.
MAX_LEDGER = 10_000


class Budget(StrEnum):
    """Which limit held an alert (``evidence.action_held.budget``)."""

    PER_HOUR = "per_hour"
    PER_JOB_HOUR = "per_job_hour"
    AT_ONCE = "at_once"
    FABRIC = "fabric"  # not a number: a shared switch's nodes are never drained


@dataclass(frozen=True, slots=True)
class Limits:
    per_hour: int = 2
    per_job_hour: int = 1
    fleet_percent: float = 5.0

    def at_once(self, seen: int) -> int:
        """Nodes drained at once allowed for ``seen`` nodes: the share, at least one node."""
        return max(1, math.floor(self.fleet_percent / 100.0 * seen + 1e-9))


@dataclass(frozen=True, slots=True)
class Held:
    alert_id: str
    alert_type: str
    nodes: tuple[str, ...]
    budget: Budget
    held_at: float


def asks_drain(alert: Alert) -> bool:
    """Whether a firing alert asks to drain nodes (what the action hooks would render drain commands for)."""
    if alert.status != AlertStatus.FIRING:
        return False
    if not facts(alert.type).always_acts and not (alert.severity == Severity.CRITICAL
                                                     and alert.scope == Scope.DEVICE):
        return False
    action = alert.evidence.get("action")
    return isinstance(action, dict) and action.get("kind") in DRAINING_KINDS and bool(action.get("exclude_nodes"))


def _jobs_of(alert: Alert) -> tuple[str, ...]:
    if alert.job:
        return (alert.job,)
    jobs = alert.evidence.get("jobs") or ()
    return tuple(dict.fromkeys(str(j["job"]) for j in jobs if isinstance(j, dict) and j.get("job")))


class DrainBudget:
    """See the module doc. ``covered(nodes, at)``: the open fabric incident covering any of ``nodes`` (None:
    none); ``seen_nodes()``: how many nodes stepwatch has seen (agents and ranks)."""

    ALERT_ID = alert_id("", "action_budget", "fleet")

    def __init__(self, limits: Limits = Limits(), *, covered: Callable[[tuple[str, ...], float], Any] | None = None,
                 seen_nodes: Callable[[], int] | None = None, max_ids: int = 10_000, worker: str = "") -> None:
        self.limits = limits
        #: This worker's name in the drain ledger (its own records read back are not counted twice).
        self.worker = worker or f"{socket.gethostname()}-{os.getpid()}-{os.urandom(4).hex()}"
        #: Drain records to write to the ledger topic (streams/drain_ledger.py takes them; bounded: oldest dropped).
        self.outbox: deque[DrainRecord] = deque(maxlen=MAX_LEDGER)
        self._peers: OrderedDict[str, str] = OrderedDict()  # node drained now by another worker -> that worker
        self.covered = covered
        self.seen_nodes = seen_nodes
        self.max_ids = max_ids
        self.clock = 0.0
        self._log: deque[tuple[float, str, tuple[str, ...]]] = deque()  # (ts, node, jobs) drains in the last hour
        self._asked: dict[str, set[str]] = {}  # node drained now -> firing alert ids that asked for it
        self._allowed: OrderedDict[str, tuple[str, ...]] = OrderedDict()  # alert id -> nodes let through
        self.held: OrderedDict[str, Held] = OrderedDict()
        self._named: OrderedDict[str, None] = OrderedDict()  # nodes named by alerts (seen without an agent)
        self._released: list[Alert] = []  # released alerts, published at the next tick
        self._latest: dict[str, Alert] = {}  # held id -> its latest version (to publish it again when released)
        self.alert: Alert | None = None  # the open action_budget alert
        #: Drains let through and alerts held, since start (``stepwatch_actions_total``-style counters).
        self.drains = 0
        self.holds = 0
        self.peer_drains = 0  # other workers' drains read back from the ledger
        self._shown_at = -math.inf  # clock of the action_budget alert's last publication
        self._pending = False  # held drains added since, waiting for the coalescing window
        self.updates_held = 0

    # -- the gate ---------------------------------------------------------------------------------

    def gate(self, alerts: list[Alert]) -> list[Alert]:
        """``alerts`` as they may leave: drains within the budget, the rest held; then the ``action_budget``
        alert when the held set changed."""
        before = tuple(self.held)
        out = [self._one(a) for a in alerts]
        if tuple(self.held) != before:
            if self.alert is not None and self.held and set(before) <= set(self.held) \
                    and self.clock - self._shown_at < COALESCE_SECONDS:
                self._pending = True  # additions only, soon after the last page: they join it at a later tick
                self.updates_held += 1
            else:
                out.extend(self._budget_alert())
        return out

    def _one(self, alert: Alert) -> Alert:
        for node in alert.nodes[:64]:
            self._name(node)
        self.clock = max(self.clock, alert.starts_at)
        if alert.status == AlertStatus.RESOLVED:
            self._forget(alert.id)
            return alert
        if not asks_drain(alert):
            return alert
        action = alert.evidence["action"]
        nodes = tuple(dict.fromkeys(str(n) for n in action["exclude_nodes"]))
        if self.covered is not None:
            incident = self.covered(nodes, alert.starts_at)
            if incident is not None:
                return self._fabric(alert, getattr(incident, "id", ""))
        if alert.id in self.held:
            self._latest[alert.id] = alert
            return self._hold(alert, self.held[alert.id].budget, again=True)
        # (a node another worker drained now is counted already: it needs no room here either)
        fresh = tuple(n for n in nodes if n not in self._asked and n not in self._peers)
        if fresh:  # new nodes need room, even for an alert let through before (a later version naming more)
            over = self._over(fresh, _jobs_of(alert))
            if over is not None:
                return self._hold(alert, over)
        self._allow(alert.id, nodes, _jobs_of(alert), fresh)
        return alert

    def _over(self, fresh: tuple[str, ...], jobs: tuple[str, ...]) -> Budget | None:
        """The first budget the drains of ``fresh`` would break (None: they fit)."""
        self._prune()
        if len(self._log) + len(fresh) > self.limits.per_hour:  # (the others' drains read back included)
            return Budget.PER_HOUR
        for job in jobs:
            if sum(1 for _, _, js in self._log if job in js) + len(fresh) > self.limits.per_job_hour:
                return Budget.PER_JOB_HOUR
        if self._drained_now() + len(fresh) > self.limits.at_once(self._seen()):
            return Budget.AT_ONCE
        return None

    def _allow(self, ident: str, nodes: tuple[str, ...], jobs: tuple[str, ...], fresh: tuple[str, ...]) -> None:
        for node in nodes:
            self._asked.setdefault(node, set()).add(ident)
        for node in fresh:
            self._log.append((self.clock, node, jobs))
            self.outbox.append(DrainRecord(node=node, worker=self.worker, at=self.clock, jobs=jobs[:64]))
            self.drains += 1
        self._allowed[ident] = nodes
        self._allowed.move_to_end(ident)
        while len(self._allowed) > self.max_ids:
            old, old_nodes = self._allowed.popitem(last=False)
            self._unask(old, old_nodes)

    def _hold(self, alert: Alert, budget: Budget, *, again: bool = False) -> Alert:
        action = alert.evidence["action"]
        if not again:
            self.held[alert.id] = Held(alert.id, str(alert.type), tuple(action["exclude_nodes"]), budget, self.clock)
            self._latest[alert.id] = alert
            self.holds += 1
            while len(self.held) > self.max_ids:
                old, _ = self.held.popitem(last=False)
                self._latest.pop(old, None)
        limit, used = self._figures(budget, alert)
        held = {"budget": budget.value, "limit": limit, "used": used, "kind": action["kind"],
                "release": f"stepwatch actions release {alert.id}"}
        ev = {**alert.evidence, "action": {**action, "kind": HOLD}, "action_held": held}
        sentence = (f"Held for a human: the drain budget ({budget.value}: {used} of {limit}) is spent; "
                    f"check whether many nodes fail for one reason (a rollout, power, a switch) before draining; "
                    f"`stepwatch actions release {alert.id}` lets this drain through. "
                    f"{alert.recommended_action}")
        return dataclasses.replace(alert, evidence=ev, recommended_action=sentence)

    def _fabric(self, alert: Alert, incident: str) -> Alert:
        action = alert.evidence["action"]
        ev = {**alert.evidence, "action": {**action, "kind": "check_link", "exclude_nodes": []},
              "action_held": {"budget": Budget.FABRIC.value, "kind": action["kind"], "incident": incident}}
        sentence = (f"Not drained: the node's switch neighbours fail together (fabric incident {incident}); "
                    f"check the switch. {alert.recommended_action}")
        return dataclasses.replace(alert, evidence=ev, recommended_action=sentence)

    def _figures(self, budget: Budget, alert: Alert) -> tuple[int, int]:
        if budget is Budget.PER_HOUR:
            return self.limits.per_hour, len(self._log)
        if budget is Budget.PER_JOB_HOUR:
            jobs = _jobs_of(alert)
            return self.limits.per_job_hour, max((sum(1 for _, _, js in self._log if j in js) for j in jobs),
                                                 default=0)
        return self.limits.at_once(self._seen()), self._drained_now()

    # -- release, resolve, time -----------------------------------------------------------------

    def release(self, ident: str, *, by: str = "", at: float | None = None) -> bool:
        """A human lets held alert ``ident`` drain (counted, whatever the budget); its latest version is published
        again at the next tick with the drain. False: no such held alert."""
        held = self.held.pop(ident, None)
        if held is None:
            return False
        alert = self._latest.pop(ident)
        self.clock = max(self.clock, at or 0.0)
        fresh = tuple(n for n in held.nodes if n not in self._asked)
        self._allow(ident, held.nodes, _jobs_of(alert), fresh)
        ev = {**alert.evidence, "action_released": {"budget": held.budget.value, "by": by[:128]}}
        self._released.append(dataclasses.replace(alert, evidence=ev))
        return True

    def tick(self, now: float) -> list[Alert]:
        self.clock = max(self.clock, now)
        self._prune()
        if not self._released:
            if self._pending and self.clock - self._shown_at >= COALESCE_SECONDS:
                return self._budget_alert()
            return []
        out, self._released = self._released, []
        return [*out, *self._budget_alert()]

    # -- the ledger: the other workers' drains ---------------------------------------------------------

    def observe(self, record: DrainRecord) -> bool:
        """Count another worker's drain read back from the ledger (this worker's own are counted already).
        False: nothing new (its own, or a record already counted)."""
        if record.worker == self.worker:
            return False
        if not record.open:  # (only the worker that drained it frees it)
            return self._peers.get(record.node) == record.worker and self._peers.pop(record.node) is not None
        new = not any(n == record.node and t == record.at for t, n, _ in self._log)
        if new and record.at >= self.clock - HOUR:
            self._log.append((record.at, record.node, record.jobs))
            if len(self._log) > 1 and self._log[-2][0] > record.at:  # out of order: the prune reads from the left
                self._log = deque(sorted(self._log, key=lambda e: e[0]))
            while len(self._log) > MAX_LEDGER:
                self._log.popleft()
            self.peer_drains += 1
        known = self._peers.get(record.node) == record.worker
        self._peers[record.node] = record.worker
        self._peers.move_to_end(record.node)
        while len(self._peers) > MAX_LEDGER:
            self._peers.popitem(last=False)
        return new or not known

    def _drained_now(self) -> int:
        """Nodes drained now fleet-wide as this worker knows: asked for here, or by another worker."""
        return len(self._asked) + sum(1 for n in self._peers if n not in self._asked)

    def _forget(self, ident: str) -> None:
        nodes = self._allowed.pop(ident, None)
        if nodes is not None:
            self._unask(ident, nodes)
        self.held.pop(ident, None)
        self._latest.pop(ident, None)

    def _unask(self, ident: str, nodes: tuple[str, ...]) -> None:
        for node in nodes:
            asked = self._asked.get(node)
            if asked is not None:
                asked.discard(ident)
                if not asked:
                    del self._asked[node]  # no firing alert asks for it: it no longer counts at once
                    self.outbox.append(DrainRecord(node=node, worker=self.worker, at=self.clock, open=False))

    def _prune(self) -> None:
        while self._log and self._log[0][0] < self.clock - HOUR:
            self._log.popleft()

    def _name(self, node: str) -> None:
        self._named[node] = None
        self._named.move_to_end(node)
        while len(self._named) > 100_000:
            self._named.popitem(last=False)

    def _seen(self) -> int:
        return max(len(self._named), self.seen_nodes() if self.seen_nodes is not None else 0)

    # -- the action_budget alert ----------------------------------------------------------------

    def _budget_alert(self) -> list[Alert]:
        self._pending, self._shown_at = False, self.clock
        if not self.held:
            if self.alert is None:
                return []
            done, self.alert = self.alert, None
            return [done.resolved(at=self.clock, summary=f"resolved: no drain held ({done.summary})")]
        held = list(self.held.values())
        nodes = sorted({n for h in held for n in h.nodes})
        ev = {"held": [{"alert_id": h.alert_id, "type": h.alert_type, "nodes": list(h.nodes), "budget": h.budget.value,
                        "held_at": h.held_at} for h in held[:200]],
              "held_count": len(held), "nodes": nodes[:200],
              "limits": dataclasses.asdict(self.limits), "drains_last_hour": len(self._log),
              "drained_now": self._drained_now(), "nodes_seen": self._seen(), "failure_class": "action_budget",
              "updates_held": self.updates_held,
              "onset_ts": min(h.held_at for h in held),
              "action": {"kind": HOLD, "nodes": nodes[:200], "retryable": False, "exclude_nodes": []}}
        summary = (f"action_budget: {len(held)} drain(s) held for a human on {len(nodes)} node(s) "
                   f"({', '.join(nodes[:8])}{', ...' if len(nodes) > 8 else ''}): more nodes look faulty than the "
                   f"drain budget allows")
        sentence = ("Many nodes asked to be drained at once: look for one cause (a driver or firmware rollout, "
                    "power, a switch) first; release single drains with `stepwatch actions release ALERT_ID`.")
        starts = self.alert.starts_at if self.alert is not None else self.clock
        self.alert = Alert(id=self.ALERT_ID, status="firing", type=AlertType.ACTION_BUDGET, severity="critical",
                           job="", ranks=(), nodes=tuple(nodes[:200]), starts_at=starts, summary=summary,
                           evidence=ev, scope=Scope.FLEET, recommended_action=sentence)
        return [self.alert]

    def close(self, at: float) -> list[Alert]:
        """Forget the held alerts (they stay held: nothing drains them) and resolve the ``action_budget`` alert."""
        self.held.clear()
        self._latest.clear()
        self.clock = max(self.clock, at)
        return self._budget_alert()


# -- a release, as ``stepwatch actions release`` writes it to the releases topic (keyed by alert id) -----------

def release_record(ident: str, *, by: str = "") -> bytes:
    """The releases topic's value for a human's release of held alert ``ident`` (``ValueError``: not an alert id)."""
    if SAFE_ID.fullmatch(ident or "") is None:
        raise ValueError(f"not an alert id: {ident[:64]!r} (letters, digits and ._:- only)")
    return json.dumps({"v": 1, "kind": "release", "alert_id": ident, "by": str(by)[:128]}).encode()


def parse_release(value: bytes | None) -> tuple[str, str]:
    """``(alert id, by)`` of a releases topic value; ``ValueError`` saying why for anything else."""
    try:
        record = json.loads(value or b"")
    except (ValueError, UnicodeDecodeError) as exc:
        raise ValueError(f"release: not JSON ({exc})") from None
    if not isinstance(record, dict) or record.get("kind") != "release":
        raise ValueError("release: expected {\"kind\": \"release\", \"alert_id\": ...}")
    ident = record.get("alert_id")
    if not isinstance(ident, str) or SAFE_ID.fullmatch(ident) is None:
        raise ValueError("release: alert_id missing or not an alert id")
    return ident, str(record.get("by") or "")[:128]
