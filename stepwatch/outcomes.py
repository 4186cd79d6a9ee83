"""Automatic outcomes: verdicts the alerts topic's own history makes unambiguous (``automatic: true``).

* ``confirmed``: a straggler or hang whose named node later shows a hardware fault: an alert of a
  hardware-fault type, on one of the nodes the straggler or hang named, starting at or after it and within
  ``confirm_window`` seconds, whose failure class is a hardware fault. Which types and classes those are is
  derived, not listed: a class is a hardware fault when its action repairs a part (reset, replace, drain a
  device; check a link) or it keeps jobs off a device (models/oncall/actions.py ``FAILURE_CLASSES``), and the fault types are the types of
  the registered node-level rules (models/registry.py) that can classify an alert so, less the derived ones (node_suspect
  is made from the stragglers themselves) and the two judged here.
* ``transient``: an alert that resolved by itself (``evidence.resolution`` = ``recovered``) within
  ``transient_seconds`` of its start and never fired again under the same id. Shown apart; never false.

A person's verdict always wins over these (stepwatch/feedback.py ``latest``). Pure: tested without a broker.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache

from stepwatch.models.alert_types import DERIVED_TYPES, METERED_TYPES
from stepwatch.models.resolution import Resolution
from stepwatch.models.wire.feedback import Feedback, Verdict

#: The alert types automatic confirmation judges: those that page (models/alert_types.py ``FACTS``).
JUDGED_TYPES = frozenset(METERED_TYPES)
#: Actions that repair a part: a class with one of these is a hardware fault.
REPAIR_KINDS = frozenset({"reset_gpu", "replace_gpu", "drain_node", "check_link"})
#: A repair-kind class that is no broken part: congestion means a busy fabric, and says nothing of the node.
NOT_FAULTS = frozenset({"network_congestion"})
#: Who automatic verdicts are ``by``.
BY = "stepwatch"


@dataclass(frozen=True, slots=True)
class OutcomeSettings:
    #: An alert that resolved by itself within this many seconds of its start, and never recurred, is transient.
    transient_seconds: float = 300.0
    #: A hardware fault on a named node this many seconds after the alert's start, at most, confirms it.
    confirm_window: float = 6 * 3600.0


def hardware_classes() -> frozenset[str]:
    """The failure classes that mean a hardware fault (device or platform scope, a repair action)."""
    from stepwatch.models.oncall.actions import FAILURE_CLASSES

    return frozenset(name for name, fc in FAILURE_CLASSES.items()
                     if fc.scope in ("device", "platform") and name not in NOT_FAULTS
                     and (fc.kind in REPAIR_KINDS or (fc.exclude and fc.scope == "device")))


@cache
def fault_types() -> frozenset[str]:
    """Alert types whose alerts can say "this node's hardware failed": types of the registered node-level rules
    (their alerts are about nodes, not jobs) that declare a hardware-fault class, less the derived types and the
    judged ones."""
    from stepwatch.models.registry import NODE_RULES

    hardware = hardware_classes()
    return frozenset(str(t) for spec in (r.spec for r in NODE_RULES) if set(spec.failure_classes) & hardware
                     for t in spec.alert_types if t not in DERIVED_TYPES and t not in JUDGED_TYPES)


@dataclass(slots=True)
class _Seen:
    type: str
    job: str
    nodes: frozenset[str]
    starts_at: float
    resolved_at: float | None = None
    recovered: bool = False
    fired_again: bool = False
    failure_class: str = ""


class OutcomeTracker:
    """Reads alerts one at a time (in topic order; a report reads each once), then ``outcomes()``. Keeps a few
    fields per alert id, not the records."""

    def __init__(self, settings: OutcomeSettings = OutcomeSettings()) -> None:
        self.settings = settings
        self.seen: dict[str, _Seen] = {}

    def add(self, alert: dict) -> None:
        ident, status = alert.get("id"), alert.get("status")
        if not isinstance(ident, str) or not ident:
            return
        ev = alert.get("evidence") if isinstance(alert.get("evidence"), dict) else {}
        s = self.seen.get(ident)
        if s is None:
            starts = _num(alert.get("starts_at"))
            if status != "firing" or starts is None:
                return  # a resolved whose firing was not read: nothing to judge
            nodes = alert.get("nodes") if isinstance(alert.get("nodes"), list) else []
            self.seen[ident] = _Seen(type=str(alert.get("type") or ""), job=str(alert.get("job") or ""),
                                     nodes=frozenset(str(n) for n in nodes if n), starts_at=starts,
                                     failure_class=str(ev.get("failure_class") or ""))
            return
        if status == "resolved":
            if s.resolved_at is None:
                s.resolved_at = _num(alert.get("ends_at"))
                s.recovered = ev.get("resolution") == Resolution.RECOVERED
        elif status == "firing" and s.resolved_at is not None:
            s.fired_again = True  # the same problem again after it had gone: not transient

    def outcomes(self) -> dict[str, Feedback]:
        """Alert id -> its automatic verdict, for the alerts read that have one."""
        settings, seen = self.settings, self.seen
        hardware, faults = hardware_classes(), fault_types()
        faults_on: dict[str, list[float]] = {}  # node -> start times of hardware faults on it
        for s in seen.values():
            if s.type in faults and s.failure_class in hardware:
                for node in s.nodes:
                    faults_on.setdefault(node, []).append(s.starts_at)
        out: dict[str, Feedback] = {}
        for ident, s in seen.items():
            if s.type in JUDGED_TYPES:
                later = [t for node in s.nodes for t in faults_on.get(node, ())
                         if s.starts_at <= t <= s.starts_at + settings.confirm_window]
                if later:
                    out[ident] = Feedback(alert_id=ident, verdict=Verdict.CONFIRMED, by=BY, at=min(later),
                                          automatic=True, note="a hardware fault on a node it named followed",
                                          type=s.type, job=s.job or None)
                    continue
            if (s.recovered and s.resolved_at is not None and not s.fired_again
                    and s.resolved_at - s.starts_at <= settings.transient_seconds):
                out[ident] = Feedback(alert_id=ident, verdict=Verdict.TRANSIENT, by=BY, at=s.resolved_at,
                                      automatic=True, note="resolved by itself within minutes and never recurred",
                                      type=s.type or None, job=s.job or None)
        return out


def automatic_outcomes(alerts: Iterable[dict], settings: OutcomeSettings = OutcomeSettings()) -> dict[str, Feedback]:
    """Alert id -> its automatic verdict, for the alerts (alerts-topic records, in topic order) that have one."""
    tracker = OutcomeTracker(settings)
    for alert in alerts:
        tracker.add(alert)
    return tracker.outcomes()


def _num(value) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None
