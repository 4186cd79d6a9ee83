"""One contract for every registered rule (models/registry.py), per-job and node-level, as River runs every drift
detector through one harness: warm-up on healthy input, reconfigure, bounded state under a long healthy stream,
replay determinism, open alerts listed and closed with a ``Resolution``.

The input comes from the small generator below, written for this test (not the simulator): a synchronous job
whose ranks send steps, heartbeats and collectives, with checkpoints, a little noise, events reordered within a
step and some heartbeats lost. Each rule is driven through the real engine (the rules' one road) and checked
through the contract's methods only. A new rule adds its fault to ``FAULTS``: the test fails until it does.

The node-level rules get the same contract on a small fleet written here too (``fleet_events``): nodes of four
GPUs and two InfiniBand ports each, one sample a second per GPU and port with noise, some samples lost, node
clocks a little apart, a job stepping on the GPUs; their faults are in ``NODE_FAULTS``.
"""

from __future__ import annotations

import dataclasses
import sys

import numpy as np
import pytest

from stepwatch.models.oncall.actions import FAILURE_CLASSES
from stepwatch.models.alert_types import AlertType
from stepwatch.models.engine import DetectionEngine, JobState
from stepwatch.models.wire.events import parse_event
from stepwatch.models.evidence import HangEvidence, StragglerEvidence
from stepwatch.models.hang.detector import HangSettings
from stepwatch.models.jobhealth.job_health import JobHealthSettings
from stepwatch.models.registry import JOB_RULES, NODE_RULES, all_specs, declared_types
from stepwatch.models.resolution import Resolution
from stepwatch.models.rule import JobRule, NodeRule, Signal
from stepwatch.models.telemetry.host import HostSettings
from stepwatch.models.telemetry.telemetry_hub import TelemetryHub, TelemetrySettings
from stepwatch.models.settings import DetectionSettings
from stepwatch.models.steps.straggler import StragglerSettings

JOB = "contract"
T0 = 1_700_000_000.0


def _noise(rank: int, step: int) -> float:
    return (((rank * 7919 + step * 104729) % 101) / 101 - 0.5) * 0.03  # +-1.5 %


def job_events(*, steps: int, ranks: int = 8, stages: int = 1, slow_rank: int | None = None, slow: float = 1.0,
               slow_from: int = 0, slowdown: float = 1.0, slowdown_from: int | None = None, comm: float = 1.0,
               comm_from: int | None = None, stop_at: int | None = None, silent_rank: int = 3,
               tail: float = 0.0, checkpoint_every: int = 50, checkpoint_until: int | None = None) -> list[dict]:
    """A synchronous job: per step each rank's step, collective and heartbeat, with the faults asked for."""
    out: list[dict] = []
    t = T0
    per_stage = ranks // stages
    for s in range(steps if stop_at is None else stop_at):
        transfer = 0.04 * (comm if comm_from is not None and s >= comm_from else 1.0)
        computes = []
        for r in range(ranks):
            c = 0.2 * (1 + _noise(r, s)) * (1.6 if stages > 1 and r >= per_stage else 1.0)
            if r == slow_rank and s >= slow_from:
                c *= slow
            if slowdown_from is not None and s >= slowdown_from:
                c *= slowdown
            computes.append(c)
        batch = []
        for r in range(ranks):
            stage = r // per_stage
            group_max = max(computes[stage * per_stage:(stage + 1) * per_stage])
            step_time = group_max + transfer + 0.01
            ts = round(t + step_time, 6)
            node = f"n{r // 4:02d}"
            batch.append({"v": 1, "kind": "step", "job": JOB, "rank": r, "step": s, "ts": ts,
                          "step_time": round(step_time, 6), "compute_time": round(computes[r], 6),
                          "data_time": 0.01, "comm_time": round(step_time - computes[r] - 0.01, 6),
                          "tokens": 4096, "node": node, "world_size": ranks,
                          **({"group": f"stage{stage}"} if stages > 1 else {})})
            batch.append({"v": 1, "kind": "collective", "job": JOB, "rank": r, "seq": s, "op": "allreduce",
                          "ts": ts, "duration": round(transfer * (1 + _noise(r + 3, s)), 6), "node": node,
                          "pg": "0", "bytes": 1 << 24, "step": s})
            if not (r == 2 and s % 29 == 7):  # a lost heartbeat now and then
                batch.append({"v": 1, "kind": "heartbeat", "job": JOB, "rank": r, "step": s + 1,
                              "ts": round(ts + 0.001, 6), "node": node, "seq_completed": s})
        if s % 13 == 5:  # another rank's events overtake: order within a step is not guaranteed
            batch[0:3], batch[3:6] = batch[3:6], batch[0:3]
        out.extend(batch)
        t += max(computes) + transfer + 0.01
        if checkpoint_every and s % checkpoint_every == checkpoint_every - 1 and (
                checkpoint_until is None or s < checkpoint_until):
            out.append({"v": 1, "kind": "phase", "job": JOB, "ts": round(t, 6), "phase": "checkpoint", "step": s})
            t += 2.0
            out.append({"v": 1, "kind": "phase", "job": JOB, "ts": round(t, 6), "phase": "train", "step": s})
    end = t + tail
    while t < end:  # the job stopped stepping: every rank but one still heartbeats
        t += 1.0
        for r in range(ranks):
            if r != silent_rank:
                out.append({"v": 1, "kind": "heartbeat", "job": JOB, "rank": r, "step": stop_at or steps,
                            "ts": round(t, 6), "node": f"n{r // 4:02d}"})
    return out


