"""Throughput and scale of one worker, measured side by side on this machine.

    .venv/bin/python bench/throughput.py                 # all parts, table into BENCHMARKS.md
    .venv/bin/python bench/throughput.py --skip-kafka    # core and memory only (no JVM)

(a) core: events/s through ``decode_message`` + ``DetectionEngine.process``, single-event
    messages vs batch envelopes of 256 events, and decode alone, on the same simulated job;
(b) end to end through a real local broker (``stepwatch.localkafka.LocalKafka``): the stepwatch
    worker (``streams.worker.Worker``) with each events consumer (``STEPWATCH_WORKER_CONSUMER``:
    the Faust agent, ``faust``, and its own aiokafka consumer, ``aiokafka``) vs a bare aiokafka
    consumer that only reads and decodes the same messages, for batch envelopes and single-event
    messages, and a trivial default Faust agent (counts raw messages) on the same messages;
(c) memory per tracked rank and CPU per event for jobs of 1k, 4k and 16k ranks (RSS and
    tracemalloc in a fresh process per size).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

REPO = Path(__file__).resolve().parents[1]
PY = sys.executable
BATCH = 256


def sim_events(ranks: int, steps: int, seed: int = 1) -> list[dict]:
    from stepwatch.producers.simulator import ClusterSimulator, SimulationSpec

    spec = SimulationSpec(job=f"bench-{ranks}", ranks=ranks, steps=steps, seed=seed, checkpoint_every=0,
                          warmup_steps=0)
    return [e for e in ClusterSimulator(spec).events() if e["kind"] == "step"]


def encode(events: list[dict], per_message: int) -> list[bytes]:
    from stepwatch.models.events import encode_events

    return [encode_events(events[i:i + per_message]) for i in range(0, len(events), per_message)]


# -- (a) core ------------------------------------------------------------------------------------


def core(ranks: int = 1024, steps: int = 40, rounds: int = 2) -> dict:
    from stepwatch.models.engine import DetectionEngine
    from stepwatch.models.events import decode_message
    from stepwatch.models.step_columns import decode_message_columns

    events = sim_events(ranks, steps)
    single = encode(events, 1)
    batched = encode(events, BATCH)
    n = len(events)

    def decode_only(msgs):
        t = time.perf_counter()
        k = 0
        for m in msgs:
            k += len(decode_message(m)[0])
        assert k == n
        return n / (time.perf_counter() - t)

    def full(msgs):
        engine = DetectionEngine()
        t = time.perf_counter()
        for m in msgs:
            for ev in decode_message(m)[0]:
                engine.process(ev)
        return n / (time.perf_counter() - t)

    def decode_columns(msgs):
        t = time.perf_counter()
        for m in msgs:
            decode_message_columns(m)
        return n / (time.perf_counter() - t)

    def full_columns(msgs):  # what the worker does: columns for plain step envelopes, one call per message
        engine = DetectionEngine()
        t = time.perf_counter()
        for m in msgs:
            engine.process_batch(decode_message_columns(m)[0])
        return n / (time.perf_counter() - t)

    out = {"events": n, "ranks": ranks, "steps": steps}
    for name, fn, msgs in (("decode_single", decode_only, single), ("decode_batched", decode_only, batched),
                           ("full_single", full, single), ("full_batched", full, batched),
                           ("decode_columns", decode_columns, batched), ("full_columns", full_columns, batched)):
        out[name] = max(fn(msgs) for _ in range(rounds))
    return out


def profile(ranks: int = 1024, steps: int = 30, top: int = 8) -> list[tuple[str, float]]:
    """Own-time share of the hottest functions on the batched core path, as the worker runs it (cProfile)."""
    import cProfile
    import pstats

    from stepwatch.models.engine import DetectionEngine
    from stepwatch.models.step_columns import decode_message_columns

    msgs = encode(sim_events(ranks, steps), BATCH)
    engine = DetectionEngine()
    prof = cProfile.Profile()
    prof.enable()
    for m in msgs:
        engine.process_batch(decode_message_columns(m)[0])
    prof.disable()
    st = pstats.Stats(prof)
    total = sum(v[2] for v in st.stats.values())
    rows = sorted(st.stats.items(), key=lambda kv: -kv[1][2])[:top]
    out = []
    for (file, line, fn), v in rows:
        where = f"{Path(file).parent.name}/{Path(file).name}:{fn}" if file != "~" else fn
        out.append((where, v[2] / total))
    return out


# -- (c) memory ------------------------------------------------------------------------------------


MEMORY_CHILD = r"""
import gc, json, sys, time, tracemalloc
ranks, steps = int(sys.argv[1]), int(sys.argv[2])
def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096
sys.path.insert(0, sys.argv[3])
from throughput import sim_events
from stepwatch.models.engine import DetectionEngine
from stepwatch.models.events import parse_event
batches = []
for s in range(steps):
    evs = sim_events(ranks, 1, seed=s)
    for e in evs:
        e["step"] = s
        e["ts"] += s
    batches.append([parse_event(e) for e in evs])
gc.collect()
base_rss = rss()
tracemalloc.start()
engine = DetectionEngine()
t = time.process_time()
n = 0
for evs in batches:
    for e in evs:
        engine.process(e)
    n += len(evs)
cpu = time.process_time() - t
batches = None
gc.collect()
current, peak = tracemalloc.get_traced_memory()
tracemalloc.stop()
print(json.dumps({"ranks": ranks, "events": n, "cpu_per_event_us": 1e6 * cpu / n, "traced": current,
                  "traced_peak": peak, "rss_total": rss(), "rss_delta": rss() - base_rss}))
