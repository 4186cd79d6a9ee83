"""The network layer on the real broker: one worker with the telemetry feed, a job whose all-reduces all
slow down behind one node's port that trained down to half its rate; the comm_slowdown alert on the
alerts topic names that node and port, whether the node's telemetry reaches the worker before the job's
events or after them (tests/streams/test_topic_order.py is the same broker-free)."""

from __future__ import annotations

import time

import pytest

from stepwatch.sim.simulator import SimulationSpec
from stepwatch.sim.telemetry_sim import TelemetryFault, TelemetrySimulator, TelemetrySpec, split_batch
from stepwatch.topics import create_topics

from support import read_alerts, stepwatch_env
from test_telemetry_kafka import TelemetryWorker, publish, rename_nodes

pytestmark = pytest.mark.kafka


@pytest.mark.parametrize("order", ["telemetry first", "events first"])
def test_a_slow_link_behind_every_collective_is_named_on_the_alerts_topic(kafka_bootstrap, topic_prefix, tmp_path,
                                                                         order):
    env = stepwatch_env(kafka_bootstrap, topic_prefix)
    create_topics(kafka_bootstrap, [topic_prefix + n for n in ("events", "alerts", "deadletter", "telemetry")], 1)
    worker = TelemetryWorker(dict(env, STEPWATCH_WORKER_DATADIR=str(tmp_path / "faust")), tmp_path / "worker.log")
    try:
        worker.wait_ready(timeout=90)
        job = "netjob"
        spec = SimulationSpec(job=job, ranks=32, ranks_per_node=8, steps=140, start_time=time.time(),
                              collective_events=True)
        # rank 19 is on node-002: its nearest port trains down to 200 Gb/s, every all-reduce 1.6x slower
        fault = TelemetryFault(kind="rate_down", rank=19, start_step=70, factor=1.0, comm_factor=1.6)
        sim = TelemetrySimulator(spec, TelemetrySpec(faults=(fault,)))
        job_batches, telemetry = [], {}
        for _, batch in sim.steps():
            events, by_node = split_batch(rename_nodes(batch, "net"))
            events = [e for e in events if e.get("phase") != "end"]  # the alert stays open
            if events:
                job_batches.append(events)
            for node, items in by_node.items():
                telemetry.setdefault(node, []).extend(items)
        # Two topics, two consumers: whichever reaches the worker first, the alert ends naming the node (events
        # first: it fires without a cause, then is published again, same id, once the telemetry is in).
        if order == "telemetry first":
            publish(kafka_bootstrap, topic_prefix + "telemetry", telemetry)
        publish(kafka_bootstrap, topic_prefix + "events", {job: job_batches})
        if order == "events first":
            early = read_alerts(kafka_bootstrap, topic_prefix + "alerts", timeout=150,
                                until=lambda alerts: any(a["type"] == "comm_slowdown" for a in alerts))
            assert [a["nodes"] for a in early if a["type"] == "comm_slowdown"][:1] == [[]], worker.log_text()[-3000:]
            publish(kafka_bootstrap, topic_prefix + "telemetry", telemetry)

        def named(alerts):
            return [a for a in alerts if a["type"] == "comm_slowdown" and a["status"] == "firing"
                    and a["nodes"][:1] == ["net-node-002"]]

        alerts = read_alerts(kafka_bootstrap, topic_prefix + "alerts", until=named, timeout=150)
        assert named(alerts), worker.log_text()[-3000:]
        alert = named(alerts)[-1]
        top = alert["evidence"]["suspected_causes"][0]
        assert (top["node"], top["component"]) == ("net-node-002", "mlx5_0/1")
        assert "link_rate" in [e["signal"] for e in top["evidence"]]
        assert "net-node-002" in alert["summary"] and "link rate 200 Gb/s" in alert["summary"]
        # no version of the alert pointed anywhere else
        assert {a["nodes"][0] for a in alerts if a["type"] == "comm_slowdown" and a["nodes"]} == {"net-node-002"}
    finally:
        worker.stop()
