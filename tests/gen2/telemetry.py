"""Node telemetry for a generated job's hosts, as the node agent sends it (docs/events.md, "Node telemetry").

One ``gpu`` event per GPU, one ``link`` event per InfiniBand port and one ``host`` event per node each
``interval`` seconds, stamped on the node's clock; counters are raw cumulative values (NVML, sysfs), never
deltas. A healthy fleet's counters grow as busy hardware's do (data words, transmit wait, corrected ECC now
and then); a :class:`Throttle` makes one GPU hot and clocked down (NVML HW thermal slowdown, 0x40) from the
moment a rank's slowdown begins. With ``switch`` each node also sends, first, a ``topology`` event naming
per port the switch at the other end of its cable and the switch's port (``nics[].neighbors``, as the agent
reads them from an ``ibnetdiscover`` dump): ``(name, first port)``, the job's ports cabled to consecutive
ports of that switch from its ``first port`` on.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from .plan import Plan
from .wire import Sent

NICS = 4  # mlx5_0..3, one port each; GPU g is nearest to NIC g // 2
MEM_TOTAL = 85_520_809_984
HOST_MEM = 2_164_360_331_264
SM_CLOCK_MAX = 1980.0
HW_THERMAL = 0x40


@dataclass(frozen=True)
class Throttle:
    """Rank ``rank``'s GPU runs hot and at ``clock`` MHz from the start of step ``step``."""

    rank: int
    step: int
    clock: float = 1150.0
    temp: float = 91.0


@dataclass(frozen=True)
class LinkFault:
    """Every IB port of the job's nodes shows errors and transmit wait from the start of step ``step`` (a leaf
    switch they share degrades)."""

    step: int
    wait_factor: float = 2.4


def _sender(node_index: int) -> int:
    return 100_000 + node_index  # one agent per node: its own batches


