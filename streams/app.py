"""The Faust app of a worker (kept for ``create_app`` callers); the worker itself is streams/worker.py."""

from __future__ import annotations

import faust

from stepwatch.config import Settings

from .metrics import WorkerMetrics, WorkerStats  # noqa: F401  (WorkerStats: the former name)
from .worker import Worker, run_worker  # noqa: F401


def create_app(settings: Settings | None = None) -> faust.App:
    """A worker's Faust app; its ``stepwatch_worker`` is the ``Worker`` (engine, pipeline, consumers, ...)."""
    return Worker(settings).app
