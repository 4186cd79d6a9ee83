"""A second generator of step recordings (numpy only, not the project's simulator) for the
small-and-steady rules: healthy noise with heavy-tailed spikes, small persistent stragglers,
pipeline stages of unequal cost, two classes of ranks.

Each step's events go to the engine as one batch envelope (the wire format), decoded by
``decode_message_columns`` like the worker does. Clocks: every rank's ``ts`` is its own end
of step on a shared time line plus a per-rank clock offset (the engine never subtracts them).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import orjson

from stepwatch.models.detection import DetectionEngine
from stepwatch.models.wire.step_columns import decode_message_columns


@dataclass(kw_only=True)
class SteadyJob:
    job: str = "steady"
    ranks: int = 128
    steps: int = 3000
    ranks_per_node: int = 8
    compute: float = 1.0  # typical compute seconds
    comm: float = 0.3
    noise: float = 0.01  # per-rank-step Gaussian CoV
    spike_rate: float = 0.0  # share of rank-steps hit by an independent spike ...
    spike_range: tuple[float, float] = (1.5, 2.5)  # ... multiplying compute by this much
    slow: dict[int, float] = field(default_factory=dict)  # rank -> persistent factor
    slow_from: int = 0  # first step of the persistent factors
    slow_until: int | None = None  # exclusive
    episodes: list[tuple[int, int, dict[int, float]]] = field(default_factory=list)  # more (from, until, factors)
    stage_of: list[int] | None = None  # rank -> pipeline stage (group "stage-N")
    stage_factor: dict[int, float] = field(default_factory=dict)
    rank_factor: dict[int, float] = field(default_factory=dict)  # whole-job per-rank factor (classes)
    drop_rate: float = 0.0  # share of step events lost on the way
    shuffle: bool = False  # events of a step arrive in random order
    seed: int = 0

    def node(self, rank: int) -> str:
        return f"n{rank // self.ranks_per_node:03d}"

    def messages(self):
        rng = np.random.default_rng(self.seed)
        n = self.ranks
        base = np.full(n, self.compute)
        for r, f in self.rank_factor.items():
            base[r] *= f
        if self.stage_of is not None:
            for r in range(n):
                base[r] *= self.stage_factor.get(self.stage_of[r], 1.0)
        offsets = rng.uniform(-0.05, 0.05, n)  # rank clocks disagree a little
        t = 1_700_000_000.0
        for step in range(self.steps):
            x = base * (1 + self.noise * rng.standard_normal(n))
            spikes = rng.random(n) < self.spike_rate
            x[spikes] *= rng.uniform(*self.spike_range, spikes.sum())
            for lo, hi, factors in [(self.slow_from, self.slow_until, self.slow), *self.episodes]:
                if step >= lo and (hi is None or step < hi):
                    for r, f in factors.items():
                        x[r] *= f
            x = np.maximum(x, 1e-3)
            step_time = float(x.max()) + self.comm
            t += step_time
            events = []
            for r in range(n):
                ev = {"v": 1, "kind": "step", "job": self.job, "rank": r, "step": step, "ts": t + float(offsets[r]),
                      "step_time": step_time, "compute_time": float(x[r]),
                      "comm_time": step_time - float(x[r]), "node": self.node(r), "world_size": n}
                if self.stage_of is not None:
                    ev["group"] = f"stage-{self.stage_of[r]}"
                if self.drop_rate and rng.random() < self.drop_rate:
                    continue
                events.append(ev)
            if self.shuffle:
                rng.shuffle(events)
            yield orjson.dumps({"v": 1, "kind": "batch", "events": events})

    def run(self, engine: DetectionEngine | None = None, *, tick_every: int = 50):
        """Feed the whole job; return (engine, alerts in order)."""
        engine = engine or DetectionEngine()
        alerts = []
        for i, raw in enumerate(self.messages()):
            events, rejected = decode_message_columns(raw)
            assert not rejected
            alerts.extend(engine.process_batch(events))
            if i % tick_every == 0:
                alerts.extend(engine.tick(engine.clock))
        return engine, alerts


def firing(alerts, type_=None, **evidence):
    return [a for a in alerts if a.status == "firing" and (type_ is None or a.type == type_)
            and all(a.evidence.get(k) == v for k, v in evidence.items())]
