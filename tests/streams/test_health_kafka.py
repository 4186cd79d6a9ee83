"""/health and a broker that stops answering (issue 44 row 13): ``kill -STOP`` of the broker (connections
still accepted, nothing answered, no client error for 40 s) makes ``/health`` degraded with
``broker_reachable: false`` within seconds, and ``kill -CONT`` makes it ok again (streams/broker_watch.py's
probe). A broker of its own (stopped mid-test, so not the session's). Stalled consumption: test_health_stall.py.
"""

from __future__ import annotations

import os
import signal

import orjson
import pytest

from opsupport import free_port, get

pytestmark = pytest.mark.kafka


def test_a_stopped_broker_makes_health_degraded_and_a_resumed_one_ok_again(topic_prefix, tmp_path):
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
    finally:
        if stopped:
            os.killpg(broker.proc.pid, signal.SIGCONT)
        worker.stop(timeout=60)
        broker.stop()
