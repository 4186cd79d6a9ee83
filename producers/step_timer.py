"""Step timing and phases of the rank monitor: the training thread's hot path.

:class:`StepTimer` is one part of :class:`~stepwatch.producers.monitor.RankMonitor`, with its
own state (the step in progress, its data wait, the phase, the last completed step). It only
reads clocks, stamps a small dict and hands it to ``emit``; the collective time of a step
comes from the collective recorder (producers/collectives.py) through ``take_comm``.
"""

from __future__ import annotations

import threading
import time
from contextlib import contextmanager
from typing import Any, Callable, Iterator

from stepwatch.models.wire.events import PHASES

from .collectives import StepComm, _union_length

__all__ = ["StepTimer"]

_perf = time.perf_counter
_wall = time.time


class _PhaseScope:
    """Returned by :meth:`RankMonitor.phase`: usable as a plain call or as a context manager."""

    __slots__ = ("_timer", "_previous")

    def __init__(self, timer: "StepTimer", previous: str) -> None:
        self._timer = timer
        self._previous = previous

    def __enter__(self) -> "_PhaseScope":
        return self

    def __exit__(self, *exc) -> None:
        self._timer.phase(self._previous)


class StepTimer:
    """Steps, data waits and phases of one rank (a part of :class:`~stepwatch.producers.monitor.RankMonitor`).

    Parameters
    ----------
    enabled
        False: every mark is a cheap no-op.
    step_base
        Fields every step event carries (v, kind, job, rank, node, gpu, group, world_size); copied per step.
    phase_base
        Fields of this rank's phase events (job; and rank unless it speaks for the whole job).
    emit
        Queues one event (the monitor's transport).
    on_error
        Counts an error ``(where, exc)``; a broken mark never raises into training.
    take_comm
        The collective time recorded since the last step's end (the collective recorder's ``take_step``).
    pollers
        Callables that report timings read late (CUDA events); run through ``poll`` at each step's end,
        while still in the step, when the list is not empty.
    poll
        Runs ``pollers`` (errors counted).
    start_step
        The number of the first step when ``begin_step`` is given none.

    Example (on its own: here no collective was recorded, so ``take_comm`` hands an empty record):

    >>> events = []
    >>> timer = StepTimer(enabled=True, step_base={"v": 1, "kind": "step", "job": "j", "rank": 0},
    ...                   phase_base={"job": "j"}, emit=events.append, on_error=print, take_comm=StepComm,
    ...                   pollers=[], poll=lambda: None)
    >>> timer.begin_step()
    >>> timer.end_step(samples=32)
    >>> step = events[-1]
    >>> step["kind"], step["step"], step["samples"], step["comm_time"], step["compute_time"] == step["step_time"]
    ('step', 0, 32.0, 0.0, True)
    >>> _ = timer.phase("eval")
    >>> events[-1]["kind"], events[-1]["phase"], events[-1]["step"], timer.heartbeat_fields()
    ('phase', 'eval', 0, (0, 'eval', False))
    """

    def __init__(self, *, enabled: bool, step_base: dict[str, Any], phase_base: dict[str, Any],
                 emit: Callable[[dict], None], on_error: Callable[[str, BaseException], None],
                 take_comm: Callable[[], StepComm], pollers: list, poll: Callable[[], None],
                 start_step: int = 0) -> None:
        self.enabled = enabled
        self._step_base = step_base
        self._phase_base = phase_base
        self._emit = emit
        self._error = on_error
        self._take_comm = take_comm
        self._pollers = pollers
        self._poll = poll
        #: perf_counter start of the step in progress; None between steps.
        self.started: float | None = None
        self._step_no: int | None = None
        self._next_step = start_step
        #: The last completed step (None before the first).
        self.last_step: int | None = None
        self._data_time = 0.0
        self._data_t0: float | None = None
        self._between_t0: float | None = None  # start of a data wait before the step began
        self.phase_name = "train"
        #: The training thread (the one that begins steps): first in stack answers (producers/stacks.py).
        self.train_ident = threading.get_ident()

    # -- steps --------------------------------------------------------------------------------

    def begin_step(self, step: int | None = None) -> None:
        """Mark the start of a step (``step`` defaults to the previous step + 1)."""
        t0 = _perf()
        if not self.enabled:
            return
        try:
            self._step_no = self._next_step if step is None else int(step)
            self.train_ident = threading.get_ident()
            if self._between_t0 is not None:
                # Waiting for this step's data before it began is part of the step.
                t0 = self._between_t0
                self._between_t0 = None
            else:
                self._data_time = 0.0
            self.started = t0
        except Exception as exc:
            self._error("begin_step", exc)

    def end_step(self, *, tokens: float | None = None, samples: float | None = None,
                 loss: float | None = None, **extra: Any) -> None:
        """Mark the end of the step started by :meth:`begin_step` and queue its step event."""
        t1 = _perf()
        if not self.enabled or self.started is None:
            return
        try:
            t0 = self.started
            if self._pollers:
                self._poll()  # still in the step: calls ended since the last poll are charged to it
            self.started = None
            step = self._step_no
            comm = self._take_comm()
            step_time = t1 - t0
            data_time = min(self._data_time, step_time)
            comm_time = min(_union_length(comm.intervals, t0, t1) + sum(comm.durations), step_time - data_time)
            self._data_time = 0.0
            event = self._step_base.copy()
            event["step"] = step
            event["ts"] = _wall()
            event["step_time"] = step_time
            event["compute_time"] = step_time - data_time - comm_time
            event["data_time"] = data_time
            event["comm_time"] = comm_time
            phase = self.phase_name
            if phase != "train":
                event["phase"] = phase if phase != "end" else "train"
            if tokens is not None:
                event["tokens"] = float(tokens)
            if samples is not None:
                event["samples"] = float(samples)
            if loss is not None and isinstance(loss, (int, float)) and not isinstance(loss, bool):
                event["loss"] = float(loss)
            if comm.count:
                # Per-step collective summary: bounded output whatever the number of buckets.
                event["comm_calls"] = comm.count
                event["comm_total"] = comm.total
                event["comm_max"] = comm.max
                if comm.last_seq is not None:
                    event["comm_seq"] = comm.last_seq
            if extra:
                event.update(extra)
            self.last_step = step
            self._next_step = step + 1
            self._emit(event)
        except Exception as exc:
            self._error("end_step", exc)

    def abandon_step(self) -> None:
        """Forget the step in progress (its body raised): it is not reported."""
        self.started = None

    def event_step(self) -> int | None:
        """The step an event belongs to now: the one in progress, else the last completed."""
        return self._step_no if self.started is not None else self.last_step

    # -- data waits ---------------------------------------------------------------------------

    def data_begin(self) -> None:
        """Mark the start of waiting for input data (inside a step, or just before one: then it counts
        towards the next step)."""
        t0 = self._data_t0 = _perf()
        if self.started is None and self._between_t0 is None:
            self._between_t0 = t0
            self._data_time = 0.0

    def data_end(self) -> None:
        t = _perf()
        t0 = self._data_t0
        if t0 is not None:
            self._data_t0 = None
            self._data_time += t - t0

    @contextmanager
    def data(self) -> Iterator[None]:
        """``with monitor.data(): batch = next(it)`` — time waiting for data, left out of compute_time."""
        self.data_begin()
        try:
            yield
        finally:
            self.data_end()

    def loader(self, iterable):
        """Wrap a data loader: each ``next()`` is timed as data wait for the step that uses the batch.

        ``for batch in monitor.loader(loader): with monitor.step(): ...``
        """
        it = iter(iterable)
        while True:
            self.data_begin()
            try:
                item = next(it)
            except StopIteration:
                self._data_t0 = self._between_t0 = None
                return
            finally:
                self.data_end()
            yield item

    def add_data_time(self, seconds: float) -> None:
        """Add data-wait time measured elsewhere (e.g. a data loader's own timer)."""
        try:
            self._data_time += float(seconds)
        except Exception as exc:
            self._error("add_data_time", exc)

    # -- phases -------------------------------------------------------------------------------

    def phase(self, name: str, *, step: int | None = None) -> _PhaseScope:
        """Switch to phase ``name`` (warmup, train, eval, checkpoint, end) and queue a phase event.

        Also a context manager: ``with monitor.phase("checkpoint"): save()`` returns to the
        previous phase on exit.
        """
        previous = self.phase_name
        if not self.enabled:
            return _PhaseScope(self, previous)
        try:
            if name not in PHASES:
                raise ValueError(f"unknown phase {name!r} (expected one of {sorted(PHASES)})")
            self.phase_name = name
            event = {"v": 1, "kind": "phase", **self._phase_base, "ts": _wall(), "phase": name}
            at = step if step is not None else self.last_step
            if at is not None:
                event["step"] = at
            self._emit(event)
        except Exception as exc:
            self._error("phase", exc)
        return _PhaseScope(self, previous)

    def end(self) -> None:
        """Tell stepwatch this rank finished training normally (a finished job is never hung)."""
        self.phase("end")

    def heartbeat_fields(self) -> tuple[int, str, bool]:
        """What a heartbeat says of the steps: the last completed step (0 before any), the phase, and
        whether a step is in progress."""
        last = self.last_step
        return (last if last is not None else 0), self.phase_name, self.started is not None
