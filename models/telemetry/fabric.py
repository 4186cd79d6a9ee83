"""The network layer: which node, port or NVLink a job-wide slowdown or fabric hang points at.

A ring or tree all-reduce runs at the speed of its slowest link, so one degraded port slows
**every** rank's collectives: no rank is a straggler, ``comm_slowdown`` (or a
``throughput_drop`` of the communication layer) fires, or the whole job waits in one
collective (a ``hang`` whose culprit is undetermined). The slow ranks say nothing about
where the problem is; the node telemetry of the job's nodes does.

:class:`FabricHistory` keeps, per node and component (``mlx5_2/1``, ``gpu3``,
``gpu3/nvlink2``), a bounded history of per-sample features computed from the agent's raw
counters: error-counter increases, ``port_xmit_wait`` rate, data rate, link rate, port
state, NVLink error increases and throughput, PCIe downgrade, Xids.

:class:`FabricCorrelator` judges, for one job-level alert, every node of the job against
**the other nodes of the same job over the same window** (a robust peer comparison, like the
straggler rule): for each feature, the node's value in the window around the onset is
compared with the median of its peers (the same component name on the other nodes where
they have it, else all their components), in units of the peers' normal-scaled median
absolute deviation floored per feature. A value ``z_threshold`` spreads beyond the peers
stands out. A fabric-wide congestion lifts every node's transmit wait and lowers every
node's data rate together: the peers' median moves with it and nobody stands out.

Clocks: every comparison is over a window of ``window`` seconds (default 60) on each side of
the alert's reference time, read on each node's own clock; node clocks seconds apart (broken
NTP) shift a window by seconds out of minutes. No two hosts' timestamps are subtracted.
"""

from __future__ import annotations

import math
from array import array
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..alert_types import AlertType
from ..alerts import Alert
from ..evidence import HangCase, HangEvidence
from ..jobhealth.throughput import Layer, ThroughputEvidence
from .causes import SuspectedCause
from .counters import CounterLayout, CounterLayouts, CounterTrack
from .link_baseline import BASELINE_FEATURES, LinkBaselines
from ..wire.telemetry_events import GpuEvent, LinkEvent, XidEvent
from .telemetry_tracker import ERROR_COUNTERS


@dataclass(frozen=True, slots=True)
class Feature:
    """How one per-sample feature is aggregated over a window and judged against peers."""

    name: str
    label: str
    higher_is_worse: bool
    aggregate: str  # sum | mean | max | min
    floor: float  # smallest spread (absolute units): a smaller difference never stands out
    rel_floor: float  # smallest spread as a fraction of the peers' median
    weight: float
    category: str = "network"
    unit: str = ""


#: Features in the order they are reported.
FEATURES: dict[str, Feature] = {f.name: f for f in (
    Feature("link_down", "port down", True, "max", 0.2, 0.0, 9.0),
    Feature("link_errors", "link error counters", True, "sum", 1.0, 0.1, 6.0, unit="errors"),
    Feature("link_rate", "link rate", False, "min", 5.0, 0.05, 6.0, unit="Gb/s"),
    Feature("xmit_wait", "transmit wait", True, "mean", 1000.0, 0.25, 4.0, unit="ticks/s"),
    Feature("data_rate", "data rate", False, "mean", 1e8, 0.15, 1.5, unit="B/s"),
    Feature("xid", "Xid events", True, "sum", 0.2, 0.0, 8.0, category="compute"),
    Feature("nvlink_down", "NVLink down", True, "max", 0.2, 0.0, 8.0, category="compute"),
    Feature("nvlink_errors", "NVLink CRC/replay/recovery errors", True, "sum", 1.0, 0.1, 5.0, category="compute",
            unit="errors"),
    Feature("nvlink_rate", "NVLink throughput", False, "mean", 1e8, 0.15, 1.5, category="compute", unit="B/s"),
    Feature("pcie_downgrade", "PCIe link downgraded", True, "max", 0.2, 0.0, 4.0, category="compute"),
)}
#: Throughput features that must also have fallen against the component's own earlier level.
CHANGE_FEATURES = frozenset({"data_rate", "nvlink_rate"})


