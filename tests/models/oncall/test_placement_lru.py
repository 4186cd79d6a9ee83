"""The placement view forgets the least recently seen job at its cap, without a scan (issue 44: "new jobs cost
O(jobs)": replay of 20k new jobs took 91 s). Generated traffic, checked against the definition: the jobs kept
are always the ``max_jobs`` seen most recently."""

from __future__ import annotations

import random

import pytest

from stepwatch.models.oncall.placement import PlacementView


@pytest.mark.parametrize("seed", range(4))
def test_the_jobs_kept_are_the_most_recently_seen(seed):
    rng = random.Random(seed)
    view = PlacementView(max_jobs=50, window=1e9)
    last: dict[str, float] = {}
    ts = 0.0
    for i in range(3000):
        ts += 1.0
        if last and rng.random() < 0.5:  # a known job reports again (maybe forgotten already)
            job = rng.choice(sorted(last))
        else:
            job = f"j{i}"
        view.observe(job, rng.randrange(8), f"n{rng.randrange(20)}", 0, ts)
        last[job] = ts
        kept = sorted(last, key=last.get)[-50:]
        assert sorted(j for j in last if view.nodes_of(j)) == sorted(kept), i
        for j in [j for j in last if j not in kept]:
            del last[j]  # forgotten: a later event makes it new


def test_work_per_new_job_is_bounded(monkeypatch):
    """Jobs looked at per new job past the cap, counted as ``max`` calls (a job's latest time; not timed): the old
    scan called it for all 2000 jobs for each new one."""
    import stepwatch.models.oncall.placement as placement

    looked = []
    monkeypatch.setattr(placement, "max", lambda *a, **k: looked.append(1) or max(*a, **k), raising=False)
    view = PlacementView(max_jobs=2000)
    for i in range(8000):
        view.observe(f"j{i}", 0, f"n{i}", 0, float(i))
    assert len(looked) <= 2 * 6000
