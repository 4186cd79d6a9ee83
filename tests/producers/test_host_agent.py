"""Host signals from procfs: the reader on hand-written /proc trees, the real /proc of this machine, the agent."""

from __future__ import annotations

import os
from pathlib import Path

import orjson

from stepwatch.config import Settings
from stepwatch.models.wire.events import decode_message, parse_event
from stepwatch.models.wire.telemetry_events import HostEvent
from stepwatch.producers.agent import NodeAgent
from stepwatch.producers.procfs_host import HostReader, parse_psi

from procfs_tree import write_procfs
from support import run_stepwatch, stepwatch_env

PSI = {"cpu": (12.5, 0.0), "io": (31.0, 22.75), "memory": (0.5, 0.1)}


def test_reader_reads_every_signal_with_psi(tmp_path):
    proc = write_procfs(tmp_path / "proc", psi=PSI, swap_total_kb=4096, swap_free_kb=1024, oom_kill=3,
                        disks={"nvme0n1": (1000, 400, 2000, 900, 1200), "sda": (10, 5, 20, 8, 12)})
    event = HostReader(proc, tmp_path / "sys").to_event("n1", 100.0)
    assert event["kind"] == "host" and event["node"] == "n1"
    assert event["psi"] == {"cpu": {"some_avg10": 12.5}, "io": {"some_avg10": 31.0, "full_avg10": 22.75},
                            "memory": {"some_avg10": 0.5, "full_avg10": 0.1}}
    assert event["cpu"] == {"user": 10_000, "nice": 20, "system": 3_000, "idle": 80_000, "iowait": 500, "irq": 0,
                            "softirq": 40, "steal": 0}
    assert event["load1"] == 1.25
    assert event["mem_total"] == (2_113_536_000 // 1024) * 1024 and event["swap_used"] == 3072 * 1024
    assert event["oom_kills"] == 3
    # whole disks only: no partition, loop, zram or device-mapper device
    assert event["disks"] == [
        {"device": "nvme0n1", "reads": 1000, "read_ms": 400, "writes": 2000, "write_ms": 900, "io_ms": 1200},
        {"device": "sda", "reads": 10, "read_ms": 5, "writes": 20, "write_ms": 8, "io_ms": 12}]
    parsed = parse_event(event)
    assert isinstance(parsed, HostEvent) and parsed.psi["io"]["full_avg10"] == 22.75 and parsed.oom_kills == 3


def test_reader_without_psi_or_oom_counter_leaves_them_out(tmp_path):
    proc = write_procfs(tmp_path / "proc", psi=None, oom_kill=None)
    event = HostReader(proc, tmp_path / "sys").to_event("n1", 1.0)
    assert "psi" not in event and "oom_kills" not in event
    assert parse_event(event).psi is None
    assert parse_psi("") is None and parse_psi("garbage\n") is None


def test_sysfs_block_decides_what_a_whole_disk_is(tmp_path):
    proc = write_procfs(tmp_path / "proc", disks={"nvme0n1": (1, 1, 1, 1, 1), "md127": (1, 1, 1, 1, 1),
                                                   "xvda": (1, 1, 1, 1, 1)})
    sys_block = tmp_path / "sys" / "block"
    for name in ("nvme0n1", "loop0", "dm-0", "md127"):  # sysfs lists virtual devices too: the name rules them out
        (sys_block / name).mkdir(parents=True)
    reader = HostReader(proc, tmp_path / "sys")
    assert [d["device"] for d in reader.disks()] == ["nvme0n1"]  # xvda is not under block/ here


def test_counters_wrapping_and_a_disk_appearing_between_samples(tmp_path):
    proc = tmp_path / "proc"
    top = 2**32
    write_procfs(proc, psi=PSI, disks={"nvme0n1": (top - 10, top - 5, 7, 7, 7)})
    reader = HostReader(proc, tmp_path / "sys")
    first = reader.to_event("n1", 1.0)
    write_procfs(proc, psi=PSI, disks={"nvme0n1": (20, 30, 9, 9, 9), "nvme1n1": (5, 2, 0, 0, 1)})
    second = reader.to_event("n1", 2.0)
    assert [d["device"] for d in first["disks"]] == ["nvme0n1"]
    assert [d["device"] for d in second["disks"]] == ["nvme0n1", "nvme1n1"]
    assert second["disks"][0]["reads"] == 20  # raw, as read: the worker sees the wrap (models/telemetry/host.py)
    for event in (first, second):
        parse_event(event)


def test_physical_netdevs_only(tmp_path):
    sysfs = tmp_path / "sys"
    for name, physical in (("eth0", True), ("lo", False), ("veth12", False)):
        stats = sysfs / "class" / "net" / name / "statistics"
        stats.mkdir(parents=True)
        for i, counter in enumerate(("rx_dropped", "tx_dropped", "rx_errors", "tx_errors")):
            (stats / counter).write_text(f"{i + 1}\n")
        if physical:
            (sysfs / "class" / "net" / name / "device").mkdir()
    event = HostReader(write_procfs(tmp_path / "proc"), sysfs).to_event("n1", 1.0)
    assert event["netdevs"] == [{"name": "eth0", "rx_dropped": 1, "tx_dropped": 2, "rx_errors": 3, "tx_errors": 4}]


def test_bad_host_events_are_rejected_not_crashing():
    good = {"v": 1, "kind": "host", "node": "n1", "ts": 1.0}
    bad = [dict(good, psi={"io": {"some_avg10": 130.0}}), dict(good, cpu={"user": -1}),
           dict(good, disks=[{"reads": 1}]), dict(good, disks="nvme0n1"), dict(good, oom_kills=True)]
    events, rejected = decode_message(orjson.dumps({"v": 1, "kind": "batch", "events": [good] + bad}))
    assert len(events) == 1 and len(rejected) == len(bad)


def test_this_machines_real_proc_gives_sane_host_signals():
    event = HostReader("/proc", "/sys").to_event("here", 1.0)
    assert event is not None
    parsed = parse_event(event)
    cpu = parsed.cpu
    assert set(cpu) >= {"user", "system", "idle"} and cpu["idle"] > 0 and sum(cpu.values()) > 0
    assert parsed.load1 is not None and parsed.load1 >= 0
    assert 0 < parsed.mem_available <= parsed.mem_total and parsed.mem_total >= 256 * 2**20
    assert parsed.swap_used is not None and parsed.swap_used >= 0
    if Path("/proc/pressure/io").exists() and os.access("/proc/pressure/io", os.R_OK):
        try:
            Path("/proc/pressure/io").read_text()
            psi_readable = True
        except OSError:  # psi=0 on the kernel command line
            psi_readable = False
        if psi_readable:
            assert 0 <= parsed.psi["io"]["some_avg10"] <= 100
    for disk in parsed.disks:
        name = disk["device"]
        assert not name.startswith(("loop", "ram", "zram", "dm-")) and (Path("/sys/block") / name).exists()
        assert disk["read_ms"] >= 0 and disk["reads"] >= 0


def test_agent_sends_a_host_event_every_sample(tmp_path):
    batches = []
    proc = write_procfs(tmp_path / "proc", psi=PSI)
    agent = NodeAgent(node="cpu-7", settings=Settings(), sysfs_root=str(tmp_path / "sys"), proc_root=str(proc),
                      nvml=None, sink=lambda key, events: batches.append(events), report=open(os.devnull, "w"))
    agent.discover()
    agent.run(max_samples=3)
    assert [[e["kind"] for e in b] for b in batches] == [["host"]] * 3
    assert any("host signals under" in f and "with PSI" in f for f in agent.found)


def test_stepwatch_agent_proc_root_flag(tmp_path):
    env = stepwatch_env("", "x.")
    env.pop("KAFKA_BOOTSTRAP", None)
    proc = write_procfs(tmp_path / "proc", psi=None, oom_kill=9)
    result = run_stepwatch("agent", "--once", "--node", "n1", "--sysfs-root", str(tmp_path / "sys"),
                           "--proc-root", str(proc), env=env)
    [host] = [parse_event(orjson.loads(line)) for line in result.stdout.splitlines()]
    assert host.kind == "host" and host.oom_kills == 9 and host.psi is None
    assert "no PSI" in result.stderr