#: Features each kind of component records, in column order.
PORT_FEATURES = ("link_errors", "xmit_wait", "data_rate", "link_down", "link_rate")
GPU_FEATURES = ("pcie_downgrade", "xid", "nvlink_rate")
NVLINK_FEATURES = ("nvlink_errors", "nvlink_down")


class _Component:
    """One component's recent samples: a ring of rows ``(ts, feature...)`` (NaN: not in that sample)."""

    __slots__ = ("features", "rows", "n", "tracks", "size", "width", "layout", "err_values", "quiet_ts")

    def __init__(self, features: tuple[str, ...], size: int) -> None:
        self.features = features
        self.size = size
        self.width = 1 + len(features)
        # The rows end to end in C doubles, grown as samples come (up to ``size`` rows, then a ring): a component
        # heard from once (2,000 forged nodes' GPUs and ports) holds one row, not the whole ring (issue 44: 296 MiB
        # for 16,000 components). A sample is one append, not a NumPy row write; reads (an alert's windows) copy.
        self.rows = array("d")
        self.n = 0  # rows written so far
        self.tracks: dict[str, CounterTrack] | None = None  # from the first counter on (most components have few)
        #: A port's counters in its sample before (``CounterLayouts``; None until its second sample) and its error
        #: counters' values then: a quiet sample is checked against these in two C calls. ``quiet_ts``: the time of
        #: that sample, each of those error counters' time (their tracks' ``ts`` are caught up before they are read).
        self.layout: CounterLayout | None = None
        self.err_values: Any = None
        self.quiet_ts = 0.0

    def delta(self, name: str, value: int, ts: float) -> tuple[int | None, float | None]:
        tracks = self.tracks
        if tracks is None:
            tracks = self.tracks = {}
        track = tracks.get(name)
        if track is None:
            track = tracks[name] = CounterTrack()
        return track.update(value, ts)

    def add(self, ts: float, values: dict[str, float]) -> None:
        get = values.get
        self.add_row((ts, *[get(name, math.nan) for name in self.features]))

    def add_row(self, row: tuple[float, ...]) -> None:
        """One sample: ``(ts, feature...)`` in ``features``' order (NaN: not in it)."""
        if self.n < self.size:
            self.rows.extend(row)
        else:
            at = (self.n % self.size) * self.width
            self.rows[at:at + self.width] = array("d", row)
        self.n += 1

    def table(self) -> np.ndarray:
        """The rows written (oldest first until the ring wraps), one per sample: a copy."""
        return np.frombuffer(self.rows, dtype=np.float64).reshape(-1, self.width).copy()

    def window(self, since: float, until: float) -> dict[str, tuple[float, float]]:
        rows = self.table()
        ts = rows[:, 0]
        sel = rows[(ts >= since) & (ts <= until)]
        out = {}
        for j, name in enumerate(self.features, 1):
            values = sel[:, j]
            ok = ~np.isnan(values)
            if ok.any():
                out[name] = _aggregate(FEATURES[name], sel[ok, 0], values[ok])
        return out

    def levels(self, since: float, until: float) -> dict[str, tuple[float, float]]:
        """Like :meth:`window` for the baselined features, counts (sums) as per-second rates."""
        out = {}
        for name, (value, began) in self.window(since, until).items():
            if name not in BASELINE_FEATURES:
                continue
            if FEATURES[name].aggregate == "sum":
                rows = self.table()
                j = 1 + self.features.index(name)
                sel = rows[(rows[:, 0] >= since) & (rows[:, 0] <= until) & ~np.isnan(rows[:, j]), 0]
                if len(sel) < 2 or sel.max() <= sel.min():
                    continue
                # n samples cover about n intervals of the node's own clock
                value = value / ((sel.max() - sel.min()) * len(sel) / (len(sel) - 1))
            out[name] = (value, began)
        return out


