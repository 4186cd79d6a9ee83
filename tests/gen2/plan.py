"""What a generated job is and what goes wrong in it: small frozen descriptions, no behaviour."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum


class Marking(Enum):
    """Whether the job tells stepwatch about a pause (a ``phase`` event) or just pauses."""

    MARKED = "marked"
    UNMARKED = "unmarked"


@dataclass(frozen=True)
class Slow:
    """Rank ``rank`` computes ``factor`` times as long from step ``start`` (to ``end``, exclusive); with
    ``every``, only on every ``every``-th of those steps (a flaky GPU)."""

    rank: int
    start: int
    factor: float
    end: int | None = None
    every: int = 1

    def hits(self, rank: int, step: int) -> bool:
        return (rank == self.rank and self.start <= step and (self.end is None or step < self.end)
                and (step - self.start) % self.every == 0)


@dataclass(frozen=True)
class Pause:
    """Every rank stops after step ``step`` for ``seconds``: a checkpoint save or an evaluation.

    Marked: job-wide ``phase`` events bracket it and no step's timers count it. Unmarked: it
    lands in the next step's timings (rank 0 writes, or every rank evaluates, the rest wait in a
    barrier), as a training loop without stepwatch's phase calls would report it."""

    step: int
    seconds: float
    phase: str  # "checkpoint" or "eval"
    marking: Marking


@dataclass(frozen=True)
class Noise:
    """Random single-step events on random ranks: GC pauses and data-loader hiccups."""

    gc_rate: float = 0.0  # chance per rank-step of a GC pause
    gc_seconds: float = 0.25
    loader_rate: float = 0.0  # chance per rank-step of waiting on the input pipeline
    loader_seconds: float = 0.4


@dataclass(frozen=True)
class Restart:
    """The job dies after step ``at`` and, ``downtime`` seconds later, resumes from its checkpoint at
    ``resume`` (step numbers and collective sequence numbers start again; new pids). With ``moved``,
    the ranks of node ``moved[0]`` come back on node ``moved[1]`` (a spare)."""

    at: int
    resume: int
    downtime: float = 20.0
    moved: tuple[str, str] | None = None


@dataclass(frozen=True)
class Stuck:
    """Rank ``rank``'s training thread stops before its collective of step ``step`` (its heartbeat
    thread lives on); everyone else waits in that collective."""

    rank: int
    step: int
    tail: float = 90.0  # seconds of heartbeats recorded after the stall
    #: Teardown: this many seconds after the stall the NCCL watchdog kills the waiting ranks (their
    #: heartbeats stop); the stuck rank lives ``grace`` seconds longer (its SIGTERM handler cannot run).
    teardown: float | None = None
    grace: float = 30.0


@dataclass(frozen=True)
class Plan:
    """One job: its shape, its healthy timings and what goes wrong."""

    job: str
    ranks: int = 32
    per_node: int = 8
    steps: int = 200
    node_prefix: str = ""  # host names are f"{node_prefix or job}-n{i:02d}"
    compute: float = 0.30  # seconds of forward + backward per step on a healthy rank
    optimizer: float = 0.02
    data: float = 0.01
    transfer: float = 0.05  # seconds the gradient all-reduce takes once everyone is in
    jitter: float = 0.015  # relative, per rank-step
    warmup: int = 0  # first steps slow, by a different factor on each rank (compilation, autotune)
    slow: tuple[Slow, ...] = ()
    pauses: tuple[Pause, ...] = ()
    noise: Noise = field(default_factory=Noise)
    moe_skew: float = 0.0  # the hot expert's rank computes this much longer, moving every 2 steps
    drift: float = 0.0  # every rank's compute grows by this fraction per step
    slowdown: tuple[int, float] | None = None  # (step, factor): the whole job slower from then on
    network: tuple[int, float] | None = None  # (step, factor): the all-reduce transfer slower from then on
    restart: Restart | None = None
    stuck: Stuck | None = None
    clock_offsets: tuple[tuple[int, float], ...] = ()  # (node index, seconds its clock is ahead)
    stages: int = 1  # > 1: pipeline-parallel (gen2/pipeline.py), ranks // stages data-parallel columns
    microbatches: int = 4
    heartbeat_interval: float = 2.0
    seed: int = 0

    def node_of(self, rank: int) -> str:
        return f"{self.node_prefix or self.job}-n{rank // self.per_node:02d}"
