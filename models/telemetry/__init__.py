"""Node telemetry, by concept: where each part lives (this module only re-exports them).

==============================  =========================================================
models/telemetry/counters.py              cumulative counters: deltas through wraps and resets,
                                rates, bounded baselines (``counter_delta``, ``Baseline``,
                                ``CounterTrack``)
models/telemetry/telemetry_tracker.py     per node, GPU and port: spikes (``SpikeEpisode``),
                                ``gpu_fault`` and ``link_errors`` alerts (``TelemetryTracker``)
models/telemetry/causes.py                a ranked candidate cause (``SuspectedCause``)
models/telemetry/telemetry_correlator.py  the spikes near a straggler or hang as suspected causes
                                (``TelemetryCorrelator``)
models/telemetry/telemetry_hub.py         what the engine holds: routing and alert enrichment
                                (``TelemetryHub``); ``TelemetrySettings`` in settings.py
==============================  =========================================================

The core imports from those modules; this one keeps ``stepwatch.models.telemetry`` importable
for code written against it before the split.
"""

from __future__ import annotations

import importlib

#: Where each name lives: loaded on first use, so importing a light module of this package (settings.py)
#: loads no detector.
_HOMES = {
    "BANDWIDTH_FLOOR": ".telemetry_tracker",
    "Baseline": ".counters",
    "CounterTrack": ".counters",
    "DATA_COUNTERS": ".telemetry_tracker",
    "EPISODE_GAP": ".telemetry_tracker",
    "ERROR_COUNTERS": ".telemetry_tracker",
    "GPU_WEIGHTS": ".telemetry_tracker",
    "LINK_WEIGHTS": ".telemetry_tracker",
    "RATE_COUNTERS": ".telemetry_tracker",
    "SpikeEpisode": ".telemetry_tracker",
    "SuspectedCause": ".causes",
    "TELEMETRY_KINDS": ".telemetry_hub",
    "THROTTLE_NAMES": ".telemetry_tracker",
    "THROTTLE_POWER": ".telemetry_tracker",
    "THROTTLE_THERMAL": ".telemetry_tracker",
    "TelemetryCorrelator": ".telemetry_correlator",
    "TelemetryHub": ".telemetry_hub",
    "TelemetrySettings": ".settings",
    "TelemetryTracker": ".telemetry_tracker",
    "XID_NAMES": ".telemetry_tracker",
    "counter_delta": ".counters",
}

__all__ = ["BANDWIDTH_FLOOR", "DATA_COUNTERS", "EPISODE_GAP", "ERROR_COUNTERS", "GPU_WEIGHTS", "LINK_WEIGHTS",
           "RATE_COUNTERS", "TELEMETRY_KINDS", "THROTTLE_NAMES", "THROTTLE_POWER", "THROTTLE_THERMAL", "XID_NAMES",
           "Baseline", "CounterTrack", "SpikeEpisode", "SuspectedCause", "TelemetryCorrelator", "TelemetryHub",
           "TelemetrySettings", "TelemetryTracker", "counter_delta"]


def __getattr__(name: str):
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(home, __name__), name)
    globals()[name] = value
    return value
