"""A fleet recording of a leaf switch fault, built on tests/fabric_gen.py (not the project's simulator).

``jobs`` synchronous jobs of ``nodes_per_job`` nodes each, side by side on distinct nodes. The
first ``faulty_jobs`` jobs' nodes (``leaf`` of them, e.g. 16) hang under one leaf switch that
degrades at ``onset``: from then on **every** InfiniBand port of those nodes logs symbol errors
and link error recoveries and 5x transmit wait, and those jobs' collectives run ``slow`` times
slower (fabric_gen's ``fabric`` fault for the collectives and transmit wait; the error counters
are added here, cumulative, on top of the generator's). The other jobs run healthy on nodes
under another switch. Each node's agent also sends a ``topology`` event naming, per NIC, the
switch at the other end of its cable (what ``ibnetdiscover`` or a topology file gives).

``events()`` yields ``(true_time, Event)`` of all jobs merged in true-time order.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from stepwatch.models.events import StepEvent
from stepwatch.models.telemetry_events import LinkEvent, TopologyEvent

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


def events(fleet: Fleet) -> list[tuple[float, object]]:
    out: list[tuple[float, object]] = []
    rng = np.random.default_rng(fleet.seed + 1000)
    for j in range(fleet.jobs):
        job = fleet.job(j)
        evs = job_events(job)
        onset_t = next((t for t, ev in evs if isinstance(ev, StepEvent) and ev.step == job.onset), None)
        if fleet.topology:
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
