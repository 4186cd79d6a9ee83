"""Communication slowdown: collective latency against the job's own healthy baseline.

A rank's collective duration includes waiting for the slowest peer, so a straggler would
inflate everyone's durations. The network's own share is what the **last rank to arrive**
sees: for each collective (process group, op, sequence number) the minimum duration over
ranks is its transfer time. Per (process group, op, message-size bucket) the detector keeps
a bounded baseline of those transfer times and fires ``comm_slowdown`` when the median of
the last ``window`` collectives stays ``threshold`` (default 30%) above the baseline median
for ``persistence`` consecutive collectives. It names ranks (and their nodes) only when their
own durations grew more than the other ranks' by the straggler rule's robust test: a network
slowdown slows every rank alike, and the node behind it comes from the job's telemetry
(models/fabric.py).
"""

from __future__ import annotations

import math
from collections import Counter, deque

import numpy as np

from .alerts import Alert, alert_id
from .events import CollectiveEvent


def size_bucket(nbytes: int | None) -> str:
    """Message sizes in powers-of-4 buckets: latency is only comparable within a bucket."""
    if not nbytes:
        return "any"
    exp = int(math.log(nbytes, 4))
    return f"{4 ** exp}B+"


#: Distinct (process group, op, size bucket) keys judged per job; a collective of one more is left out
#: and counted (``capped``): op names come from the ranks, and each key holds a baseline.
MAX_OP_KEYS = 1024


class _Key:
    __slots__ = ("pending", "transfer", "baseline", "rank_baseline", "rank_recent", "over", "firing", "last_seq")

    def __init__(self, baseline_size: int, window: int) -> None:
        self.pending: dict[int, dict[int, tuple[float, float, str | None]]] = {}  # seq -> rank -> (dur, ts, node)
        self.transfer: deque[float] = deque(maxlen=window)
        self.baseline: deque[float] = deque(maxlen=baseline_size)
        self.rank_baseline: dict[int, deque[float]] = {}
        self.rank_recent: dict[int, deque[float]] = {}
        self.over = 0
        self.firing: Alert | None = None
        self.last_seq = -1