def window_events(*, windows: int, ranks: int = 8, late_rank: int | None = None, late_from: int = 0) -> list[dict]:
    """A job seen only through NCCL Inspector windows (no callback): the late rank waits least in collectives."""
    out = []
    for w in range(windows):
        for r in range(ranks):
            wait = 0.0 if (r == late_rank and w >= late_from) else (0.012 if late_rank is not None and w >= late_from
                                                                    else 0.0)
            median = 0.01 * (1 + _noise(r, w)) + wait
            out.append({"v": 1, "kind": "nccl_window", "job": JOB, "rank": r, "ts": round(T0 + 2.0 * w + 1.5, 6),
                        "comm": "c0", "op": "AllReduce", "window": w, "window_size": 16, "count": 16,
                        "exec_sum": round(16 * median, 6), "exec_median": round(median, 6), "n_ranks": ranks,
                        "comm_rank": r, "node": f"n{r // 4:02d}", "bytes": 1 << 24})
    return out


def healthy(rule: type[JobRule], steps: int) -> list[dict]:
    if Signal.INSPECTOR in rule.spec.consumes and Signal.STEPS not in rule.spec.consumes:
        return window_events(windows=steps)
    return job_events(steps=steps)


#: Per rule: (settings, events) that make it fire, the fault still on at the end.
FAULTS = {
    "straggler": lambda: (None, job_events(steps=200, slow_rank=5, slow=1.5, slow_from=60)),
    "long_straggler": lambda: (None, job_events(steps=500, slow_rank=5, slow=1.05, slow_from=20)),
    "hang": lambda: (None, job_events(steps=0, stop_at=60, tail=1500.0)),
    "throughput": lambda: (None, job_events(steps=400, slowdown=1.5, slowdown_from=250)),
    "comm": lambda: (None, job_events(steps=300, comm=3.0, comm_from=150)),
    "checkpoint": lambda: (
        dataclasses.replace(DetectionSettings(), job_health=JobHealthSettings(checkpoint_max_age_seconds=60.0)),
        job_events(steps=600, checkpoint_every=20, checkpoint_until=40)),
    "imbalance": lambda: (None, job_events(steps=200, stages=2)),
    "inspector": lambda: (None, window_events(windows=40, late_rank=3, late_from=5)),
}


def run(events: list[dict], settings=None, engine: DetectionEngine | None = None) -> tuple[DetectionEngine, list]:
    """Feed ``events`` in order, ticking every second of event time (as replay does)."""
    engine = engine or DetectionEngine(settings)
    alerts = []
    next_tick = None
    for raw in events:
        alerts.extend(engine.process(parse_event(raw)))
        if next_tick is None:
            next_tick = engine.clock + 1.0
        elif engine.clock >= next_tick:
            alerts.extend(engine.tick(engine.clock))
            next_tick = engine.clock + 1.0
    return engine, alerts


def rule_of(engine: DetectionEngine, rule: type[JobRule]) -> JobRule:
    return engine.jobs[JOB].rule(rule.spec.name)


