"""The live worker's decoder process: reads decoded on a second core while the worker detects on the first.

Decoding a read (parsing the JSON, checking every column) costs about as much as detecting on it, and one
Python thread does one at a time. Under load the events consumer (streams/events_consumer.py) hands each
large read's message values to this process, which works out its ``ReadPlan`` (models/wire/decode_plan.py:
pure, the same function ``Pipeline`` would run), and meanwhile the worker detects on the previous read. The
plan comes back packed (columns as arrays); ``Pipeline.feed_planned`` feeds it as ``feed`` would.

Small reads (a worker keeping up with its topic) are decoded in process: the trip costs more than it saves.
If the process dies or a plan fails, the read is decoded in process (logged and counted in
``stepwatch_decoder_fallbacks_total``) and a new process is started for the next one: nothing is lost.
``STEPWATCH_WORKER_DECODE_PROCESSES``: -1 (the default: one where the worker may use two CPUs or more), 0
(none) or 1. The process is spawned at the first large read: a worker that keeps up never starts it.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import multiprocessing
import os

from stepwatch.models.wire.decode_plan import ReadPlan, plan_read

log = logging.getLogger("stepwatch.worker")

#: A read goes to the decoder process from this many bytes of message values on (below: in process).
MIN_OFFLOAD_BYTES = 256 << 10
#: A large read is cut into parts of at most this many messages and bytes (but one message), so that the
#: process decodes one part while the worker detects on the one before.
CHUNK_MESSAGES = 64
CHUNK_BYTES = 4 << 20
#: Parts read ahead at most (fetched, handed to the process, not yet detected on): the process always has
#: the next part to decode, and memory stays bounded (a few MiB of message values per part).
READ_AHEAD = 4


def usable_cpus(cpu_max: str = "/sys/fs/cgroup/cpu.max") -> float:
    """CPUs this process may use: its affinity, bounded by a cgroup v2 CPU quota (a container's CPU limit)."""
    try:
        cpus: float = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux: all of them
        cpus = os.cpu_count() or 1
    try:
        with open(cpu_max) as f:
            quota, period = f.read().split()[:2]
        if quota != "max":
            cpus = min(cpus, int(quota) / int(period))
    except (OSError, ValueError):  # no cgroup v2 quota here: the affinity is the bound
        pass
    return cpus


def decode_processes(setting: int) -> int:
    """How many decoder processes to run: the setting, or (negative: automatic) 1 with two CPUs or more (by
    affinity and the container's CPU limit)."""
    if setting >= 0:
        return min(setting, 1)  # one: a single process keeps the reads in order without a reorder buffer
    return 1 if usable_cpus() >= 2 else 0


def _warm() -> bool:
    """Import the decoder's modules in the process (numpy included) before the first read needs them."""
    plan_read([b'{"v":1,"kind":"batch","events":[{"v":1,"kind":"step","job":"j","rank":0,"step":1,"ts":1.0,'
               b'"step_time":1.0},{"v":1,"kind":"step","job":"j","rank":1,"step":1,"ts":1.0,"step_time":1.0}]}'],
              max_new_jobs=1)
    return True


class Pending:
    """One read's plan on its way from the decoder process."""

    __slots__ = ("future", "messages")

    def __init__(self, future: concurrent.futures.Future, messages: int) -> None:
        self.future = future
        self.messages = messages


class Decoder:
    """A decoder process for the events consumer (see the module's docstring).

    ``parts(values)`` cuts a read's values into the parts to hand over (none: decode it in process);
    ``submit(values)`` starts a part's plan and returns its ``Pending``, or None (decode in process);
    ``plan(pending)`` gives the plan, or None when the process failed (decode in process).
    """

    def __init__(self, processes: int, max_new_jobs: int, metrics=None) -> None:
        self.enabled = processes > 0
        self.max_new_jobs = max_new_jobs
        self.metrics = metrics
        self._pool: concurrent.futures.ProcessPoolExecutor | None = None

    def start(self) -> None:
        """Start the process (at the first large read: a worker that keeps up never needs it)."""
        if self.enabled and self._pool is None:
            # spawn: the worker runs threads (Kafka clients, the web server); forking them is unsafe.
            self._pool = concurrent.futures.ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"))
            self._pool.submit(_warm)

    def stop(self) -> None:
        pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)

    def parts(self, values: list) -> list[tuple[int, int]]:
        """``(start, end)`` of each part of a read to hand to the process, in order; [] when the read is small
        (or there is no process): decode it in process, whole."""
        if not self.enabled:
            return []
        sizes = [0 if v is None else len(v) for v in values]
        if sum(sizes) < MIN_OFFLOAD_BYTES:
            return []
        out, start, size = [], 0, 0
        for i, n in enumerate(sizes):
            if i > start and (i - start >= CHUNK_MESSAGES or size + n > CHUNK_BYTES):
                out.append((start, i))
                start, size = i, 0
            size += n
        out.append((start, len(values)))
        return out

    def submit(self, values: list) -> Pending | None:
        if not self.enabled:
            return None
        try:
            self.start()
        except Exception as exc:  # e.g. no /dev/shm for its queues: decode in the worker from now on
            log.warning("cannot start the decoder process (%r): reads are decoded in the worker", exc)
            if self.metrics is not None:
                self.metrics.decoder_fallbacks.inc()
            self.enabled = False
            return None
        try:
            return Pending(self._pool.submit(plan_read, values, self.max_new_jobs), len(values))
        except Exception as exc:  # a broken pool: a new one for the next read, this one in process
            self._failed(exc)
            return None

    async def plan(self, pending: Pending | None) -> ReadPlan | None:
        """The plan of a ``submit``, or None: decode in process (nothing was submitted, a message needs the
        engine, or the process failed: logged, counted, and the process replaced)."""
        if pending is None:
            return None
        try:
            plan = await asyncio.wrap_future(pending.future)
            if self.metrics is not None and plan is not None:
                self.metrics.decoder_messages.inc(pending.messages)
            return plan
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self._failed(exc)
            return None

    def _failed(self, exc: BaseException) -> None:
        log.warning("the decoder process failed (%r): this read is decoded in the worker, a new process "
                    "decodes the next ones", exc)
        if self.metrics is not None:
            self.metrics.decoder_fallbacks.inc()
        self.stop()
