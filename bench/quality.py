"""Detection quality on the labelled scenario suite (stepwatch/sim/scenarios.py).

    .venv/bin/python bench/quality.py            # whole suite, table into BENCHMARKS.md
    .venv/bin/python bench/quality.py --only straggler-30pct-64 --no-write -v

Every scenario is written to a temporary folder (recording + labels JSON) and replayed through
the same code as ``stepwatch replay`` (the worker's ``Pipeline`` fed by ``stepwatch.recording.read_lines``;
with ``Settings.from_env()``), then scored against its labels:

* a problem is **detected** when an alert of its type fires within ``deadline_s`` of its onset
  (for stragglers the alert must name one of the labelled ranks; a hang alert is about the job,
  whether its diagnosis names the culprit is scored in the next item);
* **right rank**: of the alerts that fired inside a problem's window (onset .. end + grace) in
  that job, the share that name one of the labelled ranks;
* **right layer**: for a whole-job slowdown labelled with its cause (``detail.layer``), whether
  the first ``throughput_drop`` alert that caught it names that layer (``evidence.layer``);
* **right node**: for a network fault labelled with its node (``right_node``), whether every
  version (first and enriched) of the job-level alerts of its type fired in its window that names
  a node names that one, and one does; for a fabric-wide cause (``right_node: []``), that none
  names a node. Node alerts (``link_errors``, ``gpu_fault``) inside such a window on the labelled
  node are true, elsewhere false alarms;
* **right cause**: for a problem labelled with its cause (``detail.cause``: category, node and
  accepted components, e.g. a host fault), whether the first suspected cause of the alert that
  caught it (``evidence.suspected_causes[0]``) is that one;
* **false alarms**: firing alerts (one per alert id) that match no problem window, including
  every alert before a problem's onset, per 1,000 rank-hours of healthy rank time (all rank
  time minus the labelled ranks' problem windows);
* delays from onset to the first correct alert, in seconds and in steps (``detected_step -
  onset_step`` for step-based alerts, else seconds / the job's median step time);
* **incidents per root cause**: distinct alert ids that fired inside a problem's window for it
  (its job or its nodes, its type or one it accepts), counted together for the problems that share a
  labelled root cause (``root_cause.id``: a switch fault's fabric alert and the slowed jobs' alerts):
  one root cause should be one incident (``root_cause.alert_ids``: the most it may take);
* **right root cause**: for a problem labelled with its root cause (``root_cause.kind``), whether every
  firing version of the alerts in its window tells that cause: ``hang_culprit`` the hang names the
  culprit rank(s) and no other, through a watchdog teardown; ``lost_node`` the hang names only the lost
  node's ranks, no alert names the spare its ranks restarted on, a ``job_restart`` is classed
  ``lost_node``; ``fabric`` a ``fabric`` alert names the switch, the jobs' alerts cite its incident and
  name no node, no alert suggests draining a node; ``stage_compute`` the straggler names the rank and
  no ``comm_slowdown`` nor communication ``throughput_drop`` fires in the job;

``--root-cause`` runs the issue-26 recordings instead (tests/switch_gen.py, tests/pipeline_gen.py,
tests/fabric_gen.py: generators independent of the simulator) through the detection engine: a leaf
switch fault under 16 nodes across 4 jobs, a slow rank of a pipeline stage, a slower pipeline link,
a slow host, a straggler with node clocks seconds apart replayed in event-time order; per scenario,
the alert ids in all against the incidents expected, the network alerts, the drain actions, the
straggler alerts and their ``job_slowdown`` (section ``quality-root-cause``).
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

from stepwatch.models.alert_types import DERIVED_TYPES, NETWORK_TYPES

sys.path.insert(0, str(Path(__file__).resolve().parent))

#: An alert that fires up to this long after a problem's end still belongs to it.
GRACE_S = 15.0


def replay_file(recording: Path) -> tuple[list[dict], dict]:
    """Alerts of ``stepwatch replay RECORDING`` (same functions, in process) and its counters."""
    from stepwatch.config import Settings
    from stepwatch.models.pipeline import Pipeline, run_recording
    from stepwatch.recording import read_lines

    pipeline = Pipeline(settings=Settings.from_env())  # the worker's own pipeline, as `stepwatch replay`
    alerts, rejected = [], 0
    for out in run_recording(pipeline, read_lines([str(recording)])):
        alerts.extend(a.to_dict() for a in out.alerts)
        rejected += len(out.deadletters)
    stats = {"events": pipeline.engine.events_by_kind.total(), "rejected": rejected}
    stats["alerts"] = len(alerts)
    return alerts, stats


#: Verdicts derived from other alerts or from the job's own restarts (issue 16), not detections of a
#: labelled problem: not scored (a node_suspect names a node that other, scored, alerts implicated).
# (DERIVED_TYPES, models/alert_types.py)


def _first_firing(alerts: list[dict]) -> list[dict]:
    seen: set[str] = set()
    out = []
    for a in alerts:
        if a["status"] == "firing" and a["id"] not in seen and a["type"] not in DERIVED_TYPES:
            seen.add(a["id"])
            out.append(a)
    return out


def _named_ranks(alert: dict) -> set[int]:
    """The ranks an alert blames: a hang alert's culprits when it names some, else its ranks."""
    culprits = (alert.get("evidence") or {}).get("culprits")
    if alert["type"] == "hang" and isinstance(culprits, list):
        return {c["rank"] for c in culprits if isinstance(c, dict) and "rank" in c}
    return set(alert.get("ranks") or ())


