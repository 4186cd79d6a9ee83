"""Node telemetry per node, GPU and port: counter rates, spikes, GPU and link alerts.

The node agent (producers/agent.py) sends the raw cumulative counters of every GPU and
InfiniBand/RoCE port of a node (docs/events.md, "Node telemetry"). Here, per node, per GPU
and per port:

* cumulative counters become deltas and rates (models/telemetry/counters.py, ``counter_delta``): a
  counter that goes backwards from the top of a 32- or 64-bit range wrapped around; any other
  decrease is a reset (driver reload, ``perfquery -R``) and only restarts the counter's history;
* each rate keeps its own recent baseline (``Baseline``, bounded);
* a **spike** is flagged on any increase of an error counter, on a rate far outside its
  baseline (transmit wait, CNPs, a bandwidth collapse), on a link that goes down or comes
  back at a lower rate, and on GPU faults (Xid, ECC, throttling with a clock drop, PCIe
  downgrade, NVLink down or erroring). Spikes close to each other on the same component and
  signal are one episode (:class:`SpikeEpisode`), with the time it began;
* node alerts: ``gpu_fault`` (critical Xid codes, ECC double-bit errors, thermal or power
  throttling with a clock drop, PCIe downgrade, NVLink down) and ``link_errors`` (a port with
  errors in several of its recent samples, or down), firing and resolved. ``link_errors`` is one
  alert per **node**, whichever of its ports err (``evidence.ports`` lists them): a node whose
  every port errs is one problem, not one page per port. Many nodes erring together are one
  ``fabric`` incident instead (models/telemetry/incidents.py reads :meth:`TelemetryTracker.link_trouble`).

The spike episodes are what the correlator (models/telemetry/telemetry_correlator.py) ranks as suspected causes.
"""

from __future__ import annotations

import math
from collections import Counter, OrderedDict, deque
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from ..alerts import Alert, alert_id
from .counters import Baseline, BitRing, CounterLayout, CounterLayouts, CounterTrack, span, sustained
from .link_evidence import LinkErrorsEvidence, PortErrors
from ..wire.telemetry_columns import LinkRow
from ..wire.telemetry_events import GpuEvent, LinkEvent, TopologyEvent, XidEvent

#: Error counters of a port (sysfs counters/ and hw_counters/): any increase is a spike.
#: name -> (weight, label). The weight ranks causes against each other.
ERROR_COUNTERS: dict[str, tuple[float, str]] = {
    "symbol_error": (6.0, "symbol errors"),
    "link_error_recovery": (6.0, "link error recoveries"),
    "link_downed": (8.0, "link down events"),
    "local_link_integrity_errors": (6.0, "link integrity errors"),
    "port_rcv_errors": (5.0, "receive errors"),
    "excessive_buffer_overrun_errors": (5.0, "buffer overruns"),
    "port_rcv_remote_physical_errors": (4.0, "remote physical errors"),
    "port_xmit_discards": (4.0, "transmit discards"),
    "port_rcv_switch_relay_errors": (3.0, "switch relay errors"),
    "port_xmit_constraint_errors": (3.0, "transmit constraint errors"),
    "port_rcv_constraint_errors": (3.0, "receive constraint errors"),
    "VL15_dropped": (2.0, "VL15 drops"),
    "local_ack_timeout_err": (5.0, "ACK timeouts"),
    "out_of_sequence": (3.0, "out-of-sequence packets"),
    "packet_seq_err": (3.0, "packet sequence errors"),
    "rnr_nak_retry_err": (2.0, "RNR NAK retries exceeded"),
    "implied_nak_seq_err": (2.0, "implied NAK sequence errors"),
    "req_cqe_error": (3.0, "requester CQE errors"),
    "resp_cqe_error": (3.0, "responder CQE errors"),
    "duplicate_request": (2.0, "duplicate requests"),
}
#: Rate counters judged against their own baseline: name -> (floor per second, weight, label).
#: A rate below its floor is never a spike (an idle port's 3 CNPs/s against a baseline of 0).
RATE_COUNTERS: dict[str, tuple[float, float, str]] = {
    "port_xmit_wait": (1000.0, 4.0, "transmit wait"),
    "np_cnp_sent": (100.0, 3.0, "CNPs sent (congestion)"),
    "rp_cnp_handled": (100.0, 3.0, "CNPs handled (congestion)"),
    "np_ecn_marked_roce_packets": (100.0, 3.0, "ECN-marked packets (congestion)"),
}
#: Port data counters count 4-byte words (InfiniBand PMA convention, also in sysfs).
DATA_COUNTERS = ("port_xmit_data", "port_rcv_data")
#: A bandwidth collapse needs a busy baseline: the link usually (its 10th percentile) carries this many bytes/s.
BANDWIDTH_FLOOR = 1e8
#: A port sample this many times the port's usual interval after the one before follows a collector gap.
GAP_FACTOR = 3.0
#: Below this share of what a link usually falls to, with no transmit wait, the link is idle (nothing to send).
IDLE_SHARE = 0.02
#: Per-node bounds (one producer cannot grow a node without limit; issue 27 finding 5): GPUs and
#: link ports tracked per node; a sample of one more is left out and counted (``capped``).
MAX_GPUS_PER_NODE = 64
MAX_PORTS_PER_NODE = 256
#: ... and across all nodes, so the per-node bounds cannot multiply (200 forged nodes x 256 ports took 1.84 GB;
#: issue 44): a worker speaks for ~4,000 nodes of 8 GPUs and 4 ports each before these bind.
MAX_GPUS_TOTAL = 32_768
MAX_PORTS_TOTAL = 16_384

THROTTLE_THERMAL = 0x8 | 0x20 | 0x40  # HW slowdown, SW thermal, HW thermal
THROTTLE_POWER = 0x4 | 0x80  # SW power cap, HW power brake
THROTTLE_NAMES = {0x4: "SW power cap", 0x8: "HW slowdown", 0x20: "SW thermal slowdown",
                  0x40: "HW thermal slowdown", 0x80: "HW power brake"}
XID_NAMES = {
    13: "graphics engine exception (application)", 31: "GPU memory page fault (application)",
    43: "GPU stopped processing (application)", 45: "preemptive cleanup (application)",
    48: "double-bit ECC error", 61: "internal micro-controller breakpoint", 62: "internal micro-controller halt",
    63: "ECC page retirement or row remapping", 64: "ECC page retirement or row remapping failure",
    68: "video processor exception (application)", 74: "NVLink error", 79: "GPU has fallen off the bus",
    92: "high single-bit ECC error rate", 94: "contained ECC error", 95: "uncontained ECC error",
    109: "context switch timeout", 119: "GSP RPC timeout", 120: "GSP error",
}
#: Weights of GPU-side signals.
GPU_WEIGHTS = {"xid": 10.0, "ecc_dbe": 9.0, "nvlink_down": 8.0, "throttle": 7.0, "pcie_downgrade": 5.0,
               "nvlink_errors": 4.0, "ecc_sbe": 1.0, "app_xid": 2.0, "clock_below_peers": 6.0}
