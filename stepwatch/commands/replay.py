"""``stepwatch replay``: run the detectors offline over recordings, print the alerts."""

from __future__ import annotations

import argparse
import math
import os
import sys
import time

from stepwatch.commands.common import files_precheck
from stepwatch.timespec import parse_when

#: ``--drain`` and ``--until`` reach at most this far past the recording's last event: beyond, the timer rules
#: would run for days of ticks (``--until 1e16`` never ended).
MAX_AFTER_SECONDS = 30 * 86_400.0
#: How much of a recording's end is read to find its last line's time.
_TAIL_BYTES = 1 << 20


def run(args: argparse.Namespace) -> int:
    from stepwatch.config import Settings
    from stepwatch.recording import merge_recorded, replay, replay_jobs

    settings = Settings.from_env()
    stats: dict = {"events": 0, "rejected": 0, "alerts": 0}
    started = time.monotonic()
    until, drain = None, args.drain
    if args.until is not None and args.until.relative:  # a duration: that long after the last event (--drain)
        drain = max(drain, args.until.seconds)
    elif args.until is not None:
        until = args.until.seconds
    try:  # the worker's own pipeline (models/pipeline.py), on the recording's clock
        if args.jobs > 1:
            replay_jobs(args.files, settings, jobs=args.jobs, drain=drain, until=until, stats=stats)
        else:
            replay(merge_recorded(args.files, blocks=True), settings, drain=drain, until=until, stats=stats)
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
                   help="after the last event, run the timer rules this many seconds on, as the live worker's clock would go on: "
                        "hangs at the end fire, and alerts that wait fire (a lone node's link_errors waits 45 s "
                        "for other nodes' samples; a 2-rank job's drop waits for its straggler). Default 0: the "
                        "alerts as of the recording's end")
    p.add_argument("--until", type=parse_when, metavar="WHEN",
                   help="after the last event, run the timer rules up to this time (Unix seconds or ISO 8601, UTC), "
                        "or this long after the last event (a duration: 30m, 2h; the same as --drain)")
    p.add_argument("--jobs", type=int, default=1, metavar="N",
                   help="split the recording by job over N processes (a large backtest): each job's lines in one "
                        "process, node telemetry and settings in all, alerts merged in one process's order; exact "
                        "for job-scope rules of jobs that share no node, not for alerts that correlate jobs "
                        "(docs/operations.md)")
    p.set_defaults(func=run, precheck=_precheck)


_files = files_precheck("replay", "nothing replayed")


def _precheck(args: argparse.Namespace) -> None:
    _files(args)
    _bounds(args)
    if not 1 <= args.jobs <= 256:
        raise ValueError(f"--jobs must be between 1 and 256, got {args.jobs}")


def _bounds(args: argparse.Namespace) -> None:
    """``--drain`` and ``--until`` within ``MAX_AFTER_SECONDS`` of the recording's end: one line otherwise."""

    days = MAX_AFTER_SECONDS / 86_400
    if not (math.isfinite(args.drain) and 0 <= args.drain <= MAX_AFTER_SECONDS):
        raise ValueError(f"--drain must be between 0 and {MAX_AFTER_SECONDS:.0f} seconds ({days:.0f} days), "
                         f"got {args.drain:g}")
    if args.until is None:
        return
    if args.until.relative:  # a duration after the last event: the --drain bound
        if not (math.isfinite(args.until.seconds) and args.until.seconds <= MAX_AFTER_SECONDS):
            raise ValueError(f"--until must be at most {MAX_AFTER_SECONDS:.0f} seconds ({days:.0f} days) after the "
                             f"recording's end, got {args.until.seconds:g}")
        return
    until = args.until.seconds
    if not math.isfinite(until):
        raise ValueError(f"--until must be a time, got {until!r}")
    end = _recording_end(args.files)
    reference, what = (end, "the recording's last event") if end is not None else (time.time(), "now")
    if until > reference + MAX_AFTER_SECONDS:
        raise ValueError(f"--until {until:g} is more than {days:.0f} days after {what} "
                         f"({time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime(reference))}): the timer rules would "
                         "run for that long; give a time closer to the recording")


def _recording_end(paths: list[str]) -> float | None:
    """The time of the last line of each recording file (its ``_arrival``, else its latest event ``ts``),
    the latest of them; None when none can be read that way (stdin, no time on the last line)."""
    import orjson

    latest = None
    for path in paths:
        if path == "-":
            continue
        try:
            with open(path, "rb") as f:
                f.seek(0, os.SEEK_END)
                f.seek(max(0, f.tell() - _TAIL_BYTES))
                lines = [line for line in f.read().splitlines() if line.strip()]
            obj = orjson.loads(lines[-1]) if lines else None
        except (OSError, orjson.JSONDecodeError):  # unreadable here: the replay itself says why
            continue
        when = _time_of(obj)
        if when is not None and (latest is None or when > latest):
            latest = when
    return latest


def _time_of(obj) -> float | None:
    if type(obj) is not dict:
        return None
    times = [obj.get("_arrival"), obj.get("ts")] + [e.get("ts") for e in obj.get("events") or () if type(e) is dict]
    times = [t for t in times if type(t) in (int, float) and math.isfinite(t)]
    return max(times) if times else None
