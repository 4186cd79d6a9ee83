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
"""

from __future__ import annotations

import numpy as np


def median(values: np.ndarray) -> float:
    """``float(np.median(values))`` of a non-empty 1-D float array without NaN."""
    n = len(values)
    k = n // 2
    if n % 2:
        return float(np.partition(values, k)[k])
    part = np.partition(values, (k - 1, k))
    return float((part[k - 1] + part[k]) / 2)


def nan_median(values: np.ndarray) -> float:
    """``float(np.nanmedian(values))`` of a 1-D float array (NaN when nothing is reported), without the warning."""
    ok = values[~np.isnan(values)]
    return median(ok) if len(ok) else float("nan")
