"""Two ranks: one rank's paired ratio is the other's inverse, so a slowdown of one reads as a speed-up of the
other. Whatever the slow rank's factor (under the threshold and learnt as the usual pace, or over it), when it
slows and when it recovers, the healthy rank is never named (metamorphic grid leftover d: a 1.09x rank learnt as
usual, then recovering, made its healthy peer "1.10x slower than its own recent steps"). Recordings from
tests/step_gen.py (not the simulator)."""

from __future__ import annotations

import pytest

from engine_driver import replay
from step_gen import SyncJob
from stepwatch.models.wire.events import parse_event


def _named(job: SyncJob) -> set[int]:
    alerts = [a for a in replay(parse_event(e) for e in job.events()) if a.type == "straggler"]
    return {r for a in alerts if a.status == "firing" for r in a.ranks}


@pytest.mark.parametrize("slow_rank", [0, 1])
@pytest.mark.parametrize("factor", [1.09, 1.105, 1.11, 1.3])
def test_the_healthy_rank_of_a_pair_is_never_named(slow_rank: int, factor: float):
    job = SyncJob(job=f"pair-{slow_rank}-{factor}", ranks=2, steps=240, slow_rank=slow_rank, slow_factor=factor,
                  slow_from=30, slow_until=150, noise=0.03, seed=7)
    named = _named(job)
    assert 1 - slow_rank not in named, f"the healthy rank named ({factor}x on rank {slow_rank})"
    if factor >= 1.3:
        assert named == {slow_rank}