"""


def memory(sizes=(1024, 4096, 16384), steps: int = 20) -> list[dict]:
    out = []
    for ranks in sizes:
        r = subprocess.run([PY, "-c", MEMORY_CHILD, str(ranks), str(steps), str(Path(__file__).parent)],
                           capture_output=True, text=True, timeout=600)
        if r.returncode:
            raise RuntimeError(r.stderr[-2000:])
        out.append(json.loads(r.stdout.strip().splitlines()[-1]))
    return out


# -- (b) end to end through Kafka ------------------------------------------------------------------


STEPWATCH_CHILD = r"""
import json, os, signal, sys, time
sys.path.insert(0, sys.argv[5])
from stepwatch.config import Settings
from stepwatch.streams.app import create_app
from stepwatch.topics import ensure_topics
bootstrap, prefix, target, out = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
# An app id (consumer groups) of its own per consumer mode: the aiokafka consumer would otherwise start
# where the Faust agent's group left the topic (its upgrade path), i.e. at the end.
mode = os.environ.get("STEPWATCH_WORKER_CONSUMER", "default")
os.environ.update(KAFKA_BOOTSTRAP=bootstrap, STEPWATCH_KAFKA_TOPIC_PREFIX=prefix, STEPWATCH_KAFKA_PARTITIONS="1",
                  STEPWATCH_KAFKA_APP_ID=prefix + "stepwatch-" + mode, STEPWATCH_WORKER_WEB_PORT="0",
                  STEPWATCH_WORKER_DATADIR=out + ".faust")
settings = Settings.from_env()
ensure_topics(settings.kafka)  # as `stepwatch worker` does (the events topic exists already)
app = create_app(settings)
engine = app.stepwatch_worker.engine
state = {"first": None}
@app.timer(interval=0.02)
async def watch():
    n = sum(engine.events_by_kind.values())
    if n and state["first"] is None:
        state["first"] = (time.perf_counter(), n)
    if n >= target:
        t0, n0 = state["first"]
        dt = time.perf_counter() - t0
        with open(out, "w") as f:
            json.dump({"events": n - n0, "seconds": dt}, f)
        os.kill(os.getpid(), signal.SIGTERM)
from faust.worker import Worker
Worker(app, loglevel="warning", quiet=True).execute_from_commandline()
"""

TRIVIAL_CHILD = r"""
import json, os, signal, sys, time
import faust
bootstrap, topic, target, out = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
app = faust.App("trivial-" + os.path.basename(out), broker="kafka://" + bootstrap, value_serializer="raw",
                web_enabled=False, datadir=out + ".faust", consumer_auto_offset_reset="earliest",
                topic_disable_leader=True)
src = app.topic(topic, value_serializer="raw")
state = {"n": 0, "first": None}
@app.agent(src)
async def count(stream):
    async for value in stream:
        if state["first"] is None:
            state["first"] = time.perf_counter()
        state["n"] += 1
        if state["n"] >= target:
            with open(out, "w") as f:
                json.dump({"messages": state["n"] - 1, "seconds": time.perf_counter() - state["first"]}, f)
            os.kill(os.getpid(), signal.SIGTERM)
