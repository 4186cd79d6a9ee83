"""Precision per rule and automatic outcomes, without a broker (issue 41, items 1-2): the Wilson interval's
invariants, the verdict that counts, what confirms a straggler or hang and what makes an alert transient."""

from __future__ import annotations

import random

import pytest

from stepwatch.feedback import latest
from stepwatch.models.alert_types import AlertType, DERIVED_TYPES
from stepwatch.models.oncall.actions import FAILURE_CLASSES
from stepwatch.models.registry import all_specs
from stepwatch.models.wire.feedback import Feedback, Verdict
from stepwatch.outcomes import OutcomeSettings, automatic_outcomes, fault_types, hardware_classes
from stepwatch.precision import Judged, Versions, low_precision, precision_table, wilson
from stepwatch.report import build_report

T0 = 1_764_000_000.0


def alert(ident, kind, status, starts, ends=None, *, nodes=("n1",), cls=None, resolution=None, job="j"):
    ev = {"onset_ts": starts - 10, "failure_class": cls or kind}
    if resolution:
        ev["resolution"] = resolution
    return {"id": ident, "status": status, "type": kind, "job": job, "nodes": list(nodes), "starts_at": starts,
            "ends_at": ends, "evidence": ev, "labels": {"scope": "device"}}


# -- the interval ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(5))
def test_wilson_contains_the_estimate_narrows_with_trials_and_mirrors(seed):
    rng = random.Random(seed)
    for _ in range(200):
        n = rng.randint(1, 500)
        k = rng.randint(0, n)
        low, high = wilson(k, n)
        assert 0.0 <= low <= k / n <= high <= 1.0
        # the same share with more trials: a narrower interval
        low4, high4 = wilson(4 * k, 4 * n)
        assert high4 - low4 < high - low
        # successes and failures swap: the interval mirrors
        mlow, mhigh = wilson(n - k, n)
        assert mlow == pytest.approx(1 - high) and mhigh == pytest.approx(1 - low)
    assert wilson(0, 0) == (None, None)


def test_low_precision_needs_enough_feedback():
    assert not low_precision(0, 3, threshold=0.5, min_feedback=10)  # too few verdicts to say
    assert low_precision(1, 19, threshold=0.5, min_feedback=10)
    assert not low_precision(9, 11, threshold=0.5, min_feedback=10)  # 45 %, but chance could explain it


# -- the verdict that counts -----------------------------------------------------------------------------


def fb(ident, verdict, *, at=1.0, automatic=False):
    return Feedback(alert_id=ident, verdict=Verdict(verdict), by="stepwatch" if automatic else "alice", at=at,
                    automatic=automatic)


def test_a_person_beats_the_machine_in_any_order_and_a_tombstone_takes_back():
    human, machine = fb("a", "false", at=1.0), fb("a", "confirmed", at=9.0, automatic=True)
    for order in ([human, machine], [machine, human]):
        assert latest(order)["a"] == human
    assert latest([human, fb("a", "confirmed", at=2.0)])["a"].verdict is Verdict.CONFIRMED  # last word counts
    assert "a" not in latest([human, "a"])


@pytest.mark.parametrize("seed", range(3))
def test_transient_and_duplicate_never_move_precision(seed):
    rng = random.Random(seed)
    alerts = [Judged(f"a{i}", "straggler", T0 + i, T0 + i - 5) for i in range(60)]
    said = {a.id: fb(a.id, rng.choice(["confirmed", "false"])) for a in alerts[:30]}
    base = precision_table(alerts, said)["straggler"]
    more = dict(said)
    for a in alerts[30:]:
        more[a.id] = fb(a.id, rng.choice(["transient", "duplicate"]), automatic=True)
    row = precision_table(alerts, more)["straggler"]
    assert (row["precision"], row["interval"], row["confirmed"], row["false"]) == (
        base["precision"], base["interval"], base["confirmed"], base["false"])
    assert row["transient"] + row["duplicate"] == 30 and row["with_feedback"] == 60
    assert row["alerts"] == 60 and row["median_detect_seconds"] == 5.0


def test_versions_split_the_alerts_at_each_settings_change():
    alerts = [Judged(f"a{i}", "hang", T0 + 100 * i) for i in range(10)]
    said = {a.id: fb(a.id, "confirmed" if i < 5 else "false") for i, a in enumerate(alerts)}
    table = precision_table(alerts, said, Versions([T0 + 250, T0 + 450]))["hang"]
    versions = table["versions"]
    assert [v["alerts"] for v in versions.values()] == [3, 2, 5]  # before the first change, after each
    assert [v["precision"] for v in versions.values()] == [1.0, 1.0, 0.0]
    assert sum(v["confirmed"] for v in versions.values()) == table["confirmed"] == 5
    assert Versions().at(T0) == "-" and Versions([T0]).at(T0 - 1).startswith("before ")


