"""Replay the public traces in ../shared/data through stepwatch and explain what it alerts on.

    .venv/bin/python bench/traces.py            # table into BENCHMARKS.md

Each trace is converted with ``stepwatch import`` (``stepwatch.importer``, presets ``alibaba-pai``
and ``bytedance-straggler``) into a temporary JSON Lines file, replayed through the same code
as ``stepwatch replay``, and the alerts are reported with the per-rank statistics that explain
them: for every rank, its median ratio to its peer group's median on the compared signal, and
how often a step met the slow-step rule (ratio >= ratio_threshold and robust z >= z_threshold;
an alert needs min_flagged of window consecutive judged steps). A counterfactual replay with
the pipeline stages ignored (the whole job one peer group) shows what a stage-blind detector
would say.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared" / "data"

TRACES = [
    ("ByteDance SE", "bytedance-straggler-analysis/trace-SE.parquet", "bytedance-straggler",
     "sequence-length imbalance: per-rank compute varies with the data, no persistent straggler (M_W 0.03)"),
    ("ByteDance ST", "bytedance-straggler-analysis/trace-ST.parquet", "bytedance-straggler",
     "stage-partitioning imbalance: the last pipeline stage is slower by design (M_S 1.22)"),
    ("Alibaba PAI job_2", "alibaba-pai-minibatch/job_2_norm.csv", "alibaba-pai",
     "stable, but persistent per-worker offsets (no onset)"),
    ("Alibaba PAI job_4", "alibaba-pai-minibatch/job_4_norm.csv", "alibaba-pai",
     "possibly several stragglers; mini-batch time fluctuates"),
]


def replay_events(events: list[dict], tmp: Path, name: str) -> list[dict]:
    """Write the events as ``stepwatch import`` does and replay them as ``stepwatch replay`` does."""
    from stepwatch import importer
    from stepwatch.config import Settings
    from stepwatch.models.pipeline import Pipeline, run_recording
    from stepwatch.recording import read_lines

    path = tmp / f"{name}.jsonl"
    with open(path, "wb") as f:
        importer.write_jsonl(events, f)
    alerts, rejected = [], []
    for out in run_recording(Pipeline(settings=Settings.from_env()), read_lines([str(path)])):
        alerts.extend(a.to_dict() for a in out.alerts)
        rejected.extend(d.rejected.reason for d in out.deadletters)
    assert not rejected, rejected[:5]
    return alerts


def rank_stats(events: list[dict], *, by_group: bool = True, min_peers: int = 2) -> dict:
    """Per-rank ratio to the peer median and the share of steps meeting the slow-step rule.

    Groups down to ``min_peers`` ranks are included (the detector itself skips groups below its
    ``min_peers`` setting, 4 by default)."""
    from stepwatch.config import Settings

    s = Settings.from_env().straggler
    rows: dict[tuple[str, int], dict[int, float]] = defaultdict(dict)
    signal = "compute_time"
    for e in events:
        if e["kind"] != "step":
            continue
        if "compute_time" not in e:
            signal = "step_time"
        group = str(e.get("group", "")) if by_group else ""
        rows[(group, e["step"])][e["rank"]] = e.get(signal, e["step_time"])
    ratios: dict[int, list[float]] = defaultdict(list)
    slow: dict[int, list[bool]] = defaultdict(list)
    groups: dict[int, str] = {}
    first = min(step for _, step in rows) if rows else 0
    for (group, step), vals in sorted(rows.items(), key=lambda kv: kv[0][1]):
        if len(vals) < min_peers or step < first + s.warmup_steps:
            continue
        ranks = np.fromiter(vals, dtype=np.int64)
        x = np.fromiter(vals.values(), dtype=float)
        med = float(np.median(x))
        if med <= 0:
            continue
        mad = 1.4826 * float(np.median(np.abs(x - med)))
        spread = max(mad, s.spread_floor * med, 1e-9)
        r = x / med
        z = (x - med) / spread
        for rank, ri, zi in zip(ranks, r, z):
            ratios[int(rank)].append(float(ri))
            slow[int(rank)].append(bool(ri >= s.ratio_threshold and zi >= s.z_threshold))
            groups[int(rank)] = group
    out = {}
    sizes = Counter(groups.values())
    for rank in sorted(ratios):
        flags = slow[rank]
        best = max((sum(flags[i:i + s.window]) for i in range(max(len(flags) - s.window + 1, 1))), default=0)
        out[rank] = {"median_ratio": float(np.median(ratios[rank])), "p90_ratio": float(np.percentile(ratios[rank], 90)),
                     "cov_ratio": float(np.std(ratios[rank]) / np.mean(ratios[rank])),
                     "slow_share": float(np.mean(flags)), "max_slow_in_window": int(best), "group": groups[rank],
                     "steps": len(flags), "group_size": sizes[groups[rank]]}
    return {"signal": signal, "ranks": out, "settings": s}


def _alert_line(alerts: list[dict]) -> str:
    firing = [a for a in alerts if a["status"] == "firing"]
    if not firing:
        return "none"
    by_type = Counter(a["type"] for a in firing)
    ranks = sorted({r for a in firing for r in a["ranks"]})
    return (", ".join(f"{n} {t}" for t, n in by_type.items()) + f" firing (ranks {ranks[:12]}"
            + ("..." if len(ranks) > 12 else "") + ")")


def analyse(title: str, rel: str, preset: str, truth: str, tmp: Path) -> dict:
    from stepwatch import importer

    path = SHARED / rel
    started = time.perf_counter()
    events = importer.convert([path], importer.PRESETS[preset])
    importer.validate(events)
    alerts = replay_events(events, tmp, path.stem)
    steps = [e for e in events if e["kind"] == "step"]
    n_groups = len({e.get("group") for e in steps})
    stats = rank_stats(events)
    blind = None
    if n_groups > 1:
        flat = [{k: v for k, v in e.items() if k != "group"} for e in events]
        blind = {"alerts": replay_events(flat, tmp, path.stem + "-stage-blind"),
                 "stats": rank_stats(flat, by_group=False)}
    return {"title": title, "file": rel, "preset": preset, "truth": truth, "events": len(events),
            "step_events": len(steps), "ranks": len({e["rank"] for e in steps}),
            "steps": len({e["step"] for e in steps}), "groups": n_groups, "alerts": alerts, "stats": stats,
            "blind": blind, "seconds": time.perf_counter() - started}


def _worst(stats: dict, k: int = 3) -> str:
    ranks = sorted(stats["ranks"].items(), key=lambda kv: -kv[1]["median_ratio"])[:k]
    return ", ".join(f"r{r} {v['median_ratio']:.2f}x" for r, v in ranks)


def explain(res: dict) -> str:
    st = res["stats"]
    s = st["settings"]
    ranks = st["ranks"]
    firing = [a for a in res["alerts"] if a["status"] == "firing"]
    max_share = max((v["slow_share"] for v in ranks.values()), default=0)
    max_win = max((v["max_slow_in_window"] for v in ranks.values()), default=0)
    ratios = [v["median_ratio"] for v in ranks.values()]
    covs = [v["cov_ratio"] for v in ranks.values()]
    lines = [f"### {res['title']} (`{res['file']}`)", "",
             f"- Authors' finding: {res['truth']}.",
             f"- Imported: {res['events']:,} events ({res['step_events']:,} step events), {res['ranks']} ranks, "
             f"{res['steps']} steps, {res['groups']} peer group(s); signal compared: `{st['signal']}`.",
             f"- **stepwatch alerts: {_alert_line(res['alerts'])}.**",
             f"- Per-rank median ratio to the peer median: {min(ratios):.2f}-{max(ratios):.2f} (highest: "
             f"{_worst(st)}); step-to-step CoV of a rank's ratio: median {np.median(covs):.1%}. "
             f"Steps meeting the slow-step rule (ratio >= {s.ratio_threshold}, z >= {s.z_threshold}): at most "
             f"{max_share:.1%} of a rank's steps, at most {max_win} in any {s.window} consecutive "
             f"(an alert needs {s.min_flagged})."]
    smallest = min((v["group_size"] for v in ranks.values()), default=0)
    if smallest < s.min_peers:
        lines.append(f"- Peer groups have {smallest} ranks, fewer than `min_peers` = {s.min_peers}: the detector does "
                     "not compare ranks there at all (a median of two cannot tell which one is slow; with two "
                     "peers the robust z of the slower one is at most 0.67).")
    if res["blind"] is not None:
        b = res["blind"]
        bstats = b["stats"]["ranks"]
        by_group: dict[str, list[float]] = defaultdict(list)
        for v, bv in zip(ranks.values(), bstats.values()):
            by_group[v["group"]].append(bv["median_ratio"])
        lines.append(f"- Counterfactual, stages ignored (one peer group for the whole job): "
                     f"{_alert_line(b['alerts'])}; median ratio per stage: "
                     + ", ".join(f"stage {g} {np.median(v):.2f}x" for g, v in sorted(by_group.items())) + ".")
    if firing:
        by_rank: dict[int, list[dict]] = defaultdict(list)
        for a in firing:
            for r in a["ranks"]:
                by_rank[r].append(a)
        sample = sorted(by_rank)[:6]
        lines.append("- Flagged ranks: " + "; ".join(
            f"r{r}: {len(by_rank[r])} episode(s), e.g. {by_rank[r][0]['evidence'].get('ratio')}x since step "
            f"{by_rank[r][0]['evidence'].get('first_step')}" for r in sample) + ".")
    return "\n".join(lines)


def _imbalance_cell(firing: list[dict]) -> str:
    """The imbalance findings of a trace, briefly: stage (slow stages, ratio) or classes (sizes, ratio)."""
    out = []
    for a in firing:
        if a["type"] != "imbalance":
            continue
        ev = a["evidence"]
        if ev["kind"] == "stage":
            out.append(f"stage: {', '.join(map(str, ev['slow_groups']))} {ev['ratio']}x the median stage, "
                       f"others wait {ev['wait_share']:.0%}")
        else:
            out.append(f"classes: {' / '.join(str(len(c['ranks'])) for c in ev['classes'])} ranks, "
                       f"{ev['ratio']}x")
    return "; ".join(out) or "none"


def _job_level_note(res: dict) -> str:
    """The job-level rules' alerts on a trace, explained."""
    firing = [a for a in res["alerts"] if a["status"] == "firing"]
    drops = [a for a in firing if a["type"] == "throughput_drop"]
    stale = [a for a in firing if a["type"] == "checkpoint_stale"]
    out = ""
    if drops:
        lost = [1 - 1 / (1 + a["evidence"]["slowdown"]) for a in drops]
        out += (f" The throughput rule fires {len(drops)} time(s), on rises of the job's typical step time (the "
                f"median rank's) that cost {min(lost):.0%}-{max(lost):.0%} of its throughput against its own "
                "baseline for a few hundred to a couple of thousand steps, and resolves each when the step time is "
                "back: with the median between the two classes, the same swings move the job as a whole, and a "
                "job-level rule reports them once per episode (the trace has no compute/communication split, so "
                "the layer is `unknown`).")
    if stale:
        out += (" `checkpoint_stale` fires once: the trace has no checkpoint events, so after an hour of "
                "(synthetic) job time the job counts as never having checkpointed, which is what the rule is "
                "for; a recording with phase events would not show it.")
    return out


