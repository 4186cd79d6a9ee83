"""Every process group a rank can see, with its collective sequence numbers (heartbeats' ``pgs``).

Installed by :class:`~stepwatch.producers.monitor.RankMonitor` when ``torch.distributed`` is
already imported (``STEPWATCH_MONITOR_PROCESS_GROUPS=0`` turns it off), or explicitly with
``track_process_groups(monitor)``:

* **which groups, and their ranks**: read from ``torch.distributed``'s own registry of the
  groups this process belongs to, so groups made by ``new_group``, ``new_subgroups``, device
  meshes (``init_device_mesh``), FSDP's hybrid sharding or any library are all seen, whoever
  created them. A group is named as in ``collective.pg`` (``"default"`` for the default
  group, ``"<group_desc>:pg<group_name>"`` where torch knows a description, e.g.
  ``new_group(..., group_desc="tp0")`` or a device-mesh dimension, else ``"pg<group_name>"``:
  the same on every member);
* **sequence numbers and time**: in torch with ProcessGroup hooks (2.15:
  ``ProcessGroup.register_pre_hook``/``register_post_hook``), a pre and a post hook on every
  group, registered on the groups that exist when the monitor starts and on each new group as
  ``_new_process_group_helper`` makes it (before its first collective, so every member numbers the
  same calls). They fire inside the ProcessGroup for every caller: DDP's C++ reducer, FSDP1/FSDP2
  (``all_gather_single``/``reduce_scatter_single``, sync or ``async_op=True``), functional
  collectives (DTensor, ``torch.compile``), explicit calls. A collective is numbered on its group
  when issued (``started``) and completed when the caller's ``Work.wait()`` returns (synchronous
  calls: torch's functions wait at once) or its work's future completes (``async_op``); its
  interval feeds the step's ``comm_time``. Point-to-point ``send``/``recv`` (and ``isend``/``irecv``/
  ``batch_isend_irecv``, which use them) are timed until the caller's ``Work.wait()`` returns
  (gloo has no future for them) but not numbered (see below). Object collectives
  (``all_gather_object`` issues two all-gathers) are wrapped and count once. On CUDA a start
  CUDA event is recorded at issue and an end event where the result is ready on the caller's
  stream; both are queried (never synchronized) from the heartbeat thread and at step ends.
  Without ProcessGroup hooks (older torch) the collective functions of ``torch.distributed`` are
  wrapped instead (``COLLECTIVES``), which misses the C++ reducer and functional collectives.

Why not PyTorch's own per-group counter (``ProcessGroup._get_sequence_number_for_group``)?
It counts point-to-point ``send``/``recv`` too (measured on gloo, torch 2.x), and pipeline
stages do different numbers of those on a shared group, so members of a healthy group would
disagree. It is read into ``torch_seq`` (``snapshot()``) for debugging, not compared.

The hooks cost the issuing thread torch's hook dispatch (~2 µs for two empty Python hooks), two
fields of the hook's arguments, a dict update and a clock read per collective; a synchronous
call ends at its ``Work.wait()``, an ``async_op`` one through a future callback on the backend's
thread; the step's intervals are summed at its end (bench/overhead.py --frameworks,
BENCHMARKS.md). The group registry is read from the heartbeat thread (cached until the number
of groups changes).
"""

from __future__ import annotations

import collections
import functools
import inspect
import logging
import os
import sys
import threading
import time
from typing import Any

from .collectives import DEFAULT_PG

log = logging.getLogger(__name__)

__all__ = ["ProcessGroupTracker", "track_process_groups", "COLLECTIVES", "OBJECT_COLLECTIVES"]

#: The object collectives: wrapped in hook mode too, so each counts once (they issue several collectives).
OBJECT_COLLECTIVES = ("all_gather_object", "broadcast_object_list", "gather_object", "scatter_object_list")

#: ``torch.distributed`` functions numbered per group where torch has no ProcessGroup hooks (function-
#: wrapper mode; point-to-point ops are left out on purpose).
COLLECTIVES = ("all_reduce", "all_gather", "all_gather_into_tensor", "_all_gather_base", "all_gather_object",
               "all_reduce_coalesced", "reduce_scatter", "reduce_scatter_tensor", "_reduce_scatter_base",
               "broadcast", "broadcast_object_list", "reduce", "barrier", "all_to_all", "all_to_all_single",
               "gather", "scatter", "gather_object", "scatter_object_list", "monitored_barrier")

