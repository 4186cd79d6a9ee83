"""Replay and core cost against the job's size, CPU-seconds (the machine may be shared: not wall time).

- ``replay``: ``stepwatch replay`` of one ``stepwatch simulate --out`` recording (single-event lines) by this
  checkout and by another one (``--base``: a checkout's venv, e.g. a worktree of an older commit), one after
  the other in one run: CPU-seconds of each child process and events per CPU-second.
- ``fleet`` (``--fleet``): issue 41's replay at fleet speed: single-event lines with ``_arrival`` (one large job,
  mid-sized jobs, 300 small jobs), step batch envelopes and node-telemetry envelopes, each replayed by replay's
  road before (a read per arrival) and now (lines of different arrivals in one column batch), one after the
  other in one process: CPU-seconds, events per CPU-second, and whether the alerts are byte-identical.
- ``flatness``: the core's cost per rank-step event (``decode_message_columns`` + ``process_batch`` on batch
  envelopes of 256 events, as the worker runs it) at each job size, its first steps (new ranks) left out.

- ``telemetry`` (``--telemetry-base CHECKOUT``): the node-telemetry recording alone, replayed by another checkout
  (e.g. a worktree of main) and by this one in child processes taking turns: best CPU-seconds of each, and whether
  their alerts are byte-identical. ``--telemetry-parts``: where a link sample's CPU goes in this checkout (the
  column decode, the node rules' two parts, the engine call, the replay with and without the node rules).

    .venv/bin/python -m bench.replay_bench --base /work/wt/base/.venv
    .venv/bin/python -m bench.replay_bench --telemetry-base /work/wt/base
    .venv/bin/python -m bench.replay_bench --telemetry-parts
    .venv/bin/python -m bench.replay_bench --fleet --base-tree /work/wt/base [--only "300 jobs"]
"""

from __future__ import annotations

import argparse
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.common import BATCH, PY


def _child_cpu(cmd: list[str], out) -> float:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(cmd, stdout=out, stderr=subprocess.DEVNULL, check=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)


