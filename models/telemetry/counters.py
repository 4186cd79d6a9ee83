"""Cumulative counters: deltas through wraps and resets, rates, and a bounded baseline of recent values.

A cumulative counter that goes backwards from the top of a 32- or 64-bit range wrapped around;
any other decrease is a reset (driver reload, ``perfquery -R``) and only restarts the counter's
history (:func:`counter_delta`). Node telemetry (models/telemetry/telemetry_tracker.py), host signals
(models/telemetry/host.py) and the job-wide fabric comparison (models/telemetry/fabric.py) build on these.
"""

from __future__ import annotations

import math
from collections import deque


def counter_delta(prev: int, cur: int) -> tuple[int | None, str]:
    """Increase of a cumulative counter from ``prev`` to ``cur``: ``(delta, how)``.

    ``how`` is ``ok``, ``wrap`` (went past the top of a 32- or 64-bit range: the delta
    counts through the wrap) or ``reset`` (any other decrease: the delta is unknown, None).
    """
    if cur >= prev:
        return cur - prev, "ok"
    for bits in (32, 64):
        top = 1 << bits
        # Wrapped: the old value was in the top quarter of the range, the new one in the bottom.
        if top * 3 // 4 <= prev < top and cur < top // 4:
            return top - prev + cur, "wrap"
    return None, "reset"


class Baseline:
    """The recent values of one rate (bounded), with a cached median."""

    __slots__ = ("values", "min_samples", "_median", "_low", "_stale")

    def __init__(self, size: int, min_samples: int) -> None:
        self.values: deque[float] = deque(maxlen=max(size, 1))
        self.min_samples = min_samples
        self._median = math.nan
        self._low = math.nan
        self._stale = 0

    @property
    def ready(self) -> bool:
        return len(self.values) >= self.min_samples

    def add(self, value: float) -> None:
        self.values.append(value)
        self._stale += 1

    def median(self) -> float:
        if self._stale and (self._stale >= 8 or math.isnan(self._median) or len(self.values) < 16):
            ordered = sorted(self.values)
            n = len(ordered)
            self._median = (ordered[n // 2] if n % 2 else (ordered[n // 2 - 1] + ordered[n // 2]) / 2) if n else math.nan
            self._low = ordered[(n - 1) // 10] if n else math.nan
            self._stale = 0
        return self._median

    def low(self) -> float:
        """The 10th percentile of the recent values (cached with the median): what the rate usually falls to."""
        self.median()
        return self._low


class CounterTrack:
    """One cumulative counter: last value and time, and how it moved."""

    __slots__ = ("value", "ts", "resets", "wraps")

    def __init__(self) -> None:
        self.value: int | None = None
        self.ts = 0.0
        self.resets = 0
        self.wraps = 0

    def update(self, value: int, ts: float) -> tuple[int | None, float | None]:
        """Feed the raw value at ``ts``; return ``(delta, rate per second)`` (None on the first or a reset)."""
        prev, prev_ts = self.value, self.ts
        self.value, self.ts = value, ts
        if prev is None:
            return None, None
        delta, how = counter_delta(prev, value)
        if how == "reset":
            self.resets += 1
            return None, None
        if how == "wrap":
            self.wraps += 1
        dt = ts - prev_ts
        return delta, (delta / dt if dt >= 0.2 else None)

