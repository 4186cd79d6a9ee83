"""A library of named, labelled scenarios on top of the simulator, for the quality benchmark.

Each scenario is one or more simulated jobs (``SimulationSpec``) with realistic healthy noise,
plus ground-truth labels for every problem injected in it: its type, the alert type a correct
detector raises, the job, ranks and nodes, the onset step and time, and the end; for the
issue-26 scenarios (tag ``root-cause``) also the root cause a correct diagnosis names
(``Problem.root_cause``). What the simulator cannot make (a restart onto a spare node, a
pipeline's p2p transfers) comes from generators of their own (stepwatch/sim/scenario_recordings.py,
``Scenario.source``), the specs then only describing the jobs. ``write``
puts, next to each recording (JSON Lines, one batch envelope per line, the wire format that
``stepwatch replay`` reads), a ``<name>.labels.json``::

    {"v": 1, "scenario": "straggler-30pct-64", "description": "...", "tags": ["problem"],
     "recording": "straggler-30pct-64.jsonl",
     "jobs": [{"job": "...", "ranks": 64, "nodes": 8, "stages": 1, "steps": 300,
               "start_ts": ..., "end_ts": ..., "step_time": 0.97}],
     "noise": ["jitter 1%", "gc spikes", ...],
     "problems": [{"type": "straggler-30%", "alert_type": "straggler", "job": "...",
                   "ranks": [17], "nodes": ["node-002"], "onset_step": 100, "onset_ts": ...,
                   "end_step": null, "end_ts": ..., "deadline_s": 60.0, "detail": {"factor": 1.3}}]}

``end_step`` is exclusive (null: until the job ends); ``onset_ts`` is when the onset step
started, ``end_ts`` when ``end_step`` started (or the job's last event). Alerts before
``onset_ts`` are false alarms. A problem with a ``root_cause`` carries it in its labels
(``"root_cause": {"id": "leaf-01", "kind": "fabric", "switch": "leaf-01", "alert_ids": 5}``).

The library is a registry: ``@register`` a function returning a :class:`Scenario` (tags
``healthy``/``problem``, ``hang``, ``large``, ``multi-job``, ...) and it is part of the suite.
Hang scenarios register themselves when the simulator has ``HangFault``.
"""

from __future__ import annotations

import heapq
import itertools
import json
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import orjson

from . import simulator as sim
from .simulator import (ClusterSimulator, CommSlowdown, DataStall, Drift, InputStall, IntermittentStraggler,
                        JobSlowdown, NoisyNeighbour, RampStraggler, SimulationSpec, StragglerFault)

LABELS_VERSION = 1
#: Default time a detector is given to catch each kind of problem (seconds after onset).
DEFAULT_DEADLINE_S = {"straggler": 60.0, "hang": 120.0, "throughput_drop": 120.0, "comm_slowdown": 60.0,
                      "checkpoint_stale": 60.0, "imbalance": 120.0}


@dataclass(frozen=True, kw_only=True)
class Problem:
    """Ground truth for one injected problem (times are filled in when the scenario runs)."""

    type: str  # the problem, e.g. "straggler-30%", "intermittent", "thermal-ramp", "dataloader-stall", "hang"
    alert_type: str  # the alert a correct detector raises: "straggler" or "hang"
    job: str
    ranks: tuple[int, ...]
    onset_step: int
    end_step: int | None = None  # exclusive; None: until the job ends
    deadline_s: float | None = None
    detail: dict[str, Any] = field(default_factory=dict)
    #: Other alert types that are true (not false alarms) during this problem, e.g. a straggler also
    #: lowers the job's throughput. Only ``alert_type`` counts for detection.
    accepts: tuple[str, ...] = ("throughput_drop",)
    #: The node(s) a correct alert names first (``nodes[0]``): a network fault's node; ``()``: it must
    #: name none (a fabric-wide cause). None: not scored by node (the nodes of ``ranks`` are labelled).
    nodes: tuple[str, ...] | None = None
    #: The root cause a correct diagnosis names (bench/quality.py scores it), shared by the problems it
    #: causes (their alert ids count together as its incidents): ``{"id": ..., "kind": ..., ...}``, kind
    #: ``hang_culprit`` (``ranks``: the culprit, kept through a teardown), ``lost_node`` (``node``, and
    #: ``spare``: the healthy node its ranks restarted on, never blamed), ``fabric`` (``switch``: named
    #: by one fabric incident that the jobs' alerts cite, no node drained) or ``stage_compute`` (``ranks``:
    #: a pipeline rank's compute, no network alert); ``alert_ids``: the most alert ids it should take.
    root_cause: dict[str, Any] | None = None


@dataclass(frozen=True, kw_only=True)
class Scenario:
    name: str
    description: str
    specs: tuple[SimulationSpec, ...]
    problems: tuple[Problem, ...] = ()
    tags: tuple[str, ...] = ()
    noise: tuple[str, ...] = ()
    #: Per spec (same order), node telemetry to simulate alongside (a ``TelemetrySpec``) or None.
    telemetry: tuple = ()
    #: ``(node, seconds)``: every timestamp written on that node is that far off (broken NTP).
    clock_skew: tuple[tuple[str, float], ...] = ()
    #: Host faults (stepwatch/sim/host_sim.py) of the (single) job; with ``host`` also set, every node sends
    #: ``host`` events.
    host_faults: tuple = ()
    host: bool = False
    #: A recording written by a generator of its own (stepwatch/sim/scenario_recordings.py) instead of the
    #: simulator: ``() -> iterator of (time, [wire event, ...])``; ``specs`` then only describe the jobs.
    source: Callable[[], Iterable[tuple[float, list[dict]]]] | None = None

    @property
    def healthy(self) -> bool:
        return not self.problems

    @property
    def events(self) -> int:
        """Step events the recording holds (a size estimate; heartbeats not counted)."""
        return sum(s.ranks * s.steps for s in self.specs)


# -- registry ---------------------------------------------------------------------------------

_REGISTRY: dict[str, Callable[[], Scenario]] = {}


def register(fn: Callable[[], Scenario]) -> Callable[[], Scenario]:
    """Add a scenario builder to the suite (its name is the built scenario's ``name``)."""
    name = fn().name
    if name in _REGISTRY:
        raise ValueError(f"scenario {name!r} registered twice")
    _REGISTRY[name] = fn
    return fn


def names() -> list[str]:
    return list(_REGISTRY)


def get(name: str) -> Scenario:
    try:
        return _REGISTRY[name]()
    except KeyError:
        raise KeyError(f"unknown scenario {name!r} (known: {', '.join(_REGISTRY)})") from None


