"""One contract for every registered rule (models/registry.py), per-job and node-level, as River runs every drift
detector through one harness: warm-up on healthy input, reconfigure, bounded state under a long healthy stream,
replay determinism, open alerts listed and closed with a ``Resolution``.

The input comes from the small generator below, written for this test (not the simulator): a synchronous job
whose ranks send steps, heartbeats and collectives, with checkpoints, a little noise, events reordered within a
step and some heartbeats lost. Each rule is driven through the real engine (the rules' one road) and checked
through the contract's methods only. A new rule adds its fault to ``FAULTS``: the test fails until it does.

The node-level rules get the same contract on a small fleet written here too (``fleet_events``): nodes of four
GPUs and two InfiniBand ports each, one sample a second per GPU and port with noise, some samples lost, node
clocks a little apart, a job stepping on the GPUs; their faults are in ``NODE_FAULTS``. The outlet rules (on the
alerts leaving the engine) get it on jobs: a restart, two jobs' stragglers on one node (``OUTLET_FAULTS``). One set
of tests, parametrized over the three registries (``KINDS``), runs them all.
"""

from __future__ import annotations

import dataclasses
import hashlib
import sys
from collections.abc import Callable
from typing import Any

import numpy as np
import orjson
import pytest

from stepwatch.models.oncall.actions import FAILURE_CLASSES
from stepwatch.models.alert_types import AlertType
from stepwatch.models.detection import DetectionEngine
from stepwatch.models.engine import JobState
from stepwatch.models.wire.events import parse_event
from stepwatch.models.evidence import HangEvidence, StragglerEvidence
from stepwatch.models.hang.detector import HangSettings
from stepwatch.models.jobhealth.job_health import JobHealthSettings
from stepwatch.models.oncall.oncall import OnCall
from stepwatch.models.registry import JOB_RULES, NODE_RULES, OUTLET_RULES, all_specs, declared_types
from stepwatch.models.resolution import Resolution
from stepwatch.models.rule import JobRule, NodeRule, Rule, Signal
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
               tail: float = 0.0, checkpoint_every: int = 50, checkpoint_until: int | None = None,
               job: str = JOB, slow_ranks: tuple[int, ...] = (), slow_burst: tuple[int, int] | None = None,
               restart_at: int | None = None, restart_back: int = 12, restart_down: float = 90.0) -> list[dict]:
    """A synchronous job: per step each rank's step, collective and heartbeat, with the faults asked for.

    ``slow_ranks``: more ranks slow like ``slow_rank``; ``slow_burst`` (slow, clean): they are slow that many
    steps, then clean that many, and so on; ``restart_at``: after that step the job is down ``restart_down``
    seconds and resumes ``restart_back`` steps earlier (from its checkpoint)."""
    out: list[dict] = []
    t = T0
    per_stage = ranks // stages
    slow_set = {slow_rank, *slow_ranks} - {None}
    end = steps if stop_at is None else stop_at
    sequence = list(range(end))
    if restart_at is not None:
        sequence = list(range(restart_at + 1)) + list(range(restart_at + 1 - restart_back, end))
    for i, s in enumerate(sequence):
        if restart_at is not None and i == restart_at + 1:
            t += restart_down  # the job died and was relaunched from its checkpoint
        transfer = 0.04 * (comm if comm_from is not None and s >= comm_from else 1.0)
        computes = []
        for r in range(ranks):
            c = 0.2 * (1 + _noise(r, s)) * (1.6 if stages > 1 and r >= per_stage else 1.0)
            if r in slow_set and s >= slow_from and (
                    slow_burst is None or (s - slow_from) % sum(slow_burst) < slow_burst[0]):
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
            batch.append({"v": 1, "kind": "step", "job": job, "rank": r, "step": s, "ts": ts,
                          "step_time": round(step_time, 6), "compute_time": round(computes[r], 6),
                          "data_time": 0.01, "comm_time": round(step_time - computes[r] - 0.01, 6),
                          "tokens": 4096, "node": node, "world_size": ranks,
                          **({"group": f"stage{stage}"} if stages > 1 else {})})
            batch.append({"v": 1, "kind": "collective", "job": job, "rank": r, "seq": s, "op": "allreduce",
                          "ts": ts, "duration": round(transfer * (1 + _noise(r + 3, s)), 6), "node": node,
                          "pg": "0", "bytes": 1 << 24, "step": s})
            if not (r == 2 and s % 29 == 7):  # a lost heartbeat now and then
                batch.append({"v": 1, "kind": "heartbeat", "job": job, "rank": r, "step": s + 1,
                              "ts": round(ts + 0.001, 6), "node": node, "seq_completed": s})
        if s % 13 == 5:  # another rank's events overtake: order within a step is not guaranteed
            batch[0:3], batch[3:6] = batch[3:6], batch[0:3]
        out.extend(batch)
        t += max(computes) + transfer + 0.01
        if checkpoint_every and s % checkpoint_every == checkpoint_every - 1 and (
                checkpoint_until is None or s < checkpoint_until):
            out.append({"v": 1, "kind": "phase", "job": job, "ts": round(t, 6), "phase": "checkpoint", "step": s})
            t += 2.0
            out.append({"v": 1, "kind": "phase", "job": job, "ts": round(t, 6), "phase": "train", "step": s})
    end = t + tail
    while t < end:  # the job stopped stepping: every rank but one still heartbeats
        t += 1.0
        for r in range(ranks):
            if r != silent_rank:
                out.append({"v": 1, "kind": "heartbeat", "job": job, "rank": r, "step": stop_at or steps,
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


def _walk(roots: list, skip: set[int], root: Rule | None = None) -> int:
    """Bytes reachable from ``roots`` (numpy arrays by their buffers), not entering ``skip``, the engine, the
    job, the hub, the outlet, callables or rules other than ``root``; every object entered is added to ``skip``."""
    total = 0
    stack = list(roots)
    while stack:
        obj = stack.pop()
        if id(obj) in skip or callable(obj) or isinstance(obj, (type, DetectionEngine, JobState, TelemetryHub, OnCall)) or (
                isinstance(obj, Rule) and obj is not root):
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

#: Per node rule: as ``FAULTS``; the rules on the job rules' alerts get a job's (one node's ranks slow, a rank
#: slow in bursts).
NODE_FAULTS.update({
    "node_incident": lambda: (None, job_events(steps=200, slow_ranks=(4, 5, 6), slow=1.5, slow_from=60)),
    "intermittent_incident": lambda: (None, job_events(steps=300, slow_rank=5, slow=1.5, slow_from=40,
                                                       slow_burst=(12, 15))),
})

#: Per outlet rule: as ``FAULTS``.
OUTLET_FAULTS = {
    "restarts": lambda: (None, job_events(steps=200, restart_at=150)),
    # two jobs' stragglers on one node (n01), whose agent reports (only agents speak for nodes): a node_suspect
    "node_ledger": lambda: (None, sorted([{"v": 1, "kind": "gpu", "node": n, "gpu": 0, "ts": T0 - 60, "temp_c": 60.0}
                                          for n in ("n00", "n01")] +
                                         job_events(steps=200, slow_rank=5, slow=1.5, slow_from=60, job="a") +
                                         job_events(steps=200, slow_rank=6, slow=1.5, slow_from=80, job="b"),
                                         key=lambda e: e["ts"])),
    # GPUs fall off the bus on both of the job's nodes: one drain an hour per job, the other held for a human
    "drain_budget": lambda: (None, sorted(job_events(steps=200) + [
        {"v": 1, "kind": "gpu", "node": n, "ts": T0 + 1.0, "gpu": 0, "temp_c": 60.0} for n in ("n00", "n01")] + [
        {"v": 1, "kind": "xid", "node": n, "gpu": 0, "xid": 79, "ts": T0 + 100.0 + i, "message": "NVRM: Xid 79"}
        for i, n in enumerate(("n00", "n01"))], key=lambda e: e["ts"])),
}


# -- one contract for every registered rule, whatever its kind ------------------------------------------------------

def _current(engine: DetectionEngine, settings_type: type):
    return {StragglerSettings: engine.straggler_settings(JOB), HangSettings: engine.hang_settings(JOB),
            JobHealthSettings: engine.settings.job_health}[settings_type]


def _current_node_settings(engine: DetectionEngine, settings_type: type):
    return {TelemetrySettings: engine.settings.telemetry, HostSettings: engine.settings.host}[settings_type]


@dataclasses.dataclass(frozen=True)
class Kind:
    """How the contract reaches one kind of rule: where the engine keeps it, its input, its settings."""

    name: str
    registry: tuple
    faults: dict
    instance: Callable[[DetectionEngine, str], Rule]  # the rule registered as the name
    siblings: Callable[[DetectionEngine], list[Rule]]  # the rules made beside it (their state is not its own)
    open_of: Callable[[DetectionEngine], list]  # the open alerts of all the rules of its kind
    current: Callable[[DetectionEngine, type], Any]  # its settings now, by settings type
    healthy: Callable[[type, int], list[dict]]  # (rule, length) -> healthy input, long enough to warm up
    cut: float  # share of the fault fed before reconfigure (node rules: past warm-up, before the fault)
    resolutions: tuple[Resolution, ...]


JOB_KIND = Kind("job", JOB_RULES, FAULTS, lambda e, n: e.jobs[JOB].rule(n), lambda e: list(e.jobs[JOB].rules),
           lambda e: e.open_alerts(), _current, healthy, 0.1, (Resolution.THRESHOLD_CHANGED, Resolution.JOB_ENDED))
NODE_KIND = Kind("node", NODE_RULES, NODE_FAULTS, lambda e, n: e.telemetry.rule(n), lambda e: list(e.telemetry.rules),
            lambda e: e.telemetry.open_alerts(), _current_node_settings, lambda r, n: fleet_events(seconds=n),
            0.55, (Resolution.THRESHOLD_CHANGED, Resolution.FORGOTTEN))
OUTLET_KIND = Kind("outlet", OUTLET_RULES, OUTLET_FAULTS, lambda e, n: e.oncall.rule(n), lambda e: list(e.oncall.rules),
              lambda e: e.oncall.open_alerts(), lambda e, t: e.settings.oncall, lambda r, n: job_events(steps=n),
              0.1, (Resolution.THRESHOLD_CHANGED, Resolution.FORGOTTEN))
KINDS = (JOB_KIND, NODE_KIND, OUTLET_KIND)
#: Rules whose alerts fire and resolve at once (a restart is over when it is seen): nothing stays open.
INSTANT = {"restarts"}

CONTRACT = pytest.mark.parametrize("kind,rule", [(k, r) for k in KINDS for r in k.registry],
                                   ids=[f"{k.name}-{r.spec.name}" for k in KINDS for r in k.registry])


def state_size(engine: DetectionEngine, kind: Kind, rule: type[Rule]) -> int:
    """Bytes held by a rule's own state: its detectors, not the engine, the job, or state of the other rules it
    reads (the inspector feeds the comm rule's detector, the fabric rule reads the telemetry rule's tracker:
    counted there)."""
    root = kind.instance(engine, rule.spec.name)
    others: set[int] = set()
    for other in kind.siblings(engine):
        if other is not root:
            _walk([other], others, other)
    return _walk([root], others, root)


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
    for kind in KINDS:
        assert set(kind.faults) == {r.spec.name for r in kind.registry}, f"a {kind.name} rule needs its fault"


@CONTRACT
def test_warm_up_and_healthy_input_give_no_alert(kind, rule):
    engine, alerts = _shared_run(kind.healthy(rule, 400))
    assert alerts == []
    assert kind.instance(engine, rule.spec.name).open_alerts() == []


@CONTRACT
def test_reconfigure_keeps_state_and_still_detects(kind, rule):
    settings, fault = kind.faults[rule.spec.name]()
    cut = int(len(fault) * kind.cut)
    engine, first = run(fault[:cut], settings)
    r = kind.instance(engine, rule.spec.name)
    if rule.spec.settings is not None:
        current = kind.current(engine, rule.spec.settings)
        assert isinstance(current, rule.spec.settings)
        r.reconfigure(current)  # the same values: nothing changes
        r.reconfigure(dataclasses.replace(current))
    _, rest = run(fault[cut:], engine=engine)
    if rule.spec.name in INSTANT:
        assert [a for a in rest if a.type in rule.spec.alert_types], f"{rule.spec.name}: no alert after reconfigure"
        return
    assert r.open_alerts(), f"{rule.spec.name} no longer detects its fault after reconfigure"
    assert all(a.type in rule.spec.alert_types for a in r.open_alerts())


_RUNS: dict[str, tuple[DetectionEngine, list]] = {}


def _shared_run(events: list[dict]) -> tuple[DetectionEngine, list]:
    """``run(events)``, once per input: the rules of a kind read one engine fed the same healthy stream."""
    key = hashlib.sha256(orjson.dumps(events)).hexdigest()
    if key not in _RUNS:
        _RUNS[key] = run(events)
    return _RUNS[key]


#: Long healthy runs by input: every rule of a kind runs in the same engine on the same stream, so each stream is
#: fed once and every rule's state measured on it (the numbers of a run per rule, in a fraction of the time).
_LONG_RUNS: dict[tuple[str, str], tuple[list, list, dict[str, int], dict[str, int]]] = {}


def _long_healthy_run(kind: Kind, rule: type[Rule]) -> tuple[list, list, dict[str, int], dict[str, int]]:
    """Alerts of the first half and of the second, and each rule's state size after either half."""
    events = kind.healthy(rule, 2400 if kind is not NODE_KIND else 1200)
    key = (kind.name, hashlib.sha256(orjson.dumps(events)).hexdigest())
    if key not in _LONG_RUNS:
        engine, alerts = run(events[:len(events) // 2])  # long enough for every window and baseline to fill
        half = {r.spec.name: state_size(engine, kind, r) for r in kind.registry}
        _, more = run(events[len(events) // 2:], engine=engine)
        full = {r.spec.name: state_size(engine, kind, r) for r in kind.registry}
        _LONG_RUNS[key] = alerts, more, half, full
    return _LONG_RUNS[key]


@CONTRACT
def test_state_is_bounded_under_a_long_healthy_stream(kind, rule):
    alerts, more, halves, fulls = _long_healthy_run(kind, rule)
    half, full = halves[rule.spec.name], fulls[rule.spec.name]
    assert alerts == [] and more == []
    # Twice the input, hardly more state (dicts resize, small counters grow).
    assert full <= half * 1.1 + 16_384, (rule.spec.name, half, full)


@CONTRACT
def test_the_same_input_twice_gives_the_same_alerts(kind, rule):
    settings, fault = kind.faults[rule.spec.name]()
    _, first = run(fault, settings)
    _, second = run(fault, settings)
    assert [a for a in first if a.type in rule.spec.alert_types], f"{rule.spec.name}: its fault gave no alert"
    assert [a.to_json() for a in first] == [a.to_json() for a in second]
    # The evidence other modules act on reads back as the rule's typed record (models/evidence.py).
    for a in first:
        if a.type == AlertType.STRAGGLER:
            e = StragglerEvidence.of(a, strict=True)
            assert e.signal is not None and e.horizon is not None
        elif a.type == AlertType.HANG:
            e = HangEvidence.of(a, strict=True)
            assert e.case is not None and e.stalled_since is not None


@CONTRACT
@pytest.mark.parametrize("which", [0, 1])
def test_open_alerts_are_listed_and_closed_with_a_resolution(kind, rule, which):
    resolution = kind.resolutions[which]
    settings, fault = kind.faults[rule.spec.name]()
    engine, alerts = run(fault, settings)
    r = kind.instance(engine, rule.spec.name)
    open_ = r.open_alerts()
    if rule.spec.name in INSTANT:  # every alert it fired resolved at once, nothing left to close
        mine = [a for a in alerts if a.type in rule.spec.alert_types]
        assert mine and open_ == [] and {a.id for a in mine if a.status == "firing"} == \
            {a.id for a in mine if a.status == "resolved"}
        assert r.close(at=engine.clock, resolution=resolution, reason="contract test") == []
        return
    assert open_, f"{rule.spec.name}: nothing open at the end of its fault"
    assert all(a.status == "firing" and a.type in rule.spec.alert_types for a in open_)
    latest = {a.id: a.status for a in alerts}  # every open alert was emitted, and is firing on the wire
    assert all(latest.get(a.id) == "firing" for a in open_)
    assert {a.id for a in open_} <= {a.id for a in kind.open_of(engine)}
    closed = r.close(at=engine.clock, resolution=resolution, reason="contract test")
    assert sorted(a.id for a in closed) == sorted(a.id for a in open_)
    assert all(a.status == "resolved" and a.ends_at == engine.clock for a in closed)
    assert all(a.evidence["resolution"] == resolution.value for a in closed)
    assert r.open_alerts() == []
    assert r.close(at=engine.clock, resolution=resolution, reason="again") == []


def test_the_hub_makes_and_feeds_the_registered_node_rules():
    engine = DetectionEngine()
    assert [r.spec.name for r in engine.telemetry.rules] == [r.spec.name for r in NODE_RULES]
    assert all(type(r) is c for r, c in zip(engine.telemetry.rules, NODE_RULES))
    for rule in NODE_RULES:
        assert Signal.TELEMETRY not in rule.spec.consumes or rule.kinds, rule.spec.name
        assert rule.spec.consumes <= {Signal.TELEMETRY, Signal.RANK_STEPS, Signal.ALERTS, Signal.ENRICHED,
                                      Signal.TICKS}, rule.spec.name


def test_the_outlet_makes_and_feeds_the_registered_outlet_rules():
    engine = DetectionEngine()
    assert [type(r) for r in engine.oncall.rules] == list(OUTLET_RULES)
    for rule in OUTLET_RULES:
        assert rule.spec.consumes <= {Signal.RANK_STEPS, Signal.ALERTS, Signal.TICKS}, rule.spec.name


def test_a_node_rule_reconfigured_takes_its_new_thresholds():
    engine, _ = run(fleet_events(seconds=120))
    device = engine.telemetry.rule("device")
    engine.telemetry.reconfigure(dataclasses.replace(engine.settings.host, gpu_hot_temp_c=50.0))
    _, alerts = run(fleet_events(seconds=125)[len(fleet_events(seconds=120)):], engine=engine)
    # every GPU runs at 62 C +- 6: all of them are hot now, and the warm-up state (the job's steps) was kept
    assert {a.type for a in alerts} == {AlertType.GPU_HOT}
    assert len(device.open_alerts()) == NODES * 4


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


# -- the outlet chain's stages (models/outlet.py, registry ``OUTLET_STAGES``) -------------------------------------

#: Per stage, the alerts it may change (others pass through it equal and in order): generated variants below.
STAGE_HANDLES: dict[str, Callable[[Any], bool]] = {
    "attribute": lambda a: not a.job and bool(a.nodes) and a.type not in (AlertType.NODE_SUSPECT, AlertType.FABRIC),
    "onset": lambda a: bool(a.job) and "first_step" in a.evidence,
    "cite": lambda a: True,  # any alert may belong to an incident
    "classify": lambda a: True,  # every alert gets its scope and class
    "effective_compute": lambda a: bool(a.job) and a.status == "resolved",
    "outlet_rules": lambda a: False,  # each alert passes; the rules' own alerts come after it
    "gate": lambda a: a.type in (AlertType.STRAGGLER, AlertType.NODE_SUSPECT) or "action" in a.evidence,
}
_TYPES = (AlertType.STRAGGLER, AlertType.HANG, AlertType.THROUGHPUT_DROP, AlertType.GPU_FAULT, AlertType.LINK_ERRORS,
          AlertType.GPU_HOT, AlertType.COMM_SLOWDOWN)


def _alerts(seed: int, n: int = 24) -> list:
    """Alerts of every shape a stage meets: job and node alerts, firing and resolved, with and without step fields."""
    from stepwatch.models.alerts import Alert

    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        kind = _TYPES[int(rng.integers(len(_TYPES)))]
        node_alert = kind in (AlertType.GPU_FAULT, AlertType.LINK_ERRORS, AlertType.GPU_HOT)
        evidence: dict[str, Any] = {"gpu": int(rng.integers(4))} if node_alert else {}
        if not node_alert and rng.random() < 0.5:
            evidence.update(first_step=int(rng.integers(1, 50)), detected_step=60)
        status = "resolved" if rng.random() < 0.3 else "firing"
        out.append(Alert(id=f"a{seed}-{i}", status=status, type=kind, severity="warning",
                         job="" if node_alert else f"job-{int(rng.integers(2))}",
                         ranks=() if node_alert else (int(rng.integers(8)),), nodes=(f"node-{int(rng.integers(3))}",),
                         starts_at=T0 + 10.0 * i, summary=f"{kind} {i}", evidence=evidence,
                         ends_at=T0 + 10.0 * i + 5 if status == "resolved" else None))
    return out


def _engine_with_jobs() -> DetectionEngine:
    """An engine that has seen a little of two jobs on three nodes (placement, steps): the stages' view."""
    engine = DetectionEngine()
    for name in ("job-0", "job-1"):
        run(job_events(steps=40, job=name), engine=engine)
    return engine


def test_the_outlet_chain_is_the_registry_list():
    from stepwatch.models.outlet import AlertStage
    from stepwatch.models.registry import OUTLET_STAGES

    engine = DetectionEngine()
    assert [type(s) for s in engine.outlet.stages] == list(OUTLET_STAGES)
    assert all(isinstance(s, AlertStage) and s.spec.does for s in engine.outlet.stages)
    assert set(STAGE_HANDLES) == {s.spec.name for s in engine.outlet.stages}, "a new stage needs its STAGE_HANDLES"
    assert engine.outlet.stages[-1].spec.name == "gate"  # the budget sees every alert that leaves


@pytest.mark.parametrize("seed", range(4))
def test_a_stage_passes_on_what_it_does_not_handle(seed):
    """Each stage alone: an alert it does not handle comes out equal, in order; none comes out with another id,
    type, job or status (a stage adds to an alert, never changes what it is)."""
    for i, name in enumerate(STAGE_HANDLES):
        engine = _engine_with_jobs()
        stage = engine.outlet.stage(name)
        alerts = _alerts(seed * 10 + i)
        out = stage.process(list(alerts), engine.view)
        by_id = {a.id: a for a in out}
        kept = [a.id for a in out if a.id in {b.id for b in alerts}]
        assert kept == [a.id for a in alerts if a.id in by_id], name  # in order
        for a in alerts:
            if a.id in by_id:
                b = by_id[a.id]
                assert (b.type, b.job, b.status) == (a.type, a.job, a.status), name
            if not STAGE_HANDLES[name](a):
                assert by_id.get(a.id) == a, (name, a.id)


@pytest.mark.parametrize("seed", range(3))
def test_the_chain_is_deterministic(seed):
    """The same alerts and ticks through two engines that saw the same input: the same alerts leave."""
    results = []
    for _ in range(2):
        engine = _engine_with_jobs()
        out = engine.outlet.process(_alerts(seed), engine.view)
        out += engine.outlet.tick(engine.clock + 60.0, engine.view)
        results.append([a.to_json() for a in out])
    assert results[0] == results[1] and results[0]


def test_the_stages_read_no_private_state_of_another_module():
    """The stages and on-call read the engine through its view: no ``engine.jobs``, ``sli._steps`` and the like."""
    import inspect

    from stepwatch.models.oncall import oncall, outlet_rules, stages

    for module in (stages, oncall, outlet_rules):
        source = inspect.getsource(module)
        for private in ("._steps", ".engine", "last_tick_jobs", "._placement", ".jobs.get("):
            assert private not in source, (module.__name__, private)


def test_the_cause_finders_are_the_registry_list_and_deterministic():
    """Every registered cause finder (models/telemetry/cause_finders.py) is a ``CauseFinder``; asked twice about the
    same alert it names the same causes; an alert none applies to leaves the hub as it came."""
    from stepwatch.models.registry import CAUSE_FINDERS
    from stepwatch.models.telemetry.cause_finders import CauseFinder

    engine, _ = run(fleet_events(seconds=60))
    hub = engine.telemetry
    assert [type(f) for f in hub.finders.values()] == list(CAUSE_FINDERS)
    assert all(isinstance(f, CauseFinder) for f in hub.finders.values())
    asked = 0
    for alert in _alerts(7, n=40):
        for finder in hub.finders.values():
            if finder.applies(alert):
                asked += 1
                assert finder.suspects(alert, alert.starts_at, hub) == finder.suspects(alert, alert.starts_at, hub)
    assert asked
    plain = [a for a in _alerts(8, n=40) if not any(f.applies(a) for f in hub.finders.values())]
    assert plain and hub.enrich(list(plain)) == plain
