"""Detector settings changed while the worker runs, through a compacted Kafka topic.

The config topic (``<prefix>config``, one partition, ``cleanup.policy=compact``) holds one
message per scope: the key is a job id, or ``*`` for the default of every job; the value is
the complete set of overrides for that scope::

    {"v": 1, "kind": "config", "straggler": {"ratio_threshold": 1.2}, "updated_at": 1700000000.0}

A null value (tombstone) removes the scope's overrides. Every worker reads the whole topic
from the beginning (no consumer group) and applies each message to its engine at once.
A job's effective settings are the worker's environment settings, overridden by ``*``,
overridden by the job's own. The node-level and outlet rules' sections (``telemetry``, ``host``, ``oncall``)
are the worker's, not a job's: only ``*`` sets them, and they go to the telemetry hub's node rules and the
on-call outlet rules (their ``reconfigure``). ``stepwatch config set/unset/show`` write and read the topic.
"""

from __future__ import annotations

import dataclasses
import math
import time
from typing import Any

import orjson

from stepwatch.models.hang.detector import HangSettings
from stepwatch.models.jobhealth.job_health import JobHealthSettings
from stepwatch.models.oncall.oncall import OnCallSettings
from stepwatch.models.telemetry.host import HostSettings
from stepwatch.models.telemetry.telemetry_hub import TelemetrySettings
from stepwatch.models.steps.straggler import StragglerSettings
from stepwatch.models.tunable import check_runtime_value, runtime_fields
from stepwatch.config import Settings, _parse

GLOBAL = "*"
#: Sections that can be changed at run time, with their settings class.
SECTIONS: dict[str, type] = {"straggler": StragglerSettings, "hang": HangSettings, "job_health": JobHealthSettings,
                             "telemetry": TelemetrySettings, "host": HostSettings, "oncall": OnCallSettings}
#: Sections of the worker-wide rules (node-level: the telemetry hub; outlet: on call): set for ``*`` only.
WORKER_SECTIONS = ("telemetry", "host", "oncall")


def parse_assignments(items: list[str]) -> dict[str, dict[str, Any]]:
    """``["straggler.ratio_threshold=1.2", ...]`` -> ``{"straggler": {"ratio_threshold": 1.2}}``.

    A bare field name means the straggler section. Raises ``ValueError`` naming what is wrong.
    """
    out: dict[str, dict[str, Any]] = {}
    for item in items:
        name, sep, raw = item.partition("=")
        name = name.strip()
        if not sep or not name:
            raise ValueError(f"expected SECTION.FIELD=VALUE, got {item!r}")
        section, dot, field = name.rpartition(".")
        section = section if dot else "straggler"
        out.setdefault(section, {})[field] = _convert(section, field, raw.strip())
    validate(out)
    return out


def _convert(section: str, field: str, raw: Any) -> Any:
    cls = SECTIONS.get(section)
    if cls is None:
        raise ValueError(f"unknown section {section!r}: runtime settings exist for {', '.join(SECTIONS)}")
    fields = {f.name: f for f in dataclasses.fields(cls)}
    if field in fields and field not in runtime_fields(cls):  # marked on the dataclass (models/tunable.py)
        raise ValueError(f"{section}.{field} can only be set at start-up "
                         f"(STEPWATCH_{section.upper()}_{field.upper()})")
    if field not in fields:
        raise ValueError(f"unknown setting {section}.{field}; known: {', '.join(sorted(fields))}")
    kind = type(getattr(cls(), field))
    if isinstance(raw, str):
        value = _parse(f"{section}.{field}", raw, kind)
    elif kind is bool and isinstance(raw, bool):
        value = raw  # a JSON true/false (what ``config set`` writes for a bool)
    elif isinstance(raw, bool) or not isinstance(raw, (int, float)) or kind is bool:
        raise ValueError(f"{section}.{field}={raw!r} is not a valid {kind.__name__}")
    elif kind is int and not (math.isfinite(raw) and float(raw) == int(raw)):
        raise ValueError(f"{section}.{field}={raw!r} is not a valid int")
    else:
        value = kind(raw)
    try:
        check_runtime_value(cls, field, value)  # finite and in the field's range (models/tunable.py)
    except ValueError as exc:
        raise ValueError(f"{section}.{exc}") from None
    return value


