"""Gathering per-rank step events into one comparable step per peer group.

Ranks report the same step at slightly different times (and over different Kafka
messages). Peer comparison needs all of a step's ranks side by side, so each group keeps a
small, bounded set of open steps and closes one when every known rank has reported, when half
the group's ranks reported a step ``max_lag_steps`` newer, or when it has waited ``max_wait_seconds`` (or
``WAIT_SHARE`` of the job's own step time, if longer: at 2-minute steps a slow rank reports its step's end tens of
seconds after the others, and 3 steps of lag are 6 minutes, so the wait is what closes a step there).

The lag counts from the newest step *half the ranks* reached, not the newest any rank reached: in a
recording sorted by event time (an imported trace), a host whose clock runs seconds behind has its
events sorted many steps early, and judging on its lead alone would close every step before the other
hosts' ranks are in (their events dropped as late, a straggler among them never seen). A host whose
clock runs *ahead* has its events sorted many steps late: when events keep arriving more than
``max_lag_steps`` behind the half of the ranks, the lag grows to take them (up to ``pending_bound - 1``),
and shrinks back once none came for ``LAG_MEMORY`` steps (twice the steps of ``BURST_SECONDS`` if more).

``pending_bound`` is ``max_pending_steps``, or for a fast job as many steps as fit in ``max_pending_seconds``
of its pace (at most ``pending_steps_cap``, and ``PENDING_REPORTS`` rank reports): a producer that ships its
queue once a second sends a job of 15 ms steps ~65 steps at a time, in any order within the burst; a
recording sorted by host time whose hosts' clocks are 10 s apart has a 0.3 s job's ranks ~65 steps apart.
While a lag is learned, such a rank's events also come out of order, so a step that completes does not
close the older ones still waiting (as it does when ranks report in order: their missing events are then
lost); steps always close in order. A restart is a rank's own counter going back more than a burst
(``burst_steps``: ``BURST_SECONDS`` of the job's steps, at least ``max_pending_steps``), not the longer
``pending_bound``: a checkpoint 40 steps back is a restart, a host 60 steps late is not.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import groupby

import numpy as np

from .robust import upper_middle
from .settings import AssemblySettings  # noqa: F401  (defined in a light module; re-exported here)
from ..wire.events import StepEvent




NAN = float("nan")
INF = float("inf")
#: Rank reports the seconds may hold open per group (~100 MB): a wide group of fast steps (or one whose ranks lie
#: about their step times) holds fewer than ``pending_steps_cap`` steps, never fewer than ``max_pending_steps``.
PENDING_REPORTS = 262_144
#: Steps (of the half of the ranks) after the last event that came late before a learned lag is dropped (or
#: twice the steps of ``BURST_SECONDS``, if more: a rank's bursts may come that far apart).
LAG_MEMORY = 100
#: The longest flush interval of a rank's producer the learned lag outlasts between bursts (a second is usual).
BURST_SECONDS = 2.0
#: The share of the job's own step time (its pace) an incomplete step waits at least, where that is longer than
#: ``max_wait_seconds``: a 30 % straggler at 120 s steps ends its step 36 s after its peers. At most
#: ``WAIT_CAP_SECONDS`` (a rank reporting absurd step times cannot hold steps open for hours).
WAIT_SHARE = 0.5
WAIT_CAP_SECONDS = 300.0


@dataclass(frozen=True, slots=True, eq=False)
class GroupStep:
    """One step of one peer group, all reporting ranks side by side (NaN where not reported)."""

    job: str
    group: str
    step: int
    #: When the step ended: the (upper) median of the ranks' step-end times. Not the latest: one host whose
    #: clock runs seconds ahead would move every alert time of the job by its offset.
    ts: float
    ranks: np.ndarray  # int64, sorted
    step_time: np.ndarray
    compute_time: np.ndarray
    comm_time: np.ndarray
    data_time: np.ndarray
    tokens: np.ndarray
    nodes: tuple[str | None, ...]
    phase: str  # "train" unless some rank reported another phase
    #: Ranks of the group known to the assembler that did not report this step (closed by lag or
    #: time: late, lost, or no longer running); 0 when complete or while membership is being learned.
    missing: int = 0
    #: Where ``comm_time`` came from: ``step`` (the step events) or ``collective`` (the ranks' own
    #: collective durations, models/steps/arrival.py), with the (process group, op) used.
    comm_source: str = "step"
    comm_ops: tuple[str, str] | None = None
    #: The step-end time of ``ranks[0]`` on its own host's clock: a rate from two steps' ``ts`` could subtract
    #: two hosts' clocks (the latest rank differs), one from the same rank's ``lowest_ts`` cannot.
    lowest_ts: float = NAN
    #: Medians of this step taken by the rules so far, by name (models/steps/robust.py ``step_median``); a step
    #: made by ``dataclasses.replace`` starts without any.
    medians: dict[str, float] = field(default_factory=dict, init=False, repr=False, compare=False)
    #: The signal the step rules judge it on, once chosen (models/steps/straggler_verdict.py ``choose_signal``): [] until then.
    chosen: list = field(default_factory=list, init=False, repr=False, compare=False)
    #: Arrays derived from the step's columns, taken once by name (models/steps/robust.py ``time_before``).
    derived: dict = field(default_factory=dict, init=False, repr=False, compare=False)


class _OpenStep:
    """One step's reports so far, kept as columns (ts, step_time, compute_time, comm_time, data_time, tokens,
    node; NaN where absent) that batches extend by slices: no tuple per rank, and no transposing at close."""

    __slots__ = ("rows", "cols", "first_seen", "phase")

    def __init__(self, first_seen: float) -> None:
        #: rank -> its latest report's position in ``cols`` (a duplicate points at the later copy).
        self.rows: dict[int, int] = {}
        self.cols: tuple[list, ...] = ([], [], [], [], [], [], [])
        self.first_seen = first_seen
        self.phase = "train"

    def put(self, ranks, cols, lo: int, hi: int) -> None:
        """Reports ``lo:hi`` of ``cols`` (columns as above), by ``ranks`` (``ranks[k]`` for ``cols[lo + k]``)."""
        base = len(self.cols[0])
        for mine, col in zip(self.cols, cols):
            mine.extend(col[lo:hi])
        self.rows.update(zip(ranks, range(base, base + hi - lo)))
        if base + hi - lo > 2 * len(self.rows) + 64:  # copies a duplicating sender left behind: bounded
            order = sorted(self.rows)
            self.cols = self.columns(order)
            self.rows = dict(zip(order, range(len(order))))

    def put_one(self, rank: int, cols, i: int) -> None:
        """``put`` of report ``i`` alone."""
        self.rows[rank] = len(self.cols[0])
        for mine, col in zip(self.cols, cols):
            mine.append(col[i])
        if len(self.cols[0]) > 2 * len(self.rows) + 64:
            self.put((), cols, i, i)  # compacts

    def columns(self, order: list[int]) -> tuple[list, ...]:
        """The columns of the latest reports of the ranks in ``order``."""
        if len(self.cols[0]) == len(self.rows) and list(self.rows) == order:
            return self.cols  # one report per rank (positions 0, 1, ...), added in ``order`` (the usual step)
        at = list(map(self.rows.__getitem__, order))
        return tuple(list(map(col.__getitem__, at)) for col in self.cols)


def step_row(event: StepEvent) -> tuple:
    """What an open step keeps of one rank's step event: its columns, one value each (``add_columns``)."""
    return ((event.ts,), (event.step_time,), (_nan(event.compute_time),), (_nan(event.comm_time),),
            (_nan(event.data_time),), (_nan(event.tokens),), (event.node,))


