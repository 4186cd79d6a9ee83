"""Alert times are the job's time, not the time of the one host whose clock runs ahead.

A closed step's time (``GroupStep.ts``) stamps the straggler, imbalance and throughput alerts
(``starts_at``, ``ends_at``, ``onset_ts``). It was the latest step end among the ranks: with one node's
clock 10 s ahead every alert of the job moved 10 s late, whichever node the straggler was on. It is now
the median step end, which a minority of skewed hosts does not move.
Recordings of tests/fabric_gen.py (independent of the simulator), delivered in true-time order.
"""

from __future__ import annotations

import pytest

from engine_driver import replay
from fabric_gen import Job, events


def _straggler(skew: dict[int, float]):
    job = Job(straggler=21, straggler_factor=1.3, skew=skew, seed=0, steps=120, onset=50)
    alerts = [a for a in replay(ev for _, ev in events(job)) if a.type == "straggler"]
    assert alerts, "the straggler was not caught"
    return alerts


@pytest.mark.parametrize("skew", [{5: 10.0}, {0: 10.0, 6: -7.0}, {2: 10.0}], ids=["other-node-ahead", "two-off",
                                                                                   "straggler-node-ahead"])
def test_a_host_ahead_does_not_move_the_alert_times(skew):
    agreeing = _straggler({})
    skewed = _straggler(skew)
    assert [a.ranks for a in skewed] == [a.ranks for a in agreeing] == [(21,)] * len(agreeing)
    for a, b in zip(agreeing, skewed):
        # within a step (0.7 s here) of the job's own time; the latest step end would be 10 s late
        assert abs(b.starts_at - a.starts_at) < 1.0, (a.starts_at, b.starts_at)
        assert abs(b.evidence["onset_ts"] - a.evidence["onset_ts"]) < 1.0
        if b.ends_at is not None:
            assert abs(b.ends_at - a.ends_at) < 1.0
