"""The root node agent among untrusted local users (issue 44, rows 4, 5, 6; docs/security.md's threat model).

Every attacker here is a real process of ``nobody`` (``setpriv --reuid=nobody``), every genuine rank a real
process under a torchrun launcher, both found by the agent's own code in the real ``/proc``; the agent's
readers run in this (root) process as they do in ``stepwatch agent``. Launchers the tests cannot create
for real (a Slurm job cgroup, a pod cgroup) are read from /proc trees laid out as proc(5) says.
"""

from __future__ import annotations

import json
import os
import pickle
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import tracemalloc
from pathlib import Path

import pytest
from nccl_fixtures import TORCHRUN, pod_cgroup, slurm_cgroup, write_proc

from stepwatch.models.wire.events import parse_event
from stepwatch.producers.flight_recorder_fifo import FlightRecorderFifo, load_dump
from stepwatch.producers.nccl_inspector import InspectorReader, InspectorSettings
from stepwatch.producers.nccl_ras import RasPoller
from stepwatch.producers.proc_identity import Launcher, ProcTable
from stepwatch.producers.refusals import Refusal

HERE = Path(__file__).resolve().parents[1]
DUMP = HERE / "fixtures" / "nccl" / "fr-dump-gloo-torch2.15.pkl"
SECRET = "TOP-SECRET-LINE root only"

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="starts processes as nobody (setpriv): needs root")


def wait_for(cond, what: str, limit: float = 60.0):
    """Wait until ``cond()`` is true (a hang guard, not a timing assertion)."""
    end = time.monotonic() + limit
    while True:
        value = cond()
        if value:
            return value
        if time.monotonic() > end:
            raise AssertionError(f"never happened: {what}")
        time.sleep(0.02)


class Node:
    """A world-writable, sticky scratch directory (as /tmp) and the processes of the test's local users."""

    def __init__(self, secret_dir: Path) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="stepwatch-trust-", dir="/tmp"))
        os.chmod(self.dir, 0o1777)
        shutil.copy(HERE / "untrusted_proc.py", self.dir / "untrusted_proc.py")
        (self.dir / "torchrun").write_text(  # a stand-in for torchrun: sets its worker's RANK and waits for it
            "#!/usr/bin/python3\nimport os, subprocess, sys\nenv = dict(os.environ)\n"
            "if 'STUB_RANK' in env:\n    env['RANK'] = env.pop('STUB_RANK')\n"
            "sys.exit(subprocess.call(sys.argv[1:], env=env))\n")
        for name in ("untrusted_proc.py", "torchrun"):
            os.chmod(self.dir / name, 0o755)
        self.secret = secret_dir / "secret"  # root only, in a root-only folder
        self.secret.write_text(SECRET + "\n")
        os.chmod(self.secret, 0o600)
        self.procs: list[subprocess.Popen] = []
        self._n = 0

    def start(self, *args: str, env: dict[str, str] | None = None, nobody: bool = True,
              launcher: bool = True) -> str:
        """Start ``untrusted_proc.py READY ARGS`` (as nobody, under a torchrun of the same user); returns what it
        wrote to READY (its pid, or the RAS port) once it is set up."""
        self._n += 1
        ready = str(self.dir / f"ready-{self._n}")
        env = dict(env or {})
        if launcher and "RANK" in env:  # torchrun sets each worker's rank; its own environment has none
            env["STUB_RANK"] = env.pop("RANK")
        argv = (["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups"] if nobody else [])
        argv += (["/usr/bin/python3", str(self.dir / "torchrun")] if launcher else [])
        argv += ["/usr/bin/python3", str(self.dir / "untrusted_proc.py"), ready, *args]
        self.procs.append(subprocess.Popen(argv, env={"PATH": "/usr/bin:/bin", **env},
                                           start_new_session=True, cwd=self.dir))
        wait_for(lambda: os.path.exists(ready) or self.procs[-1].poll() is not None, f"{args[0]} ready")
        assert self.procs[-1].poll() is None, f"{argv} exited {self.procs[-1].returncode}"
        return Path(ready).read_text()

    def close(self) -> None:
        for p in self.procs:
            try:
                os.killpg(p.pid, signal.SIGKILL)  # the session this test started
            except ProcessLookupError:
                pass
            p.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture
