"""A job-wide pause whose closing ``train`` marker is lost ends when the ranks say so (models/job_phase.py).

Events written here by hand, as stepwatch's rank monitor sends them: rank 0 speaks for the job (job-wide
``phase`` events, no ``rank``) and its heartbeats carry its own phase; the other ranks' monitors were not
told, their heartbeats say ``train`` throughout. A checkpoint after step 40, its closing marker lost; rank 3
is 1.5x slower from step 60. Before, every later step stayed in the checkpoint phase: no straggler at all,
and a hang would have waited the 30-minute checkpoint timeout.
"""

from __future__ import annotations

from engine_driver import replay
from stepwatch.models.wire.events import parse_event

RANKS, STEPS, SLOW_RANK, SLOW_FROM = 8, 120, 3, 60


def events(*, lose_marker: bool, eval_steps: bool = False):
    ts = 1_700_000_000.0
    out = []
    for step in range(STEPS):
        if step == 40:
            phase = "eval" if eval_steps else "checkpoint"
            out.append({"v": 1, "kind": "phase", "job": "j", "ts": ts, "step": 39, "phase": phase})
            for k in range(4):  # the pause: rank 0's heartbeats say it
                out += [{"v": 1, "kind": "heartbeat", "job": "j", "rank": r, "ts": ts + 5.0 * k, "step": 39,
                         "phase": phase if r == 0 else "train"} for r in range(RANKS)]
            if not eval_steps:
                ts += 20.0
                if not lose_marker:
                    out.append({"v": 1, "kind": "phase", "job": "j", "ts": ts, "step": 39, "phase": "train"})
        if eval_steps and step == 100:
            out.append({"v": 1, "kind": "phase", "job": "j", "ts": ts, "step": 99, "phase": "train"})
        for rank in range(RANKS):
            compute = 0.80 + 0.004 * ((rank * 7 + step * 3) % 5)
            if rank == SLOW_RANK and step >= SLOW_FROM:
                compute *= 1.5
            out.append({"v": 1, "kind": "step", "job": "j", "rank": rank, "step": step, "ts": ts + 1.0,
                        "step_time": 1.4, "compute_time": compute})
        if step % 4 == 0:
            out += [{"v": 1, "kind": "heartbeat", "job": "j", "rank": r, "ts": ts + 1.2, "step": step,
                     "phase": "eval" if eval_steps and 40 <= step < 100 and r == 0 else "train"}
                    for r in range(RANKS)]
        ts += 1.4
    return [parse_event(e) for e in out]


def stragglers(evs):
    return [a for a in replay(evs) if a.type == "straggler" and a.status == "firing"]


def test_the_straggler_after_a_checkpoint_whose_train_marker_was_lost_is_found():
    marked, lost = stragglers(events(lose_marker=False)), stragglers(events(lose_marker=True))
    assert marked and lost, (marked, lost)
    assert lost[0].ranks == marked[0].ranks == (SLOW_RANK,)
    assert lost[0].evidence["detected_step"] == marked[0].evidence["detected_step"]


def test_steps_during_a_marked_eval_stay_in_it_while_rank_0_says_eval():
    # Rank 3 slow from step 60, inside the eval (steps 40-99 reported as steps, rank 0's heartbeats saying
    # eval): judged only once the job-wide ``train`` marker comes, at step 100.
    found = stragglers(events(lose_marker=False, eval_steps=True))
    assert found and found[0].evidence["detected_step"] >= 100, [a.evidence.get("detected_step") for a in found]


def test_the_status_views_leave_the_pause_with_the_ranks():
    # /jobs and /jobs/{job} show the job's phase from the engine's JobPhase: the checkpoint while it lasts,
    # training once the ranks have left it, though its closing marker was lost.
    from stepwatch.models.detection import DetectionEngine
    from stepwatch.models.status import StatusRecorder, job_summary, job_view

    evs = events(lose_marker=True)
    pause_ends = next(i for i, e in enumerate(evs) if e.kind == "step" and e.step == 40)
    engine = DetectionEngine()
    recorder = StatusRecorder().attach(engine)
    for i, event in enumerate(evs):
        recorder.observe(event)
        list(engine.process(event))
        if i == pause_ends - 1:
            assert job_summary(engine, recorder, "j", event.ts)["phase"] == "checkpoint"
    view = job_view(engine, recorder, "j", evs[-1].ts)
    assert view["phase"] == "train"
    assert {r["phase"] for r in view["ranks"]} == {"train"}
