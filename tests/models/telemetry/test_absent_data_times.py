"""A run whose events report no data time reaches the telemetry correlator as None (``StepColumns.absent``), not as
an array of NaN to test (issue 41 item 5: a per-run cost of the replay of mid-sized jobs). The invariant: the
correlator's state (placements, data-time rings, its memo of the last run) is the same whichever form it gets, on
generated runs that mix reported and absent data times, repeated layouts, lone events and unknown nodes."""

from __future__ import annotations

import math
import random

import orjson
import pytest

from stepwatch.models.steps.layout import layout_of
from stepwatch.models.telemetry.telemetry_correlator import TelemetryCorrelator
from stepwatch.models.telemetry.telemetry_tracker import TelemetryTracker
from stepwatch.models.wire.step_columns import StepColumns, decode_message_columns


def _state(c: TelemetryCorrelator) -> tuple:
    last = {job: (id(memo[0]), None if memo[1] is None else list(memo[1])) for job, memo in c._last_run.items()}
    return (c.placements(), {job: c.data_times(job) for job in c._data_time}, last)


def _runs(rng: random.Random) -> list[tuple]:
    out, layouts = [], []
    for _ in range(rng.randrange(5, 40)):
        job = rng.choice(["a", "b"])
        n = rng.choice([1, 2, 3, 8, 17, 64])
        lo = rng.randrange(0, 64)
        ranks = [(lo + i) % 80 for i in range(n)]
        nodes = [None if rng.random() < 0.05 else f"n{r // 8}" for r in ranks]
        gpus = [r % 8 for r in ranks]
        layout = None
        if rng.random() < 0.6:
            layout = layout_of(None, ranks, nodes, gpus)
            if layouts and rng.random() < 0.5:  # a run of the same ranks again, under the layout kept
                job, ranks, nodes, gpus, layout = rng.choice(layouts)
            layouts.append((job, ranks, nodes, gpus, layout))
        reported = rng.random() < 0.3
        data = [rng.uniform(0, 0.2) if reported and rng.random() < 0.9 else math.nan for _ in ranks]
        out.append((job, ranks, nodes, gpus, data, layout))
    return out


@pytest.mark.parametrize("seed", range(30))
def test_no_data_time_as_none_leaves_the_correlator_as_the_nan_array_does(seed):
    rng = random.Random(seed)
    runs = _runs(rng)
    as_array, as_none = (TelemetryCorrelator(TelemetryTracker()) for _ in range(2))
    for job, ranks, nodes, gpus, data, layout in runs:
        as_array.observe_steps(job, ranks, nodes, gpus, data, layout=layout)
        absent = all(v != v for v in data)
        as_none.observe_steps(job, ranks, nodes, gpus, None if absent else data, layout=layout)
        assert _state(as_none) == _state(as_array)


def _envelope(events: list[dict]) -> bytes:
    return orjson.dumps({"v": 1, "kind": "batch", "events": events})


@pytest.mark.parametrize("seed", range(10))
def test_a_column_is_absent_only_when_no_event_reports_it(seed):
    rng = random.Random(seed)
    events = [{"v": 1, "kind": "step", "job": "j", "rank": r, "step": 3, "ts": 100.0 + r, "step_time": 1.0}
              for r in range(rng.randrange(2, 40))]
    reporting = rng.sample(range(len(events)), rng.randrange(0, 3))
    for i in reporting:
        events[i]["data_time"] = rng.choice([0.0, 0.05, None])
    cols, rejected = decode_message_columns(_envelope(events))
    assert not rejected and isinstance(cols, StepColumns)
    reported = any(events[i]["data_time"] is not None for i in reporting)
    for c in (cols, StepColumns.of(cols.events())):
        if not reporting:  # no event has the field: the usual run, the correlator's short road
            assert c.absent("data_time") and c.absent("data_time")  # (the second: kept for the batch)
        if reported:
            assert not c.absent("data_time")
        # only nulls may go either way; absent always means what the correlator's NaN test reads: every value NaN
        assert not c.absent("data_time") or all(v != v for v in c.array("data_time"))
