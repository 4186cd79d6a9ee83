"""Cumulative counters: deltas through wraps and resets, rates, and a bounded baseline of recent values.

A cumulative counter that goes backwards from the top of a 32- or 64-bit range wrapped around;
any other decrease is a reset (driver reload, ``perfquery -R``) and only restarts the counter's
history (:func:`counter_delta`). Node telemetry (models/telemetry/telemetry_tracker.py), host signals
(models/telemetry/host.py) and the job-wide fabric comparison (models/telemetry/fabric.py) build on these.
"""

from __future__ import annotations

import math
from array import array
from operator import itemgetter


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
    """The recent values of one rate (bounded), with a cached median.

    Compact (issue 44: ~3 KiB per component let forged nodes hold 144 MiB): the values are a ring of C
    doubles, allocated only as they come (a component heard from once holds none), in no particular order
    (only their median and low percentile are read)."""

    __slots__ = ("values", "size", "_next", "min_samples", "_median", "_low", "_stale", "_evicted")

    def __init__(self, size: int, min_samples: int) -> None:
        self.values: array | tuple = ()  # an array('d') from the first value on
        self.size = max(size, 1)
        self._next = 0  # the slot the next value overwrites once the ring is full
        self.min_samples = min_samples
        self._median = math.nan
        self._low = math.nan
        self._stale = 0
        self._evicted: float | None = None  # the value ``judge``'s add overwrote (None: it appended)

    @property
    def ready(self) -> bool:
        return len(self.values) >= self.min_samples

    def add(self, value: float) -> None:
        values = self.values
        if len(values) < self.size:
            if not values:
                values = self.values = array("d")
            values.append(value)
        else:
            values[self._next] = value
            self._next = (self._next + 1) % self.size
        self._stale += 1

    def median(self) -> float:
        if self._stale and (self._stale >= 8 or math.isnan(self._median) or len(self.values) < 16):
            self._sort()
        return self._median

    def _sort(self) -> None:
        """The median and low percentile from the values now (every 8 new values once 16 are held: each costs a
        sort)."""
        # The list in one C call, sorted in place: the order ``sorted`` gives, ~25 % less time than its iteration.
        ordered = self.values.tolist() if self.values else []
        ordered.sort()
        n = len(ordered)
        self._median = (ordered[n // 2] if n % 2 else (ordered[n // 2 - 1] + ordered[n // 2]) / 2) if n else math.nan
        self._low = ordered[(n - 1) // 10] if n else math.nan
        self._stale = 0

    def low(self) -> float:
        """The 10th percentile of the recent values (cached with the median): what the rate usually falls to."""
        if self._stale and (self._stale >= 8 or math.isnan(self._median) or len(self.values) < 16):
            self._sort()
        return self._low

    def judge(self, value: float, low: bool = False) -> float:
        """``median()`` (``low()`` with ``low``) while ``ready`` (else NaN), then ``add(value)``: one call for a rule
        that learns each sample unless it judges it an outlier (then it calls ``take_back``)."""
        values = self.values
        n = len(values)
        if n >= self.min_samples:
            if self._stale and (self._stale >= 8 or math.isnan(self._median) or n < 16):
                self._sort()
            usual = self._low if low else self._median
        else:
            usual = math.nan
        if n < self.size:
            if not values:
                values = self.values = array("d")
            values.append(value)
            self._evicted = None
        else:
            at = self._next
            self._evicted = values[at]
            values[at] = value
            self._next = (at + 1) % self.size
        self._stale += 1
        return usual

    def take_back(self) -> None:
        """Undo the add of the ``judge`` just before (the ring, and what the cached median and low are due)."""
        values = self.values
        if self._evicted is None:  # it appended
            values.pop()
        else:
            self._next = (self._next - 1) % self.size
            values[self._next] = self._evicted
        self._stale -= 1


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
        if prev is not None and value >= prev:  # the usual sample: no wrap, no reset
            delta = value - prev
            dt = ts - prev_ts
            return delta, (delta / dt if dt >= 0.2 else None)
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



class BitRing:
    """The last ``size`` yes/no samples as bits of one int (a deque of bools cost ~760 bytes per port)."""

    __slots__ = ("bits", "n", "size")

    def __init__(self, size: int) -> None:
        self.bits = 0
        self.n = 0
        self.size = max(size, 1)

    def append(self, yes: bool) -> None:
        self.bits = ((self.bits << 1) | bool(yes)) & ((1 << self.size) - 1)
        self.n = min(self.n + 1, self.size)

    def clear(self) -> None:
        self.bits = self.n = 0

    def __len__(self) -> int:
        return self.n

    def __iter__(self):
        """Oldest first, as a deque's."""
        return (bool(self.bits >> i & 1) for i in range(self.n - 1, -1, -1))

    def count(self) -> int:
        """How many of the samples are yes."""
        return self.bits.bit_count()


class CounterLayout:
    """The counter names of a port's samples, in their order, with the ones a rule tracks picked out: the quiet-sample
    check (the same names as the port's sample before, its error counters at the same values) reads the error
    counters' values in one C call (``values``) instead of a lookup per counter."""

    __slots__ = ("names", "errors", "values", "rated")

    def __init__(self, names: tuple[str, ...], errors, rated) -> None:
        self.names = names
        self.errors = tuple(n for n in names if n in errors)
        #: counters -> the error counters' values (a tuple; one value alone for one name; None for none)
        self.values = itemgetter(*self.errors) if self.errors else _nothing
        self.rated = tuple(n for n in names if n in rated)


def _nothing(_counters) -> None:
    return None


class CounterLayouts:
    """The distinct counter layouts a rule has seen, shared by its ports (a fleet's agents send a few); bounded: a
    layout past ``limit`` is not kept, and its ports take the full per-counter road."""

    __slots__ = ("_known", "limit", "errors", "rated")

    def __init__(self, errors, rated, limit: int = 256) -> None:
        self._known: dict[tuple[str, ...], CounterLayout] = {}
        self.limit = limit
        self.errors = errors
        self.rated = rated

    def of(self, counters: dict) -> CounterLayout | None:
        names = tuple(counters)
        layout = self._known.get(names)
        if layout is None and len(self._known) < self.limit:
            layout = self._known[names] = CounterLayout(names, self.errors, self.rated)
        return layout


#: Bad samples are sustained when they span this many seconds per sample the count asks for beyond the first (the
#: agent's usual 5 s period): at a 30 s agent two samples say as much as three at 5 s.
SUSTAINED_SECONDS_PER_SAMPLE = 5.0


def sustained(count: int, need: int, seconds: float) -> bool:
    """Whether ``count`` bad samples spanning ``seconds`` of the source's own clock (its first to its last; NaN: not
    known) are sustained: ``need`` of them, or two at least spanning what ``need`` span at the usual period (a
    persistence that holds at every sampling period, not a count that takes 6x longer at 30 s). One function for
    every rule that asks "sustained?" (gpu_hot, throttling: a run's first and last sample; link_errors: the bad
    samples of its window at the port's usual period, ``(count - 1) * period``)."""
    return count >= need or (count >= 2 and seconds >= (need - 1) * SUSTAINED_SECONDS_PER_SAMPLE)


def span(since: float | None, ts: float) -> float:
    """Seconds from a run's first bad sample (``since``; None: none yet) to its latest at ``ts``: ``sustained``'s."""
    return ts - since if since is not None else 0.0
