"""NCCL Inspector logs, RAS answers and a /proc of training processes, in NCCL's documented formats.

Written by hand for the tests (not by the project's code), field by field as NCCL writes them:

* Inspector (NVIDIA/nccl v2.30.7, commit 5067397c, plugins/profiler/inspector/): file name
  ``<hostname>-pid<pid>.log`` (inspector.cc: ``"%s/%s-pid%d.log"``); one JSON object per line
  with ``header`` {id, comm_name, rank, n_ranks, nnodes} (inspectorCommInfoHeader),
  ``metadata`` {inspector_output_format_version, git_rev, rec_mechanism, dump_timestamp_us,
  hostname, pid} (inspectorCommInfoMetaHeader) and ``coll_perf`` {coll, coll_sn,
  coll_msg_size_bytes, coll_exec_time_us, coll_timing_source, coll_algobw_gbs, coll_busbw_gbs}
  (inspectorCompletedColl), in the per-line layout that version writes ("v4.0"; up to v4.2 the
  same). The marker layout ("v4.3": one line per dump with header, metadata and
  ``dump_stats``, then bare ``{"coll_perf": ...}`` lines) is not in that snapshot of NCCL's
  sources: it is written as NVIDIA/nccl's issue-24 description of it says (stepwatch issue 24).
* RAS (src/ras/client_support.cc, jsonWriteHeader / jsonStartCommunicator / jsonWriteRankData /
  jsonWriteMissingRank / jsonWriteFooter; the line protocol of src/ras/client.cc, protocol 2).
* /proc/<pid>/environ (NUL-separated) and /proc/<pid>/status with ``NSpid`` (proc(5)).

Timing model of one collective: rank r arrives at ``a_r``; every rank leaves at
``max(a) + transfer``, so ``coll_exec_time_us = max(a) - a_r + transfer``: the last to arrive
has the shortest execution time.
"""

from __future__ import annotations

import json
import os
import random
import socket
import threading
from pathlib import Path

COMM_ID = "0x7f8c496ae9f661"
OPS = ("AllReduce",)
START_US = 1_764_484_800_000_000


def write_proc(root: Path, host_pid: int, env: dict[str, str], *, ns_pid: int | None = None, uid: int | None = None,
               ppid: int = 1, cgroup: str = "0::/user.slice/user-0.slice/session-1.scope\n",
               cmdline: tuple[str, ...] = ("python3", "train.py"), start: int | None = None) -> None:
    """One process under ``root`` as proc(5) lays it out: its environ, cmdline, cgroup, a status with its
    ``Uid:`` and an ``NSpid`` that maps it into a container, and a stat with its parent (field 4) and start
    time (field 22). ``uid`` defaults to the test's own (the owner of the files it writes)."""
    d = root / str(host_pid)
    d.mkdir(parents=True, exist_ok=True)
    uid = os.getuid() if uid is None else uid
    (d / "environ").write_bytes(b"".join(f"{k}={v}".encode() + b"\0" for k, v in env.items()))
    (d / "cmdline").write_bytes(b"".join(a.encode() + b"\0" for a in cmdline))
    (d / "cgroup").write_text(cgroup)
    nspid = f"{host_pid}\t{ns_pid}" if ns_pid is not None else f"{host_pid}"
    (d / "status").write_text(f"Name:\tpython\nState:\tS (sleeping)\nTgid:\t{host_pid}\nNgid:\t0\n"
                              f"Pid:\t{host_pid}\nPPid:\t{ppid}\nUid:\t{uid}\t{uid}\t{uid}\t{uid}\n"
                              f"NSpid:\t{nspid}\nNSpgid:\t{nspid}\n")
    start = host_pid if start is None else start
    (d / "stat").write_text(f"{host_pid} (python3) S {ppid} {host_pid} {host_pid} 0 -1 4194560 0 0 0 0 0 0 0 0 20 0 "
                            f"1 0 {start} 1000000 100 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 0 0 0 0 0 0\n")


def slurm_cgroup(job_id: str, step: str = "0") -> str:
    """``/proc/<pid>/cgroup`` of a Slurm task (cgroup v2, slurmd's own tree: only root creates these)."""
    return f"0::/system.slice/slurmstepd.scope/job_{job_id}/step_{step}/user/task_0\n"


def pod_cgroup(pod_uid: str, container: str = "0c0ffee") -> str:
    """``/proc/<pid>/cgroup`` of a Kubernetes container (systemd cgroup driver, cgroup v2)."""
    return (f"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{pod_uid.replace('-', '_')}.slice/"
            f"cri-containerd-{container}.scope\n")


#: torchrun's command line as /proc/<pid>/cmdline shows its console script.
TORCHRUN = ("/usr/bin/python3", "/usr/local/bin/torchrun", "--nproc-per-node=8", "train.py")
POD_UID = "7f1c2e3a-4b5d-4c6e-8f90-a1b2c3d4e5f6"


