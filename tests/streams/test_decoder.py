"""The live worker's decoder process (streams/decoder.py), a real spawned process: it gives the plans the
worker would work out itself, a small read stays in the worker, and a process that dies loses nothing (the
read is decoded in the worker, counted, and a new process takes the next ones). The consumer around it on
the real broker: tests/streams/test_decoder_kafka.py; plans fed as reads: tests/models/wire/test_decode_plan.py."""

from __future__ import annotations

import asyncio
import os
import signal

import orjson
from prometheus_client import generate_latest

from stepwatch.models.detection import DetectionEngine
from stepwatch.models.wire.decode_plan import plan_read
from stepwatch.streams.decoder import CHUNK_MESSAGES, MIN_OFFLOAD_BYTES, Decoder, decode_processes, usable_cpus
from stepwatch.streams.metrics import WorkerMetrics

from support import process_alive as _alive
from support import wait_until


def _envelopes(n: int, ranks: int = 256) -> list[bytes]:
    return [orjson.dumps({"v": 1, "kind": "batch", "events": [
        {"v": 1, "kind": "step", "job": "j", "rank": r, "step": s, "ts": 1e9 + s, "step_time": 1.0,
         "node": f"n{r // 8}", "compute_time": 0.8} for r in range(ranks)]}) for s in range(n)]


def _counter(metrics: WorkerMetrics, name: str) -> float:
    for line in generate_latest(metrics.registry).decode().splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise AssertionError(f"{name} not exported")


_FIELDS = ("job", "rank", "step", "ts", "step_time", "compute_time", "data_time", "comm_time", "tokens", "samples",
           "node", "gpu", "group", "world_size", "phase")


def _same(plan, values) -> list:
    """A plan as plain values: each part's messages, shapes and columns (NaN as a string, to compare)."""
    out, at = [], 0
    for part in plan.parts:
        vals = values[at:at + part.messages]
        at += part.messages
        cols = part.unpack(vals) if part.columns is not None else None
        out.append((part.messages, part.shapes, None if cols is None else [
            [repr(v) for v in getattr(cols, f)] for f in _FIELDS] + [sorted(cols.jobs)]))
    return out


def test_a_read_is_cut_into_parts_only_when_large():
    decoder = Decoder(1, 256)
    small = _envelopes(2)
    assert sum(map(len, small)) < MIN_OFFLOAD_BYTES and decoder.parts(small) == []
    large = _envelopes(150)
    cuts = decoder.parts(large)
    assert cuts[0] == (0, CHUNK_MESSAGES) and cuts[-1][1] == 150
    assert all(a[1] == b[0] for a, b in zip(cuts, cuts[1:]))  # in order, nothing left out
    assert Decoder(0, 256).parts(large) == []  # no process: everything in the worker
    assert decode_processes(0) == 0 and decode_processes(5) == 1 and decode_processes(-1) in (0, 1)


def test_a_container_cpu_limit_bounds_the_cpus(tmp_path):
    limit = tmp_path / "cpu.max"
    limit.write_text("150000 100000\n")  # cgroup v2: 1.5 CPUs
    assert usable_cpus(str(limit)) == min(1.5, len(os.sched_getaffinity(0)))
    limit.write_text("max 100000\n")
    assert usable_cpus(str(limit)) == len(os.sched_getaffinity(0))
    assert usable_cpus(str(tmp_path / "absent")) == len(os.sched_getaffinity(0))


def test_the_process_gives_the_plan_the_worker_would_make_and_a_dead_one_loses_nothing():
    metrics = WorkerMetrics(DetectionEngine())
    decoder = Decoder(1, 256, metrics)
    values = _envelopes(CHUNK_MESSAGES) + [b"{not json", None]

    async def plan_of(vals):
        return await decoder.plan(decoder.submit(vals))

    try:
        got = asyncio.run(plan_of(values))
        assert got is not None and _same(got, values) == _same(plan_read(values, 256), values)
        assert _counter(metrics, "stepwatch_decoder_messages_total") == len(values)

        pool = decoder._pool
        for pid in list(pool._processes):
            os.kill(pid, signal.SIGKILL)
        wait_until(lambda: pool._broken, timeout=30, what="the pool to notice its process died")
        assert asyncio.run(plan_of(values)) is None  # the worker decodes this read itself
        assert _counter(metrics, "stepwatch_decoder_fallbacks_total") == 1
        again = asyncio.run(plan_of(values))  # a new process for the next read
        assert again is not None and _same(again, values) == _same(got, values)
        assert decoder._pool is not pool
    finally:
        decoder.stop()


