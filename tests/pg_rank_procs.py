"""Ranks as OS processes running real gloo collectives on a tensor-parallel subgroup and the
default (data-parallel) group, publishing through RankMonitor (process groups tracked
automatically, stack requests answered). Used by tests/models/hang/test_hang_forensics_kafka.py.

Each step: a little "compute", one all-reduce on the rank's TP pair (``new_subgroups``), one on
the default group. ``stall_rank`` stops at ``stall_step`` before its TP collective, inside
:func:`load_shard_slowly` (the name the test looks for in its stack).
"""

from __future__ import annotations

import multiprocessing as mp
import os
import socket
import time


def load_shard_slowly(seconds: float) -> None:
    time.sleep(seconds)  # stuck before the TP collective; the monitor's threads go on


def rank_main(rank: int, world: int, env: dict, port: int, progress, steps: int, step_s: float, heartbeat_s: float,
              stall_rank: int, stall_step: int) -> None:
    os.environ.update(env)
    from datetime import timedelta

    import torch
    import torch.distributed as dist

    from stepwatch.producers.monitor import RankMonitor

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
                            timeout=timedelta(seconds=900))
    monitor = RankMonitor(rank=rank, world_size=world, node=f"node-{rank // 2}", heartbeat_interval=heartbeat_s)
    tp, _ = dist.new_subgroups(group_size=2)
    # Answers need the control reader in place before anything can hang (test scaffolding).
    monitor._control.ready.wait(120)
    progress[world + rank] = 1
    t = torch.ones(16)
    for step in range(steps):
        with monitor.step():
            time.sleep(step_s)
            if rank == stall_rank and step == stall_step:
                load_shard_slowly(3600)
            dist.all_reduce(t, group=tp)
            dist.all_reduce(t)
        progress[rank] = step
    monitor.end()
    monitor.close(timeout=10)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_ranks(env: dict, *, world: int = 4, steps: int = 2000, step_s: float = 0.05, heartbeat_s: float = 0.5,
                stall_rank: int = -1, stall_step: int = -1):
    ctx = mp.get_context("spawn")
    progress = ctx.Array("i", [-1] * world + [0] * world)  # last step per rank, then "control reader ready"
    port = free_port()
    procs = [ctx.Process(target=rank_main, args=(r, world, env, port, progress, steps, step_s, heartbeat_s,
                                                 stall_rank, stall_step), daemon=True) for r in range(world)]
    for p in procs:
        p.start()
    return procs, progress
