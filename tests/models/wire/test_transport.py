"""The producer transport (producers/transport.py) without a broker: modes, bounds, settings, problems."""

from __future__ import annotations

import logging
import threading
import time

import pytest

from stepwatch.config import KafkaSettings, SecuritySettings, Settings
from stepwatch.producers.monitor import RankMonitor
from stepwatch.producers.transport import DROP, WAIT, Transport, security_from_env


def closed_port() -> str:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{s.getsockname()[1]}"


class GatedSink:
    """A sink that takes nothing until opened: the transport's queue fills as with a stalled broker."""

    def __init__(self) -> None:
        self.gate = threading.Event()
        self.got: list[tuple[str, list]] = []

    def __call__(self, key, events) -> None:
        self.gate.wait(30)
        self.got.append((key, [e["n"] for e in events]))


def test_drop_mode_drops_the_oldest_and_never_waits():
    sink = GatedSink()
    t = Transport(topic="t", settings=Settings(), mode=DROP, queue_size=4, flush_interval=0.01, sink=sink)
    t.offer("k", [{"n": 0}])
    deadline = time.monotonic() + 10
    while t.stats()["in_flight"] == 0 and time.monotonic() < deadline:  # the sender holds offer 0 in the sink
        time.sleep(0.01)
    accepted = [t.offer("k", [{"n": i}]) for i in range(1, 11)]
    assert accepted == [True] * 4 + [False] * 6  # never blocked, said when it dropped
    assert [[e["n"] for e in events] for _, events in t.queued()] == [[7], [8], [9], [10]]  # the freshest kept
    sink.gate.set()
    assert t.flush(10)
    t.close()
    assert [n for _, ns in sink.got for n in ns] == [0, 7, 8, 9, 10]
    assert (t.offered, t.sent, t.dropped) == (11, 5, 6)


def test_wait_mode_waits_for_room_and_drops_nothing():
    sink = GatedSink()
    t = Transport(topic="t", settings=Settings(), mode=WAIT, queue_size=2, flush_interval=0.01, sink=sink)
    done = threading.Event()

    def publish():
        for i in range(8):
            t.offer("k", [{"n": i}])
        done.set()

    threading.Thread(target=publish, daemon=True).start()
    assert not done.wait(0.5)  # waiting: queue and in-flight bound full while the sink is stalled
    sink.gate.set()
    assert done.wait(10)
    t.close(10)
    assert [n for _, ns in sink.got for n in ns] == list(range(8))
    assert (t.offered, t.sent, t.dropped) == (8, 8, 0)


def test_security_comes_from_settings_and_a_bad_value_is_reported_not_raised(caplog):
    env = {"STEPWATCH_SECURITY_PROTOCOL": "SASL_SSL", "STEPWATCH_SECURITY_SASL_USERNAME": "u",
           "STEPWATCH_STRAGGLER_WINDOW": "not-a-number"}  # an unrelated bad value does not matter here
    assert security_from_env(env) == SecuritySettings(protocol="SASL_SSL", sasl_username="u")
    settings = Settings(kafka=KafkaSettings(bootstrap="b:1", topic_prefix="p."),
                        security=SecuritySettings(protocol="SSL"))
    m = RankMonitor(settings=settings, enabled=False, environ={})
    assert (m.config.bootstrap, m.config.topic, m.config.security.protocol) == ("b:1", "p.events", "SSL")
    with caplog.at_level(logging.WARNING, logger="stepwatch.transport"):
        m = RankMonitor(bootstrap=closed_port(), heartbeat_interval=0, close_timeout=1,
                        environ={"STEPWATCH_SECURITY_PROTOCOL": "KERBEROS"})
        with m.step():
            pass
        deadline = time.monotonic() + 10
        while m.transport.errors == 0 and time.monotonic() < deadline:
            time.sleep(0.05)
        m.close()
    lines = [r.getMessage() for r in caplog.records if r.name == "stepwatch.transport"]
    assert len(lines) == 1 and "STEPWATCH_SECURITY_PROTOCOL='KERBEROS'" in lines[0], lines
    assert (m.sent, m.dropped) == (0, m.produced)


def test_producer_config_wins_over_settings():
    t = Transport(topic="t", settings=Settings(), sink=lambda k, e: None, producer_config={"acks": "all"})
    t.close()
    assert t._producer_config == {"acks": "all"}
    with pytest.raises(ValueError):
        Transport(topic="t", settings=Settings(), mode="sometimes")
