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

Nothing here lists a rule's settings: the sections, their fields, ranges and checks are read from the settings
classes the registered rules declare (``RuleSpec.settings``, models/registry.py; models/settings_store.py), at
the time they are asked for. A section a per-job rule takes is set per job; one only the node-level or outlet
rules take is the worker's.
"""

from __future__ import annotations

import dataclasses
import math
import time
from typing import Any

import orjson

from stepwatch.models import registry
from stepwatch.models.hang.settings import HangSettings
from stepwatch.models.jobhealth.settings import JobHealthSettings
from stepwatch.models.settings_store import check, section_of
from stepwatch.models.steps.settings import StragglerSettings
from stepwatch.models.tunable import check_runtime_value, runtime_fields, runtime_range
from stepwatch.config import Settings, _parse

GLOBAL = "*"
#: The section a bare ``FIELD`` in ``config set`` means.
BARE_SECTION = "straggler"


def sections() -> dict[str, type]:
    """Sections that can be changed at run time, with their settings class: every class a registered rule
    takes (``RuleSpec.settings``), in registry order (per-job rules first)."""
    out: dict[str, type] = {}
    for rule in (*registry.JOB_RULES, *registry.NODE_RULES, *registry.OUTLET_RULES):
        cls = rule.spec.settings
        if cls is not None and section_of(cls) not in out:
            out[section_of(cls)] = cls
    return out


def worker_sections() -> tuple[str, ...]:
    """Sections of the worker-wide rules only (node-level: the telemetry hub; outlet: on call): set for ``*``
    only."""
    per_job = {rule.spec.settings for rule in registry.JOB_RULES}
    return tuple(name for name, cls in sections().items() if cls not in per_job)


def job_sections() -> tuple[str, ...]:
    """Sections a per-job rule takes: set for ``*`` or one job."""
    worker = worker_sections()
    return tuple(name for name in sections() if name not in worker)


def __getattr__(name: str):
    # ``SECTIONS``/``WORKER_SECTIONS``: the names callers knew, read from the registry when asked.
    if name == "SECTIONS":
        return sections()
    if name == "WORKER_SECTIONS":
        return worker_sections()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


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
        section = section if dot else BARE_SECTION
        out.setdefault(section, {})[field] = _convert(section, field, raw.strip())
    validate(out)
    return out


def _convert(section: str, field: str, raw: Any, known: dict[str, type] | None = None) -> Any:
    known = sections() if known is None else known
    cls = known.get(section)
    if cls is None:
        raise ValueError(f"unknown section {section!r}: runtime settings exist for {', '.join(known)}")
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


def _convert_all(overrides: dict[str, dict[str, Any]]) -> None:
    """``ValueError`` unless every value of one scope's ``overrides`` is a known runtime field's, in range."""
    known = sections()
    for section, values in overrides.items():
        for field, value in values.items():
            _convert(section, field, value, known)


def validate_section(section: str, overrides: dict[str, dict[str, Any]], base: Any) -> Any:
    """Section ``section``'s settings one scope's ``overrides`` give on top of ``base`` (that section's values
    must already be converted), after the class's own checks across fields; ``ValueError`` when not usable."""
    return check(dataclasses.replace(base, **overrides.get(section, {})))


def validate(overrides: dict[str, dict[str, Any]], base: StragglerSettings | None = None) -> StragglerSettings:
    """The straggler settings ``overrides`` give on top of ``base``; ``ValueError`` when not usable."""
    _convert_all(overrides)
    return validate_section("straggler", overrides, base or StragglerSettings())


def validate_hang(overrides: dict[str, Any], base: HangSettings) -> HangSettings:
    """The hang settings ``overrides`` (one scope's ``hang`` section) give on top of ``base``."""
    _convert_all({"hang": overrides.get("hang", {})})
    return validate_section("hang", overrides, base)


def validate_job_health(overrides: dict[str, Any], base: JobHealthSettings) -> JobHealthSettings:
    """The job-wide rules' settings ``overrides`` (one scope's ``job_health`` section) give on top of ``base``."""
    _convert_all({"job_health": overrides.get("job_health", {})})
    return validate_section("job_health", overrides, base)


def _base(settings: Any, cls: type) -> Any:
    """The environment's settings of ``cls`` in ``settings`` (its defaults where the tree holds no such section)."""
    value = getattr(settings, section_of(cls), None)
    return value if isinstance(value, cls) else cls()


def validate_worker(overrides: dict[str, dict[str, Any]], base: Settings) -> dict[str, Any]:
    """The worker-wide sections' settings ``overrides`` (the ``*`` scope's) give on top of ``base``."""
    known, worker = sections(), worker_sections()
    _convert_all({section: overrides.get(section, {}) for section in worker})
    return {section: validate_section(section, overrides, _base(base, known[section])) for section in worker}


def validate_all(overrides: dict[str, dict[str, Any]], base: Settings) -> None:
    """``ValueError`` (saying why) unless one scope's ``overrides`` give usable settings in every section on top
    of ``base``: what ``stepwatch config set`` checks before writing, the same checks a worker makes on reading
    (so a value the workers would refuse never reaches the topic)."""
    _convert_all(overrides)
    known = sections()
    for section in job_sections():
        validate_section(section, overrides, _base(base, known[section]))
    validate_worker(overrides, base)


