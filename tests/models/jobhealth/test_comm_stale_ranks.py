"""A comm_slowdown names ranks ("slowed most") by comparing their own duration growth only with ranks whose recent
durations are of the recent collectives (models/jobhealth/comm.py ``_fire``).

library:comm-slowdown-2.5x-64 with host clocks +-30 s in a recording without arrival times (the metamorphic
grid's 'clocks +-30s'): its collectives were judged on node-004's 8 ranks and one other, the rest of each
collective's events judged out; at the firing the other 56 ranks' recent durations were of collectives long
before the slowdown, read as not grown, and node-004's 8 ranks stood out: "slowed most: ranks 33, 35, 32" for a
network slowdown that slowed every rank alike (the base names none).
"""

from __future__ import annotations

import random

import pytest

from stepwatch.models.jobhealth.comm import CommSlowdownDetector
from stepwatch.models.wire.events import CollectiveEvent

ONSET = 150


def _run(ranks: int, front: int, share: float, slow: float, own: bool, seed: int) -> list:
    """``ranks`` ranks (8 a node), an all-reduce a second; every rank in the first 60 collectives, then only the
    first ``front`` ranks in every one and each other rank in a ``share`` of them (its events lost or judged out);
    from collective ``ONSET`` the transfer ``slow`` x longer for every rank alike (``own``: rank 1's duration
    grows twice as much besides, a rank slowed more)."""
    rng = random.Random(seed)
    d = CommSlowdownDetector(job="j")
    out = []
    for s in range(300):
        transfer = 0.08 * (slow if s >= ONSET else 1.0)
        last = rng.randrange(ranks)
        judged = range(ranks) if s < 60 else [r for r in range(ranks) if r < front or rng.random() < share]
        for r in judged:
            duration = transfer + (0.0 if r == last else rng.uniform(0.0, 0.03))
            if own and r == 1 and s >= ONSET:
                duration += transfer
            out += d.update(CollectiveEvent(job="j", rank=r, seq=s, op="all_reduce", ts=1000.0 + s,
                                            duration=duration, pg="g", bytes=1 << 20, node=f"n{r // 8}"))
    return [a for a in out if a.status == "firing"]


def _cases(seed: int = 61) -> list[tuple]:
    rng = random.Random(seed)
    out = []
    for ranks in (16, 32, 64, 128):
        for own in (False, True):
            front = rng.choice([r for r in (4, 8, 16) if r < ranks // 2 + 1])
            out.append((ranks, front, round(rng.uniform(0.02, 0.15), 3), round(rng.uniform(1.5, 3.0), 2), own,
                        rng.randrange(1000)))
    return out


@pytest.mark.parametrize("ranks, front, share, slow, own, seed", _cases())
def test_ranks_judged_out_of_the_recent_collectives_do_not_make_the_others_slowed_most(ranks, front, share, slow,
                                                                                      own, seed):
    """Invariant: a slowdown of every rank alike names no rank, whichever ranks the recent collectives were judged
    on (a rank left out of most of them holds pre-slowdown durations: it is no evidence that the others grew
    more); a rank of the recent collectives whose own durations grew more than theirs is still named."""
    firing = _run(ranks, front, share, slow, own, seed)
    comm = [a for a in firing if a.type == "comm_slowdown"]
    assert comm, "the slowdown fires"
    assert comm[0].ranks == ((1,) if own else ()), comm[0].summary