def _right_cause(alert: dict, cause: dict) -> bool:
    """The alert's first suspected cause is the labelled one (category, node, one of the components)."""
    causes = (alert.get("evidence") or {}).get("suspected_causes") or []
    if not causes:
        return False
    first = causes[0]
    return (first.get("category") == cause.get("category") and first.get("node") == cause.get("node")
            and first.get("component") in cause.get("components", ()))


def score(labels: dict, alerts: list[dict]) -> dict:
    """Score one scenario's alerts against its labels (see the module doc)."""
    jobs = {j["job"]: j for j in labels["jobs"]}
    problems = labels["problems"]
    results = [{"type": p["type"], "alert_type": p["alert_type"], "detected": False, "delay_s": None,
                "delay_steps": None, "late_s": None, "in_window": 0, "right_rank": 0,
                "layer": (p.get("detail") or {}).get("layer"), "right_layer": None,
                "right_node": _right_node(p, alerts),
                "cause": (p.get("detail") or {}).get("cause"), "right_cause": None, "ids": set(),
                "root_cause": p.get("root_cause"), "right_root_cause": _right_root_cause(p, alerts)}
               for p in problems]
    false_alarms = []
    for a in _first_firing(alerts):
        t = a["starts_at"]
        ranks = _named_ranks(a)
        in_window = [i for i, p in enumerate(problems)
                     if (p["job"] == a["job"] or (not a["job"] and set(a["nodes"]) & set(p.get("right_node") or ())))
                     and (p["alert_type"] == a["type"] or a["type"] in p.get("accepts", ()))
                     and p["onset_ts"] is not None and p["onset_ts"] <= t <= p["end_ts"] + GRACE_S]
        if not in_window:
            false_alarms.append({"type": a["type"], "job": a["job"], "ranks": sorted(ranks), "starts_at": t,
                                 "summary": a["summary"][:160]})
            continue
        for i in in_window:
            results[i]["ids"].add(a["id"])
        own = [i for i in in_window if problems[i]["alert_type"] == a["type"]]
        if not own:
            continue  # an accepted side effect (e.g. a throughput drop caused by a straggler): not scored
        in_window = own
        named = [i for i in in_window if ranks & set(problems[i]["ranks"])]
        for i in (named[:1] or in_window[:1]):
            r = results[i]
            p = problems[i]
            if p["ranks"]:  # job-level problems name no rank
                r["in_window"] += 1
                r["right_rank"] += bool(named)
            localized = p["alert_type"] == "straggler" and bool(p["ranks"])
            if (named or not localized) and r["late_s"] is None and t > p["onset_ts"] + p["deadline_s"]:
                r["late_s"] = t - p["onset_ts"]
            if (named or not localized) and t <= p["onset_ts"] + p["deadline_s"] and not r["detected"]:
                r["detected"] = True
                r["delay_s"] = t - p["onset_ts"]
                if r["layer"] is not None:
                    r["right_layer"] = (a.get("evidence") or {}).get("layer") == r["layer"]
                if r["cause"] is not None:
                    r["right_cause"] = _right_cause(a, r["cause"])
                detected_step = (a.get("evidence") or {}).get("detected_step")
                step_time = jobs[p["job"]]["step_time"] or 1.0
                r["delay_steps"] = (detected_step - p["onset_step"] if detected_step is not None
                                    else r["delay_s"] / step_time)
    groups: dict[str, set] = defaultdict(set)  # problems of one labelled root cause: their ids together
    for r in results:
        if r["root_cause"]:
            groups[r["root_cause"]["id"]].update(r["ids"])
    for r in results:
        r["ids"] = len(groups[r["root_cause"]["id"]] if r["root_cause"] else r["ids"])
    rank_hours = sum(j["ranks"] * (j["end_ts"] - j["start_ts"]) for j in labels["jobs"]) / 3600
    sick_hours = sum(len(p["ranks"]) * max((p["end_ts"] or 0) - (p["onset_ts"] or 0), 0) for p in problems) / 3600
    return {"scenario": labels["scenario"], "healthy": labels["healthy"], "problems": results,
            "false_alarms": false_alarms, "healthy_rank_hours": rank_hours - sick_hours, "flaps": flaps(alerts)}