def suite(tags: Iterable[str] | None = None, *, exclude: Iterable[str] = ()) -> list[Scenario]:
    """Every registered scenario (with any of ``tags`` if given, none of ``exclude``)."""
    want = set(tags or ())
    skip = set(exclude)
    out = []
    for fn in _REGISTRY.values():
        s = fn()
        if want and not want & set(s.tags):
            continue
        if skip & set(s.tags):
            continue
        out.append(s)
    return out


# -- running ------------------------------------------------------------------------------------


def batches(scenario: Scenario) -> Iterator[tuple[float, list[dict]]]:
    """The scenario's event batches in time order (several jobs interleaved by time)."""
    if scenario.source is not None:
        yield from scenario.source()
        return
    telemetry = tuple(scenario.telemetry) + (None,) * (len(scenario.specs) - len(scenario.telemetry))
    streams = [_simulator(scenario, spec, tel).steps() for spec, tel in zip(scenario.specs, telemetry)]
    counter = itertools.count()  # ties: keep a stable order, never compare the lists
    keyed = [((t, next(counter), b) for t, b in stream) for stream in streams]
    skew = dict(scenario.clock_skew)
    for t, _, batch in heapq.merge(*keyed, key=lambda x: (x[0], x[1])):
        yield t, sim.apply_clock_skew(batch, skew)


def _simulator(scenario: Scenario, spec: SimulationSpec, telemetry=None):
    if telemetry is not None:  # node telemetry alongside (a TelemetrySpec)
        from .telemetry_sim import TelemetrySimulator

        return TelemetrySimulator(spec, telemetry)
    if scenario.host or scenario.host_faults:
        from .host_sim import HostSimulator

        return HostSimulator(spec, scenario.host_faults, seed=spec.seed + 2)
    return ClusterSimulator(spec)


class _Clock:
    """Start time of each step of each job, and each job's span, seen while generating."""

    def __init__(self, wanted: dict[str, set[int]]) -> None:
        self.wanted = wanted
        self.step_start: dict[tuple[str, int], float] = {}
        self.step_end: dict[tuple[str, int], float] = {}
        self.first: dict[str, float] = {}
        self.last: dict[str, float] = {}
        self.step_times: dict[str, list[float]] = {}

    def start_of(self, job: str, step: int) -> float | None:
        """When ``step`` started: from its own events, else when the step before it ended (a step
        that never completes, e.g. the one a dead rank stopped in, has no events of its own)."""
        start = self.step_start.get((job, step))
        return start if start is not None else self.step_end.get((job, step - 1))

    def see(self, batch: list[dict]) -> None:
        for e in batch:
            job = e.get("job")
            ts = e.get("ts")
            if job is None or ts is None:
                continue
            if job not in self.first or ts < self.first[job]:
                self.first[job] = ts
            if ts > self.last.get(job, 0.0):
                self.last[job] = ts
            if e.get("kind") != "step":
                continue
            step = e["step"]
            wanted = self.wanted.get(job, ())
            key = (job, step)
            if step in wanted:
                start = ts - e["step_time"]
                if key not in self.step_start or start < self.step_start[key]:
                    self.step_start[key] = start
            if step + 1 in wanted and (key not in self.step_end or ts < self.step_end[key]):
                self.step_end[key] = ts  # the next step starts then (send delays of a few ms aside)
            if e["rank"] == 0 and e.get("phase") is None:
                self.step_times.setdefault(job, []).append(e["step_time"])


