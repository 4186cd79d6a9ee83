"""The wire format: what is accepted, what is rejected and why."""

from __future__ import annotations

import orjson
import pytest

from stepwatch.models.wire.events import (
    CollectiveEvent, HeartbeatEvent, PhaseEvent, StepEvent, decode_message, encode_events, event_to_dict, parse_event,
)
from stepwatch.models.wire.wire import InvalidEvent

STEP = {"v": 1, "kind": "step", "job": "j1", "rank": 3, "step": 10, "ts": 1700000000.5, "step_time": 1.2}


def test_minimal_events_of_every_kind_parse():
    assert isinstance(parse_event(STEP), StepEvent)
    assert isinstance(parse_event({"v": 1, "kind": "collective", "job": "j", "rank": 0, "seq": 4,
                                   "op": "all_reduce", "ts": 1.0, "duration": 0.01}), CollectiveEvent)
    assert isinstance(parse_event({"v": 1, "kind": "heartbeat", "job": "j", "rank": 0, "ts": 1.0, "step": 3}),
                      HeartbeatEvent)
    assert isinstance(parse_event({"v": 1, "kind": "phase", "job": "j", "ts": 1.0, "phase": "end"}), PhaseEvent)


def test_step_defaults_and_extra_fields_are_kept():
    event = parse_event({**STEP, "custom": {"a": 1}, "group": 2})
    assert event.phase == "train"
    assert event.group == "2"  # a pipeline stage number is a group name
    assert event.extra == {"custom": {"a": 1}}
    wire = event_to_dict(event)
    assert wire["custom"] == {"a": 1} and wire["kind"] == "step" and "node" not in wire


@pytest.mark.parametrize("change, reason", [
    ({"v": 2}, "unsupported wire version"),
    ({"v": True}, "unsupported wire version"),
    ({"kind": "stepp"}, "unknown kind"),
    ({"job": ""}, "'job' must be a non-empty string"),
    ({"job": None}, "missing required field 'job'"),
    ({"rank": -1}, "'rank' out of range"),
    ({"rank": "3"}, "'rank' must be an integer"),
    ({"rank": 1.5}, "'rank' must be an integer"),
    ({"rank": True}, "'rank' must be an integer"),
    ({"step_time": float("nan")}, "'step_time' must be finite"),
    ({"step_time": -0.1}, "'step_time' must not be negative"),
    ({"step_time": 1e9}, "'step_time' is absurd"),
    ({"compute_time": "fast"}, "'compute_time' must be a number"),
    ({"phase": "lunch"}, "unknown phase"),
    ({"phase": "end"}, "unknown phase"),  # 'end' is a job phase, not a step's
    ({"world_size": 2}, "rank 3 is not below world_size 2"),
    ({"ts": None}, "missing required field 'ts'"),
])
def test_invalid_step_fields_are_rejected_with_a_reason(change, reason):
    bad = {k: v for k, v in {**STEP, **change}.items() if v is not None}
    with pytest.raises(InvalidEvent) as info:
        parse_event(bad)
    assert reason in str(info.value)
    if "nan" not in str(change):  # the same through the message decoder, which never raises
        events, rejected = decode_message(orjson.dumps(bad))
        assert events == [] and len(rejected) == 1 and reason in rejected[0].reason


def test_nan_literal_from_stdlib_json_is_rejected():
    events, rejected = decode_message(b'{"v":1,"kind":"step","job":"j","rank":0,"step":1,"ts":1,"step_time":NaN}')
    assert events == [] and rejected  # orjson refuses the NaN literal: malformed JSON


@pytest.mark.parametrize("raw, reason", [
    (b"{not json", "malformed JSON"),
    (b"[1, 2]", "event must be a JSON object"),
    (b"42", "event must be a JSON object"),
    (b"\xff\xfe", "malformed JSON"),
    (b'{"v":1,"kind":"batch","events":"nope"}', "batch envelope needs an 'events' list"),
])
def test_malformed_messages_are_rejected_not_raised(raw, reason):
    events, rejected = decode_message(raw)
    assert events == [] and reason in rejected[0].reason


def test_oversized_message_is_rejected_before_parsing():
    events, rejected = decode_message(b" " * (4 * 1024 * 1024 + 1))
    assert events == [] and "exceeds" in rejected[0].reason


def test_batch_envelope_keeps_good_events_and_rejects_bad_ones_individually():
    raw = encode_events([STEP, {**STEP, "rank": 4}, {**STEP, "rank": -2}])
    events, rejected = decode_message(raw)
    assert [e.rank for e in events] == [3, 4]
    assert len(rejected) == 1 and rejected[0].payload["rank"] == -2


def test_single_event_encodes_without_envelope():
    assert orjson.loads(encode_events([STEP])) == STEP
