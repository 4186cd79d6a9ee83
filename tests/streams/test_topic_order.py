"""Live equals replay whatever the interleaving of the events and telemetry topics (issue 25), broker-free.

A job's events and its nodes' telemetry travel on two topics, read by two consumers at their own pace: the
job's comm_slowdown alert can fire before the worker has seen the telemetry that names its cause. The
alert is then re-enriched on the next ticks as the telemetry arrives, and published again (same id) once it
names the node and port, so that its last version is the one replay of the merged recording gives
(tests/models/telemetry/test_network_kafka.py is the same job on the real broker).
"""

from __future__ import annotations

import orjson
import pytest

from stepwatch.models.pipeline import TELEMETRY_ROAD, Message, Pipeline
from stepwatch.models.wire.wire import WIRE_VERSION
from stepwatch.sim.simulator import SimulationSpec
from stepwatch.sim.telemetry_sim import TelemetryFault, TelemetrySimulator, TelemetrySpec, split_batch

from test_telemetry_kafka import rename_nodes

T0 = 1_764_000_000.0
NODE, PORT = "net-node-002", "mlx5_0/1"
#: Telemetry records the live worker applies per timer run at most (streams/telemetry_feed.py's drain).
DRAIN = 2_000


def simulation() -> tuple[list[Message], list[Message]]:
    """A 32-rank job whose all-reduces slow down 1.6x behind rank 19's port (on net-node-002) trained down
    to 200 Gb/s at step 70: its events (one batch message per step, no end) and its nodes' telemetry."""
    spec = SimulationSpec(job="netjob", ranks=32, ranks_per_node=8, steps=140, start_time=T0, collective_events=True)
    fault = TelemetryFault(kind="rate_down", rank=19, start_step=70, factor=1.0, comm_factor=1.6)
    events, telemetry = [], []
    for _, batch in TelemetrySimulator(spec, TelemetrySpec(faults=(fault,))).steps():
        job_events, by_node = split_batch(rename_nodes(batch, "net"))
        job_events = [e for e in job_events if e.get("phase") != "end"]  # the alert stays open
        if job_events:
            value = orjson.dumps({"kind": "batch", "v": WIRE_VERSION, "events": job_events})
            events.append(Message(value, b"netjob", "events", 0, len(events)))
        for node, items in by_node.items():
            telemetry.extend(Message(orjson.dumps(e), node.encode(), "telemetry", 0) for e in items)
    telemetry.sort(key=lambda m: m.key)  # as published node by node (tests/models/telemetry/test_network_kafka.py)
    return events, telemetry


def run(order: str) -> list:
    """The comm_slowdown versions a live worker publishes when the two topics reach it in ``order``: a
    timer tick a second, the telemetry applied ``DRAIN`` records per tick as the live feed does."""
    events, telemetry = simulation()
    pipeline = Pipeline()
    now = T0
    published = []

    def feed_events(messages):
        published.extend(pipeline.feed(messages, arrival=now).alerts)

    def feed_telemetry(messages):
        nonlocal now
        for lo in range(0, len(messages), DRAIN):
            published.extend(pipeline.feed(messages[lo:lo + DRAIN], arrival=now, road=TELEMETRY_ROAD).alerts)
            now += 1.0
            published.extend(pipeline.tick(now).alerts)

    if order == "telemetry first":
        feed_telemetry(telemetry)
        feed_events(events)
    elif order == "events first":
        feed_events(events)
        published.extend(pipeline.tick(now + 1.0).alerts)  # fired and published before any telemetry
        feed_telemetry(telemetry)
    elif order == "half the telemetry first":
        half = len(telemetry) // 2  # the faulty node's telemetry is in the second half
        feed_telemetry(telemetry[:half])
        feed_events(events)
        feed_telemetry(telemetry[half:])
    else:  # interleaved: a step's events, then some telemetry
        per = len(telemetry) // len(events) + 1
        for i, message in enumerate(events):
            feed_events([message])
            feed_telemetry(telemetry[i * per:(i + 1) * per])
    for _ in range(3):
        now += 1.0
        published.extend(pipeline.tick(now).alerts)
    return [a for a in published if a.type == "comm_slowdown"]


def last_version(alerts) -> tuple:
    a = alerts[-1]
    top = a.evidence["suspected_causes"][0]
    return a.id, a.status, a.nodes[:1], (top["node"], top["component"], top["evidence"][0]["signal"])


@pytest.fixture(scope="module")
def reference():
    alerts = run("telemetry first")
    assert alerts and last_version(alerts)[1:] == ("firing", (NODE,), (NODE, PORT, "link_rate")), alerts
    return alerts


@pytest.mark.parametrize("order", ["events first", "half the telemetry first", "interleaved"])
def test_the_alert_names_the_node_and_port_whatever_the_order_of_the_two_topics(order, reference):
    alerts = run(order)
    assert alerts, "no comm_slowdown alert"
    # the last version is what the worker would publish had the telemetry come first (and what replay gives)
    assert last_version(alerts) == last_version(reference)
    assert "link rate 200 Gb/s" in alerts[-1].summary and NODE in alerts[-1].summary
    # an update of the one alert, never another node
    assert {a.id for a in alerts} == {reference[-1].id}
    assert {a.nodes[0] for a in alerts if a.nodes} == {NODE}
