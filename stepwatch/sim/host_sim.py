"""Simulated ``host`` events of every node of a simulated job, with host fault injection.

:class:`HostSimulator` wraps a job simulator (a :class:`~stepwatch.sim.simulator.ClusterSimulator`,
or a :class:`~stepwatch.sim.telemetry_sim.TelemetrySimulator` for GPU and link telemetry
too): it yields the job's batches and, every ``interval`` seconds of simulated time, one batch
with a ``host`` event per node, with the values a healthy 96-core training node reports
(PSI a few %, CPUs half busy with data-loader workers, an NVMe read in ~0.12 ms, no OOM
kill) and the raw cumulative counters the agent sends. A :class:`HostFault` on a node from
step ``start_step`` (to ``end_step``, exclusive) changes the node's signals and the job:

* ``io``: IO pressure ~45%, nvme0n1 reads ~9 ms, iowait up; the node's ranks wait
  ``stall_seconds`` more for data every step (a slow local disk under the data loader);
* ``cpu``: every CPU busy, PSI cpu ~70%, load far above the core count; the same data stall
  (data-loader workers starved of CPU);
* ``memory``: PSI memory ~30%, 2% of memory available, swap in use; the same data stall
  (reclaim and swapping slow the loaders);
* ``oom``: the OOM killer ends the node's first rank at ``start_step`` (a ``dead`` hang fault)
  and the node's ``oom_kills`` counter goes up by one.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np

from .simulator import ClusterSimulator, DataStall, HangFault, SimulationSpec

HOST_FAULT_KINDS = ("io", "cpu", "memory", "oom")
CPUS = 96
USER_HZ = 100
MEM_TOTAL = 2 * 1024**4  # 2 TiB
TOP32 = 2**32


@dataclass(frozen=True, kw_only=True)
class HostFault:
    """A host fault on node ``node`` (index, or a name like ``node-001``) from ``start_step`` to ``end_step``."""

    kind: str
    node: int | str
    start_step: int
    end_step: int | None = None
    #: Extra data-loader wait per step of the node's ranks (io, cpu, memory).
    stall_seconds: float = 0.4
    #: How long the others wait for an OOM-killed rank before the run stops (simulated seconds).
    oom_wait_seconds: float = 120.0

    def __post_init__(self) -> None:
        if self.kind not in HOST_FAULT_KINDS:
            raise ValueError(f"host fault kind {self.kind!r} is not one of {HOST_FAULT_KINDS}")

    def node_name(self) -> str:
        return self.node if isinstance(self.node, str) else f"node-{self.node:03d}"

    def ranks(self, spec: SimulationSpec) -> tuple[int, ...]:
        name = self.node_name()
        return tuple(r for r in range(spec.ranks) if spec.node_of(r) == name)

    def active(self, step: int) -> bool:
        return step >= self.start_step and (self.end_step is None or step < self.end_step)


def with_host_faults(spec: SimulationSpec, faults: tuple[HostFault, ...]) -> SimulationSpec:
    """``spec`` with what the faults do to the job: data stalls on the node's ranks, the OOM-killed rank."""
    effects, hangs = list(spec.effects), list(spec.hangs)
    for fault in faults:
        ranks = fault.ranks(spec)
        if not ranks:
            raise ValueError(f"host fault node {fault.node_name()} has no rank of job {spec.job}")
        if fault.kind == "oom":
            hangs.append(HangFault(rank=ranks[0], step=fault.start_step, kind="dead", duration=fault.oom_wait_seconds,
                                   recover=False))
        else:
            effects.extend(DataStall(rank=r, start_step=fault.start_step, seconds=fault.stall_seconds,
                                     end_step=fault.end_step) for r in ranks)
    heartbeat = spec.heartbeat_interval or (5.0 if any(f.kind == "oom" for f in faults) else 0.0)
    return dataclasses.replace(spec, effects=tuple(effects), hangs=tuple(hangs), heartbeat_interval=heartbeat)


