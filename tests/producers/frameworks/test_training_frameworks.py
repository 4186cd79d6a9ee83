"""Real multi-process training in the frameworks LLM jobs use (gloo, CPU), adopted with the two
documented lines only (``RankMonitor()``, ``with monitor.step()``; for the Hugging Face Trainer its
callback only), publishing to the real broker, judged by a running ``stepwatch worker``.

Each rank is an OS process running tests/fw_rank.py. What is checked, per framework: a rank made
~40% slower from step 12 is the one straggler named (its compute time stands out because the
collectives the framework issues itself are timed as communication), within 10 steps; every rank
numbered the same collectives. Lightning (``strategy="ddp"``) and the Hugging Face Trainer are adopted
with their callback only. For the pipeline, the neighbours' ``recv`` waits count as
communication, so only the slow stage is named. DeepSpeed ZeRO-2/3 runs on its CPU accelerator. A
Megatron-style 8-rank TP4 x DP2 job with a rank stuck before its TP all-reduce names that rank as the
hang culprit with its stack, in the TP group where most ranks wait on it.
"""

from __future__ import annotations

import uuid

import pytest

pytest.importorskip("torch", reason="torch not installed (pip install -e '.[train-test]')")

from support import WorkerProcess, full_or, read_alerts, read_all_alerts, stepwatch_env  # noqa: E402
from train_support import FW_RANK, run_ddp_job, start_job  # noqa: E402

pytestmark = pytest.mark.kafka

SLOW_FROM = 12
#: Short jobs on a loaded 2-core machine: the job-wide throughput rule is not these tests' subject
#: (as in tests/producers/frameworks/test_torch_ddp.py), so it is set out of reach and the alert lists are compared whole.
NO_JOB_WIDE_RULE = {"STEPWATCH_JOB_HEALTH_THROUGHPUT_MIN_EFFECT": "10"}


#: What each framework's ranks import beyond torch: imported once, before the ranks are forked (tests/rank_zygote.py).
PRELOAD = {"fsdp1": ("torch.distributed.fsdp",), "fsdp2": ("torch.distributed.fsdp",), "deepspeed": ("deepspeed",),
           "hf": ("transformers.trainer", "transformers.models.gpt2.modeling_gpt2", "stepwatch.producers.hf"),
           "lightning": ("lightning.pytorch", "stepwatch.producers.lightning")}


@pytest.fixture(scope="module")
def straggler_worker(kafka_bootstrap, tmp_path_factory):
    """One worker judges every straggler job of this module, each under a job name of its own, as one worker
    judges a cluster's jobs (a worker's start per test was ~6 s on a loaded 2-core machine): (prefix, worker)."""
    prefix = f"t-fw-{uuid.uuid4().hex[:8]}."
    tmp = tmp_path_factory.mktemp("fw-worker")
    env = stepwatch_env(kafka_bootstrap, prefix, STEPWATCH_WORKER_DATADIR=str(tmp / "faust"), **NO_JOB_WIDE_RULE)
    worker = WorkerProcess(env, tmp / "worker.log").wait_ready()
    try:
        yield prefix, worker
    finally:
        worker.discard()


#: The jobs run on the shared worker so far, each with its slow rank: an alert for any other job fails the test.
JOBS: dict[str, int] = {}


