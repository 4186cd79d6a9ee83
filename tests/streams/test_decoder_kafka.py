"""The decoder process on the real broker: a worker that finds a backlog (large reads) decodes them in its
decoder process (streams/decoder.py) and raises exactly the alerts and dead letters ``stepwatch replay``
of the same topics raises; one stopped (``kill -STOP``) stalls nothing and no helper outlives a killed worker.
(A decoder process that dies: tests/streams/test_decoder.py.)"""

from __future__ import annotations

import os
import re
import signal
import time

import orjson
import pytest

from opsupport import free_port, get, wait_for
from support import group_caught_up, read_all_alerts, run_stepwatch, wait_until
from support import process_alive as _alive
from test_one_road_kafka import _view

pytestmark = pytest.mark.kafka


def _metric(base: str, name: str) -> float:
    text = get(base + "/metrics")[1].decode()
    found = re.search(rf"^{re.escape(name)} (\S+)$", text, re.M)
    return float(found.group(1)) if found else 0.0


def _backlog(now: float) -> tuple[list[tuple[bytes, bytes]], int]:
    """Two jobs' events (one with a straggler) as rank monitors send them, with the messy messages a topic
    has: heartbeats, lone step events, malformed JSON, an envelope with one bad event. (key, value) pairs
    and how many messages should be dead-lettered."""
    from stepwatch.sim.simulator import ClusterSimulator, SimulationSpec, StragglerFault

    steps = 90
    start = now - steps * 1.0 - 60
    slow = SimulationSpec(job="backlog-slow", ranks=128, steps=steps, seed=3, start_time=start, warmup_steps=2,
                          stragglers=(StragglerFault(rank=37, start_step=30, factor=1.6),))
    calm = SimulationSpec(job="backlog-calm", ranks=64, steps=steps, seed=4, start_time=start, warmup_steps=2,
                          node_prefix="calm-")
    out: list[tuple[bytes, bytes]] = []
    bad = 0
    for spec in (slow, calm):
        run: list[dict] = []
        key = spec.job.encode()
        for i, event in enumerate(e for e in ClusterSimulator(spec).events() if e["kind"] == "step"):
            run.append(event)
            if len(run) == 32:
                out.append((key, orjson.dumps({"v": 1, "kind": "batch", "events": run})))
                run = []
            if i % 997 == 0:
                out.append((key, orjson.dumps(dict(event, step=event["step"]))))  # a lone step event (again)
                out.append((key, orjson.dumps({"v": 1, "kind": "heartbeat", "job": spec.job, "rank": 0,
                                               "step": event["step"], "ts": event["ts"]})))
            if i % 3001 == 5:
                out.append((key, b"{not json"))
                broken = [dict(event, rank=r) for r in range(4)]
                broken[2]["rank"] = "two"
                out.append((key, orjson.dumps({"v": 1, "kind": "batch", "events": broken})))
                bad += 2
        if run:
            out.append((key, orjson.dumps({"v": 1, "kind": "batch", "events": run})))
    # The two jobs' messages interleaved, as producers of one partition would: one read holds both.
    slow_msgs = [m for m in out if m[0] == b"backlog-slow"]
    calm_msgs = [m for m in out if m[0] == b"backlog-calm"]
    mixed = [m for pair in zip(slow_msgs, calm_msgs) for m in pair]
    mixed += slow_msgs[len(calm_msgs):] + calm_msgs[len(slow_msgs):]
    return mixed, bad


def _produce(bootstrap: str, topic: str, messages: list[tuple[bytes, bytes]]) -> None:
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=20, batch_size=1 << 20,
                             max_request_size=8 << 20)
    for key, value in messages:
        producer.send(topic, key=key, value=value, partition=0)
    producer.flush()
    producer.close()


def _expected(env: dict, tmp_path) -> tuple[list[dict], list[str]]:
    captured = tmp_path / "captured.jsonl"
    run_stepwatch("record", "-o", str(captured), env=env)
    replayed = run_stepwatch("replay", str(captured), env=env)
    return [orjson.loads(line) for line in replayed.stdout.splitlines() if line.strip()], replayed.stderr


