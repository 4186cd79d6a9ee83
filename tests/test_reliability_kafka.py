"""Faults around the worker: broker outage while producer and worker run."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from stepwatch.localkafka import LocalKafka
from support import REPO, WorkerProcess, read_alerts, stepwatch_env

pytestmark = pytest.mark.kafka


@pytest.fixture
def own_broker():
    """A broker of this test's own: it is stopped and restarted, so not the session's."""
    broker = LocalKafka().start()
    try:
        yield broker
    finally:
        broker.stop()


def test_broker_outage_producer_and_worker_recover_without_restart(own_broker, topic_prefix, tmp_path):
    env = stepwatch_env(own_broker.bootstrap, topic_prefix, STEPWATCH_WORKER_DATADIR=str(tmp_path / "faust"))
    worker = WorkerProcess(env, tmp_path / "worker.log")
    simulator = None
    try:
        worker.wait_ready()
        # ~35 s of simulated training at 10x; the straggler starts after the outage.
        simulator = subprocess.Popen(
            [sys.executable, "-m", "stepwatch.cli", "simulate", "--job", "outage", "--ranks", "16", "--steps",
             "330", "--straggler", "9:230:1.5", "--speed", "10"],
            env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        time.sleep(6)
        own_broker.restart(down_for=8)  # the broker is gone for 8 s, then back on the same port
        assert simulator.poll() is None, "the producer must survive the outage"
        _, sim_err = simulator.communicate(timeout=180)
        assert simulator.returncode == 0, sim_err
        assert "dropped" in sim_err  # the producer reports what it could not deliver
        alerts = read_alerts(own_broker.bootstrap, topic_prefix + "alerts",
                             until=lambda a: any(x["job"] == "outage" for x in a), timeout=120)
        assert [(a["status"], a["ranks"]) for a in alerts if a["job"] == "outage"][:1] == [("firing", [9])], \
            worker.log_text()[-3000:]
        assert worker.proc.poll() is None  # never needed a restart
    finally:
        if simulator is not None and simulator.poll() is None:
            simulator.kill()
        worker.stop()
