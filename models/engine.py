"""The job-rule core: routes job events to per-job rules, driven by an explicit clock.

``JobEngine`` judges jobs and nothing else: it returns the rules' alerts tagged with the event that caused them
(models/engine_output.py) and neither enriches them nor knows node telemetry or on-call. ``DetectionEngine``
(models/detection.py) composes it with node telemetry and the outlet chain, and ``Pipeline``
(models/pipeline.py) drives that: the worker feeds it what arrives and ticks it from a timer with the wall
clock; ``stepwatch replay`` feeds it a recording and ticks it with the recording's own clock.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections import Counter, OrderedDict, deque

import numpy as np

from .settings import DetectionSettings, RetentionSettings  # noqa: F401  (RetentionSettings: re-exported)
from .settings_store import SettingsStore, section_of
from .alerts import Alert
from .steps.arrival import CollectiveArrival
from .steps.assembly import GroupStep, StepAssembler
from .job_phase import JobPhase
from .steps.layout import RunLayout, layout_of
from .steps.robust import list_median
from .wire.events import Event, PhaseEvent, StepEvent
from .hang.detector import HangDetector, HangSettings
from .jobhealth.job_health import JobHealthSettings
from .engine_output import Caused, JobsObserver, RowFacts, StepsJudged, Unobserved
from .registry import FEED_ORDER, JOB_RULES
from .resolution import Resolution, with_resolution
from .rule import JobRule, RankSteps, Signal, open_alerts_of
from .jobhealth.sli import JobSLI
from .wire.step_columns import StepColumns
from .steps.straggler import StragglerDetector, StragglerSettings
from .tick_schedule import TickSchedule
from .event_router import route
from .jobs_store import JobsStore
from . import alert_clock as alert_clock_module
from .alert_clock import AlertClock




#: Rank events stamped up to this long after a job's ``end`` are late arrivals of the run that ended, and so
#: are those of a rank that continues its own count within this long of its previous event on its own clock
#: (a host whose clock is seconds ahead: ``HangDetector.continues``); a restarted job relaunches processes
#: and loads a checkpoint first, which takes far longer.
END_GRACE_SECONDS = 10.0


def _bounds(ts: list[float], ts_array: np.ndarray | None) -> tuple[float, float]:
    """The earliest and latest of ``ts``; by its array when there is one (two C passes, not two list scans)."""
    if ts_array is None:
        return min(ts), max(ts)
    return float(ts_array.min()), float(ts_array.max())


def _late_after_end(job: JobState, rank: int, step, ts: float) -> bool:
    """Whether a rank's event after its job's ``end`` belongs to the run that ended (``END_GRACE_SECONDS``). The
    rank's own count is asked first: a late event moves it on, so the next one continues from there."""
    continues = type(step) is int and job.hang.continues(rank, step, ts, END_GRACE_SECONDS)
    return continues or ts <= job.ended_at + END_GRACE_SECONDS


