"""The alert types' facts (models/alert_types.py ``FACTS``) are declared once per type and agree with who emits the
type (the registry's rule specs): a family is decided by its facts, so a new type or rule needs no edit where the
family is branched on (issue 40)."""

from __future__ import annotations

from stepwatch.models.alert_types import (DERIVED_TYPES, ENRICHED_TYPES, FACTS, IMPLICATING_TYPES, METERED_TYPES,
                                          NETWORK_TYPES, NODE_TYPES, AlertType, TypeFacts, facts)
from stepwatch.models.registry import JOB_RULES, NODE_RULES, OUTLET_RULES


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
