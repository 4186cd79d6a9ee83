"""Effective-compute SLIs in the status views (``/jobs`` and ``/jobs/{job}``), without Kafka."""

from __future__ import annotations

import orjson
import pytest

from stepwatch.models.detection import DetectionEngine
from stepwatch.models.wire.events import parse_event
from stepwatch.models.status import StatusRecorder, job_view, jobs_view
from stepwatch.sim.simulator import ClusterSimulator, CommSlowdown, SimulationSpec


def test_job_views_carry_the_slis_and_the_job_health_alerts():
    spec = SimulationSpec(job="sli", ranks=16, steps=160, checkpoint_every=100, seed=2, collective_events=True,
                          effects=(CommSlowdown(start_step=120, factor=2.5),))
    engine = DetectionEngine()
    recorder = StatusRecorder(history=30).attach(engine)
    now = spec.start_time
    step_end: dict[int, float] = {}  # train step -> its latest rank's step-end time
    step_tokens: dict[int, float] = {}  # train step -> tokens of all its ranks
    for raw in ClusterSimulator(spec).events():
        if raw.get("phase") == "end":
            continue  # keep the job's alerts open
        if raw["kind"] == "step" and raw.get("phase", "train") == "train":
            step_end[raw["step"]] = max(step_end.get(raw["step"], raw["ts"]), raw["ts"])
            step_tokens[raw["step"]] = step_tokens.get(raw["step"], 0.0) + raw["tokens"]
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
    # Expected rates by hand from the events fed in: the last 50 train steps (the SLI window, 110..159),
    # tokens of the 49 steps after the first over the time between the first's and the last's end.
    first, last = 110, 159
    span = step_end[last] - step_end[first]
    assert sorted(step_end)[-50:] == list(range(first, last + 1))
    assert sli["steps_per_second"] == pytest.approx((last - first) / span, rel=1e-3)
    assert sli["tokens_per_second"] == pytest.approx(sum(step_tokens[s] for s in range(first + 1, last + 1)) / span,
                                                     rel=1e-3)
    assert sli["tokens_per_second"] == pytest.approx(16 * 4096 * (last - first) / span, rel=1e-3)
    assert 0.8 < sli["productive_share"] < 1.0  # one 20 s checkpoint pause in ~170 s
    assert sli["hang_gpu_seconds"] == 0 and sli["mfu"] is None
    drop = next(a for a in view["alerts"] if a["type"] == "throughput_drop")
    assert drop["evidence"]["layer"] == "communication"
    orjson.dumps(view)  # what the web server serves
