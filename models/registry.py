"""The registry of rules: the one list the engine builds every job's rules from.

A new per-job rule is a module with a ``JobRule`` (models/rule.py) and one line in ``JOB_RULES``; the engine
makes an instance per job, in an order where each comes after the rules it ``needs``, and feeds it the
signals it declares. The order of ``JOB_RULES`` is the order open alerts are listed and closed in.

``NODE_RULES`` declares the rules outside a job's state (node telemetry, alerts derived where alerts leave
the engine): what they emit and can be classified as, so every alert type has a declared source
(tests/test_rule_contract.py checks it).
"""

from __future__ import annotations

from .alert_types import AlertType
from .job_rules import (CheckpointRule, CommRule, HangRule, ImbalanceRule, InspectorRule, LongStragglerRule,
                        StragglerRule, ThroughputRule)
from .rule import JobRule, RuleSpec, Signal, dependency_order
from .oncall.oncall import OnCallSettings
from .telemetry.telemetry_hub import TelemetrySettings

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

NODE_RULES: tuple[RuleSpec, ...] = (
    # models/telemetry/telemetry_tracker.py through the hub: Xid/ECC, link counters; they also name suspected causes.
    RuleSpec(name="telemetry", consumes=frozenset({Signal.TELEMETRY}),
             alert_types=(AlertType.GPU_FAULT, AlertType.LINK_ERRORS),
             failure_classes=("xid_79_off_bus", "xid_74_nvlink", "xid_48_dbe", "ecc_dbe", "xid_63_row_remap",
                              "xid_64_row_remap_failure", "xid_92_sbe_rate", "xid_94_contained_ecc",
                              "xid_95_uncontained_ecc", "xid_gsp", "xid_other", "nvlink_down", "pcie_downgrade",
                              "thermal_throttle", "power_throttle", "link_errors", "link_down",
                              "network_congestion", "host_io", "host_cpu_memory", "host_oom"),
             settings=TelemetrySettings),
    # models/telemetry/device_rules.py: GPU utilisation, temperature, memory against the job's progress.
    RuleSpec(name="device", consumes=frozenset({Signal.TELEMETRY, Signal.RANK_STEPS}),
             alert_types=(AlertType.GPU_IDLE, AlertType.GPU_HOT, AlertType.HBM_FULL),
             failure_classes=("gpu_idle", "gpu_hot", "hbm_full"), settings=TelemetrySettings),
    # models/oncall/incidents.py: many nodes' ports erring together, one fabric incident.
    RuleSpec(name="fabric", consumes=frozenset({Signal.TELEMETRY}), alert_types=(AlertType.FABRIC,),
             failure_classes=("fabric",), settings=TelemetrySettings),
    # models/oncall/oncall.py (restarts) and models/oncall/ledger.py (node ledger): made from the alerts leaving
    # the engine.
    RuleSpec(name="oncall", consumes=frozenset({Signal.ALERTS}),
             alert_types=(AlertType.JOB_RESTART, AlertType.NODE_SUSPECT),
             failure_classes=("job_restart", "node_suspect"), settings=OnCallSettings),
)


def declared_types() -> dict[AlertType, list[str]]:
    """Alert type -> the registered rules that declare it."""
    out: dict[AlertType, list[str]] = {t: [] for t in AlertType}
    for spec in [r.spec for r in JOB_RULES] + list(NODE_RULES):
        for t in spec.alert_types:
            out[t].append(spec.name)
    return out
