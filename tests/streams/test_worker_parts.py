"""The drain ledger, the feedback road and the shadow as worker components (streams/component.py), in memory: no
broker, no Faust app. Each is fed from a list that stands for its topic and sends into a capturing sink; the broker
runs are tests/models/oncall/test_drain_ledger.py, tests/streams/test_feedback_kafka.py and
tests/streams/test_shadow_kafka.py."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import random
from types import SimpleNamespace

import orjson
import pytest

from stepwatch.config import Settings
from stepwatch.models.alerts import Alert
from stepwatch.models.detection import DetectionEngine
from stepwatch.models.oncall.budget import DrainBudget, Limits
from stepwatch.models.pipeline import Pipeline
from stepwatch.runtime_config import RuntimeConfig
from streams.component import Component
from streams.drain_ledger import DrainLedgerSync
from streams.feedback_feed import FeedbackRoad
from streams.shadow import ShadowRun

SETTINGS = Settings.from_env({"KAFKA_BOOTSTRAP": "127.0.0.1:9"})


class Topic:
    """A topic in memory: what was sent, in order; ``fail`` sends raise (the broker away)."""

    def __init__(self) -> None:
        self.records: list[tuple[str, bytes, bytes | None]] = []
        self.fail = 0

    async def send(self, topic: str, key: bytes, value: bytes | None) -> None:
        if self.fail:
            self.fail -= 1
            raise ConnectionError("broker away")
        self.records.append((topic, key, value))

    def read(self, start: int = 0) -> list[SimpleNamespace]:
        return [SimpleNamespace(key=k, value=v, partition=0, offset=i)
                for i, (_, k, v) in enumerate(self.records[start:], start)]


class App:
    """What the components register on the Faust app."""

    def __init__(self) -> None:
        self.tasks, self.timers, self.pages = [], [], []

    def task(self, fn):
        self.tasks.append(fn)
        return fn

    def timer(self, interval: float):
        return lambda fn: self.timers.append((interval, fn)) or fn

    def page(self, path: str):
        return lambda cls: self.pages.append(path) or cls

    def topic(self, name: str, **_):
        raise AssertionError("a component given its send makes no topic of the app")


def ask(i: int, node: str, at: float) -> Alert:
    return Alert(id=f"a{i}", status="firing", type="gpu_fault", severity="critical", job="", ranks=(),
                 nodes=(node,), starts_at=at, summary="x", scope="device",
                 evidence={"action": {"kind": "drain_node", "exclude_nodes": [node]}})


# -- the drain ledger ----------------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(4))
def test_the_ledger_carries_every_drain_to_every_other_worker_once_whatever_the_failures(seed):
    rng = random.Random(seed)
    topic = Topic()
    budgets = [DrainBudget(Limits(per_hour=rng.choice((2, 4, 8)), per_job_hour=100, fleet_percent=50.0),
                           seen_nodes=lambda: 100, worker=f"w{w}") for w in range(rng.choice((2, 3)))]
    parts = [DrainLedgerSync(lambda b=b: b, SETTINGS, send=topic.send) for b in budgets]
    read = [0] * len(parts)
    drained = set()
    for i in range(20):
        k = rng.randrange(len(parts))
        for a in budgets[k].gate([ask(i, f"n{i:02d}", 1000.0 + i)]):
            if a.evidence["action"]["kind"] == "drain_node":
                drained.add(a.nodes[0])
        topic.fail = rng.choice((0, 0, 1, 3))  # a flush that fails keeps its records for the next one
        w = rng.randrange(len(parts))
        asyncio.run(parts[w].flush())
        for j, part in enumerate(parts):  # each worker reads the topic as far as it has got
            if rng.random() < 0.5:
                for record in topic.read(read[j]):
                    part.on_record(record)
                read[j] = len(topic.records)
    topic.fail = 0
    for part in parts:
        asyncio.run(part.flush())
    for j, part in enumerate(parts):
        for record in topic.read(read[j]):
            part.on_record(record)
    assert all(not b.outbox for b in budgets)  # nothing lost to the failed sends
    assert {t for t, _, _ in topic.records} == {parts[0].topic}
    assert {k.decode() for _, k, _ in topic.records} == drained
    assert all(b.peer_drains == len(drained) - b.drains for b in budgets)  # the others' once, its own not again


def test_a_ledger_record_it_cannot_read_is_logged_and_skipped(caplog):
    budget = DrainBudget(Limits(per_hour=1, per_job_hour=1, fleet_percent=50.0), seen_nodes=lambda: 10, worker="w")
    part = DrainLedgerSync(lambda: budget, SETTINGS, send=Topic().send)
    with caplog.at_level(logging.WARNING, logger="stepwatch.worker.drain_ledger"):
        for value in (b"{not json", b"[]", b"\xff", b'{"node": 3}', None):
            part.on_record(SimpleNamespace(key=b"n", value=value))
    assert budget.peer_drains == 0
    assert len([r for r in caplog.records if "ignored a drain ledger record" in r.getMessage()]) >= 4


# -- the feedback road ---------------------------------------------------------------------------


def _road(topic: Topic, open_alerts: dict) -> FeedbackRoad:
    return FeedbackRoad(SETTINGS, sink=SimpleNamespace(precision_note=None), lookup=open_alerts.get,
                        send=topic.send)


def test_a_posted_verdict_goes_to_the_topic_and_back_into_the_feed():
    topic = Topic()
    alert = Alert(id="s1", status="firing", type="straggler", severity="warning", job="j", ranks=(1,), nodes=("n",),
                  starts_at=1.0, summary="x")
    road = _road(topic, {"s1": alert})
    status, body = asyncio.run(road.post("s1", b'{"verdict": "false", "by": "alice"}', "application/json"))
    assert status == 201 and body["alert_id"] == "s1" and body["type"] == "straggler"
    assert [(t, k) for t, k, _ in topic.records] == [(road.topic, b"s1")]
    assert not road.feed.verdicts  # counted when read back from the topic, as every worker counts it
    for record in topic.read():
        road.on_record(record)
    assert road.feed.verdicts["s1"].by == "alice" and sum(road.feed.counts.values()) == 1


@pytest.mark.parametrize("body, ctype, expected", [
    (b'{"verdict": "maybe"}', "application/json", 400),
    (b"not json", "application/json", 400),
    (b'{"verdict": "false"}', "application/json", 404),  # not open here and no type named
])
def test_a_bad_post_is_refused_and_nothing_is_written(body, ctype, expected):
    topic = Topic()
    status, answer = asyncio.run(_road(topic, {}).post("unknown", body, ctype))
    assert status == expected and answer["error"] and not topic.records


def test_a_verdict_the_broker_refuses_is_a_503_and_not_counted():
    topic = Topic()
    topic.fail = 1
    road = _road(topic, {})
    status, answer = asyncio.run(road.post("x", b'{"verdict": "confirmed", "type": "hang"}', "application/json"))
    assert status == 503 and "not recorded" in answer["error"] and not topic.records and not road.feed.verdicts


def test_the_feedback_road_registers_a_reader_and_the_page_only_with_a_web_port():
    for port, pages in ((0, []), (6066, ["/alerts/{alert_id}/feedback"])):
        settings = dataclasses.replace(SETTINGS, worker=dataclasses.replace(SETTINGS.worker, web_port=port))
        app = App()
        road = FeedbackRoad(settings, send=Topic().send)
        assert isinstance(road, Component)
        road.attach(app)
        assert app.tasks == [road.read] and app.pages == pages and not app.timers


# -- the shadow ----------------------------------------------------------------------------------


def test_the_shadow_sends_its_waiting_alerts_on_its_timer_and_drops_what_fails():
    topic = Topic()
    live = Pipeline(DetectionEngine(Settings()))
    run = ShadowRun(live, RuntimeConfig(Settings()), send=topic.send, topic="p.shadow-alerts", interval=2.0)
    app = App()
    run.attach(app)
    assert isinstance(run, Component) and app.timers == [(2.0, run.flush)] and not app.tasks
    run.pending.extend((f"a{i}".encode(), orjson.dumps({"id": f"a{i}"})) for i in range(5))
    topic.fail = 2  # counted and dropped, never retried forever
    asyncio.run(run.flush())
    assert not run.pending and [(t, k) for t, k, _ in topic.records] == [("p.shadow-alerts", f"a{i}".encode())
                                                                          for i in range(2, 5)]


def test_the_shadow_keeps_its_alerts_until_it_has_a_send():
    run = ShadowRun(Pipeline(DetectionEngine(Settings())), RuntimeConfig(Settings()))
    run.pending.append((b"a", b"{}"))
    asyncio.run(run.flush())
    assert list(run.pending) == [(b"a", b"{}")]
