"""Which job a training process belongs to, from its launcher's environment: an id that never
merges two jobs, and stays the same across a restart of one job.

A pure function of an environment mapping (and, for the last resort, the job's start time), with no
heavy imports: the rank monitor calls it with ``os.environ``, the node agent with a process's
``/proc/<pid>/environ``. In order:

1. ``STEPWATCH_JOB`` (or ``STEPWATCH_JOB_ID``): set by the user, taken as is;
2. torchrun / torchelastic: ``TORCHELASTIC_RUN_ID`` (``--rdzv-id``), unless it is torchrun's default
   ``none`` (every job launched without ``--rdzv-id`` has it: it would merge them);
3. Slurm: ``SLURM_JOB_ID``, with ``.SLURM_STEP_ID`` when set (each ``srun`` step is a run of its own;
   a requeued job keeps its id: a restart);
4. Kubernetes, through the downward API (docs/training.md): ``STEPWATCH_K8S_JOB_UID`` (the Job's
   ``metadata.labels['batch.kubernetes.io/controller-uid']``, unique per Job object) and/or
   ``STEPWATCH_K8S_JOB_NAME`` (``metadata.labels['batch.kubernetes.io/job-name']``);
5. otherwise an id derived from the rendezvous: ``MASTER_ADDR``, ``MASTER_PORT`` and the job's start
   time, which all ranks must agree on (the rank monitor takes it from the job's rendezvous store:
   the first rank to ask writes it). Marked ``guessed``: the caller logs a warning line. Without a
   start time either, ``default`` (guessed too).
"""

from __future__ import annotations

import enum
import hashlib
from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["IdSource", "JobIdentity", "job_identity", "START_TIME_KEY"]

#: Key of the job's start time in the rendezvous store (torch.distributed's TCPStore).
START_TIME_KEY = "stepwatch/job_start_time"


class IdSource(enum.Enum):
    """Where a job id came from."""

    STEPWATCH = "stepwatch"
    TORCHELASTIC = "torchelastic"
    SLURM = "slurm"
    KUBERNETES = "kubernetes"
    RENDEZVOUS = "rendezvous"
    DEFAULT = "default"


@dataclass(frozen=True, slots=True)
class JobIdentity:
    job: str
    source: IdSource
    #: True when no launcher said which job this is (rendezvous-derived or ``default``): worth a warning.
    guessed: bool


def _get(env: Mapping[str, str], name: str) -> str | None:
    value = env.get(name)
    if value is None:
        return None
    value = value.strip()
    return value or None


def job_identity(env: Mapping[str, str], *, start_time: str | float | None = None) -> JobIdentity:
    """The job id of a process with environment ``env``; ``start_time``: the job's start as all its ranks
    agree on it (only used when no launcher variable says which job this is)."""
    explicit = _get(env, "STEPWATCH_JOB") or _get(env, "STEPWATCH_JOB_ID")
    if explicit:
        return JobIdentity(explicit, IdSource.STEPWATCH, False)
    run_id = _get(env, "TORCHELASTIC_RUN_ID")
    if run_id and run_id.lower() != "none":
        return JobIdentity(run_id, IdSource.TORCHELASTIC, False)
    slurm = _get(env, "SLURM_JOB_ID") or _get(env, "SLURM_JOBID")  # the second: Slurm's older name, still set
    if slurm:
        step = _get(env, "SLURM_STEP_ID") or _get(env, "SLURM_STEPID")
        return JobIdentity(f"{slurm}.{step}" if step else slurm, IdSource.SLURM, False)
    uid, name = _get(env, "STEPWATCH_K8S_JOB_UID"), _get(env, "STEPWATCH_K8S_JOB_NAME")
    if uid or name:
        job = f"{name}-{uid[:8]}" if (name and uid) else (name or uid)
        return JobIdentity(job, IdSource.KUBERNETES, False)
    addr, port = _get(env, "MASTER_ADDR"), _get(env, "MASTER_PORT")
    if start_time is not None and str(start_time).strip():
        digest = hashlib.sha256(f"{addr}:{port}:{start_time}".encode()).hexdigest()[:12]
        return JobIdentity(f"rdzv-{digest}", IdSource.RENDEZVOUS, True)
    return JobIdentity("default", IdSource.DEFAULT, True)
