"""The worker's Prometheus metrics (served at ``/metrics``), on a registry of its own.

Counters are updated as the worker goes; gauges (jobs, ranks, open alerts, consumer lag,
readiness, the Alertmanager queue) are read from the engine and the consumer at scrape
time. Names have the ``stepwatch_`` prefix, base units (seconds), ``_total`` on counters,
and no per-rank or per-job labels: cardinality is bounded by the number of event kinds,
alert types and the events topic's partitions, whatever the size of the cluster.
"""

from __future__ import annotations

import time
from collections import Counter as Tally
from collections.abc import Callable, Iterable

from prometheus_client import (CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram, disable_created_metrics,
                               generate_latest)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from stepwatch.models.alert_types import AlertStatus, AlertType, METERED_TYPES

from .registry import PeerRefusal

# The *_created series (one per labelled child) double the output and nobody here reads them.
disable_created_metrics()

__all__ = ["CONTENT_TYPE_LATEST", "WorkerMetrics", "WorkerStats"]

DETECTION_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
                     5.0)
ALERT_TYPES = METERED_TYPES
#: Incident durations: from a minute to a day.
INCIDENT_BUCKETS = (10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0, 7200.0, 14400.0, 43200.0, 86400.0)
EVENT_KINDS = ("step", "collective", "heartbeat", "phase", "stack", "gpu", "xid", "link", "topology", "host")
#: Where processing can fail (``stepwatch_processing_failures_total``'s stage label).
FAILURE_STAGES = ("events", "telemetry", "tick", "recovery")
#: How long /health says "degraded" after a processing failure, seconds.
DEGRADED_SECONDS = 300.0
#: /health says "degraded" once the events consumer is behind and consumed nothing for this many seconds.
STALL_SECONDS = 60.0


class ProgressWatch:
    """Whether consumption stalled: messages waiting (lag) while none was consumed for ``stall_after``
    seconds, as seen by successive ``observe`` calls (pure: the caller passes the clock)."""

    def __init__(self, stall_after: float = STALL_SECONDS) -> None:
        self.stall_after = stall_after
        self._consumed: float | None = None
        self._since = 0.0  # when consumption last moved, or the lag was last zero

    def observe(self, now: float, consumed: float, lag: int) -> float | None:
        """Seconds without progress while behind, once that reaches ``stall_after``; None otherwise."""
        if self._consumed is None or consumed != self._consumed or lag <= 0:
            self._consumed, self._since = consumed, now
            return None
        stalled = now - self._since
        return stalled if stalled >= self.stall_after else None


