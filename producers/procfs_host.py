"""Host signals from procfs (and a little sysfs), as the kernel lays them out: the ``host`` event.

Everything here is plain file reading, no dependency. Per sample, from ``<proc_root>``:

* ``pressure/{cpu,io,memory}``: pressure stall information (PSI, Linux >= 4.20 with
  ``CONFIG_PSI``): ``some avg10=0.12 avg60=... total=...`` and ``full ...`` lines; the
  percentage of the last 10 s some (or all) non-idle tasks were stalled on the resource.
  Absent (or EOPNOTSUPP with ``psi=0``) where the kernel lacks it: the event leaves ``psi`` out;
* ``stat``: the ``cpu`` line's cumulative jiffies (user nice system idle iowait irq softirq steal);
* ``loadavg``: the first field (``load1``);
* ``meminfo``: ``MemTotal``, ``MemAvailable``, ``SwapTotal - SwapFree`` in kB, sent in bytes;
* ``vmstat``: ``oom_kill`` (cumulative OOM kills, Linux >= 4.13);
* ``diskstats``: per whole disk, completed reads, ms reading, completed writes, ms writing, ms
  doing I/O (fields 4, 7, 8, 11 and 13 of a line). Partitions, ``loop``, ``ram``, ``zram``
  and device-mapper (``dm-``) devices are left out: a partition's time is its disk's, and
  virtual devices only repeat the I/O of the disks below them;
* ``self/mountstats``: per NFS mount (at most ``MAX_MOUNTS``), the RPC client's cumulative per-op
  statistics of ``WRITE`` and ``COMMIT``. The kernel writes a ``device SERVER:/EXPORT mounted on
  MOUNTPOINT with fstype nfs|nfs4 statvers=1.1`` line per mount (fs/nfs/super.c, ``nfs_show_devname``
  and ``nfs_show_stats``; names escaped as ``\\040`` for a space), then, under ``per-op statistics``, one
  line per op written by net/sunrpc/stats.c ``_print_rpc_iostats``: ``OP: ops ntrans timeouts bytes_sent
  bytes_recv queue_ms rtt_ms execute_ms [errors]`` (the 9th field since RPC iostats 1.1). ``ntrans - ops``
  are retransmissions, ``timeouts`` major timeouts; rtt and execute are summed over completed ops
  (nfs-utils' ``mountstats``/``nfsiostat`` divide them by ops);
* ``fs/lustre/llite/<instance>/stats``: per Lustre client instance, lines ``NAME COUNT samples [UNIT] MIN MAX SUM
  [SUMSQ]`` (wiki.lustre.org, "Lustre IO Monitoring"). Where the Lustre version times ``write`` and ``fsync`` in
  ``[usecs]``, they are sent as the mount's ``write_*`` and ``commit_*`` (count as ops, the summed latency in ms
  as ``rtt_ms``; no timeouts there); a version that counts only ``write_bytes`` sends nothing for it.

and, optionally, per physical network interface, ``<sysfs_root>/class/net/<if>/statistics``
``rx_dropped tx_dropped rx_errors tx_errors``. Counters stay raw and cumulative; the worker
turns them into rates (models/telemetry/host.py). A file that cannot be read is left out, never an error.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

CPU_FIELDS = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")
PSI_RESOURCES = ("cpu", "io", "memory")
NETDEV_COUNTERS = ("rx_dropped", "tx_dropped", "rx_errors", "tx_errors")
#: Virtual block devices: their I/O is that of the disks below them (or of memory).
VIRTUAL_DISKS = ("loop", "ram", "zram", "dm-", "md", "nbd", "sr", "fd")
#: Partition names when sysfs cannot tell (``sda1``, ``vdb2``, ``nvme0n1p1``, ``mmcblk0p1``).
_PARTITION = re.compile(r"^(?:(?:sd|vd|xvd|hd)[a-z]+\d+|(?:nvme\d+n\d+|mmcblk\d+)p\d+)$")
_PSI_FIELD = re.compile(r"(\w+)=([0-9.]+)")
#: NFS mounts per host event (a node with more sends the first ones in mountstats' order): bounded events.
MAX_MOUNTS = 16
#: Per-op statistics carried per mount: the ops a checkpoint's save waits on.
NFS_OPS = ("WRITE", "COMMIT")
#: The fields of an op line kept, in the kernel's order (the rest, bytes and queue time, are not read).
NFS_OP_FIELDS = ("ops", "trans", "timeouts", None, None, None, "rtt_ms", "exe_ms")
_MOUNT_LINE = re.compile(r"^device (\S+) mounted on (\S+) with fstype (nfs\d?) ")
_OCTAL = re.compile(r"\\([0-7]{3})")


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except (OSError, UnicodeDecodeError):
        return None


def parse_psi(text: str | None) -> dict[str, float] | None:
    """``some avg10=1.50 ...`` / ``full avg10=0.20 ...`` -> ``{"some_avg10": 1.5, "full_avg10": 0.2}``."""
    if not text:
        return None
    out: dict[str, float] = {}
    for line in text.splitlines():
        kind, _, rest = line.partition(" ")
        if kind not in ("some", "full"):
            continue
        fields = dict(_PSI_FIELD.findall(rest))
        if "avg10" in fields:
            out[f"{kind}_avg10"] = float(fields["avg10"])
    return out or None


def parse_cpu(text: str | None) -> dict[str, int] | None:
    """The aggregate ``cpu`` line of /proc/stat: raw cumulative jiffies."""
    for line in (text or "").splitlines():
        parts = line.split()
        if parts and parts[0] == "cpu":
            values = parts[1:1 + len(CPU_FIELDS)]
            try:
                return {name: int(v) for name, v in zip(CPU_FIELDS, values)}
            except ValueError:
                return None
    return None


def parse_meminfo(text: str | None) -> dict[str, int]:
    """MemTotal, MemAvailable and swap used, in bytes (the file says kB, meaning KiB)."""
    kb: dict[str, int] = {}
    for line in (text or "").splitlines():
        name, _, rest = line.partition(":")
        parts = rest.split()
        if parts and parts[0].isdigit():
            kb[name.strip()] = int(parts[0])
    out: dict[str, int] = {}
    if "MemTotal" in kb:
        out["mem_total"] = kb["MemTotal"] * 1024
    if "MemAvailable" in kb:
        out["mem_available"] = kb["MemAvailable"] * 1024
    if "SwapTotal" in kb and "SwapFree" in kb:
        out["swap_used"] = max(kb["SwapTotal"] - kb["SwapFree"], 0) * 1024
    return out


def parse_vmstat_oom(text: str | None) -> int | None:
    for line in (text or "").splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0] == "oom_kill" and parts[1].isdigit():
            return int(parts[1])
    return None


def parse_diskstats(text: str | None) -> list[dict]:
    """Every line of /proc/diskstats as ``{"device", "reads", "read_ms", "writes", "write_ms", "io_ms"}``."""
    out = []
    for line in (text or "").splitlines():
        parts = line.split()
        if len(parts) < 14:
            continue
        try:
            out.append({"device": parts[2], "reads": int(parts[3]), "read_ms": int(parts[6]),
                        "writes": int(parts[7]), "write_ms": int(parts[10]), "io_ms": int(parts[12])})
        except ValueError:
            continue
    return out


def _unescape(name: str) -> str:
    """The kernel's seq_escape of a mount name: ``\\040`` for a space, likewise tab, newline, backslash."""
    return _OCTAL.sub(lambda m: chr(int(m.group(1), 8)), name)


