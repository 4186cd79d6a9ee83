"""The worker's event rate of several commits, side by side on one broker and the same messages.

    .venv/bin/python -m bench.worker_trees 87ff0a1^ e5953a1 HEAD            # two rounds, both consumers
    .venv/bin/python -m bench.worker_trees --rounds 3 --events 400000 HEAD~5 HEAD

Each commit is checked out with ``git archive`` (bench/overhead.py ``checkout``) into a temporary folder;
its worker runs as bench/children/worker_rate.py does (the worker of ``stepwatch worker``, each events
consumer: the aiokafka consumer, the default, and the Faust agent), with PYTHONPATH at the checkout (the
child asserts it imports that tree's engine); the child is this checkout's for every tree, so the harness
(its collector setting, what it times) is the same for all. One broker (stepwatch.localkafka), one set of 256-event
envelopes of a simulated 1,024-rank job; each run gets its own topic (the child's consumer group names are
fixed), and the bare consumer (read + ``decode_message_columns``, bench/consumers_bench.py) reads every topic
once, so each row has its own bare rate measured minutes apart, not hours. Rounds alternate the commits, so
a slow spell of this shared machine falls on all of them. Prints a markdown table (events/s per round and
the ratio of the mean to the bare consumer's mean), and the same ratio in CPU time per event (all the
worker's CPU: every thread of its process and its decoder process, streams/decoder.py, vs the bare
consumer's thread): what the speed costs in CPU.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.common import BATCH, PY, encode, produce, sim_events  # noqa: E402
from bench.consumers_bench import _bare  # noqa: E402
from bench.overhead import checkout  # noqa: E402

MODES = ("aiokafka", "faust")


def _run_worker(tree: Path, bootstrap: str, prefix: str, events: int, out: Path, mode: str) -> dict | None:
    """``tree``'s worker on the topic of ``prefix``: {events, seconds, cpu_seconds} (None: it failed; its log
    says why)."""
    env = dict(os.environ, STEPWATCH_WORKER_CONSUMER=mode, PYTHONPATH=str(tree))
    child = REPO / "bench" / "children" / "worker_rate.py"
    code = ("import sys; sys.path.insert(0, %r); import stepwatch.models.engine as e; "
            "assert e.__file__.startswith(%r), e.__file__; import runpy; sys.argv = sys.argv[1:]; "
            "runpy.run_path(%r, run_name='__main__')") % (str(tree), str(tree), str(child))
    with open(str(out) + ".log", "w") as log:
        subprocess.run([PY, "-c", code, "x", bootstrap, prefix, str(events), str(out)], cwd=tree, env=env,
                       timeout=600, stdout=subprocess.DEVNULL, stderr=log)
    if not out.exists():
        print(f"{tree.name} {mode}: no result\n{Path(str(out) + '.log').read_text()[-1500:]}", file=sys.stderr)
        return None
    return json.loads(out.read_text())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.worker_trees", description=__doc__.split("\n\n")[0])
    ap.add_argument("revs", nargs="+", help="commits to compare (anything git accepts: 87ff0a1^, HEAD, a branch)")
    ap.add_argument("--rounds", type=int, default=2, help="rounds, each running every commit once (default 2)")
    ap.add_argument("--events", type=int, default=400_000, help="events per run (default 400,000)")
    args = ap.parse_args(argv)
    from stepwatch.localkafka import LocalKafka, create_topics

    rates: dict[tuple[str, str], list[float]] = {}
    cpu: dict[tuple[str, str], list[float]] = {}  # CPU seconds per event
    bare: dict[str, list[float]] = {}
    bare_cpu: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory(prefix="stepwatch-trees-") as tmp, LocalKafka(heap="768m") as broker:
        tmpd = Path(tmp)
        trees = {rev: checkout(rev, tmpd / f"tree{i}") for i, rev in enumerate(args.revs)}
        events = sim_events(1024, -(-args.events // 1024))[:args.events]
        messages = encode(events, BATCH)
        for rnd in range(args.rounds):
            for rev, tree in trees.items():
                for mode in MODES:
                    prefix = f"trees{uuid.uuid4().hex[:6]}."
                    create_topics(broker.bootstrap, [prefix + "events"], partitions=1)
                    produce(broker.bootstrap, prefix + "events", messages)
                    r = _run_worker(tree, broker.bootstrap, prefix, args.events, tmpd / f"{prefix}json", mode)
                    if r is not None:
                        rates.setdefault((rev, mode), []).append(r["events"] / r["seconds"])
                        cpu.setdefault((rev, mode), []).append(r.get("cpu_all_seconds", r["cpu_seconds"]) / r["events"])
                    b = asyncio.run(_bare(broker.bootstrap, prefix + "events", len(messages)))
                    bare.setdefault(rev, []).append(b["events"] / b["seconds"])
                    bare_cpu.setdefault(rev, []).append(b["cpu_seconds"] / b["events"])
                print(f"round {rnd + 1}: {rev}: " + ", ".join(
                    f"{m} {rates.get((rev, m), [0])[-1]:,.0f}" for m in MODES) + f" ev/s; bare {bare[rev][-1]:,.0f}",
                      file=sys.stderr, flush=True)
    k = lambda x: f"{x / 1000:,.0f}k"  # noqa: E731
    print("| commit | aiokafka consumer (default) | / bare | / bare, all CPU | Faust agent | / bare | / bare, all CPU "
          "| bare consumer |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for rev in args.revs:
        b, b_cpu = statistics.mean(bare[rev]), statistics.median(bare_cpu[rev])
        cells = []
        for mode in MODES:
            got = rates.get((rev, mode), [])
            cells += [", ".join(k(r) for r in got) + " ev/s" if got else "failed",
                      f"{statistics.mean(got) / b:.2f}x" if got else "",
                      f"{b_cpu / statistics.median(cpu[(rev, mode)]):.2f}x" if got else ""]
        print(f"| {rev} | {' | '.join(cells)} | {', '.join(k(r) for r in bare[rev])} ev/s |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
