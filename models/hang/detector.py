"""Hang detection that names the culprit, from steps, heartbeats and collective sequence numbers.

The rule (the user's definition): a job whose step counter (the highest completed step of
any rank) has not advanced for ``timeout_seconds`` is hung (``critical``). The timeout is
``checkpoint_timeout_seconds`` while the job is in the ``checkpoint`` phase and
``first_step_timeout_seconds`` before its first step completed (model loading). Before
that, in the ``train`` phase, an early ``warning`` fires once no step completed for
``warning_factor`` x the p99 of the job's recent train step times (never sooner than
``warning_floor_seconds``). A job that sent ``phase: end`` is finished and never hung.

The same alert (one id) goes from warning to critical to resolved; a new version with the
same id is published whenever the severity or the diagnosis changes. It resolves when the
job completes a step again, or ends.

The diagnosis comes from each rank's latest heartbeat (which keeps flowing from a
background thread while the training thread is stuck) and collective events:

* ``silent_ranks``: ranks that sent nothing for the heartbeat timeout while the rest of the
  job still does (process dead, frozen, node unreachable), named with their last heartbeat;
* ``culprit_before_collective``: every rank is alive, and the ranks whose last issued
  collective (``seq_started``) is behind the others never reached the collective the rest
  are waiting in (those are "waiting": they started it and never completed it). With
  per-process-group sequence numbers (heartbeats' ``pgs``) this is decided group by group:
  the group whose members disagree (some started collective N+1 and wait in it, others did
  not) holds the culprit, and a rank behind in one group but waiting in another is only
  waiting (docs/hang.md). The alert names the group (``evidence.process_group``);
* ``partial_hang``: some live ranks are stuck while others still complete steps;
* ``undetermined``: the data cannot tell (no heartbeats at all, or every live rank at the
  same collective); the alert says so instead of guessing.

Stacks on demand: when an episode opens (or its culprits change), the detector queues a
stack request for the culprits and a few waiting ranks (``take_stack_requests``; the worker
sends it on the control topic, rate-limited per job). The ranks' ``stack`` events come back
on the events topic; the alert is re-published (same id) with ``evidence.stacks`` once every
asked rank answered or ``stack_timeout_seconds`` passed, naming the silent ones in
``evidence.stack_missing``.

Everything runs on the clock it is given: event time in replay, wall time live. Memory is
bounded: per-rank latest values in arrays, bounded deques of step times and heartbeat gaps.
"""

from __future__ import annotations

import dataclasses
import math
from collections import Counter, deque
from dataclasses import dataclass, field, replace

import numpy as np

from ..alerts import Alert, alert_id
from ..steps.clocks import ClockOffsets
from ..wire.events import CollectiveEvent, Event, HeartbeatEvent, PhaseEvent, StackEvent, StepEvent
from ..evidence import HangCase
from ..resolution import Resolution
from .stacks import StackRequest, frame_lines
from ..tunable import runtime, runtime_fields


@dataclass(frozen=True, kw_only=True)
class HangSettings:
    """Settings of the hang rule (this module, docs/hang.md): ``STEPWATCH_HANG_<FIELD>``. Fields marked
    ``runtime`` may change while running (``stepwatch config set hang.FIELD=VALUE``); ``job_timeouts``
    and ``step_history`` are read at start-up."""

    #: Critical once no step completed for this many seconds (the user's N).
    timeout_seconds: float = runtime(600.0)
    #: Used instead while the job is in the ``checkpoint`` phase (never below the job's timeout).
    checkpoint_timeout_seconds: float = runtime(1800.0)
    #: Used instead before the job's first step completed, e.g. model loading (never below the job's timeout).
    first_step_timeout_seconds: float = runtime(1200.0)
    #: Per-job overrides of ``timeout_seconds``: ``"jobA=300,jobB=900"``.
    job_timeouts: str = ""
    #: Early warning once no step completed for ``warning_factor`` x the p99 of recent train step times ...
    warning_factor: float = runtime(10.0)
    #: ... but never sooner than this many seconds (one slow step is not a hang).
    warning_floor_seconds: float = runtime(30.0)
    #: Train steps needed in the history before the early warning applies.
    warning_min_steps: int = runtime(5)
    #: Recent train step times kept for the p99 (bounded memory).
    step_history: int = 256
    #: A rank is silent after no event from it for max(this, ``heartbeat_timeout_factor`` x the
    #: observed heartbeat interval) seconds, counted from the job's latest event.
    heartbeat_timeout_seconds: float = runtime(15.0)
    heartbeat_timeout_factor: float = runtime(3.0)
    #: Most ranks listed per category in an alert's evidence (counts are always complete).
    max_listed_ranks: int = runtime(32)
    #: On a hang, ask the culprits (and ``stack_waiting_ranks`` waiting ranks) for their Python
    #: stacks on the control topic (docs/hang.md); False: never ask.
    stacks: bool = runtime(True)
    stack_waiting_ranks: int = runtime(3)
    #: Ranks that have not answered this many seconds after the request are listed in ``stack_missing``.
    stack_timeout_seconds: float = runtime(10.0)
    #: At most one stack request per job per this many seconds.
    stack_min_interval_seconds: float = runtime(60.0)

    def __post_init__(self) -> None:
        self.job_timeout_map()  # fail early, naming the setting, on a malformed value

    def job_timeout_map(self) -> dict[str, float]:
        """``job_timeouts`` parsed: job id -> timeout seconds."""
        out: dict[str, float] = {}
        for item in self.job_timeouts.split(","):
            item = item.strip()
            if not item:
                continue
            job, sep, value = item.rpartition("=")
            try:
                if not sep or not job.strip():
                    raise ValueError
                seconds = float(value)
                if not seconds > 0:
                    raise ValueError
            except ValueError:
                raise ValueError(f"hang.job_timeouts: expected 'JOB=SECONDS[,JOB=SECONDS...]' with positive "
                                 f"seconds, got {item!r}") from None
            out[job.strip()] = seconds
        return out

    def timeout_for(self, job: str) -> float:
        return self.job_timeout_map().get(job, self.timeout_seconds)


_D = HangSettings()

DEFAULT_PG = "default"
#: Event times more than this far ahead of the clock the rule is checked on are clamped to it
#: (hosts' clock offsets are corrected before, models/steps/clocks.py; seconds).
FUTURE_SLACK_SECONDS = 60.0
#: Ranks in new processes (steps or heartbeat sequence numbers back, a new node) within this many
#: seconds of the first: a majority of them is a restart of the job; fewer, single ranks restarted.
INCARNATION_WINDOW_SECONDS = 120.0
#: Most process groups tracked per job (bounded memory; a real job has a few hundred at most).
MAX_PGS = 4096
#: Most ranks kept over all of a job's process groups' ``ranks`` lists; beyond, a group's ranks are not
#: kept (it is judged as one without them) and counted in ``capped``.
MAX_PG_RANK_ENTRIES = 1_000_000
#: Groups listed in ``evidence.blocked_groups``.
MAX_BLOCKED_GROUPS = 32
#: Culprits asked for their stacks per request (waiting ranks come on top, ``stack_waiting_ranks``).
MAX_STACK_CULPRITS = 4

#: The cases of a diagnosis (models/evidence.py ``HangCase``: the alert's ``evidence.case``).
CASES = tuple(HangCase)


@dataclass(frozen=True, slots=True)
class HangDiagnosis:
    """Who is where while a job is stuck (the localization part of a hang alert)."""

    case: HangCase
    reason: str
    culprits: tuple[int, ...]  # most likely cause first
    silent: tuple[int, ...]
    behind: tuple[int, ...]  # live ranks whose seq_started is behind the max
    waiting: tuple[int, ...]  # live ranks inside the max collective (started, not completed)
    stepping: tuple[int, ...]  # ranks still completing steps
    stuck: tuple[int, ...]  # live ranks not completing steps (partial hang)
    collective_seq: int | None  # the collective the waiting ranks are in (max seq_started of live ranks)
    heartbeat_timeout: float
    job_silent: bool
    process_group: str | None = None  # the group whose members disagree (holds the culprit)
    process_group_ranks: tuple[int, ...] | None = None  # its global ranks (None: every rank, the default group)
    group_waiting: tuple[int, ...] = ()  # ranks waiting in that group's collective
    other_groups: tuple[str, ...] = ()  # further disagreeing groups with culprits of their own
    torn_down: tuple[int, ...] = ()  # ranks that fell silent after the culprit was named (teardown)
    #: Every group a culprit blocks: ``(name, collective seq, its culprits, its waiting ranks)``, named group first.
    blocked_groups: tuple[tuple[str, int, tuple[int, ...], tuple[int, ...]], ...] = ()
    culprits_alive: bool = True  # the culprits still send heartbeats


