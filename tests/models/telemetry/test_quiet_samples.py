"""The node rules' quiet-sample check (models/telemetry/counters.py ``CounterLayouts``: a port's sample with the same
counters as its sample before and no error counter moved skips the per-counter loop) changes nothing: the same
alerts, dead letters and node state as the per-counter road, on generated fleets whose counter layouts shift (a
counter left out, added, the order changed, a layout past the table's bound), by columns and one sample at a time."""

from __future__ import annotations

import random

import orjson
import pytest

from stepwatch.models.telemetry import counters as counters_module
from test_link_columns import fleet, run


def shifting(seed: int) -> list[list[bytes]]:
    """``fleet(seed)`` with its samples' counter layouts shifting now and then."""
    rng = random.Random(seed + 1000)
    reads = []
    for values in fleet(seed, ticks=45):
        out = []
        for value in values:
            obj = orjson.loads(value)
            for s in obj.get("events", [obj]):
                c = s.get("counters")
                if not isinstance(c, dict) or not c:
                    continue
                r = rng.random()
                if r < 0.04:
                    c.pop(rng.choice(sorted(c)))  # a counter left out of one sample
                elif r < 0.08:
                    items = list(c.items())
                    rng.shuffle(items)  # the same counters in another order
                    s["counters"] = dict(items)
                elif r < 0.10:
                    c[f"vendor_{rng.randrange(3)}"] = rng.randrange(100)  # one no rule reads
                elif r < 0.12:
                    c["local_ack_timeout_err"] = rng.randrange(3)  # an error counter only sometimes sent
            out.append(orjson.dumps(obj))
        reads.append(out)
    return reads


def _forget_layouts(pipeline) -> int:
    """The quiet check's own cache, the one state the per-counter road does not keep; how many ports had one."""
    hub = pipeline.engine.telemetry
    held = sum(p.layout is not None for n in hub.tracker._nodes.values() for p in n.ports.values())
    hub.tracker._layouts._known.clear()
    hub.fabric.history._layouts._known.clear()
    for node in hub.tracker._nodes.values():
        for port in node.ports.values():
            for name in port.layout.errors if port.layout is not None else ():
                port.counters[name].ts = port.quiet_ts  # (caught up, as the next sample of another layout would)
            port.layout, port.err_values, port.quiet_ts = None, None, 0.0
    for comps in hub.fabric.history._nodes.values():
        for comp in comps.values():
            for name in comp.layout.errors if comp.layout is not None else ():
                comp.tracks[name].ts = comp.quiet_ts
            comp.layout, comp.err_values, comp.quiet_ts = None, None, 0.0
    return held


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("columns", [True, False])
def test_quiet_check_changes_nothing(seed, columns, monkeypatch):
    import test_link_columns as tl

    reads = shifting(seed)
    kept, held = [], []
    monkeypatch.setattr(tl, "node_state", lambda p: (held.append(_forget_layouts(p)), kept.append(p))[0])
    fast_alerts, fast_dead, _ = run(reads, columns=columns)
    monkeypatch.setattr(counters_module.CounterLayouts, "of", lambda self, c: None)  # the per-counter road only
    slow_alerts, slow_dead, _ = run(reads, columns=columns)
    monkeypatch.undo()
    assert fast_alerts == slow_alerts and fast_alerts  # (the fleet fires and resolves)
    assert fast_dead == slow_dead
    fast, slow = kept
    assert held[0] > 0 and held[1] == 0  # the quiet check was taken, and only by the first
    assert tl.node_state(fast) == tl.node_state(slow)


def test_layouts_are_bounded_and_shared():
    layouts = counters_module.CounterLayouts({"symbol_error": 1}, (), limit=2)
    a = layouts.of({"symbol_error": 1, "x": 2})
    assert layouts.of({"symbol_error": 5, "x": 7}) is a  # one per layout, shared by the ports sending it
    assert layouts.of({"x": 1}) is not None
    assert layouts.of({"y": 1}) is None  # past the bound: the per-counter road
    assert a.values({"symbol_error": 3, "x": 2}) == 3 and layouts.of({"x": 1}).values({"x": 1}) is None


@pytest.mark.parametrize("seed", range(5))
def test_judge_is_median_then_add(seed):
    """``Baseline.judge`` (the bandwidth's interval baseline reads it without ``take_back``) gives what ``median()`` while ready, then ``add``, gives,
    bit for bit, with ``low()`` read between as the tracker reads it."""
    rng = random.Random(seed)
    size, least = rng.choice([(16, 3), (120, 10), (5, 1)])
    a, b = counters_module.Baseline(size, least), counters_module.Baseline(size, least)
    for _ in range(400):
        x = rng.choice([rng.uniform(0, 10), float(rng.randrange(4)), rng.uniform(0, 1e12)])
        expected = b.median() if b.ready else float("nan")
        b.add(x)
        got = a.judge(x)
        assert repr(got) == repr(expected)
        if rng.random() < 0.5:
            assert repr(a.low()) == repr(b.low()) and repr(a.median()) == repr(b.median())
    assert list(a.values) == list(b.values)
