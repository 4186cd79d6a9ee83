"""``stepwatch report``: counts, MTTRs and time to detect from alerts, as text, JSON and HTML (issue 16)."""

from __future__ import annotations

import json
import re
import statistics
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from fleet import Job, job_events, merge, xid_event
from stepwatch.report import build_report, public

REPO = Path(__file__).resolve().parents[2]
CHROMIUM = Path("/usr/bin/chromium")
T0 = 1_764_000_000.0


def stepwatch(*args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "stepwatch.cli", *args], input=stdin, capture_output=True,
                          cwd=REPO, timeout=300, check=True)


def hand_alert(ident: str, kind: str, status: str, starts: float, ends: float | None = None, *, scope: str = "job",
               onset: float | None = None, job: str = "j", nodes=(), **evidence) -> dict:
    ev = {"onset_ts": starts if onset is None else onset, "failure_class": evidence.pop("cls", kind),
          "action": {"kind": "investigate", "nodes": list(nodes), "retryable": True, "exclude_nodes": []}, **evidence}
    return {"v": 1, "kind": "alert", "id": ident, "status": status, "type": kind, "severity": "warning", "job": job,
            "ranks": [], "nodes": list(nodes), "starts_at": starts, "ends_at": ends, "summary": kind,
            "evidence": ev, "labels": {"scope": scope}, "annotations": {}}


def test_report_numbers_by_hand(tmp_path):
    day = 86_400.0
    alerts = [
        # three stragglers on n1/n2: 60 s, 120 s and 300 s to resolve; detected 10, 20 and 30 s after onset
        hand_alert("s1", "straggler", "firing", T0, scope="device", onset=T0 - 10, nodes=["n1"], job="a"),
        hand_alert("s1", "straggler", "resolved", T0, T0 + 60, scope="device", onset=T0 - 10, nodes=["n1"], job="a",
                   effective_compute=0.9),
        hand_alert("s2", "straggler", "firing", T0 + 1000, scope="device", onset=T0 + 980, nodes=["n1"], job="b"),
        hand_alert("s2", "straggler", "firing", T0 + 1000, scope="device", onset=T0 + 980, nodes=["n1"], job="b"),
        hand_alert("s2", "straggler", "resolved", T0 + 1000, T0 + 1120, scope="device", onset=T0 + 980,
                   nodes=["n1"], job="b"),
        hand_alert("s3", "straggler", "firing", T0 + 2000, scope="device", onset=T0 + 1970, nodes=["n2"], job="a"),
        hand_alert("s3", "straggler", "resolved", T0 + 2000, T0 + 2300, scope="device", onset=T0 + 1970,
                   nodes=["n2"], job="a", effective_compute=0.8),
        # a hang, still open; a restart of 8 ranks; a gpu fault naming job a
        hand_alert("h1", "hang", "firing", T0 + 3000, onset=T0 + 2900, job="c"),
        hand_alert("r1", "job_restart", "firing", T0 + 4000, onset=T0 + 4000, job="c", cls="xid_79_off_bus",
                   gpu_hours_lost=1.5),
        hand_alert("r1", "job_restart", "resolved", T0 + 4000, T0 + 4120, onset=T0 + 4000, job="c",
                   cls="xid_79_off_bus", gpu_hours_lost=1.5),
        hand_alert("g1", "gpu_fault", "firing", T0 + 3990, scope="device", job="", nodes=["n1"], cls="xid_79_off_bus",
                   jobs=[{"job": "c", "ranks": [3]}]),
        # out of the window: 8 days before the newest alert
        hand_alert("old", "straggler", "firing", T0 - 8 * day, scope="device", nodes=["n9"]),
        # a resolved whose firing was not read: ignored
        hand_alert("gone", "straggler", "resolved", T0 - 100, T0 + 5, scope="device"),
    ]
    path = tmp_path / "alerts.jsonl"
    path.write_bytes(b"".join(orjson.dumps(a) + b"\n" for a in alerts) + b"stepwatch replay: a progress line\n")
    out = json.loads(stepwatch("report", "--file", str(path), "--json").stdout)
    assert set(out) == {"incidents", "by_type", "by_scope", "nodes", "gpu_hours_lost", "effective_compute", "precision"}
    assert out["incidents"] == 6
    assert out["by_type"]["straggler"] == {"count": 3, "mttr_seconds": 160.0, "median_seconds": 120.0,
                                           "detect_seconds": 20.0}
    assert out["by_type"]["hang"] == {"count": 1, "mttr_seconds": None, "median_seconds": None,
                                      "detect_seconds": 100.0}
    assert out["by_type"]["job_restart"]["mttr_seconds"] == 120.0
    assert out["by_scope"]["device"]["count"] == 4 and out["by_scope"]["job"]["count"] == 2
    assert out["by_scope"]["device"]["mttr_seconds"] == 160.0
    assert out["nodes"] == [{"node": "n1", "incidents": 3, "jobs": ["a", "b", "c"]},
                            {"node": "n2", "incidents": 1, "jobs": ["a"]}]
    assert out["gpu_hours_lost"] == {"xid_79_off_bus": 1.5}
    assert out["effective_compute"] == {"a": 0.8}
    # --since narrows the window (counted back from the newest alert, T0 + 4120)
    narrow = json.loads(stepwatch("report", "--file", str(path), "--json", "--since", "30m").stdout)
    assert narrow["incidents"] == 3 and set(narrow["by_type"]) == {"hang", "job_restart", "gpu_fault"}
    text = stepwatch("report", "--file", str(path)).stdout.decode()
    assert "6 incident(s)" in text and "straggler" in text and "2.7 min" in text  # MTTR 160 s


