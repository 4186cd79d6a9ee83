"""The node agent: the real sysfs reader on a kernel-shaped tree, NVML at the pynvml boundary, the CLI."""

from __future__ import annotations

import os
import types
from pathlib import Path

import pytest

from stepwatch.config import Settings
from stepwatch.models.wire.events import parse_event
from stepwatch.producers.agent import KafkaSender, NodeAgent
from stepwatch.producers.nvml_sampler import NvmlSampler
from stepwatch.producers.sysfs_ib import IbReader, normalize_bus_id, parse_rate

from support import run_stepwatch, stepwatch_env

# Port counters as read on a ConnectX-7 (NDR InfiniBand) port and a ConnectX-6 Dx (RoCE) port.
IB_COUNTERS = {
    "VL15_dropped": "0", "excessive_buffer_overrun_errors": "0", "link_downed": "1", "link_error_recovery": "0",
    "local_link_integrity_errors": "0", "multicast_rcv_packets": "1052", "multicast_xmit_packets": "0",
    "port_rcv_constraint_errors": "0", "port_rcv_data": "2147386283427", "port_rcv_errors": "0",
    "port_rcv_packets": "3921185630", "port_rcv_remote_physical_errors": "0", "port_rcv_switch_relay_errors": "0",
    "port_xmit_constraint_errors": "0", "port_xmit_data": "2150037731296", "port_xmit_discards": "0",
    "port_xmit_packets": "3926651210", "port_xmit_wait": "3815406577", "symbol_error": "0",
    "unicast_rcv_packets": "3921184578", "unicast_xmit_packets": "3926651210",
}
IB_HW_COUNTERS = {
    "duplicate_request": "0", "implied_nak_seq_err": "0", "lifespan": "10", "local_ack_timeout_err": "0",
    "out_of_buffer": "0", "out_of_sequence": "0", "packet_seq_err": "0", "req_cqe_error": "0",
    "req_cqe_flush_error": "0", "req_remote_access_errors": "0", "req_remote_invalid_request": "0",
    "resp_cqe_error": "0", "resp_cqe_flush_error": "0", "resp_local_length_error": "0",
    "resp_remote_access_errors": "0", "rnr_nak_retry_err": "0", "rx_atomic_requests": "0",
    "rx_read_requests": "18230", "rx_write_requests": "88817243",
}
ROCE_HW_COUNTERS = dict(IB_HW_COUNTERS, np_cnp_sent="18342", np_ecn_marked_roce_packets="18342",
                        rp_cnp_handled="9120", rp_cnp_ignored="0", roce_adp_retrans="0", roce_slow_restart="0",
                        out_of_sequence="3")


def _write(path: Path, text: str | bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text + "\n")


def _link(link: Path, target: Path) -> None:
    link.parent.mkdir(parents=True, exist_ok=True)
    os.symlink(os.path.relpath(target, link.parent), link)


def make_sysfs(root: Path) -> Path:
    """A two-socket GPU node's sysfs as the kernel lays it out (the parts the agent reads)."""
    devices = root / "devices"
    # Socket 0: a PCIe switch with GPU 0 (0000:18:00.0) and mlx5_0 (0000:1a:00.0) below it.
    sw0 = devices / "pci0000:15" / "0000:15:01.0" / "0000:16:00.0"
    gpu0, nic0 = sw0 / "0000:17:00.0" / "0000:18:00.0", sw0 / "0000:17:01.0" / "0000:1a:00.0"
    # Socket 1: GPU 1 (0000:d1:00.0) and mlx5_1 (0000:d3:00.0), a RoCE port.
    sw1 = devices / "pci0000:ce" / "0000:ce:01.0" / "0000:cf:00.0"
    gpu1, nic1 = sw1 / "0000:d0:00.0" / "0000:d1:00.0", sw1 / "0000:d0:02.0" / "0000:d3:00.0"
    for pci in (gpu0, nic0, gpu1, nic1):
        _write(pci / "vendor", "0x10de" if pci in (gpu0, gpu1) else "0x15b3")
        _link(root / "bus" / "pci" / "devices" / pci.name, pci)
    for nic, dev, netdev, rate, layer, hw in (
            (nic0, "mlx5_0", "ibp26s0", "400 Gb/sec (4X NDR)", "InfiniBand", IB_HW_COUNTERS),
            (nic1, "mlx5_1", "ens3np0", "200 Gb/sec (4X HDR)", "Ethernet", ROCE_HW_COUNTERS)):
        ibdev = nic / "infiniband" / dev
        _write(ibdev / "node_guid", "b83f:d203:00a1:3c4e")
        _write(ibdev / "fw_ver", "28.39.1002")
        _write(ibdev / "hca_type", "MT4129")
        _link(ibdev / "device", nic)
        _write(nic / "net" / netdev / "dev_port", "0")
        port = ibdev / "ports" / "1"
        _write(port / "state", "4: ACTIVE")
        _write(port / "phys_state", "5: LinkUp")
        _write(port / "rate", rate)
        _write(port / "link_layer", layer)
        _write(port / "lid", "0x12" if layer == "InfiniBand" else "0x0")
        for name, value in IB_COUNTERS.items():
            _write(port / "counters" / name, value)
        for name, value in hw.items():
            _write(port / "hw_counters" / name, value)
        _link(root / "class" / "infiniband" / dev, ibdev)
    # What a RoCE port cannot count reads N/A; a counter the driver refuses (EINVAL) is unreadable.
    _write(nic1 / "infiniband" / "mlx5_1" / "ports" / "1" / "counters" / "VL15_dropped", "N/A")
    _write(nic1 / "infiniband" / "mlx5_1" / "ports" / "1" / "hw_counters" / "rx_icrc_encapsulated", b"\xff\xfe")
    return root


