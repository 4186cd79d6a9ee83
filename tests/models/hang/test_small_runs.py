"""A small job's runs of step events take plain Python in the hang rule's progress (``SMALL_RUN``): the state after
them is the one numpy's column road leaves, on generated runs (late events, a rank twice, missing nodes, steps
back, ranks joining)."""

from __future__ import annotations

import random

import numpy as np
import pytest

from stepwatch.models.hang import progress as progress_module
from stepwatch.models.hang.progress import JobProgress

_ARRAYS = ("rank_at", "last_step", "rank_progress", "stepped", "last_seen")
_SCALARS = ("max_step", "above", "known", "completed_any", "progress_ts", "latest_ts", "world_size", "n")


def _events(rng: random.Random) -> list[tuple]:
    ranks = rng.randint(2, 40)
    out, t = [], 100.0
    for step in range(rng.randint(5, 40)):
        order = list(range(ranks))
        rng.shuffle(order)
        for r in order:
            if rng.random() < 0.05:
                continue  # a lost event
            s = step if rng.random() > 0.05 else max(0, step - rng.randint(1, 3))  # a late or repeated one
            node = None if rng.random() < 0.1 else f"n{r // 4}"
            phase = "train" if rng.random() > 0.1 else "eval"
            out.append((r, s, t + rng.random() * 0.2, rng.uniform(0.5, 1.5), phase, node, ranks))
        if rng.random() < 0.1:
            out.append(out[-1])  # the same event twice (a rank twice in a run)
        t += 1.0
    return out


def _feed(events: list[tuple], cuts: list[int], small: int, monkeypatch) -> JobProgress:
    monkeypatch.setattr(progress_module, "SMALL_RUN", small)
    p = JobProgress(step_history=8)
    for lo, hi in zip(cuts, cuts[1:]):
        ranks, steps, ts, step_times, phases, nodes, worlds = (list(c) for c in zip(*events[lo:hi]))
        p.quiet_steps(ranks, steps, ts, step_times, phases, nodes, worlds,
                      ts_array=np.array(ts) if lo % 3 == 0 else None)  # with and without the array
    return p


@pytest.mark.parametrize("seed", range(8))
def test_small_runs_leave_the_column_roads_state(seed, monkeypatch):
    rng = random.Random(seed)
    for _ in range(12):
        events = _events(rng)
        cuts = [0]
        while cuts[-1] < len(events):
            cuts.append(min(len(events), cuts[-1] + rng.choice([1, 2, 3, 4, 5, 8, 16, 31, 32, 33])))
        small = _feed(events, cuts, 32, monkeypatch)
        numpy_road = _feed(events, cuts, 0, monkeypatch)
        for name in _SCALARS:
            assert getattr(small, name) == getattr(numpy_road, name), name
        for name in _ARRAYS:
            n = small.n
            assert np.array_equal(getattr(small, name)[:n], getattr(numpy_road, name)[:n]), name
        assert small.nodes == numpy_road.nodes
        assert list(small.step_times) == list(numpy_road.step_times)
        assert list(small.advances) == list(numpy_road.advances)
