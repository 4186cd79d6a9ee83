"""The jobs store alone (models/jobs_store.py): bounded under a stream of new jobs, and the eviction choice of
issues 27 and 44 whatever the mix of jobs: the least recently active quiet job goes first; a job with an open alert,
or stalled with its hang still to come, is kept; a hang no rank has spoken since gives way when nothing else can.

The jobs are stand-ins with the facts the store asks for (the engine's own jobs: tests/models/test_bounded_state.py).
"""

from __future__ import annotations

import math
import random
from collections import Counter
from dataclasses import dataclass, field

import pytest

from stepwatch.config import RetentionSettings
from stepwatch.models.alert_types import facts
from stepwatch.models.jobs_store import EVICTION_PROBES, JobsStore

KINDS = ("quiet", "alerting", "dead_hang", "pending")


@dataclass(frozen=True)
class _Alert:
    type: str
    starts_at: float

    @property
    def facts(self):  # as models/alerts.py's Alert: its type's facts (models/alert_types.py)
        return facts(self.type)


@dataclass
class _Progress:
    step_times: list = field(default_factory=list)


class _Hang:
    def __init__(self, pending: bool) -> None:
        self.progress = _Progress([1.0, 2.0] if pending else [1.0])
        self._pending = pending
        self.rank_count = 0
        self.pg_count = 0
        self.ranks: set[int] = set()

    def quiet_until(self) -> float:
        return 100.0 if self._pending else math.inf

    def limit_pgs(self, n: int) -> None:
        self.pg_limit = n

    def knows(self, rank: int) -> bool:
        return rank in self.ranks


class _Rule:
    def __init__(self, capped: dict) -> None:
        self._capped = capped

    def capped(self) -> dict:
        return self._capped


class _Job:
    """A job as the store sees it; ``kind``: one of ``KINDS``."""

    def __init__(self, name: str, kind: str) -> None:
        self.job, self.kind, self.touched = name, kind, 0
        self.last_ts = 10.0
        self.hang = _Hang(pending=kind == "pending")
        self.rules = (_Rule({"nodes": 1}),)
        self.asked = 0  # open_alerts calls: the probes

    def open_alerts(self) -> list[_Alert]:
        self.asked += 1
        if self.kind == "alerting":
            return [_Alert("straggler", 5.0)]
        if self.kind == "dead_hang":
            return [_Alert("hang", 20.0)]  # fired after the job's last event: no rank heard since
        return []


def _expected_victim(order: list[_Job]) -> tuple[_Job | None, str | None]:
    """The rule in words: among the least recently active ``EVICTION_PROBES``, the first quiet one, else the
    first hang no rank has spoken since."""
    probed = order[:EVICTION_PROBES]
    quiet = [j for j in probed if j.kind == "quiet"]
    if quiet:
        return quiet[0], "cap"
    dead = [j for j in probed if j.kind == "dead_hang"]
    return (dead[0], "dead_hang") if dead else (None, None)


@pytest.mark.parametrize("seed", range(6))
def test_a_stream_of_new_jobs_stays_bounded_and_evicts_as_the_rule_says(seed):
    rng = random.Random(seed)
    max_jobs = rng.choice([1, 3, 10, 80])  # below and above EVICTION_PROBES
    weights = [rng.random() for _ in KINDS]  # a different mix each seed: floods of alerting jobs included
    store: JobsStore[_Job] = JobsStore()
    retention = RetentionSettings(max_jobs=max_jobs)
    refused = 0
    for i in range(600):
        if store.jobs and rng.random() < 0.3:  # an event of a tracked job: it goes to the back
            store.used(rng.choice(list(store.jobs.values())))
        before = list(store.jobs.values())
        victim, why = _expected_victim(before) if len(before) >= max_jobs else (None, None)
        for job in before:
            job.asked = 0
        ok, got, got_why = store.room(max_jobs)
        assert sum(j.asked for j in before) <= EVICTION_PROBES  # O(1) per new job, whatever the number of jobs
        assert (got, got_why) == (victim, why)
        if len(before) >= max_jobs and victim is None:
            refused += 1
            assert not ok and set(store.jobs.values()) == set(before)  # nothing silenced, the new job refused
            continue
        assert ok
        if got is not None:
            assert got.kind in ("quiet", "dead_hang")  # an open alert or a hang to come is never evicted
            store.remove(got)
        store.add(_Job(f"job-{i}", rng.choices(KINDS, weights)[0]), retention)
        assert len(store.jobs) <= max_jobs
    assert store.refused_new == refused
    assert sum(store.evicted.values()) + len(store.jobs) == 600 - refused


def test_jobs_are_stamped_in_the_order_of_their_last_activity():
    store: JobsStore[_Job] = JobsStore()
    retention = RetentionSettings()
    jobs = [store.add(_Job(f"j{i}", "quiet"), retention) for i in range(5)]
    store.used(jobs[1])
    store.used(jobs[0])
    assert list(store.jobs) == ["j2", "j3", "j4", "j1", "j0"]
    assert sorted(jobs, key=lambda j: j.touched) == [store.jobs[n] for n in store.jobs]


def test_probed_jobs_that_are_kept_go_to_the_back():
    store: JobsStore[_Job] = JobsStore()
    retention = RetentionSettings()
    for i, kind in enumerate(["alerting", "pending", "quiet", "alerting"]):
        store.add(_Job(f"j{i}", kind), retention)
    victim, dead = store.evictable()
    assert (victim.job, dead) == ("j2", False)
    assert list(store.jobs) == ["j2", "j3", "j0", "j1"]  # the two kept moved behind the rest


def test_rank_and_process_group_totals_bound_each_job_and_an_evicted_job_frees_its_share():
    store: JobsStore[_Job] = JobsStore()
    retention = RetentionSettings(max_ranks_per_job=8, max_ranks_total=10, max_process_groups_total=6)
    a = store.add(_Job("a", "quiet"), retention)
    a.hang.rank_count, a.hang.pg_count = 7, 4
    store.count_ranks("a", a, 0, 0)
    assert store.totals() == (7, 4)
    b = store.add(_Job("b", "quiet"), retention)
    assert b.hang.pg_limit == 2  # the room left under the total
    assert store.rank_limit(b, retention) == 3 and store.rank_limit(a, retention) == 8
    events = [type("E", (), {"rank": r})() for r in (0, 1, 2, 3, 0, 4)]
    kept = store.within_rank_cap(b, events, store.rank_limit(b, retention), first_row=10)
    assert [e.rank for e in kept] == [0, 1, 2, 0]
    assert store.take_refused() == [(13, "ranks_per_job"), (15, "ranks_per_job")] and store.take_refused() == []
    store.remove(a)
    assert store.totals() == (0, 0) and store.rank_limit(b, retention) == 8
    assert store.capped() == Counter({"ranks_per_job": 2, "nodes": 2})  # a's rule counts stay after it went
