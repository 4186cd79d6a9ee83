"""The outlet rules (models/oncall/outlet_rules.py) as the engine's outlet makes and drives them: a new one is one
class and one registry line; the node ledger's ownership hook (``NodeLedger.took_over``) that the on-call feed
calls when the worker takes a node's partition over."""

from __future__ import annotations

from test_rule_contract import job_events, run
from stepwatch.models.alert_types import AlertType
from stepwatch.models.alerts import Alert
from stepwatch.models.oncall.ledger import Incident, NodeLedger
from stepwatch.models.rule import OutletRule, RuleSpec, Signal


class _EchoRule(OutletRule):
    """An outlet rule written for this test only: after every firing straggler leaving the engine, a warning
    naming it (one class + one registry line)."""

    spec = RuleSpec(name="echo", consumes=frozenset({Signal.ALERTS, Signal.RANK_STEPS}),
                    alert_types=(AlertType.STRAGGLER,), failure_classes=(), settings=None)

    def __init__(self, env, needs) -> None:
        self.seen: list[str] = []
        self.steps = 0
        self.open: dict[str, Alert] = {}

    def on_steps(self, job, ranks, steps, ts) -> None:
        self.steps += len(steps)

    def update(self, alert):
        self.seen.append(alert.id)
        if alert.type != AlertType.STRAGGLER or alert.status != "firing" or alert.id.startswith("echo-"):
            return []
        echo = Alert(id=f"echo-{alert.id}", status="firing", type=AlertType.STRAGGLER, severity="info",
                     job=alert.job, ranks=alert.ranks, nodes=alert.nodes, starts_at=alert.starts_at,
                     summary=f"echo of {alert.id}", evidence={})
        self.open[echo.id] = echo
        return [echo]

    def open_alerts(self):
        return list(self.open.values())


def test_a_new_outlet_rule_is_one_class_and_one_registry_line(monkeypatch):
    from stepwatch.models import registry

    monkeypatch.setattr(registry, "OUTLET_RULES", (*registry.OUTLET_RULES, _EchoRule))
    events = job_events(steps=200, slow_rank=5, slow=1.5, slow_from=60)
    engine, alerts = run(events)
    rule = engine.oncall.rule("echo")
    assert rule.steps == sum(1 for e in events if e["kind"] == "step")  # fed every step event once
    fired = [a for a in alerts if a.type == AlertType.STRAGGLER and not a.id.startswith("echo-")]
    echoes = [a for a in alerts if a.id.startswith("echo-")]
    assert fired and [e.id for e in echoes] == [f"echo-{a.id}" for a in fired if a.status == "firing"]
    # it saw every alert leaving the engine (its own are not fed back), each right after the one that caused it
    assert rule.seen == [a.id for a in alerts if not a.id.startswith("echo-")]
    assert alerts.index(echoes[0]) == alerts.index(fired[0]) + 1
    assert {a.id for a in engine.oncall.open_alerts()} >= {e.id for e in echoes}


def _incident(node: str, job: str, ident: str, at: float) -> Incident:
    return Incident(node=node, id=ident, type="straggler", job=job, starts_at=at, failure_class="straggler_unexplained",
                    jobs=((job, (1,)),))


def test_a_verdict_judged_while_another_worker_owned_the_node_is_published_on_take_over():
    ledger = NodeLedger(min_jobs=2)
    owned = {"n1": False, "n2": False}
    ledger.owns = lambda node: owned[node]
    for node in ("n1", "n2"):
        assert ledger.add(_incident(node, "a", f"{node}-a", 100.0)) == (True, [])
        new, published = ledger.add(_incident(node, "b", f"{node}-b", 110.0))
        assert new and published == []  # another worker speaks for the node: nothing published here
    assert set(ledger.open) == {"n1", "n2"}
    owned["n1"] = True  # a rebalance gives this worker n1's partition
    again = ledger.took_over(lambda node: node == "n1")
    assert [a.type for a in again] == [AlertType.NODE_SUSPECT] and again[0].nodes == ("n1",)
    assert ledger.took_over(lambda node: False) == []
