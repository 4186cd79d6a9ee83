"""Hot-path overhead of the rank monitor, and training speed with the broker down.

    .venv/bin/python bench/overhead.py                 # starts a local broker (or uses $KAFKA_BOOTSTRAP)
    .venv/bin/python bench/overhead.py --no-broker     # without Kafka: "on" publishes into a sink
    .venv/bin/python bench/overhead.py --write         # also update the section in BENCHMARKS.md
    .venv/bin/python bench/overhead.py --baseline REV  # the hot path of git revision REV beside this checkout's

Measured side by side in one run (needs torch: ``pip install -e '.[train-test]'``):

1. **Hot path alone**: what the training thread pays per step for ``with monitor.step()``
   (+ a ``monitor.data()`` marker and one timed collective), monitor enabled vs disabled,
   over many iterations; the publisher, heartbeat and Kafka run on their own threads.
2. **Real model** (modes: no hook; torch's own Python ``allreduce_hook`` as the baseline of any
   Python comm hook; stepwatch on; stepwatch with the broker down): a small MLP under single-rank ``DistributedDataParallel`` (gloo, CPU,
   1 thread), a full forward/backward/SGD step plus an idle wait that pads it to the target
   step time (standing in for accelerator time). Modes run interleaved in blocks, so drift
   hits them alike: monitor off (no hook); monitor on, comm hook attached, publishing to
   Kafka; monitor on with the broker down (bootstrap at a closed port). Reported: median
   step time per mode and its difference to "off", and the events sent/dropped.
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))


def closed_port() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{s.getsockname()[1]}"


def hot_path_us(iterations: int) -> dict[str, float]:
    """Per step, monitor off and on: wall time (``off``/``on``) and the training thread's CPU time
    (``off_cpu``/``on_cpu``: what other processes on a loaded machine take is left out); best of 2."""
    from stepwatch.producers.monitor import RankMonitor

    out: dict[str, list[float]] = {}
    for label, enabled in (("off", False), ("on", True), ("off", False), ("on", True)):
        m = RankMonitor(job="bench", rank=0, enabled=enabled, sink=lambda batch: None, heartbeat_interval=1.0,
                        queue_size=iterations + 10, environ={})
        perf, cpu = time.perf_counter, time.thread_time
        t0, c0 = perf(), cpu()
        for _ in range(iterations):
            with m.step(samples=32):
                with m.data():
                    pass
                with m.collective():
                    pass
        elapsed, busy = perf() - t0, cpu() - c0
        m.close(timeout=5)
        out.setdefault(label, []).append(elapsed / iterations * 1e6)
        out.setdefault(label + "_cpu", []).append(busy / iterations * 1e6)
    return {k: min(v) for k, v in out.items()}


def model_bench(step_ms: float, steps: int, blocks: int, bootstrap: str | None) -> dict:
    import torch
    import torch.distributed as dist
    from torch import nn
    from torch.nn.parallel import DistributedDataParallel as DDP

    from stepwatch.producers.monitor import RankMonitor
    from stepwatch.producers.torch_hooks import attach_ddp

    torch.set_num_threads(1)
    if not dist.is_initialized():
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            os.environ["MASTER_PORT"] = str(s.getsockname()[1])
        dist.init_process_group("gloo", rank=0, world_size=1)

    def make():
        torch.manual_seed(0)
        model = DDP(nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(),
                                  nn.Linear(512, 10)), bucket_cap_mb=0.5)
        return model, torch.optim.SGD(model.parameters(), lr=0.01)

    x, y = torch.randn(64, 256), torch.randint(0, 10, (64,))
    loss_fn = nn.CrossEntropyLoss()
    modes = {"off": None, "plain allreduce_hook": None, "on": bootstrap, "broker down": closed_port()}
    setups = {}
    for mode, boot in modes.items():
        model, opt = make()
        monitor = None
        if mode == "plain allreduce_hook":  # any Python comm hook, without stepwatch: the baseline cost
            from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

            model.register_comm_hook(None, allreduce_hook)
        elif mode != "off":
            sink = (lambda batch: None) if boot is None else None
            monitor = RankMonitor(job="bench-overhead", rank=0, world_size=1, bootstrap=boot or "unused:1",
                                  sink=sink, heartbeat_interval=1.0, queue_size=10_000,
                                  topic="stepwatch.bench-events", environ={})
            attach_ddp(model, monitor)
        setups[mode] = (model, opt, monitor)

    def train_step(model, opt):
        t_end = time.perf_counter() + step_ms / 1000
        loss = loss_fn(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        now = time.perf_counter()
        busy.append(now - (t_end - step_ms / 1000))
        left = t_end - now
        if left > 0:
            time.sleep(left)  # idle "device" time: the CPU waits, as for an accelerator

    times: dict[str, list[float]] = {m: [] for m in modes}
    busies: dict[str, list[float]] = {m: [] for m in modes}
    busy: list[float] = []
    for m in modes:  # warm-up
        model, opt, monitor = setups[m]
        for _ in range(5):
            train_step(model, opt)
    for _ in range(blocks):
        for mode in modes:
            model, opt, monitor = setups[mode]
            for _ in range(steps):
                t0 = time.perf_counter()
                if monitor is None:
                    train_step(model, opt)
                else:
                    with monitor.step(samples=64):
                        train_step(model, opt)
                times[mode].append(time.perf_counter() - t0)
                busies[mode].append(busy[-1])
    counters = {}
    for mode, (_, _, monitor) in setups.items():
        if monitor is not None:
            monitor.close(timeout=10)
            counters[mode] = monitor.stats()
    return {"times": times, "busy": busies, "counters": counters}


HOOK_SCRIPT = r"""
import json, sys, time
import torch, torch.distributed as dist
from torch._C._distributed_c10d import Work
torch.set_num_threads(1)
rank, world = int(sys.argv[3]), int(sys.argv[4])
dist.init_process_group("gloo", init_method="tcp://127.0.0.1:%d" % int(sys.argv[1]), rank=rank, world_size=world)
from stepwatch.producers.monitor import RankMonitor
n = int(sys.argv[2])
t = torch.ones(1)
pg = dist.group.WORLD
def sync():
    dist.all_reduce(t)
