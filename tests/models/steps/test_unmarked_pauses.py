"""A checkpoint every N steps without phase markers warns once, not at each (models/hang, ``pause_factor``).

Recordings of tests/gen2 (independent of the simulator): rank 0 writes for 45 s after every 60th step while the
others wait in the next collective, as a training loop without stepwatch's phase calls reports it; delivered
with loss and reordering, replayed through ``stepwatch.recording.replay`` (the road ``stepwatch replay`` takes).
Before, each of the four pauses raised a hang warning naming rank 0.
"""

from __future__ import annotations

import io
from dataclasses import replace

import orjson

from gen2 import sync
from gen2.plan import Marking, Pause, Plan, Stuck
from gen2.transport import Transport, timed_lines
from stepwatch.config import Settings
from stepwatch.recording import merge_lines, replay

CHECKPOINTS = tuple(Pause(step, 45.0, "checkpoint", Marking.UNMARKED) for step in (60, 120, 180, 240))


def alerts_of(plan: Plan, tmp_path, settings: Settings | None = None) -> list[dict]:
    lines = [line for _, line in timed_lines(sync.play(plan), Transport(loss=0.02, reorder=0.05, seed=3),
                                             arrival=True)]
    path = tmp_path / f"{plan.job}.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    out = io.StringIO()
    replay(merge_lines([str(path)]), settings or Settings(), drain=900.0, out=out)
    return [orjson.loads(line) for line in out.getvalue().splitlines()]


def test_periodic_unmarked_checkpoints_warn_once(tmp_path):
    alerts = alerts_of(Plan(job="ckpt4", ranks=32, per_node=8, steps=260, pauses=CHECKPOINTS), tmp_path)
    hangs = [a for a in alerts if a["type"] == "hang"]
    assert len({a["id"] for a in hangs}) == 1, [(a["status"], a["summary"][:90]) for a in hangs]
    assert {a["severity"] for a in hangs} == {"warning"} and hangs[-1]["status"] == "resolved"
    assert [a["type"] for a in alerts if a["type"] != "hang"] == []


def test_without_the_pause_factor_each_checkpoint_warns(tmp_path):
    settings = Settings()
    settings = replace(settings, hang=replace(settings.hang, pause_factor=0.0))
    alerts = alerts_of(Plan(job="ckpt4", ranks=32, per_node=8, steps=260, pauses=CHECKPOINTS), tmp_path, settings)
    assert len({a["id"] for a in alerts if a["type"] == "hang"}) == 4


def test_a_real_hang_after_the_checkpoints_is_still_caught_and_named(tmp_path):
    settings = Settings()
    settings = replace(settings, hang=replace(settings.hang, timeout_seconds=150.0))
    plan = Plan(job="ckpt-hang", ranks=32, per_node=8, steps=200, pauses=CHECKPOINTS[:2],
                stuck=Stuck(rank=13, step=170, tail=240.0))
    hangs = [a for a in alerts_of(plan, tmp_path, settings) if a["type"] == "hang"]
    real = [a for a in hangs if a["evidence"].get("culprit_ranks") == [13] or 13 in a["ranks"][:1]]
    assert real, [(a["status"], a["severity"], a["summary"][:120]) for a in hangs]
    firing = [a for a in real if a["status"] == "firing"]
    assert firing[0]["severity"] == "warning" and firing[-1]["severity"] == "critical"
    # The warning waited 1.5x the learned 45 s pause, not the 30 s floor; the timeout did not move.
    assert firing[0]["evidence"]["stalled_seconds"] >= 1.5 * 45.0 - 1.0
    assert len({a["id"] for a in hangs}) == 2  # the first checkpoint's warning and the hang


def test_the_later_checkpoints_do_not_lengthen_the_wait(tmp_path):
    # Only the first checkpoint warns; the later ones show as 45 s step times of the ranks that waited. Kept
    # in the p99 they made the warning wait 10x that p99 (over 200 s after four checkpoints); as stops they
    # count as pauses: the wait stays 1.5x the 45 s checkpoint.
    plan = Plan(job="ckpt4-hang", ranks=32, per_node=8, steps=300, pauses=CHECKPOINTS,
                stuck=Stuck(rank=13, step=285, tail=700.0))
    hangs = [a for a in alerts_of(plan, tmp_path) if a["type"] == "hang" and a["status"] == "firing"]
    real = [a for a in hangs if 13 in a["ranks"][:1]]
    assert real, [(a["severity"], a["summary"][:120]) for a in hangs]
    assert real[0]["severity"] == "warning"
    assert 1.5 * 45.0 - 1.0 <= real[0]["evidence"]["stalled_seconds"] < 1.5 * 45.0 + 15.0, real[0]["summary"]
    assert real[0]["evidence"]["p99_step_time"] < 10.0  # the checkpoints are not steps