class FabricHistory:
    """Per node and component, the recent per-sample features; feed telemetry in time order per node.

    Bounded: ``max_samples`` rows per component (a ring; 400 one-second samples cover an alert's
    windows), ports and GPUs always, an NVLink only once it logged errors or went down (the others'
    throughput is summed per GPU), at most ``max_nodes`` nodes. About 30 kB per port or GPU.
    """

    def __init__(self, *, max_samples: int = 400, max_nodes: int = 100_000,
                 baselines: LinkBaselines | None = None) -> None:
        self.max_samples = max_samples
        self.max_nodes = max_nodes
        #: Long-lived per-component baselines (models/telemetry/link_baseline.py), learned from the same samples.
        self.baselines = baselines
        self._nodes: dict[str, dict[str, _Component]] = {}
        self._last: dict[str, float] = {}
        self._nvlink_tracks: dict[tuple[str, int], dict[int, tuple[CounterTrack, CounterTrack]]] = {}
        #: Samples taken so far: a comparison that found too few nodes to compare is worth repeating once
        #: this moved on (telemetry that arrived after the alert: models/telemetry/telemetry_hub.py).
        self.samples = 0
        self._layouts = CounterLayouts(ERROR_COUNTERS, ("port_xmit_wait",))

    def _component(self, node: str, name: str, features: tuple[str, ...]) -> _Component:
        comps = self._nodes.get(node)
        if comps is None:
            if len(self._nodes) >= self.max_nodes:  # memory bound: forget the quietest node
                oldest = min(self._last, key=self._last.__getitem__)
                self._nodes.pop(oldest, None)
                self._last.pop(oldest, None)
            comps = self._nodes[node] = {}
        comp = comps.get(name)
        if comp is None:
            comp = comps[name] = _Component(features, self.max_samples)
        return comp

    def update(self, event) -> None:
        if isinstance(event, LinkEvent):
            self._link(event)
        elif isinstance(event, GpuEvent):
            self._gpu(event)
        elif isinstance(event, XidEvent):
            self._component(event.node, f"gpu{event.gpu}", GPU_FEATURES).add(event.ts, {"xid": 1.0})
        else:
            return
        self.samples += 1
        last = self._last.get(event.node, 0.0)
        self._last[event.node] = event.ts if event.ts > last else last

    def update_links(self, cols, lo: int, hi: int) -> None:
        """Rows ``lo:hi`` of ``cols`` (``LinkColumns``), link samples of one or more nodes' runs: ``update`` of each in
        turn."""
        sample = self._port_sample
        observe = self.baselines.observe_port if self.baselines is not None else None
        nan = math.nan
        node = None
        comps = None
        newest = 0.0
        for who, ts, device, port, state, rate, counters in zip(cols.node[lo:hi], cols.ts[lo:hi], cols.device[lo:hi],
                                                               cols.port[lo:hi], cols.state[lo:hi], cols.rate[lo:hi],
                                                               cols.counters[lo:hi]):
            if who != node:  # the next node's run: the one before is the latest heard of (``update``'s ``_last``)
                if node is not None:
                    self._heard(node, newest)
                node, newest = who, ts
                comps = self._nodes.get(node)
            elif ts > newest:
                newest = ts
            where = f"{device}/{port}"
            comp = comps.get(where) if comps is not None else None
            layout = comp.layout if comp is not None else None
            if (layout is None or state != "ACTIVE" or tuple(counters) != layout.names
                    or layout.values(counters) != comp.err_values):
                sample(node, ts, device, port, state, rate, counters)
                comps = self._nodes.get(node)  # (a node first heard of, or another one forgotten)
                continue
            # ``_port_sample`` of the usual sample: up, its counters as in its sample before, no error counter moved
            # moved: no errors, an error rate of 0.0 (one time behind every error counter), the transmit wait and
            # data rates, the row, the baselines
            err_rate = 0.0 if layout.errors and ts - comp.quiet_ts >= 0.2 else None
            comp.quiet_ts = ts
            wait = nan
            if layout.rated:  # port_xmit_wait
                _, per_s = comp.delta("port_xmit_wait", counters["port_xmit_wait"], ts)
                if per_s is not None:
                    wait = per_s
            data = nan
            xmit, rcv = counters.get("port_xmit_data"), counters.get("port_rcv_data")
            if xmit is not None and rcv is not None:
                track = comp.tracks.get("data")
                total = xmit + rcv
                prev = track.value if track is not None else None
                if prev is not None and total >= prev:
                    dt = ts - track.ts
                    track.value, track.ts = total, ts
                    if dt >= 0.2:
                        data = (total - prev) / dt * 4
                else:
                    _, per_s = comp.delta("data", total, ts)
                    if per_s is not None:
                        data = per_s * 4
            link_rate = float(rate) if rate else nan
            if comp.n < comp.size:  # ``add_row`` while the ring grows (the usual case), inline
                comp.rows.extend((ts, 0.0, wait, data, 0.0, link_rate))  # PORT_FEATURES' order
                comp.n += 1
            else:
                comp.add_row((ts, 0.0, wait, data, 0.0, link_rate))
            if observe is not None:
                observe(node, where, ts, err_rate, wait, link_rate)  # (NaN, None: not in the sample)
        if node is not None:
            self._heard(node, newest)
        self.samples += hi - lo

    def _heard(self, node: str, ts: float) -> None:
        last = self._last.get(node, 0.0)
        self._last[node] = ts if ts > last else last

    def _link(self, ev: LinkEvent) -> None:
        self._port_sample(ev.node, ev.ts, ev.device, ev.port, ev.state, ev.rate, ev.counters)

    def _port_sample(self, node: str, ts: float, device: str, port: int, state: str | None, rate: float | None,
                     counters: dict[str, int]) -> None:
        """One link sample's features (``update`` of a ``LinkEvent``; ``update_links`` of a column batch's row)."""
        where = f"{device}/{port}"
        comps = self._nodes.get(node)
        comp = comps.get(where) if comps is not None else None
        if comp is None:
            comp = self._component(node, where, PORT_FEATURES)
        tracks = comp.tracks
        if tracks is None:
            tracks = comp.tracks = {}
        errors = 0
        err_rate: float | None = None
        wait = math.nan
        layout = comp.layout
        if layout is not None and tuple(counters) == layout.names and layout.values(counters) == comp.err_values:
            # the quiet sample: the same counters as the component's sample before (so one time behind every error
            # counter) and none moved: the loop below would add 0 / dt of each to the error rate, 0.0
            if layout.errors and ts - comp.quiet_ts >= 0.2:
                err_rate = 0.0
            comp.quiet_ts = ts
            if layout.rated:  # port_xmit_wait
                _, per_s = comp.delta("port_xmit_wait", counters["port_xmit_wait"], ts)
                if per_s is not None:
                    wait = per_s
        else:
            if layout is not None:  # the error counters' time, kept once for all of them while quiet
                for name in layout.errors:
                    tracks[name].ts = comp.quiet_ts
            fresh = False  # a counter heard for the first time (a component heard once keeps no layout)
            for name, value in counters.items():
                if name in ERROR_COUNTERS:
                    track = tracks.get(name)
                    if track is None:
                        track = tracks[name] = CounterTrack()
                        fresh = True
                    prev = track.value
                    if prev is not None and value >= prev:  # the usual sample: ``CounterTrack.update``'s first branch
                        dt = ts - track.ts
                        track.value, track.ts = value, ts
                        delta = value - prev
                        if delta:
                            errors += delta
                        if dt >= 0.2:
                            err_rate = (err_rate or 0.0) + delta / dt
                        continue
                    delta, err = track.update(value, ts)
                    if delta:
                        errors += delta
                    if err is not None:
                        err_rate = (err_rate or 0.0) + err
                elif name == "port_xmit_wait":
                    if name not in tracks:
                        fresh = True
                    _, per_s = comp.delta(name, value, ts)
                    if per_s is not None:
                        wait = per_s
            layout = None if fresh else self._layouts.of(counters)
            comp.layout = layout
            if layout is not None:
                comp.err_values = layout.values(counters)
                comp.quiet_ts = ts
        data = math.nan
        xmit, rcv = counters.get("port_xmit_data"), counters.get("port_rcv_data")
        if xmit is not None and rcv is not None:
            # PMA data counters count 4-byte words.
            track = tracks.get("data")
            total = xmit + rcv
            prev = track.value if track is not None else None
            if prev is not None and total >= prev:  # the usual sample, inline
                dt = ts - track.ts
                track.value, track.ts = total, ts
                if dt >= 0.2:
                    data = (total - prev) / dt * 4
            else:
                _, per_s = comp.delta("data", total, ts)
                if per_s is not None:
                    data = per_s * 4
        down = state is not None and state != "ACTIVE" and state.upper() != "ACTIVE"
        link_rate = float(rate) if rate and not down else math.nan
        comp.add_row((ts, float(errors), wait, data, 1.0 if down else 0.0, link_rate))  # PORT_FEATURES' order
        if self.baselines is not None:
            learn = {"link_errors": err_rate} if err_rate is not None else {}
            if wait == wait:  # not NaN
                learn["xmit_wait"] = wait
            if link_rate == link_rate:
                learn["link_rate"] = link_rate
            self.baselines.observe(node, where, ts, learn)

    def _gpu(self, ev: GpuEvent) -> None:
        gpu = self._component(ev.node, f"gpu{ev.gpu}", GPU_FEATURES)
        down = (ev.pcie_width is not None and ev.pcie_width_max and ev.pcie_width < ev.pcie_width_max) or (
            ev.pcie_gen is not None and ev.pcie_gen_max and ev.pcie_gen < ev.pcie_gen_max
            and ev.util is not None and ev.util >= 50)  # idle GPUs lower their PCIe generation to save power
        # Xid events add 1: a GPU sample without one is a zero to compare with.
        feats: dict[str, float] = {"pcie_downgrade": 1.0 if down else 0.0, "xid": 0.0}
        nv_rate = 0.0
        nv_rates = 0
        nv_err_rate: float | None = None
        baselines = self.baselines
        per_gpu = self._nvlink_tracks.get((ev.node, ev.gpu))
        if per_gpu is None and ev.nvlinks:  # a GPU whose samples list no NVLinks keeps no dict for them
            per_gpu = self._nvlink_tracks[(ev.node, ev.gpu)] = {}
        known = self._nodes.get(ev.node, {})
        for link in ev.nvlinks:
            n = link["link"]
            tracks = per_gpu.get(n)
            if tracks is None:
                tracks = per_gpu[n] = (CounterTrack(), CounterTrack())
            errors = 0
            if "crc_errors" in link or "replay_errors" in link or "recovery_errors" in link:
                # One track of the three counters' sum: a reset of any shows as a decrease, as for one.
                delta, err_rate = tracks[0].update(link.get("crc_errors", 0) + link.get("replay_errors", 0)
                                                   + link.get("recovery_errors", 0), ev.ts)
                errors = delta or 0
                if err_rate is not None:
                    nv_err_rate = (nv_err_rate or 0.0) + err_rate
            if "tx_bytes" in link and "rx_bytes" in link:
                _, rate = tracks[1].update(link["tx_bytes"] + link["rx_bytes"], ev.ts)
                if rate is not None:
                    nv_rate += rate
                    nv_rates += 1
            down = link.get("up") is False
            if errors or down or (known and f"gpu{ev.gpu}/nvlink{n}" in known):
                # a link is tracked on its own from its first error or drop on
                self._component(ev.node, f"gpu{ev.gpu}/nvlink{n}", NVLINK_FEATURES).add(
                    ev.ts, {"nvlink_errors": float(errors), "nvlink_down": 1.0 if down else 0.0})
                if baselines is not None and err_rate is not None:
                    baselines.observe(ev.node, f"gpu{ev.gpu}/nvlink{n}", ev.ts, {"nvlink_errors": err_rate})
        if nv_rates:
            feats["nvlink_rate"] = nv_rate
        gpu.add(ev.ts, feats)
        if baselines is not None and nv_err_rate is not None:
            # The GPU's NVLinks together: a bound for each link that has no baseline of its own yet.
            baselines.observe(ev.node, f"gpu{ev.gpu}", ev.ts, {"nvlink_errors": nv_err_rate})

    def window(self, node: str, since: float, until: float) -> dict[str, dict[str, tuple[float, float]]]:
        """``component -> feature -> (aggregate, first ts of a bad-looking sample)`` over ``[since, until]``."""
        out: dict[str, dict[str, tuple[float, float]]] = {}
        for name, comp in self._nodes.get(node, {}).items():
            values = comp.window(since, until)
            if values:
                out[name] = values
        return out

    def levels(self, node: str, since: float, until: float) -> dict[str, dict[str, tuple[float, float]]]:
        """Like :meth:`window` for the baselined features, counts as per-second rates."""
        out: dict[str, dict[str, tuple[float, float]]] = {}
        for name, comp in self._nodes.get(node, {}).items():
            values = comp.levels(since, until)
            if values:
                out[name] = values
        return out


