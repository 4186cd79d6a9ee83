"""Messy cases composed: several of the brief's kinds of noise and faults in one job, built from the third
generator's parts (tests/gen3: written from the user-facing docs alone) and judged by its judge, replayed
in process on `stepwatch replay`'s road: the expected alerts fire (right type, ranks, nodes, within the
delay, one incident) and nothing else fires.

They failed before the fixes they came with: every rank slow on a fifth of its steps (a rotating MoE hot
expert) paged 13 times (models/steps/straggler.py ``_background_now``); a hang after four 45 s unmarked
checkpoints warned after 207 s, the checkpoints having grown the step-time p99 (models/hang/progress.py
``step_time_stats``); a recording sorted by host time with one node's clock 10 s ahead raised a partial hang
naming that node's ranks at the start, their loading time counted as time behind (``partial_stuck``), and
closed every 0.3 s step with one node's ranks only (models/steps/assembly.py ``max_pending_seconds``: 30 s);
a straggler in the first of two pipeline stages, whose steps then closed a few steps after the second's, gave
a communication throughput drop, the second stage's wait judged alone (models/jobhealth/throughput.py: a step
without one of its stages is incomplete).
"""
from __future__ import annotations

import pytest

from gen3.job import Hang, JobSpec, LinkFault, NodeLoss, Pause, Slow
from gen3.judge import judge, replay
from gen3.scenarios import E, Scenario, nodes
from gen3.write import build

T0 = 1_760_000_000.0


