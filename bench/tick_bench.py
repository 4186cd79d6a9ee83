"""The timer's cost with many mostly idle jobs (issue 27 item 4): one tick with the schedule (only jobs that
events reached, with an open hang or at a deadline) against the reference (every job every tick, as before),
at several job counts, in one run.

Each job has 2 ranks and sent 3 steps (healthy, well inside its hang timeout); then between two ticks
``--active`` jobs send a step. Reported: the median tick time (wall and the thread's CPU: the machine may be
loaded) over ``--ticks`` ticks, and the jobs visited.

    .venv/bin/python -m bench.tick_bench --jobs 1000 10000 50000 --active 100
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import time

import orjson

from stepwatch.config import Settings
from stepwatch.recording import tune_gc
from stepwatch.models.detection import DetectionEngine
from stepwatch.models.tick_schedule import by_touch
from stepwatch.models.pipeline import Pipeline


def _every_job(self: DetectionEngine, now: float):
    self.schedule.take_touched()
    return sorted(self.jobs.values(), key=by_touch)


def _envelope(jobs: list[str], step: int, ts: float) -> bytes:
    return orjson.dumps({"v": 1, "kind": "batch", "events": [
        {"v": 1, "kind": "step", "job": j, "rank": r, "step": step, "ts": ts, "step_time": 1.0, "world_size": 2}
        for j in jobs for r in range(2)]})


def measure(n_jobs: int, *, active: int, ticks: int, reference: bool) -> dict:
    settings = Settings.from_env()
    retention = dataclasses.replace(settings.retention, max_jobs=max(n_jobs, settings.retention.max_jobs))
    settings = dataclasses.replace(settings, retention=retention)
    pipeline = Pipeline(settings=settings)
    engine = pipeline.engine
    if reference:
        engine._jobs_due = _every_job.__get__(engine)
    names = [f"job{i}" for i in range(n_jobs)]
    t = 1_000_000.0
    for step in range(3):
        for lo in range(0, n_jobs, 128):  # envelopes of 256 events (128 new jobs: under the per-message bound)
            pipeline.feed([_envelope(names[lo:lo + 128], step, t)], arrival=t)
        pipeline.tick(t)
        t += 1.0
    times, cpu, visits = [], [], []
    for i in range(ticks):
        chosen = [names[(i * active + k) % n_jobs] for k in range(active)]
        pipeline.feed([_envelope(chosen, 3 + i, t)], arrival=t)
        started, started_cpu = time.perf_counter(), time.thread_time()
        pipeline.tick(t)
        times.append(time.perf_counter() - started)
        cpu.append(time.thread_time() - started_cpu)
        visits.append(engine.last_tick_visits)
        t += 1.0
    return {"jobs": n_jobs, "active": active, "tick": "every job (before)" if reference else "schedule (after)",
            "median_tick_ms": round(statistics.median(times) * 1e3, 3), "max_tick_ms": round(max(times) * 1e3, 3),
            "median_tick_cpu_ms": round(statistics.median(cpu) * 1e3, 3),
            "visits": statistics.median(visits)}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, nargs="+", default=[1_000, 10_000, 50_000])
    parser.add_argument("--active", type=int, default=100)
    parser.add_argument("--ticks", type=int, default=20)
    parser.add_argument("--modes", choices=["both", "schedule", "reference"], default="both")
    args = parser.parse_args(argv)
    tune_gc()  # the collector's setting ``stepwatch worker`` and ``replay`` run with
    for n in args.jobs:
        for reference in {"both": (True, False), "schedule": (False,), "reference": (True,)}[args.modes]:
            print(json.dumps(measure(n, active=args.active, ticks=args.ticks, reference=reference)), flush=True)


if __name__ == "__main__":
    main()
