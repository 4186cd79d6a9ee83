"""Simulated training jobs and node telemetry (the benchmark side, not the training side): the
simulator, its telemetry and host faults, and the labelled scenario library."""
