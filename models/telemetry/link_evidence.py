"""The ``link_errors`` alert's evidence as a typed record: what the port rule writes, and how readers read it back.

The telemetry tracker (models/telemetry/telemetry_tracker.py) writes one ``link_errors`` alert per node: the port
that fired first, then the node's other ports that erred recently (docs/network.md). The fabric incidents
(models/telemetry/incidents.py ``FabricIncidents``) read it back through ``LinkErrorsEvidence.of`` to find the
switch the erring ports are cabled to and the kinds of error, instead of by key. ``to_dict`` is the wire form,
key for key and in order, as the tracker wrote it before (recordings replay byte for byte); keys added later
(the jobs on the node, the on-call action) are kept by the alert, not by the record.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..alert_types import AlertType
from ..alerts import Alert


def _number(value: Any) -> float | None:
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) else None


@dataclass(frozen=True, slots=True)
class PortErrors:
    """One port of the node's alert: its error counters' increases, state and recent bad samples."""

    device: str | None  # the NIC, e.g. mlx5_0
    port: int | None
    errors: dict[str, int]  # counter name -> increase since the port's errors began
    state: str | None  # the port's state (ACTIVE, DOWN, ...)
    bad_samples: int  # samples with errors among the port's recent ones
    began_at: float | None  # when its errors began

    @property
    def down(self) -> bool:
        """The link is not up (a state other than ACTIVE; an unknown state counts as up)."""
        return str(self.state or "ACTIVE").upper() not in ("ACTIVE", "NONE")

    def to_dict(self) -> dict[str, Any]:
        return {"device": self.device, "port": self.port, "errors": dict(self.errors), "state": self.state,
                "bad_samples": self.bad_samples, "began_at": self.began_at}

    @classmethod
    def of(cls, d: Any) -> "PortErrors | None":
        """The port of one ``ports`` entry; None when it is not one (a reader must not fail on what it reads)."""
        if not isinstance(d, dict):
            return None
        errors = d.get("errors")
        bad = _number(d.get("bad_samples"))
        return cls(device=d.get("device"), port=d.get("port"),
                   errors=dict(errors) if isinstance(errors, dict) else {}, state=d.get("state"),
                   bad_samples=int(bad) if bad is not None else 0, began_at=_number(d.get("began_at")))


@dataclass(frozen=True, slots=True)
class LinkErrorsEvidence:
    """A node's ports in trouble: the first port's numbers, then every erring port (``ports``)."""

    node: str | None
    device: str | None  # the port that fired first
    port: int | None
    began_at: float | None  # when the earliest listed port's errors began
    errors: dict[str, int]  # the first port's counters, largest first
    state: str | None
    rate_gbps: float | None  # the first port's link rate
    bad_samples: int
    window: int  # samples the port rule looks back over
    ports: tuple[PortErrors, ...]

    @property
    def error_kinds(self) -> set[str]:
        """The kinds of trouble: every port's error counters, ``link_down`` for a port that is not up (the first
        port's counters when no port lists any)."""
        kinds: set[str] = set()
        for port in self.ports:
            kinds.update(port.errors)
            if port.down:
                kinds.add("link_down")
        return kinds or set(self.errors)

    def to_dict(self) -> dict[str, Any]:
        return {"node": self.node, "device": self.device, "port": self.port, "began_at": self.began_at,
                "errors": dict(self.errors), "state": self.state, "rate_gbps": self.rate_gbps,
                "bad_samples": self.bad_samples, "window": self.window, "ports": [p.to_dict() for p in self.ports]}

    @classmethod
    def of(cls, alert: Alert) -> "LinkErrorsEvidence":
        """The record of a ``link_errors`` alert's evidence; a field missing or of another type reads as empty."""
        if alert.type != AlertType.LINK_ERRORS:
            raise ValueError(f"not a link_errors alert: {alert.type}")
        ev = alert.evidence
        errors, ports = ev.get("errors"), ev.get("ports")
        bad, window = _number(ev.get("bad_samples")), _number(ev.get("window"))
        return cls(node=ev.get("node"), device=ev.get("device"), port=ev.get("port"),
                   began_at=_number(ev.get("began_at")), errors=dict(errors) if isinstance(errors, dict) else {},
                   state=ev.get("state"), rate_gbps=_number(ev.get("rate_gbps")),
                   bad_samples=int(bad) if bad is not None else 0, window=int(window) if window is not None else 0,
                   ports=tuple(p for p in map(PortErrors.of, ports if isinstance(ports, (list, tuple)) else ())
                               if p is not None))
