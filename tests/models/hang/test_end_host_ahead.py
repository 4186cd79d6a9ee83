"""A job's last steps stamped after its ``end`` by a host clock ahead are the run that ended, at every pace (the
metamorphic grid's library:healthy-long-steps-16 / clocks +-30s: 10.3 s steps, a host 7-14 s ahead, its last step
sorted 10.3 s after its previous one and past the 10 s grace: read as a new run, which then "hung" for 10 minutes).

Generated jobs (pace 0.3-120 s, 2-4 nodes, a host 5-30 s ahead, the end marker on rank 0's host's clock or on
true time, heartbeats or none; recordings without arrival times, so sorted by their stamps, as an imported trace is)
hold the invariant: a job that ended is not hung, whatever its pace and its hosts' clocks. A job relaunched after
its end (back to a checkpoint, minutes later) is a new run, whose hang is still reported.
"""

from __future__ import annotations

import random

import pytest

from hang_recordings import T0, hangs, replay

import orjson


def _job(pace: float, offsets: tuple[float, ...], *, seed: int, end_on_rank0: bool, heartbeats: bool,
         relaunch: float | None = None) -> list[bytes]:
    """Wire events of a job of 4 ranks a node that steps 40 times, or for 3x its hosts' spread (a rank first heard
    of after the end is no late event of a run it was never seen in), and ends, node ``k``'s clock ``offsets[k]``
    seconds ahead; with ``relaunch``, the job starts again that many seconds after its end from step
    10 and stops stepping (its ranks keep heartbeating)."""
    rng = random.Random(seed)
    offset = {f"n{k}": o for k, o in enumerate(offsets)}
    ranks = len(offsets) * 4
    steps = max(40, int(3 * (max(offsets) - min(offsets)) / pace) + 1)
    events: list[dict] = []

    def step_events(first: int, count: int, start: float) -> float:
        t = start
        for s in range(first, first + count):
            t += pace * rng.uniform(0.98, 1.02)
            for r in range(ranks):
                n = f"n{r // 4}"
                events.append({"v": 1, "kind": "step", "job": "job-h", "rank": r, "step": s, "node": n,
                               "ts": round(t + offset[n] + rng.uniform(0, 0.002), 6), "step_time": pace,
                               "world_size": ranks})
        return t

    def beats(start: float, end: float, step_at) -> None:
        period = min(10.0, max(1.0, pace / 2))
        t = start + period / 2
        while t < end:
            for r in range(ranks):
                n = f"n{r // 4}"
                s = step_at(t)
                events.append({"v": 1, "kind": "heartbeat", "job": "job-h", "rank": r, "node": n,
                               "ts": round(t + offset[n], 6), "step": s, "seq_started": 2 * s + 2,
                               "seq_completed": 2 * s + 2, "phase": "train"})
            t += period

    end = step_events(0, steps, T0)
    if heartbeats:
        beats(T0, end, lambda t: min(steps - 1, int((t - T0) / pace) - 1))
    events.append({"v": 1, "kind": "phase", "job": "job-h", "phase": "end",
                   "ts": round(end + (offset["n0"] if end_on_rank0 else 0.0), 6)})
    if relaunch is not None:
        again = end + relaunch
        last = step_events(10, 3, again)
        beats(last, last + 900.0, lambda t: 12)  # alive, stuck after step 12
    return [orjson.dumps(e) for e in sorted(events, key=lambda e: e["ts"])]


def _cases(n: int = 16, seed: int = 41) -> list[tuple]:
    """(pace, node offsets, seed, end marker on rank 0's host, heartbeats): two nodes (too few for the job's clock
    offsets to be learned, ``ClockOffsets.min_nodes``) or more, one host up to 30 s ahead of the others."""
    rng = random.Random(seed)
    out = [(10.3, (7.4, 14.5), 5, False, False)]  # the grid's pair
    while len(out) < n:
        nodes = rng.choice((2, 2, 3, 4))
        ahead = rng.uniform(5.0, 30.0)
        offsets = tuple(round(rng.uniform(-2.0, 2.0) + (ahead if k == nodes - 1 else 0.0), 3) for k in range(nodes))
        out.append((rng.choice((0.3, 2.0, 10.3, 30.0, 60.0, 120.0)), offsets, rng.randrange(1000),
                    rng.random() < 0.5, rng.random() < 0.5))
    return out


@pytest.mark.parametrize("pace, offsets, seed, end_on_rank0, heartbeats", _cases())
def test_an_ended_job_is_not_hung_whatever_its_hosts_clocks(pace, offsets, seed, end_on_rank0, heartbeats):
    lines = _job(pace, offsets, seed=seed, end_on_rank0=end_on_rank0, heartbeats=heartbeats)
    alerts = hangs(replay(lines, drain=900.0))  # (the timer runs on past the recording's end)
    assert not alerts, [a["summary"] for a in alerts]


@pytest.mark.parametrize("pace", (2.0, 10.3, 60.0))
def test_a_job_relaunched_after_its_end_is_a_new_run_whose_hang_is_reported(pace):
    lines = _job(pace, (0.0, 15.0), seed=7, end_on_rank0=True, heartbeats=True, relaunch=max(120.0, 3 * pace))
    alerts = hangs(replay(lines, drain=900.0))  # (the timer runs on past the recording's end)
    assert alerts and alerts[-1]["severity"] == "critical", [a["summary"] for a in alerts]
