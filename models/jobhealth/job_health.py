"""Settings of the job-wide rules: throughput drop (models/jobhealth/throughput.py), communication slowdown
(models/jobhealth/comm.py), checkpoint staleness (models/jobhealth/checkpoint.py) and stage imbalance / rank classes
(models/steps/imbalance.py); the engine builds them per job. The fields marked ``runtime`` may change while the
worker runs (``stepwatch config set job_health.FIELD=VALUE``): ``configure`` hands them to a job's rules,
whose open alerts then resolve with ``evidence.resolution = threshold_changed`` when a raised threshold
ends them."""

from __future__ import annotations

from dataclasses import dataclass

from .checkpoint import CheckpointDetector
from .comm import CommSlowdownDetector
from ..steps.imbalance import ImbalanceDetector
from .throughput import ThroughputDetector
from ..tunable import runtime, runtime_fields


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


def runtime_values(settings: JobHealthSettings, rule: str) -> dict:
    """``settings``' runtime fields of one rule (``throughput``, ``comm``, ``imbalance``) by the detector's own
    names: a field is named ``<rule>_<the detector's setting>``, so the name says both once (its
    ``reconfigure(**values)`` keeps state and open alerts; an alert a raised threshold ends resolves saying so)."""
    prefix = rule + "_"
    return {field[len(prefix):]: getattr(settings, field) for field in runtime_fields(JobHealthSettings)
            if field.startswith(prefix)}


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

