"""What the rank monitor records of collectives: sequence numbers per process group, and the
collective time of the current step.

:class:`CollectiveRecorder` is one part of :class:`~stepwatch.producers.monitor.RankMonitor`,
with its own state (the numbers, the step's :class:`StepComm`, the lock between them). It is
written from any thread (torch hooks, CUDA-event pollers, producers/pg_tracker.py) and read by
the step timer (``take_step`` at each step's end) and the heartbeats (``heartbeat_fields``).
What it needs from the other parts is handed to it: ``emit`` (queue an event), ``on_error``
(count an error), ``event_step`` (the step timer's step number); ``charge`` and ``take_step``
are given the step's start by their caller.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable
from contextlib import contextmanager
from typing import Any, Callable, Iterator

__all__ = ["DEFAULT_PG", "CollectiveRecorder", "StepComm"]

#: Name of the default process group in sequence numbers (heartbeats report this one).
DEFAULT_PG = "default"

_perf = time.perf_counter
_wall = time.time


class StepComm:
    """Collective time recorded during one step (filled from hook threads, read at the step's end)."""

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
    """Sequence numbers per process group and the current step's collective time.

    Parameters
    ----------
    enabled
        False: ``collective_end`` records nothing (``collective_begin`` still numbers: it is one dict update).
    rank_base
        Fields every event of this rank carries (job, rank, node).
    emit
        Queues one event (the monitor's transport); called from the recording thread.
    on_error
        Counts an error ``(where, exc)``; a broken mark never raises into training.
    event_step
        The step a collective event belongs to (the current one, else the last completed).
    collective_events
        Also queue one ``collective`` event per numbered call (off by default: the step event
        carries a bounded summary).

    The monitor exposes ``seq_started``, ``seq_completed`` and ``pg_ranks`` as the same dicts.

    Example (on its own: the monitor passes its queue, error counter and step timer):

    >>> events = []
    >>> rec = CollectiveRecorder(enabled=True, rank_base={"job": "j", "rank": 0}, emit=events.append,
    ...                          on_error=print, event_step=lambda: 7, collective_events=True)
    >>> seq = rec.collective_begin()
    >>> rec.collective_end(seq, op="allreduce", start=10.0, end=10.25)
    >>> rec.seq_started, rec.seq_completed
    ({'default': 1}, {'default': 1})
    >>> events[0]["kind"], events[0]["seq"], events[0]["step"], events[0]["duration"]
    ('collective', 1, 7, 0.25)
    >>> comm = rec.take_step()           # at the step's end: this step's calls, and a fresh record
    >>> comm.count, comm.intervals, rec.take_step().count
    (1, [(10.0, 10.25)], 0)
    >>> rec.heartbeat_fields()
    {'seq_started': 1, 'seq_completed': 1, 'pgs': {'default': {'started': 1, 'completed': 1}}}
    """

    def __init__(self, *, enabled: bool, rank_base: dict[str, Any], emit: Callable[[dict], None],
                 on_error: Callable[[str, BaseException], None], event_step: Callable[[], int | None],
                 collective_events: bool = False) -> None:
        self.enabled = enabled
        self.default_pg = DEFAULT_PG
        self.collective_events = collective_events
        self._rank_base = rank_base
        self._emit = emit
        self._error = on_error
        self._event_step = event_step
        #: Last number issued / completed per process group (heartbeats report them).
        self.seq_started: dict[str, int] = {}
        self.seq_completed: dict[str, int] = {}
        #: Global ranks of each process group but the default one (heartbeats' ``pgs``; producers/pg_tracker.py).
        self.pg_ranks: dict[str, list[int]] = {}
        self._lock = threading.Lock()
        self._step = StepComm()

    # -- marks (any thread) ---------------------------------------------------------------------

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
            with self._lock:
                if seq > self.seq_completed.get(pg, 0):
                    self.seq_completed[pg] = seq
                comm = self._step
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
            if self.collective_events and seq > 0:
                event = {"v": 1, "kind": "collective", **self._rank_base, "seq": seq, "op": op, "ts": _wall(),
                         "duration": duration}
                if pg != DEFAULT_PG:
                    event["pg"] = pg
                step = self._event_step()
                if step is not None:
                    event["step"] = step
                if nbytes is not None:
                    event["bytes"] = int(nbytes)
                if start_ts is not None:
                    event["start_ts"] = start_ts
                elif start is not None:
                    event["start_ts"] = max(0.0, _wall() - (_perf() - start))
                self._emit(event)
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

    def completed(self, seq: int, pg: str) -> None:
        """Move ``pg``'s completed number to ``seq`` (a call whose time is unknown or not charged)."""
        with self._lock:
            if seq > self.seq_completed.get(pg, 0):
                self.seq_completed[pg] = seq

    def charge(self, calls: Iterable[tuple[int, Any, str, float, float]], since: float) -> None:
        """Charge ended calls ``(seq, op, pg, start, end)`` (host clock, numbers already moved) to the
        step in progress, which began at ``since``; calls that ended before it are left out."""
        default_pg = self.default_pg
        with self._lock:
            comm = self._step
            append = comm.intervals.append
            for seq, _op, name, start, end in calls:
                if end < since:
                    continue  # ended before this step began
                append((start, end))
                duration = end - start
                comm.count += 1
                comm.total += duration
                if duration > comm.max:
                    comm.max = duration
                if seq and name == default_pg:
                    comm.last_seq = seq

    # -- readers ----------------------------------------------------------------------------------

    def take_step(self) -> StepComm:
        """The collective time recorded since the last call (the step that just ended); starts a new one."""
        with self._lock:
            comm = self._step
            self._step = StepComm()
        return comm

    def heartbeat_fields(self) -> dict[str, Any]:
        """The sequence numbers a heartbeat carries (docs/events.md): the default group's, and every group's
        (``pgs``, with ``ranks`` for all but the default group); empty before any collective."""
        fields: dict[str, Any] = {}
        started_by_pg = self.seq_started
        if not started_by_pg:
            return fields
        completed_by_pg = self.seq_completed
        pg = self.default_pg
        if pg in started_by_pg:
            fields["seq_started"] = started_by_pg[pg]
            fields["seq_completed"] = completed_by_pg.get(pg, 0)
        pgs = {}
        for name, started in list(started_by_pg.items()):
            entry = {"started": started, "completed": completed_by_pg.get(name, 0)}
            ranks = self.pg_ranks.get(name)
            if ranks is not None and name != DEFAULT_PG:
                entry["ranks"] = ranks
            pgs[name] = entry
        fields["pgs"] = pgs
        return fields
