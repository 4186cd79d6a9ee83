"""The switch at the other end of each local port, from a topology file (``stepwatch agent --topology FILE``).

sysfs says nothing about what a port is cabled to. Three documented sources do, and the
agent reads any of them from one file an SRE (or a cron job, or a sidecar) refreshes:

* **InfiniBand**: the text ``ibnetdiscover`` prints (rdma-core's infiniband-diags,
  ``ibnetdiscover > FILE``; ``man 8 ibnetdiscover``). One block per node; the lines read here,
  as rdma-core's ``out_switch``/``out_ca``/``out_ca_port`` print them::

      switchguid=0xb83fd2030080302a(b83fd2030080302a)
      Switch	64 "S-b83fd2030080302a"		# "leaf-01" enhanced port 0 lid 12 lmc 0
      [3]	"H-b83fd20300a1b2c0"[1](b83fd20300a1b2c0) 		# "n000 mlx5_0" lid 101 4xNDR

      caguid=0xb83fd20300a1b2c0
      Ca	1 "H-b83fd20300a1b2c0"		# "n000 mlx5_0"
      [1](b83fd20300a1b2c0) 	"S-b83fd2030080302a"[3]		# lid 101 lmc 0 "leaf-01" lid 12 4xNDR

  A local HCA is found by its node GUID (sysfs ``node_guid``), else by its NodeDescription
  (sysfs ``node_desc``; rdma-ndd sets it to ``"<hostname> <device>"`` by default). A switch is
  named by its NodeDescription (or the ``--node-name-map`` name ibnetdiscover printed).
* **RoCE / Ethernet**: the LLDP neighbours lldpd learnt, ``lldpctl -f json > FILE`` (or
  ``-f json0``; lldpd's ``tests/integration/test_lldpcli.py`` shows both shapes): per interface
  the neighbour's chassis (SysName, chassis id) and port id. A local port is found by its netdev.
* **A map written by hand** (JSON, or YAML when PyYAML is installed)::

      {"nodes": {"n000": {"mlx5_0": "leaf-01", "mlx5_1/1": {"switch": "leaf-01", "port": "17"}}}}

  ``<device>`` covers every port of the device, ``<device>/<port>`` one port; the value is the
  switch's name or ``{"switch", "port", "id"}``.

Reading is tolerant in what it skips (lines it does not know, other nodes, a back-to-back
cable with no switch) and strict in what it reports: a file that cannot be read or parsed is a
:class:`TopologyFileError` with the reason, which the agent reports once and carries on without
neighbours (never an exception out of the sampling loop).
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any

#: Larger files are refused (an ibnetdiscover dump of a 10,000-node fabric is a few MB).
MAX_FILE_BYTES = 64 * 1024 * 1024


class TopologyFileError(ValueError):
    """A topology file that cannot be used, with the reason."""


class Source(str, Enum):
    IBNETDISCOVER = "ibnetdiscover"
    LLDP = "lldp"
    MAP = "map"


@dataclass(frozen=True, slots=True)
class Neighbor:
    """The switch at the other end of one local port's cable."""

    switch: str  # its name: NodeDescription (InfiniBand), SysName (LLDP), or the map's
    switch_port: str | None = None  # its port: "3" (InfiniBand), "Ethernet1/17" (LLDP)
    switch_id: str | None = None  # its GUID (0x...) or LLDP chassis id
    source: Source = Source.MAP

    def to_dict(self, port: int) -> dict[str, Any]:
        out: dict[str, Any] = {"port": port, "switch": self.switch, "source": self.source.value}
        if self.switch_port is not None:
            out["switch_port"] = self.switch_port
        if self.switch_id is not None:
            out["switch_id"] = self.switch_id
        return out


@dataclass(frozen=True, slots=True)
class LocalPort:
    """What identifies one local port in a topology file (from sysfs)."""

    device: str
    port: int
    node_guid: str | None = None  # sysfs node_guid, "b83f:d203:00a1:b2c0"
    node_desc: str | None = None  # sysfs node_desc, "n000 mlx5_0"
    netdev: str | None = None