from faust.worker import Worker
Worker(app, loglevel="warning", quiet=True).execute_from_commandline()
"""


def _child(code: str, args: list[str], out: Path, timeout: float, consumer: str | None = None) -> dict:
    log = open(str(out) + ".log", "w")
    env = dict(os.environ, **({"STEPWATCH_WORKER_CONSUMER": consumer} if consumer else {}))
    proc = subprocess.Popen([PY, "-c", code, *args, str(out)] + ([str(REPO)] if code is STEPWATCH_CHILD else []),
                            stdout=log, stderr=subprocess.STDOUT, cwd=REPO, env=env)
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    log.close()
    if not out.exists():
        text = Path(str(out) + '.log').read_text()
        raise RuntimeError(f"child {out.name} ({consumer or 'default'} consumer) produced no result in {timeout:.0f} s:"
                           f"\n{text[:3000]}\n...\n{text[-1500:]}")
    return json.loads(out.read_text())


async def _bare(bootstrap: str, topic: str, count: int) -> dict:
    from aiokafka import AIOKafkaConsumer

    from stepwatch.models.step_columns import decode_message_columns

    consumer = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest",
                                enable_auto_commit=False, group_id=None)
    await consumer.start()
    try:
        seen = events = 0
        first = None
        while seen < count:
            batch = await consumer.getmany(timeout_ms=1000, max_records=10_000)
            for records in batch.values():
                if first is None and records:
                    first = time.perf_counter()
                    # Like the Faust runs: the clock starts at the first record (it is counted below).
                for rec in records:
                    events += len(decode_message_columns(rec.value)[0])  # as the worker decodes
                    seen += 1
        return {"messages": seen, "events": events, "seconds": time.perf_counter() - first}
    finally:
        await consumer.stop()


def _produce(bootstrap: str, topic: str, messages: list[bytes]) -> None:
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=20, batch_size=1 << 20,
                             max_request_size=8 << 20, acks=1)
    for m in messages:
        producer.send(topic, key=b"bench", value=m)
    producer.flush()
    producer.close()


#: The worker's events consumers compared in (b) and (d): STEPWATCH_WORKER_CONSUMER values.
CONSUMERS = ("faust", "aiokafka")


def kafka(single_events: int = 100_000, batched_events: int = 400_000) -> dict:
    from stepwatch.localkafka import LocalKafka, create_topics

    results: dict = {}
    # The first rebalance of a group waits a little, so that two workers started together share it.
    with tempfile.TemporaryDirectory(prefix="stepwatch-tput-") as tmp, LocalKafka(
            heap="768m", extra_config={"group.initial.rebalance.delay.ms": 3000}) as broker:
        tmpd = Path(tmp)
        bootstrap = broker.bootstrap
        events = sim_events(1024, -(-batched_events // 1024))[:batched_events]
        plans = {"batched": encode(events, BATCH), "single": encode(events[:single_events], 1)}
        for kind, messages in plans.items():
            n_events = batched_events if kind == "batched" else single_events
            prefix = f"b{kind[0]}{uuid.uuid4().hex[:6]}."
            topic = prefix + "events"
            create_topics(bootstrap, [topic], partitions=1)
            t = time.perf_counter()
            _produce(bootstrap, topic, messages)
            produce_s = time.perf_counter() - t
            bare = asyncio.run(_bare(bootstrap, topic, len(messages)))
            row = {"messages": len(messages), "events": n_events, "produce_s": produce_s,
                   "bare_events_s": bare["events"] / bare["seconds"],
                   "bare_messages_s": bare["messages"] / bare["seconds"]}
            for mode in CONSUMERS:  # one after another on the same messages (own consumer groups)
                sw = _child(STEPWATCH_CHILD, [bootstrap, prefix, str(n_events)], tmpd / f"sw-{kind}-{mode}.json",
                            timeout=300, consumer=mode)
                name = "stepwatch" if mode == "faust" else f"stepwatch_{mode}"
                row[f"{name}_events_s"] = sw["events"] / sw["seconds"]
                row[f"{name}_messages_s"] = sw["events"] / sw["seconds"] / (n_events / len(messages))
            if kind == "single":
                triv = _child(TRIVIAL_CHILD, [bootstrap, topic, str(len(messages))], tmpd / "trivial.json",
                              timeout=300)
                row["trivial_messages_s"] = triv["messages"] / triv["seconds"]
            else:
                triv = _child(TRIVIAL_CHILD, [bootstrap, topic, str(len(messages))], tmpd / "trivial-b.json",
                              timeout=300)
                row["trivial_messages_s"] = triv["messages"] / triv["seconds"]
                row["trivial_events_s"] = row["trivial_messages_s"] * BATCH
            results[kind] = row
            print(f"kafka {kind}: {row}", file=sys.stderr)
        results["latency"] = latency(bootstrap, tmpd)
        results["latency_aiokafka"] = latency(bootstrap, tmpd, consumer="aiokafka")
        results["scale"] = scale(bootstrap, tmpd)
        results["large_job"] = large_job(bootstrap, tmpd)
    return results


# -- (d) alert latency and (e) two workers, through the broker -------------------------------------

WORKER_CHILD = r"""
import json, os, sys, time
sys.path.insert(0, sys.argv[4])
from stepwatch.config import Settings
from stepwatch.streams.app import create_app
bootstrap, prefix, partitions, out = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[5]
os.environ.update(KAFKA_BOOTSTRAP=bootstrap, STEPWATCH_KAFKA_TOPIC_PREFIX=prefix, STEPWATCH_KAFKA_PARTITIONS=partitions,
                  STEPWATCH_KAFKA_APP_ID=prefix + "stepwatch", STEPWATCH_WORKER_WEB_PORT="0",
                  STEPWATCH_WORKER_DATADIR=out + ".faust")
app = create_app(Settings.from_env())
engine = app.stepwatch_worker.engine
events_topic = prefix + "events"
state = {"first": None, "last": None, "n": -1}
@app.timer(interval=0.02)
async def watch():  # progress for the parent: events seen, first and last time the count moved
    n = sum(engine.events_by_kind.values())
    owned = app.stepwatch_worker.events_owned  # STEPWATCH_WORKER_CONSUMER=aiokafka
    assigned = sorted(owned) if owned is not None else sorted(tp.partition for tp in app.consumer.assignment()
                                                     if tp.topic == events_topic)
    if n != state["n"] or assigned != state.get("assigned"):
        now = time.time()
        if n > 0 and state["first"] is None:
            # The first count is seen after its batch was processed: rates leave those events out.
            state["first"], state["n_first"] = now, n
            state["cpu_first"] = time.process_time()
        if n != state["n"]:
            state["last"] = now
            state["cpu_last"] = time.process_time()
        state["n"], state["assigned"] = n, assigned
        with open(out + ".tmp", "w") as f:
            json.dump(state, f)
        os.replace(out + ".tmp", out)