def _aggregate(feature: Feature, ts: np.ndarray, values: np.ndarray) -> tuple[float, float]:
    how = feature.aggregate
    agg = float(values.sum() if how == "sum" else values.max() if how == "max" else values.min() if how == "min"
                else values.mean())
    # When the feature first looked like its worst: the earliest sample at least halfway there.
    if feature.higher_is_worse:
        marks = ts[(values > 0) & (values >= (agg if how != "sum" else 0) * 0.5)]
    else:
        marks = ts[values <= agg * 1.5 + 1e-9] if how == "min" else ts[:0]
    return agg, (float(marks.min()) if len(marks) else math.nan)


@dataclass(frozen=True, slots=True)
class Moved:
    """One feature of one component that stands out from the job's other nodes."""

    feature: str
    value: float
    peer_median: float
    z: float
    began: float
    #: What it was judged against: ``peers`` (the job's other nodes now) or ``baseline`` (its own
    #: or the fleet's usual level, models/telemetry/link_baseline.py; ``peer_median`` is then that level).
    reference: str = "peers"
    basis: str = ""  # own | fleet, for a baseline

    def describe(self) -> str:
        f = FEATURES[self.feature]
        if f.aggregate == "max":
            return f.label
        if self.reference == "baseline":
            whose = "its baseline" if self.basis == "own" else "fleet baseline"
            if f.aggregate == "sum":
                return f"{f.label} {self.value:.3g}/s ({whose} {self.peer_median:.2g}/s)"
            if f.higher_is_worse and self.peer_median > 0:
                return f"{f.label} {self.value / self.peer_median:.1f}x {whose}"
            return f"{f.label} {_num(self.value, f.unit)} vs {whose} {_num(self.peer_median, f.unit)}"
        if f.aggregate == "sum":
            return f"{f.label} +{self.value:.0f} (peers {self.peer_median:.0f})"
        if self.peer_median > 0:
            ratio = self.value / self.peer_median
            if f.higher_is_worse:
                return f"{f.label} {ratio:.1f}x peers" if ratio < 1e4 else f"{f.label} far above peers"
            return f"{f.label} {_num(self.value, f.unit)} vs peers {_num(self.peer_median, f.unit)}"
        return f"{f.label} {_num(self.value, f.unit)} (peers {_num(self.peer_median, f.unit)})"

    def to_dict(self) -> dict[str, Any]:
        f = FEATURES[self.feature]
        out: dict[str, Any] = {"signal": self.feature, "what": self.describe(), "reference": self.reference}
        if self.reference == "baseline":
            out.update({"baseline": self.basis, "value": _round(self.value), "baseline_value": _round(self.peer_median)})
            if f.aggregate == "sum":
                out["per_second"] = True
        else:
            out.update({"value": _round(self.value), "peer_median": _round(self.peer_median)})
        out["robust_z"] = round(min(self.z, 1e6), 2)
        if f.unit:
            out["unit"] = f.unit
        if not math.isnan(self.began):
            out["began_at"] = round(self.began, 3)
        return out


