"""End to end on the real broker: simulator -> Kafka -> Faust worker -> alerts topic.

The live tests share one worker per consumer mode (a start per test was 4-6 s on 2 cores), each test under
job names of its own, as one worker judges a cluster's jobs; an alert for a job no test gave it fails.
"""

from __future__ import annotations

import base64
import time
import uuid

import orjson
import pytest
from kafka import KafkaProducer

from conftest import WORKER_CONSUMERS
from support import WorkerProcess, read_alerts, read_all_alerts, run_stepwatch, stepwatch_env

pytestmark = pytest.mark.kafka
#: Module scope: the tests of one consumer mode run together, on that mode's worker.
both_consumers = pytest.mark.parametrize("worker_consumer", WORKER_CONSUMERS, scope="module")


@pytest.fixture(scope="module")
def worker(kafka_bootstrap, worker_consumer, tmp_path_factory):
    """One ``stepwatch worker`` on this module's topics for one consumer mode; killed after the module."""
    prefix = f"t-worker-{worker_consumer}-{uuid.uuid4().hex[:8]}."
    tmp = tmp_path_factory.mktemp(f"worker-{worker_consumer}")
    env = stepwatch_env(kafka_bootstrap, prefix, STEPWATCH_WORKER_CONSUMER=worker_consumer,
                        STEPWATCH_WORKER_DATADIR=str(tmp / "faust"))
    process = WorkerProcess(env, tmp / "worker.log").wait_ready()
    try:
        yield process
    finally:
        process.discard()


#: The jobs given to the shared workers so far: an alert for any other job fails the test that reads it.
JOBS: set[str] = set()


def job_name(what: str) -> str:
    job = f"{what}-{uuid.uuid4().hex[:6]}"
    JOBS.add(job)
    return job


def alerts_topic(worker: WorkerProcess) -> str:
    return worker.env["STEPWATCH_KAFKA_TOPIC_PREFIX"] + "alerts"


def of_job(alerts: list[dict], job: str) -> list[dict]:
    assert {a["job"] for a in alerts} <= JOBS, [(a["job"], a["summary"]) for a in alerts]
    return [a for a in alerts if a["job"] == job]


@both_consumers
def test_straggler_alert_fires_then_resolves_with_the_right_rank(kafka_bootstrap, worker):
    job = job_name("straggler")
    run_stepwatch("simulate", "--job", job, "--ranks", "32", "--steps", "140", "--straggler", "13:40:1.3:90",
                  "--speed", "0", env=worker.env)
    alerts = of_job(read_all_alerts(kafka_bootstrap, alerts_topic(worker),
                                    until=lambda a: any(x["job"] == job and x["status"] == "resolved" for x in a)),
                    job)
    assert [a["status"] for a in alerts] == ["firing", "resolved"], worker.log_text()[-3000:]
    firing, resolved = alerts
    assert firing["type"] == "straggler" and firing["ranks"] == [13] and firing["nodes"] == ["node-001"]
    assert firing["evidence"]["first_step"] == 40
    assert firing["evidence"]["signal"] == "compute_time"
    assert firing["id"] == resolved["id"]
    assert resolved["ends_at"] >= firing["starts_at"]
    assert firing["labels"]["alertname"] == "stepwatch_straggler"


@both_consumers
def test_healthy_run_produces_no_alert(kafka_bootstrap, worker):
    healthy, marker = job_name("healthy"), job_name("marker")
    run_stepwatch("simulate", "--job", healthy, "--ranks", "32", "--steps", "150", "--checkpoint-every", "40",
                  "--speed", "0", env=worker.env)
    # The marker job's straggler proves the worker got past the healthy job's events.
    run_stepwatch("simulate", "--job", marker, "--ranks", "8", "--steps", "40", "--straggler", "2:15:2.0",
                  "--speed", "0", env=worker.env)
    alerts = read_all_alerts(kafka_bootstrap, alerts_topic(worker), until=lambda a: any(x["job"] == marker
                                                                                      for x in a))
    assert [a["job"] for a in of_job(alerts, marker) if a["status"] == "firing"] == [marker]
    assert not of_job(alerts, healthy)