def validate(overrides: dict[str, dict[str, Any]], base: StragglerSettings | None = None) -> StragglerSettings:
    """The straggler settings ``overrides`` give on top of ``base``; ``ValueError`` when not usable."""
    for section, values in overrides.items():
        for field, value in values.items():
            _convert(section, field, value)
    settings = dataclasses.replace(base or StragglerSettings(), **overrides.get("straggler", {}))
    if not 1 <= settings.min_flagged <= settings.window:
        raise ValueError("straggler: need 1 <= min_flagged <= window")
    for name in ("ratio_threshold", "critical_ratio", "z_threshold"):
        if not getattr(settings, name) > 0:
            raise ValueError(f"straggler.{name} must be positive")
    if settings.intermittent_window < 0:
        raise ValueError("straggler.intermittent_window must not be negative")
    for name in ("evidence_window", "clear_after", "min_peers", "long_window"):
        if getattr(settings, name) < 1:
            raise ValueError(f"straggler.{name} must be at least 1")
    if not 0 < settings.coincidence_p <= 1:
        raise ValueError("straggler.coincidence_p must be in (0, 1]")
    if settings.holdoff_steps < 0 or settings.long_min_effect < 0 or settings.spike_rate_floor < 0:
        raise ValueError("straggler.holdoff_steps, long_min_effect and spike_rate_floor must not be negative")
    return settings


def validate_hang(overrides: dict[str, Any], base: HangSettings) -> HangSettings:
    """The hang settings ``overrides`` (one scope's ``hang`` section) give on top of ``base``."""
    values = overrides.get("hang", {})
    for field, value in values.items():
        _convert("hang", field, value)
    settings = dataclasses.replace(base, **values)
    for name in ("timeout_seconds", "checkpoint_timeout_seconds", "first_step_timeout_seconds",
                 "warning_factor", "heartbeat_timeout_seconds"):
        if not getattr(settings, name) > 0:
            raise ValueError(f"hang.{name} must be positive")
    if settings.warning_min_steps < 1 or settings.max_listed_ranks < 1:
        raise ValueError("hang.warning_min_steps and hang.max_listed_ranks must be at least 1")
    return settings


def validate_job_health(overrides: dict[str, Any], base: JobHealthSettings) -> JobHealthSettings:
    """The job-wide rules' settings ``overrides`` (one scope's ``job_health`` section) give on top of ``base``
    (each value's range is checked by ``_convert``: ``runtime(..., low, high)`` on the field)."""
    values = overrides.get("job_health", {})
    for field, value in values.items():
        _convert("job_health", field, value)
    return dataclasses.replace(base, **values)


def validate_worker(overrides: dict[str, dict[str, Any]], base: Settings) -> dict[str, Any]:
    """The worker-wide sections' settings ``overrides`` (the ``*`` scope's) give on top of ``base``."""
    for section in WORKER_SECTIONS:
        for field, value in overrides.get(section, {}).items():
            _convert(section, field, value)
    out = {section: dataclasses.replace(getattr(base, section), **overrides.get(section, {}))
           for section in WORKER_SECTIONS}
    t, o = out["telemetry"], out["oncall"]
    if not 1 <= t.link_error_min_samples <= t.link_error_window:
        raise ValueError("telemetry: need 1 <= link_error_min_samples <= link_error_window")
    if t.baseline_min_samples > t.baseline_samples:
        raise ValueError("telemetry: need baseline_min_samples <= baseline_samples")
    if o.ledger_window_seconds <= 0:
        raise ValueError("oncall.ledger_window_seconds must be positive")
    return out


def validate_all(overrides: dict[str, dict[str, Any]], base: Settings) -> None:
    """``ValueError`` (saying why) unless one scope's ``overrides`` give usable settings in every section on top
    of ``base``: what ``stepwatch config set`` checks before writing, the same checks a worker makes on reading
    (so a value the workers would refuse never reaches the topic)."""
    validate(overrides, base.straggler)
    validate_hang(overrides, base.hang)
    validate_job_health(overrides, base.job_health)
    validate_worker(overrides, base)


