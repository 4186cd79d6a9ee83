"""Ranks as OS processes that publish through RankMonitor, synchronised by a real cross-process barrier.

Used by tests/models/hang/test_monitor_hang.py. Each rank: a step of ``step_s`` of "compute", then a
collective (a ``multiprocessing`` barrier every rank must reach, numbered and timed by
the monitor), with the monitor's heartbeat thread reporting every ``heartbeat_s``.
``stall_rank`` stops at ``stall_step`` *before* the collective (its training thread sleeps;
its heartbeat thread goes on), which is what a rank stuck in a data loader or a deadlock
looks like to its peers.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import time


def rank_main(rank: int, world: int, env: dict, barrier, progress, steps: int, step_s: float, heartbeat_s: float,
              stall_rank: int, stall_step: int, wait_control: bool = False) -> None:
    os.environ.update(env)
    from stepwatch.producers.monitor import RankMonitor

    monitor = RankMonitor(rank=rank, world_size=world, node=f"node-{rank // 2}", heartbeat_interval=heartbeat_s)
    if wait_control:  # stack requests need the control reader in place first
        monitor._control.ready.wait(120)
    for step in range(steps):
        with monitor.step():
            time.sleep(step_s)
            if rank == stall_rank and step == stall_step:
                time.sleep(3600)  # stuck before the collective; the heartbeat thread keeps reporting
            with monitor.collective("barrier"):
                barrier.wait()
        progress[rank] = step
    monitor.end()
    monitor.close(timeout=10)


def start_ranks(env: dict, *, world: int = 4, steps: int = 400, step_s: float = 0.05, heartbeat_s: float = 0.5,
                stall_rank: int = -1, stall_step: int = -1, wait_control: bool = False):
    ctx = mp.get_context("spawn")
    barrier = ctx.Barrier(world)
    progress = ctx.Array("i", [-1] * world)
    procs = [ctx.Process(target=rank_main, args=(r, world, env, barrier, progress, steps, step_s, heartbeat_s,
                                                 stall_rank, stall_step, wait_control), daemon=True)
             for r in range(world)]
    for p in procs:
        p.start()
    procs.append(barrier)  # keep the barrier alive until the children have unpickled it
    return procs, progress


def wait_progress(progress, rank: int, step: int, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while progress[rank] < step:
        if time.monotonic() > deadline:
            raise TimeoutError(f"rank {rank} did not reach step {step}: progress {list(progress)}")
        time.sleep(0.05)


def stop_all(procs) -> None:
    import signal

    procs = [p for p in procs if isinstance(p, mp.process.BaseProcess)]
    for p in procs:
        if p.is_alive():
            os.kill(p.pid, signal.SIGCONT)
            p.kill()
    for p in procs:
        p.join(10)
