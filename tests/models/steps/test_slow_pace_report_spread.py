"""A job of 10 s-2 min steps whose slow rank reports each step's end tens of seconds after its peers (its own
compute is 1.5x theirs; each rank reports when its own work ends), with the worker's timer ticking every second
through the silence in between, as live. Invariant: the straggler is named, alone, at every pace and world size;
the assembler's wait for an incomplete step grows with the job's own pace (``WAIT_SHARE`` of it, where that is over
``max_wait_seconds``), so a step does not close without its slowest rank at 2-minute steps.

(The metamorphic grid's hand:straggler / step 120s: rank 5's events 38 s behind the others'; it held only while
replay did not tick in a silence, models/sources.py ``gap_ticks``.) Events written here."""

from __future__ import annotations

import random

import pytest

from stepwatch.models.detection import DetectionEngine
from stepwatch.models.wire.events import parse_event

SLOW_RANK, FACTOR, STEPS, ONSET = 1, 1.5, 60, 15


def spread_job(pace: float, ranks: int, seed: int) -> list[tuple[float, dict]]:
    """(arrival, event) in arrival order: each rank reports its step when its own compute and transfer end; the
    next step starts once the slowest did; arrivals a second or less after the stamp."""
    rng = random.Random(seed)
    compute_s, transfer = 0.8 * pace, 0.2 * pace
    t = 1_000.0
    sent: list[tuple[float, dict]] = []
    for n in range(STEPS):
        compute = {r: compute_s * (FACTOR if r == SLOW_RANK and n >= ONSET else 1.0) * rng.uniform(0.98, 1.02)
                   for r in range(ranks)}
        for r in range(ranks):
            ts = t + compute[r] + transfer
            sent.append((ts + rng.uniform(0.05, 1.0),
                         {"v": 1, "kind": "step", "job": "slow", "rank": r, "node": f"n{r // 8}", "world_size": ranks,
                          "step": n, "ts": round(ts, 6), "step_time": compute[r] + transfer,
                          "compute_time": compute[r], "comm_time": transfer}))
        t += max(compute.values()) + transfer
    sent.sort(key=lambda p: p[0])
    return sent


def replay_ticking(events: list[tuple[float, dict]]) -> list[tuple[str, tuple[int, ...]]]:
    """The events through one engine, its timer ticking every second of the arrivals' clock (through silences
    too): the firing alerts' (type, ranks)."""
    engine = DetectionEngine()
    firing = []
    tick = events[0][0]
    for arrival, e in events:
        alerts = []
        while tick + 1.0 <= arrival:
            tick += 1.0
            alerts += engine.tick(tick)
        alerts += engine.process(parse_event(e), arrival=arrival)
        firing += [(str(a.type), tuple(a.ranks)) for a in alerts if str(a.status) == "firing"]
    return firing


@pytest.mark.parametrize("pace,ranks,seed", [(10.0, 8, 1), (30.0, 4, 2), (60.0, 16, 3), (90.0, 8, 4),
                                             (100.0, 4, 5), (120.0, 8, 6), (120.0, 16, 7)])
def test_a_slow_rank_reporting_tens_of_seconds_after_its_peers_is_named(pace, ranks, seed):
    spread = (FACTOR - 1) * 0.8 * pace  # how far behind its peers the slow rank reports
    assert spread < 0.5 * pace  # (the case this covers: up to 48 s at 2-minute steps)
    firing = replay_ticking(spread_job(pace, ranks, seed))
    assert firing, f"nothing fired at {pace} s steps ({spread:.0f} s behind)"
    assert {t for t, _ in firing} == {"straggler"}, firing
    assert {r for _, r in firing} == {(SLOW_RANK,)}, firing
