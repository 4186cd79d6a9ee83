"""A tick skips the open alerts that cannot have changed (issue 44: many open hangs cost O(open) per tick).

An open hang is re-checked only when its job got input or at the next time its verdict can change by time alone
(warning -> critical, a rank's heartbeat timeout, a stack request's deadline); an enriched alert is re-enriched
only when its job's placement or its nodes' telemetry changed. The invariant: the alerts published, every
version of every one, byte for byte, are the same as with the skipping off (every open hang checked and every
open alert re-enriched on every tick), on generated hang and telemetry variants and on the messy fleet.
"""

from __future__ import annotations

import random

import pytest

from gen2.scenarios import catalog
from gen2.transport import merge
from hang_recordings import Job, replay
from stepwatch.models.detection import DetectionEngine
from stepwatch.models.telemetry.telemetry_hub import TelemetryHub
from support import FULL_GRID

T = 1_790_000_000.0


def _both_ways(lines: list[bytes], monkeypatch, drain: float) -> tuple[list[dict], list[dict]]:
    skipping = replay(lines, drain=drain)
    with monkeypatch.context() as m:
        m.setattr(TelemetryHub, "incremental", False)
        every = replay(lines, drain=drain)
    return skipping, every


def _variant(seed: int, *, host: bool = True) -> list[bytes]:
    """Jobs that hang in different ways (one rank stuck with the rest waiting, every rank silent, ranks torn
    down one by one, a rank that comes back), with host samples whose IO pressure rises on one node during the
    hang (a cause that arrives while the hang is open; ``host=False``: no node telemetry at all) and late
    heartbeats of one rank."""
    rng = random.Random(seed)
    events: list[dict] = []
    for k in range(rng.randint(2, 4)):
        ranks = rng.choice((4, 8, 16))
        job = Job(ranks=ranks, step=rng.choice((0.5, 1.0, 2.0)), hb=rng.choice((1.0, 2.0, 5.0)),
                  job=f"j{seed}-{k}", seed=seed * 10 + k)
        job.now = job.next_hb = T + rng.uniform(0, 60)
        job.steps(rng.randint(20, 60))
        stuck = rng.randrange(ranks)
        kind = rng.choice(("stuck", "silent", "teardown", "comeback"))
        wait = rng.uniform(200, 900)
        teardown_at = rng.uniform(30, 400)

        def who(rank: int, t: float, stuck=stuck, kind=kind, teardown_at=teardown_at) -> dict | None:
            if kind == "silent" or (kind == "teardown" and t > teardown_at + rank):
                return None
            if rank == stuck:
                return {"done": job.seq - 1, "started": job.seq} if kind != "comeback" or t < wait / 2 else None
            return {"done": job.seq, "started": job.seq + 1}

        start = job.now
        job.wait(wait, who)
        for i in range(int(wait // 10) if host else 0):
            hot = f"n{rng.randrange((ranks + 7) // 8)}"
            job.host(start + 10 * i, {hot: 60.0 if i > wait // 20 else 1.0})
        if rng.random() < 0.5:
            job.steps(rng.randint(1, 5))  # the job moves on: the hang resolves
        events += job.events
    events.sort(key=lambda e: e["ts"])
    import orjson

    return [orjson.dumps(e) for e in events]


@pytest.mark.parametrize("seed", range(4))
def test_generated_hangs_publish_the_same_alerts_with_and_without_skipping(seed, monkeypatch):
    lines = _variant(seed)
    skipping, every = _both_ways(lines, monkeypatch, drain=1_200)
    assert any(a["type"] == "hang" for a in every)  # the comparison is about something
    assert skipping == every


@pytest.mark.parametrize("seed", range(4, 7))
def test_without_node_telemetry_the_same_alerts_with_and_without_skipping(seed, monkeypatch):
    """No agent deployed: an open hang's causes are not re-derived while nothing they read moved (its job, its
    fabric comparison's age), and the alerts are those of re-enriching every open alert every tick."""
    lines = _variant(seed, host=False)
    skipping, every = _both_ways(lines, monkeypatch, drain=1_200)
    assert any(a["type"] == "hang" for a in every)
    assert skipping == every


#: CI's part of the fleet: each kind of hang (one lossy, with clock skew), a straggler with a telemetry cause and a
#: fabric fault, at once; ``STEPWATCH_FULL_GRID=1`` replays all nine (twice the events).
FLEET_SAMPLE = {"hang-before-collective", "hang-skew-lossy", "hang-teardown", "straggler-gpu-throttled", "fabric-a"}


def test_the_messy_fleet_publishes_the_same_alerts_with_and_without_skipping(monkeypatch):
    fleet = [s for s in catalog() if s.telemetry or "hang" in s.name]
    assert FLEET_SAMPLE <= {s.name for s in fleet}  # a renamed scenario does not leave the sample unnoticed
    lines = merge(s.timed_lines() for s in fleet if FULL_GRID or s.name in FLEET_SAMPLE)
    skipping, every = _both_ways(lines, monkeypatch, drain=300)
    assert {"hang", "straggler"} <= {a["type"] for a in every}
    assert skipping == every


def test_a_tick_with_many_open_unchanged_hangs_visits_none_of_them():
    from stepwatch.models.wire.events import parse_event

    engine = DetectionEngine()
    for i in range(200):
        for r in range(2):
            engine.process(parse_event({"v": 1, "kind": "step", "job": f"j{i}", "rank": r, "step": 1, "ts": T,
                                        "step_time": 1.0}))
    engine.tick(T)
    assert sum(a.type == "hang" for a in engine.tick(T + 700)) == 200
    engine.tick(T + 701)
    assert engine.last_tick_visits == 0
    assert all(job.hang.firing for job in engine.jobs.values())
