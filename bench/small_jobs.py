"""Small jobs (2-3 ranks), issue 23 item 3: how soon a rank 1.4x slower from step 30 is named and how many false
alarms healthy jobs give, on a loaded host (tests/step_gen.py) and on a second, independent generator
(tests/small_job_gen.py), plus the two real 2-rank Hugging Face recordings (tests/fixtures/hf_two_ranks).

    .venv/bin/python bench/small_jobs.py --jobs 20 --steps 300
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from step_gen import SyncJob  # noqa: E402
from small_job_gen import SmallJob  # noqa: E402
from stepwatch.models.pipeline import Pipeline, run_recording  # noqa: E402
from stepwatch.models.sinks import CapturingSink, drain  # noqa: E402

LOADED = dict(noise=0.05, load=0.25, load_p=0.4)
ONSET = 30


def fired(lines: list[bytes]) -> list:
    alerts = drain(run_recording(Pipeline(), lines), CapturingSink()).alerts
    return [a for a in alerts if a.type == "straggler" and a.status == "firing"]


def as_lines(events: list[dict]) -> list[bytes]:
    import json
    return [json.dumps(e).encode() for e in events]


def judge_slow(alerts: list, slow_rank: int) -> tuple[int | None, int]:
    """(steps from onset to the first alert naming the slow rank or None, alerts naming others)."""
    right = [a for a in alerts if a.ranks == (slow_rank,)]
    wrong = [a for a in alerts if a.ranks != (slow_rank,)]
    return (right[0].evidence["detected_step"] - ONSET if right else None), len(wrong)


def run(name: str, make, jobs: int) -> None:
    for ranks in (2, 3):
        delays, wrong = [], 0
        for seed in range(jobs):
            slow_rank = seed % ranks
            delay, w = judge_slow(fired(as_lines(make(ranks, seed, slow_rank).events())), slow_rank)
            wrong += w
            delays.append(delay)
        healthy = sum(len(fired(as_lines(make(ranks, 1000 + seed, None).events()))) for seed in range(jobs))
        named = sorted(d for d in delays if d is not None)
        within = sum(d <= 10 for d in named)
        med = statistics.median(named) if named else float("nan")
        print(f"{name} {ranks} ranks: 1.4x named within 10 steps {within}/{jobs}, at all {len(named)}/{jobs} "
              f"(median delay {med} steps, slowest {named[-1] if named else None}; other ranks named {wrong}); "
              f"healthy false alarms {healthy} in {jobs} jobs", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=20)
    parser.add_argument("--steps", type=int, default=300)
    args = parser.parse_args()
    fixtures = ROOT / "tests" / "fixtures" / "hf_two_ranks"
    for path in sorted(fixtures.glob("*.jsonl")):
        alerts = fired(path.read_bytes().splitlines())
        print(f"{path.name}: " + (", ".join(f"rank {a.ranks} at step {a.evidence.get('detected_step')}"
                                              for a in alerts) or "nobody named"), flush=True)
    run("step_gen loaded", lambda ranks, seed, slow: SyncJob(
        job=f"j{seed}", ranks=ranks, steps=args.steps, seed=seed, slow_rank=slow, slow_from=ONSET, lose=0.01,
        reorder=0.3, compute=0.06, comm=0.01, **LOADED), args.jobs)
    run("small_job_gen", lambda ranks, seed, slow: SmallJob(
        job=f"h{seed}", ranks=ranks, steps=args.steps, seed=seed, slow_rank=slow, slow_from=ONSET,
        jobwide_factor=1.5 if seed % 2 else 1.0, jobwide_from=150), args.jobs)
    run("small_job_gen without contention bursts", lambda ranks, seed, slow: SmallJob(
        job=f"q{seed}", ranks=ranks, steps=args.steps, seed=seed, slow_rank=slow, slow_from=ONSET, burst_p=0.0,
        jobwide_factor=1.5 if seed % 2 else 1.0, jobwide_from=150), args.jobs)


if __name__ == "__main__":
    main()
