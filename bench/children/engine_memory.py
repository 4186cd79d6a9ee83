"""Memory and CPU of the detection engine for one job size, in a fresh process (bench/memory_bench.py).

    python -m bench.children.engine_memory RANKS STEPS

Prints one JSON line: events, CPU per event, tracemalloc's current and peak, process RSS and its growth.
"""

import gc
import json
import sys
import time
import tracemalloc


def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096


def main() -> None:
    ranks, steps = int(sys.argv[1]), int(sys.argv[2])
    from bench.common import sim_events
    from stepwatch.models.detection import DetectionEngine
    from stepwatch.models.wire.events import parse_event
    batches = []
    for s in range(steps):
        evs = sim_events(ranks, 1, seed=s)
        for e in evs:
            e["step"] = s
            e["ts"] += s
        batches.append([parse_event(e) for e in evs])
    gc.collect()
    base_rss = rss()
    tracemalloc.start()
    engine = DetectionEngine()
    t = time.process_time()
    n = 0
    for evs in batches:
        for e in evs:
            engine.process(e)
        n += len(evs)
    cpu = time.process_time() - t
    batches = None
    gc.collect()
    current, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    print(json.dumps({"ranks": ranks, "events": n, "cpu_per_event_us": 1e6 * cpu / n, "traced": current,
                      "traced_peak": peak, "rss_total": rss(), "rss_delta": rss() - base_rss}))


if __name__ == "__main__":
    main()
