"""The engine's per-job rules as ``JobRule``s (models/rule.py): each wraps its detector(s) without changing them.

One class per registered rule: it says what the rule consumes and declares (``spec``), builds the detector
from the rule's settings, feeds it, and lists and closes its alerts through the common methods. Rules kept
per peer group (the straggler rules) hold one detector per group here. The detectors' own modules keep
the maths; these adapters are where the engine's per-rule code went.
"""

from __future__ import annotations

import dataclasses
import math
from typing import TYPE_CHECKING, Any, Protocol

from .alert_types import AlertStatus, AlertType
from .jobhealth.checkpoint import CheckpointDetector
from .jobhealth.comm import CommSlowdownDetector
from .hang.detector import HangDetector, HangSettings
from .steps.imbalance import ImbalanceDetector
from .steps.inspector import InspectorJudge
from .jobhealth.job_health import JobHealthSettings, checkpoint_rule, comm_rule, runtime_values, throughput_rule
from .steps.long_straggler import LongStragglerDetector
from .resolution import Resolution
from .rule import JobRule, RankSteps, RuleSpec, Signal, closed
from .steps.straggler import StragglerDetector, StragglerSettings
from .jobhealth.throughput import ThroughputDetector, sample_from

if TYPE_CHECKING:
    from .alerts import Alert
    from .steps.assembly import GroupStep
    from .wire.events import Event


class JobContext(Protocol):
    """What a rule may read of its job (``JobState``, models/engine.py)."""

    job: str
    ended: bool
    latest_step: int
    ranks: set[int]
    sources: set[str]


class RuleEnv(Protocol):
    """What a rule may ask of the engine: settings in force for a job, hooks for views and metrics."""

    settings: Any  # DetectionSettings (models/settings.py)
    verdict_listener: Any

    def settings_for(self, cls: type, job: str) -> Any:
        """The settings of class ``cls`` (a rule's ``spec.settings``) in force for ``job`` (models/settings_store.py)."""

    def straggler_settings(self, job: str) -> StragglerSettings: ...

    def hang_settings(self, job: str) -> HangSettings: ...

    def job_health_settings(self, job: str) -> JobHealthSettings: ...

    def count_flap(self, detector: StragglerDetector, outcome: str) -> None: ...


class ImbalanceRule(JobRule):
    """Stage imbalance and rank classes (models/steps/imbalance.py): the per-rank rules compare ranks within a class."""

    spec = RuleSpec(name="imbalance", consumes=frozenset({Signal.STEPS}), alert_types=(AlertType.IMBALANCE,),
                    failure_classes=("imbalance",), settings=JobHealthSettings)

    def __init__(self, job: JobContext, env: RuleEnv, needs: dict[str, JobRule]) -> None:
        self.detector = ImbalanceDetector(job=job.job)
        self.detector.reconfigure(**runtime_values(env.job_health_settings(job.job), "imbalance"))

    def reconfigure(self, settings: JobHealthSettings) -> None:
        self.detector.reconfigure(**runtime_values(settings, "imbalance"))

    def class_of(self, group: str) -> dict[int, int]:
        return self.detector.class_of(group)

    def on_step(self, step: GroupStep) -> list[Alert]:
        return self.detector.update(step)

    def open_alerts(self) -> list[Alert]:
        return self.detector.open_alerts()

    def close(self, *, at: float, resolution: Resolution, reason: str) -> list[Alert]:
        return closed(self.detector.close(at=at, reason=reason), resolution, reason)


