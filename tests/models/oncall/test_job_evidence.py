"""The per-job rules' evidence as typed records (issue 25 item 4): long straggler, throughput, comm, checkpoint,
imbalance, the intermittent incidents' episodes, and the suspected causes the on-call actions read back.

Each record's ``to_dict`` is the wire form the rule wrote as a dict before (docs/alerts.md, docs/job-health.md):
the dicts below are written by hand in that form (keys, order, value types, as published alerts carry them),
and each must read back through its record's ``from_dict`` and come out the same, key order included. Then the
rules themselves, driven through the engine on the contract test's hand-written job (tests/models/test_rule_contract.py),
must emit evidence that starts with exactly their record's dict.
"""

from __future__ import annotations

import json

import pytest

from stepwatch.models.registry import type_classes
from stepwatch.models.alert_types import AlertType, CauseCategory
from stepwatch.models.alerts import Alert
from stepwatch.models.evidence import Horizon, StragglerEvidence, StragglerSignal
from stepwatch.models.jobhealth.checkpoint import (Basis, CheckpointAgeEvidence, SlowCheckpointEvidence,
                                                   StaleReason)
from stepwatch.models.jobhealth.comm import CommEvidence
from stepwatch.models.jobhealth.throughput import Layer, ThroughputEvidence
from stepwatch.models.oncall.actions import Classifier, implicated_nodes
from stepwatch.models.telemetry.incidents import EpisodesEvidence, IntermittentIncidents
from stepwatch.models.steps.cost import Cost
from stepwatch.models.steps.imbalance_evidence import (ClassImbalanceEvidence, ImbalanceKind, RankClass, Remedy,
                                                       RemedyKind, StageImbalanceEvidence, StageLoad)
from stepwatch.models.steps.straggler_evidence import LongStragglerCost, LongStragglerEvidence
from stepwatch.models.telemetry.causes import SuspectedCause

from test_rule_contract import FAULTS, JOB, run

LONG = {"horizon": "long", "signal": "compute_time", "group": None, "ratio": 1.0516, "rank_median": 0.8424,
        "peer_median": 0.801, "steps": 48, "window": 200, "cusum": 16.15, "threshold": 16.0, "min_effect": 0.03,
        "first_step": 100, "detected_step": 147, "seconds_lost_per_step": 0.02644, "step_share_lost": 0.02655,
        "job_slowdown": 1.0273, "job_ranks": 16, "gpu_hours_lost_per_day": 10.2}
LONG_IN_CLASS = {"horizon": "long", "signal": "arrival", "group": "stage1", "ratio": 1.041, "rank_median": 0.4164,
                 "peer_median": 0.4, "steps": 200, "window": 200, "cusum": 17.3, "threshold": 16.0,
                 "min_effect": 0.03, "first_step": 12, "detected_step": 311, "class": 1,
                 "seconds_lost_per_step": 0.0101, "step_share_lost": 0.02, "job_slowdown": 1.0204, "job_ranks": 32,
                 "gpu_hours_lost_per_day": 15.36}
THROUGHPUT = {"signal": "typical_step_time", "baseline_step_time": 0.418378, "recent_step_time": 0.447913,
              "slowdown": 0.1005, "cusum": 1.3352, "onset_step": 68, "detected_step": 128, "layer": "compute",
              "layer_deltas_seconds": {"communication": 6.4e-05, "compute": 0.029365, "input pipeline": 3e-06},
              "min_effect": 0.1, "baseline_tokens_per_second": 313133.76, "recent_tokens_per_second": 292606.64}
THROUGHPUT_NO_TOKENS = {"signal": "typical_step_time", "baseline_step_time": 0.070892, "recent_step_time": 0.084151,
                        "slowdown": 0.2586, "cusum": 1.3551, "onset_step": 41, "detected_step": 49,
                        "layer": "unknown", "layer_deltas_seconds": {"communication": 0.000395}, "min_effect": 0.1}
COMM = {"process_group": "default", "op": "all_reduce", "size_bucket": "268435456B+",
        "baseline_transfer_seconds": 0.050493, "recent_transfer_seconds": 0.090621, "increase": 0.7947,
        "threshold": 0.3, "detected_seq": 81, "rank_growth": {"9": 0.6302, "15": 0.6263, "12": 0.6253},
        "median_rank_growth": 0.5986}
