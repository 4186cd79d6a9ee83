"""The node agent's NCCL Inspector reader: tails ``<dump_dir>/<hostname>-pid<pid>.log``, sends ``nccl_window`` events.

NCCL's Inspector profiler plugin (NVIDIA/nccl plugins/profiler/inspector/, inspector.cc
``"%s/%s-pid%d.log"``, inspector_json.cc) appends one JSON object per line and collective.
Two layouts, told apart by their structure (never by the version string):

* per-line (``inspector_output_format_version`` up to v4.2; NCCL 2.30.7 writes v4.0): every
  line is ``{"header": {...}, "metadata": {...}, "coll_perf": {...}}``;
* marker (v4.3): each dump writes one line with ``header``, ``metadata`` (and ``dump_stats``,
  the records it dropped) and no ``coll_perf``, then bare ``{"coll_perf": {...}}`` lines that
  belong to that header.

``p2p_perf`` lines are counted and skipped. Each file's pid is mapped to its job and global
rank through ``/proc`` (producers/proc_identity.py). Records are summed per communicator,
collective type and window of ``window_size`` consecutive ``coll_sn`` (``coll_sn // window_size``),
and one event per window and rank is sent when the rank's next window starts, or its process
exits.

Window sizes fit the job (``auto``, the default): a power of two between ``window_min`` and
``window_size`` (the cap), about the ``coll_sn`` a communicator advances per ``window_seconds``
(its rate measured between Inspector dumps), so a job with one all-reduce per 1 s step gets
windows of one collective (one step) and one with hundreds per step the cap. Each agent decides
alone; windows stay comparable across ranks because aligned powers of two nest (a window of 16
lies inside one of 64) and the worker judges the largest window any rank used
(models/steps/inspector.py). A size grows only at a boundary of the larger size (no window
overlaps one already sent) and shrinks by splitting the open window. Until the rate is known
(two dump intervals) the cap is used. Events per rank and key: at most about
``2 / window_seconds`` per second, or the collective rate over the cap.

Nothing here raises on bad input: a line
that is not JSON, a record without its fields, a file whose pid is unknown are counted
(``counts``) and reported once per file.

The directory is world-writable (sticky): any local user can create files there. A log is read
only when its pid maps to a process a launcher vouches for (producers/proc_identity.py), and it
is opened without following a symbolic link, is a regular file and is owned by that process's
uid (producers/safe_files.py); otherwise it is refused, counted and logged once
(producers/refusals.py). State is bounded whatever the files hold: a window keeps at most
``window_size`` (the cap) records per communicator and collective type (one per ``coll_sn``; a repeated
``coll_sn`` is refused), and all open windows together at most ``MAX_OPEN_SAMPLES`` records.
"""

from __future__ import annotations

import logging
import os
import re
import statistics
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import orjson

from .proc_identity import ProcInfo, ProcTable
from .refusals import Refusal
from .safe_files import Kind, Refused, open_checked, stat_in_root

log = logging.getLogger("stepwatch.agent")

FILE_RE = re.compile(r"^(?P<host>.+)-pid(?P<pid>\d+)\.log$")
#: Longest line kept while waiting for its newline (a record is ~200-500 bytes; verbose ones a few KiB).
MAX_LINE = 1 << 20
#: Files tracked (finished ones included, so that they are not read again) and (communicator, op) keys per file.
MAX_FILES = 10_000
MAX_KEYS_PER_FILE = 4096
#: Records held in open windows, all files together (each ~80 bytes): the reader's state stays a few MiB.
MAX_OPEN_SAMPLES = 1 << 18


@dataclass(frozen=True, kw_only=True)
class InspectorSettings:
    """``STEPWATCH_TELEMETRY_NCCL_INSPECTOR_*`` (via TelemetrySettings) or the agent's flags."""

    #: Directory NCCL_INSPECTOR_DUMP_DIR points at ("" = off).
    directory: str = ""
    #: Consecutive coll_sn per window: one event per rank, communicator, collective type and window. The cap;
    #: below ``window_min`` the size follows the collective rate (powers of two: windows of ranks nest).
    window_size: int = 64
    #: The smallest window (``window_size``: fixed, the size of every window).
    window_min: int = 1
    #: Auto sizes: about this many seconds of a communicator's collectives per window.
    window_seconds: float = 1.0
    #: Most bytes read per file per poll (bounds the agent's CPU after a long pause).
    max_read_bytes: int = 8 << 20
    #: A file not grown for this long whose process is gone is finished (its open windows are sent).
    stale_seconds: float = 60.0


