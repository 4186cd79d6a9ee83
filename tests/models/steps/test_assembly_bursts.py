"""Producers that send in bursts: steps of 15 ms, each rank's sender shipping its queue once a second at its own
phase, so a rank's events come ~65 steps at a time, in no particular order within the burst. The assembler
must hold a step open until the late ranks' bursts come (bounded by seconds of the job's pace, not only by
``max_pending_steps``), or the steps are judged without them: a slow rank whose burst comes last is then
missing from the steps, and its peers' waits for it read as a slower network (a communication throughput
drop). Events written here by hand."""

from __future__ import annotations

import math
import random

from stepwatch.models.detection import DetectionEngine
from stepwatch.models.steps.assembly import PENDING_REPORTS, StepAssembler
from stepwatch.models.wire.events import parse_event

RANKS, STEPS, COMPUTE, TRANSFER, SLOW_FROM = 8, 1200, 0.012, 0.003, 600
FLUSH = 1.0
#: Each rank's sender phase within the flush interval; rank 3 (the one that turns slow) ships last.
PHASE = {0: 0.05, 1: 0.15, 2: 0.3, 3: 0.9, 4: 0.1, 5: 0.2, 6: 0.35, 7: 0.45}


def burst_events() -> list[dict]:
    """The job's step events in the order they arrive: by each rank's flush, shuffled within a flush."""
    rng = random.Random(7)
    t = 1000.0
    sent = []
    for n in range(STEPS):
        compute = {r: COMPUTE * (1.3 if r == 3 and n >= SLOW_FROM else 1.0) * rng.uniform(0.98, 1.02)
                   for r in range(RANKS)}
        slowest = max(compute.values())
        step_time = slowest + TRANSFER
        t += step_time
        for r in range(RANKS):
            comm = slowest - compute[r] + TRANSFER  # waits for the slowest rank, then the transfer
            event = {"v": 1, "kind": "step", "job": "b", "rank": r, "node": f"n{r // 4}", "world_size": RANKS,
                     "step": n, "ts": round(t, 6), "step_time": step_time, "compute_time": compute[r],
                     "comm_time": comm}
            shipped = PHASE[r] + math.ceil((t - PHASE[r]) / FLUSH) * FLUSH
            sent.append((shipped + rng.uniform(0, 0.05), event))  # order within a burst: any
    sent.sort(key=lambda x: x[0])
    return [e for _, e in sent]


def test_steps_wait_for_the_late_ranks_burst():
    asm = StepAssembler(job="b", group="")
    closed = []
    for e in burst_events():
        cols = ([e["ts"]], [e["step_time"]], [e["compute_time"]], [e["comm_time"]], [0.0], [float("nan")],
                [e["node"]])  # as step_row orders them
        closed += [s for _, steps in asm.add_columns([e["rank"]], [e["step"]], [RANKS], ["train"], cols)
                   for s in steps]
    closed += asm.flush(float("inf"))
    assert asm.restarts == 0  # a burst shuffled over 65 steps is not a rank's counter going back
    assert [s.step for s in closed] == list(range(STEPS))  # every step closed once, in order
    # The first bursts teach the assembler how late rank 3 comes (the pace, then the lag); after that
    # (a few seconds: 400 steps of 15 ms) no step is judged without it.
    without = [s.step for s in closed if 3 not in s.ranks.tolist()]
    assert not [n for n in without if n >= 400], without
    assert asm.pending_bound <= 256  # held open: seconds of the job's pace, within the hard cap


def test_a_straggler_in_bursts_is_no_throughput_drop():
    engine = DetectionEngine()
    alerts = []
    for e in burst_events():
        alerts += engine.process(parse_event(e))
    firing = [(str(a.type), a.ranks) for a in alerts if str(a.status) == "firing"]
    assert ("straggler", [3]) in [(t, list(r)) for t, r in firing], firing
    assert not [t for t, _ in firing if t == "throughput_drop"], firing


