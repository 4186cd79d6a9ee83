"""Faults around the worker: broker outage while producer and worker run."""

from __future__ import annotations

import subprocess
import sys

import pytest

from stepwatch.localkafka import LocalKafka
from conftest import WORKER_CONSUMERS
from support import REPO, WorkerProcess, group_caught_up, group_offsets, read_alerts, read_all_alerts, \
    stepwatch_env, topic_messages, wait_until

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
        # The outage starts once the run is well under way (its first 50 steps are in the topic).
        wait_until(lambda: topic_messages(own_broker.bootstrap, topic_prefix + "events") >= 50, timeout=120,
                   what="the simulator's first steps", interval=0.5)
        own_broker.restart(down_for=8)  # the broker is gone for 8 s, then back on the same port
        assert simulator.poll() is None, "the producer must survive the outage"
        _, sim_err = simulator.communicate(timeout=180)
        assert simulator.returncode == 0, sim_err
        assert "dropped" in sim_err  # the producer reports what it could not deliver
        alerts = read_alerts(own_broker.bootstrap, topic_prefix + "alerts",
                             until=lambda a: any(x["job"] == "outage" and x["type"] == "straggler" for x in a),
                             timeout=120)
        # The simulator waits through the outage (the publisher's wait mode) and catches up after it, so
        # the worker may also see a hang warning for the job while nothing arrives; the straggler is the subject.
        straggler = [(a["status"], a["ranks"]) for a in alerts if a["job"] == "outage" and a["type"] == "straggler"]
        assert straggler[:1] == [("firing", [9])], \
            worker.log_text()[-3000:]
        assert worker.proc.poll() is None  # never needed a restart
    finally:
        if simulator is not None and simulator.poll() is None:
            simulator.kill()
        worker.discard()  # the test is over: no graceful stop to wait for


def _publish(bootstrap: str, topic: str, spec, *, drop_end: bool = True) -> None:
    from stepwatch.producers.publisher import EventPublisher
    from stepwatch.sim.simulator import ClusterSimulator

    with EventPublisher(bootstrap=bootstrap, topic=topic) as publisher:
        for _, batch in ClusterSimulator(spec).steps():
            if drop_end:
                batch = [e for e in batch if e.get("phase") != "end"]
            publisher.send(spec.job, batch)


#: Each consumer killed mid-stream and restarted as itself, and the switch from a killed Faust agent to the default.
KILL_RESTART = [(mode, mode) for mode in WORKER_CONSUMERS] + [("faust", "aiokafka")]
assert {mode for pair in KILL_RESTART for mode in pair} == set(WORKER_CONSUMERS)