def node(tmp_path):
    n = Node(tmp_path)
    yield n
    n.close()


def fr_env(node: Node, name: str, job: str, rank: int, dump_stem: str | None = None) -> dict[str, str]:
    return {"STEPWATCH_JOB": job, "RANK": str(rank), "WORLD_SIZE": "8",
            "TORCH_NCCL_DEBUG_INFO_PIPE_FILE": f"{node.dir}/{name}_pipe_",
            "TORCH_FR_DUMP_TEMP_FILE": dump_stem or f"{node.dir}/{name}_dump_"}


def genuine_rank(node: Node, job: str = "victim-job", rank: int = 0) -> int:
    """A real rank of ``job``, run by root under its torchrun, with a Flight Recorder FIFO that dumps the fixture."""
    shutil.copy(DUMP, node.dir / "real.pkl")
    return int(node.start("fifo", f"{node.dir}/v{rank}_pipe_{rank}.pipe", f"{node.dir}/v{rank}_dump_{rank}",
                          f"copy:{node.dir}/real.pkl", env=fr_env(node, f"v{rank}", job, rank), nobody=False))


# -- who the agent speaks for -------------------------------------------------------------------------

@needs_root
@pytest.mark.parametrize("under", ["no launcher", "own torchrun"])
def test_a_forged_job_and_rank_get_no_stack_event_for_the_victim_job(node, under):
    """Row 4a: nobody sets STEPWATCH_JOB=victim-job RANK=3 and its own FIFO: without a launcher, or under a
    torchrun of its own while the victim's rank (root's torchrun, started first) runs here."""
    victim = genuine_rank(node, rank=0)
    shutil.copy(DUMP, node.dir / "forged.pkl")
    os.chmod(node.dir / "forged.pkl", 0o644)
    node.start("fifo", f"{node.dir}/a_pipe_3.pipe", f"{node.dir}/a_dump_3", f"copy:{node.dir}/forged.pkl",
               env=fr_env(node, "a", "victim-job", 3), launcher=under == "own torchrun")
    procs = ProcTable("/proc")
    fifo = FlightRecorderFifo(procs, node="n", timeout=5)
    events = fifo.answer("victim-job", (0, 3), "req/1")
    assert [(e["job"], e["rank"]) for e in events] == [("victim-job", 0)]  # the genuine rank answers
    assert not (node.dir / "a_pipe_3.pipe.asked").exists()  # the forged rank's FIFO was never written to
    cause = Refusal.UNVOUCHED if under == "no launcher" else Refusal.NAME_HELD_BY_OTHER_USER
    assert procs.refusals[cause] >= 1
    assert procs.info(victim).launcher is Launcher.TORCHRUN


