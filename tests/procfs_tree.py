"""A procfs tree shaped like the kernel's, written by hand for host-signal tests (not by the project's code)."""

from __future__ import annotations

from pathlib import Path

PSI_LINE = "{kind} avg10={a10:.2f} avg60={a60:.2f} avg300={a300:.2f} total={total}\n"


def write_procfs(root: Path, *, cpu=(10_000, 20, 3_000, 80_000, 500, 0, 40, 0), load1=1.25,
                 mem_total_kb=2_113_536_000 // 1024, mem_available_kb=1_800_000_000 // 1024,
                 swap_total_kb=0, swap_free_kb=0, oom_kill: int | None = 0, psi: dict | None = None,
                 disks: dict | None = None) -> Path:
    """Write (or rewrite) ``root`` as a /proc: ``psi`` maps resource -> (some_avg10, full_avg10)
    (None: no pressure/ directory, a kernel without PSI); ``disks`` maps a /proc/diskstats name
    -> (reads, read_ms, writes, write_ms, io_ms)."""
    root.mkdir(parents=True, exist_ok=True)
    user, nice, system, idle, iowait, irq, softirq, steal = cpu
    (root / "stat").write_text(
        f"cpu  {user} {nice} {system} {idle} {iowait} {irq} {softirq} {steal} 0 0\n"
        f"cpu0 {user // 2} {nice // 2} {system // 2} {idle // 2} {iowait // 2} {irq} {softirq} {steal} 0 0\n"
        "intr 123456 0 0\nctxt 987654\nbtime 1764547200\nprocesses 4242\nprocs_running 3\nprocs_blocked 0\n")
    (root / "loadavg").write_text(f"{load1:.2f} 1.10 0.95 3/812 424242\n")
    (root / "meminfo").write_text(
        f"MemTotal:       {mem_total_kb} kB\nMemFree:        {mem_available_kb // 2} kB\n"
        f"MemAvailable:   {mem_available_kb} kB\nBuffers:          123456 kB\nCached:         9876543 kB\n"
        f"SwapCached:            0 kB\nSwapTotal:      {swap_total_kb} kB\nSwapFree:       {swap_free_kb} kB\n"
        "HugePages_Total:       0\n")
    vmstat = "nr_free_pages 123456\npgfault 987654321\n"
    if oom_kill is not None:
        vmstat += f"oom_kill {oom_kill}\n"
    (root / "vmstat").write_text(vmstat + "pgmajfault 4242\n")
    pressure = root / "pressure"
    if psi is None:
        if pressure.exists():
            for f in pressure.iterdir():
                f.unlink()
            pressure.rmdir()
    else:
        pressure.mkdir(exist_ok=True)
        for resource in ("cpu", "io", "memory"):
            some, full = psi.get(resource, (0.0, 0.0))
            text = PSI_LINE.format(kind="some", a10=some, a60=some * 0.8, a300=some * 0.5, total=int(some * 1e6))
            text += PSI_LINE.format(kind="full", a10=full, a60=full * 0.8, a300=full * 0.5, total=int(full * 1e6))
            (pressure / resource).write_text(text)
    if disks is None:
        disks = {"nvme0n1": (1000, 400, 2000, 900, 1200)}
    lines = ["   7       0 loop0 12 0 24 1 0 0 0 0 0 4 1 0 0 0 0 0 0\n",
             " 251       0 zram0 40 0 320 0 300 0 2400 3 0 8 3 0 0 0 0 0 0\n"]
    major = 259
    for i, (name, (reads, read_ms, writes, write_ms, io_ms)) in enumerate(disks.items()):
        lines.append(f" {major}       {i * 8} {name} {reads} 17 {reads * 8} {read_ms} {writes} 33 {writes * 8} "
                     f"{write_ms} 0 {io_ms} {read_ms + write_ms} 0 0 0 0 0 0\n")
        lines.append(f" {major}       {i * 8 + 1} {name}p1 {reads // 2} 0 {reads * 4} {read_ms // 2} 0 0 0 0 0 "
                     f"{io_ms // 2} {read_ms // 2} 0 0 0 0 0 0\n")
    lines.append(" 253       0 dm-0 500 0 4000 200 800 0 6400 300 0 400 500 0 0 0 0 0 0\n")
    (root / "diskstats").write_text("".join(lines))
    return root


