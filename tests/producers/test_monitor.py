"""The rank monitor (producers/monitor.py): hot path, bounded queue, heartbeats, close; no torch needed."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
import time

import pytest

from stepwatch.models.wire.events import parse_event
from stepwatch.producers.collectives import _union_length
from stepwatch.producers.monitor import RankMonitor


def closed_port() -> str:
    """A local address nothing listens on (so connecting is refused)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{s.getsockname()[1]}"


class Capture:
    """A sink that keeps every batch the sender thread hands over."""

    def __init__(self) -> None:
        self.events: list[dict] = []
        self.lock = threading.Lock()

    def __call__(self, batch: list[dict]) -> None:
        with self.lock:
            self.events.extend(batch)

    def of(self, kind: str) -> list[dict]:
        with self.lock:
            return [e for e in self.events if e["kind"] == kind]


def stepwatch_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("stepwatch-")]


def test_config_from_torch_env_and_explicit_args_win():
    env = {"RANK": "3", "WORLD_SIZE": "8", "LOCAL_RANK": "1", "STEPWATCH_JOB": "job-a", "KAFKA_BOOTSTRAP": "kb:9092",
           "STEPWATCH_KAFKA_TOPIC_PREFIX": "t-x.", "STEPWATCH_GROUP": "stage0", "STEPWATCH_NODE": "n7"}
    m = RankMonitor(environ=env, enabled=False)
    c = m.config
    assert (c.job, c.rank, c.world_size, c.gpu, c.node, c.group) == ("job-a", 3, 8, 1, "n7", "stage0")
    assert (c.bootstrap, c.topic) == ("kb:9092", "t-x.events")
    m = RankMonitor(environ=env, enabled=False, rank=5, job="job-b", topic="mine", bootstrap="other:1")
    assert (m.config.rank, m.config.job, m.config.topic, m.config.bootstrap) == (5, "job-b", "mine", "other:1")
    m = RankMonitor(environ={}, enabled=False)
    assert (m.config.rank, m.config.topic, m.config.job) == (0, "stepwatch.events", "default")
    assert m.config.node  # the host name
    assert not m.threads  # disabled: no thread at all


def test_events_are_wire_format_and_compute_time_excludes_data_and_collective_waits():
    sink = Capture()
    m = RankMonitor(job="j", rank=1, world_size=4, gpu=1, group="g0", sink=sink, heartbeat_interval=0.05,
                    collective_events=True, environ={})
    m.phase("warmup")
    for i in range(3):
        with m.step(tokens=4096, samples=8):
            with m.data():
                time.sleep(0.02)
            time.sleep(0.01)  # compute
            with m.collective("allreduce"):
                time.sleep(0.03)  # waiting for peers
    with m.phase("checkpoint"):
        time.sleep(0.06)
    m.end()
    m.close(timeout=5)
    for event in sink.events:
        parse_event(event)  # raises if not wire format
    steps = [parse_event(e) for e in sink.of("step")]
    assert [s.step for s in steps] == [0, 1, 2]
    for s in steps:
        assert s.phase == "warmup" and (s.job, s.rank, s.world_size, s.gpu, s.group) == ("j", 1, 4, 1, "g0")
        assert s.tokens == 4096 and s.samples == 8
        # A sleep never ends early, but may end late on a loaded machine: lower bounds for each part, and
        # the parts add up to the step. Time moved from one part to another breaks a lower bound.
        assert s.data_time >= 0.02 and s.comm_time >= 0.03 and s.compute_time >= 0.01
        assert s.step_time == pytest.approx(s.compute_time + s.data_time + s.comm_time)
        assert s.extra["comm_calls"] == 1 and s.extra["comm_seq"] == s.step + 1
    assert [p["phase"] for p in sink.of("phase")] == ["warmup", "checkpoint", "warmup", "end"]
    colls = [parse_event(e) for e in sink.of("collective")]
    assert [c.seq for c in colls] == [1, 2, 3] and all(c.op == "allreduce" and c.duration >= 0.03 for c in colls)
    beats = [parse_event(e) for e in sink.of("heartbeat")]
    assert beats and beats[-1].seq_started == beats[-1].seq_completed == 3
    assert m.stats()["sent"] == m.produced == len(sink.events) and m.dropped == 0


def test_data_wait_before_the_step_counts_towards_it():
    sink = Capture()
    m = RankMonitor(job="j", sink=sink, heartbeat_interval=0, environ={})

    def loader():
        for _ in range(2):
            time.sleep(0.02)
            yield 1

    for _ in m.loader(loader()):
        with m.step():
            time.sleep(0.01)
    m.close()
    steps = sink.of("step")
    assert len(steps) == 2
    for s in steps:  # lower bounds: a sleep may overrun on a loaded machine, never undershoot
        assert s["data_time"] >= 0.02 and s["compute_time"] >= 0.01
        assert s["step_time"] == pytest.approx(s["data_time"] + s["compute_time"])


def test_full_queue_drops_the_oldest_and_counts():
    m = RankMonitor(job="j", bootstrap=closed_port(), heartbeat_interval=0, queue_size=10, environ={})
    for _ in range(25):
        m.begin_step()
        m.end_step()
    s = m.stats()
    assert (s["produced"], s["dropped"], s["queued"], s["sent"]) == (25, 15, 10, 0)
    assert [e["step"] for _, events in m.transport.queued() for e in events] == list(range(15, 25))  # the freshest
    m.close(timeout=1)
    assert (m.produced, m.dropped, m.sent) == (25, 25, 0)


