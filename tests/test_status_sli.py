"""Effective-compute SLIs in the status views (``/jobs`` and ``/jobs/{job}``), without Kafka."""

from __future__ import annotations

import orjson
import pytest

from stepwatch.models.engine import DetectionEngine
from stepwatch.models.events import parse_event
from stepwatch.models.status import StatusRecorder, job_view, jobs_view
from stepwatch.producers.simulator import ClusterSimulator, CommSlowdown, SimulationSpec


def test_job_views_carry_the_slis_and_the_job_health_alerts():
    spec = SimulationSpec(job="sli", ranks=16, steps=160, checkpoint_every=100, seed=2, collective_events=True,
                          effects=(CommSlowdown(start_step=120, factor=2.5),))
    engine = DetectionEngine()
    recorder = StatusRecorder(history=30).attach(engine)
    now = spec.start_time
    for raw in ClusterSimulator(spec).events():
        if raw.get("phase") == "end":
            continue  # keep the job's alerts open
        event = parse_event(raw)
        recorder.observe(event)
        engine.process(event)
        now = max(now, event.ts)

    [summary] = jobs_view(engine, recorder, now)
    assert summary["job"] == "sli" and summary["latest_step"] == 159
    assert 0.5 < summary["step_rate"] < 1.1 and summary["tokens_per_second"] > 0
    assert {a["type"] for a in summary["alerts"]} >= {"throughput_drop", "comm_slowdown"}

    view = job_view(engine, recorder, "sli", now)
    sli = view["sli"]
    assert sli == engine.job_sli("sli")
    assert set(sli) == {"steps_per_second", "tokens_per_second", "productive_share", "straggler_gpu_seconds",
                        "hang_gpu_seconds", "mfu"}
    assert sli["tokens_per_second"] == pytest.approx(16 * 4096 * sli["steps_per_second"], rel=0.05)
    assert 0.8 < sli["productive_share"] < 1.0  # one 20 s checkpoint pause in ~170 s
    assert sli["hang_gpu_seconds"] == 0 and sli["mfu"] is None
    drop = next(a for a in view["alerts"] if a["type"] == "throughput_drop")
    assert drop["evidence"]["layer"] == "communication"
    orjson.dumps(view)  # what the web server serves
