"""``stepwatch replay``: run the detectors offline over recordings, print the alerts."""

from __future__ import annotations

import argparse
import sys
import time

from stepwatch.commands.common import files_precheck
from stepwatch.timespec import parse_when


def run(args: argparse.Namespace) -> int:
    from stepwatch.config import Settings
    from stepwatch.recording import merge_recorded, replay

    settings = Settings.from_env()
    stats: dict = {"events": 0, "rejected": 0, "alerts": 0}
    started = time.monotonic()
    until, drain = None, args.drain
    if args.until is not None and args.until.relative:  # a duration: that long after the last event (--drain)
        drain = max(drain, args.until.seconds)
    elif args.until is not None:
        until = args.until.seconds
    try:  # the worker's own pipeline (models/pipeline.py), on the recording's clock
        replay(merge_recorded(args.files), settings, drain=drain, until=until, stats=stats)
    except FileNotFoundError as exc:
        raise SystemExit(f"stepwatch replay: {exc.filename}: no such file") from None
    sys.stdout.flush()
    print(f"stepwatch replay: {stats['events']} events, {stats['rejected']} rejected, {stats['alerts']} alerts "
          f"in {time.monotonic() - started:.2f} s", file=sys.stderr)
    if not stats["events"]:  # a wrong file (not a recording, empty) is not a quiet run with no alerts
        print(f"stepwatch replay: no valid event in {', '.join(args.files)} (expected JSON Lines of events, e.g. "
              "'stepwatch record' or 'stepwatch simulate --out' output)", file=sys.stderr)
        return 1
    return 0


def add_parser(sub) -> None:
    p = sub.add_parser("replay", help="run the detectors offline over recorded events, print alerts",
                       description="Replay JSON Lines recordings (one event or batch envelope per line) through "
                                   "the same detection core as the worker, on the events' own clock. Alerts go "
                                   "to stdout as JSON Lines, progress to stderr. Same input, same alerts. Several "
                                   "files (e.g. one per rank or node) are merged by time, each in its own order.")
    p.add_argument("files", nargs="+", metavar="FILE",
                   help="recording(s) in the wire format; '-' reads stdin; several are merged by time "
                        "(\"_arrival\", else event time less the host's clock offset), never reordered within a file; "
                        "one file sorted by event time whose hosts' clocks disagree is merged again per node the "
                        "same way (docs/training.md)")
    p.add_argument("--drain", type=float, default=0.0, metavar="SECONDS",
                   help="after the last event, run the timer rules this many seconds on (hangs at the end fire)")
    p.add_argument("--until", type=parse_when, metavar="WHEN",
                   help="after the last event, run the timer rules up to this time (Unix seconds or ISO 8601, UTC), "
                        "or this long after the last event (a duration: 30m, 2h; the same as --drain)")
    p.set_defaults(func=run, precheck=files_precheck("replay", "nothing replayed"))
