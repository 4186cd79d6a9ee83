"""Heartbeats of the rank monitor: the last completed step and the collective sequence
numbers, sent every ``heartbeat_interval`` seconds by a daemon thread, also while the
training thread is blocked (in a hung collective, say): that is what names a hang's culprit.

:class:`Heartbeats` is one part of :class:`~stepwatch.producers.monitor.RankMonitor`, owning
its thread. It reads the other parts only through the callables it is given: the step
timer's ``heartbeat_fields`` (step, phase, in a step) and the collective recorder's
(sequence numbers per process group).
"""

from __future__ import annotations

import threading
import time
from typing import Any, Callable

__all__ = ["Heartbeats"]

_wall = time.time


class Heartbeats:
    """Heartbeat events and the thread that sends them (a part of :class:`~stepwatch.producers.monitor.RankMonitor`).

    Parameters
    ----------
    enabled
        False: ``heartbeat`` is a no-op and ``start`` starts no thread.
    rank_base
        Fields every event of this rank carries (job, rank, node).
    emit
        Queues one event (the monitor's transport).
    on_error
        Counts an error ``(where, exc)``; the thread never dies of one.
    step_fields
        ``() -> (last step, phase, in a step)``: the step timer's ``heartbeat_fields``.
    comm_fields
        ``() -> dict`` of sequence-number fields: the collective recorder's ``heartbeat_fields``.
    pollers, poll
        Timings read late (CUDA events) are polled before each heartbeat when ``pollers`` is not empty.
    interval
        Seconds between heartbeats; 0 or None: no thread (``heartbeat()`` by hand).
    stop
        Set by the monitor's ``close``: the thread sends no more and exits.
    name
        The thread's name.

    Example (on its own, no thread: the step and collective fields come from the callables given):

    >>> import threading
    >>> events = []
    >>> beats = Heartbeats(enabled=True, rank_base={"job": "j", "rank": 3}, emit=events.append, on_error=print,
    ...                    step_fields=lambda: (41, "train", True),
    ...                    comm_fields=lambda: {"seq_started": 9, "seq_completed": 8}, pollers=[],
    ...                    poll=lambda: None, interval=0, stop=threading.Event())
    >>> beats.start(); beats.thread is None      # interval 0: heartbeats by hand only
    True
    >>> beats.heartbeat()
    >>> events[0]["kind"], events[0]["rank"]
    ('heartbeat', 3)
    >>> {k: events[0][k] for k in ("step", "phase", "seq_started", "seq_completed", "in_step")}
    {'step': 41, 'phase': 'train', 'seq_started': 9, 'seq_completed': 8, 'in_step': True}
    """

    def __init__(self, *, enabled: bool, rank_base: dict[str, Any], emit: Callable[[dict], None],
                 on_error: Callable[[str, BaseException], None], step_fields: Callable[[], tuple[int, str, bool]],
                 comm_fields: Callable[[], dict[str, Any]], pollers: list, poll: Callable[[], None],
                 interval: float | None, stop: threading.Event, name: str = "stepwatch-heartbeat") -> None:
        self.enabled = enabled
        self.interval = interval
        self._rank_base = rank_base
        self._emit = emit
        self._error = on_error
        self._step_fields = step_fields
        self._comm_fields = comm_fields
        self._pollers = pollers
        self._poll = poll
        self._stop = stop
        self._name = name
        #: The heartbeat thread (None until started, or when the interval is 0).
        self.thread: threading.Thread | None = None

    def heartbeat_event(self) -> dict:
        """The heartbeat this rank would send now."""
        step, phase, in_step = self._step_fields()
        event = {"v": 1, "kind": "heartbeat", **self._rank_base, "ts": _wall(), "step": step, "phase": phase}
        event.update(self._comm_fields())
        event["in_step"] = in_step
        return event

    def heartbeat(self) -> None:
        """Queue one heartbeat now (the heartbeat thread does this every ``interval``)."""
        if not self.enabled:
            return
        try:
            if self._pollers:
                self._poll()
            self._emit(self.heartbeat_event())
        except Exception as exc:
            self._error("heartbeat", exc)

    def _loop(self) -> None:
        interval = self.interval
        self.heartbeat()
        while not self._stop.wait(interval):
            self.heartbeat()

    def start(self) -> None:
        """Start the heartbeat thread (daemon), when enabled with an interval."""
        if self.enabled and self.interval and self.interval > 0:
            self.thread = threading.Thread(target=self._loop, name=self._name, daemon=True)
            self.thread.start()
