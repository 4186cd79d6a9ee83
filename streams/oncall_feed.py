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
"""

from __future__ import annotations

import asyncio
import logging
import time

import orjson

from stepwatch.config import Settings
from stepwatch.models.oncall.ledger import Incident

from .telemetry_feed import partition_of
from .topic_reader import read_topic_forever

log = logging.getLogger("stepwatch.worker.oncall")


def install_oncall(app, engine, settings: Settings, *, owned, publish, interval: float = 1.0):
    """Share placement and incidents through Kafka; returns ``speaks_for(alert) -> bool``.

    ``owned()``: this worker's events partitions (None: unknown, then it speaks for every node);
    ``publish``: the worker's alert publisher (for node_suspect verdicts caused by other workers' incidents).
    """
    kafka = settings.kafka
    oncall = engine.oncall
    n_partitions = kafka.partitions
    ledger_topic = kafka.topic(settings.oncall.ledger_topic)
    placement_topic = kafka.topic(settings.oncall.placement_topic)
    ledger_out = app.topic(ledger_topic, value_serializer="raw", key_serializer="raw")
    placement_out = app.topic(placement_topic, value_serializer="raw", key_serializer="raw")
    ready = asyncio.Event()

    def owns_node(node: str) -> bool:
        mine = owned()
        return mine is None or partition_of(node, n_partitions) in mine

    oncall.ledger.owns = owns_node
    # A live worker's window ends now (wall clock), not at the newest incident: incidents read back from
    # the topic, or replayed from old recordings, that are already out of the window never fire.
    oncall.ledger.clock = max(oncall.ledger.clock, time.time())

    def speaks_for(alert) -> bool:
        """Node alerts (no job) go out from the node's owner only."""
        if alert.job or not alert.nodes:
            return True
        return owns_node(alert.nodes[0])

    pending: list = []  # alerts caused by records of other workers, published from the timer
    #: The events partitions this worker owned at the last timer run (None: unknown, it spoke for every node).
    seen_owned: dict[str, set[int] | None] = {"partitions": owned()}

    def newly_owned_suspects() -> list:
        """The open node_suspect verdicts of the nodes whose partitions this worker took over since the last run
        (``NodeLedger.took_over``)."""
        mine, before = owned(), seen_owned["partitions"]
        seen_owned["partitions"] = mine
        if mine is None or before is None or mine == before:
            return []
        gained = mine - before
        # through the drain budget, as every alert leaving the outlet (models/oncall/budget.py)
        return oncall.gate(oncall.ledger.took_over(lambda node: partition_of(node, n_partitions) in gained))

    def on_ledger(record) -> None:
        if record.value is None:
            return  # a tombstone: the incident left the window (the ledger prunes it by itself)
        try:
            incident = Incident.from_dict(orjson.loads(record.value))
        except Exception as exc:
            log.warning("ignored a bad ledger record: %s", exc)
            return
        pending.extend(oncall.add_incident(incident))

    def on_placement(record) -> None:
        if record.value is None:
            return
        try:
            oncall.merge_placement(orjson.loads(record.value))
        except Exception as exc:
            log.warning("ignored a bad placement record: %s", exc)

    @app.task
    async def oncall_topics() -> None:
        from stepwatch.security import client_config
        from stepwatch.topics import create_topics

        await asyncio.get_running_loop().run_in_executor(None, lambda: create_topics(
            kafka.bootstrap, [], n_partitions, replication_factor=kafka.replication_factor,
            compacted=[ledger_topic, placement_topic], client_config=client_config(settings)))
        ready.set()
        await asyncio.gather(
            read_topic_forever(settings, ledger_topic, on_ledger, what="ledger topic reader"),
            read_topic_forever(settings, placement_topic, on_placement, what="placement topic reader"))

    @app.timer(interval=interval)
    async def share_oncall() -> None:
        if not ready.is_set():
            return
        incidents, oncall.new_incidents = oncall.new_incidents, []
        for incident in incidents:
            await ledger_out.send(key=f"{incident.node}|{incident.id}".encode(),
                                  value=orjson.dumps(incident.to_dict()))
        for node, ident in oncall.ledger.pruned:
            if owns_node(node):
                await ledger_out.send(key=f"{node}|{ident}".encode(), value=None)
        oncall.ledger.pruned.clear()
        changed, oncall.placement.changed = oncall.placement.changed, set()
        for job in sorted(changed):
            snapshot = oncall.placement.snapshot(job)
            if snapshot is not None:
                await placement_out.send(key=job.encode(), value=orjson.dumps(snapshot))
        # The placement records read may have put a job on a node with an open fault: finish() re-publishes.
        out, pending[:] = list(pending), []
        out.extend(newly_owned_suspects())
        out.extend(a for a in oncall.finish([]) if speaks_for(a))
        if out:
            await publish(out)

    return speaks_for