COMM_NO_BASELINE = {"process_group": "tp0", "op": "all_gather", "size_bucket": "1048576B+",
                    "baseline_transfer_seconds": 0.002, "recent_transfer_seconds": 0.0031, "increase": 0.55,
                    "threshold": 0.3, "detected_seq": 40, "rank_growth": {}, "median_rank_growth": None}
CHECKPOINT_AGE = {"reason": "age", "basis": "reported", "age_seconds": 3608.5, "steps_since": 348,
                  "last_checkpoint_step": 200, "max_age_seconds": 3600.0, "max_age_steps": 0}
CHECKPOINT_NEVER = {"reason": "age", "basis": "policy", "age_seconds": 7201.0, "steps_since": None,
                    "last_checkpoint_step": None, "max_age_seconds": 0.0, "max_age_steps": 500}
CHECKPOINT_SLOW = {"reason": "slow", "duration_seconds": 312.5, "typical_seconds": 41.2, "slow_factor": 3.0,
                   "step": 1200}
STAGE = {"kind": "stage",
         "groups": [{"group": "stage1", "ranks": [4, 5, 6, 7], "median": 0.32, "ratio": 1.6},
                    {"group": "stage0", "ranks": [0, 1, 2, 3], "median": 0.2, "ratio": 1.0}],
         "slow_groups": ["stage1"], "ratio": 1.6, "wait_share": 0.375, "step_time": 0.36, "balanced_step_time": 0.3,
         "job_slowdown": 1.2, "seconds_lost_per_step": 0.06, "gpu_hours_lost_per_day": 32.0, "cost_gpus": 8,
         "cost_step_time": 0.36, "steps": 10, "min_effect": 0.1,
         "action": {"kind": "repartition", "detail": "move layers out of stage(s) stage1 to the faster stages"}}
STAGE_NO_COST = {k: v for k, v in STAGE.items()
                 if k not in ("job_slowdown", "seconds_lost_per_step", "gpu_hours_lost_per_day", "cost_gpus",
                              "cost_step_time")}
CLASSES = {"kind": "classes", "group": None,
           "classes": [{"ranks": [1, 3, 5, 7], "nodes": ["node-000", "node-001"], "median": 2.40571},
                       {"ranks": [0, 2, 4, 6], "nodes": ["node-000", "node-001"], "median": 0.79937}],
           "ratio": 3.01, "steps": 10, "class_gap": 1.5,
           "likely_reason": "ranks on the same nodes differ: shared GPUs or per-process contention",
           "split_by_node": False,
           "action": {"kind": "placement", "detail": "per-rank straggler alerts now compare ranks within their class"}}

ROUND_TRIPS = [
    (LongStragglerEvidence, LONG), (LongStragglerEvidence, LONG_IN_CLASS), (ThroughputEvidence, THROUGHPUT),
    (ThroughputEvidence, THROUGHPUT_NO_TOKENS), (CommEvidence, COMM), (CommEvidence, COMM_NO_BASELINE),
    (CheckpointAgeEvidence, CHECKPOINT_AGE), (CheckpointAgeEvidence, CHECKPOINT_NEVER),
    (SlowCheckpointEvidence, CHECKPOINT_SLOW), (StageImbalanceEvidence, STAGE), (StageImbalanceEvidence, STAGE_NO_COST),
    (ClassImbalanceEvidence, CLASSES), (EpisodesEvidence, {"episodes": 3, "intermittent": True}),
]


@pytest.mark.parametrize("record, wire", ROUND_TRIPS, ids=[f"{r.__name__}-{i}" for i, (r, _) in enumerate(ROUND_TRIPS)])
def test_todays_wire_dict_reads_back_as_its_record_and_out_the_same(record, wire):
    typed = record.from_dict(wire)
    assert typed.to_dict() == wire
    assert json.dumps(typed.to_dict()) == json.dumps(wire)  # key order too: recordings replay byte for byte
    # keys added after the alert was made (resolution, causes, on-call) are not the record's
    later = {**wire, "resolution": "recovered", "suspected_causes": [], "onset_ts": 1.0}
    assert record.from_dict(later) == typed


