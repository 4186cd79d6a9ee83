"""A stalled input pipeline in a job of 2-3 ranks (models/steps/straggler_data_wait.py, small groups;
models/jobhealth/throughput.py, a pair's typical rank).

Invariants, over generated jobs (2-3 ranks x paces 0.05-30 s x stall sizes x which rank x noise x seeds):

* a rank whose data wait grows by a share of a step's compute on every step, its compute unchanged, is named
  as the job's straggler with the input pipeline as its signal, and only it; no ``throughput_drop`` comes with
  it (of two ranks the median is their mean, which half of one rank's stall moves: a pair's typical rank is the
  quicker one);
* a healthy data-bound job (both ranks waiting for data, the waits jittering independently) names no rank (its
  jitter's swings of the step time are the throughput rule's own business, the same before and after);
* a job-wide slowdown of a pair is still a ``throughput_drop`` and names no rank.

Before the change a pair's data-wait channel was off (of two ranks the MAD is half their gap: z 0.67 whatever the
stall), so the stalled rank was never named and the job read as a throughput drop (gen3:input_stall / world 2).
"""

from __future__ import annotations

import itertools
import random

import pytest

from engine_driver import replay
from stepwatch.models.wire.events import parse_event

T0 = 1_790_000_000.0


def job_events(*, job: str, ranks: int, steps: int, compute: float, data: float, jitter: float,
               stall_rank: int | None = None, stall: float = 0.0, stall_from: int = 60,
               jobwide: float = 1.0, seed: int = 1) -> list[dict]:
    """A synchronous job's step events: each rank waits ``data`` (+- ``jitter`` x data, uniform) for its batch,
    computes ``compute`` (+-2 %), then waits in the all-reduce for the last rank and the transfer."""
    rng = random.Random(seed)
    comm = 0.1 * compute
    t = T0
    out = []
    for step in range(steps):
        waits, computes = [], []
        for rank in range(ranks):
            d = data * (1 + rng.uniform(-jitter, jitter))
            if rank == stall_rank and step >= stall_from:
                d += stall * compute
            c = compute * (1 + rng.uniform(-0.02, 0.02))
            if step >= stall_from:
                c *= jobwide
            waits.append(d)
            computes.append(c)
        step_time = max(d + c for d, c in zip(waits, computes)) + comm
        t += step_time
        for rank in range(ranks):
            out.append({"v": 1, "kind": "step", "job": job, "rank": rank, "step": step,
                        "ts": round(t + rng.uniform(0, 0.002), 6), "step_time": round(step_time, 6),
                        "data_time": round(waits[rank], 6), "compute_time": round(computes[rank], 6),
                        "comm_time": round(step_time - waits[rank] - computes[rank], 6),
                        "node": f"n{rank:02d}", "world_size": ranks})
    return out


def alerts_of(events: list[dict]) -> list:
    return [a for a in replay(parse_event(e) for e in events) if a.status == "firing"]


PACES = [0.05, 0.4, 2.0, 30.0]
STALLS = [
    # (ranks, stalled rank, stall as a share of compute, data wait as a share of compute, jitter)
    (2, 1, 0.5, 0.02, 0.5),
    (2, 0, 0.3, 0.1, 0.3),
    (3, 2, 0.5, 0.05, 0.5),
    (3, 0, 1.0, 0.02, 0.2),
]


@pytest.mark.parametrize("pace, case, seed", [(p, c, s) for p, c, s in
                                              itertools.product(PACES, STALLS, [1, 2])])
def test_a_stalled_input_pipeline_of_a_small_job_is_its_straggler_and_no_throughput_drop(pace, case, seed):
    ranks, stalled, stall, data, jitter = case
    fired = alerts_of(job_events(job="loader", ranks=ranks, steps=140, compute=pace, data=data * pace,
                                 jitter=jitter, stall_rank=stalled, stall=stall, seed=seed))
    stragglers = [a for a in fired if a.type == "straggler"]
    assert stragglers, f"the stalled rank of a {ranks}-rank job was not named"
    assert {a.ranks for a in stragglers} == {(stalled,)}
    assert stragglers[0].evidence.get("signal", "data_time") == "data_time" or \
        "input data" in stragglers[0].summary
    assert stragglers[0].evidence["detected_step"] <= 60 + 15
    assert not [a for a in fired if a.type == "throughput_drop"], [a.summary for a in fired]


@pytest.mark.parametrize("ranks, pace, seed", list(itertools.product([2, 3], PACES, [1, 2, 3])))
def test_a_healthy_data_bound_small_job_names_no_rank(ranks, pace, seed):
    # Both ranks wait for data longer than they compute, the waits jittering +-60 % independently.
    fired = alerts_of(job_events(job="databound", ranks=ranks, steps=400, compute=pace, data=1.5 * pace,
                                 jitter=0.6, seed=seed))
    assert [a for a in fired if a.type == "straggler"] == [], [a.summary for a in fired]


@pytest.mark.parametrize("pace, seed", list(itertools.product(PACES, [1, 2])))
def test_a_job_wide_slowdown_of_a_pair_is_still_a_throughput_drop(pace, seed):
    fired = alerts_of(job_events(job="slowdown", ranks=2, steps=160, compute=pace, data=0.02 * pace,
                                 jitter=0.5, jobwide=1.6, stall_from=60, seed=seed))
    assert [a.type for a in fired] == ["throughput_drop"], [a.summary for a in fired]
