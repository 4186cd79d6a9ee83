"""The node rules' fast roads against their general forms, on generated samples: the same state, bit for bit.

``LinkBaselines.observe_port`` (the fabric's quiet samples, no dict) against ``observe`` with the dict the fabric
built before; caps, repeated and reordered times, ties at a settled level, NaN and infinite rates included.
"""

from __future__ import annotations

import math
import random

import pytest

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
