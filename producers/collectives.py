"""What the rank monitor records of collectives: sequence numbers per process group, and the
collective time of the current step.

:class:`CollectiveRecorder` is a part of :class:`~stepwatch.producers.monitor.RankMonitor`
(its state is set up in ``RankMonitor.__init__``: ``_comm``, ``_comm_lock``, ``seq_started``,
``seq_completed``, ``default_pg``). ``collective_end`` is safe from any thread (torch hooks,
CUDA-event pollers); the step timer (producers/step_timer.py) takes the step's ``_StepComm``
at ``end_step`` and turns it into ``comm_time``.
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from typing import Iterator

__all__ = ["DEFAULT_PG", "CollectiveRecorder"]

#: Name of the default process group in sequence numbers (heartbeats report this one).
DEFAULT_PG = "default"

_perf = time.perf_counter
_wall = time.time


class _StepComm:
    """Collective time recorded during one step (filled from hook threads, read at end_step)."""

    __slots__ = ("intervals", "durations", "count", "total", "max", "last_seq")

    def __init__(self) -> None:
        self.intervals: list[tuple[float, float]] = []  # host perf_counter (start, end)
        self.durations: list[float] = []  # device-timed durations without a host interval
        self.count = 0
        self.total = 0.0
        self.max = 0.0
        self.last_seq: int | None = None


def _union_length(intervals: list[tuple[float, float]], lo: float, hi: float) -> float:
    """Length of the union of intervals, clipped to [lo, hi]."""
    if not intervals:
        return 0.0
    total = 0.0
    cur_s = cur_e = None
    for s, e in sorted(intervals):
        s = max(s, lo)
        e = min(e, hi)
        if e <= s:
            continue
        if cur_e is None or s > cur_e:
            if cur_e is not None:
                total += cur_e - cur_s
            cur_s, cur_e = s, e
        elif e > cur_e:
            cur_e = e
    if cur_e is not None:
        total += cur_e - cur_s
    return total

class CollectiveRecorder:
    """Collective marks of :class:`~stepwatch.producers.monitor.RankMonitor` (a mixin: no state of its own)."""

    def collective_begin(self, pg: str | None = None) -> int:
        """Number a collective being issued on process group ``pg``; returns its sequence number."""
        pg = pg or self.default_pg
        seq = self.seq_started.get(pg, 0) + 1
        self.seq_started[pg] = seq
        return seq

    def collective_end(self, seq: int, *, op: str = "allreduce", pg: str | None = None,
                       start: float | None = None, end: float | None = None, duration: float | None = None,
                       nbytes: int | None = None, start_ts: float | None = None) -> None:
        """Record that collective ``seq`` of ``pg`` completed.

        ``start``/``end`` are ``time.perf_counter()`` readings (host wall clock); without them
        ``duration`` (seconds, e.g. from CUDA events) is used. Safe from any thread.
        """
        if not self.enabled:
            return
        try:
            pg = pg or self.default_pg
            if end is None and start is not None:
                end = _perf()
            if duration is None:
                duration = (end - start) if (start is not None and end is not None) else 0.0
            duration = max(0.0, float(duration))
            with self._comm_lock:
                if seq > self.seq_completed.get(pg, 0):
                    self.seq_completed[pg] = seq
                comm = self._comm
                if start is not None and end is not None:
                    comm.intervals.append((start, end))
                else:
                    comm.durations.append(duration)
                comm.count += 1
                comm.total += duration
                if duration > comm.max:
                    comm.max = duration
                if pg == self.default_pg and seq > 0:
                    comm.last_seq = seq
            # seq 0: point-to-point (timed, not numbered: members of a group do different numbers of them).
            if self.config.collective_events and seq > 0:
                event = {"v": 1, "kind": "collective", **self._rank_base, "seq": seq, "op": op, "ts": _wall(),
                         "duration": duration}
                if pg != DEFAULT_PG:
                    event["pg"] = pg
                step = self._step_no if self._step_t0 is not None else self.last_step
                if step is not None:
                    event["step"] = step
                if nbytes is not None:
                    event["bytes"] = int(nbytes)
                if start_ts is not None:
                    event["start_ts"] = start_ts
                elif start is not None:
                    event["start_ts"] = max(0.0, _wall() - (_perf() - start))
                self._enqueue(event)
        except Exception as exc:
            self._error("collective_end", exc)

    @contextmanager
    def collective(self, op: str = "allreduce", *, pg: str | None = None,
                   nbytes: int | None = None) -> Iterator[int]:
        """Time a blocking collective on the host clock: ``with monitor.collective("barrier"): ...``."""
        seq = self.collective_begin(pg)
        start = _perf()
        try:
            yield seq
        finally:
            self.collective_end(seq, op=op, pg=pg, start=start, end=_perf(), nbytes=nbytes)
