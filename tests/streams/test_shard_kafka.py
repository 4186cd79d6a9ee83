"""The shard stage (streams/shard.py, ``stepwatch shard``): rank-shard keying, buffering, and on the real broker
two shard processes feeding one worker."""

from __future__ import annotations

import base64
import collections
import re
import socket
import time
import urllib.request

import orjson
import pytest

from stepwatch.producers.monitor import RankMonitor
from stepwatch.producers.monitor_config import MonitorConfig
from stepwatch.producers.publisher import group_by_key, shard_key
from stepwatch.streams.shard import OffsetTracker, ShardBuffer

from support import StepwatchProcess, read_alerts, read_all_alerts, run_stepwatch, stepwatch_env


def step(job: str, rank: int, n: int, **extra) -> dict:
    return {"v": 1, "kind": "step", "job": job, "rank": rank, "step": n, "ts": 1000.0 + n, "step_time": 1.0,
            **extra}


# -- producer keying (no broker) ---------------------------------------------------------------------


def test_shard_key_spreads_ranks_and_keeps_job_wide_events_on_the_job():
    assert shard_key("llm", 17, 0) == "llm"
    assert [shard_key("llm", r, 16) for r in (0, 15, 16, 31, 32, 4095)] == [
        "llm/0", "llm/0", "llm/1", "llm/1", "llm/2", "llm/255"]
    assert shard_key("llm", None, 16) == "llm"  # a job-wide phase event
    assert shard_key("llm", True, 16) == "llm"  # not a rank: left to the worker to reject
    phase = {"v": 1, "kind": "phase", "job": "j", "ts": 1.0, "phase": "train"}
    groups = group_by_key([step("j", 0, 1), step("j", 5, 1), phase, step("j", 1, 1)], 4)
    assert {k: [e.get("rank") for e in v] for k, v in groups.items()} == {"j/0": [0, 1], "j/1": [5], "j": [None]}
    assert list(group_by_key([step("j", 5, 1)], 0)) == ["j"]


def test_rank_monitor_keys_by_shard_from_argument_or_environment():
    assert MonitorConfig(environ={"STEPWATCH_RANK": "37"}, enabled=False).key == "default"
    cfg = MonitorConfig(environ={"STEPWATCH_RANK": "37", "STEPWATCH_JOB": "big", "STEPWATCH_MONITOR_SHARD_RANKS": "16"},
                        enabled=False)
    assert (cfg.shard_ranks, cfg.key) == (16, "big/2")
    assert MonitorConfig(environ={"STEPWATCH_MONITOR_SHARD_RANKS": "16"}, rank=3, shard_ranks=0).key == "default"

    def keyed_messages(monitor: RankMonitor) -> list[tuple[str, list]]:
        """The messages the monitor's transport sends (its sink records their keys)."""
        sent: list[tuple[str, list]] = []
        monitor.transport.sink = lambda key, events: sent.append((key, [e.get("step") for e in events]))
        return sent

    m = RankMonitor(job="big", rank=37, shard_ranks=16, sink=lambda events: None, heartbeat_interval=0,
                    flush_interval=60, job_phases=True, environ={})
    sent = keyed_messages(m)
    with m.step(1):
        pass
    m.phase("eval")
    with m.step(2):
        pass
    m.close()
    assert sent == [("big/2", [1, 2]), ("big", [1])]  # the job-wide phase event keeps the job id

    m = RankMonitor(job="small", rank=3, sink=lambda events: None, heartbeat_interval=0, flush_interval=60,
                    job_phases=True, environ={})
    sent = keyed_messages(m)
    with m.step(1):
        pass
    m.end()
    m.close()
    assert [key for key, _ in sent] == ["small"]  # unchanged without shards: one message


# -- buffering and offsets (pure, explicit clock) ------------------------------------------------------


