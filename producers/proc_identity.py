"""Which job and rank a process on this node is, read from procfs by the node agent, and who vouches for it.

For jobs that run no stepwatch code the agent learns a process's job and rank from its
environment, ``/proc/<pid>/environ``, as the launcher set it. Any user can set any environment,
so the agent speaks for a process only when a launcher it can vouch for started it
(docs/security.md, "The node-local attacker"; docs/zero-code.md, "Who the agent speaks for"):

* **Slurm**: the process is in a Slurm job's cgroup (``/proc/<pid>/cgroup``, proc(5): one
  ``hierarchy-ID:controllers:path`` line per hierarchy), rooted where only slurmd creates cgroups:
  cgroup v2 ``/system.slice/slurmstepd.scope/job_<id>/step_<step>/...``, v1
  ``/slurm/uid_<uid>/job_<id>/step_<step>/...`` (its uid the process's). The job is the cgroup's:
  the environment may name it with or without its step (``STEPWATCH_JOB`` from the TaskProlog,
  ``SLURM_STEP_ID``), never name another one (then the cgroup's name is taken).
* **Kubernetes**: the process is in a pod's cgroup (``/kubepods[.slice]/.../pod<uid>/...``); the job
  is the one the environment of its container's first process names (the pod spec's, which a
  process inside cannot change), and the process must name the same.
* **torchrun**: an ancestor (``PPid`` of ``/proc/<pid>/stat``, proc(5) field 4) is torchrun
  (``torchrun`` or ``python -m torch.distributed.run``) run by the same uid (``Uid:`` of
  ``/proc/<pid>/status``). The job is the one its environment names; on this node a name belongs
  to one user: when processes of two uids claim it, a scheduler's (Slurm, Kubernetes) wins over
  torchrun's, then the one that started first (``starttime``, field 22 of ``stat``).

Everything else (a process with ``STEPWATCH_JOB`` and ``RANK`` set by hand, a launcher of another
uid) is refused, counted and logged once (producers/refusals.py). In a container the pid NCCL
writes (Inspector file names, RAS answers) is the container's: :class:`ProcTable` maps it to the
host pid through the ``NSpid`` line of ``/proc/<pid>/status`` (Linux >= 4.1).

``job_identity`` is the rank monitor's (producers/job_identity.py) wherever a launcher names the job.
"""

from __future__ import annotations

import enum
import logging
import os
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from .job_identity import job_identity as shared_job_identity
from .refusals import Refusal, Refusals

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



class Launcher(enum.Enum):
    """What vouches for a process's job, strongest first."""

    SLURM = "slurm"
    KUBERNETES = "kubernetes"
    TORCHRUN = "torchrun"


#: A scheduler's word beats a user's launcher when two uids claim one job name.
_STRENGTH = {Launcher.SLURM: 0, Launcher.KUBERNETES: 0, Launcher.TORCHRUN: 1}


@dataclass(frozen=True, slots=True)
class ProcInfo:
    """A training process: its host pid, job, global rank, owner, and what vouched for it."""

    pid: int  # host pid
    job: str
    rank: int
    world_size: int | None
    hostname: str | None  # HOSTNAME in its environment (a container's host name)
    uid: int  # real uid (Uid: of /proc/<pid>/status)
    launcher: Launcher
    scope: str  # the Slurm job, the pod, or the torchrun pid that vouched
    start: int  # starttime, clock ticks after boot (stat field 22): with pid, names the process


@dataclass(frozen=True, slots=True)
class ProcStat:
    """What procfs says of a process that its owner cannot change."""

    uid: int
    ppid: int
    start: int


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


def _status_lines(proc_root: Path, pid: int) -> list[str] | None:
    try:
        return (proc_root / str(pid) / "status").read_text(errors="replace").splitlines()
    except OSError:
        return None


def ns_pids(proc_root: Path, pid: int) -> tuple[int, ...] | None:
    """The ``NSpid`` line of ``/proc/<pid>/status``: the pid in each nested pid namespace, outermost first."""
    lines = _status_lines(proc_root, pid)
    if lines is None:
        return None
    for line in lines:
        if line.startswith("NSpid:"):
            try:
                return tuple(int(x) for x in line.split()[1:])
            except ValueError:
                return None
    return (pid,)  # kernels before 4.1: no namespaces to map


