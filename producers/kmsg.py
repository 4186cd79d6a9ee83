"""Xid lines from the kernel log, as the NVIDIA driver writes them (issue 42).

``NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python, GPU has fallen off the bus.`` in
``/dev/kmsg`` (one record a read, ``PRIO,SEQ,USEC,FLAGS;TEXT``) or in a file written the same way
(``--kmsg FILE``: tests, and nodes where NVML cannot report Xid events). The PCI bus id names the
GPU: mapped to its NVML index by the GPUs' bus ids, else by the order of the nvidia driver's devices
in sysfs (NVML's default order is PCI order); a bus id neither knows goes out as ``"gpu": -1`` with
its ``pci`` (counted in ``counts["unmapped"]``), never dropped.

Reading starts at the end (the log's history was reported by the agent that ran then), never
blocks (``O_NONBLOCK``), reads at most ``max_bytes`` a poll and keeps at most ``max_line`` bytes of
an unfinished line: a storm cannot hold the agent or grow its memory.
"""

from __future__ import annotations

import errno
import os
import re
from collections.abc import Callable
from pathlib import Path

XID_LINE = re.compile(r"NVRM: Xid \(PCI:([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2})(?:\.[0-7])?\): (\d{1,5}),?(.*)")


def short_bus_id(bus: str) -> str:
    """``00000000:3B:00.0`` (NVML), ``0000:3b:00.0`` (sysfs) or ``0000:3b:00`` (the driver's Xid line) ->
    ``0000:3b:00``."""
    bus = bus.strip().lower()
    domain, _, rest = bus.partition(":")
    return f"{domain[-4:].rjust(4, '0')}:{rest.split('.', 1)[0]}"


def parse_xid_line(line: str) -> tuple[str, int, str] | None:
    """``(short bus id, Xid code, the rest of the message)`` of a driver Xid line, else None."""
    m = XID_LINE.search(line)
    if m is None:
        return None
    return short_bus_id(m.group(1)), int(m.group(2)), m.group(3).strip()[:512]


def sysfs_gpu_order(sysfs_root: str) -> dict[str, int]:
    """Bus id -> index in the nvidia driver's PCI order (``/sys/bus/pci/drivers/nvidia``)."""
    root = Path(sysfs_root) / "bus" / "pci" / "drivers" / "nvidia"
    try:
        names = sorted(p.name for p in root.iterdir() if re.fullmatch(r"[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.\d",
                                                                       p.name))
    except OSError:
        return {}
    return {short_bus_id(n): i for i, n in enumerate(names)}


class KmsgReader:
    """Polls a kernel log (``/dev/kmsg`` or a file) for new Xid lines; ``poll(now)`` gives ``xid`` events."""

    def __init__(self, path: str, *, node: str, gpus: Callable[[], dict[str, int]], max_bytes: int = 1 << 20,
                 max_line: int = 4096) -> None:
        self.path = path
        self.node = node
        self.gpus = gpus  # short bus id -> GPU index (asked each poll: NVML may come later)
        self.max_bytes = max_bytes
        self.max_line = max_line
        self._fd: int | None = None
        self._partial = b""
        #: Lines read, Xid lines, unmapped bus ids, records the kernel overwrote before we read them, errors.
        self.counts: dict[str, int] = {}
        self.error: str | None = None

    def _count(self, what: str, n: int = 1) -> None:
        self.counts[what] = self.counts.get(what, 0) + n

    def open(self) -> bool:
        if self._fd is not None:
            return True
        try:
            self._fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK)
            os.lseek(self._fd, 0, os.SEEK_END)  # history was reported by whoever ran then
        except OSError as exc:
            self.error = f"cannot read {self.path}: {exc.strerror}"
            self._fd = None
            return False
        self.error = None
        return True

    def poll(self, now: float) -> list[dict]:
        if not self.open():
            return []
        data, budget = [], self.max_bytes
        while budget > 0:
            try:
                chunk = os.read(self._fd, min(65536, budget))
            except BlockingIOError:
                break
            except OSError as exc:
                if exc.errno == errno.EPIPE:  # /dev/kmsg: records overwritten before we read them
                    self._count("overwritten")
                    continue
                self._count("read_errors")
                break
            if not chunk:
                if os.fstat(self._fd).st_size < os.lseek(self._fd, 0, os.SEEK_CUR):  # truncated: start again
                    os.lseek(self._fd, 0, os.SEEK_SET)
                    continue
                break
            data.append(chunk)
            budget -= len(chunk)
        if budget <= 0:
            self._count("polls_at_max_bytes")
        text = self._partial + b"".join(data)
        lines = text.split(b"\n")
        self._partial = lines.pop()
        if len(self._partial) > self.max_line:
            self._partial = b""
            self._count("long_lines")
        gpus = self.gpus() if self.gpus is not None else {}
        out = []
        for raw in lines:
            self._count("lines")
            parsed = parse_xid_line(raw[: self.max_line].decode("utf-8", "replace"))
            if parsed is None:
                continue
            bus, code, rest = parsed
            gpu = gpus.get(bus)
            if gpu is None:
                self._count("unmapped")
            self._count("xid_lines")
            out.append({"v": 1, "kind": "xid", "node": self.node, "ts": round(now, 6),
                        "gpu": gpu if gpu is not None else -1, "xid": code, "pci": bus,
                        "message": f"NVRM: Xid (PCI:{bus}): {code}, {rest}"[:512]})
        return out

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