def play(plan: Plan, job_sent: list[Sent], *, interval: float = 1.0, throttle: Throttle | None = None,
         link_fault: LinkFault | None = None, switch: tuple[str, int] | None = None) -> list[Sent]:
    """Telemetry of the job's nodes for the span of ``job_sent`` (the job's own events)."""
    rng = random.Random(plan.seed + 1)
    nodes: dict[str, tuple[int, float]] = {}  # node -> (index, clock offset), from what the ranks wrote
    hot_from = None
    faulty_from = None
    for s in job_sent:
        e = s.event
        if "node" in e and e["node"] not in nodes:
            nodes[e["node"]] = (len(nodes), e["ts"] - s.at)
        if throttle is not None and hot_from is None and e["kind"] == "step" and e["rank"] == throttle.rank \
                and e["step"] == throttle.step - 1:
            hot_from = s.at  # the slow step starts when the one before it ends
        if link_fault is not None and faulty_from is None and e["kind"] == "step" and e["step"] == link_fault.step - 1:
            faulty_from = s.at
    hot_node = plan.node_of(throttle.rank) if throttle is not None else None
    hot_gpu = throttle.rank % plan.per_node if throttle is not None else None
    begin, end = min(s.at for s in job_sent), max(s.at for s in job_sent)
    counters = {(node, nic): {"port_xmit_data": rng.randrange(10**12), "port_rcv_data": rng.randrange(10**12),
                              "port_xmit_wait": rng.randrange(10**8), "symbol_error": 0, "link_downed": 0,
                              "link_error_recovery": 0, "port_rcv_errors": 0}
                for node in nodes for nic in range(NICS)}
    ecc = {(node, g): rng.randrange(50) for node in nodes for g in range(plan.per_node)}
    jiffies = {node: {"user": 4 * 10**7, "nice": 1000, "system": 6 * 10**6, "idle": 3 * 10**8, "iowait": 9 * 10**5,
                      "irq": 0, "softirq": 70_000, "steal": 0} for node in nodes}
    out: list[Sent] = []
    if switch is not None:
        for node, (index, offset) in nodes.items():
            out.append(Sent(begin, _sender(index), {
                "v": 1, "kind": "topology", "node": node, "ts": round(begin + offset, 6),
                "nics": [{"device": f"mlx5_{nic}", "ports": [1],
                          "neighbors": [{"port": 1, "switch": switch[0],
                                         "switch_port": str(switch[1] + index * NICS + nic),
                                         "source": "ibnetdiscover"}]} for nic in range(NICS)]}))
    t = begin
    while t <= end:
        for node, (index, offset) in nodes.items():
            at = t + rng.uniform(0.0, 0.05)
            ts = round(at + offset, 6)
            for g in range(plan.per_node):
                hot = node == hot_node and g == hot_gpu and hot_from is not None and at >= hot_from
                if rng.random() < 0.002:
                    ecc[(node, g)] += 1  # a corrected error now and then: normal
                out.append(Sent(at, _sender(index), {
                    "v": 1, "kind": "gpu", "node": node, "ts": ts, "gpu": g, "uuid": f"GPU-{index:04x}-{g:04x}",
                    "util": round(rng.uniform(96.0, 100.0), 1), "mem_util": round(rng.uniform(30.0, 45.0), 1),
                    "mem_used": 61_000_000_000 + rng.randrange(10**9), "mem_total": MEM_TOTAL,
                    "temp": throttle.temp if hot else round(rng.uniform(62.0, 72.0), 1),
                    "power": round(rng.uniform(560.0, 640.0), 1), "power_limit": 700.0,
                    "sm_clock": throttle.clock if hot else SM_CLOCK_MAX, "sm_clock_max": SM_CLOCK_MAX,
                    "throttle": HW_THERMAL if hot else 0, "ecc_sbe": ecc[(node, g)], "ecc_dbe": 0,
                    "pcie_gen": 5, "pcie_gen_max": 5, "pcie_width": 16, "pcie_width_max": 16}))
            for nic in range(NICS):
                c = counters[(node, nic)]
                c["port_xmit_data"] += rng.randrange(9 * 10**9, 11 * 10**9)  # 4-byte words: ~40 GB/s
                c["port_rcv_data"] += rng.randrange(9 * 10**9, 11 * 10**9)
                faulty = faulty_from is not None and at >= faulty_from
                c["port_xmit_wait"] += int(rng.randrange(10**5, 3 * 10**5) * (link_fault.wait_factor if faulty else 1))
                if faulty:  # symbol errors and the receive errors they cause, on every port behind the switch
                    c["symbol_error"] += rng.randrange(200, 600)
                    c["port_rcv_errors"] += rng.randrange(10, 50)
                    c["link_error_recovery"] += int(rng.random() < 0.1)
                out.append(Sent(at, _sender(index), {
                    "v": 1, "kind": "link", "node": node, "ts": ts, "device": f"mlx5_{nic}", "port": 1,
                    "state": "ACTIVE", "phys_state": "LinkUp", "rate": 400.0, "link_layer": "InfiniBand",
                    "netdev": f"ibp{nic}s0", "counters": dict(c)}))
            busy = jiffies[node]
            busy["user"] += rng.randrange(3000, 3400)
            busy["system"] += rng.randrange(300, 400)
            busy["idle"] += rng.randrange(6000, 6800)
            out.append(Sent(at, _sender(index), {
                "v": 1, "kind": "host", "node": node, "ts": ts, "cpu": dict(busy),
                "load1": round(rng.uniform(30, 40), 2),
                "psi": {"cpu": {"some_avg10": round(rng.uniform(0.5, 3.0), 2)},
                        "io": {"some_avg10": round(rng.uniform(0.0, 2.0), 2), "full_avg10": 0.0},
                        "memory": {"some_avg10": 0.0, "full_avg10": 0.0}},
                "mem_total": HOST_MEM, "mem_available": HOST_MEM // 2 + rng.randrange(10**9), "swap_used": 0,
                "oom_kills": 0}))
        t += interval
    return out
