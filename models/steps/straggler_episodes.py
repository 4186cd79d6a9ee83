"""Intermittent slowness and the length of an episode (models/steps/straggler.py, "Intermittent slowness" and
"Hysteresis on intermittency").

Each rank's slow verdicts of its last ``intermittent_window`` steps are counted (a ring, updated per step, the
count kept equal to the ring's row sum), with a decayed mean of its ratio and of its peers' value on its slow
steps. A rank is a candidate when its count has at most ``coincidence_p`` chance at its peers' rate, its slow
steps were clearly slow, fewer than half of its steps since the first were slow (more is a steady straggler)
and its average cost reaches ``ratio_threshold``. The slow and judged steps since an alert fired give the
episode's slow rate, which sets how many clean steps end it (``clean_needed``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from .straggler_background import none_slow
from .straggler_history import resized
from .straggler_odds import binomial_tail

#: An alert resolves once its clean run has at most this chance at the rank's recent slow rate.
RECOVERY_P = 0.001
#: Fewest slow steps in ``intermittent_window`` that may fire as intermittent.
INTERMITTENT_MIN = 4


@dataclass(frozen=True, slots=True)
class Pattern:
    """An intermittent rank's pattern, for its alert."""

    slow_steps: int  # slow steps in the window
    seen: int  # steps counted in the window
    first_step: int  # its oldest slow step in the window (-1: none)
    peer_rate: float  # the other ranks' share of slow steps over the window
    when_slow: float  # its ratio on its slow steps (decayed mean)
    span: int  # steps counted since its first slow step
    peer: float  # its peers' value on its slow steps (decayed mean; 0: unknown)


