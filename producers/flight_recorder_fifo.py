"""PyTorch Flight Recorder dumps requested from outside the process, through its FIFO, by the node agent.

A process whose environment sets ``TORCH_NCCL_DEBUG_INFO_PIPE_FILE=<stem>`` (and
``TORCH_FR_BUFFER_SIZE``) has ProcessGroupNCCL's watchdog make a named pipe ``<stem><rank>.pipe``
(torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp, ``DumpPipe``: ``mkfifo``, opened
``O_RDONLY | O_NONBLOCK``; any bytes written there trigger a dump). The dump goes to
``<TORCH_FR_DUMP_TEMP_FILE><rank>`` (older torch: ``TORCH_NCCL_DEBUG_INFO_TEMP_FILE``; default
``/tmp/nccl_trace_rank_``), pickled as ``torch.distributed.flight_recorder`` reads it: a dict
with ``version``, ``pg_config``, ``pg_status`` and ``entries`` (each with ``process_group``
``(id, name)``, ``collective_seq_id``, ``profiling_name``, ``state``, ...).

When a hang alert asks a job's ranks for their stacks (the ``stack_request`` on the control
topic, docs/hang.md), the agent answers for the requested ranks on its node that have the FIFO:
it writes to the pipe (reached through ``/proc/<pid>/root``, the process's own mount
namespace), waits for the dump file to change, reads it with an unpickler that builds only
plain values (a dump is data, never code), and answers with a ``stack`` event whose one
"thread" is the rank's last collectives per process group, so the alert shows them as it
shows in-process stacks (``evidence.stacks``: ``"pg <name>:<seq> <profiling_name> <state>"``).
"""

from __future__ import annotations

import errno
import io
import logging
import os
import pickle
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from .proc_identity import ProcInfo, ProcTable, read_environ

log = logging.getLogger("stepwatch.agent")

DEFAULT_DUMP_STEM = "/tmp/nccl_trace_rank_"
#: Last collectives shown per process group; process groups shown (the most advanced last).
LAST_PER_GROUP = 4
MAX_GROUPS = 8
MAX_DUMP_BYTES = 256 << 20
#: Stack requests older than this (seconds, on the worker's clock) are not answered.
MAX_REQUEST_AGE = 120.0


class _PlainUnpickler(pickle.Unpickler):
    """Builds dicts, lists, tuples, strings and numbers only: refuses every global (no code runs)."""

    def find_class(self, module: str, name: str):
        raise pickle.UnpicklingError(f"a Flight Recorder dump has no objects of {module}.{name}")


def load_dump(data: bytes) -> dict:
    obj = _PlainUnpickler(io.BytesIO(data)).load()
    if not isinstance(obj, dict) or not isinstance(obj.get("entries"), list):
        raise pickle.UnpicklingError("not a Flight Recorder dump (no 'entries' list)")
    return obj


def summary_frames(dump: dict, *, per_group: int = LAST_PER_GROUP) -> list[dict]:
    """The last collectives of each process group as stack frames (oldest first, the latest last)."""
    groups: dict[str, list[dict]] = {}
    for e in dump["entries"]:
        if not isinstance(e, dict):
            continue
        pg = e.get("process_group")
        name = str(pg[1] if isinstance(pg, (list, tuple)) and len(pg) > 1 else pg)
        groups.setdefault(name, []).append(e)
    frames = []
    for name, entries in list(groups.items())[-MAX_GROUPS:]:
        entries.sort(key=lambda e: (e.get("collective_seq_id") or 0, e.get("p2p_seq_id") or 0))
        for e in entries[-per_group:]:
            seq = e.get("collective_seq_id") or e.get("p2p_seq_id") or 0
            frames.append({"file": f"pg {name}", "line": int(seq) if isinstance(seq, int) else 0,
                           "function": f"{e.get('profiling_name', '?')} {e.get('state', '?')}"})
    return frames


