"""Simulated node telemetry alongside a simulated job, with GPU and link fault injection.

:class:`TelemetrySimulator` wraps :class:`~stepwatch.sim.simulator.ClusterSimulator`:
it yields the job's batches unchanged and, every ``interval`` seconds of simulated time,
one batch with a ``gpu`` event per GPU and a ``link`` event per InfiniBand port of every
node (plus a ``topology`` event per node at the start, and ``xid`` events when a fault
raises one), with the values a healthy H100 / NDR node reports and the raw cumulative
counters the node agent would send. A :class:`TelemetryFault` changes the telemetry of one
rank's GPU or of the NIC nearest to it from a given step, and also slows that rank down
(a :class:`StragglerFault` of ``factor``), so the whole chain can be driven: telemetry
spike -> slow rank -> straggler alert with the spike as its suspected cause.
"""

from __future__ import annotations

import dataclasses
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np

from .simulator import ClusterSimulator, CommSlowdown, SimulationSpec, StragglerFault

#: thermal / power: throttling with a clock drop; ecc: a double-bit error (and Xid 48); xid: an
#: Xid (``xid``, default 74, NVLink error); nvlink: NVLink replay/recovery errors, then the link
#: goes down; ib_errors: symbol errors, link error recoveries and transmit wait on the rank's
#: NIC; congestion: transmit wait and CNPs up, bandwidth down; link_down: the port goes down;
#: nvlink_errors: CRC and replay errors on one NVLink that stays up; rate_down: the port trains
#: down to half its rate (400 -> 200 Gb/s) without a single error.
FAULT_KINDS = ("thermal", "power", "ecc", "xid", "nvlink", "nvlink_errors", "ib_errors", "congestion", "link_down",
               "rate_down")
GPU_FAULTS = ("thermal", "power", "ecc", "xid", "nvlink", "nvlink_errors")
LINK_FAULTS = ("ib_errors", "congestion", "link_down", "rate_down")

MIB = 1 << 20
SM_CLOCK_MAX = 1980.0  # H100 SXM5 max SM clock, MHz
MEM_TOTAL = 81559 * MIB  # H100 80GB as NVML reports it
PORT_RATE = 400.0  # NDR, 4X


@dataclass(frozen=True, kw_only=True)
class TelemetryFault:
    """A GPU or link fault on ``rank``'s GPU (or the NIC nearest to it) from ``start_step`` to ``end_step``."""

    kind: str
    rank: int
    start_step: int
    #: How much slower the affected rank computes while the fault lasts (1.0: not at all).
    factor: float = 1.3
    end_step: int | None = None
    xid: int = 74
    #: How much longer every collective's transfer takes for **all** ranks while the fault lasts (a ring
    #: runs at its slowest link): 1.0 none. Needs the job's collective events to show.
    comm_factor: float = 1.0

    def __post_init__(self) -> None:
        if self.kind not in FAULT_KINDS:
            raise ValueError(f"fault kind {self.kind!r} is not one of {FAULT_KINDS}")
        if self.factor <= 0:
            raise ValueError("fault factor must be positive")

    def active(self, step: int) -> bool:
        return step >= self.start_step and (self.end_step is None or step < self.end_step)


@dataclass(frozen=True, kw_only=True)
class TelemetrySpec:
    #: Simulated seconds between two samples of every node.
    interval: float = 1.0
    nics_per_node: int = 2
    nvlinks_per_gpu: int = 4
    faults: tuple[TelemetryFault, ...] = field(default_factory=tuple)
    seed: int = 1
    #: The switch every NIC of the job's nodes is cabled to, named in the topology events (what the agent
    #: reads from ibnetdiscover, LLDP or a map; producers/port_neighbors.py); None: not named.
    switch: str | None = None


def split_batch(batch: list[dict]) -> tuple[list[dict], dict[str, list[dict]]]:
    """Split a mixed batch into the job's events and node telemetry by node (telemetry is keyed by node)."""
    job_events: list[dict] = []
    by_node: dict[str, list[dict]] = {}
    for event in batch:
        if event.get("kind") in ("gpu", "xid", "link", "topology", "host"):
            by_node.setdefault(event["node"], []).append(event)
        else:
            job_events.append(event)
    return job_events, by_node