def window_bounds(value: str | int) -> tuple[int, int]:
    """``STEPWATCH_TELEMETRY_NCCL_INSPECTOR_WINDOW``: ``auto`` (sizes 1-64 by rate), ``auto:CAP`` or ``N`` (fixed)
    -> (window_min, window_size)."""
    text = str(value).strip().lower()
    if text in ("auto", "auto:"):
        return 1, 64
    fixed = not text.startswith("auto:")
    try:
        n = int(text if fixed else text[5:])
    except ValueError:
        raise ValueError(f"NCCL Inspector window {value!r}: expected auto, auto:CAP or a number of collectives") from None
    if not 1 <= n <= 1 << 20:
        raise ValueError(f"NCCL Inspector window {value!r}: the number of collectives must be 1 to {1 << 20}")
    if fixed:
        return n, n
    cap = 1 << (n.bit_length() - 1)  # a power of two: auto windows must nest
    return 1, cap


@dataclass
class _Window:
    window: int
    size: int
    sns: list[int] = field(default_factory=list)  # at most size: one per coll_sn
    execs: list[int] = field(default_factory=list)
    sizes: list[int] = field(default_factory=list)
    dump_us: int = 0


@dataclass
class _Rate:
    """A key's ``coll_sn`` per second, measured between dumps (a dump's records share its timestamp)."""

    dump_us: int = 0  # the current dump's and its highest coll_sn
    sn: int = -1
    prev_us: int = 0  # the previous dump's
    prev_sn: int = -1
    per_s: float | None = None
    sent_end: int = 0  # end (coll_sn) of the last window sent: no new window may start before it


@dataclass
class _File:
    path: Path
    name: str  # relative to the directory
    pid: int
    host: str
    inode: int = -1
    offset: int = 0
    partial: bytes = b""
    last_growth: float = 0.0
    info: ProcInfo | None = None
    marker: tuple[dict, dict] | None = None  # the v4.3 layout's current (header, metadata)
    windows: dict[tuple[str, str], _Window] = field(default_factory=dict)
    meta: dict[tuple[str, str], tuple[int, int]] = field(default_factory=dict)  # key -> (n_ranks, comm_rank)
    rates: dict[tuple[str, str], _Rate] = field(default_factory=dict)
    reported: set[str] = field(default_factory=set)
    done: bool = False