@needs_root
@pytest.mark.parametrize("action, cause", [
    ("symlink", Refusal.SYMLINK),           # 4b: the dump a link to a root-only file
    ("relink", Refusal.WRONG_OWNER),        # its folder a link moved to a root-only folder
    ("fifo", Refusal.WRONG_TYPE),           # 4c: a FIFO at the dump path
    ("sparse", Refusal.TOO_LARGE),          # 4d: a 1 GiB sparse dump
])
def test_a_hostile_dump_is_refused_before_reading_and_the_next_request_is_answered(node, tmp_path, action, cause):
    secret_dir = tmp_path / "rootdir"
    secret_dir.mkdir(mode=0o700)
    (secret_dir / "b_dump_0").write_text(SECRET)
    (node.dir / "empty").mkdir()
    os.chown(node.dir / "empty", 65534, 65534)
    os.symlink(node.dir / "empty", node.dir / "link")
    os.lchown(node.dir / "link", 65534, 65534)
    stem = f"{node.dir}/link/b_dump_" if action == "relink" else None
    dump = f"{node.dir}/link/b_dump_0" if action == "relink" else f"{node.dir}/b_dump_0"
    arg = {"symlink": f"symlink:{node.secret}", "relink": f"relink:{node.dir}/link:{secret_dir}", "fifo": "fifo",
           "sparse": f"sparse:{1 << 30}"}[action]
    node.start("fifo", f"{node.dir}/b_pipe_0.pipe", dump, arg, env=fr_env(node, "b", "mine", 0, stem))
    genuine_rank(node, job="victim-job", rank=1)
    procs = ProcTable("/proc")
    fifo = FlightRecorderFifo(procs, node="n", timeout=10)
    tracemalloc.start()
    try:
        events = fifo.answer("mine", (0,), "req/1")  # returns: the control thread is never held
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert events == [] and procs.refusals[cause] == 1
    assert peak < 16 << 20, f"the agent allocated {peak >> 20} MiB for a refused dump"
    later = fifo.answer("victim-job", (1,), "req/2")
    assert [(e["job"], e["rank"], e["request_id"]) for e in later] == [("victim-job", 1, "req/2")]
    assert SECRET not in json.dumps(later)


def _pickle_ops(*ops: bytes) -> bytes:
    return b"\x80\x04" + b"".join(ops) + b"."


@pytest.mark.parametrize("name, data", [
    # a memo index far out: the C unpickler sized its memo array to it (40 MB -> 1.83 GB)
    ("far memo index", _pickle_ops(b"}", b"r\xff\xff\xff\x3f", b"\x8c\x07entries]s")),
    # memoized empty lists, past the memo's cap
    ("memo flood", _pickle_ops(b"(", b"]\x94" * 400_000, b"l")),
    # empty dicts pushed, past the opcode budget
    ("object flood", _pickle_ops(b"(", b"}" * 1_500_000, b"l")),
])
def test_a_dump_that_would_build_too_much_stops_within_its_budget(name, data):
    tracemalloc.start()
    try:
        try:
            load_dump(data)
        except pickle.UnpicklingError:
            pass  # over the budget, or not a dump: either way refused
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 96 << 20, f"{name}: {peak >> 20} MiB"
    print(f"{name}: peak {peak >> 20} MiB")


# -- NCCL Inspector logs in a world-writable directory ---------------------------------------------------

def _records(n: int, *, sn=lambda i: 0) -> str:
    header = {"id": "0x1", "rank": 0, "n_ranks": 1, "nnodes": 1}
    lines = [json.dumps({"header": header, "metadata": {"dump_timestamp_us": 1}, "dump_stats": {}})]
    lines += [json.dumps({"coll_perf": {"coll": "AllReduce", "coll_sn": sn(i), "coll_exec_time_us": 5,
                                        "coll_msg_size_bytes": 8}}) for i in range(n)]
    return "\n".join(lines) + "\n"


@needs_root
def test_inspector_logs_a_local_user_planted_are_refused(node, caplog):
    """Row 5: a log named for nobody's own pid but linked to a root-only file; a log named for root's rank."""
    insp = node.dir / "inspector"
    insp.mkdir()
    os.chmod(insp, 0o1777)
    node.start("file", f"{insp}/h-pid{{pid}}.log", f"@{node.secret}", env={"STEPWATCH_JOB": "mine", "RANK": "0"})
    victim = genuine_rank(node)
    forged = node.start("file", f"{insp}/h-pid{victim}.log", _records(64, sn=lambda i: i),
                        env={"STEPWATCH_JOB": "mine", "RANK": "1"})
    assert int(forged) != victim
    procs = ProcTable("/proc")
    reader = InspectorReader(InspectorSettings(directory=str(insp), window_size=16), node="n", procs=procs)
    with caplog.at_level("INFO"):
        events = reader.poll(final=True)
    assert events == []
    assert procs.refusals[Refusal.SYMLINK] == 1 and procs.refusals[Refusal.WRONG_OWNER] == 1
    assert SECRET not in caplog.text
    reader.poll(final=True)
    assert procs.refusals[Refusal.SYMLINK] == 1  # judged once per file