@dataclass(frozen=True, slots=True)
class FabricSuspect:
    node: str
    component: str
    score: float
    moved: tuple[Moved, ...] = field(default_factory=tuple)

    @property
    def category(self) -> str:
        return FEATURES[self.moved[0].feature].category

    def hint(self) -> str:
        where = self.component
        if "/nvlink" in where:
            gpu, link = where.split("/", 1)
            where = f"GPU {gpu[3:]} {link.replace('nvlink', 'NVLink ')}"
        elif where.startswith("gpu"):
            where = f"GPU {where[3:]}"
        return f"{self.category}: {where} on {self.node}: " + ", ".join(m.describe() for m in self.moved[:3])

    def cause(self) -> SuspectedCause:
        began = [m.began for m in self.moved if not math.isnan(m.began)]
        gpu = device = port = None
        if self.component.startswith("gpu"):
            gpu = int(self.component.split("/", 1)[0][3:])
        elif "/" in self.component:
            device, p = self.component.rsplit("/", 1)
            port = int(p) if p.isdigit() else None
        return SuspectedCause(category=self.category, node=self.node, component=self.component,
                              score=self.score, began_at=min(began) if began else None, hint=self.hint(),
                              gpu=gpu, device=device, port=port,
                              evidence=tuple({"peer_comparison": m.reference == "peers", **m.to_dict()}
                                             for m in self.moved))