def scenarios() -> list[Scenario]:
    out = [Scenario(
        "straggler_in_everything", [JobSpec(
            "ks1", nodes(4), 4, 260, compute=0.3, transfer=0.06, start=T0, seed=101, micro=4, variable=0.2,
            lost=0.05, duplicated=0.02, clock_spread=8.0, drift_ppm=200, clock_jump=("n02", 200.0, 30.0),
            spike_rate=0.01, pauses=[Pause("checkpoint", 50, 20.0), Pause("eval", 80, 15.0, marked=False)],
            loose_types=True, slow=[Slow(1.3, 150, rank=9)])], envelopes=True,
        expect=[lambda m: E("straggler", "ks1", m["ks1"]["step"][150], 20, ranks=[9], nodes=["n02"])],
        note="grad accumulation, +-20% steps, 5% loss, duplicates, clocks 8 s apart and one jumping 30 s, GC "
             "spikes, marked checkpoints and unmarked evals, loose types, envelopes; then a 30% straggler")]
    out.append(Scenario(
        "spare_then_straggler", [JobSpec(
            "ks2", nodes(4), 2, 220, compute=0.5, transfer=0.1, start=T0, seed=102,
            loss=NodeLoss(80, "n02", "n09", 60), slow=[Slow(1.4, 150, rank=3)], lost=0.03,
            pauses=[Pause("checkpoint", 30, 20.0)])],
        expect=[lambda m: E("hang", "ks2", m["ks2"]["stall"], 90, nodes=["n02"], ranks=[4, 5]),
                lambda m: E("job_restart", "ks2"),
                lambda m: E("straggler", "ks2", None, None, ranks=[3], nodes=["n01"])],
        note="a node dies, the job restarts on a spare from a checkpoint; later a straggler elsewhere: the "
             "spare is never blamed, the straggler is"))
    out.append(Scenario(
        "pipeline_sorted_skewed", [JobSpec(
            "ks3", nodes(4), 4, 200, compute=0.25, transfer=0.05, start=T0, seed=103, stages=4,
            stage_factor={3: 1.3}, slow=[Slow(1.4, 90, rank=6)], clock_spread=10.0, lost=0.04)], order="ts",
        expect=[lambda m: E("straggler", "ks3", m["ks3"]["step"][90], 15, ranks=[6], nodes=["n01"])],
        allow=[{"type": "imbalance", "job": "ks3", "severity": "info"}],
        note="4 pipeline stages, the last slower by design, a straggler in stage 1, host clocks 10 s apart, "
             "the recording sorted by host time"))
    out.append(Scenario(
        "sorted_skewed_start", [JobSpec(
            "ks3b", nodes(4), 4, 200, compute=0.25, transfer=0.05, start=T0, seed=103,
            slow=[Slow(1.4, 90, rank=6)], clock_spread=10.0, lost=0.04)], order="ts",
        # Sorted by host time, a node 10 s ahead comes ~65 steps after one 10 s behind: more than the
        # assembler held open at 16 steps or 2 s of them; every step closed with one node's ranks only.
        expect=[lambda m: E("straggler", "ks3b", m["ks3b"]["step"][90], 15, ranks=[6], nodes=["n01"])],
        note="the same without stages: no partial hang at the start"))
    out.append(Scenario(
        "fast_steps_sorted_skewed", [JobSpec(
            "ks3c", nodes(4), 4, 600, compute=0.04, transfer=0.008, start=T0, seed=16,
            slow=[Slow(1.4, 300, rank=6)], clock_spread=12.0, lost=0.03)], order="ts", arrival=False,
        expect=[lambda m: E("straggler", "ks3c", m["ks3c"]["step"][300], 15, ranks=[6], nodes=["n01"])],
        note="40 ms steps sorted by host time, clocks 12 s apart, no broker times: up to 256 steps held"))
    for moe in (False, True):  # a stage's steps closing later than the other's were judged without it
        name = "ks10" + ("moe" if moe else "")
        out.append(Scenario(
            "two_stages_straggler" + ("_moe" if moe else ""), [JobSpec(
                name, nodes(4), 4, 300, compute=0.25, transfer=0.05, start=T0, seed=302, stages=2,
                slow=([Slow(1.3, 0, kind="flaky", p=0.15, rank=r) for r in range(16)] if moe else [])
                + [Slow(1.5, 150, rank=5)])],
            expect=[lambda m, n=name: E("straggler", n, m[n]["step"][150], 20, ranks=[5], nodes=["n01"])],
            allow=[{"type": "imbalance", "job": name, "severity": "info"}],
            note="two pipeline stages, a straggler in the first: its cost is the straggler's, no throughput drop"))
    out.append(Scenario(
        "link_fault_and_jobwide_slowdown", [JobSpec(
            "ks4", nodes(4), 4, 300, compute=0.3, transfer=0.1, start=T0, seed=104, telemetry=True,
            link=LinkFault("n01", 60.0, 1.8), jobwide=Slow(1.3, 200), lost=0.02)],
        expect=[lambda m: E("link_errors", "", T0 + 60.0, 40, nodes=["n01"])],
        allow=[{"type": "throughput_drop", "job": "ks4"}, {"type": "comm_slowdown", "job": "ks4"}]))
    out.append(Scenario(
        "hang_bursty_lossy", [JobSpec(
            "ks5", nodes(4), 4, 120, compute=0.4, transfer=0.08, start=T0, seed=105, pgs=True, lost=0.05,
            flush=0.5, clock_spread=5.0, hang=Hang(100, 11))], envelopes=True,
        expect=[lambda m: E("hang", "ks5", m["ks5"]["stall"], 90, ranks=[11])]))
    out.append(Scenario(
        "healthy_noise", [JobSpec(
            "ks6", nodes(4), 4, 400, compute=0.2, transfer=0.05, start=T0, seed=106, variable=0.3,
            spike_rate=0.02, data=0.02, lost=0.05, duplicated=0.03, flush=0.3, clock_spread=10.0,
            clock_jump=("n03", 100.0, -20.0), pauses=[Pause("checkpoint", 100, 30.0)])], envelopes=True,
        note="nothing wrong, everything noisy: nothing fires"))
    out.append(Scenario(
        "moe_routing", [JobSpec(
            "ks7", nodes(4), 4, 300, compute=0.25, transfer=0.05, start=T0, seed=107,
            slow=[Slow(1.35, 0, kind="flaky", p=0.2, rank=r) for r in range(16)], lost=0.02)],
        note="every rank 1.35x on a random fifth of its steps: nothing fires"))
    out.append(Scenario(
        "moe_routing_plus_straggler", [JobSpec(
            "ks8", nodes(4), 4, 300, compute=0.25, transfer=0.05, start=T0, seed=108,
            slow=[Slow(1.35, 0, kind="flaky", p=0.2, rank=r) for r in range(16)] + [Slow(1.5, 150, rank=14)],
            lost=0.02)],
        expect=[lambda m: E("straggler", "ks8", m["ks8"]["step"][150], 30, ranks=[14], nodes=["n03"])]))
    out.append(Scenario(
        "moe_routing_small_steps", [JobSpec(
            "ks7b", nodes(4), 4, 400, compute=0.25, transfer=0.05, start=T0, seed=205,
            slow=[Slow(1.2, 0, kind="flaky", p=0.3, rank=r) for r in range(16)], lost=0.02)]))
    out.append(Scenario(
        "unmarked_checkpoints_then_hang", [JobSpec(
            "ks9", nodes(2), 4, 200, compute=0.5, transfer=0.08, start=T0, seed=109, lost=0.03,
            pauses=[Pause("checkpoint", 40, 45.0, marked=False, rank0_only=True)], hang=Hang(170, 5))],
        expect=[lambda m: E("hang", "ks9", m["ks9"]["stall"], 90, ranks=[5])],
        allow=[{"type": "hang", "job": "ks9", "severity": "warning", "ranks": [0]}],
        note="the first unmarked checkpoint may warn (it could be a hang's first minute); the hang after "
             "four of them warns within 1.5x the checkpoint"))
    return out


SCENARIOS = {sc.name: sc for sc in scenarios()}


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_composite(name, tmp_path):
    lines, label = build(SCENARIOS[name])
    path = tmp_path / f"{name}.jsonl"
    path.write_text("\n".join(lines) + "\n")
    result = judge(replay(str(path), in_process=True), label)
    assert result["ok"], {"expect": [r for r in result["expect"] if not r["ok"]],
                          "false_alarms": result["false_alarms"]}
