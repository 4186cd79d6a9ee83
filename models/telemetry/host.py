"""Host signals as causes: IO pressure, slow disks, CPU saturation, memory pressure and OOM kills.

The node agent sends one ``host`` event per sample (producers/procfs_host.py, docs/events.md):
PSI averages, raw cumulative CPU jiffies, memory, the OOM kill counter and per-disk counters.
:class:`HostTracker` turns the counters into per-sample values (CPU busy share, disk read
latency in ms per completed read, OOM kills since the last sample; wrap and reset aware, as
for port counters) and keeps, per node, a bounded history of samples and a baseline of each
value (the median of the node's recent normal samples).

:class:`HostCorrelator` names host evidence as the suspected cause of
* a straggler (above all one whose ``signal`` is ``data_time``: an input-bound rank) or an
  input-layer ``throughput_drop``, when its node shows, in at least ``min_samples`` samples
  near the alert's start: IO pressure, a disk whose read latency is far above its baseline
  or its peers', CPU saturation or memory pressure (``category: "host"``, ``component``:
  ``io_pressure``, ``cpu``, ``memory`` or the disk's name);
* a hang whose silent rank went quiet right after its node's OOM kill counter rose
  (``component: "oom_kill"``);
* a hang whose culprits' node shows, from the hang's onset on, IO pressure, a slow disk or an NFS
  mount whose WRITE/COMMIT round trips are far above the mount's own baseline or time out
  (``category: "storage"``, ``component``: ``io_pressure``, the disk, or ``nfs:<mount point>``).

A node whose pressure is always high has that as its baseline, so only a rise above it counts.
Times compared are the node's own (a rank and its node's agent share a clock); across nodes only
the correlation window, never a difference of timestamps.
"""

from __future__ import annotations

import dataclasses
import math
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from .settings import HostSettings  # noqa: F401  (defined in a light module; re-exported here)
from ..alert_types import AlertType
from ..alerts import Alert
from ..evidence import HangEvidence, StragglerEvidence, StragglerSignal
from ..jobhealth.throughput import Layer, ThroughputEvidence
from .causes import SuspectedCause
from .counters import Baseline, CounterTrack, counter_delta
from ..wire.telemetry_events import HOST_CPU_FIELDS, HostEvent



#: Per-node values that keep a baseline.


BASELINED = ("io_some", "cpu_some", "mem_some", "cpu_busy")
#: Input-bound alerts get their host evidence weighted up by this; other stragglers down.
DATA_BOUND_BOOST = 1.5
OTHER_STRAGGLER_WEIGHT = 0.8
OOM_SCORE = 25.0
#: An OOM kill may be sampled a little before the rank's last event reached the worker.
OOM_SLACK_SECONDS = 5.0


@dataclass(slots=True)
class HostSample:
    """One host event reduced to what the correlation reads, with the baselines of that time."""

    ts: float
    io_some: float | None = None
    io_full: float | None = None
    cpu_some: float | None = None
    mem_some: float | None = None
    mem_full: float | None = None
    cpu_busy: float | None = None  # share of all CPUs' time not idle (0-1), since the previous sample
    iowait: float | None = None
    mem_available_ratio: float | None = None
    swap_used: int | None = None
    load1: float | None = None
    disks: dict[str, float] = field(default_factory=dict)  # device -> ms per completed read since last sample
    mounts: dict[str, "MountSample"] = field(default_factory=dict)  # NFS mount point -> its RPCs since last sample
    # Baselines (medians) before this sample; consecutive samples share one dict while they do not move.
    base: dict[str, float] = field(default_factory=dict)
    disk_base: dict[str, float] = field(default_factory=dict)


#: NFS ops whose round trips a checkpoint's save waits on (producers/procfs_host.py NFS_OPS).
NFS_OPS = ("write", "commit")
#: Mounts tracked per node (the agent sends at most 16; mounts come and go with jobs): bounded memory.
MAX_MOUNTS_PER_NODE = 64
NFS_SCORE = 16.0


