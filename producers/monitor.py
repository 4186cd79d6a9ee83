"""The rank monitor: what a training process runs to feed stepwatch.

One :class:`RankMonitor` per training process (rank). It measures each step on the
training thread, and everything else happens off it::

    monitor = RankMonitor()                      # job, rank, ... from args or environment
    for batch in loader:
        with monitor.step(samples=len(batch)):   # step_time, compute_time, data/comm time
            ...

Guarantees (see docs/training.md):

* the hot path (``step``/``begin_step``/``end_step``/``data``/collective marks) only reads
  clocks, builds a small dict and appends it to a bounded in-memory queue; it never
  touches Kafka, never blocks on it and never raises into the training loop: any error is
  logged (rate-limited) and counted in :attr:`RankMonitor.errors`;
* the queue is bounded (``queue_size`` events); when it is full the *oldest* event is
  dropped and counted in :attr:`RankMonitor.dropped` (fresh heartbeats matter more than
  old ones when a broker comes back);
* the queue and the daemon sender thread are the producer transport
  (:mod:`stepwatch.producers.transport`, in its drop mode): it batches events into
  wire-format batch envelopes and publishes them with kafka-python (linger, gzip, short
  ``max_block_ms``). A broker that is down at start, or goes away, is retried in that
  thread; the constructor never fails because of Kafka. TLS/SASL come from the same
  ``STEPWATCH_SECURITY_*`` settings as the worker's (or a ``settings`` object);
* a daemon heartbeat thread reports the last completed step and the collective sequence
  numbers every ``heartbeat_interval`` seconds, also while the training thread is blocked
  (in a hung collective, say): that is what lets stepwatch name the culprit of a hang;
* :meth:`RankMonitor.close` flushes with a timeout and joins its threads; it is also
  registered with :mod:`atexit`. After ``close``, ``sent + dropped == produced``.

``compute_time`` is ``step_time - data_time - comm_time``, where ``comm_time`` is the
wall-clock union of the collective intervals recorded during the step (every collective
and point-to-point op of every process group, from the ProcessGroup hooks of
:mod:`stepwatch.producers.pg_tracker`; or the DDP comm hook of
:mod:`stepwatch.producers.torch_hooks`) — the time the rank spent in, or waiting in,
communication. A slow rank arrives last and waits least, so its ``compute_time`` stands
out even though every rank's ``step_time`` is the same.
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Callable

from stepwatch.client_settings import ClientSettings

from .collectives import DEFAULT_PG, CollectiveRecorder
from .heartbeat import Heartbeats
from .monitor_config import MonitorConfig
from .step_timer import StepTimer, _PhaseScope
from .transport import DROP, Transport

if TYPE_CHECKING:  # the whole tree only as a type: importing it loads the detection core
    from stepwatch.config import Settings

log = logging.getLogger(__name__)

__all__ = ["RankMonitor", "MonitorConfig", "DEFAULT_PG"]

_perf = time.perf_counter



def process_incarnation(proc_root: str = "/proc") -> int:
    """This process's start, milliseconds since the epoch (``/proc/self/stat`` field 22 plus the boot time of
    ``/proc/stat``): the same for every event of the process, higher after a restart. Where procfs cannot tell,
    now (the monitor starts with the process)."""
    try:
        with open(f"{proc_root}/self/stat") as f:
            start_ticks = int(f.read().rpartition(")")[2].split()[19])
        with open(f"{proc_root}/stat") as f:
            boot = next(int(line.split()[1]) for line in f if line.startswith("btime "))
        return int((boot + start_ticks / os.sysconf("SC_CLK_TCK")) * 1000)
    except (OSError, ValueError, IndexError, StopIteration):
        return int(time.time() * 1000)

class RankMonitor:
    """Measures steps, phases and collectives of one rank and ships them to Kafka off the hot path.

    All arguments are keyword-only and optional (see :class:`MonitorConfig` for the
    environment variables). ``enabled=False`` (or ``STEPWATCH_MONITOR_ENABLED=0``) makes
    every call a cheap no-op and starts no thread.

    Its parts are objects, one file each, each with its own state; what one needs of another is
    handed to it as a callable when it is built here:

    * :attr:`config`: the settings (producers/monitor_config.py);
    * :attr:`timer`: steps, data waits and phases (producers/step_timer.py), the training thread's;
    * :attr:`collectives`: sequence numbers per process group and the step's collective time
      (producers/collectives.py), written from any thread (torch hooks, producers/pg_tracker.py);
    * :attr:`heartbeats`: heartbeat events and their thread (producers/heartbeat.py);
    * :attr:`transport`: the queue and sender thread (producers/transport.py).

    The monitor keeps what they share: the error counter (``_error``), the queue entry point
    (``_enqueue``), the late-timing pollers (``_pollers``), the stop event and the lifecycle.
    The parts' calls (``begin_step``, ``end_step``, ``data``, ``phase``, ``collective_end``,
    ``heartbeat``, ...) are bound onto the monitor in ``__init__``: a call from the training
    thread or a hook goes straight to the part, with no delegating layer in between.
    """

    # The parts' calls, bound per instance in __init__ (documented on the parts).
    begin_step: Callable[..., None]  # StepTimer.begin_step
    end_step: Callable[..., None]  # StepTimer.end_step
    data_begin: Callable[[], None]  # StepTimer.data_begin
    data_end: Callable[[], None]  # StepTimer.data_end
    data: Callable[[], Any]  # StepTimer.data (context manager)
    loader: Callable[[Any], Any]  # StepTimer.loader
    add_data_time: Callable[[float], None]  # StepTimer.add_data_time
    phase: Callable[..., _PhaseScope]  # StepTimer.phase
    end: Callable[[], None]  # StepTimer.end
    collective_begin: Callable[..., int]  # CollectiveRecorder.collective_begin
    collective_end: Callable[..., None]  # CollectiveRecorder.collective_end
    collective: Callable[..., Any]  # CollectiveRecorder.collective (context manager)
    heartbeat: Callable[[], None]  # Heartbeats.heartbeat
    heartbeat_event: Callable[[], dict]  # Heartbeats.heartbeat_event

    def __init__(self, *, job: str | None = None, rank: int | None = None, world_size: int | None = None,
                 node: str | None = None, gpu: int | None = None, group: str | None = None,
                 bootstrap: str | None = None, topic: str | None = None, enabled: bool | None = None,
                 heartbeat_interval: float | None = None, queue_size: int | None = None,
                 collective_events: bool | None = None, flush_interval: float = 0.1, close_timeout: float = 5.0,
                 producer_config: Mapping[str, Any] | None = None, environ: Mapping[str, str] | None = None,
                 start_step: int = 0, sink: Callable[[list[dict]], None] | None = None,
                 job_phases: bool | None = None, shard_ranks: int | None = None,
                 settings: ClientSettings | Settings | None = None) -> None:
        self.config = cfg = MonitorConfig(
            job=job, rank=rank, world_size=world_size, node=node, gpu=gpu, group=group, bootstrap=bootstrap,
            topic=topic, enabled=enabled, heartbeat_interval=heartbeat_interval, queue_size=queue_size,
            collective_events=collective_events, flush_interval=flush_interval, close_timeout=close_timeout,
            producer_config=producer_config, environ=environ, shard_ranks=shard_ranks, settings=settings)
        self.job, self.rank, self.node = cfg.job, cfg.rank, cfg.node
        self.enabled = cfg.enabled
        #: Instead of Kafka, hand each batch of wire-form events to this callable (tests, files).
        self._sink = sink
        # Keyed by job, or by this rank's shard (shard_ranks): then job-wide phase events (no ``rank``)
        # still go under the job id (docs/events.md).
        self._key = cfg.key
        self._job_key = cfg.job
        # Fields every event of this rank carries; step events add theirs to a copy.
        step_base: dict[str, Any] = {"v": 1, "kind": "step", "job": cfg.job, "rank": cfg.rank}
        for name, value in (("node", cfg.node), ("gpu", cfg.gpu), ("group", cfg.group),
                            ("world_size", cfg.world_size)):
            if value is not None:
                step_base[name] = value
        rank_base: dict[str, Any] = {"job": cfg.job, "rank": cfg.rank}
        if cfg.node:
            rank_base["node"] = cfg.node
        # This process's incarnation on its heartbeats: a restart is then told, not guessed from steps that went
        # back (docs/events.md). Not on step events: a field outside the plain step keeps a batch off the
        # column decoder (models/wire/step_columns.py), and the heartbeats tell the hang rule enough.
        self.incarnation = process_incarnation()
        # Phase events of rank 0 speak for the whole job (no ``rank`` field: see docs/events.md),
        # so a job-wide eval/checkpoint/end is announced once; other ranks mark their own phase.
        self.job_phases = (cfg.rank == 0) if job_phases is None else bool(job_phases)
        phase_base: dict[str, Any] = {"job": cfg.job} if self.job_phases else {"job": cfg.job, "rank": cfg.rank}

        # Hot-path errors (bad arguments, ...); Kafka problems are the transport's (see stats()).
        self.errors = 0
        self.last_error: str | None = None
        self._last_error_log = 0.0
        #: The queue, sender thread and producer (None while disabled).
        self.transport: Transport | None = None
        #: Callables run at each step end and heartbeat to report timings read late (CUDA events):
        #: appended by producers/pg_tracker.py and producers/torch_hooks.py.
        self._pollers: list = []
        #: Set by close(): the heartbeat thread and the control listener (producers/stacks.py) stop.
        self._stop = threading.Event()

        # The parts. The recorder numbers a collective event with the timer's current step, and the timer
        # takes the recorder's collective time at each step's end: each gets the other's call, nothing more
        # (the lambda reads ``timer`` when called: it is built on the next line).
        self.collectives = comm = CollectiveRecorder(
            enabled=self.enabled, rank_base=rank_base, emit=self._enqueue, on_error=self._error,
            event_step=lambda: timer.event_step(), collective_events=bool(cfg.collective_events))
        self.timer = timer = StepTimer(
            enabled=self.enabled, step_base=step_base, phase_base=phase_base, emit=self._enqueue,
            on_error=self._error, take_comm=comm.take_step, pollers=self._pollers, poll=self._poll,
            start_step=start_step)
        self.heartbeats = beats = Heartbeats(
            enabled=self.enabled, rank_base={**rank_base, "incarnation": self.incarnation}, emit=self._enqueue, on_error=self._error,
            step_fields=timer.heartbeat_fields, comm_fields=comm.heartbeat_fields, pollers=self._pollers,
            poll=self._poll, interval=cfg.heartbeat_interval, stop=self._stop,
            name=f"stepwatch-heartbeat-r{cfg.rank}")
        # Their calls, bound here: the training thread and the hooks call the part itself.
        self.begin_step, self.end_step = timer.begin_step, timer.end_step
        self.data_begin, self.data_end, self.data = timer.data_begin, timer.data_end, timer.data
        self.loader, self.add_data_time = timer.loader, timer.add_data_time
        self.phase, self.end = timer.phase, timer.end
        self.collective_begin, self.collective_end = comm.collective_begin, comm.collective_end
        self.collective = comm.collective
        self.heartbeat, self.heartbeat_event = beats.heartbeat, beats.heartbeat_event
        # The recorder's own dicts (written by producers/pg_tracker.py's hooks, read by tests and stats).
        self.seq_started = comm.seq_started
        self.seq_completed = comm.seq_completed
        self.pg_ranks = comm.pg_ranks
        self.default_pg = DEFAULT_PG

        self._closed = False
        self._pid = os.getpid()
        self._pg_tracker = self._control = None
        if not self.enabled:
            return
        user_sink = sink
        self.transport = Transport(
            topic=cfg.topic, bootstrap=cfg.bootstrap, settings=settings or ClientSettings(), security=cfg.security,
            config_error=cfg.security_error, mode=DROP,
            queue_size=cfg.queue_size, flush_interval=cfg.flush_interval, linger_ms=50, max_block_ms=1000,
            client_id=f"stepwatch-{self.job}-r{self.rank}", producer_config=cfg.producer_config,
            sink=(lambda _key, events: user_sink(events)) if user_sink is not None else None,
            on_connect=self._connected, name=f"stepwatch-sender-r{cfg.rank}")
        beats.start()
        atexit.register(self._atexit)
        # Every process group's sequence numbers (when torch is imported), and answers to stack
        # requests on the control topic (docs/hang.md). Both off the training thread's way.
        from .pg_tracker import auto_track
        from .stacks import start_control_listener

        self._pg_tracker = auto_track(self, environ)
        self._control = start_control_listener(self, environ)

    @contextmanager
    def step(self, step: int | None = None, *, tokens: float | None = None, samples: float | None = None,
             loss: float | None = None) -> Iterator["RankMonitor"]:
        """``with monitor.step(): ...`` measures one step. An exception in the body is not reported as a step."""
        timer = self.timer
        timer.begin_step(step)
        ok = False
        try:
            yield self
            ok = True
        finally:
            if ok:
                timer.end_step(tokens=tokens, samples=samples, loss=loss)
            else:
                timer.abandon_step()

    @property
    def last_step(self) -> int | None:
        """The last completed step (None before the first)."""
        return self.timer.last_step

    @property
    def current_phase(self) -> str:
        return self.timer.phase_name

    def _poll(self) -> None:
        for poll in self._pollers:
            try:
                poll()
            except Exception as exc:
                self._error("poll", exc)

    # -- hot path ---------------------------------------------------------------------------

    def _enqueue(self, event: dict, urgent: bool = False) -> None:
        # Job-wide phase events (no rank) go under the job id even when this rank's are keyed by shard.
        transport = self.transport
        if transport is not None:
            transport.offer(self._key if "rank" in event else self._job_key, [event], urgent=urgent)

    def _error(self, where: str, exc: BaseException) -> None:
        # Never raises: a broken monitor must not break training.
        try:
            self.errors += 1
            self.last_error = f"{where}: {exc!r}"
            now = _perf()
            if now - self._last_error_log > 60.0:
                self._last_error_log = now
                log.warning("stepwatch monitor error in %s (training continues): %r", where, exc)
        except Exception:  # silent: this is the error counter itself: nowhere left to report to, training must go on
            pass

    # -- sender --------------------------------------------------------------------------------

    def _connected(self) -> None:
        # kafka-python registers an atexit close of its own; ours must run first so it can flush.
        if not self._closed:
            atexit.unregister(self._atexit)
            atexit.register(self._atexit)

    # Counters (events): produced (queued by this rank), sent (acknowledged by Kafka or the sink), dropped.

    @property
    def produced(self) -> int:
        return self.transport.offered if self.transport is not None else 0

    @property
    def sent(self) -> int:
        return self.transport.sent if self.transport is not None else 0

    @property
    def dropped(self) -> int:
        return self.transport.dropped if self.transport is not None else 0

    @property
    def connected(self) -> bool:
        return self.transport.connected if self.transport is not None else False

    # -- lifecycle -----------------------------------------------------------------------------

    def flush(self, timeout: float = 5.0) -> bool:
        """Wait until every queued event was delivered or dropped; True if that happened in time."""
        return self.transport.flush(timeout) if self.transport is not None else False

    def close(self, timeout: float | None = None) -> None:
        """Stop the threads, flush what is queued within ``timeout`` seconds, and account for the rest.

        Never raises. Events still undelivered when the time is up count as dropped, so
        afterwards ``sent + dropped == produced``.
        """
        if self._closed:
            return
        self._closed = True
        try:
            atexit.unregister(self._atexit)
        except Exception:  # silent: not registered (closed before atexit ran): nothing to undo
            pass
        if not self.enabled or os.getpid() != self._pid:
            return
        timeout = self.config.close_timeout if timeout is None else timeout
        deadline = _perf() + timeout
        self._stop.set()
        lost = 0
        try:
            if self.heartbeats.thread is not None:
                self.heartbeats.thread.join(max(0.0, deadline - _perf()))
            if self.transport is not None:
                lost = self.transport.close(max(0.0, deadline - _perf()))
            if self._control is not None:
                self._control.thread.join(max(0.0, deadline - _perf()) + 0.5)
        except Exception as exc:
            self._error("close", exc)
        if lost:
            log.warning("stepwatch monitor: %d events not delivered at close (dropped %d in all, sent %d)",
                        lost, self.dropped, self.sent)

    def _atexit(self) -> None:
        try:
            self.close(self.config.close_timeout)
        except Exception as exc:  # at interpreter exit: counted (and logged, rate-limited), never raised
            self._error("close", exc)

    def stats(self) -> dict[str, Any]:
        """Counters for logs and tests."""
        t = self.transport.stats() if self.transport is not None else {}
        return {"produced": t.get("offered", 0), "sent": t.get("sent", 0), "dropped": t.get("dropped", 0),
                "queued": t.get("queued", 0), "in_flight": t.get("in_flight", 0),
                "errors": self.errors + t.get("errors", 0), "connected": t.get("connected", False),
                "last_error": self.last_error or t.get("last_error")}

    @property
    def threads(self) -> list[threading.Thread]:
        sender = self.transport.thread if self.transport is not None else None
        control = self._control.thread if self._control is not None else None
        return [t for t in (sender, self.heartbeats.thread, control) if t is not None]

    def __enter__(self) -> "RankMonitor":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.end()
        self.close()
