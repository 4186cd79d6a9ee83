"""The job's background rate of slow rank-steps, and the straggler rule's test that a rank's slow steps are no
coincidence at that rate (models/steps/straggler.py, "No coincidences").

The rate is learnt from isolated slow verdicts as they leave the k-of-n window (decayed sums, with a prior at
``spike_rate_floor``). When the other ranks (not candidates, not firing) were slow over the same recent steps
more often than the learnt rate can explain, their rate is used instead (a rotating MoE hot expert).
"""

from __future__ import annotations

import numpy as np

from .straggler_odds import binomial_tail, poisson_tail

#: The window's other ranks set the k-of-n test's rate when the learned rate explains their slow steps with at
#: most this chance (``SpikeRate.now``).
WINDOW_RATE_P = 0.01


def none_slow(flags: np.ndarray) -> bool:
    """No verdict among ``flags`` is slow: the step rules' cheap test for the usual step of a healthy job, which
    then skips bookkeeping that would leave the same state (tests/models/steps/test_healthy_step_shortcuts.py)."""
    return not flags.any()


class SpikeRate:
    """Decayed counts of isolated slow rank-steps (the job's independent spikes)."""

    #: Weight (rank-steps) of the ``spike_rate_floor`` prior; the decay half-life (steps).
    PRIOR = 1000.0
    HALFLIFE = 200.0

    def __init__(self) -> None:
        self._slow = 0.0
        self._n = 0.0

    def learn(self, slow_ring: np.ndarray, ranks: np.ndarray, slots: np.ndarray, at, col: int,
              firing: list[int]) -> None:
        """The verdicts about to leave the window (column ``col`` of ``slow_ring``), of ranks with no other slow step
        in it and not firing: what isolated spikes look like in this job (a rank slow on and off, e.g. warming up
        to a straggler, is left out, or one rank of 64 would inflate the rate by 1.5%)."""
        rows = slow_ring[at]
        if not firing and none_slow(rows):  # no slow verdict in the window (the usual step): all kept, none slow
            decay = 0.5 ** (1.0 / self.HALFLIFE)
            self._slow = decay * self._slow + 0.0
            self._n = decay * self._n + float(len(ranks))
            return
        counts = rows.sum(axis=1)
        keep = counts <= 1
        if firing:
            keep &= ~np.isin(ranks, np.fromiter(firing, dtype=np.int64))
        decay = 0.5 ** (1.0 / self.HALFLIFE)
        self._slow = decay * self._slow + float(slow_ring[slots[keep], col].sum())
        self._n = decay * self._n + float(keep.sum())

    def rate(self, floor: float) -> float:
        """The background rate of slow rank-steps, floored."""
        return max(floor, (self._slow + floor * self.PRIOR) / (self._n + self.PRIOR))

    @staticmethod
    def now(rate: float, counts: np.ndarray, steps: int, mine: np.ndarray) -> float:
        """The rate the k-of-n test judges candidates at: ``rate``, or the other ranks' rate of slow steps when
        the learned one cannot explain it (chance at most ``WINDOW_RATE_P``). ``counts``: each slot's slow
        verdicts over the last ``steps`` steps; ``mine``: the slots of candidates and firing ranks, left out so
        two stragglers or a whole node at once still fire at the learned rate. In a big job the others' few
        spikes are the background the learned rate already holds; a rate read from them would only delay
        stragglers."""
        n = (len(counts) - len(mine)) * steps
        slow = int(counts.sum()) - int(counts[mine].sum())
        if n > 0 and slow > 1 and slow / n > rate and poisson_tail(slow, n * rate) <= WINDOW_RATE_P:
            rate = (slow - 1) / n  # a lone slow step of theirs sets no rate
        return rate


def not_coincidence(count: int, window: int, rate: float, *, coincidence_p: float, ratios: np.ndarray,
                    zs: np.ndarray, ratio_threshold: float, z_threshold: float) -> bool:
    """Too many slow steps (``count`` of the last ``window``, or of the evidence rings ``ratios``/``zs``) to be
    independent spikes at the background ``rate``?"""
    if coincidence_p >= 1.0:
        return True
    if binomial_tail(count, window, rate) <= coincidence_p:
        return True
    seen = ~np.isnan(ratios)
    k = int(((ratios[seen] >= ratio_threshold) & (zs[seen] >= z_threshold)).sum())
    return int(seen.sum()) > window and binomial_tail(k, int(seen.sum()), rate) <= coincidence_p
