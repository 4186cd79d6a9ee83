"""Node agents' envelopes of link samples by columns (models/wire/telemetry_columns.py, ``TelemetryHub.process_links``)
give what one sample at a time gives: the same alerts, dead letters and node state, on generated fleets; and a bad
sample in an envelope is dead-lettered with its reason while the envelope's good samples still reach the rules."""

from __future__ import annotations

import json
import math
import random
from array import array
from collections import deque

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from stepwatch.models.pipeline import Message, Pipeline
from stepwatch.models.telemetry import telemetry_tracker
from stepwatch.models.wire.events import parse_event
from stepwatch.models.wire.telemetry_columns import link_columns
from stepwatch.models.wire.wire import MAX_NAME_LEN, InvalidEvent

T0 = 1_764_000_000.0
ERRORS = ("symbol_error", "link_error_recovery", "link_downed", "port_rcv_errors")


def _sample(node: str, ts: float, device: str, counters: dict, *, state="ACTIVE", rate=400.0) -> dict:
    return {"v": 1, "kind": "link", "node": node, "ts": ts, "device": device, "port": 1, "state": state,
            "phys_state": "LinkUp" if state == "ACTIVE" else "Polling", "rate": rate, "link_layer": "InfiniBand",
            "counters": counters}


def _envelope(samples: list[dict]) -> bytes:
    return orjson.dumps({"v": 1, "kind": "batch", "events": samples})


def fleet(seed: int, *, nodes: int = 6, ticks: int = 60) -> list[list[bytes]]:
    """Reads (lists of message values) of a generated fleet: each node's ports' samples in one envelope per tick,
    with counter errors, resets, wraps, a port going down, a lower rate, transmit-wait spikes, collector gaps, ports
    first heard of late, an envelope of two nodes, a lone sample, a bad sample now and then."""
    rng = random.Random(seed)
    ports = {n: rng.randint(1, 3) for n in range(nodes)}
    state: dict[tuple[int, int], dict] = {}
    reads, t = [], T0
    for tick in range(ticks):
        values = []
        for n in range(nodes):
            if rng.random() < 0.05:
                continue  # a collector gap
            if tick == ticks // 3 and rng.random() < 0.3:
                ports[n] += 1  # a port first heard of late
            samples = []
            for p in range(ports[n]):
                c = state.setdefault((n, p), {"port_xmit_data": rng.randrange(2**31), "port_rcv_data": 0,
                                              **{e: 0 for e in ERRORS}, "port_xmit_wait": 0})
                c["port_xmit_data"] += int(4e9 * rng.uniform(0.05 if rng.random() < 0.05 else 0.9, 1.1))
                c["port_rcv_data"] += int(4e9 * rng.uniform(0.9, 1.1))
                c["port_xmit_wait"] += int(1e4 * (50 if rng.random() < 0.05 else rng.uniform(0.5, 1.5)))
                if (n + p) % 3 == 0 and rng.random() < 0.3:
                    c[rng.choice(ERRORS)] += rng.randint(1, 30)
                if rng.random() < 0.01:
                    c["symbol_error"] = 0  # a reset
                if rng.random() < 0.01:
                    c["port_xmit_data"] = 2**32 - rng.randrange(1, 2**20)  # about to wrap (32 bits)
                counters = {k: v for k, v in c.items() if not (k == "port_xmit_wait" and p == 2)}
                down = (n + p) % 4 == 1 and ticks // 2 <= tick < ticks // 2 + rng.randint(2, 8)
                rate = 200.0 if (n, p) == (2, 0) and tick > ticks // 2 else 400.0
                samples.append(_sample(f"node-{n}", round(t + rng.random(), 6), f"mlx5_{p}", dict(counters),
                                       state="DOWN" if down else "ACTIVE", rate=rate))
            if rng.random() < 0.03 and samples:
                bad = rng.randrange(len(samples))
                samples[bad] = {**samples[bad], "port": -1}  # a bad sample: dead-lettered, the others kept
            if samples:
                values.append(_envelope(samples))
        if values and rng.random() < 0.2:  # two nodes' samples in one envelope
            a, b = orjson.loads(values[0]), orjson.loads(values[-1])
            values[0] = _envelope(a["events"] + b["events"])
        if rng.random() < 0.1:  # a lone sample
            values.append(orjson.dumps(_sample("node-0", round(t + 0.5, 6), "mlx5_0",
                                               dict(state.get((0, 0), {"port_xmit_data": 1})))))
        reads.append(values)
        t += 10.0
    return reads