class IntermittentEpisodes:
    """Per-rank rings of slow verdicts over the last ``width`` steps, and each rank's episode counts."""

    def __init__(self, *, width: int) -> None:
        self._ring = np.zeros((0, width), dtype=bool)
        self.count = np.zeros(0, dtype=np.int64)
        self._ratio = np.zeros(0)
        self._peer = np.zeros(0)  # decayed mean of the peers' value on the rank's slow steps
        self._steps = np.full(width, -1, dtype=np.int64)  # the step judged at each column
        self.n = 0  # steps counted (a step judged on the step time beside richer signals is not)
        self._rich_at = -1  # the latest evaluated step judged on compute time or arrival
        # Slow and judged steps of each rank since its alert fired (its episode's slow rate; reset on firing).
        self._episode_slow = np.zeros(0, dtype=np.int64)
        self._episode_steps = np.zeros(0, dtype=np.int64)

    @property
    def width(self) -> int:
        return self._ring.shape[1]

    @property
    def seen(self) -> int:
        """Steps counted in the window."""
        return min(self.n, self.width)

    def grow(self, n: int) -> None:
        self._ring = np.vstack([self._ring, np.zeros((n, self.width), dtype=bool)])
        self.count = np.concatenate([self.count, np.zeros(n, dtype=np.int64)])
        self._ratio = np.concatenate([self._ratio, np.zeros(n)])
        self._peer = np.concatenate([self._peer, np.zeros(n)])
        self._episode_slow = np.concatenate([self._episode_slow, np.zeros(n, dtype=np.int64)])
        self._episode_steps = np.concatenate([self._episode_steps, np.zeros(n, dtype=np.int64)])

    def resize(self, width: int) -> None:
        """A new window, keeping the newest verdicts that fit."""
        if width == self.width:
            return
        old = self.width
        self._ring = resized(self._ring, old, width, False, self.n)
        self.count = self._ring.sum(axis=1).astype(np.int64)
        self._steps = resized(self._steps[None, :], old, width, -1, self.n)[0]

    def count_step(self, slots: np.ndarray, at, slow: np.ndarray, ratio: np.ndarray, step: int, signal: str,
                   peers: np.ndarray | float, evaluated: int) -> None:
        """This step's verdicts into each rank's ring (only the ranks written change); ``at``: ``slots``, or the
        slice they make; ``peers``: each rank's expected value, or one for all; ``evaluated``: steps the rule
        judged before this one."""
        width = self.width
        if signal != "step_time":
            self._rich_at = evaluated
        elif self._rich_at >= 0 and evaluated - self._rich_at < width:
            # Judged on the step time (every rank waits alike in synchronous training) while the job's other
            # steps carry compute or arrival times: says nothing, and would read a steady straggler as flaky.
            return
        col = self.n % width
        self.n += 1
        if none_slow(slow):  # the usual step: only the verdicts leaving the ring change a count, no ratio moves
            leaving = self._ring[at, col]
            if leaving.any():
                self.count[at] -= leaving
                self._ring[at, col] = False
            self._steps[col] = step
            self._episode_steps[at] += 1
            return
        self.count[at] += slow.astype(np.int64) - self._ring[at, col]
        self._ring[at, col] = slow
        self._steps[col] = step
        self._episode_slow[at] += slow
        self._episode_steps[at] += 1
        if slow.any():
            peers = np.broadcast_to(peers, ratio.shape)  # (only here: most steps have no slow rank)
            hit = slots[slow]
            old = self._ratio[hit]
            self._ratio[hit] = np.where(old > 0, 0.8 * old + 0.2 * ratio[slow], ratio[slow])
            self._peer[hit] = np.where(old > 0, 0.8 * self._peer[hit] + 0.2 * peers[slow], peers[slow])

    def candidates(self, slots: np.ndarray, clean_run: np.ndarray, *, clear_after: int, ratio_threshold: float,
                   spike_rate_floor: float, coincidence_p: float, min_flagged: int) -> np.ndarray:
        """Indices (into this step's ranks) of ranks whose slow steps in the window are too many for their peers'
        rate and were clearly slow."""
        seen = self.seen
        counts = self.count[slots]
        floor_need = fewest_slow(seen, spike_rate_floor, coincidence_p, min_flagged)
        maybe = ((counts >= floor_need)  # the fewest at the lowest rate: a cheap filter
                 & (self._ratio[slots] >= 1.0 + 2.0 * (ratio_threshold - 1.0))).nonzero()[0]
        if not len(maybe):
            return maybe
        total, others = int(self.count.sum()), len(self.count) - 1
        keep = []
        for i in maybe:
            slot = int(slots[i])
            if clean_run[slot] >= self.clean_needed(slot, int(clean_run[slot]), clear_after=clear_after):
                continue  # the pattern ended (a long enough clean run): nothing to fire now
            k = int(counts[i])
            span = self._span(slot)
            if k >= 0.5 * span:
                continue  # slow on most steps: the short rule's (a steady straggler), not a flaky pattern
            if 1.0 + (k / span) * (float(self._ratio[slot]) - 1.0) < ratio_threshold:
                continue  # costs the job less on average than one slow step must: rare mild outliers, no page
            rate = max(spike_rate_floor, (total - k) / max(others * seen, 1))
            if binomial_tail(k, seen, rate) <= coincidence_p:
                keep.append(i)
        return np.asarray(keep, dtype=np.int64)

    def pattern(self, slot: int) -> Pattern:
        seen = self.seen
        k = int(self.count[slot])
        total, others = int(self.count.sum()), len(self.count) - 1
        return Pattern(slow_steps=k, seen=seen, first_step=self._first_slow(slot),
                       peer_rate=(total - k) / max(others * seen, 1), when_slow=float(self._ratio[slot]),
                       span=self._span(slot), peer=float(self._peer[slot]))

    def _first_slow(self, slot: int) -> int:
        """The step of the rank's oldest slow verdict in its window (-1: none)."""
        cols = np.flatnonzero(self._ring[slot])
        return int(self._steps[cols].min()) if len(cols) else -1

    def _span(self, slot: int) -> int:
        """Steps counted since the rank's oldest slow step in its window."""
        first = self._first_slow(slot)
        return max(1, int((self._steps >= first).sum())) if first >= 0 else 1

    def start_episode(self, slot: int) -> None:
        """The rank's alert fired: its slow steps in the window so far count (the episode began before)."""
        self._episode_slow[slot] = self.count[slot]
        self._episode_steps[slot] = self.seen

    def forget(self, slot: int) -> None:
        """The episode is over: its slow steps do not count towards a new intermittent pattern."""
        self._ring[slot] = False
        self.count[slot] = 0
        self._ratio[slot] = 0.0
        self._peer[slot] = 0.0

    def clean_needed(self, slot: int, clean: int, *, clear_after: int) -> int:
        """Clean steps that end an episode: ``clear_after``, or more while the rank's slow rate before its clean
        run of ``clean`` steps makes so many clean steps in a row likely (a flaky rank is clean most steps)."""
        # The slow rate before the clean run: over the window, and over the whole episode (a burst in the
        # window alone would overstate it); the lower one, which asks for the longer clean run.
        rates = [k / n for k, n in ((int(self.count[slot]), self.seen - clean),
                                    (int(self._episode_slow[slot]), int(self._episode_steps[slot]) - clean))
                 if n > 0 and k > 0]
        q = min(rates, default=1.0)
        if q < 1.0:
            return max(clear_after, math.ceil(math.log(RECOVERY_P) / math.log1p(-q)))
        return clear_after


@lru_cache(maxsize=4096)
def fewest_slow(seen: int, rate: float, coincidence_p: float, min_flagged: int) -> int:
    """The fewest slow steps of ``seen`` whose chance at ``rate`` is at most ``coincidence_p``: one bounded cache for
    every rank and job (a pure function of its arguments; a fleet of small jobs each worked out the same few)."""
    need = max(INTERMITTENT_MIN, min_flagged)
    while need <= seen and binomial_tail(need, seen, rate) > coincidence_p:
        need += 1
    return need