@dataclass(frozen=True, slots=True)
class MountSample:
    """One NFS mount between two host samples: per op, ms per completed op (None: too few completed) and the
    mount's baseline of it before this sample; major timeouts and retransmissions of WRITE and COMMIT."""

    server: str | None
    fstype: str | None
    rtt: dict[str, float]
    exe: dict[str, float]
    base: dict[str, float]
    timeouts: int = 0
    retrans: int = 0


class _MountTrack:
    __slots__ = ("counters", "baselines")

    def __init__(self, size: int, min_samples: int) -> None:
        self.counters: dict[str, CounterTrack] = {}
        self.baselines = {op: Baseline(size, min_samples) for op in NFS_OPS}

    def delta(self, name: str, value: int | None, ts: float) -> int | None:
        if value is None:
            return None
        track = self.counters.get(name)
        if track is None:
            track = self.counters[name] = CounterTrack()
        return track.update(value, ts)[0]


class _HostNode:
    __slots__ = ("cpu", "disks", "oom", "ooms", "samples", "baselines", "disk_baselines", "last_ts", "last_base",
                 "last_disk_base", "mounts")

    def __init__(self, history: int, size: int, min_samples: int) -> None:
        self.cpu: dict[str, int] | None = None
        self.disks: dict[tuple[str, str], CounterTrack] = {}
        self.oom = CounterTrack()
        self.ooms: deque[tuple[float, int, int]] = deque(maxlen=64)  # (ts, killed since last sample, total)
        self.samples: deque[HostSample] = deque(maxlen=max(history, 1))
        self.baselines = {name: Baseline(size, min_samples) for name in BASELINED}
        self.disk_baselines: dict[str, Baseline] = {}
        self.last_ts = 0.0
        self.last_base: dict[str, float] = {}
        self.last_disk_base: dict[str, float] = {}
        self.mounts: dict[str, _MountTrack] = {}