def test_the_open_steps_stay_within_the_hard_cap():
    """A job reporting microsecond steps (or a sender lying about them) with half its ranks' events ever later:
    the seconds would allow millions of steps open, the cap allows ``pending_steps_cap``."""
    asm = StepAssembler(job="b", group="", pending_steps_cap=64)
    most = 0
    for n in range(3000):
        for r in range(4):
            cols = ([1000.0 + n * 1e-6], [1e-6], [0.0], [0.0], [0.0], [float("nan")], ["n0"])
            asm.add_columns([r], [n], [8], ["train"], cols)
        late = n // 2  # host n1 falls further behind all the time
        for r in range(4, 8):
            cols = ([1000.0 + late * 1e-6], [1e-6], [0.0], [0.0], [0.0], [float("nan")], ["n1"])
            asm.add_columns([r], [late], [8], ["train"], cols)
        most = max(most, len(asm._open))
    assert asm.pending_bound == 64
    assert 16 < most <= 64  # more than max_pending_steps (the pace allows it), never more than the cap
    assert asm.restarts == 0


def host_bursts() -> list[tuple[list[int], int]]:
    """Runs of one step, as batch envelopes bring them: host n0's 4 ranks each step as it ends; host n1's 4 ranks
    a second's worth of steps at a time (its shard flushing once a second), the steps of a burst in any order."""
    rng = random.Random(3)
    runs, burst = [], []
    for n in range(1500):
        runs.append(([0, 1, 2, 3], n))
        burst.append(n)
        if len(burst) == 65:
            rng.shuffle(burst)
            runs += [([4, 5, 6, 7], m) for m in burst]
            burst = []
    return runs


def _add_runs(asm: StepAssembler, runs, *, one_by_one: bool) -> list[tuple[int, list[int]]]:
    closed = []
    for ranks, n in runs:
        ts = 1000.0 + n * 0.015
        rows = [(r,) for r in ranks] if one_by_one else [tuple(ranks)]
        for rs in rows:
            k = len(rs)
            cols = ([ts] * k, [0.015] * k, [0.012] * k, [0.003] * k, [0.0] * k, [float("nan")] * k, ["n"] * k)
            for _, steps in asm.add_columns(list(rs), [n] * k, [RANKS] * k, ["train"] * k, cols):
                closed += [(s.step, s.ranks.tolist()) for s in steps]
    return closed


def _state(asm: StepAssembler) -> tuple:
    return (sorted(asm._open), asm.last_closed, asm.late_events, asm.restarts, asm._quorum_step, asm._extra_lag,
            asm._extra_seen, asm.pending_bound, asm._pace)


def test_whole_runs_close_as_one_by_one_behind_a_late_host():
    """The batch path (a run of one step added in bulk, up to the event completing it) gives the same closes and
    state as adding each event alone, also where a completed step waits for older ones behind a late host."""
    bulk, single = StepAssembler(job="b", group=""), StepAssembler(job="b", group="")
    closed = _add_runs(bulk, host_bursts(), one_by_one=False)
    assert closed == _add_runs(single, host_bursts(), one_by_one=True)
    assert _state(bulk) == _state(single)
    assert bulk._extra_lag  # the late host was learned ...
    assert [n for n, ranks in closed if n >= 200 and len(ranks) < RANKS] == []  # ... and waited for
    assert [n for n, _ in closed] == sorted(n for n, _ in closed)


def test_a_wide_group_holds_fewer_steps():
    """The seconds hold at most ``PENDING_REPORTS`` rank reports open: 4096 ranks of 1 ms steps, 64 steps."""
    asm = StepAssembler(job="b", group="")
    ranks = list(range(4096))
    for n in range(3):
        cols = ([1000.0 + n * 0.001] * 4096, [0.001] * 4096, [0.0] * 4096, [0.0] * 4096, [0.0] * 4096,
                [float("nan")] * 4096, ["n"] * 4096)
        asm.add_columns(ranks, [n] * 4096, [4096] * 4096, ["train"] * 4096, cols)
    assert asm._pace == 0.001 and asm.pending_bound == PENDING_REPORTS // 4096 == 64
