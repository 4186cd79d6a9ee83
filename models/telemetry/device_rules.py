"""The device-layer rules of seed 003 on the node agent's ``gpu`` events: gpu_idle, gpu_hot, hbm_full.

* ``gpu_idle``: a GPU that runs a rank of a job has utilization below ``idle_util_pct`` for
  ``idle_seconds`` while the job keeps stepping (a rank on the wrong device, a CPU fallback,
  a stalled input pipeline). Needs the job: the alert names it, the rank and the node;
* ``gpu_hot``: temperature at or above ``hot_temp_c`` in ``hot_samples`` consecutive samples,
  before throttling starts (a node alert; the job and rank on the GPU are named when known);
* ``hbm_full``: memory used above ``hbm_ratio`` of total in ``hot_samples`` consecutive samples
  while the job's step time grew to ``hbm_step_growth`` x its earlier median (an OOM coming).

Hysteresis: a firing alert's condition holds down to a clear threshold below the firing one (``hot_clear_c``
degrees below ``hot_temp_c``, ``hbm_clear_ratio`` below ``hbm_ratio``, ``idle_clear_pct`` points above
``idle_util_pct``), and it resolves after ``clear_samples`` samples past that threshold spanning at least
``clear_seconds`` of the GPU's clock: a temperature hovering at 85 C is one incident, not one per crossing.
"The job is stepping"
is read as "the job reported new steps since this GPU's previous sample", so no timestamp of
the GPU's node is ever compared with one of another host; the idle time is the GPU's own.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

from ..alert_types import AlertStatus, AlertType, Severity
from ..alerts import Alert, alert_id
from ..wire.telemetry_events import GpuEvent
from .counters import span as _span, sustained


class _JobSteps:
    __slots__ = ("count", "last_step", "step_times", "typical")

    def __init__(self, history: int) -> None:
        self.count = 0  # step events seen
        self.last_step = -1
        # The step time of each new step, as its first event reported it (in synchronous training
        # every rank's step takes as long as the slowest one's).
        self.step_times: deque[float] = deque(maxlen=history)
        self.typical = 0.0  # median step time, refreshed every 16 new steps

    def add(self, value: float) -> None:
        self.step_times.append(value)
        if len(self.step_times) % 16 == 1 or len(self.step_times) < 16:
            ordered = sorted(self.step_times)
            self.typical = ordered[len(ordered) // 2]

    def growth(self, recent: int) -> float | None:
        """Median of the last ``recent`` step-time values over the median before them."""
        values = list(self.step_times)
        if len(values) < 3 * recent:
            return None
        before, after = sorted(values[:-recent]), sorted(values[-recent:])
        base = before[len(before) // 2]
        return after[len(after) // 2] / base if base > 0 else None


class _GpuWatch:
    __slots__ = ("job_count", "advanced_at", "idle_since", "hot_run", "hot_since", "hbm_run", "clean", "clean_since", "alerts")

    def __init__(self) -> None:
        self.job_count: int | None = None
        self.advanced_at: float | None = None  # GPU clock when its job last reported new steps
        self.idle_since: float | None = None
        self.hot_run = 0
        self.hot_since: float | None = None  # GPU clock of the hot run's first sample
        self.hbm_run = 0
        # Clean runs matter only while an alert is open: made then (24,000 forged GPUs held them empty; issue 44).
        self.clean: dict[str, int] | None = None
        self.clean_since: dict[str, float] | None = None  # GPU clock of the first sample of the current clean run
        self.alerts: dict[str, Alert] = {}


class DeviceRules:
    """gpu_idle, gpu_hot and hbm_full per GPU; feed step observations and gpu events, each in order.

    Hyperparameters (keyword-only), from ``HostSettings``: ``idle_util_pct``, ``idle_seconds``,
    ``hot_temp_c``, ``hot_samples``, ``hbm_ratio``, ``hbm_step_growth``; ``clear_samples``
    clean samples past the clear thresholds (``hot_clear_c``, ``hbm_clear_ratio``, ``idle_clear_pct``) over at
    least ``clear_seconds`` resolve an alert; ``step_history`` step-time values kept per job, of which
    the last ``recent_steps`` are compared with the rest; a job counts as stepping for
    ``stepping_grace`` seconds (or 3 of its typical steps, if longer) of the GPU's clock after
    its step count last moved.
    """

    def __init__(self, *, placement: Callable[[], dict[str, dict[int, tuple]]], idle_util_pct: float = 10.0,
                 idle_seconds: float = 300.0, hot_temp_c: float = 85.0, hot_samples: int = 3,
                 hbm_ratio: float = 0.90, hbm_step_growth: float = 1.1, clear_samples: int = 5,
                 step_history: int = 120, recent_steps: int = 10, stepping_grace: float = 15.0,
                 hot_clear_c: float = 3.0, hbm_clear_ratio: float = 0.02, idle_clear_pct: float = 5.0,
                 clear_seconds: float = 60.0, max_jobs: int = 100_000) -> None:
        self._placement = placement  # job -> rank -> (node, gpu): the telemetry correlator's view
        self.idle_util_pct = idle_util_pct
        self.idle_seconds = idle_seconds
        self.hot_temp_c = hot_temp_c
        self.hot_samples = hot_samples
        self.hbm_ratio = hbm_ratio
        self.hbm_step_growth = hbm_step_growth
        self.clear_samples = clear_samples
        self.step_history = step_history
        self.recent_steps = recent_steps
        self.stepping_grace = stepping_grace
        self.hot_clear_c = hot_clear_c
        self.hbm_clear_ratio = hbm_clear_ratio
        self.idle_clear_pct = idle_clear_pct
        self.clear_seconds = clear_seconds
        self.max_jobs = max_jobs
        self._jobs: dict[str, _JobSteps] = {}
        self._gpus: dict[tuple[str, int], _GpuWatch] = {}
        self._where: dict[tuple[str, int], tuple[str, int]] = {}  # (node, gpu) -> (job, rank)
        self._where_jobs = -1
        self._since_rebuild = 0

    # -- the job side -----------------------------------------------------------------------

    def _job(self, job: str) -> _JobSteps:
        state = self._jobs.get(job)
        if state is None:
            if len(self._jobs) >= self.max_jobs:
                self._jobs.pop(next(iter(self._jobs)))
            state = self._jobs[job] = _JobSteps(self.step_history)
        return state

    def observe_steps(self, job: str, steps: list[int], step_times: list[float]) -> None:
        """Step events of ``job`` in order (absent step_time: NaN): its step count and recent step times."""
        state = self._job(job)
        state.count += len(steps)
        if not steps or max(steps) <= state.last_step:
            return
        if steps.count(steps[0]) == len(steps):  # the usual batch: one step of many ranks
            pairs = ((steps[0], step_times[0]),)
        else:
            pairs = zip(steps, step_times)
        for step, value in pairs:
            if step > state.last_step:
                state.last_step = step
                if value == value:
                    state.add(value)

    def forget_job(self, job: str) -> None:
        self._jobs.pop(job, None)

    def rebuild(self) -> None:
        """Rebuild the (node, gpu) -> (job, rank) index from the placement (on the engine's tick)."""
        placement = self._placement()
        where = {}
        for job, ranks in placement.items():
            for rank, (n, g) in ranks.items():
                if n is not None and g is not None:
                    where[(n, g)] = (job, rank)
        self._where, self._where_jobs, self._since_rebuild = where, len(placement), 0

    def _on_gpu_of(self, node: str, gpu: int) -> tuple[str, int] | None:
        found = self._where.get((node, gpu))
        self._since_rebuild += 1
        # A miss: rebuild when jobs came or went, or now and then (ranks of a known job placed since).
        if found is None and (len(self._placement()) != self._where_jobs or self._since_rebuild >= 1000):
            self.rebuild()
            found = self._where.get((node, gpu))
        return found

    def _grace(self, job: _JobSteps | None) -> float:
        """How long after its last new step a job still counts as stepping: a few of its steps."""
        return max(self.stepping_grace, 3.0 * job.typical if job is not None else 0.0)

    # -- the GPU side -----------------------------------------------------------------------

    def update(self, ev: GpuEvent) -> list[Alert]:
        key = (ev.node, ev.gpu)
        watch = self._gpus.get(key)
        if watch is None:
            watch = self._gpus[key] = _GpuWatch()
        on = self._on_gpu_of(ev.node, ev.gpu)
        job = self._jobs.get(on[0]) if on else None
        if job is not None and watch.job_count is not None and job.count > watch.job_count:
            watch.advanced_at = ev.ts
        elif job is None:
            watch.advanced_at = None
        watch.job_count = job.count if job is not None else None
        stepping = watch.advanced_at is not None and ev.ts - watch.advanced_at <= self._grace(job)
        active: dict[str, tuple[str, dict]] = {}

        # gpu_idle: idle on the GPU's own clock while its job steps
        if ev.util is None:
            pass  # not reported this sample: the idle period neither grows nor ends
        elif stepping and (ev.util < self.idle_util_pct or (
                AlertType.GPU_IDLE in watch.alerts and ev.util < self.idle_util_pct + self.idle_clear_pct)):
            if watch.idle_since is None:
                watch.idle_since = ev.ts
            idle_for = ev.ts - watch.idle_since
            if idle_for >= self.idle_seconds or AlertType.GPU_IDLE in watch.alerts:
                active[AlertType.GPU_IDLE] = (
                    f"utilization {ev.util:.0f}% for {idle_for:.0f} s while job {on[0]} steps",
                    {"util": ev.util, "idle_seconds": round(idle_for, 1), "threshold_pct": self.idle_util_pct})
        else:
            watch.idle_since = None

        hot_held = AlertType.GPU_HOT in watch.alerts and ev.temp is not None and ev.temp > self.hot_temp_c - self.hot_clear_c
        if ev.temp is not None and (ev.temp >= self.hot_temp_c or hot_held):
            watch.hot_run += 1
            if watch.hot_run == 1:
                watch.hot_since = ev.ts
            if sustained(watch.hot_run, self.hot_samples, _span(watch.hot_since, ev.ts)) or hot_held:
                active[AlertType.GPU_HOT] = (
                    f"{ev.temp:.0f} C for {watch.hot_run} samples (threshold {self.hot_temp_c:.0f} C)",
                    {"temp_c": ev.temp, "samples": watch.hot_run, "threshold_c": self.hot_temp_c,
                     "throttle": ev.throttle})
        else:
            watch.hot_run = 0

        hbm_line = self.hbm_ratio - (self.hbm_clear_ratio if AlertType.HBM_FULL in watch.alerts else 0.0)
        if ev.mem_used is not None and ev.mem_total and ev.mem_used > hbm_line * ev.mem_total:
            watch.hbm_run += 1
            growth = job.growth(self.recent_steps) if job is not None else None
            held = AlertType.HBM_FULL in watch.alerts
            if watch.hbm_run >= self.hot_samples and (held or (growth is not None and growth >= self.hbm_step_growth)):
                used = ev.mem_used / ev.mem_total
                active[AlertType.HBM_FULL] = (f"HBM {used * 100:.1f}% used" + (
                    f" while job {on[0]}'s step time grew {growth:.2f}x" if growth is not None else ""),
                    {"mem_used": ev.mem_used, "mem_total": ev.mem_total, "used_ratio": round(used, 4),
                     "threshold_ratio": self.hbm_ratio,
                     "step_time_growth": None if growth is None else round(growth, 3)})
        else:
            watch.hbm_run = 0

        out: list[Alert] = []
        for rule, (text, detail) in active.items():
            if watch.clean is not None:
                watch.clean[rule] = 0
                watch.clean_since.pop(rule, None)
            if rule not in watch.alerts:
                alert = self._alert(rule, ev, on, text, detail)
                watch.alerts[rule] = alert
                out.append(alert)
        for rule in [r for r in watch.alerts if r not in active]:
            if watch.clean is None:
                watch.clean, watch.clean_since = {}, {}
            watch.clean[rule] = watch.clean.get(rule, 0) + 1
            since = watch.clean_since.setdefault(rule, ev.ts)
            if watch.clean[rule] >= self.clear_samples and ev.ts - since >= self.clear_seconds:
                alert = watch.alerts.pop(rule)
                watch.clean_since.pop(rule, None)
                out.append(alert.resolved(at=ev.ts, summary=f"resolved: {alert.summary}"))
        return out

    def _alert(self, rule: AlertType, ev: GpuEvent, on: tuple[str, int] | None, text: str, detail: dict) -> Alert:
        began = ev.ts if rule != AlertType.GPU_IDLE else (self._gpus[(ev.node, ev.gpu)].idle_since or ev.ts)
        evidence = {"node": ev.node, "gpu": ev.gpu, "rule": rule.value, "began_at": round(began, 3)}
        job, rank = on if on else ("", None)
        if rank is not None:
            evidence.update(job=job, rank=rank)
        evidence.update(detail)
        # gpu_hot is a node alert (the node's owner publishes it); gpu_idle and hbm_full belong to the job.
        alert_job = "" if rule == AlertType.GPU_HOT else job
        where = f"GPU {ev.gpu} on {ev.node}" + (f" (job {job} rank {rank})" if rank is not None else "")
        return Alert(id=alert_id(alert_job, rule, ev.node, ev.gpu, round(began, 3)), status=AlertStatus.FIRING,
                     type=rule, severity=Severity.WARNING, job=alert_job,
                     ranks=(rank,) if rank is not None and alert_job else (),
                     nodes=(ev.node,), starts_at=ev.ts, summary=f"{rule}: {where}: {text}", evidence=evidence)

    @property
    def watching(self) -> bool:
        return bool(self._gpus)

    def firing(self) -> list[Alert]:
        return [a for w in self._gpus.values() for a in w.alerts.values()]

    def close(self, at: float, reason: str) -> list[Alert]:
        """Resolve every firing alert at ``at`` (``reason`` in the summary); each condition counts anew."""
        out = [a.resolved(at=at, summary=f"resolved ({reason}): {a.summary}") for a in self.firing()]
        for watch in self._gpus.values():
            watch.alerts.clear()
            watch.clean = watch.clean_since = None
            watch.idle_since, watch.hot_run, watch.hbm_run = None, 0, 0
        return out


def device_rules(host_settings, placement: Callable[[], dict]) -> DeviceRules:
    h = host_settings
    return DeviceRules(placement=placement, idle_util_pct=h.gpu_idle_util_pct, idle_seconds=h.gpu_idle_seconds,
                       hot_temp_c=h.gpu_hot_temp_c, hot_samples=h.gpu_hot_samples, hbm_ratio=h.hbm_full_ratio,
                       hbm_step_growth=h.hbm_step_growth, hot_clear_c=h.gpu_hot_clear_c,
                       hbm_clear_ratio=h.hbm_full_clear_ratio, idle_clear_pct=h.gpu_idle_clear_pct,
                       clear_seconds=h.device_clear_seconds)
