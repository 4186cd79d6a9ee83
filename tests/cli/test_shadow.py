"""Shadow settings without a broker (models/shadow.py, streams/shadow.py): the live road's outputs are the same
whether a candidate runs beside it or not, whatever the candidate; the candidate's alerts are only those of its
rules under trial; a candidate that raises is caught and counted; and the report's comparison of live and shadow
alerts, joined with the feedback, is right on a hand-made case. (On a live worker: tests/streams/test_shadow_kafka.py.)"""

from __future__ import annotations

import pytest
import orjson

from step_gen import SyncJob
from stepwatch.config import Settings
from stepwatch.models import shadow as candidate
from stepwatch.models.detection import DetectionEngine
from stepwatch.models.pipeline import Pipeline
from stepwatch.models.shadow import SHADOW_KEY, Change, compare
from stepwatch.models.sources import ListSource, Tick
from stepwatch.models.status import StatusRecorder
from stepwatch.models.wire.feedback import Verdict
from stepwatch.runtime_config import GLOBAL, RuntimeConfig, encode
from streams.shadow import ShadowRun, Tapped


def _messages(slow_factor: float = 1.2, seed: int = 11) -> list[bytes]:
    job = SyncJob(job="sh-job", ranks=16, steps=150, slow_rank=5, slow_factor=slow_factor, slow_from=60, seed=seed)
    return [orjson.dumps(e) for e in job.events()]


def _road(messages: list[bytes], shadow: dict | None, *, live: dict | None = None, half: bool = True):
    """Feed ``messages`` through a live pipeline (``live``: its ``*`` overrides), a candidate set half-way
    (``half``) or at the start; returns (live alerts, shadow records, the ShadowRun)."""
    settings = Settings()
    engine = DetectionEngine(settings)
    pipeline = Pipeline(engine, recorder=StatusRecorder(50).attach(engine))
    runtime = RuntimeConfig(settings)
    if live:
        runtime.apply(engine, GLOBAL, encode(live))
    run = ShadowRun(pipeline, runtime)
    tapped = Tapped(pipeline, run)
    items = list(ListSource(messages, per_read=64))
    cut = len(items) // 2 if half else 0
    alerts = []
    for i, item in enumerate(items):
        if i == cut and shadow is not None:
            run.set(candidate.encode(shadow))
        alerts.extend(tapped.take(item).alerts)
    last = engine.clock
    for k in range(1, 4):
        alerts.extend(tapped.take(Tick(last + k)).alerts)
    return alerts, [orjson.loads(v) for _, v in run.pending], run


def _ids(alerts) -> list[tuple]:
    return [(a.id, str(a.status), str(a.severity), a.ranks) for a in alerts]


@pytest.mark.parametrize("shadow", [
    {"straggler": {"ratio_threshold": 1.5}},  # fewer stragglers
    {"straggler": {"ratio_threshold": 1.02, "min_flagged": 1}},  # more
    {"hang": {"timeout_seconds": 5.0}},  # another rule under trial
    {"straggler": {"ratio_threshold": 1.10}},  # the live value: nothing under trial
])
@pytest.mark.parametrize("half", [True, False])
def test_live_alerts_are_the_same_whatever_the_shadow_and_shadow_alerts_are_the_rules_under_trial_only(shadow, half):
    messages = _messages()
    without, _, _ = _road(messages, None)
    with_shadow, shadowed, run = _road(messages, shadow, half=half)
    assert _ids(with_shadow) == _ids(without)
    types = set(candidate.trial_types(candidate.differing_sections(Settings(), {}, shadow)))
    assert {a["type"] for a in shadowed} <= types
    assert all(a["shadow"]["id"] == candidate.identity(shadow) and a["shadow"]["settings"] == shadow
               for a in shadowed)
    if not types:
        assert shadowed == [] and run.trial.types == frozenset()


def test_a_stricter_shadow_threshold_drops_the_straggler_the_live_rules_raise():
    messages = _messages(slow_factor=1.2)
    live, shadowed, _ = _road(messages, {"straggler": {"ratio_threshold": 1.5, "critical_ratio": 1.6}}, half=False)
    fired = {a.id for a in live if a.type == "straggler"}
    assert fired, "the live rules must flag the 1.2x rank"
    assert not {a["id"] for a in shadowed} & fired
    result = compare([a.to_dict() for a in live], shadowed, types=["straggler"], feedback={}, start=0, end=1e12)
    assert {c.id for c in result.of(Change.DROPPED)} == fired