def labels(scenario: Scenario, clock: _Clock, *, recording: str | None = None, seeds: Iterable[int] = ()) -> dict:
    jobs = []
    for spec in scenario.specs:
        times = sorted(clock.step_times.get(spec.job, [])) or [0.0]
        jobs.append({
            "job": spec.job, "ranks": spec.ranks, "nodes": -(-spec.ranks // spec.ranks_per_node),
            "stages": spec.stages, "steps": spec.steps, "start_ts": clock.first.get(spec.job),
            "end_ts": clock.last.get(spec.job), "step_time": round(times[len(times) // 2], 6),
        })
    by_job = {spec.job: spec for spec in scenario.specs}
    problems = []
    for p in scenario.problems:
        spec = by_job[p.job]
        end_ts = clock.start_of(p.job, p.end_step) if p.end_step is not None else None
        problem = {
            "type": p.type, "alert_type": p.alert_type, "job": p.job, "ranks": list(p.ranks),
            "nodes": list(p.nodes) if p.nodes is not None else sorted({spec.node_of(r) for r in p.ranks}),
            "right_node": list(p.nodes) if p.nodes is not None else None, "onset_step": p.onset_step,
            "onset_ts": clock.start_of(p.job, p.onset_step), "end_step": p.end_step,
            "end_ts": end_ts if end_ts is not None else clock.last.get(p.job),
            "deadline_s": p.deadline_s if p.deadline_s is not None else DEFAULT_DEADLINE_S.get(p.alert_type, 60.0),
            "detail": p.detail, "accepts": list(p.accepts),
        }
        if p.root_cause is not None:
            problem["root_cause"] = p.root_cause
        problems.append(problem)
    out = {"v": LABELS_VERSION, "scenario": scenario.name, "description": scenario.description,
           "tags": list(scenario.tags), "healthy": scenario.healthy, "noise": list(scenario.noise),
           "seeds": sorted({s.seed for s in scenario.specs}), "jobs": jobs, "problems": problems}
    if recording is not None:
        out["recording"] = recording
    return out


def write(scenario: Scenario, out_dir: str | Path) -> tuple[Path, Path]:
    """Write ``<name>.jsonl`` (one batch envelope per line) and ``<name>.labels.json`` into ``out_dir``."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    recording = out_dir / f"{scenario.name}.jsonl"
    label_path = out_dir / f"{scenario.name}.labels.json"
    wanted: dict[str, set[int]] = {}
    for p in scenario.problems:
        wanted.setdefault(p.job, set()).update(s for s in (p.onset_step, p.end_step) if s is not None)
    clock = _Clock(wanted)
    with open(recording, "wb") as f:
        for _, batch in batches(scenario):
            if not batch:
                continue
            clock.see(batch)
            if len(batch) == 1:
                f.write(orjson.dumps(batch[0]))
            else:
                f.write(orjson.dumps({"v": 1, "kind": "batch", "events": batch}))
            f.write(b"\n")
    label_path.write_text(json.dumps(labels(scenario, clock, recording=recording.name), indent=1) + "\n")
    return recording, label_path


# -- the suite ------------------------------------------------------------------------------------

BASE_NOISE = ("per-rank compute jitter (CoV 1%)", "GC spikes (0.2% of rank-steps, +0.25 s)",
              "data-loader hiccups on single ranks (0.2%, +0.5 s)", "warm-up (5 steps, phase marked)")
T0 = 1_700_000_000.0


def _spec(job: str, ranks: int, steps: int = 300, seed: int = 0, **kw: Any) -> SimulationSpec:
    kw.setdefault("checkpoint_every", 100)
    return SimulationSpec(job=job, ranks=ranks, steps=steps, seed=seed, start_time=T0, **kw)


def _noise(spec: SimulationSpec, *extra: str) -> tuple[str, ...]:
    out = list(BASE_NOISE)
    if spec.jitter != 0.01:
        out[0] = f"per-rank compute jitter (CoV {spec.jitter:.0%})"
    if spec.checkpoint_every:
        out.append(f"checkpoint pause every {spec.checkpoint_every} steps ({spec.checkpoint_seconds:.0f} s)")
    if spec.stages > 1:
        out.append(f"{spec.stages} pipeline stages, each {spec.stage_skew:.0%} slower than the one before")
    out.extend(extra)
    return tuple(out)


def _single(name: str, description: str, spec: SimulationSpec, problems: Iterable[Problem] = (),
            tags: Iterable[str] = (), extra_noise: Iterable[str] = ()) -> Scenario:
    problems = tuple(problems)
    return Scenario(name=name, description=description, specs=(spec,), problems=problems,
                    tags=("problem" if problems else "healthy", *tags), noise=_noise(spec, *extra_noise))


# healthy -------------------------------------------------------------------------------------


@register
def healthy_64() -> Scenario:
    return _single("healthy-64", "64 ranks, baseline noise, checkpoints", _spec("healthy-64", 64, seed=11))


@register
def healthy_8() -> Scenario:
    return _single("healthy-8", "the smallest job: 8 ranks on one node", _spec("healthy-8", 8, seed=12))


@register
def healthy_varlen_128() -> Scenario:
    return _single("healthy-varlen-128", "variable sequence lengths: per-rank compute CoV 10%",
                   _spec("healthy-varlen-128", 128, seed=13, jitter=0.10))


@register
def healthy_spiky_256() -> Scenario:
    return _single("healthy-spiky-256", "5x more GC spikes and data-loader hiccups, frequent checkpoints",
                   _spec("healthy-spiky-256", 256, seed=14, gc_probability=0.01, hiccup_probability=0.01,
                         hiccup_seconds=1.0, checkpoint_every=50))


@register
def healthy_drift_128() -> Scenario:
    spec = _spec("healthy-drift-128", 128, seed=15, effects=(Drift(amplitude=0.02, period_steps=150, seed=15),))
    return _single("healthy-drift-128", "2% periodic drift, nodes out of phase (diurnal temperature)", spec,
                   extra_noise=("2% drift, node phases spread 0.5 rad",))


@register
def job_slowdown_64() -> Scenario:
    # Healthy for the straggler rule (a shared cause flags no rank); a throughput drop is true here.
    name = "job-slowdown-64"
    spec = _spec(name, 64, seed=16, slowdowns=(JobSlowdown(start_step=80, factor=1.3, end_step=130),
                                               JobSlowdown(start_step=210, factor=2.0, end_step=230)))
    problems = [Problem(type="job-slowdown", alert_type="throughput_drop", job=name, ranks=(), onset_step=80,
                        end_step=130, detail={"factor": 1.3, "layer": "compute"}, deadline_s=120.0),
                Problem(type="job-slowdown", alert_type="throughput_drop", job=name, ranks=(), onset_step=210,
                        end_step=230, detail={"factor": 2.0, "layer": "compute"}, deadline_s=120.0)]
    return _single(name, "whole-job slowdowns (1.3x for 50 steps, 2x for 20): a shared cause, no straggler",
                   spec, problems, extra_noise=("whole-job slowdowns 1.3x and 2x",))


def _stage_skew(job: str, spec: SimulationSpec) -> Problem:
    """The simulator's stages differ by ``stage_skew`` each by design: the last is a stage imbalance."""
    last = [r for r in range(spec.ranks) if r // (spec.ranks // spec.stages) == spec.stages - 1]
    return Problem(type="stage-imbalance (by design)", alert_type="imbalance", job=job, ranks=tuple(last),
                   onset_step=0, detail={"stage_skew": spec.stage_skew, "stages": spec.stages},
                   accepts=("throughput_drop", "straggler"))


@register
def healthy_pipeline_64() -> Scenario:
    # No bad rank; the stages' built-in 15% skew (the last stage 1.18x the median stage) is labelled as
    # the stage imbalance it is.
    spec = _spec("healthy-pipeline-64", 64, seed=17, stages=4)
    return _single("healthy-pipeline-64", "4 pipeline stages of different speeds (peer groups)", spec,
                   [_stage_skew("healthy-pipeline-64", spec)])


@register
def healthy_4096() -> Scenario:
    return _single("healthy-4096", "4,096 ranks, short run", _spec("healthy-4096", 4096, steps=60, seed=18,
                                                                     checkpoint_every=0), tags=("large",))


# persistent stragglers: 5%, 10%, 30%, 2x at several sizes -----------------------------------------

_FACTORS = {"5pct": (1.05, "straggler-5%"), "10pct": (1.10, "straggler-10%"), "30pct": (1.30, "straggler-30%"),
            "2x": (2.0, "straggler-2x")}
_SIZES = ((8, 65), (32, 90), (64, 110), (256, 150), (512, 130))


def _persistent(key: str, ranks: int, onset: int, seed: int) -> Callable[[], Scenario]:
    factor, kind = _FACTORS[key]

    def build() -> Scenario:
        name = f"straggler-{key}-{ranks}"
        rank = (seed * 7919) % ranks
        end = onset + 120
        spec = _spec(name, ranks, steps=onset + 150, seed=seed,
                     stragglers=(StragglerFault(rank=rank, start_step=onset, factor=factor, end_step=end),))
        problem = Problem(type=kind, alert_type="straggler", job=name, ranks=(rank,), onset_step=onset,
                          end_step=end, detail={"factor": factor})
        return _single(name, f"rank {rank} of {ranks} computes {factor}x slower for 120 steps", spec, [problem])

    build.__name__ = f"straggler_{key}_{ranks}"
    return build


for _i, (_key, (_ranks, _onset)) in enumerate(itertools.product(_FACTORS, _SIZES)):
    register(_persistent(_key, _ranks, _onset, seed=100 + _i))


@register
def straggler_30pct_4096() -> Scenario:
    name = "straggler-30pct-4096"
    spec = _spec(name, 4096, steps=60, seed=200, checkpoint_every=0,
                 stragglers=(StragglerFault(rank=1234, start_step=25, factor=1.3),
                             StragglerFault(rank=3001, start_step=25, factor=2.0)))
    problems = [Problem(type="straggler-30%", alert_type="straggler", job=name, ranks=(1234,), onset_step=25,
                        detail={"factor": 1.3}),
                Problem(type="straggler-2x", alert_type="straggler", job=name, ranks=(3001,), onset_step=25,
                        detail={"factor": 2.0})]
    return _single(name, "4,096 ranks: one rank 1.3x and one 2x slower from step 25", spec, problems, tags=("large",))


@register
def straggler_30pct_pipeline_64() -> Scenario:
    name = "straggler-30pct-pipeline-64"
    spec = _spec(name, 64, seed=201, stages=4,
                 stragglers=(StragglerFault(rank=53, start_step=110, factor=1.3, end_step=220),))
    problem = Problem(type="straggler-30%", alert_type="straggler", job=name, ranks=(53,), onset_step=110,
                      end_step=220, detail={"factor": 1.3, "stage": 3})
    return _single(name, "4 pipeline stages; rank 53 (last, slowest stage) 1.3x slower than its stage", spec,
                   [problem, _stage_skew(name, spec)])


@register
def straggler_30pct_varlen_128() -> Scenario:
    name = "straggler-30pct-varlen-128"
    spec = _spec(name, 128, seed=202, jitter=0.10,
                 stragglers=(StragglerFault(rank=77, start_step=110, factor=1.3, end_step=220),))
    problem = Problem(type="straggler-30% in 10% noise", alert_type="straggler", job=name, ranks=(77,),
                      onset_step=110, end_step=220, detail={"factor": 1.3, "jitter": 0.10})
    return _single(name, "variable sequence lengths (CoV 10%) hide part of a 1.3x straggler", spec, [problem])


# intermittent, ramp, data-loader stall ---------------------------------------------------------------


def _intermittent(ranks: int, seed: int) -> Callable[[], Scenario]:
    def build() -> Scenario:
        name = f"intermittent-{ranks}"
        rank = (seed * 31) % ranks
        effect = IntermittentStraggler(rank=rank, start_step=80, factor=1.4, burst=10, period=50, end_step=260)
        spec = _spec(name, ranks, seed=seed, effects=(effect,))
        problem = Problem(type="intermittent", alert_type="straggler", job=name, ranks=(rank,), onset_step=80,
                          end_step=260, detail={"factor": 1.4, "burst_steps": 10, "period_steps": 50})
        return _single(name, f"rank {rank} 1.4x slower for 10 steps out of every 50", spec, [problem])

    build.__name__ = f"intermittent_{ranks}"
    return build


register(_intermittent(64, 301))
register(_intermittent(256, 302))


def _ramp(ranks: int, seed: int) -> Callable[[], Scenario]:
    def build() -> Scenario:
        name = f"thermal-ramp-{ranks}"
        rank = (seed * 17) % ranks
        effect = RampStraggler(rank=rank, start_step=80, factor=1.4, ramp_steps=150)
        spec = _spec(name, ranks, seed=seed, effects=(effect,))
        problem = Problem(type="thermal-ramp", alert_type="straggler", job=name, ranks=(rank,), onset_step=80,
                          deadline_s=150.0, detail={"factor": 1.4, "ramp_steps": 150,
                                                    "note": "onset = start of the ramp (1.0x); 1.1x is reached "
                                                            "after 37 steps"})
        return _single(name, f"rank {rank} slows gradually from 1.0x to 1.4x over 150 steps", spec, [problem])

    build.__name__ = f"thermal_ramp_{ranks}"
    return build


register(_ramp(64, 401))
register(_ramp(512, 402))


@register
def dataloader_stall_64() -> Scenario:
    name = "dataloader-stall-64"
    spec = _spec(name, 64, seed=501, effects=(DataStall(rank=9, start_step=110, seconds=0.4, end_step=170),))
    problem = Problem(type="dataloader-stall", alert_type="straggler", job=name, ranks=(9,), onset_step=110,
                      end_step=170, detail={"extra_data_seconds": 0.4})
    return _single(name, "rank 9's input pipeline waits 0.4 s more every step for 60 steps", spec, [problem])


# several problems, several jobs -------------------------------------------------------------------------


@register
def multi_problem_256() -> Scenario:
    name = "multi-problem-256"
    spec = _spec(name, 256, seed=601, stages=2,
                 stragglers=(StragglerFault(rank=10, start_step=90, factor=1.3, end_step=200),
                             StragglerFault(rank=200, start_step=150, factor=2.0)),
                 slowdowns=(JobSlowdown(start_step=120, factor=1.25, end_step=160),),
                 effects=(RampStraggler(rank=131, start_step=60, factor=1.35, ramp_steps=100),
                          IntermittentStraggler(rank=66, start_step=104, factor=1.5, burst=6, period=40,
                                                end_step=260)))
    problems = [
        Problem(type="straggler-30%", alert_type="straggler", job=name, ranks=(10,), onset_step=90, end_step=200,
                detail={"factor": 1.3}),
        Problem(type="job-slowdown", alert_type="throughput_drop", job=name, ranks=(), onset_step=120, end_step=160,
                detail={"factor": 1.25, "layer": "compute"}, deadline_s=120.0),
        Problem(type="straggler-2x", alert_type="straggler", job=name, ranks=(200,), onset_step=150,
                detail={"factor": 2.0}),
        Problem(type="thermal-ramp", alert_type="straggler", job=name, ranks=(131,), onset_step=60,
                deadline_s=150.0, detail={"factor": 1.35, "ramp_steps": 100}),
        Problem(type="intermittent", alert_type="straggler", job=name, ranks=(66,), onset_step=104, end_step=260,
                detail={"factor": 1.5, "burst_steps": 6, "period_steps": 40}),
    ]
    return _single(name, "2 stages, 4 overlapping problems and a whole-job slowdown", spec, problems,
                   extra_noise=("whole-job slowdown 1.25x",))


@register
def multi_job_3() -> Scenario:
    a = _spec("mj-healthy-64", 64, seed=701)
    b = _spec("mj-straggler-128", 128, seed=702,
              stragglers=(StragglerFault(rank=100, start_step=120, factor=1.3, end_step=240),))
    c = _spec("mj-varlen-64", 64, seed=703, jitter=0.10, stages=2,
              stragglers=(StragglerFault(rank=5, start_step=150, factor=2.0),))
    problems = (Problem(type="straggler-30%", alert_type="straggler", job=b.job, ranks=(100,), onset_step=120,
                        end_step=240, detail={"factor": 1.3}),
                Problem(type="straggler-2x", alert_type="straggler", job=c.job, ranks=(5,), onset_step=150,
                        detail={"factor": 2.0, "jitter": 0.10}))
    return Scenario(name="multi-job-3", description="3 jobs on shared nodes and one worker: healthy, 1.3x straggler, "
                                                    "2x straggler in a noisy 2-stage job",
                    specs=(a, b, c), problems=problems, tags=("problem", "multi-job"),
                    noise=_noise(a, "second job with CoV 10% and 2 stages"))


# job health: whole-job slowdowns by cause, communication, checkpoints (issue 9) ---------------------------
#
# A throughput_drop problem carries the layer a correct alert names in ``detail["layer"]`` (the
# throughput rule's names: "communication", "compute", "input pipeline"); bench/quality.py scores it.

_COLLECTIVES = "collective events (2 all-reduce buckets of 25 MiB per step per rank)"


def _comm_slowdown(ranks: int, factor: float, seed: int) -> Callable[[], Scenario]:
    def build() -> Scenario:
        name = f"comm-slowdown-{factor:g}x-{ranks}"
        spec = _spec(name, ranks, seed=seed, collective_events=True,
                     effects=(CommSlowdown(start_step=110, factor=factor, end_step=200),))
        # ~0.15 s of the ~0.97 s step is transfer: 2.5x costs ~19% throughput, 1.4x only ~6% (below 10%).
        problems = [Problem(type=f"comm-slowdown-{factor:g}x", alert_type="comm_slowdown", job=name, ranks=(),
                            onset_step=110, end_step=200, detail={"transfer_factor": factor})]
        if (factor - 1) * spec.comm_time / (spec.compute_time + spec.comm_time) >= 0.15:
            problems.append(Problem(type="job-slowdown (network)", alert_type="throughput_drop", job=name,
                                    ranks=(), onset_step=110, end_step=200,
                                    detail={"transfer_factor": factor, "layer": "communication"}))
        return _single(name, f"the network slows every collective's transfer {factor:g}x for 90 steps (all ranks)",
                       spec, problems, extra_noise=(_COLLECTIVES,))

    build.__name__ = f"comm_slowdown_{ranks}"
    return build


register(_comm_slowdown(64, 2.5, 901))
register(_comm_slowdown(128, 1.4, 902))


def _input_stall(ranks: int, seconds: float, seed: int) -> Callable[[], Scenario]:
    def build() -> Scenario:
        name = f"input-stall-{ranks}"
        spec = _spec(name, ranks, seed=seed, effects=(InputStall(start_step=110, seconds=seconds, end_step=200,
                                                                 seed=seed),))
        problem = Problem(type="job-slowdown (input pipeline)", alert_type="throughput_drop", job=name, ranks=(),
                          onset_step=110, end_step=200,
                          detail={"extra_data_seconds": seconds, "layer": "input pipeline"})
        return _single(name, f"every rank's input pipeline waits {seconds:g} s (+-20%) more per step for 90 steps",
                       spec, [problem])

    build.__name__ = f"input_stall_{ranks}"
    return build


register(_input_stall(64, 0.3, 903))
register(_input_stall(256, 0.15, 904))


@register
def noisy_neighbour_64() -> Scenario:
    name = "noisy-neighbour-64"
    effect = NoisyNeighbour(nodes=(0, 1, 2, 3, 4, 5), start_step=110, factor=1.3, end_step=200)
    spec = _spec(name, 64, seed=905, effects=(effect,))
    # Most nodes are slow: the peer median moves with them, so no rank stands out (no straggler);
    # the job as a whole is ~25% slower, in its compute.
    problem = Problem(type="job-slowdown (noisy neighbour, 6 of 8 nodes)", alert_type="throughput_drop", job=name,
                      ranks=(), onset_step=110, end_step=200,
                      detail={"factor": 1.3, "nodes": list(effect.nodes), "layer": "compute"})
    return _single(name, "a co-tenant on 6 of 8 nodes makes their ranks compute 1.3x slower for 90 steps", spec,
                   [problem])


@register
def noisy_neighbour_node_64() -> Scenario:
    name = "noisy-neighbour-node-64"
    effect = NoisyNeighbour(nodes=(3,), start_step=110, factor=1.3, end_step=200)
    spec = _spec(name, 64, seed=906, effects=(effect,))
    # One node of eight: its 8 ranks are a set of stragglers (one straggler alert per rank); the
    # typical rank is not slower, so the throughput rule stays quiet (an alert would be accepted).
    problem = Problem(type="noisy neighbour (1 node)", alert_type="straggler", job=name, ranks=effect.ranks(spec),
                      onset_step=110, end_step=200, detail={"factor": 1.3, "nodes": [3]})
    return _single(name, "a co-tenant on node 3 makes its 8 ranks compute 1.3x slower for 90 steps", spec, [problem])


#: Long steps (10 s) so that the default staleness (1 h) is reached in a short recording.
_LONG = dict(compute_time=10.0, checkpoint_every=100, checkpoint_seconds=60.0)


@register
def checkpoint_stops_16() -> Scenario:
    name = "checkpoint-stops-16"
    spec = _spec(name, 16, steps=600, seed=907, checkpoint_until=201, **_LONG)
    # Checkpoints at steps 100 and 200 (~17 min apart), then none. The last one ends with step 200;
    # 3,600 s (the default max age) later the job is in step 548: the onset (that step's start is
    # before the threshold, its end after it).
    problem = Problem(type="checkpoint-stopped", alert_type="checkpoint_stale", job=name, ranks=(),
                      onset_step=548, deadline_s=60.0,
                      detail={"last_checkpoint_step": 200, "checkpoint_every": 100, "max_age_seconds": 3600,
                              "note": "onset = the step in which the last checkpoint turns 1 h old "
                                      "(STEPWATCH_JOB_HEALTH_CHECKPOINT_MAX_AGE_SECONDS default)"})
    return _single(name, "10 s steps; checkpoints every 100 steps until step 200, then never again", spec,
                   [problem], extra_noise=("10 s steps",))


@register
def healthy_long_steps_16() -> Scenario:
    return _single("healthy-long-steps-16", "10 s steps and a 60 s checkpoint every 100 steps for 100 min",
                   _spec("healthy-long-steps-16", 16, steps=600, seed=908, **_LONG), extra_noise=("10 s steps",))


@register
def healthy_comm_64() -> Scenario:
    name = "healthy-comm-64"
    spec = _spec(name, 64, seed=909, collective_events=True,
                 effects=(CommSlowdown(start_step=150, factor=1.1),))
    return _single(name, "collective events; transfer time 10% up from step 150 (below the 30% threshold)", spec,
                   extra_noise=(_COLLECTIVES, "collective transfer time +10% from step 150"))


@register
def straggler_2x_comm_64() -> Scenario:
    # Everyone waits in the collectives for rank 45: durations balloon, the transfer time does not.
    name = "straggler-2x-comm-64"
    spec = _spec(name, 64, seed=910, collective_events=True,
                 stragglers=(StragglerFault(rank=45, start_step=110, factor=2.0, end_step=230),))
    problem = Problem(type="straggler-2x", alert_type="straggler", job=name, ranks=(45,), onset_step=110,
                      end_step=230, detail={"factor": 2.0})
    return _single(name, "rank 45 2x slower for 120 steps, with collective events (no comm_slowdown expected)",
                   spec, [problem], extra_noise=(_COLLECTIVES,))


# the network layer (models/telemetry/fabric.py): a fault behind one node slows every rank's collectives ---------------

_TELEMETRY = "node telemetry every second (GPUs, 2 IB ports and 4 NVLinks per GPU per node)"
_SKEW = (("node-001", 4.0), ("node-003", -2.5), ("node-005", 5.0), ("node-006", -5.0))


def _network(kind: str, rank: int, seed: int, factor: float = 1.5) -> Callable[[], Scenario]:
    from .telemetry_sim import TelemetryFault, TelemetrySpec

    def build() -> Scenario:
        name = f"net-{kind.replace('_', '-')}-64"
        spec = _spec(name, 64, seed=seed, collective_events=True)
        node = spec.node_of(rank)
        fault = TelemetryFault(kind=kind, rank=rank, start_step=110, end_step=200, factor=1.0, comm_factor=factor)
        what = {"ib_errors": "an IB port logs symbol errors and transmit waits",
                "rate_down": "an IB port trains down to 200 of 400 Gb/s (no errors)",
                "nvlink_errors": "an NVLink logs CRC and replay errors"}[kind]
        problem = Problem(type=f"network ({kind})", alert_type="comm_slowdown", job=name, ranks=(),
                          onset_step=110, end_step=200, nodes=(node,),
                          accepts=("throughput_drop", "link_errors", "gpu_fault"),
                          detail={"fault": kind, "transfer_factor": factor, "node": node})
        return replace(_single(name, f"{what} on {node}; every all-reduce {factor:g}x slower for 90 steps", spec,
                               [problem], tags=("network",), extra_noise=(_COLLECTIVES, _TELEMETRY)),
                       telemetry=(TelemetrySpec(faults=(fault,), seed=seed),))

    build.__name__ = f"network_{kind}_64"
    return build


register(_network("ib_errors", 26, 921))
register(_network("rate_down", 50, 922))
register(_network("nvlink_errors", 13, 923))


@register
def net_fabric_congestion_64() -> Scenario:
    from .telemetry_sim import TelemetryFault, TelemetrySpec

    name = "net-fabric-congestion-64"
    spec = _spec(name, 64, seed=924, collective_events=True,
                 effects=(CommSlowdown(start_step=110, factor=1.5, end_step=200),))
    faults = tuple(TelemetryFault(kind="congestion", rank=r, start_step=110, end_step=200, factor=1.0)
                   for r in range(0, 64, 8))  # every node's port: the fabric, nobody's node
    problem = Problem(type="network (fabric-wide congestion)", alert_type="comm_slowdown", job=name, ranks=(),
                      onset_step=110, end_step=200, nodes=(), detail={"transfer_factor": 1.5})
    return replace(_single(name, "fabric-wide congestion: every node's transmit wait up, every all-reduce 1.5x "
                                 "slower for 90 steps (no node to blame)", spec, [problem], tags=("network",),
                           extra_noise=(_COLLECTIVES, _TELEMETRY)),
                   telemetry=(TelemetrySpec(faults=faults, seed=924),))


@register
def healthy_skew_64() -> Scenario:
    from .telemetry_sim import TelemetrySpec

    name = "healthy-skew-64"
    spec = _spec(name, 64, seed=925, collective_events=True)
    return replace(_single(name, "healthy; 4 nodes' clocks off by +4, -2.5, +5 and -5 s", spec, tags=("network",),
                           extra_noise=(_COLLECTIVES, _TELEMETRY, "node clocks +-5 s off")),
                   telemetry=(TelemetrySpec(seed=925),), clock_skew=_SKEW)


@register
def straggler_skew_64() -> Scenario:
    name = "straggler-skew-64"
    spec = _spec(name, 64, seed=926, collective_events=True,
                 stragglers=(StragglerFault(rank=45, start_step=110, factor=1.3, end_step=230),))
    problem = Problem(type="straggler-30% (clocks skewed)", alert_type="straggler", job=name, ranks=(45,),
                      onset_step=110, end_step=230, detail={"factor": 1.3})
    return replace(_single(name, "rank 45 (on node-005, clock +5 s) 1.3x slower; 4 nodes' clocks +-5 s off", spec,
                           [problem], tags=("network",), extra_noise=(_COLLECTIVES, "node clocks +-5 s off")),
                   clock_skew=_SKEW)


# hangs (when the simulator has them) ---------------------------------------------------------------------

if hasattr(sim, "HangFault"):
    from .simulator import HangFault

    def _hang(kind: str, seed: int) -> Callable[[], Scenario]:
        def build() -> Scenario:
            name = f"hang-{kind}-64"
            fault = HangFault(rank=21, step=120, kind=kind, duration=660.0, recover=kind != "dead")
            spec = _spec(name, 64, steps=200, seed=seed, heartbeat_interval=5.0, hangs=(fault,))
            end = 121 if fault.resumes else None
            what = {"hang": "stops before a collective (heartbeats go on)", "frozen": "freezes (no heartbeats)",
                    "dead": "dies; the job is killed 660 s later"}[kind]
            problem = Problem(type=f"hang ({kind})", alert_type="hang", job=name, ranks=(21,), onset_step=120,
                              end_step=end, detail={"kind": kind, "duration_s": 660.0})
            return _single(name, f"rank 21 {what} at step 120", spec, [problem], tags=("hang",),
                           extra_noise=("heartbeats every 5 s",))

        build.__name__ = f"hang_{kind}_64"
        return build

    for _j, _kind in enumerate(("hang", "frozen", "dead")):
        register(_hang(_kind, 800 + _j))


# small and steady (issue 19): few-percent stragglers, stage imbalance, rank classes --------------------

#: Step time of ``_spec`` jobs (compute 0.8 + data 0.02 + comm 0.15 s): deadlines in steps become seconds.
_STEP_S = 0.97


def _steady(pct: int, noise: int, ranks: int, seed: int) -> Callable[[], Scenario]:
    def build() -> Scenario:
        name = f"steady-{pct}pct-noise{noise}-{ranks}"
        rank = (seed * 7919) % ranks
        factor = 1 + pct / 100
        spec = _spec(name, ranks, steps=450, seed=seed, jitter=noise / 100,
                     stragglers=(StragglerFault(rank=rank, start_step=100, factor=factor),))
        problem = Problem(type=f"steady-{pct}%", alert_type="straggler", job=name, ranks=(rank,), onset_step=100,
                          deadline_s=300 * _STEP_S, detail={"factor": factor, "jitter": noise / 100,
                                                            "deadline_steps": 300})
        return _single(name, f"rank {rank} of {ranks} computes {factor}x slower from step 100 to the end "
                             f"({noise}% jitter)", spec, [problem], tags=("steady",))

    build.__name__ = f"steady_{pct}pct_noise{noise}_{ranks}"
    return build


for _k, (_pct, _jit, _n) in enumerate([(5, 1, 64), (5, 1, 128), (5, 1, 256), (5, 4, 64), (5, 4, 128), (5, 4, 256),
                                       (3, 1, 128), (3, 4, 128)]):
    register(_steady(_pct, _jit, _n, seed=950 + _k))


@register
def healthy_heavy_tail_128() -> Scenario:
    name = "healthy-heavy-tail-128"
    spec = _spec(name, 128, steps=1500, seed=960, gc_probability=0.01, gc_seconds=0.8)
    return _single(name, "128 ranks, 1% of rank-steps 2x slower at random (GC, page faults, ECC retries)",
                   spec, tags=("steady",), extra_noise=("heavy tail: 1% of rank-steps +0.8 s (2x compute)",))


@register
def pipeline_slow_stage_32() -> Scenario:
    name = "pipeline-slow-stage-32"
    last = tuple(range(24, 32))
    spec = _spec(name, 32, steps=300, seed=961, stages=4, stage_skew=0.0,
                 stragglers=tuple(StragglerFault(rank=r, start_step=0, factor=1.6) for r in last))
    problem = Problem(type="stage-imbalance (stage 3 at 1.6x)", alert_type="imbalance", job=name, ranks=last,
                      onset_step=0, detail={"stage": 3, "factor": 1.6}, accepts=("throughput_drop",))
    return _single(name, "4 balanced pipeline stages of 8 ranks, but stage 3 computes 1.6x slower", spec,
                   [problem], tags=("steady",))


@register
def rank_classes_16() -> Scenario:
    name = "rank-classes-16"
    slow = tuple(range(1, 16, 2))
    spec = _spec(name, 16, steps=600, seed=962,
                 stragglers=tuple(StragglerFault(rank=r, start_step=0, factor=3.0) for r in slow))
    problem = Problem(type="rank-classes (half the ranks 3x)", alert_type="imbalance", job=name, ranks=slow,
                      onset_step=0, detail={"factor": 3.0}, accepts=("throughput_drop",))
    return _single(name, "16 ranks, every other one 3x slower for the whole job (shared GPUs)", spec, [problem],
                   tags=("steady",))


# host signals (stepwatch/sim/host_sim.py) --------------------------------------------------------------------


def _host(kind: str, seed: int) -> Callable[[], Scenario]:
    from .host_sim import HostFault

    what = {"io": ("IO pressure and a slow nvme0n1 under node-002's data loaders", "straggler",
                   ("io_pressure", "nvme0n1")),
            "cpu": ("node-002's CPUs saturated, its data-loader workers starved", "straggler", ("cpu",)),
            "memory": ("memory pressure on node-002 (2% available, swapping) slows its data loaders", "straggler",
                       ("memory",)),
            "oom": ("the OOM killer ends rank 16 on node-002; the others wait in the collective", "hang",
                    ("oom_kill",))}
    description, alert_type, components = what[kind]

    def build() -> Scenario:
        name = f"host-{kind}-64"
        end = None if kind == "oom" else 210
        fault = HostFault(kind=kind, node=2, start_step=130, end_step=end)  # clear of the checkpoint at step 100
        spec = _spec(name, 64, steps=260, seed=seed, heartbeat_interval=5.0 if kind == "oom" else 0.0)
        ranks = (16,) if kind == "oom" else fault.ranks(spec)
        problem = Problem(type=f"host-{kind}", alert_type=alert_type, job=name, ranks=ranks, onset_step=130,
                          end_step=end, detail={"cause": {"category": "host", "node": "node-002",
                                                          "components": list(components)}})
        return replace(_single(name, description + " from step 130", spec, [problem], tags=("host",),
                               extra_noise=("host events of every node every second (PSI, CPU, memory, nvme0n1, "
                                            "a read-time counter wrapping at 2**32)",)),
                       host_faults=(fault,), host=True)

    build.__name__ = f"host_{kind}_64"
    return build


for _j, _kind in enumerate(("io", "cpu", "memory", "oom")):
    register(_host(_kind, 900 + _j))


@register
def host_healthy_64() -> Scenario:
    spec = _spec("host-healthy-64", 64, steps=300, seed=910)
    return replace(_single("host-healthy-64", "healthy job with host events of every node (normal host noise)", spec,
                           tags=("host", "healthy"), extra_noise=("host events of every node every second",)),
                   host=True)


# one root cause, one incident (issue 26): teardown, restart onto a spare, a switch under several jobs, pipeline
# waits. Labelled with the root cause a correct diagnosis names (``Problem.root_cause``, bench/quality.py).


@register
def hang_teardown_64() -> Scenario:
    name = "hang-teardown-64"
    fault = sim.HangFault(rank=21, step=120, kind="hang", duration=120.0, recover=False, teardown_grace=30.0)
    spec = _spec(name, 64, steps=200, seed=805, heartbeat_interval=5.0, hangs=(fault,))
    problem = Problem(type="hang, then watchdog teardown", alert_type="hang", job=name, ranks=(21,), onset_step=120,
                      detail={"kind": "hang", "watchdog_s": 120.0, "teardown_grace_s": 30.0},
                      root_cause={"id": "rank-21", "kind": "hang_culprit", "ranks": [21], "alert_ids": 1})
    return _single(name, "rank 21 stops before a collective at step 120; 120 s later the NCCL watchdog kills the 63 "
                         "waiting ranks, rank 21 (stuck, its SIGTERM handler never runs) heartbeats 30 s longer",
                   spec, [problem], tags=("hang", "root-cause"), extra_noise=("heartbeats every 5 s",))


@register
def restart_spare_64() -> Scenario:
    from .scenario_recordings import Restart, restart_onto_spare

    r = Restart(seed=3)
    spec = _spec(r.job, r.ranks, steps=r.steps, seed=r.seed, checkpoint_every=r.checkpoint_every,
                 heartbeat_interval=2.0)  # describes the job; the events are the generator's
    lost = tuple(k for k in range(r.ranks) if k // r.per_node == r.dead_node)
    dead = r.node(lost[0])
    # onset: the last step completed before the death (the step it dies in also runs after the restart)
    problem = Problem(type="lost node, restart onto a spare", alert_type="hang", job=r.job, ranks=lost,
                      onset_step=r.die_at - 1, nodes=(dead,), accepts=("throughput_drop", "job_restart"),
                      detail={"node": dead, "spare": r.spare, "checkpoint_step": r.checkpoint},
                      root_cause={"id": dead, "kind": "lost_node", "node": dead, "spare": r.spare, "alert_ids": 1})
    return Scenario(name="restart-spare-64",
                    description=f"{dead} dies at step {r.die_at}; {r.lost_after:.0f} s later the job restarts from "
                                f"the checkpoint of step {r.checkpoint}, {dead}'s ranks on {r.spare}",
                    specs=(spec,), problems=(problem,), tags=("problem", "hang", "root-cause"),
                    noise=("1% of events lost", "30% of batches shuffled", "a late heartbeat of an old process",
                           "heartbeats every 2 steps"),
                    source=lambda: restart_onto_spare(r))


def _pipeline_p2p(slow: bool) -> Callable[[], Scenario]:
    from .scenario_recordings import Pipeline, pipeline_p2p

    def build() -> Scenario:
        p = Pipeline(job="pipeline-p2p-slow-stage-32" if slow else "healthy-pipeline-p2p-32",
                     slow_rank=11 if slow else None, seed=7 if slow else 8)
        spec = _spec(p.job, p.stages * p.dp, steps=p.steps, seed=p.seed, stages=p.stages, node_prefix="pp-node-",
                     checkpoint_every=0)
        problems = ()
        if slow:
            problems = (Problem(type="pipeline rank 30% slow (p2p waits downstream)", alert_type="straggler",
                                job=p.job, ranks=(11,), onset_step=p.onset, accepts=("throughput_drop", "imbalance"),
                                detail={"factor": p.slow_factor, "stage": 1},
                                root_cause={"id": "rank-11", "kind": "stage_compute", "ranks": [11], "alert_ids": 2}),)
        what = (f"rank 11 (stage 1 of replica 3) computes {p.slow_factor}x slower from step {p.onset}: the stages "
                "after it wait longer in their p2p receives, the transfers do not slow") if slow else "healthy"
        return Scenario(name=p.job, description=f"GPipe, 4 stages x 8 replicas, send/recv and all-reduce events; {what}",
                        specs=(spec,), problems=problems,
                        tags=("problem" if slow else "healthy", "root-cause", "pipeline"),
                        noise=("compute jitter 2% per micro-batch", "p2p transfer jitter 5%", "warm-up (5 steps)"),
                        source=lambda: pipeline_p2p(p))

    build.__name__ = "pipeline_p2p_slow_stage_32" if slow else "healthy_pipeline_p2p_32"
    return build


register(_pipeline_p2p(True))
register(_pipeline_p2p(False))


@register
def fabric_switch_4jobs() -> Scenario:
    from .telemetry_sim import TelemetryFault, TelemetrySpec

    name = "fabric-switch-4jobs"
    specs, telemetry, faulty = [], [], []
    for j in range(4):
        spec = _spec(f"{name}-j{j}", 64, steps=220, seed=930 + j, collective_events=True, node_prefix="fab-node-",
                     first_node=8 * j)
        faults = ()
        if j < 2:  # under leaf-01: every port of every node errs; the collectives of the job run 1.8x slower
            faults = tuple(TelemetryFault(kind="ib_errors", rank=r, start_step=110, end_step=200, factor=1.0,
                                          comm_factor=1.8 if r == 0 else 1.0) for r in range(0, 64, 4))
            faulty += [spec.node_of(r) for r in range(0, 64, 8)]
        specs.append(spec)
        telemetry.append(TelemetrySpec(faults=faults, seed=930 + j, switch="leaf-01" if j < 2 else "leaf-02"))
    cause = {"id": "leaf-01", "kind": "fabric", "switch": "leaf-01", "alert_ids": 5}
    # the fabric alert is about no job: labelled with the first job under the switch (whose steps time it),
    # scored by its nodes
    problems = [Problem(type="fabric: a leaf switch under 16 nodes of 2 of 4 jobs", alert_type="fabric",
                        job=specs[0].job, ranks=(), onset_step=110, end_step=200, nodes=tuple(faulty),
                        accepts=("link_errors",), root_cause=cause,
                        detail={"switch": "leaf-01", "jobs": [x.job for x in specs[:2]]})]
    problems += [Problem(type="fabric: a job under the switch slows (cites the incident)", alert_type="comm_slowdown",
                         job=spec.job, ranks=(), onset_step=110, end_step=200, nodes=(), root_cause=cause,
                         accepts=("throughput_drop",), detail={"transfer_factor": 1.8}) for spec in specs[:2]]
    return Scenario(name=name, description="4 jobs of 64 ranks on 32 nodes; leaf-01 under jobs 0 and 1 degrades for "
                                           "90 steps: every port of its 16 nodes logs symbol errors and transmit "
                                           "waits, the 2 jobs' all-reduces run 1.8x slower; jobs 2 and 3 (leaf-02) "
                                           "are unaffected",
                    specs=tuple(specs), problems=tuple(problems), tags=("problem", "network", "multi-job", "root-cause"),
                    noise=_noise(specs[0], _COLLECTIVES, _TELEMETRY, "topology names each node's leaf switch"),
                    telemetry=tuple(telemetry))


def describe() -> list[dict[str, Any]]:
    """One row per registered scenario (for ``stepwatch scenarios``)."""
    out = []
    for s in suite():
        out.append({"name": s.name, "tags": list(s.tags), "jobs": len(s.specs),
                    "ranks": sum(x.ranks for x in s.specs), "step_events": s.events,
                    "problems": [p.type for p in s.problems], "description": s.description})
    return out


__all__ = ["Problem", "Scenario", "register", "names", "get", "suite", "batches", "labels", "write", "describe",
           "replace"]