class TelemetrySimulator:
    """A :class:`ClusterSimulator` whose nodes also report GPU and link telemetry."""

    def __init__(self, spec: SimulationSpec, telemetry: TelemetrySpec | None = None) -> None:
        telemetry = telemetry or TelemetrySpec()
        for fault in telemetry.faults:
            if not 0 <= fault.rank < spec.ranks:
                raise ValueError(f"fault rank {fault.rank} is outside 0..{spec.ranks - 1}")
        slow = tuple(StragglerFault(rank=f.rank, start_step=f.start_step, factor=f.factor, end_step=f.end_step)
                     for f in telemetry.faults if f.factor != 1.0)
        comm = tuple(CommSlowdown(start_step=f.start_step, factor=f.comm_factor, end_step=f.end_step)
                     for f in telemetry.faults if f.comm_factor != 1.0)
        self.spec = dataclasses.replace(spec, stragglers=tuple(spec.stragglers) + slow,
                                        effects=tuple(spec.effects) + comm)
        self.telemetry = telemetry
        self.cluster = ClusterSimulator(self.spec)
        self._rng = np.random.default_rng(telemetry.seed)
        rpn = spec.ranks_per_node
        self.nodes = sorted({spec.node_of(r) for r in range(spec.ranks)})
        self.gpus_per_node = rpn
        self.nics = max(1, min(telemetry.nics_per_node, rpn))
        self._state: dict[tuple, float] = {}  # cumulative counters
        self._onset: dict[int, float] = {}  # fault index -> sim time it began
        self._step = spec.first_step - 1

    def nic_of_gpu(self, gpu: int) -> str:
        return f"mlx5_{gpu * self.nics // self.gpus_per_node}"

    def fault_target(self, fault: TelemetryFault) -> tuple[str, int, str]:
        """(node, gpu, nic) a fault lands on."""
        gpu = fault.rank % self.spec.ranks_per_node
        return self.spec.node_of(fault.rank), gpu, self.nic_of_gpu(gpu)

    # -- output ---------------------------------------------------------------------------

    def steps(self) -> Iterator[tuple[float, list[dict]]]:
        """The job's batches and, in time order between them, one telemetry batch per interval."""
        interval = self.telemetry.interval
        t_next = self.spec.start_time
        yield t_next, [self._topology(node, t_next) for node in self.nodes]
        for t, batch in self.cluster.steps():
            while t_next <= t:
                yield t_next, self.sample(t_next)
                t_next = round(t_next + interval, 6)
            for event in batch:
                if event.get("kind") == "step" and event["step"] > self._step:
                    self._step = event["step"]
            yield t, batch
        yield t_next, self.sample(t_next)

    def events(self) -> Iterator[dict]:
        for _, batch in self.steps():
            yield from batch

    def _topology(self, node: str, ts: float) -> dict:
        return {"v": 1, "kind": "topology", "node": node, "ts": round(ts, 6),
                "gpus": [{"gpu": g, "pci_bus_id": _gpu_bus(g), "nics": [self.nic_of_gpu(g)]}
                         for g in range(self.gpus_per_node)],
                "nics": [{"device": f"mlx5_{i}", "pci_bus_id": _nic_bus(i), "ports": [1],
                          **({"switch": self.telemetry.switch} if self.telemetry.switch else {})}
                         for i in range(self.nics)]}

    def _active_faults(self, ts: float) -> list[tuple[int, TelemetryFault]]:
        # The step in progress is the one after the last completed.
        out = []
        for i, fault in enumerate(self.telemetry.faults):
            if fault.active(self._step + 1):
                self._onset.setdefault(i, ts)
                out.append((i, fault))
            else:
                self._onset.pop(i, None)
        return out

    def sample(self, ts: float) -> list[dict]:
        """One telemetry sample of every node at ``ts``."""
        faults = self._active_faults(ts)
        out: list[dict] = []
        for node in self.nodes:
            on_node = [(i, f) for i, f in faults if self.fault_target(f)[0] == node]
            for gpu in range(self.gpus_per_node):
                out.extend(self._gpu(node, gpu, ts, [(i, f) for i, f in on_node
                                                     if f.kind in GPU_FAULTS and self.fault_target(f)[1] == gpu]))
            for nic in range(self.nics):
                dev = f"mlx5_{nic}"
                out.append(self._link(node, dev, ts, [f for _, f in on_node
                                                      if f.kind in LINK_FAULTS and self.fault_target(f)[2] == dev]))
        return out

    def _count(self, key: tuple, add: float) -> int:
        value = self._state.get(key, 0.0) + max(add, 0.0)
        self._state[key] = value
        return int(value)

    def _gpu(self, node: str, gpu: int, ts: float, faults: list[tuple[int, TelemetryFault]]) -> list[dict]:
        rng, dt = self._rng, self.telemetry.interval
        kinds = {f.kind for _, f in faults}
        base_temp = 60.0 + 3.0 * ((gpu * 7) % 4)
        event = {
            "v": 1, "kind": "gpu", "node": node, "ts": round(ts, 6), "gpu": gpu,
            "uuid": f"GPU-{zlib.crc32(node.encode()):08x}-5e1f-4b1a-9c3d-{gpu:012x}",
            "pci_bus_id": _gpu_bus(gpu),
            "util": float(min(100, round(rng.normal(98, 1.0)))), "mem_util": float(round(rng.normal(45, 5))),
            "mem_used": 71_203 * MIB, "mem_total": MEM_TOTAL,
            "temp": float(round(base_temp + rng.normal(0, 1.0))),
            "power": round(float(rng.normal(640, 25)), 3), "power_limit": 700.0,
            "sm_clock": SM_CLOCK_MAX, "sm_clock_max": SM_CLOCK_MAX, "throttle": 0,
            "ecc_sbe": self._count((node, gpu, "sbe"), 0), "ecc_dbe": self._count((node, gpu, "dbe"), 0),
            "pcie_gen": 5, "pcie_gen_max": 5, "pcie_width": 16, "pcie_width_max": 16,
        }
        if rng.random() < 0.05:
            event["throttle"] = 0x4  # brief SW power cap at full clocks: normal under load
        if "thermal" in kinds:
            event.update(temp=float(round(89 + rng.normal(0, 1.0))), throttle=0x20 | 0x40,
                         sm_clock=float(1095 + 15 * int(rng.integers(-2, 3))), power=round(float(rng.normal(420, 15)), 3))
        if "power" in kinds:
            event.update(throttle=0x4 | 0x80, sm_clock=1335.0, power=700.0)
        extra: list[dict] = []
        for i, fault in faults:
            fresh = self._onset.get(i) == ts
            if fault.kind == "ecc":
                event["ecc_sbe"] = self._count((node, gpu, "sbe"), float(rng.integers(0, 4)))
                if fresh:
                    event["ecc_dbe"] = self._count((node, gpu, "dbe"), 1)
                    extra.append(_xid(node, gpu, ts, 48, "DBE (double bit error) ECC error"))
            elif fault.kind == "xid" and fresh:
                extra.append(_xid(node, gpu, ts, fault.xid, f"Xid {fault.xid} (simulated)"))
        links = []
        nvlink_fault = next(((i, f) for i, f in faults if f.kind == "nvlink"), None)
        erroring = any(f.kind == "nvlink_errors" for _, f in faults)
        for n in range(self.telemetry.nvlinks_per_gpu):
            up = True
            replay = recovery = crc = 0.0
            if erroring and n == 0:  # a marginal NVLink: CRC errors and replays, still up
                crc, replay = float(rng.integers(20, 200)), float(rng.integers(1, 20))
            if nvlink_fault is not None and n == 0:
                replay, recovery = float(rng.integers(5, 40)), float(rng.integers(0, 2))
                up = ts - self._onset[nvlink_fault[0]] < 5.0  # errors first, then the link drops
            busy = 20e9 * dt if up else 0.0
            links.append({"link": n, "up": up,
                          "tx_bytes": self._count((node, gpu, n, "tx"), busy * rng.uniform(0.95, 1.05)),
                          "rx_bytes": self._count((node, gpu, n, "rx"), busy * rng.uniform(0.95, 1.05)),
                          "crc_errors": self._count((node, gpu, n, "crc"), crc),
                          "replay_errors": self._count((node, gpu, n, "replay"), replay),
                          "recovery_errors": self._count((node, gpu, n, "recovery"), recovery)})
        if links:
            event["nvlinks"] = links
        return [event] + extra

    def _link(self, node: str, dev: str, ts: float, faults: list[TelemetryFault]) -> dict:
        rng, dt = self._rng, self.telemetry.interval
        kinds = {f.kind for f in faults}
        down = "link_down" in kinds
        bw = 0.0 if down else 24e9 * dt * (0.6 if "congestion" in kinds else 1.0) * rng.uniform(0.95, 1.05)
        if "rate_down" in kinds:
            bw *= 0.5
        wait = 2.0e5 * dt * rng.uniform(0.8, 1.2)
        if "ib_errors" in kinds:
            wait *= 8
        if "congestion" in kinds:
            wait *= 12
        key = (node, dev)
        c = {
            "port_xmit_data": self._count(key + ("xmit_data",), bw / 4),  # 4-byte words
            "port_rcv_data": self._count(key + ("rcv_data",), bw / 4),
            "port_xmit_packets": self._count(key + ("xmit_packets",), bw / 4096),
            "port_rcv_packets": self._count(key + ("rcv_packets",), bw / 4096),
            "unicast_xmit_packets": self._count(key + ("uxmit",), bw / 4096),
            "unicast_rcv_packets": self._count(key + ("urcv",), bw / 4096),
            "port_xmit_wait": self._count(key + ("xmit_wait",), 0 if down else wait),
            "symbol_error": self._count(key + ("symbol_error",),
                                        float(rng.integers(20, 80)) if "ib_errors" in kinds else 0),
            "link_error_recovery": self._count(key + ("ler",), 1.0 if "ib_errors" in kinds and rng.random() < 0.1
                                               else 0),
            "link_downed": self._count(key + ("downed",), 1.0 if down and key + ("was_down",) not in self._state
                                       else 0),
            "port_rcv_errors": self._count(key + ("rcv_errors",), float(rng.integers(0, 5)) if "ib_errors" in kinds
                                           else 0),
            "port_rcv_remote_physical_errors": 0, "port_rcv_switch_relay_errors": 0, "port_xmit_discards": 0,
            "port_xmit_constraint_errors": 0, "port_rcv_constraint_errors": 0, "local_link_integrity_errors": 0,
            "excessive_buffer_overrun_errors": 0, "VL15_dropped": 0,
            "out_of_sequence": 0, "local_ack_timeout_err": 0, "packet_seq_err": 0, "duplicate_request": 0,
            "np_cnp_sent": self._count(key + ("cnp",), 5000 * dt * rng.uniform(0.8, 1.2) if "congestion" in kinds
                                       else 0),
            "rp_cnp_handled": self._count(key + ("cnp_handled",), 0),
            "np_ecn_marked_roce_packets": self._count(key + ("ecn",), 0),
        }
        if down:
            self._state[key + ("was_down",)] = 1.0
        else:
            self._state.pop(key + ("was_down",), None)
        return {"v": 1, "kind": "link", "node": node, "ts": round(ts, 6), "device": dev, "port": 1,
                "state": "DOWN" if down else "ACTIVE", "phys_state": "Polling" if down else "LinkUp",
                "rate": PORT_RATE / 2 if "rate_down" in kinds else PORT_RATE, "link_layer": "InfiniBand",
                "counters": c}


def _xid(node: str, gpu: int, ts: float, xid: int, message: str) -> dict:
    return {"v": 1, "kind": "xid", "node": node, "ts": round(ts, 6), "gpu": gpu, "xid": xid, "message": message}


def _gpu_bus(gpu: int) -> str:
    return f"00000000:{[0x18, 0x2a, 0x3a, 0x5d, 0x9a, 0xab, 0xba, 0xdb][gpu % 8]:02X}:00.0"


def _nic_bus(nic: int) -> str:
    return f"0000:{[0x1a, 0x3c, 0x9c, 0xbc][nic % 4]:02x}:00.0"
