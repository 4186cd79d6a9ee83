"""A collective judged without a firing straggler's rank is no network evidence. The straggler arrives last, so
the others' durations are their wait for it; its own (the shortest: the transfer) is what the minimum needs.
When its producer stalls (its events late by more than the judging bound, or lost), the collectives are judged
on the waiting ranks alone and read as a slower network: gen2:pipeline-slow-stage with 1% of its messages 30 s
late paged a critical ``comm_slowdown`` beside the straggler. Generated: stalls of 25-60 collectives, 4 and 8
ranks; a real slowdown during the same stall still fires."""

from __future__ import annotations

import random
from types import SimpleNamespace

import pytest

from stepwatch.models.jobhealth.comm import CommSlowdownDetector
from stepwatch.models.wire.events import CollectiveEvent

SEQS, SLOW_FROM, STALL_FROM = 200, 40, 60


def run(ranks: int, stall: int, link: float = 1.0, seed: int = 0) -> list:
    """Firing comm alerts: rank ``ranks - 1`` a straggler (named from ``SLOW_FROM``: the job's straggler rule),
    its events lost for ``stall`` collectives from ``STALL_FROM``; transfers ``link`` times longer from there."""
    rng = random.Random(seed)
    slow = ranks - 1
    d = CommSlowdownDetector(job="j")
    state = {"seq": 0}
    straggler = SimpleNamespace(ranks=(slow,), id="s")
    d.explained = lambda: straggler if state["seq"] >= SLOW_FROM else None
    out = []
    for seq in range(SEQS):
        state["seq"] = seq
        transfer = 0.05 * (link if seq >= STALL_FROM else 1.0) * rng.uniform(0.97, 1.03)
        wait = 0.1 if seq >= SLOW_FROM else 0.0  # the others wait for the straggler's compute
        for rank in range(ranks):
            if rank == slow and STALL_FROM <= seq < STALL_FROM + stall:
                continue
            out += d.update(CollectiveEvent(job="j", rank=rank, seq=seq, op="all_reduce", pg="dp", ts=1000.0 + seq,
                                            bytes=1 << 28, duration=transfer + (0.0 if rank == slow else wait)))
    return [a for a in out if a.status == "firing"]


@pytest.mark.parametrize("ranks", [4, 8])
@pytest.mark.parametrize("stall", [25, 40, 60])
def test_a_stalled_stragglers_collectives_are_no_comm_slowdown(ranks, stall):
    assert run(ranks, stall) == []


@pytest.mark.parametrize("ranks", [4, 8])
def test_a_real_slowdown_during_the_stall_still_fires(ranks):
    assert [a.type for a in run(ranks, 40, link=2.0)] == ["comm_slowdown"]
