"""One rank of a small real training job in one of the frameworks LLM jobs use (gloo, CPU), adopted
with the two documented lines only: ``RankMonitor()`` and ``with monitor.step(): ...``.

Run by tests/producers/frameworks/test_training_frameworks.py as ``python tests/fw_rank.py --framework NAME`` with the
torchrun environment conventions (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT) and the
stepwatch ones (KAFKA_BOOTSTRAP, STEPWATCH_KAFKA_TOPIC_PREFIX, STEPWATCH_JOB).

Frameworks: ``fsdp2`` (``fully_shard`` per layer), ``fsdp1`` (``FullyShardedDataParallel``),
``pipeline`` (one stage per rank, activations and gradients passed with ``send``/``recv``/``isend``/
``batch_isend_irecv``, a data-parallel all-reduce at the end), ``tpdp`` (Megatron-style: TP groups
{0,1},{2,3} and DP groups {0,2},{1,3} from ``new_group``, an all-reduce on the TP group inside each
layer, one on the DP group per step), ``hf`` (Hugging Face ``Trainer`` on a tiny GPT-2 built from a
config, DDP set up by the Trainer, adopted with ``StepwatchTrainerCallback()`` only), ``lightning``
(a ``LightningModule`` fitted by ``Trainer(strategy=--strategy)``, ``ddp`` or ``fsdp``, processes made
by the launcher as torchrun does, adopted with ``StepwatchCallback()`` only).

Each step has a fixed "device" pause (an accelerator kernel leaves the CPU idle: keeps four ranks on
two cores from fighting over the CPU). ``--slow-rank`` does extra real compute (on a local module
that issues no collective) from ``--slow-from`` on; ``--stall-rank`` stops at ``--stall-step`` before
its TP collective, inside :func:`load_shard_slowly`. Writes the monitor's counters as JSON to ``--stats``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time


DEV_STEPS: list[dict] = []  # FW_DEV_LOG=1: this rank's step events, for a look by hand (not used by tests)


def dev_capture(monitor) -> None:
    if not os.environ.get("FW_DEV_LOG") or monitor.transport is None:
        return
    offer = monitor.transport.offer

    def capture(key, events):
        DEV_STEPS.extend(e for e in events if e.get("kind") == "step")
        return offer(key, events)

    monitor.transport.offer = capture


CALLS: dict[str, int] = {"sync": 0, "async": 0}  # FW_COUNT_CALLS=1: calls by kind (bench/overhead.py)


def count_calls() -> None:
    """Count every group's collectives by kind (synchronous / ``async_op``) with a pre hook of our own."""
    from torch.distributed import distributed_c10d as c10d

    def hook(args) -> None:
        CALLS["async" if args.async_op else "sync"] += 1

    helper = c10d._new_process_group_helper

    def new_group_helper(*a, **k):
        result = helper(*a, **k)
        pg = result[0] if isinstance(result, tuple) else result
        if hasattr(pg, "register_pre_hook"):  # not GroupMember.NON_GROUP_MEMBER
            pg.register_pre_hook(0x434E54, hook)
        return result

    c10d._new_process_group_helper = new_group_helper


def load_shard_slowly(seconds: float) -> None:
    time.sleep(seconds)  # stuck before the TP collective; the monitor's threads go on


class Slowness:
    """Extra compute on the slow rank: real matmuls on a module of its own (no collective)."""

    def __init__(self, args, rank: int) -> None:
        import torch

        self.torch = torch
        self.on = rank == args.slow_rank
        self.args = args
        self.work = torch.nn.Linear(64, 64)
        self.x = torch.randn(16, 64)

    def device(self, step: int) -> None:
        time.sleep(self.args.device_ms / 1000)
        if self.on and step >= self.args.slow_from:
            deadline = time.perf_counter() + self.args.slow_extra_ms / 1000
            with self.torch.no_grad():
                while time.perf_counter() < deadline:
                    self.work(self.x)


def mlp(torch, width: int = 64, layers: int = 4):
    from torch import nn

    return nn.Sequential(*[nn.Sequential(nn.Linear(width, width), nn.ReLU()) for _ in range(layers)])


