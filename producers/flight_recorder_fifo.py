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

The process, its FIFO and its dump are another user's (docs/security.md, "The node-local
attacker"). The agent answers only for ranks a launcher vouches for (producers/proc_identity.py);
the FIFO and the dump are opened inside the process's root without following a link at their
last component, and must be a FIFO and a regular file owned by the process's uid, the dump no
larger than ``MAX_DUMP_BYTES`` before a byte is read (producers/safe_files.py); the unpickler
stops after ``MAX_DUMP_OPS`` opcodes and ``MAX_DUMP_MEMO`` memo entries, so memory stays bounded
whatever the bytes. Each rank's dump is asked and read on a reader thread of its own (at most
``MAX_READERS`` at once); the control thread waits for them until the request's deadline and
moves on. Refusals are counted and logged once (producers/refusals.py).
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
from .refusals import Refusal
from .safe_files import Kind, Refused, open_checked, stat_in_root

log = logging.getLogger("stepwatch.agent")

DEFAULT_DUMP_STEM = "/tmp/nccl_trace_rank_"
#: Last collectives shown per process group; process groups shown (the most advanced last).
LAST_PER_GROUP = 4
MAX_GROUPS = 8
MAX_DUMP_BYTES = 256 << 20
#: Opcodes and memo entries the unpickler runs and keeps (a dump of 2,000 entries, the default buffer, with
#: their stack frames: ~500k opcodes; at most ~70 MiB of objects).
MAX_DUMP_OPS = 1_000_000
MAX_DUMP_MEMO = 250_000
#: Reader threads at once: one stuck for good (a FUSE mount that never answers) costs one of them.
MAX_READERS = 4
#: Stack requests older than this (seconds, on the worker's clock) are not answered.
MAX_REQUEST_AGE = 120.0


class DumpOverBudget(pickle.UnpicklingError):
    """The dump would run more opcodes or keep more memo entries than the budget."""


_MEMO_OPS = frozenset(pickle.PUT + pickle.BINPUT + pickle.LONG_BINPUT + pickle.MEMOIZE)


class _PlainUnpickler(pickle._Unpickler):
    """Builds dicts, lists, tuples, strings and numbers only: refuses every global (no code runs).

    The pure-Python unpickler, with every opcode counted: the C one grows its memo array to the
    largest index a ``LONG_BINPUT`` names (a 40 MB dump took 1.83 GB), this one keeps a dict, and
    both the opcodes run and the memo's entries are capped."""

    def __init__(self, file) -> None:
        super().__init__(file)
        ops = [0]

        def counted(op: int, fn):
            def run(self) -> None:
                ops[0] += 1
                if ops[0] > MAX_DUMP_OPS:
                    raise DumpOverBudget(f"more than {MAX_DUMP_OPS} opcodes")
                if op in _MEMO_OPS and len(self.memo) >= MAX_DUMP_MEMO:
                    raise DumpOverBudget(f"more than {MAX_DUMP_MEMO} memo entries")
                fn(self)
            return run

        self.dispatch = {op: counted(op, fn) for op, fn in pickle._Unpickler.dispatch.items()}

    def find_class(self, module: str, name: str):
        raise pickle.UnpicklingError(f"a Flight Recorder dump has no objects of {module}.{name}")

    def persistent_load(self, pid):
        raise pickle.UnpicklingError("a Flight Recorder dump has no persistent ids")


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
        entries.sort(key=lambda e: (_int(e.get("collective_seq_id")), _int(e.get("p2p_seq_id"))))
        for e in entries[-per_group:]:
            seq = _int(e.get("collective_seq_id")) or _int(e.get("p2p_seq_id"))
            frames.append({"file": f"pg {name}", "line": int(seq) if isinstance(seq, int) else 0,
                           "function": f"{e.get('profiling_name', '?')} {e.get('state', '?')}"})
    return frames


def _int(value) -> int:
    """A sequence number of a dump (any value a hostile dump holds sorts as 0)."""
    return value if type(value) is int else 0


