"""The registry of rules: the one list the engine builds every job's rules from.

A new per-job rule is a module with a ``JobRule`` (models/rule.py) and one line in ``JOB_RULES``; the engine
makes an instance per job, in an order where each comes after the rules it ``needs``, and feeds it the
signals it declares. The order of ``JOB_RULES`` is the order open alerts are listed and closed in.

A new node-level rule (node telemetry, keyed by node) is a module with a ``NodeRule`` and one line in
``NODE_RULES``; the telemetry hub makes one for the worker and feeds it what it declares. ``OUTLET_RULES``
declares the rules on the alerts leaving the engine (what they emit and can be classified as), so every
alert type has a declared source (tests/test_rule_contract.py checks it and runs every job and node rule
through one contract).
"""

from __future__ import annotations

from .alert_types import AlertType
from .job_rules import (CheckpointRule, CommRule, HangRule, ImbalanceRule, InspectorRule, LongStragglerRule,
                        StragglerRule, ThroughputRule)
from .rule import JobRule, NodeRule, RuleSpec, Signal, dependency_order
from .oncall.oncall import OnCallSettings
from .telemetry.node_rules import DeviceRule, FabricRule, TelemetryRule

JOB_RULES: tuple[type[JobRule], ...] = (
    StragglerRule,
    LongStragglerRule,
    HangRule,
    ThroughputRule,
    CommRule,
    CheckpointRule,
    ImbalanceRule,
    InspectorRule,
)

#: ``JOB_RULES`` in the order they are made and fed: each after the rules it needs.
FEED_ORDER: tuple[type[JobRule], ...] = tuple(
    {r.spec.name: r for r in JOB_RULES}[s.name] for s in dependency_order([r.spec for r in JOB_RULES]))

#: The node-level rules the telemetry hub (models/telemetry/telemetry_hub.py) makes once for the worker and
#: feeds, in this order: a rule that consumes ``ALERTS`` gets the alerts of the rules listed before it.
NODE_RULES: tuple[type[NodeRule], ...] = (
    TelemetryRule,  # GPU faults and link errors (models/telemetry/telemetry_tracker.py); spikes name causes
    DeviceRule,  # gpu_idle, gpu_hot, hbm_full (models/telemetry/device_rules.py)
    FabricRule,  # many nodes' link errors at once: one fabric incident (models/oncall/incidents.py)
)

#: Rules on the alerts leaving the engine, declared so that their alert types have a source: restarts
#: (models/oncall/restarts.py) and the node ledger (models/oncall/ledger.py), driven by ``OnCall.finish``
#: (models/oncall/oncall.py), which every alert passes through once.
OUTLET_RULES: tuple[RuleSpec, ...] = (
    RuleSpec(name="oncall", consumes=frozenset({Signal.ALERTS}),
             alert_types=(AlertType.JOB_RESTART, AlertType.NODE_SUSPECT),
             failure_classes=("job_restart", "node_suspect"), settings=OnCallSettings),
)


def all_specs() -> list[RuleSpec]:
    """Every registered rule's spec: per-job, node-level, outlet."""
    return [r.spec for r in JOB_RULES] + [r.spec for r in NODE_RULES] + list(OUTLET_RULES)


def declared_types() -> dict[AlertType, list[str]]:
    """Alert type -> the registered rules that declare it."""
    out: dict[AlertType, list[str]] = {t: [] for t in AlertType}
    for spec in all_specs():
        for t in spec.alert_types:
            out[t].append(spec.name)
    return out
