"""InfiniBand/RoCE port counters and GPU<->NIC topology from sysfs, as the kernel lays them out.

``/sys/class/infiniband/<dev>`` links to the HCA's directory under its PCI device
(``/sys/devices/pci0000:xx/.../0000:1a:00.0/infiniband/mlx5_0``); ``<dev>/device`` links to
that PCI device. Per port, ``ports/<n>/`` holds ``state`` (``4: ACTIVE``), ``phys_state``
(``5: LinkUp``), ``rate`` (``400 Gb/sec (4X NDR)``), ``link_layer`` (``InfiniBand`` or
``Ethernet``), ``counters/`` (the PMA counters: ``port_xmit_data`` in 4-byte words,
``symbol_error``, ...) and ``hw_counters/`` (driver counters: ``out_of_sequence``,
``np_cnp_sent``, ...). Reading is tolerant: a file that cannot be read (EINVAL on some RoCE
ports, permissions) or holds ``N/A`` is left out, never an error.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

_RATE = re.compile(r"^\s*([0-9.]+)\s*Gb/sec")


@dataclass(slots=True)
class PortSample:
    device: str
    port: int
    state: str | None = None
    phys_state: str | None = None
    rate: float | None = None
    link_layer: str | None = None
    netdev: str | None = None
    counters: dict[str, int] = field(default_factory=dict)
    unreadable: int = 0  # counter files that could not be read or held no number

    def to_event(self, node: str, ts: float) -> dict:
        event = {"v": 1, "kind": "link", "node": node, "ts": round(ts, 6), "device": self.device, "port": self.port,
                 "counters": self.counters}
        for name in ("state", "phys_state", "rate", "link_layer", "netdev"):
            value = getattr(self, name)
            if value is not None:
                event[name] = value
        return event


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except (OSError, UnicodeDecodeError):
        return None


def _state(text: str | None) -> str | None:
    # "4: ACTIVE" -> "ACTIVE"; "5: LinkUp" -> "LinkUp"
    if not text:
        return None
    return text.split(":", 1)[-1].strip() or None


def parse_rate(text: str | None) -> float | None:
    """``"400 Gb/sec (4X NDR)"`` -> 400.0."""
    match = _RATE.match(text or "")
    return float(match.group(1)) if match else None


def _counter_dir(path: Path, out: dict[str, int]) -> int:
    unreadable = 0
    try:
        entries = sorted(os.scandir(path), key=lambda e: e.name)
    except OSError:
        return 0
    for entry in entries:
        if not entry.is_file():
            continue
        text = _read(Path(entry.path))
        try:
            value = int(text) if text is not None else None
        except ValueError:
            value = None  # "N/A" and the like
        if value is None or value < 0 or value >= 2**64:
            unreadable += 1
            continue
        out[entry.name] = value
    return unreadable


class IbReader:
    """Reads every port of every RDMA device under ``<sysfs_root>/class/infiniband``."""

    def __init__(self, sysfs_root: str | os.PathLike = "/sys") -> None:
        self.root = Path(sysfs_root)
        self.class_dir = self.root / "class" / "infiniband"

    def devices(self) -> list[str]:
        try:
            return sorted(p.name for p in self.class_dir.iterdir())
        except OSError:
            return []

    def ports(self, device: str) -> list[int]:
        try:
            return sorted(int(p.name) for p in (self.class_dir / device / "ports").iterdir() if p.name.isdigit())
        except OSError:
            return []

    def netdev(self, device: str, port: int) -> str | None:
        # <dev>/device/net/<ifname>/dev_port is port - 1 (RoCE and IPoIB).
        net = self.class_dir / device / "device" / "net"
        try:
            names = sorted(p.name for p in net.iterdir())
        except OSError:
            return None
        for name in names:
            dev_port = _read(net / name / "dev_port")
            if dev_port is None or dev_port.isdigit() and int(dev_port) == port - 1:
                return name
        return names[0] if names else None

    def read_port(self, device: str, port: int) -> PortSample:
        base = self.class_dir / device / "ports" / str(port)
        sample = PortSample(device=device, port=port, state=_state(_read(base / "state")),
                            phys_state=_state(_read(base / "phys_state")), rate=parse_rate(_read(base / "rate")),
                            link_layer=_read(base / "link_layer") or None, netdev=self.netdev(device, port))
        sample.unreadable += _counter_dir(base / "counters", sample.counters)
        sample.unreadable += _counter_dir(base / "hw_counters", sample.counters)
        return sample

    def read_all(self) -> list[PortSample]:
        return [self.read_port(dev, port) for dev in self.devices() for port in self.ports(dev)]

    def node_guid(self, device: str) -> str | None:
        """The HCA's node GUID as sysfs writes it (``b83f:d203:00a1:b2c0``)."""
        return _read(self.class_dir / device / "node_guid") or None

    def node_desc(self, device: str) -> str | None:
        """The HCA's NodeDescription (rdma-ndd's default: ``"<hostname> <device>"``), what ibnetdiscover prints."""
        return _read(self.class_dir / device / "node_desc") or None

    # -- topology -----------------------------------------------------------------------------

    def pci_address(self, device: str) -> str | None:
        """PCI address of an RDMA device (``0000:1a:00.0``), from its ``device`` link."""
        try:
            return os.path.basename(os.path.realpath(self.class_dir / device / "device"))
        except OSError:
            return None

    def pci_path(self, address: str) -> list[str] | None:
        """The PCI hierarchy above a device: root complex, bridges, the device (from sysfs)."""
        link = self.root / "bus" / "pci" / "devices" / normalize_bus_id(address)
        if not link.exists():
            return None
        real = Path(os.path.realpath(link))
        parts = real.parts
        for i, part in enumerate(parts):
            if part.startswith("pci") and ":" in part:
                return list(parts[i:])
        return list(parts)

    def topology(self, gpus: dict[int, str]) -> tuple[list[dict], list[dict]]:
        """GPU -> nearest NICs by PCIe distance, for ``gpus`` (index -> PCI bus id from NVML)."""
        nics = []
        nic_paths: dict[str, list[str]] = {}
        for dev in self.devices():
            address = self.pci_address(dev)
            entry = {"device": dev, "ports": self.ports(dev) or [1]}
            if address:
                entry["pci_bus_id"] = address
                path = self.pci_path(address)
                if path:
                    nic_paths[dev] = path
            nics.append(entry)
        out_gpus = []
        for index, bus in sorted(gpus.items()):
            entry = {"gpu": index, "pci_bus_id": bus, "nics": []}
            path = self.pci_path(bus) if bus else None
            if path and nic_paths:
                distance = {dev: _distance(path, p) for dev, p in nic_paths.items()}
                best = min(distance.values())
                entry["nics"] = sorted(d for d, v in distance.items() if v == best)
            out_gpus.append(entry)
        return out_gpus, nics


def normalize_bus_id(bus: str) -> str:
    """NVML's ``00000000:18:00.0`` -> sysfs's ``0000:18:00.0`` (lower case)."""
    bus = bus.strip().lower()
    domain, sep, rest = bus.partition(":")
    if sep and len(domain) > 4:
        domain = domain[-4:]
    return f"{domain}{sep}{rest}"


def _distance(a: list[str], b: list[str]) -> int:
    """Hops between two PCI devices through their nearest common bridge (another root complex: far)."""
    common = 0
    for x, y in zip(a, b):
        if x != y:
            break
        common += 1
    if common == 0:
        return 1000 + len(a) + len(b)  # across the CPU interconnect (nvidia-smi topo: SYS)
    return len(a) + len(b) - 2 * common
