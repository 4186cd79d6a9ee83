"""NCCL Inspector windows of a job with no stepwatch code, judged by the existing straggler and comm rules.

The node agents (producers/nccl_inspector.py) send, per rank, communicator and collective
type, one ``nccl_window`` event per window of ``window_size`` consecutive ``coll_sn``. Ranks
dump on their own schedule (and a default, non-verbose log carries only the dump's time), so
:class:`InspectorJudge` holds each window (communicator, op, window) until **every** rank of
the communicator reported it, then judges it once: a rank whose record comes one dump later
is not slower, only later on the wire.

Arrival skew without comparing clocks: ``coll_exec_time_us`` includes the wait for the
slowest peer, so the last rank to arrive has the shortest execution time for the same
``coll_sn``. Over a window, rank r's lateness is ``max_sum - sum_r`` (how much less it waited
than the rank that waited most). The window becomes one step of the straggler rule
(models/steps/straggler.py) with ``step_time = max_sum + median_sum`` and ``comm_time = sum_r``, so
its ``arrival`` signal is ``lateness_r + median_sum``: a rank is slow when it arrives later by
at least ``ratio_threshold - 1`` of the typical time in the window's collectives (10% by
default), with the rule's robust z, k-of-n and coincidence tests unchanged. The window's
mean execution time per rank also feeds the comm-baseline rule (models/jobhealth/comm.py) as one
collective (``seq`` = window): its minimum over ranks is the transfer time.

Both sources at once: a job that also sends the callback's ``step`` events is judged from
those; its Inspector windows are then not judged again (counted in ``skipped_callback``).
Bounded: at most ``max_open`` open windows per (communicator, op), ``max_keys`` keys per job.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from dataclasses import dataclass

import numpy as np

from ..alerts import Alert
from .assembly import GroupStep
from ..jobhealth.comm import CommSlowdownDetector
from ..wire.events import CollectiveEvent
from ..wire.nccl_events import NcclWindowEvent
from .straggler import StragglerDetector, StragglerSettings, median

SOURCE = "nccl_inspector"


@dataclass(frozen=True, slots=True)
class WindowVerdict:
    """One judged window (for tests and status views): the ranks, their lateness (seconds) and counts."""

    comm: str
    op: str
    window: int
    ranks: tuple[int, ...]
    lateness: tuple[float, ...]


class InspectorJudge:
    """Per job: feed ``nccl_window`` events; returns straggler (and comm_slowdown) alerts."""

    def __init__(self, *, job: str, straggler: StragglerSettings | None = None,
                 comm: CommSlowdownDetector | None = None, max_open: int = 16, max_keys: int = 256) -> None:
        self.job = job
        self.straggler = straggler or StragglerSettings()
        self.comm = comm
        self.max_open = max_open
        self.max_keys = max_keys
        self._open: dict[tuple[str, str], dict[int, dict[int, NcclWindowEvent]]] = {}
        self._judged: dict[tuple[str, str], int] = {}  # key -> newest judged window
        self._detectors: dict[tuple[str, str], StragglerDetector] = {}
        self.counts: Counter[str] = Counter()
        self.last_verdict: WindowVerdict | None = None

    def update(self, event: NcclWindowEvent, *, callback_steps: bool = False) -> list[Alert]:
        if callback_steps:
            self.counts["skipped_callback"] += 1  # the callback's steps already judge this job
            return []
        key = (event.comm, event.op)
        if key not in self._open:
            if len(self._open) >= self.max_keys:
                self.counts["dropped_keys"] += 1
                return []
            self._open[key] = {}
        if event.window <= self._judged.get(key, -1):
            self.counts["late"] += 1  # a copy of (or a rank rejoining) a window already judged
            return []
        windows = self._open[key]
        windows.setdefault(event.window, {})[event.rank] = event
        out: list[Alert] = []
        while len(windows) > self.max_open:  # a rank that never reports: its oldest windows go
            oldest = min(windows)
            del windows[oldest]
            self._judged[key] = max(self._judged.get(key, -1), oldest)
            self.counts["incomplete"] += 1
        for window in sorted(windows):
            ranks = windows[window]
            if len(ranks) < event.n_ranks:
                continue
            del windows[window]
            self._judged[key] = max(self._judged.get(key, -1), window)
            out.extend(self._judge(key, window, ranks))
        return out

    def _judge(self, key: tuple[str, str], window: int, by_rank: dict[int, NcclWindowEvent]) -> list[Alert]:
        counts = {e.count for e in by_rank.values()}
        if len(counts) != 1:
            self.counts["count_mismatch"] += 1  # a rank dropped records (dump_stats): not comparable
            return []
        self.counts["judged"] += 1
        ranks = np.array(sorted(by_rank), dtype=np.int64)
        events = [by_rank[int(r)] for r in ranks]
        sums = np.fromiter((e.exec_sum for e in events), dtype=float, count=len(events))
        top, mid = float(sums.max()), median(sums)
        self.last_verdict = WindowVerdict(key[0], key[1], window, tuple(int(r) for r in ranks),
                                          tuple(float(top - s) for s in sums))
        nan = np.full(len(events), np.nan)
        step = GroupStep(job=self.job, group=f"nccl:{key[0]}:{key[1]}", step=window, ts=max(e.ts for e in events),
                         ranks=ranks, step_time=np.full(len(events), top + mid), compute_time=nan.copy(),
                         comm_time=sums, data_time=nan.copy(), tokens=nan.copy(),
                         nodes=tuple(e.node for e in events), phase="train", comm_source=SOURCE, comm_ops=key)
        detector = self._detectors.get(key)
        if detector is None:
            detector = self._detectors[key] = StragglerDetector.from_settings(self.straggler, job=self.job,
                                                                               group=step.group)
        out = [_sourced(a) for a in detector.update(step)]
        if self.comm is not None:
            for e in events:
                out.extend(_sourced(a) for a in self.comm.update(CollectiveEvent(
                    job=self.job, rank=e.rank, seq=window, op=e.op, ts=e.ts, duration=e.exec_sum / e.count,
                    node=e.node, pg=e.comm, bytes=e.bytes)))
        return out

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