def _guid(text: str | None) -> str | None:
    """``0xB83FD2..`` / ``b83f:d203:..`` / ``b83fd2..`` -> 16 lower-case hex digits (None: not a GUID)."""
    if not text:
        return None
    digits = text.strip().lower().removeprefix("0x").replace(":", "")
    if not digits or len(digits) > 16 or any(c not in "0123456789abcdef" for c in digits):
        return None
    return digits.rjust(16, "0")


# -- ibnetdiscover ---------------------------------------------------------------------------------

# 'Switch	64 "S-b83fd2030080302a"		# "leaf-01" enhanced port 0 lid 12 lmc 0'; 'Ca	1 "H-..."		# "n000 mlx5_0"'
_NODE = re.compile(r'^(Switch|Ca|Rt)\s+\d+\s+"([SHR])-([0-9a-fA-F]+)"\s*#\s*"(.*?)"')
# '[1](b83f..) 	"S-b83f..."[3]		# lid 101 lmc 0 "leaf-01" lid 12 4xNDR' (a CA's port), or
# '[3]	"H-b83f..."[1](b83f..) 		# "n000 mlx5_0" lid 101 4xNDR' (a switch's); with -g, "[ext N]" after a port
_PORT = re.compile(r'^\[(\d+)\](?:\[ext \d+\])?(?:\(([0-9a-fA-F]+)\))?\s*"([SHR])-([0-9a-fA-F]+)"\[(\d+)\]'
                   r'(?:\[ext \d+\])?\s*(?:\(([0-9a-fA-F]+)\))?\s*#\s*(.*)$')
_QUOTED = re.compile(r'"(.*?)"')
_NODE_LINE = re.compile(r'^\s*(Switch|Ca|Rt)\s+\d+\s+"[SHR]-', re.MULTILINE)


@dataclass(slots=True)
class _IbFabric:
    switches: dict[str, str]  # switch GUID -> name
    ca_desc: dict[str, str]  # CA GUID -> NodeDescription
    by_desc: dict[str, str]  # NodeDescription -> CA GUID
    links: dict[tuple[str, int], tuple[str, int, str | None]]  # (CA GUID, port) -> (switch GUID, its port, name)


def parse_ibnetdiscover(text: str) -> _IbFabric:
    fab = _IbFabric({}, {}, {}, {})
    node: tuple[str, str] | None = None  # (type letter, GUID) of the block being read
    for raw in text.splitlines():
        line = raw.strip()
        if not line:
            continue
        m = _NODE.match(line)
        if m:
            kind, guid, desc = m.group(2), _guid(m.group(3)), m.group(4)
            node = (kind, guid)
            if kind == "S":
                fab.switches[guid] = desc
            elif kind == "H":
                fab.ca_desc[guid] = desc
                fab.by_desc.setdefault(desc, guid)
            continue
        m = _PORT.match(line)
        if not m or node is None:
            continue  # vendid=, devid=, comments, Chassis lines: nothing about cabling
        port, rkind, rguid, rport, comment = int(m.group(1)), m.group(3), _guid(m.group(4)), int(m.group(5)), m.group(7)
        names = _QUOTED.findall(comment)
        if node[0] == "H" and rkind == "S":
            fab.links[(node[1], port)] = (rguid, rport, names[0] if names else None)
        elif node[0] == "S" and rkind == "H":
            # the same cable seen from the switch: kept unless the CA's own block says it
            fab.links.setdefault((rguid, rport), (node[1], port, None))
            if names:  # the CA's NodeDescription, for a dump without its own block
                fab.ca_desc.setdefault(rguid, names[0])
                fab.by_desc.setdefault(names[0], rguid)
    if not fab.switches and not fab.ca_desc:
        raise TopologyFileError("no Switch or Ca lines: not the output of ibnetdiscover")
    return fab


def _ib_neighbors(fab: _IbFabric, node: str, ports: list[LocalPort]) -> dict[tuple[str, int], Neighbor]:
    out = {}
    short = node.split(".", 1)[0]
    for p in ports:
        guid = _guid(p.node_guid)
        if guid not in fab.ca_desc:
            guid = None
            for desc in (p.node_desc, f"{node} {p.device}", f"{short} {p.device}"):
                if desc and desc in fab.by_desc:
                    guid = fab.by_desc[desc]
                    break
        link = fab.links.get((guid, p.port)) if guid else None
        if link is None:
            continue
        sw_guid, sw_port, name = link
        out[(p.device, p.port)] = Neighbor(switch=fab.switches.get(sw_guid) or name or f"0x{sw_guid}",
                                           switch_port=str(sw_port), switch_id=f"0x{sw_guid}",
                                           source=Source.IBNETDISCOVER)
    return out