def flaps(alerts: list[dict]) -> int:
    """Alerts that fired again for the same thing (job, type, ranks, horizon or kind) after a first one:
    each repeat is a flap (one steady problem should give one alert)."""
    seen: dict[tuple, int] = defaultdict(int)
    for a in _first_firing(alerts):
        ev = a.get("evidence") or {}
        seen[(a["job"], a["type"], tuple(a.get("ranks") or ()), ev.get("horizon"), ev.get("kind"))] += 1
    return sum(n - 1 for n in seen.values())


def _right_node(p: dict, alerts: list[dict]) -> bool | None:
    """Whether the job-level alerts of a network problem name its labelled node (see the module doc)."""
    want = p.get("right_node")
    if want is None or p["onset_ts"] is None:
        return None
    named = [a["nodes"][0] if a["nodes"] else None for a in alerts
             if a["status"] == "firing" and a["type"] == p["alert_type"]
             and (a["job"] == p["job"] or (not a["job"] and set(a["nodes"]) & set(want)))  # a fabric alert: no job
             and p["onset_ts"] <= a["starts_at"] <= p["end_ts"] + GRACE_S]
    if not want:
        return bool(named) and all(n is None for n in named)
    return any(n in want for n in named) and all(n is None or n in want for n in named)


def _right_root_cause(p: dict, alerts: list[dict]) -> bool | None:
    """Whether the alerts in a problem's window tell its labelled root cause (see the module doc)."""
    cause = p.get("root_cause")
    if not cause or p["onset_ts"] is None:
        return None
    window = [a for a in alerts if a["status"] == "firing" and p["onset_ts"] <= a["starts_at"] <= p["end_ts"] + GRACE_S]
    in_job = [a for a in window if a["job"] == p["job"]]
    kind = cause["kind"]
    if kind == "hang_culprit":
        hangs = [a for a in in_job if a["type"] == "hang"]
        return bool(hangs) and all(_named_ranks(a) and _named_ranks(a) <= set(cause["ranks"]) for a in hangs)
    if kind == "lost_node":
        hangs = [a for a in in_job if a["type"] == "hang"]
        culprit_nodes = {c.get("node") for a in hangs for c in (a.get("evidence") or {}).get("culprits") or ()}
        spare = cause["spare"]
        blamed = any(spare in (a.get("nodes") or ()) or any(c.get("node") == spare for c in
                                                             (a.get("evidence") or {}).get("culprits") or ())
                     for a in alerts if a["status"] == "firing")
        restarts = [a for a in in_job if a["type"] == "job_restart"]
        return (bool(hangs) and culprit_nodes == {cause["node"]} and not blamed
                and all((a.get("evidence") or {}).get("cause") == "lost_node" for a in restarts))
    if kind == "fabric":
        fabric = [a for a in window if a["type"] == "fabric" and (a.get("evidence") or {}).get("switch") == cause["switch"]]
        incidents = {a["id"] for a in fabric}
        jobs = set((p.get("detail") or {}).get("jobs") or ()) | ({p["job"]} if p["alert_type"] != "fabric" else set())
        job_level = [a for a in window if a["job"] in jobs and a["type"] in ("comm_slowdown", "throughput_drop", "hang")]
        drained = any(((a.get("evidence") or {}).get("action") or {}).get("kind") == "drain_node" for a in alerts
                      if a["status"] == "firing")
        return (len(incidents) == 1 and not drained
                and all(not a["nodes"] and (a.get("evidence") or {}).get("incident") in incidents for a in job_level))
    if kind == "stage_compute":
        stragglers = [a for a in in_job if a["type"] == "straggler"]
        network = [a for a in in_job if a["type"] == "comm_slowdown" or (
            a["type"] == "throughput_drop" and (a.get("evidence") or {}).get("layer") == "communication")]
        return bool(stragglers) and all(set(a["ranks"]) <= set(cause["ranks"]) for a in stragglers) and not network
    raise ValueError(f"unknown root cause kind {kind!r}")


