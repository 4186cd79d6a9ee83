"""A column batch of many jobs' interleaved lines (a replay's merged single-event lines: a small job's step arrives in
pieces between other jobs' lines) is judged job by job (``DetectionEngine.join_runs``), each job's rows as one run.

Invariant: the alerts, every field and in the same order, with the same ticks, are those of judging the batch run by
run, whatever the jobs, ranks, pace, arrival jitter, clock offset and batch size; and the engine's state after
(the jobs' activity order the tick visits in, the clock) is the same. The recordings have stragglers that fire and
resolve, a rank that stops (a hang) and a job that stops, so alerts fire in batches whose runs were joined."""

from __future__ import annotations

import heapq
import random

import orjson
import pytest

from stepwatch.models.detection import DetectionEngine
from stepwatch.models.wire.step_columns import StepColumns, decode_message_columns

T0 = 1_764_000_000.0


def _lines(jobs: int, ranks: int, seconds: float, seed: int, offset: float) -> list[dict]:
    """``jobs`` jobs of ``ranks`` ranks, one step event a line, in broker-arrival order (a jittered lag; the hosts'
    clocks ``offset`` off the broker's); job 0's last rank 1.6x slower from step 40 (a straggler), job 1's rank 0
    silent from 60 s (a hang), the last job silent from 90 s."""
    rng = random.Random(seed)
    streams = []
    for j in range(jobs):
        pace = rng.uniform(0.7, 1.1)
        t, step, out = T0 + rng.uniform(0, 1), 0, []
        while t < T0 + seconds and not (j == jobs - 1 and j > 1 and t > T0 + 90):
            slow = j == 0 and step >= 40
            for r in range(ranks):
                if j == 1 and r == 0 and t > T0 + 60:
                    continue
                took = pace * (1.6 if slow and r == ranks - 1 else 1.0) * (1 + rng.gauss(0, 0.01))
                event = {"v": 1, "kind": "step", "job": f"job-{j}", "rank": r, "step": step, "ts": t + offset,
                         "step_time": took, "node": f"job-{j}-n{r // 4}", "gpu": r % 4, "world_size": ranks}
                out.append((t + took - pace + 0.05 + rng.random() * 0.3, event))
            t += pace * (1.6 if slow else 1.0)
            step += 1
        streams.append(out)
    return [dict(e, _arrival=at) for at, e in heapq.merge(*streams, key=lambda x: x[0])]


def _run(lines: list[dict], size: int, join: bool) -> tuple[list[dict], list, list[str], float, int]:
    """The alerts of ``lines`` in column batches of ``size`` lines (each row its own arrival), ticking as the worker;
    the facts the outlet chain read each group of alerts with (the job as of the row that fired)."""
    engine = DetectionEngine()
    engine.join_runs = join
    facts, through = [], engine._through_outlet
    engine._through_outlet = lambda groups: (facts.extend(f for f, _ in groups), through(groups))[1]
    interval = engine.settings.worker.tick_interval
    alerts, next_tick, joined = [], None, 0
    for lo in range(0, len(lines), size):
        batch = lines[lo:lo + size]
        arrival = [e["_arrival"] for e in batch]
        cols, rejected = decode_message_columns(orjson.dumps(
            {"v": 1, "kind": "batch", "events": [{k: v for k, v in e.items() if k != "_arrival"} for e in batch]}))
        assert not rejected and isinstance(cols, StepColumns)
        joined += len(cols.job_runs()) > len(cols.jobs)
        alerts.extend(engine.process_batch(cols, arrival=arrival))
        if next_tick is None:
            next_tick = engine.clock + interval
        while engine.clock >= next_tick:
            alerts.extend(engine.tick(next_tick))
            next_tick += interval
    for k in range(1, 121):  # the silences run out: the hang and the stopped job's alerts
        alerts.extend(engine.tick(next_tick + k * interval))
    return [a.to_dict() for a in alerts], facts, list(engine.jobs), engine.clock, joined


#: (jobs, ranks, seconds, seed, hosts' clock offset, lines a batch)
CASES = [(jobs, ranks, 130.0, seed, offset, size)
         for jobs, ranks, seed, offset, size in ((3, 2, 0, 0.0, 7), (4, 4, 1, -25.0, 32), (5, 4, 2, 12.5, 64),
                                                 (3, 8, 3, 3.0, 16), (6, 2, 4, -4.0, 200), (2, 4, 5, 40.0, 5))]


@pytest.mark.parametrize("jobs,ranks,seconds,seed,offset,size", CASES)
def test_joined_runs_give_the_alerts_of_run_by_run(jobs, ranks, seconds, seed, offset, size):
    lines = _lines(jobs, ranks, seconds, seed, offset)
    by_run, facts, order, clock, _ = _run(lines, size, join=False)
    joined, joined_facts, joined_order, joined_clock, batches = _run(lines, size, join=True)
    assert batches, "no batch had a job's lines in pieces: the case tests nothing"
    types = {a["type"] for a in by_run}
    assert {"straggler", "hang"} <= types, types  # alerts fire and resolve while runs are joined
    assert joined == by_run
    assert any(f is not None for f in facts)
    assert joined_facts == facts
    assert joined_order == order and joined_clock == clock
