"""The scenarios: jobs, what they do wrong, and what stepwatch must (and must not) say about them.

Labels come from the domain and the user-facing docs (README "How straggler detection works",
docs/hang.md, docs/job-health.md, docs/network.md), not from the detector's code. Each label:

  expect: alerts that must fire: type, job, and where given ranks (exactly these), nodes (the
          first listed must be among the alert's), evidence values, the onset (true time) and
          the longest acceptable delay of the first firing, and how many incidents (ids) at most;
  allow:  alerts that may fire without being wrong (documented behaviour the scenario cannot
          exclude, e.g. the info long-horizon rule on a rank 3% slower every step);
  everything else that fires is a false alarm.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from .job import Hang, JobSpec, LinkFault, NodeLoss, Pause, Slow

T0 = 1_798_000_000.0


def nodes(k: int, prefix: str = "n") -> list[str]:
    return [f"{prefix}{i:02d}" for i in range(k)]


@dataclass
class Scenario:
    name: str
    jobs: list[JobSpec]
    # label builders get the simulated marks of each job: {job name: marks}
    expect: list = field(default_factory=list)
    allow: list = field(default_factory=list)
    order: str = "arrival"         # line order: "arrival" (delivery) or "ts" (sorted by event time, no _arrival)
    envelopes: bool = False        # each rank's events of one flush in one batch envelope
    arrival: bool = True           # lines carry the broker's "_arrival" (stepwatch record); else in arrival order
    note: str = ""


def E(type_, job, onset=None, delay=None, **kw):
    d = {"type": type_, "job": job}
    if onset is not None:
        d["onset"] = onset
    if delay is not None:
        d["max_delay"] = delay
    d.update(kw)
    return d


def scenarios() -> list[Scenario]:
    out = []
    # 1. FSDP-like job, 4 GPUs per node, sequence-length buckets (+-20 % per step job-wide),
    #    4 micro-batches per step; rank 9 computes 30 % slower from step 80.
    out.append(Scenario(
        "varlen_accum_straggler",
        [JobSpec("varlen", nodes(4), 4, 180, compute=0.06, transfer=0.05, start=T0, seed=11,
                 micro=4, variable=0.2, slow=[Slow(1.3, 80, rank=9)], lost=0.03)],
        expect=[lambda m: E("straggler", "varlen", m["varlen"]["step"][80], 15 * 0.35 + 10,
                            ranks=[9], nodes=["n02"], evidence={"signal": "compute_time"})],
        note="a 30% straggler under job-wide +-20% step variation and gradient accumulation"))
    # 2. rank 0 does the logging: 3 % slower every step, from the start. Not a page.
    out.append(Scenario(
        "rank0_logging_role",
        [JobSpec("logrole", nodes(2), 4, 260, compute=0.2, transfer=0.04, start=T0, seed=12,
                 role={0: 1.03})],
        allow=[{"type": "straggler", "job": "logrole", "severity": "info", "ranks": [0]}],
        note="a persistent +3% role is steady waste (info at most), never a warning"))
    # 3. a straggler that appears, recovers and reappears within 25 steps: one incident
    out.append(Scenario(
        "straggler_recurs",
        [JobSpec("recur", nodes(2), 4, 170, compute=0.3, transfer=0.05, start=T0, seed=13,
                 slow=[Slow(1.4, 40, 70, rank=5), Slow(1.4, 85, 115, rank=5)])],
        expect=[lambda m: E("straggler", "recur", m["recur"]["step"][40], 10 * 0.4 + 10, ranks=[5],
                            nodes=["n01"], incidents=1)],
        note="two episodes 15 steps apart are one incident (README: within 25 steps)"))
    # 4. two stragglers on different nodes at once
    out.append(Scenario(
        "two_stragglers",
        [JobSpec("two", nodes(4), 4, 150, compute=0.25, transfer=0.05, start=T0, seed=14,
                 slow=[Slow(1.35, 60, rank=2), Slow(1.5, 60, rank=13)], lost=0.01)],
        expect=[lambda m: E("straggler", "two", m["two"]["step"][60], 12, ranks=[2], nodes=["n00"]),
                lambda m: E("straggler", "two", m["two"]["step"][60], 12, ranks=[13], nodes=["n03"])]))
    # 5. a slow node: all four of its ranks 40 % slower: one node incident
    out.append(Scenario(
        "slow_node",
        [JobSpec("slownode", nodes(4), 4, 150, compute=0.25, transfer=0.05, start=T0, seed=15,
                 slow=[Slow(1.4, 60, node="n01")])],
        expect=[lambda m: E("straggler", "slownode", m["slownode"]["step"][60], 12, ranks=[4, 5, 6, 7],
                            nodes=["n01"], incidents=1, evidence={"incident_scope": "node"})]))
    # 6. a hang: rank 3 stuck in its data loader, never issues the all-reduce the others wait in
    out.append(Scenario(
        "hang_culprit",
        [JobSpec("hang1", nodes(4), 2, 80, compute=0.8, transfer=0.1, start=T0, seed=16,
                 hang=Hang(70, 3), lost=0.02)],
        expect=[lambda m: E("hang", "hang1", m["hang1"]["stall"], 90, ranks=[3],
                            evidence={"case": "culprit_before_collective"})]))
    # 7. the same, torn down by NCCL's watchdog after 600 s; the stuck rank dies 30 s later
    out.append(Scenario(
        "hang_teardown",
        [JobSpec("hang2", nodes(2), 4, 60, compute=0.5, transfer=0.08, start=T0, seed=17,
                 hang=Hang(50, 6, teardown=600.0), lost=0.01)],
        expect=[lambda m: E("hang", "hang2", m["hang2"]["stall"], 90, ranks=[6],
                            evidence={"case": "culprit_before_collective"}, evidence_has=["torn_down"])]))
    # 8. node n02 dies at step 80; torn down after 120 s; back 180 s later on spare n09 from
    #    the checkpoint at step 60
    out.append(Scenario(
        "restart_spare",
        [JobSpec("spare", nodes(4), 2, 150, compute=0.6, transfer=0.1, start=T0, seed=18,
                 loss=NodeLoss(80, "n02", "n09", 60), pauses=[Pause("checkpoint", 30, 20.0)])],
        expect=[lambda m: E("hang", "spare", m["spare"]["stall"], 90, nodes=["n02"], ranks=[4, 5],
                            evidence={"case": "silent_ranks"}),
                lambda m: E("job_restart", "spare")],
        note="the hang names the dead node's ranks, resolves when the job restarts; the spare is never blamed"))
    # 9. an LLM job of 40 s steps (+-20 %), 90 s marked checkpoints: no hang, nothing
    out.append(Scenario(
        "llm_40s_steps",
        [JobSpec("llm", nodes(4), 4, 45, compute=9.0, transfer=3.0, start=T0, seed=19, micro=4,
                 variable=0.2, pauses=[Pause("checkpoint", 15, 90.0)], lost=0.02)]))
    # 10. 15 ms steps, 1,500 of them; rank 6 30 % slower from step 900
    out.append(Scenario(
        "fast_15ms",
        [JobSpec("fast", nodes(2), 4, 1500, compute=0.011, transfer=0.003, start=T0, seed=20,
                 noise=0.04, slow=[Slow(1.3, 900, rank=6)], data=0.0005, latency=0.1)],
        expect=[lambda m: E("straggler", "fast", m["fast"]["step"][900], 5, ranks=[6], nodes=["n01"])]))
    # 11. checkpoints without phase markers (25 s, below the 30 s hang warning floor) and
    #     marked evals of 60 s
    out.append(Scenario(
        "pauses_marked_unmarked",
        [JobSpec("pauses", nodes(2), 4, 200, compute=1.6, transfer=0.3, start=T0, seed=21,
                 pauses=[Pause("checkpoint", 50, 25.0, marked=False), Pause("eval", 40, 60.0)])]))
    # 12. every rank 30 % slower from step 100: a throughput drop, not a straggler
    out.append(Scenario(
        "jobwide_slowdown",
        [JobSpec("slowjob", nodes(4), 4, 250, compute=0.3, transfer=0.05, start=T0, seed=22,
                 jobwide=Slow(1.3, 100))],
        expect=[lambda m: E("throughput_drop", "slowjob", m["slowjob"]["step"][100], 40,
                            evidence={"layer": "compute"})]))
    # 13. a producer sending only the required fields (no node, no compute/comm), no heartbeats
    out.append(Scenario(
        "required_fields_only",
        [JobSpec("bare", nodes(2), 2, 150, compute=0.4, transfer=0.05, start=T0, seed=23,
                 fields="required", heartbeats=False)]))
    # 14. step_time + comm_time only (arrival signal); rank 3 40 % slower from step 50
    out.append(Scenario(
        "arrival_only_straggler",
        [JobSpec("arrival", nodes(2), 4, 130, compute=0.4, transfer=0.05, start=T0, seed=24,
                 fields="comm", slow=[Slow(1.4, 50, rank=3)])],
        expect=[lambda m: E("straggler", "arrival", m["arrival"]["step"][50], 10, ranks=[3],
                            evidence={"signal": "arrival"})]))
    # 15. two ranks on one node (fine-tuning); rank 1 50 % slower from step 60
    out.append(Scenario(
        "tiny_two_ranks",
        [JobSpec("tiny", nodes(1), 2, 150, compute=0.3, transfer=0.02, start=T0, seed=25,
                 slow=[Slow(1.5, 60, rank=1)])],
        # With two ranks the slow one paces the job and the median of two moves with it: that compute-layer
        # throughput drop is the straggler's own cost, no alert of its own (models/oncall/citations.py).
        expect=[lambda m: E("straggler", "tiny", m["tiny"]["step"][60], 20 * 0.35, ranks=[1])]))
    # 16. four ranks on two nodes of 2 GPUs; rank 2 40 % slower from step 50
    out.append(Scenario(
        "small_2x2",
        [JobSpec("small", nodes(2), 2, 140, compute=0.3, transfer=0.03, start=T0, seed=26,
                 slow=[Slow(1.4, 50, rank=2)])],
        expect=[lambda m: E("straggler", "small", m["small"]["step"][50], 10, ranks=[2], nodes=["n01"])]))
    # 17. a fleet: job A runs and ends with the end marker; job B starts mid-recording and just
    #     stops (processes exit, no end marker): B may look hung (docs/hang.md), A must not
    out.append(Scenario(
        "start_and_end",
        [JobSpec("jobA", nodes(2, "a"), 4, 200, compute=0.5, transfer=0.05, start=T0, seed=27),
         JobSpec("jobB", nodes(2, "b"), 2, 120, compute=0.5, transfer=0.05, start=T0 + 60, seed=28,
                 first_step=5200, end_marker=False)],
        allow=[{"type": "hang", "job": "jobB"}]))
    # 18. one bad link behind node n02: every collective 1.8x longer, the port's error counters rise
    out.append(Scenario(
        "link_fault",
        [JobSpec("linkjob", nodes(4), 2, 260, compute=0.5, transfer=0.25, start=T0, seed=29,
                 buckets=1, collective_events=True, link=LinkFault("n02", 120.0), telemetry=True)],
        expect=[lambda m: E("link_errors", "", T0 + 120.0, 30, nodes=["n02"]),
                lambda m: E("comm_slowdown", "linkjob", T0 + 120.0, 60, nodes=["n02"])],
        allow=[{"type": "throughput_drop", "job": "linkjob"}]))
    # 19. written without broker times, in arrival order, hosts up to 6 s apart; rank 10 straggles
    out.append(Scenario(
        "no_arrival_skew",
        [JobSpec("skew", nodes(4), 4, 150, compute=0.35, transfer=0.05, start=T0, seed=30,
                 clock_spread=6.0, slow=[Slow(1.35, 60, rank=10)])],
        expect=[lambda m: E("straggler", "skew", m["skew"]["step"][60], 12, ranks=[10], nodes=["n02"])],
        arrival=False))
    # 20. a thermally throttled GPU: rank 6's GPU runs hot at 60 % clock from step 50 (gpu samples
    #     every second): the straggler names it as the cause
    out.append(Scenario(
        "throttled_gpu",
        [JobSpec("thermal", nodes(2), 4, 120, compute=0.5, transfer=0.05, start=T0, seed=31,
                 slow=[Slow(1.45, 50, rank=6)], gpu_telemetry=True)],
        expect=[lambda m: E("straggler", "thermal", m["thermal"]["step"][50], 12, ranks=[6], nodes=["n01"],
                            cause_component="gpu2"),
                lambda m: E("gpu_fault", "", m["thermal"]["step"][50], 15, nodes=["n01"],
                            evidence={"gpu": 2, "fault": "throttle"})],
        allow=[{"type": "gpu_hot", "job": "", "nodes": ["n01"]}]))
    # 21. rank 5's input pipeline stalls (data_time) from step 50; its compute is normal
    out.append(Scenario(
        "input_stall",
        [JobSpec("loader", nodes(2), 4, 130, compute=0.4, transfer=0.05, start=T0, seed=32,
                 slow=[Slow(1.5, 50, rank=5, kind="data")])],
        expect=[lambda m: E("straggler", "loader", m["loader"]["step"][50], 15, ranks=[5],
                            evidence={"signal": "data_time"})]))
    # 22. a hang of an LLM job of 40 s steps: warned once no step came for 10x its p99 step time
    out.append(Scenario(
        "llm_40s_hang",
        [JobSpec("llmhang", nodes(2), 4, 30, compute=9.5, transfer=2.0, start=T0, seed=33, micro=4,
                 variable=0.2, hang=Hang(25, 2))],
        expect=[lambda m: E("hang", "llmhang", m["llmhang"]["stall"], 660, ranks=[2],
                            evidence={"case": "culprit_before_collective"})]))
    # 23. the recording starts mid-job (step 41000, no warm-up) and rank 1 is slow from its first step
    out.append(Scenario(
        "slow_from_first_seen_step",
        [JobSpec("midjob", nodes(2), 4, 120, compute=0.3, transfer=0.05, start=T0, seed=34,
                 first_step=41000, slow=[Slow(1.4, 0, rank=1)], lost=0.05, duplicated=0.03)],
        expect=[lambda m: E("straggler", "midjob", m["midjob"]["step"][0], 40, ranks=[1], nodes=["n00"])]))
    # 24. the link behind n01 goes down: every rank waits in the same all-reduce (no culprit by
    #     sequence numbers); the hang names the node whose port is down
    out.append(Scenario(
        "link_down_hang",
        [JobSpec("netdown", nodes(4), 2, 80, compute=0.6, transfer=0.1, start=T0, seed=35,
                 hang=Hang(60, None), telemetry=True, link_down_at_hang=True)],
        expect=[lambda m: E("hang", "netdown", m["netdown"]["stall"], 90, nodes=["n01"],
                            evidence={"case": "undetermined"})],
        allow=[{"type": "link_errors", "job": "", "nodes": ["n01"]}]))
    # 25. a rank 12 % slower (just above the 1.10 threshold) among 16 with +-20 % batch variation
    out.append(Scenario(
        "mild_straggler_varlen",
        [JobSpec("mild", nodes(4), 4, 200, compute=0.25, transfer=0.04, start=T0, seed=36,
                 variable=0.2, slow=[Slow(1.15, 60, rank=11)])],
        expect=[lambda m: E("straggler", "mild", m["mild"]["step"][60], 15, ranks=[11], nodes=["n02"])]))
    # 26. a straggler that recovers at step 100 in a job that runs on to step 260: resolved, recovered
    out.append(Scenario(
        "straggler_recovers",
        [JobSpec("recover", nodes(2), 4, 260, compute=0.3, transfer=0.05, start=T0, seed=37,
                 slow=[Slow(1.4, 50, 100, rank=2)])],
        expect=[lambda m: E("straggler", "recover", m["recover"]["step"][50], 12, ranks=[2],
                            resolved={"resolution": "recovered", "by": m["recover"]["step"][125]})]))
    # 27. node n02 dies, the job comes back on spare n09 (its clock 5 s off), and rank 4, now on n09,
    #     is 40 % slow from the 40th step after the restart: the straggler is on n09, not n02
    out.append(Scenario(
        "spare_straggles",
        [JobSpec("spare2", nodes(4), 2, 200, compute=0.5, transfer=0.08, start=T0, seed=38, clock_spread=5.0,
                 loss=NodeLoss(60, "n02", "n09", 50), slow=[Slow(1.4, 100, rank=4)])],
        expect=[lambda m: E("hang", "spare2", m["spare2"]["stall"], 90, ranks=[4, 5], nodes=["n02"]),
                lambda m: E("job_restart", "spare2"),
                lambda m: E("straggler", "spare2", m["spare2"]["step"][100], 12, ranks=[4], nodes=["n09"])]))
    # 28. rank 7 stuck, NCCL's watchdog tears the job down after 300 s, the launcher restarts it on the
    #     same nodes from step 40: the hang resolves (job restarted), a job_restart, then healthy steps
    out.append(Scenario(
        "hang_teardown_restart",
        [JobSpec("tdr", nodes(2), 4, 120, compute=0.4, transfer=0.06, start=T0, seed=39,
                 hang=Hang(55, 7, teardown=300.0, restart_resume=40))],
        expect=[lambda m: E("hang", "tdr", m["tdr"]["stall"], 90, ranks=[7],
                            evidence={"case": "culprit_before_collective"},
                            resolved={"resolution": "job_restarted"}),
                lambda m: E("job_restart", "tdr")]))
    # 29. a 2-stage pipeline over 4 nodes of 4 GPUs, stage 1 1.25x slower by design; rank 13
    #     (stage 1) 40 % slower from step 70: a straggler within its stage; the stage imbalance may
    #     be reported (info)
    out.append(Scenario(
        "pipeline_stage_straggler",
        [JobSpec("pipe", nodes(4), 4, 160, compute=0.3, transfer=0.05, start=T0, seed=40, stages=2,
                 stage_factor={1: 1.25}, slow=[Slow(1.4, 70, rank=13)])],
        expect=[lambda m: E("straggler", "pipe", m["pipe"]["step"][70], 12, ranks=[13], nodes=["n03"])],
        allow=[{"type": "imbalance", "job": "pipe", "severity": "info"}]))
    # 30. a slow node of 2 GPUs (both its ranks 35 % slower) among 4 nodes: one node incident
    out.append(Scenario(
        "slow_node_2gpu",
        [JobSpec("slownode2", nodes(4), 2, 150, compute=0.3, transfer=0.05, start=T0, seed=41,
                 slow=[Slow(1.35, 60, node="n03")])],
        expect=[lambda m: E("straggler", "slownode2", m["slownode2"]["step"][60], 12, ranks=[6, 7],
                            nodes=["n03"], incidents=1, evidence={"incident_scope": "node"})]))
    # 31. only rank 0 writes the checkpoint (30 s, no phase marker, outside its step timer) every 60
    #     steps; the others run into the next all-reduce and wait for it there: nobody is a straggler
    out.append(Scenario(
        "rank0_saves_alone",
        [JobSpec("save0", nodes(2), 4, 200, compute=0.5, transfer=0.05, start=T0, seed=42,
                 pauses=[Pause("checkpoint", 60, 30.0, marked=False, rank0_only=True)])],
        allow=[{"type": "hang", "job": "save0", "severity": "warning"}],
        note="30 s without a step in a job of 0.55 s steps may warn as a hang (documented floor)"))
    # 32. 15 ms steps whose ranks' producers flush once a second: a rank's events arrive in bursts
    #     up to ~65 steps after its peers'; rank 3 30 % slower from step 1000
    out.append(Scenario(
        "fast_flush_bursts",
        [JobSpec("burst", nodes(2), 4, 1800, compute=0.012, transfer=0.003, start=T0, seed=43,
                 noise=0.04, data=0.0005, flush=1.0, slow=[Slow(1.3, 1000, rank=3)])],
        expect=[lambda m: E("straggler", "burst", m["burst"]["step"][1000], 6, ranks=[3], nodes=["n00"])]))
    # 33. TP groups of 4 (one per node) and DP groups across nodes, heartbeats with `pgs`: rank 5 never
    #     issues its TP all-reduce; its TP peers wait in it, every other rank in the DP all-reduce
    out.append(Scenario(
        "tp_dp_hang",
        [JobSpec("tpdp", nodes(3), 4, 70, compute=0.7, transfer=0.1, start=T0, seed=44, pgs=True,
                 hang=Hang(60, 5))],
        expect=[lambda m: E("hang", "tpdp", m["tpdp"]["stall"], 90, ranks=[5],
                            evidence={"case": "culprit_before_collective", "process_group": "pg2",
                                      "process_group_desc": "tp"})]))
    # 34. node n01 dies; the job is relaunched on spare n07 from the step it stopped at (checkpointed
    #     every step: the counter does not go back): the hang resolves, the spare is never blamed
    out.append(Scenario(
        "restart_same_step",
        [JobSpec("samestep", nodes(3), 4, 150, compute=0.5, transfer=0.08, start=T0, seed=45,
                 loss=NodeLoss(90, "n01", "n07", 90, detect=60.0, downtime=120.0))],
        expect=[lambda m: E("hang", "samestep", m["samestep"]["stall"], 90, ranks=[4, 5, 6, 7], nodes=["n01"])],
        allow=[{"type": "job_restart", "job": "samestep"}]))
    # 35. hosts' clocks up to 40 s apart (NTP broken on some nodes) with broker times; rank 3 stuck
    out.append(Scenario(
        "hang_clocks_40s",
        [JobSpec("clk40", nodes(4), 2, 80, compute=0.8, transfer=0.1, start=T0, seed=46, clock_spread=40.0,
                 hang=Hang(70, 3))],
        expect=[lambda m: E("hang", "clk40", m["clk40"]["stall"], 90, ranks=[3],
                            evidence={"case": "culprit_before_collective"})]))
    # 36. two GPU generations: nodes n02, n03 60 % slower from the start (by design, not a fault): one
    #     rank-classes imbalance (info), no straggler
    out.append(Scenario(
        "mixed_gpu_classes",
        [JobSpec("mixed", nodes(4), 4, 200, compute=0.3, transfer=0.05, start=T0, seed=47,
                 slow=[Slow(1.6, 0, node="n02"), Slow(1.6, 0, node="n03")])],
        expect=[lambda m: E("imbalance", "mixed", evidence={"kind": "classes"})]))
    # 37. producers that batch (flush every 0.2 s, batch envelopes), send rank and step as floats (3.0)
    #     and extra fields (lr, grad_norm, loss); rank 12 30 % slower from step 80
    out.append(Scenario(
        "envelopes_loose_types",
        [JobSpec("env", nodes(4), 4, 160, compute=0.25, transfer=0.04, start=T0, seed=48, flush=0.2,
                 loose_types=True, slow=[Slow(1.3, 80, rank=12)])],
        expect=[lambda m: E("straggler", "env", m["env"]["step"][80], 10, ranks=[12], nodes=["n03"])],
        envelopes=True))
    # 38. 64 ranks, noisy (5 % per rank-step, 1 % of rank-steps 1.5-2.5x, +-20 % batches): nothing
    out.append(Scenario(
        "noisy_healthy_64",
        [JobSpec("noisy", nodes(16), 4, 260, compute=0.2, transfer=0.04, start=T0, seed=49, noise=0.05,
                 spike_rate=0.01, variable=0.2, lost=0.02)]))
    # 39. only rank 0 reports (world_size 16 in its events): nothing to compare, nothing to say
    out.append(Scenario(
        "only_rank0_reports",
        [JobSpec("solo", nodes(4), 4, 200, compute=0.3, transfer=0.05, start=T0, seed=50, only_rank0=True)]))
    # 40. node n01's clock is stepped 45 s ahead by NTP at 100 s; rank 13 (n03) 35 % slower from step 150
    out.append(Scenario(
        "clock_step_45s",
        [JobSpec("clkstep", nodes(4), 4, 260, compute=0.4, transfer=0.05, start=T0, seed=51,
                 clock_jump=("n01", 100.0, 45.0), slow=[Slow(1.35, 150, rank=13)])],
        expect=[lambda m: E("straggler", "clkstep", m["clkstep"]["step"][150], 12, ranks=[13], nodes=["n03"])]))
    # 41. a flaky GPU: rank 9 2.5x slow on a random 15 % of its steps from step 40: one intermittent
    #     incident
    out.append(Scenario(
        "flaky_gpu",
        [JobSpec("flaky", nodes(4), 4, 260, compute=0.25, transfer=0.04, start=T0, seed=52,
                 slow=[Slow(2.5, 40, rank=9, kind="flaky", p=0.15)])],
        expect=[lambda m: E("straggler", "flaky", m["flaky"]["step"][40], 80, ranks=[9], nodes=["n02"],
                            incidents=1)]))
    # 42. a 2-stage pipeline whose stage 1 is 1.3x slower by design and nothing else: one stage
    #     imbalance (info), no straggler
    out.append(Scenario(
        "stage_imbalance_only",
        [JobSpec("stages", nodes(4), 4, 220, compute=0.3, transfer=0.05, start=T0, seed=53, stages=2,
                 stage_factor={1: 1.3})],
        expect=[lambda m: E("imbalance", "stages", evidence={"kind": "stage"})]))
    # 43. rank 6 slowing down gradually (a failing fan): 1.0x at step 40 to 1.4x at step 140, then
    #     staying: found once it passes the threshold (1.1x at step ~65), one incident
    out.append(Scenario(
        "gradual_slowdown",
        [JobSpec("ramp", nodes(2), 4, 240, compute=0.3, transfer=0.05, start=T0, seed=54,
                 slow=[Slow(1.4, 40, rank=6, kind="ramp", ramp=100)])],
        expect=[lambda m: E("straggler", "ramp", m["ramp"]["step"][65], 40, ranks=[6], nodes=["n01"],
                            incidents=1)]))
    # 44. a 35 % straggler through a marked 60 s checkpoint and a marked eval: one incident throughout
    out.append(Scenario(
        "straggler_through_pauses",
        [JobSpec("thru", nodes(2), 4, 220, compute=0.4, transfer=0.05, start=T0, seed=55,
                 slow=[Slow(1.35, 50, rank=4)],
                 pauses=[Pause("checkpoint", 100, 60.0), Pause("eval", 150, 40.0)])],
        expect=[lambda m: E("straggler", "thru", m["thru"]["step"][50], 10, ranks=[4], nodes=["n01"],
                            incidents=1)]))
    # 45. a hang written as a trace sorted by event time (no broker times), hosts up to 8 s apart
    out.append(Scenario(
        "hang_sorted_skewed",
        [JobSpec("hangsort", nodes(4), 2, 80, compute=0.8, transfer=0.1, start=T0, seed=56, clock_spread=8.0,
                 hang=Hang(70, 6))],
        expect=[lambda m: E("hang", "hangsort", m["hangsort"]["stall"], 90, ranks=[6],
                            evidence={"case": "culprit_before_collective"})],
        arrival=False, order="ts"))
    # 46. the node loss and restart on a spare, sorted by event time, hosts up to 6 s apart
    out.append(Scenario(
        "restart_spare_sorted",
        [JobSpec("sparesort", nodes(4), 2, 150, compute=0.6, transfer=0.1, start=T0, seed=57, clock_spread=6.0,
                 loss=NodeLoss(80, "n02", "n09", 60))],
        expect=[lambda m: E("hang", "sparesort", m["sparesort"]["stall"], 90, ranks=[4, 5], nodes=["n02"]),
                lambda m: E("job_restart", "sparesort")],
        arrival=False, order="ts"))
    # 47. a hang of a job that sends no heartbeats: no culprit can be named, but it is hung
    out.append(Scenario(
        "hang_no_heartbeats",
        [JobSpec("nohb", nodes(2), 4, 80, compute=0.5, transfer=0.05, start=T0, seed=58, heartbeats=False,
                 hang=Hang(70, 2))],
        expect=[lambda m: E("hang", "nohb", m["nohb"]["stall"], 90, evidence={"case": "undetermined"})]))
    # 48. three ranks on three nodes (one GPU each); rank 0 40 % slower from step 60
    out.append(Scenario(
        "three_ranks",
        [JobSpec("three", nodes(3), 1, 150, compute=0.3, transfer=0.03, start=T0, seed=59,
                 slow=[Slow(1.4, 60, rank=0)])],
        expect=[lambda m: E("straggler", "three", m["three"]["step"][60], 15 * 0.45, ranks=[0], nodes=["n00"])]))
    # 49. 40 s steps, rank 10 30 % slower from step 30 of 55
    out.append(Scenario(
        "llm_40s_straggler",
        [JobSpec("llmslow", nodes(4), 4, 55, compute=9.0, transfer=3.0, start=T0, seed=60, micro=4,
                 variable=0.2, slow=[Slow(1.3, 30, rank=10)])],
        expect=[lambda m: E("straggler", "llmslow", m["llmslow"]["step"][30], 5 * 52, ranks=[10], nodes=["n02"])]))
    # 50. the kernel's OOM killer kills rank 5 (host samples: memory nearly gone, oom_kills +1): the others
    #     wait in the all-reduce; the hang names rank 5 silent, with the OOM kill as its first cause
    out.append(Scenario(
        "oom_killed_rank",
        [JobSpec("oom", nodes(2), 4, 80, compute=0.6, transfer=0.08, start=T0, seed=61,
                 hang=Hang(70, 5, dies="oom"))],
        expect=[lambda m: E("hang", "oom", m["oom"]["stall"], 90, ranks=[5], nodes=["n01"],
                            evidence={"case": "silent_ranks"}, cause_component="oom_kill")]))
    # 51. rank 2's GPU falls off the bus (Xid 79) and its process dies: a gpu_fault on n00 and a hang
    #     naming rank 2 silent
    out.append(Scenario(
        "xid79_dead_rank",
        [JobSpec("xid", nodes(2), 4, 80, compute=0.6, transfer=0.08, start=T0, seed=62,
                 hang=Hang(70, 2, dies="xid79"))],
        expect=[lambda m: E("hang", "xid", m["xid"]["stall"], 90, ranks=[2], nodes=["n00"],
                            evidence={"case": "silent_ranks"}),
                lambda m: E("gpu_fault", "", m["xid"]["stall"], 10, nodes=["n00"],
                            evidence={"gpu": 2, "fault": "xid"}),
                # a non-recoverable fault makes the node suspect (docs/runbooks/node_suspect.md)
                lambda m: E("node_suspect", "", nodes=["n00"])]))
    # 52. rank 0 alone writes a 5-minute checkpoint to slow storage every 80 steps, marking its own phase
    #     (a rank `phase` event, its heartbeats say checkpoint); the others wait in the all-reduce: the
    #     checkpoint timeout applies (docs/hang.md), no hang, no straggler
    out.append(Scenario(
        "rank0_long_save_marked",
        [JobSpec("save5", nodes(2), 4, 200, compute=0.5, transfer=0.05, start=T0, seed=63,
                 pauses=[Pause("checkpoint", 80, 300.0, marked=True, rank0_only=True)])]))
    # 53. a fleet over time: job A (a straggler on n01) ends; job B then runs on the same nodes and also
    #     has a straggler on n01: two jobs' incidents on one node make it suspect (node_suspect)
    out.append(Scenario(
        "node_suspect_two_jobs",
        [JobSpec("jobA2", nodes(3), 4, 140, compute=0.3, transfer=0.05, start=T0, seed=64,
                 slow=[Slow(1.4, 50, rank=5)]),
         JobSpec("jobB2", nodes(3), 4, 140, compute=0.3, transfer=0.05, start=T0 + 200, seed=65,
                 slow=[Slow(1.4, 50, rank=6)])],
        # No node telemetry here: job events implicate n01 but never condemn it alone (issue 44: only a node's own
        # agent speaks for it), so no node_suspect; with n01's agent reporting it is one
        # (tests/models/oncall/test_only_agents_speak_for_nodes.py).
        expect=[lambda m: E("straggler", "jobA2", m["jobA2"]["step"][50], 10, ranks=[5], nodes=["n01"]),
                lambda m: E("straggler", "jobB2", m["jobB2"]["step"][50], 10, ranks=[6], nodes=["n01"])]))
    # 54. a marked 40 s checkpoint at step 60 whose closing `train` marker is lost (the producer's queue
    #     was full), then rank 3 35 % slower from step 90: the steps after the pause are training
    out.append(Scenario(
        "lost_train_marker",
        [JobSpec("lostmark", nodes(2), 4, 200, compute=0.4, transfer=0.05, start=T0, seed=66,
                 pauses=[Pause("checkpoint", 60, 40.0, lose_end_marker_at=60)], slow=[Slow(1.35, 90, rank=3)])],
        expect=[lambda m: E("straggler", "lostmark", m["lostmark"]["step"][90], 12, ranks=[3], nodes=["n00"])]))
    return out