def parse_mountstats(text: str | None, limit: int = MAX_MOUNTS) -> list[dict]:
    """NFS mounts of /proc/self/mountstats as ``{"mount", "server", "fstype", "write_ops", "write_trans",
    "write_timeouts", "write_rtt_ms", "write_exe_ms", "commit_..."}`` (raw, cumulative); other filesystems
    and malformed lines are skipped.

    >>> text = ("device sysfs mounted on /sys with fstype sysfs\\n"
    ...         "device 10.0.0.7:/ckpt mounted on /mnt/ckpt with fstype nfs4 statvers=1.1\\n"
    ...         "\\tper-op statistics\\n"
    ...         "\\t       WRITE: 10 12 1 4096 1200 3 250 260 0\\n")
    >>> parse_mountstats(text)
    [{'mount': '/mnt/ckpt', 'server': '10.0.0.7:/ckpt', 'fstype': 'nfs4', 'write_ops': 10, 'write_trans': 12, \
'write_timeouts': 1, 'write_rtt_ms': 250, 'write_exe_ms': 260}]
    """
    out: list[dict] = []
    current: dict | None = None
    for line in (text or "").splitlines():
        if line.startswith("device "):
            current = None
            match = _MOUNT_LINE.match(line)
            if match and len(out) < limit:
                current = {"mount": _unescape(match.group(2))[:256], "server": _unescape(match.group(1))[:256],
                           "fstype": match.group(3)}
                out.append(current)
            continue
        if current is None:
            continue
        name, sep, rest = line.strip().partition(":")
        if not sep or name not in NFS_OPS:
            continue
        values = rest.split()
        if len(values) < len(NFS_OP_FIELDS) or not all(v.isdigit() for v in values[:len(NFS_OP_FIELDS)]):
            continue
        for field, value in zip(NFS_OP_FIELDS, values):
            if field is not None:
                current[f"{name.lower()}_{field}"] = int(value)
    return out


#: Lustre llite stats timed in microseconds, as the mount fields they fill (write: the write; fsync: the commit).
LUSTRE_OPS = {"write": "write", "fsync": "commit"}


