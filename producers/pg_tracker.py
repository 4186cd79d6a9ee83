"""Every process group a rank can see, with its collective sequence numbers (heartbeats' ``pgs``).

Installed by :class:`~stepwatch.producers.monitor.RankMonitor` when ``torch.distributed`` is
already imported (``STEPWATCH_MONITOR_PROCESS_GROUPS=0`` turns it off), or explicitly with
``track_process_groups(monitor)``:

* **which groups, and their ranks**: read from ``torch.distributed``'s own registry of the
  groups this process belongs to, so groups made by ``new_group``, ``new_subgroups``, device
  meshes (``init_device_mesh``), FSDP's hybrid sharding or any library are all seen, whoever
  created them. A group is named as in ``collective.pg`` (``"default"`` for the default
  group, ``"pg<group_name>"`` otherwise: the same on every member);
* **sequence numbers**: the collective functions of ``torch.distributed`` (``all_reduce``,
  ``all_gather_into_tensor``, ``reduce_scatter_tensor``, ``broadcast``, ``barrier``, ...) are
  wrapped: each call is numbered on its group when issued (``started``) and marked completed
  when it returns, or, with ``async_op=True``, when its work completes. FSDP, DDP buckets
  (without the timing hook), tensor-parallel layers and explicit calls all go through these
  functions. Nested calls (``all_gather_object`` calls ``all_gather``) count once. On CUDA
  tensors (NCCL) a blocking call returns once the collective is *enqueued*, so completion is
  an event recorded on the current stream after the call, queried (never synchronized) from
  the heartbeat thread and at step ends: a rank waiting in a NCCL collective shows
  ``started > completed`` like one waiting in gloo. Functional collectives
  (``torch.ops._c10d_functional``: DTensor, ``torch.compile``) do not go through these
  functions and are not counted.

Why not PyTorch's own per-group counter (``ProcessGroup._get_sequence_number_for_group``)?
It counts point-to-point ``send``/``recv`` too (measured on gloo, torch 2.x), and pipeline
stages do different numbers of those on a shared group, so members of a healthy group would
disagree. It is read into ``torch_seq`` (``snapshot()``) for debugging, not compared.

The wrappers cost a dict update and two clock reads per collective; the group registry is
read from the heartbeat thread (cached until the number of groups changes).
"""

from __future__ import annotations

import functools
import inspect
import logging
import os
import sys
import threading
from typing import Any

from .collectives import DEFAULT_PG

log = logging.getLogger(__name__)

__all__ = ["ProcessGroupTracker", "track_process_groups", "COLLECTIVES"]

#: ``torch.distributed`` functions numbered per group (point-to-point ops are left out on purpose).
COLLECTIVES = ("all_reduce", "all_gather", "all_gather_into_tensor", "_all_gather_base", "all_gather_object",
               "all_reduce_coalesced", "reduce_scatter", "reduce_scatter_tensor", "_reduce_scatter_base",
               "broadcast", "broadcast_object_list", "reduce", "barrier", "all_to_all", "all_to_all_single",
               "gather", "scatter", "gather_object", "scatter_object_list", "monitored_barrier")

_tls = threading.local()  # depth of wrapped calls on this thread (nested calls count once)
_installed: "ProcessGroupTracker | None" = None
_install_lock = threading.Lock()


def _depth() -> int:
    return getattr(_tls, "depth", 0)


class suppressed:
    """``with suppressed(): ...``: collectives issued inside are already counted by the caller (the DDP hook)."""

    def __enter__(self) -> None:
        _tls.depth = _depth() + 1

    def __exit__(self, *exc) -> None:
        _tls.depth = _depth() - 1


