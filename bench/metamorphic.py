"""The metamorphic grid (issue 39 item 8): every base recording x every variant, invariants held or broken.

    .venv/bin/python bench/metamorphic.py                       # whole grid, table into BENCHMARKS.md
    .venv/bin/python bench/metamorphic.py --max-ranks 16 --budget 900 -j 2
    .venv/bin/python bench/metamorphic.py --only gen2:hang-teardown --no-write -v
    .venv/bin/python bench/metamorphic.py --draw-sample         # the CI sample (tests/metamorphic/grid.py SAMPLE)

The harness is tests/metamorphic/ (transformations, verdict, invariants, the CI sample): each base is a
scenario of the library (``stepwatch scenarios``) or of a test generator (tests/gen2, tests/gen3,
tests/recordings.py), replayed through the functions ``stepwatch replay`` runs; each variant is held to
its base's verdict. With ``--budget`` no new base is started once that many seconds have passed; the
table says what ran. Writes the ``metamorphic`` section of BENCHMARKS.md unless ``--no-write``.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import sys
import time
from collections import Counter, defaultdict
from itertools import zip_longest
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
for path in (REPO, REPO / "bench"):
    if str(path) not in sys.path:
        sys.path.append(str(path))
sys.path.insert(0, str(REPO / "tests"))  # first: ``metamorphic`` is tests/metamorphic/, not this script


def _one_source(task: tuple[str, list[str], float]) -> list[dict]:
    """Replay one base and its variants (one process: the base is replayed once); [] past the deadline."""
    from metamorphic.grid import base, run

    source, variants, deadline = task
    if time.time() > deadline:
        return []
    out = []
    try:
        b = base(source)
    except Exception as exc:  # a base that cannot be built or replayed is a finding, not a crash of the bench
        return [{"source": source, "variant": "(base)", "applies": True, "broken": {"base": f"{type(exc).__name__}: {exc}"}}]
    out.append({"source": source, "variant": "(base)", "applies": True, "verdict": b.verdict.describe(),
                "broken": {"warning_first": f"{len(b.verdict.critical_first)} hang(s) critical first"}
                if b.verdict.critical_first else {}})
    for name in variants:
        started = time.process_time()
        try:
            o = run(source, name)
        except Exception as exc:
            out.append({"source": source, "variant": name, "applies": True,
                        "broken": {"crash": f"{type(exc).__name__}: {exc}"}})
            continue
        out.append({"source": source, "variant": name, "applies": o.got is not None, "broken": o.broken,
                    "verdict": o.got.describe() if o.got else None, "cpu": time.process_time() - started})
    return out


def table(results: list[dict], command: str, stamp_text: str, summary: str) -> str:
    """The BENCHMARKS.md section: variants x invariants broken, then every failing pair with its known cause."""
    from metamorphic.grid import VARIANTS, explain
    from metamorphic.invariants import INVARIANTS

    rows = defaultdict(list)
    for r in results:
        if r["applies"]:
            rows[r["variant"]].append(r)
    names = ["(base)"] + [v for v in VARIANTS if v in rows]
    lines = ["## Metamorphic grid (`bench/metamorphic.py`, issue 39 item 8)", "", stamp_text.rstrip(), "",
             "Each variant of a base recording must keep the base's verdict (tests/metamorphic/invariants.py): "
             "the same alert types (none lost, none new), the same culprit ranks and node, the same first cause "
             "category, a first alert within 2x the base's delay scaled with the step time (+10 steps, +30 s for a "
             "hang), and no more hangs critical before they warned than in the base. A cell counts the pairs where that invariant broke; "
             "*held*: pairs where every invariant held. The base row: the base's own hangs that were critical "
             "first. Failures are named below the table; the CI sample (tests/metamorphic/test_metamorphic.py) "
             "marks its known ones `xfail(strict=True)` with the issue item that fixes them.", "", summary, "",
             "| variant | family | pairs | held | " + " | ".join(INVARIANTS) + " | other |",
             "|---|---|---:|---:|" + "---:|" * len(INVARIANTS) + "---:|"]
    failures = []
    for name in names:
        rs = rows.get(name, [])
        if not rs:
            continue
        broken = Counter(k for r in rs for k in r["broken"])
        held = sum(1 for r in rs if not r["broken"])
        family = VARIANTS[name].family if name in VARIANTS else "-"
        other = sum(v for k, v in broken.items() if k not in INVARIANTS)
        lines.append(f"| {name} | {family} | {len(rs)} | {held} | "
                     + " | ".join(str(broken.get(k, 0) or "") for k in INVARIANTS) + f" | {other or ''} |")
        for r in rs:
            if r["broken"]:
                cause = explain(name, r["broken"]) if name != "(base)" else explain("", r["broken"])
                failures.append(f"- `{r['source']}` / {name}: " + "; ".join(f"{k}: {v}" for k, v in r["broken"].items())
                                + f" (cause: {cause or 'not analysed yet'})")
    lines += ["", f"<details><summary>{len(failures)} failing pairs</summary>", "", *failures, "", "</details>"]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", nargs="*", help="these sources (names as 'library:NAME', 'gen2:NAME', ...; a prefix "
                                             "ending in ':' takes a whole generator)")
    ap.add_argument("--max-ranks", type=int, default=1 << 30, help="bases of at most this many ranks")
    ap.add_argument("--families", nargs="*", help="only these variant families (e.g. pause 'time scale')")
    ap.add_argument("--max-world", type=int, default=16_384, help="world-size variants of at most this many ranks")
    ap.add_argument("--budget", type=float, default=0.0, help="seconds after which no new base is started (0: none)")
    ap.add_argument("-j", "--jobs", type=int, default=1)
    ap.add_argument("--no-write", action="store_true")
    ap.add_argument("-v", "--verbose", action="store_true")
    ap.add_argument("--draw-sample", action="store_true", help="print the CI sample drawn from the small bases")
    ap.add_argument("--json", help="also write every pair's result (source, variant, applies, broken, verdict) here")
    ap.add_argument("--from-json", help="no replay: the table of a run's --json file (its summary line given with "
                                        "--summary), e.g. after the causes in tests/metamorphic/grid.py changed")
    ap.add_argument("--summary", default="", help="with --from-json: the run's summary line")
    args = ap.parse_args(argv)

    from metamorphic.grid import SOURCES, draw_sample, full

    pairs = full(args.max_ranks, args.max_world)
    if args.only:
        pairs = [p for p in pairs if any(p[0] == o or (o.endswith(":") and p[0].startswith(o)) for o in args.only)]
    if args.families:
        from metamorphic.grid import VARIANTS

        pairs = [p for p in pairs if VARIANTS[p[1]].family in args.families]
    if args.draw_sample:
        print(draw_sample(sorted({s for s, _ in pairs})))
        return 0
    if args.from_json:
        from _report import stamp

        command = f"bench/metamorphic.py --from-json {args.from_json} (the runs its summary names)"
        text = table(json.loads(Path(args.from_json).read_text()), command, stamp(command), args.summary)
        print(text)
        if not args.no_write:
            from _report import update_section

            update_section("metamorphic", text)
        return 0
    by_source: dict[str, list[str]] = defaultdict(list)
    for s, v in pairs:
        by_source[s].append(v)
    started = time.time()
    deadline = started + args.budget if args.budget else float("inf")
    # Round-robin over the generators: a budget cut leaves each with some bases run.
    per_generator: dict[str, list[str]] = defaultdict(list)
    for s in by_source:
        per_generator[s.split(":")[0]].append(s)
    order = [s for group in zip_longest(*per_generator.values()) for s in group if s is not None]
    tasks = [(s, by_source[s], deadline) for s in order]
    results: list[dict] = []
    with multiprocessing.Pool(args.jobs) if args.jobs > 1 else _Serial() as pool:
        for out in pool.imap_unordered(_one_source, tasks):
            results.extend(out)
            if args.verbose:
                for r in out:
                    print(f"{r['source']} / {r['variant']}: {'ok' if not r['broken'] else r['broken']}", file=sys.stderr)
    wall = time.time() - started
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    ran = {r["source"] for r in results}
    applied = sum(1 for r in results if r["applies"] and r["variant"] != "(base)")
    held = sum(1 for r in results if r["applies"] and r["variant"] != "(base)" and not r["broken"])
    generators = Counter(s.split(":")[0] for s in ran)
    summary = (f"Ran {len(ran)} of {len(by_source)} bases ({', '.join(f'{g} {n}' for g, n in sorted(generators.items()))}; "
               f"of {len(SOURCES)} in all: bases over {args.max_ranks if args.max_ranks < 1 << 30 else 'no'} ranks "
               f"left out, world sizes up to {args.max_world}) and {applied} variants that apply to them: "
               f"{held} held every invariant. {wall:.0f} s wall, {args.jobs} process(es)"
               + (f", budget {args.budget:.0f} s" if args.budget else "") + ".")
    print(summary)
    from _report import stamp

    command = " ".join(["bench/metamorphic.py", *(argv if argv is not None else sys.argv[1:])])
    text = table(results, command, stamp(command), summary)
    print(text)
    if not args.no_write:
        from _report import update_section

        update_section("metamorphic", text)
        print("updated BENCHMARKS.md", file=sys.stderr)
    return 0


class _Serial:
    """``multiprocessing.Pool``'s ``imap_unordered`` in this process (``-j 1``: no child to start)."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def imap_unordered(self, fn, items):
        return map(fn, items)


if __name__ == "__main__":
    raise SystemExit(main())
