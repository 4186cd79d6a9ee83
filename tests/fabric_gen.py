"""A second, independent generator for network-layer tests (not the project's simulator).

One synchronous job on ``nodes`` nodes of ``per_node`` ranks, with the node telemetry an agent
would send every second (4 InfiniBand ports, 8 GPUs with 4 NVLinks each, raw cumulative
counters), built from first principles:

* each step a rank loads data and computes (jittered, rare GC pauses), then enters the step's
  all-reduces; the first one ends ``transfer`` after the **last** rank arrived, so a rank's own
  duration is its wait plus the transfer; the second one is pure transfer;
* a network fault multiplies the transfer time of every collective by ``slow`` (a ring runs at
  its slowest link) and changes the telemetry of one node: ``ib`` symbol errors, link error
  recoveries and 10x transmit wait on one port; ``rate`` the port trains down to 200 Gb/s
  with no error; ``nvlink`` CRC and replay errors on one NVLink; ``fabric`` every node's
  transmit wait 5x (congestion: nobody's fault); ``down`` a port goes down and every rank then
  waits in the same collective (a hang: heartbeats keep coming, steps stop); ``stall`` the same
  hang with every link healthy (nothing to blame on a node);
* messy parts: per-node port noise, a counter reset (``perfquery -R``) on a healthy node, lost
  telemetry samples and lost collective events, warm-up steps, per-node clock offsets
  (``skew``: every timestamp a node's processes write is off by that many seconds; durations
  are not, they are differences on one clock).

``events()`` yields ``(true_time, Event)`` in true-time order (the order a broker delivers them).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from stepwatch.models.wire.events import CollectiveEvent, HeartbeatEvent, PhaseEvent, StepEvent
from stepwatch.models.wire.telemetry_events import GpuEvent, LinkEvent

T0 = 1_760_000_000.0
PORTS = ("mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3")


@dataclass
class Job:
    name: str = "fab"
    nodes: int = 8
    per_node: int = 8
    steps: int = 140
    seed: int = 0
    compute: float = 0.60
    transfer: float = 0.12
    #: fault kind (ib | rate | nvlink | fabric | down | None), its node, port/GPU/link, onset step, slowdown
    fault: str | None = None
    fault_node: int = 3
    fault_port: int = 2
    fault_gpu: int = 5
    fault_link: int = 1
    onset: int = 70
    slow: float = 1.5
    straggler: int | None = None  # rank that computes ``straggler_factor`` slower from ``onset``
    straggler_factor: float = 1.12
    slow_node: int | None = None  # every rank of this node computes ``straggler_factor`` slower from ``onset``
    #: the straggler (or slow node) is slow on one step in this many only (1: every step): a flaky GPU
    straggler_every: int = 1
    skew: dict[int, float] = field(default_factory=dict)  # node index -> clock offset, seconds
    step_fields: str = "compute"  # compute (compute+comm time) | step (step_time only)
    collectives: bool = True
    coll_step: bool = True  # collectives carry ``step`` (else only ``seq``)
    lose: float = 0.005  # probability a telemetry sample or collective event is lost
    #: step from which the faulty node's telemetry shows the fault (None: ``onset``; 0: bad from the start,
    #: before the collectives slow down)
    telemetry_onset: int | None = None
    t0: float = T0  # true time the job starts (a later job on the same nodes starts later)

    def node(self, i: int) -> str:
        return f"gpu-{i + 50:03d}"

    @property
    def ranks(self) -> int:
        return self.nodes * self.per_node


def events(job: Job) -> list[tuple[float, object]]:
    rng = np.random.default_rng(job.seed)
    n, per = job.ranks, job.per_node
    node_of = [r // per for r in range(n)]
    out: list[tuple[float, object]] = []

    def skewed(i: int, t: float) -> float:
        return float(t) + job.skew.get(i, 0.0)

    t = job.t0
    seq = 0
    hang_at = None
    out.append((t, PhaseEvent(job=job.name, ts=t, phase="warmup")))
    for s in range(job.steps):
        if s == 5:
            out.append((t, PhaseEvent(job=job.name, ts=t, phase="train")))
        faulty = job.fault is not None and s >= job.onset
        if job.fault in ("down", "stall") and faulty:
            hang_at = t
            break
        start = t
        compute = job.compute * (1 + 0.02 * rng.standard_normal(n)) * (1.5 if s < 5 else 1.0)
        compute += np.where(rng.random(n) < 0.003, 0.3, 0.0)  # GC pauses
        if job.straggler is not None and s >= job.onset and (s - job.onset) % job.straggler_every == 0:
            compute[job.straggler] *= job.straggler_factor
        if job.slow_node is not None and s >= job.onset and (s - job.onset) % job.straggler_every == 0:
            compute[job.slow_node * per:(job.slow_node + 1) * per] *= job.straggler_factor
        data = 0.01 + 0.002 * rng.random(n)
        arrive = start + data + compute
        last = arrive.max()
        transfer = job.transfer * (job.slow if faulty else 1.0)
        t1 = transfer * (1 + 0.03 * rng.standard_normal())
        t2 = transfer * (1 + 0.03 * rng.standard_normal())
        end1 = last + t1
        end2 = end1 + t2
        done = end2 + 0.001 * rng.random(n)
        for r in range(n):
            i = node_of[r]
            if job.collectives:
                for k, (a, e) in enumerate(((arrive[r], end1 + 0.0005 * rng.random()), (end1, end2))):
                    if rng.random() < job.lose:
                        continue
                    out.append((e, CollectiveEvent(
                        job=job.name, rank=r, seq=seq + k, op="all_reduce", ts=skewed(i, e), duration=float(e - a),
                        node=job.node(i), step=s if job.coll_step else None, pg="default", bytes=50 * 2**20,
                        start_ts=skewed(i, a))))
            step_time = done[r] - start
            extra = {}
            if job.step_fields == "compute":
                extra = dict(compute_time=float(compute[r]), comm_time=float(done[r] - arrive[r]),
                             data_time=float(data[r]))
            out.append((done[r], StepEvent(job=job.name, rank=r, step=s, ts=skewed(i, done[r]),
                                           step_time=float(step_time), node=job.node(i), gpu=r % per,
                                           world_size=n, phase="warmup" if s < 5 else "train", **extra)))
        seq += 2
        t = float(done.max())
    end = t if hang_at is None else hang_at + 150.0
    if hang_at is not None:  # heartbeats from a background thread: every rank waits in the same collective
        hb = hang_at + 1.0
        while hb < end:
            stuck = hang_at is not None and hb >= hang_at
            for r in range(n):
                i = node_of[r]
                out.append((hb, HeartbeatEvent(job=job.name, rank=r, ts=skewed(i, hb),
                                               step=(job.onset - 1) if stuck else 0, node=job.node(i),
                                               seq_started=seq if stuck else None,
                                               seq_completed=seq - 1 if stuck else None)))
            hb += 5.0
    out.extend(_telemetry(job, rng, job.t0, end, hang_at))
    out.sort(key=lambda x: x[0])
    return out


def onset_time(job: Job, evs: list[tuple[float, object]]) -> float:
    """True time the onset step started (the first event of the onset step or later)."""
    for t, ev in evs:
        if isinstance(ev, StepEvent) and ev.step == job.onset - 1:
            return t
    return evs[-1][0]


def _telemetry(job: Job, rng, start: float, end: float, hang_at: float | None) -> list[tuple[float, object]]:
    out = []
    nodes = job.nodes
    # per node, per port: cumulative counters
    cnt = {(i, p): {"port_xmit_data": int(rng.integers(1e9)), "port_rcv_data": int(rng.integers(1e9)),
                    "port_xmit_wait": 0, "symbol_error": 0, "link_error_recovery": 0, "port_rcv_errors": 0,
                    "link_downed": 0} for i in range(nodes) for p in range(len(PORTS))}
    nv = {(i, g, l): {"tx_bytes": 0, "rx_bytes": 0, "crc_errors": 0, "replay_errors": 0, "recovery_errors": 0}
          for i in range(nodes) for g in range(job.per_node) for l in range(4)}
    wait_base = {i: 2e5 * (0.8 + 0.4 * rng.random()) for i in range(nodes)}
    reset_node = (job.fault_node + 4) % nodes
    onset_t = None
    t = start
    k = 0
    while t < end:
        k += 1
        step_est = int((t - start) / (job.compute + 2 * job.transfer + 0.02))
        tel_onset = job.onset if job.telemetry_onset is None else job.telemetry_onset
        faulty = job.fault is not None and (step_est >= tel_onset or (hang_at is not None and t >= hang_at - 3))
        if faulty and onset_t is None:
            onset_t = t
        busy = 0.0 if hang_at is not None and t >= hang_at else 1.0
        for i in range(nodes):
            ts = t + job.skew.get(i, 0.0) + 0.05 * rng.random()
            for p, dev in enumerate(PORTS):
                if rng.random() < job.lose:
                    continue
                c = cnt[(i, p)]
                here = faulty and i == job.fault_node and p == job.fault_port
                slow = job.slow if faulty and job.fault not in ("down", "stall") else 1.0
                words = busy * 3e9 / slow * (1 + 0.05 * rng.standard_normal())
                c["port_xmit_data"] += int(max(words, 0))
                c["port_rcv_data"] += int(max(words * (1 + 0.02 * rng.standard_normal()), 0))
                wait = wait_base[i] * (1 + 0.15 * rng.standard_normal()) * busy
                if faulty and job.fault == "fabric":
                    wait *= 5.0
                if here and job.fault == "ib":
                    wait *= 10.0
                    c["symbol_error"] += int(rng.integers(5, 60))
                    if rng.random() < 0.3:
                        c["link_error_recovery"] += 1
                c["port_xmit_wait"] += int(max(wait, 0))
                state, rate = "ACTIVE", 400.0
                if here and job.fault == "rate":
                    rate = 200.0
                if here and job.fault == "down":
                    state = "DOWN"
                    if c["link_downed"] == 0:
                        c["link_downed"] = 1
                if i == reset_node and p == 0 and k == 40:  # perfquery -R on a healthy node
                    for name in c:
                        c[name] = 0
                out.append((t, LinkEvent(node=job.node(i), ts=ts, device=dev, port=1, state=state, rate=rate,
                                         link_layer="InfiniBand", counters=dict(c))))
            if rng.random() < job.lose:
                continue
            for g in range(job.per_node):
                links = []
                for l in range(4):
                    c = nv[(i, g, l)]
                    b = int(busy * 4e10 * (1 + 0.05 * rng.standard_normal()))
                    c["tx_bytes"] += max(b, 0)
                    c["rx_bytes"] += max(b, 0)
                    if faulty and job.fault == "nvlink" and i == job.fault_node and g == job.fault_gpu \
                            and l == job.fault_link:
                        c["crc_errors"] += int(rng.integers(20, 200))
                        c["replay_errors"] += int(rng.integers(1, 20))
                    links.append({"link": l, "up": True, **c})
                out.append((t, GpuEvent(node=job.node(i), ts=ts, gpu=g, util=97.0, sm_clock=1980.0,
                                        sm_clock_max=1980.0, throttle=0, temp=60.0, pcie_gen=5, pcie_gen_max=5,
                                        pcie_width=16, pcie_width_max=16, nvlinks=tuple(links))))
        t += 1.0
    return out
