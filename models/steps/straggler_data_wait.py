"""The straggler rule's input-pipeline channel: a rank whose data wait exceeds its peers' by the straggler
margin of a typical compute time (and by the robust z threshold) on every one of the last ``window`` steps.
Stricter than the compute rule (all of the window, not k of it): single data-loader hiccups are common and
harmless, a stall is persistent.

A small group (2-3 ranks) has no median to speak of: of two ranks the median is their mean and the MAD half
their gap, so a stalled rank's z is 0.67 whatever the stall. There each rank is compared with the median of its
*other* ranks, and its noise is the spread of its own gaps to them over the window (a stall is a steady gap; two
data-bound ranks' waits jitter), floored as above."""

from __future__ import annotations

import numpy as np

from .assembly import GroupStep
from .robust import step_median
from .straggler_background import none_slow
from .straggler_history import resized
from .straggler_verdict import normal_mad


class DataWait:
    """Each rank's run of data-slow steps and its recent data waits (and the peers' median), for the evidence."""

    def __init__(self, *, window: int) -> None:
        self.run = np.zeros(0, dtype=np.int64)  # consecutive data-slow steps
        self.compute = 0.0  # the group's median compute time at the last step judged
        self._ring = np.full((0, window), np.nan)
        self._peer_ring = np.full((0, window), np.nan)

    def grow(self, n: int) -> None:
        self.run = np.concatenate([self.run, np.zeros(n, dtype=np.int64)])
        self._ring = np.vstack([self._ring, np.full((n, self._ring.shape[1]), np.nan)])
        self._peer_ring = np.vstack([self._peer_ring, np.full((n, self._peer_ring.shape[1]), np.nan)])

    def resize(self, window: int, written: int) -> None:
        if window != self._ring.shape[1]:
            self._ring = resized(self._ring, self._ring.shape[1], window, np.nan, written)
            self._peer_ring = resized(self._peer_ring, self._peer_ring.shape[1], window, np.nan, written)

    def judge(self, step: GroupStep, at, col: int, compute_median: float, *, ratio_threshold: float,
              z_threshold: float, spread_floor: float, small: bool = False) -> np.ndarray | None:
        """This step's data-slow verdicts of its ranks (None: some rank reported no data wait); ``small``: a
        group of 2-3 ranks (module docstring)."""
        d = step.data_time
        if np.isnan(d).any():
            return None
        floor = max(spread_floor * compute_median, 1e-9)
        peer = _others_median(d) if small else step_median(step, "data_time")
        excess = d - peer
        self._ring[at, col] = d
        self._peer_ring[at, col] = peer
        if small:  # each rank's noise: the spread of its own gaps over the window, this step's included
            spread = np.maximum(_own_spread(self._ring[at] - self._peer_ring[at]), floor)
        else:
            spread = max(normal_mad(d, peer), floor)
        data_slow = (excess >= (ratio_threshold - 1.0) * compute_median) & (excess / spread >= z_threshold)
        if none_slow(data_slow):  # the usual step: every run ends (np.where's 0s, without it)
            self.run[at] = 0
        else:
            self.run[at] = np.where(data_slow, self.run[at] + 1, 0)
        self.compute = compute_median
        return data_slow

    def waits(self, slot: int) -> tuple[float, float]:
        """(The rank's median data wait, its peers') over the window."""
        waits = self._ring[slot]
        ok = ~np.isnan(waits)
        return float(np.median(waits[ok])), float(np.median(self._peer_ring[slot][ok]))


def _others_median(d: np.ndarray) -> np.ndarray:
    """Each rank's peers' median: the median of the group's other ranks (2-3 ranks: the other, or the other two's
    mean)."""
    n = len(d)
    return np.array([float(np.median(np.delete(d, i))) for i in range(n)]) if n > 2 else d[::-1].copy()


def _own_spread(gaps: np.ndarray) -> np.ndarray:
    """Each row's normal-scaled MAD of its gaps seen so far in the window (NaN: not yet seen)."""
    out = np.zeros(gaps.shape[0])
    for i, row in enumerate(gaps):
        row = row[~np.isnan(row)]
        if len(row):
            out[i] = normal_mad(row, float(np.median(row)))
    return out
