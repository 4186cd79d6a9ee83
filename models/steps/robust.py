"""Medians for the per-step rules: ``np.median``'s result by one partition, without its per-call cost.

``np.median`` spends tens of microseconds per call outside the partition itself; the step rules take
several medians of every closed step (step times, compute times, ratios), so its overhead was a visible part
of the worker's cost per event. These give the same float as ``np.median`` / ``np.nanmedian`` of a 1-D float
array: the same order statistics, the mean of the middle two taken as ``(a + b) / 2``.

>>> import numpy as np
>>> median(np.array([3.0, 1.0, 2.0, 10.0]))
2.5
>>> nan_median(np.array([np.nan, 4.0, 1.0]))
2.5
>>> nan_median(np.array([np.nan]))
nan
>>> nan_sum(np.array([1.0, np.nan, 2.5]))
3.5
"""

from __future__ import annotations

import numpy as np


#: Arrays up to this long take ``sorted`` (a small job's ranks): the same order statistics as numpy's partition.
_SMALL = 16


def median(values: np.ndarray) -> float:
    """``float(np.median(values))`` of a non-empty 1-D float array without NaN."""
    n = len(values)
    if n <= _SMALL:
        got = _small_median(values.tolist())
        if got != 0.0:  # (a zero's sign may depend on which of several zeros a partition picks: numpy's own)
            return got
    k = n // 2
    if n % 2:
        return float(np.partition(values, k)[k])
    part = np.partition(values, (k - 1, k))
    return float((part[k - 1] + part[k]) / 2)


def _small_median(ordered: list[float]) -> float:
    """``median`` of a few values, by a sort: the middle one, or the mean of the middle two as numpy takes it."""
    ordered.sort()
    n = len(ordered)
    k = n // 2
    if n % 2:
        return float(ordered[k])
    return float((ordered[k - 1] + ordered[k]) / 2)


def list_median(values: list[float]) -> float:
    """``median`` of a non-empty list of finite floats: the same float, without making an array."""
    got = _small_median(sorted(values))
    return got if got != 0.0 else median(np.array(values, dtype=float))


def upper_middle(values: list[float]) -> float:
    """``sorted(values)[len(values) // 2]`` of a non-empty list of floats (a closed step's ``ts``): for thousands of
    values one partition instead of a sort (~8x less), the same element; NaN or a zero (whose sign a partition may
    pick differently) take the sort."""
    n = len(values)
    if n <= 64:
        return sorted(values)[n // 2]
    a = np.fromiter(values, dtype=np.float64, count=n)
    got = np.partition(a, n // 2)[n // 2]
    if got != 0.0 and not np.isnan(a).any():
        return float(got)
    return sorted(values)[n // 2]


def nan_median(values: np.ndarray) -> float:
    """``float(np.nanmedian(values))`` of a 1-D float array (NaN when nothing is reported), without the warning."""
    if len(values) <= _SMALL:
        kept = [x for x in values.tolist() if x == x]
        if not kept:
            return float("nan")
        got = _small_median(kept)
        if got != 0.0:
            return got
    ok = values[~np.isnan(values)]
    return median(ok) if len(ok) else float("nan")


def nan_max(values: np.ndarray) -> float:
    """``float(np.nanmax(values))`` of a 1-D float array, NaN when all are NaN (without numpy's warning)."""
    if len(values) <= _SMALL:
        kept = [x for x in values.tolist() if x == x]
        if not kept:
            return float("nan")
        top = max(kept)
        if top != 0.0:  # (which of several zeros is the max sets its sign: numpy's pick)
            return float(top)
    else:
        top = values.max()  # NaN when any is: else no NaN, and a max that is no zero is np.nanmax's, in one call
        if top == top and top != 0.0:
            return float(top)
    return float(np.nanmax(values)) if np.any(~np.isnan(values)) else float("nan")


def least(values: np.ndarray) -> float:
    """``float(np.min(values))`` of a non-empty 1-D float array without NaN: a few values in Python (a zero, whose
    sign numpy's pick sets, from numpy)."""
    if len(values) <= _SMALL:
        low = min(values.tolist())
        if low != 0.0:
            return float(low)
    return float(values.min())


def step_median(step, name: str, values: np.ndarray | None = None) -> float:
    """A closed step's median of ``name`` (a ``GroupStep``, models/steps/assembly.py), taken once per step: the
    step rules take the same medians of every step. ``values``: what ``name`` stands for when it is not a
    column of the step (e.g. the straggler rule's ``arrival``, derived from the step alone); a column's median
    is ``nan_median``'s, which is ``median``'s for a column without NaN."""
    memo = step.medians
    value = memo.get(name)
    if value is None:
        value = memo[name] = nan_median(getattr(step, name) if values is None else values)
    return value


def time_before(step) -> tuple[np.ndarray, bool]:
    """A closed step's time before its collectives, ``step_time - comm_time`` (read-only), and whether no rank's is
    NaN: worked out once per step (the straggler, SLI and throughput rules each take it)."""
    memo = step.derived
    got = memo.get("before")
    if got is None:
        before = step.step_time - step.comm_time
        before.flags.writeable = False
        got = memo["before"] = (before, not np.isnan(before).any())
    return got


def sorted_percentile(ordered: list[float], q: float) -> float:
    """``float(np.percentile(values, q))`` (its default, linear interpolation) of the non-empty, finite ``values``
    given sorted, without its per-call cost (~30 us, for a hundred step times): numpy's virtual index and its
    lerp, step by step in the same float operations, so the same float."""
    n = len(ordered)
    quantile = q / 100
    virtual = (n - 1) * quantile  # numpy's virtual index of its ``linear`` method
    if virtual >= n - 1:
        return float(ordered[-1])
    if virtual < 0:
        return float(ordered[0])
    below = int(virtual // 1)
    a, b = ordered[below], ordered[below + 1]
    gamma = virtual - below
    diff = b - a
    return float(b - diff * (1 - gamma) if gamma >= 0.5 else a + diff * gamma)


#: numpy sums fewer elements than this one after another (its pairwise summation starts at 8): below it, a loop in
#: Python adds in the same order, so gives the same float, without numpy's per-call cost.
_PAIRWISE_FROM = 8


def nan_sum(values: np.ndarray) -> float:
    """``float(np.nansum(values))`` of a 1-D float array (NaN counted as 0), the same float."""
    if len(values) >= _PAIRWISE_FROM:
        return float(np.nansum(values))
    total = 0.0  # numpy's start (the sum's identity: so -0.0 alone sums to 0.0 there too)
    for x in values.tolist():
        if x == x:  # a NaN counts as the 0 numpy puts in its place: adding it changes nothing
            total += x
    return total


def kept_sum(values: np.ndarray | None) -> tuple[float, int]:
    """``float(kept.sum())`` of a 1-D float array's values that are not NaN (``kept``), and how many they are: (NaN,
    0) when none is (or no array). A few values in Python (``nan_sum``'s loop adds the kept in numpy's order)."""
    if values is None:
        return float("nan"), 0
    if len(values) < _PAIRWISE_FROM:
        counted = sum(1 for x in values.tolist() if x == x)
        return (nan_sum(values) if counted else float("nan")), counted
    kept = values[~np.isnan(values)]
    return (float(kept.sum()) if kept.size else float("nan")), int(kept.size)