def test_buffer_flushes_full_envelopes_at_once_sorted_by_step():
    buf = ShardBuffer(max_events=4, flush_interval=0.1, max_buffered=100)
    # Two shards' single-event messages interleaved: steps out of order.
    events = [step("a", 0, 2), step("a", 1, 1), step("a", 2, 1), {"v": 1, "kind": "phase", "job": "a", "ts": 1.0,
                                                                    "phase": "eval"}]
    out = buf.add(events[:3], now=0.0, source="m1")
    assert out == [] and len(buf) == 3
    out = buf.add(events[3:], now=0.01, source="m2")
    assert len(out) == 1 and len(buf) == 0
    env = out[0]
    assert env.job == "a" and env.reason == "full"
    # Stable by step; the phase event (no step) stays right after the event it followed.
    assert [(e.get("rank"), e.get("step")) for e in env.events] == [(1, 1), (2, 1), (None, None), (0, 2)]
    assert env.sources == {"m1": 3, "m2": 1}


def test_buffer_flushes_each_job_after_the_interval_and_no_sooner():
    buf = ShardBuffer(max_events=256, flush_interval=0.1, max_buffered=1000)
    assert buf.next_due() is None and buf.due(100.0) == []
    assert buf.add([step("a", 0, 1)], now=10.0, source=("p0", 1)) == []
    assert buf.add([step("b", 0, 1)], now=10.05, source=("p0", 2)) == []
    assert buf.add([step("a", 1, 1)], now=10.08, source=("p0", 3)) == []
    assert buf.next_due() == pytest.approx(10.1)
    assert buf.due(10.099) == []
    first = buf.due(10.1)
    assert [(e.job, len(e.events), e.reason) for e in first] == [("a", 2, "interval")]
    assert first[0].sources == {("p0", 1): 1, ("p0", 3): 1}
    # "a" starts a new buffer: its age counts from its new first event, after "b".
    buf.add([step("a", 2, 2)], now=10.12)
    assert [e.job for e in buf.due(10.15)] == ["b"]
    assert buf.due(10.2) == [] and [e.job for e in buf.due(10.22)] == ["a"]
    assert len(buf) == 0 and buf.jobs == 0
    assert buf.flushes == {"interval": 3}


def test_buffer_bounds_memory_by_flushing_everything():
    buf = ShardBuffer(max_events=256, flush_interval=10.0, max_buffered=300)
    out = []
    for job in range(4):
        out += buf.add([step(f"j{job}", r, 1) for r in range(80)], now=0.0)
    # 320 > 300: everything buffered went out at once; nothing was dropped.
    assert sum(len(e.events) for e in out) == 320 and len(buf) == 0
    assert {e.reason for e in out} == {"memory"}
    assert buf.drain() == []


def test_offset_tracker_commits_only_below_unacknowledged_output():
    t = OffsetTracker()
    assert t.committable() == {}
    t.consumed("p0", 10, units=1)
    t.consumed("p0", 11, units=2)  # a batch of two events
    t.consumed("p0", 12, units=0)  # nothing in it (empty envelope)
    t.consumed("p1", 5, units=1)
    assert t.committable() == {"p0": 10, "p1": 5}
    t.done("p0", 11, 1)
    assert t.committable()["p0"] == 10
    t.done("p0", 10)
    assert t.committable()["p0"] == 11  # offset 11 still waits for one event
    t.done("p0", 11, 1)
    t.done("p1", 5)
    assert t.committable() == {"p0": 13, "p1": 6}
    assert t.read == {"p0": 3, "p1": 1}
    t.forget(["p1"])
    t.done("p1", 5)  # late acknowledgement of a revoked partition: ignored
    assert t.committable() == {"p0": 13}


def test_buffer_and_tracker_together_give_at_least_once():
    """Envelopes acknowledged out of order never let the committed offset pass an unacknowledged event."""
    buf = ShardBuffer(max_events=3, flush_interval=0.1, max_buffered=100)
    t = OffsetTracker()
    envelopes = []
    for offset, (job, rank) in enumerate([("a", 0), ("b", 0), ("a", 1), ("a", 2), ("b", 1)]):
        t.consumed("p", offset, 1)
        envelopes += buf.add([step(job, rank, 1)], now=0.0, source=("p", offset))
    envelopes += buf.due(1.0)
    assert [(e.job, e.reason) for e in envelopes] == [("a", "full"), ("b", "interval")]
    a, b = envelopes
    for (tp, off), n in b.sources.items():
        t.done(tp, off, n)
    assert t.committable() == {"p": 0}  # "a" (offsets 0, 2, 3) not acknowledged yet
    for (tp, off), n in a.sources.items():
        t.done(tp, off, n)
    assert t.committable() == {"p": 5}


