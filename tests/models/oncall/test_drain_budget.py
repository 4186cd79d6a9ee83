"""The drain budget (issue 42, item 1): no configuration of thresholds or faults drains more than the budget.

Driven through the engine (tests/engine_driver.py) and the worker's action sink with the real executor
(deploy/slurm/stepwatch-drain, in its own dry run: its commands captured in the action records).
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import random
import re
from pathlib import Path

import pytest

from engine_driver import replay
from fleet import Job, job_events, merge, xid_event
from stepwatch.config import OnCallSettings, Settings
from stepwatch.models.detection import DetectionEngine
from stepwatch.models.oncall.budget import COALESCE_SECONDS, HOLD, DrainBudget, asks_drain
from stepwatch.models.wire.events import parse_event
from stepwatch.streams.action_sink import ActionSink

REPO = Path(__file__).resolve().parents[3]
DRAIN = REPO / "deploy" / "slurm" / "stepwatch-drain"
TEMPLATE = 'scontrol update nodename={node} state=drain reason="stepwatch: {failure_class} {alert_id}"'
T0 = 1_764_000_000.0
DRAINED = re.compile(r"nodename=([A-Za-z0-9._-]+) state=drain")


def agents(nodes, ts: float) -> list[dict]:
    """One GPU sample per node: their agents are real (action hooks drain only nodes whose agent reported)."""
    return [{"v": 1, "kind": "gpu", "node": n, "ts": ts, "gpu": 0, "temp_c": 60.0} for n in nodes]


def engine_for(**limits) -> DetectionEngine:
    return DetectionEngine(dataclasses.replace(Settings(), oncall=OnCallSettings(hooks_enabled=True, **limits)))


def rollout(engine: DetectionEngine, *, fleet: int = 100, faulty: int = 20, jobs=()) -> list:
    """A firmware rollout: ``faulty`` of ``fleet`` nodes report Xid 79 within a minute."""
    nodes = [f"n{i:03d}" for i in range(fleet)]
    xids = [xid_event(nodes[i], 0, 79, T0 + 60.0 + 3.0 * i) for i in range(faulty)]
    streams = [agents(nodes, T0 + 1.0), xids, *(job_events(j) for j in jobs)]
    alerts = list(replay((parse_event(e) for e in merge(*streams)), engine=engine))
    alerts.extend(engine.tick(engine.clock + 1.0))
    alerts.extend(engine.tick(engine.clock + COALESCE_SECONDS))  # the held drains the page coalesced join it
    return alerts


def executed(alerts, tmp_path) -> tuple[ActionSink, list[dict]]:
    """Every alert through the worker's action sink, executor on (dry run off), the real stepwatch-drain."""
    settings = OnCallSettings(hooks_enabled=True, dry_run=False, executor=str(DRAIN), slurm_template=TEMPLATE)
    sink = ActionSink(settings)

    async def main():
        records = []
        for alert in alerts:
            sink.offer(alert)
            while not sink.queue.empty():
                record = sink.queue.get_nowait()
                await sink.deliver(record)
                records.append(record)
        return records

    return sink, asyncio.run(main())


def drained_nodes(records) -> set[str]:
    out = set()
    for r in records:
        for e in r.get("executed", ()):
            assert e["returncode"] == 0 and e["output"].startswith("stepwatch-drain: dry run"), e
            out.update(DRAINED.findall(e["output"]))
    return out


def latest(alerts):
    return {a.id: a for a in alerts}


