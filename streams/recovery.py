"""Restart recovery: rebuild the detectors' windows and learn which alerts are already open.

The detection state lives in memory; Kafka keeps the history. When a worker is assigned
partitions of the events topic (at start, after a crash, or in a rebalance) it

1. reads back a bounded recent span of each assigned partition, up to the group's
   committed offset, and feeds it to the engine with publishing held back (the windows,
   heartbeats and open problems are rebuilt as they were). Each message arrives at its
   record time (when it reached the broker, as a recording's ``_arrival``), so a rebuilt job
   keeps its clock offset and the first tick judges it on its own clock, not the worker's
   (a job whose events are stamped in the past would otherwise look hung at once). Where the
   partition holds more after the committed offset (the worker is behind: a backlog, or a
   crash during catch-up), the span's record times are moved on by how far behind the next
   record is now, the lag the live road goes on with: a job's clock does not jump by the
   backlog's age when the live reads take over (a job silent in the backlog is judged on the
   backlog's time, as ``stepwatch replay`` judges it, not called hung at once);
2. reads the recent alerts topic to learn which alert ids are open (published ``firing``
   and not yet ``resolved``) for the jobs on those partitions;
3. reconciles: an alert open on the topic that the rebuilt engine also holds open is not
   published again; one the engine holds open but the topic never got is published (it
   was lost in the crash); one open on the topic that the engine no longer holds is
   published as ``resolved`` (it cleared while the worker was down). Where the partition
   holds records after the committed offset, the previous life may have seen the alert in
   them: it is settled only once the live road has read the partition to its end
   (``settle``), resolved then only if the engine has not derived it again.

What the alerts topic holds is remembered (``PublishedAlerts``): what the re-read of the
events after the committed offset derives again (a firing the topic has, or had and
resolved; a resolution it has) is not published a second time.

Consumption then resumes from the committed offset, so a problem that began while the
worker was down is still seen. The guarantee is at-least-once with idempotent alert ids:
a consumer may see the same (id, status, severity) twice, never a second ``firing`` of an
id it already saw firing from the same worker generation.
"""

from __future__ import annotations

import dataclasses

import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass

import orjson
from kafka import KafkaConsumer, TopicPartition

from stepwatch.models.alerts import Alert
from stepwatch.models.pipeline import Message, Pipeline
from stepwatch.models.published import PublishedAlerts  # (also its former home, for importers)
from stepwatch.models.sinks import HeldBack, drain
from stepwatch.models.sources import Read, run

log = logging.getLogger("stepwatch.recovery")


@dataclass(frozen=True, slots=True)
class RecoveryReport:
    partitions: tuple[int, ...]
    messages_replayed: int
    events_replayed: int
    open_on_topic: int
    republished_firing: int
    resolved_while_down: int
    seconds: float


def read_span(consumer: KafkaConsumer, partitions: Iterable[TopicPartition], ends: dict[TopicPartition, int],
              starts: dict[TopicPartition, int], *, timeout: float = 60.0):
    """Yield the records of each partition from ``starts[tp]`` (inclusive) to ``ends[tp]`` (exclusive)."""
    partitions = [tp for tp in partitions if ends[tp] > starts[tp]]
    if not partitions:
        return
    consumer.assign(partitions)
    for tp in partitions:
        consumer.seek(tp, starts[tp])
    remaining = set(partitions)
    deadline = time.monotonic() + timeout
    while remaining and time.monotonic() < deadline:
        batch = consumer.poll(timeout_ms=500, max_records=5000)
        for tp, records in batch.items():
            for record in records:
                if record.offset < ends[tp]:
                    yield record
            if consumer.position(tp) >= ends[tp]:
                remaining.discard(tp)
                consumer.pause(tp)
        for tp in list(remaining):
            if consumer.position(tp) >= ends[tp]:
                remaining.discard(tp)
    if remaining:
        log.warning("recovery read stopped at its time limit; partitions not fully read: %s", sorted(remaining))


@dataclass(frozen=True, slots=True)
class RecoverySpan:
    """What was read back from Kafka for a set of partitions (raw, bounded)."""

    partitions: tuple[int, ...]
    event_messages: list[tuple]  # (partition, value[, Kafka timestamp in seconds])
    alerts: list[dict]
    #: Per partition holding records after the span (the worker is behind): the first one's record time.
    resume_at: dict[int, float] = dataclasses.field(default_factory=dict)


