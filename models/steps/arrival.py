"""Collective arrival from ``collective`` events, for steps that carry neither compute nor comm time.

In a synchronous collective every rank waits for the last one to arrive, so a rank's own
collective durations add up to (wait for the slowest rank) + (transfer): the straggler
arrives last and waits least. A rank's time in collectives during a step is therefore its
``comm_time``, and ``step_time - comm_time`` is its arrival (the straggler rule's
``arrival`` signal). :class:`CollectiveArrival` sums, per rank and step, the durations of
the rank's own collective events, each measured on that rank's own clock (``duration``):
timestamps of two hosts are never compared.

Collectives that carry ``step`` are summed into that step. Those that carry only ``seq``
are placed by time **on the rank's own clock**: a collective that completed at ``ts``
belongs to the rank's first step that ended at or after ``ts`` (the rank's own step events
give those ends). A step is given comm times only when every rank has the same number of
collectives in it (a lost collective event would make its rank look late).
"""

from __future__ import annotations

from collections import Counter, deque

import numpy as np

from ..wire.events import CollectiveEvent

#: Distinct (process group, op) names counted per job (the dominant op is one of the first ones).
MAX_OPS = 1024


class CollectiveArrival:
    """Per job: each rank's time in collectives per step. Bounded: ``max_steps`` steps,
    ``max_pending`` unplaced collectives and ``step_history`` step ends per rank."""

    def __init__(self, *, max_steps: int = 64, max_pending: int = 256, step_history: int = 16) -> None:
        self.max_steps = max_steps
        self.max_pending = max_pending
        self.step_history = step_history
        self.active = False  # any collective seen: only then do step ends need keeping
        self._by_step: dict[int, dict[int, list[float]]] = {}  # step -> rank -> [seconds, count]
        self._pending: dict[int, deque[tuple[float, float]]] = {}  # rank -> (ts, duration), seq only
        self._ends: dict[int, deque[tuple[int, float]]] = {}  # rank -> (step, ts) of its recent step ends
        self._ops: Counter[tuple[str, str]] = Counter()

    def observe_collective(self, event: CollectiveEvent) -> None:
        self.active = True
        op = (event.pg or "default", event.op)
        if op in self._ops or len(self._ops) < MAX_OPS:  # op names come from the ranks: bounded
            self._ops[op] += 1
        if event.step is not None:
            self._add(event.step, event.rank, event.duration)
            return
        ends = self._ends.get(event.rank)
        if ends and event.ts <= ends[-1][1]:
            # Late: the rank already ended the step it belongs to (the first one ending at or after it).
            for step, end in ends:
                if event.ts <= end:
                    self._add(step, event.rank, event.duration)
                    return
            return
        pending = self._pending.get(event.rank)
        if pending is None:
            pending = self._pending[event.rank] = deque(maxlen=self.max_pending)
        pending.append((event.ts, event.duration))

    def observe_step(self, rank: int, step: int, ts: float) -> None:
        """A rank's step ``step`` ended at ``ts`` (its own clock)."""
        ends = self._ends.get(rank)
        if ends is None:
            ends = self._ends[rank] = deque(maxlen=self.step_history)
        if not ends or step > ends[-1][0]:
            ends.append((step, ts))
        pending = self._pending.get(rank)
        while pending and pending[0][0] <= ts:
            _, duration = pending.popleft()
            self._add(step, rank, duration)

    def observe_steps(self, ranks, steps, ts) -> None:
        for rank, step, t in zip(ranks, steps, ts):
            self.observe_step(rank, step, t)

    def _add(self, step: int, rank: int, duration: float) -> None:
        ranks = self._by_step.get(step)
        if ranks is None:
            if len(self._by_step) >= self.max_steps:
                del self._by_step[min(self._by_step)]
            ranks = self._by_step[step] = {}
        cell = ranks.get(rank)
        if cell is None:
            ranks[rank] = [duration, 1]
        else:
            cell[0] += duration
            cell[1] += 1

    def comm_times(self, step: int, ranks: np.ndarray) -> np.ndarray | None:
        """Each of ``ranks``' seconds in collectives during ``step``, or None unless all have the same count."""
        cells = self._by_step.get(step)  # kept: other peer groups of the same step read it too
        if cells is None:
            return None
        try:
            got = [cells[int(r)] for r in ranks]
        except KeyError:
            return None
        if len({count for _, count in got}) != 1:
            return None
        return np.fromiter((seconds for seconds, _ in got), dtype=float, count=len(got))

    def dominant(self) -> tuple[str, str] | None:
        """The (process group, op) most collectives came from: what the evidence names."""
        return self._ops.most_common(1)[0][0] if self._ops else None
