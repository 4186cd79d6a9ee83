"""A hand-written fleet recording generator for the on-call tests (not the project simulator).

Several jobs on a small cluster, each rank on a (node, GPU); step times with seeded noise,
events of a step shuffled across ranks, an occasional lost event and a checkpoint pause;
problems placed by hand: a slow rank on a node from some step, a crash and restart from a
checkpoint (silence, then the step counter goes back), an Xid on a node. Events come out in
time order, one JSON object per event (the wire format of docs/events.md).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field


@dataclass
class Job:
    name: str
    nodes: list[str]  # one node per 4 ranks, in order
    steps: int = 120
    step_time: float = 1.0
    start: float = 1_764_000_000.0
    slow_node: str | None = None  # the rank on GPU 0 of this node is slow ...
    slow_from: int = 40  # ... from this step ...
    slow_factor: float = 1.8
    slow_until: int | None = None  # ... up to (not including) this step, then again from slow_again
    slow_again: int | None = None
    crash_at: int | None = None  # restart: the last step reached before the crash ...
    resume_at: int = 0  # ... the step it resumes at (the checkpoint's next) ...
    downtime: float = 0.0  # ... after this much silence
    checkpoint_at: int | None = 60  # a 5 s checkpoint pause after this step (every rank)
    ranks_per_node: int = 4
    lost: list[tuple[int, int]] = field(default_factory=list)  # (rank, step) events lost
    end: bool = True  # the job says it ended (phase "end") after its last step

    @property
    def world(self) -> int:
        return self.ranks_per_node * len(self.nodes)

    def placement(self, rank: int) -> tuple[str, int]:
        return self.nodes[rank // self.ranks_per_node], rank % self.ranks_per_node


def job_events(job: Job, seed: int = 0) -> list[dict]:
    rng = random.Random(f"{job.name}:{seed}")
    out = []
    t = job.start
    plan = list(range(job.steps))
    if job.crash_at is not None:  # steps up to crash_at, then again from resume_at
        plan = list(range(job.crash_at + 1)) + list(range(job.resume_at, job.steps))
    previous = None
    for step in plan:
        if previous is not None and step <= previous:
            t += job.downtime  # the crash: silence, then the relaunch
        previous = step
        if job.checkpoint_at is not None and step == job.checkpoint_at + 1:
            t += 5.0
        base = job.step_time * (1 + rng.uniform(-0.01, 0.01))
        times = {}
        for rank in range(job.world):
            node, gpu = job.placement(rank)
            st = base * (1 + rng.uniform(-0.02, 0.02))
            if node == job.slow_node and gpu == 0 and step >= job.slow_from and (
                    job.slow_until is None or step < job.slow_until
                    or (job.slow_again is not None and step >= job.slow_again)):
                st *= job.slow_factor
            times[rank] = st
        t += max(times.values())
        order = list(range(job.world))
        rng.shuffle(order)
        for rank in order:
            if (rank, step) in job.lost:
                continue
            node, gpu = job.placement(rank)
            st = times[rank]
            out.append({"v": 1, "kind": "step", "job": job.name, "rank": rank, "step": step,
                        "ts": round(t + rng.uniform(0, 0.01), 6), "step_time": round(st, 6),
                        "compute_time": round(st * 0.7, 6), "comm_time": round(st * 0.2, 6),
                        "data_time": round(0.05 * job.step_time, 6), "node": node, "gpu": gpu,
                        "world_size": job.world})
    if job.end:
        out.append({"v": 1, "kind": "phase", "job": job.name, "phase": "end", "ts": round(t + 0.5, 6)})
    return out


def xid_event(node: str, gpu: int, xid: int, ts: float) -> dict:
    return {"v": 1, "kind": "xid", "node": node, "gpu": gpu, "xid": xid, "ts": ts,
            "message": f"NVRM: Xid (PCI:0000:1b:00): {xid}, pid=1234"}


def agent_reports(*jobs: Job, ts: float | None = None) -> list[dict]:
    """One ordinary GPU sample per node of ``jobs``, from its node agent, before the jobs start: only an agent
    speaks for its node (a node_suspect needs its agent to have reported; issue 44)."""
    nodes = sorted({n for j in jobs for n in j.nodes})
    at = min(j.start for j in jobs) - 60.0 if ts is None else ts
    return [{"v": 1, "kind": "gpu", "node": n, "gpu": 0, "ts": at, "temp_c": 60.0} for n in nodes]


def merge(*streams: list[dict]) -> list[dict]:
    """Events of several sources in time order (stable: a source's own order kept on ties)."""
    tagged = [(e["ts"], i, n, e) for i, s in enumerate(streams) for n, e in enumerate(s)]
    return [e for *_, e in sorted(tagged, key=lambda x: x[:3])]