@dataclass(slots=True)
class _Episode:
    """One hang, from first firing to resolution (mutable, internal)."""

    alert: Alert
    kind: str  # "job": the job's step counter stopped; "partial": some ranks stopped
    job_step: int  # the job's step counter when it fired
    stuck_steps: dict[int, int] = field(default_factory=dict)  # partial: rank -> its step when stuck
    key: tuple = ()
    base: Alert | None = None  # the alert before stack evidence was added
    named: HangDiagnosis | None = None  # the latest culprit diagnosis (kept across a teardown)


@dataclass(slots=True)
class _StackState:
    """Stack requests of one episode and the answers (mutable, internal)."""

    request: StackRequest
    requests: int = 1
    answers: dict[int, StackEvent] = field(default_factory=dict)
    final: bool = False
    sent: bool = False  # the worker sent it (replay sends nothing: no answer expected, none missing)


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
        self._last_request_at: float | None = None
        self._old_alert_ids: deque[str] = deque(maxlen=16)
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
        # Job-level state.
        self._started_at: float | None = None  # first event of this run of the job
        self._latest_ts = 0.0  # latest event time from any rank of the job
        # The job's step counter: the (lower) median of the ranks' completed steps, so that one
        # event with a wild step number cannot move it (the max would: a false hang that never ends).
        self._max_step = -1
        self._above = 0  # ranks whose step is above the counter
        self._known = 0  # ranks with a known step
        self._completed_any = False  # a step completed since start (a heartbeat's first value is a baseline)
        self._progress_ts = 0.0  # when the counter last advanced (or the start)
        self._phase = "train"  # job-wide phase from phase events without a rank
        self._ended = False
        self._has_heartbeats = False
        self._has_step_events = False
        self._world_size: int | None = None
        self._step_times: deque[float] = deque(maxlen=self.step_history)  # recent train step times
        self._hb_gaps: deque[float] = deque(maxlen=64)  # recent heartbeat intervals (any rank)
        self._advances: deque[tuple[int, float]] = deque(maxlen=self.step_history)  # (new job step, when)
        self._episode: _Episode | None = None
        # Per-rank latest values, in arrays indexed by a dense slot (grown on demand).
        self._slot: dict[int, int] = {}
        self._n = 0
        self._ranks = np.zeros(0, dtype=np.int64)
        self._step = np.zeros(0, dtype=np.int64)  # highest completed step (-1: unknown)
        self._rank_progress = np.zeros(0)  # when the rank's step last advanced (or was first seen)
        self._stepped = np.zeros(0, dtype=bool)  # the rank's step advanced at least once
        self._last_seen = np.zeros(0)  # latest event of any kind from the rank
        self._last_hb = np.zeros(0)  # latest heartbeat (NaN: none)
        self._seq_started = np.zeros(0, dtype=np.int64)  # -1: unknown
        self._seq_completed = np.zeros(0, dtype=np.int64)
        self._hb_done = np.zeros(0, dtype=np.int64)  # the latest heartbeat's seq_completed (-1: none)
        # Ranks seen in a new process (an incarnation) since ``_incarnated_at`` (see ``_incarnation``).
        self._incarnated: set[int] = set()
        self._incarnated_at = 0.0
        self._nodes: list[str | None] = []
        self._rank_phase: list[str | None] = []
        # Per-process-group sequence numbers from heartbeats' ``pgs``: group -> slot -> (started,
        # completed), and the group's global ranks (None: not told, e.g. the default group).
        self._pg_seq: dict[str, dict[int, tuple[int, int]]] = {}
        self._pg_ranks: dict[str, tuple[int, ...] | None] = {}
        self._pg_rank_entries = 0
        #: Input left out at a cap (process groups beyond MAX_PGS, ranks lists beyond MAX_PG_RANK_ENTRIES).
        self.capped: Counter[str] = Counter()
        self._pg_desc: dict[str, str] = {}  # group -> its description from the heartbeats (``pgs[name].desc``)
        self._stack: _StackState | None = None
        #: Stack requests made by ``check`` and not yet taken by the worker.
        self.pending_requests: list[StackRequest] = []

    def _slot_of(self, rank: int, ts: float) -> int:
        slot = self._slot.get(rank)
        if slot is not None:
            return slot
        slot = self._slot[rank] = self._n
        self._n += 1
        if slot >= len(self._ranks):
            grow = max(8, len(self._ranks))
            self._ranks = np.concatenate([self._ranks, np.zeros(grow, dtype=np.int64)])
            self._step = np.concatenate([self._step, np.full(grow, -1, dtype=np.int64)])
            self._rank_progress = np.concatenate([self._rank_progress, np.zeros(grow)])
            self._stepped = np.concatenate([self._stepped, np.zeros(grow, dtype=bool)])
            self._last_seen = np.concatenate([self._last_seen, np.zeros(grow)])
            self._last_hb = np.concatenate([self._last_hb, np.full(grow, np.nan)])
            self._seq_started = np.concatenate([self._seq_started, np.full(grow, -1, dtype=np.int64)])
            self._seq_completed = np.concatenate([self._seq_completed, np.full(grow, -1, dtype=np.int64)])
            self._hb_done = np.concatenate([self._hb_done, np.full(grow, -1, dtype=np.int64)])
        self._ranks[slot] = rank
        self._rank_progress[slot] = ts
        self._last_seen[slot] = ts
        self._nodes.append(None)
        self._rank_phase.append(None)
        return slot

    # -- views ----------------------------------------------------------------------------

    @property
    def firing(self) -> dict[str, Alert]:
        """The open hang alert by id (at most one)."""
        return {self._episode.alert.id: self._episode.alert} if self._episode else {}

    @property
    def ended(self) -> bool:
        return self._ended

    @property
    def step(self) -> int:
        """The job's step counter (-1 before any step is known)."""
        return self._max_step

    def thresholds(self) -> tuple[float | None, float, str]:
        """``(warning after, critical after, which timeout)`` for the job's current state, seconds."""
        if not self._completed_any:
            return None, max(self.first_step_timeout_seconds, self.timeout_seconds), "first_step"
        if self._in_checkpoint():
            return None, max(self.checkpoint_timeout_seconds, self.timeout_seconds), "checkpoint"
        critical = self.timeout_seconds
        if self._phase not in ("train", "warmup") or len(self._step_times) < self.warning_min_steps:
            return None, critical, self._phase
        warn = max(self.warning_factor * self.p99_step_time(), self.warning_floor_seconds)
        return (warn if warn < critical else None), critical, self._phase

    def p99_step_time(self) -> float:
        return float(np.percentile(np.fromiter(self._step_times, float), 99)) if self._step_times else 0.0

    def heartbeat_timeout(self) -> float:
        if not self._hb_gaps:
            return self.heartbeat_timeout_seconds
        gap = float(np.median(np.fromiter(self._hb_gaps, float)))
        return max(self.heartbeat_timeout_seconds, self.heartbeat_timeout_factor * gap)

    def _in_checkpoint(self) -> bool:
        return self._phase == "checkpoint" or "checkpoint" in self._rank_phase

    # -- input ----------------------------------------------------------------------------

    def knows(self, rank: int) -> bool:
        """Whether ``rank`` has a slot here (the engine caps the ranks per job on this)."""
        return rank in self._slot

    @property
    def rank_count(self) -> int:
        return len(self._slot)

    def update(self, event: Event) -> list[Alert]:
        """Learn from one event; return a resolved alert when it ends a hang."""
        if isinstance(event, StepEvent):  # one step path: a lone step event is a run of one
            return [alert for _, alert in self.update_steps(
                [event.rank], [event.step], [event.ts], [event.step_time], [event.phase], [event.node],
                [event.world_size])]
        if self._ended:
            # Stray heartbeats after the end are ignored; new steps or phases mean a restart.
            if isinstance(event, PhaseEvent) and event.rank is None and event.phase != "end":
                self._reset_state()
            else:
                return []
        ts = event.ts
        original = event
        if not isinstance(event, PhaseEvent):
            # Every host's time on the job's median clock (models/steps/clocks.py): silence and progress
            # compare timestamps written by different hosts.
            node = getattr(event, "node", None)
            node = node if node is not None else (
                self._nodes[self._slot[event.rank]] if event.rank in self._slot else None)
            if self.clocks.offsets:
                ts -= self.clocks.offset(node)
                event = replace(event, ts=ts)
        if isinstance(event, HeartbeatEvent) and event.rank in self._slot:
            restarted = self._incarnation(self._slot[event.rank], event.step, ts, event.node, event.seq_completed)
            if restarted is not None:  # the job restarted: fresh state, then this event
                return restarted + self.update(original)
        if self._started_at is None:
            self._started_at = ts
            self._progress_ts = ts
        if ts > self._latest_ts:
            self._latest_ts = ts
        if isinstance(event, PhaseEvent):
            return self._on_phase(event)
        slot = self._slot_of(event.rank, ts)
        if ts > self._last_seen[slot]:
            self._last_seen[slot] = ts
        if event.node is not None:
            self._nodes[slot] = event.node
        if isinstance(event, HeartbeatEvent):
            return self._on_heartbeat(slot, event)
        if isinstance(event, StackEvent):
            self._on_stack(event)
            return []
        if isinstance(event, CollectiveEvent):
            if event.seq > self._seq_started[slot]:
                self._seq_started[slot] = event.seq
            if event.seq > self._seq_completed[slot]:
                self._seq_completed[slot] = event.seq
        return []

    def update_steps(self, ranks: list[int], steps: list[int], ts: list[float], step_times: list[float],
                     phases: list[str], nodes: list[str | None], world_sizes: list[int | None]
                     ) -> list[tuple[int, Alert]]:
        """Learn from valid step events in order (columns); return ``(i, alert)`` for each hang the
        i-th event ended (only while one is open)."""
        if self._ended:
            self._reset_state()  # steps after the end: a restart
        if None in nodes:  # an event without its node: the node its rank was last seen on
            slot_of, known = self._slot.get, self._nodes
            nodes = [n if n is not None else (known[slot_of(r)] if r in self._slot else None)
                     for r, n in zip(ranks, nodes)]
        # Every host's time on the job's median clock (models/steps/clocks.py): silence and progress
        # compare timestamps written by different hosts.
        self.clocks.observe_many(nodes, steps, ts)
        if self.clocks.offsets:
            offset = self.clocks.offset
            ts = [t - offset(n) for t, n in zip(ts, nodes)]
        if self._max_step >= 1 and min(steps) < self._max_step - 1:
            # Steps back: ranks in new processes (a restart from a checkpoint)?
            for i, (rank, step, t, node) in enumerate(zip(ranks, steps, ts, nodes)):
                slot = self._slot.get(rank)
                if slot is None or not step < self._step[slot] - 1:
                    continue
                restarted = self._incarnation(slot, step, t, node, None)
                if restarted is not None:  # the job restarted: the events from here on a fresh state
                    out = [(i, alert) for alert in restarted]
                    # (the clocks already saw these events, and their times are corrected: no second pass)
                    rest = self._after_restart(ranks[i:], steps[i:], ts[i:], step_times[i:], phases[i:],
                                               nodes[i:], world_sizes[i:])
                    return out + [(i + j, alert) for j, alert in rest]
        if self._episode is None:
            self._quiet_steps(ranks, steps, ts, step_times, phases, nodes, world_sizes)
            return []
        out = []
        for i, (rank, step, t, step_time, phase, node, world_size) in enumerate(
                zip(ranks, steps, ts, step_times, phases, nodes, world_sizes)):
            out.extend((i, alert) for alert in self._step_open(rank, step, t, step_time, phase, node, world_size))
            if self._episode is None:  # resolved: the rest in one go
                if i + 1 < len(ranks):
                    j = i + 1
                    self._quiet_steps(ranks[j:], steps[j:], ts[j:], step_times[j:], phases[j:], nodes[j:],
                                      world_sizes[j:])
                break
        return out

    def _after_restart(self, ranks, steps, ts, step_times, phases, nodes, world_sizes) -> list[tuple[int, Alert]]:
        """``update_steps`` on a fresh state for events whose times are already on the job's clock."""
        self._quiet_steps(ranks, steps, ts, step_times, phases, nodes, world_sizes)
        return []

    def _incarnation(self, slot: int, step: int, ts: float, node: str | None,
                     seq_completed: int | None) -> list[Alert] | None:
        """A rank's event from a new process of it: its step or heartbeat sequence number went back, or it
        is on another node, in an event stamped after its latest (a late event of the old process is
        not one). Its old positions are dropped, never compared with the new ones. When most ranks
        did so within ``INCARNATION_WINDOW_SECONDS``, the job restarted: the open hang resolves (it
        belonged to the processes that are gone) and the state starts afresh; returns those alerts,
        else None."""
        if not ts > self._last_seen[slot]:
            return None
        old_step, old_node = int(self._step[slot]), self._nodes[slot]
        back = old_step >= 0 and step < old_step - 1
        moved = node is not None and old_node is not None and node != old_node
        seq_back = seq_completed is not None and seq_completed < self._hb_done[slot]
        if not (back or moved or seq_back):
            return None
        if self._incarnated and ts - self._incarnated_at > INCARNATION_WINDOW_SECONDS:
            self._incarnated.clear()  # the earlier ones were single ranks restarting
        if not self._incarnated:
            self._incarnated_at = ts
        self._incarnated.add(slot)
        self.incarnations += 1
        if 2 * len(self._incarnated) <= self._n:
            self._reset_rank(slot)
            return None
        out = []
        if self._episode is not None:
            out.append(self._resolve(at=ts, summary=f"resolved: job {self.job} restarted ({len(self._incarnated)} "
                                                    f"of {self._n} ranks in new processes)",
                                     resolution=Resolution.JOB_RESTARTED))
        self._reset_state()
        self.job_restarts += 1
        return out

    def _reset_rank(self, slot: int) -> None:
        """Forget a rank's positions (a new process of it: its counters start again)."""
        old = int(self._step[slot])
        if old >= 0:
            self._known -= 1
            if old > self._max_step:
                self._above -= 1
        self._step[slot] = -1
        self._stepped[slot] = False
        self._seq_started[slot] = self._seq_completed[slot] = self._hb_done[slot] = -1
        for seqs in self._pg_seq.values():
            seqs.pop(slot, None)

    def _step_open(self, rank: int, step: int, ts: float, step_time: float, phase: str, node: str | None,
                   world_size: int | None) -> list[Alert]:
        """One step event while a hang is open (it may end it)."""
        if self._started_at is None:
            self._started_at = ts
            self._progress_ts = ts
        if ts > self._latest_ts:
            self._latest_ts = ts
        slot = self._slot_of(rank, ts)
        self._has_step_events = True
        if world_size is not None:
            self._world_size = world_size
        advanced = self._rank_row(slot, step, ts, node)
        first = not self._completed_any
        self._completed_any = True
        passed = self._counter_passed() if advanced else None
        if passed is not None:
            return self._job_advanced(passed, ts)  # no step time learnt during a hang
        if first:  # a completion at or below a heartbeat's baseline still ends the wait for the first step
            return self._job_advanced(self._max_step, ts, first=True)
        return self._maybe_resolve_partial(slot) if advanced else []

    def _quiet_steps(self, ranks: list[int], steps: list[int], ts: list[float], step_times: list[float],
                     phases: list[str], nodes: list[str | None], world_sizes: list[int | None]) -> None:
        """``update_steps`` while no hang is open: no alert, per-rank values become array writes."""
        if self._started_at is None:
            self._started_at = self._progress_ts = ts[0]
        latest = max(ts)
        if latest > self._latest_ts:
            self._latest_ts = latest
        slot_of = self._slot.get
        slots = [slot_of(r) for r in ranks]
        if None in slots:
            for i, slot in enumerate(slots):
                if slot is None:
                    slots[i] = self._slot_of(ranks[i], ts[i])
        self._has_step_events = True
        for w in reversed(world_sizes):
            if w is not None:
                self._world_size = w
                break
        first = not self._completed_any
        self._completed_any = True
        top = self._max_step
        if first and ts[0] > self._progress_ts:
            self._progress_ts = ts[0]
        if max(steps) <= top or len(slots) == 1 or len(set(slots)) != len(slots):
            if max(steps) > top and len(slots) > 1:  # a rank twice (merged envelopes): event by event
                for i, (slot, step, t, node) in enumerate(zip(slots, steps, ts, nodes)):
                    self._rank_row(slot, step, t, node)
                    passed = self._counter_passed()
                    if passed is not None:
                        self._counted_advance(i, passed, first, step_times, phases, ts)
                return
            if len(slots) == 1:  # a lone event: plain writes (numpy's per-call cost dwarfs one element)
                self._rank_row(slots[0], steps[0], ts[0], nodes[0])
            else:
                self._rank_columns(slots, steps, ts, nodes)
            passed = self._counter_passed() if max(steps) > top else None
            if passed is not None:
                self._counted_advance(0, passed, first, step_times, phases, ts)
            return
        # Each rank once: find, by cumulative counts, the events after which the ranks' median passed
        # the counter (what event-by-event processing finds), then write the columns.
        idx = np.array(slots, dtype=np.int64)
        steps_a = np.array(steps, dtype=np.int64)
        cur = self._step[idx]
        fresh = cur < 0
        if not fresh.any():  # no new rank: the counts only grow, so the end of the run decides
            k = self._known
            if self._above + int(((steps_a > top) & (cur <= top)).sum()) < k - (k - 1) // 2:
                self._rank_columns(slots, steps, ts, nodes)
                return
        known = self._known + np.cumsum(fresh)
        above, lo, state, passes = self._above, 0, None, []
        while lo < len(slots):
            crossed = above + np.cumsum((steps_a[lo:] > top) & (cur[lo:] <= top))
            k = known[lo:]
            hit = np.flatnonzero((crossed > 0) & (crossed >= k - (k - 1) // 2))
            if not len(hit):
                break
            i = lo + int(hit[0])
            if state is None:
                state = self._step[:self._n].copy()
            state[idx[lo:i + 1]] = np.maximum(state[idx[lo:i + 1]], steps_a[lo:i + 1])
            values = state[state >= 0]
            mid = (len(values) - 1) // 2
            top = int(np.partition(values, mid)[mid])
            passes.append((i, top))
            above, lo = int((state > top).sum()), i + 1
        self._rank_columns(slots, steps, ts, nodes)
        for i, passed in passes:
            self._counted_advance(i, passed, first, step_times, phases, ts)

    def _counted_advance(self, i: int, passed: int, first: bool, step_times: list[float], phases: list[str],
                         ts: list[float]) -> None:
        """The job's counter passed to ``passed`` at the i-th event of a run (no hang open)."""
        if not (first and i == 0) and self._max_step >= 0 and phases[i] == "train" and self._phase == "train":
            self._step_times.append(step_times[i])
        self._set_counter(passed)
        self._advances.append((passed, ts[i]))
        if ts[i] > self._progress_ts:
            self._progress_ts = ts[i]

    def _on_phase(self, event: PhaseEvent) -> list[Alert]:
        if event.rank is not None:
            self._rank_phase[self._slot_of(event.rank, event.ts)] = event.phase
            return []
        if event.phase == "end":
            out = self.close(at=event.ts, reason="job ended")
            self._ended = True
            return out
        self._phase = event.phase
        return []

    def _on_heartbeat(self, slot: int, event: HeartbeatEvent) -> list[Alert]:
        self._has_heartbeats = True
        last = self._last_hb[slot]
        if not np.isnan(last) and event.ts > last:
            self._hb_gaps.append(event.ts - last)
        if np.isnan(last) or event.ts > last:
            self._last_hb[slot] = event.ts
        if event.seq_started is not None and event.seq_started > self._seq_started[slot]:
            self._seq_started[slot] = event.seq_started
        if event.seq_completed is not None and event.seq_completed > self._seq_completed[slot]:
            self._seq_completed[slot] = event.seq_completed
        if event.seq_completed is not None and event.seq_completed > self._hb_done[slot]:
            self._hb_done[slot] = event.seq_completed
        if event.pgs:
            self._on_pgs(slot, event.pgs)
            if event.pg_desc:
                for name, desc in event.pg_desc:
                    if name in self._pg_seq:  # bounded like the groups themselves
                        self._pg_desc[name] = desc
        self._rank_phase[slot] = event.phase
        if self._max_step < 0:
            # The first value is a baseline (a restarted job resumes at its checkpoint's step).
            self._rank_step(slot, event.step, event.ts)
            self._set_counter(event.step)
            return []
        advanced = self._rank_step(slot, event.step, event.ts)
        passed = self._counter_passed() if advanced else None
        if passed is not None:
            if not self._has_step_events and self._completed_any and self._episode is None:
                # Heartbeat-only jobs: the time per step between two advances of the counter.
                self._step_times.append((event.ts - self._progress_ts) / (passed - self._max_step))
            self._completed_any = True
            return self._job_advanced(passed, event.ts)
        return self._maybe_resolve_partial(slot) if advanced else []

    def _rank_row(self, slot: int, step: int, ts: float, node: str | None) -> bool:
        """One step event's per-rank values; whether the rank's step advanced."""
        if ts > self._last_seen[slot]:
            self._last_seen[slot] = ts
        if node is not None:
            self._nodes[slot] = node
        return self._rank_step(slot, step, ts)

    def _rank_columns(self, slots: list[int], steps: list[int], ts: list[float], nodes: list[str | None]) -> None:
        """Per-rank latest values of several step events (their ranks' slots) as array writes."""
        idx = np.array(slots, dtype=np.int64)
        ts_a = np.array(ts, dtype=np.float64)
        unique = len(set(slots)) == len(slots)
        if unique:  # each rank once (the usual envelope): a plain fancy-index write does what .at does
            self._last_seen[idx] = np.maximum(self._last_seen[idx], ts_a)
        else:
            np.maximum.at(self._last_seen, idx, ts_a)
        node_list = self._nodes
        first_slot = slots[0]
        if None not in nodes and slots == list(range(first_slot, first_slot + len(slots))):
            node_list[first_slot:first_slot + len(slots)] = nodes  # consecutive slots: one slice write
        else:
            for slot, node in zip(slots, nodes):
                if node is not None:
                    node_list[slot] = node
        steps_a = np.array(steps, dtype=np.int64)
        if unique:
            self._rank_steps(idx, steps_a, ts_a)
        else:
            # Several steps of the same ranks (merged envelopes): one step at a time, each usually
            # once per rank; a run with a rank twice goes event by event.
            cuts = [0, *(np.flatnonzero(steps_a[1:] != steps_a[:-1]) + 1).tolist(), len(slots)]
            for lo, hi in zip(cuts, cuts[1:]):
                part = idx[lo:hi]
                if len(set(slots[lo:hi])) == hi - lo:
                    self._rank_steps(part, steps_a[lo:hi], ts_a[lo:hi])
                else:
                    for slot, step, t in zip(slots[lo:hi], steps[lo:hi], ts[lo:hi]):
                        self._rank_step(slot, step, t)

    def _rank_steps(self, idx: np.ndarray, steps: np.ndarray, ts: np.ndarray) -> None:
        """``_rank_step`` for distinct slots at once."""
        current = self._step[idx]
        advanced = steps > current
        if advanced.any():
            top = self._max_step
            self._known += int((advanced & (current < 0)).sum())
            self._above += int((advanced & (current <= top) & (steps > top)).sum())
            self._stepped[idx[advanced & (current >= 0)]] = True
            self._step[idx[advanced]] = steps[advanced]
            self._rank_progress[idx[advanced]] = ts[advanced]

    def _rank_step(self, slot: int, step: int, ts: float) -> bool:
        old = self._step[slot]
        if step > old:
            if old >= 0:
                self._stepped[slot] = True
            else:
                self._known += 1
            if old <= self._max_step < step:
                self._above += 1
            self._step[slot] = step
            self._rank_progress[slot] = ts
            return True
        return False

    def _counter_passed(self) -> int | None:
        """The ranks' median step when it passed the job's counter (after the latest rank writes), else None."""
        known = self._known
        if not self._above or self._above < known - (known - 1) // 2:
            return None  # fewer than half the ranks are above it: the median cannot be
        steps = self._step[:self._n]
        steps = steps[steps >= 0]
        k = (len(steps) - 1) // 2
        median = int(np.partition(steps, k)[k])
        return median if median > self._max_step else None

    def _set_counter(self, step: int) -> None:
        self._max_step = step
        self._above = int((self._step[:self._n] > step).sum())

    def _job_advanced(self, step: int, ts: float, *, first: bool = False) -> list[Alert]:
        if step > self._max_step:
            self._set_counter(step)
            self._advances.append((step, ts))
        self._progress_ts = max(self._progress_ts, ts)
        ep = self._episode
        if ep is None or ep.kind != "job" or (step <= ep.job_step and not first):
            return self._maybe_resolve_partial(None)
        return [self._resolve(at=ts, summary=f"resolved: job {self.job} completed step {step} again")]

    def _maybe_resolve_partial(self, slot: int | None) -> list[Alert]:
        ep = self._episode
        if ep is None or ep.kind != "partial":
            return []
        if slot is not None and int(self._ranks[slot]) not in ep.stuck_steps:
            return []
        if any(self._step[self._slot[r]] <= s for r, s in ep.stuck_steps.items()):
            return []
        ranks = ",".join(str(r) for r in ep.stuck_steps)
        return [self._resolve(at=self._latest_ts, summary=f"resolved: stuck rank(s) {ranks} of job {self.job} "
                                                         f"complete steps again")]

    def _on_pgs(self, slot: int, pgs) -> None:
        for name, started, completed, ranks in pgs:
            seqs = self._pg_seq.get(name)
            if seqs is None:
                if len(self._pg_seq) >= MAX_PGS:
                    self.capped["process_groups_per_job"] += 1
                    continue
                seqs = self._pg_seq[name] = {}
                self._pg_ranks[name] = None
            if ranks is not None and self._pg_ranks[name] is None:
                if self._pg_rank_entries + len(ranks) > MAX_PG_RANK_ENTRIES:
                    self.capped["pg_ranks_per_job"] += 1
                else:
                    self._pg_ranks[name] = ranks
                    self._pg_rank_entries += len(ranks)
            old = seqs.get(slot)
            if old is None:
                seqs[slot] = (started, completed)
            elif started > old[0] or completed > old[1]:
                seqs[slot] = (max(started, old[0]), max(completed, old[1]))
            if name == DEFAULT_PG:  # the default group's numbers are also the top-level ones
                if started > self._seq_started[slot]:
                    self._seq_started[slot] = started
                if completed > self._seq_completed[slot]:
                    self._seq_completed[slot] = completed

    def _on_stack(self, event: StackEvent) -> None:
        st = self._stack
        if st is None:
            return  # no hang open: nobody asked
        rid = event.request_id
        if rid is not None and any(rid.startswith(old + "/") for old in self._old_alert_ids):
            return  # an answer to a request of an earlier hang, arriving late
        first = st.answers.get(event.rank)
        if first is None:
            st.answers[event.rank] = event
        elif event.flight_recorder and not first.flight_recorder:
            # A rank answers twice: its Python stack at once, then its Flight Recorder dump (producers/stacks.py).
            # The stack stays the first answer's; the dump is added (and re-published: ``_stack_key``).
            st.answers[event.rank] = replace(first, flight_recorder=event.flight_recorder)

    def take_stack_requests(self) -> list[StackRequest]:
        """The stack requests made since the last call (the worker sends them on the control topic)."""
        out, self.pending_requests = self.pending_requests, []
        return out

    def mark_sent(self, request_id: str) -> None:
        """The worker sent this request: from now on, ranks that do not answer count as missing."""
        st = self._stack
        if st is not None and st.request.request_id == request_id:
            st.sent = True

    def _maybe_request_stacks(self, now: float, ident: str, d: HangDiagnosis) -> None:
        if not self.stacks:
            return
        st = self._stack
        asked = set(st.request.ranks) if st is not None else set()
        culprits = [r for r in d.culprits if r not in asked][:MAX_STACK_CULPRITS]
        if st is not None and not culprits:
            return  # everyone accused was asked already
        if self._last_request_at is not None and now - self._last_request_at < self.stack_min_interval_seconds:
            return
        ranks = list(culprits or d.culprits[:MAX_STACK_CULPRITS])
        for r in (d.group_waiting or d.waiting) + d.waiting + d.stuck:
            if len(ranks) >= len(culprits) + self.stack_waiting_ranks:
                break
            if r not in ranks and r not in asked:
                ranks.append(r)
        if not ranks:
            return
        n = st.requests + 1 if st is not None else 1
        request = StackRequest(job=self.job, ranks=tuple(ranks), request_id=f"{ident}/{n}", ts=now)
        if st is None:
            self._stack = _StackState(request=request)
        else:
            # A second request (new culprits): its ranks join the first's, answers so far are kept.
            st.request = StackRequest(job=self.job, ranks=st.request.ranks + request.ranks,
                                      request_id=request.request_id, ts=now)
            st.requests, st.final = n, False
        self._last_request_at = now
        self.pending_requests.append(request)

    def _stack_key(self, now: float) -> tuple:
        st = self._stack
        if st is None:
            return ()
        if not st.final and (st.sent or st.answers) and (all(r in st.answers for r in st.request.ranks)
                                                         or now - st.request.ts >= self.stack_timeout_seconds):
            st.final = True
        dumps = sum(1 for a in st.answers.values() if a.flight_recorder)
        return (st.request.request_id, len(st.answers), st.final, dumps)

    def _with_stacks(self, alert: Alert) -> Alert:
        """``alert`` with the stack evidence gathered so far (culprits' stacks first)."""
        st = self._stack
        if st is None:
            return alert
        evidence = dict(alert.evidence)
        order = list(dict.fromkeys(list(alert.ranks) + list(st.request.ranks)))
        answered = [r for r in order if r in st.answers] + [r for r in st.answers if r not in order]
        evidence["stack_request"] = {"request_id": st.request.request_id, "ranks": list(st.request.ranks),
                                     "requested_at": round(st.request.ts, 6)}
        evidence["stacks"] = {str(r): frame_lines(st.answers[r]) for r in answered}
        recorder = {str(r): st.answers[r].flight_recorder for r in answered if st.answers[r].flight_recorder}
        if recorder:
            evidence["flight_recorder"] = recorder
        missing = [r for r in st.request.ranks if r not in st.answers]
        if st.final:
            evidence["stack_missing"] = missing
        elif missing:
            # Not due yet (answers take seconds: a Flight Recorder dump may come first): pending, not missing.
            evidence["stack_pending"] = missing
            evidence["stack_due_at"] = round(st.request.ts + self.stack_timeout_seconds, 6)
        summary = alert.summary
        # Only a culprit's location goes in the summary: a waiting rank's says where the job waits, not why.
        culprits = [c["rank"] for c in alert.evidence.get("culprits") or ()]
        culprit = next((r for r in culprits if r in st.answers), None)
        lines = evidence["stacks"].get(str(culprit)) if culprit is not None else None
        if lines:
            summary += f"; rank {culprit} is in {lines[-1]}"
        if st.final and missing:
            summary += f"; no stack from rank(s) {', '.join(str(r) for r in missing[:8])}"
        elif missing and (st.sent or st.answers):
            summary += f"; stacks pending from rank(s) {', '.join(str(r) for r in missing[:8])}"
        return dataclasses.replace(alert, evidence=evidence, summary=summary)

    # -- the rule -------------------------------------------------------------------------

    def quiet_until(self) -> float:
        """The time (the job's clock) before which ``check`` returns nothing and changes nothing, as long as
        no event, phase or setting reaches the rule: ``-inf`` while a hang episode is open (checked on every
        tick), ``inf`` before the first event or after the end. Taken right after a ``check``; the engine's
        timer skips the job until then (models/engine.py ``tick``)."""
        if self._ended or self._started_at is None:
            return math.inf
        if self._episode is not None:
            return -math.inf
        warn, critical, _ = self.thresholds()
        # No alert before the job (stalled >= first) or one rank (the partial test) has been quiet that long.
        base = self._progress_ts
        if self._n:
            oldest = float(self._rank_progress[:self._n].min())
            if oldest != oldest:  # NaN: no bound known
                return -math.inf
            base = min(base, oldest)
        due = base + (warn if warn is not None else critical)
        if self._incarnated:  # the window's end clears the incarnation set
            due = min(due, self._incarnated_at + INCARNATION_WINDOW_SECONDS)
        return due

    def check(self, now: float) -> list[Alert]:
        """Evaluate the rule at ``now``; return a new or updated alert when something changed."""
        if self._ended or self._started_at is None:
            return []
        if self._latest_ts > now + FUTURE_SLACK_SECONDS:
            self._clamp_future(now)
        if self._incarnated:
            if now - self._incarnated_at > INCARNATION_WINDOW_SECONDS:
                self._incarnated.clear()
            elif self._episode is not None:
                return []  # ranks restarting: old and new processes' positions are not comparable yet
        # Cheap exit on every tick of a healthy job: no threshold can be shorter than this.
        shortest = min(self.warning_floor_seconds, self.timeout_seconds)
        if self._episode is None and now - self._progress_ts < shortest and (
                not self._n or now - float(self._rank_progress[:self._n].min()) < shortest):
            return []
        warn, critical, timeout_kind = self.thresholds()
        first = warn if warn is not None else critical
        # The counter is the ranks' median (robust to one wild step number). Without heartbeats, ranks that stop
        # reporting while others step on cannot be told from ranks that finished (the last workers of an
        # asynchronous job outlive the others in a real trace: tests/test_importer.py): such a job stalls only
        # when no rank steps. With heartbeats, live ranks that do not step are stuck (a partial hang).
        stalled = now - self._progress_ts
        if self._n and not self._has_heartbeats:
            stalled = min(stalled, now - float(self._rank_progress[:self._n].max()))
        kind = None
        stuck_mask = None
        if stalled >= first:
            kind = "job"
        elif self._n and self._has_heartbeats:
            stuck_mask = self._partial_stuck(now, first)
            if stuck_mask is not None:
                kind = "partial"
                stalled = now - float(self._rank_progress[:self._n][stuck_mask].max())
        if kind is None:
            # An open episode stays open until the job advances or ends; stack answers still update it.
            ep = self._episode
            if ep is not None and ep.base is not None and self._stack is not None:
                stack_key = self._stack_key(now)
                if ep.key[3:] != stack_key:
                    ep.key = ep.key[:3] + stack_key
                    ep.alert = self._with_stacks(ep.base)
                    return [ep.alert]
            return []
        severity = "critical" if stalled >= critical else "warning"
        ep = self._episode
        diagnosis = self.diagnose(now, stuck_after=first, resumed_after=self._progress_ts if (
            ep is not None and ep.kind == "job" and kind == "job") else None)
        if ep is not None and ep.named is not None:
            diagnosis = self._across_teardown(ep.named, diagnosis)
        if ep is not None and ep.alert.severity == "critical" and severity == "warning":
            severity = "critical"  # never de-escalate within one episode
        if ep is not None:
            self._maybe_request_stacks(now, ep.alert.id, diagnosis)
        key = self._key(severity, diagnosis) + self._stack_key(now)
        if ep is not None and ep.key == key and not (kind == "job" and ep.kind == "partial"):
            return []
        since = self._progress_ts if kind == "job" else now - stalled
        stop_step = self._max_step if kind == "job" else int(self._step[:self._n][stuck_mask].min())
        if ep is None:
            ident = alert_id(self.job, "hang", stop_step, round(since, 3))
            starts_at = now
        else:
            ident, starts_at = ep.alert.id, ep.alert.starts_at
        base = self._alert(ident, severity, starts_at, now, since, stalled, stop_step, warn, critical,
                           timeout_kind, diagnosis)
        if ep is None:
            self._maybe_request_stacks(now, ident, diagnosis)
            key = self._key(severity, diagnosis) + self._stack_key(now)
        alert = self._with_stacks(base)
        if ep is None or (kind == "job" and ep.kind == "partial"):
            stuck_steps = {}
            if kind == "partial":
                slots = np.flatnonzero(stuck_mask)
                stuck_steps = {int(self._ranks[s]): int(self._step[s]) for s in slots}
            self._episode = _Episode(alert=alert, kind=kind, job_step=self._max_step, stuck_steps=stuck_steps,
                                     key=key, base=base)
        else:
            ep.alert, ep.key, ep.base = alert, key, base
        if diagnosis.case == "culprit_before_collective" and not diagnosis.torn_down:
            self._episode.named = diagnosis
        return [alert]

    def _clamp_future(self, now: float) -> None:
        """Times stamped ahead of the clock (a host's clock hours off, a bad producer) become ``now``: a
        step stamped 23 h ahead would otherwise count as progress for 23 h and hide a real hang."""
        n = self._n
        for name in ("_rank_progress", "_last_seen", "_last_hb"):
            values = getattr(self, name)
            values[:n] = np.minimum(values[:n], now)  # NaN (no heartbeat yet) stays NaN
        self._latest_ts = min(self._latest_ts, now)
        self._progress_ts = min(self._progress_ts, now)
        self._advances = deque(((s, min(t, now)) for s, t in self._advances), maxlen=self._advances.maxlen)

    @staticmethod
    def _key(severity: str, d: HangDiagnosis) -> tuple:
        """What makes a new version of the alert: not every rank that dies during a teardown."""
        return (severity, d.case, d.culprits, bool(d.torn_down), d.culprits_alive)

    def _across_teardown(self, named: HangDiagnosis, d: HangDiagnosis) -> HangDiagnosis:
        """Once a culprit is named, ranks that fall silent afterwards were torn down (NCCL's watchdog
        kills the waiting ranks while the stuck one lives on until the launcher's SIGKILL): the
        named culprit stays, the alert says the job was torn down."""
        if d.case == "culprit_before_collective" or not (d.silent or d.job_silent):
            return d  # still alive and at their collectives: the fresh diagnosis is the better one
        before = set(named.silent)
        gone = tuple(r for r in d.silent if r not in before)
        if d.job_silent and not gone:  # every rank went quiet at once
            gone = tuple(r for r in named.waiting + named.culprits if r not in before)
        culprits = set(named.culprits)
        if not any(r not in culprits for r in gone):
            return d  # only the culprit went quiet (frozen, killed) while the rest wait: silent_ranks says it
        silent_now = set(d.silent)
        alive = not d.job_silent and not any(r in silent_now for r in named.culprits)
        reason = (f"{named.reason}; then the job was torn down: {len(gone)} rank(s) went silent after the "
                  f"culprit was named (a watchdog or the launcher ending the job), "
                  f"{'the culprit still sends heartbeats' if alive else 'the culprit is silent too'}")
        return replace(named, reason=reason, torn_down=gone, culprits_alive=alive, job_silent=d.job_silent,
                       heartbeat_timeout=d.heartbeat_timeout)

    def _partial_stuck(self, now: float, stuck_after: float) -> np.ndarray | None:
        """Live ranks whose own step stopped while other ranks still complete steps, or None."""
        n = self._n
        step = self._step[:n]
        known = step >= 0
        quiet = (now - self._rank_progress[:n]) >= stuck_after
        if not (known & quiet).any():
            return None
        stepping = known & self._stepped[:n] & ~quiet
        if not stepping.any():
            return None
        live = (min(self._latest_ts, now) - self._last_seen[:n]) < self.heartbeat_timeout()
        stuck = live & known & quiet & (step < self._max_step)
        if not stuck.any():
            return None
        # Only ranks the job left behind ``stuck_after`` ago or earlier: while a step's events
        # arrive, the ranks not yet reported are not stuck.
        steps = np.fromiter((a[0] for a in self._advances), dtype=np.int64, count=len(self._advances))
        times = np.fromiter((a[1] for a in self._advances), dtype=float, count=len(self._advances))
        idx = np.searchsorted(steps, step, side="right")  # first advance past each rank's step
        passed_at = np.where(idx > 0, times[np.minimum(idx, len(times) - 1)], -np.inf)
        stuck &= (now - passed_at) >= stuck_after
        return stuck if stuck.any() else None

    def diagnose(self, now: float, *, stuck_after: float, resumed_after: float | None = None) -> HangDiagnosis:
        """Classify every rank from its latest heartbeat and collective sequence numbers.

        ``resumed_after``: ranks whose step advanced after this time are the job coming back
        from the hang (the rest of the step's events not in yet), not ranks still stepping."""
        n = self._n
        hb_timeout = self.heartbeat_timeout()
        ranks = self._ranks[:n]
        step = self._step[:n]
        latest = min(self._latest_ts, now)  # an event stamped ahead of the clock is not "latest"
        # Silence is measured against the job's own latest event, so that ingestion lag or the
        # end of a recording does not make every rank look silent; a job that went quiet as a
        # whole is flagged instead.
        job_silent = bool(self._has_heartbeats and now - latest >= hb_timeout)
        if self._has_heartbeats:
            silent_mask = (latest - self._last_seen[:n]) >= hb_timeout
        else:
            silent_mask = np.zeros(n, dtype=bool)
        live = ~silent_mask
        seq = self._seq_started[:n]
        done = self._seq_completed[:n]
        with_seq = live & (seq >= 0)
        collective_seq = int(seq[with_seq].max()) if with_seq.any() else None
        if collective_seq is not None:
            behind_mask = with_seq & (seq < collective_seq)
            waiting_mask = with_seq & (seq == collective_seq) & (done < seq)
        else:
            behind_mask = waiting_mask = np.zeros(n, dtype=bool)
        known = step >= 0
        stepping_mask = known & live & self._stepped[:n] & ((now - self._rank_progress[:n]) < stuck_after)
        if resumed_after is not None:
            stepping_mask &= self._rank_progress[:n] <= resumed_after
        stuck_mask = known & live & ~stepping_mask
        if not self._has_heartbeats:
            stuck_mask = np.zeros(n, dtype=bool)  # without heartbeats, where a rank is is unknown
        # Lowest (seq, step) first: the rank furthest behind is the likeliest cause.
        order = np.lexsort((ranks, step, np.where(seq >= 0, seq, -1)))

        def pick(mask: np.ndarray) -> tuple[int, ...]:
            return tuple(int(ranks[i]) for i in order if mask[i])

        silent = pick(silent_mask) + self._unseen_ranks()
        behind, waiting, stepping, stuck = pick(behind_mask), pick(waiting_mask), pick(stepping_mask), pick(
            stuck_mask)
        groups = self._pg_verdict(live, order) if self._pg_seq else None
        pg_name = pg_ranks = None
        group_waiting: tuple[int, ...] = ()
        others: tuple[str, ...] = ()
        blocked: tuple = ()
        cycle = None
        if groups is not None:
            waiting = groups["waiting"]
            if groups["culprits"]:
                behind = groups["culprits"]
                pg_name, pg_ranks, collective_seq = groups["name"], groups["ranks"], groups["seq"]
                group_waiting, others, blocked = groups["group_waiting"], groups["others"], groups["blocked"]
            else:
                behind, cycle = (), groups["groups"]
        if not self._has_heartbeats:
            case, culprits = HangCase.UNDETERMINED, ()
            reason = "no heartbeats from this job: the ranks' positions are unknown, so no culprit is named"
        elif stepping and (stuck or silent):
            case = HangCase.PARTIAL_HANG
            stuck_set, behind_set = set(stuck), set(behind)
            culprits = silent + tuple(r for r in behind if r in stuck_set) + tuple(
                r for r in stuck if r not in behind_set)
            reason = (f"{len(stepping)} rank(s) still complete steps while {len(stuck) + len(silent)} "
                      f"do not")
        elif silent:
            case = HangCase.SILENT_RANKS
            culprits = silent + behind
            reason = (f"{len(silent)} rank(s) sent nothing for {hb_timeout:g}s while the others still send "
                      f"heartbeats (process dead, frozen, or node unreachable)")
        elif behind and pg_name is not None:
            case, culprits = HangCase.CULPRIT_BEFORE_COLLECTIVE, behind
            reason = (f"{len(behind)} live rank(s) never issued collective {collective_seq} of process group "
                      f"{pg_name}, which {len(group_waiting)} of its rank(s) started and wait in; "
                      f"{len(waiting) - len(group_waiting)} more rank(s) wait in other groups")
        elif behind:
            case, culprits = HangCase.CULPRIT_BEFORE_COLLECTIVE, behind
            reason = (f"{len(behind)} live rank(s) never issued collective {collective_seq}, which "
                      f"{len(waiting)} rank(s) started and wait in")
        else:
            case, culprits = HangCase.UNDETERMINED, ()
            if cycle:
                reason = (f"the ranks behind in process group(s) {', '.join(cycle[:4])} all wait in other "
                          f"groups' collectives (collectives issued in different orders?): no rank is simply "
                          f"behind")
            elif job_silent:
                reason = (f"every rank of the job went silent {now - latest:.0f}s ago (job killed, or "
                          f"its events no longer reach stepwatch)")
            elif collective_seq is None:
                reason = "heartbeats carry no collective sequence numbers: cannot tell which rank is behind"
            else:
                reason = f"every live rank is at collective {collective_seq}: cannot tell which rank is behind"
        return HangDiagnosis(case=case, reason=reason, culprits=culprits, silent=silent, behind=behind,
                             waiting=waiting, stepping=stepping, stuck=stuck, collective_seq=collective_seq,
                             heartbeat_timeout=hb_timeout, job_silent=job_silent, process_group=pg_name,
                             process_group_ranks=pg_ranks, group_waiting=group_waiting, other_groups=others,
                             blocked_groups=blocked if case == "culprit_before_collective" else ())

    def _pg_verdict(self, live: np.ndarray, order: np.ndarray) -> dict | None:
        """Group by group: which groups' members disagree, and who is behind without waiting anywhere.

        A group disagrees when some live members started its collective N (the highest) and wait in
        it while others never started it. Those others are culprits unless they wait in a collective
        of another group (then that group's disagreement explains them). The group named is the most
        specific one holding a culprit: fewest members behind, then most members waiting on them
        (a rank stuck before its TP all-reduce: the TP group where 3 wait, not the DP pair where 1
        does), then fewest members. None when no group disagrees."""
        rank_slot = self._slot
        # Every live rank inside a collective of some group, and where.
        in_collective: set[int] = set()
        for seqs in self._pg_seq.values():
            for slot, (started, completed) in seqs.items():
                if started > completed and live[slot]:
                    in_collective.add(slot)
        found = []
        for name, seqs in self._pg_seq.items():
            members = dict(seqs)
            ranks = self._pg_ranks.get(name)
            if ranks is not None:  # a member that never reported the group has issued none of its collectives
                for r in ranks:
                    slot = rank_slot.get(r)
                    if slot is not None and slot not in members:
                        members[slot] = (0, 0)
            live_members = {slot: v for slot, v in members.items() if live[slot]}
            if len(live_members) < 2:
                continue
            top = max(started for started, _ in live_members.values())
            behind = [slot for slot, (started, _) in live_members.items() if started < top]
            waiting = [slot for slot, (started, completed) in live_members.items() if started == top and completed < top]
            if not behind or not waiting:
                continue
            culprits = [slot for slot in behind if slot not in in_collective]
            found.append((not culprits, len(behind), -len(waiting), len(members), name, top, set(culprits),
                          set(waiting)))
        if not found:
            return None
        found.sort(key=lambda f: f[:5])
        ranks_of = self._ranks

        def pick(slots: set[int]) -> tuple[int, ...]:
            return tuple(int(ranks_of[i]) for i in order if i in slots)

        all_waiting = pick(in_collective)
        with_culprits = [f for f in found if f[6]]
        if not with_culprits:
            return {"culprits": (), "waiting": all_waiting, "groups": [f[4] for f in found]}
        name, top, culprits, waiting = with_culprits[0][4:]
        # Further groups only where they accuse someone else (the DP group behind a stuck TP rank
        # accuses that same rank: nothing new).
        others, named = [], set(culprits)
        for f in with_culprits[1:]:
            if f[6] - named:
                others.append(f)
                named |= f[6]
        more = named - culprits
        blocked = tuple((f[4], int(f[5]), pick(f[6]), pick(f[7])) for f in with_culprits[:MAX_BLOCKED_GROUPS])
        return {"culprits": pick(culprits) + pick(more), "waiting": all_waiting, "name": name,
                "ranks": self._pg_ranks.get(name), "seq": int(top), "group_waiting": pick(waiting),
                "others": tuple(f[4] for f in others), "groups": [f[4] for f in found], "blocked": blocked}

    def _unseen_ranks(self) -> tuple[int, ...]:
        """Ranks below the reported world size that never sent anything (listed up to the cap)."""
        if not self._has_heartbeats or self._world_size is None or self._n >= self._world_size:
            return ()
        out = []
        for r in range(self._world_size):
            if r not in self._slot:
                out.append(r)
                if len(out) >= self.max_listed_ranks:
                    break
        return tuple(out)

    # -- alerts ---------------------------------------------------------------------------

    def _rank_info(self, rank: int) -> dict:
        slot = self._slot.get(rank)
        if slot is None:
            return {"rank": rank, "node": None, "step": None, "seq_started": None, "seq_completed": None,
                    "last_heartbeat": None, "last_seen": None}
        hb = float(self._last_hb[slot])
        return {
            "rank": rank,
            "node": self._nodes[slot],
            "step": int(self._step[slot]) if self._step[slot] >= 0 else None,
            "seq_started": int(self._seq_started[slot]) if self._seq_started[slot] >= 0 else None,
            "seq_completed": int(self._seq_completed[slot]) if self._seq_completed[slot] >= 0 else None,
            "last_heartbeat": None if np.isnan(hb) else round(hb, 6),
            "last_seen": round(float(self._last_seen[slot]), 6),
        }

    def _listed(self, ranks: tuple[int, ...]) -> dict:
        cap = self.max_listed_ranks
        return {"count": len(ranks), "ranks": list(ranks[:cap])}

    def _alert(self, ident: str, severity: str, starts_at: float, now: float, since: float, stalled: float,
               stop_step: int, warn: float | None, critical: float, timeout_kind: str,
               d: HangDiagnosis) -> Alert:
        cap = self.max_listed_ranks
        culprits = d.culprits[:cap]
        silent_set = set(d.silent)
        listed = list(dict.fromkeys(d.culprits + d.waiting + d.stuck))[:cap]
        nodes = [self._rank_info(r)["node"] for r in listed]
        nodes = tuple(dict.fromkeys(n for n in nodes if n))
        evidence = {
            "case": d.case,
            "reason": d.reason,
            "stalled_since": round(since, 6),
            "stalled_seconds": round(stalled, 3),
            "checked_at": round(now, 6),
            "step": stop_step if stop_step >= 0 else None,
            "job_step": self._max_step if self._max_step >= 0 else None,
            "collective_seq": d.collective_seq,
            "phase": "checkpoint" if self._in_checkpoint() else self._phase,
            "timeout": timeout_kind,
            "warning_after_seconds": None if warn is None else round(warn, 3),
            "critical_after_seconds": round(critical, 3),
            "p99_step_time": round(self.p99_step_time(), 4) if self._step_times else None,
            "step_samples": len(self._step_times),
            "heartbeat_timeout_seconds": round(d.heartbeat_timeout, 3),
            "job_silent": d.job_silent,
            "ranks_known": self._n,
            "world_size": self._world_size,
            "culprits": [dict(self._rank_info(r), state="silent" if r in silent_set else
                              ("behind" if r in d.behind else "stuck")) for r in culprits],
            "silent": [self._rank_info(r) for r in d.silent[:cap]],
            "behind": self._listed(d.behind),
            "waiting": self._listed(d.waiting),
            "stepping": self._listed(d.stepping),
            "stuck": self._listed(d.stuck),
        }
        if d.silent and not d.torn_down:
            lost = self._lost_nodes(d.silent)
            if lost:
                evidence["lost_nodes"] = lost
        if d.torn_down:
            evidence["torn_down"] = dict(self._listed(d.torn_down), culprits_alive=d.culprits_alive)
        if d.process_group is not None:
            evidence["process_group"] = d.process_group
            evidence["process_group_ranks"] = list(d.process_group_ranks) if d.process_group_ranks else None
            evidence["process_group_waiting"] = self._listed(d.group_waiting)
            if d.process_group in self._pg_desc:
                evidence["process_group_desc"] = self._pg_desc[d.process_group]
            if d.other_groups:
                evidence["other_process_groups"] = list(d.other_groups[:cap])
            if d.blocked_groups:
                evidence["blocked_groups"] = [
                    {"group": name, "desc": self._pg_desc.get(name), "collective_seq": seq,
                     "ranks": list(self._pg_ranks[name][:cap]) if self._pg_ranks.get(name) else None,
                     "culprits": list(culprits[:cap]), "waiting": self._listed(waiting)}
                    for name, seq, culprits, waiting in d.blocked_groups]
            seqs = self._pg_seq.get(d.process_group, {})
            for info in evidence["culprits"]:
                slot = self._slot.get(info["rank"])
                if slot in seqs:
                    info["pg_seq_started"], info["pg_seq_completed"] = seqs[slot]
        return Alert(id=ident, status="firing", type="hang", severity=severity, job=self.job,
                     ranks=tuple(listed), nodes=nodes, starts_at=starts_at,
                     summary=self._summary(severity, stalled, stop_step, d), evidence=evidence)

    def _lost_nodes(self, silent: tuple[int, ...]) -> list[str]:
        """Nodes all of whose ranks are silent (node down or unreachable, as far as the job can tell)."""
        silent_set = set(silent)
        ranks_on: dict[str, list[bool]] = {}
        for slot in range(self._n):
            node = self._nodes[slot]
            if node is not None:
                ranks_on.setdefault(node, []).append(int(self._ranks[slot]) in silent_set)
        if len(ranks_on) < 2:
            return []  # one node: the job's own silence, not a lost node
        return sorted(n for n, flags in ranks_on.items() if all(flags))[:self.max_listed_ranks]

    def _pg_label(self, name: str) -> str:
        """A group as the alert names it: its description from the heartbeats, with its id."""
        desc = self._pg_desc.get(name)
        return f"{desc} ({name})" if desc and desc != name else name

    def _where(self, rank: int) -> str:
        node = self._rank_info(rank)["node"]
        return f"rank {rank}" + (f" on {node}" if node else "")

    def _summary(self, severity: str, stalled: float, stop_step: int, d: HangDiagnosis) -> str:
        step = f"step {stop_step}" if stop_step >= 0 else "the first step"
        seq = f", collective seq {d.collective_seq}" if d.collective_seq is not None else ""
        if d.case == "partial_hang":
            head = (f"hang ({severity}): {len(d.stuck) + len(d.silent)} rank(s) of job {self.job} stopped at "
                    f"{step}{seq} {stalled:.0f}s ago while {len(d.stepping)} still step")
        else:
            if not self._completed_any:
                head = (f"hang ({severity}): job {self.job} has not completed its first step {stalled:.0f}s "
                        f"after it started{seq.replace(', ', ' (', 1) + ')' if seq else ''}")
            else:
                head = f"hang ({severity}): job {self.job} has completed no step for {stalled:.0f}s (after {step}{seq})"
        named = ", ".join(self._where(r) for r in d.culprits[:5]) + (" ..." if len(d.culprits) > 5 else "")
        if d.case == "silent_ranks":
            first = d.culprits[0]
            hb = self._rank_info(first)["last_heartbeat"]
            when = f"last heartbeat at {hb:.3f}" if hb is not None else "never heard from"
            tail = f"silent: {named} ({when}); {len(d.waiting)} rank(s) wait in collective {d.collective_seq}"
        elif d.case == "culprit_before_collective" and d.process_group is not None:
            size = f"{len(d.process_group_ranks)} ranks" if d.process_group_ranks else "all ranks"
            tail = (f"culprit: {named} never reached collective {d.collective_seq} of process group "
                    f"{self._pg_label(d.process_group)} ({size}) that {len(d.group_waiting)} of its rank(s) wait "
                    f"in; {len(d.waiting) - len(d.group_waiting)} rank(s) wait in other groups")
            if len(d.blocked_groups) > 1:
                tail += "; it blocks " + ", ".join(f"{self._pg_label(name)} ({len(waiting)} waiting)"
                                                   for name, _, _, waiting in d.blocked_groups[:6])
        elif d.case == "culprit_before_collective":
            tail = (f"culprit: {named} never reached collective {d.collective_seq} that {len(d.waiting)} "
                    f"rank(s) wait in")
        elif d.case == "partial_hang":
            tail = f"stuck: {named}"
        else:
            tail = f"culprit undetermined: {d.reason}"
        if d.torn_down:
            tail += (f"; job torn down: {len(d.torn_down)} rank(s) went silent after the culprit was named, "
                     f"{'the culprit still sends heartbeats' if d.culprits_alive else 'the culprit is silent too'}")
        return f"{head}; {tail}"

    def _resolve(self, *, at: float, summary: str, resolution: Resolution = Resolution.RECOVERED) -> Alert:
        ep = self._episode
        self._episode = None
        self._stack = None
        self.pending_requests = []
        self._old_alert_ids.append(ep.alert.id)
        evidence = dict(ep.alert.evidence)
        evidence.update(resolved_step=self._max_step if self._max_step >= 0 else None,
                        hung_seconds=round(at - evidence["stalled_since"], 3), resolution=resolution.value)
        return ep.alert.resolved(at=at, summary=f"{summary} ({ep.alert.summary})", evidence=evidence)

    def close(self, *, at: float, reason: str) -> list[Alert]:
        """Resolve the open alert, if any (the job ended)."""
        if self._episode is None:
            return []
        return [self._resolve(at=at, summary=f"resolved ({reason})", resolution=Resolution.JOB_ENDED)]
