"""An elastic job relaunched on more ranks (models/hang/progress.py ``slot_for``, ``new_process``): its old ranks
come back in new processes beside ranks first seen, and the job restarted; the new run's steps are progress, never
the old run's counter standing still (a hang warning while it trains: the metamorphic grid's "resized from half
before the fault", tests/metamorphic/test_noise.py). Generated: old and new world sizes, the first run's length,
whether the producers tell their process start (``incarnation``), the order the ranks come back in."""

from __future__ import annotations

import random

import pytest

from engine_driver import replay
from stepwatch.models.detection import DetectionEngine
from stepwatch.models.wire.events import parse_event

T0 = 1_830_000_000.0
JOB = "elastic"


def recording(old: int, new: int, first_run: float, *, told: bool, seed: int, gap: float = 20.0,
              quiet_start: int = 0) -> list[dict]:
    """``old`` ranks step (0.5 s steps, a heartbeat each 2 steps) for ``first_run`` s, all die; ``gap`` s later
    ``new`` ranks start from step 0 and train for 120 s, their heartbeats from step ``quiet_start`` on (a
    heartbeat thread started after the first steps: the new ranks are heard of before any rank's new process)."""
    rng = random.Random(seed)
    out: list[dict] = []

    def run(world: int, t: float, seconds: float, incarnation: int, quiet: int = 0) -> float:
        seq = 0
        for step in range(int(seconds / 0.5)):
            t += 0.5
            seq += 2
            batch = []
            for r in range(world):
                node = f"n{r // 4}"
                e = {"v": 1, "kind": "step", "job": JOB, "rank": r, "step": step, "ts": round(t + rng.uniform(0, 0.01), 6),
                     "step_time": 0.5, "node": node, "world_size": world}
                hb = {"v": 1, "kind": "heartbeat", "job": JOB, "rank": r, "step": step, "ts": round(t + 0.02, 6),
                      "node": node, "seq_started": seq, "seq_completed": seq}
                if told:
                    e["incarnation"] = hb["incarnation"] = incarnation
                batch.append(e)
                if step % 2 == 0 and step >= quiet:
                    batch.append(hb)
            rng.shuffle(batch)  # the ranks come back in any order
            out.extend(batch)
        return t

    t = run(old, T0, first_run, int(T0 * 1000))
    run(new, t + gap, 120.0, int((t + gap) * 1000), quiet_start)
    return out


@pytest.mark.parametrize("old,new,first_run,told,seed,quiet", [
    (4, 8, 15.0, True, 1, 0), (8, 16, 15.0, True, 2, 0), (4, 16, 40.0, True, 3, 0), (8, 12, 60.0, True, 4, 0),
    (2, 8, 20.0, True, 5, 0), (8, 16, 60.0, False, 6, 0), (4, 12, 90.0, False, 7, 0), (8, 8, 60.0, False, 8, 0),
    (8, 16, 40.0, True, 9, 6), (4, 8, 60.0, True, 10, 10), (16, 32, 30.0, True, 11, 4),
])
def test_a_job_relaunched_on_more_ranks_trains_without_a_hang(old: int, new: int, first_run: float, told: bool,
                                                              seed: int, quiet: int):
    events = recording(old, new, first_run, told=told, seed=seed, quiet_start=quiet)
    alerts = list(replay(parse_event(e) for e in events))
    hangs = [a for a in alerts if a.type == "hang" and a.status == "firing"]
    assert not hangs, hangs[0].summary
