"""Replay gen3's recordings and compare the alerts with labels.json.

python -m gen3.judge DIR [SCENARIO ...] (from tests/): replays each recording with
`stepwatch replay --drain 900` and prints, per scenario, each expected alert (found, right
ranks/nodes/evidence, delay, incidents) and every false alarm.
"""
from __future__ import annotations

import io
import json
import os
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def replay(path: str, in_process: bool = False) -> list[dict]:
    """The alerts of `stepwatch replay --drain 900 PATH`; `in_process`: the same function the command runs
    (stepwatch/commands/replay.py), without starting a Python per recording (the tests)."""
    if in_process:
        from stepwatch.config import Settings
        from stepwatch.recording import merge_recorded, replay as run

        buf = io.StringIO()
        run(merge_recorded([path]), Settings.from_env(), drain=900.0, out=buf)
        return [json.loads(line) for line in buf.getvalue().splitlines() if line.strip()]
    out = subprocess.run([sys.executable, "-m", "stepwatch.cli", "replay", "--drain", "900", path],
                         capture_output=True, text=True, check=True, cwd=REPO)
    return [json.loads(line) for line in out.stdout.splitlines() if line.strip()]


def matches(alert: dict, want: dict) -> bool:
    """Does this alert speak of what `want` (an expect or allow entry) describes?"""
    if alert["type"] != want["type"] or alert.get("job", "") != want.get("job", alert.get("job", "")):
        return False
    if "severity" in want and alert["severity"] != want["severity"]:
        return False
    ev = alert.get("evidence") or {}
    if "ranks" in want:
        if alert["type"] == "hang":
            # a hang lists its culprits first, then the ranks waiting on them (README, docs/hang.md)
            if sorted((alert.get("ranks") or [])[:len(want["ranks"])]) != sorted(want["ranks"]):
                return False
        elif ev.get("incident_scope") == "node" or want.get("evidence", {}).get("incident_scope") == "node":
            if not set(want["ranks"]) <= set(alert.get("ranks") or []):
                return False
        elif set(alert.get("ranks") or []) != set(want["ranks"]):
            return False
    if "nodes" in want and want["nodes"][0] not in (alert.get("nodes") or []):
        return False
    return True


def judge(alerts: list[dict], label: dict) -> dict:
    """{"expect": [per expected alert: ok, why, delay, ids], "false_alarms": [...], "ok": bool}"""
    firing = [a for a in alerts if a["status"] == "firing"]
    results, used = [], set()
    for want in label["expect"]:
        hits = [a for a in firing if matches(a, want)]
        r = {"want": {k: v for k, v in want.items() if k != "onset"}, "ok": True, "why": []}
        if not hits:
            same_type = [(a["ranks"], a["nodes"]) for a in firing if a["type"] == want["type"]]
            r.update(ok=False, why=[f"not fired (same type fired for {same_type})"])
            results.append(r)
            continue
        ids = sorted({a["id"] for a in hits})
        used.update(ids)
        r["ids"] = ids
        if len(ids) > want.get("incidents", 1):
            r["ok"] = False
            r["why"].append(f"{len(ids)} incidents")
        last = {}
        for a in hits:
            last[a["id"]] = a
        ev = {}
        for a in hits:
            ev.update(a.get("evidence") or {})
        for k, v in (want.get("evidence") or {}).items():
            if ev.get(k) != v:
                r["ok"] = False
                r["why"].append(f"evidence.{k}={ev.get(k)!r}, want {v!r}")
        if "cause_component" in want:
            comps = [c.get("component") for c in ev.get("suspected_causes") or []]
            if not comps or comps[0] != want["cause_component"]:
                r["ok"] = False
                r["why"].append(f"suspected causes {comps}, want {want['cause_component']} first")
        if "resolved" in want:
            res = [a for a in alerts if a["status"] == "resolved" and a["id"] in ids]
            rw = want["resolved"]
            got = [(a["evidence"] or {}).get("resolution") for a in res]
            if not res or got[0] != rw["resolution"]:
                r["ok"] = False
                r["why"].append(f"resolved {got}, want {rw['resolution']}")
            elif "by" in rw and res[0]["ends_at"] > rw["by"]:
                r["ok"] = False
                r["why"].append(f"resolved late: {res[0]['ends_at'] - rw['by']:.1f} s after the limit")
        for k in want.get("evidence_has", []):
            if k not in ev:
                r["ok"] = False
                r["why"].append(f"no evidence.{k}")
        if "onset" in want:
            first = min(a["starts_at"] for a in hits)
            r["delay"] = round(first - want["onset"], 1)
            if r["delay"] > want.get("max_delay", 60):
                r["ok"] = False
                r["why"].append(f"late: {r['delay']} s > {want['max_delay']}")
        results.append(r)
    # a rank's alert published before its node's other ranks were slow too is resolved as "grouped"
    # into the node incident (README): part of that incident, not a false alarm
    grouped = {a["id"] for a in alerts if a["status"] == "resolved"
               and (a.get("evidence") or {}).get("resolution") == "grouped"
               and (a.get("evidence") or {}).get("incident") in used}
    false = []
    for a in firing:
        if a["id"] in used or a["id"] in grouped or any(matches(a, w) for w in label.get("allow", [])):
            continue
        false.append({"id": a["id"], "type": a["type"], "severity": a["severity"], "job": a["job"],
                      "ranks": a["ranks"], "nodes": a["nodes"], "summary": a["summary"][:200]})
    # one entry per incident
    seen, fa = set(), []
    for f in false:
        if f["id"] not in seen:
            seen.add(f["id"])
            fa.append(f)
    return {"expect": results, "false_alarms": fa, "ok": all(r["ok"] for r in results) and not fa}


def main(argv: list[str]) -> int:
    d = argv[0]
    labels = json.load(open(os.path.join(d, "labels.json")))
    names = argv[1:] or sorted(labels)
    bad = 0
    for name in names:
        alerts = replay(os.path.join(d, labels[name]["file"]))
        with open(os.path.join(d, name + ".alerts.jsonl"), "w") as f:
            f.write("".join(json.dumps(a) + "\n" for a in alerts))
        res = judge(alerts, labels[name])
        bad += not res["ok"]
        print(f"{'PASS' if res['ok'] else 'FAIL'} {name}")
        for r in res["expect"]:
            w = r["want"]
            print(f"   expect {w['type']} {w.get('ranks', '')} {w.get('nodes', '')}: "
                  f"{'ok' if r['ok'] else 'WRONG'} delay={r.get('delay')} ids={len(r.get('ids', []))} "
                  f"{'; '.join(r['why'])}")
        for f in res["false_alarms"]:
            print(f"   FALSE {f['type']} {f['severity']} job={f['job']} ranks={f['ranks']} nodes={f['nodes']}: "
                  f"{f['summary']}")
    print(f"{len(names) - bad}/{len(names)} scenarios pass")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