def test_a_process_that_cannot_start_leaves_the_reads_to_the_worker(monkeypatch):
    import concurrent.futures

    def refuse(*args, **kwargs):
        raise OSError("no /dev/shm")

    monkeypatch.setattr(concurrent.futures, "ProcessPoolExecutor", refuse)
    metrics = WorkerMetrics(DetectionEngine())
    decoder = Decoder(1, 256, metrics)
    assert decoder.submit(_envelopes(CHUNK_MESSAGES)) is None  # decoded in the worker
    assert not decoder.enabled and decoder.parts(_envelopes(150)) == []  # and so are the next reads
    assert _counter(metrics, "stepwatch_decoder_fallbacks_total") == 1


def test_a_stopped_process_is_not_waited_for_its_read_is_decoded_in_the_worker_and_it_is_replaced(monkeypatch):
    import stepwatch.streams.decoder as decoder_module

    monkeypatch.setattr(decoder_module, "PLAN_DEADLINE_SECONDS", 2.0)
    metrics = WorkerMetrics(DetectionEngine())
    decoder = Decoder(1, 256, metrics)
    values = _envelopes(CHUNK_MESSAGES)

    async def plan_of(vals):
        return await decoder.plan(decoder.submit(vals))

    try:
        assert asyncio.run(plan_of(values)) is not None
        (pid,) = list(decoder._pool._processes)
        os.kill(pid, signal.SIGSTOP)  # kill -STOP: alive, never answers
        # Every part in flight when it stopped comes back to the worker (none waits on the stopped process).
        async def parts_in_flight():
            pending = [decoder.submit(values) for _ in range(3)]
            return [await decoder.plan(p) for p in pending]

        assert asyncio.run(parts_in_flight()) == [None, None, None]
        assert _counter(metrics, "stepwatch_decoder_fallbacks_total") >= 1
        wait_until(lambda: not _alive(pid), timeout=30, what="the stopped process killed")
        again = asyncio.run(plan_of(values))  # a new process for the next read
        assert again is not None and _same(again, values) == _same(plan_read(values, 256), values)
    finally:
        decoder.stop()


_ORPHAN_PARENT = """
import asyncio, os, sys
from stepwatch.streams.decoder import Decoder
decoder = Decoder(1, 256)
values = [b'{"v":1,"kind":"step","job":"j","rank":0,"step":1,"ts":1.0,"step_time":1.0}'] * 4
assert asyncio.run(decoder.plan(decoder.submit(values))) is not None
print(" ".join(str(p) for p in decoder._pool._processes), flush=True)
sys.stdin.read()
"""


def test_the_decoder_and_the_resource_tracker_die_with_their_worker(tmp_path):
    import subprocess
    import sys

    parent = subprocess.Popen([sys.executable, "-c", _ORPHAN_PARENT], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True)
    try:
        decoder_pid = int(parent.stdout.readline())
        children = []
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                try:
                    with open(f"/proc/{entry}/stat") as f:
                        if int(f.read().rsplit(")", 1)[1].split()[1]) == parent.pid:
                            children.append(int(entry))
                except (FileNotFoundError, ProcessLookupError):
                    continue
        tracker = [p for p in children if b"resource_tracker" in open(f"/proc/{p}/cmdline", "rb").read()]
        assert decoder_pid in children and tracker, children
        os.kill(decoder_pid, signal.SIGSTOP)  # even a stopped decoder goes
        parent.kill()  # kill -9 of the worker: no clean-up of its own runs
        parent.wait()
        for pid in [decoder_pid, *tracker]:
            wait_until(lambda: not _alive(pid), timeout=30, what=f"process {pid} gone with its worker")
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()