def test_a_shadow_that_raises_is_caught_and_counted_and_the_live_road_goes_on():
    from streams.metrics import WorkerMetrics

    messages = _messages()
    without, _, _ = _road(messages, None)
    settings = Settings()
    live = Pipeline(DetectionEngine(settings))
    metrics = WorkerMetrics(live.engine)
    run = ShadowRun(live, RuntimeConfig(settings), metrics=metrics)
    run.set(candidate.encode({"straggler": {"ratio_threshold": 1.5}}))

    class Broken:
        def take(self, item):
            raise RuntimeError("candidate bug")

    run.trial.pipeline = Broken()
    tapped = Tapped(live, run)
    items = [*ListSource(messages, per_read=64), Tick(live.engine.clock + 1)]
    got = [a for item in items for a in tapped.take(item).alerts]
    assert _ids(got) == _ids(without[:len(got)]) and got
    failed = {s.labels["stage"]: s.value for m in metrics.registry.collect() if m.name == "stepwatch_shadow_failures"
              for s in m.samples if s.name.endswith("_total")}
    assert failed == {"events": len(items) - 1, "tick": 1}
    assert run.trial is not None  # still on: a bug in the candidate's rules is counted, not fatal


def test_no_shadow_costs_nothing_and_a_tombstone_stops_the_trial():
    settings = Settings()
    live = Pipeline(DetectionEngine(settings))
    run = ShadowRun(live, RuntimeConfig(settings))
    assert run.trial is None
    run.set(candidate.encode({"straggler": {"window": 8}}))
    assert run.trial is not None and run.trial.pipeline.engine is not live.engine
    run.set(None)
    assert run.trial is None and run.as_dict() == {"active": False, "error": None}


def test_a_shadow_message_is_checked_as_a_live_one():
    run = ShadowRun(Pipeline(DetectionEngine(Settings())), RuntimeConfig(Settings()))
    with pytest.raises(ValueError, match="ratio_threshold"):
        run.set(orjson.dumps({"v": 1, "kind": "config", "shadow": True, "straggler": {"ratio_threshold": 0.5}}))
    with pytest.raises(ValueError, match="not marked as shadow"):
        run.set(orjson.dumps({"v": 1, "kind": "config", "straggler": {"ratio_threshold": 1.3}}))
    assert run.trial is None and run.error


def test_a_live_change_reaches_the_shadow_under_the_candidate():
    settings = Settings()
    engine = DetectionEngine(settings)
    runtime = RuntimeConfig(settings)
    run = ShadowRun(Pipeline(engine), runtime)
    run.set(candidate.encode({"straggler": {"ratio_threshold": 1.3}}))
    runtime.apply(engine, GLOBAL, encode({"straggler": {"ratio_threshold": 1.2, "window": 7}}))
    run.live_changed(GLOBAL, None)
    effective = run.trial.config.effective()
    assert (effective.ratio_threshold, effective.window) == (1.3, 7)
    assert engine.straggler_settings("any").ratio_threshold == 1.2
    # A live value the candidate equals: no rule under trial any more.
    runtime.apply(engine, GLOBAL, encode({"straggler": {"ratio_threshold": 1.3}}))
    run.live_changed(GLOBAL, None)
    assert run.trial.sections == () and run.trial.types == frozenset()


def test_rules_under_trial_are_those_of_the_changed_sections():
    names = {s.name for s in candidate.rules_under_trial(["straggler"])}
    assert names == {"straggler", "long_straggler", "inspector"}
    assert candidate.trial_types(["oncall"]) == ("action_budget", "job_restart", "node_suspect") or \
        set(candidate.trial_types(["oncall"])) >= {"job_restart", "node_suspect"}
    assert candidate.differing_sections(Settings(), {"straggler": {"window": 9}}, {"straggler": {"window": 9}}) == ()
    assert SHADOW_KEY != GLOBAL and not SHADOW_KEY[0].isalnum()


# -- the report's comparison on a hand-made case ---------------------------------------------------------------


def _alert(ident, *, type_="straggler", job="j", ranks=(1,), severity="warning", status="firing", starts=100.0,
           ends=None, **extra):
    return {"id": ident, "type": type_, "job": job, "ranks": list(ranks), "nodes": [f"n{r}" for r in ranks],
            "severity": severity, "status": status, "starts_at": starts, "ends_at": ends, **extra}


