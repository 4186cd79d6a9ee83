"""The node ledger on the real broker, two workers (issue 16): jobs on different workers add up to one
node_suspect, and a restart of the workers keeps the ledger (the compacted ledger topic)."""

from __future__ import annotations

import json
import time

import pytest

from fleet import Job, agent_reports, job_events
from stepwatch.producers.publisher import EventPublisher
from stepwatch.streams.telemetry_feed import partition_of
from stepwatch.topics import create_topics

from support import WorkerProcess, read_alerts, run_stepwatch, stepwatch_env

pytestmark = pytest.mark.kafka
PARTITIONS = 4


def pick(name: str, partition: int) -> str:
    for i in range(1000):
        candidate = f"{name}-{i}"
        if partition_of(candidate, PARTITIONS) == partition:
            return candidate
    raise AssertionError


def send_jobs(bootstrap: str, topic: str, jobs: list[Job]) -> None:
    with EventPublisher(bootstrap=bootstrap, topic=topic) as publisher:
        for job in jobs:
            events = job_events(job)
            for i in range(0, len(events), 64):
                publisher.send(job.name, events[i:i + 64])


def send_agents(bootstrap: str, topic: str, jobs: list[Job], ts: float) -> None:
    """One GPU sample from each node's agent, keyed by node as the agents send it."""
    with EventPublisher(bootstrap=bootstrap, topic=topic) as publisher:
        for sample in agent_reports(*jobs, ts=ts):
            publisher.send(sample["node"], [sample])
        publisher.flush()


def suspects(alerts: list[dict], node: str) -> list[dict]:
    return [a for a in alerts if a["type"] == "node_suspect" and a["status"] == "firing" and a["nodes"] == [node]]


def test_node_suspect_across_workers_and_restarts(kafka_bootstrap, topic_prefix, tmp_path):
    env = stepwatch_env(kafka_bootstrap, topic_prefix, STEPWATCH_KAFKA_PARTITIONS=str(PARTITIONS))
    create_topics(kafka_bootstrap, [topic_prefix + n for n in ("events", "alerts", "deadletter", "telemetry")],
                  PARTITIONS)
    alerts_topic = topic_prefix + "alerts"

    def start(n: int, tag: str, **extra: str) -> list[WorkerProcess]:
        workers = [WorkerProcess(dict(env, STEPWATCH_WORKER_DATADIR=str(tmp_path / f"faust-{tag}-{i}"), **extra),
                                 tmp_path / f"worker-{tag}-{i}.log") for i in range(n)]
        for w in workers:
            w.wait_ready(timeout=120)
        return workers

    workers = start(2, "a")
    try:
        now = time.time() - 60
        # One job in each events partition, each with its slow GPU 0 on node "bad": with two workers,
        # the stragglers come from both. A second node, "once", is implicated by one job only.
        jobs = [Job(pick("job", p), ["ok1", "bad", f"ok{p}"], step_time=0.05, start=now + p, slow_node="bad",
                    slow_from=30, steps=80) for p in range(PARTITIONS)]
        jobs.append(Job(pick("lone", 0), ["once", "ok7"], step_time=0.05, start=now, slow_node="once", slow_from=30,
                        steps=80))
        names = sorted(j.name for j in jobs[:PARTITIONS])
        send_agents(kafka_bootstrap, topic_prefix + "telemetry", jobs, now - 30)  # only agents speak for nodes
        send_jobs(kafka_bootstrap, topic_prefix + "events", jobs)

        def all_named(alerts):
            found = suspects(alerts, "bad")
            culprits = {a["job"] for a in alerts if a["type"] == "straggler" and a["status"] == "firing"}
            # the verdict and every job's own straggler (published by either worker, in any order)
            return (found and [j["job"] for j in found[-1]["evidence"]["jobs"]] == names
                    and culprits >= set(names) | {jobs[-1].name})

        alerts = read_alerts(kafka_bootstrap, alerts_topic, until=all_named, timeout=150)
        logs = "\n".join(w.log_text()[-3000:] for w in workers)
        assert all_named(alerts), logs
        stragglers = [a for a in alerts if a["type"] == "straggler" and a["status"] == "firing"]
        assert {a["job"] for a in stragglers} == set(names) | {jobs[-1].name}
        # the culprits' incidents came from both workers
        by_worker = [{a["job"] for a in stragglers if any(f" {a['id']}:" in line and "alert firing" in line
                                                           for line in w.log_text().splitlines())} for w in workers]
        assert all(by_worker), by_worker
        found = suspects(alerts, "bad")
        assert len({a["id"] for a in found}) == 1  # one problem, updated as jobs add up
        assert found[-1]["labels"]["scope"] == "device"
        # a warning verdict's action follows the escalation ladder (models/oncall/ladder.py; tests/models/oncall/test_ladder.py)
        assert found[-1]["evidence"]["action"]["kind"] == found[-1]["evidence"]["decision"]["step"]
        assert suspects(alerts, "once") == []
        # each version published by one worker only: the node's owner
        owners = [i for i, w in enumerate(workers) if f" {found[-1]['id']}:" in w.log_text()]
        assert len(owners) == 1, owners
    finally:
        for w in workers:
            w.stop()

    # Restart: new worker processes read the ledger back; one more job on "once" makes it suspect. They
    # replay no events history (recovery off), so the first job's incident can only come from the ledger.
    workers = start(2, "b", STEPWATCH_WORKER_RECOVERY_MESSAGES="0")
    try:
        again = Job(pick("late", 1), ["once", "ok8"], step_time=0.05, start=time.time() - 20, slow_node="once",
                    slow_from=30, steps=80)
        send_agents(kafka_bootstrap, topic_prefix + "telemetry", [again], time.time() - 30)
        send_jobs(kafka_bootstrap, topic_prefix + "events", [again])

        def once_named(alerts):
            found = suspects(alerts, "once")
            return found and {j["job"] for j in found[-1]["evidence"]["jobs"]} == {jobs[-1].name, again.name}

        alerts = read_alerts(kafka_bootstrap, alerts_topic, until=once_named, timeout=150)
        assert once_named(alerts), "\n".join(w.log_text()[-3000:] for w in workers)
    finally:
        for w in workers:
            w.stop()

    # stepwatch report, from the alerts topic itself
    report = json.loads(run_stepwatch("report", "--json", env=env).stdout)
    assert report["by_type"]["node_suspect"]["count"] == 2
    assert report["by_type"]["straggler"]["count"] >= PARTITIONS + 2  # a culprit in each job
    worst = {row["node"]: row for row in report["nodes"]}
    assert report["nodes"][0]["node"] == "bad" and worst["bad"]["jobs"] == names
    assert worst["once"]["jobs"] == sorted([jobs[-1].name, again.name])
