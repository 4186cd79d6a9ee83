"""What a closed step shares with the rules that judge it (issue 41 item 5, small jobs): a step of the same ranks as
its assembler's last one shares its read-only ranks array (the rules that keep the last ranks compare by identity),
and the time before the collectives is worked out once. On generated inputs, the same values and the same alerts as
a fresh, writeable array per step."""

from __future__ import annotations

import random

import numpy as np
import pytest

from engine_driver import replay
from small_job_gen import SmallJob
from stepwatch.models.steps import assembly
from stepwatch.models.steps.assembly import GroupStep, StepAssembler
from stepwatch.models.steps.layout import kept_ranks, same_ranks
from stepwatch.models.steps.robust import time_before
from stepwatch.models.wire.events import parse_event

NAN = float("nan")


def _closed(events: list[dict]) -> list[GroupStep]:
    a = StepAssembler(job="j", group="")
    out = []
    for e in events:
        out.extend(a.add(parse_event(e)))
    return out


@pytest.mark.parametrize("seed", range(3))
def test_steps_of_the_same_ranks_share_one_read_only_array_with_the_right_values(seed):
    job = SmallJob(job="j", ranks=4, steps=80, seed=seed, lose=0.1)  # lost events: some steps without a rank
    steps = _closed(job.events())
    assert len(steps) > 40
    seen: dict[tuple, np.ndarray] = {}
    for before, step in zip([None] + steps, steps):
        assert not step.ranks.flags.writeable
        assert step.ranks.tolist() == sorted(step.ranks.tolist())
        if before is not None and before.ranks.tolist() == step.ranks.tolist():
            assert step.ranks is before.ranks
        seen.setdefault(tuple(step.ranks.tolist()), step.ranks)
    assert len(seen) > 1, "the generated job never lost a rank: the test compares nothing"


@pytest.mark.parametrize("seed", range(4))
def test_same_ranks_and_kept_ranks_agree_with_a_compare_of_values(seed):
    rng = random.Random(seed)
    for _ in range(300):
        a = np.array(sorted(rng.sample(range(8), rng.randint(0, 6))), dtype=np.int64)
        b = np.array(sorted(rng.sample(range(8), rng.randint(0, 6))), dtype=np.int64)
        if rng.random() < 0.5:
            a.flags.writeable = False
        kept = kept_ranks(a)
        assert same_ranks(b, kept) == (len(a) == len(b) and bool(np.array_equal(a, b)))
        assert same_ranks(a, kept)
        if a.flags.writeable:  # the keeper's copy does not move with the sender's array
            assert kept is not a
            a[:] = -1
            assert len(kept) == 0 or kept.min() >= 0
        else:
            assert kept is a


@pytest.mark.parametrize("seed", range(4))
def test_time_before_is_the_difference_and_its_nan_check(seed):
    rng = random.Random(seed)
    pool = [0.0, -0.0, 1.0, 0.25, NAN, float("inf"), 3.5, 1e-9]
    for _ in range(300):
        n = rng.randint(0, 6)
        step_time = np.array([rng.choice(pool) if rng.random() < 0.3 else rng.uniform(0, 2) for _ in range(n)])
        comm = np.array([rng.choice(pool) if rng.random() < 0.3 else rng.uniform(0, 1) for _ in range(n)])
        step = GroupStep(job="j", group="", step=1, ts=0.0, ranks=np.arange(n), step_time=step_time,
                         compute_time=np.full(n, NAN), comm_time=comm, data_time=np.full(n, NAN),
                         tokens=np.full(n, NAN), nodes=(None,) * n, phase="train")
        with np.errstate(invalid="ignore"):
            want = step_time - comm
        got, complete = time_before(step)
        assert np.array_equal(got, want, equal_nan=True)
        assert np.signbit(got).tolist() == np.signbit(want).tolist()  # -0.0 stays -0.0
        assert complete == (not np.isnan(want).any())
        assert time_before(step)[0] is got and not got.flags.writeable


def _writeable_ranks(order: list[int]) -> np.ndarray:
    return np.fromiter(order, dtype=np.int64, count=len(order))  # a fresh array per step, as before the sharing


@pytest.mark.parametrize("seed, slow_rank", [(1, None), (2, 1), (3, 3)])
def test_the_alerts_are_those_of_a_fresh_ranks_array_per_step(seed, slow_rank, monkeypatch):
    job = SmallJob(job=f"small-{seed}", ranks=4, steps=160, seed=seed, slow_rank=slow_rank, slow_from=40, lose=0.03)
    events = job.events()
    shared = list(replay(parse_event(e) for e in events))
    assembly_build = assembly._ranks_array
    monkeypatch.setattr(assembly, "_ranks_array", _writeable_ranks)
    fresh = list(replay(parse_event(e) for e in events))
    monkeypatch.setattr(assembly, "_ranks_array", assembly_build)
    assert shared == fresh
    if slow_rank is not None:
        assert any(a.type == "straggler" and a.ranks == (slow_rank,) for a in shared)
