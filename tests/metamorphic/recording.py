"""A recording as the transformations see it: wire events in delivery order, each with its arrival time.

Frozen and shared: a transformation never changes a line's event in place, it makes a new dict.
``ranks``/``nodes`` map the base recording's (job, rank) and node names to the variant's, so the
invariants compare the same culprit after a renumbering; ``scale`` is the variant's time factor.
"""

from __future__ import annotations

import io
import os
import statistics
import tempfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, replace

import orjson

from stepwatch.models.wire.telemetry_events import TELEMETRY_KINDS

#: Seconds the replay goes on after the last line (``stepwatch replay --drain``): a capture that ends inside a
#: hang needs the timers to run on (gen3 replays with 900).
DRAIN_SECONDS = 900.0
#: The drain is longer for slow variants (their timeouts are the same, their steps longer), up to this.
MAX_DRAIN_SECONDS = 3600.0


@dataclass(frozen=True)
class Line:
    """One delivered wire event (a batch envelope is taken apart: one event a line) and when it arrived."""

    arrival: float
    event: dict


@dataclass(frozen=True)
class Recording:
    name: str
    lines: tuple[Line, ...]
    #: When the fault began, true time (None: a healthy recording).
    onset: float | None = None
    #: Whether the lines carry ``_arrival`` (a broker capture); False: the events' own times are replay's clock.
    arrival: bool = True
    scale: float = 1.0
    #: Seconds its hosts' clocks were moved with no broker clock to tell (a recording without arrival times under
    #: ``clock_offsets``): replay has only the hosts' times, so an alert may be stamped that far off (invariants.py).
    clock_error: float = 0.0
    #: Seconds a producer's messages may arrive late (``late``: a stall, the messages after it queued behind): a
    #: fault's events in them reach the worker that much later (their steps close without them), and so may its
    #: first alert (invariants.py: where the steps after the onset tell how late their events were, by that instead).
    lateness: float = 0.0
    ranks: dict[tuple[str, int], int] = field(default_factory=dict, compare=False)
    nodes: dict[str, str] = field(default_factory=dict, compare=False)
    #: Names of the transformations applied, in order.
    applied: tuple[str, ...] = ()
    #: Jobs added beside the base's (noise.bystanders): healthy, they must get no alert.
    quiet_jobs: frozenset[str] = frozenset()

    def derive(self, what: str | None, lines: Iterable[Line], **changes) -> "Recording":
        """A variant: new lines, the transformation's name appended (None: a step of one already named), other
        fields as ``changes`` say."""
        return replace(self, lines=tuple(lines), applied=self.applied + ((what,) if what else ()), **changes)

    def rank_of(self, job: str, rank: int) -> int:
        return self.ranks.get((job, rank), rank)

    def node_of(self, node: str) -> str:
        return self.nodes.get(node, node)

    def events(self, kind: str | None = None) -> Iterator[dict]:
        for line in self.lines:
            if kind is None or line.event.get("kind") == kind:
                yield line.event

    def step_time(self) -> float:
        """The recording's median step time (seconds), over every job's step events."""
        times = [e["step_time"] for e in self.events("step") if isinstance(e.get("step_time"), (int, float))]
        return statistics.median(times) if times else 1.0

    def delivery_lag(self) -> float:
        """How long its step events took from their stamp to the broker (seconds): the 90th percentile of
        ``arrival - ts``, the lag most of a step's events arrive within (0 without arrival times)."""
        if not self.arrival:
            return 0.0
        lags = sorted(max(0.0, line.arrival - line.event["ts"]) for line in self.lines
                      if line.event.get("kind") == "step" and isinstance(line.event.get("ts"), (int, float)))
        return lags[int(0.9 * (len(lags) - 1))] if lags else 0.0

    def span(self) -> tuple[float, float]:
        return self.lines[0].arrival, max(line.arrival for line in self.lines)


def is_telemetry(event: dict) -> bool:
    return event.get("kind") in TELEMETRY_KINDS


def from_lines(name: str, raw: Iterable[bytes | str], *, onset: float | None) -> Recording:
    """A recording from JSON lines (batch envelopes taken apart; ``_arrival`` kept as the arrival, else the
    event's time; config lines are kept as events of kind ``config``)."""
    lines: list[Line] = []
    arrival = None
    for text in raw:
        value = orjson.loads(text)
        at = value.pop("_arrival", None)
        arrival = arrival if arrival is not None else at is not None
        events = value["events"] if value.get("kind") == "batch" else [value]
        for event in events:
            when = at if at is not None else event.get("ts", lines[-1].arrival if lines else 0.0)
            lines.append(Line(float(when), event))
    return Recording(name, tuple(lines), onset=onset, arrival=bool(arrival))


def to_bytes(rec: Recording) -> bytes:
    """The recording as a file ``stepwatch replay`` reads: one event a line, ``_arrival`` where it has them."""
    out = io.BytesIO()
    for line in rec.lines:
        event = dict(line.event, _arrival=round(line.arrival, 6)) if rec.arrival else line.event
        out.write(orjson.dumps(event))
        out.write(b"\n")
    return out.getvalue()


def replay(rec: Recording) -> list[dict]:
    """The alerts (records, in publication order) of ``stepwatch replay --drain`` on the recording: the same
    functions the command runs (its files merged, the worker's pipeline), in this process."""
    from stepwatch.config import Settings
    from stepwatch.recording import merge_recorded, replay as run

    drain = min(MAX_DRAIN_SECONDS, DRAIN_SECONDS * max(1.0, rec.scale))
    fd, path = tempfile.mkstemp(suffix=".jsonl", prefix="metamorphic-")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(to_bytes(rec))
        buf = io.StringIO()
        run(merge_recorded([path]), Settings.from_env(), drain=drain, out=buf)
    finally:
        os.unlink(path)
    return [orjson.loads(line) for line in buf.getvalue().splitlines() if line.strip()]
