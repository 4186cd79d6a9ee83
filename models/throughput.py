"""Job-wide throughput regression: the slowdown the straggler rule deliberately ignores.

Per job, a one-sided CUSUM (Page's change-point test) on the step time relative to the
job's own healthy baseline, and on tokens/s where reported:

* ``r = step_time / baseline - 1`` each training step (warm-up, eval and checkpoint steps
  are left out), ``S = max(0, S + r - drift)`` with ``drift = min_effect / 2``, so a steady
  1-2% drift keeps ``S`` at zero;
* the alarm needs ``S > threshold`` **and** the median of the last ``persistence`` steps at
  least ``min_effect`` above the baseline, so one slow step (a GC pause, a hiccup) never
  fires however large it is;
* the baseline is the median of recent healthy steps and stops learning while ``S`` is
  building up, so a regression is not absorbed into it;
* the onset is the step where ``S`` last left zero (Page's estimate of the change point).

The alert names the layer that moved with it: communication (``comm_time``), compute
(``compute_time`` of all ranks), input pipeline (``data_time``), or unknown.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import numpy as np

from .alerts import Alert, alert_id
from .assembly import GroupStep

LAYERS = (("communication", "comm"), ("compute", "compute"), ("input pipeline", "data"))


@dataclass(frozen=True, slots=True)
class StepSample:
    """One training step of a job, reduced to job-wide medians."""

    step: int
    ts: float
    step_time: float
    compute: float
    comm: float
    data: float
    tokens_per_second: float


def sample_from(step: GroupStep) -> StepSample:
    def med(values: np.ndarray) -> float:
        ok = values[~np.isnan(values)]
        return float(np.median(ok)) if ok.size else float("nan")

    step_time = med(step.step_time)
    tokens = step.tokens[~np.isnan(step.tokens)] if step.tokens is not None else np.zeros(0)
    tps = float(tokens.sum() / step_time) if tokens.size and step_time > 0 else float("nan")
    return StepSample(step.step, step.ts, step_time, med(step.compute_time), med(step.comm_time),
                      med(step.data_time), tps)


class _Cusum:
    """One-sided CUSUM of relative increases over a robust, frozen-while-alarming baseline."""

    def __init__(self, *, baseline_steps: int, min_baseline: int, drift: float) -> None:
        self.history: deque[float] = deque(maxlen=baseline_steps)
        self.min_baseline = min_baseline
        self.drift = drift
        self.score = 0.0
        self.onset: int | None = None

    @property
    def baseline(self) -> float | None:
        if len(self.history) < self.min_baseline:
            return None
        return float(np.median(self.history))

    def update(self, step: int, value: float, *, learn: bool) -> float | None:
        """Feed one value; return its relative excess over the baseline (None while learning)."""
        base = self.baseline
        if base is None or base <= 0:
            self.history.append(value)
            return None
        rel = value / base - 1.0
        previous = self.score
        self.score = max(0.0, self.score + rel - self.drift)
        if self.score > 0 and previous == 0:
            self.onset = step
        elif self.score == 0:
            self.onset = None
        if learn and self.score == 0:
            self.history.append(value)
        return rel


class ThroughputDetector:
    """Throughput regression rule for one job; feed it one sample per training step."""

    def __init__(self, *, job: str, min_effect: float = 0.10, threshold: float = 0.4, persistence: int = 5,
                 baseline_steps: int = 200, min_baseline_steps: int = 20, clear_after: int = 10,
                 warmup_steps: int = 10, critical_effect: float = 0.3) -> None:
        self.job = job
        self.min_effect = min_effect
        self.threshold = threshold
        self.persistence = persistence
        self.baseline_steps = baseline_steps
        self.min_baseline_steps = min_baseline_steps
        self.clear_after = clear_after
        self.warmup_steps = warmup_steps
        self.critical_effect = critical_effect
        drift = min_effect / 2
        self._step_time = _Cusum(baseline_steps=baseline_steps, min_baseline=min_baseline_steps, drift=drift)
        self._tokens = _Cusum(baseline_steps=baseline_steps, min_baseline=min_baseline_steps, drift=drift)
        self._recent: deque[StepSample] = deque(maxlen=persistence)
        self._baseline_samples: deque[StepSample] = deque(maxlen=baseline_steps)
        self._first_step: int | None = None
        self._last_step = -1
        self._clean = 0
        self.firing: Alert | None = None

    def update(self, sample: StepSample, *, phase: str = "train") -> list[Alert]:
        if sample.step <= self._last_step:
            return []  # a step already judged (another peer group of the same step)
        self._last_step = sample.step
        if self._first_step is None:
            self._first_step = sample.step
        if phase != "train" or sample.step < self._first_step + self.warmup_steps or not sample.step_time > 0:
            return []
        self._recent.append(sample)
        rel = self._step_time.update(sample.step, sample.step_time, learn=self.firing is None)
        tps_rel = None
        if sample.tokens_per_second == sample.tokens_per_second:  # not NaN
            # Fewer tokens per second is the regression: track the inverse as "time per token".
            tps_rel = self._tokens.update(sample.step, 1.0 / max(sample.tokens_per_second, 1e-12),
                                          learn=self.firing is None)
        if rel is None:
            return []
        if self._step_time.score == 0:
            self._baseline_samples.append(sample)
        recent_rel = float(np.median([s.step_time for s in self._recent])) / self._step_time.baseline - 1.0
        if self.firing is None:
            tokens_drop = tps_rel is not None and self._tokens.score > self.threshold and self._recent_tokens_drop()
            if (self._step_time.score > self.threshold and recent_rel >= self.min_effect
                    and len(self._recent) >= self.persistence) or tokens_drop:
                self.firing = self._fire(sample, recent_rel)
                self._clean = 0
                return [self.firing]
            return []
        self._clean = self._clean + 1 if recent_rel < self.min_effect / 2 else 0
        if self._clean >= self.clear_after:
            alert, self.firing = self.firing, None
            self._step_time.score = self._tokens.score = 0.0
            return [alert.resolved(at=sample.ts, summary=f"resolved: throughput of job {self.job} back to "
                                                         f"baseline at step {sample.step} ({alert.summary})")]
        return []

    def _recent_tokens_drop(self) -> bool:
        base = self._tokens.baseline
        values = [1.0 / s.tokens_per_second for s in self._recent if s.tokens_per_second > 0]
        return bool(base and len(values) >= self.persistence and np.median(values) / base - 1 >= self.min_effect)

    def _layer(self) -> tuple[str, dict]:
        """Which layer's time grew with the step time: the one explaining most of the increase."""
        before, after = list(self._baseline_samples), list(self._recent)
        step_delta = _median(after, "step_time") - _median(before, "step_time")
        moves = {}
        for name, attr in LAYERS:
            delta = _median(after, attr) - _median(before, attr)
            if delta == delta:
                moves[name] = round(delta, 6)
        best = max(moves, key=moves.get, default=None)
        if best is None or step_delta <= 0 or moves[best] < 0.5 * step_delta:
            return "unknown", moves
        return best, moves

    def _fire(self, sample: StepSample, recent_rel: float) -> Alert:
        layer, moves = self._layer()
        onset = self._step_time.onset if self._step_time.onset is not None else self._tokens.onset
        onset = onset if onset is not None else sample.step
        base = self._step_time.baseline
        base_tps = self._tokens.baseline
        recent_tps = [s.tokens_per_second for s in self._recent if s.tokens_per_second == s.tokens_per_second]
        evidence = {
            "baseline_step_time": round(base, 6),
            "recent_step_time": round(base * (1 + recent_rel), 6),
            "slowdown": round(recent_rel, 4),
            "cusum": round(self._step_time.score, 4),
            "onset_step": onset,
            "detected_step": sample.step,
            "layer": layer,
            "layer_deltas_seconds": moves,
            "min_effect": self.min_effect,
        }
        if base_tps and recent_tps:
            evidence["baseline_tokens_per_second"] = round(1.0 / base_tps, 2)
            evidence["recent_tokens_per_second"] = round(float(np.median(recent_tps)), 2)
        drop = 1 - 1 / (1 + recent_rel) if recent_rel > -1 else 0.0
        summary = (f"throughput drop: job {self.job} is {drop:.0%} slower (step time {evidence['recent_step_time']}s "
                   f"vs baseline {evidence['baseline_step_time']}s) since step {onset}; layer: {layer}")
        return Alert(
            id=alert_id(self.job, "throughput_drop", onset),
            status="firing", type="throughput_drop",
            severity="critical" if recent_rel >= self.critical_effect else "warning",
            job=self.job, ranks=(), nodes=(), starts_at=sample.ts, summary=summary, evidence=evidence)

    def close(self, *, at: float, reason: str) -> list[Alert]:
        if self.firing is None:
            return []
        alert, self.firing = self.firing, None
        return [alert.resolved(at=at, summary=f"resolved ({reason}): {alert.summary}")]


def _median(samples: list[StepSample], attr: str) -> float:
    values = [getattr(s, attr) for s in samples]
    values = [v for v in values if v == v]
    return float(np.median(values)) if values else float("nan")