def test_records_built_by_hand_write_the_wire_names():
    long = LongStragglerEvidence(
        signal=StragglerSignal.COMPUTE_TIME, group=None, ratio=1.0516, rank_median=0.8424, peer_median=0.801, steps=48,
        window=200, cusum=16.15, threshold=16.0, min_effect=0.03, first_step=100, detected_step=147, rank_class=None,
        cost=LongStragglerCost(seconds_lost_per_step=0.02644, step_share_lost=0.02655, job_slowdown=1.0273,
                               job_ranks=16, gpu_hours_lost_per_day=10.2))
    assert long.to_dict() == LONG and "class" not in long.to_dict()
    drop = ThroughputEvidence(baseline_step_time=0.418378, recent_step_time=0.447913, slowdown=0.1005, cusum=1.3352,
                              onset_step=68, detected_step=128, layer=Layer.COMPUTE,
                              layer_deltas_seconds=(("communication", 6.4e-05), ("compute", 0.029365),
                                                    ("input pipeline", 3e-06)),
                              min_effect=0.1, tokens_per_second=(313133.76, 292606.64))
    assert drop.to_dict() == THROUGHPUT
    comm = CommEvidence(process_group="default", op="all_reduce", size_bucket="268435456B+",
                        baseline_transfer_seconds=0.050493, recent_transfer_seconds=0.090621, increase=0.7947,
                        threshold=0.3, detected_seq=81, rank_growth=(("9", 0.6302), ("15", 0.6263), ("12", 0.6253)),
                        median_rank_growth=0.5986)
    assert comm.to_dict() == COMM
    assert CheckpointAgeEvidence(basis=Basis.REPORTED, age_seconds=3608.5, steps_since=348, last_checkpoint_step=200,
                                 max_age_seconds=3600.0, max_age_steps=0).to_dict() == CHECKPOINT_AGE
    assert SlowCheckpointEvidence(duration_seconds=312.5, typical_seconds=41.2, slow_factor=3.0,
                                  step=1200).to_dict() == CHECKPOINT_SLOW
    stage = StageImbalanceEvidence(
        groups=(StageLoad("stage1", (4, 5, 6, 7), 0.32, 1.6), StageLoad("stage0", (0, 1, 2, 3), 0.2, 1.0)),
        slow_groups=("stage1",), ratio=1.6, wait_share=0.375, step_time=0.36, balanced_step_time=0.3,
        cost=Cost(job_slowdown=1.2, seconds_lost_per_step=0.06, gpu_hours_lost_per_day=32.0, gpus=8, step_time=0.36),
        steps=10, min_effect=0.1,
        action=Remedy(RemedyKind.REPARTITION, "move layers out of stage(s) stage1 to the faster stages"))
    assert stage.to_dict() == STAGE
    classes = ClassImbalanceEvidence(
        group=None, classes=(RankClass((1, 3, 5, 7), ("node-000", "node-001"), 2.40571),
                             RankClass((0, 2, 4, 6), ("node-000", "node-001"), 0.79937)),
        ratio=3.01, steps=10, class_gap=1.5, likely_reason=CLASSES["likely_reason"], split_by_node=False,
        action=Remedy(RemedyKind.PLACEMENT, "per-rank straggler alerts now compare ranks within their class"))
    assert classes.to_dict() == CLASSES
    # the enums are their wire strings
    assert (StaleReason.SLOW, Layer.INPUT_PIPELINE, ImbalanceKind.STAGE) == ("slow", "input pipeline", "stage")


def test_a_record_refuses_another_kinds_evidence():
    with pytest.raises(ValueError):
        StageImbalanceEvidence.from_dict(CLASSES)
    with pytest.raises(ValueError):
        ClassImbalanceEvidence.from_dict(STAGE)
    with pytest.raises(ValueError):
        SlowCheckpointEvidence.from_dict(CHECKPOINT_AGE)
    with pytest.raises(ValueError):
        CheckpointAgeEvidence.from_dict(CHECKPOINT_SLOW)
    with pytest.raises(ValueError):
        LongStragglerEvidence.from_dict({**LONG, "horizon": "short"})
    assert EpisodesEvidence.from_dict({"episodes": 1}) is None  # a rank's first episode carries no record


def alert(type_: AlertType, evidence: dict, **kw) -> Alert:
    return Alert(id=kw.pop("id", "a1"), status=kw.pop("status", "firing"), type=type_, severity="warning", job="j",
                 ranks=kw.pop("ranks", ()), nodes=(), starts_at=kw.pop("starts_at", 100.0), summary="s",
                 evidence=evidence, **kw)


