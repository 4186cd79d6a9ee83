"""Step assembly in event-time order with host clocks seconds apart (issue 26 item 7; models/steps/assembly.py).

A recording sorted by event time (an imported trace, a file sorted by ``ts``) puts a host whose clock
runs behind many steps early and one whose clock runs ahead many steps late. Steps are closed by lag
from the newest step *half the ranks* reached, so the hosts on the job's clock are judged together;
closing by lag from the newest step any rank reached closed each step on the early host's ranks
alone and dropped every other rank's events as late (the straggler among them never judged).

Events written here by hand: 16 ranks on 4 hosts, 0.32 s steps.
"""

from __future__ import annotations

import pytest

from stepwatch.models.steps.assembly import StepAssembler
from stepwatch.models.wire.events import StepEvent

RANKS, PER_NODE, STEP = 16, 4, 0.32


def _events(offsets: dict[int, float], steps: int = 120) -> list[StepEvent]:
    out = []
    for s in range(steps):
        for r in range(RANKS):
            node = r // PER_NODE
            ts = 1000.0 + (s + 1) * STEP + 0.001 * r + offsets.get(node, 0.0)
            out.append(StepEvent(job="j", rank=r, step=s, ts=ts, step_time=STEP, compute_time=0.27,
                                 node=f"n{node}", world_size=RANKS))
    return sorted(out, key=lambda e: e.ts)


@pytest.mark.parametrize("offsets", [{1: 4.0, 2: -2.5}, {0: -3.0}, {3: 5.0}])
def test_event_time_order_with_skewed_clocks_keeps_the_hosts_on_the_jobs_clock_together(offsets):
    assembler = StepAssembler(job="j", group="")
    closed = [g for e in _events(offsets) for g in assembler.add(e)]
    judged = [g for g in closed if g.step >= 30]
    assert len(judged) >= 80
    on_time = {r for r in range(RANKS) if r // PER_NODE not in offsets}
    for g in judged:  # every rank of the hosts on the job's clock is in every step
        assert on_time <= set(g.ranks.tolist()), (g.step, g.ranks.tolist())


def test_in_arrival_order_every_step_is_complete():
    events = sorted(_events({}), key=lambda e: (e.step, e.rank))
    assembler = StepAssembler(job="j", group="")
    closed = [g for e in events for g in assembler.add(e)]
    assert len(closed) == 120 and all(len(g.ranks) == RANKS and g.missing == 0 for g in closed)
    assert assembler.late_events == 0


def test_a_lost_rank_still_closes_steps_by_lag():
    # Rank 5's events stop at step 40 (its events lost): the others' steps still close, 3 steps behind.
    events = [e for e in _events({}) if not (e.rank == 5 and e.step >= 40)]
    assembler = StepAssembler(job="j", group="")
    closed = [g for e in events for g in assembler.add(e)]
    assert [g.step for g in closed] == list(range(117))
    assert all(g.missing == 1 for g in closed if g.step >= 40)


def test_a_host_sorted_late_is_waited_for_and_the_wait_ends_when_it_does():
    # Host 1's clock 3 s ahead: its events sort ~9 steps late. The lag grows to take them ...
    events = _events({1: 3.0}, steps=300)
    gone = [e for e in events if not (e.node == "n1" and e.step >= 150)]  # ... until it leaves at step 150
    assembler = StepAssembler(job="j", group="")
    closed = []
    lags = {}
    for e in gone:
        for g in assembler.add(e):
            closed.append(g)
            lags[g.step] = assembler._quorum_step - g.step
    judged = [g for g in closed if 30 <= g.step < 140]
    assert all(len(g.ranks) == RANKS for g in judged), [(g.step, len(g.ranks)) for g in judged if len(g.ranks) < RANKS]
    assert max(lags[s] for s in range(30, 140)) >= 9  # waited for it
    assert max(lags[s] for s in range(270, 290)) <= 3  # back to max_lag_steps once it stopped coming late
