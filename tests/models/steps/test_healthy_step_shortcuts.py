"""The step rules' shortcuts for the usual step of a healthy job (issue 41 item 5, replay at fleet speed) leave the
state the long way leaves, and give its floats: on generated jobs (sizes, slow ranks, lost events), every alert and
every ring, CUSUM and rate after every step are those of the rules with their shortcuts off; numpy's median of
NaN-free rows is nanmedian's float (the imbalance rule's class split); the throughput sample of a step is the float
the numpy way gives, the sign of a zero included; a big group's max is np.nanmax's float."""

from __future__ import annotations

import random

import numpy as np
import pytest

from small_job_gen import SmallJob
from stepwatch.models.jobhealth import throughput
from stepwatch.models.steps import (long_straggler, straggler, straggler_background, straggler_data_wait,
                                    straggler_episodes)
from stepwatch.models.steps.assembly import GroupStep, StepAssembler
from stepwatch.models.steps.long_straggler import LongStragglerDetector
from stepwatch.models.steps.robust import nan_max, step_median, time_before
from stepwatch.models.steps.straggler import StragglerDetector
from stepwatch.models.wire.events import parse_event

NAN = float("nan")


def _steps(job: SmallJob) -> list[GroupStep]:
    """The job's closed steps, its events given a data wait (noise; rank 1 waits on its input from step 120 to 200
    in odd seeds), so the data-wait channel is judged too."""
    rng, a = random.Random(job.seed), StepAssembler(job=job.job, group="")
    events = job.events()
    for e in events:
        e["data_time"] = 0.002 * rng.random() + (0.05 if job.seed % 2 and e["rank"] == 1 and 120 <= e["step"] < 200
                                                 else 0.0)
    return [s for e in events for s in a.add(parse_event(e))]


def _floats(a: np.ndarray) -> list[str]:
    return [repr(v) for v in np.asarray(a, dtype=float).ravel().tolist()]


def _state(short: StragglerDetector, long: LongStragglerDetector) -> tuple:
    h = short._history
    e = short._episodes
    return (_floats(h.slow), h.clean_run.tolist(), h.episode_start.tolist(), _floats(h.ratio), h.evaluated,
            repr(short._background._slow), repr(short._background._n), sorted(short._firing),
            _floats(e._ring), e.count.tolist(), e._steps.tolist(), e._episode_slow.tolist(), e._episode_steps.tolist(),
            _floats(e._ratio), _floats(e._peer), e.n, short._data.run.tolist(), _floats(short._data._ring),
            _floats(long._cusum), long._onset.tolist(), _floats(long._ratio), _floats(long._wait), sorted(long._firing))


def _run(job: SmallJob) -> list:
    short, long = StragglerDetector(job=job.job), LongStragglerDetector(job=job.job, window=60, resolve_steps=30)
    out = []
    for step in _steps(job):
        alerts = short.update(step) + long.update(step, exclude=short.speaking_for())
        out.append((alerts, _state(short, long)))
    return out


@pytest.mark.parametrize("seed, ranks, slow_rank, factor", [(1, 4, None, 1.0), (2, 4, 2, 1.4), (3, 5, 1, 1.08),
                                                            (4, 8, 3, 1.05), (5, 6, 0, 2.0), (6, 16, 7, 1.1)])
def test_rules_with_their_shortcuts_leave_the_long_ways_state_after_every_step(seed, ranks, slow_rank, factor,
                                                                               monkeypatch):
    """Invariant: for any job, the shortcuts change no alert and no state: each skips only work whose result it
    proves unchanged (no slow verdict: no episode starts, every clean run grows, only the verdicts leaving the
    intermittent ring change its counts, every data-wait run ends; CUSUMs at 0 with no rank above
    the bar stay at 0)."""
    job = SmallJob(job=f"j{seed}", ranks=ranks, steps=260, seed=seed, slow_rank=slow_rank, slow_factor=factor,
                   slow_from=60, lose=0.03)
    fast = _run(job)
    monkeypatch.setattr(long_straggler, "at_rest", lambda *a: False)
    monkeypatch.setattr(straggler, "none_slow", lambda flags: False)
    monkeypatch.setattr(straggler_background, "none_slow", lambda flags: False)
    monkeypatch.setattr(straggler_episodes, "none_slow", lambda flags: False)
    monkeypatch.setattr(straggler_data_wait, "none_slow", lambda flags: False)
    slow = _run(job)
    assert len(fast) == len(slow) > 200
    for n, (a, b) in enumerate(zip(fast, slow)):
        assert a == b, n
    if slow_rank is not None and factor >= 1.4:
        assert any(alert.ranks == (slow_rank,) for alerts, _ in fast for alert in alerts)


@pytest.mark.parametrize("seed", range(3))
def test_median_of_rows_without_nan_is_nanmedians_float(seed):
    """Invariant: ``np.median(a, axis=0)`` of a NaN-free array is ``np.nanmedian``'s float, bit for bit (both take the
    middle one, or ``(a + b) / 2`` of the middle two), so the class split takes the cheap one when no row has a hole."""
    rng = random.Random(seed)
    specials = [-0.0, 0.0, 1e300, float("inf"), 5e-324, 1.0, 1.0 + 2 ** -52, 3.0]
    for _ in range(300):
        rows, cols = rng.choice([1, 2, 3, 4, 5, 8, 16, 64]), rng.choice([1, 7, 10, 200])
        a = np.array([[rng.choice(specials) if rng.random() < 0.2 else round(rng.uniform(0, 10 ** rng.randint(-3, 3)),
                                                                              rng.randint(0, 9))
                       for _ in range(cols)] for _ in range(rows)])
        assert _floats(np.median(a, axis=0)) == _floats(np.nanmedian(a, axis=0))
        assert _floats(np.median(a, axis=1)) == _floats(np.nanmedian(a, axis=1))


