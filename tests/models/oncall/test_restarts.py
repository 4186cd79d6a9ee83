"""RestartTracker (models/oncall/restarts.py): a restart is a rank's own step going back after its silence,
never ranks resuming where they were after a job-wide pause (gen2 ``checkpoint-marked-slow-flush``)."""

from __future__ import annotations

import random

import pytest

from stepwatch.models.oncall.restarts import RestartTracker

JOB = "job-x"
RANKS = 4
T0 = 1_000.0


def feed(tracker: RestartTracker, events: list[tuple[int, int, float]], batched: bool) -> list:
    """(rank, step, ts) in arrival order; batched: runs of one rank's events as one ``update_many``
    (a monitor flushing its buffer), else one ``update`` each."""
    found = []
    if not batched:
        for rank, step, ts in events:
            r = tracker.update(JOB, rank, step, ts)
            if r is not None:
                found.append(r)
        return found
    runs: list[list[tuple[int, int, float]]] = []
    for e in events:
        if runs and runs[-1][0][0] == e[0]:
            runs[-1].append(e)
        else:
            runs.append([e])
    for run in runs:
        ranks, steps, ts = zip(*run)
        found.extend(tracker.update_many(JOB, list(ranks), list(steps), list(ts)))
    return found


def steady(first: int, last: int, t: float) -> tuple[list[tuple[int, int, float]], float]:
    """Every rank reports steps first..last, one a second, in step order."""
    out = []
    for step in range(first, last + 1):
        for rank in range(RANKS):
            out.append((rank, step, t + rank * 0.001))
        t += 1.0
    return out, t


def flushed(first: int, last: int, t: float) -> list[tuple[int, int, float]]:
    """Each rank's steps first..last, stamped a second apart, arriving as one rank's flush after
    another: rank 0's whole buffer first, so it has moved the job-wide max before rank 1's first step."""
    return [(rank, step, t + (step - first) * 1.0 + rank * 0.001)
            for rank in range(RANKS) for step in range(first, last + 1)]


@pytest.mark.parametrize("batched", [False, True])
def test_ranks_resuming_at_their_own_next_step_after_a_pause_are_no_restart(batched):
    before, t = steady(0, 110, T0)
    # A 40 s checkpoint, then each rank resumes at 111, its own next step; rank 0's flush (111..113)
    # arrives before rank 1's first step 111, which is 2 below the job-wide max by then.
    after = flushed(111, 113, t + 40.0)
    assert max(s for r, s, _ in after[:3]) - after[3][1] >= 2 and after[3][0] == 1
    tracker = RestartTracker()
    assert feed(tracker, before + after, batched) == []
    more, _ = steady(114, 130, t + 44.0)
    assert feed(tracker, more, batched) == []


@pytest.mark.parametrize("batched", [False, True])
def test_a_restart_from_a_checkpoint_is_found_once_even_in_late_batches(batched):
    before, t = steady(0, 90, T0)
    # Crash at 90, relaunched 40 s later from the checkpoint at 80; ranks flush their buffers one after another.
    after = flushed(80, 84, t + 40.0)
    tracker = RestartTracker()
    found = feed(tracker, before + after, batched)
    assert len(found) == 1, found
    r = found[0]
    assert (r.rank, r.resumed_step, r.highest_step, r.steps_recomputed, r.ranks) == (0, 80, 90, 11, RANKS)
    assert r.downtime_seconds == pytest.approx(41.0)
    more, _ = steady(85, 120, t + 46.0)
    assert feed(tracker, more, batched) == []


@pytest.mark.parametrize("batched", [False, True])
def test_a_rank_whose_first_step_after_the_restart_is_stamped_earlier_belongs_to_it(batched):
    before, t = steady(0, 90, T0)
    # Rank 0 resumes later than rank 1 but its flush arrives first: rank 1's silence ends before
    # rank 0's does, and still overlaps it (ranks 2 and 3 after them: most of the job).
    after = [(r, s, t + (45.0 if r == 0 else 40.0) + (s - 80)) for r in range(RANKS) for s in range(80, 84)]
    found = feed(RestartTracker(), before + after, batched)
    assert [(r.rank, r.resumed_step) for r in found] == [(0, 80)]


@pytest.mark.parametrize("batched", [False, True])
def test_a_late_event_of_the_old_process_between_the_new_ones_changes_nothing(batched):
    before, t = steady(0, 90, T0)
    # Relaunched from 80 after 40 s; after each rank's first new step, its old process's step 89 arrives (late).
    after = []
    for rank in range(RANKS):
        after += [(rank, 80, t + 40.0 + rank * 0.001), (rank, 89, t - 2.0 + rank * 0.001)]
    more, _ = steady(81, 100, t + 41.0)
    found = feed(RestartTracker(), before + after + more, batched)
    assert [(r.rank, r.resumed_step, r.highest_step) for r in found] == [(0, 80, 90)], found


