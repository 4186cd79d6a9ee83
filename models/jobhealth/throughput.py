"""Job-wide throughput regression: the slowdown the straggler rule deliberately ignores.

Per job, on the step time and on the time per token (where tokens are reported), against
the job's own baseline:

* a one-sided CUSUM (Page's test): ``S = max(0, S + min(x / baseline - 1, 1) - drift)`` with
  ``drift = min_effect / 2``, so a steady 1-2% drift keeps ``S`` at zero and one huge step
  cannot finish it alone; its onset (where ``S`` left zero) estimates the change point;
* the alarm needs ``S > threshold``, the lower quartile of the steps since the onset (at
  least ``persistence`` of them) at least ``min_effect`` above the baseline's (a slowdown
  makes even the best steps slower; hiccups only add slow steps beside fast ones), **and** a one-sided
  Mann-Whitney rank test of those steps against the baseline below ``alpha``: one slow step
  or a stationary but bimodal job (occasional hiccups on some rank) does not pass it, a
  real shift does within a few steps;
* values join the baseline only after leaving the recent window, and not while an alert
  is open, so a regression is never absorbed into its own baseline; a stop (a step over
  ``STOP_FACTOR`` x the baseline's median: an unmarked eval or checkpoint) is left out of its mean;
* where the job reports tokens, longer steps whose time per token held (under half of
  ``min_effect``) are not a drop: they carry more tokens (``_tokens_kept_pace``).

Threshold changes (``reconfigure``): an alert open when ``min_effect`` is raised past the job's recent
slowdown resolves at the next step with ``evidence.resolution = threshold_changed``, saying how much
slower the job still is; otherwise resolutions are ``recovered``.

The alert names the layer that moved with it: communication (``comm_time``), compute
(``compute_time`` of all ranks), input pipeline (``data_time``), or unknown.

A job whose ranks are in several peer groups (pipeline stages) is judged on its whole step: the
groups' samples of one step are combined (``combine``: the job's step less what its slowest
rank adds), so the time a stage waits in its point-to-point receives for a
slow stage (or one slow rank of it) is charged to that stage's compute, not to the network: the
straggler rule names the slow rank, and the communication layer moves only when the transfer did.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Any

import numpy as np

from ..alert_types import AlertType
from ..alerts import Alert, alert_id
from ..steps.assembly import GroupStep
from ..steps.robust import kept_sum, least, nan_max, step_median, time_before
from ..resolution import Resolution



class Layer(StrEnum):
    """The layer whose time grew with the step time (``evidence.layer``)."""

    COMMUNICATION = "communication"  # the transfer itself (comm_time)
    COMPUTE = "compute"  # every rank's compute_time
    INPUT_PIPELINE = "input pipeline"  # the data wait (data_time)
    UNKNOWN = "unknown"  # no layer explains at least half of the increase


#: A baseline value over this many times the baseline's median is a stop (an unmarked eval or checkpoint: one step
#: of the whole job tens of seconds long), left out of the CUSUM's baseline mean: kept in, one 30 s step among
#: 200 of 0.25 s raised the mean 60% and hid a later real drop (tests/metamorphic/test_noise.py).
STOP_FACTOR = 3.0

LAYERS = ((Layer.COMMUNICATION, "comm"), (Layer.COMPUTE, "compute"), (Layer.INPUT_PIPELINE, "data"))


@dataclass(frozen=True, slots=True)
class ThroughputEvidence:
    """A throughput drop's ``evidence`` as the rule writes it (docs/job-health.md); durations in seconds."""

    baseline_step_time: float  # the job's typical step time before (the CUSUM's baseline mean)
    recent_step_time: float  # the median typical step time since the onset
    slowdown: float  # the effect that fired: recent / baseline - 1
    cusum: float
    onset_step: int  # where the CUSUM left 0
    detected_step: int
    layer: Layer
    layer_deltas_seconds: tuple[tuple[str, float], ...]  # (layer, how much its median time moved), in LAYERS order
    min_effect: float  # the threshold it fired with (a resolution compares it with the current one)
    tokens_per_second: tuple[float, float] | None = None  # (baseline, recent), where the job reports tokens

    #: The per-step value the rule judges (``evidence.signal``).
    SIGNAL = "typical_step_time"

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "signal": self.SIGNAL, "baseline_step_time": self.baseline_step_time,
            "recent_step_time": self.recent_step_time, "slowdown": self.slowdown, "cusum": self.cusum,
            "onset_step": self.onset_step, "detected_step": self.detected_step, "layer": self.layer.value,
            "layer_deltas_seconds": dict(self.layer_deltas_seconds), "min_effect": self.min_effect}
        if self.tokens_per_second is not None:
            out["baseline_tokens_per_second"], out["recent_tokens_per_second"] = self.tokens_per_second
        return out

    @classmethod
    def from_dict(cls, ev: dict[str, Any]) -> "ThroughputEvidence":
        """The record of a throughput drop's evidence (keys added later, e.g. the resolution, are ignored)."""
        tokens = ev.get("baseline_tokens_per_second"), ev.get("recent_tokens_per_second")
        return cls(baseline_step_time=ev["baseline_step_time"], recent_step_time=ev["recent_step_time"],
                   slowdown=ev["slowdown"], cusum=ev["cusum"], onset_step=ev["onset_step"],
                   detected_step=ev["detected_step"], layer=Layer(ev["layer"]),
                   layer_deltas_seconds=tuple(ev["layer_deltas_seconds"].items()), min_effect=ev["min_effect"],
                   tokens_per_second=None if tokens[0] is None else tokens)

    @staticmethod
    def layer_of(alert: Alert) -> Layer | None:
        """The layer a throughput drop names; None for another alert or a layer not in the vocabulary (an alert
        read back from an older record): the one field the telemetry correlators act on."""
        if alert.type != AlertType.THROUGHPUT_DROP:
            return None
        value = alert.evidence.get("layer")
        return Layer(value) if value in Layer._value2member_map_ else None


