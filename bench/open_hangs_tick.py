"""Cost of one timer tick with N jobs holding open hangs (issue 44: 9,900 open hangs cost 0.41 s per tick).

    python bench/open_hangs_tick.py 1000 4000
"""

from __future__ import annotations

import sys
import time

from stepwatch.models.engine import DetectionEngine
from stepwatch.models.wire.events import parse_event

T0 = 1_764_000_000.0


def run(n: int) -> float:
    engine = DetectionEngine()
    for i in range(n):
        for r in range(2):
            engine.process(parse_event({"v": 1, "kind": "step", "job": f"j{i}", "rank": r, "step": 1, "ts": T0,
                                        "step_time": 1.0}))
    engine.tick(T0)
    fired = engine.tick(T0 + 700)  # past the 600 s timeout: every job hangs
    assert sum(a.type == "hang" for a in fired) == n, len(fired)
    start = time.perf_counter()
    for k in range(5):
        engine.tick(T0 + 701 + k)
    return (time.perf_counter() - start) / 5


if __name__ == "__main__":
    for n in map(int, sys.argv[1:] or ["1000", "4000"]):
        print(f"{n} open hangs: {run(n) * 1000:.0f} ms per tick")