def test_throughput_layer_is_read_through_the_record():
    assert ThroughputEvidence.layer_of(alert(AlertType.THROUGHPUT_DROP, THROUGHPUT)) is Layer.COMPUTE
    assert ThroughputEvidence.layer_of(alert(AlertType.THROUGHPUT_DROP, {**THROUGHPUT, "layer": "input pipeline"})) \
        is Layer.INPUT_PIPELINE
    # another alert type, or a layer not in the vocabulary (an old record): no layer, not a crash
    assert ThroughputEvidence.layer_of(alert(AlertType.COMM_SLOWDOWN, {"layer": "communication"})) is None
    assert ThroughputEvidence.layer_of(alert(AlertType.THROUGHPUT_DROP, {"layer": "disk"})) is None
    assert ThroughputEvidence.layer_of(alert(AlertType.THROUGHPUT_DROP, {})) is None


def test_straggler_view_reads_what_the_intermittent_incidents_act_on():
    short = {"signal": "compute_time", "horizon": "short", "group": "stage2", "first_step": 130, "detected_step": 132,
             "peer_median": 0.8, "resolved_step": 185}
    e = StragglerEvidence.of(alert(AlertType.STRAGGLER, short, ranks=(3,)))
    assert (e.group, e.first_step, e.resolved_step, e.short, e.node_incident) == ("stage2", 130, 185, True, False)
    e = StragglerEvidence.of(alert(AlertType.STRAGGLER, {**LONG}, ranks=(3,)))
    assert e.horizon is Horizon.LONG and not e.short
    assert StragglerEvidence.of(alert(AlertType.STRAGGLER, {"incident_scope": "node"}, ranks=(3,))).node_incident
    assert StragglerEvidence.of(alert(AlertType.STRAGGLER, {}, ranks=(3,))).short  # no horizon: the short rule's


def test_intermittent_episodes_are_written_through_their_record():
    """A rank that straggles again soon after its last episode, with its events' evidence as the short rule writes
    it (group, first and resolved steps); a second rank's long-horizon alert and a node incident pass untouched."""
    inc = IntermittentIncidents(hold_steps=25)
    base = {"signal": "compute_time", "horizon": "short", "group": "stage1", "ratio": 1.6}
    first = alert(AlertType.STRAGGLER, {**base, "first_step": 50}, id="e1", ranks=(3,), starts_at=100.0)
    assert inc.filter([first]) == [first]
    ended = first.resolved(at=150.0, summary="resolved: back in line", evidence={**first.evidence, "resolved_step": 90})
    assert inc.filter([ended]) == [ended]
    again = alert(AlertType.STRAGGLER, {**base, "first_step": 110}, id="e2", ranks=(3,), starts_at=170.0)
    out = inc.filter([again])[0]
    assert out.id == "e1" and out.starts_at == 100.0
    assert EpisodesEvidence.from_dict(out.evidence) == EpisodesEvidence(episodes=2)
    assert {k: out.evidence[k] for k in base} == base  # the rule's own evidence as it wrote it
    # too late (first slow step 26 after the end): a new incident
    late = alert(AlertType.STRAGGLER, {**base, "first_step": 300}, id="e3", ranks=(3,), starts_at=400.0)
    inc.filter([out.resolved(at=200.0, summary="resolved: back", evidence={**out.evidence, "resolved_step": 274})])
    assert inc.filter([late]) == [late]
    others = [alert(AlertType.STRAGGLER, {**LONG}, id="l1", ranks=(5,)),
              alert(AlertType.STRAGGLER, {**base, "incident_scope": "node"}, id="n1", ranks=(6,))]
    assert inc.filter(others) == others


RECORDS = {
    "long_straggler": lambda a: LongStragglerEvidence,
    "throughput": lambda a: ThroughputEvidence,
    "comm": lambda a: CommEvidence,
    "checkpoint": lambda a: CheckpointAgeEvidence if a.evidence["reason"] == "age" else SlowCheckpointEvidence,
    "imbalance": lambda a: StageImbalanceEvidence if a.evidence["kind"] == "stage" else ClassImbalanceEvidence,
}