@dataclass(frozen=True, slots=True)
class StepSample:
    """One training step of a job, reduced to job-wide medians."""

    step: int
    ts: float
    step_time: float
    #: What the step would take at the pace of a typical rank: the median rank's time before
    #: the collectives plus the pure transfer time. One slow rank (a straggler, a GC pause, a
    #: data-loader hiccup) moves ``step_time`` but not this; a job-wide slowdown moves both.
    typical_step_time: float
    compute: float
    comm: float  # the transfer time: the smallest comm_time of the step (see ``sample_from``)
    data: float
    tokens_per_second: float  # the step's tokens (all reporting ranks) per typical step time
    #: Tokens per second per reporting rank: what the tokens channel judges, so that a step closed
    #: without some ranks (their events late, a shard stage process down) is not a throughput loss.
    tokens_per_rank_second: float = float("nan")
    #: Ranks of the step's group that did not report it (see ``GroupStep.missing``).
    missing: int = 0
    #: The peer group (pipeline stage) the sample is of; "" when the job has one group.
    group: str = ""
    #: The median rank's time before its collectives, and the step's tokens (all reporting ranks).
    before: float = float("nan")
    tokens: float = float("nan")
    slowest_before: float = float("nan")  # the slowest rank's time before its collectives


def sample_from(step: GroupStep) -> StepSample:
    def med(name: str) -> float:
        return step_median(step, name)

    step_time = med("step_time")
    typical = step_time
    before, complete = time_before(step)  # time before entering the collectives
    median_before = slowest = transfer = float("nan")
    if before.size and complete:
        # The last rank to arrive waits least: its comm_time is the transfer itself. (No NaN in ``before``: none in
        # ``comm_time`` either, and ``nan_max`` is ``np.max``'s float.)
        # Of two ranks the median is their mean, which moves by half of one rank's stall: the typical rank of a
        # pair is the quicker one (a job-wide slowdown moves both, one slow rank is the straggler rule's).
        median_before = step_median(step, "before", before) if before.size != 2 else least(before)
        slowest = nan_max(before)
        transfer = least(step.comm_time)
        typical = float(median_before + transfer)
    total, counted = kept_sum(step.tokens)
    tps = float(total / typical) if counted and typical > 0 else float("nan")
    per_rank = tps / counted if counted else float("nan")
    # The communication layer is the transfer itself (the smallest comm_time: the last rank to arrive
    # waits for nobody). The median rank's comm_time also holds its wait for the slowest rank, so a
    # data-loader hiccup or GC pause on any rank would move it and blame the network for an input stall.
    if transfer != transfer:
        comm = step.comm_time[~np.isnan(step.comm_time)]
        transfer = float(comm.min()) if comm.size else float("nan")
    return StepSample(step.step, step.ts, step_time, typical, med("compute_time"), transfer,
                      med("data_time"), tps, per_rank, step.missing, step.group or "", median_before, total, slowest)