def run_one(name: str, workdir: str) -> dict:
    from stepwatch.sim import scenarios

    scenario = scenarios.get(name)
    started = time.perf_counter()
    recording, label_path = scenarios.write(scenario, workdir)
    generated = time.perf_counter()
    alerts, stats = replay_file(recording)
    replayed = time.perf_counter()
    labels = json.loads(label_path.read_text())
    result = score(labels, alerts)
    result.update(events=stats["events"], generate_s=generated - started, replay_s=replayed - generated,
                  ranks=sum(j["ranks"] for j in labels["jobs"]), tags=labels["tags"])
    recording.unlink()  # keep the labels; the recording is large and reproducible
    return result


def _pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    values = sorted(values)
    k = (len(values) - 1) * q
    lo, hi = math.floor(k), math.ceil(k)
    return values[lo] + (values[hi] - values[lo]) * (k - lo)


def _fmt(x: float | None, digits: int = 1) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def aggregate(results: list[dict]) -> dict:
    by_type: dict[str, dict] = defaultdict(lambda: {"n": 0, "detected": 0, "delays_s": [], "delays_steps": [],
                                                    "in_window": 0, "right_rank": 0, "late": [],
                                                    "layered": 0, "right_layer": 0, "noded": 0,
                                                    "right_node": 0, "caused": 0, "right_cause": 0, "ids": [],
                                                    "rooted": 0, "right_root": 0, "max_ids": None})
    for res in results:
        for p in res["problems"]:
            row = by_type[p["type"]]
            row["n"] += 1
            row["alert_type"] = p["alert_type"]
            row["in_window"] += p["in_window"]
            row["right_rank"] += p["right_rank"]
            if p.get("ids"):
                row["ids"].append(p["ids"])
            if p["late_s"] is not None and not p["detected"]:
                row["late"].append(p["late_s"])
            if p.get("right_node") is not None:
                row["noded"] += 1
                row["right_node"] += p["right_node"]
            if p.get("right_cause") is not None:
                row["caused"] += 1
                row["right_cause"] += p["right_cause"]
            if p.get("right_root_cause") is not None:
                row["rooted"] += 1
                row["right_root"] += p["right_root_cause"]
            if p.get("root_cause") and p["root_cause"].get("alert_ids") is not None:
                row["max_ids"] = p["root_cause"]["alert_ids"]
            if p.get("right_layer") is not None:
                row["layered"] += 1
                row["right_layer"] += p["right_layer"]
            if p["detected"]:
                row["detected"] += 1
                row["delays_s"].append(p["delay_s"])
                row["delays_steps"].append(p["delay_steps"])
    healthy_hours = sum(r["healthy_rank_hours"] for r in results)
    false_by_type: dict[str, int] = defaultdict(int)
    for r in results:
        for fa in r["false_alarms"]:
            false_by_type[fa["type"]] += 1
    return {"by_type": dict(by_type), "healthy_rank_hours": healthy_hours, "false_by_type": dict(false_by_type)}