def encode(overrides: dict[str, dict[str, Any]] | None) -> bytes | None:
    if overrides is None:
        return None
    return orjson.dumps({"v": 1, "kind": "config", **overrides, "updated_at": time.time()})


def decode(value: bytes | None) -> dict[str, dict[str, Any]] | None:
    """A config message's overrides (None for a tombstone); ``ValueError`` when malformed."""
    if value is None:
        return None
    try:
        record = orjson.loads(value)
    except orjson.JSONDecodeError as exc:
        raise ValueError(f"config message is not JSON: {exc}") from None
    if not isinstance(record, dict) or record.get("kind") != "config":
        raise ValueError("config message is not a {'kind': 'config'} object")
    out = {}
    for section in SECTIONS:
        values = record.get(section) or {}
        if not isinstance(values, dict):
            raise ValueError(f"config message: {section!r} must be an object")
        out[section] = {k: _convert(section, k, v) for k, v in values.items()}
    return {k: v for k, v in out.items() if v}


class RuntimeConfig:
    """The overrides read from the config topic so far, and what they make of each job's settings."""

    def __init__(self, base: Settings) -> None:
        self.base = base
        self.scopes: dict[str, dict[str, dict[str, Any]]] = {}  # GLOBAL or job -> overrides
        self.updated_at: dict[str, float] = {}
        self.updates = 0
        self.errors: list[str] = []  # the latest few rejected messages, for the status API

    def effective(self, job: str | None = None) -> StragglerSettings:
        settings = validate(self.scopes.get(GLOBAL, {}), self.base.straggler)
        if job is not None and job in self.scopes:
            settings = validate(self.scopes[job], settings)
        return settings

    def effective_hang(self, engine_base: HangSettings, job: str | None = None) -> HangSettings:
        """Hang settings: ``engine_base`` (the environment's, per job), then ``*``, then the job's."""
        settings = validate_hang(self.scopes.get(GLOBAL, {}), engine_base)
        if job is not None and job in self.scopes:
            settings = validate_hang(self.scopes[job], settings)
        return settings

    def effective_job_health(self, job: str | None = None) -> JobHealthSettings:
        """Job-wide rules' settings: the environment's, then ``*``, then the job's."""
        settings = validate_job_health(self.scopes.get(GLOBAL, {}), self.base.job_health)
        if job is not None and job in self.scopes:
            settings = validate_job_health(self.scopes[job], settings)
        return settings

    def effective_worker(self) -> dict[str, Any]:
        """The worker-wide sections' settings: the environment's, then ``*`` (``ValueError`` when not usable)."""
        return validate_worker(self.scopes.get(GLOBAL, {}), self.base)

    def source(self, job: str) -> str:
        if job in self.scopes:
            return "job"
        return "global" if GLOBAL in self.scopes else "default"

    def apply(self, engine, key: str, value: bytes | None, *, now: float | None = None) -> None:
        """Apply one config message to ``engine`` (``DetectionEngine.apply_settings``).

        Raises ``ValueError`` for a malformed or unusable message and changes nothing then.
        """
        overrides = decode(value)
        old = self.scopes.get(key)
        worker = {s for s in (*(overrides or {}), *(old or {})) if s in WORKER_SECTIONS}
        if key != GLOBAL and worker & set(overrides or {}):
            self.errors = (self.errors + [f"{key}: worker-wide sections ({', '.join(sorted(worker))}) are set "
                                          f"for '*' only"])[-5:]
            raise ValueError(f"{', '.join(sorted(worker))}: the worker's node-level and outlet rules' settings, "
                             f"set for '*' only (not per job)")
        if overrides:
            self.scopes[key] = overrides
        else:
            self.scopes.pop(key, None)
        try:
            base_hang = self.base.hang
            if worker and key == GLOBAL:  # the node-level rules (telemetry hub) and the outlet rules (on call)
                new = self.effective_worker()
                for section in ("telemetry", "host"):
                    engine.telemetry.reconfigure(new[section])
                engine.oncall.reconfigure(new["oncall"])
            if key == GLOBAL:
                engine.apply_settings(None, self.effective())
                engine.apply_hang_settings(None, self.effective_hang(base_hang))
                engine.apply_job_health_settings(None, self.effective_job_health())
                for job in [j for j in self.scopes if j != GLOBAL]:
                    engine.apply_settings(job, self.effective(job))
                    engine.apply_hang_settings(job, self.effective_hang(base_hang, job))
                    engine.apply_job_health_settings(job, self.effective_job_health(job))
            else:
                engine.apply_settings(key, self.effective(key) if key in self.scopes else None)
                engine.apply_hang_settings(key, self.effective_hang(base_hang, key) if key in self.scopes else None)
                engine.apply_job_health_settings(key, self.effective_job_health(key) if key in self.scopes else None)
        except ValueError as exc:
            if old is None:
                self.scopes.pop(key, None)
            else:
                self.scopes[key] = old
            self.errors = (self.errors + [f"{key}: {exc}"])[-5:]
            raise
        self.updated_at[key] = time.time() if now is None else now
        self.updates += 1

    def as_dict(self) -> dict[str, Any]:
        return {
            "default": dataclasses.asdict(self.base.straggler),
            "global": self.scopes.get(GLOBAL, {}),
            "jobs": {k: v for k, v in self.scopes.items() if k != GLOBAL},
            "effective_default": {"straggler": dataclasses.asdict(self.effective()),
                                  "hang": dataclasses.asdict(self.effective_hang(self.base.hang)),
                                  "job_health": dataclasses.asdict(self.effective_job_health()),
                                  **{section: {name: getattr(settings, name) for name in runtime_fields(type(settings))}
                                     for section, settings in self.effective_worker().items()}},
            "updates": self.updates,
            "errors": list(self.errors),
        }


