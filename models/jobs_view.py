"""The outlet's read-only view of the jobs (models/outlet.py ``EngineView``): public facts of the job-rule engine
(models/engine.py) and of node telemetry (models/telemetry/telemetry_hub.py), nothing else.

Reading it never calls back into the engine's code: its facts are the engine's public attributes (jobs, clock,
the jobs ticked, the run layouts of the batch being taken: ``DetectionEngine.batch_layouts``), the jobs' own
records (recent steps, checkpoint) and node telemetry's answers."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .detection import DetectionEngine
    from .engine_output import RowFacts
    from .outlet import StepRecord
    from .telemetry.telemetry_hub import TelemetryHub


class JobsView:
    """``EngineView`` over a ``DetectionEngine``'s jobs and its ``TelemetryHub``: what the outlet stages may read."""

    __slots__ = ("_engine", "_telemetry", "_at")

    def __init__(self, engine: DetectionEngine, telemetry: TelemetryHub) -> None:
        self._engine = engine
        self._telemetry = telemetry
        self._at: RowFacts | None = None

    def at(self, facts: RowFacts | None) -> None:
        """Read the clock and ``facts.job``'s steps and checkpoint as of the row that fired (None: as they are now):
        a column run's later rows have moved them since (``DetectionEngine.process_batch``)."""
        self._at = facts

    @property
    def clock(self) -> float:
        return self._at.clock if self._at is not None else self._engine.clock

    def ranks_of(self, job: str) -> int:
        state = self._engine.jobs.get(job)
        return len(state.ranks) if state is not None else 0

    def recent_steps(self, job: str) -> tuple[StepRecord, ...]:
        if self._at is not None and self._at.job == job:
            return self._at.steps
        state = self._engine.jobs.get(job)
        return state.sli.recent_steps() if state is not None else ()

    def layouts(self, cols) -> dict:
        shared = self._engine.batch_layouts
        if shared is not None and shared[0] is cols:
            return shared[1]
        return self._engine.layouts(cols)  # (a batch not shared: tests that drive a stage alone)

    def checkpoint_of(self, job: str) -> tuple[float | None, int | None]:
        if self._at is not None and self._at.job == job:
            return self._at.checkpoint
        state = self._engine.jobs.get(job)
        if state is None:
            return None, None
        detector = state.named["checkpoint"].detector
        return detector.last_success_ts, detector.latest_step

    def ticked_shares(self) -> list[tuple[str, float | None]]:
        jobs = self._engine.jobs
        return [(job.job, job.sli.productive_share() if jobs.get(job.job) is job else None)
                for job in self._engine.last_tick_jobs]

    def tracks(self, job: str) -> bool:
        return job in self._engine.jobs

    def job_count(self) -> int:
        return len(self._engine.jobs)

    def agent_reported(self, node: str, at: float) -> bool:
        # the node's own first report (e.g. an Xid) at ``at`` counts
        return self._telemetry.reported_before(node, math.nextafter(at, math.inf))

    def reported_nodes(self) -> int:
        return self._telemetry.reported_nodes()

    def incident_covering(self, nodes, at: float):
        return self._telemetry.incidents.covering(nodes, at)