class ProcessGroupTracker:
    """Numbers the collectives of every process group of one rank and tells ``monitor`` each group's ranks."""

    def __init__(self, monitor: Any) -> None:
        import torch.distributed as dist

        self.monitor = monitor
        self._dist = dist
        self._names: dict[int, str] = {}  # id(pg) -> name
        self._registry_size = -1
        self._originals: dict[tuple[Any, str], Any] = {}
        # CUDA collectives not known complete yet: (seq, group name, event recorded after the call).
        self._pending: list[tuple[int, str, Any]] = []
        self._pending_lock = threading.Lock()
        self.pending_max = 4096
        pollers = getattr(monitor, "_pollers", None)
        if pollers is not None:
            pollers.append(self.refresh)
            pollers.append(self.poll)

    # -- groups -----------------------------------------------------------------------------

    def name_of(self, pg: Any) -> str:
        dist = self._dist
        if pg is None or pg is dist.group.WORLD:
            return DEFAULT_PG
        name = self._names.get(id(pg))
        if name is None:
            group_name = getattr(pg, "group_name", None)
            if group_name:
                name = f"pg{group_name}"
            else:
                try:
                    name = "pg" + "-".join(str(r) for r in dist.get_process_group_ranks(pg))
                except Exception:
                    name = f"pg{id(pg):x}"
            self._names[id(pg)] = name
        return name

    def refresh(self) -> None:
        """Register every group this process belongs to (and its global ranks) with the monitor."""
        try:
            from torch.distributed import distributed_c10d as c10d

            registry = c10d._world.pg_group_ranks  # {group: {global rank: group rank}}
        except Exception:
            return
        if len(registry) == self._registry_size:
            return
        monitor = self.monitor
        for pg, ranks in list(registry.items()):
            name = self.name_of(pg)
            if name != DEFAULT_PG:
                monitor.pg_ranks[name] = sorted(ranks)
            monitor.seq_started.setdefault(name, 0)
        self._registry_size = len(registry)

    def snapshot(self) -> dict[str, dict]:
        """Each group's numbers as heartbeats send them, plus PyTorch's own counter (``torch_seq``)."""
        self.refresh()
        out = {}
        monitor = self.monitor
        try:
            from torch.distributed import distributed_c10d as c10d

            groups = list(c10d._world.pg_group_ranks)
        except Exception:
            groups = []
        for pg in groups:
            name = self.name_of(pg)
            entry = {"started": monitor.seq_started.get(name, 0), "completed": monitor.seq_completed.get(name, 0)}
            try:
                entry["torch_seq"] = int(pg._get_sequence_number_for_group())
            except Exception:
                pass
            out[name] = entry
        return out

    # -- wrappers ---------------------------------------------------------------------------

    def install(self) -> "ProcessGroupTracker":
        """Wrap the collective functions of ``torch.distributed`` (idempotent; ``uninstall`` undoes it)."""
        from torch.distributed import distributed_c10d as c10d

        dist = self._dist
        for name in COLLECTIVES:
            fn = getattr(c10d, name, None)
            if fn is None or getattr(fn, "__stepwatch_wrapped__", False):
                continue
            wrapped = self._wrap(fn, name)
            for module in (dist, c10d):
                if getattr(module, name, None) is fn:
                    self._originals[(module, name)] = fn
                    setattr(module, name, wrapped)
        return self

    def uninstall(self) -> None:
        for (module, name), fn in self._originals.items():
            setattr(module, name, fn)
        self._originals.clear()

    def _wrap(self, fn, op: str):
        try:
            params = list(inspect.signature(fn).parameters)
        except (TypeError, ValueError):
            params = []
        group_index = params.index("group") if "group" in params else None
        async_index = params.index("async_op") if "async_op" in params else None
        tracker = self

        @functools.wraps(fn)
        def counted(*args, **kwargs):  # noqa: C901 (one flat wrapper: cheap on the hot path)
            if _depth():
                return fn(*args, **kwargs)
            monitor = tracker.monitor
            try:
                group = kwargs.get("group")
                if group is None and group_index is not None and len(args) > group_index:
                    group = args[group_index]
                name = tracker.name_of(group)
                seq = monitor.collective_begin(name)
                start = _perf()
            except Exception as exc:  # numbering must never break training
                monitor._error("pg tracker", exc)
                return fn(*args, **kwargs)
            _tls.depth = 1
            try:
                result = fn(*args, **kwargs)
            except BaseException:
                tracker._done(seq, op, name, start)
                raise
            finally:
                _tls.depth = 0
            is_async = kwargs.get("async_op") or (async_index is not None and len(args) > async_index
                                                  and bool(args[async_index]))
            if is_async and result is not None and hasattr(result, "get_future"):
                try:
                    result.get_future().then(lambda _fut: tracker._done(seq, op, name, start))
                    return result
                except Exception:
                    pass  # no future (some backends): counted as completed when issued
            if _on_cuda(args) and tracker._after_on_stream(seq, name):
                return result
            tracker._done(seq, op, name, start)
            return result

        counted.__stepwatch_wrapped__ = True  # type: ignore[attr-defined]
        return counted

    def _done(self, seq: int, op: str, name: str, start: float) -> None:
        monitor = self.monitor
        if getattr(monitor, "_step_t0", None) is None:
            # Outside a step there is no step to charge the time to: only the number moves
            # (the step's interval list would grow until the next step otherwise).
            self._completed(seq, name)
            return
        monitor.collective_end(seq, op=op, pg=name, start=start, end=_perf())

    def _completed(self, seq: int, name: str) -> None:
        monitor = self.monitor
        with monitor._comm_lock:
            if seq > monitor.seq_completed.get(name, 0):
                monitor.seq_completed[name] = seq

    def _after_on_stream(self, seq: int, name: str) -> bool:
        """Mark ``seq`` completed when the current CUDA stream passes this point (False: cannot tell)."""
        try:
            import torch

            if torch.cuda.is_current_stream_capturing():
                return False  # inside a CUDA graph capture: no event to query
            event = torch.cuda.Event()
            event.record()
        except Exception:
            return False
        with self._pending_lock:
            if len(self._pending) >= self.pending_max:
                old_seq, old_name, _ = self._pending.pop(0)
                self._completed(old_seq, old_name)  # bounded: the oldest is assumed done
            self._pending.append((seq, name, event))
        return True

    def poll(self) -> int:
        """Mark the CUDA collectives whose events passed as completed (non-blocking ``Event.query``)."""
        if not self._pending:
            return 0
        done = 0
        with self._pending_lock:
            keep = []
            for item in self._pending:
                seq, name, event = item
                try:
                    finished = event.query()
                except Exception:
                    finished = True  # a broken event must not hold the number back forever
                if finished:
                    self._completed(seq, name)
                    done += 1
                else:
                    keep.append(item)
            self._pending = keep
        return done


