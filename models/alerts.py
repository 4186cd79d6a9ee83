"""The alert record: stepwatch's output, one JSON object per message on the alerts topic.

An alert keeps one ``id`` from firing to resolved (a fingerprint of the job, the type and
what identifies the problem), so consumers and Alertmanager can deduplicate. ``labels``
stay low-cardinality (no rank numbers); per-rank detail lives in ``annotations`` and
``evidence``.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from typing import Any

import orjson

from .alert_types import AlertStatus, AlertType, Scope, Severity, TypeFacts, facts

WIRE_VERSION = 1
#: ``annotations.runbook_url`` is ``<base>/<type>.md``; the default is the runbooks' place in this repository
#: (docs/runbooks/), which a deployment points at where its copy is served (``STEPWATCH_RUNBOOK_BASE_URL``).
DEFAULT_RUNBOOK_BASE_URL = "docs/runbooks"


def runbook_url(alert_type: str) -> str:
    # Read at each call (a dict lookup), so a worker picks the variable up without a settings section.
    base = os.environ.get("STEPWATCH_RUNBOOK_BASE_URL", "").strip() or DEFAULT_RUNBOOK_BASE_URL
    return f"{base.rstrip('/')}/{alert_type}.md"


def alert_id(job: str, alert_type: str, *parts: object) -> str:
    """Stable fingerprint of one problem: the same inputs always give the same id."""
    text = "\x1f".join([job, alert_type, *(str(p) for p in parts)])
    return hashlib.sha1(text.encode()).hexdigest()[:20]


class Evidence(dict):
    """An alert's evidence, read-only: the alert is frozen, so a change is a new alert with a new mapping
    (``dataclasses.replace(alert, evidence={**alert.evidence, ...})``); writing into a published alert's
    evidence raises ``TypeError`` instead of silently changing an alert another stage still holds. A ``dict``
    subclass, so JSON writers (orjson, json) and ``isinstance(..., dict)`` readers see a plain dict. The values
    are the rule's own; tests/models/test_alert_invariants.py checks that nothing writes into them either."""

    __slots__ = ()

    def _read_only(self, *args: Any, **kwargs: Any) -> None:
        raise TypeError("an alert's evidence is read-only: make a new alert (dataclasses.replace)")

    __setitem__ = __delitem__ = __ior__ = _read_only  # type: ignore[assignment]
    update = setdefault = pop = popitem = clear = _read_only  # type: ignore[assignment]

    def __reduce__(self) -> tuple:
        # copy/deepcopy/pickle (the shadow copies an engine) rebuild it whole, never item by item.
        return (Evidence, (dict(self),))

    def copy(self) -> dict[str, Any]:  # type: ignore[override]
        return dict(self)


