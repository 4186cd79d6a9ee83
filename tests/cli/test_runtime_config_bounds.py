"""Runtime settings take finite values in each field's range only (issue 27 finding 9; issue 44 finding 3).

``hang.timeout_seconds=inf`` would switch hang alerts off and ``straggler.z_threshold=nan`` would turn
paging alerts into ``info``, both without a word, and ``straggler.window=1000000000`` grew a worker to 14.6 GB (the value stays on the
compacted topic, so a restart crashed again): refused at ``stepwatch config set`` (non-zero exit, the
reason on stderr) and again when a worker reads a config message someone else wrote. Every runtime
number states its own range (models/tunable.py); the sweep below tries every field out of it.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re

import orjson
import pytest

from stepwatch.config import Settings
from stepwatch.models.detection import DetectionEngine
from stepwatch.models.tunable import has_own_range, runtime_fields, runtime_range
from stepwatch.models.wire.events import parse_event
from stepwatch.runtime_config import SECTIONS, RuntimeConfig, decode, parse_assignments
from support import run_stepwatch

BAD = [
    ("hang.timeout_seconds=inf", "hang.timeout_seconds=inf: expected a finite number"),
    ("hang.timeout_seconds=nan", "hang.timeout_seconds=nan: expected a finite number"),
    ("straggler.z_threshold=nan", "straggler.z_threshold=nan: expected a finite number"),
    ("straggler.z_threshold=-3", "straggler.z_threshold=-3.0: expected more than 0 to 1000"),
    ("hang.heartbeat_timeout_seconds=-1", "expected more than 0 to 86400"),
    ("hang.stack_min_interval_seconds=1e300", "expected 1 to 86400"),
    ("straggler.window=-5", "straggler.window=-5: expected 1 to 1000"),
    ("straggler.z_threshold=0", "straggler.z_threshold=0.0: expected more than 0 to 1000"),
    ("straggler.window=1000000000", "straggler.window=1000000000: expected 1 to 1000 (a ring of this many steps"),
    ("hang.timeout_seconds=0", "hang.timeout_seconds=0.0: expected more than 0 to 2592000 (0 would fire at once)"),
    ("straggler.ratio_threshold=0.5", "straggler.ratio_threshold=0.5: expected more than 1 to 100 (a ratio of 1 or "
                                      "less flags every rank)"),
]


@pytest.mark.parametrize("item, reason", BAD)
def test_non_finite_and_out_of_range_values_are_refused_with_the_reason(item, reason):
    with pytest.raises(ValueError, match=re.escape(reason)):
        parse_assignments([item])


@pytest.mark.parametrize("raw", [b'{"v": 1, "kind": "config", "hang": {"timeout_seconds": 1e400}}',
                                 b'{"v": 1, "kind": "config", "straggler": {"z_threshold": -1.0}}',
                                 b'{"v": 1, "kind": "config", "straggler": {"window": 1e30}}'])
def test_a_worker_refuses_such_a_message_from_the_topic_and_keeps_its_settings(raw):
    engine, runtime = DetectionEngine(), RuntimeConfig(Settings())
    with pytest.raises(ValueError):
        runtime.apply(engine, "*", raw)
    assert runtime.scopes == {} and runtime.updates == 0
    assert runtime.effective_hang(Settings().hang).timeout_seconds == Settings().hang.timeout_seconds


def test_a_bool_setting_round_trips_through_the_topic():
    assert decode(b'{"v": 1, "kind": "config", "hang": {"stacks": false}}') == {"hang": {"stacks": False}}


def test_config_set_exits_non_zero_with_the_reason():
    env = {**os.environ, "KAFKA_BOOTSTRAP": "127.0.0.1:1"}  # refused before any broker is asked
    result = run_stepwatch("config", "set", "hang.timeout_seconds=inf", env=env, check=False, timeout=60)
    assert result.returncode == 2
    assert result.stderr.strip() == "stepwatch config: hang.timeout_seconds=inf: expected a finite number"


@pytest.mark.parametrize("item, reason", [
    ("straggler.window=1000000000", "stepwatch config: straggler.window=1000000000: expected 1 to 1000 (a ring of "
                                    "this many steps per rank)"),
    ("hang.timeout_seconds=0", "stepwatch config: hang.timeout_seconds=0.0: expected more than 0 to 2592000 (0 would "
                               "fire at once)"),
    ("straggler.ratio_threshold=0.5", "stepwatch config: straggler.ratio_threshold=0.5: expected more than 1 to 100 "
                                      "(a ratio of 1 or less flags every rank)")])
def test_config_set_refuses_values_that_would_crash_or_blind_a_worker(item, reason):
    env = {**os.environ, "KAFKA_BOOTSTRAP": "127.0.0.1:1"}
    result = run_stepwatch("config", "set", item, env=env, check=False, timeout=60)
    assert (result.returncode, result.stderr.strip()) == (2, reason)


def test_config_set_help_lists_every_field_with_its_range():
    text = run_stepwatch("config", "set", "--help", env=dict(os.environ), timeout=60).stdout
    assert "straggler.ratio_threshold (default 1.1; more than 1 to 100)" in text
    for section, cls in SECTIONS.items():
        for name in runtime_fields(cls):
            bounds = "" if isinstance(getattr(cls(), name), bool) else f"; {runtime_range(cls, name)}"
            assert f"  {section}.{name} (default {getattr(cls(), name)}{bounds})" in text, name


# -- the sweep: every runtime field, generated out-of-range values ------------------------------------------

def _fields() -> list[tuple[str, str]]:
    return [(s, name) for s, cls in SECTIONS.items() for name in runtime_fields(cls)
            if not isinstance(getattr(cls(), name), bool)]


def _out_of_range(section: str, name: str) -> list:
    cls = SECTIONS[section]
    bounds, default = runtime_range(cls, name), getattr(cls(), name)
    below = bounds.low if bounds.above else bounds.low - (1 if isinstance(default, int) else bounds.low * 0.5 + 0.5)
    values = [below, bounds.high * 2 + 1, bounds.high + 1, -1e300, 1e300, math.inf, -math.inf, math.nan]
    if isinstance(default, int):
        values += [default + 0.5]
    return values


def test_every_runtime_number_states_a_range_its_default_is_in():
    for section, name in _fields():
        cls = SECTIONS[section]
        assert has_own_range(cls, name), f"{section}.{name}: runtime(..., low=, high=) missing"
        assert runtime_range(cls, name).holds(getattr(cls(), name)), f"{section}.{name}: default out of range"


def _engine_runs(engine: DetectionEngine) -> None:
    """The engine still judges a job after the refusal (16 ranks, a few steps, a tick)."""
    for step in range(12):
        for rank in range(16):
            engine.process(parse_event({"v": 1, "kind": "step", "job": "sweep", "rank": rank, "step": step,
                                        "ts": 1_764_000_000.0 + step, "step_time": 1.5 if rank == 3 else 1.0}))
    engine.tick(1_764_000_020.0)


@pytest.mark.parametrize("section, name", _fields())
def test_sweep_an_out_of_range_value_is_refused_and_the_last_good_value_kept(section, name):
    """For every field and every generated bad value: ``config set`` parsing refuses it, a worker reading it from
    the topic refuses the message (counted in ``errors``), keeps the scope's last good message, and runs on."""
    cls = SECTIONS[section]
    good = getattr(cls(), name)
    engine, runtime = DetectionEngine(), RuntimeConfig(Settings())
    runtime.apply(engine, "*", orjson.dumps({"v": 1, "kind": "config", section: {name: good}}))
    before = (runtime.scopes["*"], runtime.as_dict()["effective_default"], engine.straggler_settings("sweep"),
              engine.hang_settings("sweep"), engine.job_health_settings("sweep"))
    for value in _out_of_range(section, name):
        text = repr(value) if math.isfinite(value) else str(value)
        with pytest.raises(ValueError):
            parse_assignments([f"{section}.{name}={text}"])
        raw = orjson.dumps({"v": 1, "kind": "config", section: {name: value if math.isfinite(value) else None}})
        if not math.isfinite(value):  # JSON has no inf/nan literal; Python's json writes one
            raw = raw.replace(b"null", text.replace("inf", "Infinity").replace("nan", "NaN").encode())
        with pytest.raises(ValueError):
            runtime.apply(engine, "*", raw)
        assert runtime.updates == 1
        after = (runtime.scopes["*"], runtime.as_dict()["effective_default"], engine.straggler_settings("sweep"),
                 engine.hang_settings("sweep"), engine.job_health_settings("sweep"))
        assert after == before, (section, name, value)
    _engine_runs(engine)
