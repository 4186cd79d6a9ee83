"""New jobs per second past the job caps (issue 44: "new jobs cost O(jobs)").

Replays N one-step jobs (2 ranks each, on their own node) through the detection core and times it; past the
caps (10,000 jobs by default) each new job evicts one, which must cost O(1), not a scan of every job.

    python bench/new_jobs.py 5000 10000 20000
"""

from __future__ import annotations

import sys
import time

from stepwatch.models.detection import DetectionEngine
from stepwatch.models.wire.events import parse_event

T0 = 1_764_000_000.0


def run(n: int) -> float:
    engine = DetectionEngine()
    events = [parse_event({"v": 1, "kind": "step", "job": f"j{i}", "rank": r, "step": 1, "ts": T0 + i * 0.001,
                           "step_time": 1.0, "node": f"n{i}", "gpu": r}) for i in range(n) for r in range(2)]
    start = time.perf_counter()
    for i, event in enumerate(events):
        engine.process(event)
        if i % 2000 == 0:
            engine.tick(event.ts)
    return time.perf_counter() - start


if __name__ == "__main__":
    for n in map(int, sys.argv[1:] or ["5000", "10000", "20000"]):
        print(f"{n} new jobs: {run(n):.2f} s")