class FabricCorrelator:
    """Peer comparison of a job's nodes' telemetry around a job-level alert.

    Hyperparameters:

    * ``window``: seconds on each side of the alert's reference time (each node's own clock);
    * ``z_threshold``: robust z (spreads beyond the peers' median) a feature must reach to stand out;
    * ``min_nodes``: nodes with telemetry a comparison needs (fewer: every spike of the job's
      nodes is a candidate, as for a straggler on its own node);
    * ``max_share``: a feature that stands out on more than this share of the nodes is
      fabric-wide and names nobody;
    * ``max_suspects``: how many candidates are kept;
    * ``before``: seconds before the window a throughput feature's own earlier level is read from;
    * ``baseline_z``: with too few nodes to compare, spreads beyond its own or the fleet's baseline
      (``history.baselines``, models/telemetry/link_baseline.py) a link rate must reach to stand out.
    """

    def __init__(self, history: FabricHistory, *, window: float = 60.0, z_threshold: float = 5.0,
                 min_nodes: int = 3, max_share: float = 0.25, max_suspects: int = 3, before: float = 120.0,
                 baseline_z: float = 5.0) -> None:
        self.history = history
        self.baseline_z = baseline_z
        self.window = window
        self.z_threshold = z_threshold
        self.min_nodes = min_nodes
        self.max_share = max_share
        self.max_suspects = max_suspects
        self.before = before
        self._job_nodes: dict[str, dict[str, None]] = {}

    # -- which nodes a job runs on (from its ranks' ``node`` fields) ----------------------------

    def observe_node(self, job: str, node: str | None) -> None:
        if node is None:
            return
        nodes = self._job_nodes.get(job)
        if nodes is None:
            nodes = self._job_nodes[job] = {}
        if node not in nodes:
            nodes[node] = None

    def job_nodes(self, job: str) -> tuple[str, ...]:
        return tuple(self._job_nodes.get(job, ()))

    def jobs(self) -> tuple[str, ...]:
        """The jobs whose nodes are known, in the order first seen."""
        return tuple(self._job_nodes)

    def forget_job(self, job: str) -> None:
        self._job_nodes.pop(job, None)

    @staticmethod
    def applies(alert: Alert) -> bool:
        """Job-level alerts whose cause may sit on any node of the job."""
        if alert.type == AlertType.COMM_SLOWDOWN:
            return True
        if alert.type == AlertType.THROUGHPUT_DROP:
            return ThroughputEvidence.layer_of(alert) is Layer.COMMUNICATION
        if alert.type == AlertType.HANG:
            return HangEvidence.of(alert).case is HangCase.UNDETERMINED
        return False

    # -- the comparison -------------------------------------------------------------------------

    def suspects(self, nodes: tuple[str, ...], at: float) -> list[FabricSuspect] | None:
        """Components of ``nodes`` that stand out from the other nodes around ``at``, best first;
        None when too few nodes have telemetry to compare."""
        since, until = at - self.window, at + self.window
        windows = {n: w for n in nodes if (w := self.history.window(n, since, until))}
        if len(windows) < self.min_nodes:
            # Too few peers: each node against its own and the fleet's usual level (seed 003's
            # slow-node baseline); nothing there leaves the caller's fallback (spikes near the onset).
            return self._baseline_suspects(tuple(windows), since, until)
        # feature -> component name -> node -> value, and feature -> node -> pooled values
        by_comp: dict[str, dict[str, dict[str, float]]] = {}
        for node, comps in windows.items():
            for comp, feats in comps.items():
                for f, (value, _) in feats.items():
                    by_comp.setdefault(f, {}).setdefault(comp, {})[node] = value
        flagged: dict[tuple[str, str], list[Moved]] = {}
        for f, comps in by_comp.items():
            feature = FEATURES[f]
            hits: dict[tuple[str, str], Moved] = {}
            # Errors and flags not recorded on a node with telemetry are zero there (an NVLink is only
            # tracked once it erred); rates not recorded are unknown.
            zero_fill = feature.higher_is_worse and feature.aggregate in ("sum", "max")
            for comp, per_node in comps.items():
                for node, value in per_node.items():
                    if zero_fill:
                        peers = [per_node.get(n, 0.0) for n in windows if n != node]
                    else:
                        peers = [v for n, v in per_node.items() if n != node]
                    if len(peers) + 1 < self.min_nodes:  # pooled: the same feature of any component elsewhere
                        peers = [v for c in comps.values() for n, v in c.items() if n != node]
                    if len(peers) + 1 < self.min_nodes:
                        continue
                    z, med = _robust_z(feature, value, peers)
                    if z >= self.z_threshold and (f not in CHANGE_FEATURES or self._dropped(node, comp, f, value, at)):
                        hits[(node, comp)] = Moved(f, value, med, z, windows[node][comp][f][1])
            # Standing out on many nodes at once is the fabric (or the job) itself, not one node.
            if len({node for node, _ in hits}) > max(1, self.max_share * len(windows)):
                continue
            for key, moved in hits.items():
                flagged.setdefault(key, []).append(moved)
        return self._ranked(flagged)

    def _ranked(self, flagged: dict[tuple[str, str], list[Moved]]) -> list[FabricSuspect]:
        out = []
        for (node, comp), moved in flagged.items():
            moved.sort(key=lambda m: -FEATURES[m.feature].weight * (1 + math.log10(min(m.z, 1e6))))
            score = sum(FEATURES[m.feature].weight * (1 + math.log10(min(m.z, 1e6))) for m in moved)
            out.append(FabricSuspect(node=node, component=comp, score=score, moved=tuple(moved)))
        out.sort(key=lambda s: (-s.score, s.node, s.component))
        return out[: self.max_suspects]

    def _baseline_suspects(self, nodes: tuple[str, ...], since: float, until: float) -> list[FabricSuspect] | None:
        """Components of ``nodes`` whose link rates stand out from their own or the fleet's baseline; None
        when nothing does (the caller falls back to spikes near the onset, which name no node: a port
        down in a small job's hang is still found there)."""
        baselines = self.history.baselines
        if baselines is None or not nodes:
            return None
        hits: dict[str, dict[tuple[str, str], Moved]] = {}
        for node in nodes:
            for comp, feats in self.history.levels(node, since, until).items():
                fallback = comp.split("/", 1)[0] if "/nvlink" in comp else None
                for f, (value, began) in feats.items():
                    j = baselines.judge(node, comp, f, value, fallback=fallback)
                    if j is not None and j.z >= self.baseline_z:
                        hits.setdefault(f, {})[(node, comp)] = Moved(f, value, j.baseline, j.z, began,
                                                                     reference="baseline", basis=j.reference)
        flagged: dict[tuple[str, str], list[Moved]] = {}
        for f, found in hits.items():
            # Off its baseline on many of the job's nodes at once: the fabric (congestion), not one node.
            if len({node for node, _ in found}) > max(1, self.max_share * len(nodes)):
                continue
            for key, moved in found.items():
                flagged.setdefault(key, []).append(moved)
        return self._ranked(flagged) or None


    def _dropped(self, node: str, comp: str, feature: str, value: float, at: float) -> bool:
        """Whether a throughput feature fell against the component's own level before the window: a port
        or NVLink the job just does not use (idle before and after) is not a cause."""
        before = self.history.window(node, at - self.window - self.before, at - self.window).get(comp, {})
        if feature not in before:
            return True  # no history before: judged on its peers alone
        f = FEATURES[feature]
        was = before[feature][0]
        return was - value >= max(f.floor, f.rel_floor * abs(was))


def _robust_z(feature: Feature, value: float, peers: list[float]) -> tuple[float, float]:
    ordered = sorted(peers)
    med = _median(ordered)
    mad = _median(sorted(abs(v - med) for v in ordered)) / 0.6744897501960817
    spread = max(mad, feature.floor, feature.rel_floor * abs(med), 1e-12)
    diff = value - med if feature.higher_is_worse else med - value
    return diff / spread, med


def _median(ordered: list[float]) -> float:
    n = len(ordered)
    return ordered[n // 2] if n % 2 else (ordered[n // 2 - 1] + ordered[n // 2]) / 2


def _round(value: float) -> float:
    return round(value, 3) if abs(value) < 1e6 else float(f"{value:.4g}")


def _num(value: float, unit: str) -> str:
    if unit == "B/s":
        return f"{value / 1e9:.2f} GB/s"
    if unit == "Gb/s":
        return f"{value:.0f} Gb/s"
    return f"{value:.3g}"
