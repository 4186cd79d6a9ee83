"""Failure classes: what an alert means for the on-call SRE, and what to do about it.

Every alert leaving the engine is classified once, here (``Classifier.annotate``), whatever
detector made it, so alert types added later get a scope and an action too (``investigate``
until the table names them). The classification adds:

* ``scope`` (the ``labels.scope`` label): ``device`` (a GPU, a node), ``platform`` (network,
  power, storage: shared infrastructure) or ``job`` (the application itself), seed 003's three
  monitoring layers. Not ``evidence.layer``, which attributes a slowdown to compute,
  communication or the input pipeline;
* ``evidence.failure_class``: a row of :data:`FAILURE_CLASSES`;
* ``evidence.onset_ts``: event time of the estimated onset (time to detect = starts_at - onset_ts);
* ``evidence.action``: ``{"kind", "nodes", "retryable", "exclude_nodes"}``, machine-readable;
* ``recommended_action`` (``annotations.recommended_action``): the same in one sentence.

``retryable`` means a restart of the job *on the same nodes* can be expected to get past the
problem (seed 003, 4.3: restart only failures that a restart can fix); ``exclude_nodes`` are
the nodes to leave out of the restart (drained, or to be drained).

The failure-class table (docs/operations.md, "On call", shows the same):

===========================  ========  ===============  =========  =======  ===========================
class                        scope     action kind      retryable  exclude  when
===========================  ========  ===============  =========  =======  ===========================
xid_79_off_bus               device    drain_node       no         yes      Xid 79: GPU fell off the bus
xid_74_nvlink                device    reset_gpu        no         yes      Xid 74: NVLink error
xid_48_dbe / ecc_dbe         device    reset_gpu        no         yes      double-bit ECC error
xid_63_row_remap             device    reset_gpu        yes        no       row remapping pending
xid_64_row_remap_failure     device    replace_gpu      no         yes      row remapping failed
xid_92_sbe_rate              device    investigate      yes        no       high single-bit ECC rate
xid_94_contained_ecc         device    restart_job      yes        no       contained ECC error
xid_95_uncontained_ecc       device    reset_gpu        no         yes      uncontained ECC error
xid_gsp (61/62/109/119/120)  device    reset_gpu        no         yes      GPU firmware / GSP errors
xid_other                    device    investigate      no         yes      any other critical Xid
app_xid (13/31/43/45/68)     job       fix_application  no         no       the application faulted
nvlink_down                  device    drain_node       no         yes      an NVLink is down
pcie_downgrade               device    drain_node       no         yes      PCIe link width/gen lower
thermal_throttle             device    investigate      no         no       clocks cut by temperature
power_throttle               platform  investigate      no         no       clocks cut by power capping
link_errors                  platform  check_link       yes        no       port errors
link_down                    platform  check_link       no         yes      port down
network_congestion           platform  check_link       yes        no       xmit wait, CNPs, bandwidth
fabric                       platform  check_link       yes        no       many nodes' ports err at once
input_pipeline               job       fix_application  no         no       data_time far above peers
host_io                      platform  investigate      yes        no       IO pressure, slow disk
host_cpu_memory              device    investigate      yes        no       CPU saturation, memory pressure
host_oom                     job       fix_application  no         no       OOM killer on a rank's node
straggler_unexplained        device    investigate      yes        no       slow rank, no cause seen
hang_silent_ranks            job       restart_job      yes        no       ranks stopped reporting
hang_culprit                 job       restart_job      yes        no       ranks never reached a coll.
hang_partial                 job       restart_job      yes        no       some ranks stuck
hang_undetermined            job       restart_job      yes        no       no culprit named
throughput_drop              job       investigate      yes        no       whole job slower
comm_slowdown                platform  check_link       yes        no       collectives slower
checkpoint_stale             job       investigate      yes        no       no recent checkpoint
imbalance                    job       repartition      yes        no       uneven work per rank
gpu_idle                     job       investigate      yes        no       GPUs idle while job runs
gpu_hot                      device    investigate      no         no       GPU temperature high
hbm_full                     job       fix_application  no         no       GPU memory nearly full
job_restart                  job       investigate      yes        no       the job restarted
node_suspect                 device    drain_node       no         yes      node implicated repeatedly
action_budget                fleet     hold_for_human   no         no       drains held beyond the budget
unknown                      job       investigate      yes        no       anything else
===========================  ========  ===============  =========  =======  ===========================

``straggler_unexplained`` and a ``warning`` ``node_suspect`` get their action from the escalation
ladder instead (``observe``, ``notify_owner``, ``restart_job``, ``drain_node``: models/oncall/ladder.py,
applied by the outlet: models/oncall/escalation.py); the table's kind is what they fall back to.

A straggler, hang or communication slowdown with suspected causes takes the class of its
first (best-ranked) cause when that cause is a device or platform fault (an Xid on the
culprit's GPU makes the straggler an ``xid_*`` incident, with that node to drain).

Overrides: ``STEPWATCH_ONCALL_FAILURE_CLASSES`` is a JSON object (or ``@path`` to a JSON
file) ``{"<class>": {"scope"?, "kind"?, "retryable"?, "exclude"?, "sentence"?}}``; fields
left out keep the default, a new class name adds a row, and ``"types": {"<alert type>":
"<class>"}`` maps alert types the table does not know.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from typing import Any

from ..alert_types import AlertType, CauseCategory, facts
from ..alerts import Alert
from ..evidence import HangCase, HangEvidence, StragglerEvidence, StragglerSignal
from ..telemetry.causes import SuspectedCause

SCOPES = ("device", "platform", "job", "fleet")
ACTION_KINDS = ("drain_node", "reset_gpu", "replace_gpu", "check_link", "restart_job", "fix_application",
                "repartition", "investigate", "hold_for_human", "observe", "notify_owner")


@dataclass(frozen=True, slots=True)
class FailureClass:
    scope: str
    kind: str
    retryable: bool
    exclude: bool  # the implicated nodes go to ``exclude_nodes``
    sentence: str  # ``{nodes}`` is replaced by the implicated nodes


def _fc(scope: str, kind: str, retryable: bool, exclude: bool, sentence: str) -> FailureClass:
    return FailureClass(scope, kind, retryable, exclude, sentence)


#: What each failure class means and asks for: a row per class the registered rules declare
#: (``RuleSpec.failure_classes``, the one list of which exist), and ``unknown`` (tests/models/oncall/test_failure_classes.py).
FAILURE_CLASSES: dict[str, FailureClass] = {
    "xid_79_off_bus": _fc("device", "drain_node", False, True,
                          "GPU fell off the bus (Xid 79): drain {nodes}, reset or replace the GPU, and restart the "
                          "job without {nodes}."),
    "xid_74_nvlink": _fc("device", "reset_gpu", False, True,
                         "NVLink error (Xid 74): drain {nodes} and reset the GPU; restart the job without {nodes}."),
    "xid_48_dbe": _fc("device", "reset_gpu", False, True,
                      "Double-bit ECC error (Xid 48): reset the GPU on {nodes} (drain it first) and restart the job "
                      "without {nodes}."),
    "ecc_dbe": _fc("device", "reset_gpu", False, True,
                   "Double-bit ECC errors: reset the GPU on {nodes} (drain it first) and restart the job without "
                   "{nodes}."),
    "xid_63_row_remap": _fc("device", "reset_gpu", True, False,
                            "ECC row remapping pending (Xid 63): reset the GPU on {nodes} at the next job boundary."),
    "xid_64_row_remap_failure": _fc("device", "replace_gpu", False, True,
                                    "ECC row remapping failed (Xid 64): drain {nodes} and replace the GPU."),
    "xid_92_sbe_rate": _fc("device", "investigate", True, False,
                           "High single-bit ECC error rate (Xid 92) on {nodes}: watch it; replace the GPU if it "
                           "goes on."),
    "xid_94_contained_ecc": _fc("device", "restart_job", True, False,
                                "Contained ECC error (Xid 94) on {nodes}: only the application was hit; restart the "
                                "job from its checkpoint."),
    "xid_95_uncontained_ecc": _fc("device", "reset_gpu", False, True,
                                  "Uncontained ECC error (Xid 95): drain {nodes}, reset the GPU, restart the job "
                                  "without {nodes}."),
    "xid_gsp": _fc("device", "reset_gpu", False, True,
                   "GPU firmware error on {nodes}: drain the node and reset the GPU; restart the job without {nodes}."),
    "xid_other": _fc("device", "investigate", False, True,
                     "Critical Xid on {nodes}: keep the job off the node and read the driver log (dmesg)."),
    "app_xid": _fc("job", "fix_application", False, False,
                   "The application faulted on the GPU (application Xid): fix the code or its inputs; a restart "
                   "repeats it."),
    "nvlink_down": _fc("device", "drain_node", False, True,
                       "An NVLink is down on {nodes}: drain the node and restart the job without it."),
    "pcie_downgrade": _fc("device", "drain_node", False, True,
                          "PCIe link downgraded on {nodes}: drain the node and reseat or replace the GPU."),
    "thermal_throttle": _fc("device", "investigate", False, False,
                            "GPU thermal throttling on {nodes}: check cooling and airflow; drain the node if it "
                            "goes on."),
    "power_throttle": _fc("platform", "investigate", False, False,
                          "GPU power throttling on {nodes}: check power capping and the rack's power budget."),
    "link_errors": _fc("platform", "check_link", True, False,
                       "Network port errors on {nodes}: check the cable, transceiver and switch port."),
    "link_down": _fc("platform", "check_link", False, True,
                     "Network port down on {nodes}: fix the link; restart the job without {nodes} meanwhile."),
    "network_congestion": _fc("platform", "check_link", True, False,
                              "Network congestion near {nodes}: check the fabric (congestion control, routing)."),
    "fabric": _fc("platform", "check_link", True, False,
                  "One fault of the shared fabric (a switch or its cabling) under {nodes}: check the switch; no "
                  # (the path is the incidents' former home: kept, the alert text must not change in issue 40)
                  "node is to blame or drain (models/telemetry/incidents.py)."),
    "input_pipeline": _fc("job", "fix_application", False, False,
                          "The input pipeline is slow on {nodes}: check data loader workers and storage throughput."),
    "host_io": _fc("platform", "investigate", True, False,
                   "IO pressure or a slow disk on {nodes}: check the node's storage and the shared file system."),
    "host_cpu_memory": _fc("device", "investigate", True, False,
                           "CPU or memory pressure on {nodes}: look for other processes on the node; drain it if "
                           "they are not the job's."),
    "host_oom": _fc("job", "fix_application", False, False,
                    "The kernel's OOM killer hit a rank on {nodes}: lower the job's host memory use (data loader "
                    "workers, pinned memory), then restart."),
    "straggler_unexplained": _fc("device", "investigate", True, False,
                                 "A rank on {nodes} is slower than its peers and no telemetry explains it: "
                                 "investigate the node; drain it if it keeps straggling."),
    "hang_silent_ranks": _fc("job", "restart_job", True, False,
                             "Ranks on {nodes} stopped reporting: check whether their processes died, then restart "
                             "the job from its checkpoint."),
    "hang_culprit": _fc("job", "restart_job", True, False,
                        "Ranks on {nodes} never reached the collective their peers wait in: take stacks, then "
                        "restart the job."),
    "hang_partial": _fc("job", "restart_job", True, False,
                        "Some ranks are stuck while others step: take stacks of the stuck ranks, then restart the "
                        "job."),
    "hang_undetermined": _fc("job", "restart_job", True, False,
                             "The job is hung with no culprit named: take stacks of all ranks, then restart the job."),
    "throughput_drop": _fc("job", "investigate", True, False,
                           "The whole job slowed down: look at its layer attribution and recent changes."),
    "comm_slowdown": _fc("platform", "check_link", True, False,
                         "Collectives got slower: check the network between {nodes}."),
    "checkpoint_stale": _fc("job", "investigate", True, False,
                            "Checkpoints are missing or slow: check checkpoint storage and the job's checkpoint "
                            "settings."),
    "imbalance": _fc("job", "repartition", True, False,
                     "Work is unevenly spread over the ranks: repartition the data or the model."),
    "gpu_idle": _fc("job", "investigate", True, False, "GPUs on {nodes} sit idle while the job runs: investigate."),
    "gpu_hot": _fc("device", "investigate", False, False, "GPU running hot on {nodes}: check cooling."),
    "hbm_full": _fc("job", "fix_application", False, False,
                    "GPU memory nearly full on {nodes}: reduce the batch or enable activation checkpointing."),
    "job_restart": _fc("job", "investigate", True, False,
                       "The job restarted from a checkpoint: see the preceding alert for the reason."),
    "node_suspect": _fc("device", "drain_node", False, True,
                        "{nodes} keeps being implicated in incidents: drain it, run diagnostics, and keep jobs off "
                        "it."),
    "action_budget": _fc("fleet", "hold_for_human", False, False,
                         "Drains held beyond the drain budget on {nodes}: look for one cause (a rollout, power, a "
                         "switch) before releasing any (models/oncall/budget.py)."),
    "unknown": _fc("job", "investigate", True, False, "Investigate the alert's evidence."),
}



XID_CLASSES: dict[int, str] = {79: "xid_79_off_bus", 74: "xid_74_nvlink", 48: "xid_48_dbe", 63: "xid_63_row_remap",
                               64: "xid_64_row_remap_failure", 92: "xid_92_sbe_rate", 94: "xid_94_contained_ecc",
                               95: "xid_95_uncontained_ecc", 61: "xid_gsp", 62: "xid_gsp", 109: "xid_gsp",
                               119: "xid_gsp", 120: "xid_gsp"}
APP_XIDS = frozenset({13, 31, 43, 45, 68})
HANG_CLASSES = {HangCase.SILENT_RANKS: "hang_silent_ranks", HangCase.CULPRIT_BEFORE_COLLECTIVE: "hang_culprit",
                HangCase.PARTIAL_HANG: "hang_partial", HangCase.UNDETERMINED: "hang_undetermined"}
#: Classes that mean the hardware cannot recover by itself (node_suspect fires at once).
NON_RECOVERABLE = frozenset({"xid_79_off_bus", "xid_48_dbe", "ecc_dbe", "nvlink_down", "xid_64_row_remap_failure",
                             "xid_95_uncontained_ecc"})
#: Network signals of a port that mean congestion rather than a broken link.
CONGESTION_SIGNALS = frozenset({"port_xmit_wait", "np_cnp_sent", "rp_cnp_handled", "np_ecn_marked_roce_packets",
                                "bandwidth", "xmit_wait", "data_rate"})  # the last two: models/telemetry/fabric.py


def load_overrides(text: str) -> dict[str, Any]:
    """The configured overrides: a JSON object, or ``@path`` of a JSON file; empty: none."""
    text = (text or "").strip()
    if not text:
        return {}
    if text.startswith("@"):
        with open(text[1:], encoding="utf-8") as f:
            text = f.read()
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"oncall.failure_classes: not JSON ({exc})") from None
    if not isinstance(value, dict):
        raise ValueError("oncall.failure_classes: expected a JSON object")
    return value


class Classifier:
    """Applies the failure-class table (with overrides) to alerts.

    Hyperparameters (keyword-only):

    * ``types``: the alert types' classes by type alone (models/registry.py ``type_classes()``).
    * ``overrides``: ``{"<class>": {field: value}, "types": {"<type>": "<class>"}}`` (see the module doc).
    """

    def __init__(self, *, types: dict[str, str], overrides: dict[str, Any] | None = None) -> None:
        self.classes = dict(FAILURE_CLASSES)
        #: Alert types classified by type alone, as the registered rules declare them (models/registry.py
        #: ``type_classes``, given by the engine: the registry imports the rules, which import this module).
        self.types = dict(types)
        for name, change in (overrides or {}).items():
            if name == "types":
                if not isinstance(change, dict):
                    raise ValueError("oncall.failure_classes: 'types' must map alert types to classes")
                self.types.update({str(k): str(v) for k, v in change.items()})
                continue
            if not isinstance(change, dict):
                raise ValueError(f"oncall.failure_classes: {name!r} must be an object")
            base = self.classes.get(name, FAILURE_CLASSES["unknown"])
            unknown = set(change) - {f.name for f in dataclasses.fields(FailureClass)}
            if unknown:
                raise ValueError(f"oncall.failure_classes: {name!r}: unknown field(s) {sorted(unknown)}")
            fc = dataclasses.replace(base, **change)
            if fc.scope not in SCOPES or fc.kind not in ACTION_KINDS:
                raise ValueError(f"oncall.failure_classes: {name!r}: scope must be one of {SCOPES}, kind one of "
                                 f"{ACTION_KINDS}")
            self.classes[name] = fc

    # -- classification ---------------------------------------------------------------------

    def failure_class(self, alert: Alert) -> str:
        ev = alert.evidence
        if alert.type == AlertType.GPU_FAULT:
            return self._gpu_fault_class(ev)
        if alert.type == AlertType.LINK_ERRORS:
            state = str(ev.get("state") or "ACTIVE").upper()
            return "link_down" if state not in ("ACTIVE", "NONE") else "link_errors"
        if facts(alert.type).enriched:  # its first suspected cause says its class
            cause = _first_cause(ev)
            if cause is not None:
                from_cause = self._cause_class(cause)
                if from_cause is not None:
                    return from_cause
            if alert.type == AlertType.STRAGGLER and StragglerEvidence.of(alert).input_pipeline:
                return "input_pipeline"
            if alert.type == AlertType.HANG:
                return HANG_CLASSES.get(HangEvidence.of(alert).case, "hang_undetermined")
        cls = self.types.get(alert.type)
        return cls if cls in self.classes else "unknown"

    def _gpu_fault_class(self, ev: dict) -> str:
        fault = ev.get("fault")
        if fault == "xid":
            return self._xid_class(ev.get("xid"))
        if fault in ("ecc_dbe", "nvlink_down", "pcie_downgrade"):
            return fault
        if fault == "throttle":
            reasons = " ".join(ev.get("reasons") or ())
            return "power_throttle" if "power" in reasons.lower() and "thermal" not in reasons.lower() \
                else "thermal_throttle"
        return "xid_other"

    def _xid_class(self, xid: Any) -> str:
        try:
            code = int(xid)
        except (TypeError, ValueError):
            return "xid_other"
        if code in APP_XIDS:
            return "app_xid"
        return XID_CLASSES.get(code, "xid_other")

    def _cause_class(self, cause: SuspectedCause) -> str | None:
        """The class of a suspected cause, when it is a device or platform fault (else None)."""
        category = cause.category
        signals = cause.signals
        top = signals[0] if signals else None
        if category == CauseCategory.INPUT_PIPELINE:
            return "input_pipeline"
        if category == CauseCategory.FABRIC:  # a fabric incident (models/telemetry/incidents.py)
            return "fabric"
        if category == CauseCategory.HOST:  # models/telemetry/host.py: node IO, CPU, memory pressure, OOM kills
            if top == "oom_kill":
                return "host_oom"
            return "host_io" if top in ("psi_io", "disk_read_latency") else "host_cpu_memory"
        if category == CauseCategory.STORAGE:  # models/telemetry/host.py: a hang's culprits' node storage
            return "host_io"
        if category == CauseCategory.APPLICATION:
            return "app_xid"
        if category == CauseCategory.COMPUTE:
            if top == "xid":
                first = cause.evidence[0]
                return self._xid_class(first.get("xid"))
            if top == "ecc_dbe":
                return "ecc_dbe"
            if top == "nvlink_down":
                return "nvlink_down"
            if top == "pcie_downgrade":
                return "pcie_downgrade"
            if top == "throttle":
                what = cause.hint
                return "power_throttle" if "power" in what else "thermal_throttle"
            return None  # minor signals (single-bit ECC, NVLink counters): the alert's own class
        if category == CauseCategory.NETWORK:
            if top == "link_down":
                return "link_down"
            if top in CONGESTION_SIGNALS:
                return "network_congestion"
            return "link_errors"
        return None

    # -- the annotation ------------------------------------------------------------------------

    def annotate(self, alert: Alert) -> Alert:
        """The alert with scope, failure class, onset, action and recommended action (idempotent)."""
        ev = dict(alert.evidence)
        cls = ev.get("failure_class")
        if not isinstance(cls, str) or cls not in self.classes:
            cls = self.failure_class(alert)
        fc = self.classes.get(cls, self.classes["unknown"])
        nodes = implicated_nodes(alert)
        ev["failure_class"] = cls
        if not isinstance(ev.get("onset_ts"), (int, float)):
            ev["onset_ts"] = onset_ts(alert)
        # A rule that says what to do (the imbalance rule: which stages to move layers out of, or that the ranks
        # are of different classes) keeps its words as the action's detail; the kind is the failure class's
        # (ACTION_KINDS: what automation and the action hooks act on).
        remedy = ev.get("action") if isinstance(ev.get("action"), dict) else None
        detail = remedy.get("detail") if remedy is not None else None
        ev["action"] = {"kind": fc.kind, "nodes": list(nodes), "retryable": fc.retryable,
                        "exclude_nodes": list(nodes) if fc.exclude else []}
        if isinstance(detail, str):
            ev["action"]["detail"] = detail
        where = ", ".join(nodes) if nodes else "the node"
        sentence = fc.sentence.replace("{nodes}", where)
        if alert.type == AlertType.LINK_ERRORS and isinstance(ev.get("switch"), str):  # topology knows the cable
            sentence += (f" {ev.get('device') or 'The NIC'} is cabled to switch {ev['switch']}"
                         + (f" port {ev['switch_port']}" if isinstance(ev.get("switch_port"), str) else "") + ".")
        return dataclasses.replace(alert, evidence=ev, scope=fc.scope, recommended_action=sentence)

    def is_non_recoverable(self, cls: str) -> bool:
        return cls in NON_RECOVERABLE


def _first_cause(ev: dict) -> SuspectedCause | None:
    """The alert's best-ranked suspected cause (models/telemetry/causes.py), read back through its record."""
    causes = ev.get("suspected_causes")
    if isinstance(causes, list) and causes:
        return SuspectedCause.of(causes[0])
    return None