@pytest.mark.parametrize("batched", [False, True])
def test_two_restarts_are_two(batched):
    first, t = steady(0, 90, T0)
    second, t = steady(80, 120, t + 40.0)
    third, _ = steady(100, 110, t + 60.0)
    found = feed(RestartTracker(), first + second + third, batched)
    assert [(r.resumed_step, r.highest_step) for r in found] == [(80, 90), (100, 120)]


def test_a_step_back_without_a_silence_or_stamped_earlier_is_no_restart():
    events, t = steady(0, 60, T0)
    tracker = RestartTracker()
    assert feed(tracker, events, False) == []
    # a late event of an old step (its own, earlier, stamp); an old step within a second of the rank's last one
    # (no relaunch is that quick: models/relaunch.py); one step back, a minute later
    assert tracker.update(JOB, 2, 10, T0 + 10.0) is None
    assert tracker.update(JOB, 3, 40, t - 0.1) is None
    assert tracker.update(JOB, 1, 59, t + 60.0) is None


def test_batches_of_the_same_ranks_find_the_restart_one_by_one_does():
    """The usual batch (one step of every rank, the same ranks each time) is kept as the job's latest run and
    replaced by the next one (``_Job.tail``); the restart after it still sees each rank's last step and time."""
    before, t = steady(0, 30, T0)
    after, _ = steady(3, 5, t + 90.0)  # back to step 3 after a 90 s silence
    one = feed(RestartTracker(), before + after, batched=False)
    tracker = RestartTracker()
    found = []
    for i in range(0, len(before + after), RANKS):  # one step of every rank per batch
        ranks, steps, ts = (list(c) for c in zip(*(before + after)[i:i + RANKS]))
        found.extend(tracker.update_many(JOB, ranks, steps, ts))
    assert len(one) == 1 and found == one
    assert (one[0].highest_step, one[0].resumed_step, one[0].ranks) == (30, 3, RANKS)


def job(world: int, pace: float, *, seed: int, back: int = 0, down: float = 0.0, after: int | None = None,
        jump: float = 0.0, dup: float = 0.0, per_host: int = 8) -> list[tuple[int, int, float]]:
    """(rank, step, ts) in arrival order: ``world`` ranks, ``per_host`` a host, step every ``pace`` s for 60 steps.
    With ``back``: all die and, ``down`` s later, ``after`` of them (all by default) resume ``back`` steps back for 40
    steps (and 150 s more: an elastic job is read a window on). With ``jump``: host 0's clock steps back that many
    seconds at step 30, and a share ``dup`` of every rank's events arrive again up to ``jump`` s late."""
    rng = random.Random(seed)
    out: list[tuple[float, int, tuple[int, int, float]]] = []

    def run(first: int, last: int, t: float, ranks: int) -> float:
        for step in range(first, last + 1):
            t += pace
            for r in range(ranks):
                stamp = t + rng.uniform(0, pace / 10) - (jump if r < per_host and step >= 30 else 0.0)
                out.append((t, len(out), (r, step, stamp)))
                if rng.random() < dup:
                    out.append((t + rng.uniform(0, jump), len(out), (r, step, stamp)))
        return t

    t = run(0, 60, T0, world)
    if back:
        run(60 - back, 100 + int(150.0 / pace), t + down, world if after is None else after)
    return [e for _, _, e in sorted(out)]


def _jobs() -> list:
    rng = random.Random(7)
    out = []
    for i in range(12):
        world = rng.choice((2, 3, 8, 64, 2048))
        pace, back, down = round(10 ** rng.uniform(-1.7, 2.08), 3), rng.choice((2, 3, 10, 50)), rng.uniform(2.0, 200.0)
        after = (None, max(1, world // 3), world)[i % 3]
        out.append(pytest.param(world, pace, back, round(down, 1), after, i, id=f"{world}r-{pace}s-{back}back-"
                                f"{down:.0f}s-{'all' if after is None else after}"))
    return out


@pytest.mark.parametrize("world,pace,back,down,after,seed", _jobs())
def test_most_ranks_back_and_on_is_one_restart_one_host_is_none(world, pace, back, down, after, seed):
    """Invariant: a job whose ranks all go back 2+ steps after any downtime over 1 s and go on from there is one
    restart at every pace and world size (2-2048 ranks), also relaunched on a third of them (read a window on);
    the same job whose first host's clock steps back 20 s while copies of its ranks' events arrive up to 20 s late
    (a late copy stamped after its rank's latest, 2+ steps below) is none, even where that host is the whole job."""
    events = job(world, pace, seed=seed, back=back, down=down, after=after)
    found = feed(RestartTracker(), events, seed % 2 == 0)
    assert [(r.resumed_step, r.highest_step) for r in found] == [(60 - back, 60)], found
    noisy = job(world, pace, seed=seed, jump=20.0, dup=0.3)
    assert feed(RestartTracker(), noisy, seed % 2 == 1) == []
