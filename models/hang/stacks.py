"""Stacks on demand: the stack request the worker sends to a hung job's ranks, and how an answer
(a ``stack`` event, models/wire/events.py) reads in an alert.

The worker asks on the control topic (``<prefix>control``, keyed by job); each asked rank's
monitor answers on the events topic (producers/stacks.py). See docs/hang.md.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..wire.events import StackEvent

#: Frames of the training thread quoted per rank in ``evidence.stacks`` (the innermost ones).
ALERT_FRAMES = 8


@dataclass(frozen=True, slots=True)
class StackRequest:
    """Ask ``ranks`` of ``job`` for their Python stacks (``request_id`` ties the answers to it)."""

    job: str
    ranks: tuple[int, ...]
    request_id: str
    ts: float

    def to_dict(self) -> dict[str, Any]:
        return {"v": 1, "kind": "stack_request", "job": self.job, "ranks": list(self.ranks),
                "request_id": self.request_id, "ts": self.ts}


def parse_request(obj: Any) -> StackRequest | None:
    """A control-topic record as a stack request, or None when it is something else or malformed."""
    if not isinstance(obj, dict) or obj.get("v") != 1 or obj.get("kind") != "stack_request":
        return None
    job, ranks, rid, ts = obj.get("job"), obj.get("ranks"), obj.get("request_id"), obj.get("ts")
    if not isinstance(job, str) or not isinstance(rid, str) or not isinstance(ranks, list):
        return None
    if not all(isinstance(r, int) and not isinstance(r, bool) for r in ranks):
        return None
    return StackRequest(job=job, ranks=tuple(ranks), request_id=rid,
                        ts=float(ts) if isinstance(ts, (int, float)) and not isinstance(ts, bool) else 0.0)


def frame_lines(event: StackEvent, limit: int = ALERT_FRAMES) -> list[str]:
    """The innermost ``limit`` frames of the rank's training thread (its first thread), innermost
    last, as ``"file:line function"``."""
    if not event.threads:
        return []
    _, frames = event.threads[0]
    return [f"{file}:{line} {function}" for file, line, function in frames[-limit:]]


def culprit_stack(evidence: dict[str, Any]) -> tuple[str, list[str]] | None:
    """``(rank, frames)`` of the first culprit in a hang alert's ``evidence.culprits`` that answered
    (``evidence.stacks``), or None: a waiting rank's stack is never shown as the culprit's. What
    ``stepwatch status`` and the dashboard show."""
    stacks = evidence.get("stacks") if isinstance(evidence, dict) else None
    if not isinstance(stacks, dict) or not stacks:
        return None
    culprits = evidence.get("culprits")
    if isinstance(culprits, list):  # a hang alert: culprits only
        ranks = [str(c.get("rank")) for c in culprits if isinstance(c, dict)]
        rank = next((r for r in ranks if r in stacks), None)
        if rank is None:
            return None
    else:
        rank = next(iter(stacks))
    lines = stacks[rank]
    return str(rank), [str(line) for line in lines] if isinstance(lines, list) else []
