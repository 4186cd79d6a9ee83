"""One drain budget across workers (issue 42's remaining gap), and an action_budget page that does not chatter.

Each worker gates the drains of the nodes it speaks for; the drain ledger (models/oncall/drain_ledger.py) carries
each worker's drains to the others. Decisions with the ledger read back in between stay within the budget
fleet-wide, whatever the interleaving; decisions in one race window (nothing read back yet) take at most what
each worker had room for, and every decision after the exchange is held.
"""

from __future__ import annotations

import random

import pytest

from stepwatch.models.alerts import Alert
from stepwatch.models.oncall.budget import COALESCE_SECONDS, HOLD, DrainBudget, Limits
from stepwatch.models.oncall.drain_ledger import DrainRecord
from stepwatch.streams.drain_ledger import apply_record, take_records


def ask(i: int, node: str, at: float, job: str = "") -> Alert:
    return Alert(id=f"a{i}", status="firing", type="gpu_fault", severity="critical", job=job, ranks=(),
                 nodes=(node,), starts_at=at, summary="x", scope="device",
                 evidence={"action": {"kind": "drain_node", "exclude_nodes": [node]}})


def exchange(budgets: list[DrainBudget]) -> None:
    """Every worker's waiting ledger records, as the topic would carry them, read back by every worker."""
    values = [r.encode() for b in budgets for r in take_records(b)]
    for b in budgets:
        for value in values:
            apply_record(b, value)


def drained(budgets: list[DrainBudget], outs: list[Alert]) -> set[str]:
    return {a.nodes[0] for a in outs if a.evidence["action"]["kind"] == "drain_node"}


def fleet(workers: int, limits: Limits) -> list[DrainBudget]:
    budgets = [DrainBudget(limits, seen_nodes=lambda: 100, worker=f"w{w}") for w in range(workers)]
    return budgets


@pytest.mark.parametrize("seed", range(6))
def test_workers_that_read_the_ledger_between_decisions_stay_within_one_budget(seed):
    rng = random.Random(seed)
    workers = rng.choice((2, 3, 5))
    limits = Limits(per_hour=rng.choice((1, 2, 4)), per_job_hour=100, fleet_percent=rng.choice((3.0, 50.0)))
    budgets = fleet(workers, limits)
    outs = []
    for i in range(30):  # 30 nodes ask, each on the worker that speaks for it, in a random order
        b = rng.choice(budgets)
        outs += b.gate([ask(i, f"n{i:02d}", 1000.0 + i)])
        exchange(budgets)
    total = drained(budgets, outs)
    assert 1 <= len(total) <= min(limits.per_hour, limits.at_once(100))
    assert sum(b.drains for b in budgets) == len(total)
    assert all(b.peer_drains == len(total) - b.drains for b in budgets)  # each counted the others' once


@pytest.mark.parametrize("workers", [2, 3])
def test_a_race_window_takes_at_most_each_workers_room_then_everything_is_held(workers):
    limits = Limits(per_hour=2, per_job_hour=100, fleet_percent=50.0)
    budgets = fleet(workers, limits)
    outs = []
    for w, b in enumerate(budgets):  # every worker decides before any record comes back
        outs += b.gate([ask(10 * w + i, f"n{w}-{i}", 1000.0) for i in range(5)])
    assert len(drained(budgets, outs)) <= workers * limits.per_hour  # the bound in a race window
    exchange(budgets)
    later = [b.gate([ask(900 + w, f"late{w}", 1001.0)])[0] for w, b in enumerate(budgets)]
    assert all(a.evidence["action"]["kind"] == HOLD for a in later)


def test_a_node_no_longer_asked_for_frees_the_fleet_share_on_every_worker_and_bad_records_are_refused():
    limits = Limits(per_hour=100, per_job_hour=100, fleet_percent=1.0)  # one node at once (of 100)
    one, two = fleet(2, limits)
    assert one.gate([ask(1, "n1", 1000.0)])[0].evidence["action"]["kind"] == "drain_node"
    exchange([one, two])
    assert two.gate([ask(2, "n2", 1001.0)])[0].evidence["action"]["kind"] == HOLD  # at_once, fleet-wide
    one.gate([ask(1, "n1", 1002.0).resolved(at=1002.0, summary="ok")])
    exchange([one, two])
    assert two.gate([ask(3, "n3", 1003.0)])[0].evidence["action"]["kind"] == "drain_node"
    for bad in (b"", b"{}", b'{"kind": "drain", "node": "", "worker": "w", "at": 1}',
                b'{"kind": "drain", "node": "n", "worker": "w", "at": "soon"}'):
        with pytest.raises(ValueError):
            apply_record(two, bad)
    assert not apply_record(one, DrainRecord("n9", one.worker, 1000.0).encode())  # its own: counted already


