"""The job's step rate is timed on one host's clock: a host whose clock is seconds off does not move it.

A step's ``ts`` is its latest rank's step end, on that rank's host clock; the latest rank is not always the
same host (a lost event, a rank of another node late), so two steps' ``ts`` can be two clocks. Hand-made job: 4
ranks on 2 nodes, 0.2 s steps, node-001's clock 2 s ahead, node-001's events of steps 45-55 lost. The SLI
window (the last 50 steps, 50..99) starts at a step without node-001: timed on the steps' ``ts``, the span
gained 2 s (4.2 steps/s instead of 5).
"""

from __future__ import annotations

import pytest

from stepwatch.models.detection import DetectionEngine
from stepwatch.models.wire.events import parse_event

T0, STEP, STEPS = 1_700_000_000.0, 0.2, 100


def events(skew: float) -> list[dict]:
    out = []
    for step in range(STEPS):
        for rank in range(4):
            node = f"node-{rank // 2:03d}"
            if node == "node-001" and 45 <= step <= 55:
                continue  # lost on the way
            noise = ((rank * 7919 + step * 104729) % 97) / 97 * 0.002  # ms apart, as ranks leave an all-reduce
            ts = T0 + (step + 1) * STEP + noise + (skew if node == "node-001" else 0.0)
            out.append({"v": 1, "kind": "step", "job": "j", "rank": rank, "node": node, "step": step,
                        "ts": ts, "step_time": STEP, "compute_time": 0.15, "comm_time": 0.05, "tokens": 1000,
                        "world_size": 4})
    return out


def sli(skew: float) -> dict:
    engine = DetectionEngine()
    for raw in events(skew):
        engine.process(parse_event(raw))
    return engine.job_sli("j")


@pytest.mark.parametrize("skew", [0.3, 2.0, -1.5])
def test_step_rate_on_one_clock(skew):
    straight = sli(0.0)
    assert straight["steps_per_second"] == pytest.approx(1 / STEP, rel=0.01)
    # Steps 51..99 over 49 steps' time; 51..55 without node-001's 2 ranks' tokens.
    assert straight["tokens_per_second"] == pytest.approx((5 * 2000 + 44 * 4000) / (49 * STEP), rel=0.01)
    skewed = sli(skew)
    assert skewed["steps_per_second"] == pytest.approx(straight["steps_per_second"], rel=0.001)
    assert skewed["tokens_per_second"] == pytest.approx(straight["tokens_per_second"], rel=0.001)
