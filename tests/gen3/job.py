"""One synchronous data-parallel training job, simulated in true time, as its ranks report it.

Written from docs/events.md, docs/training.md and docs/hang.md only (not from stepwatch/sim or
tests/gen2): every rank starts a step when the previous collective released it, computes (its own
speed, the step's batch length, noise, rare spikes), arrives at the gradient all-reduce and waits
for the last rank; the all-reduce ends for everyone when the last arrival plus the transfer time is
over. So every rank's step_time is nearly equal, the slow rank's compute_time is higher and its
comm_time lowest. Events are stamped on the sender's host clock (offset and drift per node) and
delivered with their own latency (reordering across and within ranks), some lost, some twice.
"""
from __future__ import annotations

import math
import random
from dataclasses import dataclass, field, replace


@dataclass
class Slow:
    """A rank (or, with node, every rank of a node) computing `factor` times slower over [start, stop)."""
    factor: float
    start: int
    stop: int = 10**9
    rank: int | None = None
    node: str | None = None
    kind: str = "compute"               # "data": the rank's input pipeline waits (factor x a compute time);
                                        # "flaky": factor on a random `p` of the steps; "ramp": rising from 1
                                        # to factor over `ramp` steps (a cooler failing), then staying
    p: float = 0.15
    ramp: int = 100


@dataclass
class Pause:
    """Every `every` steps the job stops for `seconds` (checkpoint or eval), with or without phase events."""
    phase: str
    every: int
    seconds: float
    marked: bool = True
    lose_end_marker_at: int = -1        # the `train` marker ending the pause at this step index is lost
    rank0_only: bool = False            # only rank 0 saves (outside its step timer); the others go on
                                        # and wait for it in the next all-reduce


@dataclass
class Hang:
    """At step `step` rank `rank` never reaches the step's first collective (stuck in its data loader).

    teardown: seconds after the stall when NCCL's watchdog kills the waiting ranks (None: nobody
    dies before the recording ends); the stuck rank lives `culprit_lives` seconds longer.
    """
    step: int
    rank: int | None                    # None: nobody is behind, every rank waits in the same collective
    teardown: float | None = None
    culprit_lives: float = 30.0
    dies: str | None = None             # the culprit's process dies at the stall: "oom" (the kernel's OOM
                                        # killer; host samples show it) or "xid79" (its GPU fell off the bus)
    restart_resume: int | None = None   # after the teardown the launcher restarts the job from this step
    downtime: float = 120.0


@dataclass
class NodeLoss:
    """At step `step` node `node` dies (its ranks fall silent); the rest wait in the collective until
    the launcher tears the job down `detect` s later; after `downtime` s the job comes back on
    `spare` from the checkpoint at `resume_step` (step counter continuing from there)."""
    step: int
    node: str
    spare: str
    resume_step: int
    detect: float = 120.0
    downtime: float = 180.0


@dataclass
class LinkFault:
    """From true time offset `at` (s after the job's start) the port behind `node` takes symbol
    errors and every collective's transfer takes `factor` times longer (one bad link in the ring)."""
    node: str
    at: float
    factor: float = 1.8


