"""The worker's shadow run: candidate settings tried on the live stream, their alerts on ``shadow-alerts`` only.

A candidate (models/shadow.py; ``stepwatch config set --shadow``) arrives on the config topic under its own key.
The worker then copies its live engine (state and open alerts, so the two start alike and differ only by
settings), applies the candidate on top of the live settings, and feeds the copy every item the live pipeline
took, after it: the same decoded reads, telemetry and ticks. Of what the copy says, only the alerts of the rules
under trial leave, tagged with the candidate's identity, to the ``shadow-alerts`` topic: never the alerts topic,
Alertmanager or the action hooks. Without a candidate nothing is copied or fed (one attribute test per item).

The shadow never touches the live road: it runs after the live pipeline on each item, an exception in it is
caught, logged (rate-limited) and counted (``stepwatch_shadow_failures_total``), and its alerts wait in a
bounded queue (beyond it they are dropped and counted) that a timer sends.
"""

from __future__ import annotations

import copy
import logging
import time
from collections import deque
from dataclasses import dataclass

import orjson

from stepwatch.models import shadow as candidate
from stepwatch.models.pipeline import Pipeline
from stepwatch.models.published import PublishedAlerts
from stepwatch.models.sources import Tick
from stepwatch.runtime_config import GLOBAL, RuntimeConfig
from stepwatch.runtime_config import decode as decode_config
from stepwatch.runtime_config import encode as encode_config

from .component import Send, app_sender

log = logging.getLogger("stepwatch.worker")
#: Shadow alerts waiting to be sent at most; more are dropped and counted (the broker away must not grow memory).
MAX_PENDING = 10_000
#: At most one shadow failure is logged with its traceback per this many seconds (each one is counted).
LOG_EVERY_SECONDS = 60.0


@dataclass(slots=True)
class _Trial:
    """One candidate running: its overrides, identity, the rules' sections and alert types under trial, the
    settings it runs on (the live scopes with the candidate on ``*``) and its own pipeline."""

    overrides: dict
    id: str
    sections: tuple[str, ...]
    types: frozenset[str]
    config: RuntimeConfig
    pipeline: Pipeline
    since: float


