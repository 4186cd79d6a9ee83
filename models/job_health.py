"""Settings of the job-wide rules: throughput drop (models/throughput.py), communication slowdown
(models/comm.py) and checkpoint staleness (models/checkpoint.py); the engine builds the three per job."""

from __future__ import annotations

from dataclasses import dataclass

from .checkpoint import CheckpointDetector
from .comm import CommSlowdownDetector
from .throughput import ThroughputDetector


@dataclass(frozen=True, kw_only=True)
class JobHealthSettings:
    """Job-wide rules: throughput drop, communication slowdown, checkpoint staleness (issue 9)."""

    #: Throughput drop: smallest slowdown worth an alert (fraction of the baseline step time).
    throughput_min_effect: float = 0.10
    #: CUSUM alarm level (sum of relative excess over ``min_effect / 2``).
    throughput_threshold: float = 0.4
    #: Steps whose median must be ``min_effect`` above the baseline (one slow step never fires).
    throughput_persistence: int = 5
    #: Healthy steps the baseline is the median of.
    throughput_baseline_steps: int = 200
    #: Steps missing some of their group's ranks (late or lost events) are left out, up to this many
    #: in a row; beyond, they are judged as the job's new normal.
    throughput_max_incomplete_steps: int = 100
    #: Communication slowdown: collective transfer time this fraction above its baseline ...
    comm_threshold: float = 0.30
    #: ... as a median over this many collectives ...
    comm_window: int = 20
    #: ... for this many consecutive collectives.
    comm_persistence: int = 10
    #: Checkpoint staleness: the last successful checkpoint older than this (seconds; 0 = off) ...
    checkpoint_max_age_seconds: float = 3600.0
    #: ... or this many steps (0 = off) ...
    checkpoint_max_age_steps: int = 0
    #: ... or a checkpoint taking this many times its usual duration.
    checkpoint_slow_factor: float = 3.0
    #: Policy: every job must checkpoint, so the age rule also runs for a job that never reported a
    #: checkpoint. Off: only jobs that have reported one (then stopped) can be stale.
    checkpoint_required: bool = False


def throughput_rule(job: str, settings: JobHealthSettings, *, warmup_steps: int) -> ThroughputDetector:
    h = settings
    return ThroughputDetector(job=job, min_effect=h.throughput_min_effect, threshold=h.throughput_threshold,
                              persistence=h.throughput_persistence, baseline_steps=h.throughput_baseline_steps,
                              warmup_steps=warmup_steps, max_incomplete_steps=h.throughput_max_incomplete_steps)


def comm_rule(job: str, settings: JobHealthSettings) -> CommSlowdownDetector:
    h = settings
    return CommSlowdownDetector(job=job, threshold=h.comm_threshold, window=h.comm_window,
                                persistence=h.comm_persistence)


def checkpoint_rule(job: str, settings: JobHealthSettings) -> CheckpointDetector:
    h = settings
    return CheckpointDetector(job=job, max_age_seconds=h.checkpoint_max_age_seconds,
                              max_age_steps=h.checkpoint_max_age_steps, slow_factor=h.checkpoint_slow_factor,
                              required=h.checkpoint_required)


def job_health_rules(job: str, settings: JobHealthSettings, *, warmup_steps: int
                     ) -> tuple[ThroughputDetector, CommSlowdownDetector, CheckpointDetector]:
    """The three job-wide rules of ``job``, configured by ``settings`` (the engine makes each through its
    registry entry, models/job_rules.py)."""
    return (throughput_rule(job, settings, warmup_steps=warmup_steps), comm_rule(job, settings),
            checkpoint_rule(job, settings))