@needs_root
@pytest.mark.parametrize("records", [1_000, 100_000])
def test_a_repeated_coll_sn_keeps_the_inspector_reader_bounded(node, records):
    """Row 5: records with coll_sn=0 again and again fill one window, never more, however many (the issue's 1M,
    60 MB of log, takes 23 s here: the same state, measured once for the report)."""
    insp = node.dir / "inspector"
    insp.mkdir()
    victim = genuine_rank(node)
    (insp / f"h-pid{victim}.log").write_text(_records(records))
    procs = ProcTable("/proc")
    reader = InspectorReader(InspectorSettings(directory=str(insp), window_size=16, max_read_bytes=64 << 20),
                             node="n", procs=procs)
    most = 0
    while reader.counts["records"] < records:  # every record parsed, kept or refused
        reader.poll()
        most = max(most, reader.open_samples)
    assert most == 16 and reader.counts["excess_records"] == records - 16
    events = reader.poll(final=True)
    assert [(e["job"], e["window"], e["count"]) for e in events] == [("victim-job", 0, 16)]
    assert reader.open_samples == 0 and procs.refusals[Refusal.EXCESS_RECORDS] == records - 16


# -- NCCL RAS on a port anyone may listen on ------------------------------------------------------------

def _ras_answer(pid: int) -> bytes:
    return json.dumps({"nccl_version": "2.30.7", "communicators": [{
        "hash": "0xabc", "size": 8, "ranks": [{"rank": 0, "host": "h", "pid": pid,
                                               "collective_counts": {"AllReduce": 42}}],
        "missing_ranks": []}]}).encode()


@needs_root
def test_a_trickling_ras_server_ends_its_poll_by_the_deadline_while_sampling_goes_on(node, tmp_path):
    """Row 6: nobody listens on the RAS port, shakes hands, then sends a byte every 5 s."""
    from stepwatch.config import Settings
    from stepwatch.producers.agent import NodeAgent

    port = node.start("ras", "trickle", "-", launcher=False)
    settings = Settings.from_env({"STEPWATCH_TELEMETRY_NCCL_RAS": f"127.0.0.1:{port}",
                                  "STEPWATCH_TELEMETRY_AGENT_INTERVAL": "0.05"})
    agent = NodeAgent(node="n", settings=settings, sysfs_root=str(tmp_path / "nosys"), proc_root="/proc",
                      sink=lambda key, events: None)
    agent.ras.deadline = 3.0
    runner = threading.Thread(target=agent.run, daemon=True)
    runner.start()
    try:
        wait_for(lambda: (node.dir / "ready-1.trickling").exists(), "the RAS poll is being trickled")
        before = agent.samples
        wait_for(lambda: agent.samples >= before + 3, "samples while the RAS poll hangs")
        wait_for(lambda: agent.refusals[Refusal.RAS_DEADLINE] >= 1, "the poll's overall deadline")
        after = agent.samples
        wait_for(lambda: agent.samples >= after + 3, "samples after the deadline")
    finally:
        agent.stop()
        runner.join(30)
    assert not runner.is_alive()
    assert agent.ras.counts["failed_queries"] >= 1


@needs_root
@pytest.mark.parametrize("server_user", ["nobody", "root"])
def test_a_ras_answer_speaks_only_for_its_own_users_ranks(node, server_user):
    """Row 6: a forged answer from nobody's server names root's rank: no heartbeat; the same answer from a
    server of the rank's own user is one."""
    victim = genuine_rank(node)
    answer = node.dir / "answer.json"
    answer.write_bytes(_ras_answer(victim))
    port = node.start("ras", "answer", str(answer), nobody=server_user == "nobody", launcher=False)
    procs = ProcTable("/proc")
    poller = RasPoller(f"127.0.0.1:{port}", procs=procs, node="n", deadline=10)
    heartbeats = poller.poll(force=True)
    if server_user == "nobody":
        assert heartbeats == [] and procs.refusals[Refusal.RAS_FOREIGN] == 1, (poller.counts, procs.refusals.counts)
    else:
        assert [(h["job"], h["rank"], h["step"]) for h in heartbeats] == [("victim-job", 0, 42)]
        parse_event(heartbeats[0])