def read_recovery_span(*, bootstrap: str, group_id: str, events_topic: str, alerts_topic: str,
                       partitions: Iterable[int], replay_messages: int, alerts_lookback: int,
                       client_config: dict | None = None, timeout: float = 20.0) -> RecoverySpan:
    """Read the recent events before the group's committed offsets, and the recent alerts.

    Blocking (kafka-python): the worker runs it in a thread, then hands the result to
    :func:`rebuild` on its own loop, so the engine is only ever touched by one thread.
    """
    config = dict(client_config or {})
    partitions = tuple(sorted(partitions))
    event_tps = [TopicPartition(events_topic, p) for p in partitions]
    group = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group_id, enable_auto_commit=False, **config)
    try:
        committed = {tp: group.committed(tp) for tp in event_tps}
        beginnings = group.beginning_offsets(event_tps) if event_tps else {}
        highs = group.end_offsets(event_tps) if event_tps else {}
    finally:
        group.close()
    ends = {tp: committed[tp] or 0 for tp in event_tps}
    starts = {tp: max(beginnings[tp], ends[tp] - replay_messages) for tp in event_tps}
    # One record further where there is one: its time says how far behind the live road resumes.
    through = {tp: min(highs[tp], ends[tp] + 1) for tp in event_tps}
    reader = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False, **config)
    try:
        messages, resume_at = [], {}
        for r in read_span(reader, event_tps, through, starts, timeout=timeout):
            stamp = r.timestamp / 1000 if r.timestamp and r.timestamp > 0 else None
            if r.offset < ends[TopicPartition(r.topic, r.partition)]:
                messages.append((r.partition, r.value, stamp))
            elif stamp is not None:
                resume_at[r.partition] = stamp
        alerts = _read_alerts(reader, alerts_topic, alerts_lookback, timeout)
    finally:
        reader.close()
    return RecoverySpan(partitions, messages, alerts, resume_at)


def read_published(*, bootstrap: str, alerts_topic: str, alerts_lookback: int, client_config: dict | None = None,
                   timeout: float = 20.0) -> list[dict]:
    """The recent records of the alerts topic (up to ``alerts_lookback`` per partition), oldest first per
    partition: what a restarted worker's previous life published, node alerts included. Blocking."""
    reader = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
                           **dict(client_config or {}))
    try:
        return _read_alerts(reader, alerts_topic, alerts_lookback, timeout)
    finally:
        reader.close()


def _read_alerts(reader: KafkaConsumer, alerts_topic: str, lookback: int, timeout: float) -> list[dict]:
    alerts: list[dict] = []
    reader.topics()  # fetch metadata: partitions_for_topic only answers from what is cached
    alert_tps = [TopicPartition(alerts_topic, p) for p in (reader.partitions_for_topic(alerts_topic) or ())]
    if alert_tps and lookback > 0:
        alert_ends = reader.end_offsets(alert_tps)
        alert_begin = reader.beginning_offsets(alert_tps)
        alert_starts = {tp: max(alert_begin[tp], alert_ends[tp] - lookback) for tp in alert_tps}
        for record in read_span(reader, alert_tps, alert_ends, alert_starts, timeout=timeout):
            try:
                alert = orjson.loads(record.value)
            except orjson.JSONDecodeError:
                continue
            if isinstance(alert, dict) and isinstance(alert.get("id"), str):
                alerts.append(alert)
    return alerts


def remember_published(published: PublishedAlerts, records: Iterable[dict]) -> None:
    """Alerts-topic records into ``published`` (``Alert.from_dict``: the one reading of such a record)."""
    for record in records:
        try:
            published.remember(record, read_back=True)
        except ValueError as exc:  # a record this worker cannot have written: not an alert of ours
            log.warning("recovery skipped an alerts-topic record: %s", exc)


@dataclass(frozen=True, slots=True)
class SpanSource:
    """A recovery span's events messages as a source (models/sources.py), a ``Read`` each, in order. Each arrives
    at its Kafka timestamp (when it reached the broker): the jobs' clock offsets are known again, so a timer
    tick before the live events resume judges each job on its own clock."""

    span: RecoverySpan
    #: Per partition: seconds added to its record times (how far behind the live road resumes on it).
    behind: dict[int, float] = dataclasses.field(default_factory=dict)

    def __iter__(self):
        for partition, raw, *stamp in self.span.event_messages:
            at = stamp[0] if stamp else None
            moved = None if at is None else at + self.behind.get(partition, 0.0)
            yield Read((Message(raw, partition=partition),), moved)


