"""The ``nccl_window`` wire event: one rank's NCCL Inspector records of one window of collectives.

Sent by the node agent (producers/nccl_inspector.py) for jobs that run no stepwatch code:
per rank, communicator and collective type, one event per window of ``window_size``
consecutive ``coll_sn`` (the window is ``coll_sn // window_size``, the same on every rank of
the communicator, so the worker can line the ranks' windows up without comparing clocks).
Judged by models/steps/inspector.py; documented in docs/events.md.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .wire import InvalidEvent, _extra, _int, _num, _str


@dataclass(frozen=True, slots=True)
class NcclWindowEvent:
    job: str
    rank: int  # global rank (``RANK`` of the process)
    ts: float  # the latest dump timestamp of the window's records (the sender's clock)
    comm: str  # communicator: ``comm_name`` where NCCL writes one, else ``header.id``
    op: str  # ``coll_perf.coll``: AllReduce, AllGather, ReduceScatter, ...
    window: int  # ``coll_sn // window_size``
    window_size: int
    count: int  # records of the window this rank logged
    exec_sum: float  # seconds: sum of ``coll_exec_time_us`` (includes waiting for peers)
    exec_median: float  # seconds
    n_ranks: int  # ranks of the communicator (``header.n_ranks``)
    comm_rank: int | None = None  # ``header.rank``
    node: str | None = None
    bytes: int | None = None  # median ``coll_msg_size_bytes``
    source: str = "nccl_inspector"
    extra: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)
    kind = "nccl_window"


_FIELDS = frozenset("v kind job rank ts comm op window window_size count exec_sum exec_median n_ranks comm_rank "
                    "node bytes source".split())


def _parse_nccl_window(o: dict) -> NcclWindowEvent:
    count = _int(o, "count", required=True)
    n_ranks = _int(o, "n_ranks", required=True)
    window_size = _int(o, "window_size", required=True)
    if count < 1 or n_ranks < 1 or window_size < 1:
        raise InvalidEvent("'count', 'n_ranks' and 'window_size' must be at least 1")
    comm_rank = _int(o, "comm_rank", required=False)
    if comm_rank is not None and comm_rank >= n_ranks:
        raise InvalidEvent(f"comm_rank {comm_rank} is not below n_ranks {n_ranks}")
    return NcclWindowEvent(
        job=_str(o, "job", required=True),
        rank=_int(o, "rank", required=True),
        ts=_num(o, "ts", required=True),
        comm=_str(o, "comm", required=True),
        op=_str(o, "op", required=True),
        window=_int(o, "window", required=True),
        window_size=window_size,
        count=count,
        exec_sum=_num(o, "exec_sum", required=True, duration=True),
        exec_median=_num(o, "exec_median", required=True, duration=True),
        n_ranks=n_ranks,
        comm_rank=comm_rank,
        node=_str(o, "node", required=False),
        bytes=_int(o, "bytes", required=False),
        source=_str(o, "source", required=False) or "nccl_inspector",
        extra=_extra(o, _FIELDS),
    )


NCCL_PARSERS = {"nccl_window": _parse_nccl_window}