def straggler_job(straggler_worker, kafka_bootstrap, tmp_path, framework: str, *, world: int, slow_rank: int,
                  extra: tuple[str, ...] = (), env_extra: dict[str, str] | None = None, group: str | None = "default",
                  slow_from: int = SLOW_FROM, steps: int = 40, job: str = ""):
    topic_prefix, worker = straggler_worker
    job = job or f"{framework}-slow"
    JOBS[job] = slow_rank
    env = dict(worker.env, STEPWATCH_JOB=job, STEPWATCH_MONITOR_STACKS="0", **(env_extra or {}))
    stats = run_ddp_job(env, tmp_path, world=world, script=FW_RANK, timeout=300, preload=PRELOAD.get(framework, ()),
                        args=("--framework", framework, "--steps", str(steps), "--slow-rank", str(slow_rank),
                              "--slow-from", str(slow_from), "--slow-extra-ms", "40", *extra))
    every = read_all_alerts(kafka_bootstrap, topic_prefix + "alerts",
                            until=lambda a: any(x["job"] == job and x["type"] == "straggler"
                                                and x["status"] == "resolved" and "job ended" in x["summary"]
                                                for x in a))
    # Nothing for a job the worker was never given (the module's earlier jobs' alerts are their tests' subject).
    assert {a["job"] for a in every} <= set(JOBS), [(a["job"], a["summary"]) for a in every]
    alerts = [a for a in every if a["job"] == job]
    # Only the slow rank is ever named (on a loaded 2-core machine its alert may resolve and fire again
    # within the job; the last one is resolved by the job's end).
    assert alerts and {(a["job"], a["type"], tuple(a["ranks"])) for a in alerts} == {(job, "straggler", (slow_rank,))}, \
        f"{[a['summary'] for a in alerts]}; worker log:\n{worker.log_text()[-3000:]}"
    evidence = alerts[0]["evidence"]
    # For the table in docs/training.md (pytest -rP shows it): steps to name, ranks named, alert updates.
    print(f"ROW {framework} {' '.join(extra)}: named rank {slow_rank} at step {evidence['detected_step']} "
          f"(slow step {evidence['detected_step'] - slow_from + 1}, compute {evidence.get('ratio')}x its peers), ranks named "
          f"{sorted({r for a in alerts for r in a['ranks']})}, alert ids {len({a['id'] for a in alerts})}, "
          f"alert updates {len(alerts)}")
    assert alerts[0]["status"] == "firing" and evidence["signal"] == "compute_time", evidence
    assert evidence["detected_step"] < slow_from + 10, evidence
    # Every rank numbered the same collectives on the groups they share, and completed them all.
    assert len({tuple(sorted(s["seq_started"].items())) for s in stats}) == 1, [s["seq_started"] for s in stats]
    # At least one collective per step on the default group (or, group=None, on the job's busiest group).
    assert (stats[0]["seq_started"][group] if group else max(stats[0]["seq_started"].values())) > 40
    for s in stats:
        assert s["seq_started"] == s["seq_completed"], s
        assert s["dropped"] == 0 and s["sent"] == s["produced"], s
    return stats


def test_fsdp2_slow_rank_named_with_the_two_lines(kafka_bootstrap, straggler_worker, tmp_path):
    # FSDP2 prefetches all-gathers (async), which overlap compute: its comm intervals cover some compute on
    # CPU, so the slow rank's compute gap is smaller than the extra time; 50 ms (~45 % of a step's compute here)
    # keeps detection within 10 steps on a loaded 2-core machine (40 ms passed, but once needed 11 steps).
    straggler_job(straggler_worker, kafka_bootstrap, tmp_path, "fsdp2", world=4, slow_rank=2,
                  extra=("--slow-extra-ms", "50"))


def test_fsdp1_slow_rank_named_with_the_two_lines(kafka_bootstrap, straggler_worker, tmp_path):
    straggler_job(straggler_worker, kafka_bootstrap, tmp_path, "fsdp1", world=4, slow_rank=1)


def test_pipeline_p2p_waits_are_communication_one_straggler(kafka_bootstrap, straggler_worker, tmp_path):
    # 4 stages, stage 1 slow: stages 2 and 3 wait for it in recv, stage 0 for its gradients; one alert only.
    straggler_job(straggler_worker, kafka_bootstrap, tmp_path, "pipeline", world=4, slow_rank=1)


def test_hf_trainer_ddp_slow_rank_named_with_the_callback_only(kafka_bootstrap, straggler_worker, tmp_path):
    # The Trainer wraps the model in DDP itself; its bucket all-reduces are timed without user code.
    stats = straggler_job(straggler_worker, kafka_bootstrap, tmp_path, "hf", world=4, slow_rank=1,
                          extra=("--slow-extra-ms", "50"))
    assert stats[0]["seq_started"]["default"] >= 40  # at least one DDP all-reduce per step


def test_lightning_ddp_slow_rank_named_with_the_callback_only(kafka_bootstrap, straggler_worker, tmp_path):
    # ``Trainer(strategy="ddp", callbacks=[StepwatchCallback()])``, 4 processes made by the launcher (torchrun's
    # variables, as Lightning's own launcher or torchrun would): rank 3 ~40 % slower is the one straggler named.
    # Its compute is the idle 'device' time and a small MLP (~62 ms with 60 ms): 25 ms more is 40 % slower.
    stats = straggler_job(straggler_worker, kafka_bootstrap, tmp_path, "lightning", world=4, slow_rank=3,
                          extra=("--strategy", "ddp", "--device-ms", "60", "--slow-extra-ms", "25"))
    assert stats[0]["seq_started"]["default"] >= 40  # at least one DDP all-reduce per step