def test_the_action_budget_page_coalesces_holds_and_publishes_a_release_at_once():
    budget = DrainBudget(Limits(per_hour=1, per_job_hour=100, fleet_percent=50.0), seen_nodes=lambda: 100)
    pages = []
    for i in range(40):  # a rollout: a node held every 3 s for two minutes
        at = 1000.0 + 3.0 * i
        pages += [a for a in budget.gate([ask(i, f"n{i:02d}", at)]) if a.type == "action_budget"]
        pages += [a for a in budget.tick(at + 1.0) if a.type == "action_budget"]
    pages += [a for a in budget.tick(1000.0 + 3.0 * 40 + COALESCE_SECONDS) if a.type == "action_budget"]
    assert 2 <= len(pages) <= 2 + 120 / COALESCE_SECONDS  # not one per held node (39)
    assert {h["alert_id"] for h in pages[-1].evidence["held"]} == {f"a{i}" for i in range(1, 40)}
    assert pages[-1].evidence["updates_held"] > 0
    times = [p.evidence["held_count"] for p in pages]
    assert times == sorted(times)
    assert budget.release("a5", by="sre")
    after = budget.tick(1000.0 + 3.0 * 40 + COALESCE_SECONDS + 1.0)
    page = next(a for a in after if a.type == "action_budget")  # a removal: at once, no window
    assert "a5" not in {h["alert_id"] for h in page.evidence["held"]}


def test_two_workers_share_the_budget_through_the_real_broker(kafka_bootstrap, topic_prefix):
    """The worker's own ledger tasks (streams/drain_ledger.py: writer and reader) for two engines on the real
    broker: a drain let through on one is counted by the other, which then holds its own."""
    import asyncio
    import dataclasses

    from stepwatch.config import KafkaSettings, OnCallSettings, Settings
    from stepwatch.models.detection import DetectionEngine
    from stepwatch.streams.drain_ledger import DrainLedgerSync

    class App:  # what the component needs of the Faust app: its tasks
        def __init__(self):
            self.tasks = []

        def task(self, fn):
            self.tasks.append(fn)
            return fn

    settings = dataclasses.replace(Settings(), kafka=KafkaSettings(bootstrap=kafka_bootstrap, topic_prefix=topic_prefix),
                                   oncall=OnCallSettings(hooks_enabled=True, drain_budget_per_hour=1,
                                                         drain_budget_fleet_percent=50.0))
    engines = [DetectionEngine(settings), DetectionEngine(settings)]
    apps = [App(), App()]
    for app, engine in zip(apps, engines):
        DrainLedgerSync(lambda engine=engine: engine.oncall.rule("drain_budget").budget, settings).attach(app)
    one, two = (e.oncall.rule("drain_budget").budget for e in engines)

    async def main():
        tasks = [asyncio.create_task(fn()) for app in apps for fn in app.tasks]
        try:
            assert one.gate([ask(1, "n1", 1000.0)])[0].evidence["action"]["kind"] == "drain_node"
            loop = asyncio.get_running_loop()
            deadline = loop.time() + 60.0
            while two.peer_drains == 0 and loop.time() < deadline:  # waits for the condition, bounded
                await asyncio.sleep(0.1)
        finally:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    asyncio.run(main())
    assert two.peer_drains == 1 and one.peer_drains == 0  # its own record read back is not counted twice
    held = two.gate([ask(2, "n2", 1001.0)])[0]
    assert held.evidence["action"]["kind"] == HOLD and held.evidence["action_held"]["budget"] == "per_hour"


def test_a_node_another_worker_drained_counts_once_when_asked_here_too():
    limits = Limits(per_hour=2, per_job_hour=100, fleet_percent=50.0)
    one, two = fleet(2, limits)
    one.gate([ask(1, "n1", 1000.0)])
    exchange([one, two])
    assert two.gate([ask(2, "n1", 1001.0)])[0].evidence["action"]["kind"] == "drain_node"  # no new room needed
    assert two.gate([ask(3, "n2", 1002.0)])[0].evidence["action"]["kind"] == "drain_node"  # 2 of 2: n1 once
    exchange([one, two])
    assert one.gate([ask(4, "n3", 1003.0)])[0].evidence["action"]["kind"] == HOLD
