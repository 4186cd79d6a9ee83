"""From what ranks send to a recording: batched as a rank monitor batches, some lost, some late.

Each rank's monitor flushes its queue every ``flush`` seconds in one batch envelope
(docs/events.md); the batch reaches the broker ``latency`` later (plus a little). Messiness:
``loss`` of the events never arrive (a dropped message, a full queue), ``reorder`` of the batches
arrive one to three flushes late (after newer ones of other ranks) with their events shuffled.
Job-wide ``phase`` events are never lost: a test of lost events should not turn on a lost marker.

:func:`recording_lines` with ``arrival=True`` writes what ``stepwatch record`` writes: one message per
line in broker order with its ``_arrival`` (stepwatch/recording.py); with ``arrival=False``, one event
per line sorted by event time, as an imported trace or a file sorted by ``ts`` would be.
"""

from __future__ import annotations

import heapq
import math
import random
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import orjson

from .wire import Sent


@dataclass(frozen=True)
class Transport:
    flush: float = 0.1  # the rank monitor's default (producers/monitor_config.py)
    latency: float = 0.05
    loss: float = 0.0
    reorder: float = 0.0
    seed: int = 0


def messages(sent: Iterable[Sent], transport: Transport = Transport()) -> list[tuple[float, dict]]:
    """(broker arrival, batch envelope) in arrival order."""
    rng = random.Random(transport.seed)
    batches: dict[tuple[int, int], list[Sent]] = {}
    phase_of: dict[int, float] = {}
    for item in sent:
        if item.event["kind"] != "phase" and rng.random() < transport.loss:
            continue
        shift = phase_of.setdefault(item.sender, rng.uniform(0.0, transport.flush))  # monitors flush out of step
        slot = math.ceil((item.at - shift) / transport.flush)
        batches.setdefault((item.sender, slot), []).append(item)
    out = []
    for (sender, slot), items in batches.items():
        at = slot * transport.flush + phase_of[sender] + transport.latency * (1.0 + rng.random())
        events = [i.event for i in sorted(items, key=lambda i: i.at)]
        if rng.random() < transport.reorder:
            at += transport.flush * rng.uniform(1.0, 3.0)
            rng.shuffle(events)
        out.append((at, {"v": 1, "kind": "batch", "events": events}))
    out.sort(key=lambda m: m[0])
    return out


def timed_lines(sent: Iterable[Sent], transport: Transport = Transport(), *, arrival: bool = True
                ) -> list[tuple[float, bytes]]:
    """The recording's lines with the time that orders them: arrival (``arrival=True``: what ``stepwatch record``
    writes, one message per line with its ``_arrival``), else event time (one event per line, no ``_arrival``)."""
    msgs = messages(sent, transport)
    if arrival:
        return [(at, orjson.dumps(dict(batch, _arrival=round(at, 6)))) for at, batch in msgs]
    events = [e for _, batch in msgs for e in batch["events"]]
    events.sort(key=lambda e: e["ts"])  # stable: equal stamps keep their arrival order
    return [(e["ts"], orjson.dumps(e)) for e in events]


def recording_lines(sent: Iterable[Sent], transport: Transport = Transport(), *, arrival: bool = True) -> list[bytes]:
    return [line for _, line in timed_lines(sent, transport, arrival=arrival)]


def merge(recordings: Iterable[list[tuple[float, bytes]]]) -> list[bytes]:
    """Several jobs' timed lines as one stream (one broker's, or one trace's), in time order."""
    return [line for _, line in heapq.merge(*recordings, key=lambda r: r[0])]


def write(path: Path, lines: Iterable[bytes]) -> Path:
    path.write_bytes(b"".join(line + b"\n" for line in lines))
    return path