def test_lightning_fsdp_strategy_refuses_a_cpu_accelerator():
    # Why the Lightning ``fsdp`` row is not run on CPU (docs/training.md): Lightning refuses the strategy without a
    # CUDA accelerator, and an FSDPStrategy subclass (which skips that check) passes ``device_id=None`` to FSDP1,
    # which then refuses with "FSDP needs a non-CPU accelerator device". When this starts to fail, run the row.
    pl = pytest.importorskip("lightning.pytorch", reason="lightning not installed (pip install -e '.[train-test]')")
    with pytest.raises(ValueError, match="The strategy `fsdp` requires a GPU accelerator"):
        pl.Trainer(accelerator="cpu", devices=1, strategy="fsdp", logger=False)


#: ZeRO-3 does what ZeRO-2 does (gradients reduced on a group of its own) and all-gathers parameters on the default
#: group too: CI runs it; ``STEPWATCH_FULL_GRID=1`` runs ZeRO-2 as well (a minute more on 2 cores).
ZERO_STAGES = full_or([2, 3], [3])


@pytest.mark.parametrize("stage", ZERO_STAGES)
def test_deepspeed_zero_slow_rank_named_with_the_two_lines(kafka_bootstrap, straggler_worker, tmp_path, stage):
    # DeepSpeed on its CPU accelerator (gloo through torch.distributed): ZeRO-2 reduces gradients on a group
    # of its own, ZeRO-3 also all-gathers parameters on the default group; the hooks see both.
    import importlib.util

    assert importlib.util.find_spec("deepspeed"), "deepspeed missing: pip install -e '.[train-test]'"
    straggler_job(straggler_worker, kafka_bootstrap, tmp_path, "deepspeed", world=4, slow_rank=3,
                  extra=("--zero-stage", str(stage), "--slow-extra-ms", "50"), env_extra={"DS_ACCELERATOR": "cpu"},
                  group=None, job=f"deepspeed-zero{stage}-slow")


def test_tp_dp_rank_stuck_before_tp_collective_is_the_hang_culprit(kafka_bootstrap, topic_prefix, start_worker,
                                                                  tmp_path):
    # The job: 8 ranks, TP groups {0-3},{4-7}, DP groups {i, i+4}; rank 5 stuck before its TP
    # all-reduce blocks tp1 (ranks 4, 6, 7 wait there) and dp1 (rank 1 waits): the culprit's group is tp1.
    worker = start_worker(STEPWATCH_HANG_TIMEOUT_SECONDS="300", STEPWATCH_HANG_WARNING_FLOOR_SECONDS="2",
                          STEPWATCH_HANG_HEARTBEAT_TIMEOUT_SECONDS="3", STEPWATCH_HANG_FIRST_STEP_TIMEOUT_SECONDS="120",
                          STEPWATCH_HANG_STACK_TIMEOUT_SECONDS="6")
    world, stuck = 8, 5
    job = start_job(dict(worker.env, STEPWATCH_JOB="tpdp-hang"), tmp_path, world=world, script=FW_RANK,
                    args=("--framework", "tpdp", "--steps", "400", "--device-ms", "20", "--tp-size", "4",
                          "--stall-rank", str(stuck), "--stall-step", "15"))
    try:
        def culprit_stack(alerts):
            return any(a["type"] == "hang" and str(stuck) in a["evidence"].get("stacks", {}) for a in alerts)

        alerts = read_alerts(kafka_bootstrap, topic_prefix + "alerts", timeout=240, until=culprit_stack)
        hangs = [a for a in alerts if a["type"] == "hang" and a["job"] == "tpdp-hang"]
        assert hangs, f"no hang alert: {alerts}\n{worker.log_text()[-3000:]}"
        alert = [a for a in hangs if str(stuck) in a["evidence"].get("stacks", {})][-1]
        ev = alert["evidence"]
        assert alert["ranks"][0] == stuck and [c["rank"] for c in ev["culprits"]] == [stuck], ev
        # The group where most ranks wait on it, named by what torch knows of it (its group_desc).
        assert ev["process_group"].split(":")[0] == "tp1" and ev["process_group_ranks"] == [4, 5, 6, 7], ev
        blocked = {g["group"].split(":")[0]: g["waiting"]["ranks"] for g in ev["blocked_groups"]}
        assert blocked == {"tp1": [4, 6, 7], "dp1": [1]}, ev["blocked_groups"]
        assert any(line.endswith(" load_shard_slowly") for line in ev["stacks"][str(stuck)]), ev["stacks"]
    finally:
        job.terminate()  # the zygote kills its ranks
        job.wait()