@pytest.fixture
def sysfs(tmp_path) -> Path:
    return make_sysfs(tmp_path / "sys")


def test_sysfs_reader_reads_ports_counters_state_and_rate(sysfs):
    reader = IbReader(sysfs)
    assert reader.devices() == ["mlx5_0", "mlx5_1"]
    ib, roce = reader.read_all()
    assert (ib.device, ib.port, ib.state, ib.phys_state, ib.rate, ib.link_layer, ib.netdev) == (
        "mlx5_0", 1, "ACTIVE", "LinkUp", 400.0, "InfiniBand", "ibp26s0")
    assert ib.counters["port_xmit_wait"] == 3815406577 and ib.counters["link_downed"] == 1
    assert ib.counters["rx_write_requests"] == 88817243  # hw_counters too
    assert len(ib.counters) == len(IB_COUNTERS) + len(IB_HW_COUNTERS) and ib.unreadable == 0
    assert roce.link_layer == "Ethernet" and roce.rate == 200.0 and roce.counters["np_cnp_sent"] == 18342
    assert "VL15_dropped" not in roce.counters and "rx_icrc_encapsulated" not in roce.counters
    assert roce.unreadable == 2
    event = parse_event(roce.to_event("gpu-052", 1_700_000_000.0))
    assert event.kind == "link" and event.counters["out_of_sequence"] == 3


def test_topology_ties_each_gpu_to_the_nic_under_the_same_switch(sysfs):
    reader = IbReader(sysfs)
    assert reader.pci_address("mlx5_1") == "0000:d3:00.0"
    gpus, nics = reader.topology({0: normalize_bus_id("00000000:18:00.0"), 1: "0000:d1:00.0"})
    assert [g["nics"] for g in gpus] == [["mlx5_0"], ["mlx5_1"]]
    assert [n["device"] for n in nics] == ["mlx5_0", "mlx5_1"] and nics[0]["ports"] == [1]


def test_reader_tolerates_a_missing_tree(tmp_path):
    reader = IbReader(tmp_path / "nothing")
    assert reader.devices() == [] and reader.read_all() == []
    assert parse_rate("N/A") is None and parse_rate("100 Gb/sec (2X HDR)") == 100.0


# -- NVML at the pynvml function boundary --------------------------------------------------------------