class ShadowRun:
    """The worker's component (streams/component.py): ``set`` a candidate from its config message,
    ``live_changed`` after a live config message, ``take`` each item after the live pipeline, ``forget`` revoked
    partitions; ``flush`` (the worker's timer, every ``interval`` seconds) sends the waiting alerts to ``topic``
    (keyed by alert id) through ``send`` (default: the app's producer, at ``attach``; None before: they wait)."""

    def __init__(self, live: Pipeline, runtime: RuntimeConfig, *, send: Send | None = None, metrics=None,
                 topic: str = "shadow-alerts", interval: float = 1.0) -> None:
        self.live, self.runtime, self._send = live, runtime, send
        self.topic, self.interval = topic, interval
        self.trial: _Trial | None = None
        self.pending: deque[tuple[bytes, bytes]] = deque()
        self.error: str | None = None  # why the latest candidate is not running (status, logs)
        self._logged = 0.0
        self.counters = None
        if metrics is not None:
            from prometheus_client import Counter, Gauge

            r = metrics.registry
            self.counters = {
                "failures": Counter("stepwatch_shadow_failures", "Exceptions caught in the shadow run (candidate "
                                    "settings), by stage; the live pipeline is not affected.", ["stage"], registry=r),
                "alerts": Counter("stepwatch_shadow_alerts", "Shadow alerts (rules under trial) by result.",
                                  ["result"], registry=r),
            }
            Gauge("stepwatch_shadow_active", "1 while a shadow candidate runs on this worker.",
                  registry=r).set_function(lambda: 1 if self.trial is not None else 0)

    def attach(self, app) -> None:
        if self._send is None:
            self._send = app_sender(app, self.topic)
        app.timer(interval=self.interval)(self.flush)

    # -- settings --------------------------------------------------------------------------

    def set(self, value: bytes | None, *, now: float | None = None) -> None:
        """The candidate's config message (None: dropped). ``ValueError`` when it is not usable; the previous
        candidate is then dropped as well (a trial of settings nobody asked for would mislead)."""
        self.trial = None
        self.error = None
        try:
            overrides = decode(value)
            if overrides is None:
                return
            self.trial = self._start(overrides, time.time() if now is None else now)
        except ValueError as exc:
            self.error = str(exc)
            raise
        except Exception as exc:  # a bug here must not stop the config reader (the live settings come that way)
            self.error = f"could not start: {exc!r}"
            self._failed("settings", exc)

    def _start(self, overrides: dict, now: float) -> _Trial:
        base = self.runtime.base
        live_global = self.runtime.scopes.get(GLOBAL, {})
        sections = candidate.differing_sections(base, live_global, overrides)
        engine = self.live.engine
        listener = engine.verdict_listener  # the status views' hook stays the live engine's
        try:
            copied = copy.deepcopy(engine, {id(listener): None} if listener is not None else {})
        except Exception:  # a state that does not copy: the shadow starts cold instead (its rules warm up)
            log.exception("copying the live engine for the shadow failed; it starts empty")
            copied = type(engine)(engine.settings)
        copied.verdict_listener = None
        config = RuntimeConfig(base)
        config.scopes = {k: dict(v) for k, v in self.runtime.scopes.items()}  # the copy's settings now
        config.apply(copied, GLOBAL, encode_config(candidate.merged(live_global, overrides)))
        pipeline = Pipeline(copied, published=PublishedAlerts(), max_future_seconds=self.live.max_future_seconds,
                            speaks_for=self.live.speaks_for)
        pipeline.job_partition = dict(self.live.job_partition)
        trial = _Trial(overrides, candidate.identity(overrides), sections,
                       frozenset(candidate.trial_types(sections)), config, pipeline, now)
        log.info("shadow %s: %s; rules under trial: %s", trial.id, overrides,
                 ", ".join(s.name for s in candidate.rules_under_trial(sections)) or "none (same as live)")
        return trial

    def live_changed(self, key: str, value: bytes | None) -> None:
        """A live config message was applied: the candidate's engine takes it too (the candidate stays on top)."""
        trial = self.trial
        if trial is None:
            return
        try:
            if key == GLOBAL:
                live_global = self.runtime.scopes.get(GLOBAL, {})
                trial.config.apply(trial.pipeline.engine, GLOBAL,
                                   encode_config(candidate.merged(live_global, trial.overrides)))
                trial.sections = candidate.differing_sections(self.runtime.base, live_global, trial.overrides)
                trial.types = frozenset(candidate.trial_types(trial.sections))
            else:
                trial.config.apply(trial.pipeline.engine, key, value)
        except ValueError as exc:  # the candidate on top of the new live settings is not usable
            self.trial, self.error = None, f"dropped after a live change of {key!r}: {exc}"
            log.warning("shadow %s %s", trial.id, self.error)
        except Exception as exc:  # never the config reader's problem: the trial stops, counted
            self.trial, self.error = None, f"dropped after a live change of {key!r}: {exc!r}"
            self._failed("settings", exc)

    # -- the stream ------------------------------------------------------------------------

    def take(self, item) -> None:
        """One item the live pipeline took (a ``Read`` or a ``Tick``), through the candidate's pipeline."""
        trial = self.trial
        if trial is None:
            return
        try:
            out = trial.pipeline.take(item)
        except Exception as exc:
            self._failed("tick" if type(item) is Tick else "events", exc)
            return
        if type(item) is Tick:  # its hang rule's stack requests, as the live ones are sent (never: bounded anyway)
            trial.pipeline.engine.take_stack_requests()
        for dead in out.deadletters:
            if dead.cause == "detector":  # the candidate's rules raised (the live road dead-letters its own)
                self._failed("detector", None)
        for alert in out.alerts:
            if str(alert.type) not in trial.types:
                continue
            record = alert.to_dict()
            record["shadow"] = {"id": trial.id, "settings": trial.overrides, "sections": list(trial.sections),
                                "since": trial.since}
            if len(self.pending) >= MAX_PENDING:
                self._count("alerts", "dropped")
                continue
            self.pending.append((alert.id.encode(), orjson.dumps(record)))

    def forget(self, partitions: set[int]) -> None:
        if self.trial is not None:
            self.trial.pipeline.forget(partitions)

    async def flush(self) -> None:
        """Send the waiting shadow alerts (a failed send is counted and the alert dropped: never retried forever)."""
        while self.pending and self._send is not None:
            key, value = self.pending.popleft()
            try:
                await self._send(self.topic, key, value)
            except Exception as exc:
                self._count("alerts", "failed")
                self._log(exc, "a shadow alert not sent")
                continue
            self._count("alerts", "sent")

    # -- accounting ------------------------------------------------------------------------

    def _failed(self, stage: str, exc: BaseException | None) -> None:
        self._count("failures", stage)
        if exc is not None:
            self._log(exc, f"the shadow run failed ({stage}); the live pipeline goes on")

    def _count(self, name: str, label: str) -> None:
        if self.counters is not None:
            self.counters[name].labels(label).inc()

    def _log(self, exc: BaseException, what: str) -> None:
        now = time.monotonic()
        if now - self._logged >= LOG_EVERY_SECONDS:
            self._logged = now
            log.error("%s", what, exc_info=exc)

    def as_dict(self) -> dict:
        trial = self.trial
        if trial is None:
            return {"active": False, "error": self.error}
        return {"active": True, "id": trial.id, "settings": trial.overrides, "sections": list(trial.sections),
                "types": sorted(trial.types), "since": trial.since, "pending": len(self.pending)}


def decode(value: bytes | None) -> dict | None:
    """A candidate's overrides from its config message (None: dropped); ``ValueError`` when malformed or not
    marked as shadow (each value converted and range-checked as a live ``config set`` value is)."""
    if value is None:
        return None
    overrides = decode_config(value)  # a dict of kind "config", or ValueError
    if orjson.loads(value).get("shadow") is not True:
        raise ValueError(f"the {candidate.SHADOW_KEY!r} config message is not marked as shadow")
    return overrides or None


class Tapped:
    """The live pipeline as ``drive`` sees it: each item through the live pipeline, then through the shadow."""

    __slots__ = ("live", "shadow")

    def __init__(self, live: Pipeline, shadow: ShadowRun) -> None:
        self.live, self.shadow = live, shadow

    def take(self, item):
        out = self.live.take(item)
        if self.shadow.trial is not None:
            self.shadow.take(item)
        return out
