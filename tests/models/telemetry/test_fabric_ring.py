"""A component's history (models/telemetry/fabric.py ``FabricHistory``) is its last ``max_samples`` samples, in any
window, however many came (before, while and after the ring fills)."""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from stepwatch.models.telemetry.fabric import FabricHistory
from stepwatch.models.wire.telemetry_events import LinkEvent


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 7), st.lists(st.integers(1, 400), max_size=20), st.integers(0, 20), st.integers(0, 20))
def test_the_window_sees_the_last_samples_only(size, rates, lo, span):
    history = FabricHistory(max_samples=size)
    for i, rate in enumerate(rates):
        history.update(LinkEvent(node="n1", ts=100.0 + i, device="mlx5_0", port=1, state="ACTIVE",
                                 rate=float(rate), counters={"symbol_error": i * i}))
    since, until = 100.0 + lo, 100.0 + lo + span
    kept = [(100.0 + i, r) for i, r in enumerate(rates)][-size:]
    inside = [(t, r) for t, r in kept if since <= t <= until]
    got = history.window("n1", since, until).get("mlx5_0/1", {})
    if not inside:
        assert "link_rate" not in got
        return
    assert got["link_rate"][0] == min(r for _, r in inside)
    # the error counter's increases: i*i - (i-1)*(i-1) at each sample after the first
    errors = sum(0 if t == 100.0 else 2 * (t - 100.0) - 1 for t, _ in inside)
    assert math.isclose(got["link_errors"][0], errors)
