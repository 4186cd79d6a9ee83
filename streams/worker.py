"""The worker: one object that moves bytes between Kafka and the pure detection core.

``Worker`` owns everything a running worker has: the Faust app (timers, web server, producer),
the ``Pipeline`` (models/pipeline.py, the one road from bytes to alerts) with its engine, status
recorder and published-alert memory, the metrics and runtime settings. Its other parts are components
(streams/component.py: each built from explicit dependencies, ``attach(app)`` registers what it runs):
the events consumer (streams/events_consumer.py, or the Faust agent of streams/faust_agent.py, by
``ConsumerMode``), the telemetry road, the on-call feed, the link baselines, the stack requests, the
releases reader, the action hooks, the Alertmanager sink, the workers registry, the broker probe and the
pages. ``_components`` composes them, in one place; what they do together is a method (``send``,
``tick``, ``recover_partitions``, ...). A failed item of a live road goes to the injectable error
policy (default: logged and counted, /health says degraded); the road goes on.

The events topic (keyed by job, so a job's events stay in one partition and one worker) is
read by the worker's own ``AIOKafkaConsumer`` (group ``<app_id>-events``,
streams/events_consumer.py; the default, ``STEPWATCH_WORKER_CONSUMER=aiokafka``) a ``getmany``
batch at a time, or with ``STEPWATCH_WORKER_CONSUMER=faust`` by one Faust agent (group
``<app_id>``) a ``take_events`` batch at a time; recovery, dead-lettering and metrics are shared. What does
not decode or validate goes to the dead-letter topic with the reason and its source
coordinates; the worker never stops on bad input. A timer runs the time-driven rules on the
worker's clock (streams/worker_clock.py: the wall clock at start, moved on monotonically, so a step
of the wall clock raises no alert; steps are logged and counted). Nothing is published before the
worker has read back what the alerts topic holds (a restarted worker does not repeat its previous
life's alerts: models/published.py). The operator surface (metrics, status API, registry, runtime
settings, Alertmanager, the on-call state shared between workers in streams/oncall_feed.py and the
optional action hooks in streams/action_sink.py): docs/operations.md.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from pathlib import Path

import faust

from stepwatch.config import ConsumerMode, Settings
from stepwatch.models.alerts import Alert
from stepwatch.models.detection import DetectionEngine
from stepwatch.models.pipeline import Outputs, Pipeline
from stepwatch.models.sources import AsyncSource, Read, Tick, drive
from stepwatch.models.shadow import SHADOW_KEY
from stepwatch.models.status import StatusRecorder
from stepwatch.runtime_config import GLOBAL, RuntimeConfig
from stepwatch.security import faust_credentials

from .component import Component, ErrorPolicy
from .events_consumer import EventsConsumer
from .faust_agent import FaustAgent, FaustSource  # noqa: F401  (FaustSource: its former home)
from .kafka_sink import KafkaSink
from .metrics import WorkerMetrics
from .producer_topics import track_sent_topics
from .recovery import PublishedAlerts, read_published, read_recovery_span, rebuild, remember_published, settle
from .worker_clock import WorkerClock
from .topic_reader import read_topic_forever
from .broker_watch import BrokerLogLimiter, exit_if_stuck
from .broker_watch import install as install_log_limiter
from .benign_logs import install as install_benign_logs
from .ready_line import announce_ready

log = logging.getLogger("stepwatch.worker")
#: How long a signalled worker may take to stop (flush, commit, leave the group) before it exits anyway.
SHUTDOWN_GRACE_SECONDS = 20.0



class Worker:
    """A stepwatch worker for ``settings`` (default: the environment's); ``run()`` runs it. ``clock``: the
    worker's clock (default: the machine's wall and monotonic clocks; tests pass one they can step).
    ``on_error(stage, item, exc)``: what a failed item of a live road does (default: logged and counted)."""

    def __init__(self, settings: Settings | None = None, *, clock: WorkerClock | None = None,
                 on_error: ErrorPolicy | None = None) -> None:
        settings = self.settings = settings or Settings.from_env()
        kafka = settings.kafka
        track_sent_topics()  # before any producer sends: no topic drops out of a producer's metadata (issue 15)
        if not kafka.bootstrap:
            raise ValueError("no Kafka bootstrap servers configured (set KAFKA_BOOTSTRAP)")
        self.mode: ConsumerMode = settings.worker.consumer
        self.app = self._faust_app()
        #: Quiets the Kafka clients' reconnect log while the broker is away; /health reads it (streams/broker_watch.py).
        self.broker_log = BrokerLogLimiter()
        self.events_topic = self._topic(kafka.events_topic)
        self.alerts_topic = self._topic(kafka.alerts_topic)
        self.deadletter_topic = self._topic(kafka.deadletter_topic)
        #: The events consumer's group: its committed offsets end the span recovery reads back.
        self.events_group = kafka.app_id if self.mode is ConsumerMode.FAUST else kafka.app_id + "-events"

        self.engine = DetectionEngine(settings)
        self.recorder = StatusRecorder(settings.worker.status_history_steps).attach(self.engine)
        self.metrics = WorkerMetrics(self.engine)
        #: The time the rules run on, and the read times of live messages (steps of the wall clock left out).
        self.clock = clock or WorkerClock()
        if self.clock.on_step is None:
            self.clock.on_step = self._clock_stepped
        self.runtime = RuntimeConfig(settings)
        self.published = PublishedAlerts()
        self.on_error: ErrorPolicy = on_error or self._log_and_count

        #: Events partitions whose windows were rebuilt (``recover_partitions``).
        self.recovered: set[int] = set()
        self.recovering = False
        #: Alerts open on the topic but not in a rebuilt engine, on partitions read again (``recovery.settle``).
        self.unsettled: list = []
        #: Set once what the alerts topic holds is known (``read_published``): nothing is judged or published
        #: before, so a restarted worker publishes nothing its previous life did (its ledger read back included).
        self.published_known = asyncio.Event()
        # Cleared while a recovery runs: the consumer waits, so replayed history always comes
        # before the live events that follow it.
        self.processing_allowed = asyncio.Event()
        self.processing_allowed.set()
        #: The workers registry's advertiser (with the web server only; streams/registry.py).
        self.registry = None

        #: The events topic's consumer (by ``ConsumerMode``): what it owns, whether it is ready, its lag.
        self.events: EventsConsumer | FaustAgent = self._events_consumer()
        from .oncall_feed import OnCallFeed

        # Node alerts (node_suspect, a fault re-published naming a job) go out from the node's owner only.
        self.oncall_feed = OnCallFeed(self.engine.oncall, settings, owned=self.owned_events_partitions,
                                      publish=self.publish)
        self.pipeline = Pipeline(self.engine, recorder=self.recorder, published=self.published,
                                 max_future_seconds=settings.worker.max_future_seconds, metrics=self.metrics,
                                 speaks_for=self.oncall_feed.speaks_for)
        self.metrics.ready_source = self.is_ready
        self.metrics.lag_source = self.events.lag
        for part in self._components():
            part.attach(self.app)
        self.app.timer(interval=settings.worker.tick_interval)(self.tick)
        self.app.task(self.read_runtime_settings)
        self.app.task(self.read_published)
        self.app.stepwatch_worker = self  # type: ignore[attr-defined]  (for code that only has the app: bench/)

    def _components(self) -> list[Component]:
        """The worker's parts, in the order the app starts their tasks and services (each from explicit
        dependencies; streams/component.py)."""
        from .action_sink import ActionHooksTask, Releases
        from .drain_ledger import DrainLedgerSync
        from .feedback_feed import FeedbackRoad
        from .shadow import ShadowRun, Tapped
        from .control import StackRequests
        from .link_baselines import LinkBaselinesSync
        from .telemetry_feed import TelemetryRoad

        settings = self.settings
        parts: list[Component] = []
        self.sink = self._alertmanager()  # the Alertmanager's (or None)
        if self.sink is not None:
            parts.append(self.sink)
        # Action hooks (None unless on); telemetry alerts drain only nodes whose agent reported before.
        hooks = ActionHooksTask(settings, reported=self.engine.telemetry.reported_before)
        self.action_sink = hooks.sink
        parts.append(hooks)
        parts.append(Releases(self.engine, settings))  # humans' releases of held drains (models/oncall/budget.py)
        # One drain budget across workers (the drain-ledger topic); the budget looked up at each use (the rule
        # may be made again).
        parts.append(DrainLedgerSync(lambda: self.engine.oncall.rule("drain_budget").budget, settings))
        # Verdicts on alerts: /metrics, Alertmanager's low-precision sentence, the POST page.
        road = FeedbackRoad(settings, self.metrics.registry, sink=self.sink, lookup=self.published.open.get)
        self.feedback = road.feed
        parts.append(road)
        #: Where every road's outputs go (models/sinks.py's AsyncSink): the alerts and dead-letter topics.
        self.output = KafkaSink(self.alerts_topic, self.deadletter_topic, self.sink, self.action_sink,
                                max_request_size=self.app.conf.producer_max_request_size)
        parts.extend(self._web())
        parts.append(self.events)
        parts.append(self.oncall_feed)
        road = TelemetryRoad(settings, drive=self.drive, owned=self.events.node_partitions)
        self.telemetry = road.feed
        self.metrics.telemetry_lag_source = self.telemetry.lag
        self.metrics.telemetry_offset_source = lambda: sorted(self.telemetry.applied.items())
        parts.append(road)
        parts.append(LinkBaselinesSync(self.engine.telemetry.fabric.history.baselines, settings,
                                       owned=self.owned_events_partitions))  # docs/network.md
        # Stack requests of hung jobs (docs/hang.md).
        parts.append(StackRequests(self.engine.take_stack_requests, settings, registry=self.metrics.registry))
        # Candidate settings on the same stream, their alerts on shadow-alerts only.
        kafka = settings.kafka
        self.shadow = ShadowRun(self.pipeline, self.runtime, metrics=self.metrics,
                                topic=kafka.topic(kafka.shadow_alerts_topic), interval=settings.worker.tick_interval)
        self.tapped = Tapped(self.pipeline, self.shadow)
        parts.append(self.shadow)
        return parts

    # -- construction ---------------------------------------------------------------------

    @property
    def canonical_url(self) -> str:
        w = self.settings.worker
        return w.canonical_url or f"http://127.0.0.1:{w.web_port or 6066}"

    def _faust_app(self) -> faust.App:
        settings, kafka = self.settings, self.settings.kafka
        datadir = Path(settings.worker.datadir or Path.home() / ".cache" / "stepwatch" / kafka.app_id)
        datadir.parent.mkdir(parents=True, exist_ok=True)  # Faust makes the directory itself, not its parents
        from .index_redirect import index_redirect
        from .web_auth import auth_middleware, web_token

        self.web_token = web_token(settings.worker)  # refuses an open off-loopback bind (docs/security.md)
        app = faust.App(
            kafka.app_id,
            broker=[f"kafka://{b.strip()}" for b in kafka.bootstrap.split(",")],
            key_serializer="raw",
            value_serializer="raw",
            topic_partitions=kafka.partitions,
            topic_replication_factor=kafka.replication_factor,
            consumer_auto_offset_reset="earliest",
            web_enabled=settings.worker.web_port > 0,
            web_port=settings.worker.web_port or 6066,
            web_host="127.0.0.1",
            web_bind=settings.worker.web_bind,  # web_host is only the advertised name
            web_application_options={"middlewares": [auth_middleware(self.web_token), index_redirect()]},
            canonical_url=self.canonical_url,
            broker_session_timeout=settings.worker.session_timeout,
            broker_commit_interval=settings.worker.commit_interval,
            broker_heartbeat_interval=min(3.0, settings.worker.session_timeout / 3),
            datadir=str(datadir),
            # Faust's own leader-election topic is not needed: no agent here relies on it. With the
            # aiokafka events consumer it is Faust's only subscription (Faust cannot run subscribed to nothing).
            topic_disable_leader=self.mode is ConsumerMode.FAUST,
            broker_credentials=faust_credentials(settings.security),
        )
        return app

    def _topic(self, name: str):
        return self.app.topic(self.settings.kafka.topic(name), value_serializer="raw", key_serializer="raw")

    def _alertmanager(self):
        """The optional Alertmanager sink (a component: it runs as an app task that never dies), or None."""
        settings = self.settings
        if not settings.alertmanager.url:
            return None
        from .alertmanager import AlertmanagerSink

        sink = AlertmanagerSink(settings.alertmanager, metrics=self.metrics,
                                generator_url=self.canonical_url if settings.worker.web_port > 0 else "")
        self.metrics.alertmanager_queue = sink.queue.qsize
        return sink

    def _web(self) -> list[Component]:
        """The workers registry, the broker probe and the status pages (with the web server only)."""
        settings = self.settings
        if settings.worker.web_port <= 0:
            return []
        from .broker_watch import BrokerWatch
        from .registry import RegistryAdvertiser, registry_for
        from .web import StatusPages

        workers = registry_for(settings, self.events_topic.get_topic_name(), group=self.events_group,
                               on_refused=self.metrics.peer_record_refused)
        self.registry = RegistryAdvertiser(settings, registry=workers, url=self.canonical_url.rstrip("/"),
                                           owned=self.owned_events_partitions)
        broker = BrokerWatch(settings, self.broker_log)
        pages = StatusPages(engine=self.engine, recorder=self.recorder, metrics=self.metrics, runtime=self.runtime,
                            events_topic=self.events_topic, settings=settings, is_ready=self.is_ready,
                            owned_partitions=self.owned_events_partitions,
                            partition_count=self.events_partition_count, workers=workers, token=self.web_token,
                            broker_away=broker.away)
        return [self.registry, broker, pages]

    def _events_consumer(self) -> EventsConsumer | FaustAgent:
        """The events topic's consumer: the worker's own aiokafka consumer, or a Faust agent."""
        hooks = dict(drive=self.drive, recover=self.recover_partitions, forget=self.forget_partitions,
                     allowed=self.processing_allowed, assignment_changed=self._assignment_changed)
        if self.mode is ConsumerMode.FAUST:
            return FaustAgent(self.app, self.events_topic, **hooks)
        from .decoder import Decoder, decode_processes

        decoder = Decoder(decode_processes(self.settings.worker.decode_processes),
                          self.engine.settings.worker.max_new_jobs_per_message, self.metrics)
        return EventsConsumer(self.settings, topic=self.events_topic.get_topic_name(), group_id=self.events_group,
                              decoder=decoder, **hooks)

    # -- state ----------------------------------------------------------------------------

    def is_ready(self) -> bool:
        """Consuming: the events consumer has its partitions and is not rebalancing."""
        return self.events.ready()

    def owned_events_partitions(self) -> set[int] | None:
        """This worker's events partitions now (None: not known)."""
        return self.events.owned()

    def events_partition_count(self) -> int | None:
        """Partitions of the events topic, as this worker's events consumer knows them."""
        return self.events.partition_count()

    def _assignment_changed(self) -> None:
        """Events partitions came or went: the workers registry advertises them at once."""
        if self.registry is not None:
            self.registry.changed()

    # -- output ---------------------------------------------------------------------------

    async def send(self, out: Outputs) -> None:
        """Publish a pipeline's outputs (``self.output``: alerts first, then one dead letter per bad message)."""
        await self.output.write(out)

    async def drive(self, source: AsyncSource, stage: str) -> None:
        """A live road (models/sources.py ``drive``): ``source`` through the pipeline into the Kafka sink; a
        failure of one item is logged and counted under ``stage`` (/health says degraded), the road goes on."""

        await drive(self._on_worker_time(source), self.tapped, self.output,
                    on_error=lambda item, exc: self.on_error(stage, item, exc))

    def _log_and_count(self, stage: str, item, exc: Exception) -> None:
        """The default error policy: the failure logged and counted under ``stage`` (/health says degraded)."""
        what = f"{len(item.messages)} messages" if type(item) is Read else "a tick"
        log.error("processing %s (%s) failed", what, stage, exc_info=exc)
        self.metrics.processing_failed(stage, exc)

    async def _on_worker_time(self, source: AsyncSource):
        """``source``'s items once what the alerts topic holds is known, their read times (the wall clock's,
        e.g. the events consumer's) on the worker's clock; ``source`` closed on the way out (``drive``)."""
        items = aiter(source)
        try:
            async for item in items:
                if not self.published_known.is_set():
                    await self.published_known.wait()
                if type(item) is Read and item.arrival is not None:
                    item = dataclasses.replace(item, arrival=self.clock.from_wall(item.arrival))
                yield item
        finally:
            closing = getattr(items, "aclose", None)
            if closing is not None:
                await closing()

    async def publish(self, alerts: list[Alert]) -> None:
        """Alerts not from the pipeline's own outputs (recovery's reconciliation, the on-call feed's)."""
        if not self.published_known.is_set():
            await self.published_known.wait()
        # Made outside the engine (recovery's "resolved while down"): classified here (models/oncall/actions.py).
        alerts = [a if a.scope else self.engine.oncall.classifier.annotate(a) for a in alerts]
        await self.output.write_alerts(self.pipeline.publishable(alerts))

    # -- input ----------------------------------------------------------------------------

    async def tick(self) -> None:
        """The timer: the time-driven rules on the worker's clock (a step of the wall clock is logged, counted
        and left out: ``WorkerClock``)."""
        self.clock.check()
        if self.recovering or not self.published_known.is_set():
            return  # the engine is being rebuilt, or what was published is not known yet: the next tick runs
        now = self.clock.now()
        try:
            out = self.tapped.take(Tick(now))
        except Exception as exc:
            log.exception("timer rules failed")
            self.metrics.processing_failed("tick", exc)
            return
        await self.send(out)
        if self.unsettled:
            await self.publish(settle(self.pipeline, self.unsettled, self._caught_up(), now))

    def _caught_up(self) -> set[int]:
        """Events partitions read to their end now (lag 0)."""
        try:
            return {p for _, p, lag in self.metrics.lag_source() if lag == 0}
        except Exception:  # silent: the consumer (re)starts; the next tick asks again
            return set()

    def _clock_stepped(self, seconds: float) -> None:
        self.metrics.clock_steps.labels("forward" if seconds > 0 else "back").inc()

    async def read_published(self) -> None:
        """Once at start: remember what the alerts topic holds (``recovery.read_published``), then let alerts out.
        A failure is logged and counted: alerts go out all the same (perhaps repeating the previous life's)."""
        from stepwatch.security import client_config

        settings, kafka = self.settings, self.settings.kafka
        try:
            records = await asyncio.get_running_loop().run_in_executor(None, lambda: read_published(
                bootstrap=kafka.bootstrap, alerts_topic=kafka.topic(kafka.alerts_topic),
                alerts_lookback=settings.worker.recovery_alerts_lookback, client_config=client_config(settings)))
            remember_published(self.published, records)
            log.info("read %d alerts back from the alerts topic", len(records))
        except Exception as exc:
            log.exception("reading the alerts topic back failed; publishing without it")
            self.metrics.processing_failed("recovery", exc)
        finally:
            self.published_known.set()

    def apply_runtime_settings(self, record) -> None:
        """One config topic record: settings for a job (its key) or for all (no key)."""
        key = record.key.decode("utf-8", "replace") if record.key else GLOBAL
        if key == SHADOW_KEY:  # candidate settings (streams/shadow.py): never the live engine's
            try:
                self.shadow.set(record.value)
            except ValueError as exc:
                self.metrics.config_updates.labels("rejected").inc()
                log.warning("ignored shadow settings: %s", exc)
            return
        try:
            self.runtime.apply(self.engine, key, record.value)
        except ValueError as exc:
            self.metrics.config_updates.labels("rejected").inc()
            log.warning("ignored runtime settings for %r: %s", key, exc)
        else:
            self.metrics.config_updates.labels("applied").inc()
            log.info("runtime settings for %r: %s", key, self.runtime.scopes.get(key))
            self.shadow.live_changed(key, record.value)

    async def read_runtime_settings(self) -> None:
        """Read the whole config topic (no consumer group: every worker sees every scope), apply as it comes."""
        kafka = self.settings.kafka
        await read_topic_forever(self.settings, kafka.topic(kafka.config_topic), self.apply_runtime_settings,
                                 what="config topic reader")

    # -- partitions -----------------------------------------------------------------------

    async def recover_partitions(self, mine: set[int]) -> None:
        """Rebuild the windows of newly assigned events partitions before consuming them.

        ``mine``: every events partition now assigned. Shared by both consumer modes'
        assignment hooks; ``events_group``'s committed offsets end the span read back.
        """
        from stepwatch.security import client_config

        settings, kafka = self.settings, self.settings.kafka
        topic_name = self.events_topic.get_topic_name()
        new = mine - self.recovered
        self.recovered.intersection_update(mine)
        if not new or settings.worker.recovery_messages <= 0:
            self.recovered.update(new)
            return
        self.processing_allowed.clear()
        self.recovering = True
        try:
            span = await asyncio.get_running_loop().run_in_executor(None, lambda: read_recovery_span(
                bootstrap=kafka.bootstrap, group_id=self.events_group, events_topic=topic_name,
                alerts_topic=kafka.topic(kafka.alerts_topic), partitions=new,
                replay_messages=settings.worker.recovery_messages,
                alerts_lookback=settings.worker.recovery_alerts_lookback, client_config=client_config(settings)))
            report, reconcile = rebuild(self.pipeline, span, self.clock.now(), self.unsettled)
            log.info("recovered partitions %s: %d messages, %d events replayed; %d alerts read back, %d of them "
                     "open, %d re-published, %d resolved while down (%.2f s)", sorted(new), report.messages_replayed,
                     report.events_replayed, len(span.alerts), report.open_on_topic, report.republished_firing,
                     report.resolved_while_down, report.seconds)
            await self.publish(reconcile)
        except Exception as exc:  # recovery is best effort: detection goes on from the committed offsets
            log.exception("recovery of partitions %s failed; continuing without rebuilt windows", sorted(new))
            self.metrics.processing_failed("recovery", exc)
        finally:
            self.recovering = False
            self.recovered.update(new)
            self.processing_allowed.set()

    def forget_partitions(self, gone: set[int]) -> None:
        """Jobs of revoked partitions now belong to another worker: drop their state quietly."""
        if not gone:
            return
        self.recovered.difference_update(gone)
        self.unsettled[:] = [(p, a) for p, a in self.unsettled if p not in gone]  # the new owner settles them
        self.pipeline.forget(gone)
        self.shadow.forget(gone)

    # -- running --------------------------------------------------------------------------

    def run(self, *, loglevel: str = "info") -> None:
        """Run in the foreground until SIGINT/SIGTERM."""
        from faust.worker import Worker as FaustWorker

        install_log_limiter(self.broker_log)
        install_benign_logs()  # streams/benign_logs.py: start/rebalance noise at its real level
        announce_ready(self)  # streams/ready_line.py: one line once consuming

        class Worker(FaustWorker):  # the same name in the log ("[^Worker]: Ready")
            def _schedule_shutdown(self, signal) -> None:
                if not self._signal_stop_time:  # the first signal: Faust's flush waits forever without a broker
                    exit_if_stuck(SHUTDOWN_GRACE_SECONDS)
                super()._schedule_shutdown(signal)

        Worker(self.app, loglevel=loglevel, quiet=True).execute_from_commandline()


def run_worker(settings: Settings | None = None, *, loglevel: str = "info") -> None:
    """``stepwatch worker``: make the topics, then run a ``Worker`` in the foreground."""
    from stepwatch.security import client_config
    from stepwatch.topics import ensure_topics

    settings = settings or Settings.from_env()
    ensure_topics(settings.kafka, client_config=client_config(settings))
    Worker(settings).run(loglevel=loglevel)


if __name__ == "__main__":  # ``python -m stepwatch.streams.worker``: ``stepwatch worker`` without the CLI
    import sys

    sys.argv = sys.argv[:1] + ["worker"]  # Faust's command line: run the worker
    run_worker()
