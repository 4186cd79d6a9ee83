"""The jobs the engine tracks (issue 40 item 5): their LRU order, which one to evict for a new job, and the caps' counts.

One concept: which jobs are held and what the state caps (docs/security.md "Bounded state") left out. The store
knows no rule: it asks a job for its ranks and process groups (its hang rule's slots), its open alerts and its
rules' own ``capped`` counts. The engine (models/engine.py) makes a job's state, resolves an evicted job's alerts
and tells its observer; this file decides who goes and keeps the counts.
"""

from __future__ import annotations

import math
from collections import Counter, OrderedDict
from typing import Any, Generic, TypeVar

#: Least recently active jobs looked at to find one to evict for a new job (those with open alerts go
#: to the back): the cost per new job stays O(1) whatever the number of jobs.
EVICTION_PROBES = 64

#: A job's state (models/engine.py ``JobState``): ``job``, ``touched``, ``hang``, ``comm``, ``rules``,
#: ``open_alerts()``, ``last_ts``.
J = TypeVar("J")


def dead_hang(job: Any, alerts: list) -> bool:
    """Whether ``alerts`` (the job's open ones) are a hang alone, and no event of the job came since it fired (its
    ``starts_at``, on the job's clock): no rank is alive to be helped by keeping it."""
    return all(a.facts.stalls for a in alerts) and job.last_ts < min(a.starts_at for a in alerts)


def hang_pending(job: Any) -> bool:
    """Whether the job's hang rule still has a verdict to give: it stepped at a rhythm (two advances at least; a
    one-step job has none to miss) and has not ended, so its silence would fire a hang once due."""
    hang = job.hang
    return len(hang.progress.step_times) >= 2 and math.isfinite(hang.quiet_until())