def test_shard_settings_from_environment_and_validation():
    from stepwatch.config import Settings

    s = Settings.from_env({"STEPWATCH_SHARD_FLUSH_INTERVAL": "0.25", "STEPWATCH_KAFKA_JOB_EVENTS_TOPIC": "je"})
    assert s.shard.flush_interval == 0.25 and s.shard.max_events == 256 and s.shard.max_buffered == 100_000
    assert s.kafka.topic(s.kafka.job_events_topic) == "stepwatch.je"
    with pytest.raises(ValueError, match="max_buffered"):
        Settings.from_env({"STEPWATCH_SHARD_MAX_BUFFERED": "10"})


# -- on the real broker --------------------------------------------------------------------------------


class ShardProcess(StepwatchProcess):
    """``stepwatch shard`` in a subprocess, its log in a file."""

    command = "shard"

    def assigned(self) -> list[int] | None:
        """Partitions of the latest assignment it logged."""
        found = re.findall(r"assigned partitions \[([\d, ]*)\]", self.log_text())
        if not found:
            return None
        return [int(p) for p in found[-1].split(",") if p.strip()]

    def consumed(self) -> dict[int, int]:
        """Messages per partition, from the line it logs when it stops."""
        match = re.search(r"shard stage stopped: consumed (\d+) messages \(per partition (\{[^}]*\})\)",
                          self.log_text())
        assert match, self.log_text()[-3000:]
        return {int(k): int(v) for k, v in re.findall(r"(\d+): (\d+)", match.group(2))}


@pytest.fixture
def start_shard(tmp_path):
    started: list[ShardProcess] = []

    def start(env: dict[str, str]) -> ShardProcess:
        shard = ShardProcess(env, tmp_path / f"shard-{len(started)}.log")
        started.append(shard)
        return shard

    yield start
    for shard in started:
        shard.discard()  # a test that asserts on a shard's stop stops it itself


def wait_for(condition, timeout: float, what: str, logs=lambda: "") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.2)
    raise TimeoutError(f"{what} after {timeout} s:\n{logs()}")


def start_two_shards_and_a_worker(start_shard, start_worker, envs: list[dict[str, str]]):
    """Two shard processes that have split the raw topic's 2 partitions, and the worker on their output."""
    shards = [start_shard(env) for env in envs]
    # The second stage: the unchanged worker, reading what the shard stage writes.
    worker = start_worker(STEPWATCH_KAFKA_EVENTS_TOPIC="job-events", STEPWATCH_KAFKA_PARTITIONS="2")
    logs = lambda: "\n".join(s.log_text()[-1500:] for s in shards)  # noqa: E731
    wait_for(lambda: sorted(p for s in shards for p in (s.assigned() or [9, 9])) == [0, 1], 40,
             "the two shard processes did not split the two partitions", logs)
    return shards, worker, logs


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.kafka
def test_two_shard_processes_spread_a_job_and_the_worker_names_the_straggler(kafka_bootstrap, topic_prefix,
                                                                             start_worker, start_shard):
    from kafka import KafkaProducer

    from stepwatch.sim.simulator import ClusterSimulator, SimulationSpec, StragglerFault
    from stepwatch.topics import create_topics

    env = stepwatch_env(kafka_bootstrap, topic_prefix, STEPWATCH_KAFKA_PARTITIONS="2")
    create_topics(kafka_bootstrap, [topic_prefix + "events"], 2)
    shards, worker, logs = start_two_shards_and_a_worker(start_shard, start_worker, [env, env])

    spec = SimulationSpec(job="big", ranks=64, steps=60, start_time=time.time(), seed=4,
                          stragglers=(StragglerFault(rank=37, start_step=20, factor=1.3),))
    producer = KafkaProducer(bootstrap_servers=kafka_bootstrap, linger_ms=5)
    messages = 0
    keys = set()
    origin, first = time.monotonic(), None
    for sim_time, batch in ClusterSimulator(spec).steps():
        first = sim_time if first is None else first
        delay = origin + (sim_time - first) / 5.0 - time.monotonic()  # 5x real time: ~0.2 s per step
        if delay > 0:
            time.sleep(delay)
        for event in batch:  # single-event messages, as a 16k-rank job's monitors send them
            key = shard_key(spec.job, event.get("rank"), 16)
            keys.add(key)
            producer.send(topic_prefix + "events", key=key.encode(), value=orjson.dumps(event))
            messages += 1
        producer.flush()
    producer.close()
    assert keys == {"big", "big/0", "big/1", "big/2", "big/3"}

    # The simulated job ends (its ``end`` phase), which resolves the straggler: exactly these two alerts.
    alerts = read_all_alerts(kafka_bootstrap, topic_prefix + "alerts",
                             until=lambda a: any(x["status"] == "resolved" for x in a), timeout=60)
    assert [(a["status"], a["type"], a["job"], a["ranks"]) for a in alerts] == [
        ("firing", "straggler", "big", [37]), ("resolved", "straggler", "big", [37])], \
        [a["summary"] for a in alerts] + [worker.log_text()[-3000:] + logs()]
    assert alerts[0]["nodes"] == [spec.node_of(37)]

    # Both shard processes consumed a part of the input, and between them all of it.
    assert [s.stop() for s in shards] == [0, 0]
    consumed = [s.consumed() for s in shards]
    assert all(sum(c.values()) > 0 for c in consumed), consumed
    assert not set(consumed[0]) & set(consumed[1]), consumed
    assert sum(sum(c.values()) for c in consumed) >= messages