#: A busy GPU's SM clock is "below its peers" under this fraction of the median of its node's other busy GPUs'
#: latest clocks (at least ``MIN_CLOCK_PEERS`` of them, sampled within ``CLOCK_PEER_AGE`` seconds of it): a slow
#: thermal drift throttles a GPU a few percent at a time, and its own baseline drifts down with it.
CLOCK_PEER_RATIO = 0.97
MIN_CLOCK_PEERS = 2
CLOCK_PEER_AGE = 120.0
LINK_WEIGHTS = {"link_down": 9.0, "rate_down": 6.0, "bandwidth": 2.0}
#: Seconds without a new flag after which a spike episode is over (the next flag starts a new one).
EPISODE_GAP = 10.0


@dataclass(slots=True)
class SpikeEpisode:
    """One spike of one signal on one component, from ``began`` to ``last``."""

    node: str
    component: str  # "mlx5_2/1", "gpu3", "gpu3/nvlink5"
    category: str  # network | compute | application
    signal: str
    label: str
    weight: float
    began: float
    last: float
    gpu: int | None = None
    device: str | None = None
    port: int | None = None
    count: int = 0  # summed increases of an error counter, or flagged samples
    samples: int = 0
    peak: float = 0.0  # largest rate / ratio seen
    detail: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        out = {"signal": self.signal, "what": self.label, "began_at": round(self.began, 3),
               "last_at": round(self.last, 3), "samples": self.samples}
        if self.count:
            out["count"] = self.count
        if self.peak:
            out["peak"] = round(self.peak, 3)
        out.update(self.detail)
        return out


class _PortState:
    __slots__ = ("counters", "baselines", "bw", "bw_baseline", "bw_dt", "max_rate", "state", "err_ring", "clean",
                 "firing", "err_first", "err_totals", "down_samples", "last_wait_rate", "layout", "err_values",
                 "quiet_ts")

    def __init__(self, size: int, min_samples: int, window: int) -> None:
        self.counters: dict[str, CounterTrack] = {}
        self.baselines: dict[str, Baseline] = {}
        self.bw = CounterTrack()
        self.bw_baseline = Baseline(size, min_samples)
        self.last_wait_rate: float | None = None  # port_xmit_wait per second in the latest sample
        self.bw_dt = Baseline(16, 3)  # the port's usual interval between two samples (a collector gap is far longer)
        self.max_rate = 0.0
        self.state: str | None = None
        self.err_ring = BitRing(window)
        self.clean = 0
        self.firing = False  # sustained errors (or down): the node's link_errors alert covers this port
        self.err_first: float | None = None
        self.err_totals: dict[str, int] = {}
        self.down_samples = 0
        #: The counters of the port's sample before (``CounterLayouts``; None until its second sample) and its error
        #: counters' values then: a quiet sample is checked against these in two C calls. ``quiet_ts``: the time of
        #: that sample, each of those error counters' time (their tracks' ``ts`` are caught up before they are read).
        self.layout: CounterLayout | None = None
        self.err_values: Any = None
        self.quiet_ts = 0.0


def _period(port: _PortState) -> float:
    """The port's usual seconds between two samples from its first two on (its bandwidth's intervals; NaN: none,
    a port without data counters), capped at a minute: a collector gap never stretches what it decides."""
    return min(port.bw_dt.median(), 60.0) if port.bw_dt.values else math.nan


#: The empty fault map GPUs share until their first fault (read-only: a write to it raises, never leaks).
_NONE: Any = MappingProxyType({})


class _GpuState:
    __slots__ = ("ecc", "clock", "throttle_run", "throttle_since", "pcie_run", "nvlink_up", "nvlink_counters", "faults", "clean",
                 "fault_last", "busy_clock", "busy_at", "temp", "fault_count", "fault_shown")

    def __init__(self, size: int, min_samples: int) -> None:
        # None until first needed: 30,000 forged GPUs each heard from once held ~2 KiB apiece (issue 44).
        self.ecc: dict[str, CounterTrack] | None = None
        self.clock = Baseline(size, min_samples)
        self.throttle_run = 0
        self.throttle_since: float | None = None  # GPU clock of the throttled run's first sample
        self.pcie_run = 0
        self.nvlink_up: dict[int, bool] | None = None
        self.nvlink_counters: dict[tuple[int, str], CounterTrack] | None = None
        # The fault maps are one shared read-only empty map until the GPU's first fault (``own_faults``).
        self.faults: dict[str, Alert] = _NONE  # open gpu_fault alerts by fault key
        self.clean: dict[str, int] = _NONE
        self.fault_last: dict[str, float] = _NONE  # event-based faults: last occurrence
        self.busy_clock: float | None = None  # latest SM clock while busy (its peers' reference), node time of it
        self.busy_at = -math.inf
        self.temp: float | None = None
        self.fault_count: dict[str, int] = _NONE  # event-based faults: occurrences (agents' coalesced ``count``s)
        #: (when, count) the open alert was last published, and the updates held back since it opened.
        self.fault_shown: dict[str, tuple[float, int, int]] = _NONE

    def own_faults(self) -> None:
        """Give the GPU its own fault maps (before the first write: the shared one refuses writes)."""
        if self.faults is _NONE:
            self.faults, self.clean, self.fault_last, self.fault_count, self.fault_shown = {}, {}, {}, {}, {}

    def forget_faults(self) -> None:
        self.faults = self.clean = self.fault_last = self.fault_count = self.fault_shown = _NONE


#: What a node without spikes holds (a deque with a bound of 0: nothing is ever appended to it).
_NO_SPIKES: deque = deque(maxlen=0)


class _NodeState:
    __slots__ = ("gpus", "ports", "spikes", "open", "gpu_nics", "nic_ports", "nic_switch", "switch_ports", "last_ts",
                 "link_alert", "link_bad_at", "link_kinds", "link_bad_seen")

    def __init__(self, max_spikes: int) -> None:
        self.gpus: dict[int, _GpuState] = {}
        self.ports: dict[tuple[str, int], _PortState] = {}
        self.spikes: deque[SpikeEpisode] = _NO_SPIKES  # a node's own deque from its first spike on
        self.open: dict[tuple[str, str], SpikeEpisode] = {}
        self.gpu_nics: dict[int, tuple[str, ...]] = {}
        self.nic_ports: dict[str, tuple[int, ...]] = {}
        self.nic_switch: dict[str, str] = {}  # NIC -> the switch at the other end of its cable (topology)
        self.switch_ports: dict[str, str] = {}  # NIC -> the switch's port its cable ends in, where topology says
        self.last_ts = 0.0
        self.link_alert: Alert | None = None  # the node's one link_errors alert
        self.link_bad_at: float | None = None  # node time of the latest port sample with errors (or down)
        self.link_kinds: dict[str, float] = {}  # error counter (or "link_down") -> node time it last moved
        self.link_bad_seen: float | None = None  # the worker's clock (ticks) when that latest bad sample came