class CommSlowdownDetector:
    """Per job: feed collective events; returns comm_slowdown alerts."""

    def __init__(self, *, job: str, threshold: float = 0.30, window: int = 20, persistence: int = 10,
                 baseline_size: int = 200, min_baseline: int = 30, max_pending: int = 8, clear_after: int = 20,
                 top_ranks: int = 3) -> None:
        self.job = job
        self.threshold = threshold
        self.window = window
        self.persistence = persistence
        self.baseline_size = baseline_size
        self.min_baseline = min_baseline
        self.max_pending = max_pending
        self.clear_after = clear_after
        self.top_ranks = top_ranks
        self._keys: dict[tuple[str, str, str], _Key] = {}
        self.capped: Counter[str] = Counter()
        self._clean: dict[tuple[str, str, str], int] = {}

    def update(self, event: CollectiveEvent) -> list[Alert]:
        key = (event.pg or "default", event.op, size_bucket(event.bytes))
        state = self._keys.get(key)
        if state is None:
            if len(self._keys) >= MAX_OP_KEYS:
                self.capped["op_names_per_job"] += 1
                return []
            state = self._keys[key] = _Key(self.baseline_size, self.window)
        if event.seq <= state.last_seq:
            return []  # a late copy of a collective already judged
        by_rank = state.pending.setdefault(event.seq, {})
        by_rank[event.rank] = (event.duration, event.ts, event.node)
        out: list[Alert] = []
        # A collective is judged once one two sequence numbers newer exists (every rank has
        # long finished it), or when too many are open (ranks that never report).
        newest = max(state.pending)
        for seq in sorted(state.pending):
            if seq > newest - 2 and len(state.pending) <= self.max_pending:
                break
            out.extend(self._judge(key, state, seq, state.pending.pop(seq)))
        return out

    def _judge(self, key, state: _Key, seq: int, ranks: dict[int, tuple[float, float, str | None]]) -> list[Alert]:
        state.last_seq = max(state.last_seq, seq)
        if len(ranks) < 2:
            return []
        transfer = min(d for d, _, _ in ranks.values())
        ts = max(t for _, t, _ in ranks.values())
        state.transfer.append(transfer)
        healthy = state.firing is None and state.over == 0
        for rank, (duration, _, _) in ranks.items():
            recent = state.rank_recent.setdefault(rank, deque(maxlen=self.window))
            recent.append(duration)
            if healthy:
                state.rank_baseline.setdefault(rank, deque(maxlen=self.baseline_size)).append(duration)
        if len(state.baseline) < self.min_baseline:
            state.baseline.append(transfer)
            return []
        base = float(np.median(state.baseline))
        recent = float(np.median(state.transfer))
        rel = recent / base - 1.0 if base > 0 else 0.0
        if rel >= self.threshold:
            state.over += 1
        else:
            state.over = 0
            if state.firing is None:
                state.baseline.append(transfer)
        if state.firing is None and state.over >= self.persistence:
            state.firing = self._fire(key, state, seq, ts, base, recent, rel, ranks)
            self._clean[key] = 0
            return [state.firing]
        if state.firing is not None:
            self._clean[key] = self._clean.get(key, 0) + 1 if rel < self.threshold / 2 else 0
            if self._clean[key] >= self.clear_after:
                alert, state.firing = state.firing, None
                return [alert.resolved(at=ts, summary=f"resolved: {key[1]} latency back to baseline "
                                                      f"({alert.summary})")]
        return []

    def _fire(self, key, state: _Key, seq: int, ts: float, base: float, recent: float, rel: float,
              ranks: dict[int, tuple[float, float, str | None]]) -> Alert:
        growth = []
        for rank, recent_durations in state.rank_recent.items():
            baseline = state.rank_baseline.get(rank)
            if baseline and len(baseline) >= 3:
                b = float(np.median(baseline))
                if b > 0:
                    growth.append((float(np.median(recent_durations)) / b - 1.0, rank))
        growth.sort(reverse=True)
        # A network slowdown slows every rank alike: the ranks that "grew most" are noise unless
        # their growth stands out from the others' by the straggler rule's robust test.
        top = [rank for g, rank in growth[: self.top_ranks] if _stands_out(g, [x for x, _ in growth])]
        nodes = tuple(dict.fromkeys(n for r in top if (n := ranks.get(r, (0, 0, None))[2])))
        pg, op, bucket = key
        summary = (f"communication slowdown: job {self.job} {op} on process group {pg} (messages {bucket}) "
                   f"takes {rel:.0%} longer than its baseline ({recent * 1e3:.2f} ms vs {base * 1e3:.2f} ms); "
                   + (f"slowed most: ranks {', '.join(map(str, top))}" if top else
                      "every rank slowed alike (a network or fabric cause)"))
        return Alert(
            id=alert_id(self.job, "comm_slowdown", pg, op, bucket, seq),
            status="firing", type="comm_slowdown",
            severity="critical" if rel >= 2 * self.threshold else "warning",
            job=self.job, ranks=tuple(top), nodes=nodes, starts_at=ts, summary=summary,
            evidence={"process_group": pg, "op": op, "size_bucket": bucket,
                      "baseline_transfer_seconds": round(base, 6), "recent_transfer_seconds": round(recent, 6),
                      "increase": round(rel, 4), "threshold": self.threshold, "detected_seq": seq,
                      "rank_growth": {str(r): round(g, 4) for g, r in growth[: self.top_ranks]},
                      "median_rank_growth": round(float(np.median([g for g, _ in growth])), 4) if growth else None})

    def open_alerts(self) -> list[Alert]:
        return [s.firing for s in self._keys.values() if s.firing is not None]

    def close(self, *, at: float, reason: str) -> list[Alert]:
        out = []
        for state in self._keys.values():
            if state.firing is not None:
                out.append(state.firing.resolved(at=at, summary=f"resolved ({reason}): {state.firing.summary}"))
                state.firing = None
        return out


def _stands_out(growth: float, all_growth: list[float], *, ratio: float = 1.10, z: float = 3.5,
                spread_floor: float = 0.02) -> bool:
    """The straggler rule on ``1 + growth`` against every rank's: ``ratio`` and robust ``z`` both met."""
    if len(all_growth) < 4:
        return False
    values = np.asarray(all_growth) + 1.0
    med = float(np.median(values))
    if med <= 0:
        return False
    spread = max(float(np.median(np.abs(values - med))) / 0.6744897501960817, spread_floor * med)
    return (1.0 + growth) / med >= ratio and (1.0 + growth - med) / spread >= z
