"""The comm rule judges a collective once all its ranks are in, whatever order the events come in
(models/jobhealth/comm.py, issue 26 item 7): a straggler plus node clocks seconds apart, replayed from a
recording sorted by event time, is a straggler and never a network alert.

Recordings from tests/fabric_gen.py (not the simulator).
"""

from __future__ import annotations

import random

import pytest

from stepwatch.models.jobhealth.comm import CommSlowdownDetector, is_p2p
from stepwatch.models.wire.events import CollectiveEvent

from engine_driver import replay
from fabric_gen import Job, events


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("order", ["event_time", "arrival"])
def test_a_straggler_with_clocks_4s_ahead_and_2_5s_behind_never_becomes_a_comm_slowdown(seed, order):
    job = Job(straggler=21, straggler_factor=1.2, skew={1: 4.0, 5: -2.5}, seed=seed, steps=140, onset=50)
    evs = events(job)
    feed = [ev for _, ev in (sorted(evs, key=lambda x: x[1].ts) if order == "event_time" else evs)]
    firing = [a for a in replay(feed) if a.status == "firing"]
    assert [a.summary for a in firing if a.type in ("comm_slowdown", "throughput_drop")] == []
    assert {a.ranks for a in firing if a.type == "straggler"} == {(21,)}


def test_a_real_slowdown_replayed_in_event_time_order_still_fires():
    job = Job(fault="fabric", slow=1.6, skew={1: 4.0, 5: -2.5}, seed=7, steps=140, onset=60)
    feed = [ev for _, ev in sorted(events(job), key=lambda x: x[1].ts)]
    assert any(a.type == "comm_slowdown" for a in replay(feed))


def collective(rank: int, seq: int, duration: float, ts: float) -> CollectiveEvent:
    return CollectiveEvent(job="j", rank=rank, seq=seq, op="all_reduce", ts=ts, duration=duration, pg="g",
                           bytes=1 << 20)


def test_shuffled_arrival_gives_the_same_transfer_samples_as_in_order():
    # 8 ranks, rank 7 always last (shortest duration): the transfer is its duration whatever the order
    rng = random.Random(5)
    evs = [collective(r, seq, 0.1 if r == 7 else 0.5 + 0.01 * r, 100.0 + seq) for seq in range(40) for r in range(8)]
    shuffled = evs[:]
    for i in range(0, len(shuffled), 24):  # events up to three collectives apart come in any order
        chunk = shuffled[i:i + 24]
        rng.shuffle(chunk)
        shuffled[i:i + 24] = chunk
    samples = []
    for feed in (evs, shuffled):
        d = CommSlowdownDetector(job="j")
        for ev in feed:
            d.update(ev)
        state = next(iter(d._keys.values()))
        samples.append(sorted(state.transfer))
    assert samples[0] == samples[1] and set(samples[0]) == {0.1}


def test_p2p_ops_are_recognised():
    assert all(is_p2p(op) for op in ("send", "recv", "irecv", "forward-recv", "backward-send"))
    assert not any(is_p2p(op) for op in ("all_reduce", "reduce_scatter", "broadcast"))
