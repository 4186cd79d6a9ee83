"""The node agent's NCCL RAS client: per-rank collective counts as heartbeats for the hang rule.

NCCL's RAS (NVIDIA/nccl src/ras/, on by default since NCCL 2.24) listens on
``localhost:28028`` (``NCCL_RAS_ADDR``) for a line protocol (src/ras/client.cc,
client_support.cc, protocol 2): ``CLIENT PROTOCOL 2`` -> ``SERVER PROTOCOL 2``;
``SET FORMAT json`` -> ``OK`` (NCCL >= 2.28.7; older answer ``ERROR``: then nothing is read,
the text output has no per-rank counts); ``STATUS`` -> the job's state, then the server
closes the connection. The JSON answer lists per communicator (``hash``, ``size``) each
rank's ``rank`` (within the communicator), ``host``, ``pid`` and ``collective_counts`` (per
collective type, collectives launched), and the ``missing_ranks`` (unresponsive or dead).

Each agent publishes heartbeats only for the ranks running on its node (the answer covers
the whole job; every node's agent speaks for its own ranks): a pid of the answer is taken as
local when the pid maps to a local training process (producers/proc_identity.py) whose
``RANK`` equals its rank in a communicator of the job's world size (container pids repeat
across nodes), and the host string that entry carried. A rank's heartbeat carries per
communicator ``pgs[hash] = {started, completed}`` with ``started`` its launched count;
RAS cannot tell completion, so a rank at its communicator's highest count is taken as inside
that collective (``completed = started - 1``) and one below it as not having launched it
(``completed = started``): the hang rule's ``culprit_before_collective``. ``step`` is the
job's progress as RAS sees it (the highest count of each communicator, summed), the same on every
rank: the agents of two nodes poll at different times, and a per-rank count would make the ranks
of the node polled last look stuck. A rank listed missing, or whose
process is gone, gets no heartbeat: ``silent_ranks``.

Poll gently: frequent RAS queries have crashed jobs (NVIDIA/nccl#1762, #1718); the interval
is at least ``MIN_INTERVAL`` seconds, on multiples of it of the wall clock (every node's agent asks
at the same instants), and heartbeats carry that instant as ``ts``: the hang rule compares when
ranks last progressed, so a node whose agent polled a second later must not look ahead. RAS may report a job healthy while PyTorch's watchdog
times out (NVIDIA/nccl#1730): its silence is not proof of health.

Any local user can listen on the RAS port when NCCL does not (docs/security.md). Each poll has
one overall deadline (``deadline``, connect and every read together: a server trickling a byte
at a time cannot hold it longer), and runs on the agent's job-source thread, never on the
sampling thread (producers/agent.py). An answer speaks only for processes a launcher vouches for
(producers/proc_identity.py) and owned by the uid of the process that answered (its socket's
owner in ``/proc/self/net/tcp``, proc(5)); the rest is refused, counted and logged once.
"""

from __future__ import annotations

import logging
import math
import socket
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

import orjson

from .proc_identity import ProcTable
from .refusals import Refusal, Refusals

log = logging.getLogger("stepwatch.agent")

DEFAULT_ADDR = "localhost:28028"
PROTOCOL = 2
MIN_INTERVAL = 5.0
MAX_ANSWER = 64 << 20


class RasError(Exception):
    """The RAS service did not answer as its protocol says."""


def parse_addr(addr: str) -> tuple[str, int]:
    host, sep, port = addr.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"--nccl-ras: expected HOST:PORT, got {addr!r}")
    return host.strip("[]") or "localhost", int(port)


class RasDeadline(RasError):
    """The exchange did not end by its overall deadline."""


@dataclass(frozen=True, slots=True)
class RasAnswer:
    status: dict
    #: Owner of the answering socket (None: not found, e.g. no /proc/self/net/tcp).
    server_uid: int | None


