"""State from one hostile producer stays bounded above the idle worker (issue 44 item 7: at most ~64 MiB).

One producer sends junk within the caps it can fill alone: new jobs of many ranks, one job at its process-group
cap with ranks listed, one at its collective-key cap, one node at its GPU and port caps and many forged nodes
with a few GPUs and ports each. The state the pipeline keeps for it (traced allocations still held once the
input is handled and collected, above an idle pipeline that saw one healthy job) stays under the bound.
"""

from __future__ import annotations

import gc
import tracemalloc

import orjson
from stepwatch.models.pipeline import Message, Pipeline

T0 = 1_764_000_000.0
BOUND = 64 * 2**20


def batch(events: list[dict]) -> bytes:
    return orjson.dumps({"v": 1, "kind": "batch", "events": events})


def hostile_job_messages() -> list[bytes]:
    from stepwatch.models.hang import progress
    from stepwatch.models.jobhealth import comm
    from stepwatch.models.telemetry import telemetry_tracker as tt

    out = []
    for j in range(200):  # 200 jobs x 64 ranks (one message each)
        out.append(batch([{"v": 1, "kind": "step", "job": f"junk{j}", "rank": r, "step": 1, "ts": T0 + j,
                           "step_time": 1.0, "node": f"jn{r // 8}", "gpu": r % 8} for r in range(64)]))
    out.append(batch([{"v": 1, "kind": "step", "job": "wide", "rank": r, "step": 1, "ts": T0, "step_time": 1.0}
                      for r in range(16_384)]))  # one job of 16k ranks
    for k in range(progress.MAX_PGS // 256 + 1):  # the group cap, every group listing 64 ranks
        pgs = {f"pg{k}-{i}": {"started": 1, "completed": 1, "ranks": list(range(64))} for i in range(256)}
        out.append(orjson.dumps({"v": 1, "kind": "heartbeat", "job": "groups", "rank": 0, "ts": T0 + k, "step": 1,
                                 "pgs": pgs}))
    for k in range(comm.MAX_OP_KEYS // 256 + 1):  # the collective-key cap
        out.append(batch([{"v": 1, "kind": "collective", "job": "ops", "rank": 0, "seq": k * 256 + i + 1,
                           "op": f"op{k}-{i}", "ts": T0, "duration": 0.01} for i in range(256)]))
    out.append(batch([{"v": 1, "kind": "gpu", "node": "gnode", "ts": T0, "gpu": g, "temp_c": 60.0}
                      for g in range(tt.MAX_GPUS_PER_NODE)]))
    out.append(batch([{"v": 1, "kind": "link", "node": "gnode", "ts": T0, "device": "mlx5_0", "port": p + 1,
                       "state": "ACTIVE", "rate": 400.0, "counters": {}} for p in range(tt.MAX_PORTS_PER_NODE)]))
    return out


def forged_node_messages() -> list[bytes]:
    out = []
    for k in range(10):  # 2,000 forged nodes, 4 GPUs and 4 ports each
        out.append(batch([{"v": 1, "kind": "gpu", "node": f"f{k}-{n}", "ts": T0, "gpu": g, "temp_c": 60.0}
                          for n in range(200) for g in range(4)]))
        out.append(batch([{"v": 1, "kind": "link", "node": f"f{k}-{n}", "ts": T0, "device": "mlx5_0", "port": p + 1,
                           "state": "ACTIVE", "rate": 400.0, "counters": {}} for n in range(200) for p in range(4)]))
    return out


def _held() -> int:
    gc.collect()
    return tracemalloc.get_traced_memory()[0]


def _grown(messages: list[bytes]) -> tuple[Pipeline, int]:
    """The pipeline after ``messages`` and the bytes it holds above itself idle (one healthy job seen)."""
    pipeline = Pipeline()
    healthy = batch([{"v": 1, "kind": "step", "job": "real", "rank": r, "step": s, "ts": T0 + s, "step_time": 1.0}
                     for s in range(3) for r in range(8)])
    tracemalloc.start()
    try:
        pipeline.feed([Message(healthy, b"real", "ev", 0, 0)], arrival=T0)
        pipeline.tick(T0 + 3)
        idle = _held()
        for i, raw in enumerate(messages):
            pipeline.feed([Message(raw, b"junk", "ev", 0, i + 1)], arrival=T0 + 5)
        pipeline.tick(T0 + 6)
        return pipeline, _held() - idle
    finally:
        tracemalloc.stop()


def test_one_hostile_producers_job_state_stays_under_64_mib_above_the_idle_worker():
    pipeline, grown = _grown(hostile_job_messages())  # (built before tracing: the input is not state)
    engine = pipeline.engine
    assert "wide" in engine.jobs and "groups" in engine.jobs and len(engine.jobs) >= 200  # the junk was taken in
    print(f"hostile producer's jobs: {grown / 2**20:.1f} MiB above the idle pipeline")
    assert grown <= BOUND, grown / 2**20


def test_one_hostile_producers_forged_nodes_stay_under_64_mib_above_the_idle_worker():
    messages = forged_node_messages() * 3  # 6,000 nodes' worth: each batch again under new names
    messages = [raw.replace(b'"node":"f', b'"node":"g%d' % (i // 20)) for i, raw in enumerate(messages)]
    pipeline, grown = _grown(messages)
    print(f"hostile producer's forged nodes: {grown / 2**20:.1f} MiB above the idle pipeline")
    assert grown <= BOUND, grown / 2**20
