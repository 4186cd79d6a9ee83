"""The telemetry correlator's data-time rings (models/telemetry/telemetry_correlator.py): a run of known ranks is
one array write, and what they keep is each rank's last ``data_history`` values, as appending one by one would."""

from __future__ import annotations

from collections import deque

from stepwatch.models.steps.layout import layout_of
from stepwatch.models.telemetry.telemetry_correlator import TelemetryCorrelator
from stepwatch.models.telemetry.telemetry_tracker import TelemetryTracker


def test_rings_keep_the_last_values_of_each_rank_in_order_through_both_roads():
    corr = TelemetryCorrelator(TelemetryTracker(), data_history=5)
    ranks, nodes, gpus = [0, 1, 2, 3], ["a", "a", "b", "b"], [0, 1, 0, 1]
    expected = {r: deque(maxlen=5) for r in ranks}
    layout = None
    for step in range(12):
        values = [float(step * 10 + r) if (step, r) != (3, 2) else float("nan") for r in ranks]
        layout = layout_of(layout, ranks, nodes, gpus)  # the same object from the second step on
        corr.observe_steps("j", ranks, nodes, gpus, values, layout=layout if step % 4 else None)
        for r, v in zip(ranks, values):
            if v == v:
                expected[r].append(v)
    assert corr.data_times("j") == {r: list(d) for r, d in expected.items()}
    # rank 3's median (73..113: 93) over the median of the others' (90, 91, 92)
    assert corr.data_time_ratio_of("j", 3) == 93.0 / 91.0
    corr.observe_steps("j", [1, 1], ["a", "a"], [1, 1], [500.0, 600.0])  # a rank twice: one by one
    assert corr.data_times("j")[1][-2:] == [500.0, 600.0]
