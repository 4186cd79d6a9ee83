"""Cost of one timer tick with N jobs holding open hangs (issue 44: 9,900 open hangs cost 0.41 s per tick).

Both ways in one run: "every tick" re-checks every open hang and re-enriches every open alert on each tick
(the tick before issue 44's fix, ``TelemetryHub.incremental = False``); "skipping" re-checks a hang only when
its job got input or its verdict can change by time, and re-enriches an alert only when its inputs changed.
Between two ticks ``--changed`` of the hung jobs get a heartbeat (input). Median of ``--ticks`` ticks.

    python bench/open_hangs_tick.py 1000 4000 [--ticks 5] [--changed 10]
"""

from __future__ import annotations

import argparse
import statistics
import time

from stepwatch.models.detection import DetectionEngine
from stepwatch.models.wire.events import parse_event

T0 = 1_764_000_000.0


def run(n: int, *, incremental: bool, ticks: int = 5, changed: int = 10) -> dict:
    engine = DetectionEngine()
    engine.incremental = incremental
    for i in range(n):
        for r in range(2):
            engine.process(parse_event({"v": 1, "kind": "step", "job": f"j{i}", "rank": r, "step": 1, "ts": T0,
                                        "step_time": 1.0, "node": f"n{i % 500}"}))
    engine.tick(T0)
    fired = engine.tick(T0 + 700)  # past the 600 s timeout: every job hangs
    assert sum(a.type == "hang" for a in fired) == n, len(fired)
    cpu, wall, visits = [], [], []
    for k in range(ticks):
        now = T0 + 701 + k
        for i in range(k * changed, (k + 1) * changed):
            engine.process(parse_event({"v": 1, "kind": "heartbeat", "job": f"j{i % n}", "rank": 0, "ts": now - 0.5,
                                        "step": 1, "node": f"n{i % 500}"}))
        c, w = time.process_time(), time.perf_counter()
        engine.tick(now)
        cpu.append(time.process_time() - c)
        wall.append(time.perf_counter() - w)
        visits.append(engine.last_tick_visits)
    return {"cpu": statistics.median(cpu), "wall": statistics.median(wall), "visits": statistics.median(visits)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("n", nargs="*", type=int, default=[1000, 4000])
    parser.add_argument("--ticks", type=int, default=5)
    parser.add_argument("--changed", type=int, default=10)
    args = parser.parse_args()
    print("| open hangs | tick | jobs visited | CPU per tick | wall per tick |")
    print("|---:|---|---:|---:|---:|")
    for n in args.n:
        for incremental, label in ((False, "every tick (before)"), (True, "skipping (after)")):
            r = run(n, incremental=incremental, ticks=args.ticks, changed=args.changed)
            print(f"| {n:,} | {label} | {r['visits']:,.0f} | {r['cpu'] * 1000:.1f} ms | {r['wall'] * 1000:.1f} ms |",
                  flush=True)


if __name__ == "__main__":
    main()
