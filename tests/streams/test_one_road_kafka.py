"""One road, proven on the real broker (issue 25): a simulation with every event kind and every fault the
simulator has goes to the topics the way its producers send it, a ``stepwatch worker`` turns it into
alerts, and ``stepwatch replay`` of ``stepwatch record``'s capture of the same topics gives the same alerts.

The job's events and its nodes' host and topology events go to the events topic keyed by job, as
``stepwatch simulate`` sends them (the road on which the live worker used to crash on every node event);
the GPU, Xid and link events go to the telemetry topic keyed by node, through the node agent's own
sender (producers/agent.py ``KafkaSender``). Stack answers of the hung rank go with the job's events,
as a rank's monitor sends them (producers/stacks.py). Broker-free parts: tests/models/test_one_road.py.
"""

from __future__ import annotations

import argparse
import base64
import time

import orjson
import pytest

from support import group_caught_up, read_all_alerts, run_stepwatch, wait_until

pytestmark = pytest.mark.kafka

#: What the agent reads on a node (GPUs, NICs); the simulator's host and topology events stand for the
#: node's own view that the simulator sends with the job.
AGENT_KINDS = frozenset({"gpu", "xid", "link"})
#: Hang timeouts short enough for a hang of a few simulated seconds (as tests/streams/test_pipeline_kafka.py).
HANG_ENV = {"STEPWATCH_HANG_TIMEOUT_SECONDS": "8", "STEPWATCH_HANG_WARNING_FLOOR_SECONDS": "3",
            "STEPWATCH_HANG_HEARTBEAT_TIMEOUT_SECONDS": "3"}
#: Simulated seconds per wall second: slow enough that the telemetry feed's timer (0.25 s) keeps up with
#: the job's events on a loaded machine, so live sees the telemetry before the alerts it explains.
SPEED = 2.0
SIMULATE = ["--job", "full", "--ranks", "16", "--steps", "90", "--compute-time", "0.5", "--telemetry",
            "--straggler", "3:20:1.5:60", "--gpu-fault", "xid:9:15", "--link-fault", "ib_errors:5:25",
            "--host-fault", "io:1:30:60", "--comm-fault", "ib_errors:12:40:1.6:70", "--hang", "6:75:20",
            "--collectives-per-step", "2"]


def simulation(start_time: float):
    """``stepwatch simulate``'s own event stream for SIMULATE (its parser and its simulators)."""
    from stepwatch.commands import simulate

    parser = argparse.ArgumentParser()
    simulate.add_parser(parser.add_subparsers())
    args = parser.parse_args(["simulate", *SIMULATE, "--start-time", str(start_time)])
    spec = simulate.build_spec(args)
    from stepwatch.sim.host_sim import HostSimulator

    sim = HostSimulator(spec, tuple(args.host_fault), seed=spec.seed + 2,
                        inner=lambda s: simulate._telemetry_simulator(s, args))
    return spec, simulate._paced(sim.steps(), SPEED)


def stack_answer(job: str, rank: int, ts: float, node: str) -> dict:
    """A hung rank's answer to a stack request (producers/stacks.py ``stack_event``; docs/events.md)."""
    return {"v": 1, "kind": "stack", "job": job, "rank": rank, "ts": ts, "request_id": "proof-1", "node": node,
            "threads": [{"name": "MainThread", "frames": [
                {"file": "train.py", "line": 42, "function": "train_step"},
                {"file": "torch/distributed/distributed_c10d.py", "line": 2050, "function": "all_reduce"}]}]}


def publish(env: dict, start_time: float) -> dict:
    """Send the simulation as its producers would, paced at SPEED; what was sent, by kind."""
    from stepwatch.config import Settings
    from stepwatch.producers.agent import KafkaSender
    from stepwatch.producers.publisher import EventPublisher
    from stepwatch.topics import create_topics, ensure_topics

    settings = Settings.from_env(env)
    k = settings.kafka
    ensure_topics(k)
    telemetry_topic = k.topic(settings.telemetry.topic)
    create_topics(k.bootstrap, [telemetry_topic], k.partitions, replication_factor=k.replication_factor)
    spec, stream = simulation(start_time)
    sent: dict[str, int] = {}
    last_step: float | None = None  # rank 6's latest step event
    answered = False
    agent = KafkaSender(bootstrap=k.bootstrap, topic=telemetry_topic, settings=settings).start()
    with EventPublisher(bootstrap=k.bootstrap, topic=k.topic(k.events_topic)) as job_out:
        for _, batch in stream:
            job_events = [e for e in batch if e["kind"] not in AGENT_KINDS]
            for e in job_events:
                if e["kind"] == "step" and e["rank"] == 6:
                    last_step = e["ts"]
            now = max((e["ts"] for e in batch), default=None)
            if not answered and last_step is not None and now is not None and now - last_step > 10:
                job_events.append(stack_answer(spec.job, 6, now, "node-000"))  # rank 6 hung 10 s: its stack
                answered = True
            if job_events:
                job_out.send_job(spec.job, job_events)
            by_node: dict[str, list[dict]] = {}
            for e in batch:
                if e["kind"] in AGENT_KINDS:
                    by_node.setdefault(e["node"], []).append(e)
            for node, events in by_node.items():
                assert agent.offer(node, events)  # never a full queue at this pace
            for e in job_events + [e for es in by_node.values() for e in es]:
                sent[e["kind"]] = sent.get(e["kind"], 0) + 1
        job_out.flush()
        assert job_out.events_dropped == 0
    agent.close(30.0)
    assert agent.dropped == 0 and agent.failed == 0
    return sent