# -- launchers read from /proc trees as proc(5) lays them out ---------------------------------------------

@pytest.mark.parametrize("case, cgroup, env, expect", [
    ("slurm v2", slurm_cgroup("77"), {"SLURM_JOB_ID": "77", "SLURM_STEP_ID": "0"}, "77.0"),
    ("slurm names the job, not the env", slurm_cgroup("77"), {"STEPWATCH_JOB": "victim"}, "77.0"),
    ("the TaskProlog's STEPWATCH_JOB", slurm_cgroup("77"), {"STEPWATCH_JOB": "77", "SLURM_JOB_ID": "77"}, "77"),
    ("slurm v1", "4:memory:/slurm/uid_{uid}/job_88/step_batch/task_0\n", {"SLURM_JOB_ID": "88"}, "88"),
    ("slurm v1 of another uid", "4:memory:/slurm/uid_4242/job_88/step_0/task_0\n", {"SLURM_JOB_ID": "88"}, None),
    ("a user's own cgroup named like slurm's",
     "0::/user.slice/user-1000.slice/user@1000.service/slurmstepd.scope/job_77/step_0\n", {"SLURM_JOB_ID": "77"},
     None),
    ("a cgroup made inside the job's delegated subtree",
     "0::/system.slice/slurmstepd.scope/job_77/step_0/user/job_99/step_0\n", {"SLURM_JOB_ID": "99"}, "77.0"),
    ("no scheduler, no launcher", "0::/user.slice/user-1000.slice/session-3.scope\n", {"STEPWATCH_JOB": "x"}, None),
])
def test_a_scheduler_cgroup_names_the_job(tmp_path, case, cgroup, env, expect):
    write_proc(tmp_path, 500, {**env, "RANK": "0"}, cgroup=cgroup.replace("{uid}", str(os.getuid())))
    info = ProcTable(tmp_path).info(500)
    assert (info.job if info else None) == expect, case


@pytest.mark.parametrize("view", ["host", "agent's cgroup namespace"])
@pytest.mark.parametrize("claim, expect", [("llama-ft", "llama-ft"), ("victim-job", None)])
def test_a_pod_process_speaks_for_the_job_its_container_was_started_for(tmp_path, claim, expect, view):
    """From a DaemonSet in a cgroup namespace of its own, others' paths read ``/../../kubepods-...`` (proc(5))."""
    uid = "0f3c9a1e-77aa-4c1b-9d2e-3f4a5b6c7d8e"
    cgroup = pod_cgroup(uid)
    if view != "host":
        cgroup = "0::/../.." + cgroup[cgroup.index("/kubepods-burstable.slice") + len("/kubepods-burstable.slice"):]
    write_proc(tmp_path, 900, {}, cgroup="0::/system.slice/containerd.service\n", uid=0)
    write_proc(tmp_path, 901, {"STEPWATCH_K8S_JOB_NAME": "llama-ft"}, ppid=900, cgroup=cgroup, cmdline=TORCHRUN)
    write_proc(tmp_path, 902, {"STEPWATCH_K8S_JOB_NAME": claim, "RANK": "3"}, ppid=901, cgroup=cgroup)
    procs = ProcTable(tmp_path)
    info = procs.info(902)
    assert (info.job if info else None) == expect
    if expect:
        assert info.launcher is Launcher.KUBERNETES and info.scope == f"pod {uid}"
    else:
        assert procs.refusals[Refusal.NAME_NOT_VOUCHED] == 1