class JobState:
    """Everything the engine holds for one job: its rules (models/registry.py) and the job's own bookkeeping."""

    __slots__ = ("job", "assemblers", "phases", "ended", "last_ts", "latest_step", "ranks", "last_seen", "sli", "lags",
                 "ended_at", "late_after_end", "arrival", "sources", "rules", "by_signal", "named",
                 "touched", "slot", "dirty", "ticked", "layout", "ranks_of", "offset", "alert_clock")

    @property
    def phase(self) -> str:
        """The job-wide phase (``phases``)."""
        return self.phases.phase

    def __init__(self, job: str, env) -> None:
        self.job = job
        #: Ranks' own collective durations per step: the arrival signal when steps lack comm_time.
        self.arrival = CollectiveArrival()
        #: Heartbeat sources seen (``callback`` or ``nccl_ras``): a job with the callback is not counted twice.
        self.sources: set[str] = set()
        # The timer's clock when the job last sent anything (for eviction): event time in
        # replay, wall time live; None until the first tick after the job appeared.
        self.last_seen: float | None = None
        self.sli = JobSLI()
        # Arrival time minus event time of recent events: the job's clock offset against the
        # timer's clock (0 in replay), so time-driven rules judge the job on its own clock.
        self.lags: deque[float] = deque(maxlen=256)
        self.offset: float | None = None  # ``clock_offset`` of ``lags`` as they are (None: not taken since they changed)
        #: Each alert episode's shift onto the broker's clock, made where alerts leave (models/alert_clock.py).
        self.alert_clock = AlertClock()
        self.assemblers: dict[str, StepAssembler] = {}
        #: The job-wide phase (job-wide phase events; its end told by the ranks if the closing one is lost).
        self.phases = JobPhase()
        self.ended = False
        self.ended_at = 0.0  # time of the job's ``end`` phase event
        #: Rank events stamped before the job's ``end`` that arrived after it (another path overtaken).
        self.late_after_end = 0
        self.last_ts = 0.0
        self.latest_step = -1
        self.ranks: set[int] = set()
        self.ranks_of: RunLayout | None = None  # the latest run layout whose ranks are in ``ranks``
        # The timer's schedule (DetectionEngine.tick): LRU order stamp, the valid entry of the due heap,
        # whether an event reached the job since its last visit, and the ``now`` of that visit.
        self.touched = 0
        self.slot = 0
        self.dirty = False
        self.ticked: float | None = None
        #: The ranks, nodes and GPUs of the job's latest run of step events (models/steps/layout.py).
        self.layout: RunLayout | None = None
        # The job's rules, one per registry entry, made in feeding order (each after those it needs).
        #: The job's rules by registered name (read-only to others: ``rule``).
        self.named: dict[str, JobRule] = {}
        for cls in FEED_ORDER:
            self.named[cls.spec.name] = cls(self, env, self.named)
        #: In registry order: how open alerts are listed and closed.
        self.rules: tuple[JobRule, ...] = tuple(self.named[cls.spec.name] for cls in JOB_RULES)
        #: The rules fed each signal, in feeding order.
        self.by_signal: dict[Signal, tuple[JobRule, ...]] = {
            signal: tuple(self.named[c.spec.name] for c in FEED_ORDER if signal in c.spec.consumes)
            for signal in Signal}

    def rule(self, name: str) -> JobRule:
        """The job's rule registered as ``name`` (``KeyError`` if none)."""
        return self.named[name]

    def open_alerts(self) -> list[Alert]:
        return open_alerts_of(self.rules)

    # Views of the rules' detectors (status views, tests); the engine goes through the rules.
    @property
    def hang(self) -> HangDetector:
        return self.named["hang"].detector

    @property
    def stragglers(self) -> dict[str, StragglerDetector]:
        return self.named["straggler"].detectors

    @property
    def throughput(self):
        return self.named["throughput"].detector

    @property
    def comm(self):
        return self.named["comm"].detector

    @property
    def checkpoint(self):
        return self.named["checkpoint"].detector

    @property
    def imbalance(self):
        return self.named["imbalance"].detector

    @property
    def inspector(self):
        return self.named["inspector"].judge

    def clock_offset(self) -> float:
        # The median: a few events with absurd timestamps cannot move the job's clock. robust.median gives
        # np.median's float (the lags are finite: the decoder refuses other times) without its per-call cost.
        # Kept until the lags change (``add_lags``): every tick visiting the job asks, most with no new event.
        if self.offset is None:
            self.offset = list_median(list(self.lags)) if self.lags else 0.0
        return self.offset

    def add_lags(self, lags) -> None:
        """Arrival minus event time of new events (``lags``)."""
        self.lags.extend(lags)
        self.offset = None

    def on_broker_clock(self, alerts: list[Alert], broker: bool = True, offset: float | None = None) -> list[Alert]:
        """``alerts`` (this job's), unchanged: each new one's shift onto the broker's clock chosen (``AlertClock``;
        none when no arrival is known, ``broker`` is False, or the hosts' clocks are right), to be made where alerts
        leave (``DetectionEngine``). ``offset``: the job's clock offset as of the row that fired (a column run adds
        all its rows' lags before its rules run); None: as it is."""
        if not alerts or not alert_clock_module.ON:
            return alerts
        if not broker or not self.lags:
            self.alert_clock.choose(alerts, None)
        else:
            self.alert_clock.choose(alerts, self.clock_offset() if offset is None else offset)
        return alerts


