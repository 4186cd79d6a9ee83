"""One rank of a small real DDP training job (gloo, CPU), monitored by stepwatch.

Run by tests/producers/frameworks/test_torch_ddp.py (and bench/) as ``python tests/train_rank.py`` with the
torchrun environment conventions (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT)
and the stepwatch ones (KAFKA_BOOTSTRAP, STEPWATCH_KAFKA_TOPIC_PREFIX, STEPWATCH_JOB): the
monitor reads its whole configuration from the environment, as it would under torchrun.

Each step: wait for data (a short sleep standing in for the loader), forward, a fixed
"device" pause inside the forward (an accelerator kernel leaves the CPU idle: keeps four
ranks on two cores from fighting over the CPU), backward with DDP's bucketed all-reduce
(timed by the stepwatch comm hook), optimizer step. ``--slow-rank`` does extra real
forward passes on that rank only, before its backward, so it reaches the all-reduce late.
Writes the monitor's counters as JSON to ``--stats`` at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--device-ms", type=float, default=40.0, help="idle 'accelerator' time per step")
    parser.add_argument("--data-ms", type=float, default=5.0)
    parser.add_argument("--slow-rank", type=int, default=-1)
    parser.add_argument("--slow-extra-ms", type=float, default=40.0, help="extra compute on the slow rank")
    parser.add_argument("--stats", default="")
    parser.add_argument("--no-monitor", action="store_true")
    parser.add_argument("--close-timeout", type=float, default=10.0, help="seconds to deliver what is queued at close")
    args = parser.parse_args()

    import torch
    import torch.distributed as dist
    from torch import nn
    from torch.nn.parallel import DistributedDataParallel as DDP

    from stepwatch.producers.monitor import RankMonitor
    from stepwatch.producers.torch_hooks import attach_ddp

    torch.set_num_threads(1)
    torch.manual_seed(0)
    dist.init_process_group("gloo", timeout=__import__("datetime").timedelta(seconds=120))
    rank = dist.get_rank()

    model = DDP(nn.Sequential(nn.Linear(128, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 10)),
                bucket_cap_mb=0.1)  # a few buckets, so several all-reduces per step
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loss_fn = nn.CrossEntropyLoss()
    monitor = RankMonitor(enabled=not args.no_monitor, heartbeat_interval=1.0)
    timer = attach_ddp(model, monitor)
    gen = torch.Generator().manual_seed(rank)

    def loader():
        for _ in range(args.steps):
            time.sleep(args.data_ms / 1000)
            yield torch.randn(32, 128, generator=gen), torch.randint(0, 10, (32,), generator=gen)

    monitor.phase("warmup")
    for i, (x, y) in enumerate(monitor.loader(loader())):
        if i == 3:
            monitor.phase("train")
        with monitor.step(samples=len(x)):
            out = model(x)
            time.sleep(args.device_ms / 1000)
            if rank == args.slow_rank:
                deadline = time.perf_counter() + args.slow_extra_ms / 1000
                with torch.no_grad():
                    while time.perf_counter() < deadline:
                        model.module(x)
            loss = loss_fn(out, y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
    monitor.end()
    dist.barrier()
    monitor.close(timeout=args.close_timeout)
    stats = monitor.stats()
    stats["seq_started"] = monitor.seq_started.get("default", 0)
    stats["seq_completed"] = monitor.seq_completed.get("default", 0)
    stats["pending_cuda"] = len(timer._pending)
    stats["job"] = monitor.job
    if args.stats:
        with open(args.stats.replace("{rank}", str(rank)), "w") as f:
            json.dump(stats, f)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    sys.exit(main())