def implicated_nodes(alert: Alert) -> tuple[str, ...]:
    """The nodes an alert implicates: its culprits' nodes, or the node of its first suspected cause.

    A straggler's ``nodes`` are its culprit's; a hang's culprits are listed with their nodes in
    ``evidence.culprits`` (its ``nodes`` also name the ranks waiting for them, which are victims).
    """
    ev = alert.evidence
    out: list[str] = []
    cause = _first_cause(ev)
    if alert.type == AlertType.HANG:
        out.extend(HangEvidence.of(alert).culprit_nodes)
    elif facts(alert.type).names_culprit_nodes or not alert.job:
        out.extend(alert.nodes)
    if cause is not None and cause.node:
        out.append(str(cause.node))
    return tuple(dict.fromkeys(out))


def onset_ts(alert: Alert) -> float:
    """Event time of the problem's estimated onset (never after ``starts_at``)."""
    ev = alert.evidence
    for name in ("stalled_since", "began_at", "silence_began_at"):
        value = ev.get(name)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(min(value, alert.starts_at))
    if alert.type == AlertType.STRAGGLER:
        # The episode began at first_step; a step lasts about the peers' median step time.
        e = StragglerEvidence.of(alert)
        if (e.signal is StragglerSignal.STEP_TIME and e.first_step is not None and e.detected_step is not None
                and e.peer_median is not None):
            return round(alert.starts_at - max(e.detected_step - e.first_step, 0) * e.peer_median, 6)
    return alert.starts_at
