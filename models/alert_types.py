"""The closed vocabularies of an alert: its type, status, severity, scope and its causes' categories.

Each is a ``StrEnum``: a member *is* its string (``AlertType.HANG == "hang"``, ``str()`` and JSON give
``"hang"``), so the wire format is unchanged and code that compares with strings keeps working, while
the rules, the engine and the sinks name them. Which rule emits which type is declared by the rule
(``RuleSpec.alert_types``, models/rule.py; the node-level sources in models/registry.py).

The sets at the end group types by what other parts do with them (derived, node-scoped, network, ...):
one place, instead of a set of names in every module that branches on them.
"""

from __future__ import annotations

from enum import StrEnum


class AlertType(StrEnum):
    """``Alert.type`` (and ``labels.alertname`` without its ``stepwatch_`` prefix): what ``stepwatch alerts
    --type`` offers and the runbooks (docs/runbooks/<type>.md) cover."""

    STRAGGLER = "straggler"  # models/steps/straggler.py, models/steps/long_straggler.py
    HANG = "hang"  # models/hang/detector.py
    THROUGHPUT_DROP = "throughput_drop"  # models/jobhealth/throughput.py
    COMM_SLOWDOWN = "comm_slowdown"  # models/jobhealth/comm.py
    CHECKPOINT_STALE = "checkpoint_stale"  # models/jobhealth/checkpoint.py
    IMBALANCE = "imbalance"  # models/steps/imbalance.py
    JOB_RESTART = "job_restart"  # models/oncall/oncall.py
    NODE_SUSPECT = "node_suspect"  # models/oncall/ledger.py
    GPU_FAULT = "gpu_fault"  # models/telemetry/telemetry_tracker.py (Xid, ECC)
    LINK_ERRORS = "link_errors"  # models/telemetry/telemetry_tracker.py (InfiniBand/RoCE ports)
    FABRIC = "fabric"  # models/telemetry/incidents.py (many nodes' ports erring together: one fabric incident)
    GPU_IDLE = "gpu_idle"  # models/telemetry/device_rules.py
    GPU_HOT = "gpu_hot"  # models/telemetry/device_rules.py
    HBM_FULL = "hbm_full"  # models/telemetry/device_rules.py
    ACTION_BUDGET = "action_budget"  # models/oncall/budget.py (drains held beyond the drain budget)


class AlertStatus(StrEnum):
    """``Alert.status``: an alert keeps its id from firing to resolved."""

    FIRING = "firing"
    RESOLVED = "resolved"


class Severity(StrEnum):
    """``Alert.severity``: ``info`` is steady waste worth a ticket, not a page."""

    INFO = "info"
    WARNING = "warning"
    CRITICAL = "critical"


class Scope(StrEnum):
    """``Alert.scope`` (``labels.scope``): who acts on it (models/oncall/actions.py); unset until the alert leaves
    the engine."""

    UNSET = ""
    DEVICE = "device"  # a GPU, a node: drain, reset, replace
    PLATFORM = "platform"  # network, power, shared storage
    JOB = "job"  # the job's own code, data or partitioning
    FLEET = "fleet"  # stepwatch's own automation across the fleet (the drain budget)


class CauseCategory(StrEnum):
    """``SuspectedCause.category`` (models/telemetry/causes.py): the kind of component a suspected cause names."""

    NETWORK = "network"
    COMPUTE = "compute"
    APPLICATION = "application"
    INPUT_PIPELINE = "input_pipeline"
    HOST = "host"
    #: The node's storage: IO pressure, disk latency, network-filesystem client stats (a hang in a checkpoint).
    STORAGE = "storage"
    FABRIC = "fabric"
    #: Not of this vocabulary: another producer's category, read back (``SuspectedCause.of``) with its own
    #: name kept in ``SuspectedCause.foreign_category`` and written out again as it came; never written by us.
    OTHER = "other"


#: Every alert type, as strings (the CLI's choices).
ALERT_TYPES: tuple[str, ...] = tuple(t.value for t in AlertType)
#: Made from other alerts where they leave the engine (models/oncall/oncall.py), not by a detector on the input.
DERIVED_TYPES = frozenset({AlertType.JOB_RESTART, AlertType.NODE_SUSPECT})
#: About the network between ranks: a link, the fabric, or the job's collectives.
NETWORK_TYPES = frozenset({AlertType.COMM_SLOWDOWN, AlertType.LINK_ERRORS, AlertType.FABRIC})
#: Node telemetry alerts owned by the node's partition (streams/telemetry_feed.py).
NODE_TYPES = frozenset({AlertType.GPU_FAULT, AlertType.LINK_ERRORS, AlertType.GPU_HOT})
#: Alerts that implicate the nodes they name in the node ledger (models/oncall/ledger.py).
IMPLICATING_TYPES = frozenset({AlertType.STRAGGLER, AlertType.HANG, AlertType.GPU_FAULT, AlertType.LINK_ERRORS})
#: Alerts the telemetry hub names suspected causes for (models/telemetry/telemetry_hub.py).
ENRICHED_TYPES = frozenset({AlertType.STRAGGLER, AlertType.HANG, AlertType.COMM_SLOWDOWN})
#: Types with a per-type series in /metrics (streams/metrics.py): the two that page.
METERED_TYPES: tuple[AlertType, ...] = (AlertType.STRAGGLER, AlertType.HANG)
