"""A column run's alerts leave the outlet chain as one event at a time gives them when the run straddles steps: the
stages read the job as of the row that fired (its clock, recent steps, checkpoint), not as of the run's end.

64-rank jobs, step events cut into runs of 64 rows that start mid-step (a run closes one step and opens the next),
each row with its own broker arrival; a straggler fires and resolves inside runs. Every field of every alert,
evidence included (``onset_ts``, the ladder's ``checkpoint_age_seconds``), must be the same on both roads."""

from __future__ import annotations

import random

import orjson
import pytest

from stepwatch.models.detection import DetectionEngine
from stepwatch.models.wire.events import decode_message
from stepwatch.models.wire.step_columns import StepColumns, decode_message_columns
from stepwatch.sim import scenarios
from support import full_or

ROWS = 64


def _messages(name: str, shift: int, rows: int = ROWS, mixed: bool = False) -> list[list[dict]]:
    """Step events in runs of ``rows`` rows across the recording's batches, the first ``shift`` long (runs start
    mid-step); other kinds each a message of its own where they come (``mixed``: in the runs, which then are a
    list of events, not columns)."""
    out: list[list[dict]] = []
    run: list[dict] = []
    size = shift or rows
    for _, batch in scenarios.batches(scenarios.get(name)):
        for event in batch:
            if event["kind"] != "step" and not mixed:
                out.append([event])
                continue
            run.append(event)
            if len(run) >= size:
                out.append(run)
                run, size = [], rows
    return out + [run] if run else out


def _alerts(messages: list[list[dict]], *, columns: bool, seed: int, mixed: bool = False) -> list[dict]:
    rng = random.Random(seed)
    offset = rng.uniform(-30.0, 30.0)  # the hosts' clocks off the broker's
    engine = DetectionEngine()
    interval = engine.settings.worker.tick_interval
    alerts, next_tick, runs = [], None, 0
    for events in messages:
        arrival = [e["ts"] + offset + rng.uniform(0.0, 0.5) for e in events]  # each row its own
        if mixed:  # (a message's own: one for all)
            arrival = [max(arrival)] * len(events)
        raw = orjson.dumps({"v": 1, "kind": "batch", "events": events})
        if columns:
            decoded, rejected = decode_message_columns(raw)
            if isinstance(decoded, StepColumns):
                runs += 1
                alerts.extend(engine.process_batch(decoded, arrival=arrival))
            else:
                runs += mixed and len(decoded) > 1
                alerts.extend(engine.process_batch(decoded, arrival=arrival[0]))
        else:
            decoded, rejected = decode_message(raw)
            for event, at in zip(decoded, arrival):
                alerts.extend(engine.process(event, arrival=at))
        assert not rejected
        if next_tick is None:
            next_tick = engine.clock + interval
        elif engine.clock >= next_tick:
            alerts.extend(engine.tick(engine.clock))
            next_tick = engine.clock + interval
    assert not columns or runs
    return [a.to_dict() for a in alerts]


#: (recording, rows a run, the first run's rows, seed): 64 rows of a 64-rank job close one step mid-run; of an
#: 8-rank job, eight (a resolution's onset is then read with steps closed after its row).
CASES = [(name, rows, shift, seed) for name in ("straggler-2x-64", "thermal-ramp-64", "straggler-30pct-64",
                                                "intermittent-64", "straggler-2x-8")
         for rows, shift, seed in ((64, 13, 0), (64, 40, 1), (64, 1, 2), (128, 77, 3))]
SAMPLE = [CASES[0], CASES[5], CASES[-4]]


@pytest.mark.parametrize("name,rows,shift,seed", full_or(CASES, SAMPLE))
def test_a_run_straddling_steps_gives_the_alerts_of_one_event_at_a_time(name, rows, shift, seed):
    messages = _messages(name, shift, rows)
    one = _alerts(messages, columns=False, seed=seed)
    assert any(a["type"] == "straggler" and a["status"] == "resolved" for a in one)  # the case: fires, resolves
    assert _alerts(messages, columns=True, seed=seed) == one


MIXED = [(name, rows, shift, seed) for name in ("input-stall-64", "straggler-2x-8", "thermal-ramp-64")
         for rows, shift, seed in ((256, 100, 0), (512, 7, 1))]


@pytest.mark.parametrize("name,rows,shift,seed", full_or(MIXED, MIXED[1:3]))
def test_a_mixed_message_gives_the_alerts_of_one_event_at_a_time(name, rows, shift, seed):
    """A message of steps and other kinds (a list of events, one arrival) that closes several steps: the same, each
    alert read as of its event."""
    messages = _messages(name, shift, rows, mixed=True)
    one = _alerts(messages, columns=False, seed=seed, mixed=True)
    assert any(a["status"] == "resolved" and "onset_ts" in a["evidence"] for a in one)
    assert _alerts(messages, columns=True, seed=seed, mixed=True) == one
