"""Precision/recall per rule over its main threshold (issue 41 item 4), by ``stepwatch backtest``'s functions on the
labelled scenario library: ``bench/quality.py --curves`` (an SVG in docs/, the table in BENCHMARKS.md).

For each rule and each threshold, every scenario of a bounded set is replayed with that setting as the candidate
(``stepwatch.recording.candidate_lines``, the settings as ``stepwatch config set`` would put them) and scored
against its labels (``stepwatch.backtest.score``: paging alerts of the rule's type, problems of that type),
summed over the scenarios. The SVG is written by hand (no plotting library needed).
"""

from __future__ import annotations

import io
import tempfile
import time
from pathlib import Path

#: (rule: the alert type scored, the setting swept, its values: the default among them).
RULES = (
    ("straggler", "straggler.ratio_threshold", (1.03, 1.06, 1.1, 1.2, 1.4, 2.0)),
    ("throughput_drop", "job_health.throughput_threshold", (0.1, 0.25, 0.4, 0.8)),
)
#: Scenarios with problems of those types and healthy ones (false alarms), small enough to replay in seconds.
SCENARIOS = ("healthy-8", "healthy-64", "straggler-5pct-8", "straggler-10pct-32", "straggler-30pct-64",
             "straggler-2x-8", "intermittent-64", "thermal-ramp-64", "dataloader-stall-64", "job-slowdown-64")
DRAIN_S = 60.0


def _alerts(recording: Path, overrides: dict) -> list[dict]:
    import orjson

    from stepwatch.recording import candidate_lines
    from stepwatch.config import Settings
    from stepwatch.recording import merge_recorded, replay

    out = io.StringIO()
    replay(candidate_lines(merge_recorded([str(recording)]), overrides), Settings.from_env(), drain=DRAIN_S, out=out)
    return [orjson.loads(line) for line in out.getvalue().splitlines() if line.strip()]


def curves(scenarios: tuple[str, ...] = SCENARIOS, rules=RULES) -> list[dict]:
    """One row per (rule, threshold): summed true, false, found, known, and precision, recall."""
    import json

    from stepwatch.backtest import Labels, score
    from stepwatch.runtime_config import parse_assignments
    from stepwatch.sim import scenarios as library

    rows = []
    with tempfile.TemporaryDirectory(prefix="stepwatch-curves-") as tmp:
        written = [library.write(library.get(name), tmp) for name in scenarios]
        labelled = [(rec, json.loads(path.read_text())["problems"]) for rec, path in written]
        for rule, setting, values in rules:
            for value in values:
                overrides = parse_assignments([f"{setting}={value}"])
                total = {"true": 0, "false": 0, "found": 0, "known": 0}
                for recording, problems in labelled:
                    alerts = [a for a in _alerts(recording, overrides) if a["type"] == rule]
                    mine = tuple(p for p in problems if p["alert_type"] == rule)
                    s = score(alerts, Labels(problems=mine)) if mine else {
                        "true": 0, "false": len({a["id"] for a in alerts if a["status"] == "firing"
                                                 and a.get("severity") != "info"}), "found": 0, "known": 0}
                    for k in total:
                        total[k] += s[k]
                rows.append({"rule": rule, "setting": setting, "value": value, **total,
                             "precision": total["true"] / (total["true"] + total["false"])
                             if total["true"] + total["false"] else None,
                             "recall": total["found"] / total["known"] if total["known"] else None})
                print("curve:", rows[-1], flush=True)
    return rows


def svg(rows: list[dict], width: int = 720, height: int = 360) -> str:
    """A precision/recall chart per rule, side by side: recall across, precision up, each point its threshold."""
    rules = list(dict.fromkeys(r["rule"] for r in rows))
    panel, pad = width // max(1, len(rules)), 40
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
             f'font-family="sans-serif" font-size="11">', f'<rect width="{width}" height="{height}" fill="white"/>']
    for i, rule in enumerate(rules):
        x0, w, h = i * panel + pad, panel - 2 * pad, height - 2 * pad
        parts.append(f'<text x="{x0 + w / 2}" y="20" text-anchor="middle" font-size="13">{rule}: '
                     f'{rows[[r["rule"] for r in rows].index(rule)]["setting"].split(".")[1]}</text>')
        parts.append(f'<rect x="{x0}" y="{pad}" width="{w}" height="{h}" fill="none" stroke="#999"/>')
        for t in (0.0, 0.5, 1.0):
            parts.append(f'<text x="{x0 + t * w}" y="{pad + h + 14}" text-anchor="middle">{t:.1f}</text>')
            parts.append(f'<text x="{x0 - 4}" y="{pad + (1 - t) * h + 4}" text-anchor="end">{t:.1f}</text>')
        parts.append(f'<text x="{x0 + w / 2}" y="{pad + h + 28}" text-anchor="middle">recall</text>')
        parts.append(f'<text x="{x0 - 30}" y="{pad + h / 2}" transform="rotate(-90 {x0 - 30} {pad + h / 2})" '
                     f'text-anchor="middle">precision</text>')
        points = [(r["recall"], r["precision"], r["value"]) for r in rows
                  if r["rule"] == rule and r["recall"] is not None and r["precision"] is not None]
        xy = [(x0 + rec * w, pad + (1 - prec) * h, v) for rec, prec, v in points]
        if len(xy) > 1:
            parts.append('<polyline fill="none" stroke="#1f77b4" stroke-width="1.5" points="'
                         + " ".join(f"{x:.1f},{y:.1f}" for x, y, _ in xy) + '"/>')
        for x, y, v in xy:
            parts.append(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="3" fill="#1f77b4"/>'
                         f'<text x="{x + 5:.1f}" y="{y - 5:.1f}">{v:g}</text>')
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


def markdown(rows: list[dict], command: str, wall_s: float) -> str:
    def pct(x) -> str:
        return "-" if x is None else f"{100 * x:.0f}%"

    lines = ["## Precision and recall per rule over its threshold (`bench/quality.py --curves`)", "",
             f"- Date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; command: `{command}`; "
             f"{wall_s:.0f} s wall on a shared 2-core machine.",
             f"- Scenarios ({len(SCENARIOS)}, stepwatch/sim/scenarios.py): {', '.join(SCENARIOS)}; "
             f"`--drain {DRAIN_S:g}`; paging alerts (warning, critical) of the rule's type against the problems "
             "of that type (`stepwatch backtest --labels`'s scoring); false: alerts in no such problem's window.",
             "- Chart: [docs/quality_curves.svg](docs/quality_curves.svg).", "",
             "| rule | setting | value | true | false | found / problems | precision | recall |",
             "|---|---|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['rule']} | `{r['setting']}` | {r['value']:g} | {r['true']} | {r['false']} | "
                     f"{r['found']} / {r['known']} | {pct(r['precision'])} | {pct(r['recall'])} |")
    return "\n".join(lines)


def main(write: bool = True) -> int:
    started = time.perf_counter()
    rows = curves()
    wall = time.perf_counter() - started
    text = markdown(rows, ".venv/bin/python bench/quality.py --curves", wall)
    print(text)
    if write:
        root = Path(__file__).resolve().parent.parent
        (root / "docs" / "quality_curves.svg").write_text(svg(rows))
        from _report import update_section

        update_section("quality-curves", text)
        print("updated BENCHMARKS.md and docs/quality_curves.svg")
    return 0