def async_():  # as FSDP2 and DTensor issue them: async_op=True, waited later
    dist.all_reduce(t, async_op=True).wait()
def per_call(fn):  # CPU time per call (a loaded machine's preemptions left out): this thread's, the process's
    t0, p0 = time.thread_time(), time.process_time()
    for _ in range(n):
        fn()
    return (time.thread_time() - t0) / n * 1e6, (time.process_time() - p0) / n * 1e6
m = RankMonitor(job="bench", rank=rank, world_size=world, sink=lambda b: None, heartbeat_interval=1.0, environ={},
                queue_size=10)
tracker = m._pg_tracker
hooked_wait, plain_wait = Work.wait, tracker._originals.get((Work, "wait"), Work.wait)
def hooks(on):  # the tracker's hooks and Work.wait wrapper in place, or not: same process, interleaved
    pg.unregister_pre_hook(0x53545750)
    pg.unregister_post_hook(0x53545750)
    tracker._hooked.pop(id(pg), None)
    Work.wait = hooked_wait if on else plain_wait
    if on:
        tracker.attach(pg)
best = {(mode, kind, clock): float("inf") for mode in ("off", "on") for kind in ("sync", "async")
        for clock in ("thread", "process")}
with m.step():  # inside a step: the hooks also record the interval for comm_time
    for _ in range(7):
        for mode in ("off", "on"):
            hooks(mode == "on")
            for kind, fn in (("sync", sync), ("async", async_)):
                for clock, value in zip(("thread", "process"), per_call(fn)):
                    best[mode, kind, clock] = min(best[mode, kind, clock], value)
            m._poll()
