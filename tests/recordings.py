"""Hand-made incident recordings for the record/publish/replay tests (a second generator, not the simulator).

One wire-format event per line, as a rank would send it; deterministic noise, a few events
reordered within a step, a checkpoint pause, ending as an incident capture would.
"""

from __future__ import annotations

from pathlib import Path

import orjson


def _noise(rank: int, step: int) -> float:
    return (((rank * 7919 + step * 104729) % 97) / 97 - 0.5) * 0.02  # +-1 % step-time noise


def straggler_and_slowdown(job: str, *, t0: float, ranks: int = 8, steps: int = 200, slow_rank: int = 5,
                           slow: tuple[int, int] = (40, 90), slowdown_from: int = 130) -> list[dict]:
    """Rank ``slow_rank`` 40 % slower for steps ``slow`` (a straggler); from ``slowdown_from`` every rank 60 %
    slower (a throughput drop); a checkpoint at step 100; the job's ``end`` at the last step."""
    events: list[dict] = []
    t = t0
    for step in range(steps):
        factor = 1.6 if step >= slowdown_from else 1.0
        batch = []
        for rank in range(ranks):
            compute = 0.2 * factor * (1 + _noise(rank, step))
            if slow[0] <= step < slow[1] and rank == slow_rank:
                compute *= 1.4
            batch.append({"v": 1, "kind": "step", "job": job, "rank": rank, "step": step,
                          "ts": round(t + compute, 6), "step_time": round(compute + 0.05, 6),
                          "compute_time": round(compute, 6), "tokens": 4096, "node": f"node-{rank // 4:03d}",
                          "world_size": ranks})
        if step % 17 == 3:  # another rank's event overtakes: order within a step is not guaranteed
            batch[1], batch[2] = batch[2], batch[1]
        events.extend(batch)
        t += 0.2 * factor * 1.4 + 0.05
        if step == 100:
            events.append({"v": 1, "kind": "phase", "job": job, "ts": round(t, 6), "phase": "checkpoint"})
            t += 3.0
            events.append({"v": 1, "kind": "phase", "job": job, "ts": round(t, 6), "phase": "train"})
    events.append({"v": 1, "kind": "phase", "job": job, "ts": round(t + 0.1, 6), "phase": "end"})
    return events


def hang(job: str, *, t0: float, ranks: int = 4, steps: int = 8, stuck_rank: int = 3, tail: float = 4.0) -> list[dict]:
    """``steps`` healthy 1 s steps with heartbeats; then ``stuck_rank`` goes silent and the others, waiting for it
    in the next collective, only heartbeat for ``tail`` seconds: the capture ends inside the hang."""
    events: list[dict] = []
    for step in range(steps):
        for rank in range(ranks):
            ts = t0 + step + 0.9 + _noise(rank, step)
            events.append({"v": 1, "kind": "step", "job": job, "rank": rank, "step": step, "ts": round(ts, 6),
                           "step_time": round(0.9 + _noise(rank, step), 6), "node": f"node-{rank:03d}"})
            events.append({"v": 1, "kind": "heartbeat", "job": job, "rank": rank, "step": step + 1,
                           "ts": round(ts + 0.05, 6), "node": f"node-{rank:03d}"})
    t = t0 + steps
    while t < t0 + steps + tail:
        t += 1.0
        for rank in range(ranks):
            if rank != stuck_rank:
                events.append({"v": 1, "kind": "heartbeat", "job": job, "rank": rank, "step": steps,
                               "ts": round(t, 6), "node": f"node-{rank:03d}"})
    return events


def write(path: Path, events: list[dict]) -> Path:
    with open(path, "wb") as f:
        for event in events:
            f.write(orjson.dumps(event) + b"\n")
    return path


def write_files(folder: Path, files: dict[str, list[bytes]]) -> list[str]:
    """One recording per name (e.g. per rank or node: ``folder/NAME.jsonl``, its lines as given), in name order."""
    paths = []
    for name, lines in sorted(files.items()):
        path = folder / f"{name}.jsonl"
        path.write_bytes(b"\n".join(lines) + b"\n")
        paths.append(str(path))
    return paths