@pytest.mark.kafka
def test_bad_input_is_dead_lettered_and_good_events_go_out_per_job(kafka_bootstrap, topic_prefix, consumer_group,
                                                                   start_shard):
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    port = free_port()
    env = stepwatch_env(kafka_bootstrap, topic_prefix, STEPWATCH_KAFKA_PARTITIONS="2",
                        STEPWATCH_SHARD_METRICS_PORT=str(port))
    shard = start_shard(env)
    wait_for(lambda: shard.assigned() == [0, 1], 40, "no assignment", shard.log_text)

    events_topic = topic_prefix + "events"
    good = step("j", 1, 3, ts=time.time())
    half_bad = orjson.dumps({"v": 1, "kind": "batch", "events": [good, {"v": 1, "kind": "step", "job": "j"}]})
    bad_messages = [b"{not json", b"[1,2,3]", orjson.dumps({"v": 1, "kind": "step", "job": "j"}),
                    orjson.dumps({"v": 9, "kind": "step"}), b"\xff\xfe\x00", half_bad]
    producer = KafkaProducer(bootstrap_servers=kafka_bootstrap)
    for raw in bad_messages:
        producer.send(events_topic, key=b"j", value=raw)
    producer.flush()
    producer.close()
    # After the garbage, a job keyed by rank shard through the simulator's CLI path.
    run_stepwatch("simulate", "--job", "after", "--ranks", "8", "--steps", "5", "--shard-ranks", "4",
                  "--speed", "0", env=env)

    out = KafkaConsumer(topic_prefix + "job-events", bootstrap_servers=kafka_bootstrap, group_id=None,
                        auto_offset_reset="earliest", consumer_timeout_ms=1000)
    records = []
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and sum(1 for k, e in records if e.get("kind") == "step") < 41:
        for r in out:
            value = orjson.loads(r.value)
            records += [(r.key, e) for e in (value["events"] if value["kind"] == "batch" else [value])]
    out.close()
    steps = [(k, e) for k, e in records if e["kind"] == "step"]
    assert sorted((e["job"], e["rank"], e["step"]) for _, e in steps) == sorted(
        [("j", 1, 3)] + [("after", r, s) for r in range(8) for s in range(5)])
    assert all(k == e["job"].encode() for k, e in records)  # keyed by job again

    dead_consumer = KafkaConsumer(topic_prefix + "deadletter", bootstrap_servers=kafka_bootstrap,
                                  auto_offset_reset="earliest", consumer_timeout_ms=3000, group_id=None)
    dead = sorted((orjson.loads(r.value) for r in dead_consumer), key=lambda d: (d["partition"], d["offset"]))
    dead_consumer.close()
    assert len(dead) == len(bad_messages)
    assert sorted(base64.b64decode(d["value_b64"]) for d in dead) == sorted(bad_messages)
    assert all(d["kind"] == "deadletter" and d["topic"] == events_topic and d["offset"] is not None and d["reason"]
               and d["key"] == "j" for d in dead)
    by_value = {base64.b64decode(d["value_b64"]): d for d in dead}
    assert "malformed JSON" in by_value[b"{not json"]["reason"]
    assert "missing required field" in by_value[half_bad]["reason"]
    assert by_value[half_bad]["event"] == {"v": 1, "kind": "step", "job": "j"}  # the bad event alone

    metrics = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    assert "stepwatch_shard_events_deadlettered_total 6.0" in metrics
    assert re.search(r"^stepwatch_shard_events_published_total (\d+)", metrics, re.M)
    assert shard.proc.poll() is None  # still running after the garbage

    assert shard.stop() == 0
    assert shard.consumed()  # the clean-stop line
    # Everything consumed was acknowledged and committed: the group's offsets are at the end of the topic.
    group = KafkaConsumer(bootstrap_servers=kafka_bootstrap, group_id=topic_prefix.rstrip(".") + "-worker-shard",
                          enable_auto_commit=False)
    try:
        partitions = [TopicPartition(events_topic, p) for p in (0, 1)]
        ends = group.end_offsets(partitions)
        assert {tp: group.committed(tp) for tp in partitions} == ends
    finally:
        group.close()