def combine(samples: list[StepSample]) -> StepSample:
    """One step of a job from its groups' samples (pipeline stages).

    The ranks' ``comm_time`` in a pipeline also holds the point-to-point waits for other stages
    (the bubble, and the wait for a slow stage), so no rank's is the pure transfer. The job's step
    (its slowest group's) is taken less what its slowest rank adds: that rank's time before its
    collectives over the slowest group's typical rank's. One slow rank anywhere stretches the
    pipeline by about its excess, which is the straggler rule's business; a slower transfer, or a
    whole stage slower, moves the typical step."""
    if len(samples) == 1:
        return samples[0]

    def worst(attr: str) -> float:
        values = [getattr(s, attr) for s in samples if getattr(s, attr) == getattr(s, attr)]
        return max(values) if values else float("nan")

    comm = min((s.comm for s in samples if s.comm == s.comm), default=float("nan"))
    step_time, before, slowest = worst("step_time"), worst("before"), worst("slowest_before")
    typical = step_time - max(slowest - before, 0.0) if before == before and slowest == slowest \
        else worst("typical_step_time")
    tokens = sum(s.tokens for s in samples if s.tokens == s.tokens)
    counted = sum(1 for s in samples if s.tokens == s.tokens)
    tps = tokens / typical if counted and typical > 0 else float("nan")
    ranks = sum(s.tokens_per_second / s.tokens_per_rank_second for s in samples
                if s.tokens_per_second > 0 and s.tokens_per_rank_second > 0)  # ranks reporting tokens
    per_rank = tps / ranks if ranks else float("nan")
    return StepSample(samples[0].step, max(s.ts for s in samples), step_time, typical, worst("compute"),
                      comm, worst("data"), tps, per_rank, sum(s.missing for s in samples), "", before,
                      tokens if counted else float("nan"), slowest)


class _Regression:
    """Change-point tracking of one positive signal where larger is worse (time per step/token).

    ``recent`` holds the last ``window`` values; a value enters the baseline ``quarantine``
    steps after it arrived (and not while an alert is open), so a regression in progress
    never leaks into its own baseline before it can fire, and a stationary but noisy signal
    is learned unbiased.
    """

    def __init__(self, *, baseline_steps: int, min_baseline: int, drift: float, window: int,
                 quarantine: int) -> None:
        self.baseline: deque[float] = deque(maxlen=baseline_steps)
        self.recent: deque[float] = deque(maxlen=max(window, quarantine + 1))
        self.quarantine = quarantine
        self.min_baseline = min_baseline
        self.drift = drift
        self.score = 0.0
        self.onset: int | None = None
        self.since_onset = 0
        self._mean: float | None = None  # of ``baseline``, kept until it changes (read several times a step)

    @property
    def mean(self) -> float | None:
        if len(self.baseline) < self.min_baseline:
            return None
        if self._mean is None:  # np.mean's float, without its slow conversion of a deque
            values = np.fromiter(self.baseline, np.float64, len(self.baseline))
            mean = float(values.mean())
            if values.max() > STOP_FACTOR * mean:  # (a stop in it: the median is needed only then)
                mean = float(values[values <= STOP_FACTOR * float(np.median(values))].mean())
            self._mean = mean
        return self._mean

    def update(self, step: int, value: float, *, learn: bool) -> None:
        if len(self.recent) > self.quarantine and learn:
            self.baseline.append(self.recent[-self.quarantine - 1])
            self._mean = None
        self.recent.append(value)
        base = self.mean
        if base is None or base <= 0:
            return
        previous = self.score
        # A single huge step (a GC pause) adds at most 1: it can start the score, not finish it.
        self.score = max(0.0, self.score + min(value / base - 1.0, 1.0) - self.drift)
        if self.score > 0:
            if previous == 0:
                self.onset, self.since_onset = step, 0
            self.since_onset += 1
        else:
            self.onset, self.since_onset = None, 0

    def regression(self, *, threshold: float, min_effect: float, persistence: int, alpha: float) -> float | None:
        """The relative slowdown if the recent values are a significant, large enough regression."""
        base = self.mean
        if base is None or self.score <= threshold:
            return None
        n = min(max(self.since_onset, persistence), len(self.recent))
        recent = list(self.recent)[-n:]
        # Lower quartiles: a real slowdown makes even the job's best steps slower, while
        # GC pauses and data-loader hiccups only add slow steps beside fast ones.
        effect = float(np.quantile(recent, 0.25)) / float(np.quantile(self.baseline, 0.25)) - 1.0
        if n < persistence or effect < min_effect:
            return None
        # Rank test against the baseline: a stationary but noisy job (bimodal step times from
        # occasional hiccups) does not pass it; a real shift does within a few steps.
        from scipy.stats import mannwhitneyu  # here: scipy.stats is most of a worker's import time
        p_value = mannwhitneyu(recent, list(self.baseline), alternative="greater").pvalue
        return effect if p_value < alpha else None

    def recent_effect(self, n: int) -> float:
        base = self.mean or float("nan")
        return float(np.mean(list(self.recent)[-n:])) / base - 1.0 if self.recent else 0.0


