"""Write each scenario as one JSONL recording plus labels.json."""
from __future__ import annotations

import json
import os

from .job import gpu_samples, host_samples, link_samples, simulate, xid_events
from .scenarios import scenarios


def build(sc):
    """(lines in delivery order, labels) of one scenario."""
    events, marks = [], {}
    for spec in sc.jobs:
        m = {}
        events += simulate(spec, m)
        marks[spec.name] = m
        last = max(a for a, _ in events) if events else spec.start
        if spec.telemetry:
            down = m.get("stall") if spec.link_down_at_hang else None
            events += link_samples(spec, spec.start, last + 30, spec.seed + 1000, down)
        if spec.hang and spec.hang.dies == "oom":
            events += host_samples(spec, spec.start, last + 10, spec.seed + 3000, m)
        if spec.hang and spec.hang.dies == "xid79":
            events += xid_events(spec, m, spec.seed + 4000)
        if spec.gpu_telemetry:
            events += gpu_samples(spec, spec.start, last + 10, spec.seed + 2000, m)
    events.sort(key=lambda p: p[0])
    if sc.order == "ts":  # an imported or generated trace: sorted by the events' own (host) times
        events.sort(key=lambda p: p[1]["ts"])
    if sc.envelopes:
        events = _envelopes(events)
    lines = []
    for arrival, ev in events:
        if sc.arrival:
            ev = dict(ev, _arrival=round(arrival, 3))
        lines.append(json.dumps(ev, separators=(",", ":")))
    label = {"expect": [f(marks) for f in sc.expect], "allow": sc.allow, "note": sc.note}
    return lines, label


def _envelopes(events):
    """Batch envelopes as a rank's sender ships them: the events of one rank delivered within the same
    0.1 s go out as one message (docs/events.md "Batch envelope"); telemetry and phase events alone."""
    out, open_ = [], {}
    for arrival, ev in events:
        rank = ev.get("rank")
        key = (ev.get("job"), rank)
        cur = open_.get(key)
        if rank is not None and cur is not None and arrival - cur[0] < 0.1:
            cur[1]["events"].append(ev)
            continue
        if rank is None:
            out.append((arrival, ev))
            continue
        env = {"v": 1, "kind": "batch", "events": [ev]}
        open_[key] = (arrival, env)
        out.append((arrival, env))
    return [(a, e["events"][0] if e.get("kind") == "batch" and len(e["events"]) == 1 else e) for a, e in out]


def write_all(out_dir: str, only: list[str] | None = None) -> dict:
    os.makedirs(out_dir, exist_ok=True)
    labels = {}
    for sc in scenarios():
        if only and sc.name not in only:
            continue
        lines, label = build(sc)
        path = os.path.join(out_dir, sc.name + ".jsonl")
        with open(path, "w") as f:
            f.write("\n".join(lines) + "\n")
        labels[sc.name] = dict(label, file=sc.name + ".jsonl")
    with open(os.path.join(out_dir, "labels.json"), "w") as f:
        json.dump(labels, f, indent=1, sort_keys=True)
    return labels