class _Exchange:
    """A line-protocol exchange on ``sock`` that ends by ``end`` (time.monotonic), whatever the server does."""

    def __init__(self, sock: socket.socket, end: float, timeout: float) -> None:
        self.sock, self.end, self.timeout, self.buf = sock, end, timeout, b""

    def _recv(self) -> bytes:
        left = self.end - time.monotonic()
        if left <= 0:
            raise RasDeadline(f"no complete answer within the poll's {self.timeout:g}s deadline")
        self.sock.settimeout(left)
        try:
            return self.sock.recv(65536)
        except TimeoutError:
            raise RasDeadline(f"no complete answer within the poll's {self.timeout:g}s deadline") from None

    def line(self, limit: int = 4096) -> str:
        while b"\n" not in self.buf and len(self.buf) < limit:
            chunk = self._recv()
            if not chunk:
                break
            self.buf += chunk
        line, _, self.buf = self.buf.partition(b"\n")
        return line[:limit].decode(errors="replace")

    def rest(self, limit: int) -> bytes:
        chunks, size = [self.buf], len(self.buf)
        while size < limit:
            chunk = self._recv()
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        return b"".join(chunks)[:limit]


def socket_owner(local: tuple, peer: tuple, *, net: str = "/proc/self/net") -> int | None:
    """The uid owning the other end of a local TCP connection: the line of ``tcp``/``tcp6`` (proc(5)) whose
    local port is ``peer``'s and remote port ``local``'s."""
    want = (f"{peer[1]:04X}", f"{local[1]:04X}")
    for name in ("tcp", "tcp6"):
        try:
            with open(f"{net}/{name}", encoding="ascii", errors="replace") as f:
                next(f, None)
                for line in f:
                    fields = line.split()
                    if len(fields) > 7 and (fields[1].rsplit(":", 1)[-1], fields[2].rsplit(":", 1)[-1]) == want:
                        return int(fields[7])
        except (OSError, ValueError):
            continue
    return None


def query_answer(addr: str, *, timeout: float = 10.0) -> RasAnswer:
    """One ``STATUS`` query in JSON (src/ras/client.cc's exchange) within ``timeout`` seconds in all, and who
    answered; raises :class:`RasError` (:class:`RasDeadline` past the deadline) or ``OSError``."""
    end = time.monotonic() + timeout
    host, port = parse_addr(addr)
    with socket.create_connection((host, port), timeout=timeout) as sock:
        owner = socket_owner(sock.getsockname(), sock.getpeername())
        x = _Exchange(sock, end, timeout)
        sock.sendall(f"CLIENT PROTOCOL {PROTOCOL}\n".encode())
        line = x.line()
        if not line.upper().startswith("SERVER PROTOCOL "):
            raise RasError(f"unexpected handshake answer {line.strip()!r}")
        sock.sendall(b"SET FORMAT json\n")
        line = x.line()
        if line.strip().upper() != "OK":
            raise RasError(f"the RAS service has no JSON output (NCCL < 2.28.7?): {line.strip()!r}")
        sock.sendall(b"STATUS\n")
        data = x.rest(MAX_ANSWER)
    try:
        obj = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise RasError(f"the STATUS answer is not JSON: {exc}") from None
    if not isinstance(obj, dict) or not isinstance(obj.get("communicators"), list):
        raise RasError("the STATUS answer has no 'communicators' list")
    return RasAnswer(obj, owner)


def query_status(addr: str, *, timeout: float = 10.0) -> dict:
    """The ``STATUS`` answer alone (see :func:`query_answer`)."""
    return query_answer(addr, timeout=timeout).status