class StragglerRule(JobRule):
    """The short-horizon straggler rule (models/steps/straggler.py), one detector per peer group."""

    spec = RuleSpec(name="straggler", consumes=frozenset({Signal.STEPS}), alert_types=(AlertType.STRAGGLER,),
                    failure_classes=("straggler_unexplained", "input_pipeline"), settings=StragglerSettings,
                    needs=("imbalance",))

    def __init__(self, job: JobContext, env: RuleEnv, needs: dict[str, JobRule]) -> None:
        self.job = job.job
        self.env = env
        self.imbalance: ImbalanceRule = needs["imbalance"]  # type: ignore[assignment]
        #: group -> detector, made at the group's first closed step.
        self.detectors: dict[str, StragglerDetector] = {}
        #: The long-horizon rule, which registers itself here (it is built after this one and needs it).
        self.long: LongStragglerRule | None = None
        #: This rule's alert id -> (id, start) of the long-horizon alert it continues (``_continuing``).
        self._continues: dict[str, tuple[str, float]] = {}

    def on_step(self, step: GroupStep) -> list[Alert]:
        detector = self.detectors.get(step.group)
        if detector is None:
            detector = self.detectors[step.group] = StragglerDetector.from_settings(
                self.env.straggler_settings(self.job), job=self.job, group=step.group)
            detector.on_verdict = self.env.verdict_listener
            detector.on_flap = self.env.count_flap
        detector.rank_class = self.imbalance.class_of(step.group)
        alerts = detector.update(step)
        return self._continuing(alerts, step.group) if alerts else alerts

    def _continuing(self, alerts: list[Alert], group: str) -> list[Alert]:
        """A rank the long-horizon rule already pages for (slow by a few % for many steps, then slower): this
        rule's alert for it continues that incident, under its id and start (the long rule lets go of the rank
        without resolving it), so one slow rank is one incident, escalated from info."""
        out = []
        for alert in alerts:
            cont = self._continues.get(alert.id)
            if cont is None and alert.status == AlertStatus.FIRING and self.long is not None and alert.ranks:
                taken = self.long.hand_over(group, alert.ranks[0])
                if taken is not None:
                    cont = self._continues[alert.id] = (taken.id, taken.starts_at)
            out.append(self._as_continued(alert))
            if cont is not None and alert.status == AlertStatus.RESOLVED:
                del self._continues[alert.id]
        return out

    def _as_continued(self, alert: Alert) -> Alert:
        """``alert`` under the id and start of the long-horizon alert it continues, if any."""
        cont = self._continues.get(alert.id)
        return alert if cont is None else dataclasses.replace(alert, id=cont[0], starts_at=cont[1])

    def open_alerts(self) -> list[Alert]:
        return [self._as_continued(a) for d in self.detectors.values() for a in d.firing.values()]

    def explaining(self) -> Alert | None:
        """A firing straggler of the job (the first one), which explains the waits of the ranks after it."""
        for detector in self.detectors.values():
            for alert in detector.firing.values():
                return alert
        return None

    def close(self, *, at: float, resolution: Resolution, reason: str) -> list[Alert]:
        out = [a for g, d in self.detectors.items() for a in self._continuing(d.close_all(at=at, reason=reason), g)]
        return closed(out, resolution, reason)

    def reconfigure(self, settings: StragglerSettings) -> None:
        values = dataclasses.asdict(settings)
        for detector in self.detectors.values():
            detector.reconfigure(**values)


class LongStragglerRule(JobRule):
    """The long-horizon straggler rule (models/steps/long_straggler.py), one detector per peer group; it leaves
    ranks the short rule speaks for (firing or held off) to it: no second alert by the back door."""

    spec = RuleSpec(name="long_straggler", consumes=frozenset({Signal.STEPS}), alert_types=(AlertType.STRAGGLER,),
                    failure_classes=("straggler_unexplained",), settings=StragglerSettings, needs=("straggler",))

    def __init__(self, job: JobContext, env: RuleEnv, needs: dict[str, JobRule]) -> None:
        self.context = job
        self.env = env
        self.short: StragglerRule = needs["straggler"]  # type: ignore[assignment]
        self.short.long = self
        self.detectors: dict[str, LongStragglerDetector] = {}
        # The short rule's ``long_*`` settings; a change at run time comes as ``reconfigure`` and applies at once.
        self.settings: StragglerSettings = env.straggler_settings(job.job)

    def hand_over(self, group: str, rank: int) -> Alert | None:
        """``rank``'s open alert in ``group``, let go of (the short rule continues it); None if none is open."""
        detector = self.detectors.get(group)
        return detector.hand_over(rank) if detector is not None else None

    def on_step(self, step: GroupStep) -> list[Alert]:
        s = self.settings
        if s.long_min_effect <= 0:
            return []
        long = self.detectors.get(step.group)
        if long is None:
            long = self.detectors[step.group] = LongStragglerDetector(
                job=self.context.job, group=step.group, min_effect=s.long_min_effect, window=s.long_window,
                min_peers=s.min_peers, warmup_steps=s.warmup_steps)
        short = self.short.detectors[step.group]  # fed this step just before (``needs``)
        long.rank_class = short.rank_class
        long.min_effect = s.long_min_effect
        return long.update(step, job_ranks=len(self.context.ranks), exclude=short.speaking_for())

    def reconfigure(self, settings: StragglerSettings) -> None:
        self.settings = settings  # (the detectors take the new ``long_*`` at their next step)

    def open_alerts(self) -> list[Alert]:
        return [a for d in self.detectors.values() for a in d.firing.values()]

    def close(self, *, at: float, resolution: Resolution, reason: str) -> list[Alert]:
        return closed([a for d in self.detectors.values() for a in d.close_all(at=at, reason=reason)],
                      resolution, reason)