def proc_stat(proc_root: Path, pid: int) -> ProcStat | None:
    """Owner (``Uid:`` of status, the real uid), parent and start time (fields 4 and 22 of stat: after the
    command in parentheses, which may itself hold spaces and parentheses, hence the last ``)``)."""
    lines = _status_lines(proc_root, pid)
    try:
        raw = (proc_root / str(pid) / "stat").read_text(errors="replace")
    except OSError:
        return None
    uid = next((line.split()[1] for line in lines or () if line.startswith("Uid:") and len(line.split()) > 1), None)
    fields = raw[raw.rfind(")") + 1:].split()
    try:
        return ProcStat(uid=int(uid), ppid=int(fields[1]), start=int(fields[19]))
    except (TypeError, ValueError, IndexError):
        return None


def cgroup_paths(proc_root: Path, pid: int) -> list[str]:
    """The path of each line of ``/proc/<pid>/cgroup`` (relative to the reader's cgroup namespace root: a
    process outside it shows leading ``/..`` components)."""
    try:
        text = (proc_root / str(pid) / "cgroup").read_text(errors="replace")
    except OSError:
        return []
    return [line.split(":", 2)[2] for line in text.splitlines() if line.count(":") >= 2]


_JOB = re.compile(r"^job_(\d+)$")
_STEP = re.compile(r"^step_(\w+)$")
_UID = re.compile(r"^uid_(\d+)$")
_POD = re.compile(r"^(?:kubepods(?:-\w+)?-)?pod"
                  r"([0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12})(?:\.slice)?$")


def slurm_scope(path: str, uid: int) -> tuple[str, str | None] | None:
    """``(job id, step)`` of a Slurm job cgroup path, or None. Only where slurmd roots its cgroups: the
    segments before ``slurmstepd.scope`` (v2) or ``slurm[_<node>]`` (v1) may only be ``..``/``system.slice``,
    so a cgroup a user created in a tree delegated to them (``user.slice/...``, the job's own ``user``
    subtree) never matches."""
    segs = [s for s in path.split("/") if s]
    i = 0
    while i < len(segs) and segs[i] in ("..", "system.slice"):
        i += 1
    if i >= len(segs):
        return None
    top = segs[i]
    rest = segs[i + 1:]
    if top.endswith("slurmstepd.scope"):
        pass
    elif top == "slurm" or top.startswith("slurm_"):
        m = _UID.match(rest[0]) if rest else None
        if m is None or int(m[1]) != uid:
            return None
        rest = rest[1:]
    else:
        return None
    m = _JOB.match(rest[0]) if rest else None
    if m is None:
        return None
    step = _STEP.match(rest[1]) if len(rest) > 1 else None
    return m[1], (step[1] if step else None)


def pod_scope(path: str) -> str | None:
    """The pod uid of a Kubernetes pod cgroup path (cgroupfs ``/kubepods/<qos>/pod<uid>/<ctr>`` or systemd
    ``/kubepods.slice/kubepods-<qos>.slice/kubepods-<qos>-pod<uid_>.slice/<ctr>.scope``), or None."""
    segs = [s for s in path.split("/") if s and s != ".."]
    if not segs or not segs[0].startswith("kubepods"):
        return None
    for seg in segs[:3]:
        m = _POD.match(seg)
        if m:
            return m[1].replace("_", "-")
        if not seg.startswith("kubepods") and seg not in ("burstable", "besteffort", "guaranteed"):
            return None
    return None


#: A launcher's command line: torchrun's console script, or its module.
_TORCHRUN_MODULES = ("torch.distributed.run", "torch.distributed.launch")


def is_torchrun(argv: list[str]) -> bool:
    if not argv:
        return False
    if os.path.basename(argv[0]) == "torchrun":
        return True
    if len(argv) > 1 and os.path.basename(argv[1]) == "torchrun":  # python /usr/bin/torchrun ...
        return True
    return any(a == "-m" and b in _TORCHRUN_MODULES for a, b in zip(argv, argv[1:]))


def cmdline(proc_root: Path, pid: int) -> list[str]:
    try:
        raw = (proc_root / str(pid) / "cmdline").read_bytes()
    except OSError:
        return []
    return [a.decode(errors="replace") for a in raw.split(b"\0") if a]


