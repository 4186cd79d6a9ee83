"""``stepwatch publish``: send a recording to the events and telemetry topics."""

from __future__ import annotations

import argparse
import sys
import time

from stepwatch.commands.common import _add_kafka_args, _require_bootstrap, _settings, files_precheck


def run(args: argparse.Namespace) -> int:
    from stepwatch.recording import merge_recorded, publish

    settings = _settings(args)
    _require_bootstrap(settings)
    started = time.monotonic()
    try:  # several files: merged by time as replay merges them (recording.py merge_recorded), one road for both
        stats = publish(merge_recorded(args.files, what="publish"), settings, speed=args.speed)
    except FileNotFoundError as exc:  # gone between the check and its turn
        raise SystemExit(f"stepwatch publish: {exc.filename}: no such file") from None
    print(f"stepwatch publish: {stats['events_sent']} events in {stats['messages_sent']} messages from "
          f"{stats['lines']} lines ({stats['skipped']} not events, {stats['events_dropped']} dropped) in "
          f"{time.monotonic() - started:.2f} s", file=sys.stderr)
    if not stats["events_sent"]:  # a wrong file is not a successful publish of nothing
        print(f"stepwatch publish: no valid event in {', '.join(args.files)}: nothing sent (expected JSON Lines of "
              "events, e.g. 'stepwatch record' or 'stepwatch simulate --out' output)", file=sys.stderr)
        return 1
    return 1 if stats["events_dropped"] else 0


def add_parser(sub) -> None:
    p = sub.add_parser("publish", help="send a recording to the events and telemetry topics",
                       description="Publish a JSON Lines recording: job events keyed by job, node telemetry "
                                   "by node, in batch envelopes; as fast as possible, or paced with --speed. "
                                   "Several files (e.g. one per rank or node) are sent merged by time, each in "
                                   "its own order, as `stepwatch replay` merges them; every file is checked "
                                   "before anything is sent.")
    _add_kafka_args(p)
    p.add_argument("files", nargs="+", metavar="FILE",
                   help="recording(s) in the wire format; '-' reads stdin; several are merged by time "
                        "(\"_arrival\", else event time less the host's clock offset), never reordered within a file; "
                        "one file sorted by event time whose hosts' clocks disagree is merged again per node the "
                        "same way (docs/training.md)")
    p.add_argument("--speed", type=float, default=0.0,
                   help="x real time by each line's \"_arrival\" (else its event time); 0: as fast as possible")
    p.set_defaults(func=run, precheck=files_precheck("publish", "nothing published"))
