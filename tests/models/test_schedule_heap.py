"""The timer's schedule on its own (models/tick_schedule.py): what a tick visits is exactly the jobs touched since
the last tick or whose latest due time has come, each once, in the order of last activity; the heap stays bounded.
Generated variants: random touches, due times, evictions and ticks, against a plain reference."""

from __future__ import annotations

import random
from dataclasses import dataclass

import pytest

from stepwatch.models.tick_schedule import TickSchedule


@dataclass(eq=False)
class _Job:
    job: str
    touched: int = 0
    dirty: bool = False
    slot: int = 0


@pytest.mark.parametrize("seed", range(6))
def test_due_is_touched_or_come_each_once_in_activity_order(seed):
    rng = random.Random(seed)
    schedule = TickSchedule()
    jobs: dict[str, _Job] = {}
    touched: set[str] = set()
    next_due: dict[str, float] = {}  # the reference: each job's latest due time
    stamp = 0
    now = 0.0
    for _ in range(400):
        roll = rng.random()
        name = f"j{rng.randrange(30)}"
        if roll < 0.4:  # an event: the job (new or not) is touched and moves to the back of the activity order
            job = jobs.setdefault(name, _Job(name))
            stamp += 1
            job.touched = stamp
            schedule.touch(job)
            touched.add(name)
        elif roll < 0.5 and name in jobs:  # evicted: never visited again
            del jobs[name]
            touched.discard(name)
            next_due.pop(name, None)
        else:  # a tick
            now += rng.choice((0.5, 1.0, 5.0))
            visits = schedule.due(now, jobs)
            expected = sorted({*touched, *(n for n, at in next_due.items() if at <= now)}, key=lambda n: jobs[n].touched)
            assert [j.job for j in visits] == expected
            touched.clear()
            for job in visits:
                next_due.pop(job.job, None)
                at = now + rng.choice((0.5, 3.0, 60.0, float("inf")))
                schedule.put(job, at, jobs)
                next_due[job.job] = at
        assert schedule.held() <= 2 * len(jobs) + 1025  # superseded entries are dropped
