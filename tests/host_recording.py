"""A second, independent generator of recordings: a job's steps and its nodes' ``host`` events.

Written for the host-signal tests, not shared with the project simulator: 16 ranks on two
nodes (8 GPUs each), one step a second, one host sample a second per node, each node on its
own clock. Messy on purpose: data-loader hiccups, a checkpoint's IO burst on every node, a
disk read-time counter that wraps at 2**32 on one node, host samples lost and reordered.

Faults (``fault``) from step ``stall_from`` on the culprit's node:
* ``io``: the culprit's data_time stalls (+0.5 s) while its node's IO pressure and nvme0n1 read
  latency rise (a slow local disk under the data loader);
* ``cpu``: the same stall, with the node's CPUs saturated (data-loader workers starved);
* ``oom``: the culprit dies right after its last step (the kernel's OOM killer), the others
  wait in the collective sending heartbeats;
* ``shared_io``: every rank's data_time stalls with IO pressure on both nodes (shared storage);
* ``None``: healthy, with the noise only.
"""

from __future__ import annotations

import numpy as np

TOP32 = 2**32


def recording(fault: str | None = None, *, steps: int = 120, stall_from: int = 70, culprit: int = 11,
              seed: int = 5, job: str = "host-job") -> list[dict]:
    rng = np.random.default_rng(seed)
    ranks, per_node = 16, 8
    nodes = ["h-0", "h-1"]
    offset = {"h-0": 0.0, "h-1": 0.37}  # node clocks disagree
    bad_node = nodes[culprit // per_node]
    out: list[tuple[float, int, dict]] = []  # (true time, order, event)
    seq = 0

    def emit(t: float, event: dict) -> None:
        nonlocal seq
        seq += 1
        out.append((t, seq, event))

    # host counters, cumulative
    jiffies = {n: {"user": 4_000_000, "nice": 100, "system": 600_000, "idle": 30_000_000, "iowait": 9_000,
                   "irq": 0, "softirq": 7_000, "steal": 0} for n in nodes}
    disk = {n: {"reads": 9_000_000, "read_ms": 1_100_000, "writes": 5_000_000, "write_ms": 2_000_000,
                "io_ms": 3_000_000} for n in nodes}
    disk["h-1"]["read_ms"] = TOP32 - 30_000  # wraps a few minutes in
    ooms = {"h-0": 2, "h-1": 0}  # cumulative since boot: an old kill before the job
    ncpu_jiffies = 100 * 96  # 96 CPUs, USER_HZ 100

    t = 1_764_000_000.0
    dead = killed = False
    next_host = t
    for step in range(steps):
        stalled = fault is not None and step >= stall_from
        step_dur = 1.0 + (0.5 if stalled and fault in ("io", "cpu", "shared_io") else 0.0) + rng.normal(0, 0.01)
        # host samples during this step
        while next_host < t + step_dur:
            for n in nodes:
                faulty = stalled and (n == bad_node or fault == "shared_io")
                checkpoint = step in (30, 31) and n == nodes[step % 2]  # one sample of IO burst
                j = jiffies[n]
                busy = rng.uniform(0.35, 0.6)
                iow = rng.uniform(0.0, 0.01)
                if faulty and fault in ("io", "shared_io"):
                    iow = rng.uniform(0.15, 0.25)
                if faulty and fault == "cpu":
                    busy, iow = rng.uniform(0.993, 0.999), 0.0
                j["user"] += int(ncpu_jiffies * busy * 0.85)
                j["system"] += int(ncpu_jiffies * busy * 0.15)
                j["iowait"] += int(ncpu_jiffies * iow)
                j["idle"] += int(ncpu_jiffies * max(1.0 - busy - iow, 0.0))
                j["softirq"] += int(rng.integers(0, 20))
                d = disk[n]
                reads = int(rng.normal(2000, 100))
                per_read = rng.uniform(0.10, 0.14)
                if faulty and fault in ("io", "shared_io"):
                    reads, per_read = int(rng.normal(400, 30)), rng.uniform(7.0, 11.0)
                d["reads"] += reads
                d["read_ms"] = (d["read_ms"] + int(reads * per_read)) % TOP32
                d["writes"] += int(rng.normal(300, 20)) + (20_000 if checkpoint else 0)
                d["write_ms"] += 60 + (4_000 if checkpoint else 0)
                d["io_ms"] = min(d["io_ms"] + 400 + (900 if faulty else 0), 2**63)
                io_some = rng.uniform(0.0, 3.0)
                if checkpoint:
                    io_some = 35.0
                if faulty and fault in ("io", "shared_io"):
                    io_some = rng.uniform(38.0, 55.0)
                cpu_some = rng.uniform(0.0, 8.0) if not (faulty and fault == "cpu") else rng.uniform(60.0, 80.0)
                if dead and n == bad_node and not killed:
                    ooms[n] += 1  # the kill that took the culprit
                    killed = True
                event = {
                    "v": 1, "kind": "host", "node": n, "ts": round(next_host + offset[n], 6),
                    "psi": {"cpu": {"some_avg10": round(cpu_some, 2)},
                            "io": {"some_avg10": round(io_some, 2), "full_avg10": round(io_some * 0.7, 2)},
                            "memory": {"some_avg10": round(rng.uniform(0, 0.5), 2), "full_avg10": 0.0}},
                    "cpu": dict(j), "load1": round(busy * 96 + (90 if faulty and fault == "cpu" else 0), 2),
                    "mem_total": 2_113_536_000 * 1024, "mem_available": int(1.6e12 * rng.uniform(0.98, 1.0)),
                    "swap_used": 0, "oom_kills": ooms[n],
                    "disks": [{"device": "nvme0n1", **d}],
                }
                if rng.random() < 0.02:
                    continue  # lost on the way
                emit(next_host + rng.uniform(0, 0.3), event)  # delivery jitter: samples arrive out of order
            next_host += 1.0
        if dead:
            # the others wait in the collective, heartbeating every 5 s
            if step % 5 == 0:
                for r in range(ranks):
                    if r != culprit:
                        n = nodes[r // per_node]
                        emit(t, {"v": 1, "kind": "heartbeat", "job": job, "rank": r, "ts": round(t + offset[n], 6),
                                 "step": stall_from - 1, "node": n})
            t += step_dur
            continue
        for r in range(ranks):
            n = nodes[r // per_node]
            compute = rng.normal(0.80, 0.008)
            data = abs(rng.normal(0.02, 0.003))
            if rng.random() < 0.01:
                data += 0.15  # a data-loader hiccup
            if stalled and fault in ("io", "cpu") and r == culprit:
                data += 0.5
            if stalled and fault == "shared_io":
                data += 0.5
            comm = max(step_dur - compute - data, 0.01)
            emit(t + step_dur + rng.uniform(0, 0.05), {"v": 1, "kind": "step", "job": job, "rank": r, "step": step,
                                      "ts": round(t + step_dur + offset[n], 6), "step_time": round(step_dur, 6),
                                      "compute_time": round(compute, 6), "data_time": round(data, 6),
                                      "comm_time": round(comm, 6), "node": n, "gpu": r % per_node,
                                      "world_size": ranks})
        if fault == "oom" and step == stall_from - 1:
            dead = True  # the culprit is killed just after this step; its node's counter says so next sample
        t += step_dur
    out.sort(key=lambda x: (x[0], x[1]))
    return [e for _, _, e in out]
