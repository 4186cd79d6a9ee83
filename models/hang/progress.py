"""Where a job and each of its ranks are: the state the hang rule (models/hang/detector.py) judges.

One ``JobProgress`` per run of a job (a restart of the whole job starts a fresh one): the job's step
counter (the ranks' lower median, so one wild step number cannot move it), when it last advanced, the
recent step times and heartbeat gaps, and each rank's latest step, heartbeat, collective sequence
numbers, node and phase, in arrays indexed by a dense slot (grown on demand), plus each process
group's sequence numbers from the heartbeats' ``pgs``. Kept apart from the rule so that what is known
(this module) and what is concluded from it (models/hang/diagnosis.py, models/hang/detector.py) read
separately; the step path here is the hot one (every step event), the rest runs on a hang.

Memory is bounded: arrays per rank, bounded deques, process groups capped (``MAX_PGS``,
``MAX_PG_RANK_ENTRIES``) and what a cap left out counted in ``capped``.
"""

from __future__ import annotations

import itertools
import math
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum

import numpy as np

from ..job_phase import TRAINING_PHASES, JobPhase
from ..relaunch import RELAUNCH_WINDOW_SECONDS, relaunched
from ..steps.layout import all_named
from ..steps.robust import sorted_percentile
from ..wire.events import PAUSE_PHASES, HeartbeatEvent
from .evidence import RankPosition

#: The default process group: its sequence numbers are also the heartbeat's top-level ones.
DEFAULT_PG = "default"
#: Ranks in new processes (steps or heartbeat sequence numbers back, a new node) within this many
#: seconds of the first: a majority of them is a restart of the job; fewer, single ranks restarted.
INCARNATION_WINDOW_SECONDS = RELAUNCH_WINDOW_SECONDS
#: After a job restart, rank events stamped more than this before its first new process are late ones of the
#: processes that are gone (a reordered delivery): left out, or the fresh run would start its clock there.
OLD_PROCESS_SLACK_SECONDS = 15.0
#: Without incarnations, a rank's event whose step the job passed more than this many seconds of its progress
#: before the event (more than a delivery burst or a heartbeat thread's lag) is from a new process of it (a restart
#: from a checkpoint); a step only a little behind is a late event.
BURST_SECONDS = 30.0
#: Recent self-ended pauses kept (``JobProgress.pauses``): the pause factor applies to the longest of them.
PAUSES_KEPT = 4
#: Recent marked pause lengths kept (``JobProgress.marked_pauses``).
MARKED_PAUSES_KEPT = 64
#: Most process groups tracked per job (bounded memory; a real job has a few hundred at most).
MAX_PGS = 4096
#: Most ranks kept over all of a job's process groups' ``ranks`` lists; beyond, a group's ranks are not
#: kept (it is judged as one without them) and counted in ``capped``.
MAX_PG_RANK_ENTRIES = 1_000_000
#: Runs of step events (and jobs' ranks) up to this many take plain Python, not numpy: one call's overhead is
#: more than the work on a few elements (a small job's step: tests/models/hang/test_small_runs.py).
SMALL_RUN = 32


@dataclass(frozen=True, slots=True)
class PauseStragglers:
    """Ranks still in a pause most ranks left (``JobProgress.pause_stragglers``)."""

    inside: np.ndarray  # mask over the job's slots: the ranks still in it
    since: float  # when most ranks had left it
    phase: str  # the pause: ``checkpoint`` or ``eval``
    left: int  # how many ranks left it
    began: float  # when it began


class Incarnation(Enum):
    """What a rank's event from a new process of it means (``JobProgress.new_process``)."""

    RANK = "rank"  # a single rank restarted: its positions were dropped
    JOB = "job"  # most ranks did within the window: the job restarted