class HostTracker:
    """Per node: host counters to per-sample values, baselines, OOM kills; feed events in time order per node.

    Hyperparameters (keyword-only): ``history`` samples kept per node; ``baseline_samples`` and
    ``baseline_min_samples`` size each baseline and say when it is ready; a sample joins a
    baseline unless it is an outlier (``pressure_factor`` x the baseline and above the
    thresholds, or a disk latency ``disk_latency_factor`` x its baseline), so a long stall does
    not become normal; ``disk_min_reads`` reads between two samples to measure a latency.
    """

    def __init__(self, *, history: int = 300, baseline_samples: int = 120, baseline_min_samples: int = 10,
                 pressure_factor: float = 2.0, thresholds: dict[str, float] | None = None,
                 disk_latency_factor: float = 4.0, disk_latency_floor_ms: float = 2.0, disk_min_reads: int = 5,
                 nfs_rtt_factor: float = 4.0, nfs_rtt_floor_ms: float = 50.0, max_nodes: int = 100_000) -> None:
        self.history = history
        self.baseline_samples = baseline_samples
        self.baseline_min_samples = baseline_min_samples
        self.pressure_factor = pressure_factor
        self.thresholds = thresholds or {"io_some": 20.0, "cpu_some": 50.0, "mem_some": 10.0, "cpu_busy": 0.95}
        self.disk_latency_factor = disk_latency_factor
        self.disk_latency_floor_ms = disk_latency_floor_ms
        self.disk_min_reads = disk_min_reads
        self.nfs_rtt_factor = nfs_rtt_factor
        self.nfs_rtt_floor_ms = nfs_rtt_floor_ms
        self.max_nodes = max_nodes
        self._nodes: dict[str, _HostNode] = {}
        self.events_seen = 0
        self.resets = 0

    def node(self, name: str) -> _HostNode | None:
        return self._nodes.get(name)

    @property
    def nodes(self) -> tuple[str, ...]:
        return tuple(self._nodes)

    def samples(self, node: str, since: float, until: float) -> list[HostSample]:
        state = self._nodes.get(node)
        if state is None:
            return []
        out = []
        for s in reversed(state.samples):  # newest first; samples come (nearly) in time order
            if s.ts < since - 30.0:
                break
            if since <= s.ts <= until:
                out.append(s)
        out.reverse()
        return out

    def ooms(self, node: str) -> list[tuple[float, int, int]]:
        state = self._nodes.get(node)
        return list(state.ooms) if state is not None else []

    def update(self, ev: HostEvent) -> list[Alert]:
        """Feed one host event (no alert of its own: host evidence names causes of job alerts)."""
        self.events_seen += 1
        state = self._nodes.get(ev.node)
        if state is None:
            if len(self._nodes) >= self.max_nodes:  # memory bound: forget the quietest node
                del self._nodes[min(self._nodes, key=lambda n: self._nodes[n].last_ts)]
            state = self._nodes[ev.node] = _HostNode(self.history, self.baseline_samples, self.baseline_min_samples)
        if ev.ts > state.last_ts:
            state.last_ts = ev.ts
        sample = HostSample(ts=ev.ts, load1=ev.load1, swap_used=ev.swap_used)
        psi = ev.psi or {}
        sample.io_some = psi.get("io", {}).get("some_avg10")
        sample.io_full = psi.get("io", {}).get("full_avg10")
        sample.cpu_some = psi.get("cpu", {}).get("some_avg10")
        sample.mem_some = psi.get("memory", {}).get("some_avg10")
        sample.mem_full = psi.get("memory", {}).get("full_avg10")
        if ev.mem_total and ev.mem_available is not None:
            sample.mem_available_ratio = ev.mem_available / ev.mem_total
        self._cpu(state, ev, sample)
        self._disks(state, ev, sample)
        self._mounts(state, ev, sample)
        if ev.oom_kills is not None:
            delta, _ = state.oom.update(ev.oom_kills, ev.ts)
            if delta:
                state.ooms.append((ev.ts, delta, ev.oom_kills))
        for name, base in state.baselines.items():
            value = getattr(sample, name)
            if base.ready:
                sample.base[name] = base.median()
            if value is not None and not (base.ready and self.outlier(name, value, base.median())):
                base.add(value)
        # Share the baseline dicts with the previous sample while equal (most samples): bounded memory.
        if sample.base == state.last_base:
            sample.base = state.last_base
        state.last_base = sample.base
        if sample.disk_base == state.last_disk_base:
            sample.disk_base = state.last_disk_base
        state.last_disk_base = sample.disk_base
        state.samples.append(sample)
        return []

    def outlier(self, name: str, value: float, baseline: float) -> bool:
        """A value far enough above its threshold and its node's baseline to be evidence."""
        if value < self.thresholds[name]:
            return False
        if math.isnan(baseline):
            return True
        if name == "cpu_busy":  # a share: the headroom is small, compare what is left idle
            return (1.0 - value) * self.pressure_factor <= (1.0 - baseline)
        return value >= self.pressure_factor * baseline

    def _cpu(self, state: _HostNode, ev: HostEvent, sample: HostSample) -> None:
        if not ev.cpu:
            return
        prev, state.cpu = state.cpu, dict(ev.cpu)
        if prev is None:
            return
        deltas = {}
        for name in HOST_CPU_FIELDS:
            if name in ev.cpu and name in prev:
                delta, how = counter_delta(prev[name], ev.cpu[name])
                if delta is None:  # reboot: the counters started again
                    self.resets += 1
                    return
                deltas[name] = delta
        total = sum(deltas.values())
        if total <= 0:
            return
        idle = deltas.get("idle", 0) + deltas.get("iowait", 0)
        sample.cpu_busy = 1.0 - idle / total
        sample.iowait = deltas.get("iowait", 0) / total

    def _disks(self, state: _HostNode, ev: HostEvent, sample: HostSample) -> None:
        for disk in ev.disks:
            name = disk["device"]
            if "reads" not in disk or "read_ms" not in disk:
                continue
            reads = self._track(state, name, "reads").update(disk["reads"], ev.ts)[0]
            ms = self._track(state, name, "read_ms").update(disk["read_ms"], ev.ts)[0]
            if reads is None or ms is None or reads < self.disk_min_reads:
                continue
            latency = ms / reads
            sample.disks[name] = latency
            base = state.disk_baselines.get(name)
            if base is None:
                base = state.disk_baselines[name] = Baseline(self.baseline_samples, self.baseline_min_samples)
            if base.ready:
                sample.disk_base[name] = base.median()
            if not (base.ready and self.disk_outlier(latency, base.median())):
                base.add(latency)

    def _mounts(self, state: _HostNode, ev: HostEvent, sample: HostSample) -> None:
        for mount in ev.mounts:
            name = mount["mount"]
            track = state.mounts.get(name)
            if track is None:
                if len(state.mounts) >= MAX_MOUNTS_PER_NODE:  # the oldest mount first (an unmounted job's)
                    del state.mounts[next(iter(state.mounts))]
                track = state.mounts[name] = _MountTrack(self.baseline_samples, self.baseline_min_samples)
            rtt: dict[str, float] = {}
            exe: dict[str, float] = {}
            base: dict[str, float] = {}
            timeouts = retrans = 0
            slow = False
            for op in NFS_OPS:
                ops = track.delta(f"{op}_ops", mount.get(f"{op}_ops"), ev.ts)
                trans = track.delta(f"{op}_trans", mount.get(f"{op}_trans"), ev.ts)
                rtt_ms = track.delta(f"{op}_rtt_ms", mount.get(f"{op}_rtt_ms"), ev.ts)
                exe_ms = track.delta(f"{op}_exe_ms", mount.get(f"{op}_exe_ms"), ev.ts)
                timeouts += track.delta(f"{op}_timeouts", mount.get(f"{op}_timeouts"), ev.ts) or 0
                if ops is not None and trans is not None:
                    retrans += max(trans - ops, 0)
                if not ops or rtt_ms is None:
                    continue
                rtt[op] = rtt_ms / ops
                if exe_ms is not None:
                    exe[op] = exe_ms / ops
                baseline = track.baselines[op]
                if baseline.ready:
                    base[op] = baseline.median()
                    if self.nfs_outlier(rtt[op], base[op]):
                        slow = True
                        continue
                baseline.add(rtt[op])
            # Kept only when it is evidence (most samples are not): bounded memory with many mounts and nodes.
            if slow or timeouts or retrans:
                sample.mounts[name] = MountSample(server=mount.get("server"), fstype=mount.get("fstype"), rtt=rtt,
                                                  exe=exe, base=base, timeouts=timeouts, retrans=retrans)

    def nfs_outlier(self, rtt_ms: float, baseline: float) -> bool:
        return rtt_ms >= self.nfs_rtt_floor_ms and rtt_ms >= self.nfs_rtt_factor * max(baseline, 0.0)

    def disk_outlier(self, latency: float, reference: float) -> bool:
        return latency >= self.disk_latency_floor_ms and latency >= self.disk_latency_factor * max(reference, 0.0)

    @staticmethod
    def _track(state: _HostNode, disk: str, counter: str) -> CounterTrack:
        track = state.disks.get((disk, counter))
        if track is None:
            track = state.disks[(disk, counter)] = CounterTrack()
        return track