def markdown(results: list[dict], agg: dict, command: str, wall_s: float, title: str = "") -> str:
    from _report import stamp

    from stepwatch.sim.scenarios import get

    lines = [f"## Detection quality (`bench/quality.py`){title}", "", stamp(command).rstrip(),
             f"- Suite: {len(results)} scenarios, {sum(r['events'] for r in results):,} events, "
             f"{sum(r['ranks'] for r in results):,} ranks in all; run took {wall_s:.0f} s",
             "- Detector settings: defaults (`stepwatch.config.Settings`), as `stepwatch replay` uses them", "",
             "### Per problem type", "",
             "Recall: problems caught within the deadline (stragglers: by an alert naming a labelled rank). "
             "Delays: onset to first correct alert, over the detected ones. Right rank: share of the alerts "
             "fired inside the problem windows that name a labelled rank. Right layer: share of the caught whole-job "
             "slowdowns whose first `throughput_drop` alert names the labelled cause (`evidence.layer`). Right node: "
             "share of the network faults whose job-level alerts name the labelled node first and no other "
             "(fabric-wide: name none). Right cause: "
             "share of the caught problems labelled with a cause (host faults) whose alert's first suspected cause "
             "is it (category, node, component). Incidents per root cause: distinct alert ids fired inside a problem's "
             "window for it (with the other problems of its labelled root cause), mean (max) over the problems that "
             "got one; [at most: the label's bound]. Right root cause: share of the problems labelled with a root "
             "cause whose alerts, every version, tell it (the culprit through a teardown, the lost node and never "
             "the spare, the switch's one fabric incident cited by the jobs, a pipeline rank's compute and no "
             "network alert).", "",
             "| problem | alert | n | recall | deadline | delay p50 s (steps) | delay p90 s (steps) | right rank | "
             "right layer | right node | right cause | right root cause | incidents per root cause | caught late |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    deadlines: dict[str, set] = defaultdict(set)
    for r in results:
        for p in get(r["scenario"]).problems:
            from stepwatch.sim.scenarios import DEFAULT_DEADLINE_S
            deadlines[p.type].add(p.deadline_s or DEFAULT_DEADLINE_S.get(p.alert_type, 60.0))
    for kind, row in sorted(agg["by_type"].items(), key=lambda kv: (kv[1]["alert_type"], kv[0])):
        ds, dn = row["delays_s"], row["delays_steps"]
        share = f"{row['right_rank'] / row['in_window']:.0%} ({row['right_rank']}/{row['in_window']})" \
            if row["in_window"] else "-"
        layer = f"{row['right_layer'] / row['layered']:.0%} ({row['right_layer']}/{row['layered']})" \
            if row["layered"] else "-"
        noded = f"{row['right_node'] / row['noded']:.0%} ({row['right_node']}/{row['noded']})" \
            if row["noded"] else "-"
        cause = f"{row['right_cause'] / row['caused']:.0%} ({row['right_cause']}/{row['caused']})" \
            if row["caused"] else "-"
        ids = f"{sum(row['ids']) / len(row['ids']):.1f} ({max(row['ids'])})" if row["ids"] else "-"
        if row["max_ids"] is not None:
            ids += f" [at most {row['max_ids']}]"
        root = f"{row['right_root'] / row['rooted']:.0%} ({row['right_root']}/{row['rooted']})" \
            if row["rooted"] else "-"
        lines.append(
            f"| {kind} | {row['alert_type']} | {row['n']} | {row['detected'] / row['n']:.0%} "
            f"({row['detected']}/{row['n']}) | {'/'.join(f'{d:.0f}' for d in sorted(deadlines[kind]))} s | "
            f"{_fmt(_pct(ds, 0.5))} ({_fmt(_pct(dn, 0.5))}) | {_fmt(_pct(ds, 0.9))} ({_fmt(_pct(dn, 0.9))}) | "
            f"{share} | {layer} | {noded} | {cause} | {root} | {ids} | {', '.join(f'{x:.0f} s' for x in row['late']) or '-'} |")
    hours = agg["healthy_rank_hours"]
    total_false = sum(agg["false_by_type"].values())
    lines += ["", "### False alarms", "",
              f"{total_false} false alarm(s) over {hours:,.1f} healthy rank-hours: "
              f"**{1000 * total_false / hours:.2f} per 1,000 rank-hours** "
              f"({', '.join(f'{k}: {v}' for k, v in sorted(agg['false_by_type'].items())) or 'none'}). "
              "Alerts before a problem's onset count as false. Flaps: alerts that fired again for the same "
              "job, type, ranks and horizon/kind after a first one.", "",
              "| scenario | ranks | events | healthy rank-h | false alarms | detected | flaps | replay s |",
              "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in results:
        det = sum(p["detected"] for p in r["problems"])
        lines.append(f"| {r['scenario']} | {r['ranks']} | {r['events']:,} | {r['healthy_rank_hours']:.1f} | "
                     f"{len(r['false_alarms'])} | {det}/{len(r['problems'])} | {r.get('flaps', 0)} | "
                     f"{r['replay_s']:.1f} |")
    shown = [(r["scenario"], fa) for r in results for fa in r["false_alarms"]][:10]
    if shown:
        lines += ["", "False alarms (first 10):", ""]
        lines += [f"- {name}: {fa['type']} ranks {fa['ranks']}: {fa['summary']}" for name, fa in shown]
    return "\n".join(lines) + "\n"


# -- issue 26: one incident per root cause, on recordings of generators independent of the simulator ----

# Network alert types: NETWORK_TYPES (models/alert_types.py).


def root_cause_scenarios() -> list[tuple[str, int, object]]:
    """(name, incidents expected, thunk -> [(true_time, Event)]) of the issue-26 recordings."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from fabric_gen import Job, events as fabric_events
    from pipeline_gen import PipelineJob, events as pipeline_events
    from switch_gen import Fleet, events as fleet_events

    def by_ts(evs):
        return sorted(evs, key=lambda x: x[1].ts)

    # expected: the fabric incident and the two jobs' job-level alerts (comm_slowdown, throughput_drop);
    # the slow rank's straggler; the slower link's one comm incident (every pipeline group in it) and throughput drop
    return [
        ("leaf switch fault, 16 of 32 nodes, 4 jobs", 5, lambda: fleet_events(Fleet(seed=3))),
        ("pipeline 4x8, one stage-1 rank 30% slow", 1,
         lambda: pipeline_events(PipelineJob(slow_rank=11, slow_factor=1.3, seed=2))),
        ("pipeline 4x8, receives only, same", 1,
         lambda: pipeline_events(PipelineJob(slow_rank=11, slow_factor=1.3, sends=False, seed=2))),
        ("pipeline 4x8, p2p links 3x slower", 2,
         lambda: pipeline_events(PipelineJob(slow_link=True, sends=False, seed=3))),
        ("slow host: 8 ranks of a node 15% slow", 1,
         lambda: fabric_events(Job(slow_node=2, straggler_factor=1.15, seed=0, steps=200, onset=50))),
        ("straggler 20%, clocks +4 s / -2.5 s, event-time order", 1,
         lambda: by_ts(fabric_events(Job(straggler=21, straggler_factor=1.2, skew={1: 4.0, 5: -2.5}, seed=0,
                                         steps=140, onset=50)))),
        ("one rank 2x slow (64 ranks)", 1,
         lambda: fabric_events(Job(straggler=13, straggler_factor=2.0, transfer=0.01, seed=4, steps=120, onset=40))),
    ]


def run_root_cause() -> list[dict]:
    from stepwatch.models.detection import DetectionEngine

    rows = []
    for name, expected, make in root_cause_scenarios():
        evs = make()
        engine = DetectionEngine()
        started = time.perf_counter()
        alerts, next_tick = [], None
        for _, ev in evs:  # as `stepwatch replay` ticks: on the events' own clock, every tick interval
            alerts.extend(engine.process(ev))
            if next_tick is None:
                next_tick = engine.clock + engine.settings.worker.tick_interval
            elif engine.clock >= next_tick:
                alerts.extend(engine.tick(engine.clock))
                next_tick = engine.clock + engine.settings.worker.tick_interval
        wall = time.perf_counter() - started
        first = {a.id: a for a in reversed(alerts) if a.status == "firing" and a.type not in DERIVED_TYPES}
        stragglers = [a for a in first.values() if a.type == "straggler"]
        rows.append({"scenario": name, "events": len(evs), "expected": expected, "ids": len(first),
                     "types": dict(sorted(defaultdict(int, {t: sum(a.type == t for a in first.values())
                                                             for t in {a.type for a in first.values()}}).items())),
                     "network": sum(a.type in NETWORK_TYPES for a in first.values()),
                     "drain": sum((a.evidence.get("action") or {}).get("kind") == "drain_node" for a in alerts
                                  if a.status == "firing"),
                     "job_slowdown": [a.evidence.get("job_slowdown") for a in stragglers],
                     "replay_s": wall})
    return rows


def root_cause_markdown(rows: list[dict], command: str) -> str:
    from _report import stamp

    lines = ["## Detection quality: one incident per root cause (`bench/quality.py --root-cause`)", "",
             stamp(command).rstrip(),
             "- Recordings of tests/switch_gen.py, tests/pipeline_gen.py and tests/fabric_gen.py (independent of the "
             "simulator), through the detection engine with default settings, ticked on the events' clock", "",
             "Alert ids: distinct ids fired (node_suspect and job_restart verdicts left out). Network: `comm_slowdown`, "
             "`link_errors`, `fabric` ids. Drain: firing versions whose `evidence.action.kind` is `drain_node`.", "",
             "| scenario | events | incidents expected | alert ids | by type | network | drain | straggler job_slowdown "
             "| replay s |",
             "|---|---:|---:|---:|---|---:|---:|---|---:|"]
    for r in rows:
        types = ", ".join(f"{t} {n}" for t, n in r["types"].items()) or "-"
        slow = ", ".join(f"{x:.2f}x" for x in r["job_slowdown"] if isinstance(x, (int, float))) or "-"
        lines.append(f"| {r['scenario']} | {r['events']:,} | {r['expected']} | {r['ids']} | {types} | {r['network']} | "
                     f"{r['drain']} | {slow} | {r['replay_s']:.1f} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    from stepwatch.sim import scenarios

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", action="append", metavar="NAME", help="run only this scenario (repeatable)")
    ap.add_argument("--tags", action="append", help="run only scenarios with this tag (repeatable)")
    ap.add_argument("--exclude", action="append", default=[], help="skip scenarios with this tag")
    ap.add_argument("-j", "--jobs", type=int, default=1, help="scenarios replayed in parallel (default 1)")
    ap.add_argument("--no-write", action="store_true", help="do not update BENCHMARKS.md")
    ap.add_argument("--json", metavar="FILE", help="also write the per-scenario results as JSON")
    ap.add_argument("--keep", metavar="DIR", help="keep the labels (and alerts) in DIR instead of a temp folder")
    ap.add_argument("--section", default="quality",
                    help="BENCHMARKS.md section to write (default quality; e.g. quality-host for --tags host)")
    ap.add_argument("-v", "--verbose", action="store_true")
    ap.add_argument("--root-cause", action="store_true",
                    help="run the issue-26 recordings (one incident per root cause) instead of the suite")
    ap.add_argument("--curves", action="store_true",
                    help="precision/recall per rule over its main threshold (bench/pr_curves.py, stepwatch backtest)")
    args = ap.parse_args(argv)
    if args.curves:
        from pr_curves import main as curves

        return curves(write=not args.no_write)
    if args.root_cause:
        rows = run_root_cause()
        text = root_cause_markdown(rows, ".venv/bin/python bench/quality.py --root-cause")
        print(text)
        if args.json:
            Path(args.json).write_text(json.dumps({"results": rows}, indent=1, default=str))
        if not args.no_write:
            from _report import update_section

            update_section("quality-root-cause", text)
            print("updated BENCHMARKS.md", file=sys.stderr)
        return 0

    if args.only:
        names = args.only
    else:
        names = [s.name for s in scenarios.suite(args.tags, exclude=args.exclude)]
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="stepwatch-quality-") as tmp:
        workdir = args.keep or tmp
        Path(workdir).mkdir(parents=True, exist_ok=True)
        if args.jobs > 1:
            with multiprocessing.get_context("spawn").Pool(args.jobs) as pool:
                results = pool.starmap(run_one, [(n, workdir) for n in names])
        else:
            results = []
            for n in names:
                results.append(run_one(n, workdir))
                if args.verbose:
                    r = results[-1]
                    print(f"{n}: {r['events']} events in {r['replay_s']:.1f} s, detected "
                          f"{sum(p['detected'] for p in r['problems'])}/{len(r['problems'])}, "
                          f"{len(r['false_alarms'])} false", file=sys.stderr)
    wall = time.perf_counter() - started
    agg = aggregate(results)
    command = ".venv/bin/python bench/quality.py" + (" " + " ".join(argv if argv is not None else sys.argv[1:])
                                                      if (argv if argv is not None else sys.argv[1:]) else "")
    text = markdown(results, agg, command, wall,
                    "" if args.section == "quality" else f": {', '.join(args.tags or args.only or [args.section])}")
    print(text)
    if args.json:
        Path(args.json).write_text(json.dumps({"results": results}, indent=1, default=str))
    if not args.no_write:
        from _report import update_section

        update_section(args.section, text)
        print("updated BENCHMARKS.md", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
