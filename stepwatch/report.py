"""``stepwatch report``: how the fleet is doing, from the alerts alone.

Reads alerts (the alerts topic, or a JSON Lines file such as ``stepwatch replay``'s output) and
summarizes the incidents that began within ``--since`` (default 7 days, counted back from the
newest alert read, so a replay of an old recording reports on its own week):

* an incident is one alert id; its first ``firing`` gives type, scope, start and onset, its
  ``resolved`` version the end;
* per type and per scope (``labels.scope``): count, MTTR (mean of firing -> resolved, seconds,
  over resolved incidents), its median, time to detect (mean of ``evidence.onset_ts`` -> firing);
* the worst nodes: incidents implicating each node (``evidence.action.nodes``; node_suspect
  verdicts are not incidents of their own) and the distinct jobs they hit;
* GPU-hours lost per cause (``evidence.failure_class``): ``job_restart`` alerts'
  ``gpu_hours_lost`` and hangs' ``hung_seconds`` x ranks (a hang that began during a restart's
  silence is left out: the restart's downtime covers it); slowdowns are left out (their cost is in
  the effective compute share, and in the next item);
* what slow ranks and stages cost (``slowdown_cost``, only when some alert carries it): the sum of
  the straggler and imbalance alerts' ``evidence.gpu_hours_lost_per_day`` (models/steps/cost.py; each
  incident's latest value), in total, for the incidents still open, and per cause, and the
  costliest incidents with their ``job_slowdown``;
* effective compute share per job: the latest ``evidence.effective_compute`` its alerts carry
  (the job's productive share when the alert resolved, models/jobhealth/sli.py);
* precision per rule (``precision``): per type and settings version, the verdicts on its alerts (the
  feedback topic, or ``--feedback FILE``; automatic outcomes from the alerts' own history,
  stepwatch/outcomes.py), precision with its Wilson interval, median time to detect (stepwatch/precision.py).

Output: plain text, ``--json`` (the shape in docs/operations.md, "On call"), or ``--html FILE``:
one self-contained page, charts drawn as inline SVG (no script, no network).
"""

from __future__ import annotations

import argparse
import html
import statistics
import sys
from collections.abc import Iterable, Iterator
from datetime import datetime, timezone
from typing import Any

import orjson

from stepwatch.models.alert_types import AlertType, facts
from stepwatch.outcomes import OutcomeSettings, OutcomeTracker
from stepwatch.precision import Judged, Versions, precision_table
from stepwatch.timespec import When, parse_when

DAY = 86_400.0


def read_jsonl(path: str) -> Iterator[dict]:
    stream = sys.stdin.buffer if path == "-" else open(path, "rb")
    try:
        for line in stream:
            line = line.strip()
            if not line:
                continue
            try:
                obj = orjson.loads(line)
            except orjson.JSONDecodeError:
                continue  # replay's progress lines, a truncated last line
            if isinstance(obj, dict) and obj.get("kind", "alert") == "alert" and obj.get("id"):
                yield obj
    finally:
        if stream is not sys.stdin.buffer:
            stream.close()


def read_topic(settings, *, timeout: float = 10.0) -> Iterator[dict]:
    """Every alert on the alerts topic, from its beginning to its end as of now."""
    from stepwatch.feedback import read_all

    kafka = settings.kafka
    for record in read_all(settings, kafka.topic(kafka.alerts_topic), timeout=timeout):
        try:
            obj = orjson.loads(record.value)
        except orjson.JSONDecodeError:
            continue
        if isinstance(obj, dict) and obj.get("id"):
            yield obj


