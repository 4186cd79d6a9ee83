"""Host signals end to end on the real broker: ``stepwatch agent`` reading a fake /proc publishes
``host`` events; a worker joins them with a simulated job's input-bound straggler."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from stepwatch.producers.publisher import EventPublisher
from stepwatch.sim.simulator import ClusterSimulator, DataStall, SimulationSpec
from stepwatch.topics import create_topics

from procfs_tree import write_procfs
from support import REPO, WorkerProcess, read_alerts, stepwatch_env

pytestmark = pytest.mark.kafka


def host_events(messages: list[dict], node: str) -> list[dict]:
    out = []
    for m in messages:
        for e in (m.get("events", []) if m.get("kind") == "batch" else [m]):
            if e.get("kind") == "host" and e.get("node") == node:
                out.append(e)
    return out


def test_agent_host_events_name_the_io_cause_of_a_straggler(kafka_bootstrap, topic_prefix, tmp_path):
    env = stepwatch_env(kafka_bootstrap, topic_prefix)
    telemetry = topic_prefix + "telemetry"
    create_topics(kafka_bootstrap, [topic_prefix + n for n in ("events", "alerts", "deadletter", "telemetry")], 4)
    node = "hostk-node-001"
    proc = write_procfs(tmp_path / "proc", psi={"io": (1.0, 0.5), "cpu": (3.0, 0.0), "memory": (0.0, 0.0)})
    agent = subprocess.Popen([sys.executable, "-m", "stepwatch.cli", "agent", "--node", node, "--interval", "0.2",
                              "--proc-root", str(proc), "--sysfs-root", str(tmp_path / "sys")], env=env, cwd=REPO,
                             stdout=open(tmp_path / "agent.log", "w"), stderr=subprocess.STDOUT)
    worker = WorkerProcess(dict(env, STEPWATCH_WORKER_DATADIR=str(tmp_path / "faust")), tmp_path / "worker.log")
    try:
        worker.wait_ready(timeout=90)
        # A baseline of normal samples, then the node's IO pressure rises.
        seen = read_alerts(kafka_bootstrap, telemetry, until=lambda m: len(host_events(m, node)) >= 15, timeout=60)
        assert len(host_events(seen, node)) >= 15, (tmp_path / "agent.log").read_text()[-3000:]
        write_procfs(proc, psi={"io": (46.0, 31.0), "cpu": (3.0, 0.0), "memory": (0.0, 0.0)})
        def stalled(messages):
            return sum(e["psi"]["io"]["some_avg10"] >= 40 for e in host_events(messages, node)) >= 5

        assert stalled(read_alerts(kafka_bootstrap, telemetry, timeout=60, until=stalled))

        # The job: rank 11 on that node waits for data from step 40; it ran over the last minute.
        spec = SimulationSpec(job="hostk-job", ranks=16, steps=60, start_time=time.time() - 62, seed=3,
                              effects=(DataStall(rank=11, start_step=40, seconds=0.5),))
        with EventPublisher(bootstrap=kafka_bootstrap, topic=topic_prefix + "events") as publisher:
            for _, batch in ClusterSimulator(spec).steps():
                batch = [dict(e, node=e["node"].replace("node-", "hostk-node-")) if "node" in e else e
                         for e in batch if e.get("phase") != "end"]
                if batch:
                    publisher.send(spec.job, batch)

        def named(alerts):
            return [a for a in alerts if a["type"] == "straggler" and a["status"] == "firing" and 11 in a["ranks"]
                    and any(c["category"] == "host" for c in a["evidence"].get("suspected_causes", []))]

        alerts = read_alerts(kafka_bootstrap, topic_prefix + "alerts", until=named, timeout=120)
        assert named(alerts), worker.log_text()[-4000:]
        alert = named(alerts)[-1]
        assert alert["evidence"]["signal"] == "data_time"
        first = alert["evidence"]["suspected_causes"][0]
        assert (first["category"], first["component"], first["node"]) == ("host", "io_pressure", node)
        assert first["evidence"][0]["some_avg10_peak"] == 46.0
    finally:
        agent.terminate()
        agent.wait(30)
        worker.discard()  # the test is over: no graceful stop to wait for
