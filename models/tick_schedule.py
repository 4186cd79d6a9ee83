"""The timer's schedule of jobs (issue 44): which jobs a tick visits, so that a tick costs O(jobs due), not O(jobs).

A job is visited when an event (or a setting) reached it since the last tick (``touch``), or when the time its
timer rules said they could next say anything has come (``put``, from each rule's ``next_due``). The schedule
knows no rule: the engine (models/engine.py) works out when; this file keeps the heap of those times.
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping
from typing import Any


def by_touch(job: Any) -> int:
    """A job's place in the order of last activity (``JobState.touched``): the order a tick visits jobs in."""
    return job.touched


class TickSchedule:
    """Jobs touched since the last tick, and a heap of (tick-clock time a job is next due, entry number, job).

    A job carries its own marks (``JobState.dirty``, ``JobState.slot``): whether it is on the touched list, and
    which heap entry is its valid one (a later ``put`` supersedes earlier entries)."""

    __slots__ = ("_touched", "_heap", "_entries")

    def __init__(self) -> None:
        self._touched: list = []
        self._heap: list[tuple[float, int, str]] = []
        self._entries = 0

    def touch(self, job: Any) -> None:
        """An event (or a setting) reached ``job``: the next tick visits it."""
        if not job.dirty:
            job.dirty = True
            self._touched.append(job)

    def take_touched(self) -> list:
        """The jobs touched since the last call, their marks cleared."""
        touched, self._touched = self._touched, []
        for job in touched:
            job.dirty = False
        return touched

    def due(self, now: float, jobs: Mapping[str, Any]) -> list:
        """The jobs of ``jobs`` the tick at ``now`` visits: touched since the last tick, or due by the heap, in the
        order of their last activity (a job evicted or forgotten since is not among them)."""
        visits: dict[int, Any] = {}
        for job in self.take_touched():
            if jobs.get(job.job) is job:  # not evicted or forgotten since
                visits[id(job)] = job
        heap = self._heap
        while heap and heap[0][0] <= now:
            _, slot, name = heapq.heappop(heap)
            job = jobs.get(name)
            if job is not None and job.slot == slot:
                visits[id(job)] = job
        return sorted(visits.values(), key=by_touch) if len(visits) > 1 else list(visits.values())

    def held(self) -> int:
        """Entries on the heap, valid and superseded (bounded: ``put`` drops the superseded past a margin)."""
        return len(self._heap)

    def put(self, job: Any, at: float, jobs: Mapping[str, Any]) -> None:
        """``job`` is next due at ``at`` (tick-clock time); its earlier entries no longer count."""
        self._entries += 1
        job.slot = self._entries
        heapq.heappush(self._heap, (at, job.slot, job.job))
        if len(self._heap) > 2 * len(jobs) + 1024:  # entries superseded by later visits: drop them
            self._heap = [e for e in self._heap if (j := jobs.get(e[2])) is not None and j.slot == e[1]]
            heapq.heapify(self._heap)
