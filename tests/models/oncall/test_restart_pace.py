"""A relaunch is one ``job_restart`` at every pace; a job-wide pause, late events or one host's clock never are one.

Invariant: a job whose ranks all die and resume from a checkpoint 2+ steps back (new processes) is reported
exactly once, whatever its step time (20 ms-120 s), how many steps (or seconds of work) it rolled back, how long
it was down (3 s-3 min: under and over the 30 s line the tracker had), its world size (2-64 ranks), whether it
comes back on fewer ranks (elastic) or on a spare node, and however its events are delivered (heartbeats late, step
events duplicated, reordered, late past the relaunch, hosts' clocks tens of seconds apart). A job that stops for a
checkpoint or an eval (marked or not) and resumes at its own next step, its ranks' batches flushed at different
moments, whose old step events arrive late (a producer's retry, stamped when they happened), or one of whose hosts'
clock steps back 20 s while copies of its events from before arrive late (tests/models/test_composite_messy.py
healthy_noise: a false page when the tracker read one rank at 1 s; on 2-4 ranks that host is the whole job), is
never reported as restarted. models/relaunch.py is the one reading (the hang rule's too): a rank went back 2+
steps, stamped over 1 s after its latest, and on from there, and most of the job's ranks did.

Generated: seeded draws of paces, steps back, downtimes, delivery lags, clock spreads and world sizes, replayed
through the detection engine (tests/engine_driver.py)."""

from __future__ import annotations

import math
import random

import pytest

from engine_driver import replay
from stepwatch.models.wire.events import parse_event

T0 = 1_830_000_000.0
JOB = "relaunch"