class WorkerMetrics:
    """Every metric of one worker. ``engine`` is read at scrape time; the hooks are set by the worker."""

    def __init__(self, engine) -> None:
        self.engine = engine
        #: () -> iterable of (topic, partition, lag in messages); set by the worker once consuming.
        self.lag_source: Callable[[], Iterable[tuple[str, int, int]]] | None = None
        #: () -> bool: the worker consumes (the /health answer).
        self.ready_source: Callable[[], bool] = lambda: False
        #: () -> iterable of (partition, messages) / (partition, offset): the telemetry feed's lag and the
        #: position up to which its events are applied (streams/telemetry_feed.py); set by the worker.
        self.telemetry_lag_source: Callable[[], Iterable[tuple[int, int]]] | None = None
        self.telemetry_offset_source: Callable[[], Iterable[tuple[int, int]]] | None = None
        #: () -> int: alerts waiting for the Alertmanager sink.
        self.alertmanager_queue: Callable[[], int] | None = None
        r = self.registry = CollectorRegistry(auto_describe=True)
        self.messages = Counter("stepwatch_messages_consumed", "Kafka messages fed to the pipeline (events and telemetry topics).",
                                registry=r)
        self.events = Counter("stepwatch_events_consumed", "Valid events fed to the detectors, by kind.", ["kind"],
                              registry=r)
        self.decode_failures = Counter("stepwatch_decode_failures",
                                       "Messages or events in a batch that did not decode or validate.", registry=r)
        self.deadlettered = Counter("stepwatch_events_deadlettered",
                                    "Dead letters (one per bad message) sent to the dead-letter topic, by the cause of "
                                    "its first rejected part (decode, future, topic, detector).", ["cause"],
                                    registry=r)
        self.alerts_published = Counter("stepwatch_alerts_published",
                                        "Alert records published to the alerts topic, by type and status "
                                        "(a firing alert is published again when its severity or diagnosis changes).",
                                        ["type", "status"], registry=r)
        self.alerts_fired = Counter("stepwatch_alerts_fired", "Alerts that started firing, by type.", ["type"],
                                    registry=r)
        self.alerts_resolved = Counter("stepwatch_alerts_resolved", "Alerts that resolved, by type.", ["type"],
                                       registry=r)
        self.detection = Histogram("stepwatch_detection_duration_seconds",
                                   "Time spent in the detectors: per consumed message (loop=events) and per "
                                   "timer run (loop=tick).", ["loop"], buckets=DETECTION_BUCKETS, registry=r)
        self.config_updates = Counter("stepwatch_config_updates",
                                      "Runtime-settings messages read from the config topic, by result "
                                      "(applied, rejected).", ["result"], registry=r)
        self.alertmanager_posts = Counter("stepwatch_alertmanager_posts",
                                          "POSTs to Alertmanager by result (ok, retry, failed).", ["result"],
                                          registry=r)
        self.alertmanager_dropped = Counter("stepwatch_alertmanager_dropped",
                                            "Alert updates dropped because the Alertmanager queue was full.",
                                            registry=r)
        # On call (issue 16): how long incidents last, what they cost. ``scope`` is the monitoring layer
        # (device, platform, job: models/oncall/actions.py); no per-job or per-rank labels.
        self.incident_duration = Histogram("stepwatch_incident_duration_seconds",
                                           "Firing -> resolved of incidents, by alert type and scope (layer).",
                                           ["type", "scope"], buckets=INCIDENT_BUCKETS, registry=r)
        self.processing_failures = Counter("stepwatch_processing_failures",
                                           "Events, batches or timer runs whose processing raised (a bug), by "
                                           "stage (events, telemetry, tick, recovery); each also makes /health "
                                           "say degraded for DEGRADED_SECONDS.", ["stage"], registry=r)
        self.decoder_messages = Counter("stepwatch_decoder_messages",
                                        "Events-topic messages decoded in the decoder process (streams/decoder.py): "
                                        "large reads, while the worker detects on the read before.", registry=r)
        self.decoder_fallbacks = Counter("stepwatch_decoder_fallbacks",
                                         "Reads the decoder process should have decoded but the worker decoded "
                                         "itself because the process failed (streams/decoder.py); a new process "
                                         "takes the next reads.", registry=r)
        self.gpu_seconds_lost = Counter("stepwatch_gpu_seconds_lost",
                                        "GPU-seconds lost to restarts (downtime and recomputed steps) and hangs, "
                                        "by cause (failure class).", ["cause"], registry=r)
        self.clock_steps = Counter("stepwatch_worker_clock_steps",
                                   "Steps of the wall clock the worker found (streams/worker_clock.py: detection "
                                   "keeps the monotonic clock), by direction (forward, back).", ["direction"],
                                   registry=r)
        for direction in ("forward", "back"):
            self.clock_steps.labels(direction)
        for kind in EVENT_KINDS:
            self.events.labels(kind)
        for t in ALERT_TYPES:
            self.alerts_fired.labels(t)
            self.alerts_resolved.labels(t)
        for cause in ("decode", "future", "topic", "detector"):
            self.deadlettered.labels(cause)
        for loop in ("events", "tick"):
            self.detection.labels(loop)
        for stage in FAILURE_STAGES:
            self.processing_failures.labels(stage)
        #: The latest processing failure: (monotonic time, stage, what was raised), for /health.
        self.last_failure: tuple[float, str, str] | None = None
        self.failures = 0  # all stages, for /health
        self.progress = ProgressWatch()
        self.peer_records_refused = Counter(
            "stepwatch_worker_peer_records_refused",
            "Workers-topic records refused as untrusted (streams/registry.py), by reason: unsigned, bad_signature, "
            "not_a_peer, future_ts, over_cap, unsigned_tombstone.", ["reason"], registry=r)
        for reason in PeerRefusal:
            self.peer_records_refused.labels(reason.value)
        r.register(_ScrapeTimeCollector(self))
        self._open_ids: set[str] = set()
        self._hang_lost: dict[str, tuple[float, float]] = {}  # job -> its last hang's (starts_at, GPU-seconds)
        self._restart_silence: dict[str, tuple[float, float]] = {}  # job -> its last restart's silence

    def peer_record_refused(self, reason: PeerRefusal) -> None:
        """A workers-topic record the registry refused (logged there, rate-limited)."""
        self.peer_records_refused.labels(reason.value).inc()

    def processing_failed(self, stage: str, exc: BaseException) -> None:
        """Something raised while processing (logged by the caller): counted, and /health says degraded."""
        self.processing_failures.labels(stage).inc()
        self.failures += 1
        self.last_failure = (time.monotonic(), stage, repr(exc)[:300])

    def events_lag(self) -> int | None:
        """Messages behind the end of the events partitions (None: not known)."""
        if self.lag_source is None:
            return None
        try:
            return sum(lag for _, _, lag in self.lag_source())
        except Exception:  # silent: the consumer (re)starting has no positions: unknown, as documented
            return None

    def health(self, ready: bool | None = None, *, broker_away: bool = False, now: float | None = None) -> dict:
        """The /health body's verdict: ``ok``, ``degraded`` (a processing failure in the last
        ``DEGRADED_SECONDS``, the broker unreachable: ``broker_away``, or consumption stalled: behind with
        nothing consumed for ``STALL_SECONDS``: ``stalled_seconds``) or ``starting`` (not consuming yet),
        and the latest failure."""
        ready = self.ready_source() if ready is None else ready
        now = time.monotonic() if now is None else now
        status = "ok" if ready else "starting"
        failure = self.last_failure
        recent = failure is not None and now - failure[0] < DEGRADED_SECONDS
        lag = self.events_lag()
        consumed = next((x.value for m in self.messages.collect() for x in m.samples if x.name.endswith("_total")),
                        0.0)  # this counter alone, not a whole scrape
        stalled = self.progress.observe(now, consumed, lag or 0) if ready else None
        if ready and (recent or broker_away or stalled is not None):
            status = "degraded"
        body: dict = {"status": status, "consuming": ready, "broker_reachable": not broker_away,
                      "processing_failures": self.failures, "lag": lag}
        if stalled is not None:
            body["stalled_seconds"] = round(stalled, 1)
        if recent:
            body["last_failure"] = {"stage": failure[1], "error": failure[2],
                                    "seconds_ago": round(now - failure[0], 1)}
        return body

    def alert_published(self, alert) -> None:
        self.alerts_published.labels(alert.type, alert.status).inc()
        if alert.status == AlertStatus.FIRING:
            if alert.id not in self._open_ids:
                self._open_ids.add(alert.id)
                self.alerts_fired.labels(alert.type).inc()
        else:
            self._open_ids.discard(alert.id)
            self.alerts_resolved.labels(alert.type).inc()
            self._incident_resolved(alert)

    def _incident_resolved(self, alert) -> None:
        if alert.ends_at is not None and alert.ends_at >= alert.starts_at:
            self.incident_duration.labels(alert.type, alert.scope or "unknown").observe(alert.ends_at - alert.starts_at)
        ev = alert.evidence
        cause = str(ev.get("failure_class") or "unknown")
        lost = 0.0
        if alert.type == AlertType.JOB_RESTART and isinstance(ev.get("gpu_hours_lost"), (int, float)):
            lost = ev["gpu_hours_lost"] * 3600.0
            # A hang of the job during the restart's silence lasted through its downtime: counted once, here.
            began, hang_lost = self._hang_lost.pop(alert.job, (None, 0.0))
            if began is not None and began >= alert.starts_at:
                lost = max(lost - hang_lost, 0.0)  # the hang resolved first
            self._restart_silence[alert.job] = (alert.starts_at, alert.ends_at or alert.starts_at)
            while len(self._restart_silence) > 10_000:
                self._restart_silence.pop(next(iter(self._restart_silence)))
        elif alert.type == AlertType.HANG and isinstance(ev.get("hung_seconds"), (int, float)):
            silence = self._restart_silence.get(alert.job)
            if silence is not None and silence[0] <= alert.starts_at <= silence[1]:
                return  # the restart, resolved first, counted this time already
            lost = ev["hung_seconds"] * float(ev.get("ranks_known") or 0)
            self._hang_lost[alert.job] = (alert.starts_at, lost)
            while len(self._hang_lost) > 10_000:
                self._hang_lost.pop(next(iter(self._hang_lost)))
        if lost > 0:
            self.gpu_seconds_lost.labels(cause).inc(lost)

    def render(self) -> bytes:
        return generate_latest(self.registry)


