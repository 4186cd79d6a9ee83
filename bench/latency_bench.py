"""(d) Alert latency through the broker and one worker: live jobs with a straggler each, from sending the event
that makes the rule true to the alert's arrival on the alerts topic (p50/p99)."""

from __future__ import annotations

import asyncio
import sys
import time
import uuid
from pathlib import Path

from bench.common import Workers, encode, ensure_topics


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
    ensure_topics(bootstrap, prefix, 1)
    workers = Workers(bootstrap, prefix, 1, 1, tmp, consumer=consumer)
    try:
        workers.wait(lambda st: st[0]["assigned"] == [0], 120, "partition assignment")
        out = asyncio.run(_latency_run(bootstrap, prefix, jobs=jobs, ranks=ranks, period=period, steps=steps))
    finally:
        workers.stop()
    out["consumer"] = consumer
    print(f"latency ({consumer}): {out}", file=sys.stderr)
    return out