class TelemetryTracker:
    """Per node, GPU and port: rates, baselines, spikes and node alerts; feed events in time order per node."""

    def __init__(self, *, baseline_samples: int = 120, baseline_min_samples: int = 10, rate_factor: float = 4.0,
                 bandwidth_collapse_ratio: float = 0.3, clock_drop_ratio: float = 0.85,
                 throttle_min_samples: int = 3, link_error_window: int = 10, link_error_min_samples: int = 3,
                 clear_after: int = 30, fault_hold_seconds: float = 300.0,
                 app_xids: frozenset[int] = frozenset({13, 31, 43, 45, 68}), max_spikes_per_node: int = 512,
                 max_nodes: int = 100_000) -> None:
        if not 1 <= link_error_min_samples <= link_error_window:
            raise ValueError("need 1 <= link_error_min_samples <= link_error_window")
        self.baseline_samples = baseline_samples
        self.baseline_min_samples = baseline_min_samples
        self.rate_factor = rate_factor
        self.bandwidth_collapse_ratio = bandwidth_collapse_ratio
        self.clock_drop_ratio = clock_drop_ratio
        self.throttle_min_samples = throttle_min_samples
        self.link_error_window = link_error_window
        self.link_error_min_samples = link_error_min_samples
        self.clear_after = clear_after
        self.fault_hold_seconds = fault_hold_seconds
        self.app_xids = frozenset(app_xids)
        self.max_spikes_per_node = max_spikes_per_node
        self.max_nodes = max_nodes
        #: Least recently reporting first (an LRU: a new node at the cap costs O(1)).
        self._nodes: OrderedDict[str, _NodeState] = OrderedDict()
        #: Input left out at a cap, by what: ``gpus_per_node``, ``ports_per_node``, ``nodes`` (evicted).
        self.capped: Counter[str] = Counter()
        self.events_seen = 0
        self._gpus_total = 0  # GPUs and ports tracked across all nodes (``MAX_GPUS_TOTAL``, ``MAX_PORTS_TOTAL``)
        self._ports_total = 0
        #: Re-publications of an open Xid fault (a new ``count``) held back: at most one every
        #: ``REPUBLISH_SECONDS`` per fault, the storm's counts summed into the next.
        self.updates_held = 0
        self._layouts = CounterLayouts(ERROR_COUNTERS, RATE_COUNTERS)
        #: The worker's clock as of the latest ``tick`` (None: no tick yet): when a node's bad port sample came, on
        #: one clock for every node (their own clocks may be tens of seconds apart).
        self.clock: float | None = None
        #: Nodes with something for ``tick`` to age (an event fault or an open spike episode): a tick visits only
        #: them, so a fleet without faults costs a tick nothing (replay ticks through silences, as live).
        self._ticking: set[str] = set()

    # -- state ----------------------------------------------------------------------------

    def _node(self, name: str) -> _NodeState:
        node = self._nodes.get(name)
        if node is None:
            if len(self._nodes) >= self.max_nodes:  # memory bound: forget the node silent the longest
                _, gone = self._nodes.popitem(last=False)
                self._gpus_total -= len(gone.gpus)
                self._ports_total -= len(gone.ports)
                self.capped["nodes"] += 1
            node = self._nodes[name] = _NodeState(self.max_spikes_per_node)
        else:
            self._nodes.move_to_end(name)
        return node

    @property
    def nodes(self) -> tuple[str, ...]:
        return tuple(self._nodes)

    def firing(self) -> list[Alert]:
        out = []
        for node in self._nodes.values():
            if node.link_alert is not None:
                out.append(node.link_alert)
            for gpu in node.gpus.values():
                out.extend(gpu.faults.values())
        return out

    def close(self, at: float, reason: str) -> list[Alert]:
        """Resolve every firing alert at ``at`` (``reason`` in the summary) and forget the episodes behind them:
        a port or GPU fault fires again only once it is seen anew."""
        out = [a.resolved(at=at, summary=f"resolved ({reason}): {a.summary}") for a in self.firing()]
        for node in self._nodes.values():
            node.link_alert = None
            for port in node.ports.values():
                port.firing, port.err_first, port.err_totals = False, None, {}
                port.err_ring.clear()
            for gpu in node.gpus.values():
                gpu.forget_faults()
        return out

    def nearest_ports(self, node: str, gpu: int) -> tuple[tuple[str, int], ...] | None:
        """The ports of the NICs nearest to ``gpu`` (None when the node's topology is unknown)."""
        state = self._nodes.get(node)
        if state is None or gpu not in state.gpu_nics:
            return None
        return tuple((dev, p) for dev in state.gpu_nics[gpu] for p in state.nic_ports.get(dev, (1,)))

    def spikes(self, node: str, since: float, until: float) -> list[SpikeEpisode]:
        """Spike episodes of ``node`` that overlap ``[since, until]``."""
        state = self._nodes.get(node)
        if state is None:
            return []
        return [s for s in state.spikes if s.last >= since and s.began <= until]

    # -- input ----------------------------------------------------------------------------

    def update(self, event) -> list[Alert]:
        """Feed one telemetry event; return the node alerts it fired or resolved."""
        self.events_seen += 1
        node = self._node(event.node)
        if type(event) is LinkEvent and (event.device, event.port) in node.ports:  # the usual sample: no new port
            if event.ts > node.last_ts:
                node.last_ts = event.ts
            return self._on_link(node, event)
        if isinstance(event, (GpuEvent, XidEvent)) and event.gpu not in node.gpus:
            if len(node.gpus) >= MAX_GPUS_PER_NODE or self._gpus_total >= MAX_GPUS_TOTAL:
                self.capped["gpus_per_node" if len(node.gpus) >= MAX_GPUS_PER_NODE else "gpus_total"] += 1
                return []
        if isinstance(event, LinkEvent) and (event.device, event.port) not in node.ports:
            if len(node.ports) >= MAX_PORTS_PER_NODE or self._ports_total >= MAX_PORTS_TOTAL:
                self.capped["ports_per_node" if len(node.ports) >= MAX_PORTS_PER_NODE else "ports_total"] += 1
                return []
        gpus, ports = len(node.gpus), len(node.ports)
        out = self._feed(node, event)
        self._gpus_total += len(node.gpus) - gpus
        self._ports_total += len(node.ports) - ports
        return out

    def update_links(self, cols, lo: int, hi: int, refused: list[tuple[int, str]]) -> tuple[list[Alert], int]:
        """Rows ``lo:hi`` of ``cols`` (``LinkColumns``: models/wire/telemetry_columns.py), link samples of one or more
        nodes' runs, as ``update`` of each in turn, up to the first row that fired or resolved an alert: ``(its alerts,
        the row after it)``, or ``([], hi)``. A sample a cap left out is listed in ``refused`` as ``(row, what)``."""
        name = None
        node = ports = None
        capped = self.capped
        sample = self._port_sample
        bandwidth = self._bandwidth
        seen = 0
        for i, who, ts, device, number, state, rate, counters in zip(
                range(lo, hi), cols.node[lo:hi], cols.ts[lo:hi], cols.device[lo:hi], cols.port[lo:hi],
                cols.state[lo:hi], cols.rate[lo:hi], cols.counters[lo:hi]):
            if who != name:  # the next node's run (``update`` moves the node to the LRU's end for each sample alike)
                name = who
                node = self._node(name)
                ports = node.ports
            port = ports.get((device, number))
            if port is None:  # a port's first sample: ``update``'s checks and caps
                self.events_seen += seen
                seen = 0
                mark = capped["ports_per_node"], capped["ports_total"]
                out = self.update(cols.event(i))
                if capped["ports_per_node"] != mark[0]:
                    refused.append((i, "ports_per_node"))
                elif capped["ports_total"] != mark[1]:
                    refused.append((i, "ports_total"))
                if out:
                    return out, i + 1
                continue
            seen += 1
            if ts > node.last_ts:
                node.last_ts = ts
            layout = port.layout
            if (layout is not None and state == "ACTIVE" and (not rate or rate == port.max_rate)
                    and node.link_alert is None and not port.firing and not port.err_ring.bits
                    and port.err_first is None and not port.err_totals
                    and tuple(counters) == layout.names and layout.values(counters) == port.err_values):
                # ``_port_sample`` of the usual sample of a clean port, up and at its top rate, its counters as in
                # its sample before, no error counter moved: each error counter's time, the rate counters (a spike
                # at most), the bandwidth, one more clean sample (nothing fires, nothing to resolve)
                port.quiet_ts = ts
                if layout.rated:
                    where = None
                    for counter in layout.rated:
                        where = self._rate(node, port, name, ts, device, number, counter, counters[counter], where)
                bandwidth(node, port, name, ts, device, number, counters)
                port.state = state
                port.down_samples = 0
                ring = port.err_ring
                if ring.n < ring.size:
                    ring.n += 1
                port.clean += 1
                continue
            out = sample(node, port, name, ts, device, number, state, cols.phys_state[i], rate, counters)
            if out:
                self.events_seen += seen
                return out, i + 1
        self.events_seen += seen
        return [], hi

    def _feed(self, node: _NodeState, event) -> list[Alert]:
        if event.ts > node.last_ts:
            node.last_ts = event.ts
        if isinstance(event, LinkEvent):
            return self._on_link(node, event)
        if isinstance(event, GpuEvent):
            return self._on_gpu(node, event)
        if isinstance(event, XidEvent):
            return self._on_xid(node, event)
        if isinstance(event, TopologyEvent):
            node.gpu_nics = {g["gpu"]: tuple(g.get("nics", ())) for g in event.gpus}
            node.nic_ports = {n["device"]: tuple(n.get("ports", ()) or (1,)) for n in event.nics}
            node.nic_switch = {n["device"]: str(n["switch"]) for n in event.nics if n.get("switch")}
            node.switch_ports = {n["device"]: ", ".join(x["switch_port"] for x in n["neighbors"] if "switch_port" in x)
                                 for n in event.nics if n.get("switch") and n.get("neighbors")}
        return []

    def link_trouble(self, window: float, seen_since: float | None = None) -> dict[str, frozenset[str]]:
        """Nodes whose ports are erring now, each judged on its own clock (agents' clocks may be tens of seconds
        apart: one node's time says nothing of another's): a port sample with errors (or down) within ``window``
        seconds, or two of the node's own sampling periods, before the node's latest sample. With ``seen_since``
        (the worker's clock), only nodes whose latest bad sample came at or after it (an agent silent since it erred
        is not erring now). ``node -> the error counters that moved in that window``."""
        out = {}
        for name, node in self._nodes.items():
            bad = node.link_bad_at
            if bad is None or (seen_since is not None and node.link_bad_seen is not None
                               and node.link_bad_seen < seen_since):
                continue
            period = self._link_period(node)
            since = node.last_ts - (max(window, 2 * period) if period == period else window)
            if bad >= since:
                out[name] = frozenset(k for k, t in node.link_kinds.items() if t >= since)
        return out

    def link_period(self, node: str) -> float:
        """The node's usual seconds between two samples of a port (its agent's period), NaN until known: windows
        over several nodes' port samples span at least a couple of these (a 30 s agent's samples are 30 s apart)."""
        state = self._nodes.get(node)
        return self._link_period(state) if state is not None else math.nan

    @staticmethod
    def _link_period(state: _NodeState) -> float:
        for port in state.ports.values():
            if port.bw_dt.values:
                return _period(port)
        return math.nan

    def switches(self, node: str) -> tuple[str, ...]:
        """The switches the node's NICs are cabled to, as its topology events said (empty: unknown)."""
        state = self._nodes.get(node)
        return tuple(sorted(set(state.nic_switch.values()))) if state is not None else ()

    def switch_ports(self, node: str, switch: str) -> dict[str, str]:
        """``NIC -> port of ``switch`` its cable ends in`` for the node's NICs cabled to it, where topology says."""
        state = self._nodes.get(node)
        if state is None:
            return {}
        return {dev: port for dev, port in state.switch_ports.items() if port and state.nic_switch.get(dev) == switch}

    def _flag(self, node: _NodeState, name: str, ts: float, *, component: str, category: str, signal: str,
              label: str, weight: float, count: int = 0, peak: float = 0.0, gpu: int | None = None,
              device: str | None = None, port: int | None = None, **detail: Any) -> SpikeEpisode:
        key = (component, signal)
        ep = node.open.get(key)
        if ep is None or ts - ep.last > EPISODE_GAP:
            ep = SpikeEpisode(node=name, component=component, category=category, signal=signal, label=label,
                              weight=weight, began=ts, last=ts, gpu=gpu, device=device, port=port)
            node.open[key] = ep
            self._ticking.add(name)
            if node.spikes is _NO_SPIKES:
                node.spikes = deque(maxlen=self.max_spikes_per_node)
            node.spikes.append(ep)
        ep.last = max(ep.last, ts)
        ep.count += count
        ep.samples += 1
        ep.peak = max(ep.peak, peak)
        ep.detail.update(detail)
        return ep

    # -- ports ----------------------------------------------------------------------------

    def _on_link(self, node: _NodeState, ev: LinkEvent, port: _PortState | None = None) -> list[Alert]:
        if port is None:
            key = (ev.device, ev.port)
            port = node.ports.get(key)
            if port is None:
                port = node.ports[key] = _PortState(self.baseline_samples, self.baseline_min_samples,
                                                    self.link_error_window)
        return self._port_sample(node, port, ev.node, ev.ts, ev.device, ev.port, ev.state, ev.phys_state, ev.rate,
                                 ev.counters)

    def _port_sample(self, node: _NodeState, port: _PortState, name: str, ts: float, device: str, number: int,
                     state: str | None, phys_state: str | None, rate: float | None,
                     counters: dict[str, int]) -> list[Alert]:
        """One link sample of a known port, by its fields (``update`` of a ``LinkEvent``; ``update_links`` of a column
        batch's row): the helpers that flag a spike or build an alert (rare) get it as a ``LinkRow``."""
        where: dict | None = None  # the spike's place, made only for a spike (most samples flag none)
        errors: dict[str, int] = {}
        layout = port.layout
        if layout is not None and tuple(counters) == layout.names and layout.values(counters) == port.err_values:
            # the quiet sample: the same counters as the port's sample before, no error counter moved (the loop
            # below would only stamp each error counter's time: one time for all of them); the rate counters as below
            port.quiet_ts = ts
            for counter in layout.rated:
                where = self._rate(node, port, name, ts, device, number, counter, counters[counter], where)
        else:
            tracks = port.counters
            if layout is not None:  # the error counters' time, kept once for all of them while quiet
                for counter in layout.errors:
                    tracks[counter].ts = port.quiet_ts
            fresh = False  # a counter heard for the first time (a port heard once keeps no layout)
            for counter, value in counters.items():
                error = ERROR_COUNTERS.get(counter)
                if error is not None:
                    track = tracks.get(counter)
                    if track is None:
                        track = tracks[counter] = CounterTrack()
                        fresh = True
                    elif track.value == value:  # the usual error counter: no new errors (``update``: delta 0)
                        track.ts = ts
                        continue
                    delta, per_s = track.update(value, ts)
                    if delta:
                        weight, label = error
                        errors[counter] = delta
                        if where is None:
                            where = _place(device, number)
                        self._flag(node, name, ts, signal=counter, label=label, weight=weight, count=delta,
                                   peak=per_s or 0.0, **where)
                    continue
                if counter in RATE_COUNTERS:
                    if counter not in tracks:
                        fresh = True
                    where = self._rate(node, port, name, ts, device, number, counter, value, where)
                # (no rule reads the others: the data counters are ``_bandwidth``'s own track)
            layout = None if fresh else self._layouts.of(counters)
            port.layout = layout
            if layout is not None:
                port.err_values = layout.values(counters)
                port.quiet_ts = ts
        self._bandwidth(node, port, name, ts, device, number, counters)
        if state == "ACTIVE" and (not rate or rate == port.max_rate):  # the usual: up, at its top rate (``_state``)
            port.state = state
            port.down_samples = 0
            down = False
        else:
            down = self._state(node, port, LinkRow((name, ts, device, number, state, phys_state, rate, counters)))
        if not errors and not down and not port.firing and node.link_alert is None and not port.err_ring.bits \
                and port.err_first is None and not port.err_totals:
            # the usual clean sample of a clean port (``_link_alert`` of it: nothing fires, nothing to resolve; the
            # ring's bits stay 0, one more sample counted)
            ring = port.err_ring
            if ring.n < ring.size:
                ring.n += 1
            port.clean += 1
            return []
        return self._link_alert(node, LinkRow((name, ts, device, number, state, phys_state, rate, counters)), port,
                                errors, down)

    def _rate(self, node: _NodeState, port: _PortState, name: str, ts: float, device: str, number: int,
              counter: str, value: int, where: dict | None) -> dict | None:
        """A rate counter's sample (``RATE_COUNTERS``): judged against its baseline, or learned; the spike's place."""
        tracks = port.counters
        track = tracks.get(counter)
        if track is None:
            track = tracks[counter] = CounterTrack()
        delta, per_s = track.update(value, ts)
        if per_s is not None:
            if counter == "port_xmit_wait":
                port.last_wait_rate = per_s
            floor, weight, label = RATE_COUNTERS[counter]
            base = port.baselines.get(counter)
            if base is None:
                base = port.baselines[counter] = Baseline(self.baseline_samples, self.baseline_min_samples)
            median = base.judge(per_s)  # (NaN while not ``ready``: judged by nothing, learned)
            if median == median and per_s >= floor and per_s > self.rate_factor * max(median, floor / self.rate_factor):
                base.take_back()  # a spike is not learned
                ratio = per_s / median if median > 0 else math.inf
                if where is None:
                    where = _place(device, number)
                self._flag(node, name, ts, signal=counter, label=label, weight=weight, count=delta or 0,
                           peak=min(ratio, 1e6), rate=round(per_s, 1), baseline=round(median, 1), **where)
        return where

    @staticmethod
    def _where(ev: LinkEvent) -> dict:
        return _place(ev.device, ev.port)

    def _bandwidth(self, node: _NodeState, port: _PortState, name: str, ts: float, device: str, number: int,
                   counters: dict[str, int]) -> None:
        xmit, rcv = counters.get("port_xmit_data"), counters.get("port_rcv_data")
        if xmit is None or rcv is None:
            return
        bw = port.bw
        total, prev = xmit + rcv, bw.value
        if prev is not None and total >= prev:  # the usual sample: ``CounterTrack.update``'s first branch, inline
            prev_ts = bw.ts
            bw.value, bw.ts = total, ts
            dt = ts - prev_ts
            if dt < 0.2:
                return
            rate = (total - prev) / dt
        else:
            prev_ts = bw.ts if prev is not None else None
            _, rate = bw.update(total, ts)
            if rate is None or prev_ts is None:
                return
            dt = ts - prev_ts
        # After a collector gap the rate is an average over the gap (traffic and idle alike): neither judged nor
        # learned (issue 39: real RoCE traffic with gaps of seconds to minutes logged thousands of "collapses").
        usual = port.bw_dt.judge(dt)  # (NaN until the baseline is ready)
        if dt > GAP_FACTOR * usual:  # (False while ``usual`` is NaN)
            return
        bps = rate * 4
        base = port.bw_baseline
        # Judged against the link's own usual pattern: what it usually falls to (its 10th percentile), not its
        # median. A link busy all the time collapses below that; a bursty one (collectives between compute
        # phases, idle for checkpoints) usually falls to near zero, and its quiet samples are no collapse.
        low = base.judge(bps, low=True)  # (NaN while not ``ready``: learned)
        if low >= BANDWIDTH_FLOOR and bps < self.bandwidth_collapse_ratio * low and (
                bps >= IDLE_SHARE * low or self._waiting(port)):
            base.take_back()  # a collapse is not learned
            median = base.median()
            self._flag(node, name, ts, signal="bandwidth", label="bandwidth collapse",
                       weight=LINK_WEIGHTS["bandwidth"], peak=median / max(bps, 1.0),
                       bytes_per_s=round(bps), baseline_bytes_per_s=round(median),
                       usual_low_bytes_per_s=round(low), **_place(device, number))

    @staticmethod
    def _waiting(port: _PortState) -> bool:
        """The port still wants to send (transmit wait at or above half its usual rate): a near-idle link with
        demand is a collapse; without it, the application paused (a checkpoint, an eval, compute between
        collectives), which is the link's usual pattern, not a fault."""
        base, track = port.baselines.get("port_xmit_wait"), port.counters.get("port_xmit_wait")
        return (base is not None and track is not None and base.ready and track.value is not None
                and port.last_wait_rate is not None and port.last_wait_rate >= 0.5 * base.median())

    def _state(self, node: _NodeState, port: _PortState, ev: LinkEvent) -> bool:
        down = False
        state = ev.state
        if state is not None:
            if state != "ACTIVE":
                state = state.upper()
            was = port.state
            port.state = state
            if state != "ACTIVE" and (was == "ACTIVE" or port.down_samples):
                down = True
                port.down_samples += 1
                self._flag(node, ev.node, ev.ts, signal="link_down", label="link down",
                           weight=LINK_WEIGHTS["link_down"], state=state, phys_state=ev.phys_state,
                           **self._where(ev))
            elif state == "ACTIVE":
                port.down_samples = 0
        if ev.rate and (state is None or state == "ACTIVE"):
            if ev.rate < port.max_rate:
                self._flag(node, ev.node, ev.ts, signal="rate_down", label="link renegotiated lower",
                           weight=LINK_WEIGHTS["rate_down"], rate_gbps=ev.rate, max_rate_gbps=port.max_rate,
                           **self._where(ev))
            if ev.rate > port.max_rate:
                port.max_rate = ev.rate
        return down

    def _link_alert(self, node: _NodeState, ev: LinkEvent, port: _PortState, errors: dict[str, int],
                    down: bool) -> list[Alert]:
        bad = bool(errors) or down
        port.err_ring.append(bad)
        if bad:
            port.clean = 0
            if port.err_first is None:
                port.err_first = ev.ts
            for name, delta in errors.items():
                port.err_totals[name] = port.err_totals.get(name, 0) + delta
                node.link_kinds[name] = ev.ts
            if down:
                node.link_kinds["link_down"] = ev.ts
            node.link_bad_at = ev.ts if node.link_bad_at is None else max(node.link_bad_at, ev.ts)
            node.link_bad_seen = self.clock
        else:
            port.clean += 1
        if not port.firing:
            if port.clean >= self.link_error_window and (port.err_first is not None or port.err_totals):
                port.err_first, port.err_totals = None, {}  # the last episode is over
            count = port.err_ring.count()
            # Sustained in the port's own time too: a count of 3 took 60-90 s at a 30 s agent (the bad-sample path
            # only: the usual interval's median is read here, never on a quiet sample).
            need = self.link_error_min_samples
            if count >= need or (count >= 2 and sustained(count, need, (count - 1) * _period(port))):
                port.firing = True
        elif port.clean >= self.clear_after:
            port.firing = False
            port.err_first, port.err_totals = None, {}
        return self._node_link_alert(node, ev, port)

    def _node_link_alert(self, node: _NodeState, ev: LinkEvent, port: _PortState) -> list[Alert]:
        """The node's one link_errors alert: fires with its first port in trouble, lists every port that
        erred, resolves once none is in trouble."""
        if node.link_alert is None and not port.firing:  # the usual sample: nothing fires, nothing to resolve
            return []
        if node.link_alert is not None:
            if any(p.firing for p in node.ports.values()):
                return []
            alert, node.link_alert = node.link_alert, None
            return [alert.resolved(at=ev.ts, summary=f"resolved: ports on {ev.node} clean for "
                                                     f"{self.clear_after} samples ({alert.summary})")]
        if not port.firing:
            return []
        # The port that fired first, then the node's other ports with errors in their recent samples.
        others = sorted(((k, p) for k, p in node.ports.items() if p is not port and (p.firing or p.err_ring.bits)),
                        key=lambda kp: (-kp[1].err_ring.count(), kp[0]))
        listed = [((ev.device, ev.port), port), *others]
        began = min(p.err_first for _, p in listed if p.err_first is not None) if any(
            p.err_first is not None for _, p in listed) else ev.ts
        totals = dict(sorted(port.err_totals.items(), key=lambda kv: -kv[1]))
        what = ", ".join(f"{n} +{v}" for n, v in totals.items()) or "errors"
        if port.down_samples:
            what = f"link {port.state}" + (f", {what}" if totals else "")
        where = f"port {ev.device}/{ev.port}"
        if len(listed) > 1:
            where = f"{len(listed)} ports ({', '.join(f'{d}/{n}' for (d, n), _ in listed)}), first {ev.device}/{ev.port},"
        ports = tuple(PortErrors(device=d, port=n, errors=dict(p.err_totals), state=p.state,
                                 bad_samples=int(p.err_ring.count()),
                                 began_at=None if p.err_first is None else round(p.err_first, 3))
                      for (d, n), p in listed)
        # Where the first port's cable ends, when topology said (the fabric alert names the same): the SRE goes
        # to that switch port, not to "the switch port". Only then are the keys there (replays without topology
        # stay byte for byte).
        switch = node.nic_switch.get(ev.device) if ev.device else None
        cabling = {"switch": switch, "switch_port": node.switch_ports[ev.device]} if switch and node.switch_ports.get(
            ev.device) else ({"switch": switch} if switch else {})
        behind = (f"; cabled to switch {switch}" + (f" port {cabling['switch_port']}" if "switch_port" in cabling
                                                    else "")) if switch else ""
        node.link_alert = Alert(
            id=alert_id("", "link_errors", ev.node, round(began, 3)),
            status="firing", type="link_errors",
            severity="critical" if any(p.down_samples for _, p in listed) else "warning",
            job="", ranks=(), nodes=(ev.node,), starts_at=ev.ts,
            summary=(f"link_errors: {where} on {ev.node}: {what} in "
                     f"{port.err_ring.count()} of its last {len(port.err_ring)} samples{behind}"),
            evidence={**LinkErrorsEvidence(node=ev.node, device=ev.device, port=ev.port, began_at=round(began, 3),
                                           errors=totals, state=port.state, rate_gbps=ev.rate,
                                           bad_samples=int(port.err_ring.count()), window=len(port.err_ring),
                                           ports=ports).to_dict(), **cabling})
        return [node.link_alert]

    # -- GPUs -----------------------------------------------------------------------------

    def _gpu(self, node: _NodeState, index: int) -> _GpuState:
        gpu = node.gpus.get(index)
        if gpu is None:
            gpu = node.gpus[index] = _GpuState(self.baseline_samples, self.baseline_min_samples)
        return gpu

    def _on_gpu(self, node: _NodeState, ev: GpuEvent) -> list[Alert]:
        gpu = self._gpu(node, ev.gpu)
        comp = f"gpu{ev.gpu}"
        where = dict(component=comp, category="compute", gpu=ev.gpu)
        out: list[Alert] = []
        active: dict[str, tuple[str, dict]] = {}  # condition faults present in this sample

        for name in ("ecc_sbe", "ecc_dbe"):
            value = getattr(ev, name)
            if value is None:
                continue
            if gpu.ecc is None:
                gpu.ecc = {"ecc_sbe": CounterTrack(), "ecc_dbe": CounterTrack()}
            delta, _ = gpu.ecc[name].update(value, ev.ts)
            if delta:
                label = "ECC double-bit errors" if name == "ecc_dbe" else "ECC single-bit errors"
                self._flag(node, ev.node, ev.ts, signal=name, label=label, weight=GPU_WEIGHTS[name], count=delta,
                           **where)
                if name == "ecc_dbe":
                    out.extend(self._event_fault(gpu, ev.node, ev.gpu, "ecc_dbe", ev.ts,
                                                 f"{delta} new ECC double-bit error(s) (total {value})",
                                                 {"ecc_dbe_total": value, "ecc_dbe_new": delta}))

        # Throttling only matters with a clock drop below the GPU's own recent clock.
        reasons = (ev.throttle or 0) & (THROTTLE_THERMAL | THROTTLE_POWER)
        if ev.sm_clock is not None:
            ref = gpu.clock.median() if gpu.clock.ready else (ev.sm_clock_max or math.nan)
            if reasons and ref > 0 and ev.sm_clock < self.clock_drop_ratio * ref:
                gpu.throttle_run += 1
                if gpu.throttle_run == 1:
                    gpu.throttle_since = ev.ts
                kind = "thermal" if reasons & THROTTLE_THERMAL else "power"
                names = [n for bit, n in THROTTLE_NAMES.items() if reasons & bit]
                detail = {"sm_clock_mhz": ev.sm_clock, "baseline_clock_mhz": round(ref, 1), "reasons": names,
                          "temp_c": ev.temp, "power_w": ev.power}
                self._flag(node, ev.node, ev.ts, signal="throttle", label=f"{kind} throttling",
                           weight=GPU_WEIGHTS["throttle"], peak=ref / max(ev.sm_clock, 1.0), **detail, **where)
                if sustained(gpu.throttle_run, self.throttle_min_samples, span(gpu.throttle_since, ev.ts)):
                    active["throttle"] = (f"{kind} throttling: SM clock {ev.sm_clock:.0f} MHz vs {ref:.0f} MHz "
                                          f"({', '.join(names)})" + (f", {ev.temp:.0f} C" if ev.temp else ""), detail)
            else:
                gpu.throttle_run = 0
                if not reasons and (ev.util is None or ev.util >= 50):
                    gpu.clock.add(ev.sm_clock)  # the busy, unthrottled clock is the baseline
            self._clock_peers(node, gpu, ev, reasons, where)

        down = []
        if ev.pcie_width is not None and ev.pcie_width_max and ev.pcie_width < ev.pcie_width_max:
            down.append(f"width x{ev.pcie_width} of x{ev.pcie_width_max}")
        # GPUs lower the PCIe generation when idle to save power: only a busy GPU's generation counts.
        if (ev.pcie_gen is not None and ev.pcie_gen_max and ev.pcie_gen < ev.pcie_gen_max
                and ev.util is not None and ev.util >= 50):
            down.append(f"gen {ev.pcie_gen} of {ev.pcie_gen_max}")
        if down:
            gpu.pcie_run += 1
            detail = {"pcie_gen": ev.pcie_gen, "pcie_gen_max": ev.pcie_gen_max, "pcie_width": ev.pcie_width,
                      "pcie_width_max": ev.pcie_width_max}
            self._flag(node, ev.node, ev.ts, signal="pcie_downgrade", label="PCIe link downgraded",
                       weight=GPU_WEIGHTS["pcie_downgrade"], **detail, **where)
            if gpu.pcie_run >= self.throttle_min_samples:
                active["pcie_downgrade"] = ("PCIe link downgraded: " + ", ".join(down), detail)
        else:
            gpu.pcie_run = 0

        links_down = []
        if ev.nvlinks and gpu.nvlink_up is None:
            gpu.nvlink_up, gpu.nvlink_counters = {}, {}
        for link in ev.nvlinks:
            n = link["link"]
            up = link.get("up")
            if up is not None:
                was = gpu.nvlink_up.get(n)
                if not up and (was or (was is False and f"nvlink{n}" in gpu.faults)):
                    links_down.append(n)
                    self._flag(node, ev.node, ev.ts, component=f"{comp}/nvlink{n}", category="compute",
                               signal="nvlink_down", label=f"NVLink {n} down", weight=GPU_WEIGHTS["nvlink_down"],
                               gpu=ev.gpu, link=n)
                    gpu.nvlink_up[n] = was if was is not None else True  # stays "was up" while down
                else:
                    gpu.nvlink_up[n] = up
            for name in ("crc_errors", "replay_errors", "recovery_errors"):
                if name not in link:
                    continue
                key = (n, name)
                track = gpu.nvlink_counters.get(key)
                if track is None:
                    track = gpu.nvlink_counters[key] = CounterTrack()
                delta, _ = track.update(link[name], ev.ts)
                if delta:
                    self._flag(node, ev.node, ev.ts, component=f"{comp}/nvlink{n}", category="compute",
                               signal="nvlink_errors", label=f"NVLink {n} errors", weight=GPU_WEIGHTS["nvlink_errors"],
                               count=delta, gpu=ev.gpu, link=n, counter=name)
        for n in links_down:
            active[f"nvlink{n}"] = (f"NVLink {n} down", {"link": n})

        # Condition faults: fire when present, resolve after `clear_after` samples without them.
        if active:
            gpu.own_faults()
        for key, (text, detail) in active.items():
            gpu.clean[key] = 0
            if key not in gpu.faults:
                fault = "nvlink_down" if key.startswith("nvlink") else key
                severity = "critical" if fault == "nvlink_down" else "warning"
                alert = self._gpu_alert(ev.node, ev.gpu, fault, key, ev.ts, severity, text, detail)
                gpu.faults[key] = alert
                out.append(alert)
        for key in [k for k in gpu.faults if k not in active and k not in gpu.fault_last]:
            gpu.clean[key] = gpu.clean.get(key, 0) + 1
            if gpu.clean[key] >= self.clear_after:
                alert = gpu.faults.pop(key)
                gpu.clean.pop(key, None)
                if key.startswith("nvlink") and gpu.nvlink_up is not None:
                    gpu.nvlink_up.pop(int(key[6:]), None)
                out.append(alert.resolved(at=ev.ts, summary=f"resolved: {alert.summary}"))
        return out

    def _clock_peers(self, node: _NodeState, gpu: _GpuState, ev: GpuEvent, reasons: int, where: dict) -> None:
        """The GPU's clock against its node's other busy GPUs' (a spike ``clock_below_peers``, no alert): the
        slow drift its own baseline follows, with the throttle reasons, temperature and power that explain it."""
        busy = ev.util is None or ev.util >= 50
        if not busy:
            gpu.busy_clock = None
            return
        gpu.busy_clock, gpu.busy_at, gpu.temp = ev.sm_clock, ev.ts, ev.temp
        peers = [(g.busy_clock, g.temp) for g in node.gpus.values()
                 if g is not gpu and g.busy_clock is not None and abs(ev.ts - g.busy_at) <= CLOCK_PEER_AGE]
        if len(peers) < MIN_CLOCK_PEERS:
            return
        peer = _median([c for c, _ in peers])
        if not peer > 0 or ev.sm_clock >= CLOCK_PEER_RATIO * peer:
            return
        all_reasons = (ev.throttle or 0)
        names = [n for bit, n in THROTTLE_NAMES.items() if all_reasons & bit]
        kind = ("thermal throttling" if reasons & THROTTLE_THERMAL else "power capping" if reasons & THROTTLE_POWER
                else "SM clock")
        temps = [t for _, t in peers if t is not None]
        peer_temp = _median(temps) if temps else None
        label = f"{kind}: clock {1 - ev.sm_clock / peer:.0%} below its peers" + (
            f" ({', '.join(names)})" if names else "") + (f", {ev.temp:.0f} C" if ev.temp is not None else "") + (
            f" vs {peer_temp:.0f} C" if ev.temp is not None and peer_temp is not None else "")
        # Explained by throttle reasons: as strong as a throttle with a clock drop; unexplained: weaker.
        weight = GPU_WEIGHTS["clock_below_peers"] * (1.0 if reasons else 0.6)
        self._flag(node, ev.node, ev.ts, signal="clock_below_peers", label=label, weight=weight,
                   peak=peer / max(ev.sm_clock, 1.0), sm_clock_mhz=ev.sm_clock, peer_clock_mhz=round(peer, 1),
                   reasons=names, temp_c=ev.temp, peer_temp_c=None if peer_temp is None else round(peer_temp, 1),
                   power_w=ev.power, power_limit_w=ev.power_limit, **where)
        ep = node.open.get((where["component"], "clock_below_peers"))
        if ep is not None:
            ep.label = label  # the latest reading (the drift goes on): the hint says how far it is now

    def _gpu_alert(self, node: str, gpu: int, fault: str, key: str, ts: float, severity: str, text: str,
                   detail: dict) -> Alert:
        evidence = {"node": node, "gpu": gpu, "fault": fault, "began_at": round(ts, 3)}
        evidence.update(detail)
        return Alert(id=alert_id("", "gpu_fault", node, gpu, key, round(ts, 3)), status="firing", type="gpu_fault",
                     severity=severity, job="", ranks=(), nodes=(node,), starts_at=ts,
                     summary=f"gpu_fault: GPU {gpu} on {node}: {text}", evidence=evidence)

    def _event_fault(self, gpu: _GpuState, node: str, index: int, key: str, ts: float, text: str,
                     detail: dict, count: int = 1) -> list[Alert]:
        gpu.own_faults()
        gpu.fault_last[key] = ts
        self._ticking.add(node)
        total = gpu.fault_count[key] = gpu.fault_count.get(key, 0) + count
        alert = gpu.faults.get(key)
        if alert is not None and not key.startswith("xid"):
            return []
        if alert is not None:
            # The same incident: its count grows in the evidence, published again at most every
            # REPUBLISH_SECONDS (severity and culprit cannot change: one key is one GPU and one code).
            shown_at, shown, held = gpu.fault_shown.get(key, (alert.starts_at, 1, 0))
            if total == shown:
                return []
            if ts - shown_at < REPUBLISH_SECONDS:
                self.updates_held += 1
                gpu.fault_shown[key] = (shown_at, shown, held + 1)
                return []
            alert = alert.__class__(**{**{f: getattr(alert, f) for f in Alert.__slots__}, "evidence": {
                **alert.evidence, "count": total, "last_at": round(ts, 3), "updates_held": held}})
            gpu.faults[key] = alert
            gpu.fault_shown[key] = (ts, total, held)
            return [alert]
        fault = "xid" if key.startswith("xid") else key
        alert = self._gpu_alert(node, index, fault, key, ts, "critical", text, {**detail, "count": total})
        gpu.faults[key] = alert
        gpu.fault_shown[key] = (ts, total, 0)
        return [alert]

    def _on_xid(self, node: _NodeState, ev: XidEvent) -> list[Alert]:
        gpu = self._gpu(node, ev.gpu)
        name = XID_NAMES.get(ev.xid, "")
        app = ev.xid in self.app_xids
        self._flag(node, ev.node, ev.ts, component=f"gpu{ev.gpu}", category="application" if app else "compute",
                   signal="app_xid" if app else "xid", label=f"Xid {ev.xid}" + (f" ({name})" if name else ""),
                   weight=GPU_WEIGHTS["app_xid" if app else "xid"], count=1, gpu=ev.gpu, xid=ev.xid)
        if app:
            return []
        text = f"Xid {ev.xid}" + (f" ({name})" if name else "") + (f": {ev.message}" if ev.message else "")
        return self._event_fault(gpu, ev.node, ev.gpu, f"xid{ev.xid}", ev.ts, text, {"xid": ev.xid},
                                 count=_count(ev))

    def tick(self, now: float) -> list[Alert]:
        """Resolve event-based GPU faults (Xid, ECC) not seen again for ``fault_hold_seconds`` of node time."""
        self.clock = now
        out: list[Alert] = []
        ticking = self._ticking
        if not ticking:
            return out
        # (in the nodes' own order, as when every node was visited: the alerts' order is the same)
        names = [n for n in self._nodes if n in ticking] if len(ticking) < len(self._nodes) else list(self._nodes)
        for name in names:
            node = self._nodes[name]
            clock = max(node.last_ts, 0.0)
            for index, gpu in node.gpus.items():
                for key, last in list(gpu.fault_last.items()):
                    if clock - last >= self.fault_hold_seconds:
                        del gpu.fault_last[key]
                        gpu.fault_count.pop(key, None)
                        gpu.fault_shown.pop(key, None)
                        alert = gpu.faults.pop(key, None)
                        if alert is not None:
                            out.append(alert.resolved(at=clock, summary=f"resolved: not seen again for "
                                                                        f"{self.fault_hold_seconds:.0f} s "
                                                                        f"({alert.summary})"))
                for key, (shown_at, shown, held) in list(gpu.fault_shown.items()):
                    alert, total = gpu.faults.get(key), gpu.fault_count.get(key, shown)
                    if alert is not None and total != shown and clock - shown_at >= REPUBLISH_SECONDS:
                        # a burst's last counts, held back while it lasted
                        alert = alert.__class__(**{**{f: getattr(alert, f) for f in Alert.__slots__}, "evidence": {
                            **alert.evidence, "count": total, "updates_held": held}})
                        gpu.faults[key] = alert
                        gpu.fault_shown[key] = (clock, total, held)
                        out.append(alert)
            # Close spike episodes that have been quiet (keeps `open` small).
            for key in [k for k, ep in node.open.items() if clock - ep.last > EPISODE_GAP]:
                del node.open[key]
        # (nodes evicted since, or with nothing left to age, leave the set)
        self._ticking = {n for n in names if self._nodes[n].open
                         or any(g.fault_last or g.fault_shown for g in self._nodes[n].gpus.values())}
        return out


def _place(device: str, port: int) -> dict:
    """A port spike's place (``_flag``'s keywords)."""
    return dict(component=f"{device}/{port}", category="network", device=device, port=port)


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    n = len(ordered)
    return ordered[n // 2] if n % 2 else (ordered[n // 2 - 1] + ordered[n // 2]) / 2


#: An open Xid fault is published again with its new ``count`` at most once in this many seconds (node time).
REPUBLISH_SECONDS = 30.0


def _count(ev: XidEvent) -> int:
    """How many occurrences an Xid event stands for (the agent coalesces a burst into one, with ``count``)."""
    n = ev.extra.get("count", 1) if isinstance(ev.extra, dict) else 1
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        return 1
    return min(n, 1_000_000)
