"""Node telemetry: counter rates, spikes, GPU and link alerts, and the causes of stragglers and hangs.

The node agent (producers/agent.py) sends the raw cumulative counters of every GPU and
InfiniBand/RoCE port of a node (docs/events.md, "Node telemetry"). Here, per node, per GPU
and per port:

* cumulative counters become deltas and rates (:func:`counter_delta`): a counter that goes
  backwards from the top of a 32- or 64-bit range wrapped around; any other decrease is a
  reset (driver reload, ``perfquery -R``) and only restarts the counter's history;
* each rate keeps its own recent baseline (:class:`Baseline`, bounded);
* a **spike** is flagged on any increase of an error counter, on a rate far outside its
  baseline (transmit wait, CNPs, a bandwidth collapse), on a link that goes down or comes
  back at a lower rate, and on GPU faults (Xid, ECC, throttling with a clock drop, PCIe
  downgrade, NVLink down or erroring). Spikes close to each other on the same component and
  signal are one episode, with the time it began;
* node alerts: ``gpu_fault`` (critical Xid codes, ECC double-bit errors, thermal or power
  throttling with a clock drop, PCIe downgrade, NVLink down) and ``link_errors`` (a port with
  errors in several of its recent samples, or down), firing and resolved.

:class:`TelemetryCorrelator` ranks the spikes near a straggler or hang alert (same nodes,
the rank's own GPU and the NICs nearest to it, within ``window`` seconds of the alert's
start) as ``suspected_causes``; :class:`TelemetryHub` is what the engine holds: it routes
telemetry, remembers which rank runs on which node and GPU, enriches alerts and publishes
a new version of an alert when its suspected causes change after it fired.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field, replace
from typing import Any

from .alerts import Alert, alert_id
from .events import StepEvent
from .telemetry_events import GpuEvent, LinkEvent, TopologyEvent, XidEvent


@dataclass(frozen=True, kw_only=True)
class TelemetrySettings:
    """Node telemetry: the node agent, counter spikes, GPU/link alerts, correlation (models/telemetry.py)."""

    #: Topic of node telemetry (keyed by node), under the Kafka topic prefix.
    topic: str = "telemetry"
    #: Seconds between two samples of the node agent.
    agent_interval: float = 1.0
    #: Root of sysfs for the agent (tests point it at a recorded tree).
    sysfs_root: str = "/sys"
    #: Root of procfs for the agent's host signals (tests point it at a fake tree).
    proc_root: str = "/proc"
    #: Batches the agent holds while Kafka is slow or away; beyond, the oldest are dropped and counted.
    agent_queue_size: int = 600
    #: How long one send may block on a full producer buffer or missing metadata, milliseconds.
    agent_max_block_ms: int = 1000
    #: Seconds between two topology events from the agent.
    topology_interval: float = 60.0
    #: Suspected causes are spikes and faults within this many seconds of an alert's start (both sides).
    correlation_window: float = 60.0
    #: Samples of each rate's own recent baseline (bounded memory).
    baseline_samples: int = 120
    #: Samples a baseline needs before a rate is judged against it.
    baseline_min_samples: int = 10
    #: A rate (xmit_wait, CNPs) is a spike at this multiple of its baseline median (and above its floor).
    rate_factor: float = 4.0
    #: Bandwidth below this fraction of its baseline (while the baseline is busy) is a collapse.
    bandwidth_collapse_ratio: float = 0.3
    #: Throttling counts as a fault once the SM clock is below this fraction of its baseline.
    clock_drop_ratio: float = 0.85
    #: Consecutive throttled samples before a gpu_fault for throttling fires.
    throttle_min_samples: int = 3
    #: A port has sustained errors (link_errors alert) when its error counters rose in
    #: ``link_error_min_samples`` of its last ``link_error_window`` samples.
    link_error_window: int = 10
    link_error_min_samples: int = 3
    #: A condition-based alert (throttling, link errors, link down) resolves after this many clean samples.
    clear_after: int = 30
    #: An event-based fault (Xid, ECC double-bit error) resolves this long after its last occurrence.
    fault_hold_seconds: float = 300.0
    #: Xid codes caused by the application, not the hardware: no gpu_fault.
    app_xids: str = "13,31,43,45,68"
    #: A straggler whose data_time is at least this multiple of its peers' points at the input pipeline.
    data_time_ratio: float = 3.0
    #: Spikes remembered per node for correlation (oldest dropped first).
    max_spikes_per_node: int = 512
    #: Suspected causes listed per alert.
    max_causes: int = 5
    #: Enrichment updates (new versions) published per alert at most.
    max_enrichment_updates: int = 5
    #: The worker's global telemetry feed starts this many seconds back in the topic.
    feed_lookback_seconds: float = 300.0
    #: Persistent link baselines (models/link_baseline.py, docs/network.md): a sample's weight halves
    #: after this many seconds of the node's clock; a port's own baseline counts after this many samples;
    #: the owner of a node's partition writes the node's baselines to the compacted topic this often.
    link_baseline_half_life: float = 21600.0
    link_baseline_min_samples: int = 120
    link_baseline_publish_interval: float = 60.0

    def app_xid_set(self) -> frozenset[int]:
        try:
            return frozenset(int(x) for x in self.app_xids.split(",") if x.strip())
        except ValueError:
            raise ValueError(f"telemetry.app_xids: expected comma-separated integers, got {self.app_xids!r}") from None


TELEMETRY_KINDS = frozenset({"gpu", "xid", "link", "topology", "host"})

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
#: A bandwidth collapse needs a busy baseline: at least this many bytes per second.
BANDWIDTH_FLOOR = 1e8

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
               "nvlink_errors": 4.0, "ecc_sbe": 1.0, "app_xid": 2.0}
LINK_WEIGHTS = {"link_down": 9.0, "rate_down": 6.0, "bandwidth": 2.0}
#: Seconds without a new flag after which a spike episode is over (the next flag starts a new one).
EPISODE_GAP = 10.0


def counter_delta(prev: int, cur: int) -> tuple[int | None, str]:
    """Increase of a cumulative counter from ``prev`` to ``cur``: ``(delta, how)``.

    ``how`` is ``ok``, ``wrap`` (went past the top of a 32- or 64-bit range: the delta
    counts through the wrap) or ``reset`` (any other decrease: the delta is unknown, None).
    """
    if cur >= prev:
        return cur - prev, "ok"
    for bits in (32, 64):
        top = 1 << bits
        # Wrapped: the old value was in the top quarter of the range, the new one in the bottom.
        if top * 3 // 4 <= prev < top and cur < top // 4:
            return top - prev + cur, "wrap"
    return None, "reset"


class Baseline:
    """The recent values of one rate (bounded), with a cached median."""

    __slots__ = ("values", "min_samples", "_median", "_stale")

    def __init__(self, size: int, min_samples: int) -> None:
        self.values: deque[float] = deque(maxlen=max(size, 1))
        self.min_samples = min_samples
        self._median = math.nan
        self._stale = 0

    @property
    def ready(self) -> bool:
        return len(self.values) >= self.min_samples

    def add(self, value: float) -> None:
        self.values.append(value)
        self._stale += 1

    def median(self) -> float:
        if self._stale and (self._stale >= 8 or math.isnan(self._median) or len(self.values) < 16):
            ordered = sorted(self.values)
            n = len(ordered)
            self._median = (ordered[n // 2] if n % 2 else (ordered[n // 2 - 1] + ordered[n // 2]) / 2) if n else math.nan
            self._stale = 0
        return self._median


class CounterTrack:
    """One cumulative counter: last value and time, and how it moved."""

    __slots__ = ("value", "ts", "resets", "wraps")

    def __init__(self) -> None:
        self.value: int | None = None
        self.ts = 0.0
        self.resets = 0
        self.wraps = 0

    def update(self, value: int, ts: float) -> tuple[int | None, float | None]:
        """Feed the raw value at ``ts``; return ``(delta, rate per second)`` (None on the first or a reset)."""
        prev, prev_ts = self.value, self.ts
        self.value, self.ts = value, ts
        if prev is None:
            return None, None
        delta, how = counter_delta(prev, value)
        if how == "reset":
            self.resets += 1
            return None, None
        if how == "wrap":
            self.wraps += 1
        dt = ts - prev_ts
        return delta, (delta / dt if dt >= 0.2 else None)


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


@dataclass(frozen=True, slots=True)
class SuspectedCause:
    """One ranked candidate cause of a straggler or hang."""

    category: str  # network | compute | application | input_pipeline
    node: str | None
    component: str
    score: float
    began_at: float | None
    hint: str
    near_rank: bool | None = None
    gpu: int | None = None
    device: str | None = None
    port: int | None = None
    evidence: tuple[dict[str, Any], ...] = ()

    def to_dict(self, rank: int) -> dict[str, Any]:
        out: dict[str, Any] = {"rank": rank, "category": self.category, "node": self.node,
                               "component": self.component, "score": round(self.score, 3),
                               "began_at": None if self.began_at is None else round(self.began_at, 3),
                               "hint": self.hint}
        for name in ("near_rank", "gpu", "device", "port"):
            value = getattr(self, name)
            if value is not None:
                out[name] = value
        out["evidence"] = list(self.evidence)
        return out


class _PortState:
    __slots__ = ("counters", "baselines", "bw", "bw_baseline", "max_rate", "state", "err_ring", "clean", "alert",
                 "err_first", "err_totals", "down_samples")

    def __init__(self, size: int, min_samples: int, window: int) -> None:
        self.counters: dict[str, CounterTrack] = {}
        self.baselines: dict[str, Baseline] = {}
        self.bw = CounterTrack()
        self.bw_baseline = Baseline(size, min_samples)
        self.max_rate = 0.0
        self.state: str | None = None
        self.err_ring: deque[bool] = deque(maxlen=window)
        self.clean = 0
        self.alert: Alert | None = None
        self.err_first: float | None = None
        self.err_totals: dict[str, int] = {}
        self.down_samples = 0


class _GpuState:
    __slots__ = ("ecc", "clock", "throttle_run", "pcie_run", "nvlink_up", "nvlink_counters", "faults", "clean",
                 "fault_last")

    def __init__(self, size: int, min_samples: int) -> None:
        self.ecc = {"ecc_sbe": CounterTrack(), "ecc_dbe": CounterTrack()}
        self.clock = Baseline(size, min_samples)
        self.throttle_run = 0
        self.pcie_run = 0
        self.nvlink_up: dict[int, bool] = {}
        self.nvlink_counters: dict[tuple[int, str], CounterTrack] = {}
        self.faults: dict[str, Alert] = {}  # open gpu_fault alerts by fault key
        self.clean: dict[str, int] = {}
        self.fault_last: dict[str, float] = {}  # event-based faults: last occurrence


class _NodeState:
    __slots__ = ("gpus", "ports", "spikes", "open", "gpu_nics", "nic_ports", "last_ts")

    def __init__(self, max_spikes: int) -> None:
        self.gpus: dict[int, _GpuState] = {}
        self.ports: dict[tuple[str, int], _PortState] = {}
        self.spikes: deque[SpikeEpisode] = deque(maxlen=max_spikes)
        self.open: dict[tuple[str, str], SpikeEpisode] = {}
        self.gpu_nics: dict[int, tuple[str, ...]] = {}
        self.nic_ports: dict[str, tuple[int, ...]] = {}
        self.last_ts = 0.0


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
        self._nodes: dict[str, _NodeState] = {}
        self.events_seen = 0

    # -- state ----------------------------------------------------------------------------

    def _node(self, name: str) -> _NodeState:
        node = self._nodes.get(name)
        if node is None:
            if len(self._nodes) >= self.max_nodes:  # memory bound: forget the quietest node
                del self._nodes[min(self._nodes, key=lambda n: self._nodes[n].last_ts)]
            node = self._nodes[name] = _NodeState(self.max_spikes_per_node)
        return node

    @property
    def nodes(self) -> tuple[str, ...]:
        return tuple(self._nodes)

    def firing(self) -> list[Alert]:
        out = []
        for node in self._nodes.values():
            out.extend(p.alert for p in node.ports.values() if p.alert is not None)
            for gpu in node.gpus.values():
                out.extend(gpu.faults.values())
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
        return []

    def _flag(self, node: _NodeState, name: str, ts: float, *, component: str, category: str, signal: str,
              label: str, weight: float, count: int = 0, peak: float = 0.0, gpu: int | None = None,
              device: str | None = None, port: int | None = None, **detail: Any) -> SpikeEpisode:
        key = (component, signal)
        ep = node.open.get(key)
        if ep is None or ts - ep.last > EPISODE_GAP:
            ep = SpikeEpisode(node=name, component=component, category=category, signal=signal, label=label,
                              weight=weight, began=ts, last=ts, gpu=gpu, device=device, port=port)
            node.open[key] = ep
            node.spikes.append(ep)
        ep.last = max(ep.last, ts)
        ep.count += count
        ep.samples += 1
        ep.peak = max(ep.peak, peak)
        ep.detail.update(detail)
        return ep

    # -- ports ----------------------------------------------------------------------------

    def _on_link(self, node: _NodeState, ev: LinkEvent) -> list[Alert]:
        key = (ev.device, ev.port)
        port = node.ports.get(key)
        if port is None:
            port = node.ports[key] = _PortState(self.baseline_samples, self.baseline_min_samples,
                                                self.link_error_window)
        comp = f"{ev.device}/{ev.port}"
        where = dict(component=comp, category="network", device=ev.device, port=ev.port)
        errors: dict[str, int] = {}
        for name, value in ev.counters.items():
            track = port.counters.get(name)
            if track is None:
                track = port.counters[name] = CounterTrack()
            delta, rate = track.update(value, ev.ts)
            if name in ERROR_COUNTERS:
                if delta:
                    weight, label = ERROR_COUNTERS[name]
                    errors[name] = delta
                    self._flag(node, ev.node, ev.ts, signal=name, label=label, weight=weight, count=delta,
                               peak=rate or 0.0, **where)
            elif name in RATE_COUNTERS and rate is not None:
                floor, weight, label = RATE_COUNTERS[name]
                base = port.baselines.get(name)
                if base is None:
                    base = port.baselines[name] = Baseline(self.baseline_samples, self.baseline_min_samples)
                median = base.median() if base.ready else math.nan
                if base.ready and rate >= floor and rate > self.rate_factor * max(median, floor / self.rate_factor):
                    ratio = rate / median if median > 0 else math.inf
                    self._flag(node, ev.node, ev.ts, signal=name, label=label, weight=weight, count=delta or 0,
                               peak=min(ratio, 1e6), rate=round(rate, 1), baseline=round(median, 1), **where)
                else:
                    base.add(rate)
        self._bandwidth(node, port, ev, where)
        down = self._state(node, port, ev, where)
        return self._link_alert(ev, port, errors, down)

    def _bandwidth(self, node: _NodeState, port: _PortState, ev: LinkEvent, where: dict) -> None:
        if not all(n in ev.counters for n in DATA_COUNTERS):
            return
        words = sum(ev.counters[n] for n in DATA_COUNTERS)
        _, rate = port.bw.update(words, ev.ts)
        if rate is None:
            return
        bps = rate * 4
        base = port.bw_baseline
        median = base.median() if base.ready else math.nan
        if base.ready and median >= BANDWIDTH_FLOOR and bps < self.bandwidth_collapse_ratio * median:
            self._flag(node, ev.node, ev.ts, signal="bandwidth", label="bandwidth collapse",
                       weight=LINK_WEIGHTS["bandwidth"], peak=median / max(bps, 1.0),
                       bytes_per_s=round(bps), baseline_bytes_per_s=round(median), **where)
        else:
            base.add(bps)

    def _state(self, node: _NodeState, port: _PortState, ev: LinkEvent, where: dict) -> bool:
        down = False
        if ev.state is not None:
            state = ev.state.upper()
            was = port.state
            port.state = state
            if state != "ACTIVE" and (was == "ACTIVE" or port.down_samples):
                down = True
                port.down_samples += 1
                self._flag(node, ev.node, ev.ts, signal="link_down", label="link down",
                           weight=LINK_WEIGHTS["link_down"], state=state, phys_state=ev.phys_state, **where)
            elif state == "ACTIVE":
                port.down_samples = 0
        if ev.rate and (ev.state is None or ev.state.upper() == "ACTIVE"):
            if ev.rate < port.max_rate:
                self._flag(node, ev.node, ev.ts, signal="rate_down", label="link renegotiated lower",
                           weight=LINK_WEIGHTS["rate_down"], rate_gbps=ev.rate, max_rate_gbps=port.max_rate,
                           **where)
            port.max_rate = max(port.max_rate, ev.rate)
        return down

    def _link_alert(self, ev: LinkEvent, port: _PortState, errors: dict[str, int], down: bool) -> list[Alert]:
        bad = bool(errors) or down
        port.err_ring.append(bad)
        if bad:
            port.clean = 0
            if port.err_first is None:
                port.err_first = ev.ts
            for name, delta in errors.items():
                port.err_totals[name] = port.err_totals.get(name, 0) + delta
        else:
            port.clean += 1
        if port.alert is None:
            if port.clean >= self.link_error_window:
                port.err_first, port.err_totals = None, {}  # the last episode is over
            if sum(port.err_ring) < self.link_error_min_samples:
                return []
            began = port.err_first if port.err_first is not None else ev.ts
            totals = dict(sorted(port.err_totals.items(), key=lambda kv: -kv[1]))
            what = ", ".join(f"{n} +{v}" for n, v in totals.items()) or "errors"
            if port.down_samples:
                what = f"link {port.state}" + (f", {what}" if totals else "")
            port.alert = Alert(
                id=alert_id("", "link_errors", ev.node, ev.device, ev.port, round(began, 3)),
                status="firing", type="link_errors", severity="critical" if port.down_samples else "warning",
                job="", ranks=(), nodes=(ev.node,), starts_at=ev.ts,
                summary=(f"link_errors: port {ev.device}/{ev.port} on {ev.node}: {what} in "
                         f"{sum(port.err_ring)} of its last {len(port.err_ring)} samples"),
                evidence={"node": ev.node, "device": ev.device, "port": ev.port, "began_at": round(began, 3),
                          "errors": totals, "state": port.state, "rate_gbps": ev.rate,
                          "bad_samples": int(sum(port.err_ring)), "window": len(port.err_ring)})
            return [port.alert]
        if port.clean >= self.clear_after:
            alert, port.alert = port.alert, None
            port.err_first, port.err_totals = None, {}
            return [alert.resolved(at=ev.ts, summary=f"resolved: port {ev.device}/{ev.port} on {ev.node} clean for "
                                                     f"{port.clean} samples ({alert.summary})")]
        return []

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
                kind = "thermal" if reasons & THROTTLE_THERMAL else "power"
                names = [n for bit, n in THROTTLE_NAMES.items() if reasons & bit]
                detail = {"sm_clock_mhz": ev.sm_clock, "baseline_clock_mhz": round(ref, 1), "reasons": names,
                          "temp_c": ev.temp, "power_w": ev.power}
                self._flag(node, ev.node, ev.ts, signal="throttle", label=f"{kind} throttling",
                           weight=GPU_WEIGHTS["throttle"], peak=ref / max(ev.sm_clock, 1.0), **detail, **where)
                if gpu.throttle_run >= self.throttle_min_samples:
                    active["throttle"] = (f"{kind} throttling: SM clock {ev.sm_clock:.0f} MHz vs {ref:.0f} MHz "
                                          f"({', '.join(names)})" + (f", {ev.temp:.0f} C" if ev.temp else ""), detail)
            else:
                gpu.throttle_run = 0
                if not reasons and (ev.util is None or ev.util >= 50):
                    gpu.clock.add(ev.sm_clock)  # the busy, unthrottled clock is the baseline

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
                if key.startswith("nvlink"):
                    gpu.nvlink_up.pop(int(key[6:]), None)
                out.append(alert.resolved(at=ev.ts, summary=f"resolved: {alert.summary}"))
        return out

    def _gpu_alert(self, node: str, gpu: int, fault: str, key: str, ts: float, severity: str, text: str,
                   detail: dict) -> Alert:
        evidence = {"node": node, "gpu": gpu, "fault": fault, "began_at": round(ts, 3)}
        evidence.update(detail)
        return Alert(id=alert_id("", "gpu_fault", node, gpu, key, round(ts, 3)), status="firing", type="gpu_fault",
                     severity=severity, job="", ranks=(), nodes=(node,), starts_at=ts,
                     summary=f"gpu_fault: GPU {gpu} on {node}: {text}", evidence=evidence)

    def _event_fault(self, gpu: _GpuState, node: str, index: int, key: str, ts: float, text: str,
                     detail: dict) -> list[Alert]:
        gpu.fault_last[key] = ts
        if key in gpu.faults:
            return []
        fault = "xid" if key.startswith("xid") else key
        alert = self._gpu_alert(node, index, fault, key, ts, "critical", text, detail)
        gpu.faults[key] = alert
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
        return self._event_fault(gpu, ev.node, ev.gpu, f"xid{ev.xid}", ev.ts, text, {"xid": ev.xid})

    def tick(self, now: float) -> list[Alert]:
        """Resolve event-based GPU faults (Xid, ECC) not seen again for ``fault_hold_seconds`` of node time."""
        out: list[Alert] = []
        for node in self._nodes.values():
            clock = max(node.last_ts, 0.0)
            for index, gpu in node.gpus.items():
                for key, last in list(gpu.fault_last.items()):
                    if clock - last >= self.fault_hold_seconds:
                        del gpu.fault_last[key]
                        alert = gpu.faults.pop(key, None)
                        if alert is not None:
                            out.append(alert.resolved(at=clock, summary=f"resolved: not seen again for "
                                                                        f"{self.fault_hold_seconds:.0f} s "
                                                                        f"({alert.summary})"))
            # Close spike episodes that have been quiet (keeps `open` small).
            for key in [k for k, ep in node.open.items() if clock - ep.last > EPISODE_GAP]:
                del node.open[key]
        return out


# -- correlation ------------------------------------------------------------------------------


def _hint(category: str, component: str, label: str, gpu: int | None) -> str:
    if category in ("compute", "application"):
        where = f"GPU {gpu}" if gpu is not None else component
        if "/nvlink" in component:
            where += f" {component.split('/', 1)[1].replace('nvlink', 'NVLink ')}"
            label = label.split(" ", 2)[-1] if label.startswith("NVLink") else label
        return f"{category}: {where} {label}"
    return f"{category}: {component} {label}"


class TelemetryCorrelator:
    """Ranks the spikes near an alert's start on its ranks' nodes, GPUs and nearest NICs."""

    def __init__(self, tracker: TelemetryTracker, *, window: float = 60.0, max_causes: int = 5,
                 data_time_ratio: float = 3.0, data_history: int = 20) -> None:
        self.tracker = tracker
        self.window = window
        self.max_causes = max_causes
        self.data_time_ratio = data_time_ratio
        self.data_history = data_history
        # job -> rank -> (node, gpu); job -> rank -> recent data_time values
        self._placement: dict[str, dict[int, tuple[str | None, int | None]]] = {}
        self._data_time: dict[str, dict[int, deque[float]]] = {}

    def observe_step(self, event: StepEvent) -> None:
        self.observe_steps(event.job, [event.rank], [event.node], [event.gpu],
                           [math.nan if event.data_time is None else event.data_time])

    def observe_steps(self, job: str, ranks: list[int], nodes: list, gpus: list, data_times: list[float]) -> None:
        """Where step events of one job ran and their data times, in order (absent data_time: NaN)."""
        placement = self._placement.get(job)
        if placement is None:
            placement = self._placement[job] = {}
        if None not in nodes:
            placement.update(zip(ranks, zip(nodes, gpus)))  # later events win, as one by one
        else:
            for rank, node, gpu in zip(ranks, nodes, gpus):
                if node is not None or gpu is not None:
                    placement[rank] = (node, gpu)
        times = self._data_time.get(job)
        if times is not None and _all_reported(data_times) and times.keys() >= set(ranks):
            # every value reported and every rank's ring exists: append in order, all in C
            deque(map(deque.append, map(times.__getitem__, ranks), data_times), maxlen=0)
            return
        times = None
        for rank, value in zip(ranks, data_times):
            if value == value:  # not NaN: reported
                if times is None:
                    times = self._data_time.setdefault(job, {})
                ring = times.get(rank)
                if ring is None:
                    ring = times[rank] = deque(maxlen=self.data_history)
                ring.append(value)

    def placements(self) -> dict[str, dict[int, tuple[str | None, int | None]]]:
        """job -> rank -> (node, gpu), as the step events said (read only)."""
        return self._placement

    def job_nodes(self, job: str) -> list[str]:
        """The nodes the job's ranks run on (as their step events said)."""
        return sorted({node for node, _ in self._placement.get(job, {}).values() if node is not None})

    def forget_job(self, job: str) -> None:
        self._placement.pop(job, None)
        self._data_time.pop(job, None)

    def placement(self, job: str, rank: int) -> tuple[str | None, int | None]:
        return self._placement.get(job, {}).get(rank, (None, None))

    def data_time_ratio_of(self, job: str, rank: int) -> float | None:
        times = self._data_time.get(job)
        if not times or rank not in times or len(times) < 3:
            return None
        medians = {r: _median(list(ring)) for r, ring in times.items() if ring}
        own = medians.get(rank)
        peers = _median([m for r, m in medians.items() if r != rank])
        if own is None or not peers or peers <= 0:
            return None
        return own / peers

    def suspects(self, alert: Alert, *, at: float | None = None, max_ranks: int = 32) -> list[SuspectedCause]:
        """Ranked suspected causes of ``alert`` (a straggler or hang), best first."""
        t0 = alert.starts_at if at is None else at
        since, until = t0 - self.window, t0 + self.window
        ranks = alert.ranks[:max_ranks]
        targets: dict[str, list[int]] = {}  # node -> the ranks' GPUs there
        for node in alert.nodes:
            targets.setdefault(node, [])
        for rank in ranks:
            node, gpu = self.placement(alert.job, rank)
            if node is not None:
                targets.setdefault(node, [])
                if gpu is not None:
                    targets[node].append(gpu)
        causes: list[SuspectedCause] = []
        for node, gpus in targets.items():
            near_ports: set[tuple[str, int]] | None = set()
            for g in gpus:
                ports = self.tracker.nearest_ports(node, g)
                if ports is None:
                    near_ports = None
                    break
                near_ports.update(ports)
            if not gpus:
                near_ports = None
            by_component: dict[str, list[SpikeEpisode]] = {}
            for ep in self.tracker.spikes(node, since, until):
                by_component.setdefault(ep.component, []).append(ep)
            for component, episodes in by_component.items():
                causes.append(self._cause(node, component, episodes, gpus, near_ports, t0))
        if alert.type == "straggler":
            for rank in ranks:
                ratio = self.data_time_ratio_of(alert.job, rank)
                if ratio is not None and ratio >= self.data_time_ratio:
                    node, _ = self.placement(alert.job, rank)
                    causes.append(SuspectedCause(
                        category="input_pipeline", node=node, component=f"rank{rank}/data_loader",
                        score=4.0 + min(ratio, 11.0), began_at=None, near_rank=True,
                        hint=f"input pipeline: data_time {ratio:.0f}x peers",
                        evidence=({"signal": "data_time", "ratio_to_peers": round(ratio, 2), "rank": rank},)))
        causes.sort(key=lambda c: (-c.score, c.began_at if c.began_at is not None else math.inf, c.component))
        return causes[: self.max_causes]

    def _cause(self, node: str, component: str, episodes: list[SpikeEpisode], gpus: list[int],
               near_ports: set[tuple[str, int]] | None, t0: float) -> SuspectedCause:
        first = episodes[0]
        if first.category == "network":
            near = None if near_ports is None else (first.device, first.port) in near_ports
        else:
            near = None if not gpus else first.gpu in gpus
        locality = 1.0 if near is None else (2.0 if near else (0.6 if first.category == "network" else 0.3))
        scored = []
        for ep in episodes:
            timing = 1.0 if ep.began <= t0 else 0.6  # a cause usually precedes its effect
            magnitude = 1.0 + 0.1 * min(math.log10(1 + max(ep.count, ep.samples)), 5.0)
            scored.append((ep.weight * timing * magnitude, ep))
        scored.sort(key=lambda x: (-x[0], x[1].began))
        best, top = scored[0]
        score = (best + 0.5 * sum(s for s, _ in scored[1:])) * locality
        # The hint names the strongest signal; the evidence lists every signal, strongest first.
        return SuspectedCause(
            category=top.category, node=node, component=component, score=score,
            began_at=min(ep.began for ep in episodes), near_rank=near, gpu=top.gpu, device=top.device,
            port=top.port, hint=_hint(top.category, component, top.label, top.gpu),
            evidence=tuple(ep.to_dict() for _, ep in scored[:8]))