from faust.worker import Worker
Worker(app, loglevel="warning", quiet=True).execute_from_commandline()
"""


class _Workers:
    """Worker processes of one consumer group, read through their progress files."""

    def __init__(self, bootstrap: str, prefix: str, partitions: int, count: int, tmp: Path,
                 consumer: str = "aiokafka", env: dict | None = None) -> None:
        self.outs = [tmp / f"{prefix}w{i}.json" for i in range(count)]
        env = dict(os.environ, STEPWATCH_WORKER_CONSUMER=consumer, **(env or {}))
        self.procs = [subprocess.Popen([PY, "-c", WORKER_CHILD, bootstrap, prefix, str(partitions), str(REPO), str(o)],
                                       stdout=open(str(o) + ".log", "w"), stderr=subprocess.STDOUT, cwd=REPO, env=env)
                      for o in self.outs]

    def states(self) -> list[dict]:
        out = []
        for o in self.outs:
            try:
                out.append(json.loads(o.read_text()))
            except (OSError, ValueError):
                out.append({"n": 0, "assigned": [], "first": None, "last": None})
        return out

    def wait(self, cond, timeout: float, what: str) -> list[dict]:
        end = time.time() + timeout
        while time.time() < end:
            st = self.states()
            if cond(st):
                return st
            for p, o in zip(self.procs, self.outs):
                if p.poll() is not None:
                    raise RuntimeError(f"worker exited: {Path(str(o) + '.log').read_text()[-2000:]}")
            time.sleep(0.05)
        raise RuntimeError(f"timed out waiting for {what}: {self.states()}")

    def stop(self) -> None:
        _terminate(self.procs, 20)


def _terminate(procs: list[subprocess.Popen], timeout: float) -> None:
    """SIGTERM them all, then SIGKILL whichever has not exited after ``timeout`` seconds."""
    for p in procs:
        p.terminate()
    for p in procs:
        try:
            p.wait(timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def _ensure(bootstrap: str, prefix: str, partitions: int) -> None:
    from stepwatch.config import Settings
    from stepwatch.topics import ensure_topics

    ensure_topics(Settings.from_env({"KAFKA_BOOTSTRAP": bootstrap, "STEPWATCH_KAFKA_TOPIC_PREFIX": prefix,
                                     "STEPWATCH_KAFKA_PARTITIONS": str(partitions)}).kafka)


def _multi_job_messages(jobs: int, ranks: int, total: int) -> list[tuple[bytes, bytes]]:
    """(key, envelope) for ``jobs`` jobs of ``ranks`` ranks, interleaved by step, ``total`` events in all."""
    from kafka.partitioner.default import murmur2

    # Job names that the producer's partitioner spreads evenly over the 2 partitions.
    names, count, i = [], [0, 0], 0
    while len(names) < jobs:
        name = f"bench-mj{i}"
        i += 1
        p = (murmur2(name.encode()) & 0x7fffffff) % 2  # as the producer's default partitioner
        if count[p] < jobs // 2 + jobs % 2:
            count[p] += 1
            names.append(name)
    per_job = [encode(sim_events_job(name, ranks, -(-total // (jobs * ranks)), seed=j), BATCH)
               for j, name in enumerate(names)]
    out = []
    for i in range(max(map(len, per_job))):
        for name, msgs in zip(names, per_job):
            if i < len(msgs):
                out.append((name.encode(), msgs[i]))
    return out


def sim_events_job(job: str, ranks: int, steps: int, seed: int) -> list[dict]:
    events = sim_events(ranks, steps, seed=seed)
    for e in events:
        e["job"] = job
    return events


def scale(bootstrap: str, tmp: Path, *, jobs: int = 8, ranks: int = 512, total: int = 400_000) -> dict:
    """One worker vs two workers of one group on a 2-partition events topic (jobs keyed to partitions)."""
    messages = _multi_job_messages(jobs, ranks, total)
    n_events = sum(len(orjson_loads(m)["events"]) for _, m in messages)
    out = {"jobs": jobs, "ranks": ranks, "events": n_events, "messages": len(messages)}
    for count in (1, 2):
        prefix = f"bs{count}{uuid.uuid4().hex[:6]}."
        _ensure(bootstrap, prefix, 2)
        # The load is on the topic before the workers start (the producer would be the limit
        # otherwise); the bench broker delays a group's first rebalance, so both workers join it.
        _produce_keyed(bootstrap, prefix + "events", messages)
        workers = _Workers(bootstrap, prefix, 2, count, tmp)
        try:
            st = workers.wait(lambda st: sum(s["n"] for s in st) >= n_events, 300, "all events")
            first = min(s["first"] for s in st if s["first"])
            last = max(s["last"] for s in st)
            # Events counted from the first processed batch on (of the worker that started first).
            head = min((s for s in st if s["first"]), key=lambda s: s["first"])["n_first"]
            out[f"w{count}_events_s"] = (n_events - head) / (last - first)
            out[f"w{count}_split"] = [s["n"] for s in st]
            out[f"w{count}_assigned"] = [s["assigned"] for s in st]
        finally:
            workers.stop()
        print(f"scale {count} worker(s): {out}", file=sys.stderr)
    return out


# -- (f) one large job over several processes: the shard stage ------------------------------------


def _cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class _ShardStages:
    """``stepwatch shard`` processes of one group; CPU counted from their partition assignment on."""

    def __init__(self, bootstrap: str, prefix: str, count: int, tmp: Path) -> None:
        import socket

        exe = str(Path(PY).parent / "stepwatch")
        env = dict(os.environ, KAFKA_BOOTSTRAP=bootstrap, STEPWATCH_KAFKA_TOPIC_PREFIX=prefix,
                   STEPWATCH_KAFKA_APP_ID=prefix + "stepwatch")
        self.ports = []
        for _ in range(count):
            with socket.socket() as sock:
                sock.bind(("127.0.0.1", 0))
                self.ports.append(sock.getsockname()[1])
        self.logs = [tmp / f"{prefix}shard{i}.log" for i in range(count)]
        self.procs = [subprocess.Popen([exe, "shard", "--metrics-port", str(port)], stdout=open(log, "w"),
                                       stderr=subprocess.STDOUT, cwd=REPO, env=env)
                      for log, port in zip(self.logs, self.ports)]
        self.cpu_start: list[float | None] = [None] * count
        self.started: list[float | None] = [None] * count

    def published(self) -> int:
        """Events the stage published (acknowledged by the broker), from the processes' /metrics."""
        import urllib.request

        total = 0
        for port in self.ports:
            try:
                text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2).read().decode()
            except OSError:
                continue
            for line in text.splitlines():
                if line.startswith("stepwatch_shard_events_published_total "):
                    total += int(float(line.split()[1]))
        return total

    def poll(self) -> None:
        for i, (p, log) in enumerate(zip(self.procs, self.logs)):
            if p.poll() is not None:
                raise RuntimeError(f"shard stage exited: {log.read_text()[-2000:]}")
            if self.cpu_start[i] is None and "assigned partitions" in log.read_text():
                self.cpu_start[i] = _cpu_seconds(p.pid)
                self.started[i] = time.time()

    def cpu(self) -> list[float]:
        return [_cpu_seconds(p.pid) - (c or 0.0) for p, c in zip(self.procs, self.cpu_start)]

    def stop(self) -> list[int]:
        """Stop them; the messages each consumed (from its last log line)."""
        import re

        _terminate(self.procs, 40)  # they flush and commit on SIGTERM
        out = []
        for log in self.logs:
            m = re.search(r"consumed (\d+) messages", log.read_text())
            out.append(int(m.group(1)) if m else -1)
        return out


