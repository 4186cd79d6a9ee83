"""The outlet's read-only view of the engine's jobs (models/outlet.py ``EngineView``): public facts only."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .engine import DetectionEngine
    from .outlet import StepRecord


class JobsView:
    """``EngineView`` over a ``DetectionEngine``: what the outlet stages may read of its jobs."""

    __slots__ = ("_engine",)

    def __init__(self, engine: DetectionEngine) -> None:
        self._engine = engine

    @property
    def clock(self) -> float:
        return self._engine.clock

    def ranks_of(self, job: str) -> int:
        state = self._engine.jobs.get(job)
        return len(state.ranks) if state is not None else 0

    def recent_steps(self, job: str) -> tuple[StepRecord, ...]:
        state = self._engine.jobs.get(job)
        return state.sli.recent_steps() if state is not None else ()

    def layouts(self, cols) -> dict:
        return self._engine.layouts(cols)

    def checkpoint_of(self, job: str) -> tuple[float | None, int | None]:
        state = self._engine.jobs.get(job)
        if state is None:
            return None, None
        detector = state.checkpoint
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
        return self._engine.telemetry.reported_before(node, math.nextafter(at, math.inf))

    def reported_nodes(self) -> int:
        return self._engine.telemetry.reported_nodes()

    def incident_covering(self, nodes, at: float):
        return self._engine.telemetry.incidents.covering(nodes, at)