class ProcTable:
    """Maps the pid NCCL wrote (the container's) to the job and rank of the host process, for the processes a
    launcher vouches for (the module's docstring); every refusal goes to ``refusals``."""

    #: Seconds a scan of every process's claim is reused (the check that a job name is one user's).
    CLAIMS_TTL = 1.0
    #: Ancestors followed up from a process looking for its launcher.
    MAX_DEPTH = 64

    def __init__(self, proc_root: str | Path = "/proc", *, refusals: Refusals | None = None) -> None:
        self.proc = Path(proc_root)
        self.refusals = refusals if refusals is not None else Refusals()
        self._cache: dict[tuple[int, str | None], ProcInfo] = {}
        self._claims: dict[str, ProcInfo] = {}
        self._claims_at = float("-inf")

    def alive(self, pid: int) -> bool:
        return (self.proc / str(pid)).is_dir()

    def still(self, info: ProcInfo) -> bool:
        """The same process is still there (a pid reused by another process is not)."""
        st = proc_stat(self.proc, info.pid)
        return st is not None and st.start == info.start

    def pids(self) -> list[int]:
        try:
            return [int(name) for name in os.listdir(self.proc) if name.isdigit()]
        except OSError:
            return []

    # -- vouching -------------------------------------------------------------------------------

    def _scope(self, pid: int, st: ProcStat) -> tuple[Launcher, str, str | None] | None:
        """``(launcher, scope, slurm step)`` of the cgroup the process is in, if a scheduler's."""
        found = set()
        for path in cgroup_paths(self.proc, pid):
            slurm = slurm_scope(path, st.uid)
            if slurm is not None:
                found.add((Launcher.SLURM, slurm[0], slurm[1]))
                continue
            pod = pod_scope(path)
            if pod is not None:
                found.add((Launcher.KUBERNETES, pod, path))
        scopes = {(launcher, scope) for launcher, scope, _ in found}
        if len(scopes) != 1:
            return None  # none, or hierarchies that disagree: nothing to trust
        return next(iter(sorted(found, key=lambda f: str(f[2]))))

    def _container_init(self, pid: int, st: ProcStat, path: str) -> int:
        """The first process of ``pid``'s container: its topmost ancestor in the same cgroup."""
        top = pid
        for _ in range(self.MAX_DEPTH):
            parent = proc_stat(self.proc, st.ppid) if st.ppid > 0 else None
            if parent is None or path not in cgroup_paths(self.proc, st.ppid):
                return top
            top, st = st.ppid, parent
        return top

    def _torchrun(self, st: ProcStat) -> int | None:
        """The pid of a torchrun ancestor run by the same uid, or None."""
        ppid = st.ppid
        for _ in range(self.MAX_DEPTH):
            if ppid <= 1:
                return None
            parent = proc_stat(self.proc, ppid)
            if parent is None:
                return None
            if parent.uid == st.uid and is_torchrun(cmdline(self.proc, ppid)):
                return ppid
            ppid = parent.ppid
        return None

    def vouch(self, pid: int, *, quiet: bool = False, report_for: str | None = None) -> ProcInfo | None:
        """The process ``pid`` (host pid) if a launcher vouches for its job and it has a rank, else None (a
        refusal counted unless ``quiet``, but for a process claiming ``report_for``: scans look at every
        process of the node, and count those that claim the job asked for)."""
        env = read_environ(self.proc, pid)
        if env is None:
            return None
        claimed, rank = job_identity(env), rank_of(env)
        if claimed is None or rank is None:
            return None  # not a training rank: nothing claimed, nothing refused
        quiet = quiet and claimed != report_for
        st = proc_stat(self.proc, pid)
        if st is None:
            return None
        scope = self._scope(pid, st)
        if scope is not None and scope[0] is Launcher.SLURM:
            launcher, job_id, step = scope
            mine = shared_job_identity(env).job
            # The cgroup names the job; the environment (the TaskProlog's STEPWATCH_JOB, SLURM_STEP_ID) may name it
            # with or without its step, as the rank monitor does, never name another one.
            if mine == job_id or mine.startswith(job_id + "."):
                job = mine
            else:
                job = f"{job_id}.{step}" if step is not None and step.isdigit() else job_id
            scope_name = f"slurm job {job_id}"
        elif scope is not None:
            launcher, pod, path = scope
            init = self._container_init(pid, st, path)
            init_env = read_environ(self.proc, init) if init != pid else env
            job = job_identity(init_env or {})
            if job != claimed:
                if not quiet:
                    self.refusals.refuse(Refusal.NAME_NOT_VOUCHED,
                                         f"pid {pid} claims job {claimed!r}; its container (pod {pod}) was started "
                                         f"for {job!r}")
                return None
            scope_name = f"pod {pod}"
        else:
            launcher_pid = self._torchrun(st)
            if launcher_pid is None:
                if not quiet:
                    self.refusals.refuse(Refusal.UNVOUCHED,
                                         f"pid {pid} (uid {st.uid}) claims job {claimed!r} rank {rank} but no Slurm "
                                         f"job cgroup, pod cgroup or torchrun of its own uid vouches for it")
                return None
            launcher, job, scope_name = Launcher.TORCHRUN, claimed, f"torchrun pid {launcher_pid}"
        ws = env.get("WORLD_SIZE")
        return ProcInfo(pid=pid, job=job, rank=rank, world_size=int(ws) if ws and ws.isdigit() else None,
                        hostname=env.get("HOSTNAME"), uid=st.uid, launcher=launcher, scope=scope_name,
                        start=st.start)

    def _holder(self, job: str) -> ProcInfo | None:
        """Who holds the name ``job`` on this node: of the vouched processes claiming it, a scheduler's before
        torchrun's, then the one started first."""
        now = time.monotonic()
        if now - self._claims_at >= self.CLAIMS_TTL:
            claims: dict[str, ProcInfo] = {}
            for pid in self.pids():
                info = self.vouch(pid, quiet=True)
                if info is None:
                    continue
                best = claims.get(info.job)
                if best is None or (_STRENGTH[info.launcher], info.start, info.pid) < (
                        _STRENGTH[best.launcher], best.start, best.pid):
                    claims[info.job] = info
            self._claims, self._claims_at = claims, now
        return self._claims.get(job)

    def _owned(self, info: ProcInfo) -> bool:
        """True unless another user's process holds ``info``'s job name on this node (refused, counted)."""
        holder = self._holder(info.job)
        if holder is None or holder.uid == info.uid:
            return True
        self.refusals.refuse(Refusal.NAME_HELD_BY_OTHER_USER,
                             f"pid {info.pid} (uid {info.uid}, {info.scope}) claims job {info.job!r}, held on this "
                             f"node by uid {holder.uid} ({holder.scope})")
        return False

    def info(self, pid: int) -> ProcInfo | None:
        """The vouched process ``pid`` (host pid) whose job name is its user's on this node, else None."""
        info = self.vouch(pid)
        return info if info is not None and self._owned(info) else None

    def processes_of(self, job: str) -> dict[int, ProcInfo]:
        """This node's vouched processes of ``job`` by rank (scanned from /proc)."""
        out = {}
        for pid in self.pids():
            info = self.vouch(pid, quiet=True, report_for=job)
            if info is not None and info.job == job and self._owned(info):
                out[info.rank] = info
        return out

    def lookup(self, pid: int, hostname: str | None = None) -> ProcInfo | None:
        """The process NCCL knows as ``pid`` (on host ``hostname``, the name in the file or answer).

        The host's own process with that pid when it is not in a nested namespace; else the one
        process whose innermost ``NSpid`` is ``pid`` (several: the one whose ``HOSTNAME`` matches)."""
        key = (pid, hostname)
        hit = self._cache.get(key)
        if hit is not None and self.still(hit):
            return hit
        direct = ns_pids(self.proc, pid)
        found = self.info(pid) if direct is not None and len(direct) == 1 else None
        if found is not None and hostname and found.hostname and found.hostname != hostname:
            found = None  # the host's pid of that number is another process: look in the namespaces
        if found is None:
            candidates = []
            for entry in self.pids():
                nested = ns_pids(self.proc, entry)
                if nested and len(nested) > 1 and nested[-1] == pid:
                    candidates.append(entry)
            infos = [i for i in (self.info(c) for c in candidates) if i is not None]
            if len(infos) > 1 and hostname:
                infos = [i for i in infos if i.hostname == hostname]
            if len(infos) == 1:
                found = infos[0]
        if found is not None:
            self._cache[key] = found
            if len(self._cache) > 4096:  # bounded: the oldest mappings go first
                self._cache.pop(next(iter(self._cache)))
        return found