def large_job(bootstrap: str, tmp: Path, *, ranks: int = 4096, steps: int = 40, shard_ranks: int = 512,
              partitions: int = 2) -> dict:
    """One job of ``ranks`` ranks sending single-event messages, keyed by rank shard onto a raw events
    topic of ``partitions`` partitions: (1) one worker reads them all (each consumer mode); (2) two
    ``stepwatch shard`` processes re-batch them per job and one worker reads the job-events topic."""
    from stepwatch.localkafka import create_topics
    from stepwatch.producers.publisher import shard_key

    events = sim_events_job("bench-large", ranks, steps, seed=3)
    messages = [(shard_key("bench-large", e["rank"], shard_ranks).encode(), encode([e], 1)[0]) for e in events]
    n = len(messages)
    out: dict = {"ranks": ranks, "steps": steps, "events": n, "shard_ranks": shard_ranks, "partitions": partitions}
    for mode in CONSUMERS:  # (1) one worker on the single-event messages
        prefix = f"lj{mode[0]}{uuid.uuid4().hex[:6]}."
        _ensure(bootstrap, prefix, partitions)
        _produce_keyed(bootstrap, prefix + "events", messages)
        workers = _Workers(bootstrap, prefix, partitions, 1, tmp, consumer=mode)
        try:
            (st,) = workers.wait(lambda st: st[0]["n"] >= n, 600, "all events")
            out[f"one_{mode}_events_s"] = (n - st["n_first"]) / (st["last"] - st["first"])
            out[f"one_{mode}_cpu_us"] = (st["cpu_last"] - st["cpu_first"]) / (n - st["n_first"]) * 1e6
        finally:
            workers.stop()
        print(f"large job, one worker ({mode}): {out}", file=sys.stderr)
    # (2) the two stages one after the other, each on a full topic, so that each one's own rate shows:
    # two shard processes re-batch the whole raw topic (clock: from their partition assignment, both
    # waiting for the group's first rebalance, to the last event acknowledged on job-events), then one
    # worker reads job-events (clock: its first event to its last, as in (1)).
    prefix = f"ljs{uuid.uuid4().hex[:6]}."
    _ensure(bootstrap, prefix, partitions)
    create_topics(bootstrap, [prefix + "job-events"], partitions=1)
    _produce_keyed(bootstrap, prefix + "events", messages)
    stages = _ShardStages(bootstrap, prefix, 2, tmp)
    try:
        end = time.time() + 600
        while stages.published() < n:
            stages.poll()
            if time.time() > end:
                raise RuntimeError(f"timed out: the shard stage published {stages.published()} of {n} events")
            time.sleep(0.05)
        done = time.time()
        shard_cpu = stages.cpu()
        out["shard_events_s"] = n / (done - min(t for t in stages.started if t is not None))
        out["shard_cpu_us"] = [c / n * 1e6 for c in shard_cpu]
    finally:
        out["shard_messages"] = stages.stop()
    workers = _Workers(bootstrap, prefix, 1, 1, tmp, consumer="aiokafka",
                       env={"STEPWATCH_KAFKA_EVENTS_TOPIC": "job-events"})
    try:
        (st,) = workers.wait(lambda st: st[0]["n"] >= n, 600, "all events")
        out["staged_events_s"] = (n - st["n_first"]) / (st["last"] - st["first"])
        out["staged_worker_cpu_us"] = (st["cpu_last"] - st["cpu_first"]) / (n - st["n_first"]) * 1e6
    finally:
        workers.stop()
    print(f"large job, shard stage: {out}", file=sys.stderr)
    return out


def orjson_loads(raw: bytes):
    import orjson

    return orjson.loads(raw)


def _produce_keyed(bootstrap: str, topic: str, messages: list[tuple[bytes, bytes]]) -> None:
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=20, batch_size=1 << 20,
                             max_request_size=8 << 20, acks=1)
    for key, m in messages:
        producer.send(topic, key=key, value=m)
    producer.flush()
    producer.close()


