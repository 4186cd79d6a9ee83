"""Zero-code jobs end to end (issue 24): the real `stepwatch agent` on two nodes reads NCCL Inspector logs and
queries a local RAS server, publishes through the real broker to a real worker, which alerts.

The only stand-ins are the NCCL side (no GPU here): logs written in the Inspector's format and a TCP server
speaking RAS's protocol (tests/nccl_fixtures.py).
"""

from __future__ import annotations

import os
import select
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from nccl_fixtures import COMM_ID, RasServer, ras_status, rank_env, write_job, write_proc
from support import REPO, read_all_alerts, read_alerts, run_stepwatch, stepwatch_env, wait_until

pytestmark = pytest.mark.kafka


def test_inspector_logs_of_two_nodes_give_a_straggler_alert_for_the_late_rank_only(
        kafka_bootstrap, topic_prefix, start_worker, tmp_path):
    worker = start_worker()
    env = stepwatch_env(kafka_bootstrap, topic_prefix)
    jobs = {"late-job": write_job(tmp_path / "late", job="late-job", n_colls=320, late_rank=11, layout="marker"),
            "healthy-job": write_job(tmp_path / "ok", job="healthy-job", n_colls=320, late_rank=None, seed=3)}
    for hosts in jobs.values():
        for node, host in hosts.items():
            run_stepwatch("agent", "--once", "--node", node, "--nccl-inspector-dir", str(host["dir"]),
                          "--nccl-inspector-window", "16", "--proc-root", str(host["proc"]),
                          "--sysfs-root", str(tmp_path / "nosys"), env=env, timeout=90)
    alerts = read_all_alerts(kafka_bootstrap, topic_prefix + "alerts",
                             until=lambda got: any(a["type"] == "straggler" for a in got), timeout=90)
    stragglers = [a for a in alerts if a["type"] == "straggler"]
    assert [(a["job"], a["ranks"], a["nodes"]) for a in stragglers] == [("late-job", [11], ["gpu-b"])], \
        worker.log_text()[-3000:]
    ev = stragglers[0]["evidence"]
    assert ev["source"] == "nccl_inspector" and ev["process_group"] == COMM_ID
    assert [a for a in alerts if a["job"] == "healthy-job"] == []


def test_ras_counts_of_a_job_without_the_callback_name_the_lagging_rank_of_a_hang(
        kafka_bootstrap, topic_prefix, start_worker, tmp_path):
    start_worker(STEPWATCH_HANG_WARNING_FLOOR_SECONDS="12", STEPWATCH_HANG_TIMEOUT_SECONDS="60",
                 STEPWATCH_HANG_HEARTBEAT_TIMEOUT_SECONDS="20", STEPWATCH_WORKER_TICK_INTERVAL="0.5")
    hosts = write_job(tmp_path, job="ras-job", n_colls=1, late_rank=None)
    host_of = {r: ("10.0.0.1" if r < 8 else "10.0.0.2") for r in range(16)}
    pids = {r: p for h in hosts.values() for r, p in h["pids"].items()}
    # The agents ask on multiples of 5 s of the wall clock; a RAS answer depends on the round asked in (the
    # job's state at that instant, the same for both nodes): counts advance each round until the freeze.
    state = {"queries": 0, "freeze_round": None, "base": int(time.time() // 5)}

    def answer():
        state["queries"] += 1
        round_ = int(time.time() // 5)
        if state["freeze_round"] is None or round_ < state["freeze_round"]:
            return ras_status({r: 10 * (round_ - state["base"] + 1) for r in range(16)}, hosts=host_of, pids=pids)
        counts = {r: 200_000 for r in range(16)}
        counts[13] = 199_999  # rank 13 never launched the collective the others wait in
        return ras_status(counts, hosts=host_of, pids=pids)

    # Rank 13 (gpu-b, container pid 22 -> host pid 52005) has a Flight Recorder FIFO; its reader is a stand-in for
    # ProcessGroupNCCL's watchdog (DumpPipe), which writes a real torch 2.15 dump when the agent writes to it.
    files = tmp_path / "fr"
    files.mkdir()
    write_proc(hosts["gpu-b"]["proc"], 52005, {**rank_env("ras-job", 13, 16, 5, "pod-1"),
                                               "TORCH_NCCL_DEBUG_INFO_PIPE_FILE": f"{files}/pipe_",
                                               "TORCH_FR_DUMP_TEMP_FILE": f"{files}/dump_"}, ns_pid=22,
               **hosts["gpu-b"]["vouch"])  # in the job's pod, under its torchrun
    (hosts["gpu-b"]["proc"] / "52005" / "root").symlink_to("/")
    os.mkfifo(files / "pipe_13.pipe")
    fifo = os.open(files / "pipe_13.pipe", os.O_RDONLY | os.O_NONBLOCK)
    dump = (Path(__file__).resolve().parents[1] / "fixtures" / "nccl" / "fr-dump-gloo-torch2.15.pkl").read_bytes()

    def watchdog():
        while select.select([fifo], [], [], 120)[0]:
            if os.read(fifo, 128):
                (files / "dump_13").write_bytes(dump)
                return

    threading.Thread(target=watchdog, daemon=True).start()
    server = RasServer(answer)
    env = stepwatch_env(kafka_bootstrap, topic_prefix)
    agents = [subprocess.Popen([sys.executable, "-m", "stepwatch.cli", "agent", "--node", node, "--nccl-ras",
                                server.addr, "--nccl-ras-interval", "5", "--proc-root", str(host["proc"]),
                                "--sysfs-root", str(tmp_path / "nosys")], env=env, cwd=REPO,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
              for node, host in hosts.items()]
    try:
        wait_until(lambda: state["queries"] >= 6, timeout=60, what="six RAS queries while the job runs")
        state["freeze_round"] = int(time.time() // 5) + 1
        alerts = read_alerts(kafka_bootstrap, topic_prefix + "alerts", timeout=150, until=lambda got: any(
            a["type"] == "hang" and a["evidence"].get("case") == "culprit_before_collective"
            and "13" in (a["evidence"].get("stacks") or {}) for a in got))
    finally:
        for agent in agents:
            agent.terminate()
            agent.wait(30)
        server.close()
        os.close(fifo)
    hangs = [a for a in alerts if a["type"] == "hang"]
    assert len({a["id"] for a in hangs}) == 1, [(a["evidence"]["case"], a["ranks"]) for a in hangs]
    hang = hangs[-1]
    # Both nodes' heartbeats carry the round's instant: no node looks ahead, so no partial_hang on the way.
    assert {a["evidence"]["case"] for a in hangs} == {"culprit_before_collective"}, [
        (a["evidence"]["case"], a["ranks"]) for a in hangs]
    assert hang["job"] == "ras-job" and hang["ranks"][0] == 13 and hang["nodes"][0] == "gpu-b"
    assert hang["evidence"]["process_group"] == COMM_ID and hang["evidence"]["source"] == "nccl_ras"
    # The culprit's last collectives from its Flight Recorder, attached as the in-process stacks are.
    assert "13" in hang["evidence"].get("stacks", {}), [
        (a["evidence"]["case"], a["evidence"].get("stack_request"), a["evidence"].get("stack_missing")) for a in hangs]
    assert hang["evidence"]["stacks"]["13"][-1] == "pg default_pg:4 gloo:barrier scheduled"
