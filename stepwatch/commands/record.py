"""``stepwatch record``: copy the events and telemetry topics to a JSON Lines recording."""

from __future__ import annotations

import argparse
import sys

from stepwatch.commands.common import _add_kafka_args, _require_bootstrap, _settings
from stepwatch.line_output import LineOutput
from stepwatch.timespec import HELP as TIME_HELP, parse_when


def run(args: argparse.Namespace) -> int:
    import time

    from stepwatch.recording import record

    settings = _settings(args)
    _require_bootstrap(settings)
    now = time.time()  # a duration counts back from when the command started
    since = args.since.at(now) if args.since else None
    until = args.until.at(now) if args.until else None
    out = LineOutput(args.out)
    try:
        try:
            stats = record(settings, out, jobs=args.job, since=since, until=until, arrival=not args.no_arrival)
        finally:
            out.close()
    except OSError as exc:  # a full disk, /dev/full: one line, and the file ends with a whole line
        if exc.filename != out.name:
            raise
        print(f"stepwatch record: {out.name}: {exc.strerror}; stopped after {out.lines_written} complete lines",
              file=sys.stderr)
        return 1
    print(f"stepwatch record: {stats['written']} messages written of {stats['messages']} read "
          f"({stats['skipped']} not events)" + ("" if args.out == "-" else f" to {args.out}"), file=sys.stderr)
    return 0


def add_parser(sub) -> None:
    p = sub.add_parser("record", help="copy the events and telemetry topics to a JSON Lines recording",
                       description="Write what the events and telemetry topics hold now (one message per line, "
                                   "in arrival order) for `stepwatch replay` or `stepwatch publish`. Each line "
                                   "keeps its broker time as \"_arrival\" (Unix seconds).")
    _add_kafka_args(p)
    p.add_argument("-o", "--out", default="-", metavar="FILE", help="where to write ('-': stdout, the default)")
    p.add_argument("--job", action="append", metavar="JOB",
                   help="only this job's events (node telemetry is kept whole); repeatable")
    p.add_argument("--since", type=parse_when, metavar="WHEN", help=f"from this broker time: {TIME_HELP}")
    p.add_argument("--until", type=parse_when, metavar="WHEN", help="up to this broker time (the same forms)")
    p.add_argument("--no-arrival", action="store_true", help="leave out \"_arrival\"")
    p.set_defaults(func=run)
