"""A small data-parallel training job on CPU (gloo) monitored by stepwatch: the two lines of docs/training.md.

Run it with torchrun, next to a running broker and worker (README, "Five minutes by hand")::

    export KAFKA_BOOTSTRAP=127.0.0.1:9092 STEPWATCH_JOB=my-first-job
    torchrun --nproc-per-node 2 examples/ddp_gloo.py --steps 120 --slow-rank 1

``--slow-rank 1`` makes rank 1 do extra work in every step from ``--slow-from`` on (a stand-in
for a slow GPU): the worker names it in a ``straggler`` alert, which resolves when the job
ends. Without ``--slow-rank`` the job is healthy and no alert comes. Everything the monitor
needs (job id, rank, broker) comes from the environment torchrun and you set; without a
broker the job trains the same (the monitor never blocks training) and says so once.

The model is tiny on purpose: a CPU has time for it, and the "device" pause in each step
(``--device-ms``) stands in for the accelerator time of a real model, so two ranks on a
two-core laptop do not fight over the CPU.
"""

from __future__ import annotations

import argparse
import time
from datetime import timedelta

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

from stepwatch.producers.monitor import RankMonitor


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=120, help="training steps (default 120)")
    parser.add_argument("--slow-rank", type=int, default=-1, help="this rank computes slower (default: none)")
    parser.add_argument("--slow-from", type=int, default=20, help="first slow step (default 20)")
    parser.add_argument("--slow-extra-ms", type=float, default=60.0, help="extra compute per slow step (default 60)")
    parser.add_argument("--device-ms", type=float, default=60.0, help="idle 'accelerator' time per step (default 60)")
    args = parser.parse_args()

    torch.set_num_threads(1)
    dist.init_process_group("gloo", timeout=timedelta(seconds=120))
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = DDP(nn.Sequential(nn.Linear(128, 256), nn.ReLU(), nn.Linear(256, 10)))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loss_fn = nn.CrossEntropyLoss()
    data = torch.Generator().manual_seed(rank)

    monitor = RankMonitor()  # line 1: after init_process_group; job, rank and broker from the environment
    for step in range(args.steps):
        x, y = torch.randn(32, 128, generator=data), torch.randint(0, 10, (32,), generator=data)
        with monitor.step(samples=len(x)):  # line 2: one training step
            out = model(x)
            time.sleep(args.device_ms / 1000)
            if rank == args.slow_rank and step >= args.slow_from:
                busy_until = time.perf_counter() + args.slow_extra_ms / 1000
                with torch.no_grad():
                    while time.perf_counter() < busy_until:
                        model.module(x)
            loss = loss_fn(out, y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
    monitor.end()  # finished normally: never reported as hung
    dist.barrier()
    monitor.close(timeout=10)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
