"""The alert record: stepwatch's output, one JSON object per message on the alerts topic.

An alert keeps one ``id`` from firing to resolved (a fingerprint of the job, the type and
what identifies the problem), so consumers and Alertmanager can deduplicate. ``labels``
stay low-cardinality (no rank numbers); per-rank detail lives in ``annotations`` and
``evidence``.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from typing import Any

WIRE_VERSION = 1


def alert_id(job: str, alert_type: str, *parts: object) -> str:
    """Stable fingerprint of one problem: the same inputs always give the same id."""
    text = "\x1f".join([job, alert_type, *(str(p) for p in parts)])
    return hashlib.sha1(text.encode()).hexdigest()[:20]


@dataclass(frozen=True, slots=True)
class Alert:
    id: str
    status: str  # firing | resolved
    type: str  # straggler | hang | ...
    severity: str  # info | warning | critical (info: steady waste worth a ticket, not a page)
    job: str
    ranks: tuple[int, ...]
    nodes: tuple[str, ...]
    starts_at: float
    summary: str
    evidence: dict[str, Any] = field(default_factory=dict)
    ends_at: float | None = None
    #: device | platform | job (models/actions.py), set where alerts leave the engine.
    scope: str = ""
    #: One sentence for the on-call SRE (models/actions.py).
    recommended_action: str = ""

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
        # Grouping keys for Alertmanager (models/incidents.py; docs/operations.md, "Alertmanager"): the
        # incident an alert belongs to, the shared fabric (switch) behind it, the one node it is about.
        ev = self.evidence
        if isinstance(ev.get("incident"), str):
            out["incident"] = ev["incident"]
        if isinstance(ev.get("fabric"), str):
            out["fabric"] = ev["fabric"]
        if ev.get("incident_scope") == "node" and isinstance(ev.get("node"), str):
            out["node"] = ev["node"]
        elif not self.job and len(self.nodes) == 1 and self.type != "fabric":
            out["node"] = self.nodes[0]
        return out

    @property
    def annotations(self) -> dict[str, str]:
        out = {
            "summary": self.summary,
            "ranks": ",".join(str(r) for r in self.ranks),
            "nodes": ",".join(self.nodes),
            "alert_id": self.id,
        }
        if self.recommended_action:
            out["recommended_action"] = self.recommended_action
        return out

    def resolved(self, *, at: float, summary: str | None = None, evidence: dict[str, Any] | None = None) -> "Alert":
        return replace(
            self,
            status="resolved",
            ends_at=at,
            summary=summary if summary is not None else self.summary,
            evidence=evidence if evidence is not None else self.evidence,
        )

    def to_dict(self) -> dict[str, Any]:
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