class InspectorReader:
    """Tails every Inspector log of a directory; ``poll()`` returns the ``nccl_window`` events that closed."""

    def __init__(self, settings: InspectorSettings, *, node: str, procs: ProcTable,
                 clock: Callable[[], float] = time.time) -> None:
        self.settings = settings
        self.dir = Path(settings.directory)
        self.node = node
        self.procs = procs
        self.clock = clock
        self.files: dict[str, _File] = {}
        self.counts: Counter[str] = Counter()
        self.refusals = procs.refusals
        self.open_samples = 0  # records held in open windows, all files

    # -- files ----------------------------------------------------------------------------

    def poll(self, *, final: bool = False) -> list[dict]:
        """Read what every file gained since the last poll; ``final``: send every open window too."""
        now = self.clock()
        out: list[dict] = []
        try:
            names = self._log_names()
        except OSError as exc:
            self._report_once(None, f"cannot list {self.dir}: {exc}")
            return out
        seen = set()
        for name in names:
            m = FILE_RE.match(os.path.basename(name))
            if m is None:
                continue
            seen.add(name)
            f = self.files.get(name)
            if f is None:
                if len(self.files) >= MAX_FILES:  # bounded: a directory nobody cleans up
                    self.counts["files_over_limit"] += 1
                    continue
                f = self.files[name] = _File(self.dir / name, name, int(m["pid"]), m["host"], last_growth=now)
            if not f.done:
                out.extend(self._read(f, now))
            alive = f.info is not None and self.procs.alive(f.info.pid)
            if not f.done and not alive and now - f.last_growth >= self.settings.stale_seconds:
                out.extend(self._flush(f))  # the process exited: its last windows are complete
                f.done = True
                self.counts["files_finished"] += 1
        for name in list(self.files):
            if name not in seen:  # deleted (rotated away): what it had was read
                out.extend(self._flush(self.files.pop(name)))
        if final:
            for f in self.files.values():
                out.extend(self._flush(f))
        return out

    def _log_names(self) -> list[str]:
        """The directory's entries and those of its subfolders, one level down (a per-job folder each, as
        deploy/slurm/stepwatch-taskprolog.sh makes them), relative to it."""
        names: list[str] = []
        with os.scandir(self.dir) as entries:
            for entry in entries:
                if entry.is_dir(follow_symlinks=False):
                    try:
                        names.extend(f"{entry.name}/{sub}" for sub in os.listdir(entry.path))
                    except OSError as exc:  # one unreadable job folder must not hide the others
                        self._report_once(None, f"cannot list {entry.path}: {exc}")
                else:
                    names.append(entry.name)
        return names

    def _read(self, f: _File, now: float) -> list[dict]:
        try:
            st = stat_in_root(self.dir, f.name)  # the link itself, if it is one: refused below, once mapped
        except OSError:
            return []
        if st.st_ino != f.inode:  # new file, or rotated: the new one from its start
            if f.inode != -1:
                self.counts["rotations"] += 1
                f.partial, f.marker = b"", None
            f.inode, f.offset = st.st_ino, 0
        elif st.st_size < f.offset:  # truncated in place
            self.counts["truncations"] += 1
            f.offset, f.partial, f.marker = 0, b"", None
        if st.st_size == f.offset:
            return []
        if f.info is None:
            f.info = self.procs.lookup(f.pid, f.host)
            if f.info is None:
                self.counts["unmapped_files"] += 1
                self._report_once(f, f"{f.path.name}: no process a launcher vouches for with a RANK and a job id "
                                     f"for pid {f.pid} under {self.procs.proc} (exited before it was seen, not a "
                                     f"training rank, or refused: see the agent's refusals)")
                f.done = True
                return []
        try:  # a log is its process's: no link, a regular file of that process's uid (docs/security.md)
            fd, fst = open_checked(self.dir, f.name, kind=Kind.REGULAR, uid=f.info.uid)
        except Refused as exc:
            self.counts["refused_files"] += 1
            self.refusals.refuse(exc.cause, f"NCCL Inspector log {f.path}: {exc}")
            f.done = True  # refused for good: a file is not re-judged every poll
            return []
        except OSError as exc:
            self._report_once(f, f"cannot read {f.path}: {exc}")
            return []
        try:
            if fst.st_ino != f.inode:  # replaced between the two looks: read the new one from its start
                f.inode, f.offset, f.partial, f.marker = fst.st_ino, 0, b"", None
            data = os.pread(fd, self.settings.max_read_bytes, f.offset)
        except OSError as exc:
            self._report_once(f, f"cannot read {f.path}: {exc}")
            return []
        finally:
            os.close(fd)
        f.offset += len(data)
        f.last_growth = now
        data = f.partial + data
        lines = data.split(b"\n")
        f.partial = lines.pop()  # the last line is partial until its newline comes
        if len(f.partial) > MAX_LINE:
            self.counts["long_lines"] += 1
            f.partial = b""
        out: list[dict] = []
        for line in lines:
            if line.strip():
                out.extend(self._line(f, line))
        return out

    # -- records --------------------------------------------------------------------------

    def _line(self, f: _File, line: bytes) -> list[dict]:
        try:
            obj = orjson.loads(line)
        except orjson.JSONDecodeError:
            self.counts["bad_lines"] += 1
            self._report_once(f, f"{f.path.name}: a line that is not JSON (first: {line[:80]!r})")
            return []
        if not isinstance(obj, dict):
            self.counts["bad_lines"] += 1
            return []
        header, metadata = obj.get("header"), obj.get("metadata")
        perf = obj.get("coll_perf")
        if perf is None and "coll" in obj and "coll_sn" in obj:
            perf = obj  # a bare coll_perf object
        if isinstance(header, dict) and isinstance(metadata, dict) and perf is None:
            if "p2p_perf" in obj:
                self.counts["p2p_records"] += 1
                return []
            f.marker = (header, metadata)  # v4.3: the dump's marker line
            stats = obj.get("dump_stats")
            if isinstance(stats, dict):
                dropped = sum(v for k, v in stats.items() if "drop" in k and isinstance(v, int))
                self.counts["nccl_dropped"] += dropped
            self.counts["markers"] += 1
            return []
        if perf is None:
            self.counts["p2p_records" if "p2p_perf" in obj else "other_lines"] += 1
            return []
        if not (isinstance(header, dict) and isinstance(metadata, dict)):
            if f.marker is None:
                self.counts["orphan_records"] += 1  # bare records before any marker (file read mid-dump)
                return []
            header, metadata = f.marker
        return self._record(f, header, metadata, perf)

    def _record(self, f: _File, header: dict, metadata: dict, perf: dict) -> list[dict]:
        try:
            comm_name = header.get("comm_name")
            comm = comm_name if isinstance(comm_name, str) and comm_name and comm_name != "unknown" else str(
                header["id"])
            op, sn = str(perf["coll"]), int(perf["coll_sn"])
            exec_us = int(perf["coll_exec_time_us"])
            n_ranks, comm_rank = int(header["n_ranks"]), int(header["rank"])
            size = int(perf.get("coll_msg_size_bytes") or 0)
            dump_us = int(metadata.get("dump_timestamp_us") or 0)
        except (KeyError, TypeError, ValueError) as exc:
            self.counts["bad_records"] += 1
            self._report_once(f, f"{f.path.name}: a record without {exc} (skipped)")
            return []
        if sn < 0 or exec_us < 0 or n_ranks < 1 or not 0 <= comm_rank < n_ranks:
            self.counts["bad_records"] += 1
            return []
        self.counts["records"] += 1
        key = (comm, op)
        rate = self._rate(f, key, sn, dump_us)
        if rate is None:
            self.counts["keys_over_limit"] += 1
            return []
        want = self._size(rate)
        cur = f.windows.get(key)
        out: list[dict] = []
        if sn < rate.sent_end or (cur is not None and sn < cur.window * cur.size):
            self.counts["late_records"] += 1  # a window already sent
            return []
        if cur is not None and want < cur.size:
            out.extend(self._split(f, key, cur, want, sn))  # smaller windows from now on: send the open one's parts
            cur = f.windows.get(key)
        if cur is not None and sn >= (cur.window + 1) * cur.size:
            out.append(self._close(f, key, cur))
            cur = None
        if cur is None:
            if len(f.windows) >= MAX_KEYS_PER_FILE:
                self.counts["keys_over_limit"] += 1
                return out
            size = want
            while size > 1 and (sn // size) * size < rate.sent_end:  # grow only at a boundary of the larger size
                size //= 2
            cur = f.windows[key] = _Window(sn // size, size)
        # A window has one record per coll_sn: more is a repeated coll_sn (never NCCL's), and the reader's state
        # stays bounded whatever a file holds.
        if len(cur.execs) >= cur.size or self.open_samples >= MAX_OPEN_SAMPLES:
            self.counts["excess_records"] += 1
            self.refusals.refuse(Refusal.EXCESS_RECORDS, f"{f.path.name}: more records for window {cur.window} of "
                                 f"{key} than its {cur.size} collectives (or over the reader's "
                                 f"{MAX_OPEN_SAMPLES} open records)")
            if not cur.execs:
                del f.windows[key]
            return out
        self.open_samples += 1
        f.meta[key] = (n_ranks, comm_rank)
        cur.sns.append(sn)
        cur.execs.append(exec_us)
        cur.sizes.append(size)
        cur.dump_us = max(cur.dump_us, dump_us)
        return out

    def _rate(self, f: _File, key: tuple[str, str], sn: int, dump_us: int) -> _Rate | None:
        """The key's coll_sn per second, updated when a new dump starts: the previous dump's advance over the time
        between the two dumps before (a dump's records all carry its timestamp)."""
        rate = f.rates.get(key)
        if rate is None:
            if len(f.rates) >= MAX_KEYS_PER_FILE:
                return None
            rate = f.rates[key] = _Rate()
        if dump_us > rate.dump_us:
            if rate.prev_us and rate.sn > rate.prev_sn and rate.dump_us > rate.prev_us:
                sample = (rate.sn - rate.prev_sn) / ((rate.dump_us - rate.prev_us) / 1e6)
                rate.per_s = sample if rate.per_s is None else (rate.per_s + sample) / 2
            rate.prev_us, rate.prev_sn, rate.dump_us = rate.dump_us, rate.sn, dump_us
        rate.sn = max(rate.sn, sn)
        return rate

    def _size(self, rate: _Rate) -> int:
        """The window a new window of the key gets: the cap, or (auto) the power of two of ~window_seconds of
        coll_sn, between window_min and the cap."""
        low, cap = self.settings.window_min, self.settings.window_size
        if low >= cap or rate.per_s is None:
            return cap
        want = min(rate.per_s * self.settings.window_seconds, cap)
        size = max(low, 1)
        while size * 2 <= want:
            size *= 2
        return size

    def _split(self, f: _File, key: tuple[str, str], cur: _Window, size: int, sn: int) -> list[dict]:
        """Cut the open window into windows of ``size`` (nested: powers of two), send those before ``sn``'s."""
        target = sn // size
        if cur.size % size or (cur.sns and max(cur.sns) // size > target):
            return []  # not nested, or records out of order: keep the open window as it is
        parts: dict[int, _Window] = {}
        for i, s in enumerate(cur.sns):
            part = parts.setdefault(s // size, _Window(s // size, size, dump_us=cur.dump_us))
            part.sns.append(s)
            part.execs.append(cur.execs[i])
            part.sizes.append(cur.sizes[i])
        del f.windows[key]
        out = []
        for index in sorted(parts):
            if index < target:
                out.append(self._close(f, key, parts[index]))
            else:
                f.windows[key] = parts[index]
        return out

    def _close(self, f: _File, key: tuple[str, str], w: _Window) -> dict:
        f.rates[key].sent_end = (w.window + 1) * w.size
        if f.windows.get(key) is w:
            del f.windows[key]
        return self._event(f, key, w)

    def _flush(self, f: _File) -> list[dict]:
        out = [self._close(f, key, w) for key, w in list(f.windows.items())]  # each gives back its records
        f.meta.clear()
        return out

    def _event(self, f: _File, key: tuple[str, str], w: _Window) -> dict:
        n_ranks, comm_rank = f.meta[key]
        info = f.info
        self.counts["events"] += 1
        self.open_samples -= len(w.execs)
        ts = w.dump_us / 1e6 if w.dump_us else self.clock()
        return {"v": 1, "kind": "nccl_window", "job": info.job, "rank": info.rank, "node": self.node,
                "ts": round(ts, 6), "comm": key[0], "op": key[1], "window": w.window,
                "window_size": w.size, "count": len(w.execs),
                "exec_sum": sum(w.execs) / 1e6, "exec_median": statistics.median(w.execs) / 1e6,
                "bytes": int(statistics.median(w.sizes)), "n_ranks": n_ranks, "comm_rank": comm_rank,
                "pid": f.pid, "source": "nccl_inspector"}

    def _report_once(self, f: _File | None, message: str) -> None:
        seen = f.reported if f is not None else self.__dict__.setdefault("_reported", set())
        kind = message.split(":", 1)[-1][:40]
        if kind not in seen:
            seen.add(kind)
            log.warning("nccl inspector: %s", message)
