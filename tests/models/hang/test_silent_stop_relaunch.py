"""A job whose every rank falls silent before its hang warning is due still warns at the threshold, before its
relaunch, at every pace (the metamorphic grid's gen3:restart_spare at 10-60 s steps: a node dies, its ranks go
silent, the others wait, NCCL's watchdog tears them down ~120 s in, the job is relaunched on a spare 344 s in; at
10 s steps the warning is due at 132 s, after the teardown, and none came: replay's timer ticked only when a line
came, so the first tick after the silence was the relaunch's own, with the new processes already in).

Invariant: a stop the hang rule warns about at W seconds (its threshold at the job's pace) warns within a tick
of W after the job's last step, before a relaunch that comes later, whether the waiting ranks still heartbeat
at W or were torn down before it, whatever the pace, world size, heartbeat period, and whether the clock is the
broker's (``_arrival``) or the events' own: the live timer ticks through a silence, and so does replay's
(models/sources.py ``RecordingSource``, ``gap_ticks``).
"""

from __future__ import annotations

import pytest

from hang_recordings import T0, Job, hangs, replay, steps_beats_before, warning_after
from support import full_or


def _cases() -> list[tuple[float, int, float, float, bool]]:
    """(pace s, ranks, heartbeat period s, share of W the waiting ranks heartbeat for, broker arrivals)."""
    out = []
    for pace in (0.3, 2.0, 10.0, 60.0, 120.0):
        for ranks, hb in ((4, 1.0), (16, 5.0), (64, 10.0)):
            for held in (0.4, 0.9):  # torn down well before W, or just before it (the grid's case)
                out.append((pace, ranks, hb, held, (ranks // 4 + int(pace)) % 2 == 0))
    return out


def _job(pace: float, ranks: int, hb: float, held: float, arrival: bool) -> tuple[list[bytes], float, float, float]:
    """The recording, the job's last step's time, W, and the relaunch's time."""
    job = Job(ranks=ranks, step=pace, hb=hb, next_hb=T0 + hb / 2)
    job.n = 0
    steps_beats_before(job, max(30, int(60 / pace)))
    last, stopped_at, seq = job.now, job.n, job.seq
    warn = warning_after(pace)
    dead = {ranks - 2, ranks - 1}  # a node's last two ranks die with it at the stop
    # The others wait in the next collective, heartbeating, until the watchdog tears them down (before W) ...
    job.wait(held * warn, lambda r, t: None if r in dead else {"started": seq + 1, "done": seq})
    # ... then nothing for the rest of the stop; the job is relaunched (new processes, from a checkpoint 5 steps
    # back) a minute after W.
    relaunch = last + warn + 60.0
    job.now = relaunch
    job.n, job.seq, job.next_hb = stopped_at - 5, 0, relaunch
    steps_beats_before(job, 10)
    job.phase("end")
    lines = job.recording()
    if arrival:  # a broker capture: each line's arrival a moment after its time
        import orjson
        lines = [orjson.dumps({**e, "_arrival": round(e["ts"] + 0.05, 6)}) for e in map(orjson.loads, lines)]
    return lines, last, warn, relaunch


def _sample(cases: list) -> list:
    """CI's third of the grid: each (pace, share held) pair once, the world sizes in turn, so that every pair of
    pace, world size and share is still in (without the fix, replay ticking through the silence, every case
    tried fails: 13 of the 30 and all 10 of these); ``STEPWATCH_FULL_GRID=1`` runs all 30."""
    return [c for n, c in enumerate(cases) if (n // 6 + n // 2 % 3 + n % 2) % 3 == 0]


@pytest.mark.parametrize("pace, ranks, hb, held, arrival", full_or(_cases(), _sample(_cases())))
def test_a_silent_stop_warns_before_its_relaunch(pace, ranks, hb, held, arrival):
    lines, last, warn, relaunch = _job(pace, ranks, hb, held, arrival)
    assert last + warn < relaunch  # (the stop is over the threshold)
    versions = hangs(replay(lines, drain=60.0))
    firing = [a for a in versions if a["status"] == "firing"]
    assert firing, f"no hang in a {relaunch - last:.0f} s stop at {pace} s steps (warning due at {warn:.0f} s)"
    first = firing[0]
    tick = 1.0 + 0.05  # (the worker's tick interval, and the arrivals' lag)
    assert first["severity"] == "warning"
    assert last + warn - 0.01 <= first["starts_at"] <= last + warn + tick, \
        (first["starts_at"] - last, warn, first["summary"])
    assert first["starts_at"] < relaunch
