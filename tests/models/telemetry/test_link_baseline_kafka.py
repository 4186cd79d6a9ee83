"""Persistent link baselines on the real broker (streams/link_baselines.py): a worker learns two nodes'
ports from the telemetry topic and writes their baselines to the compacted ``link-baselines`` topic;
after it stops, a new worker that cannot see that telemetry any more reads the baselines back and goes
on learning from where the first one stopped."""

from __future__ import annotations

import time

import pytest

from support import read_alerts
from test_telemetry_kafka import publish

pytestmark = pytest.mark.kafka

NODES = ("lb-node-a", "lb-node-b")


def samples(t0: float, first: int, count: int) -> dict[str, list[dict]]:
    """``count`` one-second link samples per node (two ports each), from sample ``first`` on."""
    out: dict[str, list[dict]] = {}
    for node in NODES:
        for k in range(first, first + count):
            for dev in ("mlx5_0", "mlx5_1"):
                out.setdefault(node, []).append({
                    "v": 1, "kind": "link", "node": node, "ts": t0 + k, "device": dev, "port": 1,
                    "state": "ACTIVE", "rate": 400.0, "link_layer": "InfiniBand",
                    "counters": {"port_xmit_data": 10**9 * k, "port_rcv_data": 10**9 * k,
                                 "port_xmit_wait": 200_000 * k, "symbol_error": 0, "link_error_recovery": 0}})
    return out


def learned(records: list[dict], node: str) -> tuple[int, float]:
    """From the latest record of ``node``: samples of mlx5_0/1's link rate, and its transmit wait baseline."""
    mine = [r for r in records if r.get("node") == node]
    if not mine:
        return 0, 0.0
    stats = mine[-1]["components"].get("mlx5_0/1", {}).get("stats", {})
    return stats.get("link_rate", [0, 0, 0])[2], stats.get("xmit_wait", [0.0])[0]


def test_baselines_are_written_and_a_restarted_worker_reads_them_back(kafka_bootstrap, topic_prefix, start_worker):
    topic = topic_prefix + "link-baselines"
    env = dict(STEPWATCH_KAFKA_PARTITIONS="1", STEPWATCH_TELEMETRY_LINK_BASELINE_PUBLISH_INTERVAL="0.5",
               STEPWATCH_TELEMETRY_LINK_BASELINE_MIN_SAMPLES="5")
    first = start_worker(**env)
    t0 = time.time() - 120.0  # the nodes' own clock
    publish(kafka_bootstrap, topic_prefix + "telemetry", samples(t0, 0, 40))
    published = time.monotonic()
    records = read_alerts(kafka_bootstrap, topic, timeout=90,
                          until=lambda rs: all(learned(rs, n)[0] >= 40 for n in NODES))
    assert all(learned(records, n)[0] == 40 for n in NODES), first.log_text()[-3000:]
    assert all(learned(records, n)[1] == pytest.approx(200_000, rel=0.01) for n in NODES)
    assert first.stop() == 0

    # The second worker's telemetry feed starts 15 s back: the first 40 samples are out of its sight.
    while time.monotonic() - published < 17.0:
        time.sleep(0.2)
    second = start_worker(**env, STEPWATCH_TELEMETRY_FEED_LOOKBACK_SECONDS="15")
    deadline = time.monotonic() + 60
    while "link baselines: read" not in second.log_text() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert "link baselines: read" in second.log_text(), second.log_text()[-3000:]
    publish(kafka_bootstrap, topic_prefix + "telemetry", samples(t0, 40, 10))
    records = read_alerts(kafka_bootstrap, topic, timeout=90,
                          until=lambda rs: all(learned(rs, n)[0] >= 50 for n in NODES))
    # 40 samples learned by the first worker + 10 by the second: it went on from the record it read back
    assert all(learned(records, n)[0] == 50 for n in NODES), (
        [learned(records, n) for n in NODES], second.log_text()[-3000:])
    assert all(learned(records, n)[1] == pytest.approx(200_000, rel=0.01) for n in NODES)
