"""Effective-compute SLIs of a job: how much of the paid GPU time produced training progress.

Per job, from the judged steps and the hang rule:

* ``tokens_per_second`` and ``steps_per_second`` over the recent steps, timed on one host's clock: each
  step's end time of its lowest reporting rank, between the newest step and the oldest step that rank
  reported too (host clocks disagree, sometimes by seconds; the latest rank of a step is not always the
  same host);
* ``productive_share``: wall time spent in completed training steps over the wall time the
  job has been observed (what hangs, restarts, checkpoint and eval pauses take away);
* ``straggler_gpu_seconds``: GPU time lost waiting for the slowest rank, summed over steps:
  ``(latest arrival - median arrival) x ranks`` (what the step would have saved had the
  slowest rank kept the median pace);
* ``hang_gpu_seconds``: GPU time spent while a hang alert was open (``duration x ranks``);
* ``mfu`` where the job reports ``model_flops_per_token`` and ``peak_flops_per_gpu`` (extra
  fields of its step events): achieved model FLOP/s over the GPUs' peak.
"""

from __future__ import annotations

from collections import Counter, deque

import numpy as np

from ..steps.assembly import GroupStep
from ..steps.robust import nan_max, nan_sum, step_median, time_before


class JobSLI:
    def __init__(self, *, window: int = 50) -> None:
        self.window = window
        self._steps: deque[tuple[int, float, float, float]] = deque(maxlen=window)  # step, end ts, time, tokens
        #: Beside each of ``_steps``: the rank whose clock times it (the step's lowest rank) and its step end.
        self._clock: deque[tuple[int, float]] = deque(maxlen=window)
        self._last_step = -1
        self.first_ts: float | None = None
        self.last_ts: float | None = None
        self.productive_seconds = 0.0
        self.straggler_gpu_seconds = 0.0
        self.hang_gpu_seconds = 0.0
        self.ranks = 0
        self.model_flops_per_token: float | None = None
        self.peak_flops_per_gpu: float | None = None
        self._last_tick: float | None = None

    def recent_steps(self) -> tuple[tuple[int, float, float, float], ...]:
        """The recent judged steps, oldest first: (step, end ts, step time, tokens)."""
        return tuple(self._steps)

    def productive_share(self) -> float | None:
        """Productive seconds over the span seen, at most 1 (None: no span yet)."""
        if self.first_ts is None or self.last_ts is None or self.last_ts <= self.first_ts:
            return None
        return round(min(self.productive_seconds / (self.last_ts - self.first_ts), 1.0), 4)

    def observe(self, ts: float) -> None:
        if self.first_ts is None or ts < self.first_ts:
            self.first_ts = ts
        if self.last_ts is None or ts > self.last_ts:
            self.last_ts = ts

    def on_step(self, step: GroupStep) -> None:
        """One judged group step (several groups of one step count once for time, all for waste)."""
        if step.phase != "train":
            return
        name = "before"  # (as models/jobhealth/throughput.py names it)
        before, complete = time_before(step)
        if not complete:
            name, before = "compute_time", step.compute_time
            complete = not np.isnan(before).any()
        if before.size and complete:
            # (no NaN: ``nan_max`` is ``before.max()``'s float, without numpy's call on a few ranks)
            self.straggler_gpu_seconds += float(nan_max(before) - step_median(step, name, before)) * len(before)
        if step.step <= self._last_step:
            return
        self._last_step = step.step
        step_time = step_median(step, "step_time") if step.step_time.size else 0.0
        tokens = nan_sum(step.tokens) if step.tokens.size else 0.0
        self.productive_seconds += step_time
        self._steps.append((step.step, step.ts, step_time, tokens))
        if step.lowest_ts == step.lowest_ts and step.ranks.size:
            self._clock.append((int(step.ranks[0]), step.lowest_ts))
        else:  # built without per-rank times: the step's own end
            self._clock.append((-1, step.ts))
        self.ranks = max(self.ranks, len(step.ranks))

    def on_tick(self, now: float, *, hung: bool) -> None:
        if hung and self._last_tick is not None and now > self._last_tick:
            self.hang_gpu_seconds += (now - self._last_tick) * max(self.ranks, 1)
        self._last_tick = now

    def snapshot(self) -> dict:
        steps = [(step, clock, end, tokens) for (step, _, _, tokens), (clock, end) in zip(self._steps, self._clock)]
        out: dict = {
            "steps_per_second": None, "tokens_per_second": None, "productive_share": None,
            "straggler_gpu_seconds": round(self.straggler_gpu_seconds, 3),
            "hang_gpu_seconds": round(self.hang_gpu_seconds, 3), "mfu": None,
        }
        # One clock: the rank that was the lowest of most steps (a lost event can make another one the lowest),
        # from its oldest to its newest step.
        clock = Counter(s[1] for s in steps).most_common(1)[0][0] if steps else None
        on_clock = [i for i, s in enumerate(steps) if s[1] == clock]
        if len(on_clock) >= 2:
            first, last = on_clock[0], on_clock[-1]
            span = steps[last][2] - steps[first][2]
            if span > 0:
                out["steps_per_second"] = round((last - first) / span, 4)
                tokens = sum(t for *_, t in steps[first + 1:last + 1])
                if tokens > 0:
                    out["tokens_per_second"] = round(tokens / span, 2)
        if self.first_ts is not None and self.last_ts is not None and self.last_ts > self.first_ts:
            out["productive_share"] = round(min(self.productive_seconds / (self.last_ts - self.first_ts), 1.0), 4)
        if out["tokens_per_second"] and self.model_flops_per_token and self.peak_flops_per_gpu and self.ranks:
            out["mfu"] = round(out["tokens_per_second"] * self.model_flops_per_token
                               / (self.peak_flops_per_gpu * self.ranks), 4)
        return out
