"""A whole job restarted from a checkpoint is read from its ranks' own events at every pace (models/hang/progress.py
``JobProgress.new_process``): a rank's step event stamped after its step last advanced, with a step two or more
below, or its heartbeat stamped after its last heartbeat with the collective sequence back, is a new process. The
recomputed steps are the new run's progress, whether the rollback is seconds or hours of the old run's and however
late the heartbeats arrive (the metamorphic grid's gen2:restart-clean with heartbeats 2-10 s late: a rollback of
~28 s, under the 30 s a late heartbeat may lag, read as the old run's counter standing still: a hang warning).
Generated: paces 20 ms-120 s, rollbacks in steps and seconds, downtimes, heartbeat delivery lags, world sizes."""

from __future__ import annotations

import random

import pytest

from engine_driver import replay
from stepwatch.models.wire.events import parse_event

T0 = 1_830_000_000.0
JOB = "rollback"


def recording(ranks: int, pace: float, rollback: int, downtime: float, lag: float, *, seed: int) -> list[dict]:
    """``ranks`` ranks step every ``pace`` s; all die after step ``top``; ``downtime`` s later they resume from
    step ``top - rollback`` (new processes: collective sequence numbers start again) and train past ``top``.
    Heartbeats every 2-10 s reach the worker ``lag`` s (+ up to half of it) after they were stamped; every event
    in arrival order."""
    rng = random.Random(seed)
    every = min(10.0, max(2.0, pace / 2))  # a monitor's heartbeat period (a long step's few)
    first = max(40, int(30.0 / pace))  # steps before the restart: the pace learned
    top = first + rollback
    lines: list[tuple[float, int, dict]] = []  # (arrival, order, event)

    def run(start_step: int, steps: int, t: float) -> float:
        seq, beat = 0, t + rng.uniform(0, every)
        for step in range(start_step + 1, start_step + steps + 1):
            end = t + pace
            while beat < end:  # the heartbeats stamped during this step say the one before
                for r in range(ranks):
                    hb = {"v": 1, "kind": "heartbeat", "job": JOB, "rank": r, "step": max(0, step - 1), "ts": round(beat, 6),
                          "node": f"n{r // 4}", "seq_started": seq + 1, "seq_completed": seq}
                    lines.append((beat + lag * (1 + rng.random() / 2), len(lines), hb))
                beat += every
            seq += 1
            for r in range(ranks):
                ts = round(end + rng.uniform(0, min(0.005, pace / 10)), 6)
                lines.append((ts, len(lines), {"v": 1, "kind": "step", "job": JOB, "rank": r, "step": step, "ts": ts,
                                               "step_time": pace, "node": f"n{r // 4}", "world_size": ranks}))
            t = end
        return t

    t = run(-1, top + 1, T0)
    after = rollback + 10 + int(40.0 / pace)  # the recompute and past where a warning would come
    run(top - rollback, after, t + downtime)
    return [e for _, _, e in sorted(lines, key=lambda x: x[:2])]


def cases() -> list[tuple]:
    """Seeded draws: the rollback under and over the 30 s a late heartbeat may lag, the downtime and the
    recompute together past the 30 s warning floor."""
    rng = random.Random(39)
    out = []
    for i in range(10):
        pace = 10 ** rng.uniform(-1.7, 2.08)  # 20 ms .. 120 s
        seconds = rng.uniform(8.0, 29.0) if i % 3 else rng.uniform(31.0, 90.0)
        rollback = min(1500, max(2, round(seconds / pace)))  # (bounded: a fast pace's events)
        out.append((rng.choice((4, 8, 12)) if pace > 0.2 else 4, round(pace, 3), rollback, round(rng.uniform(10.0, 25.0), 1),
                    rng.choice((0.0, 2.0, 10.0)), i))
    # The grid's case: 0.39 s steps, 72 steps (28 s) back, 20 s down, heartbeats 2 and 10 s late.
    out += [(16, 0.39, 72, 20.0, 2.0, 100), (16, 0.39, 72, 20.0, 10.0, 101), (4, 0.02, 1400, 15.0, 10.0, 102)]
    return out


@pytest.mark.parametrize("ranks,pace,rollback,downtime,lag,seed", cases())
def test_a_restart_from_a_checkpoint_is_the_new_runs_progress(ranks, pace, rollback, downtime, lag, seed):
    events = recording(ranks, pace, rollback, downtime, lag, seed=seed)
    alerts = list(replay(parse_event(e) for e in events))
    hangs = [a for a in alerts if a.type == "hang" and a.status == "firing"]
    assert not hangs, f"{pace} s steps, {rollback} back ({rollback * pace:.1f} s): {hangs[0].summary}"


def hung(ranks: int, pace: float, back: int, lag: float, *, seed: int) -> list[dict]:
    """The same job hangs after step ``top`` instead (its heartbeats go on, the sequence standing still), and a
    step event of each rank ``back`` steps behind, stamped when it happened, arrives 10 s into the hang (a
    producer's retry): a late event of the same process, never a restart."""
    events = recording(ranks, pace, back, 0.0, lag, seed=seed)
    top = max(40, int(30.0 / pace)) + back
    cut = next(i for i, e in enumerate(events) if e["kind"] == "step" and e["step"] == top and e["rank"] == ranks - 1)
    before, end = events[:cut + 1], events[cut]["ts"]
    late = [dict(e) for e in before if e["kind"] == "step" and e["step"] == top - back]
    beats = []
    for k in range(1, int(max(120.0, 12 * pace) / 2.0)):
        for r in range(ranks):
            beats.append({"v": 1, "kind": "heartbeat", "job": JOB, "rank": r, "step": top, "ts": round(end + 2.0 * k, 6),
                          "node": f"n{r // 4}", "seq_started": top + 2, "seq_completed": top + 1})
    return before + beats[:5 * ranks] + late + beats[5 * ranks:]


@pytest.mark.parametrize("ranks,pace,back,lag,seed", [(4, 0.02, 50, 2.0, 1), (8, 0.39, 20, 10.0, 2),
                                                       (8, 2.0, 5, 0.0, 3), (4, 30.0, 2, 2.0, 4)])
def test_a_late_step_event_of_the_same_process_is_no_restart(ranks, pace, back, lag, seed):
    alerts = list(replay(parse_event(e) for e in hung(ranks, pace, back, lag, seed=seed)))
    assert [a for a in alerts if a.type == "hang" and a.status == "firing"], "the hang was taken for a restart"
    assert not [a for a in alerts if a.type == "hang" and a.status == "resolved"]