# -- correlation ------------------------------------------------------------------------------


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    n = len(ordered)
    if not n:
        return math.nan
    return ordered[n // 2] if n % 2 else (ordered[n // 2 - 1] + ordered[n // 2]) / 2


def _ms(value: float) -> str:
    """2100.0 -> '2.1 s', 4.2 -> '4.2 ms'."""
    if value >= 1000.0:
        return f"{value / 1000.0:.1f} s"
    return f"{value:.1f} ms" if value < 10.0 else f"{value:.0f} ms"


def _r(value: float | None, digits: int = 2) -> float | None:
    return None if value is None or math.isnan(value) else round(value, digits)


class HostCorrelator:
    """Host evidence near an alert on the nodes of its ranks, as ranked :class:`SuspectedCause` s.

    Hyperparameters (keyword-only): ``window`` seconds either side of the alert's start;
    ``min_samples`` flagged samples a condition needs; ``mem_available_ratio`` below which
    memory is short whatever the pressure; ``oom_window`` seconds after a silent rank's last
    event in which an OOM kill of its node is blamed; ``max_peer_nodes`` nodes read for the
    peers' disk latency.
    """

    def __init__(self, tracker: HostTracker, *, window: float = 60.0, min_samples: int = 2,
                 mem_available_ratio: float = 0.05, oom_window: float = 60.0, max_peer_nodes: int = 256) -> None:
        self.tracker = tracker
        self.window = window
        self.min_samples = min_samples
        self.mem_available_ratio = mem_available_ratio
        self.oom_window = oom_window
        self.max_peer_nodes = max_peer_nodes
        # Causes of alerts whose window has closed on every node involved: final, so a later
        # refresh neither recomputes them nor loses them when the samples leave the history.
        self._final: dict[tuple[str, float], list[SuspectedCause]] = {}
        self.max_final = 10_000
    @staticmethod
    def enriches(alert: Alert) -> bool:
        """Alert types beyond the telemetry correlator's that host evidence explains: an input-layer throughput drop."""
        return ThroughputEvidence.layer_of(alert) is Layer.INPUT_PIPELINE

    def suspects(self, alert: Alert, *, at: float, placement: Callable[[str, int], tuple],
                 job_nodes: Callable[[str], list[str]]) -> list[SuspectedCause]:
        if not self.tracker.events_seen:
            return []
        key = (alert.id, at)
        final = self._final.get(key)
        if final is not None:
            return final
        causes, nodes = self._suspects(alert, at, placement, job_nodes)
        horizon = at + max(self.window, self.oom_window)
        if nodes and all((state := self.tracker.node(n)) is not None and state.last_ts > horizon for n in nodes):
            if len(self._final) >= self.max_final:
                self._final.pop(next(iter(self._final)))
            self._final[key] = causes
        return causes

    def _suspects(self, alert: Alert, at: float, placement: Callable[[str, int], tuple],
                  job_nodes: Callable[[str], list[str]]) -> tuple[list[SuspectedCause], list[str]]:
        if alert.type == AlertType.HANG:  # silent ranks' last events differ: not cached
            return self._oom_causes(alert, placement) + self._storage_causes(alert, at), []
        if alert.type == AlertType.STRAGGLER:
            data_bound = StragglerEvidence.of(alert).signal is StragglerSignal.DATA_TIME
            nodes = list(alert.nodes)
            for rank in alert.ranks[:32]:
                node = placement(alert.job, rank)[0]
                if node is not None and node not in nodes:
                    nodes.append(node)
        elif self.enriches(alert):
            data_bound = True
            nodes = job_nodes(alert.job)
        else:
            return [], []
        weight = DATA_BOUND_BOOST if data_bound else OTHER_STRAGGLER_WEIGHT
        causes: list[SuspectedCause] = []
        since, until = at - self.window, at + self.window
        cache: list[dict[str, float]] = []

        def peers() -> dict[str, float]:  # read only for a disk slow enough to be suspect
            if not cache:
                cache.append(self._peer_latency(since, until))
            return cache[0]

        for node in nodes:
            samples = self.tracker.samples(node, since, until)
            if len(samples) < self.min_samples:
                continue
            causes.extend(self._node_causes(node, samples, weight, peers))
        return causes, nodes

    # -- the conditions ---------------------------------------------------------------------

    def _node_causes(self, node: str, samples: list[HostSample], weight: float,
                     peers: Callable[[], dict[str, float]]) -> list[SuspectedCause]:
        t = self.tracker
        out = []
        io = [s for s in samples if s.io_some is not None and t.outlier("io_some", s.io_some,
                                                                         s.base.get("io_some", math.nan))]
        if len(io) >= self.min_samples:
            peak = max(s.io_some for s in io)
            full = max((s.io_full for s in io if s.io_full is not None), default=None)
            base = io[0].base.get("io_some")
            hint = f"host: IO pressure {peak:.0f}% on {node} (PSI io some avg10" + (
                f", baseline {base:.1f}%)" if base is not None else ")")
            out.append(self._cause(node, "io_pressure", io, (8.0 + min(peak / 10.0, 6.0)) * weight, hint, {
                "signal": "psi_io", "some_avg10_peak": _r(peak), "full_avg10_peak": _r(full),
                "baseline_some_avg10": _r(base), "iowait_peak": _r(max((s.iowait for s in io if s.iowait is not None),
                                                                        default=None), 3)}))
        # Disks: far above the disk's own baseline, or above the same period's latency on peer nodes.
        names = sorted({d for s in samples for d in s.disks
                        if s.disks[d] >= t.disk_latency_floor_ms})  # below the floor no disk is suspect
        peer = math.nan
        if names:
            others = [v for n, v in peers().items() if n != node]
            peer = _median(others) if others else math.nan
        for disk in names:
            flagged = []
            for s in samples:
                latency = s.disks.get(disk)
                if latency is None:
                    continue
                own = s.disk_base.get(disk, math.nan)
                if (not math.isnan(own) and t.disk_outlier(latency, own)) or (
                        not math.isnan(peer) and t.disk_outlier(latency, peer)):
                    flagged.append(s)
            if len(flagged) < self.min_samples:
                continue
            latency = _median([s.disks[disk] for s in flagged])
            own = flagged[0].disk_base.get(disk)
            reference = own if own is not None else peer
            ratio = latency / reference if reference and reference > 0 else 10.0
            hint = (f"host: {disk} on {node} reads take {latency:.1f} ms ("
                    + (f"baseline {own:.2f} ms" if own is not None else "") + (", " if own is not None and
                                                                                   not math.isnan(peer) else "")
                    + (f"peers {peer:.2f} ms" if not math.isnan(peer) else "") + ")")
            out.append(self._cause(node, disk, flagged, (8.0 + min(ratio, 8.0)) * weight, hint, {
                "signal": "disk_read_latency", "device": disk, "read_ms_per_read": _r(latency, 3),
                "baseline_ms_per_read": _r(own, 3), "peers_ms_per_read": _r(peer, 3), "ratio": _r(ratio)}))
        cpu = [s for s in samples if (s.cpu_busy is not None and t.outlier("cpu_busy", s.cpu_busy,
                                                                           s.base.get("cpu_busy", math.nan)))
               or (s.cpu_some is not None and t.outlier("cpu_some", s.cpu_some, s.base.get("cpu_some", math.nan)))]
        if len(cpu) >= self.min_samples:
            busy = max((s.cpu_busy for s in cpu if s.cpu_busy is not None), default=None)
            some = max((s.cpu_some for s in cpu if s.cpu_some is not None), default=None)
            load = max((s.load1 for s in cpu if s.load1 is not None), default=None)
            what = f"{busy * 100:.0f}% busy" if busy is not None else f"PSI cpu {some:.0f}%"
            severity = max(busy or 0.0, (some or 0.0) / 100.0)
            out.append(self._cause(node, "cpu", cpu, (7.0 + 5.0 * severity) * weight,
                                   f"host: CPU saturated on {node} ({what}" + (f", load {load:.0f})" if load else ")"),
                                   {"signal": "cpu", "busy_peak": _r(busy, 3), "some_avg10_peak": _r(some),
                                    "baseline_busy": _r(cpu[0].base.get("cpu_busy"), 3), "load1_peak": _r(load)}))
        mem = [s for s in samples if (s.mem_some is not None and t.outlier("mem_some", s.mem_some,
                                                                           s.base.get("mem_some", math.nan)))
               or (s.mem_available_ratio is not None and s.mem_available_ratio < self.mem_available_ratio)]
        if len(mem) >= self.min_samples:
            some = max((s.mem_some for s in mem if s.mem_some is not None), default=None)
            avail = min((s.mem_available_ratio for s in mem if s.mem_available_ratio is not None), default=None)
            what = ", ".join(x for x in ((f"PSI memory {some:.0f}%" if some is not None else ""),
                                         (f"{avail * 100:.1f}% available" if avail is not None else "")) if x)
            score = 7.0 + min((some or 0.0) / 5.0, 6.0) + (3.0 if avail is not None and avail < self.mem_available_ratio
                                                          else 0.0)
            out.append(self._cause(node, "memory", mem, score * weight, f"host: memory pressure on {node} ({what})",
                                   {"signal": "memory", "some_avg10_peak": _r(some),
                                    "full_avg10_peak": _r(max((s.mem_full for s in mem if s.mem_full is not None),
                                                              default=None)),
                                    "mem_available_ratio_min": _r(avail, 4),
                                    "swap_used_bytes": max((s.swap_used for s in mem if s.swap_used is not None),
                                                           default=None)}))
        return out

    @staticmethod
    def _cause(node: str, component: str, flagged: list[HostSample], score: float, hint: str,
               evidence: dict) -> SuspectedCause:
        evidence = {k: v for k, v in evidence.items() if v is not None}
        evidence.update(began_at=round(flagged[0].ts, 3), last_at=round(flagged[-1].ts, 3), samples=len(flagged))
        return SuspectedCause(category="host", node=node, component=component, score=score,
                              began_at=flagged[0].ts, hint=hint, near_rank=True, evidence=(evidence,))

    def _peer_latency(self, since: float, until: float) -> dict[str, float]:
        """Per node, the median read latency of its disks in the window (the peers of a slow disk)."""
        out = {}
        for node in self.tracker.nodes[: self.max_peer_nodes]:
            values = [v for s in self.tracker.samples(node, since, until) for v in s.disks.values()]
            if values:
                out[node] = _median(values)
        return out

    def _storage_causes(self, alert: Alert, at: float) -> list[SuspectedCause]:
        """A hang's culprits' nodes' storage from its onset on (IO pressure, slow disks): ``category: storage`` (a
        checkpoint write hung on a shared filesystem)."""
        out = []
        for node in dict.fromkeys(HangEvidence.of(alert).culprit_nodes):
            samples = self.tracker.samples(node, at - self.window, math.inf)  # any time since: the hang goes on
            if len(samples) < self.min_samples:
                continue
            out.extend(self._mount_causes(node, samples, at))
            for cause in self._node_causes(node, samples, 1.0, lambda: {}):
                if cause.component in ("cpu", "memory"):
                    continue
                out.append(dataclasses.replace(cause, category="storage",
                                               hint="storage: " + cause.hint.removeprefix("host: ")))
        return out

    def _mount_causes(self, node: str, samples: list[HostSample], at: float) -> list[SuspectedCause]:
        """NFS mounts of ``node`` whose WRITE/COMMIT round trips were far above their own baseline, or whose RPCs
        timed out or were retransmitted, in at least ``min_samples`` samples. The numbers shown are those of the
        flagged samples up to ``window`` after ``at``: they stay put as the hang goes on, so the alert is not
        re-published for a count that grows."""
        t = self.tracker
        out = []
        for mount in sorted({m for s in samples for m in s.mounts}):
            flagged = []
            for s in samples:
                m = s.mounts.get(mount)
                if m is not None and (m.timeouts or m.retrans or any(
                        op in m.base and t.nfs_outlier(rtt, m.base[op]) for op, rtt in m.rtt.items())):
                    flagged.append(s)
            if len(flagged) < self.min_samples:
                continue
            flagged = [s for s in flagged if s.ts <= at + self.window] or flagged[:self.min_samples]
            slow = {op: _median([s.mounts[mount].rtt[op] for s in flagged if op in s.mounts[mount].rtt])
                    for op in NFS_OPS if any(op in s.mounts[mount].rtt for s in flagged)}
            bases = {op: next((s.mounts[mount].base[op] for s in flagged if op in s.mounts[mount].base), None)
                     for op in slow}
            ratios = {op: slow[op] / bases[op] if bases[op] else 10.0 for op in slow}
            timeouts = sum(s.mounts[mount].timeouts for s in flagged)
            retrans = sum(s.mounts[mount].retrans for s in flagged)
            what = []
            op = max(ratios, key=ratios.get, default=None)
            if op is not None and not (bases[op] is None or t.nfs_outlier(slow[op], bases[op])):
                op = None  # its round trips look usual: the timeouts are the news
            last = flagged[-1].mounts[mount]
            lustre = last.fstype == "lustre"  # llite stats: the syscall's latency (fsync for the commit)
            label = {"write": "WRITE", "commit": "FSYNC" if lustre else "COMMIT"}
            if op is not None:
                what.append(f"{label[op]} {'latency' if lustre else 'rtt'} {_ms(slow[op])}"
                            + (f" (baseline {_ms(bases[op])})" if bases[op] is not None else ""))
            if timeouts:
                what.append(f"{timeouts} timeout{'s' if timeouts != 1 else ''}")
            if retrans:
                what.append(f"{retrans} retransmission{'s' if retrans != 1 else ''}")
            ratio = ratios[op] if op is not None else 1.0
            evidence = {"signal": "lustre_llite" if lustre else "nfs_rpc", "mount": mount, "server": last.server,
                        "fstype": last.fstype, "op": label[op] if op else None,
                        "rtt_ms_per_op": _r(slow.get(op) if op else None, 3),
                        "baseline_rtt_ms_per_op": _r(bases.get(op) if op else None, 3),
                        "exe_ms_per_op": _r(_median([s.mounts[mount].exe[op] for s in flagged
                                                      if op in s.mounts[mount].exe]) if op else None, 3),
                        "timeouts": timeouts, "retransmissions": retrans, "ratio": _r(ratio)}
            where = f"Lustre client {mount.removeprefix('lustre:')}" if lustre else f"NFS mount {mount}"
            cause = self._cause(node, mount if lustre else f"nfs:{mount}", flagged,
                                NFS_SCORE + min(ratio, 8.0) + min(timeouts, 4),
                                f"storage: {where} on {node}: " + ", ".join(what), evidence)
            out.append(dataclasses.replace(cause, category="storage"))
        return out

    def _oom_causes(self, alert: Alert, placement: Callable[[str, int], tuple]) -> list[SuspectedCause]:
        out = []
        for position in HangEvidence.of(alert).silent:
            if position.last_seen is None:
                continue
            rank = position.rank
            node = position.node or placement(alert.job, rank)[0]
            if node is None:
                continue
            last = float(position.last_seen)
            # The rank and its node's agent share the node's clock.
            kills = [k for k in self.tracker.ooms(node) if last - OOM_SLACK_SECONDS <= k[0] <= last + self.oom_window]
            if not kills:
                continue
            ts, killed, total = kills[0]
            out.append(SuspectedCause(
                category="host", node=node, component="oom_kill", score=OOM_SCORE, began_at=ts, near_rank=True,
                hint=f"host: OOM killer on {node} ({sum(k[1] for k in kills)} kill(s)) {ts - last:+.0f} s after "
                     f"rank {rank}'s last event",
                evidence=({"signal": "oom_kill", "rank": rank, "oom_kills": sum(k[1] for k in kills),
                           "oom_kills_total": total, "at": round(ts, 3), "rank_last_seen": round(last, 3),
                           "seconds_after_last_event": round(ts - last, 3)},)))
        return out


def host_hub_parts(telemetry_settings, host_settings) -> tuple[HostTracker, HostCorrelator]:
    """The tracker and correlator the telemetry hub holds, from the configuration."""
    h = host_settings
    tracker = HostTracker(
        history=h.history_samples, baseline_samples=telemetry_settings.baseline_samples,
        baseline_min_samples=telemetry_settings.baseline_min_samples, pressure_factor=h.pressure_factor,
        thresholds={"io_some": h.io_pressure_pct, "cpu_some": h.cpu_pressure_pct, "mem_some": h.memory_pressure_pct,
                    "cpu_busy": h.cpu_busy_ratio},
        disk_latency_factor=h.disk_latency_factor, disk_latency_floor_ms=h.disk_latency_floor_ms,
        disk_min_reads=h.disk_min_reads, nfs_rtt_factor=h.nfs_rtt_factor, nfs_rtt_floor_ms=h.nfs_rtt_floor_ms)
    correlator = HostCorrelator(tracker, window=telemetry_settings.correlation_window, min_samples=h.min_samples,
                                mem_available_ratio=h.mem_available_ratio, oom_window=h.oom_window_seconds)
    return tracker, correlator


def merge_causes(causes: list[SuspectedCause], extra: list[SuspectedCause], limit: int) -> list[SuspectedCause]:
    if not extra:
        return causes
    merged = causes + extra
    merged.sort(key=lambda c: (-c.score, c.began_at if c.began_at is not None else math.inf, c.component))
    return merged[:limit]
