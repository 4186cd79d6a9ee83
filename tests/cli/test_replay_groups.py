"""``run_recording`` feeds a recording's lines in groups (column batches for runs of step lines, cut wherever a
tick could fall): the alerts, dead letters, ticks and final state are those of line-by-line feeding, on simulated
incidents with bad lines, ``_arrival`` lines and recorded runtime settings mixed in."""

from __future__ import annotations

import orjson
import pytest

from stepwatch.models import pipeline as pipeline_module
from stepwatch.models.pipeline import Pipeline, run_recording
from stepwatch.sim import scenarios


def _lines(name: str) -> list:
    """The scenario's events as single-event lines (as ``stepwatch simulate --out`` writes them), the second
    half with an ``_arrival`` half a second after the event, and some lines the worker dead-letters."""
    events = [e for _, batch in scenarios.batches(scenarios.get(name)) for e in batch]
    half = len(events) // 2
    out: list = []
    for i, event in enumerate(events):
        if i >= half and isinstance(event.get("ts"), float):
            event = dict(event, _arrival=event["ts"] + 0.5)
        out.append(orjson.dumps(event))
        if i % 997 == 0:
            out.append(b'{"v":1,"kind":"step","job":"x","rank":-1,"step":1,"ts":1.0}')  # invalid rank
            out.append(b"{not json")
    return out


def _run(lines: list, settings_at: int, group_lines: int, monkeypatch) -> tuple:
    monkeypatch.setattr(pipeline_module, "_GROUP_LINES", group_lines)
    pipe = Pipeline()
    ticks = []
    real_tick = pipe.tick

    def tick(now):
        ticks.append(now)
        return real_tick(now)

    pipe.tick = tick
    from stepwatch.runtime_config import RuntimeConfig

    runtime = RuntimeConfig(pipe.engine.settings)
    job = orjson.loads(lines[0]).get("job", "")
    config = orjson.dumps({"v": 1, "kind": "config", "straggler": {"ratio_threshold": 1.2}})
    messages = lines[:settings_at] + [lambda: runtime.apply(pipe.engine, job, config)] + lines[settings_at:]
    alerts, dead = [], []
    for out in run_recording(pipe, messages, drain=60.0):
        alerts.extend(orjson.dumps(a.to_dict()) for a in out.alerts)
        dead.extend((d.rejects, d.cause, d.message) for d in out.deadletters)  # (record() stamps the wall time)
    engine = pipe.engine
    state = (engine.clock, dict(engine.events_by_kind), sorted(engine.jobs),
             {j: (s.latest_step, s.last_ts) for j, s in engine.jobs.items()})
    return alerts, dead, ticks, state


@pytest.mark.parametrize("name", ["hang-hang-64", "straggler-2x-comm-64", "net-ib-errors-64"])
def test_grouped_replay_is_line_by_line_replay(name, monkeypatch):
    lines = _lines(name)
    by_line = _run(lines, len(lines) // 3, 1, monkeypatch)
    grouped = _run(lines, len(lines) // 3, pipeline_module.MAX_RUN_EVENTS, monkeypatch)
    assert by_line[0], "the scenario raises alerts"
    assert by_line[1], "the bad lines are dead-lettered"
    assert grouped[0] == by_line[0]
    assert grouped[1] == by_line[1]
    assert grouped[2] == by_line[2]
    assert grouped[3] == by_line[3]


def test_replay_raises_the_collectors_threshold_and_never_lowers_it():
    import gc

    from stepwatch.recording import GC_GEN0_THRESHOLD, tune_gc

    saved = gc.get_threshold()
    try:
        gc.set_threshold(700, 10, 10)
        tune_gc()
        assert gc.get_threshold() == (GC_GEN0_THRESHOLD, 10, 10)
        gc.set_threshold(GC_GEN0_THRESHOLD * 2, 5, 5)
        tune_gc()
        assert gc.get_threshold() == (GC_GEN0_THRESHOLD * 2, 5, 5)
    finally:
        gc.set_threshold(*saved)
