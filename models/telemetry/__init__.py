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
                                (``TelemetryHub``), and ``TelemetrySettings``
==============================  =========================================================

The core imports from those modules; this one keeps ``stepwatch.models.telemetry`` importable
for code written against it before the split.
"""

from .causes import SuspectedCause
from .counters import Baseline, CounterTrack, counter_delta
from .telemetry_correlator import TelemetryCorrelator
from .telemetry_hub import TELEMETRY_KINDS, TelemetryHub, TelemetrySettings
from .telemetry_tracker import (BANDWIDTH_FLOOR, DATA_COUNTERS, EPISODE_GAP, ERROR_COUNTERS, GPU_WEIGHTS,
                                LINK_WEIGHTS, RATE_COUNTERS, THROTTLE_NAMES, THROTTLE_POWER, THROTTLE_THERMAL,
                                XID_NAMES, SpikeEpisode, TelemetryTracker)

__all__ = ["BANDWIDTH_FLOOR", "DATA_COUNTERS", "EPISODE_GAP", "ERROR_COUNTERS", "GPU_WEIGHTS", "LINK_WEIGHTS",
           "RATE_COUNTERS", "TELEMETRY_KINDS", "THROTTLE_NAMES", "THROTTLE_POWER", "THROTTLE_THERMAL", "XID_NAMES",
           "Baseline", "CounterTrack", "SpikeEpisode", "SuspectedCause", "TelemetryCorrelator", "TelemetryHub",
           "TelemetrySettings", "TelemetryTracker", "counter_delta"]