def _on_cuda(args: tuple) -> bool:
    x = args[0] if args else None
    if isinstance(x, (list, tuple)) and x:
        x = x[0]
    return bool(getattr(x, "is_cuda", False))


def _perf() -> float:
    import time

    return time.perf_counter()


def track_process_groups(monitor: Any) -> ProcessGroupTracker | None:
    """Track every process group for ``monitor`` (one tracker per process). None without torch.distributed."""
    global _installed
    if "torch.distributed" not in sys.modules and "torch" not in sys.modules:
        return None
    try:
        import torch.distributed as dist

        if not dist.is_available():
            return None
        with _install_lock:
            if _installed is not None:
                if _installed.monitor is not monitor:  # the latest monitor of this process reports
                    _installed.monitor = monitor
                    _installed._registry_size = -1
                    pollers = getattr(monitor, "_pollers", None)
                    if pollers is not None:
                        pollers.append(_installed.refresh)
                return _installed
            _installed = ProcessGroupTracker(monitor).install()
            return _installed
    except Exception as exc:
        log.warning("stepwatch: cannot track process groups (training continues): %r", exc)
        return None


def auto_track(monitor: Any, environ=None) -> ProcessGroupTracker | None:
    """What ``RankMonitor`` calls: track when torch is imported, unless ``STEPWATCH_MONITOR_PROCESS_GROUPS=0``."""
    env = os.environ if environ is None else environ
    if env.get("STEPWATCH_MONITOR_PROCESS_GROUPS", "1").strip().lower() in ("0", "false", "no", "off"):
        return None
    if "torch" not in sys.modules:
        return None
    return track_process_groups(monitor)
