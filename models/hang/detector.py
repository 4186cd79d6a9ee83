"""The hang rule: when a job (or some of its ranks) has stopped, how loud to say it, and its alert's life.

The rule (the user's definition): a job whose step counter (the highest completed step of
any rank) has not advanced for ``timeout_seconds`` is hung (``critical``). The timeout is
``checkpoint_timeout_seconds`` while the job is in the ``checkpoint`` phase and
``first_step_timeout_seconds`` before its first step completed (model loading). Before
that, in the ``train`` phase, an early ``warning`` fires once no step completed for
``warning_factor`` x the p99 of the job's recent train step times (never sooner than
``warning_floor_seconds``, never later than ``warning_timeout_fraction`` x the timeout: a warning
before the critical at every pace). In a checkpoint or eval, ranks still in it long after most
ranks left it (``pause_hang_factor`` x the pause length) are warned about by name; the pause
timeout stays the last resort. A job that sent ``phase: end`` is finished and never hung.

The same alert (one id) goes from warning to critical to resolved; a new version with the
same id is published whenever the severity or the diagnosis changes. It resolves when the
job completes a step again, or ends, or restarts.

``HangDetector`` ties the parts of models/hang/ together, one job each:

* progress.py: where the job and each rank are (steps, heartbeats, collective and process-group
  sequence numbers), fed by every event;
* diagnosis.py: who is to blame once it stopped (``silent_ranks``, ``culprit_before_collective``,
  ``partial_hang``, ``undetermined``; docs/hang.md);
* stack_requests.py (and stacks.py, the wire record): the culprits' stacks asked on demand and
  added to the alert (``evidence.stacks``) once every asked rank answered or
  ``stack_timeout_seconds`` passed;
* evidence.py: the alert's evidence as typed records, written to the wire form where the alert is made;
* text.py: the alert's summary.

Everything runs on the clock it is given: event time in replay, wall time live. Memory is
bounded: per-rank latest values in arrays, bounded deques of step times and heartbeat gaps.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field, replace
from enum import Enum

import numpy as np

from .settings import HangSettings  # noqa: F401  (defined in a light module; re-exported here)
from ..alert_types import AlertStatus, AlertType, Severity
from ..alerts import Alert, alert_id
from ..evidence import HangCase
from ..resolution import Resolution
from ..steps.clocks import ClockOffsets
from ..steps.layout import all_named
from ..tunable import runtime_fields
from ..wire.events import PAUSE_PHASES, CollectiveEvent, Event, HeartbeatEvent, PhaseEvent, StackEvent, StepEvent
from . import text
from .diagnosis import HangDiagnosis, across_teardown, diagnose
from .evidence import (BlockedGroup, Culprit, CulpritState, HangAlertEvidence, HangEnd, ProcessGroupEvidence,
                       RankList, TornDown)
from .progress import (BURST_SECONDS, INCARNATION_WINDOW_SECONDS, OLD_PROCESS_SLACK_SECONDS, Incarnation, JobProgress,
                       PauseStragglers)
from .stack_requests import StackRequests
from .stacks import StackRequest




_D = HangSettings()

#: Event times more than this far ahead of the clock the rule is checked on are clamped to it
#: (hosts' clock offsets are corrected before, models/steps/clocks.py; seconds).
FUTURE_SLACK_SECONDS = 60.0
#: Before the pace is learned, the warning waits this many times the job's longest step so far (its warm-up
#: steps vary severalfold: a fixed 30 s floor hides that at a fast pace only) ...
EARLY_STEP_FACTOR = 2.5
#: ... but comes at the latest at this share of the timeout (a warning before the critical at every pace).
EARLY_WARNING_SHARE = 0.75


class Stop(Enum):
    """What stopped in a hang episode."""

    JOB = "job"  # the job's step counter stopped
    PARTIAL = "partial"  # some live ranks stopped while others still complete steps


@dataclass(slots=True)
class _Episode:
    """One hang, from first firing to resolution (mutable, internal)."""

    alert: Alert
    evidence: HangAlertEvidence  # ``alert``'s evidence, typed
    kind: Stop
    job_step: int  # the job's step counter when it fired
    stuck_steps: dict[int, int] = field(default_factory=dict)  # partial: rank -> its step when stuck
    key: tuple = ()
    base: Alert | None = None  # the alert before stack evidence was added
    base_evidence: HangAlertEvidence | None = None  # ``base``'s evidence, typed
    named: HangDiagnosis | None = None  # the latest culprit diagnosis (kept across a teardown)
    #: When the job stopped, where it fired on the counter without ranks in flight (``counter_without_passed``; kept
    #: while open: one step's events arriving rank by rank would move it), else -inf.
    since: float = -math.inf


@dataclass(frozen=True, slots=True)
class _PauseHang:
    """A hang in a pause (``HangDetector._pause_hang``)."""

    after: float  # the job's stall when it is due: the warning's threshold
    found: PauseStragglers
    wait: float  # how long the ranks may stay in the pause after most left it
    took: float  # how long most ranks took


class HangDetector:
    """Hang rule and culprit localization for one job; feed it every event, ``check(now)`` on a timer.

    Example: four ranks step once a second, then all stop after step 10 (no heartbeats, so no
    culprit can be named; with heartbeats the alert names the rank the others wait for).

    >>> from stepwatch.models.wire.events import StepEvent
    >>> detector = HangDetector(job="j", timeout_seconds=60.0)
    >>> for n in range(1, 11):
    ...     for rank in range(4):
    ...         _ = detector.update(StepEvent(job="j", rank=rank, step=n, ts=1000.0 + n, step_time=1.0))
    >>> detector.check(1020.0)
    []
    >>> [(str(a.type), str(a.status), str(a.severity)) for a in detector.check(1040.0)]
    [('hang', 'firing', 'warning')]
    >>> [(str(a.type), str(a.status), str(a.severity)) for a in detector.check(1071.0)]
    [('hang', 'firing', 'critical')]
    """

    # Defaults and documentation: ``HangSettings`` (one place); a bare detector asks for no stacks.
    def __init__(self, *, job: str, timeout_seconds: float = _D.timeout_seconds,
                 checkpoint_timeout_seconds: float = _D.checkpoint_timeout_seconds,
                 first_step_timeout_seconds: float = _D.first_step_timeout_seconds,
                 warning_factor: float = _D.warning_factor, warning_floor_seconds: float = _D.warning_floor_seconds,
                 warning_min_steps: int = _D.warning_min_steps, step_history: int = _D.step_history,
                 pause_factor: float = _D.pause_factor,
                 warning_timeout_fraction: float = _D.warning_timeout_fraction,
                 pause_hang_factor: float = _D.pause_hang_factor,
                 pause_hang_floor_seconds: float = _D.pause_hang_floor_seconds,
                 heartbeat_timeout_seconds: float = _D.heartbeat_timeout_seconds,
                 heartbeat_timeout_factor: float = _D.heartbeat_timeout_factor,
                 max_listed_ranks: int = _D.max_listed_ranks, stacks: bool = False,
                 stack_waiting_ranks: int = _D.stack_waiting_ranks, stack_timeout_seconds: float = _D.stack_timeout_seconds,
                 stack_min_interval_seconds: float = _D.stack_min_interval_seconds) -> None:
        if timeout_seconds <= 0 or checkpoint_timeout_seconds <= 0 or first_step_timeout_seconds <= 0:
            raise ValueError("hang timeouts must be positive")
        if step_history < 1 or warning_min_steps < 1:
            raise ValueError("step_history and warning_min_steps must be >= 1")
        self.job = job
        self.timeout_seconds = timeout_seconds
        self.checkpoint_timeout_seconds = checkpoint_timeout_seconds
        self.first_step_timeout_seconds = first_step_timeout_seconds
        self.warning_factor = warning_factor
        self.warning_floor_seconds = warning_floor_seconds
        self.warning_min_steps = warning_min_steps
        self.pause_factor = pause_factor
        self.warning_timeout_fraction = warning_timeout_fraction
        self.pause_hang_factor = pause_hang_factor
        self.pause_hang_floor_seconds = pause_hang_floor_seconds
        self.step_history = step_history
        self.heartbeat_timeout_seconds = heartbeat_timeout_seconds
        self.heartbeat_timeout_factor = heartbeat_timeout_factor
        self.max_listed_ranks = max_listed_ranks
        #: The job's hosts' clock offsets (kept across restarts: a host's clock does not restart).
        self.clocks = ClockOffsets()
        #: Ranks seen starting a new process, and restarts of the whole job (``_incarnation``).
        self.incarnations = 0
        self.job_restarts = 0
        #: Ask culprits (and ``stack_waiting_ranks`` waiting ranks) for their stacks when a hang opens;
        #: answers missing after ``stack_timeout_seconds`` are listed; one request per
        #: ``stack_min_interval_seconds`` at most.
        self.stacks = stacks
        self.stack_waiting_ranks = stack_waiting_ranks
        self.stack_timeout_seconds = stack_timeout_seconds
        self.stack_min_interval_seconds = stack_min_interval_seconds
        #: Stacks on demand: requests out, answers in, across the job's hang episodes.
        self.stack_requests = StackRequests()
        #: Events stamped before this (the job's clock) belong to the processes of the run before the last restart.
        self._old_before = -math.inf
        self._pg_limit: int | None = None  # process groups the engine lets the job hold (``limit_pgs``)
        self._reset_state()

    @classmethod
    def from_settings(cls, settings: HangSettings, *, job: str) -> "HangDetector":
        """A detector for ``job`` configured by ``settings`` (``job_timeouts`` is the caller's to apply)."""
        return cls(job=job, step_history=settings.step_history,
                   **{name: getattr(settings, name) for name in runtime_fields(HangSettings)})

    def reconfigure(self, settings: HangSettings) -> None:
        """Take the run-time fields of ``settings`` at once (plain attributes, read at each check)."""
        for name in runtime_fields(HangSettings):
            setattr(self, name, getattr(settings, name))

    def _reset_state(self) -> None:
        """A fresh run of the job: new progress, no episode, no stack round (the clocks and counts stay)."""
        self.progress = JobProgress(self.step_history)
        self.progress.max_pgs = self._pg_limit  # (the limit outlives a restart)
        self._episode: _Episode | None = None
        self._checked_at = -math.inf  # the latest ``check``'s time (the job's clock)
        self.stack_requests.reset()

    # -- views ----------------------------------------------------------------------------

    @property
    def firing(self) -> dict[str, Alert]:
        """The open hang alert by id (at most one)."""
        return {self._episode.alert.id: self._episode.alert} if self._episode else {}

    @property
    def ended(self) -> bool:
        return self.progress.ended

    @property
    def step(self) -> int:
        """The job's step counter (-1 before any step is known)."""
        return self.progress.max_step

    @property
    def capped(self):
        """Input left out at a cap (process groups beyond MAX_PGS, ranks lists beyond MAX_PG_RANK_ENTRIES)."""
        return self.progress.capped

    @property
    def pending_requests(self) -> list[StackRequest]:
        """Stack requests made by ``check`` and not yet taken by the worker."""
        return self.stack_requests.pending

    def thresholds(self) -> tuple[float | None, float, str]:
        """``(warning after, critical after, which timeout)`` for the job's current state, seconds."""
        p = self.progress
        if not p.completed_any:
            return None, max(self.first_step_timeout_seconds, self.timeout_seconds), "first_step"
        if p.in_checkpoint(self.heartbeat_timeout):
            return None, max(self.checkpoint_timeout_seconds, self.timeout_seconds), "checkpoint"
        critical = self.timeout_seconds
        if p.phase not in ("train", "warmup"):
            return None, critical, p.phase
        # At every pace a warning strictly before the critical: at the latest a fraction of the timeout ...
        latest = self.warning_timeout_fraction * critical if 0 < self.warning_timeout_fraction < 1 else math.inf
        p99, stop = p.step_time_stats(self.warning_floor_seconds, self.warning_factor)
        # ... but never within pause_factor x the job's own steps (a step is not a hang): its warm-up steps before
        # the pace is learned (330 s at a 120 s pace), its p99 after (a pace near the timeout).
        own = p99 if len(p.step_times) >= self.warning_min_steps else max(p.early_step_max, p.longest_recent_step())
        latest = max(latest, self.pause_factor * own)
        if len(p.step_times) < self.warning_min_steps:
            # Warm-up steps vary more than learned ones (compilation, autotuning: gen3's 2.0 -> 4.2 s, under the
            # floor at its pace, 163 -> 350 s at 60 s steps): EARLY_STEP_FACTOR x the longest, still before the
            # critical (at most EARLY_WARNING_SHARE of it, never earlier than pause_factor x the longest).
            latest = max(latest, min(EARLY_STEP_FACTOR * own, EARLY_WARNING_SHARE * critical))
            return (latest if latest < critical else None), critical, p.phase
        warn = max(self.warning_factor * p99, self.warning_floor_seconds)
        longest = max(max(p.pauses, default=0.0), stop)  # stops it went on from: resolved warnings, long steps
        if longest:
            warn = max(warn, self.pause_factor * longest)
            # ... and so does a stop it went on from, still before the critical (at most EARLY_WARNING_SHARE of it):
            # at 120 s steps a flaky GPU's 300-315 s steps, over half the timeout, warned at every one of them.
            latest = max(latest, min(self.pause_factor * longest, EARLY_WARNING_SHARE * critical))
        warn = min(warn, latest)
        return (warn if warn < critical else None), critical, p.phase

    def pause_hang_after(self, this_pause: float = 0.0) -> float:
        """How long ranks may stay in a pause most ranks have left before the warning: ``pause_hang_factor`` x the
        job's usual pause or this one's (``this_pause``: how long most ranks took), the longer, at least
        ``pause_hang_floor_seconds``."""
        usual = max(self.progress.usual_pause(), this_pause)
        return max(self.pause_hang_floor_seconds, self.pause_hang_factor * usual)

    def p99_step_time(self) -> float:
        """The p99 of the job's recent train step times, stops inside a step left out."""
        return self.progress.step_time_stats(self.warning_floor_seconds, self.warning_factor)[0]

    def heartbeat_timeout(self) -> float:
        gap = self.progress.heartbeat_gap()
        if gap is None:
            return self.heartbeat_timeout_seconds
        return max(self.heartbeat_timeout_seconds, self.heartbeat_timeout_factor * gap)

    # -- input ----------------------------------------------------------------------------

    def knows(self, rank: int) -> bool:
        """Whether ``rank`` has a slot here (the engine caps the ranks per job on this)."""
        return rank in self.progress.slot_of_rank

    @property
    def rank_count(self) -> int:
        return len(self.progress.slot_of_rank)

    @property
    def pg_count(self) -> int:
        """Process groups tracked (the engine caps their total across jobs on this)."""
        return len(self.progress.pg_seq)

    def limit_pgs(self, limit: int) -> None:
        """Hold at most ``limit`` process groups (no fewer than held now); beyond, new ones are left out, counted."""
        self._pg_limit = self.progress.max_pgs = max(limit, len(self.progress.pg_seq))

    def continues(self, rank: int, step: int, ts: float, within: float) -> bool:
        """After the job's end: whether an event of ``rank`` at ``step`` is a late one of the run that ended,
        i.e. the rank is known, its step did not go back by more than a late event's (``new_process``'s rule: its
        heartbeat may have told a step its step events still carry in flight) and the event comes within
        ``within`` seconds of its previous one on its own clock, or ``pause_factor`` x the job's step time when
        that is longer (a host whose clock runs ahead has its events sorted late in a recording sorted by time; a
        restart relaunches the process and loads a checkpoint first). A late event is remembered as the rank's latest (the next one continues from it)."""
        p = self.progress
        slot = p.slot_of_rank.get(rank)
        if slot is None or (step < p.last_step[slot] and p.progressed_since(step, ts) > BURST_SECONDS):
            return False
        ts -= self.clocks.offset(p.nodes[slot])  # on the job's median clock, as ``last_seen``
        gap = ts - p.last_seen[slot]
        # A late rank's next event comes a step after its previous one: at 10-120 s steps that is longer than
        # ``within`` (a host 7 s ahead has its last 10.3 s step sorted after the end), so its own pace counts.
        if gap > within and gap > self.pause_factor * max(self.p99_step_time(), p.longest_recent_step()):
            return False
        p.last_step[slot] = max(step, int(p.last_step[slot]))
        p.last_seen[slot] = max(ts, float(p.last_seen[slot]))
        return True

    def update(self, event: Event) -> list[Alert]:
        """Learn from one event; return a resolved alert when it ends a hang."""
        if isinstance(event, StepEvent):  # one step path: a lone step event is a run of one
            return [alert for _, alert in self.update_steps(
                [event.rank], [event.step], [event.ts], [event.step_time], [event.phase], [event.node],
                [event.world_size])]
        p = self.progress
        if p.ended:
            # Stray heartbeats after the end are ignored; new steps or phases mean a restart.
            if isinstance(event, PhaseEvent) and event.rank is None and event.phase != "end":
                self._reset_state()
                p = self.progress
            else:
                return []
        ts = event.ts
        original = event
        if not isinstance(event, PhaseEvent):
            # Every host's time on the job's median clock (models/steps/clocks.py): silence and progress
            # compare timestamps written by different hosts.
            node = getattr(event, "node", None)
            node = node if node is not None else (
                p.nodes[p.slot_of_rank[event.rank]] if event.rank in p.slot_of_rank else None)
            if self.clocks.offsets:
                ts -= self.clocks.offset(node)
                event = replace(event, ts=ts)
            if ts < self._old_before:
                return []  # a late event of a process gone at the last restart
        if isinstance(event, HeartbeatEvent) and event.rank in p.slot_of_rank:
            restarted = self._incarnation(p.slot_of_rank[event.rank], event.step, ts, event.node,
                                          event.seq_completed, incarnation=event.incarnation)
            if restarted is not None:  # the job restarted: fresh state, then this event
                return restarted + self.update(original)
        if p.started_at is None:
            p.started_at = ts
            p.progress_ts = ts
        if ts > p.latest_ts:
            p.latest_ts = ts
        if isinstance(event, PhaseEvent):
            return self._on_phase(event)
        slot = p.slot_for(event.rank, ts)
        if ts > p.last_seen[slot]:
            p.last_seen[slot] = ts
        if event.node is not None:
            p.nodes[slot] = event.node
        if isinstance(event, HeartbeatEvent):
            return self._on_heartbeat(slot, event)
        if isinstance(event, StackEvent):
            self.stack_requests.on_answer(event)
            return []
        if isinstance(event, CollectiveEvent):
            p.observe_collective(slot, event.seq)
        return []

    def update_steps(self, ranks: list[int], steps: list[int], ts: list[float], step_times: list[float],
                     phases: list[str], nodes: list[str | None], world_sizes: list[int | None], *,
                     layout=None, ts_array: np.ndarray | None = None,
                     step_bounds: tuple[int, int] | None = None) -> list[tuple[int, Alert]]:
        """Learn from valid step events in order (columns); return ``(i, alert)`` for each hang the
        i-th event ended (only while one is open). ``layout``: who reported them (models/steps/layout.py), or None;
        ``ts_array``: ``ts`` as a float64 array, or None; ``step_bounds``: ``(min(steps), max(steps))``, or None."""
        if self.progress.ended:
            self._reset_state()  # steps after the end: a restart
        p = self.progress
        if len(p.step_times) < self.warning_min_steps:  # (the first few steps only: warm-up steps are steps)
            p.early_step_max = max(p.early_step_max, max((t for t in step_times if t == t), default=0.0))
        node_layout = layout  # whose nodes are these (None: not the layout's)
        if not all_named(nodes):  # an event without its node: the node its rank was last seen on
            slot_of, known = p.slot_of_rank.get, p.nodes
            nodes = [n if n is not None else (known[slot_of(r)] if r in p.slot_of_rank else None)
                     for r, n in zip(ranks, nodes)]
            node_layout = None
        # Every host's time on the job's median clock (models/steps/clocks.py): silence and progress
        # compare timestamps written by different hosts.
        low, high = (min(steps), max(steps)) if step_bounds is None else step_bounds
        self.clocks.observe_many(nodes, steps, ts, node_layout, ts_array, low == high)
        if self.clocks.offsets:
            offset = self.clocks.offset
            ts = [t - offset(n) for t, n in zip(ts, nodes)]
            ts_array = None  # (the array is of the times as written)
        if (min(ts) if ts_array is None else float(ts_array.min())) < self._old_before:
            # late events of processes gone at the last restart: left out
            keep = [i for i, t in enumerate(ts) if t >= self._old_before]
            if not keep:
                return []
            layout = ts_array = None
            ranks, steps, ts, step_times, phases, nodes, world_sizes = (
                [c[i] for i in keep] for c in (ranks, steps, ts, step_times, phases, nodes, world_sizes))
            low, high = min(steps), max(steps)
        if p.max_step >= 1 and low < p.max_step - 1:
            # Steps back: ranks in new processes (a restart from a checkpoint)?
            for i, (rank, step, t, node) in enumerate(zip(ranks, steps, ts, nodes)):
                slot = p.slot_of_rank.get(rank)
                if slot is None or not step < p.last_step[slot] - 1:
                    continue
                restarted = self._incarnation(slot, step, t, node, None, step_event=True)
                if restarted is not None:  # the job restarted: the events from here on a fresh state
                    out = [(i, alert) for alert in restarted]
                    # (the clocks already saw these events, and their times are corrected: no second pass)
                    self.progress.quiet_steps(ranks[i:], steps[i:], ts[i:], step_times[i:], phases[i:],
                                              nodes[i:], world_sizes[i:])
                    return out
        if self._episode is None:
            p.quiet_steps(ranks, steps, ts, step_times, phases, nodes, world_sizes, layout=layout, ts_array=ts_array,
                          newest=high)
            return []
        out = []
        for i, (rank, step, t, step_time, phase, node, world_size) in enumerate(
                zip(ranks, steps, ts, step_times, phases, nodes, world_sizes)):
            out.extend((i, alert) for alert in self._step_open(rank, step, t, step_time, phase, node, world_size))
            if self._episode is None:  # resolved: the rest in one go
                if i + 1 < len(ranks):
                    j = i + 1
                    p.quiet_steps(ranks[j:], steps[j:], ts[j:], step_times[j:], phases[j:], nodes[j:],
                                  world_sizes[j:])
                break
        return out

    def _incarnation(self, slot: int, step: int, ts: float, node: str | None, seq_completed: int | None, *,
                     incarnation: int | None = None, step_event: bool = False) -> list[Alert] | None:
        """A rank's event from a new process of it (``JobProgress.new_process``). When the job restarted,
        the open hang resolves (it belonged to the processes that are gone) and the state starts afresh;
        returns those alerts, else None."""
        p = self.progress
        seen = p.new_process(slot, step, ts, node, seq_completed, incarnation=incarnation, step_event=step_event)
        if seen is None:
            return None
        self.incarnations += 1
        if seen is Incarnation.RANK:
            return None
        out = []
        if self._episode is not None:
            out.append(self._resolve(at=ts, summary=f"resolved: job {self.job} restarted ({len(p.incarnated)} "
                                                    f"of {p.n} ranks in new processes)",
                                     resolution=Resolution.JOB_RESTARTED))
        self._old_before = p.incarnated_at - OLD_PROCESS_SLACK_SECONDS
        self._reset_state()
        self.job_restarts += 1
        return out

    def _step_open(self, rank: int, step: int, ts: float, step_time: float, phase: str, node: str | None,
                   world_size: int | None) -> list[Alert]:
        """One step event while a hang is open (it may end it)."""
        p = self.progress
        if p.started_at is None:
            p.started_at = ts
            p.progress_ts = ts
        if ts > p.latest_ts:
            p.latest_ts = ts
        slot = p.slot_for(rank, ts)
        p.has_step_events = True
        if world_size is not None:
            p.world_size = world_size
        advanced = p.rank_row(slot, step, ts, node)
        first = not p.completed_any
        p.completed_any = True
        passed = p.counter_passed() if advanced else None
        if passed is not None:
            return self._job_advanced(passed, ts)  # no step time learnt during a hang
        if first:  # a completion at or below a heartbeat's baseline still ends the wait for the first step
            return self._job_advanced(p.max_step, ts, first=True)
        return self._maybe_resolve_partial(slot) if advanced else []

    def _pause_ended(self, ts: float) -> None:
        """Back from a pause no step was due in (a job-wide eval or checkpoint, or the last rank's own checkpoint):
        the wait for the next step starts now. Counted from the step before the pause, a 60 s eval of 2 s steps
        (or rank 0 saving alone for 5 minutes) made a warning the moment training resumed
        (tests/models/hang/test_gen3_hang_after_pause.py). Clamped like any progress (``clamp_future``)."""
        p = self.progress
        if self._episode is None and not p.in_checkpoint(self.heartbeat_timeout):
            p.progress_ts = max(p.progress_ts, ts)

    def _on_phase(self, event: PhaseEvent) -> list[Alert]:
        p = self.progress
        if event.rank is not None:
            slot = p.slot_for(event.rank, event.ts)
            was = p.rank_phase[slot]
            p.set_rank_phase(slot, event.phase, event.ts, event.step)
            left = p.job_phase.rank_reports(event.rank, event.phase, ts=event.ts)  # a lost job-wide ``train``
            if left or (was == "checkpoint" and event.phase != "checkpoint"):
                self._pause_ended(event.ts)
            return []
        if event.phase == "end":
            out = self.close(at=event.ts, reason="job ended")
            p.ended = True
            return out
        was, since = p.phase, p.job_phase.since
        p.job_phase.begin(event.phase, ts=event.ts)
        if was in PAUSE_PHASES and event.phase not in PAUSE_PHASES:
            if event.ts > since:
                p.marked_pauses.append(event.ts - since)  # the job's usual pause (the pause hang rule)
            self._pause_ended(event.ts)
        return []

    def _on_heartbeat(self, slot: int, event: HeartbeatEvent) -> list[Alert]:
        p = self.progress
        was = p.rank_phase[slot]
        p.observe_heartbeat(slot, event)
        left = p.job_phase.rank_reports(event.rank, event.phase, ts=event.ts)  # a lost job-wide ``train``
        if left or (was == "checkpoint" and event.phase != "checkpoint"):
            self._pause_ended(event.ts)
        if p.max_step < 0:
            # The first value is a baseline (a restarted job resumes at its checkpoint's step).
            p.advance_rank(slot, event.step, event.ts)
            p.set_counter(event.step)
            return []
        advanced = p.advance_rank(slot, event.step, event.ts)
        passed = p.counter_passed() if advanced else None
        if passed is not None:
            if not p.has_step_events and p.completed_any and self._episode is None:
                # Heartbeat-only jobs: the time per step between two advances of the counter.
                p.step_times.append((event.ts - p.progress_ts) / (passed - p.max_step))
            p.completed_any = True
            return self._job_advanced(passed, event.ts)
        return self._maybe_resolve_partial(slot) if advanced else []

    def _job_advanced(self, step: int, ts: float, *, first: bool = False) -> list[Alert]:
        p = self.progress
        if step > p.max_step:
            p.set_counter(step)
            p.advances.append((step, ts))
        p.progress_ts = max(p.progress_ts, ts)
        ep = self._episode
        if ep is None or ep.kind is not Stop.JOB or (step <= ep.job_step and not first):
            return self._maybe_resolve_partial(None)
        if ep.alert.severity == Severity.WARNING:  # a pause that ended by itself, e.g. an unmarked checkpoint
            p.pauses.append(ts - ep.evidence.stalled_since)
        return [self._resolve(at=ts, summary=f"resolved: job {self.job} completed step {step} again")]

    def _maybe_resolve_partial(self, slot: int | None) -> list[Alert]:
        ep = self._episode
        if ep is None or ep.kind is not Stop.PARTIAL:
            return []
        p = self.progress
        if slot is not None and int(p.rank_at[slot]) not in ep.stuck_steps:
            return []
        if any(p.last_step[p.slot_of_rank[r]] <= s for r, s in ep.stuck_steps.items()):
            return []
        ranks = ",".join(str(r) for r in ep.stuck_steps)
        return [self._resolve(at=p.latest_ts, summary=f"resolved: stuck rank(s) {ranks} of job {self.job} "
                                                      f"complete steps again")]

    # -- stacks on demand -----------------------------------------------------------------

    def take_stack_requests(self) -> list[StackRequest]:
        """The stack requests made since the last call (the worker sends them on the control topic)."""
        return self.stack_requests.take()

    def mark_sent(self, request_id: str) -> None:
        """The worker sent this request: from now on, ranks that do not answer count as missing."""
        self.stack_requests.mark_sent(request_id)

    def _maybe_request_stacks(self, now: float, ident: str, d: HangDiagnosis) -> None:
        if self.stacks:
            self.stack_requests.maybe_request(now, self.job, ident, d, waiting_ranks=self.stack_waiting_ranks,
                                              min_interval=self.stack_min_interval_seconds)

    def _stack_key(self, now: float) -> tuple:
        return self.stack_requests.key(now, self.stack_timeout_seconds)

    def _with_stacks(self, alert: Alert, evidence: HangAlertEvidence) -> tuple[Alert, HangAlertEvidence]:
        """``alert`` (whose evidence is ``evidence``) with the stack evidence gathered so far (culprits'
        stacks first)."""
        stacks = self.stack_requests.evidence(alert.ranks, self.stack_timeout_seconds)
        if stacks is None:
            return alert, evidence
        evidence = replace(evidence, stacks=stacks)
        note = text.stack_note(tuple(c.position.rank for c in evidence.culprits), stacks,
                               self.stack_requests.awaiting)
        return dataclasses.replace(alert, evidence=evidence.to_dict(), summary=alert.summary + note), evidence

    # -- the rule -------------------------------------------------------------------------

    def quiet_until(self) -> float:
        """The time (the job's clock) before which ``check`` returns nothing and changes nothing, as long as
        no event, phase or setting reaches the rule: ``-inf`` while a hang episode is open (checked on every
        tick), ``inf`` before the first event or after the end. Taken right after a ``check``; the engine's
        timer skips the job until then (models/engine.py ``tick``)."""
        p = self.progress
        if p.ended or p.started_at is None:
            return math.inf
        if self._episode is not None:
            return self._episode_quiet_until()
        warn, critical, _ = self.thresholds()
        # No alert before the job (stalled >= first) or one rank (the partial test) has been quiet that long.
        base = p.progress_ts
        if p.n:
            oldest = float(p.rank_progress[:p.n].min())
            if oldest != oldest:  # NaN: no bound known
                return -math.inf
            base = min(base, oldest)
        due = base + (warn if warn is not None else critical)
        if warn is None and p.has_heartbeats:  # in a pause most ranks left: due at the pause rule's time
            found = p.pause_stragglers(p.latest_ts, self.heartbeat_timeout())
            if found is not None:
                due = min(due, found.since + self.pause_hang_after(found.since - found.began))
        if p.incarnated:  # the window's end clears the incarnation set
            due = min(due, p.incarnated_at + INCARNATION_WINDOW_SECONDS)
        return due

    def _episode_quiet_until(self) -> float:
        """While a hang episode is open: the earliest time after the latest ``check`` at which, with no new input,
        its verdict (kind, severity, diagnosis, stack requests and their key) could change. Every time comparison
        ``check`` and ``diagnose`` make is ``now - X >= c`` for a time X the rule keeps and a threshold c, so it
        flips at some X + c; the earliest of those still ahead bounds the quiet time (issue 44: many open,
        unchanged hangs cost nothing per tick). ``-inf`` (every tick) where that is not worked out: ranks
        restarting, a pause whose stragglers the pause rule judges."""
        p = self.progress
        if p.incarnated or not p.n:
            return -math.inf
        warn, critical, _ = self.thresholds()
        hbt = self.heartbeat_timeout()
        if warn is None and p.has_heartbeats and (self.pause_hang_factor > 0 or self.pause_hang_floor_seconds > 0) \
                and p.pause_stragglers(max(p.latest_ts, self._checked_at), hbt) is not None:
            return -math.inf
        first = warn if warn is not None else critical
        n = p.n
        times = np.concatenate([p.rank_progress[:n], p.last_seen[:n],
                                np.fromiter((a[1] for a in p.advances), dtype=float, count=len(p.advances)),
                                np.array([p.progress_ts, p.latest_ts])])
        limits = np.array([0.0, first, critical, hbt])
        at = (times[:, None] + limits[None, :]).ravel()
        st = self.stack_requests.round
        if self.stacks and st is not None:
            extra = [st.request.ts + self.stack_timeout_seconds]
            if self.stack_requests.last_request_at is not None:
                extra.append(self.stack_requests.last_request_at + self.stack_min_interval_seconds)
            at = np.concatenate([at, np.array(extra)])
        ahead = at[at > self._checked_at]  # (NaN compares False: no bound from an unknown time)
        if np.isnan(at).any():
            return -math.inf
        return float(ahead.min()) if ahead.size else math.inf

    def check(self, now: float) -> list[Alert]:
        """Evaluate the rule at ``now``; return a new or updated alert when something changed."""
        p = self.progress
        self._checked_at = now
        if p.ended or p.started_at is None:
            return []
        if p.latest_ts > now + FUTURE_SLACK_SECONDS:
            p.clamp_future(now)
        if p.incarnated:
            if now - p.incarnated_at > INCARNATION_WINDOW_SECONDS:
                p.incarnated.clear()
            elif self._episode is not None:
                return []  # ranks restarting: old and new processes' positions are not comparable yet
            elif self._old_processes_gone(now):
                # Every other rank silent and some back in new processes: the job is being relaunched (its
                # first new processes heartbeat before the rest are up), not hung; the window's end tells.
                return []
        # Cheap exit on every tick of a healthy job: no threshold can be shorter than this.
        shortest = min(self.warning_floor_seconds, self.timeout_seconds, self.pause_hang_floor_seconds,
                       self.warning_timeout_fraction * self.timeout_seconds or math.inf)
        if self._episode is None and now - p.progress_ts < shortest and (
                not p.n or now - float(p.rank_progress[:p.n].min()) < shortest):
            return []
        warn, critical, timeout_kind = self.thresholds()
        first = warn if warn is not None else critical
        pause = self._pause_hang(now, critical) if warn is None else None
        if pause is not None:
            warn = first = pause.after
        # The counter is the ranks' median (robust to one wild step number). Without heartbeats, ranks that stop
        # reporting while others step on cannot be told from ranks that finished (the last workers of an
        # asynchronous job outlive the others in a real trace: tests/cli/test_importer.py): such a job stalls only
        # when no rank steps. With heartbeats, live ranks that do not step are stuck (a partial hang).
        # Ranks whose events are in flight while another rank completed later steps (a producer's stall) do not
        # hold the counter here (``JobProgress.counter_without_passed``).
        since, job_step = p.progress_ts, p.max_step
        ep = self._episode
        if ep is not None:
            if ep.kind is Stop.JOB and ep.since > since:
                since, job_step = ep.since, ep.job_step
        elif now - since >= first:
            unheld = p.counter_without_passed()
            if unheld is not None and unheld[1] > since:
                job_step, since = unheld
        stalled = now - since
        if p.n and not p.has_heartbeats:
            stalled = min(stalled, now - float(p.rank_progress[:p.n].max()))
        kind = None
        stuck_mask = None
        if stalled >= first or (self._episode is not None and self._episode.kind is Stop.JOB):
            kind = Stop.JOB  # (an open job hang stays one while the job has not advanced: a teardown still shows)
        elif p.n and p.has_heartbeats:
            stuck_mask = p.partial_stuck(now, first, self.heartbeat_timeout())
            if stuck_mask is not None:
                kind = Stop.PARTIAL
                stalled = now - float(p.rank_progress[:p.n][stuck_mask].max())
        if kind is None:
            # An open episode stays open until the job advances or ends; stack answers still update it.
            ep = self._episode
            if ep is not None and ep.base is not None and self.stack_requests.round is not None:
                stack_key = self._stack_key(now)
                if ep.key[3:] != stack_key:
                    ep.key = ep.key[:3] + stack_key
                    ep.alert, ep.evidence = self._with_stacks(ep.base, ep.base_evidence)
                    return [ep.alert]
            return []
        severity = Severity.CRITICAL if stalled >= critical else Severity.WARNING
        ep = self._episode
        diagnosis = self.diagnose(now, stuck_after=first, resumed_after=since if (
            ep is not None and ep.kind is Stop.JOB and kind is Stop.JOB) else None,
            hang_since=since if kind is Stop.JOB else None)
        if pause is not None and kind is Stop.JOB:
            diagnosis = self._in_pause(diagnosis, pause)
        if ep is not None and ep.named is not None:
            diagnosis = across_teardown(ep.named, diagnosis)
            named = ep.named
            if named.pause_phase is not None and diagnosis.pause_phase is None and diagnosis.culprits == named.culprits:
                diagnosis = replace(diagnosis, pause_phase=named.pause_phase, pause_left=named.pause_left)
        if ep is not None and ep.alert.severity == Severity.CRITICAL and severity == Severity.WARNING:
            severity = Severity.CRITICAL  # never de-escalate within one episode
        if ep is not None:
            self._maybe_request_stacks(now, ep.alert.id, diagnosis)
        key = self._key(severity, diagnosis) + self._stack_key(now)
        if ep is not None and ep.key == key and not (kind is Stop.JOB and ep.kind is Stop.PARTIAL):
            return []
        since = since if kind is Stop.JOB else now - stalled
        stop_step = job_step if kind is Stop.JOB else int(p.last_step[:p.n][stuck_mask].min())
        if ep is None:
            ident = alert_id(self.job, AlertType.HANG, stop_step, round(since, 3))
            starts_at = now
        else:
            ident, starts_at = ep.alert.id, ep.alert.starts_at
        base, base_evidence = self._alert(ident, severity, starts_at, now, since, stalled, stop_step, warn, critical,
                                          timeout_kind, diagnosis)
        if ep is None:
            self._maybe_request_stacks(now, ident, diagnosis)
            key = self._key(severity, diagnosis) + self._stack_key(now)
        alert, evidence = self._with_stacks(base, base_evidence)
        if ep is None or (kind is Stop.JOB and ep.kind is Stop.PARTIAL):
            stuck_steps = {}
            if kind is Stop.PARTIAL:
                slots = np.flatnonzero(stuck_mask)
                stuck_steps = {int(p.rank_at[s]): int(p.last_step[s]) for s in slots}
            self._episode = _Episode(alert=alert, evidence=evidence, kind=kind, job_step=max(p.max_step, stop_step),
                                     stuck_steps=stuck_steps, key=key, base=base, base_evidence=base_evidence,
                                     since=since if kind is Stop.JOB and since > p.progress_ts else -math.inf)
        else:
            ep.alert, ep.evidence, ep.key, ep.base, ep.base_evidence = alert, evidence, key, base, base_evidence
        if diagnosis.case == HangCase.CULPRIT_BEFORE_COLLECTIVE and not diagnosis.torn_down:
            self._episode.named = diagnosis
        return [alert]

    def _old_processes_gone(self, now: float) -> bool:
        """Whether every rank not seen in a new process has been silent past the heartbeat timeout."""
        p = self.progress
        old = np.ones(p.n, dtype=bool)
        old[list(p.incarnated)] = False
        return bool(old.any()) and bool((p.last_seen[:p.n][old] < now - self.heartbeat_timeout()).all())

    @staticmethod
    def _key(severity: Severity, d: HangDiagnosis) -> tuple:
        """What makes a new version of the alert: not every rank that dies during a teardown."""
        return (severity, d.case, d.culprits, bool(d.torn_down), d.culprits_alive)

    def diagnose(self, now: float, *, stuck_after: float, resumed_after: float | None = None,
                 hang_since: float | None = None) -> HangDiagnosis:
        """Classify every rank from its latest heartbeat and collective sequence numbers
        (models/hang/diagnosis.py ``diagnose``)."""
        return diagnose(self.progress, now, heartbeat_timeout=self.heartbeat_timeout(), stuck_after=stuck_after,
                        resumed_after=resumed_after, max_listed_ranks=self.max_listed_ranks, hang_since=hang_since)

    def _pause_hang(self, now: float, critical: float) -> _PauseHang | None:
        """In a pause without a warning of its own: the ranks still in it once most ranks left it and they have not
        for ``pause_hang_after``, else None."""
        if self.pause_hang_factor <= 0 and self.pause_hang_floor_seconds <= 0:
            return None
        p = self.progress
        found = p.pause_stragglers(now, self.heartbeat_timeout())
        if found is None:
            return None
        took = found.since - found.began
        wait = self.pause_hang_after(took)
        after = found.since + wait - p.progress_ts
        if after >= critical or now - p.progress_ts < after:
            return None
        return _PauseHang(after=after, found=found, wait=wait, took=took)

    def _in_pause(self, d: HangDiagnosis, pause: _PauseHang) -> HangDiagnosis:
        """``d`` for a hang in a pause: the ranks still in it are the culprits (lowest collective first, as ``d``
        orders them), the rest were waiting for them."""
        found = pause.found
        p = self.progress
        inside = {int(r) for r in p.rank_at[:p.n][found.inside[:p.n]]}
        order = [r for r in d.culprits + d.behind + d.stuck + d.waiting if r in inside]
        culprits = tuple(dict.fromkeys(order + sorted(inside - set(order))))
        reason = (f"{len(culprits)} rank(s) still in the {found.phase} {pause.wait:.0f}s or more after {found.left} "
                  f"rank(s) left it (most took {pause.took:.0f}s; the job's usual pause: {p.usual_pause():.0f}s)")
        if d.case == HangCase.CULPRIT_BEFORE_COLLECTIVE and set(d.culprits) == inside:
            reason = f"{reason}; {d.reason}"
        return replace(d, case=HangCase.CULPRIT_BEFORE_COLLECTIVE, culprits=culprits, reason=reason,
                       behind=tuple(r for r in d.behind if r in inside) or culprits, pause_phase=found.phase,
                       pause_left=found.left)

    # -- alerts ---------------------------------------------------------------------------

    def _alert(self, ident: str, severity: Severity, starts_at: float, now: float, since: float, stalled: float,
               stop_step: int, warn: float | None, critical: float, timeout_kind: str,
               d: HangDiagnosis) -> tuple[Alert, HangAlertEvidence]:
        """The alert for diagnosis ``d`` (without stacks) and its evidence, typed."""
        p = self.progress
        cap = self.max_listed_ranks
        silent_set = set(d.silent)
        listed = list(dict.fromkeys(d.culprits + d.waiting + d.stuck))[:cap]
        nodes = [p.position(r).node for r in listed]
        nodes = tuple(dict.fromkeys(n for n in nodes if n))
        group = None
        pg_seqs: dict[int, tuple[int, int]] = {}
        if d.process_group is not None:
            pg_seqs = p.pg_seq.get(d.process_group, {})
            group = ProcessGroupEvidence(
                name=d.process_group, ranks=d.process_group_ranks, waiting=RankList.of(d.group_waiting, cap),
                desc=p.pg_desc.get(d.process_group), others=tuple(d.other_groups[:cap]),
                blocked=tuple(BlockedGroup(group=name, desc=p.pg_desc.get(name), collective_seq=seq,
                                           ranks=tuple(p.pg_ranks[name][:cap]) if p.pg_ranks.get(name) else None,
                                           culprits=tuple(culprits[:cap]), waiting=RankList.of(waiting, cap))
                              for name, seq, culprits, waiting in d.blocked_groups))

        def culprit(r: int) -> Culprit:
            state = CulpritState.SILENT if r in silent_set else (
                CulpritState.BEHIND if r in d.behind else CulpritState.STUCK)
            return Culprit(position=p.position(r), state=state, pg_seq=pg_seqs.get(p.slot_of_rank.get(r)))

        lost = p.lost_nodes(d.silent, cap) if d.silent and not d.torn_down else []
        evidence = HangAlertEvidence(
            case=d.case,
            reason=d.reason,
            stalled_since=round(since, 6),
            stalled_seconds=round(stalled, 3),
            checked_at=round(now, 6),
            step=stop_step if stop_step >= 0 else None,
            job_step=p.max_step if p.max_step >= 0 else None,
            collective_seq=d.collective_seq,
            phase="checkpoint" if p.in_checkpoint(self.heartbeat_timeout) else p.phase,
            timeout=timeout_kind,
            warning_after_seconds=None if warn is None else round(warn, 3),
            critical_after_seconds=round(critical, 3),
            p99_step_time=round(self.p99_step_time(), 4) if p.step_times else None,
            step_samples=len(p.step_times),
            heartbeat_timeout_seconds=round(d.heartbeat_timeout, 3),
            job_silent=d.job_silent,
            ranks_known=p.n,
            world_size=p.world_size,
            culprits=tuple(culprit(r) for r in d.culprits[:cap]),
            silent=tuple(p.position(r) for r in d.silent[:cap]),
            behind=RankList.of(d.behind, cap),
            waiting=RankList.of(d.waiting, cap),
            stepping=RankList.of(d.stepping, cap),
            stuck=RankList.of(d.stuck, cap),
            lost_nodes=tuple(lost),
            torn_down=TornDown(RankList.of(d.torn_down, cap), d.culprits_alive) if d.torn_down else None,
            process_group=group,
        )
        alert = Alert(id=ident, status=AlertStatus.FIRING, type=AlertType.HANG, severity=severity, job=self.job,
                      ranks=tuple(listed), nodes=nodes, starts_at=starts_at,
                      summary=text.summary(p, self.job, severity, stalled, stop_step, d), evidence=evidence.to_dict())
        return alert, evidence

    def _resolve(self, *, at: float, summary: str, resolution: Resolution = Resolution.RECOVERED) -> Alert:
        ep = self._episode
        self._episode = None
        self.stack_requests.end_episode(ep.alert.id)
        p = self.progress
        evidence = replace(ep.evidence, end=HangEnd(resolved_step=p.max_step if p.max_step >= 0 else None,
                                                    hung_seconds=round(at - ep.evidence.stalled_since, 3),
                                                    resolution=resolution))
        return ep.alert.resolved(at=at, summary=f"{summary} ({ep.alert.summary})", evidence=evidence.to_dict())

    def close(self, *, at: float, reason: str) -> list[Alert]:
        """Resolve the open alert, if any (the job ended)."""
        if self._episode is None:
            return []
        return [self._resolve(at=at, summary=f"resolved ({reason})", resolution=Resolution.JOB_ENDED)]
