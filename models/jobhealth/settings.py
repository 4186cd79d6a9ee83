"""Settings of the job-wide rules (models/jobhealth/job_health.py builds them), in a module that imports no
detector."""

from __future__ import annotations

from dataclasses import dataclass

from ..tunable import runtime


@dataclass(frozen=True, kw_only=True)
class JobHealthSettings:
    """Job-wide rules: throughput drop, communication slowdown, checkpoint staleness (issue 9)."""

    #: Throughput drop: smallest slowdown worth an alert (fraction of the baseline step time).
    throughput_min_effect: float = runtime(0.10, high=100.0)
    #: CUSUM alarm level (sum of relative excess over ``min_effect / 2``).
    throughput_threshold: float = runtime(0.4, low=0.0, high=100.0)
    #: Steps whose median must be ``min_effect`` above the baseline (one slow step never fires).
    throughput_persistence: int = runtime(5, low=1, high=10_000)
    #: Healthy steps the baseline is the median of.
    throughput_baseline_steps: int = 200
    #: Steps missing some of their group's ranks (late or lost events) are left out, up to this many
    #: in a row; beyond, they are judged as the job's new normal.
    throughput_max_incomplete_steps: int = 100
    #: Communication slowdown: collective transfer time this fraction above its baseline ...
    comm_threshold: float = runtime(0.30, high=100.0)
    #: ... as a median over this many collectives ...
    comm_window: int = runtime(20, low=1, high=10_000)
    #: ... for this many consecutive collectives.
    comm_persistence: int = runtime(10, low=1, high=10_000)
    #: Checkpoint staleness: the last successful checkpoint older than this (seconds; 0 = off) ...
    checkpoint_max_age_seconds: float = 3600.0
    #: ... or this many steps (0 = off) ...
    checkpoint_max_age_steps: int = 0
    #: ... or a checkpoint taking this many times its usual duration.
    checkpoint_slow_factor: float = 3.0
    #: Policy: every job must checkpoint, so the age rule also runs for a job that never reported a
    #: checkpoint. Off: only jobs that have reported one (then stopped) can be stale.
    checkpoint_required: bool = False
    #: Stage imbalance: the slowest stage at least ``1 +`` this over the median stage.
    imbalance_stage_min_effect: float = runtime(0.10, high=100.0)
    #: Rank classes: the ratio between neighbouring ranks' medians that separates two classes.
    imbalance_class_gap: float = runtime(1.5, low=1.0, high=1000.0)
