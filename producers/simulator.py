"""A simulated synchronous training job with fault injection, for demos, tests and benchmarks.

Each step every rank loads data, computes, then enters the step's collectives and waits
there for the slowest rank. So, as on a real cluster, all ranks share (nearly) the same
``step_time``; a slow rank shows in its larger ``compute_time`` and smaller ``comm_time``.
Healthy noise is always on: per-rank jitter, rare GC spikes, data-loader hiccups, warm-up
steps, checkpoint pauses, and optionally a slowdown of the whole job. Output is
deterministic for a given seed.
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

    def __post_init__(self) -> None:
        if self.ranks < 1 or self.ranks_per_node < 1 or self.stages < 1 or self.steps < 0:
            raise ValueError("ranks, ranks_per_node and stages must be >= 1 and steps >= 0")
        if self.ranks % self.stages:
            raise ValueError(f"{self.ranks} ranks do not split into {self.stages} equal stages")
        for fault in self.stragglers:
            if not 0 <= fault.rank < self.ranks:
                raise ValueError(f"straggler rank {fault.rank} is outside 0..{self.ranks - 1}")

    def node_of(self, rank: int) -> str:
        return f"node-{rank // self.ranks_per_node:03d}"


class ClusterSimulator:
    """Generates the wire-format events of one simulated job, step by step."""

    def __init__(self, spec: SimulationSpec) -> None:
        self.spec = spec
        self._rng = np.random.default_rng(spec.seed)
        per_stage = spec.ranks // spec.stages
        self._stage = np.arange(spec.ranks) // per_stage
        self._nodes = [spec.node_of(r) for r in range(spec.ranks)]
        self._gpus = np.arange(spec.ranks) % spec.ranks_per_node

    def steps(self) -> Iterator[tuple[float, list[dict]]]:
        """Yield ``(time the step ended, events of that step)`` for every step, in order."""
        spec = self.spec
        rng = self._rng
        clock = spec.start_time
        yield clock, [self._phase(clock, "warmup")] if spec.warmup_steps else []
        for i in range(spec.steps):
            step = spec.first_step + i
            events: list[dict] = []
            phase = "warmup" if i < spec.warmup_steps else "train"
            if i == spec.warmup_steps and spec.warmup_steps:
                events.append(self._phase(clock, "train"))
            checkpoint = spec.checkpoint_every and i and i % spec.checkpoint_every == 0
            if checkpoint:
                events.append(self._phase(clock, "checkpoint", step=step))
                phase = "checkpoint"

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

            arrival = data + compute  # when each rank enters the step's collectives
            comm_own = spec.comm_time * (1 + 0.02 * rng.standard_normal(spec.ranks)).clip(0.5)
            step_end = float(arrival.max() + comm_own.max())
            comm = step_end - arrival  # waiting for the slowest rank plus the transfer itself
            send_delay = rng.uniform(0.0, 0.005, spec.ranks)
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
            clock += step_end
            if checkpoint:
                events.append(self._phase(clock, "train", step=step))
            yield clock, events
        yield clock, [self._phase(clock, "end")]

    def events(self) -> Iterator[dict]:
        for _, batch in self.steps():
            yield from batch

    def _phase(self, ts: float, phase: str, *, step: int | None = None) -> dict:
        event = {"v": 1, "kind": "phase", "job": self.spec.job, "ts": round(ts, 6), "phase": phase}
        if step is not None:
            event["step"] = step
        return event
