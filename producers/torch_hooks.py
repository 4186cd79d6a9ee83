"""Collective timing for ``torch.distributed``, feeding a :class:`RankMonitor`.

Two lines for DDP::

    timer = CollectiveTimer(monitor)
    timer.attach_ddp(ddp_model)                  # register_comm_hook, chaining to allreduce_hook

and for explicit collectives (FSDP/manual code)::

    with timer.time("all_gather"):
        dist.all_gather(out, t)
    all_reduce = timer.wrap(dist.all_reduce)      # also handles async_op=True (times until done)

Every collective gets a sequence number per process group when it is *issued*
(``seq_started``) and is marked completed when it finishes (``seq_completed``); the
monitor's heartbeats carry both, which is how the hang detector tells the rank that never
reached a collective from the ranks waiting in it.

Timing: on CPU (gloo) the wall clock, from issue to completion (the DDP hook's
``fut.then`` callback). On CUDA, a pair of CUDA events (start on the current stream at
issue, end recorded in the completion callback, i.e. on the stream the result is ready
on); they are *queried* later, from the next step boundary or the heartbeat thread,
never synchronized on the hot path. GPU durations therefore reach the step that is open
when they are read (usually the next one).

Durations feed the monitor's per-step ``comm_time`` (and a per-step summary: calls,
total, max, last sequence number), so ``compute_time`` excludes waiting in collectives.
Per-call ``collective`` events are sent only with ``collective_events=True`` on the
monitor (or ``STEPWATCH_MONITOR_COLLECTIVE_EVENTS=1``).

torch is imported when a timer is created, never by ``import stepwatch``.
"""

from __future__ import annotations

import functools
import threading
import time
from contextlib import contextmanager
from typing import Any, Callable, Iterator

from .collectives import DEFAULT_PG
from .monitor import RankMonitor
from .pg_tracker import _describe, suppressed

__all__ = ["CollectiveTimer", "attach_ddp"]

_perf = time.perf_counter


def _pg_name(pg: Any) -> str:
    import torch.distributed as dist

    if pg is None or pg is dist.group.WORLD:
        return DEFAULT_PG
    name = getattr(pg, "group_name", None)
    if name:
        desc = _describe(pg)  # as the process-group tracker names it (producers/pg_tracker.py)
        return f"{desc}:pg{name}" if desc else f"pg{name}"
    try:
        return "pg" + "-".join(str(r) for r in dist.get_process_group_ranks(pg))
    except Exception:
        return f"pg{id(pg):x}"


def _nbytes(tensor: Any) -> int | None:
    try:
        return int(tensor.numel() * tensor.element_size())
    except Exception:  # silent: a tensor without a size: its bytes are unknown (None), not an error
        return None