# -- the topic, for the CLI (kafka-python) ------------------------------------------------------


def read_topic(settings: Settings, *, timeout: float = 10.0) -> dict[str, dict[str, dict[str, Any]]]:
    """The current overrides in the config topic: scope -> overrides (tombstoned scopes left out)."""
    from kafka import KafkaConsumer, TopicPartition

    from stepwatch.security import client_config
    from stepwatch.topics import ensure_config_topic

    security = client_config(settings)
    ensure_config_topic(settings.kafka, client_config=security)
    topic = settings.kafka.topic(settings.kafka.config_topic)
    consumer = KafkaConsumer(bootstrap_servers=settings.kafka.bootstrap, group_id=None,
                             enable_auto_commit=False, auto_offset_reset="earliest", **security)
    scopes: dict[str, dict[str, dict[str, Any]]] = {}
    try:
        parts = [TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic) or {0})]
        consumer.assign(parts)
        consumer.seek_to_beginning(*parts)
        end = consumer.end_offsets(parts)
        deadline = time.monotonic() + timeout
        while any(consumer.position(tp) < end[tp] for tp in parts):
            if time.monotonic() > deadline:
                raise TimeoutError(f"could not read {topic} to its end within {timeout} s")
            for records in consumer.poll(timeout_ms=500).values():
                for record in records:
                    key = record.key.decode("utf-8", "replace") if record.key else GLOBAL
                    try:
                        overrides = decode(record.value)
                    except ValueError:
                        continue
                    if overrides:
                        scopes[key] = overrides
                    else:
                        scopes.pop(key, None)
    finally:
        consumer.close()
    return scopes


def write_topic(settings: Settings, key: str, overrides: dict[str, dict[str, Any]] | None) -> None:
    """Publish a scope's complete overrides (None: remove them)."""
    from kafka import KafkaProducer

    from stepwatch.security import client_config
    from stepwatch.topics import ensure_config_topic

    security = client_config(settings)
    ensure_config_topic(settings.kafka, client_config=security)
    producer = KafkaProducer(bootstrap_servers=settings.kafka.bootstrap, acks="all", **security)
    try:
        producer.send(settings.kafka.topic(settings.kafka.config_topic), key=key.encode(),
                      value=encode(overrides or None)).get(timeout=30)
    finally:
        producer.close()
