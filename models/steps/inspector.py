"""NCCL Inspector windows of a job with no stepwatch code, judged by the existing straggler and comm rules.

The node agents (producers/nccl_inspector.py) send, per rank, communicator and collective
type, one ``nccl_window`` event per window of ``window_size`` consecutive ``coll_sn`` (the
range ``[window * window_size, (window + 1) * window_size)``). Each agent sizes its windows
alone (powers of two, by the collective rate), so ranks of one communicator may use different
sizes, and a rank may change its size: the judged window is the union of the overlapping
windows of all ranks (with nested powers of two, the largest window any rank used there),
each rank's smaller windows in it summed (execution times and counts). The verdict then does
not depend on which sizes the agents chose, only on the largest. Ranks dump on their own
schedule (and a default, non-verbose log carries only the dump's time), so
:class:`InspectorJudge` holds a window until **every** rank of the communicator reported past
its end, then judges it once: a rank whose record comes one dump later is not slower, only
later on the wire.

Arrival skew without comparing clocks: ``coll_exec_time_us`` includes the wait for the
slowest peer, so the last rank to arrive has the shortest execution time for the same
``coll_sn``. Over a window, rank r's lateness is ``max_sum - sum_r`` (how much less it waited
than the rank that waited most). The window becomes one step of the straggler rule
(models/steps/straggler.py) with ``step_time = max_sum + median_sum`` and ``comm_time = sum_r``, so
its ``arrival`` signal is ``lateness_r + median_sum``: a rank is slow when it arrives later by
at least ``ratio_threshold - 1`` of the typical time in the window's collectives (10% by
default), with the rule's robust z, k-of-n and coincidence tests unchanged. The window's
mean execution time per rank also feeds the comm-baseline rule (models/jobhealth/comm.py) as one
collective (``seq`` = the judged window's number): its minimum over ranks is the transfer time.

Both sources at once: a job that also sends the callback's ``step`` events is judged from
those; its Inspector windows are then not judged again (counted in ``skipped_callback``).
Bounded: at most ``max_open`` events held per rank and (communicator, op) (beyond, the oldest window is
given up: ``incomplete``), no more ranks than ``n_ranks``, ``max_keys`` keys per job.
"""

from __future__ import annotations

import dataclasses
import heapq
from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from ..alerts import Alert
from .assembly import GroupStep
from ..jobhealth.comm import CommSlowdownDetector
from ..wire.events import CollectiveEvent
from ..wire.nccl_events import NcclWindowEvent
from .robust import median
from .straggler import StragglerDetector, StragglerSettings

SOURCE = "nccl_inspector"
#: Ranks of one communicator the judge follows (a bad ``n_ranks`` must not grow its state).
MAX_RANKS = 1 << 16


@dataclass(frozen=True, slots=True)
class WindowVerdict:
    """One judged window (for tests and status views): its ``coll_sn`` range, the ranks and their lateness (s)."""

    comm: str
    op: str
    step: int  # judged windows of the key before this one
    start: int  # coll_sn range [start, end)
    end: int
    ranks: tuple[int, ...]
    lateness: tuple[float, ...]


@dataclass(frozen=True, slots=True)
class _Part:
    """One rank's event, as much of it as judging needs."""

    start: int
    end: int
    exec_sum: float
    count: int
    ts: float
    node: str | None
    bytes: int | None


@dataclass
class _Key:
    n_ranks: int
    pending: dict[int, list[_Part]] = field(default_factory=dict)  # rank -> its events not judged yet, in order
    progress: dict[int, int] = field(default_factory=dict)  # rank -> end of its latest event
    heap: list[tuple[int, int]] = field(default_factory=list)  # (progress, rank), stale entries popped lazily
    judged_end: int = 0  # coll_sn below this are judged (or given up)
    steps: int = 0