def _first_cause(alert: dict) -> tuple | None:
    causes = alert["evidence"].get("suspected_causes") or []
    return (causes[0]["category"], causes[0].get("node"), causes[0].get("component")) if causes else None


def _view(alerts: list[dict]) -> dict[tuple[str, str], tuple]:
    """Per (id, status): type, ranks and nodes of its first record, and the first suspected cause of its
    last (a firing alert is re-published when its diagnosis grows; when exactly may differ by a record)."""
    first: dict[tuple[str, str], dict] = {}
    last: dict[tuple[str, str], dict] = {}
    for a in alerts:
        first.setdefault((a["id"], a["status"]), a)
        last[(a["id"], a["status"])] = a
    return {key: (a["type"], tuple(a["ranks"]), tuple(a["nodes"]), _first_cause(last[key]))
            for key, a in first.items()}


def test_every_event_kind_and_fault_live_equals_replay_of_the_recording(kafka_bootstrap, topic_prefix,
                                                                       start_worker, tmp_path):
    worker = start_worker(**HANG_ENV)
    env = worker.env
    sent = publish(env, time.time() - 600)
    assert set(sent) == {"step", "collective", "heartbeat", "phase", "stack", "gpu", "xid", "link", "host",
                         "topology"}

    # Everything published is in the topics: record them, as an operator would, and replay the capture.
    captured = tmp_path / "captured.jsonl"
    run_stepwatch("record", "-o", str(captured), env=env)
    # (the replay's clock runs on a minute past the capture, as the live worker's did: a node's link alert waits its
    # fabric hold, models/telemetry/incidents.py, on the timer)
    replayed = run_stepwatch("replay", "--drain", "60", str(captured), env=env)
    expected = [orjson.loads(line) for line in replayed.stdout.splitlines() if line.strip()]
    assert "0 rejected" in replayed.stderr, replayed.stderr[-2000:]
    types = {a["type"] for a in expected}
    # Every fault found: the straggler, the hang, the GPU (Xid), link, host (input pipeline) and comm faults.
    assert {"straggler", "hang", "gpu_fault", "link_errors", "throughput_drop", "comm_slowdown"} <= types, types

    causes = {v[3][0] for v in _view(expected).values() if v[3]}
    assert {"network", "host", "compute"} <= causes, causes  # the link, host and GPU faults named as causes

    group = env["STEPWATCH_KAFKA_APP_ID"] + ("" if env["STEPWATCH_WORKER_CONSUMER"] == "faust" else "-events")
    wait_until(lambda: group_caught_up(kafka_bootstrap, group, topic_prefix + "events"), timeout=180,
               what="the worker to consume it all")
    wanted = set(_view(expected))
    live = read_all_alerts(kafka_bootstrap, topic_prefix + "alerts", timeout=180,
                           until=lambda a: wanted <= set(_view(a)))
    log = worker.log_text()
    assert _view(live) == _view(expected), log[-4000:]
    assert "Traceback" not in log, log[-4000:]  # no processing failure on the way


def test_the_telemetry_topic_dead_letters_what_does_not_belong_and_goes_on(kafka_bootstrap, topic_prefix,
                                                                           start_worker):
    from kafka import KafkaProducer

    from stepwatch.topics import create_topics

    worker = start_worker()
    telemetry = topic_prefix + "telemetry"
    create_topics(kafka_bootstrap, [telemetry], 1)
    now = time.time()
    step = {"v": 1, "kind": "step", "job": "misplaced", "rank": 0, "step": 1, "ts": now, "step_time": 1.0}
    far = {"v": 1, "kind": "xid", "node": "n-far", "gpu": 0, "xid": 79, "ts": now + 10 * 365 * 86_400.0}
    good = {"v": 1, "kind": "xid", "node": "n-good", "gpu": 1, "xid": 79, "ts": now, "message": "NVRM: Xid 79"}
    bad = [orjson.dumps(step), b"{not json", orjson.dumps(far)]
    producer = KafkaProducer(bootstrap_servers=kafka_bootstrap)
    for raw in bad:
        producer.send(telemetry, key=b"n", value=raw)
    producer.send(telemetry, key=b"n-good", value=orjson.dumps(good))
    producer.flush()
    producer.close()
    # Alerts go out before the dead letters of the same read; the good Xid after the bad ones still fires.
    alerts = read_all_alerts(kafka_bootstrap, topic_prefix + "alerts",
                             until=lambda a: any(x["type"] == "gpu_fault" for x in a), quiet=0.0)
    assert [x["nodes"] for x in alerts if x["type"] == "gpu_fault"] == [["n-good"]], worker.log_text()[-3000:]
    dead = read_all_alerts(kafka_bootstrap, topic_prefix + "deadletter", until=lambda d: len(d) >= len(bad))
    assert [(d["topic"], d["cause"], base64.b64decode(d["value_b64"])) for d in dead] == [
        (telemetry, "topic", bad[0]), (telemetry, "decode", bad[1]), (telemetry, "future", bad[2])]
    assert "on the telemetry topic" in dead[0]["reason"] and "ahead of the worker's clock" in dead[2]["reason"]
    assert worker.proc.poll() is None and "Traceback" not in worker.log_text()
