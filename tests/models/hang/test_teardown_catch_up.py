"""A culprit that reaches the collective only after the job was torn down around it is still the culprit.

NCCL's watchdog kills the ranks waiting in collective C minutes into a hang; the rank behind C may still get there
afterwards (a hung training thread that goes on, a frozen process resumed) and heartbeat in C until its own
collective fails or the launcher kills it. Every rank heard from was then at C and the hang turned 'undetermined'
(the verdict lost its culprit: found while analysing library:hang-frozen-64 / teardown 120 s into the hang, whose
variant was fixed in tests/metamorphic/transforms.py). A rank whose ``seq_started`` rose to C only after every
torn-down rank waiting in C was last heard of came too late: it is behind C (models/hang/diagnosis.py).

Invariant: a teardown after the hang began never changes the hang's culprit, whatever the world size (8-256), the
pace (0.1-60 s), the heartbeat period, when the teardown comes (60-600 s into the hang) and when (and for how long)
the culprit catches up after it, frozen (silent until then) or hung (heartbeats on). Negatives: a culprit that died
before the teardown stays the culprit, and a whole node that died (its ranks silent from the hang's start: an Xid,
a lost node) is still that node's ranks.
"""

from __future__ import annotations

import random

import pytest

from hang_recordings import Job, culprits, hangs, node, replay, steps_beats_before
from support import full_or

KINDS = ("hang", "frozen", "dead", "node")


def _cases(seed: int = 71) -> list[tuple[int, float, float, float, str, float, float | None]]:
    """(ranks, pace s, heartbeat period s, teardown s into the hang, the culprit's kind, s after the teardown it
    reaches the collective, s it heartbeats there before it is killed (None: to the end))."""
    rng = random.Random(seed)
    out = []
    for i in range(24):
        kind = KINDS[i % 4]
        ranks = rng.choice((16, 64, 256) if kind == "node" else (8, 16, 64, 256))
        hb = rng.choice((5.0, 10.0) if ranks == 256 else (1.0, 2.0, 5.0, 10.0))
        out.append((ranks, rng.choice((0.1, 1.0, 10.0, 60.0)), hb, rng.choice((60.0, 120.0, 300.0, 600.0)), kind,
                    round(rng.uniform(10.0, 300.0), 1), rng.choice((None, round(rng.uniform(10.0, 120.0), 1)))))
    return out


def _recording(ranks: int, pace: float, hb: float, after: float, kind: str, catch: float,
               alive: float | None) -> tuple[list[bytes], set[int]]:
    """12 steps, then rank ``ranks // 3`` (``node``: every rank of its node) stops before the next step's first
    collective while the others wait in it; ``after`` s in they are torn down (silent from then); the culprit
    (``hang``: heartbeating at its last collective meanwhile; ``frozen``: silent) reaches the collective ``catch`` s
    later and heartbeats in it for ``alive`` s; a ``dead`` culprit or node sends nothing after the stop."""
    job = Job(ranks, step=pace, hb=hb, seed=ranks + int(after))
    steps_beats_before(job, 12)
    culprit = ranks // 3
    stopped = {r for r in range(ranks) if node(r) == node(culprit)} if kind == "node" else {culprit}
    seq = job.seq
    reach = after + catch
    gone = reach + alive if alive is not None else float("inf")

    def who(rank: int, t: float) -> dict | None:
        if rank not in stopped:
            return {"started": seq + 1, "done": seq} if t < after else None
        if kind in ("dead", "node") or t >= gone:
            return None
        if t >= reach:
            return {"started": seq + 1, "done": seq}
        return {"started": seq, "done": seq} if kind == "hang" else None

    job.wait(max(reach + (alive or 60.0), 660.0), who)
    return job.recording(), stopped


@pytest.mark.parametrize("ranks, pace, hb, after, kind, catch, alive", full_or(_cases(), _cases()[:12]))
def test_a_teardown_after_the_hang_began_never_changes_its_culprit(ranks, pace, hb, after, kind, catch, alive):
    lines, stopped = _recording(ranks, pace, hb, after, kind, catch, alive)
    found = [a for a in hangs(replay(lines, drain=700.0)) if a["status"] == "firing"]
    assert found, "no hang"
    named = [(a["evidence"]["case"], sorted(culprits(a))) for a in found]
    assert all(ranks_ == sorted(stopped) for _, ranks_ in named), named
    assert found[-1]["severity"] == "critical" and found[-1]["nodes"][0] == node(min(stopped)), found[-1]["summary"]
