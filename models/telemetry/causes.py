"""A suspected cause: one ranked candidate cause of a straggler, hang or job-level alert.

Produced by the telemetry correlator (models/telemetry/telemetry_correlator.py), the host correlator
(models/telemetry/host.py) and the job-wide fabric comparison (models/telemetry/fabric.py); listed in an alert's
``suspected_causes`` by the telemetry hub (models/telemetry/telemetry_hub.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..alert_types import CauseCategory


@dataclass(frozen=True, slots=True)
class SuspectedCause:
    """One ranked candidate cause of a straggler or hang."""

    category: CauseCategory  # a string given is converted (an unknown one is a ValueError)
    node: str | None
    component: str
    score: float
    began_at: float | None
    hint: str
    near_rank: bool | None = None
    gpu: int | None = None
    device: str | None = None
    port: int | None = None
    evidence: tuple[dict[str, Any], ...] = ()

    def __post_init__(self) -> None:
        if type(self.category) is not CauseCategory:
            object.__setattr__(self, "category", CauseCategory(self.category))

    def to_dict(self, rank: int) -> dict[str, Any]:
        out: dict[str, Any] = {"rank": rank, "category": self.category, "node": self.node,
                               "component": self.component, "score": round(self.score, 3),
                               "began_at": None if self.began_at is None else round(self.began_at, 3),
                               "hint": self.hint}
        for name in ("near_rank", "gpu", "device", "port"):
            value = getattr(self, name)
            if value is not None:
                out[name] = value
        out["evidence"] = list(self.evidence)
        return out
