"""The live worker's decoder process: reads decoded on a second core while the worker detects on the first.

Decoding a read (parsing the JSON, checking every column) costs about as much as detecting on it, and one
Python thread does one at a time. Under load the events consumer (streams/events_consumer.py) hands each
large read's message values to this process, which works out its ``ReadPlan`` (models/wire/decode_plan.py:
pure, the same function ``Pipeline`` would run), and meanwhile the worker detects on the previous read. The
plan comes back packed (columns as arrays); ``Pipeline.feed_planned`` feeds it as ``feed`` would.

Small reads (a worker keeping up with its topic) are decoded in process: the trip costs more than it saves.
If the process dies, a plan fails, or a plan is not back within ``PLAN_DEADLINE_SECONDS`` of the worker
asking for it (a process stopped or wedged), the read is decoded in process (logged and counted in
``stepwatch_decoder_fallbacks_total``), the process is killed and a new one started for the next read:
nothing is lost and nothing waits on it for long. The process dies with its worker (Linux: the
parent-death signal, ``prctl(PR_SET_PDEATHSIG)``; elsewhere a thread that watches its parent), and with it
goes the ``multiprocessing`` resource tracker (it ends when the last process holding its pipe does).
``STEPWATCH_WORKER_DECODE_PROCESSES``: -1 (the default: one where the worker may use two CPUs or more), 0
(none) or 1. The process is spawned at the first large read: a worker that keeps up never starts it.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import ctypes
import logging
import multiprocessing
import os
import signal
import sys
import threading
import time

from stepwatch.models.wire.decode_plan import ReadPlan, plan_read

log = logging.getLogger("stepwatch.worker")

#: A read goes to the decoder process from this many bytes of message values on (below: in process).
MIN_OFFLOAD_BYTES = 256 << 10
#: A large read is cut into parts of at most this many messages and bytes (but one message), so that the
#: process decodes one part while the worker detects on the one before.
CHUNK_MESSAGES = 64
CHUNK_BYTES = 4 << 20
#: A part's plan not back this many seconds after the worker asks for it is decoded in the worker (the
#: process killed and replaced): a part takes well under a second to decode on a loaded core.
PLAN_DEADLINE_SECONDS = 10.0
#: A new process may take this long to start and import its modules (numpy) before that deadline counts.
START_DEADLINE_SECONDS = 60.0
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


PR_SET_PDEATHSIG = 1  # linux/prctl.h


def die_with_parent(parent: int) -> str:
    """In the decoder process (its pool's initializer): end when the worker ``parent`` ends, even by
    SIGKILL. Returns how: "pdeathsig" or "watch"."""
    if sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            armed = libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) == 0
        except (OSError, AttributeError):  # no libc prctl: the watch below
            armed = False
        if armed:
            if os.getppid() != parent:  # the worker died before the signal was armed
                os._exit(0)
            return "pdeathsig"
    threading.Thread(target=_watch_parent, args=(parent,), name="stepwatch-parent-watch", daemon=True).start()
    return "watch"


def _watch_parent(parent: int) -> None:
    while os.getppid() == parent:
        time.sleep(1.0)  # a watchdog's poll, not a wait for a condition
    os._exit(0)


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
        self._started: concurrent.futures.Future | None = None  # the process is up once this is done

    def start(self) -> None:
        """Start the process (at the first large read: a worker that keeps up never needs it)."""
        if self.enabled and self._pool is None:
            # spawn: the worker runs threads (Kafka clients, the web server); forking them is unsafe.
            self._pool = concurrent.futures.ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"),
                                                                initializer=die_with_parent,
                                                                initargs=(os.getpid(),))
            self._started = self._pool.submit(_warm)

    def stop(self, *, kill: bool = False) -> None:
        """Let the process go (``kill``: at once, even stopped or wedged: SIGKILL)."""
        pool, self._pool, self._started = self._pool, None, None
        if pool is None:
            return
        if kill:
            # No public way before Python 3.14 (``kill_workers``): the pool's own process table.
            for process in list(getattr(pool, "_processes", {}).values()):
                try:
                    process.kill()
                except (OSError, ValueError):  # already gone
                    pass
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
        warm = self._started
        if warm is not None and not warm.done():  # a process starting: its start-up is not the part's time
            starting = asyncio.wrap_future(warm)
            await asyncio.wait({starting}, timeout=START_DEADLINE_SECONDS)
            if not starting.done():
                starting.cancel()
            elif not starting.cancelled():
                starting.exception()  # retrieved: a failed start shows in the part's own result below
        waiting = asyncio.wrap_future(pending.future)
        # asyncio.wait, not await: a future the pool cancelled (it was replaced) is a failure, not our cancel.
        done, _ = await asyncio.wait({waiting}, timeout=PLAN_DEADLINE_SECONDS)
        if not done:
            waiting.cancel()
            self._failed(TimeoutError(f"no plan within {PLAN_DEADLINE_SECONDS:.0f} s"), kill=True)
            return None
        future = pending.future
        if future.cancelled():
            self._failed(concurrent.futures.CancelledError("the process was replaced"))
            return None
        exc = future.exception()
        if exc is not None:
            self._failed(exc)
            return None
        plan = future.result()
        if self.metrics is not None and plan is not None:
            self.metrics.decoder_messages.inc(pending.messages)
        return plan

    def _failed(self, exc: BaseException, *, kill: bool = False) -> None:
        log.warning("the decoder process failed (%r): this read is decoded in the worker, a new process "
                    "decodes the next ones", exc)
        if self.metrics is not None:
            self.metrics.decoder_fallbacks.inc()
        self.stop(kill=kill)