def test_report_on_a_replay_of_a_fleet(tmp_path):
    a = Job("job-a", ["n1", "n2", "n3"], slow_node="n2")
    b = Job("job-b", ["n2", "n4", "n5"], slow_node="n2", start=T0 + 400)
    r = Job("job-r", ["n6", "n7"], crash_at=90, resume_at=61, downtime=120.0, start=T0 + 20)
    events = merge(job_events(a), job_events(b), job_events(r), [xid_event("n7", 1, 79, T0 + 105.0)])
    recording = tmp_path / "fleet.jsonl"
    recording.write_bytes(b"".join(orjson.dumps(e) + b"\n" for e in events))
    replayed = stepwatch("replay", str(recording)).stdout
    alerts_path = tmp_path / "alerts.jsonl"
    alerts_path.write_bytes(replayed)
    alerts = [orjson.loads(line) for line in replayed.splitlines()]
    # by hand: first firing and resolution per id
    first, ends = {}, {}
    for x in alerts:
        if x["status"] == "firing":
            first.setdefault(x["id"], x)
        elif x["id"] in first:
            ends[x["id"]] = x["ends_at"]
    assert {x["type"] for x in first.values()} >= {"straggler", "node_suspect", "job_restart", "gpu_fault"}
    out = json.loads(stepwatch("report", "--file", str(alerts_path), "--json").stdout)
    assert out["incidents"] == len(first)
    for kind in {x["type"] for x in first.values()}:
        ids = [i for i, x in first.items() if x["type"] == kind]
        ttr = [ends[i] - first[i]["starts_at"] for i in ids if i in ends]
        got = out["by_type"][kind]
        assert got["count"] == len(ids)
        if ttr:
            assert got["mttr_seconds"] == pytest.approx(sum(ttr) / len(ttr), abs=1e-3)
            assert got["median_seconds"] == pytest.approx(statistics.median(ttr), abs=1e-3)
        else:
            assert got["mttr_seconds"] is None
    restart = [x for x in first.values() if x["type"] == "job_restart"][0]
    assert out["gpu_hours_lost"][restart["evidence"]["failure_class"]] >= restart["evidence"]["gpu_hours_lost"]
    assert out["nodes"][0]["node"] in ("n2", "n7")
    assert {"job-a", "job-b"} <= set(next(n for n in out["nodes"] if n["node"] == "n2")["jobs"])
    assert "job-r" in out["effective_compute"]
    # the same report from the library call
    assert public(build_report(alerts)) == out


@pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian's chromium package at /usr/bin/chromium "
                                                  "(apt-get install -y chromium)")
def test_html_report_renders_its_charts_in_chromium(tmp_path):
    a = Job("job-a", ["n1", "n2", "n3"], slow_node="n2")
    b = Job("job-b", ["n2", "n4", "n5"], slow_node="n2", start=T0 + 400)
    r = Job("job-r", ["n6", "n7"], crash_at=90, resume_at=61, downtime=120.0, start=T0 + 20)
    events = merge(job_events(a), job_events(b), job_events(r), [xid_event("n7", 1, 79, T0 + 105.0)])
    recording = tmp_path / "fleet.jsonl"
    recording.write_bytes(b"".join(orjson.dumps(e) + b"\n" for e in events))
    alerts_path = tmp_path / "alerts.jsonl"
    alerts_path.write_bytes(stepwatch("replay", str(recording)).stdout)
    page = tmp_path / "report.html"
    stepwatch("report", "--file", str(alerts_path), "--html", str(page))
    source = page.read_text()
    assert "<script" not in source and "http://" not in source.replace('xmlns="http://www.w3.org/2000/svg"', "")
    profile = tmp_path / "chromium-profile"
    common = [str(CHROMIUM), "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
              "--disable-background-networking", "--disable-component-update", "--disable-sync",
              f"--user-data-dir={profile}", "--window-size=1100,1600"]
    dom = subprocess.run([*common, "--dump-dom", page.as_uri()], capture_output=True, text=True, timeout=120)
    assert dom.returncode == 0, dom.stderr[-2000:]
    charts = set(re.findall(r'<svg class="chart" data-chart="(\w+)"', dom.stdout))
    assert charts == {"timeline", "mttr", "nodes", "lost"}
    assert len(re.findall(r'<rect class="bar"', dom.stdout)) >= 6
    report = json.loads(stepwatch("report", "--file", str(alerts_path), "--json").stdout)
    assert f'<b id="incident-count">{report["incidents"]}</b>' in dom.stdout
    shot = tmp_path / "report.png"
    done = subprocess.run([*common, f"--screenshot={shot}", page.as_uri()], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0 and shot.stat().st_size > 10_000, done.stderr[-2000:]
    artifacts = REPO / "artifacts"
    artifacts.mkdir(exist_ok=True)
    (artifacts / "report.png").write_bytes(shot.read_bytes())
