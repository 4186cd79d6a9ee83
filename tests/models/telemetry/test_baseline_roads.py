"""The node rules' fast roads against their general forms, on generated samples: the same state, bit for bit.

``LinkBaselines.observe_port`` (the fabric's quiet samples, no dict) against ``observe`` with the dict the fabric
built before; caps, repeated and reordered times, ties at a settled level, NaN and infinite rates included.
"""

from __future__ import annotations

import math
import random

import pytest

from models.telemetry.counters import Baseline
from models.telemetry.link_baseline import LinkBaselines


def _old_observe(lb: LinkBaselines, node, comp, ts, err, wait, rate) -> None:
    learn = {"link_errors": err} if err is not None else {}
    if wait == wait:
        learn["xmit_wait"] = wait
    if rate == rate:
        learn["link_rate"] = rate
    lb.observe(node, comp, ts, learn)


def _samples(rng: random.Random, n: int):
    nodes = [f"n{i}" for i in range(rng.randint(1, 6))]
    comps = [f"mlx5_{i}/1" for i in range(rng.randint(1, 5))]
    clock = {}
    levels = [0.0, 0.0, 0.0, 1.0, 2.5, 1e4, 1e6]  # ties: a settled level comes back often
    for _ in range(n):
        node, comp = rng.choice(nodes), rng.choice(comps)
        ts = clock.get((node, comp), rng.uniform(0, 100))
        step = rng.choice([10.0, 10.0, 10.0, 0.0, -5.0, 0.1, 3600.0, rng.uniform(0, 30)])  # repeats, reorders, gaps
        ts = clock[(node, comp)] = ts + step
        err = rng.choice([None, 0.0, 0.0, 0.0, 0.5, 3.0])
        wait = rng.choice([math.nan, 0.0, 0.0, 1500.0, rng.uniform(0, 1e5), math.inf])
        rate = rng.choice([math.nan, 200.0, 200.0, 200.0, 100.0, rng.uniform(0, 400)])
        yield node, comp, ts, err, wait, rate


@pytest.mark.parametrize("seed", range(40))
def test_observe_port_is_observe(seed):
    rng = random.Random(seed)
    kw = dict(min_samples=rng.choice([1, 5, 120]), max_nodes=rng.choice([2, 4, 100]),
              max_components=rng.choice([2, 3, 256]), half_life=rng.choice([60.0, 21_600.0]))
    old, new = LinkBaselines(**kw), LinkBaselines(**kw)
    for node, comp, ts, err, wait, rate in _samples(rng, 600):
        _old_observe(old, node, comp, ts, err, wait, rate)
        new.observe_port(node, comp, ts, err, wait, rate)
    assert new.nodes() == old.nodes()
    assert [new.record(n) for n in new.nodes()] == [old.record(n) for n in old.nodes()]
    assert new._updates == old._updates and new.take_dirty() == old.take_dirty()


def _same(a: float, b: float) -> bool:
    return (a != a and b != b) or (a == b and math.copysign(1.0, a) == math.copysign(1.0, b))


@pytest.mark.parametrize("seed", range(60))
def test_judge_and_take_back_are_read_then_add(seed):
    """``Baseline.judge`` (+ ``take_back`` where the rule judged an outlier) against the reads and the add the
    tracker made before: the same values read, the same ring, through warm-up, evictions, ties, NaN and -0.0."""
    rng = random.Random(seed)
    size, min_samples = rng.choice([(16, 3), (120, 10), (5, 1), (20, 0), (1, 1)])
    old, new = Baseline(size, min_samples), Baseline(size, min_samples)
    pool = [0.0, -0.0, 1.0, 1.0, 2.0, 1e9, math.nan, math.inf] + [rng.uniform(0, 100) for _ in range(5)]
    for step in range(rng.randint(1, 400)):
        value = rng.choice(pool) if rng.random() < 0.7 else rng.uniform(-10, 1e6)
        low = rng.random() < 0.5
        was = (old.low() if low else old.median()) if old.ready else math.nan
        got = new.judge(value, low=low)
        assert _same(got, was), (step, got, was)
        if got == got and rng.random() < 0.3:  # judged an outlier: not learned
            new.take_back()
        else:
            old.add(value)
        assert bytes(new.values) == bytes(old.values)  # (bit for bit: NaN and -0.0 too)
        assert new._next == old._next and new.ready == old.ready
        if rng.random() < 0.2:  # the reads between (``_waiting``, the alert's median) see the same
            assert _same(new.median(), old.median()) and _same(new.low(), old.low())


@pytest.mark.parametrize("seed", range(30))
def test_median_and_low_are_the_sorted_ring(seed):
    """The cached median and low percentile, when refreshed, are those of ``sorted`` over the ring (ties, NaN)."""
    rng = random.Random(seed)
    base = Baseline(rng.choice([1, 2, 16, 120]), 1)
    pool = [0.0, -0.0, 1.0, 1.0, math.nan, math.inf, -math.inf]
    for _ in range(rng.randint(1, 300)):
        base.add(rng.choice(pool) if rng.random() < 0.5 else rng.uniform(-1e6, 1e6))
        base._stale = 8  # (a refresh due now)
        ordered = sorted(base.values)
        n = len(ordered)
        median = ordered[n // 2] if n % 2 else (ordered[n // 2 - 1] + ordered[n // 2]) / 2
        assert _same(base.median(), median) and _same(base.low(), ordered[(n - 1) // 10])
