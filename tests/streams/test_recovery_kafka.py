"""Recovery without duplicates (issue 44, row 8), on the real broker.

A backlog reached the broker while no worker ran (its records stamped an hour ago); the group committed
part of it (as a worker that read it would), a worker reads the rest (a straggler fires and resolves) and is SIGKILLed before it
commits; a third one rebuilds its windows from the span before the committed offset and reads the rest
again. The alerts topic must then hold what ``stepwatch replay`` of the same events says, each firing and
each resolution once, and no hang: the rebuilt jobs are judged on the clock the live road goes on with
(the partition is still behind by an hour), not on the records' own times.
"""

from __future__ import annotations

import time
from collections import Counter

import orjson
import pytest
from kafka import KafkaProducer

from stepwatch.models.wire.events import encode_events
from stepwatch.sim.simulator import ClusterSimulator, SimulationSpec, StragglerFault
from stepwatch.topics import create_topics

from support import group_caught_up, group_offsets, read_alerts, read_all_alerts, run_stepwatch, stepwatch_env, \
    wait_until

pytestmark = pytest.mark.kafka

#: One partition: every job behind the same committed offset, so the restart's span and re-read are known.
ONE_PARTITION = {"STEPWATCH_KAFKA_PARTITIONS": "1",
                 # A job silent for real during the test (a few tens of seconds) is not a hang: only a clock
                 # that jumps by the backlog's hour can make one.
                 "STEPWATCH_HANG_WARNING_FLOOR_SECONDS": "300"}
SPLIT_STEP = 50  # the group's committed offset before the doomed worker starts


def backlog(reached_broker_at: float) -> tuple[list, list]:
    """(job, value, record time in ms) of two jobs, in time order, split at the committed offset.

    ``job-s`` gets a straggler after the split that fires and resolves; ``job-h`` stops before the split
    (no end: silent since), so a clock jump after the restart would call it hung."""
    specs = [SimulationSpec(job="job-s", ranks=8, steps=140,
                            stragglers=(StragglerFault(rank=3, start_step=60, factor=1.6, end_step=75),)),
             SimulationSpec(job="job-h", ranks=8, steps=SPLIT_STEP, seed=1)]
    messages = []
    for spec in specs:
        for t, batch in ClusterSimulator(spec).steps():
            if spec.job == "job-h" and batch[0].get("phase") == "end":
                continue
            at_ms = int((reached_broker_at + t - spec.start_time) * 1000)
            messages.append((t, spec.job, batch, at_ms))
    messages.sort(key=lambda m: m[0])
    cut = next(t for t, job, batch, _ in messages if job == "job-s" and batch[0].get("step") == SPLIT_STEP)
    first = [(job, encode_events(batch), at) for t, job, batch, at in messages if t < cut]
    rest = [(job, encode_events(batch), at) for t, job, batch, at in messages if t >= cut]
    return first, rest


def produce(bootstrap: str, topic: str, messages) -> None:
    producer = KafkaProducer(bootstrap_servers=bootstrap)
    try:
        for key, value, at_ms in messages:  # at_ms None: the producer's clock now
            producer.send(topic, key=key.encode(), value=value, timestamp_ms=at_ms)
        producer.flush(30)
    finally:
        producer.close()


def commit(bootstrap: str, group: str, topic: str, offset: int) -> None:
    """Commit ``offset`` of partition 0 for ``group``, as a worker of that group that read up to there would."""
    from kafka import KafkaConsumer, TopicPartition
    from kafka.structs import OffsetAndMetadata

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False)
    try:
        consumer.commit({TopicPartition(topic, 0): OffsetAndMetadata(offset, "", -1)})
    finally:
        consumer.close(autocommit=False)


def published(alerts: list[dict]) -> list[tuple[str, str, str]]:
    return [(a["id"], a["type"], a["status"]) for a in alerts]


def record_and_replay(bootstrap: str, topic_prefix: str, tmp_path) -> list[dict]:
    """``stepwatch record`` of the events topic, then ``stepwatch replay`` of that file: the alerts one road gives."""
    env = stepwatch_env(bootstrap, topic_prefix, **ONE_PARTITION)
    recording = tmp_path / "events.jsonl"
    run_stepwatch("record", "-o", str(recording), env=env)
    return [orjson.loads(line) for line in run_stepwatch("replay", str(recording), env=env).stdout.splitlines()
            if line.strip()]


