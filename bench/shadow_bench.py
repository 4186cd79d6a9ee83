"""The cost of a shadow rule set (issue 41 item 3): events per CPU-second through the worker's road (``Pipeline``
behind ``streams.shadow.Tapped``, as ``Worker.drive`` runs it) without a candidate and with a shadow straggler
setting, side by side in one run (the modes interleaved round by round, best of the rounds), on the same
messages; and what starting a candidate costs (the copy of the live engine) as the engine grows.

    .venv/bin/python -m bench.shadow_bench [--ranks 1024] [--steps 40] [--jobs 8] [--rounds 3]
"""

from __future__ import annotations

import argparse
import time

from bench.common import BATCH, encode, sim_events_job

CANDIDATE = {"straggler": {"ratio_threshold": 1.3}}


def messages(ranks: int, steps: int, jobs: int) -> tuple[list[list[bytes]], int]:
    """Batch envelopes of ``jobs`` jobs, one read (list of messages) per step round of every job, and the events."""
    per_job = [encode(sim_events_job(f"bench-{j}", ranks, steps, seed=j + 1), BATCH) for j in range(jobs)]
    per_step = ranks // BATCH or 1
    reads = []
    for lo in range(0, max(len(m) for m in per_job), per_step):
        reads.append([m for msgs in per_job for m in msgs[lo:lo + per_step]])
    return reads, ranks * steps * jobs


def road(reads: list[list[bytes]], mode: str) -> tuple[float, int]:
    """CPU seconds to take every read (and a tick after each) through the worker's road in ``mode``: ``plain``
    (the pipeline alone, as before), ``tapped`` (behind the tap, no candidate) or ``shadow`` (a candidate from
    the start); and the shadow alerts queued."""
    from stepwatch.config import Settings
    from stepwatch.models import shadow as candidate
    from stepwatch.models.detection import DetectionEngine
    from stepwatch.models.pipeline import Pipeline
    from stepwatch.models.sources import Read, Tick
    from stepwatch.runtime_config import RuntimeConfig
    from streams.shadow import ShadowRun, Tapped

    settings = Settings()
    live = Pipeline(DetectionEngine(settings))
    run = ShadowRun(live, RuntimeConfig(settings))
    if mode == "shadow":
        run.set(candidate.encode(CANDIDATE))
    taker = live if mode == "plain" else Tapped(live, run)
    started = time.process_time()
    for msgs in reads:
        taker.take(Read(msgs, None))
        taker.take(Tick(live.engine.clock))
    return time.process_time() - started, len(run.pending)


def start_cost(reads: list[list[bytes]]) -> tuple[float, float, int]:
    """CPU seconds to start a candidate on an engine that took ``reads`` (the copy of its state), and to take
    the reads at all (for scale); the jobs tracked."""
    from stepwatch.config import Settings
    from stepwatch.models import shadow as candidate
    from stepwatch.models.detection import DetectionEngine
    from stepwatch.models.pipeline import Pipeline
    from stepwatch.models.sources import Read
    from stepwatch.runtime_config import RuntimeConfig
    from streams.shadow import ShadowRun

    settings = Settings()
    live = Pipeline(DetectionEngine(settings))
    t = time.process_time()
    for msgs in reads:
        live.take(Read(msgs, None))
    fed = time.process_time() - t
    run = ShadowRun(live, RuntimeConfig(settings))
    t = time.process_time()
    run.set(candidate.encode(CANDIDATE))
    return time.process_time() - t, fed, len(live.engine.jobs)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ranks", type=int, default=1024)
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--jobs", type=int, default=8)
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args(argv)
    reads, n = messages(args.ranks, args.steps, args.jobs)
    best: dict[str, float] = {}
    queued = 0
    for _ in range(args.rounds):
        for mode in ("plain", "tapped", "shadow"):
            seconds, pending = road(reads, mode)
            best[mode] = min(best.get(mode, seconds), seconds)
            queued = max(queued, pending)
    print(f"{args.jobs} jobs x {args.ranks} ranks x {args.steps} steps = {n:,} step events in "
          f"{sum(len(r) for r in reads):,} batch envelopes ({BATCH} events); best of {args.rounds} rounds, CPU time")
    print("| road | CPU s | events per CPU-second | vs the pipeline alone |")
    print("|---|---:|---:|---:|")
    for mode, what in (("plain", "the pipeline alone (before)"), ("tapped", "behind the tap, no candidate"),
                       ("shadow", f"with a shadow straggler setting ({CANDIDATE['straggler']})")):
        print(f"| {what} | {best[mode]:.2f} | {n / best[mode] / 1000:.0f}k | {best[mode] / best['plain']:.2f}x |")
    print(f"shadow alerts queued (rules under trial only): {queued}")
    print("| jobs tracked | CPU s to take the reads | CPU s to start a candidate (copy of the engine) |")
    print("|---:|---:|---:|")
    for jobs in (1, args.jobs, args.jobs * 4):
        r, _ = messages(args.ranks // 4, 20, jobs)
        copy_s, fed_s, tracked = start_cost(r)
        print(f"| {tracked} ({args.ranks // 4} ranks each) | {fed_s:.2f} | {copy_s:.3f} |")


if __name__ == "__main__":
    main()
