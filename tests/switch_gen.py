"""A fleet recording of a leaf switch fault, built on tests/fabric_gen.py (not the project's simulator).

``jobs`` synchronous jobs of ``nodes_per_job`` nodes each, side by side on distinct nodes. The
first ``faulty_jobs`` jobs' nodes (``leaf`` of them, e.g. 16) hang under one leaf switch that
degrades at ``onset``: from then on **every** InfiniBand port of those nodes logs symbol errors
and link error recoveries and 5x transmit wait, and those jobs' collectives run ``slow`` times
slower (fabric_gen's ``fabric`` fault for the collectives and transmit wait; the error counters
are added here, cumulative, on top of the generator's). The other jobs run healthy on nodes
under another switch. Each node's agent also sends a ``topology`` event naming, per NIC, the
switch at the other end of its cable (what ``ibnetdiscover`` or a topology file gives). With
``dump=True`` those events are what the agent's own code (producers/port_neighbors.py) makes of
an ``ibnetdiscover`` dump of the fleet (:func:`ibnetdiscover_dump`, written in the format
rdma-core's ibnetdiscover prints), each node's HCAs found by their NodeDescription.

``events()`` yields ``(true_time, Event)`` of all jobs merged in true-time order.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from stepwatch.models.wire.events import StepEvent
from stepwatch.models.wire.telemetry_events import LinkEvent, TopologyEvent
from stepwatch.producers.port_neighbors import LocalPort, Source, Topology, nic_entries, parse_topology

from fabric_gen import PORTS, T0, Job
from fabric_gen import events as job_events


@dataclass
class FleetJob(Job):
    """A fabric_gen job whose nodes are numbered from ``first_node`` (jobs share no node)."""

    first_node: int = 0

    def node(self, i: int) -> str:
        return f"n{self.first_node + i:03d}"


@dataclass
class Fleet:
    jobs: int = 4
    nodes_per_job: int = 8
    per_node: int = 4
    faulty_jobs: int = 2  # the jobs under the failing leaf switch
    steps: int = 110
    onset: int = 60
    slow: float = 2.0
    seed: int = 0
    topology: bool = True
    dump: bool = False  # topology events from an ibnetdiscover dump through producers/port_neighbors.py

    def job(self, j: int) -> FleetJob:
        faulty = j < self.faulty_jobs
        return FleetJob(name=f"job{j}", nodes=self.nodes_per_job, per_node=self.per_node, steps=self.steps,
                        seed=self.seed * 31 + j, fault="fabric" if faulty else None, onset=self.onset,
                        slow=self.slow, first_node=j * self.nodes_per_job, t0=T0 + 0.37 * j)

    def switch_of(self, j: int) -> str:
        return "leaf-01" if j < self.faulty_jobs else "leaf-02"

    @property
    def faulty_nodes(self) -> tuple[str, ...]:
        return tuple(self.job(j).node(i) for j in range(self.faulty_jobs) for i in range(self.nodes_per_job))

    def cabling(self) -> dict[str, list[tuple[str, str, int]]]:
        """switch -> [(node, device, switch port)], ports numbered from 1 in node order."""
        out: dict[str, list[tuple[str, str, int]]] = {}
        for j in range(self.jobs):
            cables = out.setdefault(self.switch_of(j), [])
            for i in range(self.nodes_per_job):
                for dev in PORTS:
                    cables.append((self.job(j).node(i), dev, len(cables) + 1))
        return out


def _guid(kind: int, a: int, b: int = 0) -> str:
    return f"b83fd203{kind:02x}{a:03x}{b:03x}"


def ibnetdiscover_dump(fleet: Fleet) -> str:
    """The fleet's fabric as ``ibnetdiscover`` prints it (rdma-core infiniband-diags/ibnetdiscover.c: a block per
    switch, ``out_switch`` + ``out_switch_port``, then a block per CA, ``out_ca`` + ``out_ca_port``), one HCA per
    port name of each node, its NodeDescription ``"<node> <device>"`` (rdma-ndd's default)."""
    lines = ["#", "# Topology file: generated on Tue Dec  1 20:00:00 2026", "#",
             "# Initiated from node b83fd20300000001 port b83fd20300000001"]
    cabling = fleet.cabling()
    switch_guid = {sw: _guid(1, s) for s, sw in enumerate(sorted(cabling))}
    ca_guid = {(node, dev): _guid(2, int(node[1:]), d) for cables in cabling.values() for node, dev, _ in cables
               for d in [PORTS.index(dev)]}
    ca_link = {}
    for sw, cables in sorted(cabling.items()):
        g = switch_guid[sw]
        lines += ["", "vendid=0x2c9", "devid=0xd2f0", f"sysimgguid=0x{g}", f"switchguid=0x{g}({g})",
                  f'Switch\t64 "S-{g}"\t\t# "{sw}" enhanced port 0 lid {10 + len(lines) % 7} lmc 0']
        for node, dev, port in cables:
            cg = ca_guid[(node, dev)]
            lines.append(f'[{port}]\t"H-{cg}"[1]({cg}) \t\t# "{node} {dev}" lid {100 + port} 4xNDR')
            ca_link[(node, dev)] = (sw, g, port)
    for (node, dev), cg in sorted(ca_guid.items()):
        sw, g, port = ca_link[(node, dev)]
        lines += ["", "vendid=0x2c9", "devid=0x1021", f"sysimgguid=0x{cg}", f"caguid=0x{cg}",
                  f'Ca\t1 "H-{cg}"\t\t# "{node} {dev}"',
                  f'[1]({cg}) \t"S-{g}"[{port}]\t\t# lid {100 + port} lmc 0 "{sw}" lid 12 4xNDR']
    return "\n".join(lines) + "\n"


def dump_topology_event(topology: Topology, node: str, ts: float) -> TopologyEvent:
    """A node's topology event as the agent builds it from the dump (producers/agent.py, topology_event)."""
    neighbors = topology.neighbors(node, [LocalPort(d, 1, node_desc=f"{node} {d}") for d in PORTS])
    return TopologyEvent(node=node, ts=ts, nics=tuple({"device": d, "ports": [1], **nic_entries(neighbors, d, [1])}
                                                      for d in PORTS))


def events(fleet: Fleet) -> list[tuple[float, object]]:
    out: list[tuple[float, object]] = []
    rng = np.random.default_rng(fleet.seed + 1000)
    dump = parse_topology(ibnetdiscover_dump(fleet)) if fleet.topology and fleet.dump else None
    assert dump is None or dump.source is Source.IBNETDISCOVER
    for j in range(fleet.jobs):
        job = fleet.job(j)
        evs = job_events(job)
        onset_t = next((t for t, ev in evs if isinstance(ev, StepEvent) and ev.step == job.onset), None)
        if dump is not None:
            out.extend((job.t0, dump_topology_event(dump, job.node(i), job.t0)) for i in range(job.nodes))
        elif fleet.topology:
            for i in range(job.nodes):
                out.append((job.t0, TopologyEvent(
                    node=job.node(i), ts=job.t0,
                    nics=tuple({"device": d, "ports": [1], "switch": fleet.switch_of(j)} for d in PORTS))))
        if job.fault is not None and onset_t is not None:
            evs = _with_link_errors(evs, onset_t, rng)
        out.extend(evs)
    out.sort(key=lambda x: x[0])
    return out


def _with_link_errors(evs: list[tuple[float, object]], onset_t: float, rng) -> list[tuple[float, object]]:
    """Every port of the job's nodes logs symbol errors (and some link error recoveries) from ``onset_t``."""
    extra: dict[tuple[str, str], dict[str, int]] = {}
    out = []
    for t, ev in evs:
        if isinstance(ev, LinkEvent) and t >= onset_t:
            add = extra.setdefault((ev.node, ev.device), {"symbol_error": 0, "link_error_recovery": 0})
            add["symbol_error"] += int(rng.integers(5, 80))
            if rng.random() < 0.3:
                add["link_error_recovery"] += 1
            counters = dict(ev.counters)
            for name, value in add.items():
                counters[name] = counters.get(name, 0) + value
            ev = dataclasses.replace(ev, counters=counters)
        out.append((t, ev))
    return out
