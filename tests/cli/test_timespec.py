"""``--since``/``--until``: one parser for durations and times in every command (stepwatch/timespec.py)."""

from __future__ import annotations

import argparse
import random
from datetime import datetime, timezone

import pytest

from stepwatch.timespec import UNITS, When, parse_when


def test_a_duration_is_the_same_however_it_is_written():
    rng = random.Random(43)
    for _ in range(200):
        seconds = rng.randrange(1, 40) * rng.choice([1, 60, 3600, 86400])
        unit = rng.choice([u for u, size in UNITS.items() if seconds % size == 0])
        text = f"{seconds // int(UNITS[unit])}{rng.choice([unit, unit.upper()])}"
        assert parse_when(text) == When(float(seconds), relative=True), text
    assert parse_when("2h30m") == parse_when("150m") == parse_when("9000") == When(9000.0, relative=True)


def test_a_time_is_the_same_however_it_is_written():
    rng = random.Random(44)
    for _ in range(200):
        ts = float(rng.randrange(1_000_000_000, 2_000_000_000))
        iso = datetime.fromtimestamp(ts, tz=timezone.utc)
        forms = [str(int(ts)), f"{ts:.1f}", iso.strftime("%Y-%m-%dT%H:%M:%SZ"), iso.strftime("%Y-%m-%dT%H:%M:%S"),
                 iso.isoformat()]
        assert {parse_when(f) for f in forms} == {When(ts, relative=False)}, forms


def test_at_counts_a_duration_back_and_takes_a_time_as_is():
    assert parse_when("30m").at(10_000.0) == 8_200.0
    assert parse_when("1764540000").at(10_000.0) == 1_764_540_000.0


@pytest.mark.parametrize("text", ["", "x", "30q", "-5m", "-3", "inf", "nan", "m", "2026-13-01"])
def test_anything_else_is_refused_with_the_forms_it_takes(text):
    with pytest.raises(argparse.ArgumentTypeError, match="e.g. 30m, 2h"):
        parse_when(text)


def test_every_since_and_until_option_takes_both_forms():
    from stepwatch.cli import build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    found = 0
    for name, command in sub.choices.items():
        for action in command._actions:
            if {"--since", "--until"} & set(action.option_strings):
                found += 1
                assert action.type is parse_when, (name, action.option_strings)
    assert found >= 4  # record --since/--until, replay --until, report --since