class HangRule(JobRule):
    """Hangs, stalls and silent ranks (models/hang/detector.py): every rank's steps, heartbeats, collectives, phases and
    stacks, and the clock."""

    spec = RuleSpec(name="hang", consumes=frozenset({Signal.RANK_STEPS, Signal.HEARTBEATS, Signal.COLLECTIVES,
                                                     Signal.PHASES, Signal.STACKS, Signal.TICKS}),
                    alert_types=(AlertType.HANG,),
                    failure_classes=("hang_undetermined", "hang_silent_ranks", "hang_culprit", "hang_partial"),
                    settings=HangSettings)

    def __init__(self, job: JobContext, env: RuleEnv, needs: dict[str, JobRule]) -> None:
        self.context = job
        self.detector = HangDetector.from_settings(env.hang_settings(job.job), job=job.job)

    def on_rank_steps(self, run: RankSteps) -> list[tuple[int, Alert]]:
        return self.detector.update_steps(run.ranks, run.steps, run.ts, run.step_times, run.phases, run.nodes,
                                          run.world_sizes, layout=run.layout, ts_array=run.ts_array,
                                          step_bounds=run.step_bounds)

    def on_event(self, event: Event) -> list[Alert]:
        return self.detector.update(event)

    def tick(self, now: float) -> list[Alert]:
        hangs = self.detector.check(now)
        sources = self.context.sources
        if hangs and "nccl_ras" in sources:  # say which source the heartbeats came from
            source = "nccl_ras" if "callback" not in sources else "callback"
            hangs = [dataclasses.replace(a, evidence={**a.evidence, "source": source}) for a in hangs]
        return hangs

    def next_due(self, now: float, *, incremental: bool = True) -> float:
        # An open hang is skipped only while its verdict cannot change; not incremental: every tick.
        return self.detector.quiet_until() if incremental or not self.detector.firing else -math.inf

    def open_alerts(self) -> list[Alert]:
        return list(self.detector.firing.values())

    def close(self, *, at: float, resolution: Resolution, reason: str) -> list[Alert]:
        return closed(self.detector.close(at=at, reason=reason), resolution, reason)

    def reconfigure(self, settings: HangSettings) -> None:
        self.detector.reconfigure(settings)

    def capped(self) -> dict[str, int]:
        return self.detector.capped


class ThroughputRule(JobRule):
    """Job-wide throughput drop (models/jobhealth/throughput.py), one sample per closed step."""

    spec = RuleSpec(name="throughput", consumes=frozenset({Signal.STEPS}),
                    alert_types=(AlertType.THROUGHPUT_DROP,), failure_classes=("throughput_drop",),
                    settings=JobHealthSettings)

    def __init__(self, job: JobContext, env: RuleEnv, needs: dict[str, JobRule]) -> None:
        self.detector: ThroughputDetector = throughput_rule(job.job, env.job_health_settings(job.job),
                                                            warmup_steps=env.settings.straggler.warmup_steps)

    def on_step(self, step: GroupStep) -> list[Alert]:
        return self.detector.update(sample_from(step), phase=step.phase)

    def open_alerts(self) -> list[Alert]:
        return [self.detector.firing] if self.detector.firing is not None else []

    def close(self, *, at: float, resolution: Resolution, reason: str) -> list[Alert]:
        return closed(self.detector.close(at=at, reason=reason), resolution, reason)

    def reconfigure(self, settings: JobHealthSettings) -> None:
        # Thresholds apply at once (an open alert they end resolves as threshold_changed); history sizes
        # (baseline_steps) to jobs that start after.
        self.detector.reconfigure(**runtime_values(settings, "throughput"))
        self.detector.max_incomplete_steps = settings.throughput_max_incomplete_steps


