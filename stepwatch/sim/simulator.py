"""A simulated synchronous training job with fault injection, for demos, tests and benchmarks.

Each step every rank loads data, computes, then enters the step's collectives and waits
there for the slowest rank. So, as on a real cluster, all ranks share (nearly) the same
``step_time``; a slow rank shows in its larger ``compute_time`` and smaller ``comm_time``.
Healthy noise is always on: per-rank jitter, rare GC spikes, data-loader hiccups, warm-up
steps, checkpoint pauses, and optionally a slowdown of the whole job. Output is
deterministic for a given seed.

With ``heartbeat_interval > 0`` every rank also sends a heartbeat every that many
simulated seconds (as a background thread would, also while its training thread is
stuck), carrying its last completed step and its collective sequence numbers: each step
issues ``collectives_per_step`` collectives (gradient buckets) in order, and a rank issues
the next one only once the previous one completed. Hang faults (``HangFault``) stop one
rank before the first collective of a step: the others issue it and wait inside it.

With ``collective_events`` every rank also reports each of the step's collectives as a
``collective`` event (``all_reduce`` on process group ``default``, ``collective_bytes``
each). They run one after the other once the slowest rank arrived, splitting the step's
transfer time: a rank's first one includes its wait for the slowest rank, so the minimum
duration over ranks is the transfer time, and a rank's durations add up to its ``comm_time``.
Job-wide causes for the job-health rules: ``CommSlowdown`` (transfer time up for all ranks),
``InputStall`` (data_time up for all ranks), ``NoisyNeighbour`` (compute up on some nodes),
and ``checkpoint_until`` (the job stops checkpointing).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np


@dataclass(frozen=True, kw_only=True)
class StragglerFault:
    """``rank`` computes ``factor`` times slower from ``start_step`` until ``end_step`` (exclusive)."""

    rank: int
    start_step: int
    factor: float
    end_step: int | None = None

    def active(self, step: int) -> bool:
        return step >= self.start_step and (self.end_step is None or step < self.end_step)


@dataclass(frozen=True, kw_only=True)
class JobSlowdown:
    """Every rank slows down by ``factor`` (a shared cause: not a straggler)."""

    start_step: int
    factor: float
    end_step: int | None = None

    def active(self, step: int) -> bool:
        return step >= self.start_step and (self.end_step is None or step < self.end_step)


HANG_KINDS = ("hang", "frozen", "dead")


@dataclass(frozen=True, kw_only=True)
class HangFault:
    """``rank`` stops at ``step``, before issuing that step's first collective; the others wait in it.

    ``kind``: ``hang`` the training thread blocks but the process lives on (heartbeats continue);
    ``frozen`` the whole process stops (SIGSTOP: no heartbeats either); ``dead`` the process
    exits. After ``duration`` simulated seconds a ``hang`` or ``frozen`` rank resumes and the job
    carries on when ``recover``; otherwise (and always when ``dead``) the remaining ranks are
    killed too (NCCL watchdog) and the run stops there, without a ``phase: end``. A ``hang`` rank
    that does not recover outlives the teardown by ``teardown_grace`` seconds (its main thread is
    stuck, so its SIGTERM handler never runs; the launcher's SIGKILL comes later): its heartbeats
    go on alone until then.
    """

    rank: int
    step: int
    kind: str = "hang"
    duration: float = 660.0
    recover: bool = True
    teardown_grace: float = 0.0

    @property
    def resumes(self) -> bool:
        return self.recover and self.kind != "dead"


@dataclass(frozen=True, kw_only=True)
class SimulationSpec:
    job: str = "sim-job"
    ranks: int = 64
    ranks_per_node: int = 8
    #: Pipeline stages: ranks are split into this many peer groups of different speeds.
    stages: int = 1
    #: How much slower each later stage computes (stage imbalance by design).
    stage_skew: float = 0.15
    steps: int = 300
    compute_time: float = 0.80
    data_time: float = 0.02
    comm_time: float = 0.15
    jitter: float = 0.01
    gc_probability: float = 0.002
    gc_seconds: float = 0.25
    hiccup_probability: float = 0.002
    hiccup_seconds: float = 0.5
    warmup_steps: int = 5
    checkpoint_every: int = 0
    checkpoint_seconds: float = 20.0
    start_time: float = 1_700_000_000.0
    first_step: int = 0
    seed: int = 0
    tokens_per_step: int = 4096
    stragglers: tuple[StragglerFault, ...] = field(default_factory=tuple)
    slowdowns: tuple[JobSlowdown, ...] = field(default_factory=tuple)
    #: Simulated seconds between two heartbeats of a rank; 0 sends none.
    heartbeat_interval: float = 0.0
    #: Collectives (e.g. all-reduce buckets) per step: how far the sequence numbers advance.
    collectives_per_step: int = 2
    hangs: tuple[HangFault, ...] = field(default_factory=tuple)
    #: Node names are ``{node_prefix}{first_node + rank // ranks_per_node:03d}``: give two jobs different
    #: prefixes (or ranges) so their recordings do not share nodes (a link fault of one is not the other's).
    node_prefix: str = "node-"
    first_node: int = 0
    #: Extra perturbations (``RampStraggler``, ``IntermittentStraggler``, ``DataStall``, ``Drift``, or any
    #: object with ``apply(step, compute, data, spec)``), applied in order after the built-in noise.
    #: One that also has ``comm_factor(step)`` (``CommSlowdown``) scales the collectives' transfer time.
    effects: tuple = field(default_factory=tuple)
    #: Also emit one ``collective`` event per rank for each of the step's ``collectives_per_step``.
    collective_events: bool = False
    #: Message size of each collective (a DDP gradient bucket: 25 MiB).
    collective_bytes: int = 25 * 2**20
    #: No checkpoint from this step on (the job stops checkpointing); None: checkpoints throughout.
    checkpoint_until: int | None = None

    def __post_init__(self) -> None:
        if self.ranks < 1 or self.ranks_per_node < 1 or self.stages < 1 or self.steps < 0:
            raise ValueError("ranks, ranks_per_node and stages must be >= 1 and steps >= 0")
        if self.ranks % self.stages:
            raise ValueError(f"{self.ranks} ranks do not split into {self.stages} equal stages")
        for fault in self.stragglers:
            if not 0 <= fault.rank < self.ranks:
                raise ValueError(f"straggler rank {fault.rank} is outside 0..{self.ranks - 1}")
        if self.heartbeat_interval < 0 or self.collectives_per_step < 1:
            raise ValueError("heartbeat_interval must be >= 0 and collectives_per_step >= 1")
        seen_steps = set()
        for fault in self.hangs:
            if not 0 <= fault.rank < self.ranks:
                raise ValueError(f"hang rank {fault.rank} is outside 0..{self.ranks - 1}")
            if fault.kind not in HANG_KINDS:
                raise ValueError(f"hang kind {fault.kind!r} is not one of {HANG_KINDS}")
            if fault.duration <= 0 or fault.teardown_grace < 0:
                raise ValueError("hang duration must be positive and teardown_grace not negative")
            if fault.step in seen_steps:
                raise ValueError(f"two hangs at step {fault.step}")
            seen_steps.add(fault.step)

    def node_of(self, rank: int) -> str:
        return f"{self.node_prefix}{self.first_node + rank // self.ranks_per_node:03d}"


class ClusterSimulator:
    """Generates the wire-format events of one simulated job, step by step."""

    def __init__(self, spec: SimulationSpec) -> None:
        self.spec = spec
        self._rng = np.random.default_rng(spec.seed)
        # Its own stream: turning collective events on leaves every other event as it was.
        self._collective_rng = np.random.default_rng((spec.seed, 1))
        per_stage = spec.ranks // spec.stages
        self._stage = np.arange(spec.ranks) // per_stage
        self._nodes = [spec.node_of(r) for r in range(spec.ranks)]
        self._gpus = np.arange(spec.ranks) % spec.ranks_per_node

    def steps(self) -> Iterator[tuple[float, list[dict]]]:
        """Yield ``(time, events)`` batches in time order: each step's events at its end.

        With heartbeats on, each heartbeat round is its own batch at its own time, and phase
        markers at a step's start are a batch at that start, so that a paced live run sends
        them when they happen (a long checkpoint or hang is visible while it lasts).
        """
        spec = self.spec
        rng = self._rng
        clock = spec.start_time
        heartbeats = spec.heartbeat_interval > 0
        hangs = {fault.step: fault for fault in spec.hangs}
        n_coll = spec.collectives_per_step
        # Heartbeat state: the last completed step (a baseline before the first) and collective seqs.
        self._hb_next = spec.start_time + spec.heartbeat_interval
        self._last_completed = max(spec.first_step - 1, 0)
        self._seq_base = 0
        yield clock, [self._phase(clock, "warmup")] if spec.warmup_steps else []
        for i in range(spec.steps):
            step = spec.first_step + i
            events: list[dict] = []
            phase = "warmup" if i < spec.warmup_steps else "train"
            if i == spec.warmup_steps and spec.warmup_steps:
                events.append(self._phase(clock, "train"))
            checkpoint = spec.checkpoint_every and i and i % spec.checkpoint_every == 0
            if spec.checkpoint_until is not None and step >= spec.checkpoint_until:
                checkpoint = False
            if checkpoint:
                events.append(self._phase(clock, "checkpoint", step=step))
                phase = "checkpoint"
            if heartbeats and events:
                yield clock, events
                events = []

            compute = spec.compute_time * (1 + spec.stage_skew * self._stage)
            compute = compute * (1 + spec.jitter * rng.standard_normal(spec.ranks))
            if i < spec.warmup_steps:
                compute = compute * (3.0 if i == 0 else 1.5)
            for fault in spec.slowdowns:
                if fault.active(step):
                    compute = compute * fault.factor
            for fault in spec.stragglers:
                if fault.active(step):
                    compute[fault.rank] *= fault.factor
            gc = rng.random(spec.ranks) < spec.gc_probability
            compute = compute + gc * spec.gc_seconds
            if checkpoint:
                # Each rank writes its shard; rank 0 also writes the metadata and takes longest.
                compute = compute + spec.checkpoint_seconds * rng.uniform(0.8, 1.0, spec.ranks)
                compute[0] += 0.2 * spec.checkpoint_seconds
            data = spec.data_time * (1 + 0.1 * rng.standard_normal(spec.ranks)).clip(0.5)
            hiccup = rng.random(spec.ranks) < spec.hiccup_probability
            data = data + hiccup * spec.hiccup_seconds
            for effect in spec.effects:
                compute, data = effect.apply(step, compute, data, spec)

            hang = hangs.get(step)
            stop_at = None
            if hang is not None:
                # The rank stops where it would issue the step's first collective.
                stop_at = clock + float(data[hang.rank] + compute[hang.rank] / n_coll)
                if hang.resumes:
                    compute[hang.rank] += hang.duration
            arrival = data + compute  # when each rank enters the step's collectives
            comm_own = spec.comm_time * (1 + 0.02 * rng.standard_normal(spec.ranks)).clip(0.5)
            for effect in spec.effects:
                comm_factor = getattr(effect, "comm_factor", None)
                if comm_factor is not None:
                    comm_own = comm_own * comm_factor(step)
            step_end = float(arrival.max() + comm_own.max())
            comm = step_end - arrival  # waiting for the slowest rank plus the transfer itself
            send_delay = rng.uniform(0.0, 0.005, spec.ranks)

            if heartbeats:
                # When each rank is ready to issue each of the step's collectives (ranks x n).
                frac = np.arange(1, n_coll + 1) / n_coll
                own = clock + data[:, None] + compute[:, None] * frac[None, :]
                stopped = None
                if hang is not None:
                    if hang.resumes:
                        own[hang.rank, :] += hang.duration * (1 - frac)  # the whole stall before the first
                    else:
                        own[hang.rank, :] = np.inf
                        stopped = stop_at + hang.duration
                # A collective a rank never issues never completes: no clipping to the step's end then.
                end = clock + step_end if stopped is None else np.inf
                issue, done = self._block(own, float(comm_own.max()) / n_coll, end)
                silent = None
                if hang is not None and hang.kind in ("frozen", "dead"):
                    silent = (hang.rank, stop_at, stop_at + hang.duration if hang.resumes else np.inf)
                window_end = clock + step_end if stopped is None else stopped
                for t in self._heartbeat_ticks(window_end):
                    yield t, self._heartbeat_batch(t, issue, done, phase, silent)
                if stopped is not None and hang.kind == "hang" and hang.teardown_grace > 0:
                    # the watchdog killed the waiting ranks; the stuck one lives on alone a while
                    for t in self._heartbeat_ticks(stopped + hang.teardown_grace):
                        yield t, [hb for hb in self._heartbeat_batch(t, issue, done, phase, None)
                                  if hb["rank"] == hang.rank]
                if stopped is not None:
                    return  # the job died there: no more steps, no end marker

            for rank in range(spec.ranks):
                event = {
                    "v": 1, "kind": "step", "job": spec.job, "rank": rank, "step": step,
                    "ts": round(clock + step_end + float(send_delay[rank]), 6),
                    "step_time": round(step_end, 6),
                    "compute_time": round(float(compute[rank]), 6),
                    "data_time": round(float(data[rank]), 6),
                    "comm_time": round(float(comm[rank]), 6),
                    "node": self._nodes[rank], "gpu": int(self._gpus[rank]),
                    "world_size": spec.ranks, "tokens": spec.tokens_per_step,
                }
                if spec.stages > 1:
                    event["group"] = f"stage{int(self._stage[rank])}"
                if phase != "train":
                    event["phase"] = phase
                events.append(event)
            if spec.collective_events:
                events.extend(self._collectives(step, clock, arrival, float(comm_own.max()), send_delay))
            clock += step_end
            self._last_completed = step
            self._seq_base += n_coll
            if checkpoint:
                events.append(self._phase(clock, "train", step=step))
            yield clock, events
        yield clock, [self._phase(clock, "end")]

    # -- heartbeats --------------------------------------------------------------------------

    @staticmethod
    def _block(own: np.ndarray, transfer: float, end: float) -> tuple[np.ndarray, np.ndarray]:
        # A rank issues collective j once it is ready and collective j-1 completed; j completes
        # once every rank issued it (inf while one never does).
        issue = own.copy()
        done = np.empty(own.shape[1])
        prev = -np.inf
        for j in range(own.shape[1]):
            issue[:, j] = np.maximum(issue[:, j], prev)
            done[j] = min(float(issue[:, j].max()) + transfer, end)
            issue[:, j] = np.minimum(issue[:, j], done[j])
            prev = done[j]
        return issue, done

    def _heartbeat_ticks(self, until: float) -> Iterator[float]:
        while self._hb_next <= until:
            t = self._hb_next
            self._hb_next = round(self._hb_next + self.spec.heartbeat_interval, 9)
            yield t

    def _heartbeat_batch(self, t: float, issue: np.ndarray, done: np.ndarray, phase: str,
                         silent: tuple[int, float, float] | None) -> list[dict]:
        spec = self.spec
        started = self._seq_base + (issue <= t).sum(axis=1)
        completed = self._seq_base + int((done <= t).sum())
        batch = []
        for rank in range(spec.ranks):
            if silent is not None and rank == silent[0] and silent[1] <= t < silent[2]:
                continue
            hb = {"v": 1, "kind": "heartbeat", "job": spec.job, "rank": rank, "ts": round(t, 6),
                  "step": self._last_completed, "node": self._nodes[rank],
                  "seq_started": int(started[rank]), "seq_completed": completed}
            if phase != "train":
                hb["phase"] = phase
            batch.append(hb)
        return batch

    def _collectives(self, step: int, clock: float, arrival: np.ndarray, transfer: float,
                     send_delay: np.ndarray) -> list[dict]:
        """The step's collectives, in order, once the slowest rank arrived (see the module doc)."""
        spec = self.spec
        n = spec.collectives_per_step
        share = (1 + 0.05 * self._collective_rng.standard_normal(n)).clip(0.5) if n > 1 else np.ones(1)
        ends = clock + float(arrival.max()) + np.cumsum(transfer * share / share.sum())
        starts = np.concatenate(([np.nan], ends[:-1]))
        out = []
        for j in range(n):
            # The first collective starts when each rank arrives; the next ones when the previous ended.
            begin = clock + arrival if j == 0 else np.full(spec.ranks, starts[j])
            for rank in range(spec.ranks):
                out.append({"v": 1, "kind": "collective", "job": spec.job, "rank": rank,
                            "seq": self._seq_base + j + 1, "op": "all_reduce", "pg": "default",
                            "bytes": spec.collective_bytes, "step": step, "node": self._nodes[rank],
                            "start_ts": round(float(begin[rank]), 6),
                            "ts": round(float(ends[j] + send_delay[rank]), 6),
                            "duration": round(float(ends[j] - begin[rank]), 6)})
        return out

    def events(self) -> Iterator[dict]:
        for _, batch in self.steps():
            yield from batch

    def _phase(self, ts: float, phase: str, *, step: int | None = None) -> dict:
        event = {"v": 1, "kind": "phase", "job": self.spec.job, "ts": round(ts, 6), "phase": phase}
        if step is not None:
            event["step"] = step
        return event


# -- effects: extra faults and noise as small objects the step loop applies (see ``effects``) --------


@dataclass(frozen=True, kw_only=True)
class RampStraggler:
    """Gradual slowdown of ``rank`` (thermal throttling): its compute factor grows linearly from 1
    at ``start_step`` to ``factor`` at ``start_step + ramp_steps``, then stays there until ``end_step``."""

    rank: int
    start_step: int
    factor: float
    ramp_steps: int = 100
    end_step: int | None = None

    def factor_at(self, step: int) -> float:
        if step < self.start_step or (self.end_step is not None and step >= self.end_step):
            return 1.0
        progress = min((step - self.start_step) / max(self.ramp_steps, 1), 1.0)
        return 1.0 + (self.factor - 1.0) * progress

    def apply(self, step: int, compute: np.ndarray, data: np.ndarray, spec: "SimulationSpec"):
        f = self.factor_at(step)
        if f != 1.0:
            compute[self.rank] *= f
        return compute, data


@dataclass(frozen=True, kw_only=True)
class IntermittentStraggler:
    """``rank`` computes ``factor`` times slower in bursts of ``burst`` steps every ``period`` steps,
    from ``start_step`` until ``end_step`` (exclusive)."""

    rank: int
    start_step: int
    factor: float
    burst: int = 8
    period: int = 40
    end_step: int | None = None

    def active(self, step: int) -> bool:
        return (step >= self.start_step and (self.end_step is None or step < self.end_step)
                and (step - self.start_step) % self.period < self.burst)

    def apply(self, step: int, compute: np.ndarray, data: np.ndarray, spec: "SimulationSpec"):
        if self.active(step):
            compute[self.rank] *= self.factor
        return compute, data


@dataclass(frozen=True, kw_only=True)
class DataStall:
    """``rank``'s input pipeline stalls: ``seconds`` more data-loader wait every step from
    ``start_step`` until ``end_step`` (exclusive). Its compute is normal; it arrives late."""

    rank: int
    start_step: int
    seconds: float
    end_step: int | None = None

    def apply(self, step: int, compute: np.ndarray, data: np.ndarray, spec: "SimulationSpec"):
        if step >= self.start_step and (self.end_step is None or step < self.end_step):
            data[self.rank] += self.seconds
        return compute, data


@dataclass(frozen=True, kw_only=True)
class Drift:
    """Slow periodic drift of compute speed (diurnal temperature): every rank's compute is
    scaled by ``1 + amplitude * sin(2 pi step / period_steps + phase)``, where each node's
    phase differs from the job's by up to ``node_phase_spread`` radians (racks warm unevenly)."""

    amplitude: float = 0.02
    period_steps: int = 400
    node_phase_spread: float = 0.5
    seed: int = 0

    def apply(self, step: int, compute: np.ndarray, data: np.ndarray, spec: "SimulationSpec"):
        n_nodes = -(-spec.ranks // spec.ranks_per_node)
        phases = np.random.default_rng(self.seed).uniform(-self.node_phase_spread, self.node_phase_spread, n_nodes)
        node = np.arange(spec.ranks) // spec.ranks_per_node
        angle = 2 * np.pi * step / self.period_steps + phases[node]
        return compute * (1 + self.amplitude * np.sin(angle)), data


# -- job-wide causes: what the job-health rules (throughput_drop, comm_slowdown) are about ---------------


@dataclass(frozen=True, kw_only=True)
class CommSlowdown:
    """The network slows down (congestion, a degraded link or switch, a fabric shared with another
    job): every collective's transfer takes ``factor`` times longer for all ranks from ``start_step``
    until ``end_step`` (exclusive). Compute and data are unchanged; every rank's ``comm_time`` grows."""

    start_step: int
    factor: float
    end_step: int | None = None

    def comm_factor(self, step: int) -> float:
        active = step >= self.start_step and (self.end_step is None or step < self.end_step)
        return self.factor if active else 1.0

    def apply(self, step: int, compute: np.ndarray, data: np.ndarray, spec: "SimulationSpec"):
        return compute, data


@dataclass(frozen=True, kw_only=True)
class InputStall:
    """The input pipeline of every rank stalls (shared storage or a data service slows down): each
    rank waits ``seconds`` more for its batch, within +-``spread`` (relative, per rank and step),
    from ``start_step`` until ``end_step`` (exclusive). Compute is unchanged."""

    start_step: int
    seconds: float
    end_step: int | None = None
    spread: float = 0.2
    seed: int = 0

    def apply(self, step: int, compute: np.ndarray, data: np.ndarray, spec: "SimulationSpec"):
        if step >= self.start_step and (self.end_step is None or step < self.end_step):
            rng = np.random.default_rng((self.seed, step))
            data = data + self.seconds * rng.uniform(1 - self.spread, 1 + self.spread, spec.ranks)
        return compute, data


@dataclass(frozen=True, kw_only=True)
class NoisyNeighbour:
    """Another tenant's processes share ``nodes`` (node indices) and compete for their CPUs, memory
    bandwidth and PCIe: the ranks on those nodes compute ``factor`` times slower from ``start_step``
    until ``end_step`` (exclusive). On most of the job's nodes it is a whole-job slowdown (compute
    layer); on a few nodes it is a set of stragglers."""

    nodes: tuple[int, ...]
    start_step: int
    factor: float
    end_step: int | None = None

    def ranks(self, spec: "SimulationSpec") -> tuple[int, ...]:
        return tuple(r for r in range(spec.ranks) if r // spec.ranks_per_node in self.nodes)

    def apply(self, step: int, compute: np.ndarray, data: np.ndarray, spec: "SimulationSpec"):
        if step >= self.start_step and (self.end_step is None or step < self.end_step):
            node = np.arange(spec.ranks) // spec.ranks_per_node
            compute = compute * np.where(np.isin(node, self.nodes), self.factor, 1.0)
        return compute, data


#: Event fields that are timestamps on the clock of the host that wrote the event.
_CLOCK_FIELDS = ("ts", "start_ts")


def apply_clock_skew(batch: list[dict], skew: dict[str, float]) -> list[dict]:
    """``batch`` as written by hosts whose clocks are off: every timestamp of an event from node ``n``
    (steps, collectives, heartbeats, telemetry) moves by ``skew[n]`` seconds; durations do not (they are
    differences on one clock), nor does the order events arrive in."""
    if not skew:
        return batch
    out = []
    for event in batch:
        offset = skew.get(event.get("node"))
        if offset:
            event = dict(event)
            for name in _CLOCK_FIELDS:
                if isinstance(event.get(name), (int, float)):
                    event[name] = round(event[name] + offset, 6)
        out.append(event)
    return out