def heartbeats(status: dict, *, procs: ProcTable, node: str, ts: float,
               server_uid: int | None = None) -> tuple[list[dict], Counter]:
    """The heartbeats of this node's ranks from one JSON ``STATUS`` answer (see the module's docstring); with
    ``server_uid``, only of processes that uid owns (an answer speaks for its own user's job)."""
    counts: Counter[str] = Counter()
    comms = []
    for comm in status["communicators"]:
        if not isinstance(comm, dict) or not isinstance(comm.get("ranks"), list):
            counts["bad_communicators"] += 1
            continue
        entries = []
        for r in comm["ranks"]:
            try:
                total = sum(int(v) for v in r["collective_counts"].values())
                entries.append((int(r["rank"]), str(r.get("host")), int(r["pid"]), total))
            except (KeyError, TypeError, ValueError, AttributeError):
                counts["bad_ranks"] += 1
        missing = {int(m["rank"]) for m in comm.get("missing_ranks") or [] if isinstance(m, dict) and "rank" in m}
        comms.append((str(comm.get("hash")), int(comm.get("size") or len(entries)), entries, missing))
    # Which (host, pid) of the answer are this node's: a local process whose RANK is its rank in a world-sized
    # communicator.
    local: dict[tuple[str, int], object] = {}
    for _, size, entries, _ in comms:
        for comm_rank, host, pid, _ in entries:
            info = procs.lookup(pid)
            if info is not None and info.rank == comm_rank and info.world_size in (None, size):
                if server_uid is not None and info.uid != server_uid:
                    counts["foreign_ranks"] += 1
                    procs.refusals.refuse(Refusal.RAS_FOREIGN, f"a RAS answer from uid {server_uid} names pid {pid} "
                                                               f"(uid {info.uid}, job {info.job!r})")
                    continue
                local[(host, pid)] = info
    per_rank: dict[tuple[str, int], dict] = {}
    for name, _, entries, missing in comms:
        if not entries:
            continue
        top = max(total for _, _, _, total in entries)
        for comm_rank, host, pid, total in entries:
            info = local.get((host, pid))
            if info is None or comm_rank in missing:
                continue
            hb = per_rank.get((info.job, info.rank))
            if hb is None:
                hb = per_rank[(info.job, info.rank)] = {
                    "v": 1, "kind": "heartbeat", "job": info.job, "rank": info.rank, "node": node,
                    "ts": round(ts, 6), "step": 0, "pgs": {}, "source": "nccl_ras"}
            hb["pgs"][name] = {"started": total, "completed": total - 1 if total == top and total > 0 else total}
            # The job's progress as RAS sees it, the same on every rank: agents poll at different times, and a
            # per-rank count would make the ranks of the node polled last look stuck (a partial hang).
            hb["step"] += top
    counts["heartbeats"] += len(per_rank)
    return list(per_rank.values()), counts


class RasPoller:
    """Asks RAS every ``interval`` seconds (at least ``MIN_INTERVAL``); ``poll()`` returns heartbeats when due."""

    def __init__(self, addr: str, *, procs: ProcTable, node: str, interval: float = 10.0,
                 clock: Callable[[], float] = time.time, query: Callable[..., RasAnswer] = query_answer,
                 deadline: float = 10.0) -> None:
        parse_addr(addr)  # fail at start on a malformed address
        self.addr = addr
        #: Seconds one poll may take in all (connect and reads).
        self.deadline = deadline
        self.refusals: Refusals = procs.refusals
        self.procs = procs
        self.node = node
        self.interval = max(interval, MIN_INTERVAL)
        self.clock = clock
        self.query = query
        self.counts: Counter[str] = Counter()
        self._next = 0.0
        self._last_error: str | None = None

    def poll(self, *, force: bool = False) -> list[dict]:
        now = self.clock()
        if not force and now < self._next:
            return []
        # On multiples of the interval of the (NTP-synchronized) wall clock: every node's agent asks at the same
        # instants, so no node's ranks look stuck for a poll's worth of skew while another's advanced.
        slot = math.floor(now / self.interval) * self.interval
        self._next = slot + self.interval
        try:
            answer = self.query(self.addr, timeout=self.deadline)
        except RasDeadline as exc:
            self.counts["failed_queries"] += 1
            self.refusals.refuse(Refusal.RAS_DEADLINE, f"nccl ras {self.addr}: {exc}")
            return []
        except (OSError, RasError) as exc:
            self.counts["failed_queries"] += 1
            message = f"{type(exc).__name__}: {exc}"
            if message != self._last_error:  # said once per kind of failure, then counted
                log.warning("nccl ras %s: %s", self.addr, message)
                self._last_error = message
            return []
        self._last_error = None
        self.counts["queries"] += 1
        # Stamped with the round's instant, the same on every node: the hang rule compares when ranks last
        # progressed, and an agent that polled a second later must not make the other node's ranks look stuck.
        if answer.server_uid is None:  # who answered is unknown: the answer cannot speak for anyone
            self.refusals.refuse(Refusal.RAS_FOREIGN, f"nccl ras {self.addr}: cannot tell which user's process "
                                                      f"answered (no matching socket in /proc/self/net/tcp)")
            return []
        events, counts = heartbeats(answer.status, procs=self.procs, node=self.node, ts=now if force else slot,
                                    server_uid=answer.server_uid)
        self.counts.update(counts)
        return events