class JobEngine:
    """``settings``: a ``DetectionSettings`` (models/settings.py) or the whole ``stepwatch.config.Settings``;
    ``observer``: told of jobs' nodes and of jobs forgotten (models/engine_output.py ``JobsObserver``)."""

    #: Whether a tick skips open alerts that cannot have changed (an open hang until its verdict can change);
    #: False (tests compare the alerts both ways): every open hang every tick.
    incremental = True
    #: Whether the arrivals it is given are the broker's (live; a recording's ``_arrival``), so that a job's alert
    #: times go on that clock where its hosts' are off (models/alert_clock.py). ``stepwatch replay`` of a file
    #: without ``_arrival`` sets False: its arrivals are its own merge of the hosts' times, not a clock to trust.
    broker_arrivals = True

    def __init__(self, settings=None, *, observer: JobsObserver | None = None) -> None:
        if settings is None:
            settings = DetectionSettings()
        self.settings = settings
        #: The jobs tracked, their LRU order, eviction choice and the caps' counts (models/jobs_store.py).
        self.store: JobsStore[JobState] = JobsStore()
        #: Jobs, least recently active first (the store's LRU; read-only to others).
        self.jobs: OrderedDict[str, JobState] = self.store.jobs
        #: Jobs forgotten, by why (``JobsStore.evicted``).
        self.jobs_evicted: Counter[str] = self.store.evicted
        #: Input refused before the engine (``Pipeline``: new jobs per message), by what; part of ``capped``.
        self.capped_input: Counter[str] = self.store.capped_input
        self.events_by_kind: Counter[str] = Counter()
        self.clock = 0.0  # latest time seen: event time in replay, wall time when ticked live
        self._tick_clock: float | None = None  # ``now`` of the latest tick
        #: Told of jobs' nodes and of jobs forgotten, as it happens (node telemetry: models/detection.py).
        self.observer: JobsObserver = observer if observer is not None else Unobserved()
        #: The job rules' settings in force: the environment's, run-time defaults, jobs' own
        #: (models/settings_store.py; ``apply_rule_settings``).
        self.rule_settings = SettingsStore(self.settings)
        #: Given to every straggler detector as its ``on_verdict`` hook (status views).
        self.verdict_listener = None
        #: Straggler re-fire attempts within the hold-off, by outcome (suppressed, refired).
        self.straggler_flaps: Counter[str] = Counter()
        #: Stack requests made by the hang rule, not yet sent (``take_stack_requests``).
        self.stack_requests: list = []
        # The timer's schedule (see ``tick``): jobs an event reached since the last tick, and a heap of
        # (tick-clock time a job's timer rules can next say anything, entry number, job).
        #: The timer's schedule (models/tick_schedule.py): jobs touched since the last tick, and when each is due.
        self.schedule = TickSchedule()
        #: Jobs the timer visited at the latest tick, and how many (the outlet's view, tests, bench/tick_bench.py).
        self.last_tick_jobs: list[JobState] = []
        self.last_tick_visits = 0
        #: Jobs evicted since alerts last left (``DetectionEngine``): their alert clocks stamp their resolutions.
        self.leaving: dict[str, JobState] = {}
        # (column batch, its runs' layouts) of the latest ``layouts`` call: one comparison per run and batch
        self._layouts: tuple[StepColumns, dict[tuple[int, int], RunLayout]] | None = None

    @property
    def jobs_refused(self) -> int:
        """Events of new jobs refused because every job the cap would evict had an open alert."""
        return self.store.refused_new

    @property
    def refused(self) -> list[tuple[int, str]]:
        """Rows of the column batch being processed that the rank cap left out, with what (the pipeline takes
        them after each batch and dead-letters those events: ``take_refused``)."""
        return self.store.refused

    # -- input ----------------------------------------------------------------------------

    def note(self, kind: str, ts: float) -> None:
        """An event the engine does not judge (node telemetry): counted, and its time moves the clock."""
        self.events_by_kind[kind] += 1
        if ts > self.clock:
            self.clock = ts

    def judge(self, event: Event, *, arrival: float | None = None) -> list[Caused]:
        """Feed one valid job event other than a step (``judge_steps``); the alerts it caused, as one group.

        ``arrival``: when the event reached the worker, on the timer's clock (live: wall
        time). It lets the time-driven rules allow for producers whose clocks differ from
        the worker's; replay leaves it out (the event's own time is the clock).
        """
        if isinstance(event, StepEvent):  # one step path: a lone step event is a batch of one
            run = self.judge_steps(event.job, StepColumns.of([event]), 0, 1, arrival)
            self.store.refused.clear()  # one event: its caller compares ``capped_counts``
            alerts = run.alerts() if run is not None else []
            return [(0, alerts)] if alerts else []
        job = self.jobs.get(getattr(event, "job", ""))
        before = job.hang.rank_count if job is not None else 0
        pgs = getattr(event, "pgs", None)
        if pgs and job is not None:
            self.store.limit_pgs(job, self.settings.retention)
        before_pgs = job.hang.pg_count if job is not None else 0
        held = self._held_at_end(event)  # (a group of their own: they fire before the end resolves them)
        out = self._process_event(event, arrival)
        self.store.count_ranks(getattr(event, "job", ""), job, before, before_pgs)
        return [(0, group) for group in (held, out) if group]

    def _process_event(self, event: Event, arrival: float | None) -> list[Alert]:
        self.note(event.kind, event.ts)
        job = self.jobs.get(event.job)
        evicted: list[Alert] = []
        if job is None:
            job, evicted = self._add_job(event.job)
            if job is None:
                return []
        elif job.ended and getattr(event, "rank", None) is not None and _late_after_end(
                job, event.rank, getattr(event, "step", None), event.ts):
            job.late_after_end += 1  # see _process_steps
            return []
        else:
            self.store.used(job)
        rank = getattr(event, "rank", None)
        if rank is not None and not job.hang.knows(rank) and job.hang.rank_count >= self.store.rank_limit(
                job, self.settings.retention):
            self.store.refuse_rank()
            return evicted
        if event.ts > job.last_ts:
            job.last_ts = event.ts
        job.last_seen = self._tick_clock
        self._touch(job)
        if arrival is not None:
            job.add_lags((arrival - event.ts,))
        job.sli.observe(event.ts)
        # the rules that hear it (models/event_router.py)
        return evicted + job.on_broker_clock(route(job, event, self.observer), self.broker_arrivals)

    def _held_at_end(self, event: Event) -> list[Alert]:
        """At a job's ``end``: the steps every rank completed that the assembly still holds, judged before the
        job's rules close (``StepAssembler.close_complete``). With a learned lag steps close in order, so one event
        lost holds every later step until the lag gives it up: ~100 steps at 20 ms steps and seconds of delivery
        lag, a fault in the job's last 2 s (gen3:small_2x2 scaled to 20 ms steps: dropped, the straggler lost)."""
        if not isinstance(event, PhaseEvent) or event.phase != "end" or event.rank is not None:
            return []
        job = self.jobs.get(event.job)
        if job is None or job.ended:
            return []
        steps = [s for a in job.assemblers.values() for s in a.close_complete()]
        return job.on_broker_clock(self._judge(job, steps), self.broker_arrivals) if steps else []

    def layouts(self, cols: StepColumns) -> dict[tuple[int, int], RunLayout]:
        """The layout of each job run ``(start, end)`` of ``cols``: the job's latest one where the run repeats it.

        Worked out once per batch and shared by everything that takes the batch (the status recorder, the outlet's
        view, the rules): each knows by identity whether the run has the ranks, nodes and GPUs of the last one.
        """
        memo = self._layouts
        if memo is not None and memo[0] is cols:
            return memo[1]
        runs = cols.job_runs()
        out = {}
        for name, lo, hi in runs:
            job = self.jobs.get(name)
            previous = job.layout if job is not None else None
            if len(runs) == 1:  # the usual batch, one job: its columns as they are
                out[lo, hi] = layout_of(previous, cols.rank, cols.node, cols.gpu)
            else:
                out[lo, hi] = layout_of(previous, cols.rank[lo:hi], cols.node[lo:hi], cols.gpu[lo:hi])
        self._layouts = (cols, out)
        return out

    def _add_job(self, name: str) -> tuple[JobState | None, list[Alert]]:
        """A new job's state, and the alerts of the job evicted to make room for it (if any); None
        when the cap is reached and no job near the front of the LRU may go (``JobsStore.room``)."""
        ok, victim, why = self.store.room(self.settings.retention.max_jobs)
        if not ok:
            return None, []
        evicted: list[Alert] = []
        if victim is not None:
            evicted = self._evict(victim, "too many jobs tracked" + (": hung, no rank heard since"
                                                                     if why == "dead_hang" else ""))
        job = self.store.add(self._new_job(name), self.settings.retention)
        self._touch(job)
        return job, evicted

    def judge_steps(self, name: str, cols: StepColumns, lo: int, hi: int,
                    arrival: float | list[float] | None = None) -> StepsJudged | None:
        """Step events ``lo:hi`` of ``cols``, one job's run (``StepColumns.job_runs``); None: the rules took none.
        ``arrival``: one for all, or a list of each row's (a replay's lines of different arrivals in one batch).
        Rows a state cap left out go to ``refused`` (``take_refused``)."""
        job = self.jobs.get(name)
        if job is None:
            out = self._process_steps_run(name, cols, lo, hi, arrival)
            self.store.count_ranks(name, job, 0, 0)
            return out
        hang = job.hang
        before, before_pgs = hang.rank_count, hang.pg_count
        out = self._process_steps_run(name, cols, lo, hi, arrival)
        if hang.rank_count != before or hang.pg_count != before_pgs or self.jobs.get(name) is not job:
            self.store.count_ranks(name, job, before, before_pgs)  # (else it adds nothing: most runs)
        return out

    def _process_steps_run(self, name: str, cols: StepColumns, lo: int, hi: int,
                           arrival: float | None) -> StepsJudged | None:
        """Step events ``lo:hi`` of one job, in order, by columns: the only road of step events.

        The work of each rule is done for the whole run at once; the alerts come out in event
        order (for each event: the hang rule's, then the straggler/throughput rules'), each group
        tagged with its row, so that node telemetry catches up to it before it is enriched.
        """
        self.events_by_kind["step"] += hi - lo
        first_row, clock_before = lo, self.clock  # (the clock as of a row that fires: ``_facts_at``)
        ts = cols.ts if lo == 0 and hi == len(cols) else cols.ts[lo:hi]
        # a big run's times as the decoder's array (a view): its bounds without a pass over the list
        ts_array = cols.array("ts")[lo:hi] if hi - lo >= 16 else None
        earliest, latest = _bounds(ts, ts_array)
        if latest > self.clock:
            self.clock = latest
        job = self.jobs.get(name)
        evicted: list[Alert] = []
        if job is None:
            job, evicted = self._add_job(name)
            if job is None:
                return None
        else:
            self.store.used(job)
        if job.ended:
            # Stamped before (or just after, on another rank's clock) the job said it ended, arriving
            # after: overtaken on another path (e.g. a different shard stage process), not a restart,
            # which would reopen the job's alerts. The first later step is the restart.
            ranks, steps = cols.rank, cols.step
            late = next((i for i, t in enumerate(ts) if not _late_after_end(job, ranks[lo + i], steps[lo + i], t)),
                        hi - lo)
            if late:
                job.late_after_end += late
                lo += late
                if lo == hi:
                    return None
                ts = cols.ts[lo:hi]
                ts_array = ts_array[late:] if ts_array is not None else None
                earliest, latest = _bounds(ts, ts_array)
        limit = self.store.rank_limit(job, self.settings.retention)
        if job.hang.rank_count + (hi - lo) > limit and job.hang.rank_count + len(
                {r for r in cols.rank[lo:hi] if not job.hang.knows(r)}) > limit:  # over the rank cap: rare
            kept = self.store.within_rank_cap(job, cols.events()[lo:hi], limit, lo)
            if len(kept) < hi - lo:
                self.events_by_kind["step"] -= hi - lo  # the kept ones count again below
                if type(arrival) is list:  # per row: the kept rows' own
                    row = {id(e): i for i, e in enumerate(cols.events()[lo:hi], lo)}
                    arrival = [arrival[row[id(e)]] for e in kept]
                kept_cols = StepColumns.of(kept)
                out = self._process_steps_run(name, kept_cols, 0, len(kept), arrival) if kept else None
                if not evicted:
                    return out
                if out is None:
                    return StepsJudged(name, kept_cols, 0, 0, None, evicted=tuple(evicted))
                return dataclasses.replace(out, evicted=tuple(evicted))  # enriched after the kept rows' (as ever)
        whole = lo == 0 and hi == len(cols)

        def part(column: list) -> list:  # the batch's own list when the run is all of it (no rule changes a column)
            return column if whole else column[lo:hi]

        ranks, steps, nodes, phases = part(cols.rank), part(cols.step), part(cols.node), part(cols.phase)
        layout = self.layouts(cols).get((lo, hi))
        if layout is None:  # a part of a run (events after a job's end left out)
            layout = layout_of(job.layout, ranks, nodes, part(cols.gpu))
        job.layout = layout
        if latest > job.last_ts:
            job.last_ts = latest
        job.last_seen = self._tick_clock
        self._touch(job)
        # The lags before this run: an alert of an earlier row is stamped with the offset as of its row, as one
        # event at a time would (``_offset_at``).
        # (Only while the shift is on: the copy is per run.)
        # (Not a copy of the 256 lags per run: the lags the run pushes out, the rest is still in ``job.lags``.)
        lags_before = None
        if arrival is not None:
            lags = job.lags
            added = min(len(ts), lags.maxlen or len(ts))  # what the run adds below
            if self.broker_arrivals and alert_clock_module.ON:
                dropped = len(lags) + added - (lags.maxlen or len(lags) + added)
                lags_before = (list(itertools.islice(lags, dropped)) if dropped > 0 else [], added)
            if type(arrival) is list:  # each row its own arrival (a replay's lines merged into one batch)
                job.add_lags([a - t for a, t in zip(arrival[hi - added:hi], ts[-added:])])
            else:
                job.add_lags([arrival - t for t in ts[-added:]])
        job.sli.observe(earliest)
        job.sli.observe(latest)
        step_times, world_sizes = part(cols.step_time), part(cols.world_size)
        # (once: the hang rule and its clock offsets take them too; a run of one step, the usual, by one count)
        first = steps[0]
        step_bounds = (first, first) if steps.count(first) == len(steps) else (min(steps), max(steps))
        run = RankSteps(ranks, steps, ts, step_times, phases, nodes, world_sizes, layout, ts_array, step_bounds)
        checkpoint_before = job.checkpoint.latest_step  # (its highest step as of a row that fires: ``_facts_at``)
        # (event index, alert) of the rules fed each rank's steps (the hang rule's), in event order
        rank_alerts = [pair for rule in job.by_signal[Signal.RANK_STEPS] for pair in rule.on_rank_steps(run)]
        if job.arrival.active:
            job.arrival.observe_steps(ranks, steps, ts)
        if cols.extra is not None:
            for extra in cols.extra[lo:hi]:
                if extra and "model_flops_per_token" in extra:
                    _set_flops(job.sli, extra)
        job.ended = False  # a job id that reports steps again was restarted
        if layout is not job.ranks_of:  # (a repeated layout's ranks are in already: the set only grows)
            job.ranks.update(ranks)
            job.ranks_of = layout
        newest = step_bounds[1]
        if newest > job.latest_step:
            job.latest_step = newest
        phase = job.phases.phase
        if phase != "train":  # job-wide phase markers cover steps without a phase of their own, stamped since
            # (a stalled producer's training steps arriving after the checkpoint marker are still training)
            since = job.phases.since
            phases = [phase if p == "train" and t >= since else p for p, t in zip(phases, ts)]
        # what the assemblers keep, as columns (models/steps/assembly.py ``step_row``)
        columns = (ts, step_times, part(cols.compute_time), part(cols.comm_time), part(cols.data_time),
                   part(cols.tokens), nodes)
        groups = part(cols.group)
        # (event index, 0: hang alerts / 1: closed steps to judge), in event order
        results: list[tuple[int, int, list]] = [(i, 0, [alert]) for i, alert in rank_alerts]
        start = 0
        # runs of one group (usually the whole run: then the bounds without a scan)
        bounds = (len(groups),) if groups.count(groups[0]) == len(groups) else range(1, len(groups) + 1)
        for i in bounds:
            if i < len(groups) and groups[i] == groups[start]:
                continue
            if i - start == len(groups):
                heads, rest = (ranks, steps, world_sizes, phases), columns
            else:
                heads = ranks[start:i], steps[start:i], world_sizes[start:i], phases[start:i]
                rest = tuple(col[start:i] for col in columns)
            for j, closed in self._assembler(job, groups[start] or "").add_columns(*heads, rest):
                results.append((start + j, 1, closed))
            start = i
        caused: list[Caused] = []
        facts: list[RowFacts] = []
        ordered = sorted(results, key=lambda r: r[:2]) if len(results) > 1 else results
        for k, (i, what, value) in enumerate(ordered):
            judged = value if what == 0 else self._judge(job, value)
            offset = None
            if judged and lags_before is not None and i < len(ts) - 1:
                pushed_out, added = lags_before
                before = pushed_out + list(job.lags)[:len(job.lags) - added]  # the lags before this run
                offset = _offset_at(job, before, arrival[lo:hi] if type(arrival) is list else arrival, ts, i)
            alerts = evicted + job.on_broker_clock(judged, self.broker_arrivals, offset)
            evicted = []  # (with the first group: enriched together, once telemetry saw the rows up to it)
            if alerts:
                caused.append((lo + i, alerts))
            # the job as the outlet would read it after row i, once the row's every result is in (rare: alerts are)
            while len(facts) < len(caused) and (k + 1 == len(ordered) or ordered[k + 1][0] != i):
                facts.append(_facts_at(job, cols.ts[first_row:lo + i + 1], clock_before, checkpoint_before,
                                       steps[:i + 1]))
        return StepsJudged(name, cols, lo, hi, layout, tuple(caused), tuple(evicted), tuple(facts))

    def _new_job(self, job: str) -> JobState:
        return JobState(job, self)

    def take_stack_requests(self) -> list:
        """Stack requests of hung jobs made since the last call (the worker sends them on the control topic)."""
        out, self.stack_requests = self.stack_requests, []
        for request in out:
            job = self.jobs.get(request.job)
            if job is not None:
                job.hang.mark_sent(request.request_id)
                self._touch(job)  # sent: its stack key can change (ranks that do not answer count as missing)
        return out

    def judge_tick(self, now: float) -> list[Alert]:
        """Run the time-driven rules at ``now`` (close steps that waited too long, check for hangs); their alerts.

        Only the jobs that can need it are visited (``_jobs_due``): those an event reached since the last
        tick, and those whose next deadline (a hang threshold, the next time an open hang's verdict can change,
        a step's wait, the checkpoint age, eviction) has come, in the order of their last activity. A skipped job's
        rules would have returned nothing and changed nothing, so the alerts are the same, at the same
        ticks, as visiting every job: the cost is O(jobs due), not O(jobs).
        """
        if now > self.clock:
            self.clock = now
        previous, self._tick_clock = self._tick_clock, now
        self.leaving.clear()  # (left already: an engine driven without the outlet keeps them no longer)
        out: list[Alert] = []
        retention = self.settings.retention
        visits = self.last_tick_jobs = self._jobs_due(now)
        self.last_tick_visits = len(visits)
        for job in visits:
            if job.last_seen is None:
                job.last_seen = now
            idle = now - job.last_seen
            if idle > (retention.ended_job_seconds if job.ended else retention.job_idle_seconds):
                self.jobs_evicted["idle"] += 1
                out.extend(self._evict(job, f"no events for {idle:.0f} s"))
                continue
            offset = job.clock_offset()
            job_now = now - offset  # the same instant on the job's own clock
            # (the shift of an alert the outlet makes of a job no rule alert gave one: models/alert_clock.py)
            job.alert_clock.ticked = offset if self.broker_arrivals and job.lags else None
            if job.ticked is not None and previous is not None and job.ticked < previous:
                # Skipped ticks: hung then as now (an open hang is skipped only while its verdict cannot change).
                job.sli.on_tick(previous - (now - job_now), hung=bool(job.hang.firing))
            for assembler in job.assemblers.values():
                out.extend(job.on_broker_clock(self._judge(job, assembler.flush(job_now)), self.broker_arrivals))
            for rule in job.by_signal[Signal.TICKS]:
                out.extend(job.on_broker_clock(rule.tick(job_now), self.broker_arrivals))
            hang = job.hang
            if hang.pending_requests:
                self.stack_requests.extend(hang.take_stack_requests())
                del self.stack_requests[:-1000]  # replay takes none: bounded all the same
            job.sli.on_tick(job_now, hung=bool(hang.firing))
            self._schedule(job, now, job_now)
        return out

    def _touch(self, job: JobState) -> None:
        """An event (or a setting) reached ``job``: the next tick visits it."""
        self.schedule.touch(job)

    def _jobs_due(self, now: float) -> list[JobState]:
        """The jobs the tick at ``now`` visits: touched since the last tick, or due by the schedule."""
        return self.schedule.due(now, self.jobs)

    def _schedule(self, job: JobState, now: float, job_now: float) -> None:
        """Put ``job`` back on the timer's heap at the earliest tick-clock time one of its timer rules can say
        something (each rule's ``next_due``: e.g. a hang threshold, the checkpoint age), a step's wait, or its
        eviction. Events reaching it before then bring it to the next tick anyway (``_touch``)."""
        if self.jobs.get(job.job) is not job:
            return  # evicted by this very tick
        job.ticked = now
        quiet = math.inf
        for rule in job.by_signal[Signal.TICKS]:
            due = rule.next_due(job_now, incremental=self.incremental)
            quiet = min(quiet, due if due == due else -math.inf)  # NaN: no bound known, the next tick
        for assembler in job.assemblers.values():
            quiet = min(quiet, assembler.flush_due())
        retention = self.settings.retention
        idle = retention.ended_job_seconds if job.ended else retention.job_idle_seconds
        at = min(quiet + (now - job_now), job.last_seen + idle)
        if math.isnan(at):
            at = now  # no bound known: the next tick
        self.schedule.put(job, at, self.jobs)

    def take_refused(self) -> list[tuple[int, str]]:
        """Rows of the latest column batch the caps left out (see ``refused``), and forget them."""
        return self.store.take_refused()

    def capped_counts(self, job: str | None) -> tuple[int, int, int, int, int]:
        """The job rules' counts of input a cap left out that an event of ``job`` can add to (``JobsStore``)."""
        return self.store.capped_counts(job)

    def capped(self) -> Counter[str]:
        """Input left out at a state cap so far, by what (docs/security.md "Bounded state"; /metrics)."""
        return self.store.capped()

    def _evict(self, job: JobState, reason: str) -> list[Alert]:
        """Forget a job; its open alerts resolve, saying why."""
        self.store.remove(job)
        self.observer.forget_job(job.job)
        at = max(self.clock, job.last_ts)
        opened = job.on_broker_clock(job.open_alerts(), self.broker_arrivals)
        # Their shift is made where they leave (``leaving``); ``at`` is the engine's clock already.
        self.leaving[job.job] = job
        clock = job.alert_clock
        return [with_resolution(alert.resolved(at=at - (clock.shift(alert) or 0.0),
                                               summary=f"resolved (state evicted: {reason}): {alert.summary}"),
                                Resolution.FORGOTTEN, reason) for alert in opened]

    # -- handlers -------------------------------------------------------------------------

    def _assembler(self, job: JobState, group: str) -> StepAssembler:
        assembler = job.assemblers.get(group)
        if assembler is None:
            a = self.settings.assembly
            assembler = job.assemblers[group] = StepAssembler(
                job=job.job, group=group, max_lag_steps=a.max_lag_steps, max_wait_seconds=a.max_wait_seconds,
                max_pending_steps=a.max_pending_steps, max_pending_seconds=a.max_pending_seconds,
                pending_steps_cap=a.pending_steps_cap)
        return assembler

    def _judge(self, job: JobState, steps: list[GroupStep]) -> list[Alert]:
        """The closed steps of one group to the rules that judge steps, in order."""
        out: list[Alert] = []
        rules = job.by_signal[Signal.STEPS]  # imbalance first: classes known before the per-rank rules judge
        for step in steps:
            if job.arrival.active and np.isnan(step.compute_time).any() and np.isnan(step.comm_time).any():
                comm = job.arrival.comm_times(step.step, step.ranks)
                if comm is not None:  # arrival skew from the ranks' own collective durations
                    step = dataclasses.replace(step, comm_time=comm, comm_source="collective",
                                               comm_ops=job.arrival.dominant())
            for rule in rules:
                out.extend(rule.on_step(step))
            job.sli.on_step(step)
        return out

    def count_flap(self, detector: StragglerDetector, outcome: str) -> None:
        """Given to every straggler detector as its ``on_flap`` hook (``stepwatch_straggler_flaps_total``)."""
        self.straggler_flaps[outcome] += 1

    # -- runtime settings -----------------------------------------------------------------

    def settings_for(self, cls: type, job: str):
        """The settings of class ``cls`` (a rule's ``spec.settings``) in force for ``job``."""
        return self.rule_settings.get(cls, job)

    def apply_rule_settings(self, cls: type, job: str | None, settings) -> None:
        """Change the settings of class ``cls`` while running, for every job rule that takes them, existing ones
        included (state and open alerts kept; an open alert a raised threshold ends resolves saying so).

        ``job=None`` sets the default of every job without its own; ``settings=None`` for a job drops its own
        (back to the default).
        """
        self.rule_settings.set(cls, job, settings)
        if job is None:
            section = section_of(cls)
            if isinstance(getattr(self.settings, section, None), cls):  # the tree in force (rules read it)
                self.settings = dataclasses.replace(self.settings, **{section: settings})
            targets = [j for name, j in self.jobs.items() if not self.rule_settings.has_own(cls, name)]
        else:
            targets = [self.jobs[job]] if job in self.jobs else []
        for state in targets:
            self._reconfigure(state, self.settings_for(cls, state.job))
            self._touch(state)  # new thresholds: its deadlines move

    @staticmethod
    def _reconfigure(state: JobState, settings) -> None:
        """Every rule of the job that takes settings of this kind takes them."""
        for rule in state.rules:
            if rule.spec.settings is type(settings):
                rule.reconfigure(settings)

    # The rules' settings by name (callers and tests written before the store).
    def straggler_settings(self, job: str) -> StragglerSettings:
        return self.settings_for(StragglerSettings, job)

    def hang_settings(self, job: str) -> HangSettings:
        return self.settings_for(HangSettings, job)

    def job_health_settings(self, job: str) -> JobHealthSettings:
        return self.settings_for(JobHealthSettings, job)

    def apply_settings(self, job: str | None, straggler: StragglerSettings | None) -> None:
        self.apply_rule_settings(StragglerSettings, job, straggler)

    def apply_hang_settings(self, job: str | None, hang: HangSettings | None) -> None:
        self.apply_rule_settings(HangSettings, job, hang)

    # -- views ----------------------------------------------------------------------------

    def job_sli(self, job: str) -> dict | None:
        """Effective-compute SLIs of a job (see models/jobhealth/sli.py), None for an unknown job."""
        state = self.jobs.get(job)
        return state.sli.snapshot() if state is not None else None

    def open_alerts(self) -> list[Alert]:
        return [a for job in self.jobs.values() for a in job.open_alerts()]