def replay(venvs: dict[str, Path], *, ranks: int = 16384, steps: int = 60, tmp: Path) -> dict:
    rec = tmp / f"sim-{ranks}x{steps}.jsonl"
    subprocess.run([str(Path(PY).parent / "stepwatch"), "simulate", "--ranks", str(ranks), "--steps", str(steps),
                    "--scenario", "straggler", "--seed", "7", "--out", str(rec)], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    events = sum(1 for _ in rec.open("rb"))
    out = {"ranks": ranks, "steps": steps, "events": events}
    alerts = {}
    for name, venv in venvs.items():
        path = tmp / f"alerts-{name}.jsonl"
        with path.open("wb") as f:
            cpu = _child_cpu([str(venv / "bin" / "stepwatch"), "replay", str(rec)], f)
        alerts[name] = [line for line in path.read_bytes().splitlines()]
        out[f"{name}_cpu_s"] = round(cpu, 1)
        out[f"{name}_events_per_cpu_s"] = round(events / cpu)
        out[f"{name}_alerts"] = len(alerts[name])
    return out


# -- issue 41 item 5: replay at fleet speed, the road before and now side by side ----------------------

T0 = 1_764_000_000.0


def _step(job: str, rank: int, step: int, ts: float, took: float, ranks: int) -> dict:
    return {"v": 1, "kind": "step", "job": job, "rank": rank, "step": step, "ts": round(ts, 6),
            "step_time": round(took, 6), "node": f"{job}-n{rank // 8:03d}", "gpu": rank % 8, "world_size": ranks}


def fleet_single(jobs: int, ranks: int, seconds: float, seed: int = 1) -> list[bytes]:
    """``jobs`` jobs of ``ranks`` ranks, one step event a message, as ``stepwatch record`` writes them: each line with
    its broker arrival (a jittered lag), in arrival order; one rank in ten jobs 1.4x slower from step 100."""
    import heapq
    import random

    import orjson

    rng = random.Random(seed)
    streams = []
    for j in range(jobs):
        name, step_time, slow = f"job-{j:04d}", rng.uniform(0.7, 1.1), (rng.randrange(ranks) if j % 10 == 0 else None)
        t, step, out = T0 + rng.uniform(0, 1), 0, []
        while t < T0 + seconds:
            for r in range(ranks):
                took = step_time * (1.4 if r == slow and step >= 100 else 1.0) * (1 + rng.gauss(0, 0.01))
                out.append((t + took - step_time + 0.05 + rng.random() * 0.1, _step(name, r, step, t, took, ranks)))
            t += step_time * (1.4 if slow is not None and step >= 100 else 1.0)
            step += 1
        streams.append(out)
    return [orjson.dumps(dict(e, _arrival=round(at, 6))) for at, e in heapq.merge(*streams, key=lambda x: x[0])]


def fleet_batches(ranks: int, steps: int, per_envelope: int = 8, seed: int = 2) -> list[bytes]:
    """One job of ``ranks`` ranks whose rank monitors send each step's events of ``per_envelope`` ranks (a node) in
    one batch envelope, each line with its arrival."""
    import random

    import orjson

    rng = random.Random(seed)
    out, t = [], T0
    for step in range(steps):
        for lo in range(0, ranks, per_envelope):
            events = [_step("big", r, step, t + rng.uniform(-0.01, 0.01), 1.0 + rng.gauss(0, 0.01), ranks)
                      for r in range(lo, min(ranks, lo + per_envelope))]
            out.append(orjson.dumps({"v": 1, "kind": "batch", "events": events,
                                     "_arrival": round(t + 0.05 + rng.random() * 0.05, 6)}))
        t += 1.0
    return out


def fleet_telemetry(nodes: int, seconds: float, ports: int = 4, seed: int = 3, faults: bool = False) -> list[bytes]:
    """Node agents' envelopes: every 10 s each node sends its ``ports`` InfiniBand ports' link samples (cumulative
    counters) in one batch envelope, with its arrival. ``faults``: from the middle on, a few ports log symbol
    errors, one goes down and one's traffic collapses (alerts to compare, byte for byte)."""
    import random

    import orjson

    rng = random.Random(seed)
    counters = {(n, p): [rng.randrange(10**12), rng.randrange(10**12)] for n in range(nodes) for p in range(ports)}
    errs = [0] * nodes
    out, t = [], T0
    while t < T0 + seconds:
        for n in range(nodes):
            events = []
            for p in range(ports):
                c = counters[n, p]
                late = faults and t >= T0 + seconds / 2 and p == 0
                share = 0.05 if late and n % 50 == 7 else 1.0  # a collapse
                c[0] += int(4e10 * share * rng.uniform(0.9, 1.1))
                c[1] += int(4e10 * share * rng.uniform(0.9, 1.1))
                if late and n % 50 == 3:
                    errs[n] += rng.randrange(1, 40)  # symbol errors
                down = late and n % 50 == 11 and t >= T0 + seconds * 0.75
                events.append({"v": 1, "kind": "link", "node": f"srv-{n:03d}", "ts": round(t + rng.random(), 6),
                               "device": f"mlx5_{p}", "port": 1, "state": "DOWN" if down else "ACTIVE",
                               "phys_state": "Polling" if down else "LinkUp",
                               "rate": 400.0, "link_layer": "InfiniBand",
                               "counters": {"port_xmit_data": c[0], "port_rcv_data": c[1],
                                            "symbol_error": errs[n] if p == 0 else 0,
                                            "link_error_recovery": 0, "link_downed": int(down), "port_rcv_errors": 0}})
            out.append(orjson.dumps({"v": 1, "kind": "batch", "events": events, "_arrival": round(t + 1.2, 6)}))
        t += 10.0
    return out


def side_by_side(name: str, lines: list[bytes], tmp: Path) -> dict:
    """``stepwatch replay``'s function on ``lines``, by the road before (a read per arrival) and now, one after the
    other in this process: CPU-seconds, events per CPU-second, and whether the alerts are byte-identical."""
    import io

    from stepwatch.config import Settings
    from stepwatch.recording import merge_recorded, replay

    path = tmp / f"{name}.jsonl"
    path.write_bytes(b"".join(line + b"\n" for line in lines))
    row: dict = {"recording": name, "lines": len(lines)}
    outputs = {}
    for road, fast in (("before", False), ("now", True)):
        out = io.StringIO()
        started = time.process_time()
        stats = replay(merge_recorded([str(path)], blocks=fast), Settings.from_env(), drain=60.0, out=out,
                       across_arrivals=fast)
        cpu = time.process_time() - started
        outputs[road] = out.getvalue()
        row.update({"events": stats["events"], "alerts": stats["alerts"], f"{road}_cpu_s": round(cpu, 2),
                    f"{road}_events_per_cpu_s": round(stats["events"] / cpu)})
    row["identical"] = outputs["before"] == outputs["now"]
    row["speedup"] = round(row["before_cpu_s"] / row["now_cpu_s"], 2)
    return row


FLEET = (
    ("single-event, 1 job x 1,024 ranks", lambda scale: fleet_single(1, 1024, 60 * scale)),
    ("single-event, 30 jobs x 64 ranks", lambda scale: fleet_single(30, 64, 60 * scale)),
    ("single-event, 300 jobs x 4 ranks", lambda scale: fleet_single(300, 4, 40 * scale)),
    ("step batch envelopes (8 a node), 4,096 ranks", lambda scale: fleet_batches(4096, int(60 * scale))),
    ("node telemetry envelopes, 253 nodes x 4 ports", lambda scale: fleet_telemetry(253, 600 * scale)))


def fleet(scale: float = 1.0, only: str | None = None) -> list[dict]:
    """The issue's three shapes of recording (sized by ``scale``; ``only``: those whose name contains it), each
    replayed both ways."""
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        side_by_side("warm-up", fleet_single(2, 4, 30), Path(tmp))  # imports and first calls out of the figures
        for name, make in FLEET:
            if only is None or only in name:
                rows.append(side_by_side(name, make(scale), Path(tmp)))
                print("fleet:", rows[-1], flush=True)
    return rows


#: One replay in a child process by a checkout (``--base``: its PYTHONPATH, so its own models and recording.py; only
#: ``stepwatch.recording.replay`` is used, which every checkout of the fleet road has), after a warm-up replay; the
#: recording read as that checkout's ``stepwatch replay`` reads it (by blocks where its ``merge_recorded`` can).
_FLEET_CHILD = """
import inspect, io, json, sys, time
from stepwatch.config import Settings
from stepwatch.recording import merge_recorded, replay
warm, path, out_path = sys.argv[1:4]
kw = {"blocks": True} if "blocks" in inspect.signature(merge_recorded).parameters else {}
replay(merge_recorded([warm], **kw), Settings.from_env(), drain=60.0, out=io.StringIO())
out = io.StringIO()
started = time.process_time()
stats = replay(merge_recorded([path], **kw), Settings.from_env(), drain=60.0, out=out)
cpu = time.process_time() - started
open(out_path, "w").write(out.getvalue())
print(json.dumps({"cpu": cpu, "events": stats["events"], "alerts": stats["alerts"]}))
"""


def fleet_against(base: Path, scale: float = 1.0, only: str | None = None, rounds: int = 2) -> list[dict]:
    """Each fleet recording replayed by ``base`` (another checkout, e.g. a worktree of main) and by this one, in
    child processes, alternately, ``rounds`` times each: the least CPU-seconds of each, and whether the alerts
    are byte-identical."""
    import json
    import os

    here = Path(__file__).resolve().parent.parent
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        warm = Path(tmp) / "warm.jsonl"
        warm.write_bytes(b"".join(line + b"\n" for line in fleet_single(2, 4, 30)))
        for name, make in FLEET:
            if only is not None and only not in name:
                continue
            path = Path(tmp) / "recording.jsonl"
            path.write_bytes(b"".join(line + b"\n" for line in make(scale)))
            row: dict = {"recording": name}
            outputs: dict[str, str] = {}
            for _ in range(rounds):
                for road, tree in (("base", base), ("now", here)):
                    out = Path(tmp) / f"{road}.out"
                    env = dict(os.environ, PYTHONPATH=str(tree))
                    done = subprocess.run([PY, "-c", _FLEET_CHILD, str(warm), str(path), str(out)], cwd=tree,
                                          env=env, check=True, capture_output=True, text=True)
                    got = json.loads(done.stdout.strip().splitlines()[-1])
                    outputs[road] = out.read_text()
                    row["events"], row[f"{road}_alerts"] = got["events"], got["alerts"]
                    row[f"{road}_cpu_s"] = round(min(got["cpu"], row.get(f"{road}_cpu_s", float("inf"))), 2)
            for road in ("base", "now"):
                row[f"{road}_events_per_cpu_s"] = round(row["events"] / row[f"{road}_cpu_s"])
            row["speedup"] = round(row["base_cpu_s"] / row["now_cpu_s"], 2)
            row["identical"] = outputs["base"] == outputs["now"]
            rows.append(row)
            print("fleet:", row, flush=True)
    return rows


#: One replay of a recording in a child process of another checkout (its code on the path first): the CPU-seconds of
#: the replay call, its events and alerts, and a digest of its output (the alerts, byte for byte). (Its own name: it
#: once shadowed ``_FLEET_CHILD`` above, and ``--fleet --base-tree`` ran this one with the other's arguments.)
_TELEMETRY_CHILD = """
import hashlib, io, json, sys, time
from stepwatch.config import Settings
from stepwatch.recording import merge_recorded, replay
replay(merge_recorded([sys.argv[2]]), Settings.from_env(), drain=60.0, out=io.StringIO(), across_arrivals=True)
out = io.StringIO()
started = time.process_time()
stats = replay(merge_recorded([sys.argv[1]]), Settings.from_env(), drain=60.0, out=out, across_arrivals=True)
cpu = time.process_time() - started
print(json.dumps({"cpu_s": cpu, "events": stats["events"], "alerts": stats["alerts"],
                  "digest": hashlib.sha256(out.getvalue().encode()).hexdigest()}))
"""


def telemetry_checkouts(base: Path, *, rounds: int = 3, scale: float = 1.0) -> dict:
    """The node-telemetry recording replayed (the road now, ``across_arrivals``) by ``base`` (a checkout, e.g. a
    worktree of main) and by this checkout, in child processes taking turns, ``rounds`` times each: the best
    CPU-seconds of each, events per CPU-second, and whether their alerts are byte-identical."""
    import json
    import os

    here = Path(__file__).resolve().parents[1]
    with tempfile.TemporaryDirectory() as tmp:
        rec, head = Path(tmp) / "telemetry.jsonl", Path(tmp) / "warm-up.jsonl"
        lines = fleet_telemetry(253, 600 * scale, faults=True)
        rec.write_bytes(b"".join(line + b"\n" for line in lines))
        head.write_bytes(b"".join(line + b"\n" for line in lines[:2000]))  # imports and first calls out of the figures
        runs: dict[str, list[dict]] = {"base": [], "now": []}
        for _ in range(rounds):
            for name, checkout in (("base", base.resolve()), ("now", here)):
                env = {**os.environ, "PYTHONPATH": str(checkout)}
                done = subprocess.run([PY, "-c", _TELEMETRY_CHILD, str(rec), str(head)], cwd=checkout, env=env,
                                      check=True, capture_output=True, text=True)
                runs[name].append(json.loads(done.stdout.strip().splitlines()[-1]))
    row: dict = {"recording": "node telemetry envelopes, 253 nodes x 4 ports", "events": runs["now"][0]["events"],
                 "alerts": runs["now"][0]["alerts"]}
    for name, got in runs.items():
        cpu = min(r["cpu_s"] for r in got)
        row.update({f"{name}_cpu_s": round(cpu, 2), f"{name}_events_per_cpu_s": round(got[0]["events"] / cpu)})
    row["identical"] = len({r["digest"] for rs in runs.values() for r in rs}) == 1
    row["speedup"] = round(row["base_cpu_s"] / row["now_cpu_s"], 2)
    return row


def telemetry_parts(rounds: int = 4) -> dict:
    """Where a link sample's CPU goes in this checkout, in process, best of ``rounds`` (microseconds per sample): the
    column decode of the recording's envelopes merged as a replay merges them (runs of 1,024 samples), the node rules'
    two parts (the tracker, the fabric history with its baselines), the whole engine call (the rules, the hub, the
    outlet), and the whole replay with the two parts of the node rules made free (what is left around them)."""
    import gc
    import io

    import orjson

    from stepwatch.config import Settings
    from stepwatch.models.detection import DetectionEngine
    from stepwatch.models.telemetry.fabric import FabricHistory
    from stepwatch.models.telemetry.telemetry_tracker import TelemetryTracker
    from stepwatch.models.wire.telemetry_columns import link_columns
    from stepwatch.recording import merge_recorded, replay

    lines = fleet_telemetry(253, 600, faults=True)
    samples = [e for line in lines for e in orjson.loads(line)["events"]]
    runs = [samples[i:i + 1024] for i in range(0, len(samples), 1024)]

    def timed(part: str) -> float:
        batches = [link_columns(r) for r in runs]
        engine = DetectionEngine()
        tracker, history = engine.telemetry.tracker, engine.telemetry.fabric.history
        gc.collect()
        started = time.process_time()
        if part == "decode":
            for r in runs:
                link_columns(r)
        elif part == "engine":
            for b in batches:
                engine.process_batch(b)
        for b in batches if part in ("tracker", "fabric") else ():
            if part == "fabric":  # (a whole batch in one call, as the hub takes it)
                history.update_links(b, 0, len(b))
                continue
            at = 0
            while at < len(b):
                _, at = tracker.update_links(b, at, len(b), [])
        return time.process_time() - started

    out = {part: round(min(timed(part) for _ in range(rounds)) / len(samples) * 1e6, 2)
           for part in ("decode", "tracker", "fabric", "engine")}
    with tempfile.TemporaryDirectory() as tmp:
        rec = Path(tmp) / "telemetry.jsonl"
        rec.write_bytes(b"".join(line + b"\n" for line in lines))

        def whole() -> float:
            started = time.process_time()
            replay(merge_recorded([str(rec)]), Settings.from_env(), drain=60.0, out=io.StringIO(), across_arrivals=True)
            return time.process_time() - started

        whole()  # imports and first calls
        out["replay"] = round(min(whole() for _ in range(2)) / len(samples) * 1e6, 2)
        saved = TelemetryTracker.update_links, FabricHistory.update_links
        TelemetryTracker.update_links = lambda self, cols, lo, hi, refused: ([], hi)
        FabricHistory.update_links = lambda self, cols, lo, hi: None
        try:
            out["replay_rules_free"] = round(min(whole() for _ in range(2)) / len(samples) * 1e6, 2)
        finally:
            TelemetryTracker.update_links, FabricHistory.update_links = saved
    return {"us_per_sample": out, "samples": len(samples)}


def flatness(sizes=(1024, 65536), *, steps: int = 8, warm: int = 2, tuned_gc: bool = False) -> dict:
    """``tuned_gc``: with the collector's threshold ``stepwatch replay`` sets (``recording.tune_gc``)."""
    import gc

    from stepwatch.recording import tune_gc

    saved = gc.get_threshold()
    if tuned_gc:
        tune_gc()
    try:
        return _flatness(sizes, steps=steps, warm=warm)
    finally:
        gc.set_threshold(*saved)


def _flatness(sizes, *, steps: int, warm: int) -> dict:
    from stepwatch.models.detection import DetectionEngine
    from stepwatch.models.wire.events import encode_events
    from stepwatch.models.wire.step_columns import decode_message_columns
    from stepwatch.sim.simulator import ClusterSimulator, SimulationSpec

    out = {}
    for ranks in sizes:
        spec = SimulationSpec(job=f"bench-{ranks}", ranks=ranks, steps=steps, seed=1, checkpoint_every=0,
                              warmup_steps=0)
        msgs, chunk = [], []
        for e in ClusterSimulator(spec).events():
            if e["kind"] == "step":
                chunk.append(e)
                if len(chunk) == BATCH:
                    msgs.append(encode_events(chunk))
                    chunk = []
        if chunk:
            msgs.append(encode_events(chunk))
        engine = DetectionEngine()
        head = warm * ranks // BATCH  # the first steps add the ranks: not the steady cost
        for m in msgs[:head]:
            engine.process_batch(decode_message_columns(m)[0])
        n = sum(len(decode_message_columns(m)[0]) for m in msgs[head:])
        t = time.process_time()
        for m in msgs[head:]:
            engine.process_batch(decode_message_columns(m)[0])
        out[f"us_per_event_{ranks}"] = round((time.process_time() - t) / n * 1e6, 2)
    first, last = sizes[0], sizes[-1]
    out["ratio"] = round(out[f"us_per_event_{last}"] / out[f"us_per_event_{first}"], 2)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base", type=Path, help="another checkout's venv to replay with too")
    ap.add_argument("--ranks", type=int, default=16384)
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--skip-replay", action="store_true")
    ap.add_argument("--fleet", action="store_true", help="only the fleet-speed recordings, before and now (issue 41)")
    ap.add_argument("--scale", type=float, default=1.0, help="the fleet recordings' length, x")
    ap.add_argument("--telemetry-base", type=Path, metavar="CHECKOUT",
                    help="only the node-telemetry recording, replayed by CHECKOUT (e.g. a worktree of main) and by "
                         "this checkout, taking turns (issue 41 item 5)")
    ap.add_argument("--rounds", type=int, default=3,
                    help="with --telemetry-base or --base-tree: replays of each, the best counts")
    ap.add_argument("--telemetry-parts", action="store_true",
                    help="only where a link sample's CPU goes in this checkout (decode, node rules, the rest)")
    ap.add_argument("--only", help="--fleet: only the recordings whose name contains this")
    ap.add_argument("--base-tree", type=Path, help="--fleet: another checkout (a worktree of main) to replay each "
                                                    "recording with too, side by side, in child processes")
    args = ap.parse_args()
    if args.telemetry_parts:
        print("telemetry parts:", telemetry_parts(), flush=True)
        return
    if args.telemetry_base:
        print("telemetry:", telemetry_checkouts(args.telemetry_base, rounds=args.rounds, scale=args.scale), flush=True)
        return
    if args.fleet:
        if args.base_tree:
            fleet_against(args.base_tree, args.scale, args.only, rounds=args.rounds)
        else:
            fleet(args.scale, args.only)
        return
    if not args.skip_replay:
        venvs = {"base": args.base} if args.base else {}
        venvs["now"] = Path(PY).parent.parent
        with tempfile.TemporaryDirectory() as tmp:
            print("replay:", replay(venvs, ranks=args.ranks, steps=args.steps, tmp=Path(tmp)), flush=True)
    print("core per event, default gc:", flatness(), flush=True)
    print("core per event, replay's gc:", flatness(tuned_gc=True), flush=True)


if __name__ == "__main__":
    sys.exit(main())
