"""Every rank slow on a share of its steps (a rotating MoE hot expert, job-wide jitter) pages nobody, from the
first judged steps on (models/steps/straggler.py ``_background_now``).

Events written here by hand (not by the simulator): 16 ranks on 4 nodes, ~0.25 s of compute a step with 2 %
noise; in the routing-noise job each rank computes 1.3x on a random 20 % of its steps, independently. The
k-of-n test judged those at the background rate it had learnt, which in a job of 16 ranks takes hundreds of
steps to get there from its prior (0.1 %): until then every rank that happened to be slow 3 steps in 5 paged
(13 alerts in 300 steps). The other ranks of the same window show the rate at once.
"""

from __future__ import annotations

import random

from engine_driver import replay
from stepwatch.models.wire.events import parse_event

RANKS, PER_NODE = 16, 4


def events(steps: int, *, routing: float = 0.0, slow: dict[int, tuple[int, float]] | None = None, seed: int = 7):
    """``routing``: each rank's chance per step of a 1.3x step; ``slow``: rank -> (from step, factor)."""
    rng = random.Random(seed)
    ts, out = 1_700_000_000.0, []
    for step in range(steps):
        compute = []
        for rank in range(RANKS):
            c = 0.25 * (1.0 + rng.gauss(0.0, 0.02))
            if rng.random() < routing:
                c *= 1.3
            start, factor = (slow or {}).get(rank, (None, 1.0))
            if start is not None and step >= start:
                c *= factor
            compute.append(c)
        step_time = max(compute) + 0.05
        ts += step_time
        out += [parse_event({"v": 1, "kind": "step", "job": "moe", "rank": r, "node": f"n{r // PER_NODE}",
                             "step": step, "ts": ts, "step_time": step_time, "compute_time": compute[r]})
                for r in range(RANKS)]
    return out


def stragglers(evs):
    return [a for a in replay(evs) if a.type == "straggler" and a.status == "firing"]


def test_routing_noise_on_every_rank_pages_nobody():
    assert stragglers(events(300, routing=0.2)) == []


def test_a_real_straggler_in_the_noise_is_found():
    found = stragglers(events(300, routing=0.2, slow={14: (150, 1.5)}))
    assert [a.ranks for a in found] == [(14,)], [(a.ranks, a.evidence.get("detected_step")) for a in found]
    assert found[0].evidence["detected_step"] <= 165


def test_two_stragglers_at_once_in_a_quiet_job_fire_at_once():
    # The window's other ranks set no rate here (the two slow ranks are both candidates): 3 steps in 5.
    found = stragglers(events(120, slow={2: (60, 1.35), 13: (60, 1.5)}))
    assert sorted(a.ranks for a in found) == [(2,), (13,)]
    assert all(a.evidence["detected_step"] <= 63 for a in found), [a.evidence["detected_step"] for a in found]


def test_a_slow_node_in_a_quiet_job_fires_at_once():
    found = stragglers(events(120, slow={r: (60, 1.4) for r in range(4, 8)}))
    assert found and all(a.evidence["detected_step"] <= 63 for a in found)
    assert set().union(*(a.ranks for a in found)) == {4, 5, 6, 7}