def test_a_worker_killed_during_catch_up_restarts_without_a_duplicate_or_a_false_hang(
        kafka_bootstrap, topic_prefix, start_worker, worker_consumer, tmp_path):
    events, alerts_topic = topic_prefix + "events", topic_prefix + "alerts"
    create_topics(kafka_bootstrap, [topic_prefix + n for n in ("events", "alerts", "deadletter", "telemetry")], 1)
    first, rest = backlog(reached_broker_at=time.time() - 3600)
    group = topic_prefix.rstrip(".") + "-worker" + ("" if worker_consumer == "faust" else "-events")

    produce(kafka_bootstrap, events, first)
    commit(kafka_bootstrap, group, events, len(first))  # a worker read the first part and committed it
    produce(kafka_bootstrap, events, rest)  # the rest of the backlog, then a worker that never commits it
    doomed = start_worker(STEPWATCH_WORKER_COMMIT_INTERVAL="3600", **ONE_PARTITION)

    def straggler_done(alerts):
        return any(a["type"] == "straggler" and a["status"] == "resolved" for a in alerts)

    read_alerts(kafka_bootstrap, alerts_topic, until=straggler_done, timeout=120)
    committed, end = group_offsets(kafka_bootstrap, group, events)
    assert committed < end, "the kill would not test a re-read"
    doomed.proc.kill()  # SIGKILL: what it processed after the committed offset is read again
    doomed.proc.wait()

    restarted = start_worker(**ONE_PARTITION)
    wait_until(lambda: group_caught_up(kafka_bootstrap, group, events), timeout=120,
               what="the restarted worker to commit the end", interval=0.5)
    alerts = read_all_alerts(kafka_bootstrap, alerts_topic, until=straggler_done, timeout=60)
    assert "recovered partitions" in restarted.log_text()

    replayed = record_and_replay(kafka_bootstrap, topic_prefix, tmp_path)

    logs = "\n".join(w.log_text()[-3000:] for w in (doomed, restarted))
    assert published(alerts) == published(replayed), logs
    assert [k for k, n in Counter(published(alerts)).items() if n > 1] == [], logs  # each firing/resolution once
    assert {a["type"] for a in alerts} == {"straggler"}, logs  # no hang: the straggler only


def test_a_straggler_killed_open_is_resolved_by_the_restart_at_the_times_it_was_published(
        kafka_bootstrap, topic_prefix, start_worker, worker_consumer, tmp_path):
    """The job's hosts' clocks are years off the broker (2023 events, an hour-old backlog), so its alert times go on
    the broker's clock (models/alert_clock.py). The worker is killed with the straggler open; the restart reads on
    later (its own offset) and publishes the resolution under the firing's ``starts_at`` and shift, read back
    (models/published.py); both lives' times, on the hosts' clock, are replay's."""
    from stepwatch.models.alert_clock import SHIFT_KEY

    events, alerts_topic = topic_prefix + "events", topic_prefix + "alerts"
    create_topics(kafka_bootstrap, [topic_prefix + n for n in ("events", "alerts", "deadletter", "telemetry")], 1)
    first, rest = backlog(reached_broker_at=time.time() - 3600)
    group = topic_prefix.rstrip(".") + "-worker" + ("" if worker_consumer == "faust" else "-events")
    ends = [i for i, (job, value, _) in enumerate(rest) if job == "job-s" and b'"step":72,' in value]
    split = ends[0] if ends else len(rest) // 2  # the straggler (steps 60-75) open, not yet over
    produce(kafka_bootstrap, events, first)
    commit(kafka_bootstrap, group, events, len(first))
    produce(kafka_bootstrap, events, rest[:split])
    doomed = start_worker(STEPWATCH_WORKER_COMMIT_INTERVAL="3600", **ONE_PARTITION)

    def straggler(status):
        return lambda alerts: any(a["type"] == "straggler" and a["status"] == status for a in alerts)

    read_alerts(kafka_bootstrap, alerts_topic, until=straggler("firing"), timeout=120)
    doomed.proc.kill()
    doomed.proc.wait()
    produce(kafka_bootstrap, events, rest[split:])  # the straggler's end: the restart's to say
    restarted = start_worker(**ONE_PARTITION)
    alerts = read_all_alerts(kafka_bootstrap, alerts_topic, until=straggler("resolved"), timeout=120)

    replayed = record_and_replay(kafka_bootstrap, topic_prefix, tmp_path)
    logs = "\n".join(w.log_text()[-3000:] for w in (doomed, restarted))
    assert [k for k, n in Counter(published(alerts)).items() if n > 1] == [], logs
    fired = [a for a in alerts if a["type"] == "straggler" and a["status"] == "firing"]
    done = [a for a in alerts if a["type"] == "straggler" and a["status"] == "resolved"]
    assert fired and done and abs(fired[0]["evidence"].get(SHIFT_KEY, 0.0)) > 3000, logs  # (shifted: the backlog)
    for a in done:  # the restart resolved what the killed life fired, on its times
        f = next(x for x in fired if x["id"] == a["id"])
        assert (a["starts_at"], a["evidence"].get(SHIFT_KEY)) == (f["starts_at"], f["evidence"].get(SHIFT_KEY)), logs

    def hosts(records):
        return {(a["id"], a["status"]): a["starts_at"] - a["evidence"].get(SHIFT_KEY, 0.0)
                for a in records if a["type"] == "straggler"}

    live, offline = hosts(alerts), hosts(replayed)
    assert live.keys() == offline.keys(), logs
    assert all(abs(live[k] - offline[k]) < 1e-3 for k in live), (live, offline)  # (each shift rounded to the us)