hooks(True)
m.close()
dist.destroy_process_group()
if rank == 0:
    print(json.dumps({"off_us": {k: best["off", k, "thread"] for k in ("sync", "async")},
                      "on_us": {k: best["on", k, "thread"] for k in ("sync", "async")},
                      "off_process_us": {k: best["off", k, "process"] for k in ("sync", "async")},
                      "on_process_us": {k: best["on", k, "process"] for k in ("sync", "async")},
                      "hooks": tracker.hooks}))
"""

FRAMEWORKS = ("fsdp2", "fsdp1", "pipeline", "tpdp", "hf", "lightning")


def checkout(rev: str, dest: Path) -> Path:
    """The tree of ``rev`` (git archive) in ``dest``: a baseline importable as ``stepwatch``."""
    import io
    import subprocess
    import tarfile

    import tomllib

    repo = Path(__file__).resolve().parents[1]
    data = subprocess.run(["git", "-C", str(repo), "archive", rev], capture_output=True, check=True).stdout
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        tar.extractall(dest, filter="data")
    # The roots pyproject maps into the package (producers/ -> stepwatch.producers, ...) linked in place:
    # otherwise the editable install's finder resolves them to this checkout, and the "baseline" measures
    # this checkout's code.
    package_dir = tomllib.loads((dest / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
    for package, folder in package_dir.items():
        if package.startswith("stepwatch.") and folder != "stepwatch":
            link = dest / "stepwatch" / package.split(".", 1)[1]
            if not link.exists():
                link.symlink_to(dest / folder, target_is_directory=True)
    return dest


def tree_python(code: str, tree: Path | None, args: tuple[str, ...] = (), **popen) -> subprocess.Popen:
    """``python -c code`` importing stepwatch from ``tree`` (default: this checkout); checks that it does."""
    check = ("import stepwatch.producers.monitor as _m, pathlib as _p, sys as _s\n"
             "assert _p.Path(_m.__file__).resolve().is_relative_to(_p.Path(_s.argv[-1]).resolve()), _m.__file__\n"
             "del _s.argv[-1]\n")
    root = tree if tree is not None else Path(__file__).resolve().parents[1]
    env = dict(os.environ, STEPWATCH_MONITOR_STACKS="0")
    if tree is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(tree), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return subprocess.Popen([sys.executable, "-c", check + code, *args, str(root)], env=env, cwd=str(root),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **popen)


HOT_SCRIPT = """
import json, sys
sys.path.insert(0, sys.argv[1])
from overhead import hot_path_us
print(json.dumps(hot_path_us(int(sys.argv[2]))))
"""


def hot_paths(iterations: int, baseline: str, rounds: int = 3) -> dict[str, dict[str, float]]:
    """The hot path of this checkout and of git revision ``baseline``, each in its own interpreter,
    alternating ``rounds`` times; the best (lowest) per tree and mode."""
    import json
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        trees: dict[str, Path | None] = {"this": None, baseline: checkout(baseline, Path(tmp) / "baseline")}
        runs: dict[str, list[dict]] = {k: [] for k in trees}
        for _ in range(rounds):
            for label, tree in trees.items():
                proc = tree_python(HOT_SCRIPT, tree, (str(Path(__file__).resolve().parent), str(iterations)))
                out, err = proc.communicate(timeout=1200)
                if proc.returncode:
                    raise RuntimeError(err[-2000:])
                runs[label].append(json.loads(out.strip().splitlines()[-1]))
    return {label: {mode: min(r[mode] for r in results) for mode in results[0]} for label, results in runs.items()}


def hook_cost_us(calls: int, tree: Path | None = None, world: int = 1) -> dict:
    """Training-thread cost of the process-group hooks per collective (``world`` gloo ranks in lockstep,
    1-element all-reduces, synchronous and ``async_op=True``), with the stepwatch of ``tree`` (default:
    this checkout); rank 0's figures."""
    import json
    import subprocess

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from train_support import free_port

    port = free_port()
    procs = [tree_python(HOOK_SCRIPT, tree, (str(port), str(calls), str(rank), str(world))) for rank in range(world)]
    outs = [p.communicate(timeout=600) for p in procs]
    if any(p.returncode for p in procs):
        raise RuntimeError("\n".join(err[-2000:] for _, err in outs))
    res = json.loads(outs[0][0].strip().splitlines()[-1])
    res["cost_us"] = {k: res["on_us"][k] - res["off_us"][k] for k in res["on_us"]}
    res["process_cost_us"] = {k: res["on_process_us"][k] - res["off_process_us"][k] for k in res["on_us"]}
    return res