def parse_llite_stats(instance: str, text: str | None) -> dict | None:
    """One Lustre client instance's ``llite/*/stats`` as a mount entry (None without a timed write or fsync).

    >>> parse_llite_stats("scratch-ffff9a", "snapshot_time 1764547200.1 secs.nsecs\\n"
    ...                   "write_bytes 40 samples [bytes] 4096 1048576 41943040\\n"
    ...                   "write 40 samples [usecs] 80 250000 2400000 1\\nfsync 2 samples [usecs] 900 1100 2000 1\\n")
    {'mount': 'lustre:scratch-ffff9a', 'fstype': 'lustre', 'write_ops': 40, 'write_trans': 40, \
'write_rtt_ms': 2400, 'commit_ops': 2, 'commit_trans': 2, 'commit_rtt_ms': 2}
    """
    entry: dict = {"mount": f"lustre:{instance}"[:256], "fstype": "lustre"}
    for line in (text or "").splitlines():
        parts = line.split()
        if len(parts) < 7 or parts[0] not in LUSTRE_OPS or parts[2] != "samples" or parts[3] != "[usecs]":
            continue
        if not (parts[1].isdigit() and parts[6].isdigit()):
            continue
        op = LUSTRE_OPS[parts[0]]
        entry[f"{op}_ops"] = entry[f"{op}_trans"] = int(parts[1])
        entry[f"{op}_rtt_ms"] = int(parts[6]) // 1000
    return entry if len(entry) > 2 else None


class HostReader:
    """Reads the ``host`` signals of this node from ``<proc_root>`` (and ``<sysfs_root>`` for disks and NICs)."""

    def __init__(self, proc_root: str | os.PathLike = "/proc", sysfs_root: str | os.PathLike = "/sys", *,
                 netdevs: bool = True) -> None:
        self.proc = Path(proc_root)
        self.sys = Path(sysfs_root)
        self.netdevs = netdevs

    @property
    def available(self) -> bool:
        return _read(self.proc / "stat") is not None

    def psi(self) -> dict[str, dict[str, float]] | None:
        out = {}
        for resource in PSI_RESOURCES:
            values = parse_psi(_read(self.proc / "pressure" / resource))
            if values:
                if resource == "cpu":  # system-wide cpu "full" is undefined (always 0 where present)
                    values = {k: v for k, v in values.items() if k == "some_avg10"}
                out[resource] = values
        return out or None

    def whole_disk(self, name: str) -> bool:
        """A whole, physical disk: sysfs's ``block/`` lists whole disks only; without it, the name tells."""
        if name.startswith(VIRTUAL_DISKS):
            return False
        block = self.sys / "block"
        if block.is_dir():
            return (block / name).exists()
        return not _PARTITION.match(name)

    def disks(self) -> list[dict]:
        return [d for d in parse_diskstats(_read(self.proc / "diskstats")) if self.whole_disk(d["device"])]

    def netdev_counters(self) -> list[dict]:
        net = self.sys / "class" / "net"
        try:
            names = sorted(p.name for p in net.iterdir())
        except OSError:
            return []
        out = []
        for name in names:
            if not (net / name / "device").exists():  # virtual: lo, bridges, veth, bonds, tunnels
                continue
            entry: dict = {"name": name}
            for counter in NETDEV_COUNTERS:
                text = _read(net / name / "statistics" / counter)
                if text is not None and text.strip().isdigit():
                    entry[counter] = int(text.strip())
            if len(entry) > 1:
                out.append(entry)
        return out

    def lustre(self) -> list[dict]:
        llite = self.proc / "fs" / "lustre" / "llite"
        try:
            names = sorted(p.name for p in llite.iterdir())[:MAX_MOUNTS]
        except OSError:  # no Lustre client here
            return []
        out = []
        for name in names:
            entry = parse_llite_stats(name, _read(llite / name / "stats"))
            if entry is not None:
                out.append(entry)
        return out

    def to_event(self, node: str, ts: float) -> dict | None:
        """One ``host`` event (None when even /proc/stat cannot be read)."""
        cpu = parse_cpu(_read(self.proc / "stat"))
        if cpu is None:
            return None
        event: dict = {"v": 1, "kind": "host", "node": node, "ts": round(ts, 6), "cpu": cpu}
        psi = self.psi()
        if psi:
            event["psi"] = psi
        load = (_read(self.proc / "loadavg") or "").split()
        if load:
            try:
                event["load1"] = float(load[0])
            except ValueError:
                pass
        event.update(parse_meminfo(_read(self.proc / "meminfo")))
        oom = parse_vmstat_oom(_read(self.proc / "vmstat"))
        if oom is not None:
            event["oom_kills"] = oom
        event["disks"] = self.disks()
        mounts = parse_mountstats(_read(self.proc / "self" / "mountstats")) + self.lustre()
        if mounts:
            event["mounts"] = mounts[:MAX_MOUNTS]
        if self.netdevs:
            nets = self.netdev_counters()
            if nets:
                event["netdevs"] = nets
        return event
