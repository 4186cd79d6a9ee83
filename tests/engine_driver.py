"""Drive the detection engine alone, below the pipeline: for tests of the detectors' verdicts.

Production roads (the worker, ``stepwatch replay``, recovery, the benchmarks) go through
``models.pipeline.Pipeline``; this helper feeds decoded events straight to ``DetectionEngine``
and ticks it on the events' own clock, as ``models.pipeline.run_recording`` does.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from stepwatch.models.alerts import Alert
from stepwatch.models.detection import DetectionEngine
from stepwatch.models.wire.events import Event


def replay(events: Iterable[Event], *, settings=None,
           engine: DetectionEngine | None = None) -> Iterator[Alert]:
    """Run the core over recorded events on their own clock, yielding alerts in order.

    The clock is the latest event time seen; the timer rules run whenever it has moved
    on by ``worker.tick_interval``, as the live worker's timer would.
    """
    engine = engine or DetectionEngine(settings)
    interval = engine.settings.worker.tick_interval
    next_tick: float | None = None
    for event in events:
        yield from engine.process(event)
        if next_tick is None:
            next_tick = engine.clock + interval
        elif engine.clock >= next_tick:
            yield from engine.tick(engine.clock)
            next_tick = engine.clock + interval
