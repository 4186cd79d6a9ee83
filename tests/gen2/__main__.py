"""Write gen2 recordings to disk, to replay by hand: ``cd tests && python -m gen2 [NAME ...] -o DIR``.

Each scenario becomes ``DIR/NAME.jsonl`` (``stepwatch replay --drain 120 DIR/NAME.jsonl``); with
``--fleet``, one ``DIR/fleet.jsonl`` of all the named arrival-ordered scenarios merged, as the tests replay
them. ``--list`` prints the names with what each should raise.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from .scenarios import catalog
from .transport import merge, write


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gen2", description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help="scenarios (default: all)")
    parser.add_argument("-o", "--out", type=Path, default=Path("."), help="folder to write to")
    parser.add_argument("--fleet", action="store_true", help="one merged recording instead of one per scenario")
    parser.add_argument("--list", action="store_true", help="list the scenarios and exit")
    args = parser.parse_args(argv)
    chosen = [s for s in catalog() if not args.names or s.name in args.names]
    unknown = set(args.names) - {s.name for s in chosen}
    if unknown:
        parser.error(f"no such scenario: {', '.join(sorted(unknown))}")
    if args.list:
        for s in chosen:
            e = s.expect
            who = f" rank {e.rank} on {e.node}" if e.rank is not None else (f" on {e.node}" if e.node else "")
            found = f"  [finding: {', '.join(s.findings)}]" if s.findings else ""
            print(f"{s.name:32} {e.verdict.value}{who}{found}")
        return 0
    args.out.mkdir(parents=True, exist_ok=True)
    if args.fleet:
        chosen = [s for s in chosen if s.arrival]
        path = write(args.out / "fleet.jsonl", merge(s.timed_lines() for s in chosen))
        print(path)
        return 0
    for s in chosen:
        lines = [line for _, line in s.timed_lines()]
        print(write(args.out / f"{s.name}.jsonl", lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