def _walk(roots: list, skip: set[int], root: JobRule | NodeRule | None = None) -> int:
    """Bytes reachable from ``roots`` (numpy arrays by their buffers), not entering ``skip``, the engine, the
    job, callables or rules other than ``root``; every object entered is added to ``skip``."""
    total = 0
    stack = list(roots)
    while stack:
        obj = stack.pop()
        if id(obj) in skip or callable(obj) or isinstance(obj, (type, DetectionEngine, JobState, TelemetryHub)) or (
                isinstance(obj, (JobRule, NodeRule)) and obj is not root):
            continue
        skip.add(id(obj))
        if isinstance(obj, np.ndarray):
            total += obj.nbytes
            continue
        total += sys.getsizeof(obj)
        if isinstance(obj, dict):
            stack.extend(obj.keys())
            stack.extend(obj.values())
        elif isinstance(obj, (list, tuple, set, frozenset)) or type(obj).__name__ == "deque":
            stack.extend(obj)
        elif not isinstance(obj, (str, bytes, int, float, bool)) and obj is not None:
            if hasattr(obj, "__dict__"):
                stack.extend(vars(obj).values())
            for cls in type(obj).__mro__:
                for name in getattr(cls, "__slots__", ()):
                    if hasattr(obj, name):
                        stack.append(getattr(obj, name))
    return total


def state_size(engine: DetectionEngine, rule: type[JobRule]) -> int:
    """Bytes held by a rule's own state: its detectors, not the engine, the job, or state of the other rules it
    reads (the inspector feeds the comm rule's detector: counted there)."""
    job = engine.jobs[JOB]
    root = job.rule(rule.spec.name)
    others: set[int] = set()
    for other in job.rules:
        if other is not root:
            _walk([other], others, other)
    return _walk([root], others, root)


RULES = pytest.mark.parametrize("rule", JOB_RULES, ids=lambda r: r.spec.name)


def test_every_rule_declares_what_it_is():
    names = [s.name for s in all_specs()]
    assert len(names) == len(set(names))
    for spec in all_specs():
        assert spec.alert_types and all(isinstance(t, AlertType) for t in spec.alert_types), spec.name
        assert set(spec.failure_classes) <= set(FAILURE_CLASSES), (spec.name, set(spec.failure_classes) -
                                                                   set(FAILURE_CLASSES))
        assert spec.consumes and all(isinstance(s, Signal) for s in spec.consumes), spec.name
    # Every alert type has a declared source: the vocabulary and the rules cannot drift apart.
    assert all(declared_types().values()), [t for t, who in declared_types().items() if not who]
    assert set(FAULTS) == {r.spec.name for r in JOB_RULES}, "a registered rule needs its fault in FAULTS"
    assert set(NODE_FAULTS) == {r.spec.name for r in NODE_RULES}, "a node rule needs its fault in NODE_FAULTS"


@RULES
def test_warm_up_and_a_healthy_job_give_no_alert(rule):
    engine, alerts = run(healthy(rule, 400))
    assert alerts == []
    assert rule_of(engine, rule).open_alerts() == []


def _current(engine: DetectionEngine, settings_type: type):
    return {StragglerSettings: engine.straggler_settings(JOB), HangSettings: engine.hang_settings(JOB),
            JobHealthSettings: engine.settings.job_health}[settings_type]