def _median(values: list[float]) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    n = len(ordered)
    return ordered[n // 2] if n % 2 else (ordered[n // 2 - 1] + ordered[n // 2]) / 2


# -- the engine's view ------------------------------------------------------------------------


class TelemetryHub:
    """What the detection engine holds for telemetry: tracker, correlator, and alert enrichment."""

    #: Job-level alerts (comm_slowdown, a communication throughput_drop, a hang with no culprit)
    #: compare all of the job's nodes with each other (models/fabric.py, ``FabricCorrelator.applies``).
    ENRICHED_TYPES = ("straggler", "hang", "comm_slowdown")

    def __init__(self, settings=None, host=None) -> None:
        if settings is None:
            settings = TelemetrySettings()
        if host is None:
            from .host import HostSettings  # host.py builds on this module

            host = HostSettings()
        s = settings
        self.settings = s
        self.tracker = TelemetryTracker(
            baseline_samples=s.baseline_samples, baseline_min_samples=s.baseline_min_samples,
            rate_factor=s.rate_factor, bandwidth_collapse_ratio=s.bandwidth_collapse_ratio,
            clock_drop_ratio=s.clock_drop_ratio, throttle_min_samples=s.throttle_min_samples,
            link_error_window=s.link_error_window, link_error_min_samples=s.link_error_min_samples,
            clear_after=s.clear_after, fault_hold_seconds=s.fault_hold_seconds, app_xids=s.app_xid_set(),
            max_spikes_per_node=s.max_spikes_per_node)
        self.correlator = TelemetryCorrelator(self.tracker, window=s.correlation_window, max_causes=s.max_causes,
                                              data_time_ratio=s.data_time_ratio)
        self.max_updates = s.max_enrichment_updates
        # Job-level alerts (comm_slowdown, ...) are judged against all of the job's nodes (models/fabric.py).
        from .fabric import FabricCorrelator, FabricHistory
        from .link_baseline import LinkBaselines

        baselines = LinkBaselines(half_life=s.link_baseline_half_life, min_samples=s.link_baseline_min_samples)
        self.fabric = FabricCorrelator(FabricHistory(baselines=baselines), window=s.correlation_window)
        #: Job-wide comparisons are costly (every component of every node of the job): an open alert's
        #: is recomputed at most every ``fabric_refresh_seconds`` of the timer's clock, and no longer
        #: once its window has passed (plus a margin for node clocks and ingestion lag).
        self.fabric_refresh_seconds = 10.0
        self._fabric_cache: dict[str, tuple[float, list | None]] = {}
        self._now: float | None = None
        # Host signals (models/host.py) and the device-layer rules (models/device_rules.py).
        from .host import host_hub_parts

        self.host, self.host_correlator = host_hub_parts(s, host)
        from .device_rules import device_rules

        self.devices = device_rules(host, self.correlator.placements)
        # Open enriched alerts: id -> [base alert, signature of its causes, updates published, last version]
        self._open: dict[str, list] = {}
        self.max_open = 10_000

    def process(self, event) -> list[Alert]:
        self.fabric.history.update(event)
        if event.kind == "host":
            return self.host.update(event)
        if event.kind == "gpu":
            return self.tracker.update(event) + self.devices.update(event)
        return self.tracker.update(event)

    def observe_steps(self, job: str, ranks: list[int], nodes: list, gpus: list, data_times: list[float],
                      steps: list[int] = (), step_times: list[float] = ()) -> None:
        self.correlator.observe_steps(job, ranks, nodes, gpus, data_times)
        if steps:
            self.devices.observe_steps(job, steps, step_times)

    def _reference_time(self, alert: Alert) -> float:
        since = alert.evidence.get("stalled_since") if alert.type == "hang" else None
        return float(since) if isinstance(since, (int, float)) else alert.starts_at

    def _job_nodes(self, job: str) -> tuple[str, ...]:
        placed = (node for node, _ in self.correlator._placement.get(job, {}).values() if node is not None)
        return tuple(dict.fromkeys((*placed, *self.fabric.job_nodes(job))))

    def _enriched(self, base: Alert) -> tuple[Alert, tuple]:
        at = self._reference_time(base)
        causes = self.correlator.suspects(base, at=at)
        from .host import merge_causes

        causes = merge_causes(causes, self.host_correlator.suspects(
            base, at=at, placement=self.correlator.placement, job_nodes=self.correlator.job_nodes), self.correlator.max_causes)
        if self.fabric.applies(base):
            return self._enriched_job_wide(base, at, causes)
        rank = 0
        listed = []
        for rank, cause in enumerate(causes, 1):
            listed.append(cause.to_dict(rank))
        hint = causes[0].hint if causes else "unknown"
        evidence = dict(base.evidence)
        evidence["suspected_causes"] = listed
        evidence["cause_hint"] = hint
        signature = tuple((c.component, c.node, c.category) for c in causes)
        return replace(base, summary=f"{base.summary}; suspected cause: {hint}", evidence=evidence), signature

    def _enriched_job_wide(self, base: Alert, at: float, own: list[SuspectedCause]) -> tuple[Alert, tuple]:
        """A job-level alert: the job's nodes compared with each other (models/fabric.py); with too few
        nodes to compare, every spike on any of them near the onset is a candidate."""
        nodes = self._job_nodes(base.job)
        found = self._fabric_suspects(base, nodes, at)
        host = [c for c in own if c.category == "host"]  # host signals (models/host.py) judged on their own
        if found is None:
            wide = replace(base, nodes=tuple(dict.fromkeys((*base.nodes, *nodes))), ranks=())
            causes = self.correlator.suspects(wide, at=at) + host
        else:
            causes = [s.cause() for s in found]
            seen = {(c.node, c.component) for c in causes}
            # Spikes near the ranks it names (ranks that stood out); a hang's listed ranks are all waiting.
            causes += [c for c in (own if base.type != "hang" else host) if (c.node, c.component) not in seen]
        causes = causes[: self.correlator.max_causes]
        listed = [c.to_dict(i) for i, c in enumerate(causes, 1)]
        hint = causes[0].hint if causes else "unknown"
        evidence = dict(base.evidence)
        evidence["suspected_causes"] = listed
        evidence["cause_hint"] = hint
        evidence["nodes_compared"] = len(nodes)
        named = tuple(c.node for c in causes[:1] if c.node) if found else ()
        signature = tuple((c.component, c.node, c.category) for c in causes)
        return replace(base, nodes=tuple(dict.fromkeys((*named, *base.nodes))), evidence=evidence,
                       summary=f"{base.summary}; suspected cause: {hint}"), signature

    def _fabric_suspects(self, base: Alert, nodes: tuple[str, ...], at: float) -> list | None:
        cached = self._fabric_cache.get(base.id)
        now = self._now
        if cached is not None and now is not None and (
                now - cached[0] < self.fabric_refresh_seconds or cached[0] > at + 2 * self.fabric.window + 60.0):
            return cached[1]
        found = self.fabric.suspects(nodes, at)
        if len(self._fabric_cache) >= self.max_open:
            self._fabric_cache.pop(next(iter(self._fabric_cache)))
        self._fabric_cache[base.id] = (now if now is not None else at, found)
        return found

    def enrich(self, alerts: list[Alert]) -> list[Alert]:
        """Add ``suspected_causes`` (and a hint in the summary) to straggler, hang and comm alerts."""
        if not alerts:
            return alerts
        out = []
        for alert in alerts:
            if (alert.type not in self.ENRICHED_TYPES and not self.host_correlator.enriches(alert)
                    and not self.fabric.applies(alert)):
                out.append(alert)
                continue
            if alert.status == "firing":
                enriched, signature = self._enriched(alert)
                if not signature and not self.tracker.events_seen and not self.host.events_seen:
                    enriched = alert  # no agent deployed (yet) and no other clue: left as it is
                if len(self._open) >= self.max_open:
                    self._open.pop(next(iter(self._open)))
                self._open[alert.id] = [alert, signature, 0, enriched]
                out.append(enriched)
            else:
                entry = self._open.pop(alert.id, None)
                self._fabric_cache.pop(alert.id, None)
                if (entry is not None and "suspected_causes" not in alert.evidence
                        and "suspected_causes" in entry[3].evidence):
                    last = entry[3]
                    evidence = dict(alert.evidence)
                    evidence["suspected_causes"] = last.evidence.get("suspected_causes", [])
                    evidence["cause_hint"] = last.evidence.get("cause_hint", "unknown")
                    alert = replace(alert, evidence=evidence)
                out.append(alert)
        return out

    def refresh(self) -> list[Alert]:
        """New versions (still firing, same id) of open alerts whose suspected causes changed."""
        out = []
        for alert_id_, entry in list(self._open.items()):
            base, signature, updates, _ = entry
            if updates >= self.max_updates:
                continue
            enriched, new_signature = self._enriched(base)
            if new_signature != signature:
                entry[1], entry[2], entry[3] = new_signature, updates + 1, enriched
                out.append(enriched)
        return out

    def tick(self, now: float) -> list[Alert]:
        self._now = now
        if self.devices.watching:
            self.devices.rebuild()  # ranks placed or moved since: gpu_idle/hbm_full see them
        return self.tracker.tick(now) + self.refresh()


def _all_reported(values) -> bool:
    """No NaN (absent) among ``values`` (floats)."""
    return not any(map(math.isnan, values))
