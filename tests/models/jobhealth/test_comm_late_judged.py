"""A comm slowdown is never stamped before the link slowed. An incomplete collective (one rank's event lost) is
judged late, once ``max_lag`` collectives or ``time_bound`` seconds behind the newest: when that judgement is
the one that fires (the window slowed meanwhile), the alert's time is the window's newest collective, not the
late one's (gen3:link_fault's base fired "1.65 s before the onset" while its variants, whose losses fell
elsewhere, fired 26 s after: the metamorphic delay broke on every variant). Generated: the lost event at every
distance before the onset, collectives 1 s and 0.25 s apart, 4 and 8 ranks."""

from __future__ import annotations

import random

import pytest

from stepwatch.models.jobhealth.comm import CommSlowdownDetector
from stepwatch.models.wire.events import CollectiveEvent

ONSET, SEQS = 80, 160


def feed(ranks: int, gap: float, lost_seq: int, seed: int) -> tuple[list, float]:
    """The comm alerts of a job whose transfers take 1.8x from ``ONSET`` on (every rank alike), one event of
    ``lost_seq`` lost; and the onset's time."""
    rng = random.Random(seed)
    d = CommSlowdownDetector(job="j")
    alerts = []
    for seq in range(SEQS):
        transfer = 0.25 * (1.8 if seq >= ONSET else 1.0) * rng.uniform(0.97, 1.03)
        for rank in range(ranks):
            if seq == lost_seq and rank == ranks - 1:
                continue
            alerts += d.update(CollectiveEvent(job="j", rank=rank, seq=seq, op="all_reduce", pg="dp",
                                               ts=1000.0 + gap * seq + 0.3, bytes=1 << 28,
                                               duration=transfer + 0.01 * rank))
    return [a for a in alerts if a.status == "firing"], 1000.0 + gap * ONSET


@pytest.mark.parametrize("ranks,gap", [(8, 1.0), (4, 0.25)])
def test_a_late_judged_collective_never_stamps_the_slowdown_before_the_link_slowed(ranks, gap):
    for distance in range(1, 41):
        firing, onset_ts = feed(ranks, gap, ONSET - distance, seed=distance)
        assert [a.type for a in firing] == ["comm_slowdown"], distance
        assert firing[0].starts_at >= onset_ts, (distance, firing[0].starts_at - onset_ts)