def _state(obj, seen=None):
    """Everything an object holds, as nested tuples (floats by repr: NaN equals NaN), for comparing two engines."""
    seen = set() if seen is None else seen
    if isinstance(obj, float):
        return repr(obj)
    if obj is None or isinstance(obj, (bool, int, str, bytes)):
        return obj
    if isinstance(obj, array):
        return tuple(map(repr, obj))
    if isinstance(obj, dict):
        return tuple((_state(k, seen), _state(v, seen)) for k, v in obj.items())
    if isinstance(obj, (list, tuple, deque)):
        return tuple(_state(v, seen) for v in obj)
    if isinstance(obj, (set, frozenset)):
        return tuple(sorted(map(repr, obj)))
    if callable(obj) and not hasattr(obj, "__slots__") and not hasattr(obj, "__dict__"):
        return "callable"
    if id(obj) in seen:
        return "seen"
    seen.add(id(obj))
    names = [n for c in type(obj).__mro__ for n in getattr(c, "__slots__", ())] + sorted(getattr(obj, "__dict__", {}))
    return type(obj).__name__, tuple((n, _state(getattr(obj, n, None), seen)) for n in names
                                     if not callable(getattr(obj, n, None)) or hasattr(getattr(obj, n), "__dict__"))


def node_state(pipeline: Pipeline):
    engine, hub = pipeline.engine, pipeline.engine.telemetry
    return (_state(hub.tracker), _state(hub.fabric.history), _state(hub._reported), hub._all_changed,
            sorted(hub._changed_nodes), repr(engine.clock), dict(engine.events_by_kind))


def run(reads: list[list[bytes]], *, columns: bool, one_at_a_time: bool = False):
    pipeline = Pipeline()
    pipeline.link_columns = columns
    alerts, dead = [], []
    for n, values in enumerate(reads):
        arrival = T0 + 10.0 * n + 2.0
        messages = [Message(v, topic="events", partition=0, offset=i) for i, v in enumerate(values)]
        for group in ([[m] for m in messages] if one_at_a_time else [messages]):
            out = pipeline.feed(group, arrival)
            alerts += [a.to_json() for a in out.alerts]
            dead += [{k: v for k, v in orjson.loads(d.record()).items() if k != "ts"} for d in out.deadletters]
        if n % 3 == 2:
            out = pipeline.tick(arrival)
            alerts += [a.to_json() for a in out.alerts]
    return alerts, dead, node_state(pipeline)


@pytest.mark.parametrize("seed", range(6))
def test_columns_give_the_same_alerts_dead_letters_and_state(seed):
    reads = fleet(seed)
    by_event = run(reads, columns=False)
    assert by_event[0], "the generated fleet raises alerts to compare"
    assert by_event == run(reads, columns=True)  # a read's envelopes merged into one column batch
    assert by_event == run(reads, columns=True, one_at_a_time=True)  # each envelope its own batch


def test_columns_at_the_port_caps(monkeypatch):
    """Samples of ports over the per-node cap are dead-lettered as capped, by index, the same both ways."""
    monkeypatch.setattr(telemetry_tracker, "MAX_PORTS_PER_NODE", 2)
    reads = fleet(11, nodes=4, ticks=30)
    by_event = run(reads, columns=False)
    assert any(d["cause"] == "capped" for d in by_event[1])
    assert by_event == run(reads, columns=True)


def test_a_rule_added_takes_samples_one_at_a_time():
    """The column road is for the registry's node rules as they are; with another rule that takes link samples, the
    pipeline gives each sample to the rules on its own."""
    from stepwatch.models import registry
    from stepwatch.models.rule import NodeRule, RuleSpec, Signal
    from stepwatch.models.telemetry.telemetry_hub import TelemetryHub

    class Counting(NodeRule):
        spec = RuleSpec(name="counting", consumes=frozenset({Signal.TELEMETRY}), alert_types=(), failure_classes=(),
                        settings=None)
        kinds = frozenset({"link"})

        def __init__(self, env, needs) -> None:
            self.seen = 0

        def update(self, event):
            self.seen += 1
            return []

    assert Pipeline().link_columns
    assert not TelemetryHub(rules=(*registry.NODE_RULES, Counting)).link_columns


