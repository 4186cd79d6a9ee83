"""Several recordings merged by time (``stepwatch replay``/``publish`` of one file per rank or node), CPU-seconds
(the machine may be shared: not wall time).

A ``stepwatch simulate --out`` recording is split by rank into ``--files`` files (rank blocks, as one file per
host), then, alternating ``--rounds`` times:

- ``parsed once``: ``recording.merge_recorded`` up to the parsed line the pipeline takes (what both commands do);
- ``parsed twice``: the merge's lines as bytes (``merge_lines``), each parsed again where it is used (what they did
  before merge_recorded: a parse for the time, a parse for the content; the old per-line time code was dearer);
- ``replay``: the whole ``stepwatch replay`` of the files (a child process).

    .venv/bin/python -m bench.merge_bench --ranks 1024 --steps 300 --files 16
"""

from __future__ import annotations

import argparse
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import orjson

from bench.common import PY


def split(rec: Path, files: int, ranks: int, tmp: Path) -> list[str]:
    """Each block of ranks' lines (a batch split per block), in the recording's order; job-wide lines go with rank 0."""
    block = max(1, -(-ranks // files))
    parts: dict[int, list[bytes]] = {}
    for line in rec.open("rb"):
        value = orjson.loads(line)
        events = value["events"] if value.get("kind") == "batch" else [value]
        by: dict[int, list[dict]] = {}
        for e in events:
            by.setdefault((e["rank"] if type(e.get("rank")) is int else 0) // block, []).append(e)
        for k, evs in by.items():
            parts.setdefault(k, []).append(orjson.dumps(dict(value, events=evs)) if value.get("kind") == "batch"
                                           else orjson.dumps(evs[0]))
    paths = []
    for k, lines in sorted(parts.items()):
        path = tmp / f"part{k}.jsonl"
        path.write_bytes(b"\n".join(lines) + b"\n")
        paths.append(str(path))
    return paths


def _parsed(merge, paths: list[str]) -> int:
    """Lines of ``merge(paths)`` each taken to the parsed line the pipeline takes (a parsed one as it is)."""
    from stepwatch.models.sources import _recorded

    n = 0
    for line in merge(paths):
        _recorded(line)
        n += 1
    return n


def _once(paths: list[str]) -> int:
    from stepwatch.recording import merge_recorded

    return _parsed(merge_recorded, paths)


def _twice(paths: list[str]) -> int:
    from stepwatch.recording import merge_lines

    return _parsed(merge_lines, paths)


def _child_cpu(cmd: list[str]) -> float:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--ranks", type=int, default=1024)
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--files", type=int, default=16, help="rank blocks, one file each")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--no-replay", action="store_true", help="only the merge (no child replay)")
    args = p.parse_args(argv)
    import stepwatch.models.sources  # noqa: F401  (the detection core loaded before any timing)
    import stepwatch.recording  # noqa: F401

    stepwatch = str(Path(PY).parent / "stepwatch")
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        rec = tmp / "sim.jsonl"
        subprocess.run([stepwatch, "simulate", "--ranks", str(args.ranks), "--steps", str(args.steps), "--scenario",
                        "straggler", "--seed", "7", "--start-time", "1700000000", "--out", str(rec)], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        paths = split(rec, args.files, args.ranks, tmp)
        print(f"{args.ranks} ranks x {args.steps} steps in {len(paths)} files", flush=True)
        for _ in range(args.rounds):
            for name, fn in (("parsed twice", _twice), ("parsed once", _once)):
                t = time.process_time()
                lines = fn(paths)
                print(f"{name}: {time.process_time() - t:.2f} CPU-s, {lines} lines", flush=True)
            if not args.no_replay:
                print(f"replay: {_child_cpu([stepwatch, 'replay', *paths]):.2f} CPU-s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
