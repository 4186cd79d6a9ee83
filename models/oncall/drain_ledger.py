"""The drain ledger: the drains each worker let through, shared so the drain budget is one budget fleet-wide.

Each worker gates the drains of the nodes it speaks for (models/oncall/budget.py). Alone, W workers would allow
W times the setting; so every drain a worker lets through is written to the compacted ``<prefix>drain-ledger``
topic (keyed by node; streams/drain_ledger.py) and every worker reads the whole topic back, counting the others'
drains in its own budget (``DrainBudget.observe``) before it decides the next one. A record says a node was
drained (``open``) by which worker, when, for which jobs; when no firing alert asks for it any more, a record with
``open`` false says it no longer counts at once (the hourly counts keep it for the hour).

The bound: drains read back before a decision are counted, so decisions taken one after another stay within the
budget fleet-wide. Two workers deciding within one ledger round trip (a record is sent within
``FLUSH_SECONDS`` and read back about as fast) each use the room they saw: in such a race window the fleet may
take at most ``per_hour + (W - 1) x per_hour`` drains in the worst case (every worker spending its whole room at
the same instant), and from the next decision on every worker sees them all and holds the rest.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import orjson

#: Seconds between two flushes of a worker's drain records to the ledger topic (the race window's first half).
FLUSH_SECONDS = 0.5
#: The topic (under the Kafka prefix): compacted, keyed by node.
TOPIC = "drain-ledger"
_MAX_JOBS = 64


@dataclass(frozen=True, slots=True)
class DrainRecord:
    """One node's drain state as one worker last decided it."""

    node: str
    worker: str
    at: float  # the deciding budget's clock (event time) when the node was drained
    jobs: tuple[str, ...] = ()
    open: bool = True  # False: no firing alert asks for the node any more (it no longer counts at once)

    def encode(self) -> bytes:
        return orjson.dumps({"v": 1, "kind": "drain", "node": self.node, "worker": self.worker, "at": self.at,
                             "jobs": list(self.jobs), "open": self.open})

    @classmethod
    def decode(cls, value: bytes | None) -> "DrainRecord":
        """A ledger record; ``ValueError`` saying why for anything else (a tombstone included)."""
        try:
            r = orjson.loads(value or b"")
        except orjson.JSONDecodeError as exc:
            raise ValueError(f"drain ledger: not JSON ({exc})") from None
        if not isinstance(r, dict) or r.get("kind") != "drain":
            raise ValueError("drain ledger: expected {\"kind\": \"drain\", ...}")
        node, worker, at, jobs = r.get("node"), r.get("worker"), r.get("at"), r.get("jobs") or []
        if not (isinstance(node, str) and 0 < len(node) <= 256 and isinstance(worker, str) and len(worker) <= 256):
            raise ValueError("drain ledger: node or worker missing or too long")
        if not isinstance(at, (int, float)) or isinstance(at, bool) or not math.isfinite(at):
            raise ValueError("drain ledger: at is not a finite time")
        if not isinstance(jobs, list):
            raise ValueError("drain ledger: jobs is not a list")
        return cls(node=node, worker=worker, at=float(at), jobs=tuple(str(j)[:256] for j in jobs[:_MAX_JOBS]),
                   open=r.get("open") is not False)
