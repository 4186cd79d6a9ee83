"""The imbalance rule's evidence as typed records: what models/steps/imbalance.py writes, field by field.

Two alerts, two records: ``StageImbalanceEvidence`` (pipeline stages of unequal speed, ``evidence.kind:
"stage"``) and ``ClassImbalanceEvidence`` (stable classes of ranks within a group, ``"classes"``).
``to_dict`` is the alert's ``evidence`` on the wire (docs/job-health.md), written where the alert is made:
same keys, same order and same values as the dict-building code wrote before, so recordings replay byte for
byte. The rule reads its own open alerts back through ``from_dict`` (which settings they fired with, which
stages were slow); keys added after the alert was made (the resolution, suspected causes, the on-call
action) are left out of the record.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from .cost import Cost


class ImbalanceKind(StrEnum):
    """Which imbalance an alert reports (``evidence.kind``)."""

    STAGE = "stage"  # pipeline stages (peer groups) of unequal speed
    CLASSES = "classes"  # stable classes of ranks within one group


class RemedyKind(StrEnum):
    """What the rule suggests (``evidence.action.kind``)."""

    REPARTITION = "repartition"  # move layers out of the slow stages
    PLACEMENT = "placement"  # the ranks' placement differs; the straggler rule now compares within classes


@dataclass(frozen=True, slots=True)
class Remedy:
    kind: RemedyKind
    detail: str

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind.value, "detail": self.detail}

    @classmethod
    def from_dict(cls, ev: dict[str, Any]) -> "Remedy":
        return cls(kind=RemedyKind(ev["kind"]), detail=ev["detail"])


@dataclass(frozen=True, slots=True)
class StageLoad:
    """One stage's typical step (``evidence.groups[]``), slowest first."""

    group: str
    ranks: tuple[int, ...]
    median: float  # the stage's typical compute (seconds)
    ratio: float  # median / the median stage's

    def to_dict(self) -> dict[str, Any]:
        return {"group": self.group, "ranks": list(self.ranks), "median": self.median, "ratio": self.ratio}

    @classmethod
    def from_dict(cls, ev: dict[str, Any]) -> "StageLoad":
        return cls(group=ev["group"], ranks=tuple(ev["ranks"]), median=ev["median"], ratio=ev["ratio"])


def _cost_from(ev: dict[str, Any]) -> Cost | None:
    if "job_slowdown" not in ev:
        return None
    return Cost(job_slowdown=ev["job_slowdown"], seconds_lost_per_step=ev["seconds_lost_per_step"],
                gpu_hours_lost_per_day=ev["gpu_hours_lost_per_day"], gpus=ev["cost_gpus"],
                step_time=ev["cost_step_time"])


def _kind(ev: dict[str, Any], kind: ImbalanceKind) -> None:
    if ev.get("kind") != kind.value:
        raise ValueError(f"not a {kind.value} imbalance's evidence: kind {ev.get('kind')!r}")


@dataclass(frozen=True, slots=True)
class StageImbalanceEvidence:
    """Pipeline stages of unequal speed: the others wait for the slowest every step."""

    groups: tuple[StageLoad, ...]  # every stage, slowest first
    slow_groups: tuple[str, ...]  # stages at least ``min_effect`` slower than the median stage, by name
    ratio: float  # the slowest stage over the median stage
    wait_share: float  # share of the slowest stage's time the median stage waits
    step_time: float  # the job's median step time (seconds)
    balanced_step_time: float  # what a balanced partition would take a step
    cost: Cost | None  # what the imbalance costs the job (models/steps/cost.py); None: no step time to judge by
    steps: int  # steps each stage was judged over (the fewest)
    min_effect: float  # the setting it fired with (``imbalance.stage_min_effect``)
    action: Remedy

    def to_dict(self) -> dict[str, Any]:
        return {"kind": ImbalanceKind.STAGE.value, "groups": [g.to_dict() for g in self.groups],
                "slow_groups": list(self.slow_groups), "ratio": self.ratio, "wait_share": self.wait_share,
                "step_time": self.step_time, "balanced_step_time": self.balanced_step_time,
                **(self.cost.to_evidence() if self.cost is not None else {}),
                "steps": self.steps, "min_effect": self.min_effect, "action": self.action.to_dict()}

    @classmethod
    def from_dict(cls, ev: dict[str, Any]) -> "StageImbalanceEvidence":
        _kind(ev, ImbalanceKind.STAGE)
        return cls(groups=tuple(StageLoad.from_dict(g) for g in ev["groups"]), slow_groups=tuple(ev["slow_groups"]),
                   ratio=ev["ratio"], wait_share=ev["wait_share"], step_time=ev["step_time"],
                   balanced_step_time=ev["balanced_step_time"], cost=_cost_from(ev), steps=ev["steps"],
                   min_effect=ev["min_effect"], action=Remedy.from_dict(ev["action"]))


@dataclass(frozen=True, slots=True)
class RankClass:
    """One class of ranks of like pace (``evidence.classes[]``), slowest first."""

    ranks: tuple[int, ...]
    nodes: tuple[str, ...]  # the nodes its ranks are on, sorted
    median: float  # its ranks' median signal (seconds)

    def to_dict(self) -> dict[str, Any]:
        return {"ranks": list(self.ranks), "nodes": list(self.nodes), "median": self.median}

    @classmethod
    def from_dict(cls, ev: dict[str, Any]) -> "RankClass":
        return cls(ranks=tuple(ev["ranks"]), nodes=tuple(ev["nodes"]), median=ev["median"])


@dataclass(frozen=True, slots=True)
class ClassImbalanceEvidence:
    """Stable classes of ranks within one group (mixed GPU models, shared GPUs): not stragglers, a placement."""

    group: str | None  # the peer group; None: the whole job
    classes: tuple[RankClass, ...]  # slowest first
    ratio: float  # the slowest class's median over the fastest's (NaN when the fastest is 0)
    steps: int  # steps of history judged
    class_gap: float  # the setting it fired with (``imbalance.class_gap``)
    likely_reason: str
    split_by_node: bool  # the classes sit on disjoint sets of nodes
    action: Remedy

    def to_dict(self) -> dict[str, Any]:
        return {"kind": ImbalanceKind.CLASSES.value, "group": self.group,
                "classes": [c.to_dict() for c in self.classes], "ratio": self.ratio, "steps": self.steps, "class_gap": self.class_gap,
                "likely_reason": self.likely_reason, "split_by_node": self.split_by_node,
                "action": self.action.to_dict()}

    @classmethod
    def from_dict(cls, ev: dict[str, Any]) -> "ClassImbalanceEvidence":
        _kind(ev, ImbalanceKind.CLASSES)
        return cls(group=ev["group"], classes=tuple(RankClass.from_dict(c) for c in ev["classes"]), ratio=ev["ratio"],
                   steps=ev["steps"], class_gap=ev["class_gap"], likely_reason=ev["likely_reason"],
                   split_by_node=ev["split_by_node"], action=Remedy.from_dict(ev["action"]))