@dataclass
class JobSpec:
    name: str
    nodes: list[str]
    gpus_per_node: int
    steps: int
    compute: float                      # typical compute seconds of one micro-batch
    transfer: float                     # all-reduce transfer seconds (nobody waiting)
    start: float                        # true start time (Unix s)
    seed: int
    first_step: int = 0
    micro: int = 1                      # gradient accumulation: micro-batches per optimizer step
    variable: float = 0.0               # job-wide per-step spread of the batch (sequence-length buckets)
    noise: float = 0.02                 # per rank-step compute noise (sd, fraction)
    spike_rate: float = 0.002           # rank-steps 1.5-2.5x (GC, page faults)
    data: float = 0.005                 # input pipeline wait per micro-batch
    fields: str = "full"                # "full", "comm" (step_time + comm_time) or "required"
    heartbeats: bool = True
    heartbeat_interval: float = 5.0
    buckets: int = 3                    # DDP gradient buckets: collectives per step
    collective_events: bool = False
    warmup_steps: int = 3               # first steps slower (compilation, autotune)
    slow: list[Slow] = field(default_factory=list)
    role: dict[int, float] = field(default_factory=dict)   # rank -> persistent compute factor
    jobwide: Slow | None = None         # every rank slower (rank and node unused)
    pauses: list[Pause] = field(default_factory=list)
    hang: Hang | None = None
    loss: NodeLoss | None = None
    link: LinkFault | None = None
    end_marker: bool = True
    lost: float = 0.02                  # share of events lost
    duplicated: float = 0.005           # share delivered twice
    latency: float = 0.3                # mean delivery latency (s), exponential
    flush: float = 0.0                  # each rank's producer sends its queue every `flush` s (0: at once)
    clock_spread: float = 3.0           # host clock offsets uniform in +-this (s)
    drift_ppm: float = 50.0
    stages: int = 0                     # pipeline stages over the nodes (0: none); each step event's `group`
    stage_factor: dict = field(default_factory=dict)   # stage -> compute factor (by design)
    clock_jump: tuple | None = None     # (node, seconds after the start, by how much) the host's clock steps
    only_rank0: bool = False            # only rank 0 reports (a callback wired on the main process alone)
    loose_types: bool = False           # rank/step as floats (3.0), extra unknown fields (lr, grad_norm)
    pgs: bool = False                   # heartbeats carry `pgs`: a TP group per node, a DP group per local GPU
    telemetry: bool = False             # link samples of every node's port
    gpu_telemetry: bool = False         # gpu samples of every GPU (the slow ranks' GPUs throttled)
    link_down_at_hang: bool = False     # the hang is a link going down behind node 1 (port DOWN)

    @property
    def ranks(self) -> int:
        return len(self.nodes) * self.gpus_per_node


class Clock:
    """A host's clock: true time plus an offset and a drift (and, optionally, one step: NTP setting it)."""

    def __init__(self, offset: float, drift: float, origin: float, jump_at: float = math.inf, jump: float = 0.0):
        self.offset, self.drift, self.origin = offset, drift, origin
        self.jump_at, self.jump = jump_at, jump

    def __call__(self, t: float) -> float:
        return t + self.offset + self.drift * (t - self.origin) + (self.jump if t >= self.jump_at else 0.0)


class Emitter:
    """Collects (arrival, event) pairs: each event delayed, sometimes lost or delivered twice."""

    def __init__(self, spec: JobSpec, rng: random.Random):
        self.spec, self.rng, self.out = spec, rng, []
        self.phase: dict[int, float] = {}

    def send(self, true_t: float, event: dict, reliable: bool = False) -> None:
        rng = self.rng
        if not reliable and rng.random() < self.spec.lost:
            return
        lat = min(rng.expovariate(1.0 / self.spec.latency), 4.0)
        rank = event.get("rank")
        if self.spec.only_rank0 and rank not in (None, 0):
            return
        if self.spec.flush and rank is not None:
            # the rank's sender thread ships its queue once per flush interval, at its own phase
            ph = self.phase.setdefault(rank, rng.uniform(0, self.spec.flush))
            true_t = ph + math.ceil((true_t - ph) / self.spec.flush) * self.spec.flush
            lat = min(lat, 0.05)
        self.out.append((true_t + lat, event))
        if not reliable and rng.random() < self.spec.duplicated:
            self.out.append((true_t + lat + rng.uniform(0.1, 2.0), dict(event)))


