"""A job_restart names the nodes the job ran on until it went down, whatever the batching of its first resumed
steps: never the spare its ranks moved to (models/oncall/outlet_rules.py ``RestartRule``). Found on gen3
``spare_straggles``: in a column batch the spare's resumed rows were in the placement before the restart's alert
was made, one event at a time they were not (issue 41 item 5)."""

from __future__ import annotations

import pytest

from stepwatch.config import Settings
from stepwatch.models.detection import DetectionEngine
from stepwatch.models.wire.events import StepEvent, parse_event
from test_restart_spare import DEAD_NODE, JOB, SPARE, WORLD, recording


def _restarts(events: list, chunk: int) -> list[dict]:
    """The job_restart alerts of ``events`` fed as the worker feeds them: consecutive step events in batches of up to
    ``chunk``, other events one by one, a tick when the clock has moved on by the tick interval."""
    engine = DetectionEngine(Settings())
    interval, next_tick, out, pending = engine.settings.worker.tick_interval, None, [], []

    def feed(item) -> None:
        nonlocal next_tick
        out.extend(engine.process_batch(item) if type(item) is list else engine.process(item))
        if next_tick is None:
            next_tick = engine.clock + interval
        elif engine.clock >= next_tick:
            out.extend(engine.tick(engine.clock))
            next_tick = engine.clock + interval

    for event in events:
        if isinstance(event, StepEvent):
            pending.append(event)
            if len(pending) < chunk:
                continue
        if pending:
            feed(pending)
            pending = []
        if not isinstance(event, StepEvent):
            feed(event)
    if pending:
        feed(pending)
    # (without the productive share: sampled at the latest tick, models/oncall/oncall.py, and a restart is read once
    # most ranks went on from their step back, events into the new run, where one-by-one feeding ticks in between)
    return [{**a.to_dict(), "evidence": {k: v for k, v in a.evidence.items() if k != "effective_compute"}}
            for a in out if a.type == "job_restart"]


@pytest.mark.parametrize("seed", [2])
def test_a_restarts_nodes_do_not_depend_on_the_batching_and_never_name_the_spare(seed):
    events = [parse_event(e) for e in recording(seed=seed)]
    one_by_one = _restarts(events, 1)
    assert one_by_one, "the relaunch raised no job_restart"
    for chunk in (3, WORLD, 4 * WORLD):
        assert _restarts(events, chunk) == one_by_one, chunk
    for alert in one_by_one:
        assert SPARE not in alert["nodes"] and DEAD_NODE in alert["nodes"]
