"""The named cases and what stepwatch should say about each (issues 23 and 26: the messy cases).

Quiet cases raise only the alert types listed in their ``Expect.allowed``: those true of the whole job
(a ``throughput_drop`` when the whole job slowed, a ``job_restart`` after a restart), which name no rank;
no straggler, hang, imbalance or node_suspect. Alerting cases must name the right rank and its node
(``rank`` None: some ranks of that node), and nobody else.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

import orjson

from . import pipeline, sync, transport
from . import telemetry as telemetry_gen
from .plan import Marking, Noise, Pause, Plan, Restart, Slow, Stuck
from .transport import Transport
from .wire import Sent


class Verdict(Enum):
    QUIET = "quiet"
    STRAGGLER = "straggler"
    HANG = "hang"


@dataclass(frozen=True)
class Expect:
    verdict: Verdict
    rank: int | None = None
    node: str | None = None
    #: Alert types that may fire besides the expected one (true of the whole job, naming no rank).
    allowed: frozenset[str] = frozenset()
    #: The suspected cause the alert must put first: (category, component), from node telemetry.
    cause: tuple[str, str] | None = None
    #: At most this many alert ids of the expected type (one root cause, one incident).
    max_incidents: int | None = None
    #: The first alert within this many steps of the onset (issue 23: 10); None: not checked.
    within_steps: int | None = 10


@dataclass(frozen=True)
class Scenario:
    name: str
    plan: Plan
    expect: Expect
    transport: Transport = Transport()
    arrival: bool = True  # False: the recording is sorted by event time, without ``_arrival``
    #: Findings: check (a test of tests/scenarios/test_gen2_replay.py: "alerts", "refire") -> what stepwatch does
    #: today instead, and where the cause seems to be. The test is xfail(strict=True) with it as the reason.
    findings: dict[str, str] = field(default_factory=dict)

    #: Node telemetry of the job's hosts as well (gen2/telemetry.py), with this GPU throttling if given.
    telemetry: bool = False
    throttle: telemetry_gen.Throttle | None = None
    link_fault: telemetry_gen.LinkFault | None = None
    #: The switch every port of the job's nodes is cabled to and its first port, in the nodes' topology events
    #: (None: none sent).
    switch: tuple[str, int] | None = None
    #: (step, settings): the job's runtime settings change after that step (``stepwatch config set``).
    settings: tuple[int, dict] | None = None

    def sent(self) -> list[Sent]:
        job = (pipeline.play if self.plan.stages > 1 else sync.play)(self.plan)
        if not self.telemetry:
            return job
        nodes = telemetry_gen.play(self.plan, job, throttle=self.throttle, link_fault=self.link_fault,
                                   switch=self.switch)
        return sorted(job + nodes, key=lambda s: s.at)

    def timed_lines(self) -> list[tuple[float, bytes]]:
        """The recording, each line with the time that orders it (gen2/transport.py); with ``settings``, a
        config line as ``stepwatch record`` captures a ``stepwatch config set`` (stepwatch/recording.py)."""
        sent = self.sent()
        lines = transport.timed_lines(sent, self.transport, arrival=self.arrival)
        if self.settings is not None:
            step, change = self.settings
            at = next(s.at for s in sent if s.event["kind"] == "step" and s.event["step"] == step) + 0.01
            record = {"v": 1, "kind": "config", **change, "_key": self.plan.job}
            if self.arrival:
                record["_arrival"] = round(at, 6)
            lines = sorted([*lines, (at, orjson.dumps(record))], key=lambda line: line[0])
        return lines


QUIET = Expect(Verdict.QUIET)
#: A rank monitor flushing every second (``RankMonitor(flush_interval=1.0)``; the default is 0.1 s).
SLOW_FLUSH = Transport(flush=1.0, seed=3)
MESSY = Transport(loss=0.03, reorder=0.04, seed=7)
SKEW = ((1, 4.0), (2, -2.5))  # node 1's clock 4 s ahead, node 2's 2.5 s behind
SMALL = {"ranks": 16, "per_node": 4, "steps": 150}  # 4 nodes: enough for the clock-offset estimate


def _plan(job: str, **fields) -> Plan:
    return Plan(job=job, **{**SMALL, **fields})


def _quiet(name: str, allowed: frozenset[str] = frozenset(), transport: Transport = Transport(),
           findings: dict[str, str] | None = None, **fields) -> Scenario:
    return Scenario(name, _plan(name, **fields), Expect(Verdict.QUIET, allowed=allowed), transport=transport,
                    findings=findings or {})


JOB_WIDE = frozenset({"throughput_drop"})  # true of a slower job; it names no rank
RESTART = frozenset({"job_restart"})


def catalog() -> list[Scenario]:
    noisy = Noise(gc_rate=0.004, loader_rate=0.003)
    ckpt_marked = (Pause(60, 25.0, "checkpoint", Marking.MARKED), Pause(110, 40.0, "checkpoint", Marking.MARKED))
    return [
        _quiet("healthy"),
        _quiet("warmup", warmup=6),
        _quiet("checkpoint-marked", pauses=ckpt_marked),
        _quiet("checkpoint-marked-slow-flush", pauses=ckpt_marked, transport=SLOW_FLUSH),
        _quiet("checkpoint-unmarked", pauses=(Pause(60, 12.0, "checkpoint", Marking.UNMARKED),
                                              Pause(110, 12.0, "checkpoint", Marking.UNMARKED))),
        _quiet("eval-marked", pauses=(Pause(80, 20.0, "eval", Marking.MARKED),)),
        _quiet("eval-unmarked", pauses=(Pause(80, 8.0, "eval", Marking.UNMARKED),)),
        _quiet("gc-spikes", noise=Noise(gc_rate=0.006, gc_seconds=0.3), seed=3),
        _quiet("loader-hiccups", noise=Noise(loader_rate=0.006, loader_seconds=0.5), seed=4),
        _quiet("moe-rotating", moe_skew=0.3),
        _quiet("drift", allowed=JOB_WIDE, drift=0.002),
        _quiet("job-slowdown", allowed=JOB_WIDE, slowdown=(80, 1.6)),
        _quiet("lost-reordered", warmup=4, noise=noisy, seed=5, transport=Transport(loss=0.05, reorder=0.05, seed=11)),
        _quiet("restart-clean", allowed=RESTART, warmup=4, restart=Restart(at=100, resume=80, downtime=20.0)),
        _quiet("restart-spare", allowed=RESTART, warmup=4,
               restart=Restart(at=100, resume=80, downtime=20.0, moved=("restart-spare-n02", "spare-1"))),
        _quiet("clock-skew", clock_offsets=SKEW),
        Scenario("clock-skew-ts-order", _plan("clock-skew-ts-order", clock_offsets=SKEW), QUIET, arrival=False),
        Scenario("straggler-64", Plan(job="straggler-64", ranks=64, per_node=8, steps=150,
                                      slow=(Slow(37, 60, 1.4),), noise=noisy),
                 Expect(Verdict.STRAGGLER, 37, "straggler-64-n04", JOB_WIDE), transport=MESSY),
        Scenario("straggler-2-ranks", Plan(job="straggler-2-ranks", ranks=2, per_node=1, steps=120,
                                           slow=(Slow(1, 30, 1.4),)),
                 Expect(Verdict.STRAGGLER, 1, "straggler-2-ranks-n01", JOB_WIDE)),
        Scenario("hang-before-collective", _plan("hang-before-collective", stuck=Stuck(11, 80, tail=90.0)),
                 Expect(Verdict.HANG, 11, "hang-before-collective-n02")),
        Scenario("hang-skew-lossy", _plan("hang-skew-lossy", clock_offsets=SKEW, noise=noisy, stuck=Stuck(5, 90)),
                 Expect(Verdict.HANG, 5, "hang-skew-lossy-n01"), transport=MESSY),
        Scenario("hang-teardown", _plan("hang-teardown", stuck=Stuck(11, 80, tail=150.0, teardown=45.0, grace=30.0)),
                 Expect(Verdict.HANG, 11, "hang-teardown-n02")),
        Scenario("flaky-gpu", _plan("flaky-gpu", steps=200, slow=(Slow(6, 40, 3.0, every=7),)),
                 Expect(Verdict.STRAGGLER, 6, "flaky-gpu-n01", JOB_WIDE, max_incidents=2, within_steps=None)),
        Scenario("slow-host", _plan("slow-host", slow=tuple(Slow(r, 50, 1.15) for r in range(8, 12))),
                 Expect(Verdict.STRAGGLER, None, "slow-host-n02", JOB_WIDE, max_incidents=1)),
        Scenario("threshold-raised", _plan("threshold-raised", slow=(Slow(5, 40, 1.3),)),
                 Expect(Verdict.STRAGGLER, 5, "threshold-raised-n01", JOB_WIDE),
                 settings=(80, {"straggler": {"ratio_threshold": 1.5, "long_min_effect": 0.0}})),
        Scenario("comm-threshold-raised", _plan("comm-threshold-raised", steps=200, network=(50, 1.8)),
                 Expect(Verdict.QUIET, allowed=frozenset({"comm_slowdown", "throughput_drop"})), transport=MESSY,
                 settings=(120, {"job_health": {"comm_threshold": 2.0}})),
        Scenario("straggler-skew", _plan("straggler-skew", clock_offsets=SKEW, slow=(Slow(13, 50, 1.2),)),
                 Expect(Verdict.STRAGGLER, 13, "straggler-skew-n03", JOB_WIDE)),
        Scenario("straggler-skew-ts-order", _plan("straggler-skew-ts-order", clock_offsets=SKEW,
                                                  slow=(Slow(13, 50, 1.2),)),
                 Expect(Verdict.STRAGGLER, 13, "straggler-skew-ts-order-n03", JOB_WIDE), arrival=False),
        Scenario("pipeline-slow-stage", _plan("pipeline-slow-stage", stages=4, slow=(Slow(6, 40, 1.3),)),
                 Expect(Verdict.STRAGGLER, 6, "pipeline-slow-stage-n01", JOB_WIDE)),
        _quiet("pipeline-healthy", stages=4, noise=noisy),
        Scenario("healthy-telemetry", _plan("healthy-telemetry", noise=noisy), QUIET, telemetry=True, transport=MESSY),
        Scenario("straggler-gpu-throttled", _plan("straggler-gpu-throttled", slow=(Slow(9, 50, 1.3),)),
                 Expect(Verdict.STRAGGLER, 9, "straggler-gpu-throttled-n02", JOB_WIDE | {"gpu_fault", "gpu_hot"},
                        cause=("compute", "gpu1")),
                 telemetry=True, throttle=telemetry_gen.Throttle(9, 50)),
        *fabric_fleet(),
    ]


#: Jobs on 16 nodes, under one leaf switch for the first two (issue 26: one fabric incident, no drain).
FABRIC_JOBS = ("fabric-a", "fabric-b", "fabric-c", "fabric-d")
FABRIC_ALLOWED = frozenset({"comm_slowdown", "link_errors", "throughput_drop", "fabric"})
#: The leaf switch of jobs a and b (the one that degrades), and of jobs c and d.
FABRIC_SWITCHES = ("rack7-leaf-ab", "rack7-leaf-cd")


def fabric_fleet() -> list[Scenario]:
    """A leaf switch degrades under the 8 nodes of jobs a and b from their step 60: every port there shows symbol
    errors and 2.4x transmit wait, their all-reduce transfers take 2x; jobs c and d (8 other nodes) are fine.
    Each job alone may see its collectives slow down (no rank to blame); the fleet test counts incidents. The
    nodes' topology events name their switch (``FABRIC_SWITCHES``)."""
    out = []
    for i, job in enumerate(FABRIC_JOBS):
        hit = i < 2
        plan = _plan(job, node_prefix=f"rack7-{job[-1]}", seed=20 + i, network=(60, 2.0) if hit else None)
        out.append(Scenario(job, plan, Expect(Verdict.QUIET, allowed=FABRIC_ALLOWED if hit else frozenset()),
                            telemetry=True, link_fault=telemetry_gen.LinkFault(60) if hit else None,
                            switch=(FABRIC_SWITCHES[i // 2], 1 + 32 * (i % 2))))
    return out