class FlightRecorderFifo:
    """Asks a local rank's Flight Recorder for a dump through its FIFO; ``answer()`` gives ``stack`` events."""

    def __init__(self, procs: ProcTable, *, node: str, timeout: float = 5.0,
                 clock: Callable[[], float] = time.monotonic, wait: Callable[[float], None] = time.sleep) -> None:
        self.procs = procs
        self.refusals = procs.refusals
        self.node = node
        self.timeout = timeout
        self.clock = clock
        self.wait = wait
        self.counts: Counter[str] = Counter()
        self._readers = threading.BoundedSemaphore(MAX_READERS)

    def local_ranks(self, job: str) -> dict[int, ProcInfo]:
        """This node's processes of ``job`` by rank that a launcher vouches for (scanned from /proc)."""
        return self.procs.processes_of(job)

    def answer(self, job: str, ranks: tuple[int, ...], request_id: str) -> list[dict]:
        """The ``stack`` events of ``ranks`` of ``job`` on this node, each dumped and read on a reader thread;
        returns by ``timeout`` (and a second) whatever the ranks' files do."""
        local = self.local_ranks(job)
        pending = []
        for rank in ranks:
            info = local.get(rank)
            if info is None:
                continue  # another node's agent (or the rank's own monitor) answers
            if not self._readers.acquire(blocking=False):
                self.counts["readers_busy"] += 1
                self.refusals.refuse(Refusal.READERS_BUSY, f"{MAX_READERS} Flight Recorder reads still stuck: "
                                     f"rank {rank} of {job} not asked")
                continue
            box: list[dict | None] = []
            done = threading.Event()
            thread = threading.Thread(target=self._read_on_thread, args=(info, request_id, box, done),
                                      name=f"stepwatch-agent-fr-{info.pid}", daemon=True)
            thread.start()
            pending.append((info, box, done))
        deadline = time.monotonic() + self.timeout + 1.0
        out = []
        for info, box, done in pending:
            if not done.wait(max(0.0, deadline - time.monotonic())):
                self.counts["read_deadlines"] += 1
                self.refusals.refuse(Refusal.READ_DEADLINE, f"Flight Recorder of pid {info.pid} (rank {info.rank} of "
                                     f"{info.job}) not read within {self.timeout + 1:g}s: left to its reader thread")
                continue
            if box and box[0] is not None:
                out.append(box[0])
        return out

    def _read_on_thread(self, info: ProcInfo, request_id: str, box: list, done: threading.Event) -> None:
        try:
            box.append(self._dump(info, request_id))
        except Exception:  # a reader bug must not take the watcher down
            log.exception("flight recorder: reading pid %d failed", info.pid)
        finally:
            done.set()
            self._readers.release()

    def _refuse(self, exc: Refused, info: ProcInfo) -> None:
        self.counts["refused_files"] += 1
        self.refusals.refuse(exc.cause, f"Flight Recorder of pid {info.pid} (uid {info.uid}, rank {info.rank} of "
                                        f"{info.job}): {exc}")

    def _dump(self, info: ProcInfo, request_id: str) -> dict | None:
        env = read_environ(self.procs.proc, info.pid) or {}
        stem = env.get("TORCH_NCCL_DEBUG_INFO_PIPE_FILE")
        if not stem:
            self.counts["no_fifo"] += 1
            return None
        dump_stem = (env.get("TORCH_FR_DUMP_TEMP_FILE") or env.get("TORCH_NCCL_DEBUG_INFO_TEMP_FILE")
                     or DEFAULT_DUMP_STEM)
        root = self.procs.proc / str(info.pid) / "root"  # the process's own mount namespace
        pipe, dump = f"{stem}{info.rank}.pipe", f"{dump_stem}{info.rank}"
        before = _version(root, dump)
        try:  # never blocks: O_NONBLOCK, ENXIO when nobody reads it
            fd, _ = open_checked(root, pipe, kind=Kind.FIFO, uid=info.uid, flags=os.O_WRONLY)
        except Refused as exc:
            self._refuse(exc, info)
            return None
        except OSError as exc:
            self.counts["fifo_errors"] += 1
            if exc.errno != errno.ENXIO:
                log.warning("flight recorder: cannot open %s%s: %s", root, pipe, exc)
            return None
        try:
            os.write(fd, b"1\n")
        except OSError as exc:  # a full pipe (EAGAIN): a dump is already asked for
            log.info("flight recorder: writing %s: %s", pipe, exc)
        finally:
            os.close(fd)
        deadline = self.clock() + self.timeout
        parsed, error = None, "no new dump"
        while parsed is None:
            if _version(root, dump) != before:
                try:  # the dump may be half written: read again until it parses
                    parsed = load_dump(_read_checked(root, dump, info.uid))
                    break
                except Refused as exc:
                    self._refuse(exc, info)
                    return None
                except DumpOverBudget as exc:
                    self._refuse(Refused(Refusal.UNPICKLE_BUDGET, f"{dump}: {exc}"), info)
                    return None
                except (OSError, pickle.UnpicklingError, EOFError, ValueError) as exc:
                    error = f"{type(exc).__name__}: {exc}"
            if self.clock() >= deadline:
                self.counts["dump_timeouts"] += 1
                log.warning("flight recorder: no readable dump at %s within %gs (%s)", dump, self.timeout, error)
                return None
            self.wait(0.05)
        self.counts["dumps"] += 1
        return {"v": 1, "kind": "stack", "job": info.job, "rank": info.rank, "node": self.node, "ts": time.time(),
                "request_id": request_id, "flight_recorder": dump, "source": "flight_recorder",
                "threads": [{"name": "flight_recorder", "frames": summary_frames(parsed)}]}


def _read_checked(root: Path, rel: str, uid: int) -> bytes:
    """The dump's bytes: a regular file of ``uid``, no link, at most MAX_DUMP_BYTES (checked before reading)."""
    fd, st = open_checked(root, rel, kind=Kind.REGULAR, uid=uid, max_size=MAX_DUMP_BYTES)
    try:
        chunks, left = [], st.st_size
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def _version(root: Path, rel: str) -> int | None:
    """What changes when the dump is rewritten (its link is not followed)."""
    try:
        st = stat_in_root(root, rel)
    except OSError:
        return None
    return st.st_mtime_ns ^ st.st_size ^ st.st_ino


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