#: NFSv4 ops the kernel lists per mount before and after WRITE and COMMIT (a few of the ~60; zeros here).
_NFS4_OTHER_OPS = ("NULL", "READ", "OPEN", "OPEN_CONFIRM", "CLOSE", "SETATTR", "GETATTR", "LOOKUP", "ACCESS")


def write_mountstats(root: Path, mounts: dict[str, dict]) -> Path:
    """Write ``root/self/mountstats`` as the kernel does (fs/nfs/super.c ``nfs_show_stats``, net/sunrpc/stats.c
    ``_print_rpc_iostats``), with a few non-NFS mounts around: ``mounts`` maps a mount point to ``{"server",
    "vers" (3 or 4), "write": (ops, ntrans, timeouts, rtt_ms, exe_ms), "commit": (...)}``."""
    lines = ["device proc mounted on /proc with fstype proc\n",
             "device sysfs mounted on /sys with fstype sysfs\n",
             "device /dev/nvme0n1p1 mounted on / with fstype ext4\n"]
    for mount, spec in mounts.items():
        vers = spec.get("vers", 4)
        escaped = mount.replace("\\", "\\134").replace(" ", "\\040")
        lines.append(f"device {spec.get('server', '10.0.0.7:/export')} mounted on {escaped} with fstype "
                     f"{'nfs4' if vers == 4 else 'nfs'} statvers=1.1\n")
        lines.append(f"\topts:\trw,vers={vers}.{1 if vers == 4 else 0},rsize=1048576,wsize=1048576,namlen=255,"
                     "acregmin=3,acregmax=60,acdirmin=30,acdirmax=60,hard,proto=tcp,timeo=600,retrans=2,sec=sys\n")
        lines.append("\tage:\t86400\n\tcaps:\tcaps=0x3fff7,wtmult=512,dtsize=32768,bsize=0,namlen=255\n")
        lines.append("\tsec:\tflavor=1,pseudoflavor=1\n")
        lines.append("\tevents:\t" + " ".join(["12"] * 27) + "\n")
        lines.append("\tbytes:\t123456 654321 0 0 123456 654321 40 160\n")
        lines.append(f"\tRPC iostats version: 1.1  p/v: 100003/{vers} (nfs)\n")
        lines.append("\txprt:\ttcp 833 1 1 0 0 41041 41041 0 164101 0 2 0 0\n")
        lines.append("\tper-op statistics\n")
        for op in ("NULL", "READ", "WRITE", "COMMIT") + (_NFS4_OTHER_OPS[2:] if vers == 4 else ("GETATTR",)):
            if op in ("WRITE", "COMMIT"):
                ops, trans, timeouts, rtt, exe = spec.get(op.lower(), (0, 0, 0, 0, 0))
                sent, recv = ops * 1_048_776, ops * 136
                lines.append(f"\t{op:>12}: {ops} {trans} {timeouts} {sent} {recv} {ops // 10} {rtt} {exe} 0\n")
            else:
                lines.append(f"\t{op:>12}: 0 0 0 0 0 0 0 0 0\n")
        lines.append("\n")
    (root / "self").mkdir(parents=True, exist_ok=True)
    (root / "self" / "mountstats").write_text("".join(lines))
    return root


def write_llite_stats(root: Path, instance: str, *, write: tuple[int, int], fsync: tuple[int, int],
                      timed_write: bool = True) -> Path:
    """Write ``root/fs/lustre/llite/<instance>/stats`` as a Lustre client does (``NAME COUNT samples [UNIT] MIN MAX
    SUM SUMSQ``): ``write`` and ``fsync`` are (count, summed microseconds); ``timed_write=False``: a version that
    counts only ``write_bytes``."""
    count, usecs = write
    lines = ["snapshot_time             1764547200.264716203 secs.nsecs\n",
             f"write_bytes               {count} samples [bytes] 4096 1048576 {count * 1048576}\n"]
    if timed_write and count:
        lines.append(f"write                     {count} samples [usecs] 1 {usecs} {usecs} {usecs * usecs}\n")
    lines.append("open                      12 samples [usecs] 3 90 400 20000\n")
    if fsync[0]:
        lines.append(f"fsync                     {fsync[0]} samples [usecs] 1 {fsync[1]} {fsync[1]} {fsync[1] ** 2}\n")
    lines.append("getattr                   40 samples [usecs] 1 30 200 2000\n")
    path = root / "fs" / "lustre" / "llite" / instance
    path.mkdir(parents=True, exist_ok=True)
    (path / "stats").write_text("".join(lines))
    return root