class ThroughputDetector:
    """Throughput regression rule for one job; feed it one sample per training step.

    Example: every rank's step goes from 1.0 s to 1.25 s at step 300.

    >>> import numpy as np
    >>> from stepwatch.models.steps.assembly import GroupStep
    >>> ranks = np.arange(8)
    >>> def step(n, t):
    ...     return GroupStep(job="j", group="", step=n, ts=1000.0 + n, ranks=ranks, step_time=np.full(8, t),
    ...                      compute_time=np.full(8, t - 0.1), comm_time=np.full(8, 0.1),
    ...                      data_time=np.full(8, 0.01), tokens=np.full(8, 4096.0), nodes=("node-0",) * 8,
    ...                      phase="train")
    >>> detector = ThroughputDetector(job="j")
    >>> alerts = [alert for n in range(400)
    ...           for alert in detector.update(sample_from(step(n, 1.0 if n < 300 else 1.25)))]
    >>> [(str(a.type), str(a.status), str(a.severity)) for a in alerts]
    [('throughput_drop', 'firing', 'warning')]
    """

    def __init__(self, *, job: str, min_effect: float = 0.10, threshold: float = 0.4, persistence: int = 3,
                 alpha: float = 1e-3, window: int = 30, quarantine: int = 10, baseline_steps: int = 200,
                 min_baseline_steps: int = 20,
                 clear_after: int = 10, warmup_steps: int = 10, critical_effect: float = 0.3,
                 max_incomplete_steps: int = 100) -> None:
        self.job = job
        #: Steps missing some ranks are left out, up to this many in a row: the typical step time takes
        #: the transfer time from the last rank to arrive, and when that rank's events are late or lost,
        #: the last one present has waited for it. Beyond, they are the job's new normal.
        self.max_incomplete_steps = max_incomplete_steps
        self._incomplete_run = 0
        self.min_effect = min_effect
        self.threshold = threshold
        self.persistence = persistence
        self.alpha = alpha
        self.window = window
        self.quarantine = quarantine
        self.baseline_steps = baseline_steps
        self.min_baseline_steps = min_baseline_steps
        self.clear_after = clear_after
        self.warmup_steps = warmup_steps
        self.critical_effect = critical_effect
        kw = dict(baseline_steps=baseline_steps, min_baseline=min_baseline_steps, drift=min_effect / 2,
                  window=window, quarantine=quarantine)
        self._step_time = _Regression(**kw)
        self._per_token = _Regression(**kw)  # seconds per token: fewer tokens/s is a regression
        self._recent: deque[StepSample] = deque(maxlen=window)
        self._baseline_samples: deque[StepSample] = deque(maxlen=baseline_steps)
        self._first_step: int | None = None
        self._last_step = -1
        self._clean = 0
        self.firing: Alert | None = None
        self._fired: ThroughputEvidence | None = None  # what the open alert was fired with
        #: Peer groups seen (pipeline stages), and steps waiting for some of them: group -> (sample, phase).
        self.max_groups = 1024
        self._groups: dict[str, None] = {}
        self._pending: dict[int, dict[str, tuple[StepSample, str]]] = {}

    #: Settings ``reconfigure`` may change at run time.
    TUNABLE = ("min_effect", "threshold", "persistence")

    def reconfigure(self, **values) -> None:
        """Change settings in place (unknown names ignored); an open alert is judged on the new ones."""
        for name, value in values.items():
            if name in self.TUNABLE:
                setattr(self, name, int(value) if name == "persistence" else float(value))
        for tracker in (self._step_time, self._per_token):
            tracker.drift = self.min_effect / 2

    def update(self, sample: StepSample, *, phase: str = "train") -> list[Alert]:
        if not sample.group:
            return self._update(sample, phase)
        # Several groups (pipeline stages): a step is judged once every group known reported it, or
        # once a step two newer came (a group late or gone), on all its groups together.
        if sample.group not in self._groups and len(self._groups) < self.max_groups:
            self._groups[sample.group] = None
        if sample.step <= self._last_step:
            return []
        self._pending.setdefault(sample.step, {})[sample.group] = (sample, phase)
        out: list[Alert] = []
        for step in sorted(self._pending):
            got = self._pending[step]
            if len(got) < len(self._groups) and step > sample.step - 2 and len(self._pending) <= 8:
                break
            del self._pending[step]
            phases = {p for _, p in got.values()}
            combined = combine([s for s, _ in got.values()])
            if len(got) < len(self._groups):
                # A stage's step not in (late, or the stage gone): incomplete, as a step closed without some
                # ranks; the other stages' alone would read their wait for it as the job's step.
                combined = replace(combined, missing=combined.missing + len(self._groups) - len(got))
            out.extend(self._update(combined, "train" if phases == {"train"} else next(p for p in phases if p != "train")))
        return out

    def _update(self, sample: StepSample, phase: str) -> list[Alert]:
        if sample.step <= self._last_step:
            return []  # a step already judged (another peer group of the same step)
        self._last_step = sample.step
        if sample.missing:
            self._incomplete_run += 1
            if self._incomplete_run <= self.max_incomplete_steps:
                return []
        else:
            self._incomplete_run = 0
        if self._first_step is None:
            self._first_step = sample.step
        if phase != "train" or sample.step < self._first_step + self.warmup_steps or not sample.typical_step_time > 0:
            return []
        learn = self.firing is None
        if len(self._recent) > self.quarantine and learn:
            self._baseline_samples.append(self._recent[-self.quarantine - 1])
        self._recent.append(sample)
        self._step_time.update(sample.step, sample.typical_step_time, learn=learn)
        if sample.tokens_per_rank_second > 0:
            self._per_token.update(sample.step, 1.0 / sample.tokens_per_rank_second, learn=learn)
        if self.firing is None:
            gate = dict(threshold=self.threshold, min_effect=self.min_effect, persistence=self.persistence,
                        alpha=self.alpha)
            effect = self._step_time.regression(**gate)
            if effect is not None and self._tokens_kept_pace():
                effect = None
            if effect is None:
                effect = self._per_token.regression(**gate)
            if effect is not None:
                self.firing, self._fired = self._fire(sample, effect)
                self._clean = 0
                return [self.firing]
            return []
        recent = max(self._step_time.recent_effect(self.persistence), self._per_token.recent_effect(self.persistence)
                     if self._per_token.mean else -1.0)
        fired_at = self._fired.min_effect if self._fired is not None else self.min_effect
        if self.min_effect > fired_at and recent < self.min_effect:
            # Raised past the slowdown while it fires: the job did not recover, the threshold moved.
            detail = f"job_health.throughput_min_effect {fired_at:g} -> {self.min_effect:g}"
            alert = self._end()
            return [alert.resolved(at=sample.ts, summary=f"resolved: threshold changed ({detail}); job {self.job} is "
                                                         f"still {recent:.0%} slower than its baseline, below the new "
                                                         f"threshold ({alert.summary})",
                                   evidence={**alert.evidence, "resolution": Resolution.THRESHOLD_CHANGED,
                                             "resolution_detail": detail, "recent_slowdown": round(recent, 4)})]
        self._clean = self._clean + 1 if recent < self.min_effect / 2 else 0
        if self._clean >= self.clear_after:
            alert = self._end()
            return [alert.resolved(at=sample.ts, summary=f"resolved: throughput of job {self.job} back to "
                                                         f"baseline at step {sample.step} ({alert.summary})",
                                   evidence={**alert.evidence, "resolution": Resolution.RECOVERED})]
        return []

    def _tokens_kept_pace(self) -> bool:
        """Whether the job's time per token (where it reports tokens) held while its steps grew: longer steps
        that carry as many more tokens (variable sequence lengths) are not a throughput drop. A varlen job's
        step time alone drifts by more than ``min_effect`` over a few steps, and which early steps were complete
        (a producer's late start) decided whether it fired (tests/metamorphic/test_neighbours.py)."""
        if self._per_token.mean is None:
            return False
        n = max(self._step_time.since_onset, self.persistence)
        return self._per_token.recent_effect(n) < self.min_effect / 2

    def _end(self) -> Alert:
        alert, self.firing, self._fired = self.firing, None, None
        for tracker in (self._step_time, self._per_token):
            tracker.score, tracker.onset, tracker.since_onset = 0.0, None, 0
        return alert

    def _layer(self) -> tuple[Layer, dict[str, float]]:
        """Which layer's time grew with the step time: the one explaining most of the increase."""
        n = max(self._step_time.since_onset, self.persistence)
        before, after = list(self._baseline_samples), list(self._recent)[-n:]
        step_delta = _median(after, "typical_step_time") - _median(before, "typical_step_time")
        moves = {}
        for name, attr in LAYERS:
            delta = _median(after, attr) - _median(before, attr)
            if delta == delta:
                moves[name.value] = round(delta, 6)
        best = max(moves, key=moves.get, default=None)
        if best is None or step_delta <= 0 or moves[best] < 0.5 * step_delta:
            return Layer.UNKNOWN, moves
        return Layer(best), moves

    def _fire(self, sample: StepSample, effect: float) -> tuple[Alert, ThroughputEvidence]:
        layer, moves = self._layer()
        onset = self._step_time.onset if self._step_time.onset is not None else self._per_token.onset
        onset = onset if onset is not None else sample.step
        base = self._step_time.mean
        n = max(self._step_time.since_onset, self.persistence)
        recent_step = float(np.median([s.typical_step_time for s in list(self._recent)[-n:]]))
        tps = [s.tokens_per_second for s in list(self._recent)[-n:] if s.tokens_per_second > 0]
        base_tps = [s.tokens_per_second for s in self._baseline_samples if s.tokens_per_second > 0]
        evidence = ThroughputEvidence(
            baseline_step_time=round(base, 6), recent_step_time=round(recent_step, 6), slowdown=round(effect, 4),
            cusum=round(max(self._step_time.score, self._per_token.score), 4), onset_step=onset,
            detected_step=sample.step, layer=layer, layer_deltas_seconds=tuple(moves.items()),
            min_effect=self.min_effect,
            tokens_per_second=(round(float(np.median(base_tps)), 2), round(float(np.mean(tps)), 2))
            if base_tps and tps else None)
        drop = 1 - 1 / (1 + effect)
        summary = (f"throughput drop: job {self.job} lost {drop:.0%} of its throughput (step time "
                   f"{evidence.recent_step_time}s vs baseline {evidence.baseline_step_time}s) since step "
                   f"{onset}; layer: {layer}")
        return Alert(
            id=alert_id(self.job, "throughput_drop", onset),
            status="firing", type="throughput_drop",
            severity="critical" if effect >= self.critical_effect else "warning",
            job=self.job, ranks=(), nodes=(), starts_at=sample.ts, summary=summary,
            evidence=evidence.to_dict()), evidence

    def close(self, *, at: float, reason: str) -> list[Alert]:
        if self.firing is None:
            return []
        alert, self.firing, self._fired = self.firing, None, None
        return [alert.resolved(at=at, summary=f"resolved ({reason}): {alert.summary}")]


def _median(samples: list[StepSample], attr: str) -> float:
    values = [getattr(s, attr) for s in samples]
    values = [v for v in values if v == v]
    return float(np.median(values)) if values else float("nan")