async def _latency_run(bootstrap: str, prefix: str, *, jobs: int, ranks: int, period: float, steps: int) -> dict:
    """Live load: each job sends one envelope per step (event time = now); one straggler per job
    from a step of its own. Latency: the send of the envelope of the step the alert names as
    ``detected_step`` to the alert's arrival at a consumer of the alerts topic."""
    import random

    import orjson
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

    rng = random.Random(7)
    onset = {f"lat{j}": 14 + (j * 7) % max(1, steps - 20) for j in range(jobs)}
    sent: dict[tuple[str, int], float] = {}
    got: dict[str, float] = {}
    consumer = AIOKafkaConsumer(prefix + "alerts", bootstrap_servers=bootstrap, auto_offset_reset="earliest",
                                group_id=None, fetch_max_wait_ms=5)
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=0, max_request_size=8 << 20)
    await consumer.start()
    await producer.start()

    async def read_alerts():
        while True:
            batch = await consumer.getmany(timeout_ms=50)
            now = time.time()
            for records in batch.values():
                for rec in records:
                    a = orjson.loads(rec.value)
                    if a["type"] == "straggler" and a["status"] == "firing" and a["job"] not in got:
                        step = a["evidence"].get("detected_step")
                        if (a["job"], step) in sent:
                            got[a["job"]] = now - sent[(a["job"], step)]

    reader = asyncio.ensure_future(read_alerts())
    try:
        t0 = time.time()
        for step in range(steps):
            for j in range(jobs):
                job = f"lat{j}"
                now = time.time()
                events = []
                for r in range(ranks):
                    slow = 1.5 if (r == 3 and step >= onset[job]) else 1.0
                    compute = 0.8 * period * slow * (1 + rng.gauss(0, 0.01))
                    events.append({"v": 1, "kind": "step", "job": job, "rank": r, "step": step, "ts": now,
                                   "step_time": compute + 0.2 * period, "compute_time": compute,
                                   "comm_time": 0.2 * period, "node": f"n{r // 8}", "gpu": r % 8,
                                   "world_size": ranks})
                sent[(job, step)] = time.time()
                await producer.send(prefix + "events", key=job.encode(), value=encode(events, len(events))[0])
            await asyncio.sleep(max(0.0, t0 + (step + 1) * period - time.time()))
        end = time.time() + 10
        while len(got) < jobs and time.time() < end:
            await asyncio.sleep(0.1)
    finally:
        reader.cancel()
        await producer.stop()
        await consumer.stop()
    import numpy as np

    lat = np.array(sorted(got.values()))
    return {"jobs": jobs, "ranks": ranks, "period": period, "alerts": len(lat), "events_s": jobs * ranks / period,
            "p50": float(np.percentile(lat, 50)) if len(lat) else None,
            "p99": float(np.percentile(lat, 99)) if len(lat) else None,
            "max": float(lat.max()) if len(lat) else None}


def latency(bootstrap: str, tmp: Path, *, jobs: int = 100, ranks: int = 16, period: float = 0.25,
            steps: int = 45, consumer: str = "faust") -> dict:
    prefix = f"bl{uuid.uuid4().hex[:6]}."
    _ensure(bootstrap, prefix, 1)
    workers = _Workers(bootstrap, prefix, 1, 1, tmp, consumer=consumer)
    try:
        workers.wait(lambda st: st[0]["assigned"] == [0], 120, "partition assignment")
        out = asyncio.run(_latency_run(bootstrap, prefix, jobs=jobs, ranks=ranks, period=period, steps=steps))
    finally:
        workers.stop()
    out["consumer"] = consumer
    print(f"latency ({consumer}): {out}", file=sys.stderr)
    return out


# -- report ------------------------------------------------------------------------------------------


