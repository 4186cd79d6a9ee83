"""Adversarial messages through the whole pipeline: peak memory and work per message stay bounded (issue 27).

Hypothesis draws sequences of the messages that grew a worker without limit (issue 27 findings 4-6):
batches of new job ids, heartbeats with many process groups or huge ``ranks`` lists, one node with
many GPU indexes or link ports, many telemetry nodes, many collective op names, wild steps and future
timestamps. Each goes through ``Pipeline.feed`` (decode, dead letters, engine, alerts) and a tick.
Bounded: the traced peak allocation while one message is handled, relative to its size; the
state it leaves (jobs, process groups, GPUs, ports, op keys) within the documented caps; and the
work, counted as Python function calls per byte of the message (deterministic, not timed). Sized
for the 2-core CI machine (a few seconds).
"""

from __future__ import annotations

import dataclasses
import sys
import tracemalloc

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from stepwatch.config import RetentionSettings, Settings
from stepwatch.models.pipeline import Message, Pipeline

T0 = 1_764_000_000.0
MAX_JOBS = 40
#: The documented caps (docs/security.md "Bounded state"), written out so the test does not follow the code.
MAX_PGS, MAX_PG_RANK_ENTRIES, MAX_OP_KEYS, MAX_GPUS_PER_NODE, MAX_PORTS_PER_NODE = 4096, 1_000_000, 1024, 64, 256


def batch(events: list[dict]) -> bytes:
    return orjson.dumps({"v": 1, "kind": "batch", "events": events})


def new_jobs(n: int, seed: int) -> bytes:
    return batch([{"v": 1, "kind": "phase", "job": f"j{seed}-{i}", "ts": T0, "phase": "train"} for i in range(n)])


def many_pgs(n: int, ranks: int, seed: int) -> bytes:
    pgs = {f"pg{seed}-{i}": {"started": 1, "completed": 1, "ranks": list(range(ranks))} for i in range(n)}
    return orjson.dumps({"v": 1, "kind": "heartbeat", "job": "hb", "rank": 0, "ts": T0, "step": 1, "pgs": pgs})


def many_gpus(n: int, seed: int) -> bytes:
    return batch([{"v": 1, "kind": "gpu", "node": "gnode", "ts": T0, "gpu": seed * 1000 + i, "temp_c": 60.0}
                  for i in range(n)])


def many_ports(n: int, seed: int) -> bytes:
    return batch([{"v": 1, "kind": "link", "node": "pnode", "ts": T0, "device": f"mlx5_{seed}", "port": i + 1,
                   "state": "ACTIVE", "rate": 400.0, "counters": {}} for i in range(n)])


def many_nodes(n: int, seed: int) -> bytes:
    return batch([{"v": 1, "kind": "gpu", "node": f"n{seed}-{i}", "ts": T0, "gpu": 0, "temp_c": 60.0}
                  for i in range(n)])


def many_ops(n: int, seed: int) -> bytes:
    return batch([{"v": 1, "kind": "collective", "job": "ops", "rank": 0, "seq": seed * 1000 + i + 1,
                   "op": f"op{seed}-{i}", "ts": T0, "duration": 0.01} for i in range(n)])


def wild_step(step: int, ahead: float) -> bytes:
    return orjson.dumps({"v": 1, "kind": "step", "job": "wild", "rank": 0, "step": step, "ts": T0 + ahead,
                         "step_time": 1.0})


seeds = st.integers(0, 10**6)
messages = st.one_of(
    st.builds(new_jobs, st.integers(1, 600), seeds),  # over max_new_jobs_per_message (256): dead-lettered
    st.builds(many_pgs, st.integers(1, 200), st.sampled_from([0, 8, 200]), seeds),
    st.builds(many_pgs, st.just(1), st.sampled_from([70_000]), seeds),  # over MAX_PG_RANKS: dead-lettered
    st.builds(many_gpus, st.integers(1, 200), seeds),
    st.builds(many_ports, st.integers(1, 200), seeds),
    st.builds(many_nodes, st.integers(1, 200), seeds),
    st.builds(many_ops, st.integers(1, 200), seeds),
    st.builds(wild_step, st.sampled_from([1, 10**9, 2**53]), st.sampled_from([0.0, 3600.0, 1e13])),
)


def _refusals(engine) -> int:
    """Input the caps left out so far (``nodes`` is an eviction: the new node's sample is kept)."""
    return sum(n for what, n in engine.capped().items() if what != "nodes")


class CallCounter:
    """Python function calls while active (``sys.setprofile``): the work of one message, deterministically."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, frame, event, arg):
        if event == "call":
            self.calls += 1

    def __enter__(self):
        sys.setprofile(self)
        return self

    def __exit__(self, *exc):
        sys.setprofile(None)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(st.lists(messages, min_size=1, max_size=8))
def test_adversarial_messages_keep_memory_and_work_per_message_bounded(raws):
    pipeline = Pipeline(settings=dataclasses.replace(Settings(), retention=RetentionSettings(max_jobs=MAX_JOBS)))
    engine = pipeline.engine
    tracemalloc.start()
    try:
        for offset, raw in enumerate(raws):
            tracemalloc.reset_peak()
            before, _ = tracemalloc.get_traced_memory()
            jobs_before = len(engine.jobs)
            capped_before = _refusals(engine)
            with CallCounter() as work:
                out = pipeline.feed([Message(raw, b"k", "ev", 0, offset)], arrival=T0 + 1)
                pipeline.tick(T0 + 1 + offset)
            # A message opens a bounded number of jobs; whatever a cap left out of it is in its dead letter too.
            assert len(engine.jobs) - jobs_before <= engine.settings.worker.max_new_jobs_per_message
            capped = [r for d in out.deadletters for r in d.rejects if "state cap" in r.reason or "new jobs" in r.reason]
            assert (_refusals(engine) > capped_before) == bool(capped)
            _, peak = tracemalloc.get_traced_memory()
            # Memory: a multiple of the message (decoded objects, the state of each new GPU or node, at
            # most ~15 KiB for a ~80-byte sample: measured 230x) plus a constant; never the state held.
            assert peak - before <= 300 * len(raw) + 16 * 2**20, (peak - before, len(raw))
            # Work: calls per byte of the message, whatever the state already held: no scan of the jobs,
            # nodes or groups (a scan of the held jobs would cost thousands of calls per event). Measured: at
            # most 3.1 per byte, for a batch of ~72-byte events each opening a job (~220 calls to build a job's
            # rules and their parts), plus ~1,300 for one event and its tick.
            assert work.calls <= 4 * len(raw) + 20_000, (work.calls, len(raw))
    finally:
        tracemalloc.stop()
    assert len(engine.jobs) <= MAX_JOBS
    for job in engine.jobs.values():
        assert len(job.hang.progress.pg_seq) <= MAX_PGS and len(job.comm._keys) <= MAX_OP_KEYS
        assert sum(len(r) for r in job.hang.progress.pg_ranks.values() if r) <= MAX_PG_RANK_ENTRIES
    for node in engine.telemetry.tracker._nodes.values():
        assert len(node.gpus) <= MAX_GPUS_PER_NODE
        assert len(node.ports) <= MAX_PORTS_PER_NODE
