"""The outlet chain: what happens to an alert after a rule fired, as one ordered list of stages.

A rule's alert leaves the job-rule engine (models/engine.py), is enriched by node telemetry (models/detection.py
composes the two), and goes through the stages of the registry's ``OUTLET_STAGES`` (models/registry.py), in that
order, before the pipeline's record of what was published (models/pipeline.py ``publishable``):

    attribute -> onset -> cite -> classify -> effective compute -> outlet rules -> gate

Each stage is an :class:`AlertStage`: it may ``observe`` the input runs the engine just took, before the alerts they
caused reach it (placement, restarts), ``process`` the alerts leaving it (and returns them, changed, dropped or with new ones after them), and
say at a ``tick`` what it has to say then (held alerts released, the outlet rules' timers); what a stage's tick
returns goes through the stages after it. A stage passes on, unchanged and in order, every alert it does not handle
(tests/models/test_rule_contract.py). Stages know the jobs only through an :class:`EngineView`: public, read-only facts.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from .alerts import Alert
from .engine_output import StepRecord  # (the stages' name for it too)


@dataclass(frozen=True, kw_only=True)
class StageSpec:
    """What a stage is: its name in the chain and what it does (one line: docs/architecture.md lists them)."""

    name: str
    does: str


@runtime_checkable
class EngineView(Protocol):
    """The public facts of the jobs the engine tracks that the outlet stages read; nothing here changes them."""

    @property
    def clock(self) -> float:
        """The latest time seen (event time in replay, the timer's live)."""

    def ranks_of(self, job: str) -> int:
        """How many ranks of ``job`` are tracked (0: an unknown job)."""

    def recent_steps(self, job: str) -> tuple[StepRecord, ...]:
        """The job's recent judged steps, oldest first (models/jobhealth/sli.py); () for an unknown job."""

    def layouts(self, cols: Any) -> dict:
        """The run layout of each job run of a column batch (models/steps/layout.py), as the engine shares them."""

    def checkpoint_of(self, job: str) -> tuple[float | None, int | None]:
        """When the job's latest checkpoint succeeded, and its step (None, None: not known)."""

    def ticked_shares(self) -> list[tuple[str, float | None]]:
        """The jobs the latest tick visited, each with its productive share (None: evicted then, or no span yet)."""

    def tracks(self, job: str) -> bool:
        """Whether the engine tracks ``job`` now."""

    def job_count(self) -> int:
        """How many jobs the engine tracks."""

    def agent_reported(self, node: str, at: float) -> bool:
        """Whether the node's own agent had reported by ``at`` (only an agent speaks for its node)."""

    def reported_nodes(self) -> int:
        """How many nodes' agents have reported (the drain budget's fleet)."""

    def incident_covering(self, nodes: tuple[str, ...], at: float) -> Any:
        """The open fabric incident (models/telemetry/incidents.py) whose nodes cover ``nodes`` at ``at``, or None."""


@runtime_checkable
class AlertStage(Protocol):
    """One stage of the outlet chain (see the module doc)."""

    spec: StageSpec

    def observe(self, item: Any, view: EngineView) -> None:
        """An event, a list of them or a StepColumns batch the engine just took (before ``process`` of its alerts)."""

    def process(self, alerts: list[Alert], view: EngineView) -> list[Alert]:
        """The alerts reaching this stage, in order: returns those that go on."""

    def tick(self, now: float, view: EngineView) -> list[Alert]:
        """Alerts of this stage's own at a timer tick (they go through the stages after it)."""


class Stage:
    """A stage's defaults: observes nothing, passes every alert on, says nothing at a tick."""

    spec: StageSpec

    def observe(self, item: Any, view: EngineView) -> None:
        return None

    def process(self, alerts: list[Alert], view: EngineView) -> list[Alert]:
        return alerts

    def tick(self, now: float, view: EngineView) -> list[Alert]:
        return []


class Outlet:
    """The stages in order: ``process`` runs the alerts leaving the engine through all of them; ``tick`` asks each
    stage in turn and runs what it says through the stages after it."""

    def __init__(self, stages: Iterable[AlertStage]) -> None:
        self.stages: tuple[AlertStage, ...] = tuple(stages)
        names = [s.spec.name for s in self.stages]
        if len(names) != len(set(names)):
            raise ValueError(f"outlet stages named twice: {names}")
        self._observers = [s for s in self.stages if type(s).observe is not Stage.observe]

    def stage(self, name: str) -> AlertStage:
        for stage in self.stages:
            if stage.spec.name == name:
                return stage
        raise KeyError(name)

    def observe(self, item: Any, view: EngineView) -> None:
        for stage in self._observers:
            stage.observe(item, view)

    def process(self, alerts: list[Alert], view: EngineView) -> list[Alert]:
        for stage in self.stages:
            alerts = stage.process(alerts, view)
        return alerts

    def tick(self, now: float, view: EngineView) -> list[Alert]:
        out: list[Alert] = []
        for stage in self.stages:  # (an empty list too: the gate's held drains may be released at any call)
            out = stage.process(out, view)
            out = out + stage.tick(now, view)
        return out