@pytest.mark.parametrize("worker_consumer, restart_consumer", KILL_RESTART)
def test_worker_killed_mid_stream_resumes_without_duplicate_firing(kafka_bootstrap, topic_prefix, start_worker,
                                                                   worker_consumer, restart_consumer):
    """Also across a switch of STEPWATCH_WORKER_CONSUMER: the aiokafka consumer's new group starts where
    the Faust agent's group left off."""
    from stepwatch.sim.simulator import SimulationSpec, StragglerFault

    events_topic, alerts_topic = topic_prefix + "events", topic_prefix + "alerts"
    # The first worker commits nothing by time during the test (an hour apart): it is killed between
    # processing and committing, the worst case for at-least-once.
    worker = start_worker(STEPWATCH_WORKER_COMMIT_INTERVAL="3600")
    # Job A: rank 7 turns slow at step 30 and stays slow; the job goes on (no end yet).
    first = SimulationSpec(job="job-a", ranks=16, steps=120, start_time=1_700_000_000.0,
                           stragglers=(StragglerFault(rank=7, start_step=30, factor=1.4),))
    _publish(kafka_bootstrap, events_topic, first)
    fired = read_all_alerts(kafka_bootstrap, alerts_topic, until=lambda a: bool(a))
    assert [(a["status"], a["job"], a["ranks"]) for a in fired] == [("firing", "job-a", [7])]
    # The alert proves the worker processed job A past step 30; its group's committed offsets are still
    # behind what it read, so the restarted worker must read those events again.
    group = topic_prefix.rstrip(".") + "-worker" + ("" if worker_consumer == "faust" else "-events")
    committed, end = group_offsets(kafka_bootstrap, group, events_topic)
    assert committed < end, f"group {group} committed {committed} of {end}: the kill would not test a re-read"
    worker.proc.kill()  # SIGKILL: no shutdown, no last commit
    worker.proc.wait()

    # While the worker is down: job A's straggler recovers, and job B gets one.
    end_a = 1_700_000_000.0 + 130
    _publish(kafka_bootstrap, events_topic, SimulationSpec(job="job-a", ranks=16, steps=80, first_step=120,
                                                           warmup_steps=0, start_time=end_a, seed=1))
    _publish(kafka_bootstrap, events_topic, SimulationSpec(
        job="job-b", ranks=8, steps=80, start_time=end_a, stragglers=(StragglerFault(rank=3, start_step=30,
                                                                                     factor=1.5),)))
    restarted = start_worker(STEPWATCH_WORKER_CONSUMER=restart_consumer)

    def done(alerts):
        return any(a["job"] == "job-a" and a["status"] == "resolved" for a in alerts) and \
            any(a["job"] == "job-b" for a in alerts)

    alerts = read_all_alerts(kafka_bootstrap, alerts_topic, until=done, timeout=120)
    # Exactly these: job-a's straggler resolved under its first id (no second firing), job-b's straggler,
    # nothing else (the rebuilt jobs are judged on their own clock: tests/streams/test_recovery_clock.py).
    job_a = [(a["status"], a["type"], a["id"]) for a in alerts if a["job"] == "job-a"]
    assert job_a == [("firing", "straggler", fired[0]["id"]), ("resolved", "straggler", fired[0]["id"])], \
        restarted.log_text()[-3000:]
    assert [(a["status"], a["type"], a["ranks"]) for a in alerts if a["job"] == "job-b"] == \
        [("firing", "straggler", [3])]
    assert {a["job"] for a in alerts} == {"job-a", "job-b"}
    assert "recovered partitions" in restarted.log_text()
    # The restarted worker read everything from the committed offsets on (the re-read events included)
    # and commits it; no alert id fires twice.
    restart_group = topic_prefix.rstrip(".") + "-worker" + ("" if restart_consumer == "faust" else "-events")
    wait_until(lambda: group_caught_up(kafka_bootstrap, restart_group, events_topic), timeout=60,
               what=f"group {restart_group} to commit the end of {events_topic}", interval=0.5)
    firing_ids = [a["id"] for a in alerts if a["status"] == "firing"]
    assert len(firing_ids) == len(set(firing_ids)), alerts


def _rss_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS")


def test_burst_builds_lag_that_drains_and_memory_stays_bounded(kafka_bootstrap, topic_prefix, start_worker,
                                                               worker_consumer):
    from stepwatch.sim.simulator import SimulationSpec, StragglerFault

    worker = start_worker()
    events_topic, alerts_topic = topic_prefix + "events", topic_prefix + "alerts"
    # Nominal: one 64-rank job. Then a burst far above it: 12 jobs' worth of history at once.
    _publish(kafka_bootstrap, events_topic, SimulationSpec(job="nominal", ranks=64, steps=100), drop_end=False)
    group = topic_prefix.rstrip(".") + "-worker" + ("" if worker_consumer == "faust" else "-events")
    wait_until(lambda: group_caught_up(kafka_bootstrap, group, events_topic), timeout=120,
               what="the worker to consume the nominal job", interval=0.5)
    rss_before = _rss_bytes(worker.proc.pid)
    for i in range(12):
        _publish(kafka_bootstrap, events_topic, SimulationSpec(job=f"burst-{i}", ranks=64, steps=150, seed=i),
                 drop_end=False)
    # A problem behind the burst is still found once the lag has drained.
    _publish(kafka_bootstrap, events_topic, SimulationSpec(job="after-burst", ranks=8, steps=50,
                                                           stragglers=(StragglerFault(rank=2, start_step=20,
                                                                                      factor=1.5),)))
    alerts = read_all_alerts(kafka_bootstrap, alerts_topic,
                             until=lambda a: any(x["job"] == "after-burst" for x in a), timeout=240)
    assert [(a["job"], a["ranks"]) for a in alerts if a["status"] == "firing"] == [("after-burst", [2])]
    growth = _rss_bytes(worker.proc.pid) - rss_before
    # ~115k events of 13 finished jobs went through; what stays is bounded per job, not per event.
    assert growth < 150 * 2**20, f"worker RSS grew by {growth / 2**20:.0f} MiB"