def verdict(res: dict) -> str:
    """Why stepwatch said what it said, per trace (the interpretation part of the report)."""
    st = res["stats"]["ranks"]
    firing = [a for a in res["alerts"] if a["status"] == "firing" and a["type"] == "straggler"]
    title = res["title"]
    if title.startswith("ByteDance SE"):
        return ("Quiet, as it should be: compute varies from step to step with the sequence lengths, so a rank is "
                "slow on some steps but never on enough consecutive ones; per rank the median ratio stays near "
                "1.0, and the comparison is within each pipeline stage. Across stages there is a real imbalance "
                "(the stage-blind ratios above: the second stage computes ~1.5x the first), which the stage rule "
                "reports once as an `imbalance` (info); with two stages the median stage is their mean, hence "
                "the ratio of ~1.2.")
    if title.startswith("ByteDance ST"):
        b = res["blind"]
        n = len([a for a in b["alerts"] if a["status"] == "firing"]) if b else 0
        return ("Quiet, as it should be, for two reasons: ranks are compared only within their pipeline stage "
                "(`group` = stage), and here a stage has 2 data-parallel ranks, below `min_peers`, so no within-stage "
                "comparison is made at all (the ratios above show the two replicas of a stage are alike anyway). "
                f"Comparing across stages would flag the slow stage ({n} alert(s) in the stage-blind run): a stage "
                "imbalance is a partitioning problem, not a bad worker, and the stage rule (models/steps/imbalance.py) "
                "reports it as what it is: one `imbalance` alert (kind stage, info) naming the last stage, the share "
                "of each step the other stages wait for it and the step time a balanced partition would give.")
    if title.endswith("job_2"):
        worst = max(v["median_ratio"] for v in st.values())
        return (f"Quiet. The per-worker offsets are real and persistent, but the slowest worker is only "
                f"{worst:.2f}x the median of all ten, under the {res['stats']['settings'].ratio_threshold}x "
                "threshold, and the offsets themselves widen the MAD-based spread, so the robust z stays low. "
                "With no onset there is no episode for the short rule; the persistent offset is the long-horizon "
                "rule's (models/steps/long_straggler.py): it reports the slow worker(s) once, as `info`, with the cost.")
    if title.endswith("job_4"):
        ranks = sorted({r for a in firing for r in a["ranks"]})
        return (f"Alerts on ranks {ranks}, on and off. The ten workers form two stable classes: five at about "
                "0.06 and five at 0.18-0.30 (later two of them near 0.95), a persistent 3-4x split from the first "
                "sample, with no onset. When a step's reports split 5/5 the median falls between the classes and "
                "the MAD spans the gap, so the robust z stays under the threshold and nothing fires; when the fast "
                "class is the majority (worker 0 swings between the classes), the median drops into it and the "
                "slow workers are flagged until it swings back. The ratios are real, but the rule is built for a "
                "few slow ranks among many alike peers: half a job being 3-4x slower is heterogeneity (these "
                "workers share GPUs). The class rule (models/steps/imbalance.py) now reports it once, as an `imbalance` "
                "of kind classes within the first steps, and the per-rank rules compare workers within their "
                "class; the picture changes once, when two workers move to ~0.95 (three classes). The remaining "
                "per-rank alerts are within-class episodes (a worker of one class slower than its class)."
                + _job_level_note(res))
    return ""


