"""A host whose events come many steps late (its clock ahead in a recording sorted by event time, or a slow
path) is not a restart: the step assembler and the end of the job tell the two apart by each rank's own step
counter, which goes back only when the job restarts. Events written here by hand."""

from __future__ import annotations

from stepwatch.models.detection import DetectionEngine
from stepwatch.models.steps.assembly import StepAssembler
from stepwatch.models.wire.events import parse_event

STEP = 0.4


def add(asm: StepAssembler, rank: int, step: int, ts: float) -> list:
    cols = ([ts], [STEP], [0.3], [0.05], [0.0], [float("nan")], [f"n{rank // 4}"])  # as step_row orders them
    return [s for _, closed in asm.add_columns([rank], [step], [8], ["train"], cols) for s in closed]


def test_a_host_twenty_steps_late_is_not_a_restart():
    # Left out of the steps judged already when the assembler holds 16 steps (max_pending_seconds short) ...
    asm = StepAssembler(job="j", group="", max_pending_seconds=1.0)
    closed = []
    for step in range(80):
        for rank in range(4):  # host n0 on time
            closed += add(asm, rank, step, 100 + step * STEP)
        late = step - 20  # host n1's events come 20 steps late (more than max_pending_steps)
        if late >= 0:
            for rank in range(4, 8):
                closed += add(asm, rank, late, 100 + late * STEP)
    assert asm.restarts == 0
    assert asm.late_events > 0  # host n1's events were left out of steps already judged, and counted
    assert [s.step for s in closed] == sorted({s.step for s in closed})  # every step closed once, in order
    assert closed[-1].step >= 70


def test_a_host_twenty_steps_late_is_waited_for_by_default():
    # ... waited for when 30 s of the job's steps (75 of 0.4 s) may be held open: every step whole, no restart.
    asm = StepAssembler(job="j", group="")
    closed = []
    for step in range(80):
        for rank in range(4):
            closed += add(asm, rank, step, 100 + step * STEP)
        late = step - 20
        if late >= 0:
            for rank in range(4, 8):
                closed += add(asm, rank, late, 100 + late * STEP)
    assert asm.restarts == 0
    assert [s.step for s in closed] == list(range(len(closed))) and len(closed) >= 55
    # The first steps close at 16 steps held, before the job's pace is known: host n1 is left out of those.
    assert all(len(s.ranks) == 8 for s in closed if s.step >= 25), [len(s.ranks) for s in closed]


def test_a_restart_still_resets_the_assembler():
    asm = StepAssembler(job="j", group="")
    for step in range(60):
        for rank in range(8):
            add(asm, rank, step, 100 + step * STEP)
    for rank in range(8):  # every rank back at the checkpoint of step 20
        add(asm, rank, 20, 200.0)
    assert asm.restarts == 1


def step(job: str, rank: int, n: int, ts: float) -> dict:
    return {"v": 1, "kind": "step", "job": job, "rank": rank, "node": f"n{rank // 4}", "world_size": 8, "step": n,
            "ts": ts, "step_time": STEP, "compute_time": 0.3, "comm_time": 0.05}


def run(engine: DetectionEngine, events: list[dict]) -> None:
    for e in events:
        engine.process(parse_event(e))


def test_a_late_hosts_steps_after_the_end_are_not_a_restart():
    """The job ends at step 99 on host n0's clock; host n1 (clock 12 s ahead) is 30 steps behind in the
    order events come, and its last 30 steps come after the end, stamped up to 12 s after it."""
    engine = DetectionEngine()
    early = [step("j", r, n, 1000 + n * STEP) for n in range(100) for r in range(4)]
    late = [step("j", r, n, 1012 + n * STEP) for n in range(100) for r in range(4, 8)]
    in_order = sorted(early + late, key=lambda e: e["ts"])
    end_at = 1000 + 99 * STEP + 0.1
    run(engine, [e for e in in_order if e["ts"] <= end_at])
    run(engine, [{"v": 1, "kind": "phase", "job": "j", "ts": end_at, "phase": "end"}])
    run(engine, [e for e in in_order if e["ts"] > end_at])
    job = engine.jobs["j"]
    assert job.ended  # not restarted by the late host's steps
    assert job.late_after_end == 4 * 30
    assert not [a for a in engine.tick(end_at + 900) if a.type == "hang"]


def test_a_job_restarted_after_its_end_is_a_restart():
    engine = DetectionEngine()
    run(engine, [step("j", r, n, 1000 + n * STEP) for n in range(100) for r in range(8)])
    run(engine, [{"v": 1, "kind": "phase", "job": "j", "ts": 1040.0, "phase": "end"}])
    # relaunched 90 s later from the checkpoint of step 80 (its counter goes back)
    run(engine, [step("j", r, n, 1130 + n * STEP) for n in range(80, 90) for r in range(8)])
    assert not engine.jobs["j"].ended
    # ... and one resumed from its last step, continuing the count, after a relaunch that took minutes
    engine = DetectionEngine()
    run(engine, [step("j", r, n, 1000 + n * STEP) for n in range(100) for r in range(8)])
    run(engine, [{"v": 1, "kind": "phase", "job": "j", "ts": 1040.0, "phase": "end"}])
    run(engine, [step("j", r, n, 1300 + n * STEP) for n in range(100, 110) for r in range(8)])
    assert not engine.jobs["j"].ended
