"""Storm protection in the node agent: repeated device events coalesced, bounded queues per kind (issue 42).

A failing GPU can log the same Xid 50-200 times a second; a flapping link, a counter storm the same.
Sent as they come, they flood the telemetry topic and the worker for no new information. Here:

* :class:`Coalescer`: per (kind, node, device, code), the first event goes out at once (count 1); the
  repeats within ``window`` seconds are held and go out as **one** event with ``count`` (how many it
  stands for) when the window ends, then a new window opens while the burst lasts. A burst of 200/s is
  one event a second; nothing is lost (the counts add up to what was read). At most ``max_keys`` keys
  are open (the oldest is flushed first);
* :class:`KindQueues`: one bounded queue per event kind between the readers and the sender; when full,
  the **oldest** event is dropped (newest wins: fresh state matters more) and counted in ``dropped``
  by kind (``stepwatch_agent_events_dropped_total{kind}``, printed when the agent stops).

Thread-safe: the NVML Xid thread and the sampling loop share them.
"""

from __future__ import annotations

import threading
from collections import OrderedDict, deque
from dataclasses import dataclass


@dataclass(slots=True)
class _Window:
    until: float
    pending: int = 0
    last: dict | None = None


def storm_key(event: dict) -> tuple:
    """What makes two events the same device event: kind, node, device and code."""
    kind = event.get("kind")
    if kind == "xid":
        return kind, event.get("node"), event.get("gpu"), event.get("xid")
    return kind, event.get("node"), event.get("device", event.get("gpu")), event.get("port"), event.get("code")


class Coalescer:
    """See the module doc. ``window``: seconds; ``max_keys``: open keys at most."""

    def __init__(self, *, window: float = 1.0, max_keys: int = 4096) -> None:
        self.window = window
        self.max_keys = max_keys
        self._open: OrderedDict[tuple, _Window] = OrderedDict()
        self._lock = threading.Lock()
        #: Events read, and events sent (after coalescing), since start.
        self.seen = 0
        self.sent = 0

    def add(self, event: dict, now: float) -> list[dict]:
        """One event read; the events to send now (the first of a burst, or a window's held repeats)."""
        key = storm_key(event)
        out: list[dict] = []
        with self._lock:
            self.seen += 1
            w = self._open.get(key)
            if w is not None and now < w.until:
                w.pending += int(event.get("count", 1) or 1)
                w.last = event
                return out
            count = int(event.get("count", 1) or 1)
            if w is not None and w.pending:  # the burst goes on past its window: its repeats and this one, as one
                count += w.pending
            self._open[key] = _Window(until=now + self.window)
            self._open.move_to_end(key)
            while len(self._open) > self.max_keys:
                _, old = self._open.popitem(last=False)
                if old.pending:
                    out.append(self._emit(old))
            out.append({**event, "count": count})
            self.sent += len(out)
            return out

    def flush(self, now: float) -> list[dict]:
        """The held repeats of every window that has ended; a window with none closes."""
        out: list[dict] = []
        with self._lock:
            for key in list(self._open):
                w = self._open[key]
                if now < w.until:
                    continue
                if w.pending:
                    out.append(self._emit(w))
                    w.until = now + self.window  # the burst goes on: one event a window
                else:
                    del self._open[key]
            self.sent += len(out)
        return out

    @staticmethod
    def _emit(w: _Window) -> dict:
        event = {**w.last, "count": w.pending}
        w.pending, w.last = 0, None
        return event


class KindQueues:
    """Bounded queues per event kind, newest wins; ``dropped`` counts by kind what was dropped."""

    def __init__(self, *, size: int = 1000) -> None:
        self.size = size
        self._queues: dict[str, deque] = {}
        self._lock = threading.Lock()
        self.dropped: dict[str, int] = {}

    def offer(self, events: list[dict]) -> None:
        with self._lock:
            for event in events:
                kind = str(event.get("kind"))[:32]
                q = self._queues.get(kind)
                if q is None:
                    if len(self._queues) >= 64:  # kinds are a closed vocabulary; a bug must not grow this
                        self.dropped["other"] = self.dropped.get("other", 0) + 1
                        continue
                    q = self._queues[kind] = deque()
                if len(q) >= self.size:
                    q.popleft()
                    self.dropped[kind] = self.dropped.get(kind, 0) + 1
                q.append(event)

    def drain(self) -> list[dict]:
        with self._lock:
            out = [e for q in self._queues.values() for e in q]
            for q in self._queues.values():
                q.clear()
        return out

    def __len__(self) -> int:
        return sum(len(q) for q in self._queues.values())
