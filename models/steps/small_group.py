"""Small groups (2 .. ``min_peers`` - 1 ranks): each rank's pace against its peers on the same step, judged
against its own usual pace and over a run of steps (issue 23 item 3).

A median of two or three ranks says nothing about which one is slow, so each rank is compared with itself:

* per step, the *paired* log-ratio ``d = log(x_rank) - median(log(x_others))`` of the same step: a job-wide
  slowdown, a checkpoint pause or host load that hits every rank cancels out;
* its *baseline*: median and normal-scaled MAD of its recent ``d`` (``SELF_BASELINE_STEPS``). A step joins the
  baseline only after ``HOLD_STEPS`` later steps of the group came without a slow verdict (so the onset steps
  of a slowdown, not yet flagged, do not teach it the slowdown nor inflate its noise); every rank's baseline
  is frozen while any rank of the group is flagged or firing (in a pair, one rank's slowdown is the other's
  speed-up);
* its *sustained* excess: the median of its last ``RUN_STEPS`` values of ``d`` above its baseline. One step's
  spike (GC, a preemption on a loaded host) moves a median of nine by nothing; a rank 1.4x slower for five
  steps moves it all the way. ``ratio = exp(excess)`` and ``z = excess / (noise * 1.2533 / sqrt(n))`` (the
  standard error of a median of ``n``), so on a noisy host the bar rises with the measured noise and a steady
  1.4x still clears it. The straggler rule's ``ratio_threshold``, ``z_threshold`` and k-of-n apply unchanged;
* in a pair, one rank's ``d`` is the other's negated: the paired ratio alone cannot tell a rank that slowed from
  its peer that sped up (a straggler learnt as the usual pace, then recovering, made the healthy rank look
  1.1x slow). A rank of a pair counts as slow only by as much as its own value rose over its own usual value
  (``absolute``): where neither moved enough, no rank is named.

Measured (bench/small_jobs.py, BENCHMARKS.md): on a loaded host a 1.4x rank is named within 10 steps where
one-step z-scores against a baseline could not tell it from preemption.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

import numpy as np

#: Steps of each rank's own paired log-ratio kept as its baseline ...
SELF_BASELINE_STEPS = 50
#: ... and needed before it is judged against it.
SELF_BASELINE_MIN = 10
#: Steps whose median is the rank's sustained excess.
RUN_STEPS = 7
#: Steps of each rank's paired log-ratio kept to date the onset of a slowdown.
TRAIL_STEPS = 20
#: A step joins the baselines once this many later steps came without a slow verdict.
HOLD_STEPS = RUN_STEPS
#: Standard error of a sample median over that of a mean, for a normal core (sqrt(pi / 2)).
_MEDIAN_SE = 1.2533141373155003
_NORMAL_MAD_SCALE = 0.6744897501960817


@dataclass(frozen=True, slots=True)
class PairedVerdict:
    """A small group's step, judged: per rank, the sustained ``ratio`` and ``z`` (the straggler rule's slow
    test), this step's own ``step_ratio`` and ``step_z`` (for the intermittent rule), and the ``expected``
    value (the rank's value at its usual pace against its peers this step)."""

    ratio: np.ndarray
    z: np.ndarray
    step_ratio: np.ndarray
    step_z: np.ndarray
    expected: np.ndarray


class PairedPace:
    """Each rank of a small group against its own usual pace relative to its peers (module docstring).

    ``spread_floor``: floor on a rank's noise (log-ratio units, ~relative); ``max_ranks``: ranks whose state
    is kept (ranks of a small group come and go; the oldest is dropped).

    >>> import numpy as np
    >>> pace = PairedPace(spread_floor=0.02, max_ranks=16)
    >>> ranks = np.array([0, 1])
    >>> for n in range(40):
    ...     x = np.array([1.0 + 0.01 * (n % 3), 1.4 if n >= 30 else 1.0])
    ...     verdict = pace.judge(ranks, x)
    ...     pace.learn(off=verdict is not None and (verdict.ratio >= 1.1).any(), flagged=False)
    >>> [round(float(r), 2) for r in verdict.ratio]
    [0.71, 1.4]
    """

    def __init__(self, *, spread_floor: float, max_ranks: int) -> None:
        self.spread_floor = spread_floor
        self.max_ranks = max_ranks
        # Per rank: committed baseline values of d, its last RUN_STEPS values of d, and its last TRAIL_STEPS
        # (step, d) to date an onset.
        self._baseline: dict[int, deque[float]] = {}
        self._recent: dict[int, deque[float]] = {}
        self._trail: dict[int, deque[tuple[int, float]]] = {}
        # The last steps' d by rank, waiting HOLD_STEPS quiet steps to join the baselines.
        self._pending: deque[tuple[dict[int, float], dict[int, float]]] = deque()
        self._last: dict[int, float] = {}
        # Pairs only (module docstring): each rank's own log value, its baseline and last RUN_STEPS values.
        self._abs_baseline: dict[int, deque[float]] = {}
        self._abs_recent: dict[int, deque[float]] = {}
        self._last_abs: dict[int, float] = {}
        self._off_run = 0  # steps in a row the group was off its pace without a flag

    def judge(self, ranks: np.ndarray, x: np.ndarray, step: int = 0) -> PairedVerdict | None:
        """This step's verdict, or None while a rank's baseline is still being learnt (or a value is not
        positive)."""
        self._last = {}
        self._last_abs = {}
        if not (x > 0).all():
            return None
        logs = np.log(x)
        n = len(logs)
        others = np.array([np.median(np.delete(logs, i)) for i in range(n)])
        d = logs - others
        ranks_list = ranks.tolist()
        self._last = dict(zip(ranks_list, d.tolist()))
        for r, value in self._last.items():
            self._ring(self._recent, r, RUN_STEPS).append(value)
            self._ring(self._trail, r, TRAIL_STEPS).append((step, value))
        if n == 2:
            self._last_abs = dict(zip(ranks_list, logs.tolist()))
            for r, value in self._last_abs.items():
                self._ring(self._abs_recent, r, RUN_STEPS).append(value)
        rings = [self._baseline.get(r) for r in ranks_list]
        if any(ring is None or len(ring) < SELF_BASELINE_MIN for ring in rings):
            return None
        base = np.empty(n)
        noise = np.empty(n)
        run = np.empty(n)
        se = np.empty(n)
        for i, (r, ring) in enumerate(zip(ranks_list, rings)):
            values = np.fromiter(ring, float)
            base[i] = np.median(values)
            noise[i] = max(np.median(np.abs(values - base[i])) / _NORMAL_MAD_SCALE, self.spread_floor, 1e-9)
            recent = np.fromiter(self._recent[r], float)
            center = np.median(recent)
            run[i] = center - base[i]
            # The run's own scatter when it is larger (a burst of host contention: noisy, not slow); both
            # medians' errors (a short baseline is uncertain too).
            scatter = max(noise[i], np.median(np.abs(recent - center)) / _NORMAL_MAD_SCALE)
            se[i] = scatter * _MEDIAN_SE * math.sqrt(1.0 / len(recent) + 1.0 / len(values))
        if n == 2:
            run = np.minimum(run, self._absolute(ranks_list))
        excess = d - base
        return PairedVerdict(ratio=np.exp(run), z=run / se, step_ratio=np.exp(excess), step_z=excess / noise,
                             expected=x * np.exp(-excess))

    def _absolute(self, ranks: list[int]) -> np.ndarray:
        """Per rank of a pair, how far its own value rose over its own usual one (log units, at least 0; inf
        where not known yet: the paired ratio alone decides)."""
        out = np.full(len(ranks), np.inf)
        for i, r in enumerate(ranks):
            ring, recent = self._abs_baseline.get(r), self._abs_recent.get(r)
            if ring and len(ring) >= SELF_BASELINE_MIN and recent:
                rise = float(np.median(np.fromiter(recent, float)) - np.median(np.fromiter(ring, float)))
                out[i] = max(rise, 0.0)
        return out

    def onset(self, rank: int, ratio_threshold: float) -> int | None:
        """The step a rank's slowdown began: of its recent steps, the split after which slow steps (at least
        ``ratio_threshold``) outnumber the rest by most (a change point; ties: the later step), None without a
        baseline or a slow step. A spike on a loaded host before the onset does not pull it early."""
        ring, trail = self._baseline.get(rank), self._trail.get(rank)
        if not ring or not trail:
            return None
        base = float(np.median(np.fromiter(ring, float)))
        slow = np.array([value - base >= math.log(ratio_threshold) for _, value in trail])
        if not slow.any():
            return None
        lead = np.cumsum((slow - 0.5)[::-1])[::-1]  # slow minus clean steps, halved, from each step on
        lead[~slow] = -np.inf
        i = len(lead) - 1 - int(np.argmax(lead[::-1]))  # the later of equal splits
        return trail[i][0]

    def learn(self, *, off: bool, flagged: bool) -> None:
        """The step just judged waits to join the baselines. ``flagged`` (a rank of the group has a slow verdict
        in its window or fires) and ``off`` (a rank's sustained ratio is off by the threshold, not yet flagged)
        drop every waiting step, so no step near a slowdown's onset is learnt; but a group off for
        ``SELF_BASELINE_STEPS`` steps in a row without a flag has a new usual pace (or a baseline learnt in a
        burst of noise): it is learnt again."""
        self._off_run = 0 if flagged or not off else self._off_run + 1
        if flagged or 0 < self._off_run <= SELF_BASELINE_STEPS:
            self._pending.clear()
            return
        if self._last:
            self._pending.append((self._last, self._last_abs))
        while len(self._pending) > HOLD_STEPS or (self._pending and not self._warm(self._pending[0][0])):
            paired, absolute = self._pending.popleft()
            for r, value in paired.items():
                self._ring(self._baseline, r, SELF_BASELINE_STEPS).append(value)
            for r, value in absolute.items():
                self._ring(self._abs_baseline, r, SELF_BASELINE_STEPS).append(value)

    def _warm(self, step: dict[int, float]) -> bool:
        # Before a rank has a baseline nothing is judged, so nothing can be flagged: no reason to wait.
        return all(len(self._baseline.get(r, ())) >= SELF_BASELINE_MIN for r in step)

    def _ring(self, rings: dict[int, deque[float]], rank: int, size: int) -> deque[float]:
        ring = rings.get(rank)
        if ring is None:
            if len(rings) >= self.max_ranks:  # bounded: drop the oldest rank's
                rings.pop(next(iter(rings)))
            ring = rings[rank] = deque(maxlen=size)
        return ring