class StepAssembler:
    """Per (job, group) step gathering; ``add`` and ``flush`` return the steps that closed."""

    def __init__(self, *, job: str, group: str, max_lag_steps: int = 3, max_wait_seconds: float = 30.0,
                 max_pending_steps: int = 16, max_pending_seconds: float = 30.0, pending_steps_cap: int = 256) -> None:
        self.job = job
        self.group = group
        self.max_lag_steps = max_lag_steps
        self.max_wait_seconds = max_wait_seconds
        #: Seconds an incomplete step waits: ``max_wait_seconds``, or ``WAIT_SHARE`` of a slow job's pace (``_learn_pace``).
        self.wait_seconds = max_wait_seconds
        self.max_pending_steps = max_pending_steps
        self.max_pending_seconds = max_pending_seconds
        self.pending_steps_cap = pending_steps_cap
        #: Steps held open at most now: ``max_pending_steps``, or more for a fast job (``_learn_pace``).
        self.pending_bound = max_pending_steps
        #: Steps of one producer's burst (``BURST_SECONDS`` of the job, at least ``max_pending_steps``): within one a
        #: rank's events may come in any order; a rank's counter going further back is a restart (``_learn_pace``).
        self.burst_steps = max_pending_steps
        self._lag_memory = LAG_MEMORY  # steps a learned lag outlasts the last late event
        #: The job's seconds per step (a moving average of the step times of closed steps), NaN until one closed.
        self._pace = NAN
        self.members: set[int] = set()
        self.world_size_hint: int | None = None
        self._open: dict[int, _OpenStep] = {}
        self._first_step: int | None = None
        self._newest_step = -1
        #: The newest step half the group's ranks reported (the newest any reported, while membership is
        #: learned): the lag that closes incomplete steps counts from it.
        self._quorum_step = -1
        #: Steps added to ``max_lag_steps`` while events keep arriving further behind (and when it was last
        #: needed, as a quorum step).
        self._extra_lag = 0
        self._extra_seen = -1
        self.last_closed = -1
        #: Each rank's newest reported step: a restart is a rank's own step counter going far back, not a
        #: step far behind the others' (a host whose events come late, e.g. a clock ahead in a recording
        #: sorted by event time).
        self._rank_step: dict[int, int] = {}
        self.late_events = 0
        self.restarts = 0
        #: The last closed step's ranks, as a list and as its read-only array: a step of the same ranks (most)
        #: shares the array, so the rules see the same ranks by identity (``same_ranks``), not by a compare.
        self._last_order: list[int] = []
        self._last_ranks: np.ndarray = _ranks_array([])

    def _expected(self) -> int | None:
        """How many ranks a complete step has, once membership is known."""
        if self.world_size_hint is not None and self.group == "":
            return self.world_size_hint
        # Membership is learned from the first few steps; before that, only lag closes steps.
        if self._first_step is None or self._newest_step < self._first_step + self.max_lag_steps:
            return None
        return len(self.members)

    def _quorum(self, expected: int | None) -> int:
        """Ranks that must report a step before the lag counts from it."""
        return 1 if expected is None else max(1, expected // 2)

    def add(self, event: StepEvent) -> list[GroupStep]:
        closed = self.add_columns((event.rank,), (event.step,), (event.world_size,), (event.phase,), step_row(event))
        return closed[0][1] if closed else []

    def add_columns(self, ranks, steps, world_sizes, phases, cols) -> list[tuple[int, list[GroupStep]]]:
        """``add`` for several events in order (columns of equal length; ``cols``: their other columns, in the
        order of ``step_row``).

        Returns ``(i, steps closed by the i-th event)`` for the events that closed steps.

        Events arrive in runs of one step (a batch envelope holds one step of many ranks): the
        first event of a run goes through ``_add_one``; the rest of the run, while the size of a
        complete step cannot change under it, is added in bulk, up to the event that completes
        the step (the same state and closes as one by one).
        """
        out = []
        n = len(steps)
        i = 0
        if n and steps.count(steps[0]) == n:  # one step throughout (the usual envelope)
            runs = ((steps[0], n),)
        else:
            runs = ((step, sum(1 for _ in run)) for step, run in groupby(steps))
        for step, length in runs:
            e = i + length
            closed = self._add_one(ranks[i], step, world_sizes[i], phases[i], cols, i)
            if closed:
                out.append((i, closed))
            p = i + 1
            while p < e:
                if step <= self.last_closed:
                    if step < self.last_closed - self.burst_steps:  # maybe a restart: as one by one
                        closed = self._add_one(ranks[p], step, world_sizes[p], phases[p], cols, p)
                        if closed:
                            out.append((p, closed))
                        p += 1
                        continue
                    self.late_events += e - p  # the rest of the run is late
                    break
                open_step = self._open.get(step)
                expected = self._bulk_expected(ranks, world_sizes, p, e)
                if open_step is None or expected is False:
                    closed = self._add_one(ranks[p], step, world_sizes[p], phases[p], cols, p)
                    if closed:
                        out.append((p, closed))
                    p += 1
                    continue
                if expected is None:
                    q = e
                else:
                    need = expected - len(open_step.rows)
                    if need <= 0:
                        closed = self._add_one(ranks[p], step, world_sizes[p], phases[p], cols, p)
                        if closed:
                            out.append((p, closed))
                        p += 1
                        continue
                    q = min(e, p + need)
                    # Stop where the step reaches its quorum too (the lag then closes older steps there).
                    if step > self._quorum_step:
                        to_quorum = self._quorum(expected) - len(open_step.rows)
                        if to_quorum > 0:
                            q = min(q, p + to_quorum)
                chunk_ranks = ranks[p:q]
                self.members.update(chunk_ranks)
                self._rank_step.update(dict.fromkeys(chunk_ranks, step))
                for w in reversed(world_sizes[p:q]):
                    if w is not None:
                        self.world_size_hint = w
                        break
                open_step.put(chunk_ranks, cols, p, q)  # duplicates: the later copy wins
                chunk_phases = phases[p:q]
                if chunk_phases.count("train") != len(chunk_phases):
                    for ph in reversed(chunk_phases):
                        if ph != "train":
                            open_step.phase = ph
                            break
                reported = len(open_step.rows)
                reached = expected is not None and step > self._quorum_step and reported >= self._quorum(expected)
                if reached:
                    self._quorum_step = step
                # With ``need`` events the step completes only if each added a rank, i.e. at the last.
                if expected is not None and reported >= expected:
                    closed = self._close_complete(step)  # none while older steps wait for a late host
                    if closed:
                        out.append((q - 1, closed))
                elif reached and self._open and min(self._open) <= step - self._lag():
                    out.append((q - 1, self._close_due(step - self._lag())))
                p = q
            i = e
        assert i == n
        return out

    def _bulk_expected(self, ranks, world_sizes, lo: int, hi: int):
        """The size of a complete step while events ``lo:hi`` of a run (not its first) are added,
        if that cannot change under them (``None``: not known yet); ``False`` if it might."""
        hint = self.world_size_hint
        if self.group == "":
            sizes = set(world_sizes[lo:hi])
            sizes.discard(None)
            if sizes and sizes != {hint}:
                return False  # the hint, and so the size, may change
            if hint is not None:
                return hint
        expected = self._expected()
        if expected is not None and not self.members.issuperset(ranks[lo:hi]):
            return False  # membership may grow
        return expected

    def _add_one(self, rank, step, world_size, phase, cols, i: int) -> list[GroupStep] | None:
        """One event (``cols[.][i]``): the steps it closed, if any."""
        open_steps = self._open
        behind = self._quorum_step - step
        if behind > self.max_lag_steps and step >= self.last_closed - self.pending_bound:
            # Behind the half of the ranks by more than the lag (a late host): wait that much longer.
            extra = min(self.pending_bound - 1 - self.max_lag_steps, behind - self.max_lag_steps + 1)
            # Any late event keeps the lag learned (not only one as late as the worst): a host whose events come
            # in bursts trails by a different amount each time, and forgetting between bursts drops the next.
            self._extra_lag, self._extra_seen = max(extra, self._extra_lag), self._quorum_step
        if step <= self.last_closed:
            if step < self.last_closed - self.burst_steps and self._went_back(rank, step):
                # The rank's step counter went far back: the job restarted from a checkpoint.
                self._reset()
                self.restarts += 1
            else:
                self.late_events += 1
                self._rank_step[rank] = step
                return None
        if self._first_step is None:
            self._first_step = step
        self.members.add(rank)
        self._rank_step[rank] = step
        if world_size is not None:
            self.world_size_hint = world_size
        advanced = step > self._newest_step
        if advanced:
            self._newest_step = step
        open_step = open_steps.get(step)
        if open_step is None:
            open_step = open_steps[step] = _OpenStep(cols[0][i])
        open_step.put_one(rank, cols, i)  # a duplicate replaces the earlier copy
        if phase != "train":
            open_step.phase = phase
        closed = None
        expected = self._expected()
        reached = step > self._quorum_step and len(open_step.rows) >= self._quorum(expected)
        if reached:
            self._quorum_step = step
        if expected is not None and len(open_step.rows) >= expected:
            closed = self._close_complete(step)
        limit = self._quorum_step - self._lag()
        # Every open step is newer than the limit after each add, so only a step reaching its quorum
        # (the limit moved) or an old one can make a step due; usually nothing is: skip the scan.
        if (reached or step <= limit) and open_steps and min(open_steps) <= limit:
            closed = (closed or []) + self._close_due(limit)
        while len(open_steps) > self.pending_bound:
            closed = (closed or []) + self._close_due(min(open_steps))
        return closed

    def _went_back(self, rank, step: int) -> bool:
        """Whether ``rank``'s own step counter went far back (a restart). A rank that reported nothing yet, or
        keeps counting up behind the others (its events come late), did not restart; after a restart every
        rank's counter goes back, so the first known rank's next event finds it."""
        last = self._rank_step.get(rank)
        return last is not None and step < last - self.burst_steps

    def flush_due(self) -> float:
        """The earliest time ``flush`` closes anything (``inf``: no open step); only ``add`` moves it."""
        if not self._open:
            return float("inf")
        return min(o.first_seen for o in self._open.values()) + self.wait_seconds

    def _lag(self) -> int:
        """Steps behind the half of the ranks at which an incomplete step closes."""
        if self._extra_lag and self._quorum_step - self._extra_seen > self._lag_memory:
            self._extra_lag = 0  # no late host for a while
        return self.max_lag_steps + self._extra_lag

    def close_complete(self) -> list[GroupStep]:
        """Close the open steps through the newest one every known rank reported, oldest first (at the job's
        ``end``: a learned lag holds complete steps for a late host, ~100 steps at 20 ms; what follows the newest
        complete one, ranks' last events lost or still in flight, stays open)."""
        expected = self._expected()
        if expected is None:
            return []
        complete = [s for s, o in self._open.items() if len(o.rows) >= expected]
        return self._close_through(max(complete)) if complete else []

    def flush(self, now: float) -> list[GroupStep]:
        """Close steps that have waited too long (called from the timer)."""
        wait = self.wait_seconds
        stale = [s for s, o in self._open.items() if now - o.first_seen >= wait]
        return self._close_through(max(stale)) if stale else []

    def _close_complete(self, step: int) -> list[GroupStep]:
        """``step`` just got every rank: close it and the open steps before it (ranks report in order, so their
        missing events are lost), or, with a learned lag (a late host: its events also come out of order, e.g. a
        burst a flush interval late), only what ``_close_due`` closes: older steps wait for their late ranks and
        ``step`` waits for them (steps close in order)."""
        limit = self._quorum_step - self._lag()  # (drops a lag no longer needed first)
        if not self._extra_lag:
            return self._close_through(step)
        return self._close_due(limit)

    def _close_due(self, limit: int) -> list[GroupStep]:
        """``_close_through(limit)``, and with a learned lag the complete steps right after (``_close_complete``
        held them behind an incomplete one)."""
        out = self._close_through(limit)
        if self._extra_lag and self._open:
            expected = self._expected()
            if expected is not None:
                last = None
                for s in sorted(self._open):
                    if len(self._open[s].rows) < expected:
                        break
                    last = s
                if last is not None:
                    out.extend(self._close_through(last))
        return out

    def _close_through(self, step: int) -> list[GroupStep]:
        """Close every open step up to and including ``step``, oldest first."""
        due = sorted(s for s in self._open if s <= step)
        out = []
        for s in due:
            out.append(self._build(s, self._open.pop(s)))
            self.last_closed = max(self.last_closed, s)
        return out

    def _build(self, step: int, open_step: _OpenStep) -> GroupStep:
        order = sorted(open_step.rows)
        ts, step_time, compute_time, comm_time, data_time, tokens, nodes = open_step.columns(order)
        n = len(order)
        self._learn_pace(step_time[0])
        if order != self._last_order:
            self._last_order, self._last_ranks = order, _ranks_array(order)
        return GroupStep(
            job=self.job,
            group=self.group,
            step=step,
            ts=upper_middle(ts),
            ranks=self._last_ranks,
            step_time=_floats(step_time, n),
            compute_time=_floats(compute_time, n),
            comm_time=_floats(comm_time, n),
            data_time=_floats(data_time, n),
            tokens=_floats(tokens, n),
            nodes=tuple(nodes),
            phase=open_step.phase,
            missing=max((self._expected() or 0) - len(order), 0),
            lowest_ts=ts[0],
        )

    def _learn_pace(self, step_time) -> None:
        """Move the job's pace towards one rank's step time (one per closed step: O(1)), and the bound on open
        steps with it. Step times, not the steps' ``ts``: those come from several hosts' clocks."""
        if step_time is None or not 0.0 < step_time < INF:  # NaN, 0 or garbage: no pace from it
            return
        pace = self._pace
        self._pace = pace = step_time if pace != pace else pace + (step_time - pace) / 16
        self.pending_bound = max(self.max_pending_steps, int(min(
            self.pending_steps_cap, self.max_pending_seconds / pace, PENDING_REPORTS / max(len(self.members), 1))))
        self.burst_steps = max(self.max_pending_steps, int(min(
            self.pending_steps_cap, BURST_SECONDS / pace, PENDING_REPORTS / max(len(self.members), 1))))
        self._lag_memory = max(LAG_MEMORY, 2 * self.burst_steps)
        self.wait_seconds = max(self.max_wait_seconds, min(WAIT_SHARE * pace, WAIT_CAP_SECONDS))

    def _reset(self) -> None:
        self._open.clear()
        self._first_step = None
        self._newest_step = -1
        self._quorum_step = -1
        self._extra_lag = 0
        self._extra_seen = -1
        self.last_closed = -1
        self._rank_step.clear()


def _ranks_array(order: list[int]) -> np.ndarray:
    ranks = np.fromiter(order, dtype=np.int64, count=len(order))
    ranks.flags.writeable = False  # shared by the steps of the same ranks
    return ranks


def _nan(value: float | None) -> float:
    return NAN if value is None else value


def _floats(values: list, n: int) -> np.ndarray:
    """``np.array(values, dtype=float64)``, several times faster for a list of numbers (a column of a step)."""
    try:
        return np.fromiter(values, dtype=np.float64, count=n)
    except TypeError:  # e.g. a None (np.array makes it NaN)
        return np.array(values, dtype=np.float64)