def markdown(core_r: dict | None, kafka_r: dict | None, mem_r: list | None, command: str,
             prof: list | None = None) -> str:
    from _report import stamp

    k = lambda x: f"{x / 1000:,.0f}k" if x >= 10_000 else f"{x:,.0f}"  # noqa: E731
    lines = ["## Throughput and scale (`bench/throughput.py`)", "", stamp(command).rstrip(), ""]
    if core_r:
        c = core_r
        lines += [f"### (a) Core: decode + detection in one process ({c['ranks']}-rank job, {c['events']:,} step "
                  f"events, best of 2)", "",
                  "| path | single-event messages | batch envelopes (256 events) | batched / single |",
                  "|---|---:|---:|---:|",
                  f"| decode only (`decode_message`) | {k(c['decode_single'])} ev/s | {k(c['decode_batched'])} ev/s | "
                  f"{c['decode_batched'] / c['decode_single']:.2f}x |",
                  f"| decode + `DetectionEngine.process` | {k(c['full_single'])} ev/s | {k(c['full_batched'])} ev/s | "
                  f"{c['full_batched'] / c['full_single']:.2f}x |",
                  f"| detection share of the batched path | | {1 - c['full_batched'] / c['decode_batched']:.0%} "
                  f"of the time | |",
                  f"| worker's path: `decode_message_columns` + `process_batch` | | {k(c['full_columns'])} ev/s "
                  f"(decode alone {k(c['decode_columns'])}) | **{c['full_columns'] / c['full_batched']:.2f}x** "
                  f"the per-event path |", ""]
    if kafka_r:
        b, s = kafka_r["batched"], kafka_r["single"]
        lines += ["### (b) End to end through a local Kafka broker, one worker process", "",
                  "Clocks start at the first message each consumer sees (startup and group join excluded); "
                  "all consumers read the same messages from one partition, one after another.", "",
                  "| consumer | batch envelopes (256 ev/msg) | single-event messages |", "|---|---:|---:|",
                  f"| bare aiokafka consumer, read + decode as the worker does (`decode_message_columns`) | "
                  f"{k(b['bare_events_s'])} ev/s | "
                  f"{k(s['bare_events_s'])} ev/s |",
                  f"| stepwatch worker, Faust agent (`STEPWATCH_WORKER_CONSUMER=faust`; full detection) | "
                  f"{k(b['stepwatch_events_s'])} ev/s | {k(s['stepwatch_events_s'])} ev/s |",
                  f"| stepwatch worker, own aiokafka consumer (`STEPWATCH_WORKER_CONSUMER=aiokafka`, default; full "
                  f"detection) | {k(b['stepwatch_aiokafka_events_s'])} ev/s | "
                  f"{k(s['stepwatch_aiokafka_events_s'])} ev/s |",
                  f"| trivial default Faust agent (counts raw messages) | {k(b['trivial_events_s'])} ev/s | "
                  f"{k(s['trivial_messages_s'])} ev/s |",
                  f"| stepwatch (faust) / bare | {b['stepwatch_events_s'] / b['bare_events_s']:.2f} | "
                  f"{s['stepwatch_events_s'] / s['bare_events_s']:.2f} |",
                  f"| **stepwatch (aiokafka) / bare** (target >= 0.5 batched) | "
                  f"**{b['stepwatch_aiokafka_events_s'] / b['bare_events_s']:.2f}** | "
                  f"**{s['stepwatch_aiokafka_events_s'] / s['bare_events_s']:.2f}** |",
                  f"| stepwatch (faust) / trivial Faust | {b['stepwatch_events_s'] / b['trivial_events_s']:.2f} | "
                  f"{s['stepwatch_events_s'] / s['trivial_messages_s']:.2f} |",
                  f"| **stepwatch (aiokafka) / trivial Faust** (target >= 3 single) | "
                  f"{b['stepwatch_aiokafka_events_s'] / b['trivial_events_s']:.2f} | "
                  f"**{s['stepwatch_aiokafka_events_s'] / s['trivial_messages_s']:.2f}** |",
                  f"| stepwatch aiokafka / faust | {b['stepwatch_aiokafka_events_s'] / b['stepwatch_events_s']:.2f}x | "
                  f"{s['stepwatch_aiokafka_events_s'] / s['stepwatch_events_s']:.2f}x |",
                  f"| messages / events | {b['messages']:,} / {b['events']:,} | {s['messages']:,} / {s['events']:,} |",
                  ""]
        lat, sc = kafka_r.get("latency"), kafka_r.get("scale")
        if lat:
            ms = lambda x: "-" if x is None else f"{1000 * x:,.0f} ms"  # noqa: E731
            lines += ["### (d) Alert latency through the broker and one worker", "",
                      f"{lat['jobs']} live jobs of {lat['ranks']} ranks, one batch envelope per job and step every "
                      f"{lat['period']:g} s ({k(lat['events_s'])} events/s), one straggler (1.5x compute) per job "
                      "from a step of its own. Latency: from sending the envelope of the step the alert names as "
                      "`detected_step` (the event that makes the rule true) to the alert's arrival at a consumer "
                      "of the alerts topic.", "",
                      "| events consumer | alerts measured | p50 | p99 | max |", "|---|---:|---:|---:|---:|"]
            for one in (lat, kafka_r.get("latency_aiokafka")):
                if one:
                    lines.append(f"| {one.get('consumer', 'faust')} | {one['alerts']} / {one['jobs']} | "
                                 f"{ms(one['p50'])} | {ms(one['p99'])} | {ms(one['max'])} |")
            lines.append("")
        if sc:
            lines += ["### (e) Two workers on one machine, one consumer group, events topic of 2 partitions", "",
                      f"{sc['jobs']} jobs of {sc['ranks']} ranks keyed by job ({sc['events']:,} events in "
                      f"{sc['messages']:,} envelopes of {BATCH}, half of the jobs on each partition), on the topic "
                      "before the workers start; clock from the first event any worker processes to the last. The "
                      "workers and the broker share the machine's cores.", "",
                      "| workers | events/s (all workers) | events per worker | vs one worker |", "|---:|---:|---|---:|",
                      f"| 1 | {k(sc['w1_events_s'])} | {', '.join(f'{x:,}' for x in sc['w1_split'])} | 1.00x |",
                      f"| 2 | {k(sc['w2_events_s'])} | {', '.join(f'{x:,}' for x in sc['w2_split'])} | "
                      f"**{sc['w2_events_s'] / sc['w1_events_s']:.2f}x** |", ""]
        lj = kafka_r.get("large_job")
        if lj:
            us = lambda x: f"{x:.1f} us"  # noqa: E731
            shard_cpu = sum(lj["shard_cpu_us"])
            lines += ["### (f) One large job over several processes: the shard stage", "",
                      f"One job of {lj['ranks']:,} ranks, {lj['steps']} steps, **single-event messages** "
                      f"({lj['events']:,}) keyed by rank shard (`job/<rank // {lj['shard_ranks']}>`) onto a raw "
                      f"events topic of {lj['partitions']} partitions, on the topic before the consumers start. "
                      "A worker reads them all (each consumer mode), or two `stepwatch shard` processes re-batch "
                      "them per job onto job-events and a worker reads that: the two stages run one after the other, "
                      "each on a full topic, so that each one's own rate shows (what one process of each stage "
                      "sustains; on separate machines a pipeline runs at the slower of N shard processes and one "
                      "job-stage worker). Worker rates: its first processed batch to its last event; shard stage: "
                      "from the processes' partition assignment to the last envelope acknowledged. CPU per event: "
                      "each process's own clock (`process_time` for workers, `/proc` for the shard processes).", "",
                      "| stage | events/s | CPU per event |", "|---|---:|---:|",
                      f"| one worker reads the single-event messages, Faust agent | {k(lj['one_faust_events_s'])} | "
                      f"{us(lj['one_faust_cpu_us'])} |",
                      f"| one worker reads the single-event messages, aiokafka consumer (default) | "
                      f"{k(lj['one_aiokafka_events_s'])} | {us(lj['one_aiokafka_cpu_us'])} |",
                      f"| shard stage: 2 `stepwatch shard` processes together "
                      f"({', '.join(f'{m:,}' for m in lj['shard_messages'])} messages each) | "
                      f"{k(lj['shard_events_s'])} | {us(shard_cpu)} "
                      f"({' + '.join(us(c) for c in lj['shard_cpu_us'])}) |",
                      f"| job stage: one worker reads the shard stage's envelopes (aiokafka consumer) | "
                      f"**{k(lj['staged_events_s'])}** | **{us(lj['staged_worker_cpu_us'])}** |",
                      f"| job stage / one worker on single-event messages (aiokafka) | "
                      f"**{lj['staged_events_s'] / lj['one_aiokafka_events_s']:.2f}x** | "
                      f"{lj['staged_worker_cpu_us'] / lj['one_aiokafka_cpu_us']:.2f}x |", ""]
    if mem_r:
        lines += ["### (c) Memory and CPU per tracked rank (fresh process per size, 20 steps through the engine)", "",
                  "| ranks | engine memory (tracemalloc) | per rank | RSS growth | process RSS | CPU per event |",
                  "|---:|---:|---:|---:|---:|---:|"]
        for m in mem_r:
            lines.append(f"| {m['ranks']:,} | {m['traced'] / 2**20:.1f} MiB | {m['traced'] / m['ranks'] / 1024:.1f} KiB | "
                         f"{m['rss_delta'] / 2**20:.1f} MiB | {m['rss_total'] / 2**20:.0f} MiB | "
                         f"{m['cpu_per_event_us']:.1f} us |")
        big = mem_r[-1]
        lines += ["", f"At {big['ranks']:,} ranks and one step per second the engine needs "
                      f"{big['ranks'] * big['cpu_per_event_us'] / 1e6:.2f} CPU-seconds per second of events "
                      f"(core only, no Kafka); RSS of the whole process {big['rss_total'] / 2**20:.0f} MiB."]
    if prof:
        lines += ["", "### Hot spots (cProfile, batched core path, own time)", "",
                  "| function | share |", "|---|---:|"] + [f"| `{f}` | {share:.0%} |" for f, share in prof]
    verdicts = targets(kafka_r, mem_r)
    if verdicts:
        lines += ["", verdicts]
    return "\n".join(lines) + "\n"


