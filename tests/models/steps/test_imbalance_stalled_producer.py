"""Rank classes compare ranks on the same steps: a stalled producer makes no class.

Invariant: ranks whose producers stall (their step events late past the assembly's wait: the steps close
without them) change no class verdict: a job without classes gets none, a job with two classes gets the same
two. Before, each rank's median was over whatever steps it had: a rank that stalled right after the job's slow
first steps had only those, and it and its fellows were a class "2.9x" the others (gen3:arrival_only_straggler
with 2% of its messages 5 s late: an info imbalance naming ranks 1 and 2).

And a stage imbalance names its whole slow stage: a rank whose producer stalled from the stage's first steps
joins the alert (a new version, same id) once seen (gen3:stage_imbalance_only with 1% of its messages 30 s late
named 7 of its slow stage's 8 ranks).

Generated: 4-16 ranks, 2 or a quarter of them stalling, 5-20 steps of stall after 2-4 first steps 2-3x slower,
two paces; 2-4 stages of 4-16 ranks, each stage slow in turn, its first or last rank stalled 5-40 steps.
"""

from __future__ import annotations

import random

import numpy as np
import pytest

from stepwatch.models.steps.assembly import GroupStep
from stepwatch.models.steps.imbalance import ImbalanceDetector

STEPS = 120


def run(world: int, stalled: list[int], stall: int, warm: int, warm_factor: float, pace: float,
        slow_class: frozenset[int] = frozenset(), seed: int = 0) -> list:
    """The imbalance alerts of one group: first ``warm`` steps ``warm_factor`` slower for every rank, then
    ``pace`` (3x for ``slow_class``); ``stalled`` ranks missing from steps ``warm .. warm + stall``."""
    rng = random.Random(seed)
    d = ImbalanceDetector(job="j")
    out = []
    for n in range(STEPS):
        ranks = [r for r in range(world) if not (r in stalled and warm <= n < warm + stall)]
        base = pace * (warm_factor if n < warm else 1.0)
        compute = np.array([base * (3.0 if r in slow_class else 1.0) * rng.uniform(0.97, 1.03) for r in ranks])
        k = len(ranks)
        step = float(compute.max()) + 0.05
        out += d.update(GroupStep(job="j", group="", step=n, ts=1000.0 + n * step, ranks=np.array(ranks),
                                  step_time=np.full(k, step), compute_time=compute, comm_time=step - compute,
                                  data_time=np.full(k, 0.001), tokens=np.full(k, 4096.0),
                                  nodes=tuple(f"n{r // 4}" for r in ranks), phase="train",
                                  missing=world - k))
    return out


def _cases():
    for world in (4, 8, 16):
        for stalled in sorted({2, world // 4} - {1}):
            for stall in (5, 10, 20):
                for warm, warm_factor in ((2, 3.0), (4, 2.0)):
                    for pace in (0.02, 1.5):
                        yield world, list(range(1, 1 + stalled)), stall, warm, warm_factor, pace


@pytest.mark.parametrize("world", [4, 8, 16])
def test_stalled_producers_make_no_rank_class(world):
    got = [(c, a.summary) for c in _cases() if c[0] == world for a in run(*c) if a.status == "firing"]
    assert got == []


@pytest.mark.parametrize("world", [8, 16])
def test_two_classes_stay_two_classes_through_a_stall(world):
    slow = frozenset(range(0, world, 2))
    for c in _cases():
        if c[0] != world:
            continue
        firing = [a for a in run(*c, slow_class=slow) if a.status == "firing"]
        assert [a.evidence["kind"] for a in firing] == ["classes"], c
        assert [cl["ranks"] for cl in firing[0].evidence["classes"]] == [sorted(slow), sorted(set(range(world)) - slow)], c


def run_stages(stages: int, per_stage: int, slow_stage: int, stalled: int, stall: int, pace: float,
               seed: int = 0) -> list:
    """The imbalance alerts of a pipeline: ``stages`` groups of ``per_stage`` ranks, ``slow_stage`` 1.5x slower;
    rank ``stalled`` missing from its stage's first ``stall`` steps (its producer stalled from the start)."""
    rng = random.Random(seed)
    d = ImbalanceDetector(job="j")
    out = []
    for n in range(STEPS):
        for s in range(stages):
            ranks = [r for r in range(s * per_stage, (s + 1) * per_stage) if not (r == stalled and n < stall)]
            k = len(ranks)
            compute = np.array([pace * (1.5 if s == slow_stage else 1.0) * rng.uniform(0.98, 1.02) for _ in ranks])
            step = pace * 1.6
            out += d.update(GroupStep(job="j", group=f"pp{s}", step=n, ts=1000.0 + n * step, ranks=np.array(ranks),
                                      step_time=np.full(k, step), compute_time=compute, comm_time=step - compute,
                                      data_time=np.full(k, 0.001), tokens=np.full(k, 4096.0),
                                      nodes=tuple(f"n{r // 4}" for r in ranks), phase="train",
                                      missing=per_stage - k))
    return out


@pytest.mark.parametrize("stages,per_stage", [(2, 4), (4, 8), (3, 16)])
def test_a_stage_imbalance_names_the_whole_slow_stage_after_a_stall(stages, per_stage):
    """The last firing version of the stage alert names every rank of the slow stage, whichever of its ranks
    stalled from the start and for how long (before the fix: the ranks seen by the time it fired)."""
    for slow in range(stages):
        whole = list(range(slow * per_stage, (slow + 1) * per_stage))
        for stalled in (whole[0], whole[-1]):
            for stall in (5, 15, 40):
                for pace in (0.02, 1.5):
                    firing = [a for a in run_stages(stages, per_stage, slow, stalled, stall, pace)
                              if a.status == "firing"]
                    assert {a.evidence["kind"] for a in firing} == {"stage"}, (slow, stalled, stall, pace)
                    assert list(firing[-1].ranks) == whole, (slow, stalled, stall, pace)
                    assert firing[-1].evidence["groups"][0]["ranks"] == whole
                    # (each version says something new: one saying what the last said is not published)
                    assert len({a.summary for a in firing}) == len(firing)