@RULES
def test_reconfigure_keeps_state_and_still_detects(rule):
    settings, fault = FAULTS[rule.spec.name]()
    engine, first = run(fault[:len(fault) // 10], settings)
    r = rule_of(engine, rule)
    if rule.spec.settings is not None:
        current = _current(engine, rule.spec.settings)
        assert isinstance(current, rule.spec.settings)
        r.reconfigure(current)  # the same values: nothing changes
        r.reconfigure(dataclasses.replace(current))
    _, rest = run(fault[len(fault) // 10:], engine=engine)
    assert r.open_alerts(), f"{rule.spec.name} no longer detects its fault after reconfigure"
    assert all(a.type in rule.spec.alert_types for a in r.open_alerts())


@RULES
def test_state_is_bounded_under_a_long_healthy_stream(rule):
    events = healthy(rule, 2400)
    engine, alerts = run(events[:len(events) // 2])  # long enough for every window and baseline to fill
    half = state_size(engine, rule)
    _, more = run(events[len(events) // 2:], engine=engine)
    full = state_size(engine, rule)
    assert alerts == [] and more == []
    # Twice the input, hardly more state (dicts resize, small counters grow).
    assert full <= half * 1.1 + 16_384, (rule.spec.name, half, full)


@RULES
def test_the_same_input_twice_gives_the_same_alerts(rule):
    settings, fault = FAULTS[rule.spec.name]()
    _, first = run(fault, settings)
    _, second = run(fault, settings)
    assert first, f"{rule.spec.name}: its fault gave no alert"
    assert [a.to_json() for a in first] == [a.to_json() for a in second]
    # The evidence other modules act on reads back as the rule's typed record (models/evidence.py).
    for a in first:
        if a.type == AlertType.STRAGGLER:
            e = StragglerEvidence.of(a, strict=True)
            assert e.signal is not None and e.horizon is not None
        elif a.type == AlertType.HANG:
            e = HangEvidence.of(a, strict=True)
            assert e.case is not None and e.stalled_since is not None


@RULES
@pytest.mark.parametrize("resolution", [Resolution.THRESHOLD_CHANGED, Resolution.JOB_ENDED])
def test_open_alerts_are_listed_and_closed_with_a_resolution(rule, resolution):
    settings, fault = FAULTS[rule.spec.name]()
    engine, alerts = run(fault, settings)
    r = rule_of(engine, rule)
    open_ = r.open_alerts()
    assert open_, f"{rule.spec.name}: nothing open at the end of its fault"
    assert all(a.status == "firing" and a.type in rule.spec.alert_types for a in open_)
    latest = {a.id: a.status for a in alerts}  # every open alert was emitted, and is firing on the wire
    assert all(latest.get(a.id) == "firing" for a in open_)
    assert {a.id for a in open_} <= {a.id for a in engine.open_alerts()}
    closed = r.close(at=engine.clock, resolution=resolution, reason="contract test")
    assert sorted(a.id for a in closed) == sorted(a.id for a in open_)
    assert all(a.status == "resolved" and a.ends_at == engine.clock for a in closed)
    assert all(a.evidence["resolution"] == resolution.value for a in closed)
    assert r.open_alerts() == []
    assert r.close(at=engine.clock, resolution=resolution, reason="again") == []


# -- node-level rules -------------------------------------------------------------------------------------------

NODES = 8
GIB = 2**30


def fleet_events(*, seconds: int, hot: tuple[int, int] | None = None, erring: tuple[int, ...] = (),
                 fault_from: int = 100, skew: float = 0.4) -> list[dict]:
    """``NODES`` nodes (n00...) of 4 GPUs and 2 ports, a job of one rank per GPU stepping once a second; per
    second each GPU and port samples once, in node order, node k's clock ``k * skew`` s ahead.

    ``hot``: (node, gpu) at 90 C from ``fault_from``; ``erring``: nodes whose first port counts symbol errors
    from ``fault_from + its index`` (an erring port often; the others a lost sample now and then)."""
    out: list[dict] = []
    ranks = NODES * 4
    for t in range(seconds):
        now = T0 + t
        for r in range(ranks):
            step_time = round(1.0 * (1 + _noise(r, t)), 6)
            out.append({"v": 1, "kind": "step", "job": JOB, "rank": r, "step": t, "ts": round(now + 0.9, 6),
                        "step_time": step_time, "compute_time": round(0.8 * step_time, 6), "data_time": 0.01,
                        "node": f"n{r // 4:02d}", "gpu": r % 4, "world_size": ranks})
        for k in range(NODES):
            node, ts = f"n{k:02d}", round(now + k * skew, 6)
            for g in range(4):
                if (k * 4 + g + t) % 97 == 0:
                    continue  # a lost sample
                n = _noise(k * 4 + g, t)
                temp = 90.0 if hot == (k, g) and t >= fault_from else 62.0 + 40 * n
                out.append({"v": 1, "kind": "gpu", "node": node, "ts": ts, "gpu": g, "util": round(96 + 60 * n, 2),
                            "temp": round(temp, 2), "mem_used": int((60 + 100 * n) * GIB), "mem_total": 80 * GIB,
                            "power": round(600 + 2000 * n, 1), "power_limit": 700.0,
                            "sm_clock": round(1980 - 400 * abs(n)), "sm_clock_max": 1980.0, "throttle": 0,
                            "ecc_sbe": 0, "ecc_dbe": 0})
            for d in range(2):
                if (k * 2 + d + t) % 89 == 0:
                    continue
                errors = 0
                if d == 0 and k in erring and t >= fault_from + erring.index(k):
                    errors = 7 * (t - fault_from - erring.index(k) + 1)
                data = int(t * 40e9 * (1 + _noise(k + d, t)))
                out.append({"v": 1, "kind": "link", "node": node, "ts": ts, "device": f"mlx5_{d}", "port": 1,
                            "state": "ACTIVE", "rate": 400.0,
                            "counters": {"port_xmit_data": data, "port_rcv_data": data,
                                         "port_xmit_wait": int(t * 2e5 * (1 + _noise(d, t + k))),
                                         "symbol_error": errors}})
    return out


#: Per node rule: (settings, events) that make it fire, the fault still on at the end.
NODE_FAULTS = {
    "telemetry": lambda: (None, fleet_events(seconds=160, erring=(3,))),
    "device": lambda: (None, fleet_events(seconds=160, hot=(2, 1))),
    "fabric": lambda: (None, fleet_events(seconds=160, erring=(0, 2, 4, 5, 7))),
}

NODE_RULE = pytest.mark.parametrize("rule", NODE_RULES, ids=lambda r: r.spec.name)


def node_rule_of(engine: DetectionEngine, rule: type[NodeRule]) -> NodeRule:
    return engine.telemetry.rule(rule.spec.name)


def node_state_size(engine: DetectionEngine, rule: type[NodeRule]) -> int:
    """Bytes held by a node rule's own state, not the hub's or other rules' (the fabric rule reads the
    telemetry rule's tracker: counted there)."""
    root = node_rule_of(engine, rule)
    others: set[int] = set()
    for other in engine.telemetry.rules:
        if other is not root:
            _walk([other], others, other)
    return _walk([root], others, root)


def test_the_hub_makes_and_feeds_the_registered_node_rules():
    engine = DetectionEngine()
    assert [r.spec.name for r in engine.telemetry.rules] == [r.spec.name for r in NODE_RULES]
    assert all(type(r) is c for r, c in zip(engine.telemetry.rules, NODE_RULES))
    for rule in NODE_RULES:
        assert Signal.TELEMETRY not in rule.spec.consumes or rule.kinds, rule.spec.name
        assert rule.spec.consumes <= {Signal.TELEMETRY, Signal.RANK_STEPS, Signal.ALERTS, Signal.TICKS}, rule.spec.name


@NODE_RULE
def test_node_rules_give_no_alert_on_a_healthy_fleet(rule):
    engine, alerts = run(fleet_events(seconds=400))
    assert alerts == []
    assert node_rule_of(engine, rule).open_alerts() == []


def _current_node_settings(engine: DetectionEngine, settings_type: type):
    return {TelemetrySettings: engine.settings.telemetry, HostSettings: engine.settings.host}[settings_type]


@NODE_RULE
def test_node_rules_reconfigure_keeping_state_and_still_detect(rule):
    settings, fault = NODE_FAULTS[rule.spec.name]()
    cut = len(fault) * 55 // 100  # past the warm-up, before the fault
    engine, first = run(fault[:cut], settings)
    assert first == []
    r = node_rule_of(engine, rule)
    if rule.spec.settings is not None:
        current = _current_node_settings(engine, rule.spec.settings)
        assert isinstance(current, rule.spec.settings)
        r.reconfigure(current)
        engine.telemetry.reconfigure(dataclasses.replace(current))
    _, rest = run(fault[cut:], engine=engine)
    assert r.open_alerts(), f"{rule.spec.name} no longer detects its fault after reconfigure"
    assert all(a.type in rule.spec.alert_types for a in r.open_alerts())


def test_a_node_rule_reconfigured_takes_its_new_thresholds():
    engine, _ = run(fleet_events(seconds=120))
    device = engine.telemetry.rule("device")
    engine.telemetry.reconfigure(dataclasses.replace(engine.settings.host, gpu_hot_temp_c=50.0))
    _, alerts = run(fleet_events(seconds=125)[len(fleet_events(seconds=120)):], engine=engine)
    # every GPU runs at 62 C +- 6: all of them are hot now, and the warm-up state (the job's steps) was kept
    assert {a.type for a in alerts} == {AlertType.GPU_HOT}
    assert len(device.open_alerts()) == NODES * 4


@NODE_RULE
def test_node_rule_state_is_bounded_under_a_long_healthy_stream(rule):
    events = fleet_events(seconds=1200)
    engine, alerts = run(events[:len(events) // 2])
    half = node_state_size(engine, rule)
    _, more = run(events[len(events) // 2:], engine=engine)
    full = node_state_size(engine, rule)
    assert alerts == [] and more == []
    assert full <= half * 1.1 + 16_384, (rule.spec.name, half, full)


@NODE_RULE
def test_node_rules_give_the_same_alerts_for_the_same_input(rule):
    settings, fault = NODE_FAULTS[rule.spec.name]()
    _, first = run(fault, settings)
    _, second = run(fault, settings)
    assert [a for a in first if a.type in rule.spec.alert_types], f"{rule.spec.name}: its fault gave no alert"
    assert [a.to_json() for a in first] == [a.to_json() for a in second]


@NODE_RULE
@pytest.mark.parametrize("resolution", [Resolution.THRESHOLD_CHANGED, Resolution.FORGOTTEN])
def test_node_rule_open_alerts_are_listed_and_closed_with_a_resolution(rule, resolution):
    settings, fault = NODE_FAULTS[rule.spec.name]()
    engine, alerts = run(fault, settings)
    r = node_rule_of(engine, rule)
    open_ = r.open_alerts()
    assert open_, f"{rule.spec.name}: nothing open at the end of its fault"
    assert all(a.status == "firing" and a.type in rule.spec.alert_types for a in open_)
    latest = {a.id: a.status for a in alerts}  # every open alert was emitted, and is firing on the wire
    assert all(latest.get(a.id) == "firing" for a in open_)
    assert {a.id for a in open_} <= {a.id for a in engine.telemetry.open_alerts()}
    closed = r.close(at=engine.clock, resolution=resolution, reason="contract test")
    assert sorted(a.id for a in closed) == sorted(a.id for a in open_)
    assert all(a.status == "resolved" and a.ends_at == engine.clock for a in closed)
    assert all(a.evidence["resolution"] == resolution.value for a in closed)
    assert r.open_alerts() == []
    assert r.close(at=engine.clock, resolution=resolution, reason="again") == []


class _PowerCapRule(NodeRule):
    """A node rule written for this test only: a GPU at its power limit (one module + one registry line)."""

    from stepwatch.models.rule import RuleSpec as _Spec

    spec = _Spec(name="power_cap", consumes=frozenset({Signal.TELEMETRY}), alert_types=(AlertType.GPU_FAULT,),
                 failure_classes=(), settings=None)
    kinds = frozenset({"gpu"})

    def __init__(self, env, needs) -> None:
        self.seen = 0
        self.firing: dict = {}

    def update(self, event):
        from stepwatch.models.alerts import Alert

        self.seen += 1
        key = (event.node, event.gpu)
        if event.power is not None and event.power >= 625.0 and key not in self.firing:
            self.firing[key] = Alert(id=f"cap-{event.node}-{event.gpu}", status="firing", type=AlertType.GPU_FAULT,
                                     severity="warning", job="", ranks=(), nodes=(event.node,), starts_at=event.ts,
                                     summary="at its power limit", evidence={"node": event.node, "gpu": event.gpu})
            return [self.firing[key]]
        return []

    def open_alerts(self):
        return list(self.firing.values())


def test_a_new_node_rule_is_one_class_and_one_registry_line(monkeypatch):
    from stepwatch.models import registry

    monkeypatch.setattr(registry, "NODE_RULES", (*registry.NODE_RULES, _PowerCapRule))
    engine, alerts = run(fleet_events(seconds=30))
    rule = engine.telemetry.rule("power_cap")
    assert rule.seen == sum(1 for e in fleet_events(seconds=30) if e["kind"] == "gpu")
    fired = [a for a in alerts if a.id.startswith("cap-")]
    assert fired and {a.id for a in fired} == {a.id for a in rule.open_alerts()}
    # it left through the engine like any alert: classified on its way out
    assert all("failure_class" in a.evidence for a in fired)