def main(argv: list[str] | None = None) -> int:
    from _report import stamp, update_section

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--no-write", action="store_true", help="do not update BENCHMARKS.md")
    args = ap.parse_args(argv)
    if not SHARED.exists():
        print(f"bench/traces.py: {SHARED} not found (the shared traces live beside the repository)", file=sys.stderr)
        return 2
    parts = ["## Real traces (`bench/traces.py`)", "", stamp(".venv/bin/python bench/traces.py").rstrip(),
             "- Detector settings: defaults; traces converted with `stepwatch import --preset ...` "
             "(ByteDance: compute = forward + backward + optimizer per rank and step, group = pipeline stage, "
             "collectives from reduce-scatter/all-gather/all-reduce; Alibaba: step_time = batch_time_norm/1000, "
             "one synthetic second per sample index).", "",
             "| trace | ranks | steps | groups | straggler alerts (short / long) | imbalance | hang alerts | expected |",
             "|---|---:|---:|---:|---|---|---|---|"]
    details = []
    with tempfile.TemporaryDirectory(prefix="stepwatch-traces-") as tmp:
        for title, rel, preset, truth in TRACES:
            if not (SHARED / rel).exists():
                details.append(f"### {title}\n\nskipped: {rel} not found")
                continue
            res = analyse(title, rel, preset, truth, Path(tmp))
            firing = [a for a in res["alerts"] if a["status"] == "firing"]
            strag = [a for a in firing if a["type"] == "straggler"]
            short = [a for a in strag if a["evidence"].get("horizon") != "long"]
            hang = [a for a in firing if a["type"] == "hang"]
            expected = {"ByteDance ST": "stage imbalance (last stage), no per-rank straggler",
                        "Alibaba PAI job_4": "rank classes"}.get(title, "no per-rank straggler"
                                                                   if "ByteDance" in title else "-")
            parts.append(f"| {title} | {res['ranks']} | {res['steps']} | {res['groups']} | "
                         f"{len(short)} / {len(strag) - len(short)} (ranks "
                         f"{sorted({r for a in strag for r in a['ranks']}) or '-'}) | {_imbalance_cell(firing)} | "
                         f"{len(hang)} | {expected} |")
            details.append(explain(res) + "\n- Why: " + verdict(res))
            print(details[-1] + "\n", file=sys.stderr)
    text = "\n".join(parts) + "\n\n" + "\n\n".join(details) + "\n"
    print(text)
    if not args.no_write:
        update_section("traces", text)
        print("updated BENCHMARKS.md", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
