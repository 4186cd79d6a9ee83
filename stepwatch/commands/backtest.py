"""``stepwatch backtest``: replay recordings under the current settings and a candidate, print the difference."""

from __future__ import annotations

import argparse
import io
import sys
import time

import orjson

from stepwatch.commands.common import files_precheck


def _alerts(files: list[str], settings, overrides: dict | None, args) -> tuple[list[dict], dict]:
    from stepwatch.recording import candidate_lines
    from stepwatch.recording import merge_recorded, replay, replay_jobs

    out = io.StringIO()
    stats: dict = {}
    if args.jobs > 1:
        replay_jobs(files, settings, jobs=args.jobs, drain=args.drain, out=out, stats=stats, overrides=overrides)
    else:
        lines = merge_recorded(files, what="backtest", blocks=True)
        replay(lines if overrides is None else candidate_lines(lines, overrides), settings, drain=args.drain,
               out=out, stats=stats)
    return [orjson.loads(line) for line in out.getvalue().splitlines() if line.strip()], stats


def run(args: argparse.Namespace) -> int:
    from stepwatch.backtest import diff, read_labels, score
    from stepwatch.config import Settings

    settings = Settings.from_env()
    overrides = _overrides(args, settings)
    labels = read_labels(args.labels) if args.labels else None
    started = time.monotonic()
    current, stats = _alerts(args.files, settings, None, args)
    if not stats.get("events"):
        print(f"stepwatch backtest: no valid event in {', '.join(args.files)} (expected JSON Lines of events, e.g. "
              "'stepwatch record' output)", file=sys.stderr)
        return 1
    candidate, _ = _alerts(args.files, settings, overrides, args)
    result = {"set": overrides, "events": stats["events"], **diff(current, candidate)}
    if labels is not None:
        result["labels"] = labels.kind
        result["current"] = score(current, labels)
        result["candidate"] = score(candidate, labels)
    print(f"stepwatch backtest: {stats['events']} events replayed twice in {time.monotonic() - started:.1f} s",
          file=sys.stderr)
    if args.json:
        print(orjson.dumps(result, option=orjson.OPT_INDENT_2).decode())
    else:
        print(_text(result))
    return 0


def _overrides(args: argparse.Namespace, settings) -> dict:
    """The candidate, parsed and checked exactly as ``stepwatch config set`` does (``ValueError``: one line)."""
    from stepwatch.runtime_config import parse_assignments, validate_all

    overrides = parse_assignments(args.assignments)
    validate_all(overrides, settings)
    return overrides


def _text(result: dict) -> str:
    settings = ", ".join(f"{sec}.{k}={v}" for sec, kv in result["set"].items() for k, v in kv.items())
    lines = [f"candidate: {settings}",
             f"alerts: {len(result['new'])} new, {len(result['dropped'])} dropped, {len(result['changed'])} changed, "
             f"{result['same']} the same"]
    for word, key in (("new", "new"), ("dropped", "dropped")):
        for a in result[key]:
            who = f" ranks {a['ranks'][:8]}" if a["ranks"] else (f" nodes {a['nodes'][:4]}" if a["nodes"] else "")
            lines.append(f"  {word:8} {a['type']} {a['severity']} job {a['job'] or '-'}{who} ({a['id']})")
    for c in result["changed"]:
        what = "; ".join(f"{k} {c['before'][k]} -> {c['after'][k]}" for k in c["what"])
        lines.append(f"  changed  {c['type']} job {c['job'] or '-'}: {what} ({c['id']})")
    if "current" in result:
        def pct(x) -> str:
            return "-" if x is None else f"{100 * x:.1f}%"

        lines.append(f"against the labels ({result['labels']}):")
        for side in ("current", "candidate"):
            s = result[side]
            lines.append(f"  {side:9} precision {pct(s['precision'])} ({s['true']} true, {s['false']} false"
                         + (f", {s['unlabelled']} unlabelled" if s["unlabelled"] else "")
                         + f"), recall {pct(s['recall'])} ({s['found']} of {s['known']})")
    return "\n".join(lines)


def add_parser(sub) -> None:
    p = sub.add_parser("backtest", help="replay recordings under the current settings and a candidate, print the "
                                        "difference",
                       description="Replay recordings (as 'stepwatch replay') twice: under the current settings "
                                   "(the environment's and the settings recorded in the recording) and with the "
                                   "candidate --set for every job, as 'stepwatch config set' would. Prints the "
                                   "alerts the candidate adds, drops and changes (by alert id) and, with --labels, "
                                   "each side's precision and recall.")
    p.add_argument("files", nargs="+", metavar="RECORDING", help="recording(s), as 'stepwatch replay' reads them")
    p.add_argument("--set", dest="assignments", action="append", required=True, metavar="SECTION.FIELD=VALUE",
                   help="a candidate setting, validated as 'stepwatch config set' does (repeat for several)")
    p.add_argument("--labels", metavar="FILE",
                   help="feedback JSON Lines ('stepwatch feedback --export') or a labelled scenario's JSON")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.add_argument("--drain", type=float, default=900.0, metavar="SECONDS",
                   help="after the last event, run the timer rules this many seconds on (default 900)")
    p.add_argument("--jobs", type=int, default=1, metavar="N",
                   help="split each replay by job over N processes (see 'stepwatch replay --jobs')")
    p.set_defaults(func=run, precheck=_precheck)


_files = files_precheck("backtest", "nothing replayed")


def _precheck(args: argparse.Namespace) -> None:
    """A bad --set, --labels file, --drain or --jobs is one line before anything is replayed."""
    import math

    from stepwatch.config import Settings

    _files(args)
    if not (math.isfinite(args.drain) and 0 <= args.drain <= 30 * 86_400):
        raise ValueError(f"--drain must be between 0 and {30 * 86_400} seconds, got {args.drain:g}")
    if args.jobs < 1:
        raise ValueError(f"--jobs must be 1 or more, got {args.jobs}")
    _overrides(args, Settings.from_env())
    if args.labels:
        from stepwatch.backtest import read_labels

        read_labels(args.labels)