class _ThreadState(threading.local):
    #: Depth of wrapped calls on this thread (nested calls count once). A class default, so reading it
    #: on a thread that never set it costs no AttributeError (1.3 µs with ``getattr(local, name, 0)``).
    depth = 0


_tls = _ThreadState()
_installed: "ProcessGroupTracker | None" = None
_install_lock = threading.Lock()


def _depth() -> int:
    return _tls.depth


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
        # CUDA collectives not known complete yet: (seq, group name, end event, op, (start event, wall
        # clock) or None when only completion is tracked).
        self._pending: list[tuple[int, str, Any, str, Any]] = []
        #: Hook mode (ProcessGroup pre/post hooks) or function-wrapper mode (older torch); see install().
        self.hooks = False
        self._hooked: dict[int, Any] = {}  # id(pg) -> pg, groups carrying our hooks
        # Synchronous calls issued, their wait() not returned yet: thread id -> (seq, op, group name,
        # start). torch's synchronous functions wait right after issuing, on the same thread.
        self._parked: dict[int, tuple] = {}
        # Asynchronous point-to-point works waiting for the caller's wait() (gloo has no future for
        # them): id(work) -> (work, entry). Insertion-ordered, at most pending_max.
        self._waits: dict[int, tuple[Any, tuple]] = {}
        # Ended calls whose time poll() has not charged to a step yet: (seq, op, group name, start,
        # end). Appended from any thread (deque appends are atomic); capped: when a step issues more
        # calls than this between two polls, the oldest times are lost, never their numbers.
        self._ended: collections.deque = collections.deque(maxlen=65536)
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
                # What torch knows of the group (``new_group(group_desc=...)``, device-mesh dims
                # "mesh_tp", ...) goes first: the same on every member, like the group name.
                desc = _describe(pg)
                if desc:
                    name = f"{desc}:{name}"
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
        except Exception:  # silent: a probe: this torch keeps no group registry (groups named as first seen)
            return
        if len(registry) == self._registry_size:
            return
        monitor = self.monitor
        for pg, ranks in list(registry.items()):
            if not hasattr(pg, "group_name"):
                continue  # a group this rank is not a member of (GroupMember.NON_GROUP_MEMBER)
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
        except Exception:  # silent: a probe: this torch keeps no group registry (no per-group progress)
            groups = []
        for pg in groups:
            if not hasattr(pg, "group_name"):
                continue  # not a member
            name = self.name_of(pg)
            entry = {"started": monitor.seq_started.get(name, 0), "completed": monitor.seq_completed.get(name, 0)}
            try:
                entry["torch_seq"] = int(pg._get_sequence_number_for_group())
            except Exception:  # silent: a probe: this torch numbers no collectives per group (torch_seq left out)
                pass
            out[name] = entry
        return out

    # -- ProcessGroup hooks (torch with ``ProcessGroup.register_pre_hook``) ------------------

    def install(self) -> "ProcessGroupTracker":
        """Hook every process group (ProcessGroup pre/post hooks where torch has them, else wrap the
        ``torch.distributed`` functions); idempotent; ``uninstall`` undoes what it can."""
        from torch.distributed import distributed_c10d as c10d

        self.hooks = _has_pg_hooks()
        if self.hooks:
            self._install_hooks(c10d)
            # The object collectives issue two or more collectives each (sizes, then data): counted once.
            names = OBJECT_COLLECTIVES
        else:
            names = COLLECTIVES
        dist = self._dist
        for name in names:
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
        for pg in self._hooked.values():
            try:
                pg.unregister_pre_hook(_HOOK_ID)
                pg.unregister_post_hook(_HOOK_ID)
            except Exception as exc:  # a destroyed group: nothing left to unhook
                log.debug("stepwatch: cannot unhook a process group: %r", exc)
        self._hooked.clear()

    def _install_hooks(self, c10d) -> None:
        from torch._C._distributed_c10d import Work

        # Groups made later are hooked as they are made, before their first collective, so every
        # member numbers the same calls; the ones that exist now are hooked here.
        helper = c10d._new_process_group_helper
        if not getattr(helper, "__stepwatch_wrapped__", False):
            tracker = self

            @functools.wraps(helper)
            def new_process_group_helper(*args, **kwargs):
                result = helper(*args, **kwargs)
                try:
                    pg = result[0] if isinstance(result, tuple) else result
                    tracker.attach(pg)
                except Exception as exc:  # a group we cannot hook must not stop its creation
                    tracker.monitor._error("pg tracker attach", exc)
                return result

            new_process_group_helper.__stepwatch_wrapped__ = True  # type: ignore[attr-defined]
            self._originals[(c10d, "_new_process_group_helper")] = helper
            c10d._new_process_group_helper = new_process_group_helper
        # Point-to-point works have no future on gloo: they end when the caller's wait() returns.
        wait = Work.wait
        if not getattr(wait, "__stepwatch_wrapped__", False):
            waits, parked = self._waits, self._parked
            finish = self._finish
            get_ident = threading.get_ident

            def counted_wait(work, *args, **kwargs):
                result = wait(work, *args, **kwargs)
                if parked:
                    entry = parked.pop(get_ident(), None)
                    if entry is not None:
                        finish(entry)
                if waits:
                    entry = waits.pop(id(work), None)
                    if entry is not None:
                        finish(entry[1])
                return result

            counted_wait.__stepwatch_wrapped__ = True  # type: ignore[attr-defined]
            counted_wait.__doc__ = wait.__doc__
            self._originals[(Work, "wait")] = wait
            Work.wait = counted_wait
        try:
            groups = list(c10d._world.pg_group_ranks)
        except Exception:  # silent: a probe: this torch keeps no group registry (groups hooked as first seen)
            groups = []
        for pg in groups:
            try:
                self.attach(pg)
            except Exception as exc:  # one group we cannot hook must not stop tracking the others
                self.monitor._error("pg tracker attach", exc)

    def attach(self, pg: Any) -> bool:
        """Register this tracker's pre/post hooks on ``pg`` (once per group)."""
        if not self.hooks or pg is None or not hasattr(pg, "register_pre_hook") or id(pg) in self._hooked:
            return False
        name = self.name_of(pg)
        try:
            backend = str(pg._get_backend_name()).lower()
        except Exception:  # silent: a probe: backend unknown (timed as a CPU backend)
            backend = ""
        # nccl-only groups: CUDA events; gloo: wall clock; mixed ("cpu:gloo,cuda:nccl"): by tensor.
        device = "cuda" if "nccl" in backend and "gloo" not in backend else ("mixed" if "nccl" in backend else "cpu")
        pre, post = self._hooks_for(name, device)
        pg.register_pre_hook(_HOOK_ID, pre)
        pg.register_post_hook(_HOOK_ID, post)
        self._hooked[id(pg)] = pg
        self._registry_size = -1  # its ranks reach the heartbeats at the next refresh
        return True

    def _hooks_for(self, name: str, device: str) -> tuple:
        """One group's pre and post hooks: closures over its name and its table of issued calls.

        They run on the thread issuing the collective (training or autograd thread), so they do
        the least (every field of torch's hook arguments read costs 0.2-0.9 µs): the pre hook numbers
        the call and reads the clock. A synchronous call (``async_op=False``: torch's functions wait
        on it at once, on the same thread) is parked under the thread's id until its
        ``Work.wait()`` returns, so its post hook reads nothing and no future callback runs (its
        hand-over to the backend's thread cost ~7 µs a call). An ``async_op`` call's post hook adds a
        callback to its work's future, or, point-to-point (no future on gloo), keeps the work until
        its wait(). The step's collective time is summed from ``_ended`` at the step's end or the
        next heartbeat (``poll``).
        """
        tracker = self
        tls = _tls
        kinds = _OP_KIND
        numbered, ignored = _NUMBERED, _IGNORED
        perf = _perf
        get_ident = threading.get_ident
        cpu, cuda = device == "cpu", device == "cuda"
        inflight: dict[int, tuple] = {}  # op_id -> (seq, op, group name, start): async, post hook not seen yet
        waits, parked = self._waits, self._parked
        finish = self._finish

        def pre(args: Any) -> None:
            if tls.depth:
                return  # numbered by an outer wrapper (object collective, DDP timing hook, CollectiveTimer)
            try:
                op = args.name.value
                kind = kinds.get(op)
                if kind is None:  # first call of this op: its kind and name, once
                    kind = kinds[op] = _op_kind(args.name)
                    _OP_NAMES[op] = str(getattr(args.name, "name", op)).lower()
                if kind is ignored:
                    return
                if kind is numbered:
                    started = tracker.monitor.seq_started
                    seq = started.get(name, 0) + 1
                    started[name] = seq
                else:
                    seq = 0  # point-to-point: timed, not numbered
                start = perf() if cpu or not (cuda or _tensors_on_cuda(args)) else tracker._cuda_start()
                if args.async_op:
                    if len(inflight) >= tracker.pending_max:
                        inflight.pop(next(iter(inflight)))  # a post hook that never came: bounded
                    inflight[args.op_id] = (seq, op, name, start)
                    return
                old = parked.get(get_ident())
                parked[get_ident()] = (seq, op, name, start)
                if old is not None:
                    # Its wait() never came (a caller outside torch's functions) and this thread went
                    # on: not blocked in it. Its number moves; its time is unknown.
                    tracker._completed(old[0], old[2])
            except Exception as exc:  # numbering must never break training
                tracker.monitor._error("pg tracker", exc)

        def post(args: Any) -> None:
            if not inflight:
                return  # synchronous (parked) or not ours
            entry = inflight.pop(args.op_id, None)
            if entry is None:
                return
            try:
                work = args.work
                if work is None:
                    finish(entry)
                    return
                if not entry[0]:
                    # Point-to-point ends at the caller's wait(): gloo has no future for it.
                    if len(waits) >= tracker.pending_max:
                        _work, old = waits.pop(next(iter(waits)))
                        finish(old)  # never waited for: bounded, counted as ended now
                    waits[id(work)] = (work, entry)
                    return
                try:
                    work.get_future().then(lambda _fut: finish(entry))
                    return
                except Exception:
                    pass  # silent: no future on this backend: completed when issued
                finish(entry)
            except Exception as exc:
                tracker.monitor._error("pg tracker", exc)

        return pre, post

    def _finish(self, entry: tuple) -> None:
        """The call of ``entry`` is done (host clock), or its result is ready on the current CUDA stream.

        Its number moves at once (heartbeats read it); its interval waits in ``_ended`` for ``poll``.
        """
        seq, op, name, start = entry
        if start.__class__ is tuple:
            self._cuda_end(seq, self._op_name(op), name, start)
            return
        end = _perf()
        if seq:
            self.monitor.collectives.completed(seq, name)
        self._ended.append((seq, op, name, start, end))

    @staticmethod
    def _op_name(op: int) -> str:
        return _OP_NAMES.get(op) or str(op)

    def _drain(self) -> None:
        """Charge the calls ended since the last drain to the current step (numbers have already moved)."""
        ended = self._ended
        if not ended:
            return
        popleft = ended.popleft
        items = [popleft() for _ in range(len(ended))]
        monitor = self.monitor
        t0 = monitor.timer.started
        if t0 is None:
            return  # outside a step there is no step to charge the time to
        if monitor.config.collective_events:  # per-call events (off by default): the full road
            for seq, op, name, start, end in items:
                if end >= t0:
                    monitor.collective_end(seq, op=self._op_name(op), pg=name, start=start, end=end)
            return
        monitor.collectives.charge(items, since=t0)

    def _done(self, seq: int, op: str, name: str, start: float) -> None:
        """Function-wrapper mode (torch without ProcessGroup hooks): record the call at once."""
        monitor = self.monitor
        if monitor.timer.started is None:
            # Outside a step there is no step to charge the time to: only the number moves
            # (the step's interval list would grow until the next step otherwise).
            self._completed(seq, name)
            return
        monitor.collective_end(seq, op=op, pg=name, start=start, end=_perf())

    def _completed(self, seq: int, name: str) -> None:
        self.monitor.collectives.completed(seq, name)

    def _cuda_start(self) -> tuple:
        import torch

        event = torch.cuda.Event(enable_timing=True)
        event.record()
        return (event, _wall())

    def _cuda_end(self, seq: int, op: str, name: str, start: tuple) -> None:
        try:
            import torch

            end = torch.cuda.Event(enable_timing=True)
            end.record()
        except Exception as exc:
            self.monitor._error("cuda event", exc)
            self._completed(seq, name)
            return
        with self._pending_lock:
            if len(self._pending) >= self.pending_max:
                old = self._pending.pop(0)
                self._completed(old[0], old[1])  # bounded: the oldest is assumed done
            self._pending.append((seq, name, end, op, start))

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
                    pass  # silent: no future (some backends): counted as completed when issued
            if _on_cuda(args) and tracker._after_on_stream(seq, name):
                return result
            tracker._done(seq, op, name, start)
            return result

        counted.__stepwatch_wrapped__ = True  # type: ignore[attr-defined]
        return counted

    def _after_on_stream(self, seq: int, name: str) -> bool:
        """Mark ``seq`` completed when the current CUDA stream passes this point (False: cannot tell)."""
        try:
            import torch

            if torch.cuda.is_current_stream_capturing():
                return False  # inside a CUDA graph capture: no event to query
            event = torch.cuda.Event()
            event.record()
        except Exception:  # silent: a probe: no CUDA event here (timed on the host)
            return False
        with self._pending_lock:
            if len(self._pending) >= self.pending_max:
                old = self._pending.pop(0)
                self._completed(old[0], old[1])  # bounded: the oldest is assumed done
            self._pending.append((seq, name, event, "", None))
        return True

    def poll(self) -> int:
        """At a step's end and each heartbeat: charge ended calls to the step, move the numbers of
        and report the CUDA collectives whose end events
        passed (non-blocking ``Event.query``). Returns how many CUDA collectives were reported."""
        self._drain()
        if not self._pending:
            return 0
        done = 0
        monitor = self.monitor
        with self._pending_lock:
            keep = []
            for item in self._pending:
                seq, name, event, op, start = item
                try:
                    if not event.query():
                        keep.append(item)
                        continue
                    duration = start[0].elapsed_time(event) / 1000.0 if start is not None else None
                except Exception as exc:  # counted; a broken event must not hold the number back forever
                    duration = None
                    monitor._error("cuda event", exc)
                done += 1
                if duration is None or monitor.timer.started is None:
                    self._completed(seq, name)
                else:
                    monitor.collective_end(seq, op=op, pg=name, duration=duration, start_ts=start[1])
            self._pending = keep
        return done


