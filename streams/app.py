"""The Faust worker: a thin adapter between Kafka and the pure detection core.

The worker's own ``AIOKafkaConsumer`` (group ``<app_id>-events``, ``streams/events_consumer.py``;
the default, ``STEPWATCH_WORKER_CONSUMER=aiokafka``) consumes the events topic (keyed by job, so a
job's events stay in one partition and one worker) a ``getmany`` batch at a time, decodes each
message (single event or batch envelope), feeds the valid events to the ``DetectionEngine`` and
publishes the alerts it returns. With ``STEPWATCH_WORKER_CONSUMER=faust`` one Faust agent (group
``<app_id>``) does that instead, one message at a time; recovery, dead-lettering and metrics are
shared. What does not decode or validate goes to the dead-letter topic with the reason and its
source coordinates; the worker never stops on bad input. A timer runs the time-driven rules
with the wall clock.

The operator surface lives next to it: Prometheus metrics (streams/metrics.py), the status
API and dashboard (streams/web.py, models/status.py) with the workers registry that finds the
owner of another worker's job (streams/registry.py), runtime settings from the config topic
(stepwatch/runtime_config.py), the optional Alertmanager sink (streams/alertmanager.py), and the
on-call state shared between workers (placement and node ledger, streams/oncall_feed.py) with the
optional action hooks (streams/action_sink.py); see docs/operations.md.
"""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path

import faust
import orjson

from stepwatch.config import Settings
from stepwatch.security import faust_credentials
from stepwatch.models.alerts import Alert
from stepwatch.models.engine import DetectionEngine
from stepwatch.models.pipeline import Message, Outputs, Pipeline
from stepwatch.models.status import StatusRecorder
from stepwatch.runtime_config import GLOBAL, RuntimeConfig

from .metrics import WorkerMetrics, WorkerStats  # noqa: F401  (WorkerStats: the former name)
from .recovery import PublishedAlerts, read_recovery_span, rebuild
from .topic_reader import read_topic_forever

log = logging.getLogger("stepwatch.worker")


