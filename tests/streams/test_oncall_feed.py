"""The on-call feed (streams/oncall_feed.py) in memory, no broker: two workers' feeds joined by a list that
stands for the compacted topics. What one worker records reaches the other's ledger and placement view, and
node alerts are spoken only by the node's owner, whatever the assignment (the broker run:
tests/models/oncall/test_oncall_kafka.py)."""

from __future__ import annotations

import asyncio
import logging
import random
import time
from types import SimpleNamespace

from stepwatch.config import Settings
from stepwatch.models.alerts import Alert
from stepwatch.models.detection import DetectionEngine
from stepwatch.models.oncall.ledger import Incident
from stepwatch.streams.oncall_feed import OnCallFeed
from stepwatch.streams.telemetry_feed import partition_of

SETTINGS = Settings.from_env({"KAFKA_BOOTSTRAP": "127.0.0.1:9", "STEPWATCH_KAFKA_PARTITIONS": "4"})


class Topics:
    """The compacted topics, in memory: (topic, key, value) in the order sent."""

    def __init__(self) -> None:
        self.records: list[tuple[str, bytes, bytes | None]] = []

    async def send(self, topic: str, key: bytes, value: bytes | None) -> None:
        self.records.append((topic, key, value))

    def deliver(self, feed: OnCallFeed, start: int = 0) -> None:
        """The records from ``start`` on, read by ``feed`` as its topic readers would."""
        for topic, key, value in self.records[start:]:
            record = SimpleNamespace(key=key, value=value)
            (feed.on_ledger if topic == feed.ledger_topic else feed.on_placement)(record)


def feed(owned, topics: Topics, published: list) -> tuple[OnCallFeed, object]:
    """A worker's feed and its engine's on-call state."""
    async def publish(alerts) -> None:
        published.extend(alerts)

    oncall = DetectionEngine(SETTINGS).oncall
    part = OnCallFeed(oncall, SETTINGS, owned=lambda: owned, publish=publish, send=topics.send)
    part.ready.set()  # the topics exist (``read_topics`` made them)
    return part, oncall


def node_alert(node: str) -> Alert:
    return Alert(id=f"gpu_fault/{node}", status="firing", type="gpu_fault", severity="critical", job="",
                 ranks=(), nodes=(node,), starts_at=1.0, summary="x", evidence={})


def test_node_alerts_are_spoken_by_the_nodes_owner_only_whatever_the_assignment():
    rng = random.Random(7)
    nodes = [f"node-{rng.randrange(10_000):04d}" for _ in range(40)]
    for owned in (None, set(), {0}, {1, 3}, {0, 1, 2, 3}):
        part, _ = feed(owned, Topics(), [])
        for node in nodes:
            expected = owned is None or partition_of(node, 4) in owned
            assert part.speaks_for(node_alert(node)) is expected
            assert part.owns_node(node) is expected
        job_alert = Alert(id="s", status="firing", type="straggler", severity="warning", job="j", ranks=(1,),
                          nodes=(nodes[0],), starts_at=1.0, summary="x", evidence={})
        assert part.speaks_for(job_alert)  # a job's alert goes out from the job's worker


def test_incidents_and_placement_reach_the_other_worker():
    topics, published = Topics(), []
    (a, a_oncall), (b, b_oncall) = feed({0, 1}, topics, published), feed({2, 3}, topics, published)
    now = time.time()  # a live ledger's window ends now (older incidents read back are skipped)
    incidents = [Incident(node=f"node-{i}", id=f"alert-{i}", type="gpu_fault", job=f"job-{i % 3}",
                          starts_at=now - i, failure_class="unknown", jobs=((f"job-{i % 3}", (i,)),))
                 for i in range(6)]
    a_oncall.new_incidents = list(incidents)  # as A's engine records them (models/oncall/oncall.py)
    a_oncall.placement.observe("job-0", 0, "node-0", 0, now)
    a_oncall.placement.observe("job-0", 1, "node-1", 1, now)
    asyncio.run(a.share())
    assert {(t, k) for t, k, _ in topics.records if t == a.ledger_topic} == \
        {(a.ledger_topic, f"{i.node}|{i.id}".encode()) for i in incidents}
    assert [k for t, k, _ in topics.records if t == a.placement_topic] == [b"job-0"]
    topics.deliver(b)
    ledger = b_oncall.ledger
    assert {(node, ident) for node, known in ledger.incidents.items() for ident in known} == \
        {(i.node, i.id) for i in incidents}
    assert b_oncall.placement.nodes_of("job-0") == ["node-0", "node-1"]
    sent = len(topics.records)
    asyncio.run(a.share())  # nothing new: nothing sent again
    assert len(topics.records) == sent


def test_nothing_is_shared_before_the_topics_exist():
    topics = Topics()
    part, oncall = feed({0}, topics, [])
    part.ready.clear()
    oncall.new_incidents = [Incident(node="n", id="i", type="gpu_fault", job="j", starts_at=time.time(),
                                     failure_class="unknown", jobs=(("j", (0,)),))]
    asyncio.run(part.share())
    assert topics.records == [] and len(oncall.new_incidents) == 1  # kept for when they do


def test_bad_records_are_ignored_and_said(caplog):
    part, oncall = feed({0}, Topics(), [])
    with caplog.at_level(logging.WARNING, logger="stepwatch.worker.oncall"):
        for value in (b"{not json", b"[]", b'{"node": "n"}', b"\xff"):
            part.on_ledger(SimpleNamespace(key=b"k", value=value))
            part.on_placement(SimpleNamespace(key=b"k", value=value))
        part.on_ledger(SimpleNamespace(key=b"k", value=None))  # a tombstone: nothing to do
        part.on_placement(SimpleNamespace(key=b"k", value=None))
    assert oncall.ledger.incidents == {}
    assert len([r for r in caplog.records if "ignored a bad" in r.getMessage()]) >= 4


def test_a_pruned_incident_is_tombstoned_by_its_nodes_owner_only():
    rng = random.Random(3)
    for owned in ({0}, {1, 2}, {0, 1, 2, 3}):
        topics = Topics()
        part, oncall = feed(owned, topics, [])
        pruned = [(f"node-{rng.randrange(1000)}", f"alert-{i}") for i in range(30)]
        oncall.ledger.pruned.extend(pruned)  # as the ledger prunes them (models/oncall/ledger.py)
        asyncio.run(part.share())
        assert [(k, v) for _, k, v in topics.records] == \
            [(f"{node}|{ident}".encode(), None) for node, ident in pruned if partition_of(node, 4) in owned]
        assert oncall.ledger.pruned == []