class _Incident:
    __slots__ = ("id", "type", "scope", "job", "starts_at", "onset", "ends_at", "nodes", "jobs", "cause", "first",
                 "last")

    def __init__(self, alert: dict) -> None:
        ev = alert.get("evidence") or {}
        self.id = alert["id"]
        self.type = str(alert.get("type", "unknown"))
        self.scope = str((alert.get("labels") or {}).get("scope") or "unknown")
        self.job = str(alert.get("job") or "")
        self.starts_at = _num(alert.get("starts_at"))
        onset = _num(ev.get("onset_ts"))
        self.onset = onset if onset is not None else self.starts_at
        self.ends_at: float | None = None
        self.nodes: set[str] = set()
        self.jobs: set[str] = set()
        self.cause = str(ev.get("failure_class") or "unknown")
        self.first = alert
        self.last = alert
        self.update(alert)

    def update(self, alert: dict) -> None:
        ev = alert.get("evidence") or {}
        self.last = alert
        action = ev.get("action") or {}
        self.nodes.update(str(n) for n in action.get("nodes") or () if n)
        if self.job:
            self.jobs.add(self.job)
        self.jobs.update(str(j.get("job")) for j in ev.get("jobs") or () if isinstance(j, dict) and j.get("job"))
        if alert.get("status") == "resolved":
            self.ends_at = _num(alert.get("ends_at"))


