"""A job-wide pause marker covers the steps stamped since it began, not the late steps of before it.

Invariant: a step a rank ended before the job's checkpoint (or eval) began is a training step whenever its
events arrive: a straggler slow in the steps before a marked checkpoint is named though some producers' events
of those steps reach the worker after the checkpoint's marker (their producers lag; the steps wait for them).
Before, the job's phase at arrival was stamped on every step event without a phase of its own, so those steps
closed as checkpoint steps and were never judged (library:intermittent-64 with 1% of its messages 30 s late:
the first 10-step burst, right before the marked checkpoint at step 100, lost; the straggler named 50 steps
later). And a rank slow only in the pause's own steps is still no straggler.

Generated: 8-32 ranks, a quarter of them (never the slow one) with producers that stall twice for 8-11 steps
(the first stall teaches the assembly their lag; the second ends during the checkpoint: the steps wait for them),
three paces, the slow burst the last 10 steps before a 20 s checkpoint.
"""

from __future__ import annotations

import random

import pytest

from stepwatch.models.detection import DetectionEngine
from stepwatch.models.wire.events import parse_event

BEFORE, BURST, AFTER, PAUSE_S = 60, 10, 30, 20.0
T0 = 1_700_000_000.0


def run(world: int, pace: float, stall: int, slow: int, *, slow_in_pause: bool = False, seed: int = 0) -> list:
    """The alerts of one job: ``BEFORE`` training steps, rank ``slow`` 1.4x for the last ``BURST`` of them (or
    for the pause's own step), a ``PAUSE_S`` checkpoint marked job-wide right after them, ``AFTER`` more. The last
    quarter of the ranks' producers stall for ``stall`` steps twice: from step 20 (their events arrive at the
    stall's end), and over the last ``stall`` steps before the checkpoint (arriving a second into it)."""
    rng = random.Random(seed)
    lagging = set(range(world - world // 4, world))
    first = range(20, 20 + stall)
    second = range(BEFORE - stall, BEFORE)
    ends = {}  # step -> when it ended
    lines: list[tuple[float, int, dict]] = []  # (arrival, order, event)

    def send(event: dict, at: float) -> None:
        lines.append((at, len(lines), event))

    t = T0
    held = []  # (step, event) of the lagging ranks in a stall, sent at its end
    for step in range(BEFORE + AFTER):
        if step == BEFORE:
            t += 0.01
            send({"v": 1, "kind": "phase", "job": "j", "ts": t, "step": step - 1, "phase": "checkpoint"}, t)
            for _, event in held:  # (the second stall ends a second into the checkpoint)
                send(event, t + 1.0)
            held = []
            t += PAUSE_S
            send({"v": 1, "kind": "phase", "job": "j", "ts": t, "step": step - 1, "phase": "train"}, t)
        t += pace
        ends[step] = t
        for rank in range(world):
            compute = 0.8 * pace * rng.uniform(0.98, 1.02)
            if rank == slow and ((BEFORE - BURST <= step < BEFORE) if not slow_in_pause else step == BEFORE):
                compute *= 1.4
            event = {"v": 1, "kind": "step", "job": "j", "rank": rank, "step": step, "ts": t, "node": f"n{rank // 4}",
                     "step_time": pace, "compute_time": compute}
            if rank in lagging and (step in first or step in second):
                held.append((step, event))
            else:
                send(event, t)
        if step == first[-1]:
            for _, event in held:
                send(event, t + 0.01)
            held = []
    engine = DetectionEngine()
    alerts = []
    for _, _, event in sorted(lines, key=lambda x: (x[0], x[1])):
        alerts.extend(engine.process(parse_event(event)))
    return alerts


def _cases():
    rng = random.Random(11)
    for world in (8, 16, 32):
        for pace in (0.3, 1.0, 2.5):
            yield world, pace, rng.choice((8, 9, 10, 11)), rng.randrange(0, world - world // 4)


@pytest.mark.parametrize("world, pace, stall, slow", list(_cases()))
def test_a_straggler_before_a_checkpoint_is_named_though_some_producers_lag(world, pace, stall, slow):
    fired = [a for a in run(world, pace, stall, slow) if a.type == "straggler" and a.status == "firing"]
    assert [list(a.ranks) for a in fired] == [[slow]]


@pytest.mark.parametrize("world, pace, stall, slow", list(_cases())[::3])
def test_a_rank_slow_only_in_the_pause_is_still_no_straggler(world, pace, stall, slow):
    assert [a for a in run(world, pace, stall, slow, slow_in_pause=True) if a.type == "straggler"] == []
