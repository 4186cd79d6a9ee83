"""A throughput drop is a drop of work done per second: where the job reports tokens, steps that take longer
because they carry as many more tokens (variable sequence lengths) are not one; the same longer steps with the
same tokens are. Generated over the size of the change."""

from __future__ import annotations

import numpy as np
import pytest

from stepwatch.models.jobhealth.throughput import ThroughputDetector, sample_from
from stepwatch.models.steps.assembly import GroupStep

RANKS = np.arange(8)


def _step(n: int, t: float, tokens: float) -> GroupStep:
    return GroupStep(job="j", group="", step=n, ts=1000.0 + n, ranks=RANKS, step_time=np.full(8, t),
                     compute_time=np.full(8, t - 0.1), comm_time=np.full(8, 0.1), data_time=np.full(8, 0.01),
                     tokens=np.full(8, tokens), nodes=("node-0",) * 8, phase="train")


def _alerts(factor: float, *, tokens_follow: bool) -> list:
    det = ThroughputDetector(job="j")
    out = []
    for n in range(400):
        f = factor if n >= 300 else 1.0
        out += det.update(sample_from(_step(n, 1.0 * f, 4096.0 * (f if tokens_follow else 1.0))))
    return out


@pytest.mark.parametrize("factor", [1.15, 1.3, 2.0])
def test_longer_steps_with_as_many_more_tokens_are_not_a_drop(factor: float):
    assert _alerts(factor, tokens_follow=True) == []
    fired = _alerts(factor, tokens_follow=False)
    assert [a.type for a in fired] == ["throughput_drop"]
