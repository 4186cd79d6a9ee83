"""Recordings the simulator does not make, for the labelled scenario library (stepwatch/sim/scenarios.py).

Written from first principles, not with the simulator (a detector tuned to one generator should
not pass on it alone). Each yields ``(true_time, [wire event dict, ...])`` in time order:

* :func:`restart_onto_spare`: a synchronous job loses a node; ``lost_after`` s later the launcher
  relaunches every rank from the last checkpoint, the lost node's ranks on a spare: new processes,
  whose first heartbeats carry the checkpoint's step and sequence numbers from 0, then steps. Some
  events are lost, some batches arrive shuffled, and one late heartbeat of an old process arrives
  after the restart; the job ends with a ``phase: end``.
* :func:`pipeline_p2p`: a GPipe pipeline of ``stages`` x ``dp`` ranks with its p2p ``send``/``recv``
  collectives on each replica's group, a per-stage data-parallel all-reduce and step events; one
  rank computes ``slow_factor`` times slower from ``onset``: the stages after it wait longer in
  their receives, the transfers themselves do not slow.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True, kw_only=True)
class Restart:
    job: str = "restart-spare-64"
    ranks: int = 64
    per_node: int = 8
    steps: int = 160
    step_s: float = 1.0
    dead_node: int = 5
    spare: str = "spare-1"
    die_at: int = 80  # the step node ``dead_node`` dies in
    checkpoint_every: int = 25
    lost_after: float = 90.0  # seconds from the death to the launcher's relaunch
    relaunch_s: float = 30.0  # rendezvous and checkpoint load
    heartbeat_every: int = 2  # steps between heartbeats
    start: float = 1_700_000_000.0
    seed: int = 0

    def node(self, rank: int, restarted: bool = False) -> str:
        home = rank // self.per_node
        return self.spare if restarted and home == self.dead_node else f"node-{home:03d}"

    @property
    def checkpoint(self) -> int:
        return (self.die_at // self.checkpoint_every) * self.checkpoint_every


def restart_onto_spare(r: Restart) -> Iterator[tuple[float, list[dict]]]:
    rng = random.Random(r.seed)
    dead = {k for k in range(r.ranks) if k // r.per_node == r.dead_node}

    def hb(k: int, ts: float, step: int, started: int, completed: int, restarted: bool) -> dict:
        return {"v": 1, "kind": "heartbeat", "job": r.job, "rank": k, "ts": round(ts, 6), "step": step,
                "node": r.node(k, restarted), "seq_started": started, "seq_completed": completed}

    def steps(first: int, last: int, t: float, seq0: int, restarted: bool) -> Iterator[tuple[float, list[dict]]]:
        for i, step in enumerate(range(first, last)):
            t += r.step_s * rng.uniform(0.98, 1.02)
            seq = seq0 + 2 * (i + 1)
            batch = []
            for k in range(r.ranks):
                if rng.random() < 0.01:
                    continue  # lost
                batch.append({"v": 1, "kind": "step", "job": r.job, "rank": k, "step": step,
                              "ts": round(t + rng.uniform(0, 0.01), 6), "step_time": round(r.step_s, 6),
                              "node": r.node(k, restarted), "world_size": r.ranks, "gpu": k % r.per_node,
                              **({"phase": "warmup"} if step < 3 else {})})
                if step % r.heartbeat_every == 0:
                    batch.append(hb(k, t + 0.02, step, seq, seq, restarted))
            if rng.random() < 0.3:
                rng.shuffle(batch)
            yield t, batch

    t = r.start
    for t, batch in steps(0, r.die_at, t, 0, False):
        yield t, batch
    seq = 2 * r.die_at
    for k in range(1, int(r.lost_after) + 1):  # the node is gone; the others wait in the next collective
        yield t + k, [hb(x, t + k, r.die_at - 1, seq + 1, seq, False) for x in range(r.ranks)
                      if x not in dead and rng.random() > 0.02]
    t += r.lost_after + r.relaunch_s
    fresh = [hb(k, t + rng.uniform(0, 0.5), r.checkpoint, 0, 0, True) for k in range(r.ranks)]
    fresh.append(hb(3, t - 100.0, r.die_at - 1, seq + 1, seq, False))  # a late heartbeat of an old process
    yield t + 0.5, fresh
    for t, batch in steps(r.checkpoint + 1, r.steps, t + 1, 0, True):
        yield t, batch
    yield t, [_end(r.job, t)]  # the job finishes (a drained replay sees no hang after it)


def _end(job: str, ts: float) -> dict:
    return {"v": 1, "kind": "phase", "job": job, "ts": round(ts + 0.05, 6), "phase": "end"}


@dataclass(frozen=True, kw_only=True)
class Pipeline:
    job: str = "pipeline-p2p-32"
    stages: int = 4
    dp: int = 8
    micro: int = 4
    steps: int = 200
    fwd: float = 0.05  # seconds per micro-batch forward; backward is twice that
    xfer: float = 0.004  # one activation's p2p transfer
    allreduce: float = 0.05
    per_node: int = 8
    slow_rank: int | None = 11  # stage 1 of replica 3
    slow_factor: float = 1.3
    onset: int = 80
    start: float = 1_700_000_000.0
    seed: int = 0

    def node(self, rank: int) -> str:
        return f"pp-node-{rank // self.per_node:03d}"


def pipeline_p2p(p: Pipeline) -> Iterator[tuple[float, list[dict]]]:
    rng = np.random.default_rng(p.seed)
    S, D, M = p.stages, p.dp, p.micro
    n = S * D
    p2p_seq = [0] * n
    dp_seq = 0
    t = p.start
    for step in range(p.steps):
        events: list[dict] = []

        def p2p(rank: int, op: str, posted: float, done: float, d: int) -> None:
            events.append({"v": 1, "kind": "collective", "job": p.job, "rank": rank, "seq": p2p_seq[rank], "op": op,
                           "ts": round(float(done), 6), "duration": round(float(done - posted), 6),
                           "node": p.node(rank), "pg": f"pp{d}", "bytes": 8 * 2**20, "start_ts": round(float(posted), 6)})
            p2p_seq[rank] += 1

        def pair(sender: int, sent: float, receiver: int, posted: float, d: int) -> float:
            done = max(sent, posted) + p.xfer * (1 + 0.05 * rng.random())  # a rendezvous: both sides posted
            p2p(sender, "send", sent, done, d)
            p2p(receiver, "recv", posted, done, d)
            return done

        factor = np.ones(n)
        if p.slow_rank is not None and step >= p.onset:
            factor[p.slow_rank] = p.slow_factor
        fwd = p.fwd * factor[:, None] * (1 + 0.02 * rng.standard_normal((n, M)))
        bwd = 2 * p.fwd * factor[:, None] * (1 + 0.02 * rng.standard_normal((n, M)))
        busy = np.full(n, t)
        f_end = np.zeros((n, M))
        b_end = np.zeros((n, M))
        for d in range(D):
            for j in range(M):  # forwards, stage by stage
                for s in range(S):
                    r = s * D + d
                    ready = busy[r]
                    if s:
                        up = r - D
                        ready = pair(up, f_end[up, j], r, ready, d)
                        busy[up] = max(busy[up], ready)
                    f_end[r, j] = busy[r] = ready + fwd[r, j]
            for j in range(M):  # backwards, last stage first
                for s in reversed(range(S)):
                    r = s * D + d
                    ready = busy[r]
                    if s < S - 1:
                        down = r + D
                        ready = pair(down, b_end[down, j], r, ready, d)
                        busy[down] = max(busy[down], ready)
                    b_end[r, j] = busy[r] = ready + bwd[r, j]
        done = np.zeros(n)
        for s in range(S):  # each stage's data-parallel gradient all-reduce
            ranks = range(s * D, (s + 1) * D)
            end = max(busy[r] for r in ranks) + p.allreduce * (1 + 0.03 * rng.standard_normal())
            for r in ranks:
                events.append({"v": 1, "kind": "collective", "job": p.job, "rank": r, "seq": dp_seq,
                               "op": "all_reduce", "ts": round(float(end), 6), "duration": round(float(end - busy[r]), 6),
                               "node": p.node(r), "pg": f"dp{s}", "bytes": 64 * 2**20,
                               "start_ts": round(float(busy[r]), 6), "step": step})
                done[r] = end + 0.002 * rng.random()
        dp_seq += 1
        compute = fwd.sum(axis=1) + bwd.sum(axis=1)
        for r in range(n):
            events.append({"v": 1, "kind": "step", "job": p.job, "rank": r, "step": step, "ts": round(float(done[r]), 6),
                           "step_time": round(float(done[r] - t), 6), "node": p.node(r), "gpu": r % p.per_node,
                           "world_size": n, "group": f"stage{r // D}", "compute_time": round(float(compute[r]), 6),
                           "comm_time": round(float(done[r] - t - compute[r]), 6),
                           **({"phase": "warmup"} if step < 5 else {})})
        events.sort(key=lambda e: e["ts"])
        t = float(done.max())
        yield t, events
    yield t, [_end(p.job, t)]