def test_an_open_node_suspect_is_not_fired_again_nor_its_action_recorded_again_after_a_restart(
        kafka_bootstrap, topic_prefix, start_worker):
    """A plain stop and start: the ledger read back from its topic judges the node again; what the alerts and
    actions topics already hold is not published again (models/published.py, streams/action_sink.py)."""
    from fleet import Job, job_events, xid_event

    hooks = {"STEPWATCH_ONCALL_HOOKS_ENABLED": "true"}  # dry run (the default): records, no command run
    alerts_topic, actions_topic = topic_prefix + "alerts", topic_prefix + "actions"
    first = start_worker(**hooks)
    t0 = time.time() - 120
    job = Job("job-c", ["n6", "n7"], start=t0, slow_node="n7", slow_from=30, checkpoint_at=None)
    produce(kafka_bootstrap, topic_prefix + "events", [(job.name, encode_events(job_events(job)), None)])
    # A straggler on n7 (one job: no verdict), then Xid 79 from n7's agent: a gpu_fault and, non-recoverable, a
    # node_suspect for n7 listing both incidents (the ledger, read back, judges the node again incident by incident).
    read_alerts(kafka_bootstrap, alerts_topic, until=lambda a: any(x["type"] == "straggler" for x in a))
    produce(kafka_bootstrap, topic_prefix + "telemetry", [("n7", orjson.dumps(xid_event("n7", 1, 79, t0 + 100)), None)])

    def suspect(alerts):
        return [a for a in alerts if a["type"] == "node_suspect"]

    before = read_all_alerts(kafka_bootstrap, alerts_topic,
                             until=lambda a: any(len(x["evidence"]["incidents"]) == 2 for x in suspect(a)), timeout=120)
    def drains(records):  # the action records of n7's fault and suspect (the straggler gets its own)
        return sorted(r["alert_type"] for r in records if r["alert_type"] in ("gpu_fault", "node_suspect"))

    actions = read_all_alerts(kafka_bootstrap, actions_topic, until=lambda r: len(drains(r)) >= 2)
    assert drains(actions) == ["gpu_fault", "node_suspect"], first.log_text()[-3000:]
    first.stop()  # a plain kill (SIGTERM)

    second = start_worker(**hooks)
    # A job after the restart, whose straggler says the restarted worker is judging (and its ledger was read).
    later = Job("job-d", ["n1", "n2"], start=time.time() - 100, slow_node="n2", slow_from=30, checkpoint_at=None)
    produce(kafka_bootstrap, topic_prefix + "events", [(later.name, encode_events(job_events(later)), None)])
    after = read_all_alerts(kafka_bootstrap, alerts_topic,
                            until=lambda a: any(x["job"] == "job-d" for x in a[len(before):]), timeout=120)
    logs = second.log_text()[-4000:]
    assert suspect(after) == suspect(before), logs  # nothing more about n7: its suspect and fault stay as they were
    assert [a for a in after[len(before):] if a["job"] != "job-d"] == [], logs
    actions = read_all_alerts(kafka_bootstrap, actions_topic, until=lambda r: len(drains(r)) >= 2, quiet=3.0)
    assert drains(actions) == ["gpu_fault", "node_suspect"], logs  # one record per alert