@pytest.mark.parametrize("rule", sorted(RECORDS))
def test_the_rules_write_exactly_their_records(rule):
    """Each rule's fault from the contract test, through the engine (the fault still on at the end): the rule's open
    alerts' evidence is exactly its record's dict, and every alert of the rule's type the engine emitted begins with
    it (later keys: resolution, cost of the job, on-call enrichment; the on-call ``action`` replaces the rule's)."""
    settings, fault = FAULTS[rule]()
    engine, alerts = run(fault, settings)
    wanted = {"long_straggler": AlertType.STRAGGLER, "throughput": AlertType.THROUGHPUT_DROP,
              "comm": AlertType.COMM_SLOWDOWN, "checkpoint": AlertType.CHECKPOINT_STALE,
              "imbalance": AlertType.IMBALANCE}[rule]
    own = engine.jobs[JOB].rule(rule).open_alerts()
    assert own, f"{rule}: its fault left no open alert"
    for a in own:
        assert json.dumps(RECORDS[rule](a).from_dict(a.evidence).to_dict()) == json.dumps(a.evidence)
    mine = [a for a in alerts if a.type == wanted and (rule != "long_straggler" or a.evidence.get("horizon") == "long")]
    assert mine, f"{rule}: its fault gave no alert"
    for a in mine:
        ev = dict(a.evidence, action=own[0].evidence["action"]) if rule == "imbalance" else a.evidence
        written = RECORDS[rule](a).from_dict(ev).to_dict()
        assert [k for k in a.evidence if k in written] == list(written)
        assert {k: v for k, v in a.evidence.items() if k in written and k != "action"} == \
            {k: v for k, v in written.items() if k != "action"}


def test_a_suspected_cause_reads_back_through_its_record():
    """models/oncall/actions.py reads an alert's first suspected cause through ``SuspectedCause`` (models/telemetry/
    causes.py), not by key: the wire entry, written by hand as the telemetry hub writes it, round-trips."""
    wire = {"rank": 1, "category": "network", "node": "node-000", "component": "mlx5_1/1", "score": 4.599,
            "began_at": 1700000209.0, "hint": "network: mlx5_1/1 symbol errors", "near_rank": False,
            "device": "mlx5_1", "port": 1,
            "evidence": [{"signal": "symbol_error", "what": "symbol errors", "count": 74},
                         {"signal": "port_xmit_wait", "what": "transmit wait", "rate": 1828185.0}]}
    cause = SuspectedCause.from_dict(wire)
    assert cause.category is CauseCategory.NETWORK and cause.signals == ("symbol_error", "port_xmit_wait")
    assert json.dumps(cause.to_dict(wire["rank"])) == json.dumps(wire)
    assert SuspectedCause.of(wire) == cause
    # what a reader must survive: not a cause, a category not in the vocabulary, fields left out
    assert SuspectedCause.of("network") is None and SuspectedCause.of({"node": "node-000"}) is None
    assert SuspectedCause.of({"category": "weather"}).category is CauseCategory.OTHER  # kept: see the next test
    bare = SuspectedCause.of({"category": "compute"})
    assert bare is not None and bare.node is None and bare.signals == () and bare.hint == ""


def test_a_foreign_producers_cause_is_kept_and_goes_out_as_it_came():
    """A cause whose category is not of our vocabulary (another producer's) is not dropped: it reads as ``OTHER``
    with its own name kept, still implicates its node, and is written back byte for byte; ours are unchanged."""
    wire = {"rank": 1, "category": "power_supply", "node": "node-042", "component": "psu1", "score": 3.2,
            "began_at": 1700000100.0, "hint": "power supply: PSU 1 lost redundancy",
            "evidence": [{"signal": "psu_redundancy_lost", "what": "PSU 1"}]}
    cause = SuspectedCause.of(wire)
    assert cause is not None and cause.category is CauseCategory.OTHER
    assert cause.foreign_category == cause.category_name == "power_supply"
    assert json.dumps(cause.to_dict(1)) == json.dumps(wire)
    straggler = alert(AlertType.STRAGGLER, {"signal": "compute_time", "horizon": "short", "suspected_causes": [wire]},
                      ranks=(3,))
    assert implicated_nodes(straggler) == ("node-042",)
    assert Classifier(types=type_classes()).failure_class(straggler) == Classifier(types=type_classes()).failure_class(
        alert(AlertType.STRAGGLER, {"signal": "compute_time", "horizon": "short"}, ranks=(3,)))  # its own class
    ours = SuspectedCause.of(dict(wire, category="host"))
    assert ours.foreign_category is None and ours.to_dict(1)["category"] == "host"
    assert "foreign_category" not in ours.to_dict(1)


