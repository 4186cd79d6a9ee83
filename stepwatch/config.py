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
from enum import StrEnum
from typing import Any

from stepwatch.models.settings import (AssemblySettings, DetectionSettings, HangSettings, HostSettings,  # noqa: F401
                             JobHealthSettings, OnCallSettings, RetentionSettings, StragglerSettings,
                             TelemetrySettings)
from stepwatch.models.settings import PipelineSettings
# The Kafka client's sections live in a light module, so the training side imports no detection core.
from stepwatch.client_settings import KafkaSettings, SecuritySettings, _parse, env_overrides  # noqa: F401


class ConsumerMode(StrEnum):
    """Who consumes the events topic (``worker.consumer``)."""

    AIOKAFKA = "aiokafka"  # the worker's own consumer (streams/events_consumer.py)
    FAUST = "faust"  # a Faust agent (streams/faust_agent.py)


@dataclass(frozen=True, kw_only=True)
class WorkerSettings(PipelineSettings):
    """The worker process (``stepwatch worker``): ``STEPWATCH_WORKER_<FIELD>``. The timer and input
    checks the pipeline itself uses (``tick_interval``, ``max_future_seconds``) are defined with it
    (models/settings.py, used by models/pipeline.py)."""

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
    #: Seconds between commits of the processed events offsets (both consumer modes; Faust's
    #: ``broker_commit_interval``). A crash re-reads at most this span (at-least-once).
    commit_interval: float = 1.0
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
    #: agent in the group ``<app_id>``, ``take_events`` batches).
    consumer: ConsumerMode = ConsumerMode.AIOKAFKA
    #: Decoder processes of the aiokafka events consumer (streams/decoder.py): under load, large reads are
    #: decoded there while the worker detects on the one before. -1: one where the worker may use two CPUs
    #: or more, else none; 0: none (decode in the worker); 1: one.
    decode_processes: int = -1
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
        try:  # a plain string (a test, ``dataclasses.replace``) becomes the enum
            object.__setattr__(self, "consumer", ConsumerMode(self.consumer))
        except ValueError:
            raise ValueError(f"worker.consumer: expected 'faust' or 'aiokafka', got {self.consumer!r}") from None


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
    #: An alert's summary says its rule's precision on this fleet is low when the 95 % interval of its
    #: confirmed share (feedback topic, streams/feedback_feed.py) lies wholly under this ...
    low_precision: float = 0.5
    #: ... with at least this many confirmed-or-false verdicts on the rule's alerts.
    low_precision_min_feedback: int = 20

    def __post_init__(self) -> None:
        if not 0.0 <= self.low_precision <= 1.0:
            raise ValueError(f"alertmanager.low_precision: expected 0 to 1 (0 never says so), got {self.low_precision!r}")
        if self.low_precision_min_feedback < 1:
            raise ValueError(f"alertmanager.low_precision_min_feedback: expected at least 1, "
                             f"got {self.low_precision_min_feedback!r}")






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
        return cls(**env_overrides(cls, os.environ if environ is None else environ))

    def as_dict(self) -> dict[str, Any]:
        """Every setting, secrets redacted (safe to log or serve in the status API)."""
        out = dataclasses.asdict(self)
        if out["security"]["sasl_password"]:
            out["security"]["sasl_password"] = "***"
        return out