class CommRule(JobRule):
    """Communication slowdown (models/jobhealth/comm.py), from the ranks' collective events."""

    spec = RuleSpec(name="comm", consumes=frozenset({Signal.COLLECTIVES}), alert_types=(AlertType.COMM_SLOWDOWN,),
                    failure_classes=("comm_slowdown",), settings=JobHealthSettings, needs=("straggler",))

    def __init__(self, job: JobContext, env: RuleEnv, needs: dict[str, JobRule]) -> None:
        self.detector: CommSlowdownDetector = comm_rule(job.job, env.job_health_settings(job.job))
        straggler: StragglerRule = needs["straggler"]  # type: ignore[assignment]
        # Point-to-point waits behind a slow pipeline stage are its straggler's, not the network's.
        self.detector.explained = straggler.explaining
        self.detector.job_step = lambda: job.latest_step

    def on_event(self, event: Event) -> list[Alert]:
        return self.detector.update(event)

    def open_alerts(self) -> list[Alert]:
        return self.detector.open_alerts()

    def close(self, *, at: float, resolution: Resolution, reason: str) -> list[Alert]:
        return closed(self.detector.close(at=at, reason=reason), resolution, reason)

    def reconfigure(self, settings: JobHealthSettings) -> None:
        # At once, an open alert they end resolving as threshold_changed; the window to collectives judged after.
        self.detector.reconfigure(**runtime_values(settings, "comm"))

    def capped(self) -> dict[str, int]:
        return self.detector.capped


class CheckpointRule(JobRule):
    """Checkpoint staleness and slow checkpoints (models/jobhealth/checkpoint.py): job-wide phases, progress,
    the clock."""

    spec = RuleSpec(name="checkpoint", consumes=frozenset({Signal.RANK_STEPS, Signal.PHASES, Signal.TICKS}),
                    alert_types=(AlertType.CHECKPOINT_STALE,), failure_classes=("checkpoint_stale",),
                    settings=JobHealthSettings)

    def __init__(self, job: JobContext, env: RuleEnv, needs: dict[str, JobRule]) -> None:
        self.context = job
        self.detector: CheckpointDetector = checkpoint_rule(job.job, env.job_health_settings(job.job))

    def on_rank_steps(self, run: RankSteps) -> list[tuple[int, Alert]]:
        self.detector.observe(run.ts[0], max(run.steps))
        return []

    def on_event(self, event: Event) -> list[Alert]:
        if event.rank is not None:  # a single rank's phase is carried by its own step events
            return []
        return self.detector.on_phase(event.ts, event.phase, event.step)

    def tick(self, now: float) -> list[Alert]:
        return [] if self.context.ended else self.detector.check(now)

    def next_due(self, now: float, *, incremental: bool = True) -> float:
        return math.inf if self.context.ended else self.detector.check_due()

    def open_alerts(self) -> list[Alert]:
        return self.detector.open_alerts()

    def close(self, *, at: float, resolution: Resolution, reason: str) -> list[Alert]:
        return closed(self.detector.close(at=at, reason=reason), resolution, reason)

    def reconfigure(self, settings: JobHealthSettings) -> None:
        d = self.detector
        d.max_age_seconds, d.max_age_steps = settings.checkpoint_max_age_seconds, settings.checkpoint_max_age_steps
        d.slow_factor, d.required = settings.checkpoint_slow_factor, settings.checkpoint_required


class InspectorRule(JobRule):
    """The straggler rule on NCCL Inspector windows from the node agents (models/steps/inspector.py), for jobs
    without the callback; its collectives also feed the comm rule. Made at the job's first window."""

    spec = RuleSpec(name="inspector", consumes=frozenset({Signal.INSPECTOR}),
                    alert_types=(AlertType.STRAGGLER, AlertType.COMM_SLOWDOWN),
                    failure_classes=("straggler_unexplained", "comm_slowdown"), settings=StragglerSettings,
                    needs=("comm",))

    def __init__(self, job: JobContext, env: RuleEnv, needs: dict[str, JobRule]) -> None:
        self.context = job
        self.env = env
        self.comm: CommRule = needs["comm"]  # type: ignore[assignment]
        self.judge: InspectorJudge | None = None

    def on_event(self, event: Event) -> list[Alert]:
        if self.judge is None:
            self.judge = InspectorJudge(job=self.context.job, straggler=self.env.straggler_settings(self.context.job),
                                        comm=self.comm.detector)
        return self.judge.update(event, callback_steps=self.context.latest_step >= 0)

    def open_alerts(self) -> list[Alert]:
        return self.judge.open_alerts() if self.judge is not None else []

    def close(self, *, at: float, resolution: Resolution, reason: str) -> list[Alert]:
        if self.judge is None:
            return []
        return closed(self.judge.close(at=at, reason=reason), resolution, reason)

    def reconfigure(self, settings: StragglerSettings) -> None:
        if self.judge is not None:
            self.judge.reconfigure(settings, dataclasses.asdict(settings))