class _ScrapeTimeCollector:
    def __init__(self, metrics: WorkerMetrics) -> None:
        self.m = metrics

    def describe(self):
        return []

    def collect(self):
        engine = self.m.engine
        firing = GaugeMetricFamily("stepwatch_alerts_firing", "Alerts currently firing, by type and severity.",
                                   labels=["type", "severity"])
        tally = Tally((a.type, a.severity) for a in engine.open_alerts())
        for t in ALERT_TYPES:
            for sev in ("info", "warning", "critical"):
                tally.setdefault((t, sev), 0)
        for (t, sev), n in sorted(tally.items()):
            firing.add_metric([t, sev], n)
        yield firing
        oncall = getattr(engine, "oncall", None)
        if oncall is not None:
            owns = oncall.ledger.owns
            yield GaugeMetricFamily("stepwatch_node_suspects",
                                    "Nodes with a firing node_suspect alert that this worker speaks for.",
                                    value=sum(1 for n in oncall.ledger.open if owns is None or owns(n)))
            yield CounterMetricFamily("stepwatch_alerts_absorbed", "Alert versions left out as another open "
                                      "alert's own cost (a two-rank job's compute throughput drop beside its straggler: "
                                      "models/oncall/citations.py).", value=oncall.citations.absorbed)
        flaps = CounterMetricFamily("stepwatch_straggler_flaps", "Straggler alerts of a rank that tried to fire "
                                    "again within the hold-off after resolving, by outcome (suppressed, refired).",
                                    labels=["outcome"])
        for outcome in ("suppressed", "refired"):
            flaps.add_metric([outcome], getattr(engine, "straggler_flaps", {}).get(outcome, 0))
        yield flaps
        yield GaugeMetricFamily("stepwatch_jobs_tracked", "Jobs this worker holds state for.",
                                value=len(engine.jobs))
        yield CounterMetricFamily("stepwatch_engine_jobs_refused", "Events of new jobs refused at the job cap "
                                  "(retention.max_jobs) because the jobs it would evict all had open alerts.",
                                  value=getattr(engine, "jobs_refused", 0))
        evicted = CounterMetricFamily("stepwatch_engine_jobs_evicted", "Jobs forgotten, by reason: idle (no events "
                                      "for the retention), cap (room for a new job), dead_hang (room for a new job, "
                                      "from a job whose only open alert was a hang no rank had spoken since).",
                                      labels=["reason"])
        for reason in ("idle", "cap", "dead_hang"):
            evicted.add_metric([reason], getattr(engine, "jobs_evicted", {}).get(reason, 0))
        yield evicted
        capped = CounterMetricFamily("stepwatch_state_capped", "Input left out at a per-producer state cap, by "
                                     "what (ranks_per_job, process_groups_per_job, process_groups_total, "
                                     "pg_ranks_per_job, op_names_per_job, gpus_per_node, ports_per_node, gpus_total, "
                                     "ports_total, nodes, new_jobs_per_message); docs/security.md.", labels=["what"])
        counts = engine.capped() if hasattr(engine, "capped") else {}
        for what in ("ranks_per_job", "process_groups_per_job", "process_groups_total", "pg_ranks_per_job",
                     "op_names_per_job", "gpus_per_node", "ports_per_node", "gpus_total", "ports_total", "nodes",
                     "new_jobs_per_message"):
            capped.add_metric([what], counts.get(what, 0))
        yield capped
        yield GaugeMetricFamily("stepwatch_jobs_active", "Jobs not ended.",
                                value=sum(1 for j in engine.jobs.values() if not j.ended))
        yield GaugeMetricFamily("stepwatch_ranks_tracked", "Ranks this worker holds state for (all jobs).",
                                value=sum(len(j.ranks) for j in engine.jobs.values()))
        yield GaugeMetricFamily("stepwatch_worker_ready", "1 once the worker consumes the events topic.",
                                value=1 if self.m.ready_source() else 0)
        lag = GaugeMetricFamily("stepwatch_consumer_lag",
                                "Messages in the events topic not yet consumed, per assigned partition "
                                "(highwater - last read offset - 1).", labels=["topic", "partition"])
        if self.m.lag_source is not None:
            try:
                for topic, partition, behind in self.m.lag_source():
                    lag.add_metric([topic, str(partition)], behind)
            except Exception:  # silent: the consumer is (re)starting: leave the series out this scrape
                pass
        yield lag
        yield from self._telemetry_feed()
        if self.m.alertmanager_queue is not None:
            yield GaugeMetricFamily("stepwatch_alertmanager_queue_length", "Alert updates waiting to be sent.",
                                    value=self.m.alertmanager_queue())


    def _telemetry_feed(self):
        lag = GaugeMetricFamily("stepwatch_telemetry_feed_lag",
                                "Messages of the telemetry topic whose events this worker has not applied yet, per "
                                "partition (every worker reads every partition).", labels=["partition"])
        offset = GaugeMetricFamily("stepwatch_telemetry_feed_offset",
                                   "Next offset of each telemetry topic partition whose events are not yet all "
                                   "applied by this worker: everything before it is.", labels=["partition"])
        for family, source in ((lag, self.m.telemetry_lag_source), (offset, self.m.telemetry_offset_source)):
            if source is None:
                continue
            try:
                for partition, value in source():
                    family.add_metric([str(partition)], value)
            except Exception:  # silent: the feed is (re)connecting: leave the series out this scrape
                pass
        yield lag
        yield offset


#: The worker's counters before metrics were added; kept as a name for code that imports it.
WorkerStats = WorkerMetrics
