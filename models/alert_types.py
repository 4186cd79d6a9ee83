"""The closed vocabularies of an alert: its type, status, severity, scope and its causes' categories.

Each is a ``StrEnum``: a member *is* its string (``AlertType.HANG == "hang"``, ``str()`` and JSON give
``"hang"``), so the wire format is unchanged and code that compares with strings keeps working, while
the rules, the engine and the sinks name them. Which rule emits which type is declared by the rule
(``RuleSpec.alert_types``, models/rule.py; the node-level sources in models/registry.py).

``FACTS`` declares, once per type, what other parts do with it (derived, node-scoped, network, pages, ...); the
sets at the end are derived from it: one place, instead of a set of names in every module that branches on them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from enum import StrEnum
from types import MappingProxyType


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


@dataclass(frozen=True, slots=True)
class TypeFacts:
    """What the rest of stepwatch does with an alert type, declared once per type (``FACTS``): the families the
    outlet, the on-call stages, the feeds and the reports branch on. A new type is one row of ``FACTS`` (a test
    fails until it has one); nothing else names it to be routed, paged or classified like its family."""

    #: Made from other alerts where they leave the engine (restarts, the node ledger), not by a detector on input.
    derived: bool = False
    #: A node telemetry alert about one component (a GPU, a port): published by the owner of the node's partition
    #: (streams/telemetry_feed.py); a job alert's suspected cause can point at it (models/oncall/citations.py).
    node_component: bool = False
    #: About the network between ranks: a link, the fabric, or the job's collectives.
    network: bool = False
    #: Implicates the nodes it names in the node ledger (models/oncall/ledger.py).
    implicates: bool = False
    #: Its ``nodes`` are the culprits' (a hang's culprits are in its evidence; other job alerts name victims too).
    names_culprit_nodes: bool = False
    #: The telemetry hub names its suspected causes, and its failure class follows the first one
    #: (models/oncall/actions.py).
    enriched: bool = False
    #: A job's symptom that names its cause's node and component (models/oncall/citations.py).
    symptom: bool = False
    #: Pages: its own series in /metrics (streams/metrics.py) and judged by automatic confirmation (stepwatch/outcomes.py).
    pages: bool = False
    #: An incident of several nodes that names its jobs itself: no ``node`` label, not a node's own alert.
    multi_node_incident: bool = False
    #: Asks for its action whatever its severity and scope (a verdict on a node: the action hooks, the drain budget).
    always_acts: bool = False
    #: A job's ranks stopped (a hang): its listed ranks all wait, so only host causes near them are theirs
    #: (telemetry_hub.py); a job with only these open and no event since is dead (models/engine.py); one during a
    #: restart's silence is counted in the restart (stepwatch/report.py).
    stalls: bool = False
    #: While it fires, its suspected causes are re-derived as its nodes' telemetry accumulates (telemetry_hub.py).
    causes_follow_clock: bool = False
    #: Its evidence prices the slowdown in GPU-hours a day (models/steps/cost.py), summed by ``stepwatch report``.
    costed: bool = False
    #: A job's alert about one GPU of one node: cited as that component's incident, like a node alert
    #: (models/oncall/citations.py).
    job_component: bool = False


_NODE_FAULT = TypeFacts(node_component=True, implicates=True, names_culprit_nodes=True)
FACTS: Mapping[AlertType, TypeFacts] = MappingProxyType({
    AlertType.STRAGGLER: TypeFacts(implicates=True, names_culprit_nodes=True, enriched=True, symptom=True, pages=True,
                                   causes_follow_clock=True, costed=True),
    AlertType.HANG: TypeFacts(implicates=True, enriched=True, symptom=True, pages=True, stalls=True),
    AlertType.THROUGHPUT_DROP: TypeFacts(symptom=True),
    AlertType.COMM_SLOWDOWN: TypeFacts(network=True, enriched=True, symptom=True),
    AlertType.CHECKPOINT_STALE: TypeFacts(),
    AlertType.IMBALANCE: TypeFacts(costed=True),
    AlertType.JOB_RESTART: TypeFacts(derived=True),
    AlertType.NODE_SUSPECT: TypeFacts(derived=True, names_culprit_nodes=True, always_acts=True),
    AlertType.GPU_FAULT: _NODE_FAULT,
    AlertType.LINK_ERRORS: replace(_NODE_FAULT, network=True),
    AlertType.FABRIC: TypeFacts(network=True, multi_node_incident=True),
    AlertType.GPU_IDLE: TypeFacts(),
    AlertType.GPU_HOT: TypeFacts(node_component=True),
    AlertType.HBM_FULL: TypeFacts(job_component=True),
    AlertType.ACTION_BUDGET: TypeFacts(),
})
_UNKNOWN = TypeFacts()


def check_rows(types: type[StrEnum], rows: Mapping) -> None:
    """Raise if a type has no row of facts: a type without one would be routed as no family (never paged, never
    enriched) without a word, so the import fails instead."""
    missing = [t.value for t in types if t not in rows]
    if missing:
        raise TypeError(f"alert types without a FACTS row (models/alert_types.py): {', '.join(missing)}")


check_rows(AlertType, FACTS)


def facts(alert_type: AlertType | str) -> TypeFacts:
    """``alert_type``'s facts; a type this version does not know (read back from a newer worker) has none."""
    return FACTS.get(alert_type, _UNKNOWN)  # type: ignore[arg-type]


def _having(fact: str) -> frozenset[AlertType]:
    return frozenset(t for t, f in FACTS.items() if getattr(f, fact))


#: Every alert type, as strings (the CLI's choices).
ALERT_TYPES: tuple[str, ...] = tuple(t.value for t in AlertType)
#: The families of ``FACTS``, as sets (each derived: one declaration per type).
DERIVED_TYPES = _having("derived")
NETWORK_TYPES = _having("network")
#: Node telemetry alerts owned by the node's partition (streams/telemetry_feed.py).
NODE_TYPES = _having("node_component")
#: Alerts that implicate the nodes they name in the node ledger (models/oncall/ledger.py).
IMPLICATING_TYPES = _having("implicates")
#: Alerts the telemetry hub names suspected causes for (models/telemetry/telemetry_hub.py).
ENRICHED_TYPES = _having("enriched")
#: Types with a per-type series in /metrics (streams/metrics.py): those that page, in ``AlertType`` order.
METERED_TYPES: tuple[AlertType, ...] = tuple(t for t in AlertType if facts(t).pages)
