"""(b) End to end through a Kafka broker, one worker process: the stepwatch worker with each events consumer
(``STEPWATCH_WORKER_CONSUMER``: the Faust agent, ``faust``, and its own aiokafka consumer, ``aiokafka``;
bench/children/worker_rate.py) vs a bare aiokafka consumer that only reads and decodes the same messages,
for batch envelopes and single-event messages, and a trivial default Faust agent (counts raw messages;
bench/children/trivial_faust_agent.py) on the same messages."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

from bench.common import BATCH, CONSUMERS, PY, REPO, encode, produce, sim_events


def _child(module: str, args: list[str], out: Path, timeout: float, consumer: str | None = None) -> dict:
    """Run ``bench.children.<module> ARGS OUT`` until it has written OUT (or ``timeout``); its result."""
    log = open(str(out) + ".log", "w")
    env = dict(os.environ, **({"STEPWATCH_WORKER_CONSUMER": consumer} if consumer else {}))
    proc = subprocess.Popen([PY, "-m", f"bench.children.{module}", *args, str(out)],
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

    from stepwatch.models.wire.step_columns import decode_message_columns

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
                    first, cpu = time.perf_counter(), time.thread_time()
                    # Like the Faust runs: the clock starts at the first record (it is counted below).
                for rec in records:
                    events += len(decode_message_columns(rec.value)[0])  # as the worker decodes
                    seen += 1
        return {"messages": seen, "events": events, "seconds": time.perf_counter() - first,
                "cpu_seconds": time.thread_time() - cpu}
    finally:
        await consumer.stop()


def consumers(bootstrap: str, tmpd: Path, single_events: int = 100_000, batched_events: int = 400_000) -> dict:
    """One row per message shape, ``batched`` and ``single``: each consumer's rate on the same messages."""
    from stepwatch.localkafka import create_topics

    results: dict = {}
    events = sim_events(1024, -(-batched_events // 1024))[:batched_events]
    plans = {"batched": encode(events, BATCH), "single": encode(events[:single_events], 1)}
    for kind, messages in plans.items():
        n_events = batched_events if kind == "batched" else single_events
        prefix = f"b{kind[0]}{uuid.uuid4().hex[:6]}."
        topic = prefix + "events"
        create_topics(bootstrap, [topic], partitions=1)
        t = time.perf_counter()
        produce(bootstrap, topic, messages)
        produce_s = time.perf_counter() - t
        bare = asyncio.run(_bare(bootstrap, topic, len(messages)))
        row = {"messages": len(messages), "events": n_events, "produce_s": produce_s,
               "bare_events_s": bare["events"] / bare["seconds"],
               "bare_messages_s": bare["messages"] / bare["seconds"]}
        for mode in CONSUMERS:  # one after another on the same messages (own consumer groups)
            sw = _child("worker_rate", [bootstrap, prefix, str(n_events)], tmpd / f"sw-{kind}-{mode}.json",
                        timeout=300, consumer=mode)
            name = "stepwatch" if mode == "faust" else f"stepwatch_{mode}"
            row[f"{name}_events_s"] = sw["events"] / sw["seconds"]
            row[f"{name}_messages_s"] = sw["events"] / sw["seconds"] / (n_events / len(messages))
        if kind == "single":
            triv = _child("trivial_faust_agent", [bootstrap, topic, str(len(messages))], tmpd / "trivial.json",
                          timeout=300)
            row["trivial_messages_s"] = triv["messages"] / triv["seconds"]
        else:
            triv = _child("trivial_faust_agent", [bootstrap, topic, str(len(messages))], tmpd / "trivial-b.json",
                          timeout=300)
            row["trivial_messages_s"] = triv["messages"] / triv["seconds"]
            row["trivial_events_s"] = row["trivial_messages_s"] * BATCH
        results[kind] = row
        print(f"kafka {kind}: {row}", file=sys.stderr)
    return results
