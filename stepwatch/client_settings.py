"""The Kafka client's settings (bootstrap, topic names, TLS/SASL), apart from the detection core's.

What every Kafka client needs, in a module that imports nothing heavy: the rank monitor and the
training callbacks use :class:`ClientSettings` (``import stepwatch.producers.monitor`` loads no
numpy, scipy, Faust or detection model; tests/cli/test_light_import.py). ``stepwatch.config.Settings``
composes the same two sections into the whole tree, parsed by the same rules.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


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
    #: Alerts of candidate settings under trial (``stepwatch config set --shadow``): never paged, compared by
    #: ``stepwatch report --shadow`` (streams/shadow.py).
    shadow_alerts_topic: str = "shadow-alerts"
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
    #: Verdicts on alerts (compacted, keyed by alert id; ``stepwatch feedback``, models/wire/feedback.py):
    #: SREs write it, workers and ``stepwatch report`` read it.
    feedback_topic: str = "feedback"
    #: Partitions for topics stepwatch creates; jobs are spread over partitions by key.
    partitions: int = 4
    #: Replication factor for topics stepwatch creates (1 suits a single local broker).
    replication_factor: int = 1
    #: Faust application id (also the consumer group).
    app_id: str = "stepwatch"

    def topic(self, name: str) -> str:
        return f"{self.topic_prefix}{name}"


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
class ClientSettings:
    """The two sections a Kafka client needs; ``stepwatch.config.Settings`` has the same two fields."""

    kafka: KafkaSettings = field(default_factory=KafkaSettings)
    security: SecuritySettings = field(default_factory=SecuritySettings)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> "ClientSettings":
        """``STEPWATCH_KAFKA_*`` / ``STEPWATCH_SECURITY_*`` (and ``KAFKA_BOOTSTRAP``), as ``Settings.from_env``."""
        return cls(**env_overrides(cls, os.environ if environ is None else environ))


def env_overrides(cls: type, env: Mapping[str, str]) -> dict[str, Any]:
    """Each section of the dataclass ``cls``, defaults overridden by ``STEPWATCH_<SECTION>_<FIELD>``.

    Raises ``ValueError`` naming the variable when a value does not parse.
    """
    sections: dict[str, Any] = {}
    for section_field in dataclasses.fields(cls):
        default_section = section_field.default_factory()  # type: ignore[misc]
        overrides = {}
        for f in dataclasses.fields(default_section):
            var = f"STEPWATCH_{section_field.name}_{f.name}".upper()
            if var in env:
                overrides[f.name] = _parse(var, env[var], type(getattr(default_section, f.name)))
        sections[section_field.name] = dataclasses.replace(default_section, **overrides)
    if "kafka" in sections and "KAFKA_BOOTSTRAP" in env and "STEPWATCH_KAFKA_BOOTSTRAP" not in env:
        sections["kafka"] = dataclasses.replace(sections["kafka"], bootstrap=env["KAFKA_BOOTSTRAP"])
    return sections


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
