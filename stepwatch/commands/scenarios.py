"""``stepwatch scenarios``: list the labelled scenario suite, or write its recordings and labels."""

from __future__ import annotations

import argparse
import sys


def run(args: argparse.Namespace) -> int:
    from stepwatch.sim import scenarios

    if args.write is None:
        for row in scenarios.describe():
            problems = ", ".join(row["problems"]) or "healthy"
            print(f"{row['name']:32} {row['ranks']:>6} ranks  {problems:40} {row['description']}")
        return 0
    names = args.name or scenarios.names()
    for name in names:
        try:
            recording, labels = scenarios.write(scenarios.get(name), args.write)
        except KeyError as exc:
            raise SystemExit(f"stepwatch scenarios: {exc.args[0]}") from None
        print(f"stepwatch scenarios: wrote {recording} and {labels.name}", file=sys.stderr)
    return 0


def add_parser(sub) -> None:
    p = sub.add_parser("scenarios", help="list the labelled scenario suite, or write recordings with their labels",
                       description="The scenario library of stepwatch/sim/scenarios.py (used by bench/quality.py). "
                                   "Without --write: list it. With --write DIR: write NAME.jsonl and "
                                   "NAME.labels.json (ground truth: problem type, ranks, nodes, onset, end).")
    p.add_argument("name", nargs="*", help="scenario name(s) to write (default: all)")
    p.add_argument("--write", metavar="DIR", help="write recordings and labels into DIR")
    p.set_defaults(func=run)
