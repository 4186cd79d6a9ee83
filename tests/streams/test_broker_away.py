"""The worker while its broker is away, on a broker of the live test's own (stopped and killed mid-test, so
not the session's); the limiter's own tests drive it with a fake clock.

Stopped (issue 44 row 13): ``kill -STOP`` of the broker (connections still accepted, nothing answered, no
client error for 40 s) makes ``/health`` degraded with ``broker_reachable: false`` within seconds, and
``kill -CONT`` makes it ok again (streams/broker_watch.py's probe). Killed (issue 28 item 8): a rate-limited
log, ``/health`` degraded, and a shutdown that ends. Both in one run: one broker and one worker to start.
Stalled consumption: test_health_stall.py.
"""

from __future__ import annotations

import logging
import os
import re
import signal

import pytest

import orjson

from opsupport import free_port, get
from stepwatch.streams.broker_watch import BrokerLogLimiter


def _record(msg: str, *args, name: str = "aiokafka.conn", level: int = logging.ERROR) -> logging.LogRecord:
    return logging.LogRecord(name, level, __file__, 1, msg, args, None)


class _Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_the_limiter_lets_one_record_of_a_kind_through_per_interval_and_says_how_many_it_held():
    clock = _Clock()
    limiter = BrokerLogLimiter(interval=10.0, away_after=15.0, clock=clock)
    assert not limiter.broker_away()
    passed = [limiter.filter(_record("Unable connect to node with id %s: %s", 1, "refused")) for _ in range(300)]
    assert passed == [True] + [False] * 299 and limiter.suppressed == 299
    assert limiter.broker_away()
    assert limiter.filter(_record("Unable to update metadata from %s", [1]))  # another kind: its own first
    clock.now += 10.0
    record = _record("Unable connect to node with id %s: %s", 1, "refused")
    assert limiter.filter(record) and "(299 more like this held back since the last one)" in record.getMessage()
    clock.now += 15.0
    assert not limiter.broker_away()  # nothing about the broker for away_after seconds
    assert limiter.filter(_record("Group joined", name="aiokafka.consumer.group_coordinator", level=logging.INFO))
    assert not limiter.broker_away()


def test_the_limiter_remembers_a_bounded_number_of_kinds():
    from stepwatch.streams import broker_watch

    limiter = BrokerLogLimiter(clock=_Clock())
    for i in range(broker_watch.MAX_KINDS * 3):
        assert limiter.filter(_record(f"message {i}"))
    assert len(limiter._kinds) == broker_watch.MAX_KINDS


@pytest.mark.kafka
def test_broker_stopped_resumed_then_killed_health_follows_the_log_stays_small_the_worker_stops(
        topic_prefix, tmp_path):
    from stepwatch.localkafka import LocalKafka
    from support import WorkerProcess, stepwatch_env, wait_until

    broker = LocalKafka().start()
    port = free_port()
    env = stepwatch_env(broker.bootstrap, topic_prefix, STEPWATCH_WORKER_DATADIR=str(tmp_path / "faust"),
                        STEPWATCH_WORKER_WEB_PORT=str(port))
    worker = WorkerProcess(env, tmp_path / "worker.log")
    health = f"http://127.0.0.1:{port}/health"

    def answer() -> tuple[int, dict]:
        status, body = get(health)
        return status, orjson.loads(body) if body else {}

    stopped = False
    try:
        worker.wait_ready()
        wait_until(lambda: (a := answer())[0] == 200 and a[1]["status"] == "ok", timeout=60, what="/health ok")
        # Stopped: nothing answers, no client error; the probe notices.
        os.killpg(broker.proc.pid, signal.SIGSTOP)
        stopped = True
        status, body = wait_until(lambda: (a := answer())[0] == 503 and a, timeout=60, what="/health degraded",
                                  interval=0.5)
        assert body["status"] == "degraded" and body["broker_reachable"] is False, body
        os.killpg(broker.proc.pid, signal.SIGCONT)
        stopped = False
        status, body = wait_until(lambda: (a := answer())[0] == 200 and a, timeout=90, what="/health ok again",
                                  interval=0.5)
        assert body["status"] == "ok" and body["broker_reachable"] is True, body

        # Killed: the clients' reconnect errors, rate-limited.
        broker.kill()
        wait_until(lambda: get(health)[0] == 503, timeout=60, what="/health degraded", interval=0.5)
        assert b'"status":"degraded"' in get(health)[1]
        # Until the limiter has let a summary through, then: the reconnect errors held back outnumber
        # those printed many times over (without it, every one was printed: ~300 lines a second).
        summary = re.compile(r"Unable connect to node.*\((\d+) more like this held back since the last one\)")
        wait_until(lambda: summary.search(worker.log_text()), timeout=60, what="a held-back summary", interval=0.5)
        text = worker.log_text()
        printed = text.count("Unable connect to node")
        held = sum(int(n) for n in summary.findall(text))
        assert held >= 10 * printed, (printed, held)
    finally:
        if stopped:
            os.killpg(broker.proc.pid, signal.SIGCONT)
        code = worker.stop(timeout=60)  # SIGTERM; SIGKILL only after 60 s
        broker.stop()
    assert code in (0, 1), worker.log_text()[-3000:]  # it ended by itself (SIGKILL would be -9)
