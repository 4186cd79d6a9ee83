"""A stalled producer is not a hang: the ranks whose events are in flight do not hold the job's step counter while
the other ranks complete later steps (gen2:straggler-2-ranks / late 1% by 30s: rank 0's producer stalled 30 s and
a 2-rank job's counter, the lower median of the ranks' steps, stood at rank 0's last step that long: a hang
warning, resolved when its queue arrived).

What holds it: synchronous ranks cannot complete step N before every rank reached step N's collectives, so a rank
nothing was heard from since its own last step while another rank completed a later step after that is not where it
was (models/hang/progress.py ``counter_without_passed``). A rank hung with live heartbeats is heard from, a dead
rank stops the others at the next collective: both still hold the counter.

Invariant: whatever the world size (2-8), the pace (0.1-10 s), the heartbeat period, the stall's length (20-60 s)
and which ranks' producers stall (one rank, or half of the job: a node's), a producer stall of ranks of a
progressing job never raises a hang. And the negatives: a dead rank (no event after its step) and a rank hung with
live heartbeats still warn on time (the warning threshold after the job's last step, plus a tick), also while
another rank's producer is stalled across the hang's onset.
"""

from __future__ import annotations

import itertools
import random

import orjson
import pytest

from hang_recordings import T0, hangs, replay, warning_after
from support import full_or

TICK = 1.0  # the worker's tick (models/settings.py): an alert comes at the first tick past its threshold


def _recording(ranks: int, pace: float, hb: float, *, steps: int, stalled: tuple[int, ...] = (),
               stall_at: float = 0.0, stall_len: float = 0.0, hang: tuple[str, int] | None = None,
               tail: float = 0.0, seed: int = 5) -> tuple[list[bytes], float]:
    """A job of ``steps`` steps of ``pace`` s, heartbeats every ``hb`` s; the producers of ``stalled`` hold the
    events stamped in ``[stall_at, stall_at + stall_len)`` until its end (they arrive then, in order). ``hang``:
    after the last step, ``("dead", r)``: rank r sends nothing more; ``("stuck", r)``: rank r heartbeats in the
    step's first collective it never issues while the others wait in it, for ``tail`` s. Returns the lines in
    arrival order and the time of the last step."""
    rng = random.Random(seed)
    events: list[tuple[float, float, dict]] = []  # (arrival, ts, event)
    end_stall = stall_at + stall_len

    def emit(event: dict) -> None:
        ts = event["ts"]
        late = event["rank"] in stalled and stall_at <= ts < end_stall
        events.append((end_stall if late else ts, ts, {"v": 1, "job": "job-h", "node": f"n{event['rank']}", **event}))

    def beat(t: float, r: int, step: int, started: int, done: int) -> None:
        emit({"kind": "heartbeat", "rank": r, "ts": round(t, 6), "step": step, "seq_started": started,
              "seq_completed": done, "phase": "train"})

    next_hb = T0 + hb / 2
    for n in range(steps):
        end = T0 + (n + 1) * pace
        while next_hb < end:
            for r in range(ranks if n > 0 else 0):  # (none before the first step)
                beat(next_hb, r, n - 1, 2 * n, 2 * n)
            next_hb += hb
        for r in range(ranks):
            emit({"kind": "step", "rank": r, "step": n, "ts": round(end + rng.uniform(0, 0.001), 6),
                  "step_time": pace, "world_size": ranks})
    last = T0 + steps * pace
    if hang is not None:
        how, culprit = hang
        seq = 2 * steps
        while next_hb < last + tail:
            for r in range(ranks):
                if r == culprit and how == "dead":
                    continue
                beat(next_hb, r, steps - 1, seq if r == culprit else seq + 1, seq)
            next_hb += hb
    events.sort(key=lambda e: (e[0], e[1]))
    return [orjson.dumps({**e, "_arrival": round(arrival, 6)}) for arrival, _, e in events], last


def _stall_cases(seed: int = 11) -> list[tuple[int, float, float, float, str]]:
    """(ranks, pace s, heartbeat period s, stall length s, whose producers stall: the first rank, the last, the
    first half of the ranks or the second)."""
    rng = random.Random(seed)
    return [(ranks, pace, rng.choice((1.0, 2.0, 10.0)), round(rng.uniform(20.0, 60.0), 1), which)
            for ranks, pace, which in itertools.product((2, 3, 4, 8), (0.1, 0.4, 2.0, 10.0),
                                                        ("first", "last", "low", "high"))]


def _sample(cases: list) -> list:
    """CI's quarter: every (world size, pace) pair once, whose producers stall in turn (``STEPWATCH_FULL_GRID=1``:
    all 64)."""
    return [c for i, c in enumerate(cases) if i % 4 == (i // 4 + i // 16) % 4]


def _who(ranks: int, which: str) -> tuple[int, ...]:
    half = max(1, ranks // 2)
    return {"first": (0,), "last": (ranks - 1,), "low": tuple(range(half)),
            "high": tuple(range(ranks - half, ranks))}[which]


@pytest.mark.parametrize("ranks, pace, hb, stall, which", full_or(_stall_cases(), _sample(_stall_cases())))
def test_a_stalled_producer_is_not_a_hang(ranks, pace, hb, stall, which):
    before = max(40, int(90 / pace))  # the pace learned, then the stall, then as long again after it
    steps = before + int((stall + 90) / pace)
    lines, _ = _recording(ranks, pace, hb, steps=steps, stalled=_who(ranks, which),
                          stall_at=T0 + before * pace + 0.3 * pace, stall_len=stall)
    found = hangs(replay(lines))
    assert not found, [a["summary"] for a in found]


def _hang_cases(seed: int = 13) -> list[tuple[int, float, float, str, bool]]:
    """(ranks, pace s, heartbeat period s, dead or stuck, another rank's producer stalled across the onset)."""
    rng = random.Random(seed)
    return [(ranks, pace, rng.choice((1.0, 2.0, 10.0)), how, stall)
            for ranks, pace in itertools.product((2, 4, 8), (0.1, 2.0, 10.0))
            for how, stall in (("dead", rng.random() < 0.5), ("stuck", rng.random() < 0.5))]


@pytest.mark.parametrize("ranks, pace, hb, how, stall", full_or(_hang_cases(), _hang_cases()[::2]))
def test_a_real_hang_still_warns_on_time(ranks, pace, hb, how, stall):
    before = max(40, int(90 / pace))
    culprit = ranks - 1
    warn = warning_after(pace)
    # Rank 0's producer stalls from 10 s before the hang's last step to 20 s after it (while the job hangs).
    last_step = T0 + before * pace
    lines, last = _recording(ranks, pace, hb, steps=before, hang=(how, culprit), tail=warn + 60.0,
                             stalled=(0,) if stall else (), stall_at=last_step - 10.0, stall_len=30.0)
    found = hangs(replay(lines))
    assert found, "no hang"
    first = found[0]
    assert first["starts_at"] <= last + warn + TICK + 0.01, (first["starts_at"] - last, warn, first["summary"])
    assert culprit in first["ranks"], first["summary"]