class FlightRecorderFifo:
    """Asks a local rank's Flight Recorder for a dump through its FIFO; ``answer()`` gives ``stack`` events."""

    def __init__(self, procs: ProcTable, *, node: str, timeout: float = 5.0,
                 clock: Callable[[], float] = time.monotonic, wait: Callable[[float], None] = time.sleep) -> None:
        self.procs = procs
        self.node = node
        self.timeout = timeout
        self.clock = clock
        self.wait = wait
        self.counts: Counter[str] = Counter()

    def local_ranks(self, job: str) -> dict[int, ProcInfo]:
        """This node's processes of ``job`` by rank (scanned from /proc)."""
        out = {}
        for pid in self.procs._pids():
            info = self.procs._info(pid)
            if info is not None and info.job == job:
                out[info.rank] = info
        return out

    def answer(self, job: str, ranks: tuple[int, ...], request_id: str) -> list[dict]:
        local = self.local_ranks(job)
        out = []
        for rank in ranks:
            info = local.get(rank)
            if info is None:
                continue  # another node's agent (or the rank's own monitor) answers
            event = self._dump(info, request_id)
            if event is not None:
                out.append(event)
        return out

    def _inside(self, info: ProcInfo, path: str) -> Path:
        return self.procs.proc / str(info.pid) / "root" / path.lstrip("/")

    def _dump(self, info: ProcInfo, request_id: str) -> dict | None:
        env = read_environ(self.procs.proc, info.pid) or {}
        stem = env.get("TORCH_NCCL_DEBUG_INFO_PIPE_FILE")
        if not stem:
            self.counts["no_fifo"] += 1
            return None
        dump_stem = (env.get("TORCH_FR_DUMP_TEMP_FILE") or env.get("TORCH_NCCL_DEBUG_INFO_TEMP_FILE")
                     or DEFAULT_DUMP_STEM)
        pipe = self._inside(info, f"{stem}{info.rank}.pipe")
        dump = self._inside(info, f"{dump_stem}{info.rank}")
        before = _mtime(dump)
        try:
            fd = os.open(pipe, os.O_WRONLY | os.O_NONBLOCK)  # never blocks: ENXIO when nobody reads it
        except OSError as exc:
            self.counts["fifo_errors"] += 1
            if exc.errno != errno.ENXIO:
                log.warning("flight recorder: cannot open %s: %s", pipe, exc)
            return None
        try:
            os.write(fd, b"1\n")
        finally:
            os.close(fd)
        deadline = self.clock() + self.timeout
        parsed, error = None, "no new dump"
        while parsed is None:
            if _mtime(dump) != before:
                try:  # the dump may be half written: read again until it parses
                    parsed = load_dump(dump.read_bytes()[:MAX_DUMP_BYTES])
                    break
                except (OSError, pickle.UnpicklingError, EOFError, ValueError) as exc:
                    error = f"{type(exc).__name__}: {exc}"
            if self.clock() >= deadline:
                self.counts["dump_timeouts"] += 1
                log.warning("flight recorder: no readable dump at %s within %gs (%s)", dump, self.timeout, error)
                return None
            self.wait(0.05)
        self.counts["dumps"] += 1
        return {"v": 1, "kind": "stack", "job": info.job, "rank": info.rank, "node": self.node, "ts": time.time(),
                "request_id": request_id, "flight_recorder": str(dump), "source": "flight_recorder",
                "threads": [{"name": "flight_recorder", "frames": summary_frames(parsed)}]}


def _mtime(path: Path) -> int | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return st.st_mtime_ns ^ st.st_size


class ControlWatcher:
    """The agent's reader of the control topic (every partition, from its end, no consumer group): each
    ``stack_request`` is answered for the requested ranks on this node that have a Flight Recorder FIFO.
    ``sink(job, events)`` gets the ``stack`` events (the agent's job-event sender)."""

    def __init__(self, fifo: FlightRecorderFifo, *, bootstrap: str, topic: str,
                 sink: Callable[[str, list[dict]], object], client_config: dict | None = None) -> None:
        self.fifo = fifo
        self.bootstrap = bootstrap
        self.topic = topic
        self.sink = sink
        self.client_config = client_config or {}
        self.answered = 0
        self.stale = 0
        self.ready = threading.Event()
        self._topic_was_missing = False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="stepwatch-agent-control", daemon=True)

    def start(self) -> "ControlWatcher":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()

    def _consumer(self):
        from kafka import KafkaConsumer, TopicPartition

        consumer = KafkaConsumer(bootstrap_servers=self.bootstrap, enable_auto_commit=False, group_id=None,
                                 client_id="stepwatch-agent-control", fetch_max_wait_ms=5000,
                                 request_timeout_ms=30_000, **self.client_config)
        partitions = consumer.partitions_for_topic(self.topic)
        if not partitions:
            consumer.close()
            self._topic_was_missing = True
            return None
        tps = [TopicPartition(self.topic, p) for p in sorted(partitions)]
        consumer.assign(tps)
        if self._topic_was_missing:
            # Created since we looked (by the first request): read it from its start, or that request is missed.
            consumer.seek_to_beginning(*tps)
        else:
            consumer.seek_to_end(*tps)
        for tp in tps:
            consumer.position(tp)  # only requests made from now on
        return consumer

    def _run(self) -> None:
        import orjson

        from stepwatch.models.hang.stacks import parse_request

        consumer, backoff = None, 1.0
        while not self._stop.is_set():
            if consumer is None:
                try:
                    consumer = self._consumer()
                except Exception as exc:  # broker away: try again, said once per kind
                    log.info("agent control topic: %s", exc)
                if consumer is None:
                    self._stop.wait(backoff)
                    backoff = min(backoff * 2, 5.0)
                    continue
                self.ready.set()
            try:
                batches = consumer.poll(timeout_ms=1000)
            except Exception as exc:
                log.warning("agent control topic: %s", exc)
                self._stop.wait(backoff)
                continue
            for records in batches.values():
                for record in records:
                    try:
                        request = parse_request(orjson.loads(record.value)) if record.value else None
                    except orjson.JSONDecodeError:
                        request = None
                    if request is None:
                        continue
                    if time.time() - request.ts > MAX_REQUEST_AGE:
                        self.stale += 1  # an old hang's request (a restarted agent): its alert has moved on
                        continue
                    try:
                        events = self.fifo.answer(request.job, request.ranks, request.request_id)
                    except Exception:  # never let one request stop the watcher
                        log.exception("flight recorder answer failed")
                        continue
                    if events:
                        self.answered += len(events)
                        self.sink(request.job, events)
        if consumer is not None:
            consumer.close()