def create_app(settings: Settings | None = None) -> faust.App:
    settings = settings or Settings.from_env()
    kafka = settings.kafka
    if not kafka.bootstrap:
        raise ValueError("no Kafka bootstrap servers configured (set KAFKA_BOOTSTRAP)")
    datadir = Path(settings.worker.datadir or Path.home() / ".cache" / "stepwatch" / kafka.app_id)
    datadir.parent.mkdir(parents=True, exist_ok=True)  # Faust makes the directory itself, not its parents
    web_port = settings.worker.web_port or 6066
    canonical_url = settings.worker.canonical_url or f"http://127.0.0.1:{web_port}"
    app = faust.App(
        kafka.app_id,
        broker=[f"kafka://{b.strip()}" for b in kafka.bootstrap.split(",")],
        key_serializer="raw",
        value_serializer="raw",
        topic_partitions=kafka.partitions,
        topic_replication_factor=kafka.replication_factor,
        consumer_auto_offset_reset="earliest",
        web_enabled=settings.worker.web_port > 0,
        web_port=web_port,
        web_host="127.0.0.1",
        canonical_url=canonical_url,
        broker_session_timeout=settings.worker.session_timeout,
        broker_heartbeat_interval=min(3.0, settings.worker.session_timeout / 3),
        datadir=str(datadir),
        # Faust's own leader-election topic is not needed: no agent here relies on it. With the
        # aiokafka events consumer it is Faust's only subscription (Faust cannot run subscribed to nothing).
        topic_disable_leader=settings.worker.consumer == "faust",
        broker_credentials=faust_credentials(settings.security),
    )
    events_topic = app.topic(kafka.topic(kafka.events_topic), value_serializer="raw", key_serializer="raw")
    alerts_topic = app.topic(kafka.topic(kafka.alerts_topic), value_serializer="raw", key_serializer="raw")
    deadletter_topic = app.topic(kafka.topic(kafka.deadletter_topic), value_serializer="raw",
                                 key_serializer="raw")
    engine = DetectionEngine(settings)
    recorder = StatusRecorder(settings.worker.status_history_steps).attach(engine)
    stats = metrics = WorkerMetrics(engine)
    runtime = RuntimeConfig(settings)
    state = {"ready": False}
    app.stepwatch_engine = engine  # type: ignore[attr-defined]
    app.stepwatch_stats = stats  # type: ignore[attr-defined]
    app.stepwatch_recorder = recorder  # type: ignore[attr-defined]
    app.stepwatch_runtime = runtime  # type: ignore[attr-defined]

    def is_ready() -> bool:
        if settings.worker.consumer == "aiokafka":  # the events consumer is ours, not Faust's
            return state.get("events_assigned", False) and not state.get("events_rebalancing")
        return state["ready"] and not app.rebalancing

    @app.on_rebalance_complete.connect
    async def _consuming(sender, **kwargs) -> None:
        state["ready"] = True

    def consumer_lag():
        """(topic, partition, lag) per assigned events partition: highwater - last read offset - 1."""
        consumer = app.consumer
        read = consumer._read_offset
        committed = getattr(consumer, "_committed_offset", {})
        for tp in sorted(consumer.assignment()):
            if tp.topic != events_topic.get_topic_name():
                continue
            high = consumer.highwater(tp)
            if high is None:
                continue
            last = read.get(tp)
            position = last + 1 if last is not None else committed.get(tp)
            if position is None:
                position = 0
            yield tp.topic, tp.partition, max(0, high - position)

    metrics.ready_source = is_ready
    metrics.lag_source = consumer_lag  # replaced by the aiokafka consumer's own in that mode

    sink = None
    if settings.alertmanager.url:
        from .alertmanager import AlertmanagerSink

        sink = AlertmanagerSink(settings.alertmanager, metrics=metrics,
                                generator_url=canonical_url if settings.worker.web_port > 0 else "")
        metrics.alertmanager_queue = sink.queue.qsize
        app.stepwatch_alertmanager = sink  # type: ignore[attr-defined]

        @app.task
        async def alertmanager_sink() -> None:
            while True:
                try:
                    await sink.run()
                except asyncio.CancelledError:
                    raise
                except Exception:  # never let the sink die; detection does not depend on it
                    log.exception("Alertmanager sink failed; restarting it")
                    await asyncio.sleep(1.0)

    published = PublishedAlerts()
    # The one road from bytes to alerts (models/pipeline.py); this module only moves its outputs to Kafka.
    pipeline = Pipeline(engine, recorder=recorder, published=published,
                        max_future_seconds=settings.worker.max_future_seconds, metrics=metrics)
    app.stepwatch_pipeline = pipeline  # type: ignore[attr-defined]

    async def send(out: Outputs) -> None:
        """Publish a pipeline's outputs: dead letters, then alerts."""
        for dead in out.deadletters:
            await deadletter_topic.send(key=dead.message.key, value=dead.record())
        await send_alerts(out.alerts)

    from .action_sink import install_action_sink

    action_sink = install_action_sink(app, settings)  # None unless action hooks are on

    async def publish(alerts: list[Alert]) -> None:
        """Alerts not from the pipeline's own outputs (recovery's reconciliation, telemetry)."""
        # Made outside the engine (recovery's "resolved while down"): classified here (models/actions.py).
        alerts = [a if a.scope else engine.oncall.classifier.annotate(a) for a in alerts]
        await send_alerts(pipeline.publishable(alerts))

    async def send_alerts(alerts: list[Alert]) -> None:
        for alert in alerts:
            log.info("alert %s %s %s: %s", alert.status, alert.type, alert.id, alert.summary)
            key = alert.job or (alert.nodes[0] if alert.nodes else "")  # node alerts have no job
            await alerts_topic.send(key=key.encode(), value=orjson.dumps(alert.to_dict()))
            if sink is not None:
                sink.submit(alert)
            if action_sink is not None:
                action_sink.offer(alert)

    def apply_runtime_settings(record) -> None:
        key = record.key.decode("utf-8", "replace") if record.key else GLOBAL
        try:
            runtime.apply(engine, key, record.value)
        except ValueError as exc:
            metrics.config_updates.labels("rejected").inc()
            log.warning("ignored runtime settings for %r: %s", key, exc)
        else:
            metrics.config_updates.labels("applied").inc()
            log.info("runtime settings for %r: %s", key, runtime.scopes.get(key))

    @app.task
    async def runtime_settings() -> None:
        """Read the whole config topic (no consumer group: every worker sees every scope), apply as it comes."""
        await read_topic_forever(settings, kafka.topic(kafka.config_topic), apply_runtime_settings,
                                 what="config topic reader")

    events_group = kafka.app_id if settings.worker.consumer == "faust" else kafka.app_id + "-events"

    def owned_events_partitions() -> set[int] | None:
        """This worker's events partitions now (None: not known)."""
        mine = getattr(app, "stepwatch_events_owned", None)  # the aiokafka events consumer's assignment
        if mine is not None:
            return set(mine[1]) if mine[0] == events_topic.get_topic_name() else None
        if settings.worker.consumer != "faust" or not state.get("faust_assigned"):
            return None
        try:
            return {tp.partition for tp in app.consumer.assignment() if tp.topic == events_topic.get_topic_name()}
        except Exception:
            return None

    def events_partition_count() -> int | None:
        """Partitions of the events topic, as this worker's events consumer knows them."""
        count = getattr(app, "stepwatch_events_partition_count", None)  # the aiokafka events consumer
        if count is not None:
            return count()
        return app.consumer.topic_partitions(events_topic.get_topic_name())

    assignment_changed = None  # set with the workers registry: tell it at once when partitions move
    if settings.worker.web_port > 0:
        from .registry import STALE_AFTER_INTERVALS, WorkersRegistry, install_registry
        from .web import install_pages

        workers = WorkersRegistry(events_topic.get_topic_name(), group=events_group,
                                  max_age=STALE_AFTER_INTERVALS * settings.worker.registry_interval)
        app.stepwatch_workers = workers  # type: ignore[attr-defined]
        assignment_changed = install_registry(app, settings, registry=workers, url=canonical_url.rstrip("/"),
                                              owned=owned_events_partitions)
        install_pages(app, engine=engine, recorder=recorder, metrics=metrics, runtime=runtime,
                      events_topic=events_topic, settings=settings, is_ready=is_ready,
                      owned_partitions=owned_events_partitions, partition_count=events_partition_count,
                      workers=workers)

    recovered: set[int] = set()
    # Cleared while a recovery runs: the agent waits, so replayed history always comes
    # before the live events that follow it.
    processing_allowed = asyncio.Event()
    processing_allowed.set()

    async def recover_partitions(mine: set[int]) -> None:
        """Rebuild the windows of newly assigned events partitions before consuming them.

        ``mine``: every events partition now assigned. Shared by the Faust agent's and the
        aiokafka consumer's assignment hooks; ``events_group`` is the group whose committed
        offsets end the span read back.
        """
        from stepwatch.security import client_config

        topic_name = events_topic.get_topic_name()
        new = mine - recovered
        recovered.intersection_update(mine)
        if not new or settings.worker.recovery_messages <= 0:
            recovered.update(new)
            return
        processing_allowed.clear()
        state["recovering"] = True
        try:
            span = await asyncio.get_running_loop().run_in_executor(None, lambda: read_recovery_span(
                bootstrap=kafka.bootstrap, group_id=events_group, events_topic=topic_name,
                alerts_topic=kafka.topic(kafka.alerts_topic), partitions=new,
                replay_messages=settings.worker.recovery_messages,
                alerts_lookback=settings.worker.recovery_alerts_lookback, client_config=client_config(settings)))
            report, reconcile = rebuild(pipeline, span)
            log.info("recovered partitions %s: %d messages, %d events replayed; %d alerts read back, %d of them "
                     "open, %d re-published, %d resolved while down (%.2f s)", sorted(new), report.messages_replayed,
                     report.events_replayed, len(span.alerts), report.open_on_topic, report.republished_firing,
                     report.resolved_while_down, report.seconds)
            await publish(reconcile)
        except Exception:  # recovery is best effort: detection goes on from the committed offsets
            log.exception("recovery of partitions %s failed; continuing without rebuilt windows", sorted(new))
        finally:
            state["recovering"] = False
            recovered.update(new)
            processing_allowed.set()

    def forget_partitions(gone: set[int]) -> None:
        """Jobs of revoked partitions now belong to another worker: drop their state quietly."""
        if not gone:
            return
        recovered.difference_update(gone)
        pipeline.forget(gone)

    async def process_message(topic: str, partition: int, offset: int, key: bytes | None, raw: bytes | None) -> None:
        """One events message through the pipeline (the Faust agent's road)."""
        await send(pipeline.feed([Message(raw, key, topic, partition, offset)], arrival=time.time()))

    if settings.worker.consumer == "faust":
        @app.on_partitions_assigned.connect
        async def _recover(sender, assigned, **kwargs) -> None:
            topic_name = events_topic.get_topic_name()
            state["faust_assigned"] = True  # the assignment is known from here on (owned_events_partitions)
            if assignment_changed is not None:
                assignment_changed()
            await recover_partitions({tp.partition for tp in assigned if tp.topic == topic_name})

        @app.on_partitions_revoked.connect
        async def _forget(sender, revoked, **kwargs) -> None:
            topic_name = events_topic.get_topic_name()
            forget_partitions({tp.partition for tp in revoked if tp.topic == topic_name})
            if assignment_changed is not None:
                assignment_changed()

        @app.agent(events_topic, name="stepwatch-detect")
        async def detect(stream):
            async for event in stream.events():
                if not processing_allowed.is_set():
                    await processing_allowed.wait()
                message = event.message
                await process_message(message.topic, message.partition, message.offset, message.key,
                                      message.value)
    else:
        from .events_consumer import install_events_consumer

        install_events_consumer(app, settings, topic_name=events_topic.get_topic_name(), group_id=events_group,
                                state=state, metrics=metrics, pipeline=pipeline, send=send,
                                processing_allowed=processing_allowed, recover_partitions=recover_partitions,
                                forget_partitions=forget_partitions, assignment_changed=assignment_changed)

    from .oncall_feed import install_oncall

    # Node alerts (node_suspect, a fault re-published naming a job) go out from the node's owner only.
    pipeline.speaks_for = install_oncall(app, engine, settings, owned=owned_events_partitions, publish=publish)

    from .telemetry_feed import attach_telemetry

    telemetry = attach_telemetry(app, engine, settings, publish=publish, pipeline=pipeline, send=send)
    metrics.telemetry_lag_source = telemetry.lag
    metrics.telemetry_offset_source = lambda: sorted(telemetry.applied.items())

    from .link_baselines import install_link_baselines

    install_link_baselines(app, engine, settings, owned=owned_events_partitions)  # docs/network.md

    from .control import install_control

    install_control(app, engine, settings, metrics)  # stack requests of hung jobs (docs/hang.md)

    @app.timer(interval=settings.worker.tick_interval)
    async def tick():
        if state.get("recovering"):
            return  # the engine is being rebuilt; the next tick runs the rules
        try:
            out = pipeline.tick(time.time())
        except Exception:
            log.exception("timer rules failed")
            return
        await send(out)

    return app


def run_worker(settings: Settings | None = None, *, loglevel: str = "info") -> None:
    """Run the worker in the foreground until SIGINT/SIGTERM."""
    from faust.worker import Worker

    from stepwatch.security import client_config
    from stepwatch.topics import ensure_topics

    settings = settings or Settings.from_env()
    ensure_topics(settings.kafka, client_config=client_config(settings))
    app = create_app(settings)
    Worker(app, loglevel=loglevel, quiet=True).execute_from_commandline()
