"""``stepwatch status``: fetch a worker's status API view over HTTP and print it."""

from __future__ import annotations

import argparse
import sys

import orjson

from stepwatch.commands.common import _cut, printable


def fetch_json(url: str, *, timeout: float = 10.0, token: str | None = None) -> tuple[int, object]:
    """GET a JSON document (with the worker's bearer token, if any); (HTTP status, body). Raises OSError when
    nothing answers."""
    import urllib.error
    import urllib.request

    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"} if token else {})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, orjson.loads(response.read())
    except urllib.error.HTTPError as exc:
        body = exc.read()
        try:
            return exc.code, orjson.loads(body)
        except orjson.JSONDecodeError:
            return exc.code, {"error": body.decode("utf-8", "replace")[:500]}


def _num(value, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def format_jobs(body: dict) -> str:
    lines = [f"worker {body.get('worker')}  partitions {body.get('partitions')}",
             f"{'JOB':<24} {'RANKS':>6} {'STEP':>8} {'PHASE':<10} {'STEPS/S':>8} {'TOKENS/S':>10} {'AGE S':>7} "
             f"{'ALERTS':>6}"]
    for j in body.get("jobs", []):
        lines.append(f"{_cut(j['job'], 24):<24} {j['ranks']:>6} {j['latest_step']:>8} "
                     f"{j['phase'] + (' (end)' if j.get('ended') else ''):<10} {_num(j.get('step_rate')):>8} "
                     f"{_num(j.get('tokens_per_second'), 0):>10} {_num(j.get('last_event_age'), 1):>7} "
                     f"{j['open_alerts']:>6}")
        for a in j.get("alerts", []):
            lines.append(f"    {a['severity'].upper():<8} {a['type']:<9} {_cut(a['summary'], 110)}")
    if not body.get("jobs"):
        lines.append("(no jobs on this worker)")
    return "\n".join(printable(line) for line in lines)  # names from the wire: no fake lines


def _hang_forensics(ev: dict) -> list[str]:
    """A hang alert's process group and the culprit's stack (docs/hang.md), indented under the alert."""
    from stepwatch.models.hang.stacks import culprit_stack

    out = []
    if ev.get("process_group"):
        members = ev.get("process_group_ranks")
        out.append(f"           process group {ev['process_group']} "
                   f"({'ranks ' + ','.join(map(str, members)) if members else 'all ranks'}), "
                   f"collective {ev.get('collective_seq')}")
    stack = culprit_stack(ev)
    if stack is not None:
        rank, frames = stack
        out.append(f"           stack of rank {rank} (innermost last):")
        out.extend(f"             {frame}" for frame in frames)
    if ev.get("stack_missing"):
        out.append(f"           no stack from rank(s): {', '.join(map(str, ev['stack_missing']))}")
    return out


#: Evidence fields that hold a time (Unix seconds): shown as ISO 8601 and how long ago.
_TIME_KEYS = ("_since", "_at", "_ts")


def _is_time(key: str, value) -> bool:
    return (isinstance(value, (int, float)) and not isinstance(value, bool) and value > 1e9
            and (key.endswith(_TIME_KEYS) or key in ("ts", "starts_at", "ends_at")))


def when(value: float, now: float) -> str:
    """``2026-11-30T21:30:00Z (42 s ago)``: a time a reader can place, and how fresh it is."""
    from datetime import datetime, timezone

    iso = datetime.fromtimestamp(value, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    ago = now - value
    return f"{iso} ({ago:.0f} s ago)" if ago >= 0 else f"{iso} (in {-ago:.0f} s)"


def culprit_ranks(alerts: list[dict]) -> list[int]:
    """The ranks the open alerts blame, most to blame first: a hang's culprits and ranks behind, then each
    alert's ranks (a straggler's)."""
    out: list[int] = []
    for a in alerts:
        ev = a.get("evidence") or {}
        named = [c.get("rank") for c in ev.get("culprits") or () if isinstance(c, dict)]
        named += list((ev.get("behind") or {}).get("ranks") or ()) if isinstance(ev.get("behind"), dict) else []
        if a.get("type") != "hang":  # a hang's ranks are every stuck rank; a straggler's are the slow ones
            named += list(a.get("ranks") or ())
        for r in named:
            if isinstance(r, int) and not isinstance(r, bool) and r not in out:
                out.append(r)
    return out


def format_job(body: dict, *, all_ranks: bool = False, limit: int = 20, now: float | None = None) -> str:
    import time

    now = time.time() if now is None else now
    s = body.get("settings") or {}
    straggler = s.get("straggler") or {}
    lines = [f"job {body['job']}: {body.get('rank_count')} ranks, step {body['latest_step']}, phase {body['phase']}"
             f"{' (ended)' if body.get('ended') else ''}, {_num(body.get('step_rate'))} steps/s, "
             f"tokens/s {_num(body.get('tokens_per_second'), 0)}, last event {_num(body.get('last_event_age'), 1)} s ago",
             f"settings ({s.get('source', '?')}): ratio_threshold {straggler.get('ratio_threshold')}, "
             f"z_threshold {straggler.get('z_threshold')}, min_flagged {straggler.get('min_flagged')}/"
             f"{straggler.get('window')}, clear_after {straggler.get('clear_after')}"]
    alerts = body.get("alerts", [])
    lines.append(f"open alerts: {len(alerts)}")
    ranks = body.get("ranks", [])
    blamed = {r: k for k, r in enumerate(culprit_ranks(alerts))}
    if blamed:
        lines.append("culprit: " + ", ".join(
            f"rank {r} on {next((x.get('node') for x in ranks if x.get('rank') == r), None) or '?'}"
            for r in list(blamed)[:8]) + (f" (+{len(blamed) - 8})" if len(blamed) > 8 else ""))
    for a in alerts:
        lines.append(f"  {a['severity'].upper():<8} {a['type']:<9} ranks {a['ranks']}  {a['summary']}")
        ev = a.get("evidence") or {}
        brief = {k: v for k, v in ev.items() if not isinstance(v, (dict, list)) and v is not None}
        if brief:
            lines.append("           evidence: " + ", ".join(f"{k}={when(v, now) if _is_time(k, v) else v}"
                                                           for k, v in list(brief.items())[:10]))
        lines.extend(_hang_forensics(ev))
    ranks = body.get("ranks", [])
    # The culprit first: a hang's stuck ranks all carry the alert, so "has an alert" alone ranks by ratio.
    order = sorted(ranks, key=lambda r: (blamed.get(r.get("rank"), len(blamed)), r.get("alert") is None,
                                         -(r.get("ratio") or 0)))
    shown = order if all_ranks else order[:limit]
    lines.append(f"{'RANK':>6} {'NODE':<14} {'STEP':>8} {'AGE S':>7} {'RATIO':>7} {'ROBUST Z':>9} {'PHASE':<10} ALERT")
    for r in shown:
        lines.append(f"{r['rank']:>6} {_cut(str(r.get('node') or '-'), 14):<14} "
                     f"{r['step'] if r.get('step') is not None else '-':>8} {_num(r.get('last_event_age'), 1):>7} "
                     f"{_num(r.get('ratio'), 3):>7} {_num(r.get('robust_z'), 1):>9} {str(r.get('phase')):<10} "
                     f"{r.get('alert') or ''}{' (culprit)' if r.get('rank') in blamed else ''}")
    if len(shown) < len(ranks):
        lines.append(f"... {len(ranks) - len(shown)} more ranks (most suspicious first; --all shows every rank)")
    return "\n".join(printable(line) for line in lines)  # names from the wire: no fake lines


def _token(args: argparse.Namespace) -> str | None:
    """--token, else the first line of --token-file (default: the worker's own STEPWATCH_WORKER_WEB_TOKEN_FILE)."""
    import os

    if args.token:
        return args.token
    path = args.token_file or os.environ.get("STEPWATCH_WORKER_WEB_TOKEN_FILE")
    if not path:
        return None
    try:
        with open(path, encoding="utf-8") as f:
            token = f.readline().strip()
    except OSError as exc:
        raise SystemExit(f"stepwatch status: {path}: {exc.strerror or exc} (the token file)") from None
    if not token:
        raise SystemExit(f"stepwatch status: {path}: empty (the token file)")
    return token


def run(args: argparse.Namespace) -> int:
    from urllib.parse import quote

    base = args.url.rstrip("/")
    url = f"{base}/jobs/{quote(args.job, safe='')}" if args.job else f"{base}/jobs"
    token = _token(args)
    try:
        status, body = fetch_json(url, timeout=args.timeout, token=token)
    except OSError as exc:
        print(f"stepwatch status: cannot reach the worker at {base}: {exc}", file=sys.stderr)
        return 1
    if args.json:
        print(orjson.dumps(body, option=orjson.OPT_INDENT_2).decode())
    elif status != 200:
        print(printable(f"stepwatch status: HTTP {status}: {body.get('error') if isinstance(body, dict) else body}"),
              file=sys.stderr)
        if status == 401:
            print("stepwatch status: the worker wants its token: --token-file FILE (or "
                  "STEPWATCH_WORKER_WEB_TOKEN_FILE) or --token TOKEN", file=sys.stderr)
        if isinstance(body, dict) and body.get("owner"):
            print(f"the job's partition ({body.get('partition')}) is on {body['owner']}", file=sys.stderr)
    else:
        print(format_job(body, all_ranks=args.all) if args.job else format_jobs(body))
    return 0 if status == 200 else 1


def add_parser(sub) -> None:
    p = sub.add_parser("status", help="print a worker's status API view (jobs, or one job's ranks and alerts)",
                       description="Ask a running worker's web server (GET /jobs or /jobs/JOB) and print it.")
    p.add_argument("job", nargs="?", metavar="JOB", help="one job in detail (default: every job of the worker)")
    p.add_argument("--url", default="http://127.0.0.1:6066", help="the worker's web server "
                                                                  "(default http://127.0.0.1:6066)")
    p.add_argument("--json", action="store_true", help="print the API's JSON")
    p.add_argument("--all", action="store_true", help="list every rank (default: the 20 most suspicious)")
    p.add_argument("--timeout", type=float, default=10.0, help="HTTP timeout, seconds")
    p.add_argument("--token-file", metavar="FILE", help="file whose first line is the worker's bearer token "
                                                        "(default: $STEPWATCH_WORKER_WEB_TOKEN_FILE)")
    p.add_argument("--token", metavar="TOKEN", help="the bearer token itself (visible to other users in ps: "
                                                    "prefer --token-file)")
    p.set_defaults(func=run)