# -- automatic outcomes ------------------------------------------------------------------------------------


def test_the_fault_types_are_derived_from_the_failure_classes():
    faults = fault_types()
    assert {"gpu_fault", "link_errors"} <= faults
    assert not faults & {str(t) for t in (*DERIVED_TYPES, AlertType.STRAGGLER, AlertType.HANG)}
    hardware = hardware_classes()
    assert "xid_79_off_bus" in hardware and "link_errors" in hardware
    assert "app_xid" not in hardware and "network_congestion" not in hardware
    for kind in faults:  # each can be said by a rule that names a hardware class
        assert any(kind in spec.alert_types and set(spec.failure_classes) & hardware for spec in all_specs())
    assert all(FAILURE_CLASSES[c].scope in ("device", "platform") for c in hardware)


@pytest.mark.parametrize("kind", ["straggler", "hang"])
def test_a_later_hardware_fault_on_a_named_node_confirms(kind):
    subject = alert("s", kind, "firing", T0, nodes=["n1", "n2"])
    noise = [alert(f"x{i}", "throughput_drop", "firing", T0 + i, nodes=["n1"]) for i in range(5)]
    for fault, expected in [
        (alert("f", "gpu_fault", "firing", T0 + 600, nodes=["n2"], cls="xid_79_off_bus"), Verdict.CONFIRMED),
        (alert("f", "link_errors", "firing", T0 + 60, nodes=["n1"], cls="link_errors"), Verdict.CONFIRMED),
        (alert("f", "gpu_fault", "firing", T0 + 600, nodes=["n3"], cls="xid_79_off_bus"), None),  # another node
        (alert("f", "gpu_fault", "firing", T0 - 60, nodes=["n1"], cls="xid_79_off_bus"), None),  # before it
        (alert("f", "gpu_fault", "firing", T0 + 600, nodes=["n1"], cls="app_xid"), None),  # the application's
        (alert("f", "gpu_fault", "firing", T0 + 7 * 3600, nodes=["n1"], cls="xid_48_dbe"), None),  # too late
    ]:
        records = [subject, *noise, fault]
        for seed in range(3):  # where the unrelated alerts fall in the stream changes nothing
            rng = random.Random(seed)
            shuffled = [subject, *rng.sample([*noise, fault], len(noise) + 1)]
            got = automatic_outcomes(shuffled).get("s")
            assert (got.verdict if got else None) is expected, (fault, records)
            if got:
                assert got.automatic and got.type == kind


def test_transient_is_a_short_self_resolved_alert_that_never_recurs():
    s = OutcomeSettings(transient_seconds=300)
    short = [alert("a", "straggler", "firing", T0), alert("a", "straggler", "resolved", T0, T0 + 120,
                                                              resolution="recovered")]
    assert automatic_outcomes(short, s)["a"].verdict is Verdict.TRANSIENT
    assert "a" not in automatic_outcomes(short + [alert("a", "straggler", "firing", T0 + 900)], s)  # it recurred
    long = [short[0], alert("a", "straggler", "resolved", T0, T0 + 301, resolution="recovered")]
    assert "a" not in automatic_outcomes(long, s)
    ended = [short[0], alert("a", "straggler", "resolved", T0, T0 + 60, resolution="job_ended")]
    assert "a" not in automatic_outcomes(ended, s)  # the job ended: not "by itself"
    assert "a" in automatic_outcomes(long, OutcomeSettings(transient_seconds=301))  # the setting moves the line


def test_the_report_counts_people_and_automatic_outcomes_apart():
    alerts = [alert("s1", "straggler", "firing", T0, nodes=["n1"]),
              alert("f1", "gpu_fault", "firing", T0 + 60, nodes=["n1"], cls="xid_79_off_bus"),
              alert("s2", "straggler", "firing", T0 + 100, nodes=["n5"]),
              alert("s2", "straggler", "resolved", T0 + 100, T0 + 160, nodes=["n5"], resolution="recovered"),
              alert("s3", "straggler", "firing", T0 + 200, nodes=["n6"])]
    report = build_report(alerts, verdicts={"s3": fb("s3", "false")})
    row = report["precision"]["straggler"]
    assert {k: row[k] for k in ("alerts", "confirmed", "false", "precision", "transient", "automatic")} == {
        "alerts": 3, "confirmed": 1, "false": 1, "precision": 0.5, "transient": 1, "automatic": 2}
    # a person's verdict on the automatically confirmed one replaces it
    report = build_report(alerts, verdicts={"s3": fb("s3", "false"), "s1": fb("s1", "false")})
    assert report["precision"]["straggler"]["false"] == 2 and report["precision"]["straggler"]["precision"] == 0.0