def test_the_comparison_on_a_hand_made_case():
    live = [_alert("a"), _alert("b"), _alert("c"), _alert("d", severity="warning"),
            _alert("d", severity="critical"), _alert("e", ranks=(7,)), _alert("e", ranks=(7,), status="resolved",
                                                                                 ends=300.0),
            _alert("h", type_="hang", ranks=(3,)),  # not under trial: left out
            _alert("old", starts=10.0),  # before the window
            _alert("conf", type_="gpu_fault", job="k", ranks=(4,))]  # confirmed: makes "x" near a confirmed one
    shadow = [_alert("c"), _alert("d", severity="warning"), _alert("e", ranks=(7,)),
              _alert("x", job="k", ranks=(4,)), _alert("y", job="k", ranks=(9,)), _alert("h", type_="hang")]
    feedback = {"a": Verdict.FALSE, "b": Verdict.FALSE, "d": Verdict.CONFIRMED, "conf": Verdict.CONFIRMED,
                "c": Verdict.FALSE}
    result = compare(live, shadow, types=["straggler"], feedback=feedback, start=50.0, end=1000.0, shadow_id="s1")
    got = {(c.change, c.id): (c.verdict, c.fields, c.near_confirmed) for c in result.changes}
    assert got == {
        (Change.DROPPED, "a"): (Verdict.FALSE, (), False),
        (Change.DROPPED, "b"): (Verdict.FALSE, (), False),
        (Change.CHANGED, "d"): (Verdict.CONFIRMED, ("severity",), False),
        (Change.CHANGED, "e"): (None, ("status",), False),
        (Change.ADDED, "x"): (None, (), True),
        (Change.ADDED, "y"): (None, (), False),
    }
    assert result.summary() == ("drops 2 alerts, 2 of them marked false; adds 2, 1 of them on ranks or nodes later "
                                "confirmed; changes 2, 1 of them marked confirmed")
    counts = result.as_dict()["counts"]
    assert counts["dropped"] == {"alerts": 2, "verdicts": {"false": 2}}
    assert counts["added"] == {"alerts": 2, "verdicts": {"none": 2}, "near_confirmed": 1}
    assert (result.live_alerts, result.shadow_alerts) == (5, 5)


@pytest.mark.parametrize("seed", range(5))
def test_the_comparison_of_a_side_with_itself_is_empty_and_swapping_sides_swaps_adds_and_drops(seed):
    import random

    rng = random.Random(seed)
    side = [_alert(f"i{rng.randrange(30)}", ranks=(rng.randrange(8),), starts=float(rng.randrange(100, 200)))
            for _ in range(40)]
    other = [a for a in side if rng.random() < 0.6]
    assert compare(side, side, types=["straggler"], feedback={}, start=0, end=1e9).changes == ()
    there = compare(side, other, types=["straggler"], feedback={}, start=0, end=1e9)
    back = compare(other, side, types=["straggler"], feedback={}, start=0, end=1e9)
    assert {c.id for c in there.of(Change.DROPPED)} == {c.id for c in back.of(Change.ADDED)}
    assert {c.id for c in there.of(Change.ADDED)} == {c.id for c in back.of(Change.DROPPED)}


def test_a_candidate_that_fired_nothing_still_drops_the_live_alerts_of_its_rules():
    from stepwatch.shadow_report import shadow_comparison

    live = [_alert("a", _at=150.0), _alert("b", _at=40.0), _alert("h", type_="hang", _at=150.0)]
    current = {"id": "c1", "settings": {"straggler": {"ratio_threshold": 3.0}}, "sections": ["straggler"],
               "since": 100.0}
    result = shadow_comparison(live, [], {"a": Verdict.FALSE}, since=1000.0, now=200.0, current=current)
    assert [(c.change, c.id, c.verdict) for c in result.changes] == [(Change.DROPPED, "a", Verdict.FALSE)]
    assert result.shadow_id == "c1" and result.start == 100.0  # not before the candidate was written
    assert shadow_comparison(live, [], {}, since=1000.0, now=200.0) is None


def test_a_failure_starting_or_reconfiguring_the_shadow_never_reaches_the_config_reader(monkeypatch):
    settings = Settings()
    engine = DetectionEngine(settings)
    runtime = RuntimeConfig(settings)
    run = ShadowRun(Pipeline(engine), runtime)
    monkeypatch.setattr(RuntimeConfig, "apply", lambda *a, **k: (_ for _ in ()).throw(RuntimeError("bug")))
    run.set(candidate.encode({"straggler": {"window": 8}}))  # no exception out of it
    assert run.trial is None and "bug" in run.error
    monkeypatch.undo()
    run.set(candidate.encode({"straggler": {"window": 8}}))
    assert run.trial is not None
    monkeypatch.setattr(RuntimeConfig, "apply", lambda *a, **k: (_ for _ in ()).throw(RuntimeError("bug")))
    run.live_changed(GLOBAL, None)
    assert run.trial is None and "bug" in run.error