def rebuild(pipeline: Pipeline, span: RecoverySpan, now: float | None = None,
            unsettled: list[tuple[int, Alert]] | None = None) -> tuple[RecoveryReport, list[Alert]]:
    """Feed the span through the worker's pipeline (alerts and dead letters held back, nothing counted) and
    return the alerts that reconcile it with the alerts topic.

    ``now``: the worker's clock (default: the wall clock); a partition the worker is behind on has its
    record times moved on by ``now`` less the next record's time (``RecoverySpan.resume_at``).
    ``unsettled``: where the alerts open on the topic but not in the engine go, as (partition, alert),
    when their partition holds records after the span (``settle`` decides later); None: resolved now.
    Rejects were dead-lettered the first time; the status views see the replayed events too.
    """
    started = time.monotonic()
    now = time.time() if now is None else now
    behind = {p: max(0.0, now - at) for p, at in span.resume_at.items()}
    engine, published = pipeline.engine, pipeline.published
    events_before = engine.events_by_kind.total()
    # A quiet pipeline on the same engine and status views: its outputs are held back (dropped here: what
    # it re-derives is reconciled below, its rejects were dead-lettered the first time), it counts nothing
    # (live counters count live messages) and remembers nothing as published.
    quiet = Pipeline(engine, recorder=pipeline.recorder, published=PublishedAlerts(),
                     max_future_seconds=pipeline.max_future_seconds, speaks_for=pipeline.speaks_for, metrics=None)
    held = drain(run(SpanSource(span, behind), quiet), HeldBack())
    pipeline.job_partition.update(quiet.job_partition)
    log.debug("recovery held back %d alerts and %d dead letters of the replayed span", held.alerts,
              held.deadletters)
    events = engine.events_by_kind.total() - events_before
    jobs = {job for job, p in pipeline.job_partition.items() if p in span.partitions}
    remember_published(published, span.alerts)
    topic_open = {i: a for i, a in published.open.items() if a.job in jobs}
    by_problem = {_problem(a): i for i, a in topic_open.items()}
    engine_open: dict[str, Alert] = {}
    for alert in engine.open_alerts():
        if alert.job not in jobs:
            continue
        published_id = alert.id if alert.id in topic_open else by_problem.get(
            (alert.job, alert.type, tuple(alert.ranks)))
        if published_id is not None and published_id != alert.id:
            published.alias[alert.id] = (published_id, topic_open[published_id].starts_at or alert.starts_at)
        engine_open[published_id or alert.id] = alert
    out: list[Alert] = []
    # (the engine's own open alerts are on the hosts' clocks: published, they go on the broker's as any)
    for alert in engine.on_broker_clock(list(engine_open.values())):
        if alert.id in published.alias:  # the same problem, already open under its published id
            continue
        if not published.is_duplicate(alert):  # (also: fired and resolved on the topic, from events re-read)
            out.append(alert)
    resolved = 0
    for alert_id_, alert in topic_open.items():
        if alert_id_ in engine_open:
            continue
        partition = pipeline.job_partition.get(alert.job)
        if unsettled is not None and partition in span.resume_at:
            unsettled.append((partition, alert))  # maybe from events after the committed offset: read again
            continue
        out.append(_resolved_while_down(alert, now))
        resolved += 1
    report = RecoveryReport(partitions=span.partitions, messages_replayed=len(span.event_messages),
                            events_replayed=events, open_on_topic=len(topic_open),
                            republished_firing=len(out) - resolved, resolved_while_down=resolved,
                            seconds=round(time.monotonic() - started, 3))
    return report, out


def settle(pipeline: Pipeline, unsettled: list[tuple[int, Alert]], caught_up: set[int],
           now: float) -> list[Alert]:
    """The ``resolved`` of the unsettled alerts (``rebuild``) of the partitions read to their end now, that the
    engine has not derived again (the events the previous life saw were all read again: it cleared while the
    worker was down); those of other partitions stay in ``unsettled``."""
    if not unsettled:
        return []
    held = {a.id for a in pipeline.engine.open_alerts()} | {_problem(a) for a in pipeline.engine.open_alerts()}
    held |= {published_id for published_id, _ in pipeline.published.alias.values()}
    out, waiting = [], []
    for partition, alert in unsettled:
        if partition not in caught_up:
            waiting.append((partition, alert))
        elif alert.id not in held and _problem(alert) not in held and alert.id in pipeline.published.open:
            out.append(_resolved_while_down(alert, now))
    unsettled[:] = waiting
    return out


def _problem(alert: Alert) -> tuple:
    return alert.job, alert.type, tuple(alert.ranks)


def _resolved_while_down(alert: Alert, now: float) -> Alert:
    """The open alert of the topic, resolved now; classified again where it is published (no scope)."""
    return dataclasses.replace(alert.resolved(at=now, summary=f"resolved (cleared while the worker was down): "
                                                             f"{alert.summary}"),
                               starts_at=alert.starts_at or now, scope="", recommended_action="")
