"""The config topic reconfigures the worker-wide rules too: the telemetry hub's node rules (``telemetry``, ``host``
sections) and the on-call outlet rules (``oncall``), through the same ``RuntimeConfig.apply`` the worker runs for
each config message (stepwatch/runtime_config.py). Set for ``*`` only; a job scope naming them is refused."""

from __future__ import annotations

import pytest

from test_rule_contract import NODES, T0, fleet_events, run
from stepwatch.config import Settings
from stepwatch.models.alert_types import AlertType
from stepwatch.models.detection import DetectionEngine
from stepwatch.runtime_config import GLOBAL, RuntimeConfig, encode


def _engine_and_config() -> tuple[DetectionEngine, RuntimeConfig]:
    settings = Settings()
    return DetectionEngine(settings), RuntimeConfig(settings)


def test_a_node_rule_setting_changed_at_run_time_takes_effect():
    engine, config = _engine_and_config()
    warm = fleet_events(seconds=120)
    engine, alerts = run(warm, engine=engine)
    assert alerts == []  # GPUs at 62 C +- 6: none hot at the default 85 C
    config.apply(engine, GLOBAL, encode({"host": {"gpu_hot_temp_c": 50.0}}))
    _, alerts = run(fleet_events(seconds=125)[len(warm):], engine=engine)
    assert {a.type for a in alerts} == {AlertType.GPU_HOT}
    assert len(engine.telemetry.rule("device").open_alerts()) == NODES * 4
    assert config.as_dict()["effective_default"]["host"]["gpu_hot_temp_c"] == 50.0
    # Removing the override puts the environment's threshold back: no new GPU turns hot.
    config.apply(engine, GLOBAL, None)
    assert engine.telemetry.rule("device").rules.hot_temp_c == 85.0


def test_a_telemetry_threshold_changed_at_run_time_takes_effect():
    """A port erring in 3 of its last 10 samples is a link_errors alert; raised to 10 of 10 at run time, a port
    erring only now and then no longer is."""
    events = fleet_events(seconds=160, erring=(3,))
    cut = len(events) * 55 // 100
    engine, config = _engine_and_config()
    engine, first = run(events[:cut], engine=engine)
    config.apply(engine, GLOBAL, encode({"telemetry": {"link_error_window": 40, "link_error_min_samples": 40}}))
    tracker = engine.telemetry.rule("telemetry").tracker
    assert (tracker.link_error_window, tracker.link_error_min_samples) == (40, 40)
    _, rest = run(events[cut:], engine=engine)
    assert not [a for a in first + rest if a.type == AlertType.LINK_ERRORS]
    # the same input with the default settings fires
    _, default = run(events)
    assert [a for a in default if a.type == AlertType.LINK_ERRORS]


def test_an_outlet_rule_setting_changed_at_run_time_takes_effect():
    engine, config = _engine_and_config()
    config.apply(engine, GLOBAL, encode({"oncall": {"ledger_min_jobs": 3, "restart_min_silence_seconds": 90.0}}))
    assert engine.oncall.ledger.min_jobs == 3
    assert engine.oncall.rule("restarts").tracker.min_silence_seconds == 90.0
    assert engine.oncall.settings.ledger_min_jobs == 3


def test_worker_wide_sections_are_refused_per_job_and_bad_values_change_nothing():
    engine, config = _engine_and_config()
    with pytest.raises(ValueError, match="for '\\*' only"):
        config.apply(engine, "job-1", encode({"host": {"gpu_hot_temp_c": 50.0}}))
    assert "job-1" not in config.scopes and engine.telemetry.rule("device").rules.hot_temp_c == 85.0
    with pytest.raises(ValueError, match="link_error_min_samples"):
        config.apply(engine, GLOBAL, encode({"telemetry": {"link_error_min_samples": 20}}))
    assert GLOBAL not in config.scopes
    assert engine.telemetry.rule("telemetry").tracker.link_error_min_samples == 3
    with pytest.raises(ValueError, match="expected"):
        config.apply(engine, GLOBAL, encode({"host": {"gpu_hot_temp_c": -5.0}}))


def test_config_set_refuses_a_worker_wide_setting_for_one_job_before_asking_a_broker():
    import argparse

    from stepwatch.commands.config import _check_assignments

    _check_assignments(argparse.Namespace(job=None, assignments=["host.gpu_hot_temp_c=90"]))
    with pytest.raises(ValueError, match="drop --job"):
        _check_assignments(argparse.Namespace(job="llama", assignments=["oncall.ledger_min_jobs=3"]))
    _check_assignments(argparse.Namespace(job="llama", assignments=["straggler.ratio_threshold=1.3"]))


def test_a_config_line_in_a_recording_changes_a_node_rule_where_it_stands_on_replay():
    """The one road: ``stepwatch replay`` applies a recorded config message (as ``stepwatch record`` writes it)
    where it stands in the stream, through the same ``RuntimeConfig.apply`` as the worker: GPUs at 62 C +- 6 are
    hot only after the line lowering ``host.gpu_hot_temp_c`` to 50, and cool again once a later line removes it."""
    import io

    import orjson

    from stepwatch.recording import replay

    events = fleet_events(seconds=260)  # (a minute clean after the line resolves: device-rule hysteresis)
    at = next(i for i, e in enumerate(events) if e["ts"] >= T0 + 120)
    back = next(i for i, e in enumerate(events) if e["ts"] >= T0 + 160)
    lower = {"v": 1, "kind": "config", "_key": GLOBAL, "host": {"gpu_hot_temp_c": 50.0}, "updated_at": T0}
    lines = [orjson.dumps(e) for e in events]
    lines[back:back] = [orjson.dumps({"v": 1, "kind": "config", "_key": GLOBAL, "updated_at": T0})]
    lines[at:at] = [orjson.dumps(lower)]
    out = io.StringIO()
    replay(lines, Settings(), out=out)
    alerts = [orjson.loads(line) for line in out.getvalue().splitlines()]
    hot = [a for a in alerts if a["type"] == "gpu_hot" and a["status"] == "firing"]
    assert len({a["id"] for a in hot}) == NODES * 4
    assert all(T0 + 119 <= a["starts_at"] < T0 + 160 for a in hot)
    assert {a["type"] for a in alerts} == {"gpu_hot"}
    # back at 85 C after the override is removed: every one of them resolves, none before
    resolved = [a for a in alerts if a["status"] == "resolved"]
    assert {a["id"] for a in resolved} == {a["id"] for a in hot}
    assert all(a["ends_at"] >= T0 + 160 for a in resolved)