class CollectiveTimer:
    """Times collectives of one rank and reports them to ``monitor``.

    ``cuda``: use CUDA events (default: when CUDA is available and initialized; the DDP
    hook decides per bucket from the gradient buffer's device).
    """

    def __init__(self, monitor: RankMonitor, *, cuda: bool | None = None) -> None:
        import torch

        self._torch = torch
        self.monitor = monitor
        if cuda is None:
            try:
                cuda = bool(torch.cuda.is_available() and torch.cuda.is_initialized())
            except Exception:  # silent: a probe: CUDA unusable here (timed on the host)
                cuda = False
        self.cuda = cuda
        # CUDA timings not read yet: (seq, op, pg, start_event, end_event, nbytes, start_ts).
        self._pending: list[tuple] = []
        self._pending_lock = threading.Lock()
        self._pending_max = 4096
        self.unread_dropped = 0
        monitor_pollers = getattr(monitor, "_pollers", None)
        if monitor_pollers is not None:
            monitor_pollers.append(self.poll)

    # -- DDP ----------------------------------------------------------------------------------

    def attach_ddp(self, ddp_model: Any, process_group: Any = None) -> "CollectiveTimer":
        """Register the timing comm hook on a ``DistributedDataParallel`` model (before training)."""
        ddp_model.register_comm_hook(_HookState(self, process_group), _timed_allreduce_hook)
        return self

    # -- explicit collectives -----------------------------------------------------------------

    def begin(self, pg: Any = None) -> tuple[int, str, Any]:
        """Number a collective about to be issued; returns a token for :meth:`finish`."""
        name = _pg_name(pg) if pg is not None else DEFAULT_PG
        seq = self.monitor.collective_begin(name)
        if self.cuda:
            event = self._torch.cuda.Event(enable_timing=True)
            event.record()
            return seq, name, (event, time.time())
        return seq, name, _perf()

    def finish(self, token: tuple[int, str, Any], op: str, nbytes: int | None = None) -> None:
        """Mark the collective of ``token`` complete (call when its result is ready)."""
        seq, name, start = token
        try:
            if isinstance(start, tuple):
                end = self._torch.cuda.Event(enable_timing=True)
                end.record()
                with self._pending_lock:
                    if len(self._pending) >= self._pending_max:
                        self._pending.pop(0)
                        self.unread_dropped += 1
                    self._pending.append((seq, op, name, start[0], end, nbytes, start[1]))
            else:
                self.monitor.collective_end(seq, op=op, pg=name, start=start, end=_perf(), nbytes=nbytes)
        except Exception as exc:
            self.monitor._error("collective timing", exc)

    @contextmanager
    def time(self, op: str = "allreduce", *, pg: Any = None, nbytes: int | None = None) -> Iterator[int]:
        """Time a blocking collective: ``with timer.time("all_gather"): dist.all_gather(...)``."""
        token = self.begin(pg)
        try:
            with suppressed():  # numbered here already (producers/pg_tracker.py)
                yield token[0]
        finally:
            self.finish(token, op, nbytes)

    def wrap(self, fn: Callable, op: str | None = None) -> Callable:
        """Wrap a collective function (``dist.all_reduce`` …); async calls are timed until their work completes."""
        op = op or getattr(fn, "__name__", "collective")

        @functools.wraps(fn)
        def timed(*args, **kwargs):
            pg = kwargs.get("group")
            token = self.begin(pg)
            nbytes = _nbytes(args[0]) if args else None
            try:
                with suppressed():  # numbered here already (producers/pg_tracker.py)
                    result = fn(*args, **kwargs)
            except BaseException:
                self.finish(token, op, nbytes)
                raise
            get_future = getattr(result, "get_future", None)
            if get_future is not None:
                try:
                    def done(fut, _token=token):
                        self.finish(_token, op, nbytes)
                        return None

                    get_future().then(done)
                    return result
                except Exception:  # silent: no future on this backend: counted as completed when issued
                    pass
            self.finish(token, op, nbytes)
            return result

        return timed

    # -- reading CUDA timings later ---------------------------------------------------------

    def poll(self) -> int:
        """Report the CUDA-timed collectives that have finished (non-blocking ``Event.query``)."""
        if not self._pending:
            return 0
        done = 0
        with self._pending_lock:
            keep = []
            for item in self._pending:
                seq, op, name, start, end, nbytes, start_ts = item
                try:
                    if not end.query():
                        keep.append(item)
                        continue
                    duration = start.elapsed_time(end) / 1000.0
                except Exception as exc:
                    self.monitor._error("cuda event", exc)
                    continue
                self.monitor.collective_end(seq, op=op, pg=name, duration=duration, nbytes=nbytes, start_ts=start_ts)
                done += 1
            self._pending = keep
        return done


class _HookState:
    """State handed to the DDP comm hook (must be picklable-free; DDP only stores it)."""

    __slots__ = ("timer", "process_group", "pg_name")

    def __init__(self, timer: CollectiveTimer, process_group: Any) -> None:
        self.timer = timer
        self.process_group = process_group
        self.pg_name = _pg_name(process_group)


def _timed_allreduce_hook(state, bucket):  # no annotations: DDP checks them at registration
    """DDP comm hook: number and time the bucket's all-reduce, then behave exactly like ``allreduce_hook``."""
    from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

    timer = state.timer
    monitor = timer.monitor
    try:
        buffer = bucket.buffer()
        seq = monitor.collective_begin(state.pg_name)
        nbytes = _nbytes(buffer)
        if buffer.is_cuda:
            start_event = timer._torch.cuda.Event(enable_timing=True)
            start_event.record()
            start: Any = (start_event, time.time())
        else:
            start = _perf()
    except Exception as exc:  # timing must never break training
        monitor._error("ddp hook", exc)
        return allreduce_hook(state.process_group, bucket)

    with suppressed():  # numbered here already: the tracker's all_reduce wrapper must not count it again
        fut = allreduce_hook(state.process_group, bucket)

    def done(f):
        timer.finish((seq, state.pg_name, start), "allreduce", nbytes)
        return f.value()

    return fut.then(done)


def attach_ddp(ddp_model: Any, monitor: RankMonitor, *, process_group: Any = None,
               cuda: bool | None = None) -> CollectiveTimer:
    """Shortcut: ``attach_ddp(model, monitor)`` creates a :class:`CollectiveTimer` and registers its hook."""
    return CollectiveTimer(monitor, cuda=cuda).attach_ddp(ddp_model, process_group)