def _sample_the_numpy_way(step: GroupStep) -> throughput.StepSample:
    """``sample_from`` before its Python path for a few ranks (numpy reductions throughout)."""
    step_time = step_median(step, "step_time")
    typical = step_time
    before, complete = time_before(step)
    median_before = slowest = NAN
    if before.size and complete:
        # (a pair's typical rank is its quicker one: test_small_group_input_stall.py)
        median_before = step_median(step, "before", before) if before.size != 2 else float(np.min(before))
        slowest = float(np.max(before))
        typical = float(median_before + np.min(step.comm_time))
    tokens = step.tokens[~np.isnan(step.tokens)]
    tps = float(tokens.sum() / typical) if tokens.size and typical > 0 else NAN
    per_rank = tps / tokens.size if tokens.size else NAN
    comm = step.comm_time[~np.isnan(step.comm_time)]
    transfer = float(comm.min()) if comm.size else NAN
    return throughput.StepSample(step.step, step.ts, step_time, typical, step_median(step, "compute_time"), transfer,
                                 step_median(step, "data_time"), tps, per_rank, step.missing, step.group or "",
                                 median_before, float(tokens.sum()) if tokens.size else NAN, slowest)


@pytest.mark.parametrize("seed", range(3))
def test_throughput_sample_is_the_numpy_ways_float(seed):
    """Invariant: for any step (1 to 20 ranks, holes, zeros of either sign, ties), the throughput sample's fields
    are the floats of numpy's reductions."""
    rng = random.Random(seed)
    specials = [NAN, -0.0, 0.0, 1e16, 1.0, 4096.0, 0.25]

    def column(n: int, hole: float) -> np.ndarray:
        return np.array([rng.choice(specials) if rng.random() < hole else round(rng.uniform(0, 2), rng.randint(1, 9))
                         for _ in range(n)])

    for _ in range(2000):
        n = rng.choice([1, 2, 3, 4, 5, 7, 8, 9, 16, 20])
        hole = rng.choice([0.0, 0.0, 0.1, 0.4])
        step = GroupStep(job="j", group=rng.choice(["", "pp1"]), step=rng.randint(0, 99), ts=1000.0,
                         ranks=np.arange(n), step_time=column(n, hole), compute_time=column(n, hole),
                         comm_time=column(n, hole), data_time=column(n, hole), tokens=column(n, hole),
                         nodes=("a",) * n, phase="train")
        twin = GroupStep(**{k: getattr(step, k) for k in ("job", "group", "step", "ts", "ranks", "step_time",
                                                          "compute_time", "comm_time", "data_time", "tokens",
                                                          "nodes", "phase")})
        got, want = throughput.sample_from(step), _sample_the_numpy_way(twin)
        assert repr(got) == repr(want), (step.step_time, step.comm_time, step.tokens)


@pytest.mark.parametrize("seed", range(3))
def test_top_two_are_argmax_and_partitions_floats(seed):
    """Invariant: for any 1-D array of 2+ values (ties, NaN, zeros of either sign, infinities), the long-horizon
    rule's wait is taken at ``np.argmax``'s index from ``np.partition``'s two largest floats."""
    rng = random.Random(seed)
    specials = [NAN, -0.0, 0.0, float("inf"), -float("inf"), 1.0, 1.0 + 2 ** -52, 0.5]
    for _ in range(3000):
        n = rng.choice([2, 3, 4, 5, 8, 16, 17, 64])
        x = np.array([rng.choice(specials) if rng.random() < 0.25 else round(rng.uniform(0, 2), rng.randint(0, 6))
                      for _ in range(n)])
        top, first, second = long_straggler._top_two(x)
        want_second, want_first = np.partition(x, n - 2)[-2:]
        assert (top, repr(float(first)), repr(float(second))) == \
            (int(np.argmax(x)), repr(float(want_first)), repr(float(want_second))), x.tolist()


@pytest.mark.parametrize("seed", range(3))
def test_nan_max_of_many_values_is_numpys_float(seed):
    """Invariant: for any 1-D array (17 to 300 values: a big group's ranks; holes or none, zeros of either sign,
    infinities), ``nan_max`` is ``np.nanmax``'s float, NaN when all are NaN."""
    rng = random.Random(seed)
    specials = [NAN, -0.0, 0.0, float("inf"), -float("inf"), 1.0, 5e-324]
    for _ in range(2000):
        n = rng.choice([17, 32, 64, 65, 300])
        share = rng.choice([0.0, 0.0, 0.01, 0.3, 1.0])
        x = np.array([rng.choice(specials) if rng.random() < share else -round(rng.uniform(0, 2), rng.randint(0, 6))
                      if rng.random() < 0.2 else round(rng.uniform(0, 2), rng.randint(0, 6)) for _ in range(n)])
        if rng.random() < 0.1:
            x[:] = rng.choice([-0.0, 0.0, NAN])
        want = float(np.nanmax(x)) if (~np.isnan(x)).any() else NAN
        assert repr(nan_max(x)) == repr(want), x.tolist()
