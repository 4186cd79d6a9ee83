"""Property-based fuzzing: garbage never raises, hostile-but-valid sequences never crash the core."""

from __future__ import annotations

import json

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from stepwatch.models.detection import DetectionEngine
from support import full_or
from stepwatch.models.wire.deadletter import Rejected
from stepwatch.models.wire.events import decode_message

json_scalars = st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70),
                         st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=20))
json_values = st.recursive(json_scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=5), st.dictionaries(st.text(max_size=10), inner, max_size=5)), max_leaves=20)

FIELDS = ["v", "kind", "job", "rank", "step", "ts", "step_time", "compute_time", "comm_time", "data_time",
          "group", "world_size", "phase", "seq", "op", "duration", "seq_started", "seq_completed", "node",
          "events"]
KINDS = st.sampled_from(["step", "collective", "heartbeat", "phase", "batch", "alert", "", None, 1])

hostile_objects = st.fixed_dictionaries(
    {"v": st.one_of(st.just(1), json_scalars), "kind": KINDS},
    optional={name: json_values for name in FIELDS if name not in ("v", "kind")},
)


@settings(max_examples=400, deadline=None)
@given(st.binary(max_size=300))
def test_random_bytes_never_raise(raw):
    events, rejected = decode_message(raw)
    assert all(isinstance(r, Rejected) and r.reason for r in rejected)
    assert len(events) + len(rejected) >= 1 or raw.strip() == b""


# CI draws 150 (new ones each run); STEPWATCH_FULL_GRID=1 draws 600.
@settings(max_examples=full_or(600, 150), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(hostile_objects, min_size=1, max_size=8))
def test_hostile_objects_are_either_valid_or_rejected_with_a_reason(objects):
    # The stdlib writes what senders in the wild write: big integers, NaN and Infinity literals.
    payload = {"v": 1, "kind": "batch", "events": objects} if len(objects) > 1 else objects[0]
    raw = json.dumps(payload).encode()
    events, rejected = decode_message(raw)
    assert all(r.reason for r in rejected)
    engine = DetectionEngine()
    for event in events:  # whatever passed validation must be safe for the detectors
        engine.process(event)
    engine.tick(engine.clock + 120)


step_events = st.builds(
    lambda rank, step, ts, st_, ct, phase, group: {
        "v": 1, "kind": "step", "job": "fuzz", "rank": rank, "step": step, "ts": ts, "step_time": st_,
        "compute_time": ct, "phase": phase, "group": group},
    rank=st.integers(0, 40), step=st.integers(0, 60), ts=st.floats(0, 1e10), st_=st.floats(0, 86_400),
    ct=st.one_of(st.none(), st.floats(0, 86_400)), phase=st.sampled_from(["train", "train", "eval", "warmup"]),
    group=st.one_of(st.none(), st.sampled_from(["a", "b"])))
phase_events = st.builds(lambda ts, phase: {"v": 1, "kind": "phase", "job": "fuzz", "ts": ts, "phase": phase},
                         ts=st.floats(0, 1e10), phase=st.sampled_from(["train", "checkpoint", "end", "eval"]))


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.one_of(step_events, step_events, step_events, phase_events), max_size=300),
       st.lists(st.floats(0, 1e10), max_size=5))
def test_valid_but_hostile_sequences_keep_the_engine_consistent(raw_events, tick_times):
    # Duplicates, out-of-order and far-back steps, zero durations, clock jumps, phase churn.
    engine = DetectionEngine()
    alerts = []
    for obj in raw_events:
        events, rejected = decode_message(orjson.dumps(obj))
        assert not rejected
        alerts += engine.process(events[0])
    for now in tick_times:
        alerts += engine.tick(now)
    open_ids = set()
    for alert in alerts:  # every resolution follows a firing of the same id
        if alert.status == "firing":
            open_ids.add(alert.id)
        else:
            assert alert.id in open_ids
            open_ids.discard(alert.id)
    assert {a.id for a in engine.open_alerts()} == open_ids
