"""Metamorphic tests (issue 39 item 8): variants of a recording that must not change stepwatch's verdict.

A base recording (a scenario of the library, stepwatch/sim/scenarios.py, or of a test generator:
tests/gen2, tests/gen3, tests/recordings.py) is replayed through the road ``stepwatch replay`` takes;
each transformation (transforms.py: a pure function of a recording) derives a variant that changes
the situation and not the fault (time scale, world size, heartbeat cadence and lag, delivery,
clocks, a pause around the fault, a watchdog teardown, node telemetry); invariants.py compares
the variant's verdict with the base's. grid.py holds the grid, the CI sample and the known
failures; bench/metamorphic.py runs the whole grid.
"""