# -- lldpctl -f json / json0 -----------------------------------------------------------------------


def _value(obj: Any) -> str | None:
    """A scalar of lldpctl's json (``"x"``, ``{"value": "x"}``) or json0 (``[{"value": "x"}]``)."""
    if isinstance(obj, list):
        obj = obj[0] if obj else None
    if isinstance(obj, dict):
        obj = obj.get("value")
    return str(obj) if isinstance(obj, (str, int)) and str(obj) else None


def _one(obj: Any) -> Any:
    return obj[0] if isinstance(obj, list) and obj else obj


def parse_lldp(doc: Any) -> dict[str, Neighbor]:
    """``lldpctl -f json`` (or ``json0``) -> local interface name -> its neighbour."""
    lldp = doc.get("lldp") if isinstance(doc, dict) else None
    interfaces: list[tuple[str, dict]] = []
    for block in (lldp if isinstance(lldp, list) else [lldp]):  # json0: a list of one object
        if not isinstance(block, dict):
            continue
        found = block.get("interface")
        if isinstance(found, dict):  # json, one interface or several keyed by name
            interfaces.extend((k, v) for k, v in found.items() if isinstance(v, dict))
        elif isinstance(found, list):  # json with several interfaces ([{name: {...}}]) or json0 ([{"name": ...}])
            for item in found:
                if isinstance(item, dict) and "name" in item and isinstance(item.get("chassis"), list):
                    interfaces.append((str(item["name"]), item))
                elif isinstance(item, dict):
                    interfaces.extend((k, v) for k, v in item.items() if isinstance(v, dict))
    out: dict[str, Neighbor] = {}
    for ifname, data in interfaces:
        chassis = _one(data.get("chassis"))
        if not isinstance(chassis, dict):
            continue
        if "id" in chassis or "name" in chassis:  # json0, or json for a neighbour that sent no SysName
            name, info = _value(chassis.get("name")), chassis
        else:  # json: {"<SysName>": {"id": ..., "descr": ...}}
            name, info = next(((k, v) for k, v in chassis.items() if isinstance(v, dict)), (None, {}))
        chassis_id = _value(_one(info.get("id")))
        port = _one(data.get("port"))
        port_id = None
        if isinstance(port, dict):
            ident = _one(port.get("id"))
            port_id = _value(ident) if isinstance(ident, dict) and ident.get("type") in ("ifname", "local", None) \
                else _value(port.get("descr")) or _value(ident)
        if name or chassis_id:
            out[ifname] = Neighbor(switch=name or chassis_id, switch_port=port_id, switch_id=chassis_id,
                                   source=Source.LLDP)
    if not interfaces:
        raise TopologyFileError("no lldp.interface entries: not the output of lldpctl -f json")
    return out


# -- a map written by hand -------------------------------------------------------------------------


def parse_map(doc: Any) -> dict[str, dict[str, Neighbor]]:
    """``{"nodes": {node: {"<device>[/<port>]": switch | {"switch", "port", "id"}}}}`` -> node -> key -> neighbour."""
    nodes = doc.get("nodes") if isinstance(doc, dict) else None
    if not isinstance(nodes, dict):
        raise TopologyFileError("a topology map needs a 'nodes' object: node -> device[/port] -> switch")
    out: dict[str, dict[str, Neighbor]] = {}
    for node, ports in nodes.items():
        if not isinstance(ports, dict):
            raise TopologyFileError(f"nodes.{node}: expected device[/port] -> switch")
        entries = out[str(node)] = {}
        for key, value in ports.items():
            if isinstance(value, str) and value:
                entries[str(key)] = Neighbor(switch=value)
            elif isinstance(value, dict) and isinstance(value.get("switch"), str) and value["switch"]:
                port, ident = value.get("port"), value.get("id")
                entries[str(key)] = Neighbor(switch=value["switch"], switch_port=None if port is None else str(port),
                                             switch_id=None if ident is None else str(ident))
            else:
                raise TopologyFileError(f"nodes.{node}.{key}: expected a switch name or {{switch, port, id}}")
    return out


