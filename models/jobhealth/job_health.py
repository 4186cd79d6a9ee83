"""Settings of the job-wide rules: throughput drop (models/jobhealth/throughput.py), communication slowdown
(models/jobhealth/comm.py), checkpoint staleness (models/jobhealth/checkpoint.py) and stage imbalance / rank classes
(models/steps/imbalance.py); the engine builds them per job. The fields marked ``runtime`` may change while the
worker runs (``stepwatch config set job_health.FIELD=VALUE``): ``configure`` hands them to a job's rules,
whose open alerts then resolve with ``evidence.resolution = threshold_changed`` when a raised threshold
ends them."""

from __future__ import annotations


from .settings import JobHealthSettings  # noqa: F401  (defined in a light module; re-exported here)
from .checkpoint import CheckpointDetector
from .comm import CommSlowdownDetector
from ..steps.imbalance import ImbalanceDetector
from .throughput import ThroughputDetector
from ..tunable import runtime_fields




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