def _num(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def build_report(alerts: Iterable[dict], *, since: float = 7 * DAY, now: float | None = None,
                 start: float | None = None, verdicts: dict | None = None, versions: Versions | None = None,
                 outcomes: OutcomeSettings = OutcomeSettings()) -> dict[str, Any]:
    """The report (``--json``'s shape) of the incidents that began within ``since`` seconds before ``now``
    (default: the newest alert time read), or from ``start`` (Unix seconds) when given. ``verdicts``: alert id
    -> feedback (stepwatch/feedback.py ``read_feedback``); ``versions``: the settings changes' times."""
    from stepwatch.feedback import latest

    incidents: dict[str, _Incident] = {}
    tracker = OutcomeTracker(outcomes)
    newest = 0.0
    effective: dict[str, tuple[float, float]] = {}  # job -> (time, share)
    for alert in alerts:
        ident = alert.get("id")
        if not isinstance(ident, str):
            continue
        tracker.add(alert)
        when = _num(alert.get("ends_at")) or _num(alert.get("starts_at")) or 0.0
        newest = max(newest, when)
        share = _num((alert.get("evidence") or {}).get("effective_compute"))
        if share is not None and alert.get("job"):
            if when >= effective.get(alert["job"], (-1.0, 0.0))[0]:
                effective[alert["job"]] = (when, share)
        inc = incidents.get(ident)
        if inc is None:
            if alert.get("status") != "firing":
                continue  # resolved whose firing is older than what was read
            incidents[ident] = _Incident(alert)
        else:
            inc.update(alert)
    now = newest if now is None else now
    if start is not None:
        since = max(now - start, 0.0)
    chosen = [i for i in incidents.values() if i.starts_at is not None and i.starts_at >= now - since]
    chosen.sort(key=lambda i: (i.starts_at, i.id))

    def stats(group: list[_Incident]) -> dict[str, Any]:
        ttr = [i.ends_at - i.starts_at for i in group if i.ends_at is not None]
        ttd = [i.starts_at - i.onset for i in group if i.onset is not None]
        return {"count": len(group),
                "mttr_seconds": round(statistics.fmean(ttr), 3) if ttr else None,
                "median_seconds": round(statistics.median(ttr), 3) if ttr else None,
                "detect_seconds": round(statistics.fmean(ttd), 3) if ttd else None}

    by_type: dict[str, list[_Incident]] = {}
    by_scope: dict[str, list[_Incident]] = {}
    for inc in chosen:
        by_type.setdefault(inc.type, []).append(inc)
        by_scope.setdefault(inc.scope, []).append(inc)
    nodes: dict[str, list[_Incident]] = {}
    for inc in chosen:
        if inc.type == AlertType.NODE_SUSPECT:
            continue
        for node in inc.nodes:
            nodes.setdefault(node, []).append(inc)
    worst = [{"node": n, "incidents": len(incs), "jobs": sorted({j for i in incs for j in i.jobs})}
             for n, incs in nodes.items()]
    worst.sort(key=lambda r: (-r["incidents"], -len(r["jobs"]), r["node"]))
    lost: dict[str, float] = {}
    # A stall (a hang) during a restart's silence lasted through its downtime: counted once, in the restart.
    silences = [(i.job, i.starts_at, i.ends_at) for i in chosen
                if i.type == AlertType.JOB_RESTART and i.ends_at is not None]
    for inc in chosen:
        if facts(inc.type).stalls and any(job == inc.job and lo <= inc.starts_at <= hi for job, lo, hi in silences):
            continue
        hours = _gpu_hours_lost(inc)
        if hours:
            lost[inc.cause] = lost.get(inc.cause, 0.0) + hours
    out = {
        "incidents": len(chosen),
        "by_type": {t: stats(g) for t, g in sorted(by_type.items())},
        "by_scope": {s: stats(g) for s, g in sorted(by_scope.items())},
        "nodes": worst,
        "gpu_hours_lost": {c: round(h, 4) for c, h in sorted(lost.items(), key=lambda kv: -kv[1])},
        "effective_compute": {j: s for j, (_, s) in sorted(effective.items())},
        # for the text and HTML views (not in --json)
        "_window": {"since": now - since, "until": now},
        # When the incidents themselves happened (first start to last start or end), for the header.
        "_span": ({"first": chosen[0].starts_at,
                   "last": max(i.ends_at if i.ends_at is not None else i.starts_at for i in chosen)}
                  if chosen else None),
        "_timeline": [(i.starts_at, i.type, i.scope) for i in chosen],
    }
    # A person's verdict beats the automatic one, whichever came last.
    said = latest([*tracker.outcomes().values(), *(verdicts or {}).values()])
    out["precision"] = precision_table([Judged(i.id, i.type, i.starts_at, i.onset) for i in chosen], said, versions)
    slow = _slowdown_cost(chosen)
    if slow is not None:
        out["slowdown_cost"] = slow
    return out


def _slowdown_cost(chosen: list[_Incident]) -> dict[str, Any] | None:
    """Sum of the slowdowns' GPU-hours lost a day (straggler and imbalance alerts, models/steps/cost.py)."""
    rows = []
    for inc in chosen:
        ev = inc.last.get("evidence") or {}
        per_day = _num(ev.get("gpu_hours_lost_per_day"))
        if per_day is None or not facts(inc.type).costed:
            continue
        rows.append((inc, per_day, _num(ev.get("job_slowdown"))))
    if not rows:
        return None
    by_cause: dict[str, float] = {}
    for inc, per_day, _ in rows:
        by_cause[inc.cause] = by_cause.get(inc.cause, 0.0) + per_day
    rows.sort(key=lambda r: (-r[1], r[0].id))
    return {"gpu_hours_lost_per_day": round(sum(r[1] for r in rows), 2),
            "open_gpu_hours_lost_per_day": round(sum(r[1] for r in rows if r[0].ends_at is None), 2),
            "by_cause": {c: round(h, 2) for c, h in sorted(by_cause.items(), key=lambda kv: -kv[1])},
            "worst": [{"id": inc.id, "type": inc.type, "job": inc.job, "job_slowdown": slowdown,
                       "gpu_hours_lost_per_day": round(per_day, 2), "open": inc.ends_at is None}
                      for inc, per_day, slowdown in rows[:10]]}


def _gpu_hours_lost(inc: _Incident) -> float:
    ev = inc.last.get("evidence") or {}
    if inc.type == AlertType.JOB_RESTART:
        return float(_num(ev.get("gpu_hours_lost")) or 0.0)
    if inc.type == AlertType.HANG and inc.ends_at is not None:
        seconds = _num(ev.get("hung_seconds")) or (inc.ends_at - inc.starts_at)
        ranks = _num(ev.get("ranks_known")) or _num(ev.get("world_size")) or 0.0
        return seconds * ranks / 3600.0
    return 0.0


def public(report: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in report.items() if not k.startswith("_")}


# -- text -------------------------------------------------------------------------------------


def _fmt(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds >= 3600:
        return f"{seconds / 3600:.1f} h"
    if seconds >= 60:
        return f"{seconds / 60:.1f} min"
    return f"{seconds:.0f} s"


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, tz=timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


def headline(report: dict[str, Any]) -> str:
    """How many incidents and when they happened (the window read is in brackets)."""
    w, span = report["_window"], report.get("_span")
    window = f"window {_fmt(w['until'] - w['since'])} up to {_iso(w['until'])}"
    if not span:
        return f"0 incidents ({window})"
    return f"{report['incidents']} incident(s) from {_iso(span['first'])} to {_iso(span['last'])} ({window})"


def format_text(report: dict[str, Any]) -> str:
    lines = [f"stepwatch report: {headline(report)}", ""]
    for title, key in (("by type", "by_type"), ("by scope", "by_scope")):
        lines.append(f"{title:<16} {'count':>6} {'MTTR':>10} {'median':>10} {'detect':>10}")
        for name, s in report[key].items():
            lines.append(f"  {name:<14} {s['count']:>6} {_fmt(s['mttr_seconds']):>10} {_fmt(s['median_seconds']):>10} "
                         f"{_fmt(s['detect_seconds']):>10}")
        lines.append("")
    lines.append("worst nodes")
    for row in report["nodes"][:10] or [{"node": "(none)", "incidents": 0, "jobs": []}]:
        lines.append(f"  {row['node']:<20} {row['incidents']:>4} incident(s)  jobs: {', '.join(row['jobs']) or '-'}")
    lines.append("")
    lines.append("GPU-hours lost by cause")
    for cause, hours in report["gpu_hours_lost"].items() or [("(none)", 0.0)]:
        lines.append(f"  {cause:<28} {hours:>10.2f}")
    lines.append("")
    slow = report.get("slowdown_cost")
    if slow is not None:
        lines.append(f"GPU-hours lost a day to slow ranks and stages: {slow['gpu_hours_lost_per_day']:.2f} "
                     f"({slow['open_gpu_hours_lost_per_day']:.2f} still open)")
        for row in slow["worst"]:
            factor = "-" if row["job_slowdown"] is None else f"{row['job_slowdown']:.2f}x"
            lines.append(f"  {row['type']:<10} {row['job']:<18} job {factor:>6} slower {row['gpu_hours_lost_per_day']:>9.2f}"
                         f"{'  (open)' if row['open'] else ''}")
        lines.append("")
    lines.extend(_precision_lines(report.get("precision") or {}))
    lines.append("effective compute share")
    for job, share in report["effective_compute"].items() or [("(no job reported one)", None)]:
        lines.append(f"  {job:<28} {'-' if share is None else f'{share:.1%}':>10}")
    from stepwatch.commands.common import printable

    # Names come from the wire: each line escaped, so none can print a fake line of its own.
    return "\n".join(printable(line) for line in lines) + "\n"


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.0%}"


def _interval(row: dict) -> str:
    return "" if not row.get("interval") else f"{row['interval'][0]:.0%}-{row['interval'][1]:.0%}"


def _precision_lines(table: dict[str, Any]) -> list[str]:
    """Precision per rule and settings version (transient outcomes apart: never counted as false)."""
    lines = [f"{'precision per rule':<30} {'alerts':>6} {'said':>5} {'right':>5} {'false':>5} {'dup':>4} "
             f"{'trans':>5} {'precision':>9} {'95% CI':>10} {'detect':>8}"]

    def row(name: str, r: dict) -> str:
        return (f"  {name:<28} {r['alerts']:>6} {r['with_feedback']:>5} {r['confirmed']:>5} {r['false']:>5} "
                f"{r['duplicate']:>4} {r['transient']:>5} {_pct(r['precision']):>9} {_interval(r):>10} "
                f"{_fmt(r['median_detect_seconds']):>8}")

    for kind, r in table.items():
        lines.append(row(kind, r))
        versions = r.get("versions") or {}
        if len(versions) > 1 or any(v != "-" for v in versions):
            lines.extend(row("  " + version, v) for version, v in versions.items())
    if not table:
        lines.append("  (no alerts)")
    lines.append("")
    return lines


# -- HTML ---------------------------------------------------------------------------------------

COLORS = {"device": "#d9534f", "platform": "#f0ad4e", "job": "#5b8def", "unknown": "#999999"}


def _bars(rows: list[tuple[str, float, str]], *, unit: str, chart: str, width: int = 640) -> str:
    """Horizontal bars: (label, value, colour)."""
    if not rows:
        return f'<p class="empty" data-chart="{chart}">nothing to show</p>'
    top = max(v for _, v, _ in rows) or 1.0
    bar_h, gap, left = 22, 6, 180
    height = len(rows) * (bar_h + gap) + gap
    parts = [f'<svg class="chart" data-chart="{chart}" width="{width}" height="{height}" '
             f'viewBox="0 0 {width} {height}" xmlns="http://www.w3.org/2000/svg" role="img">']
    for n, (label, value, color) in enumerate(rows):
        y = gap + n * (bar_h + gap)
        w = max((width - left - 90) * value / top, 1.0)
        parts.append(f'<text x="{left - 8}" y="{y + 15}" text-anchor="end" font-size="13">{html.escape(label)}</text>'
                     f'<rect class="bar" x="{left}" y="{y}" width="{w:.1f}" height="{bar_h}" fill="{color}">'
                     f'<title>{html.escape(label)}: {value:g} {unit}</title></rect>'
                     f'<text x="{left + w + 6:.1f}" y="{y + 15}" font-size="12">{value:g} {unit}</text>')
    parts.append("</svg>")
    return "".join(parts)


def _timeline(report: dict[str, Any], width: int = 900, height: int = 220) -> str:
    """Incidents over time: stacked columns per time bucket, coloured by scope."""
    w = report["_window"]
    events = report["_timeline"]
    if not events:
        return '<p class="empty" data-chart="timeline">no incident in the window</p>'
    # From the first incident (or the window's start, if later) to the newest alert.
    start = max(w["since"], min(ts for ts, *_ in events))
    span = max(w["until"] - start, 1.0)
    buckets = 28 if span > 2 * DAY else 24
    size = span / buckets
    counts = [dict.fromkeys(COLORS, 0) for _ in range(buckets)]
    for ts, _, scope in events:
        k = min(int((ts - start) / size), buckets - 1)
        counts[k][scope if scope in COLORS else "unknown"] += 1
    top = max(sum(c.values()) for c in counts) or 1
    left, bottom = 40, 30
    col = (width - left - 10) / buckets
    parts = [f'<svg class="chart" data-chart="timeline" width="{width}" height="{height}" '
             f'viewBox="0 0 {width} {height}" xmlns="http://www.w3.org/2000/svg" role="img">',
             f'<line x1="{left}" y1="{height - bottom}" x2="{width - 10}" y2="{height - bottom}" stroke="#333"/>',
             f'<text x="{left - 6}" y="16" text-anchor="end" font-size="12">{top}</text>',
             f'<text x="{left - 6}" y="{height - bottom}" text-anchor="end" font-size="12">0</text>']
    plot_h = height - bottom - 10
    for k, c in enumerate(counts):
        y = height - bottom
        for scope, n in c.items():
            if not n:
                continue
            h = plot_h * n / top
            y -= h
            parts.append(f'<rect class="bar" x="{left + k * col + 1:.1f}" y="{y:.1f}" width="{col - 2:.1f}" '
                         f'height="{h:.1f}" fill="{COLORS[scope]}"><title>{n} {scope} incident(s)</title></rect>')
    for k, anchor in ((0, "start"), (buckets // 2, "middle"), (buckets, "end")):
        parts.append(f'<text x="{left + k * col:.1f}" y="{height - 10}" font-size="11" text-anchor="{anchor}">'
                     f'{_iso(start + k * size)}</text>')
    parts.append("</svg>")
    return "".join(parts)


VERSION_ROW = ' class="version"'


def format_html(report: dict[str, Any]) -> str:
    w = report["_window"]
    mttr = [(t, round((s["mttr_seconds"] or 0) / 60, 2), "#5b8def") for t, s in report["by_type"].items()
            if s["mttr_seconds"] is not None]
    nodes = [(r["node"], r["incidents"], "#d9534f") for r in report["nodes"][:10]]
    lost = [(c, h, "#f0ad4e") for c, h in report["gpu_hours_lost"].items()]
    rows = "".join(
        f"<tr><td>{html.escape(t)}</td><td>{s['count']}</td><td>{_fmt(s['mttr_seconds'])}</td>"
        f"<td>{_fmt(s['median_seconds'])}</td><td>{_fmt(s['detect_seconds'])}</td></tr>"
        for t, s in report["by_type"].items())
    scopes = "".join(
        f'<li><span class="swatch" style="background:{COLORS.get(s, "#999")}"></span>{html.escape(s)}: {v["count"]}'
        f" (MTTR {_fmt(v['mttr_seconds'])})</li>" for s, v in report["by_scope"].items())
    effective = "".join(f"<tr><td>{html.escape(j)}</td><td>{share:.1%}</td></tr>"
                        for j, share in report["effective_compute"].items())
    by_scope = "".join(
        f"<tr><td>{html.escape(t)}</td><td>{s['count']}</td><td>{_fmt(s['mttr_seconds'])}</td>"
        f"<td>{_fmt(s['median_seconds'])}</td><td>{_fmt(s['detect_seconds'])}</td></tr>"
        for t, s in report["by_scope"].items())
    node_rows = "".join(f"<tr><td>{html.escape(r['node'])}</td><td>{r['incidents']}</td>"
                        f"<td>{html.escape(', '.join(r['jobs']) or '-')}</td></tr>" for r in report["nodes"][:10])
    lost_rows = "".join(f"<tr><td>{html.escape(c)}</td><td>{h:.2f}</td></tr>"
                        for c, h in report["gpu_hours_lost"].items())
    precision_rows = "".join(
        f"<tr{'' if version is None else VERSION_ROW}><td>{html.escape(kind if version is None else version)}</td>"
        f"<td>{r['alerts']}</td><td>{r['with_feedback']}</td><td>{r['confirmed']}</td><td>{r['false']}</td>"
        f"<td>{r['duplicate']}</td><td>{r['transient']}</td><td>{_pct(r['precision'])}</td>"
        f"<td>{_interval(r)}</td><td>{_fmt(r['median_detect_seconds'])}</td></tr>"
        for kind, top in (report.get("precision") or {}).items()
        for version, r in [(None, top), *((v, x) for v, x in (top.get("versions") or {}).items() if v != "-")])
    slow = report.get("slowdown_cost")
    slow_html = ""
    if slow is not None:  # the text report's "GPU-hours lost a day to slow ranks and stages"
        worst = "".join(
            f"<tr><td>{html.escape(r['type'])}</td><td>{html.escape(r['job'])}</td>"
            f"<td>{'-' if r['job_slowdown'] is None else format(r['job_slowdown'], '.2f') + 'x'}</td>"
            f"<td>{r['gpu_hours_lost_per_day']:.2f}</td><td>{'open' if r['open'] else ''}</td></tr>"
            for r in slow["worst"])
        slow_html = (f"<h2>GPU-hours lost a day to slow ranks and stages</h2>\n<p id=\"slowdown-cost\">"
                     f"{slow['gpu_hours_lost_per_day']:.2f} GPU-hours a day "
                     f"({slow['open_gpu_hours_lost_per_day']:.2f} still open)</p>\n<table id=\"slowdown\"><tr>"
                     f"<th>type</th><th>job</th><th>job slower</th><th>GPU-h a day</th><th></th></tr>{worst}</table>")
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>stepwatch report</title>
<style>
body {{ font: 14px system-ui, sans-serif; margin: 24px; color: #222; max-width: 1000px; }}
h1 {{ font-size: 22px; }} h2 {{ font-size: 17px; margin-top: 28px; }}
table {{ border-collapse: collapse; }} td, th {{ padding: 4px 12px; border-bottom: 1px solid #ddd; text-align: left; }}
.swatch {{ display: inline-block; width: 12px; height: 12px; margin-right: 6px; }}
ul.scopes {{ list-style: none; padding: 0; display: flex; gap: 24px; }}
.empty {{ color: #888; }} tr.version td:first-child {{ padding-left: 28px; color: #555; }}
</style></head><body>
<h1>stepwatch report</h1>
<p id="summary"><b id="incident-count">{report['incidents']}</b> {html.escape(headline(report).split(" ", 1)[1])}</p>
<ul class="scopes">{scopes}</ul>
<h2>Incidents over time</h2>
{_timeline(report)}
<h2>MTTR per type (minutes)</h2>
{_bars(mttr, unit="min", chart="mttr")}
<h2>Worst nodes</h2>
{_bars(nodes, unit="incidents", chart="nodes")}
<table id="nodes"><tr><th>node</th><th>incidents</th><th>jobs</th></tr>{node_rows}</table>
<h2>GPU-hours lost by cause</h2>
{_bars(lost, unit="GPU-h", chart="lost")}
<table id="lost"><tr><th>cause</th><th>GPU-hours</th></tr>{lost_rows}</table>
{slow_html}
<h2>By type</h2>
<table id="by-type"><tr><th>type</th><th>count</th><th>MTTR</th><th>median</th><th>time to detect</th></tr>{rows}</table>
<h2>Precision per rule</h2>
<table id="precision"><tr><th>type / settings</th><th>alerts</th><th>with feedback</th><th>confirmed</th><th>false</th>
<th>duplicate</th><th>transient</th><th>precision</th><th>95% interval</th><th>median time to detect</th></tr>{precision_rows}</table>
<h2>By scope</h2>
<table id="by-scope"><tr><th>scope</th><th>count</th><th>MTTR</th><th>median</th><th>time to detect</th></tr>{by_scope}</table>
<h2>Effective compute share</h2>
<table id="effective"><tr><th>job</th><th>share</th></tr>{effective}</table>
</body></html>
"""


# -- command ------------------------------------------------------------------------------------


def add_parser(sub) -> None:
    p = sub.add_parser("report", help="incidents, MTTR, worst nodes and GPU-hours lost, from the alerts",
                       description="Summarize the alerts topic (or a JSON Lines file of alerts, e.g. 'stepwatch "
                                   "replay' output): incidents by type and scope, time to detect, MTTR, the worst "
                                   "nodes, GPU-hours lost by cause, effective compute per job.")
    p.add_argument("file", nargs="?", metavar="FILE",
                   help="a JSON Lines file of alerts ('-': stdin), e.g. 'stepwatch replay' output (default: the "
                        "alerts topic)")
    p.add_argument("--file", dest="file_option", metavar="FILE", help="the same as FILE (kept for older scripts)")
    p.add_argument("--since", type=parse_when, default=When(7 * DAY, relative=True), metavar="WHEN",
                   help="incidents that began this long before the newest alert (default 7d; e.g. 24h), or from "
                        "this time (Unix seconds or ISO 8601)")
    p.add_argument("--feedback", metavar="FILE",
                   help="verdicts from this JSON Lines file ('stepwatch feedback --export' output) instead of the "
                        "feedback topic")
    p.add_argument("--transient", type=float, default=OutcomeSettings().transient_seconds, metavar="SECONDS",
                   help="an alert that resolved by itself within this many seconds and never recurred is "
                        "'transient' (default %(default)s)")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.add_argument("--shadow", action="store_true",
                   help="compare the shadow (candidate) settings' alerts with the live ones over --since (counted "
                        "back from now): added, dropped, changed, with the feedback on them")
    p.add_argument("--html", metavar="FILE", help="write a self-contained HTML page with charts to FILE")
    p.add_argument("--bootstrap", metavar="HOST:PORT[,...]", help="Kafka bootstrap servers (default: KAFKA_BOOTSTRAP)")
    p.add_argument("--topic-prefix", metavar="PREFIX", help="topic prefix (default: STEPWATCH_KAFKA_TOPIC_PREFIX)")
    p.set_defaults(func=cmd_report)


def _window(since: When) -> dict[str, float]:
    """build_report's arguments for ``--since``: a duration back from the newest alert, or a time."""
    return {"since": since.seconds} if since.relative else {"start": since.seconds}


def _counted(alerts: Iterable[dict], stats: dict) -> Iterator[dict]:
    for alert in alerts:
        stats["alerts"] += 1
        yield alert


def cmd_report(args: argparse.Namespace) -> int:
    import dataclasses

    from stepwatch.config import Settings

    if args.file and args.file_option and args.file != args.file_option:
        raise SystemExit("stepwatch report: give the file once (FILE or --file)")
    from stepwatch.feedback import read_feedback
    from stepwatch.precision import read_config_changes

    path = args.file or args.file_option
    if args.shadow:  # stepwatch/shadow_report.py: the topics, not a file
        return _shadow_report(args)
    stats = {"alerts": 0}
    outcomes = OutcomeSettings(transient_seconds=args.transient)
    refused: list[str] = []
    verdicts = None
    if args.feedback:
        try:
            verdicts = read_feedback(path=args.feedback, refused=refused)
        except FileNotFoundError:
            raise SystemExit(f"stepwatch report: {args.feedback}: no such file") from None
    if path:
        try:
            report = build_report(_counted(read_jsonl(path), stats), **_window(args.since), verdicts=verdicts,
                                  outcomes=outcomes)
        except FileNotFoundError:
            raise SystemExit(f"stepwatch report: {path}: no such file") from None
        except IsADirectoryError:
            raise SystemExit(f"stepwatch report: {path}: is a directory") from None
        if not stats["alerts"]:
            raise SystemExit(f"stepwatch report: {path}: no alerts in it (expected JSON Lines of alerts, e.g. "
                             "'stepwatch replay' or 'stepwatch alerts --json' output)")
    else:
        settings = Settings.from_env()
        kafka = settings.kafka
        if args.bootstrap:
            kafka = dataclasses.replace(kafka, bootstrap=args.bootstrap)
        if args.topic_prefix is not None:
            kafka = dataclasses.replace(kafka, topic_prefix=args.topic_prefix)
        settings = dataclasses.replace(settings, kafka=kafka)
        if not kafka.bootstrap:
            raise SystemExit("stepwatch report: no Kafka bootstrap servers (set KAFKA_BOOTSTRAP or --bootstrap), "
                             "or read a file with --file")
        if verdicts is None:
            verdicts = read_feedback(settings, refused=refused)
        report = build_report(_counted(read_topic(settings), stats), **_window(args.since), verdicts=verdicts,
                              versions=Versions(read_config_changes(settings)), outcomes=outcomes)
        if not stats["alerts"]:
            print(f"stepwatch report: no alerts on {kafka.topic(kafka.alerts_topic)}", file=sys.stderr)
    for reason in refused:  # never silently: what was skipped
        print(f"stepwatch report: skipped a record that is not feedback ({reason})", file=sys.stderr)
    if args.html:
        with open(args.html, "w", encoding="utf-8") as f:
            f.write(format_html(report))
        print(f"stepwatch report: wrote {args.html} ({headline(report)})", file=sys.stderr)
    if args.json:
        sys.stdout.write(orjson.dumps(public(report), option=orjson.OPT_INDENT_2).decode() + "\n")
    elif not args.html:
        sys.stdout.write(format_text(report))
    return 0


def _shadow_report(args: argparse.Namespace) -> int:
    import dataclasses

    from stepwatch.config import Settings
    from stepwatch.shadow_report import cmd_shadow_report

    if args.file or args.file_option or args.html:
        raise SystemExit("stepwatch report: --shadow reads the topics (no FILE, no --html)")
    if not args.since.relative:
        raise SystemExit("stepwatch report: --shadow takes --since as a duration (e.g. 24h)")
    settings = Settings.from_env()
    kafka = settings.kafka
    if args.bootstrap:
        kafka = dataclasses.replace(kafka, bootstrap=args.bootstrap)
    if args.topic_prefix is not None:
        kafka = dataclasses.replace(kafka, topic_prefix=args.topic_prefix)
    if not kafka.bootstrap:
        raise SystemExit("stepwatch report: no Kafka bootstrap servers (set KAFKA_BOOTSTRAP or --bootstrap)")
    return cmd_shadow_report(dataclasses.replace(settings, kafka=kafka), args.since.seconds, as_json=args.json)
