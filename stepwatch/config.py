"""One immutable configuration object, with documented defaults and env-var overrides.

The detection core's sections are defined next to what they configure (models/settings.py lists
them); this module adds what only the processes need (Kafka, security, the worker, Alertmanager,
the shard stage) and composes the whole tree. Every setting has a default that suits a typical synchronous data-parallel job.
Each one can be overridden from the environment as ``STEPWATCH_<SECTION>_<FIELD>``
(for example ``STEPWATCH_STRAGGLER_RATIO_THRESHOLD=1.2``); the Kafka bootstrap
servers also honour the shorter ``KAFKA_BOOTSTRAP``. Build it with
``Settings.from_env()``; override single fields with ``dataclasses.replace``.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from stepwatch.models.settings import (AssemblySettings, DetectionSettings, HangSettings, HostSettings,  # noqa: F401
                             JobHealthSettings, OnCallSettings, RetentionSettings, StragglerSettings,
                             TelemetrySettings)
from stepwatch.models.pipeline import PipelineSettings


@dataclass(frozen=True, kw_only=True)
class KafkaSettings:
    """Where the worker, producers and CLI connect, and the topic names."""

    #: Bootstrap servers; empty means "none configured" (demo starts a local broker).
    bootstrap: str = ""
    #: Prefix for every topic name, so several deployments (or tests) share a cluster.
    topic_prefix: str = "stepwatch."
    events_topic: str = "events"
    alerts_topic: str = "alerts"
    deadletter_topic: str = "deadletter"
    #: Runtime settings (compacted, keyed by job id or ``*``; see docs/operations.md).
    config_topic: str = "config"
    #: Workers registry (compacted, one partition, keyed by worker URL): which worker owns which
    #: events partition, for the status API's proxying (streams/registry.py).
    workers_topic: str = "workers"
    #: Persistent link baselines (compacted, keyed by node; streams/link_baselines.py, docs/network.md).
    link_baselines_topic: str = "link-baselines"
    #: Worker -> rank monitors requests (stack requests, keyed by job; docs/hang.md).
    control_topic: str = "control"
    #: Output of the optional shard stage (``stepwatch shard``): the raw events re-batched per job, keyed
    #: by job. Detection workers read it with ``STEPWATCH_KAFKA_EVENTS_TOPIC=job-events``.
    job_events_topic: str = "job-events"
    #: Partitions for topics stepwatch creates; jobs are spread over partitions by key.
    partitions: int = 4
    #: Replication factor for topics stepwatch creates (1 suits a single local broker).
    replication_factor: int = 1
    #: Faust application id (also the consumer group).
    app_id: str = "stepwatch"

    def topic(self, name: str) -> str:
        return f"{self.topic_prefix}{name}"


@dataclass(frozen=True, kw_only=True)
class WorkerSettings(PipelineSettings):
    """The worker process (``stepwatch worker``): ``STEPWATCH_WORKER_<FIELD>``. The timer and input
    checks the pipeline itself uses (``tick_interval``, ``max_future_seconds``) are defined with it
    (models/pipeline.py)."""

    #: Port of the worker's web server (metrics, status); 0 disables it.
    web_port: int = 6066
    #: Where Faust keeps local state; empty means ~/.cache/stepwatch/<app_id>.
    datadir: str = ""
    #: On (re)assignment, messages per events partition read back before the committed
    #: offset to rebuild the detectors' windows (streams/recovery.py); 0 disables it.
    recovery_messages: int = 1000
    #: Alerts per alerts-topic partition read back to learn which alerts are open.
    recovery_alerts_lookback: int = 5000
    #: Consumer-group session timeout, seconds: how long a crashed worker's partitions stay
    #: with it before another worker (or its restart) takes them over.
    session_timeout: float = 30.0
    #: How other workers reach this one's web server (status requests for a job on another
    #: worker are proxied there); empty means http://127.0.0.1:<web_port>.
    canonical_url: str = ""
    #: Seconds between two advertisements of this worker's events partitions on the workers topic
    #: (also sent on every assignment change); entries older than 3 intervals are ignored.
    registry_interval: float = 10.0
    #: Recent judged steps kept per job for the dashboard's heatmap and step-rate line.
    status_history_steps: int = 60
    #: The dashboard's heatmap shows at most this many rows: per node, then per node range, beyond it.
    dashboard_max_rows: int = 256
    #: Who consumes the events topic: ``aiokafka`` (the worker's own consumer in the group
    #: ``<app_id>-events``, ``getmany`` batches into the engine; the default) or ``faust`` (a Faust
    #: agent in the group ``<app_id>``, one message at a time).
    consumer: str = "aiokafka"
    #: Address the web server listens on (Faust's ``web_bind``); loopback unless set. Bound off
    #: loopback, every page but /health and /metrics wants the bearer token (docs/security.md).
    web_bind: str = "127.0.0.1"
    #: File holding the bearer token the web pages want (``Authorization: Bearer <token>``); the
    #: proxy passes it on to the peer. Required when ``web_bind`` is not a loopback address.
    web_token_file: str = ""
    #: Start bound off loopback without a token anyway (a network the operator trusts).
    web_allow_unauthenticated: bool = False
    #: File holding the key every worker signs its workers-topic records with (HMAC-SHA256);
    #: records without a valid signature are ignored. Empty: unsigned (then use ``peers``).
    peer_key_file: str = ""
    #: Comma-separated peer URLs the proxy may talk to (an allow-list); empty: any worker whose
    #: workers-topic record counts (signed when ``peer_key_file`` is set).
    peers: str = ""

    def __post_init__(self) -> None:
        if self.consumer not in ("faust", "aiokafka"):
            raise ValueError(f"worker.consumer: expected 'faust' or 'aiokafka', got {self.consumer!r}")


@dataclass(frozen=True, kw_only=True)
class ShardSettings:
    """The optional first stage that spreads one large job over several processes (``stepwatch shard``,
    streams/shard.py, docs/operations.md "One large job over several workers")."""

    #: Longest time (seconds) a job's events wait in the stage before they go out as an envelope: the
    #: latency the stage adds at most.
    flush_interval: float = 0.1
    #: Events per envelope at most (a job's buffer goes out at once when it holds this many).
    max_events: int = 256
    #: Events held per process at most, buffered or sent but not yet acknowledged; beyond, every buffer is
    #: flushed at once and consumption waits for acknowledgements (nothing is dropped).
    max_buffered: int = 100_000
    #: Seconds between commits of the consumed offsets (only of events the broker acknowledged).
    commit_interval: float = 1.0
    #: Port of the stage's Prometheus metrics (``/metrics``); 0 serves none.
    metrics_port: int = 0

    def __post_init__(self) -> None:
        if not self.flush_interval > 0:
            raise ValueError(f"shard.flush_interval: expected a positive number of seconds, "
                             f"got {self.flush_interval!r}")
        if not 1 <= self.max_events <= 100_000:
            raise ValueError(f"shard.max_events: expected 1 to 100000, got {self.max_events!r}")
        if self.max_buffered < self.max_events:
            raise ValueError(f"shard.max_buffered: expected at least shard.max_events ({self.max_events}), "
                             f"got {self.max_buffered!r}")


@dataclass(frozen=True, kw_only=True)
class AlertmanagerSettings:
    """Optional delivery of alerts to Prometheus Alertmanager (the alerts topic stays the primary output)."""

    #: Base URL, e.g. http://alertmanager:9093; empty disables the sink.
    url: str = ""
    #: Firing alerts are sent again this often (seconds), as Prometheus does.
    resend_interval: float = 60.0
    #: Per-request timeout, seconds.
    timeout: float = 10.0
    #: Alerts waiting to be sent; when full the oldest waiting update is dropped (detection never waits).
    queue_size: int = 1000
    #: Retry a failed POST with exponential backoff from this many seconds ...
    backoff_initial: float = 0.5
    #: ... up to this many seconds between attempts ...
    backoff_max: float = 30.0
    #: ... for at most this many attempts.
    max_attempts: int = 8






@dataclass(frozen=True, kw_only=True)
class SecuritySettings:
    """How every Kafka client (worker, producers, agent, CLI) connects: the usual Kafka client settings.

    Secrets come from the environment or from files and are never logged: ``repr`` and
    ``Settings.as_dict`` leave them out.
    """

    #: PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL.
    protocol: str = "PLAINTEXT"
    #: CA bundle (PEM) that signed the brokers' certificates; empty: the system's trust store.
    ssl_cafile: str = ""
    #: Client certificate and key (PEM) for mutual TLS.
    ssl_certfile: str = ""
    ssl_keyfile: str = ""
    #: Check that the broker's certificate names the host connected to.
    ssl_check_hostname: bool = True
    #: PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512.
    sasl_mechanism: str = "PLAIN"
    sasl_username: str = ""
    #: The SASL password itself (prefer ``sasl_password_file``).
    sasl_password: str = field(default="", repr=False)
    #: A file holding the SASL password (e.g. a mounted Kubernetes secret).
    sasl_password_file: str = ""



@dataclass(frozen=True, kw_only=True)
class Settings(DetectionSettings):
    """The whole tree: the detection core's sections (``DetectionSettings``) and the processes' own."""

    kafka: KafkaSettings = field(default_factory=KafkaSettings)
    worker: WorkerSettings = field(default_factory=WorkerSettings)
    alertmanager: AlertmanagerSettings = field(default_factory=AlertmanagerSettings)
    security: SecuritySettings = field(default_factory=SecuritySettings)
    shard: ShardSettings = field(default_factory=ShardSettings)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> "Settings":
        """Defaults overridden by ``STEPWATCH_<SECTION>_<FIELD>`` variables.

        Raises ``ValueError`` naming the variable when a value does not parse.
        """
        env = os.environ if environ is None else environ
        sections: dict[str, Any] = {}
        for section_field in dataclasses.fields(cls):
            default_section = section_field.default_factory()  # type: ignore[misc]
            overrides = {}
            for f in dataclasses.fields(default_section):
                var = f"STEPWATCH_{section_field.name}_{f.name}".upper()
                if var in env:
                    overrides[f.name] = _parse(var, env[var], type(getattr(default_section, f.name)))
            sections[section_field.name] = dataclasses.replace(default_section, **overrides)
        if "KAFKA_BOOTSTRAP" in env and "STEPWATCH_KAFKA_BOOTSTRAP" not in env:
            sections["kafka"] = dataclasses.replace(sections["kafka"], bootstrap=env["KAFKA_BOOTSTRAP"])
        return cls(**sections)

    def as_dict(self) -> dict[str, Any]:
        """Every setting, secrets redacted (safe to log or serve in the status API)."""
        out = dataclasses.asdict(self)
        if out["security"]["sasl_password"]:
            out["security"]["sasl_password"] = "***"
        return out


def _parse(var: str, raw: str, kind: type) -> Any:
    try:
        if kind is bool:
            lowered = raw.strip().lower()
            if lowered in ("1", "true", "yes", "on"):
                return True
            if lowered in ("0", "false", "no", "off"):
                return False
            raise ValueError(raw)
        return kind(raw)
    except ValueError:
        raise ValueError(f"{var}={raw!r} is not a valid {kind.__name__}") from None
