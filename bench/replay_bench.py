"""Replay and core cost against the job's size, CPU-seconds (the machine may be shared: not wall time).

- ``replay``: ``stepwatch replay`` of one ``stepwatch simulate --out`` recording (single-event lines) by this
  checkout and by another one (``--base``: a checkout's venv, e.g. a worktree of an older commit), one after
  the other in one run: CPU-seconds of each child process and events per CPU-second.
- ``flatness``: the core's cost per rank-step event (``decode_message_columns`` + ``process_batch`` on batch
  envelopes of 256 events, as the worker runs it) at each job size, its first steps (new ranks) left out.

    .venv/bin/python -m bench.replay_bench --base /work/wt/base/.venv
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
    from stepwatch.models.engine import DetectionEngine
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
    args = ap.parse_args()
    if not args.skip_replay:
        venvs = {"base": args.base} if args.base else {}
        venvs["now"] = Path(PY).parent.parent
        with tempfile.TemporaryDirectory() as tmp:
            print("replay:", replay(venvs, ranks=args.ranks, steps=args.steps, tmp=Path(tmp)), flush=True)
    print("core per event, default gc:", flatness(), flush=True)
    print("core per event, replay's gc:", flatness(tuned_gc=True), flush=True)


if __name__ == "__main__":
    sys.exit(main())