def _offset_at(job: JobState, before: list[float], arrival, ts: list[float], row: int) -> float:
    """The job's clock offset once row ``row`` of a column run was added to the lags ``before`` it (``arrival``: the
    run's arrivals, a list of each row's or one for all): what one event at a time had when that row fired."""
    rows = [a - t for a, t in zip(arrival[:row + 1], ts)] if type(arrival) is list else [arrival - t for t in
                                                                                            ts[:row + 1]]
    return list_median((before + rows)[-(job.lags.maxlen or len(before) + len(rows)):])


def _facts_at(job: JobState, ts: list[float], clock_before: float, checkpoint_before: int | None,
              steps: list[int]) -> RowFacts:
    """The job as one event at a time had it after the last of ``ts`` (the run's rows up to the one that fired;
    ``steps``: the job's steps of them): the clock, the recent judged steps (all judged by then: those of later rows
    are judged after it) and the checkpoint's highest step."""
    latest = max(steps, default=-1)
    highest = max(checkpoint_before, latest) if checkpoint_before is not None else (latest if latest >= 0 else None)
    return RowFacts(job.job, max(clock_before, max(ts, default=clock_before)), job.sli.recent_steps(),
                    (job.checkpoint.last_success_ts, highest))


def _set_flops(sli: JobSLI, extra: dict) -> None:
    """MFU inputs reported by the job as extra step fields (ignored unless positive numbers)."""
    for name in ("model_flops_per_token", "peak_flops_per_gpu"):
        value = extra.get(name)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and 0 < value < 1e30:
            setattr(sli, name, float(value))