def _describe(pg: Any) -> str | None:
    try:
        desc = str(pg.group_desc or "")
    except Exception:  # silent: a group without a description (older torch): named by its number
        return None
    if not desc or desc in ("undefined", "default_pg"):
        return None
    return "".join(c if c.isalnum() or c in "_-.:" else "_" for c in desc)[:64]


_HOOK_ID = 0x5354_5750  # our id among a group's pre/post hooks (torch's own ones use others)


def _has_pg_hooks() -> bool:
    try:
        from torch._C._distributed_c10d import ProcessGroup, Work

        return hasattr(ProcessGroup, "register_pre_hook") and hasattr(ProcessGroup, "register_post_hook") \
            and hasattr(Work, "wait")
    except Exception:  # silent: a probe: this torch lacks the ProcessGroup hooks (the wrappers are used)
        return False


class _Kind:
    """How a hooked op counts: numbered collective, point-to-point (timed, not numbered), or ignored."""

    __slots__ = ("label",)

    def __init__(self, label: str) -> None:
        self.label = label


_NUMBERED, _P2P, _IGNORED = _Kind("numbered"), _Kind("p2p"), _Kind("ignored")
_OP_KIND: dict[int, _Kind] = {}  # hook op (its enum value: hashing the enum costs ~0.8 µs) -> kind
_OP_NAMES: dict[int, str] = {}
#: Hooked ops that move no training data between members (group splits, symmetric-memory windows).
_NOT_COMM = frozenset({"SPLIT", "NEW_WINDOW"})


def _op_kind(op: Any) -> _Kind:
    name = str(getattr(op, "name", op)).upper()
    if name in ("SEND", "RECV", "RECVANYSOURCE"):
        return _P2P
    return _IGNORED if name in _NOT_COMM else _NUMBERED


def _tensors_on_cuda(args: Any) -> bool:
    try:
        tensors = args.input_tensors or args.output_tensors
        return bool(tensors) and bool(tensors[0].is_cuda)
    except Exception:  # silent: a probe: arguments without tensors are not on CUDA
        return False


_wall = time.time


def _on_cuda(args: tuple) -> bool:
    x = args[0] if args else None
    if isinstance(x, (list, tuple)) and x:
        x = x[0]
    return bool(getattr(x, "is_cuda", False))


_perf = time.perf_counter


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
