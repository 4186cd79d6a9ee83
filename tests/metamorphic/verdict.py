"""What stepwatch said about a recording, reduced to what the invariants compare.

The primary alert is the first firing alert of the most specific type that fired (a hang before a
straggler before the rest); its culprit, node and cause are read from its last firing version (the
settled diagnosis: a culprit promoted later, a cause found later, counts).
"""

from __future__ import annotations

from dataclasses import dataclass

#: The order in which an alert type is the verdict's subject: the first that fired is the primary.
PRIMARY_ORDER = ("hang", "straggler", "imbalance", "comm_slowdown", "checkpoint_stale", "job_restart",
                 "throughput_drop", "gpu_fault", "link_errors", "fabric", "node_suspect", "gpu_hot", "hbm_full",
                 "gpu_idle")
#: Alert types made from node telemetry: present only where the recording has it.
TELEMETRY_TYPES = frozenset({"gpu_fault", "link_errors", "fabric", "node_suspect", "gpu_hot", "hbm_full",
                             "gpu_idle"})


@dataclass(frozen=True)
class Verdict:
    types: frozenset[str]
    primary: str | None = None
    job: str | None = None
    #: The primary's culprit ranks (a hang's diagnosed culprits, else the alert's ranks) and its first node.
    culprits: frozenset[int] = frozenset()
    node: str | None = None
    #: The first suspected cause's category in the primary's last firing version (None: none named).
    cause: str | None = None
    #: When the primary type first fired (its first version's ``starts_at``), the detection time.
    first_at: float | None = None
    #: Hang incidents whose first firing version was already critical (no warning before it).
    critical_first: tuple[str, ...] = ()
    alerts: int = 0
    #: Every rank the fault is on: the primary's culprits and, beside a straggler, the ranks of the other alerts
    #: of its type in its job (two stragglers: a world-size variant keeps both, grid.py ``Base.hot``).
    fault_ranks: frozenset[int] = frozenset()
    #: Every job a firing alert was about.
    jobs: frozenset[str] = frozenset()
    #: The culprits and nodes of every alert of the primary type in the primary's job (two stragglers found at
    #: one step are two alerts, published in rank order: which is first is not the verdict).
    all_culprits: frozenset[int] = frozenset()
    all_nodes: frozenset[str] = frozenset()

    def describe(self) -> str:
        culprit = ",".join(map(str, sorted(self.culprits)[:6])) or "-"
        return (f"{sorted(self.types)} primary={self.primary} culprits={culprit} node={self.node} "
                f"cause={self.cause}")


def verdict(alerts: list[dict]) -> Verdict:
    firing = [a for a in alerts if a.get("status") == "firing"]
    types = frozenset(str(a["type"]) for a in firing)
    jobs = frozenset(str(a["job"]) for a in firing if a.get("job"))
    firsts: dict[str, dict] = {}
    lasts: dict[str, dict] = {}
    for a in firing:
        firsts.setdefault(a["id"], a)
        lasts[a["id"]] = a
    critical_first = tuple(i for i, a in firsts.items() if a["type"] == "hang" and a["severity"] == "critical")
    primary = next((t for t in PRIMARY_ORDER if t in types), None)
    if primary is None:
        return Verdict(types, critical_first=critical_first, alerts=len(alerts), jobs=jobs)
    first = next(a for a in firing if a["type"] == primary)
    last = lasts[first["id"]]
    evidence = last.get("evidence") or {}
    if primary == "hang" and evidence.get("culprits"):
        culprits = frozenset(c["rank"] for c in evidence["culprits"] if c.get("rank") is not None)
    else:
        culprits = frozenset(last.get("ranks") or ())
    causes = evidence.get("suspected_causes") or []
    fault = culprits
    if primary != "hang":
        fault = fault.union(*(a.get("ranks") or () for a in lasts.values()
                              if a["type"] == primary and a.get("job") == first.get("job")))
    same = [lasts[i] for i, a in firsts.items() if a["type"] == primary and a.get("job") == first.get("job")]
    every = frozenset(r for a in same for r in _culprits(a))
    nodes = frozenset(n for a in same for n in (a.get("nodes") or ())[:1])
    return Verdict(types, primary, first.get("job") or None, culprits, (last.get("nodes") or [None])[0],
                   causes[0].get("category") if causes else None, first["starts_at"], critical_first, len(alerts),
                   fault_ranks=frozenset(fault), jobs=jobs, all_culprits=every, all_nodes=nodes)


def _culprits(alert: dict) -> frozenset[int]:
    culprits = (alert.get("evidence") or {}).get("culprits")
    if alert["type"] == "hang" and culprits:
        return frozenset(c["rank"] for c in culprits if c.get("rank") is not None)
    return frozenset(alert.get("ranks") or ())
