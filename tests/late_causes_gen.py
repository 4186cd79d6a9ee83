"""Hand-written recordings for issue 39 items 5 and 7 (a second generator, not the simulator): wire dicts as ranks
and node agents send them.

* ``thermal_drift``: one GPU throttling slowly (temperature rising, then hovering at the gpu_hot threshold; SM clock
  falling; the thermal-slowdown throttle bit set in every sample) from 1.00x to ``peak`` over ``minutes``;
* ``data_stall``: one rank's data loader stalls (its ``data_time`` grows, its compute does not);
* ``long_steps``: 60 s steps, one rank slower from ``onset`` growing from ``start`` to ``end`` x.

Deterministic noise (no random state): the same recording every run.
"""

from __future__ import annotations

import math

T0 = 1_765_000_000.0
MAX_CLOCK = 1980.0
THERMAL = 0x20  # SW thermal slowdown


def _noise(a: int, b: int, scale: float = 0.01) -> float:
    return (((a * 7919 + b * 104729) % 97) / 97 - 0.5) * 2 * scale


def thermal_drift(*, job: str = "drift", nodes: int = 2, per_node: int = 4, slow_rank: int = 2, step: float = 5.0,
                  minutes: float = 90.0, peak: float = 1.25, sample: float = 10.0, hot_c: float = 85.0,
                  hover_from: float = 0.55) -> list[dict]:
    """Ranks ``n * per_node + g`` on node ``drift-n`` GPU ``g``. The slow GPU's clock falls so that its rank's compute
    grows linearly 1.00x -> ``peak`` over ``minutes``; its temperature climbs to ``hot_c`` by ``hover_from`` of the
    span and then hovers at it (+-1 C); every sample of it carries the thermal-slowdown throttle bit."""
    ranks = nodes * per_node
    span = minutes * 60.0
    out: list[dict] = []
    t, n, next_sample = T0, 0, T0
    while t < T0 + span:
        f = 1.0 + (peak - 1.0) * (t - T0) / span
        compute = [2.0 * (1 + _noise(r, n)) * (f if r == slow_rank else 1.0) for r in range(ranks)]
        done = t + max(compute) + 0.3
        for r in range(ranks):
            out.append({"v": 1, "kind": "step", "job": job, "rank": r, "step": n, "ts": round(done + 0.001 * r, 6),
                        "step_time": round(done - t, 6), "compute_time": round(compute[r], 6),
                        "node": f"drift-{r // per_node}", "gpu": r % per_node, "world_size": ranks})
        while next_sample <= done:
            frac = (next_sample - T0) / span
            for r in range(ranks):
                slow = r == slow_rank
                ff = 1.0 + (peak - 1.0) * frac if slow else 1.0
                if slow:
                    temp = 70.0 + (hot_c - 70.0) * min(frac / hover_from, 1.0)
                    if frac >= hover_from:  # hovering at the threshold: +-1 C
                        temp = hot_c + math.sin(next_sample / 17.0) + 0.3 * math.sin(next_sample / 5.0)
                else:
                    temp = 64.0 + 2 * _noise(r, int(next_sample), 1.0)
                out.append({"v": 1, "kind": "gpu", "node": f"drift-{r // per_node}", "gpu": r % per_node,
                            "ts": round(next_sample + 0.01 * r, 6), "util": 97.0, "temp": round(temp, 2),
                            "power": 650.0, "power_limit": 700.0,
                            "sm_clock": round(MAX_CLOCK / ff * (1 + _noise(r, int(next_sample), 0.002))),
                            "sm_clock_max": MAX_CLOCK, "throttle": THERMAL if slow else 0})
            next_sample += sample
        t, n = done, n + 1
    out.append({"v": 1, "kind": "phase", "job": job, "ts": round(t + 0.1, 6), "phase": "end"})
    return sorted(out, key=lambda e: e["ts"])


def data_stall(*, job: str = "loader", ranks: int = 8, per_node: int = 4, stalled: int = 5, steps: int = 120,
               onset: int = 50, stall: float = 0.45) -> list[dict]:
    """``stalled``'s data loader stalls from step ``onset``: its ``data_time`` grows by ``stall`` seconds a step
    (its compute does not); everyone waits for it in the collective. No node telemetry."""
    out: list[dict] = []
    t = T0
    for n in range(steps):
        data = [0.02 * (1 + _noise(r, n, 0.1)) + (stall if r == stalled and n >= onset else 0.0) for r in range(ranks)]
        compute = [1.0 * (1 + _noise(r, n)) for r in range(ranks)]
        done = t + max(d + c for d, c in zip(data, compute)) + 0.1
        for r in range(ranks):
            out.append({"v": 1, "kind": "step", "job": job, "rank": r, "step": n, "ts": round(done + 0.001 * r, 6),
                        "step_time": round(done - t, 6), "compute_time": round(compute[r], 6),
                        "data_time": round(data[r], 6), "node": f"loader-{r // per_node}", "gpu": r % per_node,
                        "world_size": ranks})
        t = done
    out.append({"v": 1, "kind": "phase", "job": job, "ts": round(t + 0.1, 6), "phase": "end"})
    return out


def long_steps(*, job: str = "slow60", ranks: int = 16, per_node: int = 8, slow_rank: int = 9, steps: int = 70,
               onset: int = 30, start: float = 1.11, end: float = 1.30, ramp: int = 12, step: float = 60.0) -> list[dict]:
    """60 s steps; ``slow_rank`` is ``start`` x slower from ``onset`` growing to ``end`` x over ``ramp`` steps
    (a straggler whose first estimate is below the truth it settles at)."""
    out: list[dict] = []
    t = T0
    for n in range(steps):
        f = 1.0 if n < onset else start + (end - start) * min(1.0, (n - onset) / ramp)
        compute = [step * 0.9 * (1 + _noise(r, n, 0.005)) * (f if r == slow_rank else 1.0) for r in range(ranks)]
        done = t + max(compute) + 0.05 * step
        for r in range(ranks):
            out.append({"v": 1, "kind": "step", "job": job, "rank": r, "step": n, "ts": round(done + 0.01 * r, 6),
                        "step_time": round(done - t, 6), "compute_time": round(compute[r], 6),
                        "node": f"s60-{r // per_node}", "gpu": r % per_node, "world_size": ranks})
        t = done
    out.append({"v": 1, "kind": "phase", "job": job, "ts": round(t + 0.1, 6), "phase": "end"})
    return out