def _metric(port: int, name: str) -> float:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    match = re.search(rf"^{name} (\S+)$", text, re.M)
    return float(match.group(1)) if match else 0.0


@pytest.mark.kafka
def test_shard_process_killed_mid_stream_the_other_takes_over_without_loss_or_second_firing(
        kafka_bootstrap, topic_prefix, worker_consumer, start_worker, start_shard):
    """SIGKILL (no drain, no last commit) of the shard process that owns the straggler's partition, once the
    straggler alert fired and that process published part of its partition: the other process takes the
    partition over from the committed offsets and replays what was not committed. Every step event reaches
    job-events (duplicates allowed: at least once) and the worker publishes the straggler alert once."""
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition
    from stepwatch.streams.telemetry_feed import partition_of

    from stepwatch.sim.simulator import ClusterSimulator, SimulationSpec, StragglerFault
    from stepwatch.topics import create_topics

    env = stepwatch_env(kafka_bootstrap, topic_prefix, STEPWATCH_KAFKA_PARTITIONS="2")
    events_topic, job_events_topic, alerts_topic = (topic_prefix + t for t in ("events", "job-events", "alerts"))
    create_topics(kafka_bootstrap, [events_topic], 2)
    # The stage's consumer uses the worker's session timeout (stepwatch_env: 6 s): a dead member leaves quickly.
    assert env["STEPWATCH_WORKER_SESSION_TIMEOUT"] == "6"
    ports = [free_port(), free_port()]
    # No periodic commit within the test (only on rebalance and at a clean stop): the killed process dies with
    # everything it published uncommitted, so the survivor replays all of it (the worst case of at least once).
    shards, worker, logs = start_two_shards_and_a_worker(
        start_shard, start_worker,
        [{**env, "STEPWATCH_SHARD_METRICS_PORT": str(port), "STEPWATCH_SHARD_COMMIT_INTERVAL": "600"}
         for port in ports])

    spec = SimulationSpec(job="big", ranks=64, steps=110, start_time=time.time(), seed=4,
                          stragglers=(StragglerFault(rank=37, start_step=15, factor=1.3),))
    # The victim: the process owning the straggler's partition (its slow steps are what gets replayed).
    straggler_partition = partition_of(shard_key(spec.job, 37, 16), 2)
    victim_index = next(i for i, s in enumerate(shards) if s.assigned() == [straggler_partition])
    victim, survivor = shards[victim_index], shards[1 - victim_index]

    def straggler_fired(alerts: list[dict]) -> bool:
        return any(a["status"] == "firing" and a["ranks"] == [37] for a in alerts)

    producer = KafkaProducer(bootstrap_servers=kafka_bootstrap, linger_ms=5)
    published: set[tuple[int, int]] = set()
    origin, first = time.monotonic(), None
    survivor_log_at_kill = None
    for sim_time, batch in ClusterSimulator(spec).steps():
        first = sim_time if first is None else first
        delay = origin + (sim_time - first) / 5.0 - time.monotonic()  # 5x real time: ~0.25 s per step
        if delay > 0:
            time.sleep(delay)
        for event in batch:  # single-event messages
            key = shard_key(spec.job, event.get("rank"), 16)
            producer.send(events_topic, key=key.encode(), value=orjson.dumps(event))
            if event["kind"] == "step":
                published.add((event["rank"], event["step"]))
        producer.flush()
        if survivor_log_at_kill is None and any(e.get("step") == 35 for e in batch):  # about a third of the run
            paused = time.monotonic()
            assert straggler_fired(read_alerts(kafka_bootstrap, alerts_topic, until=straggler_fired, timeout=60)), \
                worker.log_text()[-3000:] + logs()
            wait_for(lambda: _metric(ports[victim_index], "stepwatch_shard_events_published_total") > 0, 30,
                     "the victim published nothing", logs)
            survivor_log_at_kill = len(survivor.log_text())
            victim.proc.kill()  # SIGKILL: no drain, no last commit
            victim.proc.wait()
            origin += time.monotonic() - paused  # the same pace after the pause
    producer.close()
    assert survivor_log_at_kill is not None
    assert len(published) == 64 * spec.steps

    # (3) The survivor took the dead process's partition over.
    wait_for(lambda: "assigned partitions [0, 1]" in survivor.log_text()[survivor_log_at_kill:], 60,
             "the survivor did not take both partitions", logs)

    # (2) No step event lost: every (rank, step) is on job-events, some twice (the replay).
    seen: collections.Counter = collections.Counter()
    out = KafkaConsumer(job_events_topic, bootstrap_servers=kafka_bootstrap, group_id=None,
                        auto_offset_reset="earliest", consumer_timeout_ms=1000)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not published <= seen.keys():
        for r in out:
            value = orjson.loads(r.value)
            for e in value["events"] if value["kind"] == "batch" else [value]:
                if e["kind"] == "step" and e["job"] == spec.job:
                    seen[(e["rank"], e["step"])] += 1
    out.close()
    missing = published - seen.keys()
    assert not missing, f"{len(missing)} step events lost, e.g. {sorted(missing)[:10]}\n{logs()}"
    replayed = {key for key, n in seen.items() if n > 1}
    assert any(rank // 16 == 37 // 16 for rank, _ in replayed), sorted(replayed)[:10]  # the killed one's ranks

    # The worker consumed all of job-events (its committed offsets reached the end) ...
    group_id = env["STEPWATCH_KAFKA_APP_ID"] + ("" if worker_consumer == "faust" else "-events")
    group = KafkaConsumer(bootstrap_servers=kafka_bootstrap, group_id=group_id, enable_auto_commit=False)
    try:
        parts = [TopicPartition(job_events_topic, p) for p in group.partitions_for_topic(job_events_topic)]
        ends = group.end_offsets(parts)
        wait_for(lambda: all((group.committed(tp) or 0) >= ends[tp] for tp in parts), 60,
                 "the worker did not consume all of job-events", lambda: worker.log_text()[-3000:])
        alert_parts = [TopicPartition(alerts_topic, p) for p in group.partitions_for_topic(alerts_topic)]
        n_alerts = sum(group.end_offsets(alert_parts).values())
    finally:
        group.close()
    # ... (1) and fired the straggler's alert once, naming rank 37: no second firing from the replayed events.
    alerts = read_all_alerts(kafka_bootstrap, alerts_topic, until=lambda a: len(a) >= n_alerts, timeout=60)
    firing = [a for a in alerts if a["status"] == "firing"]
    straggler = [a for a in firing if a["type"] == "straggler"]
    assert [(a["job"], a["ranks"], a["nodes"]) for a in straggler] == [(spec.job, [37], [spec.node_of(37)])], alerts
    assert len({a["id"] for a in firing}) == len(firing), alerts  # no alert id fired twice
    # Until the takeover, steps close without the dead process's ranks (the straggler among them): the
    # throughput rule leaves such steps out rather than take the survivors' wait for a job slowdown.
    assert not [a for a in firing if a["type"] == "throughput_drop"], [a["summary"] for a in firing]

    # The survivor read both partitions (its count for the taken-over one includes the replay).
    assert survivor.stop() == 0
    consumed = survivor.consumed()
    assert consumed.get(straggler_partition, 0) > 0 and consumed.get(1 - straggler_partition, 0) > 0, consumed