def test_hot_path_never_raises_nor_blocks_when_kafka_is_unreachable():
    before = set(stepwatch_threads())  # threads of earlier tests may end meanwhile: only ours are compared
    m = RankMonitor(job="j", rank=0, bootstrap=closed_port(), heartbeat_interval=0.05, queue_size=100, environ={})
    ours = [t for t in stepwatch_threads() if t not in before]
    assert ours  # the monitor's sender and heartbeat threads
    worst = 0.0
    for i in range(300):
        t = time.perf_counter()
        with m.step(samples=1):
            with m.data():
                pass
            with m.collective():
                pass
        if i % 50 == 0:
            m.phase("eval")
            m.phase("train")
        worst = max(worst, time.perf_counter() - t)
        time.sleep(0.001)
    # Misuse is absorbed and counted, never raised into the training loop.
    m.phase("no-such-phase")
    m.end_step()  # no step open
    m.end_step(samples="many")
    m.begin_step()
    m.end_step(samples="many")
    assert m.errors >= 2
    # Waiting on Kafka would take max_block_ms (1 s) or a bootstrap (2 s); a loaded machine's scheduling, far less.
    assert worst < 0.5, f"a hot-path call took {worst * 1000:.1f} ms"
    t = time.perf_counter()
    m.close(timeout=1.0)
    assert time.perf_counter() - t < 3.0
    assert m.sent == 0 and m.dropped == m.produced > 300
    for thread in ours:  # a sender still inside a bootstrap attempt ends once it returns (a daemon: bounded)
        thread.join(timeout=30)
    assert [t.name for t in ours if t.is_alive()] == []
    m.close()  # idempotent
    with m.step():  # after close: still harmless
        pass


def test_heartbeats_continue_while_the_training_thread_is_blocked():
    sink = Capture()
    m = RankMonitor(job="j", rank=2, sink=sink, heartbeat_interval=0.1, flush_interval=0.02, environ={})
    with m.step():
        with m.collective():
            pass
    m.begin_step()
    m.collective_begin()  # issued a collective that never completes ...
    blocked = threading.Event()
    t0 = time.time()
    deadline = time.monotonic() + 30  # ... and the training thread is stuck in it, while heartbeats go on
    while len([e for e in sink.of("heartbeat") if e["ts"] > t0 + 0.05]) < 5 and time.monotonic() < deadline:
        blocked.wait(0.05)
    during = [e for e in sink.of("heartbeat") if e["ts"] > t0 + 0.05]
    assert len(during) >= 5, during
    last = parse_event(during[-1])
    assert (last.step, last.seq_started, last.seq_completed) == (0, 2, 1)
    assert during[-1]["in_step"] is True
    m.close(timeout=2)
    assert not m.threads[0].is_alive() and not m.threads[1].is_alive()


def test_close_is_bounded_and_joins_its_threads():
    before = len(stepwatch_threads())
    m = RankMonitor(job="j", bootstrap=closed_port(), heartbeat_interval=0.05, environ={})
    assert len(stepwatch_threads()) == before + 3  # sender, heartbeat, control reader (stack requests)
    for _ in range(5):
        with m.step():
            pass
    t = time.perf_counter()
    m.close(timeout=0.5)
    assert time.perf_counter() - t < 3.0
    # The sender may still be inside a connection attempt; it is a daemon and exits right after.
    deadline = time.monotonic() + 5
    while len(stepwatch_threads()) > before and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(stepwatch_threads()) == before
    assert m.sent + m.dropped == m.produced


def test_exit_without_close_is_prompt_when_kafka_is_down(tmp_path):
    script = textwrap.dedent(f"""
        from stepwatch.producers.monitor import RankMonitor
        m = RankMonitor(job="j", bootstrap="{closed_port()}", heartbeat_interval=0.1, close_timeout=1.0)
        for _ in range(10):
            with m.step():
                pass
        print("done", flush=True)
    """)
    t = time.monotonic()
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    assert "done" in out.stdout
    assert time.monotonic() - t < 15


def test_union_of_overlapping_collectives():
    assert _union_length([], 0, 10) == 0
    assert _union_length([(1, 3), (2, 4), (6, 7)], 0, 10) == pytest.approx(4)
    assert _union_length([(-5, 1), (9, 20)], 0, 10) == pytest.approx(2)  # clipped to the step


@pytest.mark.kafka
def test_events_reach_kafka_and_atexit_flushes_without_close(kafka_bootstrap, topic_prefix):
    """A process that never calls close still delivers its events: the atexit flush runs before kafka-python's."""
    from kafka import KafkaConsumer

    from stepwatch.models.wire.events import decode_message

    script = textwrap.dedent("""
        import time
        from stepwatch.producers.monitor import RankMonitor
        m = RankMonitor(job="exit-job", rank=0, heartbeat_interval=0.2)
        m.phase("warmup")
        for i in range(20):
            with m.step(samples=4):
                time.sleep(0.005)
        m.end()
        print(m.produced, flush=True)
    """)
    env = {**__import__("os").environ, "KAFKA_BOOTSTRAP": kafka_bootstrap, "STEPWATCH_KAFKA_TOPIC_PREFIX": topic_prefix}
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, env=env)
    assert out.returncode == 0, out.stderr
    produced = int(out.stdout.split()[-1])
    consumer = KafkaConsumer(topic_prefix + "events", bootstrap_servers=kafka_bootstrap, auto_offset_reset="earliest",
                             enable_auto_commit=False, group_id=None, consumer_timeout_ms=5000)
    events = []
    for record in consumer:
        assert record.key == b"exit-job"
        good, bad = decode_message(record.value)
        assert not bad
        events.extend(good)
    consumer.close()
    assert [e.step for e in events if e.kind == "step"] == list(range(20))
    assert [e.phase for e in events if e.kind == "phase"] == ["warmup", "end"]
    assert len(events) >= produced - 1  # a heartbeat may be queued after the count was printed