def recording(ranks: int, pace: float, *, seed: int, back: int = 0, down: float = 0.0, pause: float = 0.0,
              marked: bool = False, lag: float = 0.0, spread: float = 0.0, dup: float = 0.0, reorder: float = 0.0,
              late: float = 0.0, flush: float = 0.0, jump: float = 0.0, after: int | None = None,
              spare: bool = False) -> list[dict]:
    """``ranks`` ranks (4 a node, the nodes' clocks off by -``spread`` .. ``spread`` s in turn) step every ``pace`` s. With ``back``:
    after step ``top`` every rank dies and, ``down`` s later, new processes resume at step ``top - back`` (their
    collective sequence numbers start again). With ``pause``: after step ``top`` the job stops that long for a
    checkpoint (``marked``: rank 0's phase events around it) and goes on from ``top + 1``. Delivery: heartbeats
    every 2-10 s ``lag`` s late, step events up to ``reorder`` s late each, a share ``dup`` of them twice, each
    rank's steps after the stop flushed up to ``flush`` s late (ranks' batches at different moments), and with
    ``late`` a few step events of the old run arriving that long after they happened. With ``jump``: node 0's clock
    steps back that many seconds halfway through the first run (a copy of an event sent before it, late, is stamped
    after the rank's latest ones). The relaunch runs on ``after`` ranks (an elastic job; all by default), the first
    node's ranks on a spare (``spare``). Every event in arrival order."""
    rng = random.Random(seed)
    every = min(10.0, max(2.0, pace / 2))
    offset = {node: (-1) ** node * spread * rng.uniform(0.5, 1.0) for node in range(ranks // 4 + 1)}  # (hosts apart)
    top = max(30, int(20.0 / pace))  # steps before the stop: a warm job
    lines: list[tuple[float, int, dict]] = []

    def send(arrival: float, event: dict) -> None:
        lines.append((arrival, len(lines), event))

    jumped = T0 + (max(30, int(20.0 / pace)) // 2) * pace if jump else math.inf  # when node 0's clock steps back

    def clock(r: int, t: float) -> float:
        return t + offset[r // 4] - (jump if r < 4 and t >= jumped else 0.0)

    def run(first: int, last: int, t: float, *, after_stop: bool) -> float:
        seq, beat = 0, t + rng.uniform(0, every)
        world = after if after_stop and after is not None and back else ranks
        batch = {r: rng.uniform(0, flush) for r in range(world)} if after_stop else {}
        node = (lambda r: "spare" if r < 4 else f"n{r // 4}") if after_stop and spare else (lambda r: f"n{r // 4}")
        t0 = t
        for step in range(first, last + 1):
            end = t + pace
            while beat < end:
                for r in range(world):
                    send(beat + lag * (1 + rng.random() / 2) + 0.01, {
                        "v": 1, "kind": "heartbeat", "job": JOB, "rank": r, "step": max(0, step - 1), "node": node(r),
                        "ts": round(clock(r, beat), 6), "seq_started": seq + 1, "seq_completed": seq})
                beat += every
            seq += 1
            for r in range(world):
                real = end + rng.uniform(0, min(0.005, pace / 10))
                event = {"v": 1, "kind": "step", "job": JOB, "rank": r, "step": step, "ts": round(clock(r, real), 6),
                         "step_time": pace, "node": node(r), "world_size": world}
                # (a rank's buffer after the stop is held until its first flush: its batch keeps the steps' order)
                arrival = max(real + 0.01 + rng.uniform(0, reorder), t0 + batch.get(r, 0.0))
                send(arrival, event)
                if rng.random() < dup:
                    send(arrival + rng.uniform(0, 5.0), dict(event))
            t = end
        return t

    t = run(0, top, T0, after_stop=False)
    if late:  # the old run's last steps of two ranks, held in a producer's queue, arrive ``late`` s on
        for r in (1, ranks - 1):
            for step in (top - 1, top):
                old = next(e for _, _, e in reversed(lines) if e["kind"] == "step" and e["rank"] == r and e["step"] == step)
                send(t + late, dict(old))
    if back:  # (an elastic job on fewer ranks is read a window into its new run: models/oncall/restarts.py)
        run(top - back, top + 10 + int((150.0 if after is not None else 30.0) / pace), t + down, after_stop=True)
    else:
        if marked:
            send(t + 0.01, {"v": 1, "kind": "phase", "job": JOB, "phase": "checkpoint", "step": top,
                            "ts": round(t + offset[0], 6)})
            send(t + pause + 0.01, {"v": 1, "kind": "phase", "job": JOB, "phase": "train", "step": top,
                                    "ts": round(t + pause + offset[0], 6)})
        run(top + 1, top + 10 + int(30.0 / pace), t + pause, after_stop=True)
    return [e for _, _, e in sorted(lines, key=lambda x: x[:2])]


def restarts(events: list[dict]) -> list:
    alerts = list(replay(parse_event(e) for e in events))
    return [a for a in alerts if a.type == "job_restart" and a.status == "firing"]


def relaunches() -> list[tuple]:
    """Seeded draws: paces 20 ms-120 s, 2-1500 steps back, 3 s-3 min down, 2-64 ranks, each delivery trouble in
    turn, an elastic relaunch on half the ranks and one onto a spare node."""
    rng = random.Random(2026)
    out = []
    for i in range(27):
        pace = round(10 ** rng.uniform(-1.7, 2.08), 3)
        back = min(1500, max(2, round(rng.uniform(1.0, 60.0) / pace))) if i % 2 else rng.choice((2, 5, 20))
        back = min(back, max(30, int(20.0 / pace)))  # (to the run's first step at most)
        down = round(10 ** rng.uniform(0.5, 2.25), 1)  # (under and over the 30 s line the tracker had)
        # (step events reordered by less than the rollback and the downtime: reordered by more, a rank's first new
        # event to arrive may be past its old last step, or its old process's last one after its new one's first)
        reorder = round(min(3.0, back * pace / 3, down / 2), 3)
        ranks = rng.choice((2, 4, 8, 16, 64) if pace >= 1.0 else (2, 4, 8, 16) if pace > 0.2 else (2, 4))
        trouble = ({}, {"lag": 10.0}, {"dup": 0.1, "reorder": reorder}, {"spread": 30.0}, {"late": 40.0},
                   {"flush": 8.0, "spread": 5.0}, {"lag": 2.0, "reorder": reorder, "spread": 2.0},
                   {"after": max(1, ranks // 2), "spread": 5.0}, {"spare": True, "dup": 0.05})[i % 9]
        out.append(pytest.param(ranks, pace, back, down, trouble, i,
                                id=f"{ranks}r-{pace}s-{back}back-{down}s-{'-'.join(trouble) or 'clean'}"))
    return out


@pytest.mark.parametrize("ranks,pace,back,down,trouble,seed", relaunches())
def test_a_relaunch_is_one_job_restart_at_every_pace(ranks, pace, back, down, trouble, seed):
    found = restarts(recording(ranks, pace, seed=seed, back=back, down=down, **trouble))
    assert len(found) == 1, f"{pace} s steps, {back} back, {down} s down: {[a.summary for a in found]}"
    ev = found[0].evidence
    # (one rank's own clock: its downtime is the relaunch's plus its first new step, whatever the hosts' offsets)
    assert ev["resumed_step"] <= ev["highest_step"] - 2 and ev["downtime_seconds"] >= down, found[0].summary


def pauses() -> list[tuple]:
    """Seeded draws: a checkpoint or eval of 5 s-3 min at 20 ms-120 s steps on 2-16 ranks, marked or not, batches
    flushed late, old step events arriving late, duplicates; one host's clock stepped back 20 s and copies of its
    ranks' events from before it arriving late (tests/models/test_composite_messy.py healthy_noise; on 2 or 4 ranks,
    the whole job's host)."""
    rng = random.Random(39)
    out = []
    for i in range(21):
        pace = round(10 ** rng.uniform(-1.7, 2.08), 3)
        pause = round(rng.uniform(5.0, 180.0), 1)
        trouble = ({"flush": 8.0}, {"late": 40.0, "lag": 10.0}, {"dup": 0.1, "reorder": 3.0, "spread": 30.0},
                   {"flush": 3.0, "late": 5.0, "spread": 5.0}, {}, {"jump": 20.0, "dup": 0.2},
                   {"jump": 20.0, "dup": 0.1, "reorder": 1.0, "spread": 5.0})[i % 7]
        ranks = rng.choice((2, 4, 8, 16) if pace > 0.2 else (2, 4))
        out.append(pytest.param(ranks, pace, pause, bool(i % 2), trouble, i,
                                id=f"{ranks}r-{pace}s-{pause}s-{'marked' if i % 2 else 'unmarked'}-"
                                   f"{'-'.join(trouble) or 'clean'}"))
    return out


@pytest.mark.parametrize("ranks,pace,pause,marked,trouble,seed", pauses())
def test_a_pause_or_late_events_are_no_restart(ranks, pace, pause, marked, trouble, seed):
    found = restarts(recording(ranks, pace, seed=seed, pause=pause, marked=marked, **trouble))
    assert not found, f"{pace} s steps, a {pause} s pause: {found[0].summary}"