@dataclass(frozen=True, slots=True)
class Alert:
    """One alert, typed: ``status``, ``severity`` and ``scope`` are members of their closed vocabularies
    (models/alert_types.py; strings given are converted, an unknown one is a ``ValueError``), ``type`` an
    ``AlertType`` (a type this version does not know, read back from a newer worker's record, stays a string).
    Each is a ``StrEnum``, equal to its string, so the JSON record is the same as with bare strings."""

    id: str
    status: AlertStatus
    type: AlertType | str
    severity: Severity  # info: steady waste worth a ticket, not a page
    job: str
    ranks: tuple[int, ...]
    nodes: tuple[str, ...]
    starts_at: float
    summary: str
    evidence: dict[str, Any] = field(default_factory=dict)
    ends_at: float | None = None
    #: device | platform | job (models/oncall/actions.py), set where alerts leave the engine.
    scope: Scope = Scope.UNSET
    #: One sentence for the on-call SRE (models/oncall/actions.py).
    recommended_action: str = ""

    def __post_init__(self) -> None:
        if type(self.evidence) is not Evidence:  # one copy, here: the caller's dict stays theirs
            object.__setattr__(self, "evidence", Evidence(self.evidence))
        # Rules and tests may pass the plain strings: one conversion here keeps every alert typed.
        if type(self.status) is not AlertStatus:
            object.__setattr__(self, "status", AlertStatus(self.status))
        if type(self.severity) is not Severity:
            object.__setattr__(self, "severity", Severity(self.severity))
        if type(self.scope) is not Scope:
            object.__setattr__(self, "scope", Scope(self.scope))
        if type(self.type) is not AlertType and self.type in _KNOWN_TYPES:
            object.__setattr__(self, "type", AlertType(self.type))

    @property
    def facts(self) -> TypeFacts:
        """Its type's facts (models/alert_types.py ``FACTS``): what the rest of stepwatch does with it."""
        return facts(self.type)

    @property
    def labels(self) -> dict[str, str]:
        out = {
            "alertname": f"stepwatch_{self.type}",
            "job": self.job,
            "severity": self.severity,
            "source": "stepwatch",
        }
        if self.scope:
            out["scope"] = self.scope
        # Grouping keys for Alertmanager (models/telemetry/incidents.py; docs/operations.md, "Alertmanager"): the
        # incident an alert belongs to, the shared fabric (switch) behind it, the one node it is about.
        ev = self.evidence
        if isinstance(ev.get("incident"), str):
            out["incident"] = ev["incident"]
        if isinstance(ev.get("fabric"), str):
            out["fabric"] = ev["fabric"]
        if ev.get("incident_scope") == "node" and isinstance(ev.get("node"), str):
            out["node"] = ev["node"]
        elif not self.job and len(self.nodes) == 1 and not facts(self.type).multi_node_incident:
            out["node"] = self.nodes[0]
        return out

    @property
    def annotations(self) -> dict[str, str]:
        out = {
            "summary": self.summary,
            "ranks": ",".join(str(r) for r in self.ranks),
            "nodes": ",".join(self.nodes),
            "alert_id": self.id,
            "runbook_url": runbook_url(self.type),
        }
        if self.recommended_action:
            out["recommended_action"] = self.recommended_action
        return out

    def resolved(self, *, at: float, summary: str | None = None, evidence: dict[str, Any] | None = None) -> "Alert":
        return replace(
            self,
            status=AlertStatus.RESOLVED,
            ends_at=at,
            summary=summary if summary is not None else self.summary,
            evidence=evidence if evidence is not None else self.evidence,
        )

    def to_dict(self) -> dict[str, Any]:
        """The alerts topic's record (docs/events.md); ``from_dict`` reads it back."""
        return {
            "v": WIRE_VERSION,
            "kind": "alert",
            "id": self.id,
            "status": self.status,
            "type": self.type,
            "severity": self.severity,
            "job": self.job,
            "ranks": list(self.ranks),
            "nodes": list(self.nodes),
            "starts_at": self.starts_at,
            "ends_at": self.ends_at,
            "summary": self.summary,
            "evidence": self.evidence,
            "labels": self.labels,
            "annotations": self.annotations,
        }

    @classmethod
    def from_dict(cls, record: dict[str, Any]) -> "Alert":
        """The alert of an alerts-topic record (``to_dict``'s output, e.g. read back by restart recovery);
        ``ValueError`` when it is not one. Scope and recommended action come back from its labels and
        annotations; fields a record of an older worker lacks take their defaults."""
        if not isinstance(record, dict) or not isinstance(record.get("id"), str) or not record["id"]:
            raise ValueError("not an alert record: no id")
        labels = record.get("labels") if isinstance(record.get("labels"), dict) else {}
        annotations = record.get("annotations") if isinstance(record.get("annotations"), dict) else {}
        try:
            ends_at = record.get("ends_at")
            return cls(
                id=record["id"], status=str(record.get("status") or "firing"), type=str(record.get("type") or "unknown"),
                severity=str(record.get("severity") or "warning"), job=str(record.get("job") or ""),
                ranks=tuple(int(r) for r in record.get("ranks") or ()),
                nodes=tuple(str(n) for n in record.get("nodes") or ()),
                starts_at=float(record.get("starts_at") or 0.0), summary=str(record.get("summary") or ""),
                evidence=record.get("evidence") if isinstance(record.get("evidence"), dict) else {},
                ends_at=float(ends_at) if ends_at is not None else None,
                scope=str(labels.get("scope") or ""),
                recommended_action=str(annotations.get("recommended_action") or ""))
        except (TypeError, ValueError) as exc:
            raise ValueError(f"not an alert record: {exc}") from None

    def to_json(self) -> bytes:
        """The alerts topic's record (and ``stepwatch replay``'s line): ``to_dict`` as JSON. Numbers a detector
        computed with numpy (``numpy.float64`` in evidence) are written as JSON numbers, not an error that
        would lose the alert."""
        return orjson.dumps(self.to_dict(), option=orjson.OPT_SERIALIZE_NUMPY)


_KNOWN_TYPES = frozenset(AlertType)


def format_alert(alert: dict[str, Any]) -> str:
    """One readable line for a terminal."""
    when = alert.get("ends_at") if alert.get("status") == "resolved" else alert.get("starts_at")
    stamp = _iso(when) if isinstance(when, (int, float)) else "?"
    status = str(alert.get("status", "?")).upper()
    return (
        f"{stamp}  {status:<8} {alert.get('severity', '?'):<8} {alert.get('type', '?'):<10} "
        f"job={alert.get('job')}  {alert.get('summary', '')}  [id {alert.get('id')}]"
    )


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