class InspectorJudge:
    """Per job: feed ``nccl_window`` events; returns straggler (and comm_slowdown) alerts."""

    def __init__(self, *, job: str, straggler: StragglerSettings | None = None,
                 comm: CommSlowdownDetector | None = None, max_open: int = 128, max_keys: int = 256) -> None:
        self.job = job
        self.straggler = straggler or StragglerSettings()
        self.comm = comm
        self.max_open = max_open  # events held per rank and key
        self.max_keys = max_keys
        self._keys: dict[tuple[str, str], _Key] = {}
        self._detectors: dict[tuple[str, str], StragglerDetector] = {}
        self.counts: Counter[str] = Counter()
        self.last_verdict: WindowVerdict | None = None

    def update(self, event: NcclWindowEvent, *, callback_steps: bool = False) -> list[Alert]:
        if callback_steps:
            self.counts["skipped_callback"] += 1  # the callback's steps already judge this job
            return []
        key = (event.comm, event.op)
        st = self._keys.get(key)
        if st is None:
            if len(self._keys) >= self.max_keys:
                self.counts["dropped_keys"] += 1
                return []
            st = self._keys[key] = _Key(event.n_ranks)
        st.n_ranks = event.n_ranks
        if event.rank not in st.progress and len(st.progress) >= min(st.n_ranks, MAX_RANKS):
            self.counts["extra_ranks"] += 1  # more ranks than the communicator has: not comparable
            return []
        start = event.window * event.window_size
        end = start + event.window_size
        if end > st.progress.get(event.rank, -1):
            st.progress[event.rank] = end
            heapq.heappush(st.heap, (end, event.rank))
            if len(st.heap) > 2 * len(st.progress) + 64:  # stale entries (a rank's older ends): rebuilt, bounded
                st.heap = [(p, r) for r, p in st.progress.items()]
                heapq.heapify(st.heap)
        if start < st.judged_end:
            self.counts["late"] += 1  # a copy of (or a rank rejoining) a window already judged
            return []
        parts = st.pending.setdefault(event.rank, [])
        if parts and start < parts[-1].end:
            self.counts["late"] += 1  # overlaps what this rank already sent
            return []
        parts.append(_Part(start, end, event.exec_sum, event.count, event.ts, event.node, event.bytes))
        out: list[Alert] = []
        while len(parts) > self.max_open:  # a rank that never reports: the oldest windows go
            unit = self._unit(st)
            self._take(st, unit)
            st.steps += 1
            self.counts["incomplete"] += 1
        out.extend(self._judge_ready(key, st))
        return out

    def _horizon(self, st: _Key) -> int:
        """coll_sn every rank has reported up to: nothing will come below it."""
        if len(st.progress) < st.n_ranks:
            return -1
        while st.heap and st.progress.get(st.heap[0][1]) != st.heap[0][0]:
            heapq.heappop(st.heap)
        return st.heap[0][0] if st.heap else -1

    @staticmethod
    def _unit(st: _Key) -> tuple[int, int]:
        """The first window to judge: the union of the pending windows that overlap, across ranks. Sizes are powers
        of two (nested), so this is the largest window any rank used there; other sizes still give one range."""
        a = min(p[0].start for p in st.pending.values() if p)
        b, grew = a + 1, True
        taken = dict.fromkeys(st.pending, 0)
        while grew:
            grew = False
            for rank, parts in st.pending.items():
                i = taken[rank]
                while i < len(parts) and parts[i].start < b:
                    b, i, grew = max(b, parts[i].end), i + 1, True
                taken[rank] = i
        return a, b

    @staticmethod
    def _take(st: _Key, unit: tuple[int, int]) -> dict[int, list[_Part]]:
        taken: dict[int, list[_Part]] = {}
        for rank, parts in st.pending.items():
            i = 0
            while i < len(parts) and parts[i].start < unit[1]:
                i += 1
            if i:
                taken[rank], parts[:] = parts[:i], parts[i:]
        st.judged_end = unit[1]
        return taken

    def _judge_ready(self, key: tuple[str, str], st: _Key) -> list[Alert]:
        out: list[Alert] = []
        horizon = self._horizon(st)
        while any(st.pending.values()):
            unit = self._unit(st)
            if unit[1] > horizon:
                break
            taken = self._take(st, unit)
            step, st.steps = st.steps, st.steps + 1
            if len(taken) < st.n_ranks:
                self.counts["incomplete"] += 1  # a rank logged nothing there
                continue
            out.extend(self._judge(key, step, unit, taken))
        return out

    def _judge(self, key: tuple[str, str], step_no: int, unit: tuple[int, int],
               by_rank: dict[int, list[_Part]]) -> list[Alert]:
        counts = {sum(p.count for p in parts) for parts in by_rank.values()}
        if len(counts) != 1:
            self.counts["count_mismatch"] += 1  # a rank dropped records (dump_stats): not comparable
            return []
        self.counts["judged"] += 1
        ranks = np.array(sorted(by_rank), dtype=np.int64)
        parts = [by_rank[int(r)] for r in ranks]
        sums = np.fromiter((sum(p.exec_sum for p in ps) for ps in parts), dtype=float, count=len(parts))
        top, mid = float(sums.max()), median(sums)
        self.last_verdict = WindowVerdict(key[0], key[1], step_no, unit[0], unit[1], tuple(int(r) for r in ranks),
                                          tuple(float(top - s) for s in sums))
        nan = np.full(len(parts), np.nan)
        step = GroupStep(job=self.job, group=f"nccl:{key[0]}:{key[1]}", step=step_no,
                         ts=max(p.ts for ps in parts for p in ps), ranks=ranks,
                         step_time=np.full(len(parts), top + mid), compute_time=nan.copy(), comm_time=sums,
                         data_time=nan.copy(), tokens=nan.copy(), nodes=tuple(ps[-1].node for ps in parts),
                         phase="train", comm_source=SOURCE, comm_ops=key)
        detector = self._detectors.get(key)
        if detector is None:
            detector = self._detectors[key] = StragglerDetector.from_settings(self.straggler, job=self.job,
                                                                               group=step.group)
        out = [_sourced(a) for a in detector.update(step)]
        if self.comm is not None:
            count = next(iter(counts))
            for rank, ps, total in zip(ranks, parts, sums):
                out.extend(_sourced(a) for a in self.comm.update(CollectiveEvent(
                    job=self.job, rank=int(rank), seq=step_no, op=key[1], ts=max(p.ts for p in ps),
                    duration=float(total) / count, node=ps[-1].node, pg=key[0], bytes=ps[0].bytes)))
        return out

    def held(self) -> int:
        """Events held, waiting for their window's other ranks (bounded: ``max_open`` per rank and key)."""
        return sum(len(parts) for st in self._keys.values() for parts in st.pending.values())

    def reconfigure(self, settings: StragglerSettings, values: dict) -> None:
        """Settings changed at run time (``stepwatch config set straggler.*``)."""
        self.straggler = settings
        for detector in self._detectors.values():
            detector.reconfigure(**values)

    def open_alerts(self) -> list[Alert]:
        return [a for d in self._detectors.values() for a in d.firing.values()]

    def close(self, *, at: float, reason: str) -> list[Alert]:
        out = []
        for d in self._detectors.values():
            out.extend(_sourced(a) for a in d.close_all(at=at, reason=reason))
        return out


def _sourced(alert: Alert) -> Alert:
    """Say in the alert which source its signal came from (``evidence.source``)."""
    if alert.evidence.get("source") == SOURCE:
        return alert
    return dataclasses.replace(alert, evidence={**alert.evidence, "source": SOURCE})
