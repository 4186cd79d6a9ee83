"""Delivers action records (models/oncall/action_hooks.py): the actions topic, an optional webhook, an optional
executor.

Off unless ``STEPWATCH_ONCALL_HOOKS_ENABLED=true``. Detection never waits for it: records queue
(bounded; the oldest is dropped when full) and one task sends them. The webhook gets each record
as a JSON POST (retried a few times with backoff). The executor runs only with dry-run off and
``STEPWATCH_ONCALL_EXECUTOR`` set: ``<executor> <command>`` for each rendered Slurm command (no
shell; the command is one argument), and the record says what it returned.

One action record per alert id, across restarts too: before delivering, the sink reads back which
alert ids the actions topic already has a record for (a restarted worker's previous life's), and
delivers none of those again.
"""

from __future__ import annotations

import asyncio
import logging
import shlex
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

import orjson

from stepwatch.config import OnCallSettings
from stepwatch.models.oncall.action_hooks import ActionHooks, load_inventory

from .supervise import run_forever

log = logging.getLogger("stepwatch.actions")


class ActionSink:
    def __init__(self, settings: OnCallSettings, *, send: Callable[[bytes, bytes], Awaitable[Any]] | None = None,
                 queue_size: int = 1000, attempts: int = 4, timeout: float = 10.0,
                 reported: Callable[[str, float], bool] | None = None,
                 read_back: Callable[[], Iterable[str]] | None = None, max_ids: int = 100_000) -> None:
        self.settings = settings
        inventory = load_inventory(settings.node_inventory_file) if settings.node_inventory_file else None
        self.hooks = ActionHooks(dry_run=settings.dry_run, slurm_template=settings.slurm_template,
                                 kubernetes_template=settings.kubernetes_template, inventory=inventory,
                                 reported=reported)
        self.send = send  # (key, value) -> the actions topic
        self.queue: asyncio.Queue = asyncio.Queue(maxsize=queue_size)
        self.attempts = attempts
        self.timeout = timeout
        self.delivered = 0
        self.dropped = 0
        self.webhook_failures = 0
        #: () -> the alert ids the actions topic already has a record for (blocking; run once, off the loop).
        self.read_back = read_back
        self.max_ids = max_ids
        self._recorded: OrderedDict[str, None] = OrderedDict()  # alert ids with a record delivered (bounded)
        self.already_recorded = 0  # records not delivered: their alert id had one (read back)

    def offer(self, alert) -> None:
        """Called for every published alert; queues an action record for the ones that get one."""
        record = self.hooks.record(alert)
        if record is None:
            return
        if self.queue.full():
            self.queue.get_nowait()
            self.dropped += 1
        self.queue.put_nowait(record)

    async def run(self) -> None:
        import aiohttp

        if self.read_back is not None:
            read_back, self.read_back = self.read_back, None  # once (run_forever restarts run after a failure)
            try:
                for alert_id in await asyncio.get_running_loop().run_in_executor(None, lambda: list(read_back())):
                    self._note(alert_id)
            except Exception:
                log.exception("reading the actions topic back failed; an action recorded before may be again")

        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=self.timeout)) as session:
            while True:
                record = await self.queue.get()
                await self.deliver(record, session)

    async def deliver(self, record: dict[str, Any], session=None) -> None:
        key = record_key(record["alert_id"], record.get("action"))
        if key in self._recorded:
            self.already_recorded += 1
            log.info("action for %s %s already recorded: not again", record["alert_type"], record["alert_id"])
            return
        self._note(key)
        if not self.settings.dry_run and self.settings.executor:
            record["executed"] = await self._execute(record)
        body = orjson.dumps(record)
        if self.send is not None:
            await self.send(record["alert_id"].encode(), body)
        if self.settings.webhook_url and session is not None:
            await self._post(session, body)
        self.delivered += 1
        log.info("action %s for %s %s (dry run: %s)", record["action"].get("kind"), record["alert_type"],
                 record["alert_id"], record["dry_run"])

    def _note(self, key: str) -> None:
        self._recorded[key] = None
        while len(self._recorded) > self.max_ids:
            self._recorded.popitem(last=False)

    async def _post(self, session, body: bytes) -> None:
        import aiohttp

        for attempt in range(self.attempts):
            try:
                async with session.post(self.settings.webhook_url, data=body,
                                        headers={"Content-Type": "application/json"}) as response:
                    if 200 <= response.status < 300:
                        return
                    reason = f"HTTP {response.status}"
            except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as exc:
                reason = repr(exc)
            if attempt + 1 < self.attempts:
                await asyncio.sleep(min(0.5 * 2 ** attempt, 10.0))
        self.webhook_failures += 1
        log.error("action webhook POST failed after %d attempts: %s", self.attempts, reason)

    async def _execute(self, record: dict[str, Any]) -> list[dict[str, Any]]:
        out = []
        for command in record["commands"].get("slurm", []):
            argv = [*shlex.split(self.settings.executor), command]
            try:
                proc = await asyncio.create_subprocess_exec(*argv, stdout=asyncio.subprocess.PIPE,
                                                            stderr=asyncio.subprocess.STDOUT)
                output, _ = await asyncio.wait_for(proc.communicate(), timeout=60)
                out.append({"command": command, "returncode": proc.returncode,
                            "output": output.decode("utf-8", "replace")[-500:]})
            except (OSError, asyncio.TimeoutError) as exc:
                out.append({"command": command, "error": repr(exc)})
        return out


