"""A pipeline-parallel job from first principles (not the project's simulator): ``stages`` x ``dp`` ranks.

Rank ``s * dp + d`` is stage ``s`` of pipeline replica ``d``. Each step runs a GPipe schedule of
``micro`` micro-batches per replica: stage ``s`` computes the forward of micro-batch ``j`` once it
finished ``j - 1`` and received ``j`` from stage ``s - 1`` (``xfer`` seconds after that one sent it),
then the backwards in reverse (stage ``s`` waits for stage ``s + 1``); then each stage's ranks
all-reduce their gradients across replicas (``allreduce`` seconds after the last of them arrives),
and the next step starts when every rank is done (the optimizer's global grad-norm reduction).

Events, as a Megatron-style instrumented job would send them:

* ``recv`` and ``send`` collectives on the replica's pipeline group ``pp<d>``, numbered per rank
  and group (stages do different numbers of them, so numbers do not match across ranks), with
  ``start_ts`` (when the rank posted it) and ``duration``: as NCCL's, a transfer starts once both
  sides posted (rendezvous) and both return when it is done, so each side's duration is its wait
  for the other side plus the transfer (``sends=False``: receives only, as some jobs record);
* ``all_reduce`` on the stage's data-parallel group ``dp<s>``;
* step events with ``group`` = the stage, ``compute_time`` (forward + backward),
  ``comm_time`` (receive waits + all-reduce) and ``step_time``.

Faults: ``slow_rank`` computes ``slow_factor`` times slower from ``onset``; ``slow_link`` makes every
p2p transfer ``link_factor`` times slower from ``onset`` (the network itself). ``events()`` yields
``(true_time, Event)`` in true-time order.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from stepwatch.models.wire.events import CollectiveEvent, StepEvent

T0 = 1_760_000_000.0


@dataclass
class PipelineJob:
    name: str = "pp"
    stages: int = 4
    dp: int = 8
    micro: int = 4
    steps: int = 120
    seed: int = 0
    fwd: float = 0.05  # seconds per micro-batch forward (backward is twice that)
    xfer: float = 0.004  # p2p transfer of one activation
    allreduce: float = 0.05
    per_node: int = 8
    slow_rank: int | None = None
    slow_factor: float = 1.3
    slow_link: bool = False
    link_factor: float = 3.0
    onset: int = 60
    sends: bool = True
    #: "gpipe" (every forward, then every backward) or "1f1b" (PipeDream-flush as Megatron runs it: stage ``s`` does
    #: ``stages - s - 1`` warm-up forwards, then alternates one forward and one backward, then the cool-down
    #: backwards; its sends are non-blocking, as ``batch_isend_irecv``: a send returns when the receiver has it)
    schedule: str = "gpipe"
    #: The process group p2p events name: "replica" (``pp<d>``, the replica's pipeline group) or "pair" (``pp<d>.<s>-<t>``
    #: from stage ``s`` to stage ``t``: NCCL runs each pair's p2p on a communicator of its own, and a recorder at
    #: the NCCL level names that)
    p2p_groups: str = "replica"
    #: 1F1B with communication overlapped (Megatron's ``overlap_p2p_comm``): a rank posts the receive of its next op
    #: when it starts the current one, so every receive's duration spans the op computed meanwhile and the wait
    overlap: bool = False

    def rank(self, s: int, d: int) -> int:
        return s * self.dp + d

    def node(self, rank: int) -> str:
        return f"pp-node-{rank // self.per_node:02d}"


def events(job: PipelineJob) -> list[tuple[float, object]]:
    rng = np.random.default_rng(job.seed)
    S, D, M = job.stages, job.dp, job.micro
    n = S * D
    out: list[tuple[float, object]] = []
    p2p_seq = np.zeros(n, dtype=int)
    dp_seq = 0
    t = T0

    def pair(sender: int, sent: float, receiver: int, posted: float, xfer: float, d: int) -> float:
        """A rendezvous transfer: returns when the data is on the receiver."""
        done = max(sent, posted) + xfer * (1 + 0.05 * rng.random())
        pg = f"pp{d}" if job.p2p_groups == "replica" else f"pp{d}.{sender // D}-{receiver // D}"
        if job.sends:
            p2p(sender, "send", sent, done, pg)
        p2p(receiver, "recv", posted, done, pg)
        return done

    def p2p(rank: int, op: str, posted: float, done: float, pg: str) -> None:
        out.append((done, CollectiveEvent(job=job.name, rank=rank, seq=int(p2p_seq[rank]), op=op, ts=done,
                                          duration=done - posted, node=job.node(rank), pg=pg,
                                          bytes=8 * 2**20, start_ts=posted)))
        p2p_seq[rank] += 1

    for step in range(job.steps):
        slow = step >= job.onset
        xfer = job.xfer * (job.link_factor if slow and job.slow_link else 1.0)
        factor = np.ones(n)
        if slow and job.slow_rank is not None:
            factor[job.slow_rank] = job.slow_factor
        fwd = job.fwd * factor[:, None] * (1 + 0.02 * rng.standard_normal((n, M)))
        bwd = 2 * job.fwd * factor[:, None] * (1 + 0.02 * rng.standard_normal((n, M)))
        compute = fwd.sum(axis=1) + bwd.sum(axis=1)
        busy_until = np.full(n, t)  # each rank's clock: when it is free
        f_end = np.zeros((n, M))
        if job.schedule == "1f1b":
            one_f_one_b(job, busy_until, fwd, bwd, xfer, pair)
        for d in range(D if job.schedule == "gpipe" else 0):  # forwards
            for j in range(M):
                for s in range(S):
                    r = job.rank(s, d)
                    ready = busy_until[r]
                    if s > 0:
                        up = job.rank(s - 1, d)
                        ready = pair(up, f_end[up, j], r, ready, xfer, d)
                        busy_until[up] = max(busy_until[up], ready)  # the sender waited for the receiver
                    f_end[r, j] = ready + fwd[r, j]
                    busy_until[r] = f_end[r, j]
        b_end = np.zeros((n, M))
        for d in range(D if job.schedule == "gpipe" else 0):  # backwards, last stage first
            for j in range(M):
                for s in reversed(range(S)):
                    r = job.rank(s, d)
                    ready = busy_until[r]
                    if s < S - 1:
                        down = job.rank(s + 1, d)
                        ready = pair(down, b_end[down, j], r, ready, xfer, d)
                        busy_until[down] = max(busy_until[down], ready)
                    b_end[r, j] = ready + bwd[r, j]
                    busy_until[r] = b_end[r, j]
        done = np.zeros(n)
        for s in range(S):  # data-parallel gradient all-reduce per stage
            ranks = [job.rank(s, d) for d in range(D)]
            last = max(busy_until[r] for r in ranks)
            end = last + job.allreduce * (1 + 0.03 * rng.standard_normal())
            for r in ranks:
                out.append((end, CollectiveEvent(job=job.name, rank=r, seq=dp_seq, op="all_reduce", ts=end,
                                                 duration=end - busy_until[r], node=job.node(r), pg=f"dp{s}",
                                                 bytes=64 * 2**20, start_ts=busy_until[r], step=step)))
                done[r] = end + 0.002 * rng.random()
        dp_seq += 1
        for r in range(n):
            out.append((done[r], StepEvent(job=job.name, rank=r, step=step, ts=float(done[r]),
                                           step_time=float(done[r] - t), node=job.node(r), gpu=r % job.per_node,
                                           world_size=n, group=f"stage{r // D}", compute_time=float(compute[r]),
                                           comm_time=float(done[r] - t - compute[r]),
                                           phase="warmup" if step < 5 else "train")))
        t = float(done.max())
    out.sort(key=lambda x: x[0])
    return out


def one_f_one_b(job: PipelineJob, busy_until: np.ndarray, fwd: np.ndarray, bwd: np.ndarray, xfer: float,
                pair) -> None:
    """One step's 1F1B schedule of every replica: each rank runs its ops in order, an op once its input arrived
    (the previous stage's forward, the next stage's backward); ``busy_until`` ends as each rank's last op's end."""
    S, M = job.stages, job.micro
    for d in range(job.dp):
        ops = []
        for s in range(S):
            warm = min(S - s - 1, M)
            order = [("F", j) for j in range(warm)]
            for k in range(M - warm):
                order += [("F", warm + k), ("B", k)]
            order += [("B", j) for j in range(M - warm, M)]
            ops.append(order)
        done: dict[tuple[str, int, int], float] = {}  # (op, stage, micro-batch) -> end
        at = [0] * S
        started: list[float | None] = [None] * S  # when each stage's current op started
        while any(at[s] < len(ops[s]) for s in range(S)):
            moved = False
            for s in range(S):
                while at[s] < len(ops[s]):
                    kind, j = ops[s][at[s]]
                    src = s - 1 if kind == "F" else s + 1
                    r = job.rank(s, d)
                    ready = busy_until[r]
                    if 0 <= src < S:
                        if (kind, src, j) not in done:
                            break  # its input is not computed yet: another stage first
                        posted = started[s] if job.overlap and started[s] is not None else ready
                        ready = max(ready, pair(job.rank(src, d), done[(kind, src, j)], r, posted, xfer, d))
                    started[s] = ready
                    end = ready + (fwd[r, j] if kind == "F" else bwd[r, j])
                    done[(kind, s, j)] = busy_until[r] = end
                    at[s] += 1
                    moved = True
            assert moved, "1F1B schedule deadlocked"