def fake_nvml(count: int = 2, *, ecc: bool = True, nvlinks: int = 18):
    """A stand-in for the ``pynvml`` module with values recorded from an H100 SXM5 80GB."""
    try:
        import pynvml as real

        errors = {"NVMLError": real.NVMLError, "NVMLError_NotSupported": real.NVMLError_NotSupported,
                  "NVMLError_Timeout": real.NVMLError_Timeout}
        not_supported = lambda: real.NVMLError(real.NVML_ERROR_NOT_SUPPORTED)  # noqa: E731
        timeout = lambda: real.NVMLError(real.NVML_ERROR_TIMEOUT)  # noqa: E731
    except ImportError:  # the optional extra is not installed: same shape, local classes
        class NVMLError(Exception):
            pass

        class NVMLError_NotSupported(NVMLError):  # noqa: N801
            pass

        class NVMLError_Timeout(NVMLError):  # noqa: N801
            pass

        errors = {"NVMLError": NVMLError, "NVMLError_NotSupported": NVMLError_NotSupported,
                  "NVMLError_Timeout": NVMLError_Timeout}
        not_supported, timeout = NVMLError_NotSupported, NVMLError_Timeout
    xids = [types.SimpleNamespace(eventType=0x8, eventData=79, device=1)]

    def unsupported(*_):
        raise not_supported()

    def nvlink_state(h, link):
        if link >= nvlinks:
            raise not_supported()
        return 1

    def wait(event_set, timeout_ms):
        if xids:
            return xids.pop()
        raise timeout()

    field = types.SimpleNamespace
    nv = types.SimpleNamespace(
        **errors,
        NVML_TEMPERATURE_GPU=0, NVML_CLOCK_SM=1, NVML_MEMORY_ERROR_TYPE_CORRECTED=0,
        NVML_MEMORY_ERROR_TYPE_UNCORRECTED=1, NVML_VOLATILE_ECC=0, NVML_FEATURE_ENABLED=1,
        NVML_NVLINK_ERROR_DL_REPLAY=0, NVML_NVLINK_ERROR_DL_RECOVERY=1, NVML_NVLINK_ERROR_DL_CRC_FLIT=2,
        NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX=138, NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX=139,
        nvmlEventTypeXidCriticalError=0x8,
        nvmlInit=lambda: None, nvmlShutdown=lambda: None,
        nvmlDeviceGetCount=lambda: count,
        nvmlDeviceGetHandleByIndex=lambda i: i,
        nvmlDeviceGetIndex=lambda h: h,
        nvmlDeviceGetUUID=lambda h: f"GPU-8c5bd6f1-03ac-2e1b-7f4a-b27d0c9e1a5{h}",
        nvmlDeviceGetPciInfo=lambda h: field(busId=[b"00000000:18:00.0", b"00000000:D1:00.0"][h]),
        nvmlDeviceGetUtilizationRates=lambda h: field(gpu=100, memory=38),
        nvmlDeviceGetMemoryInfo=lambda h: field(total=85520809984, used=72889466880, free=12631343104),
        nvmlDeviceGetTemperature=lambda h, sensor: 47 + 41 * h,  # GPU 1 runs hot
        nvmlDeviceGetPowerUsage=lambda h: 689512,
        nvmlDeviceGetEnforcedPowerLimit=lambda h: 700000,
        nvmlDeviceGetClockInfo=lambda h, clock: 1980 if h == 0 else 1095,
        nvmlDeviceGetMaxClockInfo=lambda h, clock: 1980,
        nvmlDeviceGetCurrentClocksEventReasons=lambda h: 0 if h == 0 else 0x60,
        nvmlDeviceGetCurrentClocksThrottleReasons=lambda h: 0 if h == 0 else 0x60,
        nvmlDeviceGetTotalEccErrors=(lambda h, kind, counter: 0) if ecc else unsupported,
        nvmlDeviceGetCurrPcieLinkGeneration=lambda h: 5, nvmlDeviceGetMaxPcieLinkGeneration=lambda h: 5,
        nvmlDeviceGetCurrPcieLinkWidth=lambda h: 16, nvmlDeviceGetMaxPcieLinkWidth=lambda h: 16,
        nvmlDeviceGetNvLinkState=nvlink_state,
        nvmlDeviceGetNvLinkErrorCounter=lambda h, link, counter: 0,
        nvmlDeviceGetFieldValues=lambda h, ids: [field(nvmlReturn=0, value=field(ullVal=51923_000 + i))
                                                 for i, _ in enumerate(ids)],
        nvmlEventSetCreate=lambda: "set", nvmlEventSetFree=lambda s: None,
        nvmlDeviceRegisterEvents=lambda h, types_, s: None,
        nvmlEventSetWait_v2=wait,
    )
    return nv


def test_nvml_sampler_reads_a_full_gpu_sample():
    sampler = NvmlSampler("gpu-052", nvml=fake_nvml())
    assert sampler.start()
    gpu0, gpu1 = sampler.sample(1_700_000_000.0)
    assert gpu0["pci_bus_id"] == "00000000:18:00.0" and gpu0["uuid"].startswith("GPU-")
    assert (gpu0["util"], gpu0["mem_used"], gpu0["power"], gpu0["power_limit"]) == (100.0, 72889466880, 689.512, 700.0)
    assert (gpu0["sm_clock"], gpu0["sm_clock_max"], gpu0["throttle"], gpu0["ecc_dbe"]) == (1980.0, 1980.0, 0, 0)
    assert (gpu0["pcie_gen"], gpu0["pcie_width_max"]) == (5, 16)
    assert len(gpu0["nvlinks"]) == 18 and gpu0["nvlinks"][0]["up"] is True
    assert gpu0["nvlinks"][0]["tx_bytes"] == 51923_000 * 1024
    assert (gpu1["temp"], gpu1["sm_clock"], gpu1["throttle"]) == (88.0, 1095.0, 0x60)
    for event in (gpu0, gpu1):
        parse_event(event)