# -- bad input -----------------------------------------------------------------------------------------------------

BAD_VALUES = {
    "node": [None, 3, "", "n" * (MAX_NAME_LEN + 1), ["x"], {"a": 1}],
    "ts": [None, "soon", -1.0, True, [1.0]],
    "device": [None, 7, "", "d" * (MAX_NAME_LEN + 1)],
    "port": [None, -1, 1.5, "1", True, 2**60],
    "state": [3, "", ["ACTIVE"]],
    "rate": ["fast", -5.0, True],
    "counters": ["x", [1], {"symbol_error": -1}, {"symbol_error": 2**64}, {"symbol_error": True},
                 {"symbol_error": 1.5}, {"": 1}],
    "v": [2, None, True],
}


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(2, 6), st.data())
def test_a_bad_sample_is_dead_lettered_and_the_others_kept(size, data):
    field = data.draw(st.sampled_from(sorted(BAD_VALUES)), label="field")
    value = data.draw(st.sampled_from(BAD_VALUES[field]), label="value")
    bad = data.draw(st.integers(0, size - 1), label="bad")
    samples = [_sample("node-1", T0 + i, f"mlx5_{i}", {"port_xmit_data": 10 * i, "symbol_error": 0})
               for i in range(size)]
    if value is None:
        samples[bad].pop(field)
    else:
        samples[bad][field] = value
    raw = json.dumps({"v": 1, "kind": "batch", "events": samples}).encode()  # (any integer: orjson stops at 64 bits)
    items = orjson.loads(raw)["events"]  # the sample as the worker parses it
    try:
        parse_event(items[bad])
        return  # (still a valid sample: nothing to dead-letter)
    except InvalidEvent as exc:
        reason = str(exc)
    assert link_columns(items) is None  # the envelope takes the per-event decoder
    before = [_sample("node-0", T0, "mlx5_0", {"port_xmit_data": 0})]  # a good envelope on each side: still columns
    pipeline = Pipeline()
    out = pipeline.feed([_envelope(before), raw, _envelope(before)], T0 + 10)
    (dead,) = out.deadletters
    assert [(r.index, r.reason) for r in dead.rejects] == [(bad, reason)]
    assert dead.message.value == raw
    good = Pipeline()
    good.feed([_envelope(before), _envelope(samples[:bad] + samples[bad + 1:]), _envelope(before)], T0 + 10)
    assert pipeline.engine.telemetry.tracker.events_seen == 2 + size - 1
    assert _state(pipeline.engine.telemetry.tracker) == _state(good.engine.telemetry.tracker)


def test_columns_decode_what_the_event_decoder_does():
    """A batch the column decoder takes decodes to the same events one by one; the agent's usual batch is taken."""
    rng = random.Random(5)
    for _ in range(200):
        samples = [_sample(f"n{rng.randrange(3)}", T0 + rng.random(), f"mlx5_{rng.randrange(4)}",
                           {"port_xmit_data": rng.randrange(2**64), "symbol_error": rng.randrange(9)},
                           state=rng.choice(["ACTIVE", "DOWN", None]), rate=rng.choice([400.0, None, 0.0]))
                   for _ in range(rng.randint(1, 8))]
        for s in samples:
            for k in [k for k, v in s.items() if v is None]:
                s.pop(k)
            if rng.random() < 0.2:
                s.pop(rng.choice(["state", "phys_state", "rate", "link_layer"]), None)
        cols = link_columns(samples)
        assert cols is not None
        assert cols.events() == [parse_event(s) for s in samples]
        assert all(e.extra == {} for e in cols.events())
    assert link_columns([{**samples[0], "extra": 1}]) is None  # extra fields: kept by the event decoder
    assert link_columns([{**samples[0], "ts": 5}]) is None  # an integer time: the event decoder's float
    assert link_columns([{**samples[0], "ts": math.inf}]) is None