def test_a_backlog_decoded_in_the_decoder_process_gives_what_replay_gives(kafka_bootstrap, topic_prefix,
                                                                          start_worker, tmp_path):
    from stepwatch.topics import create_topics

    events = topic_prefix + "events"
    create_topics(kafka_bootstrap, [events], 1)
    messages, bad = _backlog(time.time())
    assert sum(len(v) for _, v in messages) > 3 << 20  # reads large enough for the decoder process
    _produce(kafka_bootstrap, events, messages)

    port = free_port()
    base = f"http://127.0.0.1:{port}"
    env_extra = dict(STEPWATCH_WORKER_CONSUMER="aiokafka", STEPWATCH_WORKER_DECODE_PROCESSES="1",
                     STEPWATCH_WORKER_WEB_PORT=str(port), STEPWATCH_KAFKA_PARTITIONS="1")
    worker = start_worker(**env_extra)
    env = worker.env
    group = env["STEPWATCH_KAFKA_APP_ID"] + "-events"
    wait_until(lambda: group_caught_up(kafka_bootstrap, group, events), timeout=180,
               what="the worker to consume the backlog")
    expected, replay_log = _expected(env, tmp_path)
    assert any(a["type"] == "straggler" and a["ranks"] == [37] for a in expected), expected
    wanted = set(_view(expected))
    live = read_all_alerts(kafka_bootstrap, topic_prefix + "alerts", timeout=120,
                           until=lambda a: wanted <= set(_view(a)))
    log = worker.log_text()
    assert _view(live) == _view(expected), log[-4000:]
    dead = read_all_alerts(kafka_bootstrap, topic_prefix + "deadletter", until=lambda d: len(d) >= bad, quiet=2.0)
    # One dead letter per bad message, with the decoder's reason (the recording keeps the envelopes, not the
    # lines that are not JSON: replay rejects those 6).
    assert sorted(d["reason"].split(":")[0] for d in dead) == ["'rank' must be an integer"] * (bad // 2) + [
        "malformed JSON"] * (bad // 2), dead
    assert f"{bad // 2} rejected" in replay_log, replay_log[-1000:]
    assert wait_for(lambda: get(base + "/health")[0] == 200, what="/health 200")
    decoded = _metric(base, "stepwatch_decoder_messages_total")
    assert decoded > len(messages) / 2, decoded  # the backlog went through the decoder process
    assert "Traceback" not in log, log[-4000:]


def _children(pid: int) -> dict[int, bytes]:
    """The live child processes of ``pid``: pid -> command line."""
    out = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            if fields[0] != "Z" and int(fields[1]) == pid:
                with open(f"/proc/{entry}/cmdline", "rb") as f:
                    out[int(entry)] = f.read()
        except (FileNotFoundError, ProcessLookupError):
            continue
    return out


def test_a_stopped_decoder_process_stalls_nothing_and_every_helper_dies_with_its_worker(kafka_bootstrap, topic_prefix,
                                                                                       start_worker):
    """Issue 44 rows 7 and 12: ``kill -STOP`` of the decoder process, then a backlog: the worker decodes the
    parts itself (counted), kills and replaces the process, and catches up; ``kill -9`` of the worker then
    leaves neither a decoder process nor the multiprocessing resource tracker behind."""
    from stepwatch.topics import create_topics

    events = topic_prefix + "events"
    create_topics(kafka_bootstrap, [events], 1)
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    worker = start_worker(STEPWATCH_WORKER_CONSUMER="aiokafka", STEPWATCH_WORKER_DECODE_PROCESSES="1",
                          STEPWATCH_WORKER_WEB_PORT=str(port), STEPWATCH_KAFKA_PARTITIONS="1")
    group = worker.env["STEPWATCH_KAFKA_APP_ID"] + "-events"
    pid = worker.proc.pid
    messages, _ = _backlog(time.time())
    _produce(kafka_bootstrap, events, messages)
    decoder = wait_until(lambda: [p for p, cmd in _children(pid).items() if b"spawn_main" in cmd], timeout=120,
                         what="the decoder process started")[0]
    wait_until(lambda: group_caught_up(kafka_bootstrap, group, events), timeout=180, what="the first backlog read")
    before = _metric(base, "stepwatch_decoder_fallbacks_total")
    os.kill(decoder, signal.SIGSTOP)
    _produce(kafka_bootstrap, events, messages)  # the same again: large reads for the stopped process
    wait_until(lambda: group_caught_up(kafka_bootstrap, group, events), timeout=180,
               what="the second backlog read past the stopped decoder")
    assert _metric(base, "stepwatch_decoder_fallbacks_total") > before
    wait_until(lambda: not _alive(decoder), timeout=30, what="the stopped decoder process killed")
    assert "no plan within" in worker.log_text()
    assert get(base + "/health")[0] == 200

    helpers = _children(pid)
    assert any(b"resource_tracker" in cmd for cmd in helpers.values()), helpers
    worker.proc.kill()  # kill -9: none of the worker's own clean-up runs
    worker.proc.wait()
    for child in helpers:
        wait_until(lambda: not _alive(child), timeout=30, what=f"{helpers[child][:80]!r} gone with its worker")
