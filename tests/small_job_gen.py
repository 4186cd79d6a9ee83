"""A second, independent generator of small-job step recordings (2-3 ranks), written by hand for the small-job
straggler tests: not tests/step_gen.py's model (uniform noise, exponential preemption) and not the simulator.

Its own assumptions about a real fine-tuning host, each a way to fool a detector tuned to the other model:

* ranks of unequal pace (a few % apart: different cores, a slower PCIe slot);
* log-normal step noise with a heavy Pareto tail (GC pauses, page faults) per rank, independent;
* host contention in bursts of a few steps that hit every rank, each by its own amount (a noisy neighbour);
* a slow drift of the whole job's pace (thermal, data length), a job-wide slowdown from a step;
* a checkpoint every ``checkpoint_every`` steps: rank 0 writes it, one step several times longer;
* events lost, reordered within a step, delivered one step late, and per-host clock skew on ``ts``.

The wire record and the transport draws (lost, shuffled) are tests/step_gen.py's (``step_event``, ``lost``,
``shuffled``, ``in_window``): the timing and noise model is this file's own. A seed gives the same events as before
the sharing (bench/small_jobs.py's published figures rest on it).
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from step_gen import in_window, lost, shuffled, step_event


@dataclass(frozen=True)
class SmallJob:
    job: str
    ranks: int
    steps: int
    seed: int = 1
    compute: float = 0.08
    #: Per-rank pace differs by up to this share.
    unequal: float = 0.05
    #: Log-normal sigma of each rank's step noise ...
    sigma: float = 0.06
    #: ... and the chance per rank-step of a heavy-tailed spike (Pareto, shape ``spike_alpha``, from 1.1x).
    spike_p: float = 0.04
    spike_alpha: float = 2.0
    #: Chance per step that a contention burst starts; its length (steps) and mean extra share per rank.
    burst_p: float = 0.04
    burst_len: tuple[int, int] = (3, 12)
    burst_load: float = 0.35
    #: Amplitude and period (steps) of the job-wide drift.
    drift: float = 0.08
    drift_period: float = 90.0
    checkpoint_every: int = 50
    checkpoint_factor: float = 4.0
    jobwide_factor: float = 1.0
    jobwide_from: int | None = None
    slow_rank: int | None = None
    slow_factor: float = 1.4
    slow_from: int = 30
    lose: float = 0.02
    reorder: float = 0.3
    late: float = 0.03  # chance that an event is delivered after the next step's events
    skew: float = 0.5  # each host's clock off by up to this many seconds
    t0: float = 1_770_000_000.0

    def events(self) -> list[dict]:
        rng = random.Random(self.seed)
        pace = [1.0 + rng.uniform(0.0, self.unequal) for _ in range(self.ranks)]
        offset = [rng.uniform(-self.skew, self.skew) for _ in range(self.ranks)]
        out: list[dict] = []
        held: list[dict] = []
        burst_left, burst = 0, [0.0] * self.ranks
        t = self.t0
        for step in range(self.steps):
            if burst_left == 0 and rng.random() < self.burst_p:
                burst_left = rng.randint(*self.burst_len)
            level = 1.0 + self.drift * math.sin(2 * math.pi * step / self.drift_period)
            if in_window(step, self.jobwide_from):
                level *= self.jobwide_factor
            computes = []
            for rank in range(self.ranks):
                c = self.compute * pace[rank] * level * math.exp(rng.gauss(0.0, self.sigma))
                if rng.random() < self.spike_p:
                    c *= 1.1 * rng.paretovariate(self.spike_alpha)
                if burst_left:
                    burst[rank] = rng.expovariate(1 / self.burst_load)
                    c *= 1.0 + burst[rank]
                if rank == 0 and self.checkpoint_every and step and step % self.checkpoint_every == 0:
                    c *= self.checkpoint_factor
                if rank == self.slow_rank and in_window(step, self.slow_from):
                    c *= self.slow_factor
                computes.append(c)
            burst_left = max(0, burst_left - 1)
            step_time = max(computes) + 0.004
            t += step_time
            batch = shuffled(rng, [step_event(self.job, rank, step, t + offset[rank], step_time, c, f"host-{rank}",
                                              self.ranks)
                                   for rank, c in enumerate(computes) if not lost(rng, self.lose)], self.reorder)
            late = [e for e in batch if rng.random() < self.late]
            out.extend(e for e in batch if e not in late)
            out.extend(held)  # the previous step's late events, after this step's
            held = late
        out.extend(held)
        return out
