"""A synchronous data-parallel job played on a true clock.

Each step every rank loads its batch (``data``), computes forward and backward, then enters the
gradient all-reduce; nobody leaves it before the last rank arrived and the transfer is done, then
each rank runs its optimizer and starts the next step. So every rank's step time is nearly the
same, and a slow rank shows only in its compute time and in its arrival: it arrives last and waits
least. Each host writes timestamps on its own clock (``Plan.clock_offsets``); durations are
measured on one clock and carry no offset.
"""

from __future__ import annotations

import random

from . import wire
from .plan import Marking, Plan
from .wire import EPOCH, Sent


class _Ranks:
    """Where each rank runs and what it has counted (the state a restart resets)."""

    def __init__(self, plan: Plan, rng: random.Random) -> None:
        self.plan = plan
        self.nodes = [plan.node_of(r) for r in range(plan.ranks)]
        self.pids = [rng.randrange(1000, 60000) for _ in range(plan.ranks)]
        self.offsets = {plan.node_of(i * plan.per_node): s for i, s in plan.clock_offsets}

    def clock(self, rank: int, true_time: float) -> float:
        """``true_time`` as rank ``rank``'s host writes it."""
        return true_time + self.offsets.get(self.nodes[rank], 0.0)


def _heartbeats(out: list[Sent], plan: Plan, ranks: _Ranks, rank: int, nxt: list[float], until: float, *,
                last_step: int, seq: int, arrived: float | None, done: float | None, phase: str | None = None) -> None:
    """Rank ``rank``'s heartbeats up to ``until``: collective ``seq`` issued at ``arrived`` and finished at
    ``done`` (None: not yet)."""
    while nxt[rank] <= until:
        h = nxt[rank]
        started = seq if arrived is not None and h >= arrived else seq - 1
        completed = seq if done is not None and h >= done else seq - 1
        out.append(Sent(h, rank, wire.heartbeat(plan.job, rank, ts=ranks.clock(rank, h), last_step=last_step,
                                                started=started, completed=completed, node=ranks.nodes[rank],
                                                pid=ranks.pids[rank], phase=phase)))
        nxt[rank] += plan.heartbeat_interval


def play(plan: Plan) -> list[Sent]:
    """Every event the job's ranks send, with the true time each is ready."""
    rng = random.Random(plan.seed)
    ranks = _Ranks(plan, rng)
    n = plan.ranks
    out: list[Sent] = []
    start = [EPOCH + rng.uniform(0.0, 0.01) for _ in range(n)]  # each rank's current step began
    beat = [EPOCH + rng.uniform(0.0, plan.heartbeat_interval) for _ in range(n)]
    seq = 0  # collectives issued on the default group
    step_no = 0  # last completed step
    since_start = 0  # steps since the (re)start, for the warm-up
    extra = [0.0] * n  # compute of an unmarked pause, charged to the next step
    restarted = False
    pauses = {p.step: p for p in plan.pauses}
    for i in range(plan.steps):
        r = plan.restart
        if r is not None and not restarted and step_no == r.at:
            restarted = True
            # Everyone dies at once after step ``at``; the launcher brings the job back from its checkpoint.
            back = max(start) + r.downtime
            if r.moved is not None:
                ranks.nodes = [r.moved[1] if node == r.moved[0] else node for node in ranks.nodes]
            ranks.pids = [rng.randrange(60000, 99999) for _ in range(n)]
            start = [back + rng.uniform(0.0, 0.01) for _ in range(n)]
            beat = [back + rng.uniform(0.0, plan.heartbeat_interval) for _ in range(n)]
            seq, step_no, since_start = 0, r.resume, 0
        this = step_no + 1
        seq += 1
        factor = (1.0 + plan.drift * i) * (plan.slowdown[1] if plan.slowdown and i >= plan.slowdown[0] else 1.0)
        hot = (i // 2 * 7) % n if plan.moe_skew else -1
        data, compute, arrive = [0.0] * n, [0.0] * n, [0.0] * n
        for k in range(n):
            c = plan.compute * factor * (1.0 + rng.gauss(0.0, plan.jitter))
            if since_start < plan.warmup:
                c *= 1.0 + rng.uniform(1.0, 4.0)  # compilation and autotuning, longer on some ranks
            for s in plan.slow:
                if s.hits(k, this):
                    c *= s.factor
            if k == hot:
                c *= 1.0 + plan.moe_skew
            if rng.random() < plan.noise.gc_rate:
                c += plan.noise.gc_seconds
            d = plan.data * (1.0 + rng.gauss(0.0, plan.jitter))
            if rng.random() < plan.noise.loader_rate:
                d += plan.noise.loader_seconds
            c += extra[k]
            data[k], compute[k], arrive[k] = d, c, start[k] + d + c
        extra = [0.0] * n
        stuck = plan.stuck if plan.stuck is not None and plan.stuck.step == this else None
        if stuck is not None:
            # The stuck rank never issues collective ``seq``; the others wait in it; only heartbeats flow.
            until = max(arrive) + stuck.tail
            for k in range(n):
                last = until
                if stuck.teardown is not None:  # killed by the watchdog, the culprit later by the launcher
                    last = min(until, max(arrive) + stuck.teardown + (stuck.grace if k == stuck.rank else 0.0))
                _heartbeats(out, plan, ranks, k, beat, last, last_step=step_no, seq=seq,
                            arrived=None if k == stuck.rank else arrive[k], done=None)
            return out
        transfer = plan.transfer * (plan.network[1] if plan.network and this >= plan.network[0] else 1.0)
        done = max(arrive) + transfer * (1.0 + abs(rng.gauss(0.0, plan.jitter)))
        for k in range(n):
            opt = plan.optimizer * (1.0 + rng.gauss(0.0, plan.jitter))
            end = done + opt
            node = ranks.nodes[k]
            _heartbeats(out, plan, ranks, k, beat, end, last_step=step_no, seq=seq, arrived=arrive[k], done=done)
            out.append(Sent(done, k, wire.collective(plan.job, k, seq, "all_reduce", ts=ranks.clock(k, done),
                                                     duration=done - arrive[k], node=node, step_no=this)))
            out.append(Sent(end, k, wire.step(plan.job, k, this, ts=ranks.clock(k, end), step_time=end - start[k],
                                              compute=compute[k] + opt, data=data[k], comm=done - arrive[k],
                                              node=node, gpu=k % plan.per_node, world=n, pid=ranks.pids[k])))
            start[k] = end
        step_no, since_start = this, since_start + 1
        pause = pauses.get(this)
        if pause is not None:
            if pause.marking is Marking.MARKED:
                # The callback marks it: the pause is outside every step's timers; rank 0 sends the phases.
                begin = max(start)
                out.append(Sent(begin, 0, wire.phase(plan.job, pause.phase, ts=ranks.clock(0, begin), step_no=this)))
                resume = begin + pause.seconds
                for k in range(n):
                    _heartbeats(out, plan, ranks, k, beat, resume, last_step=step_no, seq=seq, arrived=start[k],
                                done=start[k], phase=pause.phase)
                    start[k] = resume
                out.append(Sent(resume, 0, wire.phase(plan.job, "train", ts=ranks.clock(0, resume), step_no=this)))
            elif pause.phase == "checkpoint":
                extra[0] = pause.seconds  # rank 0 writes; the others wait for it in the next collective
            else:
                extra = [pause.seconds] * n  # every rank evaluates its shard
    last = max(start)
    out.append(Sent(last, 0, wire.phase(plan.job, "end", ts=ranks.clock(0, last), step_no=step_no)))
    return out