def runtime_table() -> str:
    """The runtime fields as a Markdown table (docs/configuration.md holds it; tests/cli/test_runtime_config_store.py
    keeps the two the same): every field ``config set`` accepts, its default, range and scope."""
    worker = worker_sections()
    lines = ["| setting | default | range | set for |", "| --- | --- | --- | --- |"]
    for section, cls in sections().items():
        defaults = cls()
        for name in runtime_fields(cls):
            value = getattr(defaults, name)
            bounds = "true or false" if isinstance(value, bool) else str(runtime_range(cls, name))
            why = runtime_range(cls, name).why
            scope = "`*` only" if section in worker else "`*` or a job"
            lines.append(f"| `{section}.{name}` | {value} | {bounds}{f' ({why})' if why else ''} | {scope} |")
    return "\n".join(lines) + "\n"


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
    for section in sections():
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

    def effective_section(self, section: str, job: str | None = None, base: Any = None) -> Any:
        """Section ``section``'s settings: ``base`` (default: the environment's), then ``*``, then the job's."""
        if base is None:
            base = _base(self.base, sections()[section])
        settings = validate_section(section, self.scopes.get(GLOBAL, {}), base)
        if job is not None and job in self.scopes:
            settings = validate_section(section, self.scopes[job], settings)
        return settings

    def effective(self, job: str | None = None) -> StragglerSettings:
        return self.effective_section("straggler", job)

    def effective_hang(self, engine_base: HangSettings, job: str | None = None) -> HangSettings:
        """Hang settings: ``engine_base`` (the environment's, per job), then ``*``, then the job's."""
        return self.effective_section("hang", job, engine_base)

    def effective_job_health(self, job: str | None = None) -> JobHealthSettings:
        """Job-wide rules' settings: the environment's, then ``*``, then the job's."""
        return self.effective_section("job_health", job)

    def effective_worker(self) -> dict[str, Any]:
        """The worker-wide sections' settings: the environment's, then ``*`` (``ValueError`` when not usable)."""
        return validate_worker(self.scopes.get(GLOBAL, {}), self.base)

    def source(self, job: str) -> str:
        if job in self.scopes:
            return "job"
        return "global" if GLOBAL in self.scopes else "default"

    def apply(self, engine, key: str, value: bytes | None, *, now: float | None = None) -> None:
        """Apply one config message to ``engine`` (``DetectionEngine.apply_rule_settings``, per settings class).

        Raises ``ValueError`` for a malformed or unusable message and changes nothing then.
        """
        overrides = decode(value)
        old = self.scopes.get(key)
        worker_all = worker_sections()
        worker = {s for s in (*(overrides or {}), *(old or {})) if s in worker_all}
        if key != GLOBAL and worker & set(overrides or {}):
            self.errors = (self.errors + [f"{key}: worker-wide sections ({', '.join(sorted(worker))}) are set "
                                          f"for '*' only"])[-5:]
            raise ValueError(f"{', '.join(sorted(worker))}: the worker's node-level and outlet rules' settings, "
                             f"set for '*' only (not per job)")
        if overrides:
            self.scopes[key] = overrides
        else:
            self.scopes.pop(key, None)
        known = sections()
        try:  # every section's new settings first: an unusable one changes nothing
            new_worker = self.effective_worker() if worker and key == GLOBAL else {}
            changes: list[tuple[type, str | None, Any]] = []
            for job in ([None, *(j for j in self.scopes if j != GLOBAL)] if key == GLOBAL else [key]):
                for section in job_sections():
                    own = job is None or job in self.scopes
                    changes.append((known[section], job, self.effective_section(section, job) if own else None))
        except ValueError as exc:
            if old is None:
                self.scopes.pop(key, None)
            else:
                self.scopes[key] = old
            self.errors = (self.errors + [f"{key}: {exc}"])[-5:]
            raise
        for settings in new_worker.values():  # to the node-level (telemetry hub) or outlet rules (on call) taking them
            for holder in (engine.telemetry, engine.oncall):
                if any(rule.spec.settings is type(settings) for rule in holder.rules):
                    holder.reconfigure(settings)
        for cls, job, settings in changes:
            engine.apply_rule_settings(cls, job, settings)
        self.updated_at[key] = time.time() if now is None else now
        self.updates += 1

    def as_dict(self) -> dict[str, Any]:
        worker = self.effective_worker()
        return {
            "default": dataclasses.asdict(self.base.straggler),
            "global": self.scopes.get(GLOBAL, {}),
            "jobs": {k: v for k, v in self.scopes.items() if k != GLOBAL},
            "effective_default": {**{section: dataclasses.asdict(self.effective_section(section))
                                     for section in job_sections()},
                                  **{section: {name: getattr(settings, name) for name in runtime_fields(type(settings))}
                                     for section, settings in worker.items()}},
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
