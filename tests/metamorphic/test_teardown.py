"""The teardown family (transforms.teardown) as an invariant over generated hangs, replayed: the simulator's job of
8-256 ranks at 0.1-60 s steps, its culprit frozen (silent), hung (heartbeats on) or dead, the waiting ranks torn
down 60-600 s into the hang (the culprit never gets past it then: test_transforms.py).

Found: library:hang-frozen-64 / teardown 120 s and 300 s into the hang named 32 torn-down ranks: the old variant let
its frozen culprit resume 660 s in and complete its last 80 steps alone (harness: impossible once its peers are
gone), so the silent ranks read as behind it."""

from __future__ import annotations

import random

import pytest

from . import transforms as t
from .recording import replay
from .test_transforms import _sim_hang
from .verdict import verdict


def _cases(n: int = 9, seed: int = 67) -> list[tuple[int, float, float, str, float]]:
    """(world, pace s, teardown s after the onset, the culprit's kind, s it stays stopped past the teardown)."""
    rng = random.Random(seed)
    kinds = ("frozen", "hang", "dead")
    return [(rng.choice((8, 64, 256)), rng.choice((0.1, 1.0, 10.0, 60.0)), rng.choice((60.0, 120.0, 300.0, 600.0)),
             kinds[i % 3], round(rng.uniform(20.0, 400.0), 1)) for i in range(n)]


@pytest.mark.parametrize("world, pace, after, kind, more", _cases())
def test_a_teardown_after_the_hang_began_never_changes_its_culprit(world, pace, after, kind, more):
    """Invariant: a teardown after the hang began never changes the hang's culprit: the hang names the rank that
    stopped and its node, whether that rank went silent (frozen, or dead before the teardown) or heartbeats on
    stuck, and never a torn-down rank."""
    rec, hot = _sim_hang(world, pace, kind, after + more)
    got = verdict(replay(t.teardown(rec, hot, after)))
    culprit = next(iter(hot["j"]))
    node = next(e["node"] for e in rec.events("step") if e["rank"] == culprit)
    assert (got.primary, got.culprits, got.node) == ("hang", hot["j"], node)
