"""Which job and rank a process on this node is, read from procfs by the node agent.

For jobs that run no stepwatch code the agent learns a process's job and rank from its
environment, ``/proc/<pid>/environ``, as the SRE's launcher set it. In a container the pid
NCCL writes (Inspector file names, RAS answers) is the container's: :class:`ProcTable` maps it
to the host pid through the ``NSpid`` line of ``/proc/<pid>/status`` (Linux >= 4.1).

``job_identity`` is the rank monitor's (producers/job_identity.py) wherever a launcher names the job.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from .job_identity import job_identity as shared_job_identity

log = logging.getLogger("stepwatch.agent")

#: Kubernetes: a Job's pods carry the job name in this label, set as an env var by the SRE's webhook
#: (docs/zero-code.md); a JobSet/PyTorchJob operator sets the others.
K8S_JOB_VARS = ("STEPWATCH_K8S_JOB", "JOB_NAME", "PYTORCHJOB_NAME", "JOBSET_NAME")


def job_identity(environ: Mapping[str, str]) -> str | None:
    """The job id of a process from its environment, the rank monitor's own (producers/job_identity.py: a job
    that also runs the callback is one job, not two), where a launcher says which job it is. Where none does,
    the monitor derives an id from the rendezvous start time, which only the job's store knows; the agent then
    takes a Kubernetes job variable, else ``MASTER_ADDR:MASTER_PORT`` (every rank of one run shares its
    rendezvous). None: unknown."""
    identity = shared_job_identity(environ)
    if not identity.guessed:
        return identity.job
    for name in K8S_JOB_VARS:
        if environ.get(name):
            return environ[name]
    addr, port = environ.get("MASTER_ADDR"), environ.get("MASTER_PORT")
    if addr and port:
        return f"{addr}:{port}"
    return None


def rank_of(environ: Mapping[str, str]) -> int | None:
    """The global rank: ``RANK`` (torchrun, every launcher that sets up torch.distributed). Never
    ``SLURM_PROCID``: under torchrun in Slurm it is the node's index, not the rank."""
    value = environ.get("RANK")
    if value is None or not value.strip().isdigit():
        return None
    return int(value)


@dataclass(frozen=True, slots=True)
class ProcInfo:
    """A training process: its host pid, job, global rank, and what it says about itself."""

    pid: int  # host pid
    job: str
    rank: int
    world_size: int | None
    hostname: str | None  # HOSTNAME in its environment (a container's host name)


def read_environ(proc_root: Path, pid: int) -> dict[str, str] | None:
    """``/proc/<pid>/environ`` as a dict; None when the process is gone or not readable."""
    try:
        raw = (proc_root / str(pid) / "environ").read_bytes()
    except OSError:
        return None
    out = {}
    for item in raw.split(b"\0"):
        key, sep, value = item.partition(b"=")
        if sep:
            out[key.decode(errors="replace")] = value.decode(errors="replace")
    return out


def ns_pids(proc_root: Path, pid: int) -> tuple[int, ...] | None:
    """The ``NSpid`` line of ``/proc/<pid>/status``: the pid in each nested pid namespace, outermost first."""
    try:
        text = (proc_root / str(pid) / "status").read_text(errors="replace")
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith("NSpid:"):
            try:
                return tuple(int(x) for x in line.split()[1:])
            except ValueError:
                return None
    return (pid,)  # kernels before 4.1: no namespaces to map


class ProcTable:
    """Maps the pid NCCL wrote (the container's) to the job and rank of the host process."""

    def __init__(self, proc_root: str | Path = "/proc") -> None:
        self.proc = Path(proc_root)
        self._cache: dict[tuple[int, str | None], ProcInfo] = {}

    def alive(self, pid: int) -> bool:
        return (self.proc / str(pid)).is_dir()

    def _info(self, host_pid: int) -> ProcInfo | None:
        env = read_environ(self.proc, host_pid)
        if env is None:
            return None
        job, rank = job_identity(env), rank_of(env)
        if job is None or rank is None:
            return None
        ws = env.get("WORLD_SIZE")
        return ProcInfo(pid=host_pid, job=job, rank=rank, world_size=int(ws) if ws and ws.isdigit() else None,
                        hostname=env.get("HOSTNAME"))

    def lookup(self, pid: int, hostname: str | None = None) -> ProcInfo | None:
        """The process NCCL knows as ``pid`` (on host ``hostname``, the name in the file or answer).

        The host's own process with that pid when it is not in a nested namespace; else the one
        process whose innermost ``NSpid`` is ``pid`` (several: the one whose ``HOSTNAME`` matches)."""
        key = (pid, hostname)
        hit = self._cache.get(key)
        if hit is not None and self.alive(hit.pid):
            return hit
        direct = ns_pids(self.proc, pid)
        found = self._info(pid) if direct is not None and len(direct) == 1 else None
        if found is not None and hostname and found.hostname and found.hostname != hostname:
            found = None  # the host's pid of that number is another process: look in the namespaces
        if found is None:
            candidates = []
            for entry in self._pids():
                nested = ns_pids(self.proc, entry)
                if nested and len(nested) > 1 and nested[-1] == pid:
                    candidates.append(entry)
            infos = [i for i in (self._info(c) for c in candidates) if i is not None]
            if len(infos) > 1 and hostname:
                infos = [i for i in infos if i.hostname == hostname]
            if len(infos) == 1:
                found = infos[0]
        if found is not None:
            self._cache[key] = found
            if len(self._cache) > 4096:  # bounded: the oldest mappings go first
                self._cache.pop(next(iter(self._cache)))
        return found

    def _pids(self) -> list[int]:
        try:
            return [int(name) for name in os.listdir(self.proc) if name.isdigit()]
        except OSError:
            return []
