"""Runtime settings take finite values in each field's range only (issue 27 finding 9).

``hang.timeout_seconds=inf`` would switch hang alerts off and ``straggler.z_threshold=nan`` would turn
paging alerts into ``info``, both without a word: refused at ``stepwatch config set`` (non-zero exit,
the reason on stderr) and again when a worker reads a config message someone else wrote.
"""

from __future__ import annotations

import os

import pytest

from stepwatch.config import Settings
from stepwatch.models.engine import DetectionEngine
from stepwatch.runtime_config import RuntimeConfig, decode, parse_assignments
from support import run_stepwatch

BAD = [
    ("hang.timeout_seconds=inf", "hang.timeout_seconds=inf: expected a finite number"),
    ("hang.timeout_seconds=nan", "hang.timeout_seconds=nan: expected a finite number"),
    ("straggler.z_threshold=nan", "straggler.z_threshold=nan: expected a finite number"),
    ("straggler.z_threshold=-3", "straggler.z_threshold=-3.0: expected 0 to 1e+09"),
    ("hang.heartbeat_timeout_seconds=-1", "expected 0 to 1e+09"),
    ("hang.stack_min_interval_seconds=1e300", "expected 0 to 1e+09"),
    ("straggler.window=-5", "straggler.window=-5: expected 0 to 1e+09"),
    ("straggler.z_threshold=0", "straggler.z_threshold must be positive"),
]


@pytest.mark.parametrize("item, reason", BAD)
def test_non_finite_and_out_of_range_values_are_refused_with_the_reason(item, reason):
    with pytest.raises(ValueError, match=reason.replace("+", r"\+").replace(".", r"\.")):
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
