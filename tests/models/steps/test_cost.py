"""What a slow rank or stage costs its job (models/steps/cost.py, issue 26 item 9): ``evidence.job_slowdown``
and ``gpu_hours_lost_per_day`` on straggler and imbalance alerts, summed by ``stepwatch report``.

Checked against answers known independently of stepwatch: recordings of tests/fabric_gen.py (not the
simulator) where the job's slowdown is measured by running the same recording without the slow rank,
and the ByteDance traces' what-if analysis (ByteDance-Seed/StragglerAnalysis, the artifact of
"Understanding Stragglers in Large Model Training Using What-if Analysis"; ``ms-*.json`` give the
simulated step time with only the stage imbalance added to the ideal, ``tadd``, and the ideal, ``tideal``).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest

from conftest import in_ci
from stepwatch import importer
from stepwatch.models.steps.cost import cost
from stepwatch.models.wire.events import StepEvent, parse_event
from stepwatch.report import build_report

from engine_driver import replay
from fabric_gen import Job, events

REPO = Path(__file__).resolve().parents[3]
#: ../shared/data beside the clone (CI), or beside the folder of worktrees (the dev machines' /work/wt/<name>)
SHARED = [REPO.parent / "shared" / "data", REPO.parent.parent / "shared" / "data"]


def _shared(rel: str) -> Path:
    for root in SHARED:
        if (root / rel).exists():
            return root / rel
    message = f"shared trace {rel} not found under {[str(r) for r in SHARED]}"
    if in_ci():
        pytest.fail(message)
    pytest.skip(message)


def measured_slowdown(job: Job) -> float:
    """The job's mean step time after the onset with the slow rank over the same without it (same seed)."""
    def pace(evs) -> float:
        ends: dict[int, float] = {}
        for t, ev in evs:
            if isinstance(ev, StepEvent) and ev.step >= job.onset + 5:
                ends[ev.step] = max(ends.get(ev.step, 0.0), t)
        return float(np.mean(np.diff(sorted(ends.values()))))

    return pace(events(job)) / pace(events(dataclasses.replace(job, straggler=None)))


@pytest.mark.parametrize("fields,transfer", [("compute", 0.01), ("compute", 0.12), ("step", 0.01), ("step", 0.12)])
def test_one_rank_2x_slow_in_a_synchronous_job_costs_what_the_job_loses(fields, transfer):
    job = Job(straggler=13, straggler_factor=2.0, transfer=transfer, step_fields=fields, seed=4, steps=120, onset=40)
    alerts = [a for a in replay(ev for _, ev in events(job)) if a.type == "straggler" and a.status == "firing"]
    assert alerts and alerts[0].ranks == (13,)
    ev = alerts[0].evidence
    truth = measured_slowdown(job)
    # all-compute steps: about the rank's 2x; with transfer time, less (the transfer does not slow down)
    assert (1.6 < truth < 2.0) if transfer < 0.05 else (1.4 < truth < 1.7)
    assert ev["job_slowdown"] == pytest.approx(truth, rel=0.10), (ev["signal"], ev["job_slowdown"], truth)
    assert ev["gpu_hours_lost_per_day"] == pytest.approx(64 * 24 * (1 - 1 / ev["job_slowdown"]), rel=0.01)
    assert ev["cost_gpus"] == 64


@pytest.mark.parametrize("name", ["ST", "SE"])
def test_bytedance_stage_imbalance_job_slowdown_matches_the_what_if_analysis(name):
    pytest.importorskip("pyarrow", reason="reading the Parquet traces needs pyarrow (pip install 'stepwatch[import]')")
    path = _shared(f"bytedance-straggler-analysis/trace-{name}.parquet")
    what_if = json.loads(_shared(f"bytedance-straggler-analysis/ms-{name}.json").read_text())
    expected = what_if["tadd"] / what_if["tideal"]  # ST 1.23, SE 1.44
    evs = importer.convert([path], importer.PRESETS["bytedance-straggler"])
    firing = [a for a in replay(parse_event(e) for e in evs) if a.type == "imbalance" and a.status == "firing"]
    assert firing and firing[0].evidence["kind"] == "stage"
    ev = firing[0].evidence
    assert ev["job_slowdown"] == pytest.approx(expected, rel=0.25)
    # and the excess over 1 (what repartitioning would win) within 25% too
    assert ev["job_slowdown"] - 1 == pytest.approx(expected - 1, rel=0.25)
    assert ev["job_slowdown"] == pytest.approx(ev["step_time"] / ev["balanced_step_time"], rel=1e-3)
    assert ev["gpu_hours_lost_per_day"] > 0 and "GPU-hours a day" in firing[0].summary


def test_cost_arithmetic():
    c = cost(2.0, 1.0, 8)
    assert (c.job_slowdown, c.seconds_lost_per_step, c.gpu_hours_lost_per_day) == (2.0, 1.0, 96.0)
    assert cost(1.0, -0.5, 8).job_slowdown == 1.0
    assert cost(0.0, 0.5, 8) is None


def test_report_sums_the_slowdowns_costs():
    job = Job(straggler=13, straggler_factor=2.0, transfer=0.01, seed=4, steps=120, onset=40)
    alerts = [a.to_dict() for a in replay(ev for _, ev in events(job))]
    straggler = [a for a in alerts if a["type"] == "straggler"][-1]["evidence"]["gpu_hours_lost_per_day"]
    hand = {"v": 1, "kind": "alert", "id": "imb", "status": "firing", "type": "imbalance", "severity": "info",
            "job": "other", "ranks": [], "nodes": [], "starts_at": alerts[-1]["starts_at"], "ends_at": None,
            "summary": "imbalance", "labels": {"scope": "job"},
            "evidence": {"failure_class": "imbalance", "job_slowdown": 1.25, "gpu_hours_lost_per_day": 38.4}}
    out = build_report(alerts + [hand])["slowdown_cost"]
    assert out["gpu_hours_lost_per_day"] == pytest.approx(straggler + 38.4, abs=0.01)
    assert out["by_cause"]["imbalance"] == 38.4
    assert out["worst"][0]["gpu_hours_lost_per_day"] == pytest.approx(max(straggler, 38.4), abs=0.01)
    assert {r["type"] for r in out["worst"]} == {"straggler", "imbalance"}
    assert "slowdown_cost" not in build_report([hand | {"evidence": {"failure_class": "imbalance"}}])
