"""(e) One worker vs two workers of one consumer group splitting a multi-job load by partition (jobs keyed to
the 2 partitions of the events topic; all on this machine, so the workers and the broker compete)."""

from __future__ import annotations

import sys
import uuid
from pathlib import Path

from bench.common import BATCH, Workers, encode, ensure_topics, produce_keyed, sim_events_job


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


def scale(bootstrap: str, tmp: Path, *, jobs: int = 8, ranks: int = 512, total: int = 400_000) -> dict:
    """One worker vs two workers of one group on a 2-partition events topic (jobs keyed to partitions)."""
    messages = _multi_job_messages(jobs, ranks, total)
    n_events = sum(len(orjson_loads(m)["events"]) for _, m in messages)
    out = {"jobs": jobs, "ranks": ranks, "events": n_events, "messages": len(messages)}
    for count in (1, 2):
        prefix = f"bs{count}{uuid.uuid4().hex[:6]}."
        ensure_topics(bootstrap, prefix, 2)
        # The load is on the topic before the workers start (the producer would be the limit
        # otherwise); the bench broker delays a group's first rebalance, so both workers join it.
        produce_keyed(bootstrap, prefix + "events", messages)
        workers = Workers(bootstrap, prefix, 2, count, tmp)
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


def orjson_loads(raw: bytes):
    import orjson

    return orjson.loads(raw)