def test_nvml_sampler_leaves_out_unsupported_fields_and_reports_xids():
    sampler = NvmlSampler("gpu-052", nvml=fake_nvml(count=1, ecc=False, nvlinks=0))
    assert sampler.start()
    [gpu] = sampler.sample(1.0)
    assert "ecc_sbe" not in gpu and "ecc_dbe" not in gpu and "nvlinks" not in gpu
    assert {"ECC", "NVLink"} <= sampler.unsupported
    assert sampler.watch_xids()
    [xid] = sampler.wait_xid(100, lambda: 2.0)
    assert (xid["kind"], xid["gpu"], xid["xid"], xid["ts"]) == ("xid", 1, 79, 2.0)
    assert sampler.wait_xid(100, lambda: 3.0) == []  # NVMLError_Timeout: nothing happened


def test_nvml_sampler_without_a_driver_says_why():
    nv = fake_nvml()

    def no_library():
        raise nv.NVMLError(12) if nv.NVMLError.__module__ == "pynvml" else nv.NVMLError("library not found")

    nv.nvmlInit = no_library
    sampler = NvmlSampler("n", nvml=nv)
    assert not sampler.start() and "NVML unavailable" in sampler.reason


# -- the agent ---------------------------------------------------------------------------------------


def test_agent_sample_has_topology_gpus_and_links(sysfs, capsys):
    batches = []
    agent = NodeAgent(node="gpu-052", settings=Settings(), sysfs_root=str(sysfs), nvml=fake_nvml(),
                      sink=lambda key, events: batches.append((key, events)), clock=lambda: 1_700_000_000.0)
    agent.discover()
    agent.run(once=True)
    [(key, events)] = batches
    assert key == "gpu-052"
    kinds = [e["kind"] for e in events]
    assert kinds == ["topology", "gpu", "gpu", "link", "link", "host"]  # host: this machine's /proc
    topo = parse_event(events[0])
    assert [g["nics"] for g in topo.gpus] == [["mlx5_0"], ["mlx5_1"]]
    for event in events:
        parse_event(event)
    report = capsys.readouterr().err
    assert "found 2 GPU(s) via NVML; 2 RDMA device(s) with 2 port(s)" in report and "skipped" not in report


def test_agent_on_a_node_without_gpu_or_infiniband_reports_what_it_skipped(tmp_path, capsys):
    nv = fake_nvml(count=0)
    batches = []
    agent = NodeAgent(node="cpu-1", settings=Settings(), sysfs_root=str(tmp_path), proc_root=str(tmp_path), nvml=nv,
                      sink=lambda key, events: batches.append(events))
    agent.discover()
    agent.run(max_samples=2)
    assert batches == []  # nothing to send, nothing sent
    report = capsys.readouterr().err
    assert report.count("\n") == 1  # said once
    assert "skipped: gpu and xid events (NVML found no GPU)" in report and "link events" in report
    assert "host events (cannot read" in report


def test_sender_drops_and_counts_when_kafka_is_unreachable():
    sender = KafkaSender(bootstrap="127.0.0.1:1", topic="t", queue_size=3, max_block_ms=100).start()
    accepted = [sender.offer("n", [{"v": 1}]) for _ in range(20)]
    assert accepted.count(False) == sender.dropped >= 16
    sender.close(timeout=1)


def test_stepwatch_agent_once_runs_here_and_reports_skips(sysfs):
    env = stepwatch_env("", "x.")
    env.pop("KAFKA_BOOTSTRAP", None)
    result = run_stepwatch("agent", "--once", "--node", "this-host", env=env)
    assert "stepwatch agent: node this-host" in result.stderr and "skipped" in result.stderr
    result = run_stepwatch("agent", "--once", "--node", "n1", "--sysfs-root", str(sysfs), env=env)
    links = [parse_event(__import__("orjson").loads(line)) for line in result.stdout.splitlines()]
    assert [(e.kind, e.device) for e in links if e.kind == "link"] == [("link", "mlx5_0"), ("link", "mlx5_1")]