def test_a_firmware_rollout_drains_at_most_the_budget_and_pages_once(tmp_path):
    engine = engine_for()
    alerts = rollout(engine)
    _, records = executed(alerts, tmp_path)
    drained = drained_nodes(records)
    assert 1 <= len(drained) <= 2, drained  # 2 an hour fleet-wide; 5 % of 100 nodes would allow 5
    budget = [a for a in alerts if a.type == "action_budget"]
    assert len({a.id for a in budget}) == 1
    page = budget[-1]
    assert page.status == "firing" and page.severity == "critical" and page.scope == "fleet" and page.job == ""
    held = [a for a in latest(alerts).values() if a.status == "firing" and a.evidence.get("action_held")]
    assert held and all(a.evidence["action"]["kind"] == HOLD for a in held)
    assert {h["alert_id"] for h in page.evidence["held"]} == {a.id for a in held}
    assert set(page.nodes) == {n for a in held for n in a.evidence["action"]["exclude_nodes"]}
    assert set(page.nodes).isdisjoint(drained) and len(set(page.nodes) | drained) == 20
    assert {a.evidence["action_held"]["budget"] for a in held} <= {"per_hour", "at_once"}
    # held alerts render no command
    assert all(not r["commands"]["slurm"] for r in records if r["action"]["kind"] == HOLD)

    # a human releases one: published again at the next tick with its drain; the page names one fewer
    target = next(a for a in held if a.type == "gpu_fault")
    rule = engine.oncall.rule("drain_budget")
    assert rule.release(target.id, by="sre") and not rule.release("no-such-alert")
    after = engine.tick(engine.clock + 30.0)
    again = next(a for a in after if a.id == target.id)
    assert again.evidence["action"]["kind"] == "drain_node" and again.evidence["action_released"]["by"] == "sre"
    page2 = next(a for a in after if a.type == "action_budget")
    assert target.id not in {h["alert_id"] for h in page2.evidence["held"]}
    _, more = executed(alerts + after, tmp_path)
    assert drained_nodes(more) == drained | set(target.evidence["action"]["exclude_nodes"])


def test_one_job_over_twenty_nodes_gets_one_drain_an_hour(tmp_path):
    job = Job("big", [f"n{i:03d}" for i in range(20)], steps=40, start=T0 + 2.0, checkpoint_at=None)
    engine = engine_for(drain_budget_per_hour=100, drain_budget_fleet_percent=100.0)
    alerts = rollout(engine, jobs=[job])
    _, records = executed(alerts, tmp_path)
    assert len(drained_nodes(records)) == 1
    held = [a for a in latest(alerts).values() if a.evidence.get("action_held")]
    assert held and {a.evidence["action_held"]["budget"] for a in held} == {"per_job_hour"}


def test_a_switch_failure_drains_nothing(tmp_path):
    from switch_gen import Fleet, events

    fleet = Fleet(jobs=2, nodes_per_job=4, faulty_jobs=1, seed=3, steps=100)
    evs = [ev for _, ev in events(fleet)]
    onset = max(e.ts for e in evs) - 5.0  # late in the fault: the fabric incident is open
    # the same nodes' GPUs fall off the bus too (a switch's power event): still no drain
    xids = [parse_event(xid_event(n, 0, 79, onset + i)) for i, n in enumerate(fleet.faulty_nodes)]
    engine = DetectionEngine(Settings())
    alerts = list(replay(sorted(evs + xids, key=lambda e: e.ts), engine=engine))
    assert [a for a in alerts if a.type == "fabric"]
    _, records = executed(alerts, tmp_path)
    assert drained_nodes(records) == set()
    assert not [a for a in alerts if asks_drain(a)]
    fabric_held = [a for a in alerts if (a.evidence.get("action_held") or {}).get("budget") == "fabric"]
    assert {a.nodes[0] for a in fabric_held if a.type == "gpu_fault"} == set(fleet.faulty_nodes)


# -- the invariant, over generated cases -------------------------------------------------------------------

def _case(seed: int):
    rng = random.Random(seed)
    limits = {"drain_budget_per_hour": rng.randint(0, 5), "drain_budget_per_job_hour": rng.randint(0, 3),
              "drain_budget_fleet_percent": rng.choice([0.0, 1.0, 5.0, 20.0, 50.0, 100.0]),
              "ledger_min_jobs": rng.randint(1, 3)}
    fleet = rng.randint(4, 60)
    nodes = [f"n{i:03d}" for i in range(fleet)]
    faulty = rng.sample(nodes, rng.randint(0, fleet))
    events = agents(nodes, T0)
    for n in faulty:
        for _ in range(rng.randint(1, 3)):  # several alerts may ask for the same node
            events.append(xid_event(n, rng.randint(0, 7), rng.choice([79, 48, 95, 64, 74]),
                                    T0 + rng.uniform(10.0, 3 * 3600.0)))
    events.sort(key=lambda e: e["ts"])
    return limits, fleet, events


