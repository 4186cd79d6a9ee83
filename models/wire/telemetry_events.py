"""Node telemetry events (docs/events.md): ``gpu``, ``xid``, ``link``, ``topology`` and ``host``, with their parsers.

Keyed by ``node``, not by job: the node agent (producers/agent.py) samples every GPU
(NVML) and every InfiniBand/RoCE port (sysfs) of its host. Counters are the raw
cumulative values as read; the worker turns them into deltas and rates
(models/telemetry/counters.py, models/telemetry/telemetry_tracker.py), so a lost message loses no increments.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Union

from .wire import _MAX_FLOAT, MAX_COUNTER, MAX_NAME_LEN, InvalidEvent, _extra, _int, _num, _str


@dataclass(frozen=True, slots=True)
class GpuEvent:
    node: str
    ts: float
    gpu: int
    uuid: str | None = None
    pci_bus_id: str | None = None
    util: float | None = None  # percent of time a kernel ran
    mem_util: float | None = None
    sm_active: float | None = None  # percent, where the driver reports it
    mem_used: int | None = None  # bytes
    mem_total: int | None = None
    temp: float | None = None  # degrees C
    power: float | None = None  # watts
    power_limit: float | None = None
    sm_clock: float | None = None  # MHz
    sm_clock_max: float | None = None
    throttle: int | None = None  # NVML clock event (throttle) reason bitmask
    ecc_sbe: int | None = None  # cumulative corrected (single-bit) ECC errors
    ecc_dbe: int | None = None  # cumulative uncorrected (double-bit) ECC errors
    pcie_gen: int | None = None
    pcie_gen_max: int | None = None
    pcie_width: int | None = None
    pcie_width_max: int | None = None
    nvlinks: tuple[dict[str, Any], ...] = ()
    extra: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)
    kind = "gpu"


@dataclass(frozen=True, slots=True)
class XidEvent:
    node: str
    ts: float
    gpu: int
    xid: int
    uuid: str | None = None
    message: str | None = None
    extra: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)
    kind = "xid"


@dataclass(frozen=True, slots=True)
class LinkEvent:
    node: str
    ts: float
    device: str  # e.g. mlx5_2
    port: int
    state: str | None = None  # ACTIVE, DOWN, INIT, ARMED, ...
    phys_state: str | None = None  # LinkUp, Polling, Disabled, ...
    rate: float | None = None  # Gb/s
    link_layer: str | None = None  # InfiniBand or Ethernet (RoCE)
    netdev: str | None = None
    counters: dict[str, int] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)
    kind = "link"


@dataclass(frozen=True, slots=True)
class TopologyEvent:
    node: str
    ts: float
    gpus: tuple[dict[str, Any], ...] = ()  # {"gpu": 0, "pci_bus_id": ..., "nics": ["mlx5_0"]}
    #: {"device": "mlx5_0", "pci_bus_id": ..., "ports": [1], "switch": ..., "neighbors": [{"port": 1, "switch": ...,
    #: "switch_port": "3", "switch_id": "0x...", "source": "ibnetdiscover"}]}
    nics: tuple[dict[str, Any], ...] = ()
    extra: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)
    kind = "topology"


TelemetryEvent = Union[GpuEvent, XidEvent, LinkEvent, TopologyEvent, "HostEvent"]
TELEMETRY_KINDS = frozenset({"gpu", "xid", "link", "topology", "host"})
#: Most NVLinks per GPU, counters per port, and GPUs/NICs per topology event accepted.
MAX_NVLINKS = 64
MAX_COUNTERS = 256
MAX_TOPOLOGY_ITEMS = 1024

_GPU_FIELDS = frozenset(
    "v kind node ts gpu uuid pci_bus_id util mem_util sm_active mem_used mem_total temp power power_limit "
    "sm_clock sm_clock_max throttle ecc_sbe ecc_dbe pcie_gen pcie_gen_max pcie_width pcie_width_max "
    "nvlinks".split()
)
_XID_FIELDS = frozenset("v kind node ts gpu xid uuid message".split())
_LINK_FIELDS = frozenset("v kind node ts device port state phys_state rate link_layer netdev counters".split())
_TOPOLOGY_FIELDS = frozenset("v kind node ts gpus nics".split())
_NVLINK_INTS = ("tx_bytes", "rx_bytes", "crc_errors", "replay_errors", "recovery_errors")


def _list(obj: dict, name: str, limit: int) -> list:
    value = obj.get(name)
    if value is None:
        return []
    if not isinstance(value, list):
        raise InvalidEvent(f"'{name}' must be a list")
    if len(value) > limit:
        raise InvalidEvent(f"'{name}' has more than {limit} items")
    for item in value:
        if not isinstance(item, dict):
            raise InvalidEvent(f"'{name}' items must be objects")
    return value


def _nvlink(item: dict) -> dict[str, Any]:
    out: dict[str, Any] = {"link": _int(item, "link", required=True)}
    up = item.get("up")
    if up is not None:
        if not isinstance(up, bool):
            raise InvalidEvent("nvlink 'up' must be true or false")
        out["up"] = up
    for name in _NVLINK_INTS:
        value = _int(item, name, required=False)
        if value is not None:
            out[name] = value
    return out


def _parse_gpu(o: dict) -> GpuEvent:
    return GpuEvent(
        node=_str(o, "node", required=True),
        ts=_num(o, "ts", required=True),
        gpu=_int(o, "gpu", required=True),
        uuid=_str(o, "uuid", required=False),
        pci_bus_id=_str(o, "pci_bus_id", required=False),
        util=_num(o, "util", required=False),
        mem_util=_num(o, "mem_util", required=False),
        sm_active=_num(o, "sm_active", required=False),
        mem_used=_int(o, "mem_used", required=False),
        mem_total=_int(o, "mem_total", required=False),
        temp=_num(o, "temp", required=False),
        power=_num(o, "power", required=False),
        power_limit=_num(o, "power_limit", required=False),
        sm_clock=_num(o, "sm_clock", required=False),
        sm_clock_max=_num(o, "sm_clock_max", required=False),
        throttle=_int(o, "throttle", required=False),
        ecc_sbe=_int(o, "ecc_sbe", required=False),
        ecc_dbe=_int(o, "ecc_dbe", required=False),
        pcie_gen=_int(o, "pcie_gen", required=False),
        pcie_gen_max=_int(o, "pcie_gen_max", required=False),
        pcie_width=_int(o, "pcie_width", required=False),
        pcie_width_max=_int(o, "pcie_width_max", required=False),
        nvlinks=tuple(_nvlink(item) for item in _list(o, "nvlinks", MAX_NVLINKS)),
        extra=_extra(o, _GPU_FIELDS),
    )


def _parse_xid(o: dict) -> XidEvent:
    message = o.get("message")
    if message is not None and not isinstance(message, str):
        raise InvalidEvent("'message' must be a string")
    return XidEvent(
        node=_str(o, "node", required=True),
        ts=_num(o, "ts", required=True),
        gpu=_int(o, "gpu", required=True),
        xid=_int(o, "xid", required=True),
        uuid=_str(o, "uuid", required=False),
        message=message[:1024] if message else None,
        extra=_extra(o, _XID_FIELDS),
    )


_COUNTER_TOP = 2**64
_INT_ONLY = {int}
_STR_ONLY = {str}


def _counters(o: dict) -> dict[str, int]:
    value = o.get("counters")
    if value is None:
        return {}
    # The usual object (string names, non-negative 64-bit integers) checked in C loops; anything else is
    # checked name by name below for its one-line reason.
    if type(value) is dict and 0 < len(value) <= MAX_COUNTERS:
        counts = value.values()
        if (set(map(type, counts)) == _INT_ONLY and min(counts) >= 0 and max(counts) < _COUNTER_TOP
                and set(map(type, value)) == _STR_ONLY and min(map(len, value)) > 0
                and max(map(len, value)) <= MAX_NAME_LEN):
            return dict(value)
    if not isinstance(value, dict):
        raise InvalidEvent("'counters' must be an object of name -> integer")
    if len(value) > MAX_COUNTERS:
        raise InvalidEvent(f"'counters' has more than {MAX_COUNTERS} entries")
    out: dict[str, int] = {}
    for name in value:
        if not isinstance(name, str) or not name or len(name) > MAX_NAME_LEN:
            raise InvalidEvent("counter names must be non-empty strings")
        count = value[name]
        # Counters are raw cumulative values: unsigned, up to 64 bits.
        if isinstance(count, bool) or not isinstance(count, int) or not 0 <= count < 2**64:
            raise InvalidEvent(f"counter {name!r} must be a non-negative 64-bit integer")
        out[name] = count
    return out


def _name_or_none(value) -> bool:
    return value is None or (type(value) is str and 0 < len(value) <= MAX_NAME_LEN)


def _parse_link(o: dict) -> LinkEvent:
    # The agent's usual sample (every field of its type and range) without the field checks' calls; anything
    # else takes them, for its one-line reason.
    get = o.get
    node, ts, device, port, rate = get("node"), get("ts"), get("device"), get("port"), get("rate")
    state, phys_state, link_layer, netdev = get("state"), get("phys_state"), get("link_layer"), get("netdev")
    if (type(node) is str and 0 < len(node) <= MAX_NAME_LEN and type(device) is str and 0 < len(device) <= MAX_NAME_LEN
            and type(ts) is float and 0.0 <= ts <= _MAX_FLOAT and type(port) is int and 0 <= port <= MAX_COUNTER
            and (rate is None or (type(rate) is float and 0.0 <= rate <= _MAX_FLOAT))
            and _name_or_none(state) and _name_or_none(phys_state) and _name_or_none(link_layer)
            and _name_or_none(netdev)):
        return LinkEvent(node, ts, device, port, state, phys_state, rate, link_layer, netdev, _counters(o),
                         _extra(o, _LINK_FIELDS))
    return LinkEvent(
        node=_str(o, "node", required=True),
        ts=_num(o, "ts", required=True),
        device=_str(o, "device", required=True),
        port=_int(o, "port", required=True),
        state=_str(o, "state", required=False),
        phys_state=_str(o, "phys_state", required=False),
        rate=_num(o, "rate", required=False),
        link_layer=_str(o, "link_layer", required=False),
        netdev=_str(o, "netdev", required=False),
        counters=_counters(o),
        extra=_extra(o, _LINK_FIELDS),
    )


def _topology_gpu(item: dict) -> dict[str, Any]:
    out: dict[str, Any] = {"gpu": _int(item, "gpu", required=True)}
    bus = _str(item, "pci_bus_id", required=False)
    if bus:
        out["pci_bus_id"] = bus
    nics = item.get("nics", [])
    if not isinstance(nics, list) or not all(isinstance(n, str) and n for n in nics):
        raise InvalidEvent("topology gpu 'nics' must be a list of device names")
    out["nics"] = nics[:64]
    return out


def _topology_nic(item: dict) -> dict[str, Any]:
    out: dict[str, Any] = {"device": _str(item, "device", required=True)}
    bus = _str(item, "pci_bus_id", required=False)
    if bus:
        out["pci_bus_id"] = bus
    ports = item.get("ports", [])
    if not isinstance(ports, list) or not all(isinstance(p, int) and not isinstance(p, bool) and p >= 0
                                              for p in ports):
        raise InvalidEvent("topology nic 'ports' must be a list of port numbers")
    out["ports"] = ports[:64]
    # the switch at the other end of the cable (models/telemetry/incidents.py)
    switch = _str(item, "switch", required=False)
    if switch:
        out["switch"] = switch
    neighbors = [_neighbor(n) for n in _list(item, "neighbors", 64)]  # per port (producers/port_neighbors.py)
    if neighbors:
        out["neighbors"] = neighbors
        if not switch and len({n["switch"] for n in neighbors}) == 1:
            out["switch"] = neighbors[0]["switch"]
    return out


def _neighbor(item: dict) -> dict[str, Any]:
    out: dict[str, Any] = {"port": _int(item, "port", required=True), "switch": _str(item, "switch", required=True)}
    for name in ("switch_port", "switch_id", "source"):
        value = item.get(name)
        if isinstance(value, int) and not isinstance(value, bool):
            out[name] = str(value)  # a switch port number written as a number
        elif value := _str(item, name, required=False):
            out[name] = value
    return out


def _parse_topology(o: dict) -> TopologyEvent:
    return TopologyEvent(
        node=_str(o, "node", required=True),
        ts=_num(o, "ts", required=True),
        gpus=tuple(_topology_gpu(item) for item in _list(o, "gpus", MAX_TOPOLOGY_ITEMS)),
        nics=tuple(_topology_nic(item) for item in _list(o, "nics", MAX_TOPOLOGY_ITEMS)),
        extra=_extra(o, _TOPOLOGY_FIELDS),
    )


# -- host signals (issue 17) -------------------------------------------------------------------
#
# One ``host`` event per agent sample (producers/procfs_host.py): PSI averages, the raw
# cumulative CPU jiffies, load, memory, OOM kills, per-disk and per-NIC counters.
# models/telemetry/host.py turns the counters into rates.

HOST_CPU_FIELDS = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")
HOST_DISK_FIELDS = ("reads", "read_ms", "writes", "write_ms", "io_ms")
HOST_NETDEV_FIELDS = ("rx_dropped", "tx_dropped", "rx_errors", "tx_errors")
MAX_HOST_DEVICES = 256
#: Per-op counters of an NFS mount (producers/procfs_host.py): WRITE and COMMIT's ops, transmissions, major
#: timeouts and the summed rtt and execute ms of completed ops.
HOST_MOUNT_FIELDS = tuple(f"{op}_{f}" for op in ("write", "commit") for f in ("ops", "trans", "timeouts", "rtt_ms",
                                                                          "exe_ms"))
MAX_HOST_MOUNTS = 64
_HOST_FIELDS = frozenset("v kind node ts psi cpu load1 mem_total mem_available swap_used oom_kills disks "
                         "netdevs mounts".split())


@dataclass(frozen=True, slots=True)
class HostEvent:
    node: str
    ts: float
    psi: dict[str, dict[str, float]] | None = None  # {"io": {"some_avg10": %, "full_avg10": %}, ...}
    cpu: dict[str, int] | None = None  # raw cumulative jiffies of /proc/stat's cpu line
    load1: float | None = None
    mem_total: int | None = None  # bytes
    mem_available: int | None = None
    swap_used: int | None = None
    oom_kills: int | None = None  # cumulative, /proc/vmstat oom_kill
    disks: tuple[dict[str, Any], ...] = ()  # {"device", "reads", "read_ms", "writes", "write_ms", "io_ms"}
    netdevs: tuple[dict[str, Any], ...] = ()  # {"name", "rx_dropped", "tx_dropped", "rx_errors", "tx_errors"}
    mounts: tuple[dict[str, Any], ...] = ()  # NFS: {"mount", "server", "fstype", "write_ops", ... HOST_MOUNT_FIELDS}
    extra: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)
    kind = "host"


def _uint(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 2**64:
        raise InvalidEvent(f"{what} must be a non-negative 64-bit integer")
    return value


def _host_psi(o: dict) -> dict[str, dict[str, float]] | None:
    value = o.get("psi")
    if value is None:
        return None
    if not isinstance(value, dict):
        raise InvalidEvent("'psi' must be an object")
    out: dict[str, dict[str, float]] = {}
    for resource in ("cpu", "io", "memory"):
        item = value.get(resource)
        if item is None:
            continue
        if not isinstance(item, dict):
            raise InvalidEvent(f"'psi.{resource}' must be an object")
        out[resource] = {}
        for name in ("some_avg10", "full_avg10"):
            number = _num(item, name, required=False)
            if number is not None:
                if number > 100:
                    raise InvalidEvent(f"'psi.{resource}.{name}' is a percentage")
                out[resource][name] = number
    return out or None


def _host_items(o: dict, name: str, key: str, fields: tuple[str, ...],
                limit: int = MAX_HOST_DEVICES) -> tuple[dict[str, Any], ...]:
    out = []
    for item in _list(o, name, limit):
        entry: dict[str, Any] = {key: _str(item, key, required=True)}
        for f in fields:
            if item.get(f) is not None:
                entry[f] = _uint(item[f], f"{name} '{f}'")
        out.append(entry)
    return tuple(out)


def _host_mounts(o: dict) -> tuple[dict[str, Any], ...]:
    out = _host_items(o, "mounts", "mount", HOST_MOUNT_FIELDS, MAX_HOST_MOUNTS)
    for entry, item in zip(out, o["mounts"] if out else ()):
        for name in ("server", "fstype"):
            value = _str(item, name, required=False)
            if value is not None:
                entry[name] = value
    return out


def _parse_host(o: dict) -> HostEvent:
    cpu = o.get("cpu")
    if cpu is not None:
        if not isinstance(cpu, dict):
            raise InvalidEvent("'cpu' must be an object of jiffies")
        cpu = {name: _uint(cpu[name], f"cpu '{name}'") for name in HOST_CPU_FIELDS if cpu.get(name) is not None}
    return HostEvent(
        node=_str(o, "node", required=True),
        ts=_num(o, "ts", required=True),
        psi=_host_psi(o),
        cpu=cpu or None,
        load1=_num(o, "load1", required=False),
        mem_total=_int(o, "mem_total", required=False),
        mem_available=_int(o, "mem_available", required=False),
        swap_used=_int(o, "swap_used", required=False),
        oom_kills=_int(o, "oom_kills", required=False),
        disks=_host_items(o, "disks", "device", HOST_DISK_FIELDS),
        netdevs=_host_items(o, "netdevs", "name", HOST_NETDEV_FIELDS),
        mounts=_host_mounts(o),
        extra=_extra(o, _HOST_FIELDS),
    )


_TELEMETRY_PARSERS = {"gpu": _parse_gpu, "xid": _parse_xid, "link": _parse_link, "topology": _parse_topology,
                      "host": _parse_host}
