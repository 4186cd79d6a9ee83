"""A step of the worker's wall clock raises no alert (issue 44, row 9).

The worker's own ``Worker`` (its roads and its timer), with a ``WorkerClock`` whose wall clock the test
steps (+1 h for 30 s, then back; or back 1 h) while a healthy job trains; the machine's clock is not
touched. Events arrive read at the stepped wall clock, as the events consumer reads them. No alert may
follow, and each step is logged once and counted. The same run on the wall clock itself calls the job
hung: the case bites.
"""

from __future__ import annotations

import asyncio
import logging

import pytest

from stepwatch.config import Settings
from stepwatch.models.pipeline import Message
from stepwatch.models.sources import Read
from stepwatch.models.wire.events import encode_events
from stepwatch.sim.simulator import ClusterSimulator, SimulationSpec
from stepwatch.streams.worker import Worker
from stepwatch.streams.worker_clock import WorkerClock

START = 1_790_000_000.0  # the machine's wall clock when the test's worker starts (explicit)
LATENCY = 0.05  # from a step's end to the worker


class SteppedClock:
    """A wall clock and a monotonic clock the test moves on; the wall clock may be stepped."""

    def __init__(self) -> None:
        self.elapsed = 0.0
        self.step = 0.0

    def wall(self) -> float:
        return START + self.elapsed + self.step

    def monotonic(self) -> float:
        return 1000.0 + self.elapsed


class OnTheWallClock(WorkerClock):
    """What the worker did before: its time is the wall clock's."""

    def now(self) -> float:
        return self.wall()


class Captured:
    """The worker's sink, kept in memory (models/sinks.py ``AsyncSink``)."""

    def __init__(self) -> None:
        self.alerts: list = []

    async def write(self, out) -> None:
        self.alerts.extend(out.alerts)

    async def write_alerts(self, alerts) -> None:
        self.alerts.extend(alerts)


def run(tmp_path, steps: dict[tuple[float, float], float], clock_type=WorkerClock) -> tuple[Worker, list]:
    """A healthy 8-rank job for ~200 s of 1 s steps through a worker whose wall clock is off by
    ``steps[(from, to)]`` seconds between those seconds of the run; the worker ticks every second."""
    settings = Settings.from_env({"KAFKA_BOOTSTRAP": "127.0.0.1:9", "STEPWATCH_WORKER_WEB_PORT": "0",
                                  "STEPWATCH_WORKER_DATADIR": str(tmp_path / "faust")})
    machine = SteppedClock()
    worker = Worker(settings, clock=clock_type(wall=machine.wall, monotonic=machine.monotonic))
    worker.output = captured = Captured()
    worker.published_known.set()  # nothing on an alerts topic to read back here
    spec = SimulationSpec(job="steady", ranks=8, steps=200, start_time=START - 3.0)

    async def road():
        for t, batch in ClusterSimulator(spec).steps():
            machine.elapsed = t + LATENCY - START
            machine.step = next((s for (lo, hi), s in steps.items() if lo <= machine.elapsed < hi), 0.0)
            # As the events consumer reads: the wall clock's time of the read (Worker.drive takes it on).
            yield Read([Message(encode_events(batch), b"steady", "events", 0)], machine.wall())
            await worker.tick()

    asyncio.run(worker.drive(road(), "events"))
    return worker, captured.alerts


@pytest.mark.parametrize("steps, forward, back", [({(100.0, 130.0): 3600.0}, 1, 1), ({(100.0, 1e9): -3600.0}, 0, 1),
                                                   ({(60.0, 90.0): 5.0, (120.0, 1e9): -30.0}, 1, 2)],
                         ids=["ahead-1h-for-30s", "back-1h", "small-steps"])
def test_a_wall_clock_step_raises_no_alert_and_is_logged_and_counted_once(tmp_path, caplog, steps, forward, back):
    with caplog.at_level(logging.WARNING, logger="stepwatch.worker.clock"):
        worker, alerts = run(tmp_path, steps)
    assert [(a.type, a.status, a.summary) for a in alerts] == []
    assert worker.clock.steps == forward + back
    assert len([r for r in caplog.records if "wall clock stepped" in r.getMessage()]) == forward + back
    sample = worker.metrics.registry.get_sample_value
    assert [sample("stepwatch_worker_clock_steps_total", {"direction": d}) for d in ("forward", "back")] == \
        [forward, back]


def test_on_the_wall_clock_itself_the_step_calls_a_healthy_job_hung(tmp_path):
    """The case bites: the worker's time taken from the stepped wall clock, as before."""
    _, alerts = run(tmp_path, {(100.0, 130.0): 3600.0}, clock_type=OnTheWallClock)
    assert "hang" in {a.type for a in alerts}