# -- the file ----------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Topology:
    """A parsed topology file: which switch each port of a node is cabled to."""

    source: Source
    parsed: Any

    def neighbors(self, node: str, ports: list[LocalPort]) -> dict[tuple[str, int], Neighbor]:
        """``(device, port) -> neighbour`` for the ports of ``node`` the file names."""
        if self.source is Source.IBNETDISCOVER:
            return _ib_neighbors(self.parsed, node, ports)
        if self.source is Source.LLDP:
            return {(p.device, p.port): self.parsed[p.netdev] for p in ports if p.netdev in self.parsed}
        entries = self.parsed.get(node) or self.parsed.get(node.split(".", 1)[0]) or {}
        out = {}
        for p in ports:
            n = entries.get(f"{p.device}/{p.port}") or entries.get(p.device)
            if n is not None:
                out[(p.device, p.port)] = n
        return out


def parse_topology(text: str) -> Topology:
    """Whichever of the three formats ``text`` is (see the module doc); :class:`TopologyFileError` if none."""
    source, parsed = _parse(text)
    return Topology(source, parsed)


class TopologyFile:
    """One topology file, parsed on first use and again whenever its modification time or size changes."""

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path)
        self.error: str | None = None  # why the last read failed (None: it did not)
        self.topology: Topology | None = None
        self._stamp: tuple[int, int] | None = None

    @property
    def source(self) -> Source | None:
        return self.topology.source if self.topology is not None else None

    def load(self) -> bool:
        """(Re)read the file if it changed; False (and ``error`` says why) when it cannot be used."""
        try:
            st = self.path.stat()
        except OSError as exc:
            self.error, self.topology, self._stamp = f"cannot read {self.path}: {exc.strerror or exc}", None, None
            return False
        stamp = (st.st_mtime_ns, st.st_size)
        if stamp == self._stamp:
            return self.topology is not None
        self._stamp = stamp
        try:
            if st.st_size > MAX_FILE_BYTES:
                raise TopologyFileError(f"larger than {MAX_FILE_BYTES} bytes")
            self.topology = parse_topology(self.path.read_text(errors="replace"))
            self.error = None
        except (OSError, TopologyFileError) as exc:
            self.error, self.topology = f"{self.path}: {exc}", None
        return self.topology is not None

    def neighbors(self, node: str, ports: list[LocalPort]) -> dict[tuple[str, int], Neighbor]:
        """``(device, port) -> neighbour`` for the ports the file names (re-reading it if it changed)."""
        return self.topology.neighbors(node, ports) if self.load() else {}


def _parse(text: str) -> tuple[Source, Any]:
    stripped = text.lstrip()
    if stripped.startswith(("{", "[")):
        try:
            doc = json.loads(stripped)
        except ValueError as exc:
            raise TopologyFileError(f"not valid JSON: {exc}") from None
        if isinstance(doc, dict) and "lldp" in doc:
            return Source.LLDP, parse_lldp(doc)
        return Source.MAP, parse_map(doc)
    if _NODE_LINE.search(text):
        return Source.IBNETDISCOVER, parse_ibnetdiscover(text)
    try:
        import yaml
    except ImportError:
        raise TopologyFileError("neither ibnetdiscover output nor JSON (YAML maps need PyYAML)") from None
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise TopologyFileError(f"neither ibnetdiscover output, JSON nor YAML: {exc}") from None
    if not isinstance(doc, dict):
        raise TopologyFileError("neither ibnetdiscover output (no Switch or Ca lines), lldpctl JSON nor a map")
    return Source.MAP, parse_map(doc)


def nic_entries(neighbors: dict[tuple[str, int], Neighbor], device: str, ports: list[int]) -> dict[str, Any]:
    """The fields a ``topology`` event's NIC gets: ``neighbors`` per port, ``switch`` when its ports share one."""
    found = [neighbors[(device, p)].to_dict(p) for p in ports if (device, p) in neighbors]
    if not found:
        return {}
    out: dict[str, Any] = {"neighbors": found}
    switches = {n["switch"] for n in found}
    if len(switches) == 1:
        out["switch"] = found[0]["switch"]
    return out
