"""The events a rank's monitor sends, as docs/events.md writes them (only fields it documents, plus ``pid``,
an extra field: unknown fields are kept)."""

from __future__ import annotations

from dataclasses import dataclass

#: 2026-01-01T00:00:00Z: the true clock of every generated job starts here.
EPOCH = 1_767_225_600.0


@dataclass(frozen=True)
class Sent:
    """One event ready to leave rank ``sender``'s process at true time ``at`` (sender -1: a job-wide event
    that the launcher's rank 0 sends)."""

    at: float
    sender: int
    event: dict


def _r(x: float) -> float:
    return round(x, 6)


def step(job: str, rank: int, step_no: int, *, ts: float, step_time: float, compute: float, data: float,
         comm: float, node: str, gpu: int, world: int, pid: int, group: int | None = None) -> dict:
    event = {"v": 1, "kind": "step", "job": job, "rank": rank, "step": step_no, "ts": _r(ts),
             "step_time": _r(step_time), "compute_time": _r(compute), "data_time": _r(data), "comm_time": _r(comm),
             "node": node, "gpu": gpu, "world_size": world, "tokens": 8192, "pid": pid}
    if group is not None:
        event["group"] = group
    return event


def collective(job: str, rank: int, seq: int, op: str, *, ts: float, duration: float, node: str, step_no: int,
               pg: str = "default", nbytes: int = 268_435_456) -> dict:
    return {"v": 1, "kind": "collective", "job": job, "rank": rank, "seq": seq, "op": op, "ts": _r(ts),
            "duration": _r(duration), "start_ts": _r(ts - duration), "node": node, "step": step_no, "pg": pg,
            "bytes": nbytes}


def heartbeat(job: str, rank: int, *, ts: float, last_step: int, started: int, completed: int, node: str,
              pid: int, phase: str | None = None, groups: dict[str, tuple[int, int, list[int] | None]] | None = None
              ) -> dict:
    pgs = {"default": {"started": started, "completed": completed}}
    for name, (g_started, g_completed, members) in (groups or {}).items():
        pgs[name] = {"started": g_started, "completed": g_completed}
        if members is not None:
            pgs[name]["ranks"] = members
    event = {"v": 1, "kind": "heartbeat", "job": job, "rank": rank, "ts": _r(ts), "step": last_step, "node": node,
             "seq_started": started, "seq_completed": completed, "pgs": pgs, "pid": pid}
    if phase is not None:
        event["phase"] = phase
    return event


def phase(job: str, name: str, *, ts: float, step_no: int | None = None) -> dict:
    event = {"v": 1, "kind": "phase", "job": job, "ts": _r(ts), "phase": name}
    if step_no is not None:
        event["step"] = step_no
    return event
