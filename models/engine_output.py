"""What leaves the job-rule engine (models/engine.py) besides its state: typed, public, and nothing else.

The engine judges jobs; it neither enriches alerts nor knows node telemetry or on-call. What others must hear
of it leaves through this module: the rules' alerts tagged with the event that caused them (``Caused``), one
record per run of step events the rules took (``StepsJudged``, whose rows node telemetry observes before those
alerts are enriched), and a ``JobsObserver`` told of a job's node and of a job forgotten as they happen.
models/detection.py composes them with node telemetry and the outlet chain.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from .alerts import Alert
from .steps.layout import RunLayout
from .wire.step_columns import StepColumns

#: One judged step of a job, as the job's recent steps list it: (step, end ts, step time, tokens).
StepRecord = tuple[int, float, float, float]

#: (event index, the alerts that event caused, together): the index is the event's row in its batch (0 for a
#: lone event). A group is enriched as one (the node rules that group stragglers read one group at a time).
Caused = tuple[int, list[Alert]]


@dataclass(frozen=True, slots=True)
class RowFacts:
    """What the outlet stages read of ``job`` as of the row of a column run that fired, as one event at a time has
    them then: the engine's clock, the job's recent judged steps, its checkpoint (last success ts, highest step).
    The run's later rows move all three before the outlet sees its alerts."""

    job: str
    clock: float
    steps: tuple[StepRecord, ...]
    checkpoint: tuple[float | None, int | None]


@dataclass(frozen=True, slots=True)
class StepsJudged:
    """Rows ``lo:hi`` of ``cols``, one job's run of step events, as the rules took them.

    ``cols``: the batch's columns, or the rows a state cap kept. ``caused``: in event order, rows of ``cols``; the
    alerts of a job evicted to make room for this one go with the first group. ``evicted``: those alerts when the
    run caused none (enriched once node telemetry observed the whole run). ``layout``: the run's ranks, nodes, GPUs.
    ``facts``: beside each of ``caused``, the job as of its row (the outlet reads the job there, not at the run's end).
    """

    job: str
    cols: StepColumns
    lo: int
    hi: int
    layout: RunLayout | None
    caused: tuple[Caused, ...] = ()
    evicted: tuple[Alert, ...] = ()
    facts: tuple[RowFacts, ...] = ()

    def alerts(self) -> list[Alert]:
        """Every alert of the run, in order, as the rules gave them (before any enrichment)."""
        out = [a for _, group in self.caused for a in group]
        return list(self.evicted) + out if self.evicted else out


@runtime_checkable
class JobsObserver(Protocol):
    """Told by the engine, as it happens, what node telemetry needs of the jobs (``TelemetryHub`` is one)."""

    def observe_node(self, job: str, node: str | None) -> None:
        """An event of ``job`` named the node it ran on (heartbeats, phases, collectives)."""

    def forget_job(self, job: str) -> None:
        """``job``'s state was evicted: its alerts resolved, its nodes no longer known."""


class Unobserved:
    """A ``JobsObserver`` that hears nothing (an engine on its own)."""

    def observe_node(self, job: str, node: str | None) -> None:
        return None

    def forget_job(self, job: str) -> None:
        return None
