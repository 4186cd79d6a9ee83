"""Tail chances the straggler rule judges counts of slow steps by (models/steps/straggler_background.py,
straggler_episodes.py): how likely so many slow steps are from independent spikes."""

from __future__ import annotations

import math


def poisson_tail(k: int, mu: float) -> float:
    """P(X >= k) for X ~ Poisson(mu) (k terms: callers pass counts of a few steps' slow verdicts)."""
    if k >= 2.0 * mu + 12.0:  # far in the tail (below 1e-3 for any mu): no need to sum
        return 0.0
    below = sum(math.exp(j * math.log(mu) - mu - math.lgamma(j + 1)) for j in range(k)) if mu > 0 else 1.0
    return max(0.0, 1.0 - below)


def binomial_tail(k: int, n: int, p: float) -> float:
    """P(X >= k) for X ~ Binomial(n, p)."""
    return sum(math.comb(n, j) * p ** j * (1.0 - p) ** (n - j) for j in range(max(k, 0), n + 1))
