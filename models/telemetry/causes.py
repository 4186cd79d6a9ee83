"""A suspected cause: one ranked candidate cause of a straggler, hang or job-level alert.

Produced by the telemetry correlator (models/telemetry/telemetry_correlator.py), the host correlator
(models/telemetry/host.py) and the job-wide fabric comparison (models/telemetry/fabric.py); listed in an alert's
``suspected_causes`` by the telemetry hub (models/telemetry/telemetry_hub.py). Modules that act on an alert's causes
(models/oncall/actions.py: failure class, implicated nodes) read them back through ``SuspectedCause.of``.
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
    #: The category as another producer wrote it, when it is not of the vocabulary (``category`` is then
    #: ``OTHER``): kept so that the cause still names its node and goes out again as it came in.
    foreign_category: str | None = None

    def __post_init__(self) -> None:
        if type(self.category) is not CauseCategory:
            object.__setattr__(self, "category", CauseCategory(self.category))

    def to_dict(self, rank: int) -> dict[str, Any]:
        out: dict[str, Any] = {"rank": rank, "category": self.category_name, "node": self.node,
                               "component": self.component, "score": round(self.score, 3),
                               "began_at": None if self.began_at is None else round(self.began_at, 3),
                               "hint": self.hint}
        for name in ("near_rank", "gpu", "device", "port"):
            value = getattr(self, name)
            if value is not None:
                out[name] = value
        out["evidence"] = list(self.evidence)
        return out

    @property
    def category_name(self) -> str:
        """The category as it goes on the wire: the vocabulary's value, or the foreign producer's own name."""
        return self.foreign_category if self.foreign_category is not None else self.category.value

    @property
    def signals(self) -> tuple[str | None, ...]:
        """The signal of each evidence entry, strongest first (``evidence[].signal``)."""
        return tuple(e.get("signal") for e in self.evidence if isinstance(e, dict))

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "SuspectedCause":
        """The cause of one ``suspected_causes`` entry (its ``rank`` is the list's order, not the cause's);
        a missing key is a ``KeyError``, an unknown category a ``ValueError``."""
        return cls(category=CauseCategory(d["category"]), node=d["node"], component=d["component"], score=d["score"],
                   began_at=d["began_at"], hint=d["hint"], near_rank=d.get("near_rank"), gpu=d.get("gpu"),
                   device=d.get("device"), port=d.get("port"), evidence=tuple(d["evidence"]))

    @classmethod
    def of(cls, d: Any) -> "SuspectedCause | None":
        """``from_dict`` for a reader that must not fail on what it reads back: None when ``d`` is not a cause (not a
        dict, or no category named); a category outside the vocabulary (another producer's) reads as ``OTHER``
        with its name kept (``foreign_category``), so the cause and its node are not lost; a field missing reads
        as empty."""
        if not isinstance(d, dict):
            return None
        name = d.get("category")
        if name in CauseCategory._value2member_map_:
            category, foreign = CauseCategory(name), None
        elif isinstance(name, str) and name:
            category, foreign = CauseCategory.OTHER, name
        else:
            return None
        evidence = d.get("evidence")
        return cls(category=category, node=d.get("node"), component=str(d.get("component") or ""),
                   score=d.get("score") or 0.0, began_at=d.get("began_at"), hint=str(d.get("hint", "")),
                   near_rank=d.get("near_rank"), gpu=d.get("gpu"), device=d.get("device"), port=d.get("port"),
                   evidence=tuple(evidence) if isinstance(evidence, (list, tuple)) else (), foreign_category=foreign)
