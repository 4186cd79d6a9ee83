"""The alert types' facts (models/alert_types.py ``FACTS``) are declared once per type and agree with who emits the
type (the registry's rule specs): a family is decided by its facts, so a new type or rule needs no edit where the
family is branched on (issue 40)."""

from __future__ import annotations

import dataclasses
from enum import StrEnum

import pytest

from stepwatch.models.alert_types import (DERIVED_TYPES, ENRICHED_TYPES, FACTS, IMPLICATING_TYPES, METERED_TYPES,
                                          NETWORK_TYPES, NODE_TYPES, AlertType, TypeFacts, check_rows, facts)
from stepwatch.models.alerts import Alert
from stepwatch.models.oncall.oncall import is_node_alert
from stepwatch.models.registry import JOB_RULES, NODE_RULES, OUTLET_RULES

T = AlertType
#: What the code branched on before each family was a fact, as written where it was used (issue 40): the first ten
#: are the sets commit 76ee49f replaced, the rest the branches named beside them.
OLD_SETS = {
    "derived": {T.JOB_RESTART, T.NODE_SUSPECT},
    "node_component": {T.GPU_FAULT, T.LINK_ERRORS, T.GPU_HOT},
    "network": {T.COMM_SLOWDOWN, T.LINK_ERRORS, T.FABRIC},
    "implicates": {T.STRAGGLER, T.HANG, T.GPU_FAULT, T.LINK_ERRORS},
    "names_culprit_nodes": {T.STRAGGLER, T.NODE_SUSPECT, T.GPU_FAULT, T.LINK_ERRORS},
    "enriched": {T.STRAGGLER, T.HANG, T.COMM_SLOWDOWN},
    "symptom": {T.STRAGGLER, T.HANG, T.THROUGHPUT_DROP, T.COMM_SLOWDOWN},
    "pages": {T.STRAGGLER, T.HANG},
    "multi_node_incident": {T.FABRIC},
    "always_acts": {T.NODE_SUSPECT},
    # telemetry_hub.py `!= HANG` (a hang's ranks all wait), engine.py `== "hang"` (a dead hang), report.py
    "stalls": {T.HANG},
    # telemetry_hub.py `== STRAGGLER and firing`, twice (a firing straggler's causes are re-derived)
    "causes_follow_clock": {T.STRAGGLER},
    # report.py `in (STRAGGLER, IMBALANCE)` (gpu_hours_lost_per_day summed)
    "costed": {T.STRAGGLER, T.IMBALANCE},
    # citations.py `== HBM_FULL` (a job's alert about one GPU, cited like a node's)
    "job_component": {T.HBM_FULL},
}
#: oncall.py ``is_node_alert``: `type not in (NODE_SUSPECT, FABRIC)`.
OLD_NOT_NODE_ALERTS = {T.NODE_SUSPECT, T.FABRIC}


def _emitted_by(rules) -> set[AlertType]:
    return {t for r in rules for t in r.spec.alert_types}


def test_every_type_has_its_facts_and_an_unknown_type_has_none():
    assert set(FACTS) == set(AlertType)
    assert all(type(f) is TypeFacts for f in FACTS.values())
    assert facts("a_type_of_a_newer_worker") == TypeFacts()
    assert all(facts(str(t)) is FACTS[t] for t in AlertType)  # the string is the member


def test_the_families_agree_with_who_emits_them():
    job, node, outlet = _emitted_by(JOB_RULES), _emitted_by(NODE_RULES), _emitted_by(OUTLET_RULES)
    for t, f in FACTS.items():
        if f.derived:  # made from other alerts where they leave the engine
            assert t in outlet and t not in job | node, t
        if f.node_component or f.multi_node_incident:  # about nodes: node telemetry's
            assert t in node and t not in job, t
        if f.enriched or f.symptom or f.pages:  # a job's own alert
            assert t in job, t
        if f.pages:  # a page names its suspected causes
            assert f.enriched, t
        if f.always_acts:  # acts on a node it names
            assert f.names_culprit_nodes and f.derived, t


def test_the_sets_are_the_facts():
    for name, fact in ((DERIVED_TYPES, "derived"), (NETWORK_TYPES, "network"), (NODE_TYPES, "node_component"),
                       (IMPLICATING_TYPES, "implicates"), (ENRICHED_TYPES, "enriched"), (set(METERED_TYPES), "pages")):
        assert name == {t for t in AlertType if getattr(facts(t), fact)}


def test_each_fact_is_the_set_the_code_branched_on_before():
    assert set(OLD_SETS) == {f.name for f in dataclasses.fields(TypeFacts)}  # a new fact gets its reference here
    for fact, old in OLD_SETS.items():
        assert {t for t in AlertType if getattr(FACTS[t], fact)} == old, fact


def test_is_node_alert_is_the_old_set_for_every_type_that_can_be_a_node_alert():
    """`derived or multi_node_incident` adds job_restart to the old exclusions: it is a job's restart (the restart
    rule sets its ``job``, models/oncall/outlet_rules.py), so it never had a node alert's shape; the rest agree."""
    new = {t for t in AlertType if FACTS[t].derived or FACTS[t].multi_node_incident}
    assert new - OLD_NOT_NODE_ALERTS == {T.JOB_RESTART} and OLD_NOT_NODE_ALERTS <= new
    for t in AlertType:
        for job, nodes in (("", ("n1",)), ("", ("n1", "n2")), ("", ()), ("j", ("n1",))):
            alert = Alert(id=f"{t}-{job}-{len(nodes)}", status="firing", type=t, severity="warning", job=job,
                          ranks=(), nodes=nodes, starts_at=1.0, summary="", evidence={})
            old = not job and bool(nodes) and t not in OLD_NOT_NODE_ALERTS
            assert is_node_alert(alert) == (old and t != T.JOB_RESTART), (t, job, nodes)
            assert alert.facts is FACTS[t]


def test_a_type_without_a_row_fails_loudly():
    grown = StrEnum("AlertType", {**{m.name: m.value for m in AlertType}, "NEW_ONE": "new_one"})
    with pytest.raises(TypeError, match="new_one"):
        check_rows(grown, {grown(t.value): f for t, f in FACTS.items()})
    check_rows(AlertType, FACTS)  # the shipped table is whole (also checked at import)
