"""Job identity (producers/job_identity.py): launcher variables in order, never merging two jobs.

The unit part is the pure function on env mappings as launchers set them; the end-to-end part runs
two real ``torchrun`` jobs at the same time without ``--rdzv-id`` (both ``TORCHELASTIC_RUN_ID=none``)
and checks that they get two ids, each agreed on by all its ranks, with a warning line.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from stepwatch.producers.job_identity import IdSource, job_identity


def test_launcher_variables_in_order():
    env = {"STEPWATCH_JOB": "mine", "TORCHELASTIC_RUN_ID": "r1", "SLURM_JOB_ID": "77"}
    assert job_identity(env).job == "mine" and not job_identity(env).guessed
    assert job_identity({"TORCHELASTIC_RUN_ID": "r1", "SLURM_JOB_ID": "77"}).source is IdSource.TORCHELASTIC
    # torchrun's default run id is shared by every job launched without --rdzv-id: skipped.
    slurm = job_identity({"TORCHELASTIC_RUN_ID": "none", "SLURM_JOB_ID": "77", "SLURM_STEP_ID": "2"})
    assert (slurm.job, slurm.source, slurm.guessed) == ("77.2", IdSource.SLURM, False)
    assert job_identity({"SLURM_JOB_ID": "77"}).job == "77"
    k8s = job_identity({"STEPWATCH_K8S_JOB_NAME": "llama-ft", "STEPWATCH_K8S_JOB_UID": "0f3c9a1e-77aa-4c1b"})
    assert (k8s.job, k8s.source) == ("llama-ft-0f3c9a1e", IdSource.KUBERNETES)
    assert job_identity({"TORCHELASTIC_RUN_ID": "none"}) == job_identity({})
    assert job_identity({}).job == "default" and job_identity({}).guessed


def test_rendezvous_id_is_shared_by_one_job_and_differs_between_jobs():
    a = {"MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29500", "TORCHELASTIC_RUN_ID": "none"}
    first = job_identity(a, start_time="1733000000.5")
    assert first.source is IdSource.RENDEZVOUS and first.guessed and first.job.startswith("rdzv-")
    assert job_identity(dict(a, RANK="3"), start_time="1733000000.5") == first  # any rank of the same job
    assert job_identity(a, start_time="1733000100.0").job != first.job  # the same script, run again
    assert job_identity(dict(a, MASTER_ADDR="10.0.0.2"), start_time="1733000000.5").job != first.job


def test_two_torchrun_jobs_launched_together_with_defaults_get_two_ids(tmp_path):
    pytest.importorskip("torch", reason="torchrun needs torch")
    from support import stepwatch_env
    from train_support import REPO, TRAIN_RANK, free_port

    env = stepwatch_env(f"127.0.0.1:{free_port()}", "t-jobid.", OMP_NUM_THREADS="1", STEPWATCH_MONITOR_STACKS="0")
    for name in ("STEPWATCH_JOB", "STEPWATCH_JOB_ID", "TORCHELASTIC_RUN_ID", "SLURM_JOB_ID"):
        env.pop(name, None)
    procs = []
    for job in ("a", "b"):
        (tmp_path / job).mkdir()
        log = open(tmp_path / job / "log", "w")
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1", "--nproc-per-node", "2",
               "--master-addr", "127.0.0.1", "--master-port", str(free_port()), str(TRAIN_RANK), "--steps", "3",
               "--device-ms", "1", "--stats", str(tmp_path / job / "stats{rank}.json")]
        procs.append((subprocess.Popen(cmd, env=env, cwd=REPO, stdout=log, stderr=subprocess.STDOUT), log))
    for proc, log in procs:
        proc.wait(240)
        log.close()
    logs = {job: (tmp_path / job / "log").read_text() for job in ("a", "b")}
    assert [p.returncode for p, _ in procs] == [0, 0], logs
    ids = {job: {json.loads((tmp_path / job / f"stats{r}.json").read_text())["job"] for r in range(2)}
           for job in ("a", "b")}
    assert len(ids["a"]) == 1 and len(ids["b"]) == 1, ids  # the ranks of one job agree
    assert ids["a"] != ids["b"], ids
    assert all(i.startswith("rdzv-") for s in ids.values() for i in s), ids
    assert all("guessed job id" in text for text in logs.values()), logs
