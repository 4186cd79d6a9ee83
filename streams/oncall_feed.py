"""The on-call state workers share: job placement and the node ledger (models/oncall/oncall.py).

Jobs are spread over workers by the events topic's partitions; a node's alerts are published
by the worker that owns the node's partition (the node id hashed as the producers' partitioner
does). So that worker can name the jobs on the node and count a node's incidents across all
jobs, every worker

* writes the placement of the jobs it owns (job -> node -> ranks and GPUs) to the compacted
  ``placement`` topic, keyed by job, whenever it changes (checked every ``interval`` seconds),
  and reads the whole topic (no consumer group) into its ``PlacementView``;
* writes each incident it records (an alert implicating a node) to the compacted ``ledger``
  topic, keyed ``node|alert id``, and reads the whole topic into its ``NodeLedger``; the owner
  of a node sends a tombstone when the incident leaves the window.

A restarted worker reads both topics back from the beginning, so the ledger survives restarts
(incidents already older than the window, by the wall clock, are skipped);
``node_suspect`` and node alerts are published only by the node's owner (``speaks_for``).

A component (streams/component.py): ``OnCallFeed`` is built from the on-call state, the settings and callables
(its partitions, the alert publisher, a ``send`` to Kafka); ``attach(app)`` adds the topic readers and the
timer. A test drives ``on_ledger``/``on_placement``/``share`` in memory (tests/streams/test_oncall_feed.py).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

import orjson

from stepwatch.config import Settings
from stepwatch.models.oncall.ledger import Incident

from .component import Send, app_sender
from .telemetry_feed import partition_of
from .topic_reader import read_topic_forever

log = logging.getLogger("stepwatch.worker.oncall")


class OnCallFeed:
    """Share placement and incidents through Kafka; ``speaks_for(alert)``: whether this worker publishes it.

    ``oncall``: the engine's on-call state (models/oncall/oncall.py); ``owned()``: this worker's events
    partitions (None: unknown, then it speaks for every node); ``publish``: the worker's alert publisher (for
    node_suspect verdicts caused by other workers' incidents); ``send``: one record to a topic (default: the
    app's producer, at ``attach``).
    """

    def __init__(self, oncall, settings: Settings, *, owned: Callable[[], set[int] | None],
                 publish: Callable[[list], Awaitable[None]], send: Send | None = None,
                 interval: float = 1.0) -> None:
        kafka = settings.kafka
        self.settings, self.interval = settings, interval
        self._oncall, self._owned, self._publish, self._send = oncall, owned, publish, send
        self._partitions = kafka.partitions
        self.ledger_topic = kafka.topic(settings.oncall.ledger_topic)
        self.placement_topic = kafka.topic(settings.oncall.placement_topic)
        self.ready = asyncio.Event()  # set once both topics exist
        self._pending: list = []  # alerts caused by records of other workers, published from the timer
        #: The events partitions this worker owned at the last timer run (None: unknown, it spoke for every node).
        self._seen_owned: set[int] | None = owned()
        # The ledger's hooks (models/oncall/ledger.py): which nodes this worker prunes; a live worker's window
        # ends now (wall clock), not at the newest incident: incidents read back from the topic, or replayed
        # from old recordings, that are already out of the window never fire.
        oncall.ledger.owns = self.owns_node
        oncall.ledger.clock = max(oncall.ledger.clock, time.time())

    def attach(self, app) -> None:
        if self._send is None:
            self._send = app_sender(app, self.ledger_topic, self.placement_topic)
        app.task(self.read_topics)
        app.timer(interval=self.interval)(self.share)

    def owns_node(self, node: str) -> bool:
        mine = self._owned()
        return mine is None or partition_of(node, self._partitions) in mine

    def speaks_for(self, alert) -> bool:
        """Node alerts (no job) go out from the node's owner only."""
        if alert.job or not alert.nodes:
            return True
        return self.owns_node(alert.nodes[0])

    def _newly_owned_suspects(self) -> list:
        """The open node_suspect verdicts of the nodes whose partitions this worker took over since the last run
        (``NodeLedger.took_over``)."""
        mine, before = self._owned(), self._seen_owned
        self._seen_owned = mine
        if mine is None or before is None or mine == before:
            return []
        gained = mine - before
        # through the drain budget, as every alert leaving the outlet (models/oncall/budget.py)
        return self._oncall.gate(self._oncall.ledger.took_over(
            lambda node: partition_of(node, self._partitions) in gained))

    def on_ledger(self, record) -> None:
        """One ledger topic record: another worker's (or a past life's) incident."""
        if record.value is None:
            return  # a tombstone: the incident left the window (the ledger prunes it by itself)
        try:
            incident = Incident.from_dict(orjson.loads(record.value))
        except Exception as exc:
            log.warning("ignored a bad ledger record: %s", exc)
            return
        self._pending.extend(self._oncall.add_incident(incident))

    def on_placement(self, record) -> None:
        """One placement topic record: a job's nodes, ranks and GPUs."""
        if record.value is None:
            return
        try:
            self._oncall.merge_placement(orjson.loads(record.value))
        except Exception as exc:
            log.warning("ignored a bad placement record: %s", exc)

    async def read_topics(self) -> None:
        """Make both compacted topics, then read them whole, for ever (no consumer group)."""
        from stepwatch.security import client_config
        from stepwatch.topics import create_topics

        settings, kafka = self.settings, self.settings.kafka
        await asyncio.get_running_loop().run_in_executor(None, lambda: create_topics(
            kafka.bootstrap, [], self._partitions, replication_factor=kafka.replication_factor,
            compacted=[self.ledger_topic, self.placement_topic], client_config=client_config(settings)))
        self.ready.set()
        await asyncio.gather(
            read_topic_forever(settings, self.ledger_topic, self.on_ledger, what="ledger topic reader"),
            read_topic_forever(settings, self.placement_topic, self.on_placement, what="placement topic reader"))

    async def share(self) -> None:
        """The timer: this worker's new incidents, prunes and placement out; alerts they caused published."""
        if not self.ready.is_set():
            return
        oncall, send = self._oncall, self._send
        incidents, oncall.new_incidents = oncall.new_incidents, []
        for incident in incidents:
            await send(self.ledger_topic, f"{incident.node}|{incident.id}".encode(), orjson.dumps(incident.to_dict()))
        for node, ident in oncall.ledger.pruned:
            if self.owns_node(node):
                await send(self.ledger_topic, f"{node}|{ident}".encode(), None)
        oncall.ledger.pruned.clear()
        changed, oncall.placement.changed = oncall.placement.changed, set()
        for job in sorted(changed):
            snapshot = oncall.placement.snapshot(job)
            if snapshot is not None:
                await send(self.placement_topic, job.encode(), orjson.dumps(snapshot))
        # The placement records read may have put a job on a node with an open fault: finish() re-publishes.
        out, self._pending[:] = list(self._pending), []
        out.extend(self._newly_owned_suspects())
        out.extend(a for a in oncall.finish([]) if self.speaks_for(a))
        if out:
            await self._publish(out)
