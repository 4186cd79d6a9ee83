"""Step timing and phases of the rank monitor: the training thread's hot path.

:class:`StepTimer` is a part of :class:`~stepwatch.producers.monitor.RankMonitor` (its state
is set up in ``RankMonitor.__init__``: ``_step_t0``, ``_step_no``, ``_next_step``,
``last_step``, ``_data_time``, ``_data_t0``, ``_between_t0``, ``_phase``, ``_pollers``). It
only reads clocks, stamps a small dict and hands it to ``RankMonitor._enqueue``; the
collective time of a step comes from producers/collectives.py.
"""

from __future__ import annotations

import threading
import time
from contextlib import contextmanager
from typing import Any, Iterator

from stepwatch.models.wire.events import PHASES

from .collectives import _StepComm, _union_length

__all__ = ["StepTimer"]

_perf = time.perf_counter
_wall = time.time


class _PhaseScope:
    """Returned by :meth:`RankMonitor.phase`: usable as a plain call or as a context manager."""

    __slots__ = ("_monitor", "_previous")

    def __init__(self, monitor: "RankMonitor", previous: str) -> None:
        self._monitor = monitor
        self._previous = previous

    def __enter__(self) -> "_PhaseScope":
        return self

    def __exit__(self, *exc) -> None:
        self._monitor.phase(self._previous)


class StepTimer:
    """Steps, data waits and phases of :class:`~stepwatch.producers.monitor.RankMonitor` (a mixin)."""

    def begin_step(self, step: int | None = None) -> None:
        """Mark the start of a step (``step`` defaults to the previous step + 1)."""
        t0 = _perf()
        if not self.enabled:
            return
        try:
            self._step_no = self._next_step if step is None else int(step)
            self._train_ident = threading.get_ident()
            if self._between_t0 is not None:
                # Waiting for this step's data before it began is part of the step.
                t0 = self._between_t0
                self._between_t0 = None
            else:
                self._data_time = 0.0
            self._step_t0 = t0
        except Exception as exc:
            self._error("begin_step", exc)

    def end_step(self, *, tokens: float | None = None, samples: float | None = None,
                 loss: float | None = None, **extra: Any) -> None:
        """Mark the end of the step started by :meth:`begin_step` and queue its step event."""
        t1 = _perf()
        if not self.enabled or self._step_t0 is None:
            return
        try:
            t0 = self._step_t0
            if self._pollers:
                self._poll()  # still in the step: calls ended since the last poll are charged to it
            self._step_t0 = None
            step = self._step_no
            with self._comm_lock:
                comm = self._comm
                self._comm = _StepComm()
            step_time = t1 - t0
            data_time = min(self._data_time, step_time)
            comm_time = _union_length(comm.intervals, t0, t1) + sum(comm.durations)
            comm_time = min(comm_time, step_time - data_time)
            self._data_time = 0.0
            event = self._step_base.copy()
            event["step"] = step
            event["ts"] = _wall()
            event["step_time"] = step_time
            event["compute_time"] = step_time - data_time - comm_time
            event["data_time"] = data_time
            event["comm_time"] = comm_time
            if self._phase != "train":
                event["phase"] = self._phase if self._phase != "end" else "train"
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
            self._enqueue(event)
        except Exception as exc:
            self._error("end_step", exc)

    @contextmanager
    def step(self, step: int | None = None, *, tokens: float | None = None, samples: float | None = None,
             loss: float | None = None) -> Iterator["RankMonitor"]:
        """``with monitor.step(): ...`` measures one step. An exception in the body is not reported as a step."""
        self.begin_step(step)
        ok = False
        try:
            yield self
            ok = True
        finally:
            if ok:
                self.end_step(tokens=tokens, samples=samples, loss=loss)
            else:
                self._step_t0 = None

    def data_begin(self) -> None:
        """Mark the start of waiting for input data (inside a step, or just before one: then it counts
        towards the next step)."""
        t0 = self._data_t0 = _perf()
        if self._step_t0 is None and self._between_t0 is None:
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
        previous = self._phase
        if not self.enabled:
            return _PhaseScope(self, previous)
        try:
            if name not in PHASES:
                raise ValueError(f"unknown phase {name!r} (expected one of {sorted(PHASES)})")
            self._phase = name
            event = {"v": 1, "kind": "phase", **self._phase_base, "ts": _wall(), "phase": name}
            at = step if step is not None else self.last_step
            if at is not None:
                event["step"] = at
            self._enqueue(event)
        except Exception as exc:
            self._error("phase", exc)
        return _PhaseScope(self, previous)

    def end(self) -> None:
        """Tell stepwatch this rank finished training normally (a finished job is never hung)."""
        self.phase("end")

    @property
    def current_phase(self) -> str:
        return self._phase

    # -- pollers (CUDA-event timings read late) ----------------------------------------------

    def _poll(self) -> None:
        for poll in self._pollers:
            try:
                poll()
            except Exception as exc:
                self._error("poll", exc)