def targets(kafka_r: dict | None, mem_r: list | None) -> str:
    """The issue's targets, judged on this run's figures (so the verdicts always match the tables)."""
    if not kafka_r:
        return ""
    ok = lambda cond: "**met**" if cond else "**not met**"  # noqa: E731
    k = lambda x: f"{x / 1000:,.0f}k"  # noqa: E731
    b, s, lat = kafka_r["batched"], kafka_r["single"], kafka_r.get("latency_aiokafka") or kafka_r.get("latency")
    rate, bare = b["stepwatch_aiokafka_events_s"], b["bare_events_s"]
    single = s["stepwatch_aiokafka_events_s"] / s["trivial_messages_s"]
    out = ["### Against the targets", "",
           f"- Batch envelopes through the full detection path, one worker (default consumer): {k(rate)} events/s "
           f"(target 200k: {ok(rate >= 200_000)}), {rate / bare:.2f}x the bare consumer on the same messages "
           f"(target 0.5: {ok(rate >= 0.5 * bare)}). The worker decodes a plain step envelope column by column "
           "(`decode_message_columns`) and `DetectionEngine.process_batch` judges it with array operations (same "
           "alerts and state as event by event: tests/test_batch_path.py); the Faust agent mode reaches "
           f"{b['stepwatch_events_s'] / bare:.2f}x.",
           f"- Single-event messages: {single:.1f}x a trivial default Faust agent (target 3x: {ok(single >= 3)}); "
           "the worker's own aiokafka consumer merges consecutive step messages of a partition (up to 1,024 "
           "events) into one column batch.",
           ]
    if lat:
        out.append(f"- Alert latency: p99 {1000 * lat['p99']:,.0f} ms on top of the rule's own wait (target < 1 s: "
                   f"{ok(lat['p99'] < 1.0)}).")
    sc, lj = kafka_r.get("scale"), kafka_r.get("large_job")
    if sc:
        out.append(f"- Two workers split a multi-job load by partition: {sc['w2_events_s'] / sc['w1_events_s']:.2f}x "
                   "one worker, on a machine whose 2 cores also run the broker.")
    if lj:
        out.append(f"- One large job over several processes: the shard stage takes the per-message work (the "
                   f"processes split the raw topic's partitions: {', '.join(f'{m:,}' for m in lj['shard_messages'])} "
                   f"messages), and the job's worker then runs at {k(lj['staged_events_s'])} events/s, "
                   f"{lj['staged_events_s'] / lj['one_aiokafka_events_s']:.2f}x what it sustains on the same job's "
                   "single-event messages: the job is no longer capped by one worker's per-message rate; more shard "
                   "processes (on more machines) carry more messages, up to the job stage's envelope rate.")
    if mem_r:
        big = mem_r[-1]
        out.append(f"- {big['ranks']:,} ranks at one step per second in one worker: "
                   f"{big['ranks'] * big['cpu_per_event_us'] / 1e6:.2f} CPU-s per second, "
                   f"{big['rss_total'] / 2**20:.0f} MiB RSS (target < 1 GiB: {ok(big['rss_total'] < 2**30)}).")
    return "\n".join(out)



def main(argv: list[str] | None = None) -> int:
    from _report import update_section

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--skip-kafka", action="store_true", help="skip the broker part (b)")
    ap.add_argument("--skip-core", action="store_true")
    ap.add_argument("--skip-memory", action="store_true")
    ap.add_argument("--single-events", type=int, default=100_000, help="single-event messages in (b)")
    ap.add_argument("--batched-events", type=int, default=400_000, help="events in envelopes in (b)")
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args(argv)
    argv_list = argv if argv is not None else sys.argv[1:]
    command = ".venv/bin/python bench/throughput.py" + ("" if not argv_list else " " + " ".join(argv_list))
    core_r = None if args.skip_core else core()
    if core_r:
        print(f"core: {core_r}", file=sys.stderr)
    mem_r = None if args.skip_memory else memory()
    if mem_r:
        print(f"memory: {mem_r}", file=sys.stderr)
    prof = None if args.skip_core else profile()
    kafka_r = None if args.skip_kafka else kafka(args.single_events, args.batched_events)
    text = markdown(core_r, kafka_r, mem_r, command, prof)
    print(text)
    if not args.no_write:
        update_section("throughput", text)
        print("updated BENCHMARKS.md", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