@both_consumers
def test_bad_input_is_dead_lettered_and_the_worker_goes_on(kafka_bootstrap, worker):
    garbage, after = job_name("garbage"), job_name("after-garbage")
    prefix = worker.env["STEPWATCH_KAFKA_TOPIC_PREFIX"]
    producer = KafkaProducer(bootstrap_servers=kafka_bootstrap)
    events_topic = prefix + "events"
    far_future = {"v": 1, "kind": "step", "job": garbage, "rank": 0, "step": 1, "ts": time.time() + 10 * 86_400,
                  "step_time": 1.0}
    bad_messages = [b"{not json", b"[1,2,3]", orjson.dumps({"v": 1, "kind": "step", "job": garbage}),
                    orjson.dumps({"v": 9, "kind": "step"}), b"\xff\xfe\x00", orjson.dumps(far_future)]
    for raw in bad_messages:
        producer.send(events_topic, key=garbage.encode(), value=raw)
    producer.flush()
    producer.close()
    # After the garbage, a real straggler must still be found.
    run_stepwatch("simulate", "--job", after, "--ranks", "8", "--steps", "40", "--straggler", "5:15:2.0",
                  "--speed", "0", env=worker.env)
    alerts = of_job(read_alerts(kafka_bootstrap, alerts_topic(worker), until=lambda a: any(x["job"] == after
                                                                                          for x in a)), after)
    assert alerts and alerts[0]["ranks"] == [5]

    # Only this test sends the worker bad input: its dead letters are these, exactly (quiet: none after them).
    dead = read_all_alerts(kafka_bootstrap, prefix + "deadletter", until=lambda d: len(d) >= len(bad_messages),
                           quiet=2.0)
    assert len(dead) == len(bad_messages)
    assert [base64.b64decode(d["value_b64"]) for d in dead] == bad_messages
    assert all(d["topic"] == events_topic and d["offset"] is not None and d["reason"] for d in dead)
    assert "malformed JSON" in dead[0]["reason"]
    assert "missing required field" in dead[2]["reason"]
    assert "ahead of the worker's clock" in dead[5]["reason"] and dead[5]["event"]["step"] == 1
    assert worker.proc.poll() is None  # still running


def test_replay_of_a_recording_names_the_same_straggler(tmp_path):
    recording = tmp_path / "run.jsonl"
    run_stepwatch("simulate", "--ranks", "64", "--steps", "200", "--straggler", "42:60:1.15", "--seed", "3",
                  "--out", str(recording), env=stepwatch_env("unused:1", "x."))
    first = run_stepwatch("replay", str(recording), env=stepwatch_env("unused:1", "x."))
    second = run_stepwatch("replay", str(recording), env=stepwatch_env("unused:1", "x."))
    alerts = [orjson.loads(line) for line in first.stdout.splitlines()]
    assert first.stdout == second.stdout
    assert [(a["status"], a["ranks"]) for a in alerts] == [("firing", [42]), ("resolved", [42])]
    assert "1 alerts" not in first.stderr and "2 alerts" in first.stderr

    healthy = tmp_path / "healthy.jsonl"
    run_stepwatch("simulate", "--steps", "500", "--checkpoint-every", "100", "--out", str(healthy),
                  env=stepwatch_env("unused:1", "x."))
    assert run_stepwatch("replay", str(healthy), env=stepwatch_env("unused:1", "x.")).stdout == ""


def test_cli_errors_are_clear(tmp_path):
    env = stepwatch_env("", "x.")
    env.pop("KAFKA_BOOTSTRAP")
    result = run_stepwatch("simulate", "--steps", "5", env=env, check=False)
    assert result.returncode != 0 and "no Kafka configured" in result.stderr
    result = run_stepwatch("simulate", "--straggler", "nonsense", "--out", "-", env=env, check=False)
    assert result.returncode == 2 and "RANK:START_STEP" in result.stderr
    result = run_stepwatch("replay", str(tmp_path / "missing.jsonl"), env=env, check=False)
    assert result.returncode != 0 and "no such file" in result.stderr
    result = run_stepwatch("replay", "-", env=dict(env, STEPWATCH_STRAGGLER_WINDOW="x"), check=False, input="")
    assert result.returncode == 2 and "STEPWATCH_STRAGGLER_WINDOW" in result.stderr


def test_demo_command_shows_the_straggler_and_its_resolution(kafka_bootstrap, topic_prefix):
    # The README's first command, here on the session's broker (KAFKA_BOOTSTRAP set: nothing started).
    result = run_stepwatch("demo", "--ranks", "16", "--steps", "120", "--speed", "40", "--timeout", "90",
                           env=stepwatch_env(kafka_bootstrap, topic_prefix), timeout=180)
    out = result.stdout
    assert "FIRING" in out and "RESOLVED" in out, out
    assert "rank 15 on node node-001" in out
    assert out.index("FIRING") < out.index("RESOLVED")
    assert "done: the straggler was flagged and then resolved" in out