def run_sharded(args, framework: str, rank: int, monitor, slow: Slowness) -> None:
    import torch

    model = mlp(torch)
    if framework == "fsdp2":
        from torch.distributed.fsdp import fully_shard

        for layer in model:
            fully_shard(layer)
        fully_shard(model)
    else:
        from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
        from torch.distributed.fsdp.wrap import ModuleWrapPolicy

        model = FSDP(model, auto_wrap_policy=ModuleWrapPolicy({torch.nn.Linear}), use_orig_params=True,
                     device_id=torch.device("cpu"))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    gen = torch.Generator().manual_seed(rank)
    for step in range(args.steps):
        x = torch.randn(16, 64, generator=gen)
        with monitor.step(samples=16):
            loss = model(x).square().mean()
            slow.device(step)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)


def run_deepspeed(args, rank: int, monitor, slow: Slowness) -> None:
    """DeepSpeed ZeRO (stage ``--zero-stage``) on its CPU accelerator (``DS_ACCELERATOR=cpu``), gloo."""
    import deepspeed
    import deepspeed.ops
    import torch

    # DeepSpeed's CPU backend JIT-compiles its shared-memory all-reduce in C++ at init (30 s on 2 quiet cores, 150 s
    # loaded; a clean clone every run, and worktrees with other flags rebuild each other's): it serves
    # ``inference_all_reduce`` only, never ZeRO training, whose collectives go through torch.distributed (gloo).
    deepspeed.ops.__compatible_ops__ = {"deepspeed_shm_comm": False}
    model = mlp(torch)
    config = {"train_micro_batch_size_per_gpu": 16, "gradient_accumulation_steps": 1,
              "optimizer": {"type": "SGD", "params": {"lr": 0.01}}, "zero_allow_untested_optimizer": True,
              "zero_optimization": {"stage": args.zero_stage}}
    engine, _opt, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=config)
    gen = torch.Generator().manual_seed(rank)
    for step in range(args.steps):
        x = torch.randn(16, 64, generator=gen)
        with monitor.step(samples=16):
            loss = engine(x).square().mean()
            slow.device(step)
            engine.backward(loss)
            engine.step()


def run_pipeline(args, rank: int, world: int, monitor, slow: Slowness, stage_group=None) -> None:
    """``world // args.dp`` pipeline stages of ``args.dp`` data-parallel replicas each (Megatron's layout:
    stage = rank // dp); p2p between a replica's neighbouring stages, each stage's gradients averaged over its
    replicas (``stage_group``; the whole job with one replica per stage)."""
    import torch
    import torch.distributed as dist

    stage = mlp(torch, layers=1)
    opt = torch.optim.SGD(stage.parameters(), lr=0.01)
    gen = torch.Generator().manual_seed(0)
    dp = args.dp
    prev, nxt = rank - dp, rank + dp
    for step in range(args.steps):
        with monitor.step(samples=16):
            if prev < 0:
                x = torch.randn(16, 64, generator=gen)
            else:
                x = torch.empty(16, 64)
                dist.recv(x, prev)  # waiting for the previous stage: communication, not compute
                x.requires_grad_(True)
            y = stage(x)
            slow.device(step)
            if nxt < world:
                dist.isend(y.detach(), nxt).wait()
                grad = torch.empty_like(y)
                for work in dist.batch_isend_irecv([dist.P2POp(dist.irecv, grad, nxt)]):
                    work.wait()
                y.backward(grad)
            else:
                y.square().mean().backward()
            if prev >= 0:
                dist.send(x.grad, prev)
            for p in stage.parameters():  # the stage's weights, averaged over its data-parallel replicas
                dist.all_reduce(p.grad, group=stage_group)
            opt.step()
            opt.zero_grad(set_to_none=True)