class ActionHooksTask:
    """The worker's action sink as a component (streams/component.py): ``sink`` (None when hooks are off, the
    default) runs as an app task that never dies. ``reported(node, ts)``: whether the node's agent reported
    before ``ts`` (the engine's ``TelemetryHub.reported_before``)."""

    def __init__(self, settings, *, reported: Callable[[str, float], bool] | None = None) -> None:
        oncall, kafka = settings.oncall, settings.kafka
        self.topic = kafka.topic(oncall.actions_topic)
        self._send = None  # the app's producer, at ``attach``

        def read_back() -> list[str]:
            from stepwatch.security import client_config

            return recorded_alert_ids(kafka.bootstrap, self.topic, client_config(settings))

        async def send(key: bytes, value: bytes) -> None:
            await self._send(self.topic, key, value)

        self.sink = ActionSink(oncall, send=send, reported=reported, read_back=read_back) \
            if oncall.hooks_enabled else None

    def attach(self, app) -> None:
        if self.sink is None:
            return
        from .component import app_sender

        self._send = app_sender(app, self.topic)
        sink = self.sink

        async def action_hooks() -> None:
            await run_forever(sink.run, what="action sink", log=log)

        app.task(action_hooks)


def record_key(alert_id: str, action) -> str:
    """What makes an action record once-only: its alert id and action kind (a drain held for a human and later
    released is the same alert again, now with its drain: models/oncall/budget.py), as ActionHooks keys them."""
    return f"{alert_id}/{action.get('kind') if isinstance(action, dict) else ''}"


def recorded_alert_ids(bootstrap: str, topic: str, client_config: dict | None = None, *, lookback: int = 10_000,
                       timeout: float = 20.0) -> list[str]:
    """The ``record_key`` (alert id and action kind) of the last ``lookback`` records per partition of the actions
    topic."""
    from kafka import KafkaConsumer, TopicPartition

    from .recovery import read_span

    reader = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
                           **dict(client_config or {}))
    try:
        reader.topics()  # fetch metadata: partitions_for_topic only answers from what is cached
        tps = [TopicPartition(topic, p) for p in (reader.partitions_for_topic(topic) or ())]
        if not tps:
            return []
        ends, begins = reader.end_offsets(tps), reader.beginning_offsets(tps)
        starts = {tp: max(begins[tp], ends[tp] - lookback) for tp in tps}
        out = []
        for r in read_span(reader, tps, ends, starts, timeout=timeout):
            if not r.key:
                continue
            try:
                action = orjson.loads(r.value).get("action") if r.value else None
            except (orjson.JSONDecodeError, AttributeError):
                action = None  # silent: a record we cannot read keys its id alone
            out.append(record_key(r.key.decode("utf-8", "replace"), action))
        return out
    finally:
        reader.close()


def apply_release(engine, value: bytes | None) -> bool:
    """One releases topic record (``stepwatch actions release``): the held drain it names is let through at the
    next tick. False: this worker holds no such alert (another may). ``ValueError``: not a release record."""
    from stepwatch.models.oncall.budget import parse_release

    ident, by = parse_release(value)
    return engine.oncall.rule("drain_budget").release(ident, by=by)


class Releases:
    """Reads the whole releases topic (every worker: the held alert lives on the one that speaks for its node) into
    ``engine`` (``apply_release``); a component (streams/component.py)."""

    def __init__(self, engine, settings) -> None:
        self._engine, self.settings = engine, settings
        self.topic = settings.kafka.topic(settings.oncall.releases_topic)

    def attach(self, app) -> None:
        app.task(self.read)

    def handle(self, record) -> None:
        try:
            if apply_release(self._engine, record.value):
                log.warning("held drain %s released by a human", record.key)
        except ValueError as exc:
            log.warning("ignored a releases topic record: %s", exc)

    def _create(self) -> None:
        from stepwatch.security import client_config
        from stepwatch.topics import create_topics

        kafka = self.settings.kafka
        create_topics(kafka.bootstrap, [], 1, replication_factor=kafka.replication_factor, compacted=[self.topic],
                      timeout=10, client_config=client_config(self.settings))

    async def read(self) -> None:
        from .topic_reader import read_topic_forever

        try:  # the workers may create topics under the prefix (stepwatch/acls.py); operators only write this one
            await asyncio.get_running_loop().run_in_executor(None, self._create)
        except Exception as exc:  # an existing topic, or one the operator creates: read it all the same
            log.info("could not create %s: %s", self.topic, exc)
        await read_topic_forever(self.settings, self.topic, self.handle, what="releases topic reader")