@pytest.mark.parametrize("seed", range(24))
def test_no_thresholds_or_faults_drain_more_than_the_budget(seed):
    limits, fleet, events = _case(seed)
    engine = engine_for(**limits)
    alerts = list(replay((parse_event(e) for e in events), engine=engine))
    first: dict[str, float] = {}  # node -> when a drain for it first left the engine
    for a in alerts:
        if asks_drain(a):
            for n in a.evidence["action"]["exclude_nodes"]:
                first.setdefault(n, a.starts_at)
    times = sorted(first.values())
    per_hour = limits["drain_budget_per_hour"]
    for i, t in enumerate(times):
        assert sum(1 for u in times[i:] if u < t + 3600.0) <= per_hour, (limits, times)
    at_once = max(1, int(limits["drain_budget_fleet_percent"] / 100 * fleet + 1e-9))
    assert len(first) <= max(at_once, 0) or per_hour == 0, (limits, fleet, first)
    if per_hour == 0:
        assert first == {}


def test_the_budget_counts_a_node_once_whatever_asks():
    from stepwatch.models.alerts import Alert

    budget = DrainBudget()
    ask = [Alert(id=f"a{i}", status="firing", type="node_suspect" if i % 2 else "gpu_fault", severity="critical",
                 job="", ranks=(), nodes=("n1",), starts_at=float(i), summary="x", scope="device",
                 evidence={"action": {"kind": "drain_node", "exclude_nodes": ["n1"]}}) for i in range(10)]
    out = budget.gate(ask)
    assert all(a.evidence["action"]["kind"] == "drain_node" for a in out) and budget.drains == 1


# -- the release, by the CLI, through the real broker --------------------------------------------------------

def test_a_bad_alert_id_is_one_line_before_any_broker():
    from support import run_stepwatch

    result = run_stepwatch("actions", "release", "x; rm -rf /", env={**os.environ, "KAFKA_BOOTSTRAP": "127.0.0.1:1"},
                           check=False)
    assert result.returncode == 2 and result.stderr.count("\n") == 1 and "not an alert id" in result.stderr


def test_stepwatch_actions_release_reaches_the_worker_that_holds_it(kafka_bootstrap, topic_prefix, tmp_path):
    from kafka import KafkaConsumer

    from stepwatch.streams.action_sink import apply_release
    from support import run_stepwatch, stepwatch_env

    engine = engine_for()
    alerts = rollout(engine, fleet=40, faulty=6)
    held = [a for a in latest(alerts).values() if a.evidence.get("action_held")]
    target = held[0]
    out = run_stepwatch("actions", "release", target.id, "--by", "oncall-sre",
                        env=stepwatch_env(kafka_bootstrap, topic_prefix)).stdout
    assert f"released {target.id}" in out
    consumer = KafkaConsumer(f"{topic_prefix}releases", bootstrap_servers=kafka_bootstrap, group_id=None,
                             auto_offset_reset="earliest", consumer_timeout_ms=10_000)
    try:
        record = next(iter(consumer))
    finally:
        consumer.close()
    assert record.key.decode() == target.id
    assert apply_release(engine, record.value)  # what the worker's releases reader does with it
    assert not apply_release(engine, record.value)  # once
    again = next(a for a in engine.tick(engine.clock + 5.0) if a.id == target.id)
    assert again.evidence["action"]["kind"] != HOLD and again.evidence["action_released"]["by"] == "oncall-sre"
    with pytest.raises(ValueError):
        apply_release(engine, b'{"kind": "release", "alert_id": "a b"}')


def test_the_budgets_are_runtime_settings_with_ranges():
    from stepwatch.runtime_config import RuntimeConfig, encode

    engine = engine_for()
    runtime = RuntimeConfig(Settings())
    runtime.apply(engine, "*", encode({"oncall": {"drain_budget_per_hour": 7, "drain_budget_fleet_percent": 12.5}}))
    limits = engine.oncall.rule("drain_budget").budget.limits
    assert (limits.per_hour, limits.per_job_hour, limits.fleet_percent) == (7, 1, 12.5)
    for bad in ({"drain_budget_per_hour": -1}, {"drain_budget_fleet_percent": 101.0},
                {"drain_budget_per_job_hour": float("nan")}):
        with pytest.raises(ValueError):
            runtime.apply(engine, "*", b'{"v": 1, "kind": "config", "oncall": %s}' % repr(bad).replace(
                "'", '"').replace("nan", "NaN").encode())
        assert engine.oncall.rule("drain_budget").budget.limits == limits
    alerts = rollout(engine, fleet=100, faulty=20)  # 12.5 % of 100 nodes: 12 at once; 7 an hour
    allowed = {n for a in alerts if asks_drain(a) for n in a.evidence["action"]["exclude_nodes"]}
    assert len(allowed) == 7
