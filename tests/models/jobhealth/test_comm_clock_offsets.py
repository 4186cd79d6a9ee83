"""Hosts' clocks tens of seconds apart do not judge a collective early (models/jobhealth/comm.py ``_moved_on``).

gen2:straggler-64 / clocks +-30s paged a critical comm_slowdown beside its straggler: the incomplete-collective
bound compared the newest event's time (a host 30 s ahead) with the collective's earliest (a host 30 s behind), so
its first collectives were judged on the first few ranks in, the rule learned that its collectives have that many
ranks (``expected``), and from then on every collective was "complete" without the straggler: the ranks' waits for it
were the transfer. Generated: 16-64 ranks on nodes of 8, clock spreads of 2-45 s, events in each collective's true
order or shuffled, a straggler that every other rank waits for from the onset on.
"""

from __future__ import annotations

import random

import pytest

from stepwatch.models.jobhealth.comm import CommSlowdownDetector
from stepwatch.models.wire.events import CollectiveEvent

SEQS, ONSET, GAP, TRANSFER, WAIT = 150, 60, 0.5, 0.05, 0.12


def alerts(ranks: int, spread: float, shuffled: bool, seed: int) -> list:
    """The comm alerts of a job whose every collective is complete (no event lost): rank ``ranks // 3`` arrives
    ``WAIT`` late from ``ONSET`` on (its duration the transfer, the others' the transfer plus their wait), each
    node's clock off by up to +-``spread`` seconds."""
    rng = random.Random(seed)
    nodes = ranks // 8
    offset = [rng.uniform(-spread, spread) for _ in range(nodes)]
    slow = ranks // 3
    d = CommSlowdownDetector(job="j")
    out = []
    for seq in range(SEQS):
        end = 1000.0 + seq * GAP  # every rank leaves the all-reduce at once (true time)
        order = list(range(ranks))
        if shuffled:
            rng.shuffle(order)
        elif seq >= ONSET:
            order.remove(slow)
            order.append(slow)  # (its producer sends last: it arrived last)
        for r in order:
            wait = WAIT if seq >= ONSET and r != slow else 0.0
            duration = TRANSFER * rng.uniform(1.0, 1.05) + wait
            out.extend(d.update(CollectiveEvent(job="j", rank=r, seq=seq, op="all_reduce",
                                                ts=end + offset[r // 8], duration=duration, node=f"n{r // 8:02d}",
                                                pg="default", bytes=1 << 28)))
    return out


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("shuffled", [False, True])
@pytest.mark.parametrize("spread", [2.0, 20.0, 30.0, 45.0])
@pytest.mark.parametrize("ranks", [16, 32, 64])
def test_a_straggler_among_hosts_clocks_apart_is_no_comm_slowdown(ranks, spread, shuffled, seed):
    """Invariant: with every collective's events in, the transfer is the last arriver's duration whatever the
    hosts' clocks say: a straggler the others wait for is never a comm_slowdown, at any clock spread (the bound on
    an incomplete collective is read on each rank's own clock)."""
    assert [a.summary for a in alerts(ranks, spread, shuffled, seed)] == []


def test_a_lost_event_is_still_judged_once_its_ranks_moved_on():
    """The bound still closes a collective whose rank's event was lost: once a rank in it has moved ``time_bound``
    seconds past it on its own clock (here before ``max_lag`` collectives: 2 s apart, 32 would take 64 s)."""
    d = CommSlowdownDetector(job="j")
    for seq in range(20):
        for r in range(8):
            if seq == 3 and r == 5:
                continue  # lost
            d.update(CollectiveEvent(job="j", rank=r, seq=seq, op="all_reduce", ts=1000.0 + 2.0 * seq,
                                     duration=0.05, node=f"n{r // 2}", pg="default", bytes=1 << 20))
    state = next(iter(d._keys.values()))
    assert 3 not in state.pending and 3 in state.judged_set and state.expected == 8
