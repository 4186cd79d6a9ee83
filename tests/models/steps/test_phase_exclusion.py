"""Phase exclusion: a rank slow only during warm-up, eval or checkpoint is no straggler; the same slowdown
in training is.

Events are written here by hand (not by the project simulator), the way the rank monitor sends them:
rank 0 announces the job's phase with a phase event, and every step event carries the phase it was
measured in (``phase`` absent = train). Rank 3 takes 1.6x longer than its peers for 25 steps,
20..44, well past the detector's own warm-up; the phase is marked one way or the other, or both.
"""

from __future__ import annotations

import pytest

from stepwatch.models.detection import DetectionEngine
from stepwatch.models.wire.events import parse_event

RANKS, STEPS, SLOW_RANK, SLOW = 8, 80, 3, range(20, 45)


def run(phase: str, marking: str) -> list:
    engine = DetectionEngine()
    alerts = []
    ts = 1_700_000_000.0

    def feed(event: dict) -> None:
        alerts.extend(engine.process(parse_event(event)))

    for step in range(STEPS):
        in_phase = step in SLOW
        if marking in ("job", "both") and step in (SLOW.start, SLOW.stop):
            feed({"v": 1, "kind": "phase", "job": "j", "ts": ts, "step": step - 1,
                  "phase": phase if step == SLOW.start else "train"})
        for rank in range(RANKS):
            # A little per-rank, per-step noise; no two ranks alike.
            compute = 0.80 + 0.004 * ((rank * 7 + step * 3) % 5)
            if in_phase and rank == SLOW_RANK:
                compute *= 1.6
            event = {"v": 1, "kind": "step", "job": "j", "rank": rank, "step": step, "ts": ts + 1.0,
                     "step_time": 1.4, "compute_time": compute}
            if in_phase and marking in ("step", "both") and phase != "train":
                event["phase"] = phase
            feed(event)
        ts += 1.4
    return alerts


@pytest.mark.parametrize("marking", ["job", "step", "both"])
@pytest.mark.parametrize("phase", ["warmup", "eval", "checkpoint"])
def test_a_rank_slow_only_outside_training_raises_nothing(phase, marking):
    assert [(a.type, a.status, a.ranks) for a in run(phase, marking)] == []


def test_the_same_slowdown_in_training_is_a_straggler():
    alerts = [(a.type, a.status, list(a.ranks)) for a in run("train", "job")]
    assert alerts == [("straggler", "firing", [SLOW_RANK]), ("straggler", "resolved", [SLOW_RANK])]
