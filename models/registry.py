"""The registry of rules: the one list the engine builds every job's rules from.

A new per-job rule is a module with a ``JobRule`` (models/rule.py) and one line in ``JOB_RULES``; the engine
makes an instance per job, in an order where each comes after the rules it ``needs``, and feeds it the
signals it declares. The order of ``JOB_RULES`` is the order open alerts are listed and closed in.

A new node-level rule (node telemetry, keyed by node) is a module with a ``NodeRule`` and one line in
``NODE_RULES``; the telemetry hub makes one for the worker and feeds it what it declares. A new rule on the
alerts leaving the engine (restarts, the node ledger) is a module with an ``OutletRule`` and one line in
``OUTLET_RULES``; the engine's outlet (``OnCall``) makes one for the worker and feeds it every alert leaving.
The outlet chain itself is ``OUTLET_STAGES`` (models/outlet.py). Every alert type has a declared source, and every registered rule runs through one contract
(tests/models/test_rule_contract.py).
"""

from __future__ import annotations

from .alert_types import AlertType
from .job_rules import (CheckpointRule, CommRule, HangRule, ImbalanceRule, InspectorRule, LongStragglerRule,
                        StragglerRule, ThroughputRule)
from .rule import JobRule, NodeRule, OutletRule, RuleSpec, dependency_order
from .oncall.outlet_rules import DrainBudgetRule, LedgerRule, RestartRule
from .oncall.stages import (AttributeStage, CiteStage, ClassifyStage, EffectiveComputeStage, GateStage, OnsetStage,
                            OutletRulesStage)
from .telemetry.cause_finders import CauseFinder, FabricCauses, HostCauses, RankCauses
from .telemetry.node_rules import DeviceRule, FabricRule, IntermittentRule, NodeIncidentRule, TelemetryRule

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
#: feeds, in this order: a rule that consumes ``ALERTS`` gets the alerts of the rules listed before it; those that
#: consume ``ENRICHED`` get the job rules' alerts, with their suspected causes, in this order too.
NODE_RULES: tuple[type[NodeRule], ...] = (
    TelemetryRule,  # GPU faults and link errors (models/telemetry/telemetry_tracker.py); spikes name causes
    DeviceRule,  # gpu_idle, gpu_hot, hbm_full (models/telemetry/device_rules.py)
    FabricRule,  # many nodes' link errors at once: one fabric incident (models/telemetry/incidents.py)
    NodeIncidentRule,  # most ranks of one node straggling: one node incident (models/telemetry/incidents.py)
    IntermittentRule,  # a rank's straggler episodes close together: one incident (models/telemetry/incidents.py)
)

#: What names suspected causes (models/telemetry/cause_finders.py): the telemetry hub asks those that apply to an
#: alert: the ranks' own GPUs and ports, host signals, and the comparison of a job's nodes for job-wide alerts.
CAUSE_FINDERS: tuple[type[CauseFinder], ...] = (RankCauses, HostCauses, FabricCauses)

#: The rules on the alerts leaving the engine, which the engine's outlet (``OnCall``, models/oncall/oncall.py)
#: makes once for the worker and feeds, in this order, every alert as it leaves.
OUTLET_RULES: tuple[type[OutletRule], ...] = (
    RestartRule,  # job restarts, naming the alert before them (models/oncall/restarts.py)
    LedgerRule,  # node_suspect: a node implicated in several jobs' incidents (models/oncall/ledger.py)
    DrainBudgetRule,  # drains beyond the drain budget held for a human (models/oncall/budget.py)
)


#: The outlet chain (models/outlet.py): the stages every alert leaving the engine goes through, in this order, before
#: the pipeline's record of what was published. Each is made once for the worker with the on-call state it shares.
OUTLET_STAGES = (
    AttributeStage,  # node alerts name the jobs on their node (models/oncall/placement.py)
    OnsetStage,  # evidence.onset_ts from the job's recent steps
    CiteStage,  # the incident each alert belongs to; a straggler's own cost absorbed or held (models/oncall/citations.py)
    ClassifyStage,  # scope, failure class, action (models/oncall/actions.py)
    EffectiveComputeStage,  # resolved job alerts carry the job's productive share
    OutletRulesStage,  # the OUTLET_RULES above; node alerts republished when a job starts on their node
    GateStage,  # the escalation ladder, then the drain budget
)


def all_specs() -> list[RuleSpec]:
    """Every registered rule's spec: per-job, node-level, outlet."""
    return [r.spec for r in (*JOB_RULES, *NODE_RULES, *OUTLET_RULES)]


def declared_types() -> dict[AlertType, list[str]]:
    """Alert type -> the registered rules that declare it."""
    out: dict[AlertType, list[str]] = {t: [] for t in AlertType}
    for spec in all_specs():
        for t in spec.alert_types:
            out[t].append(spec.name)
    return out


def declared_classes() -> set[str]:
    """Every failure class a registered rule declares (models/oncall/actions.py has a row for each)."""
    return {c for spec in all_specs() for c in spec.failure_classes}


def type_classes() -> dict[str, str]:
    """Alert type -> its failure class by type alone, as the rules declare it: the class named as the type, else
    the first the first rule emitting the type declares (models/oncall/actions.py ``TYPE_CLASSES``)."""
    out: dict[str, str] = {}
    for spec in all_specs():
        for t in spec.alert_types:
            if t.value not in out and spec.failure_classes:
                out[t.value] = t.value if t.value in spec.failure_classes else spec.failure_classes[0]
    return out
