"""Settings of the rank monitor: explicit arguments win, then the environment, then defaults.

What :class:`~stepwatch.producers.monitor.RankMonitor` resolves once at construction (job,
rank, topic, security, queue and heartbeat sizes); nothing here runs on the training thread.
"""

from __future__ import annotations

import logging
import os
import socket
import sys
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from stepwatch.client_settings import ClientSettings, KafkaSettings, SecuritySettings

from .job_identity import START_TIME_KEY, IdSource, job_identity
from .transport import security_from_env

if TYPE_CHECKING:  # the whole tree only as a type: importing it loads the detection core
    from stepwatch.config import Settings

# The monitor's logger: one name to configure for all a training process's monitor logs.
log = logging.getLogger("stepwatch.producers.monitor")

__all__ = ["MonitorConfig"]


def _env(env: Mapping[str, str], *names: str) -> str | None:
    for name in names:
        value = env.get(name)
        if value is not None and value.strip() and value.strip().lower() != "none":
            return value.strip()
    return None


def _env_int(env: Mapping[str, str], *names: str) -> int | None:
    value = _env(env, *names)
    if value is None:
        return None
    try:
        return int(value)
    except ValueError:
        log.warning("stepwatch: ignoring non-integer %s=%r", names, value)
        return None


def _env_float(env: Mapping[str, str], name: str, default: float) -> float:
    value = _env(env, name)
    if value is None:
        return default
    try:
        return float(value)
    except ValueError:
        log.warning("stepwatch: ignoring invalid %s=%r", name, value)
        return default


def _env_bool(env: Mapping[str, str], name: str, default: bool) -> bool:
    value = _env(env, name)
    if value is None:
        return default
    return value.lower() not in ("0", "false", "no", "off")


def _torch_dist():
    """``torch.distributed`` if torch is already imported and a process group is up (never imports torch)."""
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    try:
        dist = torch.distributed
        if dist.is_available() and dist.is_initialized():
            return dist
    except Exception:  # silent: torch.distributed unusable here: no process group, as when not initialised
        pass
    return None


def _rendezvous_start_time(dist) -> str | None:
    """The job's start time as every rank agrees on it: the first rank to ask writes it to the job's
    rendezvous store, the others read it back (one round trip, at monitor construction)."""
    try:
        store = dist.distributed_c10d._get_default_store()
        value = store.compare_set(START_TIME_KEY, "", repr(time.time()))
        return value.decode() if isinstance(value, bytes) else str(value)
    except Exception as exc:
        log.warning("stepwatch: cannot read the job start time from the rendezvous store: %r", exc)
        return None


