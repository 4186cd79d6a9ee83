"""Failure classes are declared once, by the rules (issue 40 item 3): the on-call table has a row for exactly the
classes the registered rules declare, and an alert type's class by type alone is read from those declarations."""

from __future__ import annotations

from stepwatch.models import registry
from stepwatch.models.alert_types import ALERT_TYPES
from stepwatch.models.registry import type_classes
from stepwatch.models.oncall.actions import FAILURE_CLASSES, Classifier


def test_the_table_has_a_row_for_each_class_a_rule_declares_and_no_other():
    assert set(FAILURE_CLASSES) - {"unknown"} == registry.declared_classes()


def test_a_types_class_by_type_alone_is_one_its_rules_declare():
    by_type = type_classes()
    assert set(by_type) == set(ALERT_TYPES)  # every declared type has one
    for spec in registry.all_specs():
        for t in spec.alert_types:
            emitting = [s for s in registry.all_specs() if t in s.alert_types]
            assert by_type[t.value] in emitting[0].failure_classes, (t, by_type[t.value])
    assert Classifier(types=type_classes()).types == by_type