class HostSimulator:
    """A job simulator whose nodes also send ``host`` events (see the module doc)."""

    def __init__(self, spec: SimulationSpec, faults: tuple[HostFault, ...] = (), *, interval: float = 1.0,
                 seed: int = 3, inner: Callable[[SimulationSpec], object] = ClusterSimulator) -> None:
        # A node given by index is the job's N-th node, whatever its names (``SimulationSpec.node_prefix``).
        self.faults = tuple(dataclasses.replace(f, node=spec.node_of(f.node * spec.ranks_per_node))
                            if isinstance(f.node, int) else f for f in faults)
        self.spec = with_host_faults(spec, self.faults)
        self.inner = inner(self.spec)
        self.interval = interval
        self._rng = np.random.default_rng(seed)
        self.nodes = sorted({self.spec.node_of(r) for r in range(self.spec.ranks)})
        self._step = self.spec.first_step - 1
        self._oom_done: set[int] = set()
        # Cumulative counters per node, from plausible values since boot.
        self._cpu = {n: {"user": 40_000_000, "nice": 1_000, "system": 6_000_000, "idle": 300_000_000,
                         "iowait": 90_000, "irq": 0, "softirq": 70_000, "steal": 0} for n in self.nodes}
        self._disk = {n: {"reads": 90_000_000, "read_ms": 11_000_000, "writes": 50_000_000, "write_ms": 20_000_000,
                          "io_ms": 30_000_000} for n in self.nodes}
        self._oom = {n: 0 for n in self.nodes}

    def steps(self) -> Iterator[tuple[float, list[dict]]]:
        t_next = self.spec.start_time
        for t, batch in self.inner.steps():
            while t_next <= t:
                yield t_next, self.sample(t_next)
                t_next = round(t_next + self.interval, 6)
            for event in batch:
                if event.get("kind") == "step" and event["step"] > self._step:
                    self._step = event["step"]
            yield t, batch
        yield t_next, self.sample(t_next)

    def events(self) -> Iterator[dict]:
        for _, batch in self.steps():
            yield from batch

    def sample(self, ts: float) -> list[dict]:
        """One ``host`` event per node at ``ts``."""
        step = self._step + 1  # the step in progress
        kinds: dict[str, set[str]] = {}
        for i, fault in enumerate(self.faults):
            if fault.active(step):
                kinds.setdefault(fault.node_name(), set()).add(fault.kind)
                if fault.kind == "oom" and i not in self._oom_done:
                    self._oom_done.add(i)
                    self._oom[fault.node_name()] += 1
        return [self._host(node, ts, kinds.get(node, set())) for node in self.nodes]

    def _host(self, node: str, ts: float, kinds: set[str]) -> dict:
        rng, dt = self._rng, self.interval
        busy, iowait = rng.uniform(0.35, 0.6), rng.uniform(0.0, 0.01)
        io_some, cpu_some, mem_some = rng.uniform(0.0, 3.0), rng.uniform(0.0, 8.0), rng.uniform(0.0, 0.5)
        reads, per_read = rng.normal(2000, 100) * dt, rng.uniform(0.10, 0.14)
        available, swap, load = rng.uniform(0.7, 0.75), 0, None
        if "io" in kinds:
            io_some, iowait = rng.uniform(38.0, 55.0), rng.uniform(0.15, 0.25)
            reads, per_read = rng.normal(400, 30) * dt, rng.uniform(7.0, 11.0)
        if "cpu" in kinds:
            busy, iowait, cpu_some = rng.uniform(0.993, 0.999), 0.0, rng.uniform(60.0, 80.0)
            load = CPUS * 1.9 + rng.normal(0, 3)
        if "memory" in kinds:
            mem_some, available, swap = rng.uniform(25.0, 40.0), rng.uniform(0.015, 0.025), 64 * 2**30
        jiffies = CPUS * USER_HZ * dt
        c = self._cpu[node]
        c["user"] += int(jiffies * busy * 0.85)
        c["system"] += int(jiffies * busy * 0.15)
        c["iowait"] += int(jiffies * iowait)
        c["idle"] += int(jiffies * max(1.0 - busy - iowait, 0.0))
        c["softirq"] += int(rng.integers(0, 20))
        d = self._disk[node]
        d["reads"] += int(max(reads, 0))
        d["read_ms"] = (d["read_ms"] + int(max(reads, 0) * per_read)) % TOP32  # 32-bit on some kernels
        d["writes"] += int(rng.normal(300, 20) * dt)
        d["write_ms"] += int(60 * dt)
        d["io_ms"] += int((400 + (900 if "io" in kinds else 0)) * dt)
        return {
            "v": 1, "kind": "host", "node": node, "ts": round(ts, 6),
            "psi": {"cpu": {"some_avg10": round(cpu_some, 2)},
                    "io": {"some_avg10": round(io_some, 2), "full_avg10": round(io_some * 0.7, 2)},
                    "memory": {"some_avg10": round(mem_some, 2), "full_avg10": round(mem_some * 0.3, 2)}},
            "cpu": dict(c), "load1": round(load if load is not None else busy * CPUS, 2),
            "mem_total": MEM_TOTAL, "mem_available": int(MEM_TOTAL * available), "swap_used": swap,
            "oom_kills": self._oom[node], "disks": [{"device": "nvme0n1", **d}],
        }