def simulate(spec: JobSpec, marks: dict | None = None) -> list[tuple[float, dict]]:
    """The job's events as (arrival true time, event), unsorted. `marks` (if given) receives the
    true times the labels need: "step" (start of each simulated step, by index), "stall" (when a
    hang or a node loss began), "end" (the last step's end)."""
    marks = {} if marks is None else marks
    marks["step"] = {}
    rng = random.Random(spec.seed)
    em = Emitter(spec, rng)
    clocks = {n: Clock(rng.uniform(-spec.clock_spread, spec.clock_spread),
                       rng.uniform(-spec.drift_ppm, spec.drift_ppm) * 1e-6, spec.start)
              for n in spec.nodes}
    if spec.clock_jump:
        c = clocks[spec.clock_jump[0]]
        c.jump_at, c.jump = spec.start + spec.clock_jump[1], spec.clock_jump[2]
    if spec.loss:
        clocks[spec.loss.spare] = Clock(rng.uniform(-spec.clock_spread, spec.clock_spread), 0.0, spec.start)
    placement = {r: spec.nodes[r // spec.gpus_per_node] for r in range(spec.ranks)}
    job = spec.name
    seq = {r: 1 for r in range(spec.ranks)}     # one broadcast of the parameters at start
    last_step = {r: spec.first_step - 1 for r in range(spec.ranks)}
    phase_now = "train"
    rank_phase: dict[int, str] = {}         # a rank's own phase (rank 0 saving alone), over the job's
    alive = {r: True for r in range(spec.ranks)}
    stuck = {r: False for r in range(spec.ranks)}   # rank stuck before the next collective
    waiting = {r: False for r in range(spec.ranks)}

    def ts(r_or_node, t):
        node = placement[r_or_node] if isinstance(r_or_node, int) else r_or_node
        return round(clocks[node](t), 6)

    def heartbeat(r, t):
        ev = {"v": 1, "kind": "heartbeat", "job": job, "rank": r, "node": placement[r], "ts": ts(r, t),
              "step": max(last_step[r], 0), "seq_started": seq[r] + (1 if waiting[r] else 0),
              "seq_completed": seq[r], "phase": rank_phase.get(r, phase_now)}
        if spec.pgs:
            st = pgstate[r]
            k, i = divmod(r, spec.gpus_per_node)
            tp = {"started": st["tp"] + (1 if st["wait"] == "tp" else 0), "completed": st["tp"], "desc": "tp",
                  "ranks": [k * spec.gpus_per_node + j for j in range(spec.gpus_per_node)]}
            dp = {"started": st["dp"] + (1 if st["wait"] == "dp" else 0), "completed": st["dp"], "desc": "dp",
                  "ranks": [n * spec.gpus_per_node + i for n in range(len(spec.nodes))]}
            ev["pgs"] = {"default": {"started": 1, "completed": 1}, f"pg{1 + k}": tp, f"pg{100 + i}": dp}
            del ev["seq_started"], ev["seq_completed"]
        em.send(t, ev)

    next_hb = {r: spec.start + rng.uniform(0, spec.heartbeat_interval) for r in range(spec.ranks)}
    pgstate = {r: {"tp": 0, "dp": 0, "wait": None} for r in range(spec.ranks)}

    def heartbeats_until(t_end):
        if not spec.heartbeats:
            return
        for r in range(spec.ranks):
            while next_hb[r] < t_end:
                if alive[r]:
                    heartbeat(r, next_hb[r])
                next_hb[r] += spec.heartbeat_interval * rng.uniform(0.98, 1.02)

    def phase(t, name, step=None):
        ev = {"v": 1, "kind": "phase", "job": job, "ts": ts(0, t), "phase": name}
        if step is not None:
            ev["step"] = step
        em.send(t, ev, reliable=True)   # rank 0's phase events: flushed at once, kept

    t = spec.start
    # model loading before the first step
    t += rng.uniform(20, 40)
    link_t = spec.start + spec.link.at if spec.link else None
    step = spec.first_step
    n = 0
    paused = set()
    delay0 = 0.0                            # rank 0 saving a checkpoint alone, before this step
    while n < spec.steps:
        # pauses happen after a step completed (checkpoint / eval every N steps)
        for p in spec.pauses:
            if n > 0 and n % p.every == 0 and (p.phase, n) not in paused:
                paused.add((p.phase, n))
                if p.rank0_only:
                    delay0 = p.seconds * rng.uniform(0.9, 1.1)
                    if p.marked:
                        # rank 0 marks its own phase (a `rank` field); the others go on into the next
                        # all-reduce and wait there for it
                        em.send(t, {"v": 1, "kind": "phase", "job": job, "rank": 0, "ts": ts(0, t),
                                    "phase": "checkpoint", "step": step - 1}, reliable=True)
                        rank_phase[0] = "checkpoint"
                        for r in range(1, spec.ranks):
                            waiting[r] = True
                        heartbeats_until(t + delay0)
                        em.send(t + delay0, {"v": 1, "kind": "phase", "job": job, "rank": 0,
                                             "ts": ts(0, t + delay0), "phase": "train"}, reliable=True)
                        rank_phase.pop(0)
                        for r in range(1, spec.ranks):
                            waiting[r] = False
                    continue
                if p.marked:
                    phase(t, p.phase, step - 1)
                    phase_now = p.phase
                heartbeats_until(t + p.seconds)
                t += p.seconds * rng.uniform(0.9, 1.1)
                if p.marked:
                    if n != p.lose_end_marker_at:
                        phase(t, "train")
                    phase_now = "train"
        marks["step"][n] = t
        if spec.loss and step == spec.loss.step:
            marks["stall"] = t
            t = _node_loss(spec, em, rng, clocks, placement, seq, last_step, alive, waiting,
                           heartbeats_until, t, ts)
            placement.update({r: spec.loss.spare for r, nd in placement.items() if nd == spec.loss.node})
            for r in alive:
                alive[r] = True
                waiting[r] = False
                seq[r] = 1
                last_step[r] = spec.loss.resume_step - 1
                next_hb[r] = t + rng.uniform(0, spec.heartbeat_interval)
            step = spec.loss.resume_step
            spec = _without_loss(spec)
            t += rng.uniform(20, 40)       # loading the checkpoint
            continue
        batch = 1.0 + (rng.uniform(-spec.variable, spec.variable) if spec.variable else 0.0)
        warm = 3.0 if n < spec.warmup_steps and spec.first_step == 0 else 1.0
        slow_all = spec.jobwide.factor if spec.jobwide and spec.jobwide.start <= n < spec.jobwide.stop else 1.0
        arrivals = {}
        datas, computes = {}, {}
        for r in range(spec.ranks):
            f = spec.role.get(r, 1.0) * slow_all * warm
            if spec.stages:
                f *= spec.stage_factor.get(_stage(spec, r), 1.0)
            extra_data = 0.0
            for s in spec.slow:
                hit = (s.rank == r) if s.rank is not None else (placement[r] == s.node)
                if hit and s.start <= n < s.stop:
                    if s.kind == "data":
                        extra_data += (s.factor - 1.0) * spec.compute * spec.micro * rng.uniform(0.8, 1.2)
                    elif s.kind == "flaky":
                        f *= s.factor if rng.random() < s.p else 1.0
                    elif s.kind == "ramp":
                        f *= 1.0 + (s.factor - 1.0) * min(1.0, (n - s.start) / s.ramp)
                    else:
                        f *= s.factor
            comp = 0.0
            data = extra_data
            for _ in range(spec.micro):
                c = spec.compute * batch * f * max(0.5, 1.0 + rng.gauss(0, spec.noise))
                if rng.random() < spec.spike_rate / spec.micro:
                    c *= rng.uniform(1.5, 2.5)
                comp += c
                data += spec.data * rng.lognormvariate(0, 0.3)
            datas[r], computes[r] = data, comp
            arrivals[r] = t + (delay0 if r == 0 else 0.0) + data + comp
        if spec.hang and step == spec.hang.step:
            marks["stall"] = t
            if spec.pgs:
                # rank h never issues its TP group's first collective of the step: its TP peers wait in
                # it; every other TP group finishes its TP work and waits in the DP all-reduce
                hk = spec.hang.rank // spec.gpus_per_node
                for r in range(spec.ranks):
                    if r == spec.hang.rank:
                        continue
                    if r // spec.gpus_per_node == hk:
                        pgstate[r]["wait"] = "tp"
                    else:
                        pgstate[r]["tp"] += spec.buckets
                        pgstate[r]["wait"] = "dp"
            _hang(spec, em, rng, placement, seq, last_step, alive, waiting, stuck, heartbeats_until, t,
                  arrivals, ts)
            h = spec.hang
            if h.restart_resume is None or h.teardown is None:
                return em.out
            t += h.teardown + h.culprit_lives + h.downtime
            heartbeats_until(t)
            for r in alive:
                alive[r] = True
                waiting[r] = False
                seq[r] = 1
                last_step[r] = h.restart_resume - 1
                next_hb[r] = t + rng.uniform(0, spec.heartbeat_interval)
            step = h.restart_resume
            spec = replace(spec, hang=None)
            t += rng.uniform(20, 40)
            continue
        xfer = spec.transfer * max(0.5, 1.0 + rng.gauss(0, 0.03))
        if link_t is not None and t >= link_t:
            xfer *= spec.link.factor
        end = max(arrivals.values()) + xfer
        heartbeats_until(end)
        for r in range(spec.ranks):
            e_r = end + rng.uniform(0, 0.0005)
            step_time = e_r - t - (delay0 if r == 0 else 0.0)
            comm = e_r - arrivals[r]
            seq[r] += spec.buckets
            pgstate[r]["tp"] += spec.buckets
            pgstate[r]["dp"] += 1
            last_step[r] = step
            ev = {"v": 1, "kind": "step", "job": job, "rank": r, "step": step, "ts": ts(r, e_r),
                  "step_time": round(step_time, 6)}
            if spec.fields in ("full", "comm"):
                ev["node"] = placement[r]
                ev["comm_time"] = round(comm, 6)
            if spec.stages:
                ev["group"] = f"stage{_stage(spec, r)}"
            if spec.loose_types:
                ev.update(rank=float(r), step=float(step), lr=3e-4, grad_norm=round(rng.uniform(0.5, 2), 3),
                          loss=round(2.5 - 0.001 * n + rng.gauss(0, 0.05), 4))
            if spec.fields == "full":
                ev.update({"gpu": r % spec.gpus_per_node, "world_size": spec.ranks,
                           "compute_time": round(computes[r], 6), "data_time": round(datas[r], 6),
                           "tokens": int(4096 * spec.micro * batch)})
                if n < spec.warmup_steps and spec.first_step == 0:
                    ev["phase"] = "warmup"
            em.send(e_r, ev)
            if spec.collective_events:
                em.send(e_r, {"v": 1, "kind": "collective", "job": job, "rank": r, "node": placement[r],
                              "seq": seq[r], "op": "all_reduce", "pg": "default", "step": step,
                              "ts": ts(r, e_r), "start_ts": ts(r, arrivals[r]),
                              "duration": round(comm, 6), "bytes": 268435456})
        t = end + 0.0005
        delay0 = 0.0
        step += 1
        n += 1
    heartbeats_until(t)
    marks["end"] = t
    if spec.end_marker:
        em.send(t + 0.5, {"v": 1, "kind": "phase", "job": job, "ts": ts(0, t + 0.5), "phase": "end"}, reliable=True)
    return em.out


def _stage(spec: JobSpec, r: int) -> int:
    """Pipeline stage of rank r: consecutive nodes form a stage."""
    return (r // spec.gpus_per_node) * spec.stages // len(spec.nodes)


def _without_loss(spec: JobSpec) -> JobSpec:
    from dataclasses import replace
    return replace(spec, loss=None)


def _hang(spec, em, rng, placement, seq, last_step, alive, waiting, stuck, heartbeats_until, t, arrivals, ts):
    """Rank h never issues the step's first all-reduce; the others issue it and wait."""
    h = spec.hang
    for r in range(spec.ranks):
        if r != h.rank:
            waiting[r] = True
    if h.dies:
        alive[h.rank] = False
    # the waiting ranks enter the collective at their arrival; heartbeats say so from then on
    end = t + (h.teardown if h.teardown is not None else 900.0)
    heartbeats_until(end)
    if h.teardown is None:
        return
    # NCCL's watchdog kills every waiting rank (a few seconds apart); the stuck one lives on
    for r in range(spec.ranks):
        if r != h.rank:
            alive[r] = False
    heartbeats_until(end + h.culprit_lives)
    if h.rank is not None:
        alive[h.rank] = False


def _node_loss(spec, em, rng, clocks, placement, seq, last_step, alive, waiting, heartbeats_until, t, ts):
    """The node dies mid-step; the others wait in the all-reduce, the launcher tears the job down
    and brings it back later. Returns the true time the new processes start."""
    lo = spec.loss
    dead = [r for r, nd in placement.items() if nd == lo.node]
    for r in dead:
        alive[r] = False
    for r in range(spec.ranks):
        if r not in dead:
            waiting[r] = True
    heartbeats_until(t + lo.detect)
    for r in range(spec.ranks):
        alive[r] = False
    heartbeats_until(t + lo.detect + lo.downtime)
    return t + lo.detect + lo.downtime


def link_samples(spec: JobSpec, t0: float, t1: float, seed: int, down_at: float | None = None
                 ) -> list[tuple[float, dict]]:
    """One `link` sample per node every 2 s (raw cumulative counters), the faulty port's error
    counters rising from the fault on. Telemetry is keyed by node; delivered with small latency."""
    rng = random.Random(seed)
    out = []
    clocks = {n: Clock(rng.uniform(-spec.clock_spread, spec.clock_spread), 0.0, t0) for n in spec.nodes}
    counters = {n: {"port_xmit_data": rng.randrange(10**12), "port_rcv_data": rng.randrange(10**12),
                    "port_xmit_wait": rng.randrange(10**9), "symbol_error": rng.randrange(5),
                    "link_error_recovery": 0, "link_downed": 0, "port_rcv_errors": 0} for n in spec.nodes}
    fault_t = spec.start + spec.link.at if spec.link else math.inf
    t = t0
    while t < t1:
        for n in spec.nodes:
            c = counters[n]
            words = int(2e9 * rng.uniform(0.9, 1.1))   # ~8 GB/s each way in 2 s, in 4-byte words
            bad = spec.link and n == spec.link.node and t >= fault_t
            if bad:
                words = int(words / spec.link.factor)
                c["symbol_error"] += rng.randrange(40, 400)
                c["port_rcv_errors"] += rng.randrange(1, 20)
                if rng.random() < 0.2:
                    c["link_error_recovery"] += 1
            c["port_xmit_data"] += words
            c["port_rcv_data"] += words
            c["port_xmit_wait"] += int(rng.uniform(1e5, 3e5) * (4 if bad else 1))
            down = down_at is not None and n == spec.nodes[1] and t >= down_at
            if down:
                c["port_xmit_data"] -= words   # nothing moves over a port that is down
                c["port_rcv_data"] -= words
                if c["link_downed"] == 0:
                    c["link_downed"] = 1
                c["symbol_error"] += rng.randrange(100, 1000)
            ev = {"v": 1, "kind": "link", "node": n, "ts": round(clocks[n](t), 6), "device": "mlx5_0",
                  "port": 1, "state": "DOWN" if down else "ACTIVE",
                  "phys_state": "Polling" if down else "LinkUp", "rate": 400.0,
                  "link_layer": "InfiniBand", "counters": dict(c)}
            out.append((t + rng.uniform(0.01, 0.3), ev))
        t += 2.0
    return out


def gpu_samples(spec: JobSpec, t0: float, t1: float, seed: int, marks: dict) -> list[tuple[float, dict]]:
    """One `gpu` sample per GPU per second; a slow rank's GPU (Slow with a rank, compute kind) thermally
    throttled from its onset: hot, SM clock down to ~60 %, throttle reason HW thermal (0x40)."""
    rng = random.Random(seed)
    out = []
    clocks = {n: Clock(rng.uniform(-spec.clock_spread, spec.clock_spread), 0.0, t0) for n in spec.nodes}
    hot = {}
    for s in spec.slow:
        if s.rank is not None and s.kind == "compute" and s.start in marks["step"]:
            hot[(spec.nodes[s.rank // spec.gpus_per_node], s.rank % spec.gpus_per_node)] = marks["step"][s.start]
    t = t0
    while t < t1:
        for n in spec.nodes:
            for g in range(spec.gpus_per_node):
                bad = (n, g) in hot and t >= hot[(n, g)]
                ev = {"v": 1, "kind": "gpu", "node": n, "ts": round(clocks[n](t), 6), "gpu": g,
                      "util": round(rng.uniform(92, 100), 1), "mem_used": 60 * 2**30, "mem_total": 80 * 2**30,
                      "temp": round(rng.uniform(88, 92) if bad else rng.uniform(60, 70), 1),
                      "power": round(rng.uniform(450, 600), 1), "power_limit": 700.0,
                      "sm_clock": float(rng.choice([1170, 1185, 1200]) if bad else rng.choice([1965, 1980])),
                      "sm_clock_max": 1980.0, "throttle": 0x40 if bad else 0, "ecc_sbe": 0, "ecc_dbe": 0}
                out.append((t + rng.uniform(0.01, 0.3), ev))
        t += 1.0
    return out


def host_samples(spec: JobSpec, t0: float, t1: float, seed: int, marks: dict) -> list[tuple[float, dict]]:
    """One `host` sample per node every 5 s (procfs counters); with a hang whose culprit dies of the OOM
    killer, its node's oom_kills counter rises right then and its memory is nearly gone before."""
    rng = random.Random(seed)
    out = []
    clocks = {n: Clock(rng.uniform(-spec.clock_spread, spec.clock_spread), 0.0, t0) for n in spec.nodes}
    victim = stall = None
    if spec.hang and spec.hang.dies == "oom":
        victim, stall = spec.nodes[spec.hang.rank // spec.gpus_per_node], marks.get("stall")
    jiffies = {n: [rng.randrange(10**8), rng.randrange(10**9)] for n in spec.nodes}
    t = t0 + rng.uniform(0, 5)
    while t < t1:
        for n in spec.nodes:
            jiffies[n][0] += int(500 * 64 * rng.uniform(0.4, 0.5))
            jiffies[n][1] += int(500 * 64 * rng.uniform(0.5, 0.6))
            oom = 1 if victim == n and stall is not None and t >= stall + 0.5 else 0
            tight = victim == n and stall is not None and stall - 30 <= t < stall + 0.5
            ev = {"v": 1, "kind": "host", "node": n, "ts": round(clocks[n](t), 6), "load1": 40.0,
                  "cpu": {"user": jiffies[n][0], "nice": 0, "system": 1000, "idle": jiffies[n][1], "iowait": 10,
                          "irq": 0, "softirq": 0, "steal": 0},
                  "mem_total": 2 * 2**40, "mem_available": int(2 * 2**40 * (0.01 if tight else 0.6)),
                  "swap_used": 0, "oom_kills": oom,
                  "psi": {"cpu": {"some_avg10": 1.0}, "io": {"some_avg10": 0.5, "full_avg10": 0.1},
                          "memory": {"some_avg10": 30.0 if tight else 0.0, "full_avg10": 5.0 if tight else 0.0}}}
            out.append((t + rng.uniform(0.01, 0.3), ev))
        t += 5.0
    return out


def xid_events(spec: JobSpec, marks: dict, seed: int) -> list[tuple[float, dict]]:
    """An Xid 79 (GPU fallen off the bus) on the culprit's GPU as its process dies."""
    rng = random.Random(seed)
    h = spec.hang
    node = spec.nodes[h.rank // spec.gpus_per_node]
    t = marks["stall"] + 0.2
    return [(t + 0.1, {"v": 1, "kind": "xid", "node": node, "ts": round(t + rng.uniform(-0.5, 0.5), 6),
                       "gpu": h.rank % spec.gpus_per_node, "xid": 79,
                       "message": "GPU has fallen off the bus."})]
