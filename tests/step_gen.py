"""A small generator of synchronous-training step recordings for the detector tests (not the project's
simulator): wire-form step events of a data-parallel job, with seeded noise, a slow rank, a job-wide
slowdown, lost and reordered events, preemptions on a loaded host, and a restart onto other nodes.

Timing model of one synchronous step: each rank computes for ``compute`` seconds (its own noise and
slow factor), then waits in the all-reduce for the slowest rank, then the transfer (``comm``) takes
the same time everywhere: ``step_time = max(compute) + comm`` on every rank, ``comm_time = step_time -
compute`` (its wait plus the transfer), as the rank monitor reports them.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field


# -- the parts every step generator here shares (tests/small_job_gen.py imports them) ----------------------


def step_event(job: str, rank: int, step: int, ts: float, step_time: float, compute: float, node: str,
               world_size: int) -> dict:
    """One rank's wire-form step event: ``comm_time`` is the rest of the synchronous step (wait + transfer)."""
    return {"v": 1, "kind": "step", "job": job, "rank": rank, "step": step, "ts": round(ts, 6),
            "step_time": round(step_time, 6), "compute_time": round(compute, 6),
            "comm_time": round(step_time - compute, 6), "node": node, "world_size": world_size}


def lost(rng: random.Random, chance: float) -> bool:
    """Whether one event is lost in transport (one draw per event, always taken: the seed's stream stays put)."""
    return rng.random() < chance


def shuffled(rng: random.Random, batch: list[dict], chance: float) -> list[dict]:
    """A step's events as delivered: shuffled with ``chance`` (one draw per step, always taken)."""
    if rng.random() < chance:
        rng.shuffle(batch)
    return batch


def in_window(step: int, start: int | None, until: int | None = None) -> bool:
    """Whether a fault that runs from ``start`` (None: never) until ``until`` (None: the end) covers ``step``."""
    return start is not None and step >= start and (until is None or step < until)


@dataclass(frozen=True)
class Restart:
    """At ``at_step`` the job dies, is down ``downtime`` s and resumes from ``resume_step`` with
    ``moves`` (rank -> new node) applied."""

    at_step: int
    resume_step: int
    downtime: float = 120.0
    moves: dict[int, str] = field(default_factory=dict)


@dataclass(frozen=True)
class SyncJob:
    job: str
    ranks: int
    steps: int
    t0: float = 1_760_000_000.0
    compute: float = 0.5
    comm: float = 0.05
    noise: float = 0.01  # relative, uniform +-
    #: A loaded host: on a ``load_p`` share of the steps the host is busy and each rank is preempted with
    #: chance ``load_hit``, its compute longer by an exponential share of mean ``load`` (one-sided, heavy-
    #: tailed; ranks hit together more often than by chance, as measured on the real 2-rank HF job on a
    #: loaded 2-core machine: each rank >1.1x on 20-35 % of steps, both on 15 %, 2.5-3x independence).
    load: float = 0.0
    load_p: float = 0.0
    load_hit: float = 0.75
    slow_rank: int | None = None
    slow_factor: float = 1.4
    slow_from: int = 0
    slow_until: int | None = None
    jobwide_factor: float = 1.0  # every rank this much slower ...
    jobwide_from: int | None = None  # ... from this step
    ranks_per_node: int = 8
    lose: float = 0.0  # chance that one event is lost
    reorder: float = 0.1  # chance that a step's events arrive shuffled
    restart: Restart | None = None
    heartbeats: bool = False
    seed: int = 11

    def node(self, rank: int, moved: dict[int, str]) -> str:
        return moved.get(rank, f"node-{rank // self.ranks_per_node:02d}")

    def events(self) -> list[dict]:
        rng = random.Random(self.seed)
        out: list[dict] = []
        t = self.t0
        moved: dict[int, str] = {}
        step = 0
        restarted = False
        seq = 0
        while step < self.steps:
            r = self.restart
            if r is not None and not restarted and step == r.at_step:
                restarted = True
                t += r.downtime
                moved = dict(r.moves)
                step = r.resume_step
                seq = 0  # new processes: their collective counters start again
                continue
            computes = []
            busy = bool(self.load) and rng.random() < self.load_p
            for rank in range(self.ranks):
                c = self.compute * (1 + rng.uniform(-self.noise, self.noise))
                if in_window(step, self.jobwide_from):
                    c *= self.jobwide_factor
                if rank == self.slow_rank and in_window(step, self.slow_from, self.slow_until):
                    c *= self.slow_factor
                if busy and rng.random() < self.load_hit:
                    c *= 1 + rng.expovariate(1 / self.load)
                computes.append(c)
            step_time = max(computes) + self.comm
            t += step_time
            seq += 1
            batch = []
            for rank, c in enumerate(computes):
                if lost(rng, self.lose):
                    continue
                batch.append(step_event(self.job, rank, step, t + rng.uniform(0, 0.002), step_time, c,
                                        self.node(rank, moved), self.ranks))
                if self.heartbeats:
                    batch.append({"v": 1, "kind": "heartbeat", "job": self.job, "rank": rank, "step": step,
                                  "ts": round(t + 0.01, 6), "node": self.node(rank, moved), "seq_started": seq,
                                  "seq_completed": seq})
            out.extend(shuffled(rng, batch, self.reorder))
            step += 1
        return out
