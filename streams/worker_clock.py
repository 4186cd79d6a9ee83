"""The worker's clock: the wall clock's reading at start, moved on by the monotonic clock.

The time-driven rules judge silence (hangs, step waits, checkpoint age) against the worker's clock, and
each job on its own clock through its arrival lag (models/engine.py). A step of the wall clock (an
operator's ``date -s``, a VM resumed, NTP stepping after a long drift) would move every job's "now" at
once: +1 h read as an hour of silence in every job. So the worker's time goes on at the monotonic
clock's pace (NTP's gradual slewing applies to both), and a step of the wall clock changes nothing;
``check`` compares the two clocks' progress, and logs and counts each step once. A lasting step only
shifts the worker's clock against the wall clock by its size: jobs are judged through their arrival
lags, which absorb it; a restarted worker starts again from the wall clock.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

log = logging.getLogger("stepwatch.worker.clock")

#: A difference between the wall clock's and the monotonic clock's progress beyond this (seconds) is a step.
STEP_SECONDS = 2.0


class WorkerClock:
    """``wall`` and ``monotonic``: the clocks read (injectable: tests step a wall clock without touching the
    machine's); ``on_step(seconds)``: called once per step found by ``check`` (the worker counts it)."""

    def __init__(self, wall: Callable[[], float] = time.time, monotonic: Callable[[], float] = time.monotonic,
                 *, step_seconds: float = STEP_SECONDS, on_step: Callable[[float], None] | None = None) -> None:
        self.wall, self.monotonic = wall, monotonic
        self.step_seconds = step_seconds
        self.on_step = on_step
        self._start_wall, self._start_mono = wall(), monotonic()
        self._seen_wall, self._seen_mono = self._start_wall, self._start_mono
        #: Steps found so far.
        self.steps = 0

    def now(self) -> float:
        """Unix seconds on the worker's clock (the wall clock at start, moved on monotonically)."""
        return self._start_wall + (self.monotonic() - self._start_mono)

    def from_wall(self, reading: float) -> float:
        """A time read from the wall clock a moment ago (a consumer's read time) on the worker's clock."""
        return reading - (self.wall() - self.now())

    def check(self) -> float | None:
        """The wall clock's step since the last check (seconds, + ahead), if beyond ``step_seconds``; logged
        and counted once (the clocks are compared anew from here on)."""
        wall, mono = self.wall(), self.monotonic()
        step = (wall - self._seen_wall) - (mono - self._seen_mono)
        self._seen_wall, self._seen_mono = wall, mono
        if abs(step) <= self.step_seconds:
            return None
        self.steps += 1
        log.warning("the wall clock stepped by %+.1f s (now %+.1f s from the worker's clock); detection keeps the "
                    "worker's monotonic clock", step, wall - self.now())
        if self.on_step is not None:
            self.on_step(step)
        return step
