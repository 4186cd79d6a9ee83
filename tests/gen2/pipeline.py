"""A pipeline-parallel job (stages x data-parallel columns) played on a true clock.

Rank ``stage * dp + column``, as Megatron lays out pipeline groups with tensor parallelism 1: the
ranks of a column form one pipeline (process group ``pp<column>``), the ranks of a stage one
data-parallel group (``dp<stage>``). Each step runs a GPipe schedule of ``microbatches``: forward
(a third of the compute) through the stages, then backward (two thirds) back; a stage waits in
``recv`` until its neighbour's activation (gradient) arrives, so a slow stage makes its whole
column wait; then each stage all-reduces its gradients over its data-parallel group, where the
other columns wait for the slow one. Step events carry ``group`` = the stage (peers are the same
stage's ranks); p2p goes out as one per-step summary ``collective`` per rank and direction (docs/events.md:
"per collective call or per-step summary"), numbered per step on the column's group.
"""

from __future__ import annotations

import random

from . import wire
from .plan import Plan
from .sync import _Ranks
from .wire import EPOCH, Sent

P2P_LATENCY = 0.002  # seconds an activation takes between neighbouring stages


def play(plan: Plan) -> list[Sent]:
    rng = random.Random(plan.seed)
    ranks = _Ranks(plan, rng)
    stages, m = plan.stages, plan.microbatches
    dp = plan.ranks // stages
    out: list[Sent] = []
    start = [EPOCH + rng.uniform(0.0, 0.01) for _ in range(plan.ranks)]
    beat = [EPOCH + rng.uniform(0.0, plan.heartbeat_interval) for _ in range(plan.ranks)]
    members = {k: [k * dp + j for j in range(dp)] for k in range(stages)}
    for step_no in range(1, plan.steps + 1):
        compute = {}
        for rank in range(plan.ranks):
            c = plan.compute * (1.0 + rng.gauss(0.0, plan.jitter))
            for s in plan.slow:
                if s.hits(rank, step_no):
                    c *= s.factor
            compute[rank] = c
        arrive, recv_wait, data = {}, {}, {}
        for j in range(dp):
            col = [k * dp + j for k in range(stages)]
            fwd = [[0.0] * m for _ in range(stages)]
            bwd = [[0.0] * m for _ in range(stages)]
            wait = dict.fromkeys(col, 0.0)
            for k, rank in enumerate(col):
                f = compute[rank] / 3 / m
                data[rank] = plan.data * (1.0 + rng.gauss(0.0, plan.jitter)) if k == 0 else 0.0
                for i in range(m):
                    free = fwd[k][i - 1] if i else start[rank] + data[rank]
                    ready = fwd[k - 1][i] + P2P_LATENCY if k else free
                    wait[rank] += max(0.0, ready - free)
                    fwd[k][i] = max(free, ready) + f
            for k in reversed(range(stages)):
                rank = col[k]
                b = compute[rank] * 2 / 3 / m
                for i in range(m):
                    free = bwd[k][i - 1] if i else fwd[k][m - 1]
                    ready = bwd[k + 1][i] + P2P_LATENCY if k < stages - 1 else free
                    wait[rank] += max(0.0, ready - free)
                    bwd[k][i] = max(free, ready) + b
                arrive[rank] = bwd[k][m - 1]
            recv_wait.update(wait)
        for k in range(stages):
            group = members[k]
            done = max(arrive[r] for r in group) + plan.transfer * (1.0 + abs(rng.gauss(0.0, plan.jitter)))
            for rank in group:
                j = rank % dp
                opt = plan.optimizer * (1.0 + rng.gauss(0.0, plan.jitter))
                end = done + opt
                node = ranks.nodes[rank]
                while beat[rank] <= end:
                    h = beat[rank]
                    started = step_no if h >= arrive[rank] else step_no - 1
                    completed = step_no if h >= done else step_no - 1
                    out.append(Sent(h, rank, wire.heartbeat(
                        plan.job, rank, ts=ranks.clock(rank, h), last_step=step_no - 1, started=0, completed=0,
                        node=node, pid=ranks.pids[rank], groups={f"dp{k}": (started, completed, group)})))
                    beat[rank] += plan.heartbeat_interval
                all_reduce = done - arrive[rank]
                out.append(Sent(done, rank, wire.collective(plan.job, rank, step_no, "all_reduce",
                                                            ts=ranks.clock(rank, done), duration=all_reduce, node=node,
                                                            step_no=step_no, pg=f"dp{k}")))
                p2p_ts = ranks.clock(rank, arrive[rank])
                out.append(Sent(arrive[rank], rank, wire.collective(
                    plan.job, rank, step_no, "recv", ts=p2p_ts, duration=recv_wait[rank] + 2 * m * P2P_LATENCY,
                    node=node, step_no=step_no, pg=f"pp{j}", nbytes=16_777_216)))
                out.append(Sent(arrive[rank], rank, wire.collective(
                    plan.job, rank, step_no, "send", ts=p2p_ts, duration=2 * m * P2P_LATENCY, node=node,
                    step_no=step_no, pg=f"pp{j}", nbytes=16_777_216)))
                out.append(Sent(end, rank, wire.step(
                    plan.job, rank, step_no, ts=ranks.clock(rank, end), step_time=end - start[rank],
                    compute=compute[rank] + opt, data=data[rank], comm=recv_wait[rank] + all_reduce, node=node,
                    gpu=rank % plan.per_node, world=plan.ranks, pid=ranks.pids[rank], group=k)))
                start[rank] = end
    last = max(start)
    out.append(Sent(last, 0, wire.phase(plan.job, "end", ts=ranks.clock(0, last), step_no=plan.steps)))
    return out