class JobProgress:
    """Steps, heartbeats and collective positions of one run of a job, per rank and per process group.

    ``step_history``: recent train step times (and counter advances) kept, for the p99 the early warning
    uses. Every method is an update or a query of this state; none makes an alert.

    >>> progress = JobProgress(step_history=8)
    >>> for rank, step in [(0, 5), (1, 5), (2, 6)]:
    ...     _ = progress.rank_row(progress.slot_for(rank, 100.0), step, 100.0, "node-0")
    >>> progress.counter_passed()  # the ranks' lower median passed the counter (-1 at the start)
    5
    """

    def __init__(self, step_history: int) -> None:
        # Job-level state.
        self.started_at: float | None = None  # first event of this run of the job
        self.latest_ts = 0.0  # latest event time from any rank of the job
        # The job's step counter: the (lower) median of the ranks' completed steps, so that one
        # event with a wild step number cannot move it (the max would: a false hang that never ends).
        self.max_step = -1
        self.above = 0  # ranks whose step is above the counter
        self.known = 0  # ranks with a known step
        self.completed_any = False  # a step completed since start (a heartbeat's first value is a baseline)
        self.progress_ts = 0.0  # when the counter last advanced (or the start)
        #: The job-wide phase from phase events without a rank, ended early by the ranks (models/job_phase.py).
        self.job_phase = JobPhase()
        self.ended = False
        self.has_heartbeats = False
        self.has_step_events = False
        self.world_size: int | None = None
        self.step_times: deque[float] = deque(maxlen=step_history)  # recent train step times
        #: The longest step time the job reported before its pace was learned (its first and warm-up steps, which
        #: ``step_times`` leaves out), seconds (``HangDetector.thresholds``).
        self.early_step_max = 0.0
        #: Recent stops the job went on from by itself (a hang warning resolved by its next step), seconds.
        self.pauses: deque[float] = deque(maxlen=PAUSES_KEPT)
        #: Recent marked pauses' lengths (a job-wide eval/checkpoint, or one rank's own), seconds: the job's usual
        #: pause (``usual_pause``) that a rank still in a pause most ranks left is judged against.
        self.marked_pauses: deque[float] = deque(maxlen=MARKED_PAUSES_KEPT)
        self.hb_gaps: deque[float] = deque(maxlen=64)  # recent heartbeat intervals (any rank)
        self.advances: deque[tuple[int, float]] = deque(maxlen=step_history)  # (new job step, when)
        # Per-rank latest values, in arrays indexed by a dense slot (grown on demand).
        self.slot_of_rank: dict[int, int] = {}
        #: [layout, its ranks' slots, whether each rank is there once, the slots as an array or None] of the latest
        #: run of ``quiet_steps`` (models/steps/layout.py): the next step's run has the same layout (slots are
        #: never taken back).
        self._run_slots: list | None = None
        # (slots list, its first slot if they are consecutive, else None) of the latest ``rank_columns``: the run's
        # slots list above comes again each step (the list is kept, so the identity check cannot be fooled)
        self._consecutive: tuple[list[int], int | None] | None = None
        self.n = 0
        self.rank_at = np.zeros(0, dtype=np.int64)
        self.last_step = np.zeros(0, dtype=np.int64)  # highest completed step (-1: unknown)
        self.rank_progress = np.zeros(0)  # when the rank's step last advanced (or was first seen)
        self.stepped = np.zeros(0, dtype=bool)  # the rank's step advanced at least once
        self.last_seen = np.zeros(0)  # latest event of any kind from the rank
        self.last_hb = np.zeros(0)  # latest heartbeat (NaN: none)
        self.seq_started = np.zeros(0, dtype=np.int64)  # -1: unknown
        self.seq_completed = np.zeros(0, dtype=np.int64)
        self.hb_done = np.zeros(0, dtype=np.int64)  # the latest heartbeat's seq_completed (-1: none)
        self.incarnation = np.zeros(0, dtype=np.int64)  # the rank's process incarnation (-1: never told)
        self.phase_at = np.zeros(0)  # when the rank's own phase last changed (its heartbeats, rank phase events)
        self.phase_step = np.zeros(0, dtype=np.int64)  # the step it said that phase at (-1: not said)
        self.pause_in_at = np.zeros(0)  # when the rank last began reporting a pause phase (-inf: never)
        self.seq_at = np.zeros(0)  # when the rank's seq_started last rose
        # Ranks seen in a new process (an incarnation) since ``_incarnated_at`` (see ``_incarnation``).
        self.incarnated: set[int] = set()
        self.incarnated_at = 0.0
        self.nodes: list[str | None] = []
        self.first_seen: list[float] = []  # per slot: when the rank was first heard of
        self.rank_phase: list[str | None] = []
        # Per-process-group sequence numbers from heartbeats' ``pgs``: group -> slot -> (started,
        # completed), and the group's global ranks (None: not told, e.g. the default group).
        self.pg_seq: dict[str, dict[int, tuple[int, int]]] = {}
        self.pg_ranks: dict[str, tuple[int, ...] | None] = {}
        self.pg_rank_entries = 0
        #: Groups this job may hold beside ``MAX_PGS``: the room the engine's total across jobs leaves (None: no total).
        self.max_pgs: int | None = None
        #: Input left out at a cap (process groups beyond MAX_PGS, ranks lists beyond MAX_PG_RANK_ENTRIES).
        self.capped: Counter[str] = Counter()
        self.pg_desc: dict[str, str] = {}  # group -> its description from the heartbeats (``pgs[name].desc``)


    def new_process(self, slot: int, step: int, ts: float, node: str | None, seq_completed: int | None, *,
                    incarnation: int | None = None, step_event: bool = False) -> Incarnation | None:
        """Whether a rank's event comes from a new process of it, in an event stamped after its latest (a late
        event of the old process is not one). Where the rank's events carry an ``incarnation`` (the monitor's
        process start), only a higher one is a new process. Without: it is on another node, its heartbeat's
        sequence number went back, or its step is one the job passed more than ``BURST_SECONDS`` before the event:
        of the job's progress (``progressed_since``) while the rank kept talking, of the clock after a silence of
        the rank longer than that (its process relaunched): a step a little behind is a late event (a heartbeat thread that
        read the counter a moment before, a heartbeat that waited in the producer's queue), never a restart. Its old
        positions are dropped, never compared with the new ones (``Incarnation.RANK``). When most ranks did
        so within ``INCARNATION_WINDOW_SECONDS``, the job restarted (``Incarnation.JOB``): the caller starts a
        fresh state. None: the same process."""
        known = int(self.incarnation[slot])
        if incarnation is not None and known >= 0:
            if incarnation <= known:
                return None  # the same process, or a late event of an older one
            self.incarnation[slot] = incarnation
        else:
            # A heartbeat is judged against the rank's heartbeats (one thread's stamps, in order), not its step
            # events: a heartbeat that arrives seconds late is stamped before the new process's first step events.
            seq_back = (seq_completed is not None and ts > self.last_hb[slot]
                        and seq_completed < self.hb_done[slot])
            if not (ts > self.last_seen[slot] or seq_back):
                return None
            if incarnation is None and known >= 0:
                return None  # this rank's heartbeats carry its incarnation: they, not a step number, tell
            if incarnation is not None:
                self.incarnation[slot] = incarnation
            old_step, old_node = int(self.last_step[slot]), self.nodes[slot]
            # A rank that kept talking (a heartbeat lagging through a checkpoint) is late by the job's progress; one
            # silent for longer than a burst may have been relaunched (a crash, a resume from a checkpoint): by the clock.
            silent = ts - self.last_seen[slot] > BURST_SECONDS
            late = ts - self.passed_at(step) if silent else self.progressed_since(step, ts)
            later = ts > self.last_seen[slot]
            # A step event by the rank's own clock (models/relaunch.py); a heartbeat's step may lag its rank's: only the
            # job's progress tells.
            back = later and (
                step_event and relaunched(old_step, float(self.rank_progress[slot]), step, ts)
                or old_step >= 0 and step < old_step - 1 and late > BURST_SECONDS)
            moved = later and node is not None and old_node is not None and node != old_node
            if not (back or moved or seq_back):
                return None
        if self.incarnated and ts - self.incarnated_at > INCARNATION_WINDOW_SECONDS:
            self.incarnated.clear()  # the earlier ones were single ranks restarting
        if not self.incarnated:
            self.incarnated_at = ts
        self.incarnated.add(slot)
        if 2 * (len(self.incarnated) + self._joined()) <= self.n:
            self.reset_rank(slot)
            return Incarnation.RANK
        return Incarnation.JOB

    def _joined(self) -> int:
        """Ranks first heard of since the job last progressed, near its relaunch, not counted in ``incarnated``: the
        new run's ranks beyond the old run's (an elastic job relaunched on more ranks). Counted with the ranks in new
        processes, or a relaunch on twice the ranks never had "most" of them new and its steps read as the old
        run's counter standing still (a hang warning while it trained: tests/models/hang/test_elastic_relaunch.py)."""
        since = max(self.progress_ts, self.incarnated_at - INCARNATION_WINDOW_SECONDS)
        return sum(1 for s, t in enumerate(self.first_seen[:self.n]) if t > since and s not in self.incarnated)

    def passed_at(self, step: int) -> float:
        """When the job's counter passed ``step`` (-inf: before the advances kept; inf: not yet)."""
        for done, ts in self.advances:  # ascending steps
            if done > step:
                return ts
        return math.inf if self.advances or self.max_step <= step else -math.inf

    def progressed_since(self, step: int, ts: float) -> float:
        """How long the job went on advancing after it passed ``step``, up to ``ts``. While it stands still (a
        checkpoint, a hang) a lagging heartbeat repeating its step gets no later: counted in wall time, 30 s into a
        60 s checkpoint the lag read as a restart and the job's progress was thrown away (the hang after it
        warned at half the timeout, tests/metamorphic: "checkpoint 60s before the fault")."""
        last = self.advances[-1][1] if self.advances else ts
        return min(ts, last) - self.passed_at(step)

    def longest_recent_step(self, count: int = 8) -> float:
        """The longest time per step between the last ``count`` advances of the job's counter (seconds; 0 before
        two): how long its steps took while the pace is not learned yet (warm-up steps count here, not in the p99)."""
        recent = list(itertools.islice(reversed(self.advances), count))
        return max(((t1 - t0) / (s1 - s0) for (s1, t1), (s0, t0) in zip(recent, recent[1:]) if s1 > s0),
                   default=0.0)

    def step_time_stats(self, floor: float, factor: float) -> tuple[float, float]:
        """(the p99 of the recent train step times, the longest stop among them; 0 when none). A step time of
        at least ``floor`` seconds and ``factor`` x their median is the job stopping inside a step, not a step
        (rank 0 writing an unmarked checkpoint while the others wait in the next collective, their step timers
        running): a pause, kept out of the p99, which would otherwise grow with every such checkpoint."""
        if not self.step_times:
            return 0.0, 0.0
        ordered = sorted(self.step_times)
        total = sum(ordered)
        if total - total == 0.0 and ordered[-1] < floor:  # the usual job (all finite): numpy's p99 without its cost
            return sorted_percentile(ordered, 99), 0.0
        times = np.fromiter(self.step_times, float)
        if times.max() >= floor:  # a cheap test first: steps are shorter than the floor in most jobs
            stop = (times >= floor) & (times >= factor * np.median(times))
            if stop.any():
                kept = times[~stop]
                return (float(np.percentile(kept, 99)) if len(kept) else 0.0), float(times[stop].max())
        return float(np.percentile(times, 99)), 0.0

    def heartbeat_gap(self) -> float | None:
        """The median of the recent heartbeat intervals (any rank), None before two heartbeats of a rank."""
        return float(np.median(np.fromiter(self.hb_gaps, float))) if self.hb_gaps else None

    @property
    def phase(self) -> str:
        """The job-wide phase."""
        return self.job_phase.phase

    def in_checkpoint(self, silent_after: Callable[[], float] | None = None) -> bool:
        """The job-wide phase is ``checkpoint``, or a rank's own is and it completed no step since it said so (a rank
        that froze right after a checkpoint, its last heartbeat still saying it, is not in one for good), and it has
        not been silent ``silent_after()`` seconds behind the job's latest event (a saving rank's heartbeats go on; a
        rank killed at a checkpoint's end, its last heartbeat saying it, is not saving for 30 minutes). A callable:
        asked only where a rank's own checkpoint is in question (most calls return before)."""
        if self.phase == "checkpoint":
            return True
        if "checkpoint" not in self.rank_phase:
            return False
        n = self.n
        saving = np.fromiter((ph == "checkpoint" for ph in self.rank_phase[:n]), bool, count=n)
        # By step where the rank said its step (its own step's end, stamped with the save's start, is no step after
        # it; a clock correction or host offset can order the two either way), else by time.
        said = self.phase_step[:n]
        stays = np.where(said >= 0, self.last_step[:n] <= said, self.rank_progress[:n] <= self.phase_at[:n])
        held = saving & stays
        if silent_after is not None and held.any():
            held &= self.latest_ts - self.last_seen[:n] < silent_after()
        return bool(held.any())

    def observe_collective(self, slot: int, seq: int) -> None:
        """A collective event: the rank issued and completed collective ``seq``."""
        if seq > self.seq_started[slot]:
            self.seq_started[slot] = seq
            self.seq_at[slot] = self.last_seen[slot]
        if seq > self.seq_completed[slot]:
            self.seq_completed[slot] = seq

    def slot_for(self, rank: int, ts: float) -> int:
        slot = self.slot_of_rank.get(rank)
        if slot is not None:
            return slot
        slot = self.slot_of_rank[rank] = self.n
        self.n += 1
        if slot >= len(self.rank_at):
            grow = max(8, len(self.rank_at))
            self.rank_at = np.concatenate([self.rank_at, np.zeros(grow, dtype=np.int64)])
            self.last_step = np.concatenate([self.last_step, np.full(grow, -1, dtype=np.int64)])
            self.rank_progress = np.concatenate([self.rank_progress, np.zeros(grow)])
            self.stepped = np.concatenate([self.stepped, np.zeros(grow, dtype=bool)])
            self.last_seen = np.concatenate([self.last_seen, np.zeros(grow)])
            self.last_hb = np.concatenate([self.last_hb, np.full(grow, np.nan)])
            self.seq_started = np.concatenate([self.seq_started, np.full(grow, -1, dtype=np.int64)])
            self.seq_completed = np.concatenate([self.seq_completed, np.full(grow, -1, dtype=np.int64)])
            self.hb_done = np.concatenate([self.hb_done, np.full(grow, -1, dtype=np.int64)])
            self.incarnation = np.concatenate([self.incarnation, np.full(grow, -1, dtype=np.int64)])
            self.phase_at = np.concatenate([self.phase_at, np.zeros(grow)])
            self.phase_step = np.concatenate([self.phase_step, np.full(grow, -1, dtype=np.int64)])
            self.pause_in_at = np.concatenate([self.pause_in_at, np.full(grow, -np.inf)])
            self.seq_at = np.concatenate([self.seq_at, np.zeros(grow)])
        self.rank_at[slot] = rank
        self.rank_progress[slot] = ts
        self.last_seen[slot] = ts
        self.nodes.append(None)
        self.rank_phase.append(None)
        self.first_seen.append(ts)
        return slot

    def reset_rank(self, slot: int) -> None:
        """Forget a rank's positions (a new process of it: its counters start again)."""
        old = int(self.last_step[slot])
        if old >= 0:
            self.known -= 1
            if old > self.max_step:
                self.above -= 1
        self.last_step[slot] = -1
        self.phase_step[slot] = -1  # (the old process's: its new one is judged by time until it says again)
        self.stepped[slot] = False
        self.seq_started[slot] = self.seq_completed[slot] = self.hb_done[slot] = -1
        for seqs in self.pg_seq.values():
            seqs.pop(slot, None)

    def _one_by_one(self, slots, steps, ts, nodes, first: bool, step_times, phases) -> None:
        """A run event by event: each rank's row, then whether the counter passed (the reference the column road
        reproduces)."""
        for i, (slot, step, t, node) in enumerate(zip(slots, steps, ts, nodes)):
            self.rank_row(slot, step, t, node)
            passed = self.counter_passed()
            if passed is not None:
                self.counted_advance(i, passed, first, step_times, phases, ts)

    def quiet_steps(self, ranks: list[int], steps: list[int], ts: list[float], step_times: list[float],
                     phases: list[str], nodes: list[str | None], world_sizes: list[int | None], *,
                     layout=None, ts_array: np.ndarray | None = None, newest: int | None = None) -> None:
        """``update_steps`` while no hang is open: no alert, per-rank values become array writes. ``layout``:
        who reported them (models/steps/layout.py), or None; ``ts_array``: ``ts`` as a float64 array, or None;
        ``newest``: ``max(steps)``, or None."""
        if self.started_at is None:
            self.started_at = self.progress_ts = ts[0]
        latest = max(ts) if ts_array is None else float(ts_array.max())
        if latest > self.latest_ts:
            self.latest_ts = latest
        run = self._run_slots
        if layout is not None and run is not None and run[0] is layout:
            slots, unique = run[1], run[2]
        else:
            slots = list(map(self.slot_of_rank.get, ranks))
            if None in slots:
                for i, slot in enumerate(slots):
                    if slot is None:
                        slots[i] = self.slot_for(ranks[i], ts[i])
            unique = len(slots) == 1 or len(set(slots)) == len(slots)
            run = self._run_slots = [layout, slots, unique, None]
        self.has_step_events = True
        for w in reversed(world_sizes):
            if w is not None:
                self.world_size = w
                break
        first = not self.completed_any
        self.completed_any = True
        top = self.max_step
        if first and ts[0] > self.progress_ts:
            self.progress_ts = ts[0]
        if newest is None:
            newest = max(steps)
        if len(slots) <= SMALL_RUN and len(slots) > 1:
            # A small job's run (a step's few events): event by event, the reference the column road below
            # reproduces, without its dozen numpy calls on arrays of a few elements.
            if newest <= top:  # no rank passes the counter: the per-rank writes only
                for slot, step, t, node in zip(slots, steps, ts, nodes):
                    self.rank_row(slot, step, t, node)
                return
            self._one_by_one(slots, steps, ts, nodes, first, step_times, phases)
            return
        if newest <= top or len(slots) == 1 or not unique:
            if newest > top and len(slots) > 1:  # a rank twice (merged envelopes): event by event
                self._one_by_one(slots, steps, ts, nodes, first, step_times, phases)
                return
            if len(slots) == 1:  # a lone event: plain writes (numpy's per-call cost dwarfs one element)
                self.rank_row(slots[0], steps[0], ts[0], nodes[0])
            else:
                self.rank_columns(slots, steps, ts, nodes, unique=unique, ts_a=ts_array)
            passed = self.counter_passed() if newest > top else None
            if passed is not None:
                self.counted_advance(0, passed, first, step_times, phases, ts)
            return
        # Each rank once: find, by cumulative counts, the events after which the ranks' median passed
        # the counter (what event-by-event processing finds), then write the columns.
        if run[3] is None:
            run[3] = np.array(slots, dtype=np.int64)
        idx = run[3]
        steps_a = np.array(steps, dtype=np.int64)
        cur = self.last_step[idx]
        fresh = cur < 0
        if not fresh.any():  # no new rank: the counts only grow, so the end of the run decides
            k = self.known
            if self.above + int(((steps_a > top) & (cur <= top)).sum()) < k - (k - 1) // 2:
                self.rank_columns(slots, steps, ts, nodes, unique=True, idx=idx, steps_a=steps_a, ts_a=ts_array)
                return
        known = self.known + np.cumsum(fresh)
        above, lo, state, passes = self.above, 0, None, []
        while lo < len(slots):
            crossed = above + np.cumsum((steps_a[lo:] > top) & (cur[lo:] <= top))
            k = known[lo:]
            hit = np.flatnonzero((crossed > 0) & (crossed >= k - (k - 1) // 2))
            if not len(hit):
                break
            i = lo + int(hit[0])
            if state is None:
                state = self.last_step[:self.n].copy()
            state[idx[lo:i + 1]] = np.maximum(state[idx[lo:i + 1]], steps_a[lo:i + 1])
            values = state[state >= 0]
            mid = (len(values) - 1) // 2
            top = int(np.partition(values, mid)[mid])
            passes.append((i, top))
            above, lo = int((state > top).sum()), i + 1
        self.rank_columns(slots, steps, ts, nodes, unique=True, idx=idx, steps_a=steps_a, ts_a=ts_array)
        for i, passed in passes:
            self.counted_advance(i, passed, first, step_times, phases, ts)

    def counted_advance(self, i: int, passed: int, first: bool, step_times: list[float], phases: list[str],
                         ts: list[float]) -> None:
        """The job's counter passed to ``passed`` at the i-th event of a run (no hang open)."""
        if not (first and i == 0) and self.max_step >= 0 and phases[i] == "train" and self.phase == "train":
            self.step_times.append(step_times[i])
        self.set_counter(passed)
        self.advances.append((passed, ts[i]))
        if ts[i] > self.progress_ts:
            self.progress_ts = ts[i]

    def rank_row(self, slot: int, step: int, ts: float, node: str | None) -> bool:
        """One step event's per-rank values; whether the rank's step advanced."""
        if ts > self.last_seen[slot]:
            self.last_seen[slot] = ts
        if node is not None:
            self.nodes[slot] = node
        return self.advance_rank(slot, step, ts)

    def rank_columns(self, slots: list[int], steps: list[int], ts: list[float], nodes: list[str | None], *,
                     unique: bool | None = None, idx: np.ndarray | None = None,
                     steps_a: np.ndarray | None = None, ts_a: np.ndarray | None = None) -> None:
        """Per-rank latest values of several step events (their ranks' slots) as array writes; ``unique``
        (each slot once), ``idx``, ``steps_a`` and ``ts_a`` (``slots``, ``steps`` and ``ts`` as arrays): when the
        caller knows them."""
        if idx is None:
            idx = np.array(slots, dtype=np.int64)
        if ts_a is None:
            ts_a = np.array(ts, dtype=np.float64)
        if unique is None:
            unique = len(set(slots)) == len(slots)
        if unique:  # each rank once (the usual envelope): a plain fancy-index write does what .at does
            self.last_seen[idx] = np.maximum(self.last_seen[idx], ts_a)
        else:
            np.maximum.at(self.last_seen, idx, ts_a)
        node_list = self.nodes
        first_slot = self._first_of_run(slots)
        if first_slot is not None and all_named(nodes):
            node_list[first_slot:first_slot + len(slots)] = nodes  # consecutive slots: one slice write
        else:
            for slot, node in zip(slots, nodes):
                if node is not None:
                    node_list[slot] = node
        if steps_a is None:
            steps_a = np.array(steps, dtype=np.int64)
        if unique:
            self.advance_ranks(idx, steps_a, ts_a)
        else:
            # Several steps of the same ranks (merged envelopes): one step at a time, each usually
            # once per rank; a run with a rank twice goes event by event.
            cuts = [0, *(np.flatnonzero(steps_a[1:] != steps_a[:-1]) + 1).tolist(), len(slots)]
            for lo, hi in zip(cuts, cuts[1:]):
                part = idx[lo:hi]
                if len(set(slots[lo:hi])) == hi - lo:
                    self.advance_ranks(part, steps_a[lo:hi], ts_a[lo:hi])
                else:
                    for slot, step, t in zip(slots[lo:hi], steps[lo:hi], ts[lo:hi]):
                        self.advance_rank(slot, step, t)

    def _first_of_run(self, slots: list[int]) -> int | None:
        """The first of ``slots`` when they are consecutive, else None (worked out once per slots list)."""
        memo = self._consecutive
        if memo is not None and memo[0] is slots:
            return memo[1]
        first = slots[0]
        if slots != list(range(first, first + len(slots))):
            first = None
        self._consecutive = (slots, first)
        return first

    def advance_ranks(self, idx: np.ndarray, steps: np.ndarray, ts: np.ndarray) -> None:
        """``_rank_step`` for distinct slots at once."""
        current = self.last_step[idx]
        advanced = steps > current
        if advanced.any():
            top = self.max_step
            self.known += int((advanced & (current < 0)).sum())
            self.above += int((advanced & (current <= top) & (steps > top)).sum())
            self.stepped[idx[advanced & (current >= 0)]] = True
            self.last_step[idx[advanced]] = steps[advanced]
            self.rank_progress[idx[advanced]] = ts[advanced]

    def advance_rank(self, slot: int, step: int, ts: float) -> bool:
        old = self.last_step[slot]
        if step > old:
            if old >= 0:
                self.stepped[slot] = True
            else:
                self.known += 1
            if old <= self.max_step < step:
                self.above += 1
            self.last_step[slot] = step
            self.rank_progress[slot] = ts
            return True
        return False

    def counter_passed(self) -> int | None:
        """The ranks' median step when it passed the job's counter (after the latest rank writes), else None."""
        known = self.known
        if not self.above or self.above < known - (known - 1) // 2:
            return None  # fewer than half the ranks are above it: the median cannot be
        if self.n <= SMALL_RUN:  # a few ranks: the same order statistic by a sort, without numpy's per-call cost
            steps = sorted(s for s in self.last_step[:self.n].tolist() if s >= 0)
            median = steps[(len(steps) - 1) // 2]
            return median if median > self.max_step else None
        steps = self.last_step[:self.n]
        steps = steps[steps >= 0]
        k = (len(steps) - 1) // 2
        median = int(np.partition(steps, k)[k])
        return median if median > self.max_step else None

    def counter_without_passed(self) -> tuple[int, float] | None:
        """The counter with the ranks that cannot be holding the job left out: ``(step, since)``, where that is
        further than the counter, else None. A rank nothing was heard from (no step, heartbeat or collective) since
        another rank completed a later step than its own is not where it was: synchronous ranks cannot complete
        step N before every rank reached step N's collectives, so its events are in flight (its producer stalled,
        they come late). Of 2 ranks the lower median is the lower rank: one producer's 30 s stall read as the job's
        (gen2:straggler-2-ranks, late 1% by 30s). A rank hung with live heartbeats is heard from after the others'
        last steps, and a dead one stops them at its next collective: both hold it as before. ``since``: when the
        other ranks' median passed ``step`` at the latest (those at or past it completed their latest steps by
        then)."""
        n = self.n
        if n < 2:
            return None
        steps, seen, progress = self.last_step[:n], self.last_seen[:n], self.rank_progress[:n]
        known = steps >= 0
        # The latest completion of a higher step, per rank: over the ranks sorted by step, a suffix maximum.
        order = np.argsort(steps, kind="stable")
        done = np.where(known[order], progress[order], -np.inf)
        latest_above = np.append(np.maximum.accumulate(done[::-1])[::-1], -np.inf)
        passed = known & (latest_above[np.searchsorted(steps[order], steps, side="right")] > seen)
        if not passed.any():
            return None
        held = known & ~passed  # (never empty: the highest step's ranks are not passed)
        values = np.sort(steps[held])
        median = int(values[(len(values) - 1) // 2])
        if median <= self.max_step:
            return None
        need = len(values) - (len(values) - 1) // 2  # ranks at or past the median: it passed once they all had
        return median, float(np.sort(progress[held & (steps >= median)])[need - 1])

    def set_counter(self, step: int) -> None:
        self.max_step = step
        if self.n <= SMALL_RUN:
            self.above = sum(1 for s in self.last_step[:self.n].tolist() if s > step)
        else:
            self.above = int((self.last_step[:self.n] > step).sum())

    def observe_heartbeat(self, slot: int, event: HeartbeatEvent) -> None:
        """A heartbeat's positions (its step is the caller's: a first one is a baseline, not progress)."""
        self.has_heartbeats = True
        last = self.last_hb[slot]
        if not np.isnan(last) and event.ts > last:
            self.hb_gaps.append(event.ts - last)
        if np.isnan(last) or event.ts > last:
            self.last_hb[slot] = event.ts
        if event.incarnation is not None and event.incarnation > self.incarnation[slot]:
            self.incarnation[slot] = event.incarnation
        if event.seq_started is not None and event.seq_started > self.seq_started[slot]:
            self.seq_started[slot] = event.seq_started
            self.seq_at[slot] = event.ts
        if event.seq_completed is not None and event.seq_completed > self.seq_completed[slot]:
            self.seq_completed[slot] = event.seq_completed
        if event.seq_completed is not None and event.seq_completed > self.hb_done[slot]:
            self.hb_done[slot] = event.seq_completed
        if event.pgs:
            self.observe_pgs(slot, event.pgs)
            if event.pg_desc:
                for name, desc in event.pg_desc:
                    if name in self.pg_seq:  # bounded like the groups themselves
                        self.pg_desc[name] = desc
        self.set_rank_phase(slot, event.phase, event.ts, event.step)

    def set_rank_phase(self, slot: int, phase: str | None, ts: float, step: int | None = None) -> None:
        """A rank's own phase (its heartbeat's, or its rank ``phase`` event), and since when (and which step) it
        holds."""
        was = self.rank_phase[slot]
        if phase != was:
            # (a heartbeat's step may lag the rank's step events: the later of the two)
            self.phase_step[slot] = max(step, int(self.last_step[slot])) if isinstance(step, int) and step >= 0 else -1
            if phase in PAUSE_PHASES:
                self.pause_in_at[slot] = ts
            elif was in PAUSE_PHASES and phase is not None and ts > self.pause_in_at[slot]:
                self.marked_pauses.append(ts - float(self.pause_in_at[slot]))
            self.phase_at[slot] = ts
        self.rank_phase[slot] = phase

    def usual_pause(self) -> float:
        """The median of the job's recent marked pauses (0: none seen yet)."""
        return float(np.median(np.fromiter(self.marked_pauses, float))) if self.marked_pauses else 0.0

    def pause_stragglers(self, now: float, heartbeat_timeout: float) -> PauseStragglers | None:
        """In a pause (a job-wide eval/checkpoint, or ranks' own): the ranks still in it while most ranks have left
        it (ranks alive, or torn down after the pause began), else None. A rank left it when it
        reported the pause and then a training phase, or when it reported the pause and waits in a collective
        past the one the lowest rank still in it is at. Ranks that never reported the pause never left it (rank 0
        saving alone while the others wait in the next collective, their heartbeats saying ``train``): no verdict."""
        n = self.n
        if n < 2 or not self.has_heartbeats:
            return None
        phases = self.rank_phase[:n]
        in_phase = np.fromiter((ph in PAUSE_PHASES for ph in phases), bool, count=n)
        trains = np.fromiter((ph in TRAINING_PHASES for ph in phases), bool, count=n)
        job_wide = self.phase in PAUSE_PHASES
        if not in_phase.any() and not job_wide:
            return None
        alive = (min(self.latest_ts, now) - self.last_seen[:n]) < heartbeat_timeout
        if job_wide:
            start, pause = self.job_phase.since, self.phase
        else:
            start = float(self.pause_in_at[:n][in_phase & alive].min()) if (in_phase & alive).any() else np.inf
            pause = next(ph for ph in phases if ph in PAUSE_PHASES)
        # Ranks heard from a heartbeat timeout into the pause and silent since were torn down (a watchdog): where
        # they were last is still where they were.
        live = alive | (self.last_seen[:n] >= start + heartbeat_timeout)
        reported = self.pause_in_at[:n] >= start
        left_phase = live & trains & reported & (self.phase_at[:n] >= start)
        seq = self.seq_started[:n]
        inside = live & ~left_phase & (in_phase | (job_wide & ~trains))
        left_seq = np.zeros(n, dtype=bool)
        if inside.any() and (seq[inside] >= 0).all():
            # Past the collective the lowest of them is at, issued since the pause began: waiting after it.
            low = int(seq[inside].min())
            left_seq = live & ~left_phase & reported & (seq > low) & (self.seq_at[:n] >= start)
            inside &= ~left_seq
        left = left_phase | left_seq
        count = int(live.sum())
        if not inside.any() or 2 * int(left.sum()) <= count:
            return None
        left_at = np.where(left_phase, self.phase_at[:n], self.seq_at[:n])[left]
        since = float(np.sort(left_at)[count // 2])  # when more than half the live ranks had left
        return PauseStragglers(inside=inside, since=since, phase=pause, left=int(left.sum()), began=float(start))

    def observe_pgs(self, slot: int, pgs) -> None:
        for name, started, completed, ranks in pgs:
            seqs = self.pg_seq.get(name)
            if seqs is None:
                if len(self.pg_seq) >= MAX_PGS or (self.max_pgs is not None and len(self.pg_seq) >= self.max_pgs):
                    self.capped["process_groups_per_job" if len(self.pg_seq) >= MAX_PGS else "process_groups_total"] += 1
                    continue
                seqs = self.pg_seq[name] = {}
                self.pg_ranks[name] = None
            if ranks is not None and self.pg_ranks[name] is None:
                if self.pg_rank_entries + len(ranks) > MAX_PG_RANK_ENTRIES:
                    self.capped["pg_ranks_per_job"] += 1
                else:
                    self.pg_ranks[name] = ranks
                    self.pg_rank_entries += len(ranks)
            old = seqs.get(slot)
            if old is None:
                seqs[slot] = (started, completed)
            elif started > old[0] or completed > old[1]:
                seqs[slot] = (max(started, old[0]), max(completed, old[1]))
            if name == DEFAULT_PG:  # the default group's numbers are also the top-level ones
                if started > self.seq_started[slot]:
                    self.seq_started[slot] = started
                    self.seq_at[slot] = self.last_seen[slot]
                if completed > self.seq_completed[slot]:
                    self.seq_completed[slot] = completed

    def clamp_future(self, now: float) -> None:
        """Times stamped ahead of the clock (a host's clock hours off, a bad producer) become ``now``: a
        step stamped 23 h ahead would otherwise count as progress for 23 h and hide a real hang."""
        n = self.n
        for name in ("rank_progress", "last_seen", "last_hb"):
            values = getattr(self, name)
            values[:n] = np.minimum(values[:n], now)  # NaN (no heartbeat yet) stays NaN
        self.latest_ts = min(self.latest_ts, now)
        self.progress_ts = min(self.progress_ts, now)
        self.advances = deque(((s, min(t, now)) for s, t in self.advances), maxlen=self.advances.maxlen)

    def partial_stuck(self, now: float, stuck_after: float, heartbeat_timeout: float) -> np.ndarray | None:
        """Live ranks whose own step stopped while other ranks still complete steps, or None."""
        n = self.n
        step = self.last_step[:n]
        known = step >= 0
        quiet = (now - self.rank_progress[:n]) >= stuck_after
        if not (known & quiet).any():
            return None
        stepping = known & self.stepped[:n] & ~quiet
        if not stepping.any():
            return None
        live = (min(self.latest_ts, now) - self.last_seen[:n]) < heartbeat_timeout
        stuck = live & known & quiet & (step < self.max_step)
        if not stuck.any():
            return None
        # Only ranks the job left behind ``stuck_after`` ago or earlier: while a step's events
        # arrive, the ranks not yet reported are not stuck.
        steps = np.fromiter((a[0] for a in self.advances), dtype=np.int64, count=len(self.advances))
        times = np.fromiter((a[1] for a in self.advances), dtype=float, count=len(self.advances))
        idx = np.searchsorted(steps, step, side="right")  # first advance past each rank's step
        # Before the first advance kept: long ago if older advances were dropped (the deque is full), else at
        # the first one (the job's start: a rank whose first step report is late is not behind since then).
        before = -np.inf if len(self.advances) == self.advances.maxlen else times[0]
        passed_at = np.where(idx > 0, times[np.minimum(idx, len(times) - 1)], before)
        stuck &= (now - passed_at) >= stuck_after
        return stuck if stuck.any() else None

    def unseen_ranks(self, limit: int) -> tuple[int, ...]:
        """Ranks below the reported world size that never sent anything (listed up to the cap)."""
        if not self.has_heartbeats or self.world_size is None or self.n >= self.world_size:
            return ()
        out = []
        for r in range(self.world_size):
            if r not in self.slot_of_rank:
                out.append(r)
                if len(out) >= limit:
                    break
        return tuple(out)

    def position(self, rank: int) -> RankPosition:
        """Where ``rank`` was last seen, as the alert's evidence lists it (all None for a rank never seen)."""
        slot = self.slot_of_rank.get(rank)
        if slot is None:
            return RankPosition(rank=rank)
        hb = float(self.last_hb[slot])
        return RankPosition(
            rank=rank,
            node=self.nodes[slot],
            step=int(self.last_step[slot]) if self.last_step[slot] >= 0 else None,
            seq_started=int(self.seq_started[slot]) if self.seq_started[slot] >= 0 else None,
            seq_completed=int(self.seq_completed[slot]) if self.seq_completed[slot] >= 0 else None,
            last_heartbeat=None if np.isnan(hb) else round(hb, 6),
            last_seen=round(float(self.last_seen[slot]), 6),
        )

    def lost_nodes(self, silent: tuple[int, ...], limit: int) -> list[str]:
        """Nodes all of whose ranks are silent (node down or unreachable, as far as the job can tell)."""
        silent_set = set(silent)
        ranks_on: dict[str, list[bool]] = {}
        for slot in range(self.n):
            node = self.nodes[slot]
            if node is not None:
                ranks_on.setdefault(node, []).append(int(self.rank_at[slot]) in silent_set)
        if len(ranks_on) < 2:
            return []  # one node: the job's own silence, not a lost node
        return sorted(n for n, flags in ranks_on.items() if all(flags))[:limit]