class MonitorConfig:
    """Resolved monitor settings: explicit arguments win, then the environment, then defaults.

    Environment (all optional): the job id from ``STEPWATCH_JOB``, else the launcher's
    (producers/job_identity.py: ``TORCHELASTIC_RUN_ID`` unless ``none``, ``SLURM_JOB_ID`` + step,
    ``STEPWATCH_K8S_JOB_UID``/``_NAME``, else derived from the rendezvous, with a warning), ``STEPWATCH_RANK`` (else ``RANK``, ``SLURM_PROCID``, the
    initialized ``torch.distributed`` rank), ``STEPWATCH_WORLD_SIZE`` (else
    ``WORLD_SIZE``, ``SLURM_NTASKS``), ``STEPWATCH_NODE`` (else the host name),
    ``STEPWATCH_GPU`` (else ``LOCAL_RANK``, ``SLURM_LOCALID``), ``STEPWATCH_GROUP``,
    ``STEPWATCH_KAFKA_BOOTSTRAP`` (else ``KAFKA_BOOTSTRAP``), ``STEPWATCH_KAFKA_TOPIC_PREFIX``
    + ``STEPWATCH_KAFKA_EVENTS_TOPIC`` (the worker's names), ``STEPWATCH_MONITOR_ENABLED``,
    ``STEPWATCH_MONITOR_HEARTBEAT_INTERVAL``, ``STEPWATCH_MONITOR_QUEUE_SIZE``,
    ``STEPWATCH_MONITOR_COLLECTIVE_EVENTS``, ``STEPWATCH_MONITOR_SHARD_RANKS`` (0: events keyed by
    job; N > 0: keyed ``"job/<rank // N>"`` for the shard stage, see docs/events.md), and every
    ``STEPWATCH_SECURITY_*`` setting (TLS/SASL, as for the worker).

    ``settings``: a ``stepwatch.config.Settings`` (e.g. the worker's ``Settings.from_env()``):
    then bootstrap, topic names and security come from it instead of the environment
    (explicit ``bootstrap``/``topic`` arguments still win).
    """

    def __init__(self, *, job: str | None = None, rank: int | None = None, world_size: int | None = None,
                 node: str | None = None, gpu: int | None = None, group: str | None = None,
                 bootstrap: str | None = None, topic: str | None = None, enabled: bool | None = None,
                 heartbeat_interval: float | None = None, queue_size: int | None = None,
                 collective_events: bool | None = None, flush_interval: float = 0.1,
                 close_timeout: float = 5.0, producer_config: Mapping[str, Any] | None = None,
                 environ: Mapping[str, str] | None = None, shard_ranks: int | None = None,
                 settings: ClientSettings | Settings | None = None) -> None:
        env = os.environ if environ is None else environ
        dist = _torch_dist()
        #: Where the job id came from (producers/job_identity.py); None when given as an argument.
        self.job_source: IdSource | None = None
        if job:
            self.job = job
        else:
            identity = job_identity(env)
            if identity.guessed and dist is not None:
                identity = job_identity(env, start_time=_rendezvous_start_time(dist))
            self.job, self.job_source = identity.job, identity.source
            if identity.guessed:
                log.warning("stepwatch: no launcher names this job (STEPWATCH_JOB, TORCHELASTIC_RUN_ID, SLURM_JOB_ID, "
                            "STEPWATCH_K8S_JOB_UID/NAME unset); guessed job id %r from %s", self.job,
                            identity.source.value)
        if rank is None:
            rank = _env_int(env, "STEPWATCH_RANK", "RANK", "SLURM_PROCID")
        if rank is None and dist is not None:
            rank = dist.get_rank()
        self.rank = int(rank or 0)
        if world_size is None:
            world_size = _env_int(env, "STEPWATCH_WORLD_SIZE", "WORLD_SIZE", "SLURM_NTASKS")
        if world_size is None and dist is not None:
            world_size = dist.get_world_size()
        self.world_size = world_size if world_size and world_size > self.rank else None
        self.node = node or _env(env, "STEPWATCH_NODE") or socket.gethostname() or None
        self.gpu = gpu if gpu is not None else _env_int(env, "STEPWATCH_GPU", "LOCAL_RANK", "SLURM_LOCALID")
        self.group = group if group is not None else _env(env, "STEPWATCH_GROUP")
        kafka = KafkaSettings()
        #: TLS/SASL for the producer; None: a STEPWATCH_SECURITY_* value did not parse (``security_error``).
        self.security: SecuritySettings | None
        self.security_error: str | None = None
        if settings is not None:
            kafka = settings.kafka
            self.bootstrap = bootstrap or kafka.bootstrap or "localhost:9092"
            topic = topic if topic is not None else kafka.topic(kafka.events_topic)
            self.security = settings.security
        else:
            self.bootstrap = bootstrap or _env(env, "STEPWATCH_KAFKA_BOOTSTRAP", "KAFKA_BOOTSTRAP") or "localhost:9092"
            if topic is None:
                prefix = env.get("STEPWATCH_KAFKA_TOPIC_PREFIX", kafka.topic_prefix)
                topic = prefix + (_env(env, "STEPWATCH_KAFKA_EVENTS_TOPIC") or kafka.events_topic)
            try:
                self.security = security_from_env(env)
            except ValueError as exc:
                self.security, self.security_error = None, str(exc)
        self.topic = topic
        self.enabled = enabled if enabled is not None else _env_bool(env, "STEPWATCH_MONITOR_ENABLED", True)
        self.heartbeat_interval = heartbeat_interval if heartbeat_interval is not None else \
            _env_float(env, "STEPWATCH_MONITOR_HEARTBEAT_INTERVAL", 5.0)
        self.queue_size = int(queue_size if queue_size is not None else
                              _env_float(env, "STEPWATCH_MONITOR_QUEUE_SIZE", 10_000))
        self.collective_events = collective_events if collective_events is not None else \
            _env_bool(env, "STEPWATCH_MONITOR_COLLECTIVE_EVENTS", False)
        if shard_ranks is None:
            shard_ranks = _env_int(env, "STEPWATCH_MONITOR_SHARD_RANKS")
        #: > 0: this rank's events are keyed ``f"{job}/{rank // shard_ranks}"`` (job-wide phase events
        #: keep the job id), for the shard stage (streams/shard.py); 0: keyed by job.
        self.shard_ranks = max(0, int(shard_ranks or 0))
        self.flush_interval = flush_interval
        self.close_timeout = close_timeout
        self.producer_config = dict(producer_config or {})

    def __repr__(self) -> str:
        return (f"MonitorConfig(job={self.job!r}, rank={self.rank}, world_size={self.world_size}, node={self.node!r}, "
                f"gpu={self.gpu}, group={self.group!r}, bootstrap={self.bootstrap!r}, topic={self.topic!r}, "
                f"enabled={self.enabled}, shard_ranks={self.shard_ranks})")

    @property
    def key(self) -> str:
        """Kafka key of this rank's events (``stepwatch.producers.publisher.shard_key``)."""
        return f"{self.job}/{self.rank // self.shard_ranks}" if self.shard_ranks > 0 else self.job