def pipeline_stage_groups(args, rank: int, world: int):
    """Every rank creates every stage's data-parallel group, in the same order; returns its own (None: the
    whole job, one replica per stage) and its stage's name for the monitor's peer group."""
    import torch.distributed as dist

    if args.dp <= 1:
        return None, None
    mine = None
    for start in range(0, world, args.dp):
        group = dist.new_group(list(range(start, start + args.dp)), group_desc=f"stage{start // args.dp}_dp")
        if rank // args.dp == start // args.dp:
            mine = group
    return mine, f"stage{rank // args.dp}"


def run_tpdp(args, rank: int, world: int, monitor, slow: Slowness) -> None:
    import torch
    import torch.distributed as dist

    tp_size = args.tp_size  # TP groups of consecutive ranks ({0-3},{4-7} with 4 of 8), DP groups {i, i+tp_size, ...}
    tp = dp = None
    for start in range(0, world, tp_size):  # every rank creates every group, in the same order
        group = dist.new_group(list(range(start, start + tp_size)), group_desc=f"tp{start // tp_size}")
        if rank // tp_size == start // tp_size:
            tp = group
    for i in range(tp_size):
        group = dist.new_group(list(range(i, world, tp_size)), group_desc=f"dp{i}")
        if rank % tp_size == i:
            dp = group
    width = 64 // tp_size
    layers = [torch.nn.Linear(64, width) for _ in range(2)]  # each TP rank holds its share of the columns
    gen = torch.Generator().manual_seed(rank // tp_size)
    for step in range(args.steps):
        with monitor.step(samples=16):
            x = torch.randn(16, 64, generator=gen)
            for layer in layers:
                left = (rank % tp_size) * width
                part = torch.nn.functional.pad(layer(x), (left, 64 - width - left))
                slow.device(step)
                if rank == args.stall_rank and step == args.stall_step:
                    load_shard_slowly(3600)
                dist.all_reduce(part, group=tp)  # the row-parallel all-reduce of a TP layer
                x = part.detach()
            grads = torch.cat([layer.weight.detach().flatten() for layer in layers])
            dist.all_reduce(grads, group=dp)


def run_hf(args, rank: int, world: int, slow: Slowness, out_dir: str):
    import torch
    import transformers
    from torch.utils.data import Dataset

    from stepwatch.producers.hf import StepwatchTrainerCallback

    class Data(Dataset):
        def __len__(self):
            return 10_000

        def __getitem__(self, i):
            g = torch.Generator().manual_seed(i)
            ids = torch.randint(0, 128, (16,), generator=g)
            return {"input_ids": ids, "labels": ids}

    class Device(transformers.TrainerCallback):
        def on_step_begin(self, a, state, control, **kwargs):
            slow.device(state.global_step)

    config = transformers.GPT2Config(vocab_size=128, n_positions=32, n_embd=32, n_layer=2, n_head=2)
    model = transformers.GPT2LMHeadModel(config)  # built from a config: no hub download
    targs = transformers.TrainingArguments(
        output_dir=out_dir, max_steps=args.steps, per_device_train_batch_size=4, report_to=[], use_cpu=True,
        ddp_backend="gloo", dataloader_num_workers=0, disable_tqdm=True, save_strategy="no", logging_steps=1000)
    callback = StepwatchTrainerCallback(heartbeat_interval=1.0)
    trainer = transformers.Trainer(model=model, args=targs, train_dataset=Data(), callbacks=[callback, Device()])
    trainer.train()
    return callback.monitor


def run_lightning(args, rank: int, world: int, slow: Slowness, out_dir: str):
    import lightning.pytorch as pl
    import torch
    from torch.utils.data import DataLoader, Dataset

    from stepwatch.producers.lightning import StepwatchCallback

    class Data(Dataset):
        def __len__(self):
            return 100_000

        def __getitem__(self, i):
            g = torch.Generator().manual_seed(i)
            return torch.randn(64, generator=g)

    class Model(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = mlp(torch)

        def training_step(self, batch, batch_idx):
            loss = self.net(batch).square().mean()
            slow.device(batch_idx)
            return loss

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.01)

    callback = StepwatchCallback(heartbeat_interval=1.0)
    trainer = pl.Trainer(max_steps=args.steps, accelerator="cpu", devices=world, num_nodes=1, strategy=args.strategy,
                         logger=False, enable_progress_bar=False, enable_model_summary=False,
                         enable_checkpointing=False, default_root_dir=out_dir, callbacks=[callback])
    trainer.fit(Model(), DataLoader(Data(), batch_size=16))
    return callback.monitor


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--framework", required=True, choices=("fsdp2", "fsdp1", "pipeline", "tpdp", "hf", "deepspeed",
                                                                  "lightning"))
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--device-ms", type=float, default=40.0, help="idle 'accelerator' time per step")
    parser.add_argument("--slow-rank", type=int, default=-1)
    parser.add_argument("--slow-from", type=int, default=12)
    parser.add_argument("--slow-extra-ms", type=float, default=24.0, help="extra compute on the slow rank")
    parser.add_argument("--dp", type=int, default=1, help="pipeline: data-parallel replicas per stage")
    parser.add_argument("--tp-size", type=int, default=2, help="tpdp: ranks per tensor-parallel group")
    parser.add_argument("--zero-stage", type=int, default=2, help="deepspeed: ZeRO stage")
    parser.add_argument("--strategy", default="ddp", help="lightning: the Trainer's strategy")
    parser.add_argument("--stall-rank", type=int, default=-1)
    parser.add_argument("--stall-step", type=int, default=-1)
    parser.add_argument("--stats", default="")
    args = parser.parse_args()

    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    torch.manual_seed(0)
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    slow = Slowness(args, rank)
    if os.environ.get("FW_COUNT_CALLS") == "1":
        count_calls()
    started = time.perf_counter()
    if args.framework == "hf":
        monitor = run_hf(args, rank, world, slow, os.path.dirname(args.stats) or ".")
    elif args.framework == "lightning":
        monitor = run_lightning(args, rank, world, slow, os.path.dirname(args.stats) or ".")
    else:
        from stepwatch.producers.monitor import RankMonitor

        dist.init_process_group("gloo", timeout=__import__("datetime").timedelta(seconds=600))
        stage_group, peer_group = pipeline_stage_groups(args, rank, world) if args.framework == "pipeline" else (
            None, None)
        # Pipeline stages of several replicas: ranks are compared with the peers of their stage (docs/training.md,
        # "group"), as a Megatron-style job passes its pipeline rank.
        monitor = RankMonitor(heartbeat_interval=0.5, group=peer_group)  # line 1 of 2
        dev_capture(monitor)
        if args.stall_rank >= 0:  # stack requests need the control reader in place (test scaffolding)
            monitor._control.ready.wait(120)
        if args.framework in ("fsdp2", "fsdp1"):
            run_sharded(args, args.framework, rank, monitor, slow)
        elif args.framework == "pipeline":
            run_pipeline(args, rank, world, monitor, slow, stage_group)
        elif args.framework == "deepspeed":
            run_deepspeed(args, rank, monitor, slow)
        else:
            run_tpdp(args, rank, world, monitor, slow)
        monitor.end()
    train_s = time.perf_counter() - started  # includes the job's setup (model, groups): compared on/off
    if dist.is_initialized():  # (Lightning may have torn its group down at the end of fit)
        dist.barrier()
    monitor.close(timeout=30)  # a loaded CI host: the events sent at close are what the test judges
    stats = monitor.stats()
    if DEV_STEPS:
        tail = [e for e in DEV_STEPS if e["step"] >= args.slow_from]
        stats["dev"] = {k: round(sorted(e[k] for e in tail)[len(tail) // 2] * 1000, 1)
                        for k in ("step_time", "compute_time", "comm_time")} if tail else None
    stats["seq_started"] = dict(monitor.seq_started)
    stats["seq_completed"] = dict(monitor.seq_completed)
    stats["pg_ranks"] = dict(monitor.pg_ranks)
    stats["train_s"] = train_s
    stats["calls"] = dict(CALLS)
    if args.stats:
        with open(args.stats, "w") as f:
            json.dump(stats, f)
    if dist.is_initialized():
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    sys.exit(main())