class JobsStore(Generic[J]):
    """Jobs by name, least recently active first (every event moves its job to the end: ``used``), so the job to
    evict for a new one is found without a scan; and the counts of what the caps left out."""

    __slots__ = ("jobs", "refused_new", "evicted", "capped_input", "refused", "_capped_gone", "_capped_ranks",
                 "_ranks_total", "_pgs_total", "_touches")

    def __init__(self) -> None:
        #: Jobs, least recently active first: an LRU.
        self.jobs: OrderedDict[str, J] = OrderedDict()
        #: Events of new jobs refused because every job the cap would evict had an open alert.
        self.refused_new = 0
        #: Jobs forgotten, by why: ``idle`` (no events for the retention), ``cap`` (room for a new job), ``dead_hang``
        #: (room for a new job, taken from a job whose only open alert was a hang no rank had spoken since).
        self.evicted: Counter[str] = Counter()
        #: Input refused before the engine (``Pipeline``: new jobs per message), by what; part of ``capped``.
        self.capped_input: Counter[str] = Counter()
        #: Rows of the column batch being processed that the rank cap left out, with what (``take_refused``).
        self.refused: list[tuple[int, str]] = []
        self._capped_gone: Counter[str] = Counter()  # ``capped`` of evicted jobs (the total never goes back)
        self._capped_ranks = 0  # events of ranks beyond ``retention.max_ranks_per_job`` (or ``max_ranks_total``)
        self._ranks_total = 0  # ranks tracked across all jobs (the hang rules' slots), kept by ``count_ranks``
        self._pgs_total = 0  # process groups tracked across all jobs, kept by ``count_ranks``
        self._touches = 0  # the last activity stamp given (``JobState.touched``: the order a tick visits jobs in)

    # -- which jobs, in what order --------------------------------------------------------

    def used(self, job: J) -> None:
        """An event reached ``job``: it goes to the back of the LRU, with a new activity stamp."""
        self.jobs.move_to_end(job.job)
        self._stamp(job)

    def _stamp(self, job: J) -> None:
        self._touches += 1
        job.touched = self._touches

    def room(self, max_jobs: int) -> tuple[bool, J | None, str | None]:
        """Whether a new job may come in under ``max_jobs``, and the job to evict for it with why (``cap`` or
        ``dead_hang``, counted in ``evicted``); a refusal is counted in ``refused_new``."""
        if len(self.jobs) < max_jobs:
            return True, None, None
        victim, dead = self.evictable()
        if victim is None:
            self.refused_new += 1
            return False, None, None
        why = "dead_hang" if dead else "cap"
        self.evicted[why] += 1
        return True, victim, why

    def evictable(self) -> tuple[J | None, bool]:
        """The least recently active job without an open alert or a hang still to judge among the first
        ``EVICTION_PROBES``, else the first of them whose only open alert is a hang no rank has spoken since (True
        then): such a job holds nothing a live job needs, and a flood of one-step jobs that go silent must not lock
        real ones out. A job with a rhythm that stalled, its hang not yet due, is kept like one with an open alert
        (issue 44: 10,001 one-step jobs evicted a job stalled 10 s and its hang never fired)."""
        dead = None
        for _ in range(min(EVICTION_PROBES, len(self.jobs))):
            name, job = next(iter(self.jobs.items()))
            alerts = job.open_alerts()
            if not alerts and not hang_pending(job):
                return job, False
            if dead is None and alerts and dead_hang(job, alerts):
                dead = job
            self.jobs.move_to_end(name)  # kept: an open alert is never silenced by new jobs
            self._stamp(job)
        return dead, dead is not None

    def add(self, job: J, retention) -> J:
        """Track a new ``job`` (room made: ``room``), its process groups limited to the room left."""
        self.jobs[job.job] = job
        self.limit_pgs(job, retention)
        self._stamp(job)
        return job

    def remove(self, job: J) -> None:
        """Forget ``job``: its ranks and process groups leave the totals; what its rules left out stays counted."""
        self.jobs.pop(job.job, None)
        self._ranks_total -= job.hang.rank_count
        self._pgs_total -= job.hang.pg_count
        for rule in job.rules:
            self._capped_gone.update(rule.capped())

    # -- the caps -------------------------------------------------------------------------

    def count_ranks(self, name: str, job: J | None, before: int, before_pgs: int) -> None:
        """Add the ranks and process groups job ``name`` gained (or lost: a restart) since it had ``before`` and
        ``before_pgs`` (``job``: its state then)."""
        now = self.jobs.get(name)
        if now is not None:
            self._ranks_total += now.hang.rank_count - (before if now is job else 0)
            self._pgs_total += now.hang.pg_count - (before_pgs if now is job else 0)

    def limit_pgs(self, job: J, retention) -> None:
        """Let ``job`` hold no more process groups than the room left under the total (and its own cap)."""
        job.hang.limit_pgs(job.hang.pg_count + max(0, retention.max_process_groups_total - self._pgs_total))

    def rank_limit(self, job: J, retention) -> int:
        """The ranks ``job`` may have: its own cap, and no more than the room left under the total."""
        return min(retention.max_ranks_per_job, job.hang.rank_count + max(0, retention.max_ranks_total -
                                                                           self._ranks_total))

    def refuse_rank(self) -> None:
        """One event of a new rank beyond the rank cap, left out."""
        self._capped_ranks += 1

    def within_rank_cap(self, job: J, events: list, limit: int, first_row: int) -> list:
        """``events`` (rows ``first_row``... of the batch) without those of new ranks beyond ``limit`` ranks for
        the job (first come, first kept); the rows left out go to ``refused``."""
        room = limit - job.hang.rank_count
        admitted: set[int] = set()
        kept = []
        for i, event in enumerate(events):
            if job.hang.knows(event.rank) or event.rank in admitted:
                kept.append(event)
            elif len(admitted) < room:
                admitted.add(event.rank)
                kept.append(event)
            else:
                self.refused.append((first_row + i, "ranks_per_job"))
        self._capped_ranks += len(events) - len(kept)
        return kept

    def take_refused(self) -> list[tuple[int, str]]:
        """Rows of the latest column batch the caps left out (see ``refused``), and forget them."""
        out, self.refused = self.refused, []
        return out

    def capped_counts(self, job: str | None) -> tuple[int, int, int, int, int]:
        """The job rules' counts of input a cap left out that an event of ``job`` can add to: ranks (all jobs), the
        job's process groups, process-group ranks and op names, and process groups in all (``capped_mark``)."""
        state = self.jobs.get(job) if job else None
        if state is None:
            return self._capped_ranks, 0, 0, 0, 0
        hang = state.hang.capped
        return (self._capped_ranks, hang["process_groups_per_job"], hang["pg_ranks_per_job"],
                state.comm.capped["op_names_per_job"], hang["process_groups_total"])

    def capped(self) -> Counter[str]:
        """Input left out at a state cap so far, by what (docs/security.md "Bounded state"; /metrics)."""
        out = Counter(self._capped_gone)
        out.update(self.capped_input)
        if self._capped_ranks:
            out["ranks_per_job"] += self._capped_ranks
        for job in self.jobs.values():
            for rule in job.rules:
                out.update(rule.capped())
        return out

    def totals(self) -> tuple[int, int]:
        """Ranks and process groups tracked across all jobs (what ``max_ranks_total``/``max_process_groups_total``
        bound)."""
        return self._ranks_total, self._pgs_total