def hook_costs(calls: int, baseline: str | None, rounds: int = 2) -> dict[str, dict]:
    """Per-call hook cost of this checkout and of ``baseline`` (a git revision), runs interleaved; the best
    (lowest) of ``rounds`` per tree and kind."""
    import tempfile

    trees: dict[str, Path | None] = {"this": None}
    with tempfile.TemporaryDirectory() as tmp:
        if baseline:
            trees[baseline] = checkout(baseline, Path(tmp) / "baseline")
        runs: dict[str, list[dict]] = {k: [] for k in trees}
        for _ in range(rounds):
            for label, tree in trees.items():
                runs[label].append(hook_cost_us(calls, tree))
    out = {}
    for label, results in runs.items():
        out[label] = {key: {kind: min(r[key][kind] for r in results) for kind in ("sync", "async")}
                      for key in ("cost_us", "off_us", "process_cost_us", "off_process_us")}
        out[label]["hooks"] = results[0]["hooks"]
    return out


def framework_bench(frameworks, steps: int, world: int, tmp: Path) -> dict:
    """Each framework's job (tests/fw_rank.py, ``world`` gloo ranks, broker down) with the monitor off and
    on, interleaved: training time per step, and the collectives per step the monitor numbered."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from train_support import FW_RANK, run_ddp_job

    results = {}
    for fw in frameworks:
        runs: dict[str, list[float]] = {"off": [], "on": []}
        calls = None
        for block in range(2):
            for mode in ("off", "on"):
                d = tmp / f"{fw}-{mode}-{block}"
                d.mkdir(parents=True)
                env = dict(os.environ, KAFKA_BOOTSTRAP=closed_port(), STEPWATCH_JOB=f"bench-{fw}", FW_COUNT_CALLS="1",
                           STEPWATCH_MONITOR_STACKS="0", STEPWATCH_MONITOR_ENABLED="1" if mode == "on" else "0")
                stats = run_ddp_job(env, d, world=world, script=FW_RANK, timeout=600,
                                    args=("--framework", fw, "--steps", str(steps), "--device-ms", "10"))
                runs[mode].append(statistics.median(s["train_s"] for s in stats) / steps)
                if mode == "on":  # the whole run's calls (setup included) per step, by kind
                    calls = {k: v / steps for k, v in stats[0]["calls"].items()}
        results[fw] = {"off": min(runs["off"]), "on": min(runs["on"]), "calls": calls}
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--no-broker", action="store_true", help="'on' publishes into a sink, not Kafka")
    parser.add_argument("--iterations", type=int, default=200_000)
    parser.add_argument("--step-ms", type=float, nargs="+", default=[10.0, 100.0])
    parser.add_argument("--steps", type=int, default=20, help="steps per block")
    parser.add_argument("--blocks", type=int, default=10)
    parser.add_argument("--write", action="store_true", help="update the 'overhead' section of BENCHMARKS.md")
    parser.add_argument("--frameworks", nargs="*", default=None, metavar="FW",
                        help=f"only the per-framework figures ({', '.join(FRAMEWORKS)}; none listed: all)")
    parser.add_argument("--world", type=int, default=2, help="ranks per framework job")
    parser.add_argument("--baseline", default=None, metavar="REV",
                        help="also measure git revision REV (before/after): its hot path, or with --frameworks its "
                             "hook cost")
    parser.add_argument("--calls", type=int, default=20_000, help="with --frameworks: calls per hook-cost round")
    args = parser.parse_args()
    if args.frameworks is not None:
        return frameworks_main(args)

    if args.baseline:  # each tree in its own interpreter, alternating
        hots = hot_paths(args.iterations, args.baseline)
    else:
        hots = {"this": hot_path_us(args.iterations)}

    broker = None
    bootstrap = None
    if not args.no_broker:
        bootstrap = os.environ.get("KAFKA_BOOTSTRAP", "").strip() or None
        if bootstrap is None:
            from stepwatch.localkafka import LocalKafka

            broker = LocalKafka().start()
            bootstrap = broker.bootstrap
    try:
        results = {ms: model_bench(ms, args.steps, args.blocks, bootstrap) for ms in args.step_ms}
    finally:
        if broker is not None:
            broker.stop()

    lines = ["## Monitor overhead (bench/overhead.py)", ""]
    try:
        from _report import stamp

        lines.append(stamp("python bench/overhead.py" + (" --no-broker" if args.no_broker else "")
                           + (f" --baseline {args.baseline}" if args.baseline else "")))
    except Exception:
        pass
    lines += [
        "Hot path alone (training thread, per step: `with monitor.step()` + a `data()` marker + one timed "
        f"collective; {args.iterations:,} iterations, best of 2"
        + (f"; this checkout and `{args.baseline}` each in its own interpreter, alternating, best of 3 each" if
           args.baseline else "") + "). Wall time, and the training thread's CPU time (`time.thread_time`: "
        "on a shared machine the wall time also holds other processes' turns; load average at the end "
        f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs):",
        "",
        "| tree | wall off | wall on | overhead per step (wall) | CPU off | CPU on | overhead per step (CPU) | "
        "share of a 100 ms step (CPU) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for label, hot in hots.items():
        wall, busy = hot["on"] - hot["off"], hot["on_cpu"] - hot["off_cpu"]
        name = "this checkout" if label == "this" else f"`{label}` (before)"
        lines.append(f"| {name} | {hot['off']:.2f} µs | {hot['on']:.2f} µs | {wall:.2f} µs | {hot['off_cpu']:.2f} µs "
                     f"| {hot['on_cpu']:.2f} µs | {busy:.2f} µs | {busy / 100_000 * 100:.4f} % |")
    lines += [
        "",
        "Small real model (single-rank DDP on gloo with the comm hook, forward/backward/SGD padded with idle "
        f"'device' time to the target step; {args.blocks} interleaved blocks of {args.steps} steps per mode; "
        f"'on' publishes to {'a sink' if args.no_broker else 'a local Kafka broker'}):",
        "",
        "| target step | mode | median compute (fwd+bwd+SGD) | vs off | median step | vs off | events sent | "
        "events dropped |",
        "|---:|---|---:|---:|---:|---:|---:|---:|",
    ]
    for ms, res in results.items():
        off = statistics.median(res["times"]["off"])
        boff = statistics.median(res["busy"]["off"])
        for mode, values in res["times"].items():
            med = statistics.median(values)
            bmed = statistics.median(res["busy"][mode])
            c = res["counters"].get(mode)
            delta = "" if mode == "off" else f"{(med - off) * 1e6:+.0f} µs ({(med - off) / off * 100:+.2f} %)"
            bdelta = "" if mode == "off" else f"{(bmed - boff) * 1e6:+.0f} µs"
            lines.append(f"| {ms:g} ms | {mode} | {bmed * 1000:.3f} ms | {bdelta} | {med * 1000:.3f} ms | {delta} | "
                         f"{c['sent'] if c else ''} | {c['dropped'] if c else ''} |")
    lines += ["", "'compute' includes the DDP comm hook (Python hook + future callback per gradient bucket) and "
              "background threads competing for the GIL; 'step' is the padded step as the training loop sees it. "
              "Differences of a few tens of µs are within run-to-run noise of CPU training; the hot-path row is "
              "the monitor's own cost on the training thread. With the broker down, training runs at the same "
              "speed and every undelivered event is counted as dropped."]
    text = "\n".join(lines)
    print(text)
    if args.write:
        from _report import update_section

        update_section("overhead", text)
    return 0


def frameworks_main(args) -> int:
    import tempfile

    frameworks = args.frameworks or list(FRAMEWORKS)
    costs = hook_costs(args.calls, args.baseline)
    with tempfile.TemporaryDirectory() as tmp:
        res = framework_bench(frameworks, args.steps, args.world, Path(tmp))
    command = "python bench/overhead.py --frameworks" + (f" --baseline {args.baseline}" if args.baseline else "")
    lines = ["## Monitor overhead per framework (bench/overhead.py --frameworks)", ""]
    try:
        from _report import stamp

        lines.append(stamp(command))
    except Exception:
        pass
    this = costs["this"]
    lines += [
        f"Process-group hooks ({'ProcessGroup pre/post hooks' if this['hooks'] else 'function wrappers'}): "
        "training-thread cost per collective, one gloo rank (two in lockstep on a loaded 2-core machine "
        "measure the scheduler: ~400 µs a call), 1-element all-reduces, synchronous and "
        f"`async_op=True` + `wait()`; best of 7 rounds of {args.calls:,} calls with the hooks in place and "
        "removed, interleaved in one process, and of 2 processes per tree, alternating (cost = with - without):",
        "",
        "| tree | all_reduce without stepwatch (sync / async) | hook cost per sync call | per async call |",
        "|---|---:|---:|---:|",
    ]
    for label, c in costs.items():
        name = "this checkout" if label == "this" else f"`{label}` (before)"
        lines.append(f"| {name} | {c['off_us']['sync']:.1f} / {c['off_us']['async']:.1f} µs | "
                     f"{c['cost_us']['sync']:.1f} µs | {c['cost_us']['async']:.1f} µs |")
    lines += [
        "",
        f"Jobs of tests/fw_rank.py ({args.world} gloo ranks on CPU, {args.steps} steps, 10 ms idle 'device' time per "
        "step, broker down so the monitor's sender retries in the background; best of 2 interleaved runs; "
        "calls and time per step include the job's setup). Hook cost per step = sync calls x sync cost + "
        "async calls x async cost" + (", for this checkout and the baseline:" if args.baseline else ":"),
        "",
        "| framework | sync calls per step | async calls per step | hook cost per step" +
        (f" (before: {args.baseline})" if args.baseline else "") + " | time per step off | on | steps/s off | on |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for fw, r in res.items():
        calls = r["calls"] or {"sync": 0.0, "async": 0.0}

        def per_step(c):
            return calls["sync"] * c["cost_us"]["sync"] + calls["async"] * c["cost_us"]["async"]

        cost = f"{per_step(this):.0f} µs"
        if args.baseline:
            cost += f" ({per_step(costs[args.baseline]):.0f} µs)"
        lines.append(f"| {fw} | {calls['sync']:.1f} | {calls['async']:.1f} | {cost} | {r['off'] * 1000:.1f} ms | "
                     f"{r['on'] * 1000:.1f} ms | {1 / r['off']:.2f} | {1 / r['on']:.2f} |")
    lines += ["", "The hook cost is paid on the thread issuing each collective (training or autograd thread): "
              "torch calling a Python pre and post hook (~2 µs for two empty hooks on this machine), numbering "
              "the call and a clock read; a synchronous call ends at its `wait()` (no future callback), an "
              "`async_op` one through a done-callback on the backend's thread; intervals are summed at the "
              "step's end. Whole-job times are for short jobs "
              f"({args.steps} steps) and include their setup (process group, model, monitor start): on a shared "
              "machine they swing by tens of percent between runs, in both directions, so they do not measure "
              "the monitor; the per-collective hook cost does."]
    text = "\n".join(lines)
    print(text)
    if args.write:
        from _report import update_section

        update_section("overhead-frameworks", text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