def test_the_failure_class_and_nodes_come_from_the_first_cause_record():
    classes = Classifier(types=type_classes())
    xid = {"rank": 1, "category": "compute", "node": "node-007", "component": "GPU 3", "score": 9.0, "began_at": 5.0,
           "hint": "Xid 79 on GPU 3", "gpu": 3, "evidence": [{"signal": "xid", "xid": 79}]}
    throttle = dict(xid, hint="compute: power brake", evidence=[{"signal": "throttle"}])
    straggler = alert(AlertType.STRAGGLER, {"signal": "compute_time", "horizon": "short", "suspected_causes": [xid]},
                      ranks=(3,))
    assert classes.failure_class(straggler) == classes._xid_class(79) != "unknown"
    assert implicated_nodes(straggler) == ("node-007",)
    assert classes.failure_class(alert(AlertType.STRAGGLER, {"suspected_causes": [throttle]}, ranks=(3,))) == \
        "power_throttle"
    # a cause that is not one (an old or foreign record) leaves the alert its own class
    odd = alert(AlertType.STRAGGLER, {"signal": "data_time", "suspected_causes": [{"category": "weather"}]}, ranks=(3,))
    assert classes.failure_class(odd) == "input_pipeline" and implicated_nodes(odd) == ()


# -- the link_errors alert (models/telemetry/link_evidence.py) ------------------------------------------------

LINK = {"node": "node-007", "device": "mlx5_1", "port": 1, "began_at": 1700000321.5,
        "errors": {"symbol_error": 412, "link_downed": 1}, "state": "ACTIVE", "rate_gbps": 200.0,
        "bad_samples": 4, "window": 10,
        "ports": [{"device": "mlx5_1", "port": 1, "errors": {"symbol_error": 412, "link_downed": 1}, "state": "ACTIVE",
                   "bad_samples": 4, "began_at": 1700000321.5},
                  {"device": "mlx5_3", "port": 1, "errors": {}, "state": "DOWN", "bad_samples": 2,
                   "began_at": None}]}


def test_link_errors_evidence_round_trips_and_reads_kinds():
    from stepwatch.models.telemetry.link_evidence import LinkErrorsEvidence

    a = alert(AlertType.LINK_ERRORS, {**LINK, "jobs": [{"job": "j", "ranks": [3]}]})  # a key added later: ignored
    e = LinkErrorsEvidence.of(a)
    assert json.dumps(e.to_dict()) == json.dumps(LINK)  # key order included
    assert [p.device for p in e.ports] == ["mlx5_1", "mlx5_3"]
    assert e.error_kinds == {"symbol_error", "link_downed", "link_down"}  # the second port is down
    # What a reader must not fail on: garbage ports are skipped, missing numbers read as empty.
    odd = LinkErrorsEvidence.of(alert(AlertType.LINK_ERRORS, {"errors": {"rcv_error": 3}, "ports": ["x", None]}))
    assert odd.ports == () and odd.began_at is None and odd.error_kinds == {"rcv_error"}
    with pytest.raises(ValueError):
        LinkErrorsEvidence.of(alert(AlertType.GPU_FAULT, LINK))


def test_link_errors_alert_of_the_tracker_is_the_record():
    """The tracker's own alert (two ports of a node erring, one then down): its evidence is exactly the record's
    dict, and the record reads the kinds the fabric incidents group by."""
    from stepwatch.models.telemetry.link_evidence import LinkErrorsEvidence
    from stepwatch.models.telemetry.telemetry_tracker import TelemetryTracker
    from stepwatch.models.wire.telemetry_events import LinkEvent

    tracker = TelemetryTracker(clear_after=10)
    fired = []
    for t in range(30):
        for dev in ("mlx5_0", "mlx5_1"):
            k = int(t)
            state = "DOWN" if dev == "mlx5_1" and t >= 20 else "ACTIVE"
            ev = LinkEvent(node="n1", ts=1_760_000_000.0 + t, device=dev, port=1, state=state, rate=400.0,
                           counters={"port_xmit_data": k * 10**9, "port_rcv_data": k * 10**9,
                                     "port_xmit_wait": k * 200_000, "symbol_error": 10 * max(t - 10, 0)})
            fired += [a for a in tracker.update(ev) if a.type == AlertType.LINK_ERRORS]
    assert fired, "the ports' errors must fire a link_errors alert"
    record = LinkErrorsEvidence.of(fired[0])
    assert json.dumps(record.to_dict()) == json.dumps(fired[0].evidence)
    assert record.node == "n1" and "symbol_error" in record.error_kinds