def rank_env(job: str, rank: int, world: int, local: int, hostname: str) -> dict[str, str]:
    """What torchrun under Slurm sets: SLURM_PROCID is the node index, RANK the global rank."""
    return {"SLURM_JOB_ID": job, "SLURM_PROCID": str(rank // 8), "RANK": str(rank), "LOCAL_RANK": str(local),
            "WORLD_SIZE": str(world), "MASTER_ADDR": "gpu-a", "MASTER_PORT": "29500",
            "TORCHELASTIC_RUN_ID": "none", "HOSTNAME": hostname,
            "NCCL_INSPECTOR_ENABLE": "1", "NCCL_INSPECTOR_DUMP_DIR": "/var/log/nccl-inspector"}


def exec_times(n_ranks: int, n_colls: int, *, late_rank: int | None, late_us: int, seed: int,
               transfer_us: int = 1000, jitter_us: int = 200, late_from: int = 0) -> list[list[int]]:
    """``[coll][rank]`` execution times (us) under the timing model above (late from collective ``late_from``)."""
    rng = random.Random(seed)
    out = []
    for sn in range(n_colls):
        arrive = [rng.uniform(0, jitter_us) for _ in range(n_ranks)]
        if late_rank is not None and sn >= late_from:
            arrive[late_rank] += late_us
        last = max(arrive)
        out.append([int(last - a + transfer_us + rng.uniform(0, 20)) for a in arrive])
    return out


def _perf(sn: int, exec_us: int, size: int) -> dict:
    algobw = size / (exec_us * 1e3)
    return {"coll": "AllReduce", "coll_sn": sn, "coll_msg_size_bytes": size, "coll_exec_time_us": exec_us,
            "coll_timing_source": "kernel_gpu", "coll_algobw_gbs": round(algobw, 6),
            "coll_busbw_gbs": round(algobw * 2 * 15 / 16, 6)}


def write_job(root: Path, *, job: str, n_colls: int, late_rank: int | None, late_us: int = 2000,
              layout: str = "per-line", dump_every: int = 32, seed: int = 7, comm_name: str | None = None,
              split_last_line: bool = False, late_from: int = 0, us_per_coll: int = 3000,
              at_us: list[int] | None = None) -> dict[str, dict]:
    """A 16-rank job on 2 hosts (ranks 0-7 on gpu-a, 8-15 on gpu-b): per host an Inspector dir and a /proc.

    gpu-a's processes run on the host (file pid = host pid); gpu-b's in a container (file pid =
    the container's, NSpid maps it). Collectives follow each other every ``us_per_coll``; a rank dumps every
    ``dump_every`` collectives, stamping the dump with its first collective's time (``at_us[sn]``, the
    collectives' times, where given). Returns ``{host: {"dir", "proc", "pids", "vouch"}}``, ``vouch`` the
    ``write_proc`` arguments that put another process under the host's launcher."""
    n_ranks, size = 16, 16 << 20
    times = exec_times(n_ranks, n_colls, late_rank=late_rank, late_us=late_us, seed=seed, late_from=late_from)
    hosts: dict[str, dict] = {}
    for host_index, host in enumerate(("gpu-a", "gpu-b")):
        d, proc = root / host / "inspector", root / host / "proc"
        d.mkdir(parents=True, exist_ok=True)
        (proc).mkdir(parents=True, exist_ok=True)
        hosts[host] = {"dir": d, "proc": proc, "pids": {}}
        # What vouches for the ranks (producers/proc_identity.py): on gpu-a torchrun, run by the same user; on
        # gpu-b a pod whose first process (the container's torchrun) was started with the job's variables.
        if host_index == 0:
            hosts[host]["vouch"] = {"ppid": 40999}
            write_proc(proc, 40999, {k: v for k, v in rank_env(job, 0, n_ranks, 0, host).items()
                                     if k not in ("RANK", "LOCAL_RANK")}, cmdline=TORCHRUN)
        else:
            hosts[host]["vouch"] = {"ppid": 51999, "cgroup": pod_cgroup(POD_UID)}
            write_proc(proc, 51999, {k: v for k, v in rank_env(job, 8, n_ranks, 0, "pod-1").items()
                                     if k not in ("RANK", "LOCAL_RANK")}, ns_pid=1, ppid=700,
                       cgroup=pod_cgroup(POD_UID), cmdline=TORCHRUN)
            write_proc(proc, 700, {}, cmdline=("/usr/bin/containerd-shim-runc-v2",),
                       cgroup="0::/system.slice/containerd.service\n", uid=0)
        for local in range(8):
            rank = host_index * 8 + local
            if host_index == 0:
                file_pid = host_pid = 41000 + local
                write_proc(proc, host_pid, rank_env(job, rank, n_ranks, local, host), **hosts[host]["vouch"])
            else:
                file_pid, host_pid = 17 + local, 52000 + local
                write_proc(proc, host_pid, rank_env(job, rank, n_ranks, local, "pod-1"), ns_pid=file_pid,
                           **hosts[host]["vouch"])
            hosts[host]["pids"][rank] = file_pid
            header = {"id": COMM_ID, **({"comm_name": comm_name} if comm_name else {}), "rank": rank,
                      "n_ranks": n_ranks, "nnodes": 2}
            lines = []
            for start in range(0, n_colls, dump_every):
                at = at_us[start] if at_us is not None else start * us_per_coll
                dump_us = START_US + at + rank * 37  # each rank dumps on its own schedule
                version = "v4.0" if layout == "per-line" else "v4.3"
                metadata = {"inspector_output_format_version": version, "git_rev": "", "rec_mechanism":
                            "nccl_profiler_interface", "dump_timestamp_us": dump_us,
                            "hostname": f"pod-{host_index}" if host_index else host, "pid": file_pid}
                if layout == "marker":
                    lines.append({"header": header, "metadata": metadata,
                                  "dump_stats": {"coll_dropped": 0, "p2p_dropped": 0}})
                for sn in range(start, min(start + dump_every, n_colls)):
                    perf = _perf(sn, times[sn][rank], size)
                    lines.append({"header": header, "metadata": metadata, "coll_perf": perf}
                                 if layout == "per-line" else {"coll_perf": perf})
            name = f"{'pod-1' if host_index else host}-pid{file_pid}.log"
            text = "".join(json.dumps(line) + "\n" for line in lines)
            if split_last_line:
                text = text[:-40]  # the dump thread is mid-write: a partial last line
            (d / name).write_text(text)
    return hosts


def ras_status(counts: dict[int, int], *, hosts: dict[int, str], pids: dict[int, int],
               missing: tuple[int, ...] = ()) -> dict:
    """A JSON STATUS answer (client_support.cc) for one 16-rank communicator: ``counts`` rank -> launched."""
    funcs = ("Broadcast", "Reduce", "AllGather", "ReduceScatter", "AllReduce", "SendRecv", "Send", "Recv",
             "AllToAll")
    ranks = [{"rank": r, "host": hosts[r], "pid": pids[r], "cuda_dev": r % 8, "nvml_dev": r % 8,
              "status": {"init_state": 0, "async_error": 0, "finalize_called": False, "destroy_flag": False,
                         "abort_flag": False},
              "collective_counts": {f: (c if f == "AllReduce" else 0) for f in funcs}}
             for r, c in sorted(counts.items()) if r not in missing]
    miss = [{"rank": r, "host": hosts[r], "pid": pids[r], "cuda_dev": r % 8, "nvml_dev": r % 8,
             "status": {"unresponsive": True, "considered_dead": False}} for r in missing]
    return {"nccl_version": "2.30.7", "cuda_runtime_version": 12080, "cuda_driver_version": 12080,
            "timestamp": "2026-12-01 17:00:00", "communicators_count": 1,
            "communicators": [{"hash": "0x7f8c496ae9f661", "secondary_hash": "0x1a2b:0x3c4d", "size": len(counts),
                               "ranks_count": len(ranks), "missing_ranks_count": len(miss), "ranks": ranks,
                               "missing_ranks": miss}],
            "ras": {"collection_time_sec": 0.004, "timeouts_count": 0}}


class RasServer:
    """A local TCP server speaking RAS's client protocol (src/ras/client_support.cc rasClientEventLoop):
    ``CLIENT PROTOCOL n`` -> ``SERVER PROTOCOL 2``, ``SET FORMAT json|text`` -> ``OK``, ``STATUS`` -> the answer
    of ``answer()`` (pretty-printed JSON as NCCL writes it, or ``text``), then close."""

    def __init__(self, answer, *, json_format: bool = True) -> None:
        self.answer = answer
        self.json_format = json_format
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.addr = f"127.0.0.1:{self.sock.getsockname()[1]}"
        self.queries = 0
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                f = conn.makefile("rb")
                for raw in f:
                    cmd = raw.decode().strip()
                    if cmd.upper().startswith("CLIENT PROTOCOL"):
                        conn.sendall(b"SERVER PROTOCOL 2\n")
                    elif cmd.upper().startswith("SET FORMAT"):
                        fmt = cmd.split()[-1].lower()
                        conn.sendall(b"OK\n" if fmt == "text" or (fmt == "json" and self.json_format)
                                     else f"ERROR: Invalid format {fmt}\n".encode())
                    elif cmd.upper() == "STATUS":
                        self.queries += 1
                        conn.sendall(json.dumps(self.answer(), indent=2).encode() + b"\n")
                        conn.shutdown(socket.SHUT_RDWR)  # RAS closes the connection after the answer
                        break
                f.close()

    def close(self) -> None:
        self.sock.close()
