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
wall-clock union of the collective intervals recorded during the step (see
:mod:`stepwatch.producers.torch_hooks`) — the time the rank spent in, or waiting in,
collectives. A slow rank arrives last and waits least, so its ``compute_time`` stands
out even though every rank's ``step_time`` is the same.
"""

from __future__ import annotations

import atexit
import logging
import os
import socket
import sys
import threading
import time
from collections.abc import Mapping
from contextlib import contextmanager
from typing import Any, Callable, Iterator

from stepwatch.config import KafkaSettings, SecuritySettings, Settings  # noqa: F401 (SecuritySettings: docs)
from stepwatch.models.events import PHASES

from .transport import DROP, MAX_EVENTS_PER_MESSAGE, Transport, security_from_env

log = logging.getLogger(__name__)

__all__ = ["RankMonitor", "MonitorConfig", "DEFAULT_PG"]

#: Name of the default process group in sequence numbers (heartbeats report this one).
DEFAULT_PG = "default"

_perf = time.perf_counter
_wall = time.time


def _env(env: Mapping[str, str], *names: str) -> str | None:
    for name in names:
        value = env.get(name)
        if value is not None and value.strip() and value.strip().lower() != "none":
            return value.strip()
    return None


def _env_int(env: Mapping[str, str], *names: str) -> int | None:
    value = _env(env, *names)
    if value is None:
        return None
    try:
        return int(value)
    except ValueError:
        log.warning("stepwatch: ignoring non-integer %s=%r", names, value)
        return None


def _env_float(env: Mapping[str, str], name: str, default: float) -> float:
    value = _env(env, name)
    if value is None:
        return default
    try:
        return float(value)
    except ValueError:
        log.warning("stepwatch: ignoring invalid %s=%r", name, value)
        return default


def _env_bool(env: Mapping[str, str], name: str, default: bool) -> bool:
    value = _env(env, name)
    if value is None:
        return default
    return value.lower() not in ("0", "false", "no", "off")


def _torch_dist():
    """``torch.distributed`` if torch is already imported and a process group is up (never imports torch)."""
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    try:
        dist = torch.distributed
        if dist.is_available() and dist.is_initialized():
            return dist
    except Exception:
        pass
    return None


class MonitorConfig:
    """Resolved monitor settings: explicit arguments win, then the environment, then defaults.

    Environment (all optional): ``STEPWATCH_JOB`` (else ``TORCHELASTIC_RUN_ID``,
    ``SLURM_JOB_ID``), ``STEPWATCH_RANK`` (else ``RANK``, ``SLURM_PROCID``, the
    initialized ``torch.distributed`` rank), ``STEPWATCH_WORLD_SIZE`` (else
    ``WORLD_SIZE``, ``SLURM_NTASKS``), ``STEPWATCH_NODE`` (else the host name),
    ``STEPWATCH_GPU`` (else ``LOCAL_RANK``, ``SLURM_LOCALID``), ``STEPWATCH_GROUP``,
    ``STEPWATCH_KAFKA_BOOTSTRAP`` (else ``KAFKA_BOOTSTRAP``), ``STEPWATCH_KAFKA_TOPIC_PREFIX``
    + ``STEPWATCH_KAFKA_EVENTS_TOPIC`` (the worker's names), ``STEPWATCH_MONITOR_ENABLED``,
    ``STEPWATCH_MONITOR_HEARTBEAT_INTERVAL``, ``STEPWATCH_MONITOR_QUEUE_SIZE``,
    ``STEPWATCH_MONITOR_COLLECTIVE_EVENTS``, ``STEPWATCH_MONITOR_SHARD_RANKS`` (0: events keyed by
    job; N > 0: keyed ``"job/<rank // N>"`` for the shard stage, see docs/events.md), and every
    ``STEPWATCH_SECURITY_*`` setting (TLS/SASL, as for the worker).

    ``settings``: a ``stepwatch.config.Settings`` (e.g. the worker's ``Settings.from_env()``):
    then bootstrap, topic names and security come from it instead of the environment
    (explicit ``bootstrap``/``topic`` arguments still win).
    """

    def __init__(self, *, job: str | None = None, rank: int | None = None, world_size: int | None = None,
                 node: str | None = None, gpu: int | None = None, group: str | None = None,
                 bootstrap: str | None = None, topic: str | None = None, enabled: bool | None = None,
                 heartbeat_interval: float | None = None, queue_size: int | None = None,
                 collective_events: bool | None = None, flush_interval: float = 0.1,
                 close_timeout: float = 5.0, producer_config: Mapping[str, Any] | None = None,
                 environ: Mapping[str, str] | None = None, shard_ranks: int | None = None,
                 settings: Settings | None = None) -> None:
        env = os.environ if environ is None else environ
        dist = _torch_dist()
        self.job = job or _env(env, "STEPWATCH_JOB", "STEPWATCH_JOB_ID", "TORCHELASTIC_RUN_ID", "SLURM_JOB_ID") \
            or "default"
        if rank is None:
            rank = _env_int(env, "STEPWATCH_RANK", "RANK", "SLURM_PROCID")
        if rank is None and dist is not None:
            rank = dist.get_rank()
        self.rank = int(rank or 0)
        if world_size is None:
            world_size = _env_int(env, "STEPWATCH_WORLD_SIZE", "WORLD_SIZE", "SLURM_NTASKS")
        if world_size is None and dist is not None:
            world_size = dist.get_world_size()
        self.world_size = world_size if world_size and world_size > self.rank else None
        self.node = node or _env(env, "STEPWATCH_NODE") or socket.gethostname() or None
        self.gpu = gpu if gpu is not None else _env_int(env, "STEPWATCH_GPU", "LOCAL_RANK", "SLURM_LOCALID")
        self.group = group if group is not None else _env(env, "STEPWATCH_GROUP")
        kafka = KafkaSettings()
        #: TLS/SASL for the producer; None: a STEPWATCH_SECURITY_* value did not parse (``security_error``).
        self.security: SecuritySettings | None
        self.security_error: str | None = None
        if settings is not None:
            kafka = settings.kafka
            self.bootstrap = bootstrap or kafka.bootstrap or "localhost:9092"
            topic = topic if topic is not None else kafka.topic(kafka.events_topic)
            self.security = settings.security
        else:
            self.bootstrap = bootstrap or _env(env, "STEPWATCH_KAFKA_BOOTSTRAP", "KAFKA_BOOTSTRAP") or "localhost:9092"
            if topic is None:
                prefix = env.get("STEPWATCH_KAFKA_TOPIC_PREFIX", kafka.topic_prefix)
                topic = prefix + (_env(env, "STEPWATCH_KAFKA_EVENTS_TOPIC") or kafka.events_topic)
            try:
                self.security = security_from_env(env)
            except ValueError as exc:
                self.security, self.security_error = None, str(exc)
        self.topic = topic
        self.enabled = enabled if enabled is not None else _env_bool(env, "STEPWATCH_MONITOR_ENABLED", True)
        self.heartbeat_interval = heartbeat_interval if heartbeat_interval is not None else \
            _env_float(env, "STEPWATCH_MONITOR_HEARTBEAT_INTERVAL", 5.0)
        self.queue_size = int(queue_size if queue_size is not None else
                              _env_float(env, "STEPWATCH_MONITOR_QUEUE_SIZE", 10_000))
        self.collective_events = collective_events if collective_events is not None else \
            _env_bool(env, "STEPWATCH_MONITOR_COLLECTIVE_EVENTS", False)
        if shard_ranks is None:
            shard_ranks = _env_int(env, "STEPWATCH_MONITOR_SHARD_RANKS")
        #: > 0: this rank's events are keyed ``f"{job}/{rank // shard_ranks}"`` (job-wide phase events
        #: keep the job id), for the shard stage (streams/shard.py); 0: keyed by job.
        self.shard_ranks = max(0, int(shard_ranks or 0))
        self.flush_interval = flush_interval
        self.close_timeout = close_timeout
        self.producer_config = dict(producer_config or {})

    def __repr__(self) -> str:
        return (f"MonitorConfig(job={self.job!r}, rank={self.rank}, world_size={self.world_size}, node={self.node!r}, "
                f"gpu={self.gpu}, group={self.group!r}, bootstrap={self.bootstrap!r}, topic={self.topic!r}, "
                f"enabled={self.enabled}, shard_ranks={self.shard_ranks})")

    @property
    def key(self) -> str:
        """Kafka key of this rank's events (``stepwatch.producers.publisher.shard_key``)."""
        return f"{self.job}/{self.rank // self.shard_ranks}" if self.shard_ranks > 0 else self.job


class _StepComm:
    """Collective time recorded during one step (filled from hook threads, read at end_step)."""

    __slots__ = ("intervals", "durations", "count", "total", "max", "last_seq")

    def __init__(self) -> None:
        self.intervals: list[tuple[float, float]] = []  # host perf_counter (start, end)
        self.durations: list[float] = []  # device-timed durations without a host interval
        self.count = 0
        self.total = 0.0
        self.max = 0.0
        self.last_seq: int | None = None


def _union_length(intervals: list[tuple[float, float]], lo: float, hi: float) -> float:
    """Length of the union of intervals, clipped to [lo, hi]."""
    if not intervals:
        return 0.0
    total = 0.0
    cur_s = cur_e = None
    for s, e in sorted(intervals):
        s = max(s, lo)
        e = min(e, hi)
        if e <= s:
            continue
        if cur_e is None or s > cur_e:
            if cur_e is not None:
                total += cur_e - cur_s
            cur_s, cur_e = s, e
        elif e > cur_e:
            cur_e = e
    if cur_e is not None:
        total += cur_e - cur_s
    return total


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


class RankMonitor:
    """Measures steps, phases and collectives of one rank and ships them to Kafka off the hot path.

    All arguments are keyword-only and optional (see :class:`MonitorConfig` for the
    environment variables). ``enabled=False`` (or ``STEPWATCH_MONITOR_ENABLED=0``) makes
    every call a cheap no-op and starts no thread.
    """

    def __init__(self, *, job: str | None = None, rank: int | None = None, world_size: int | None = None,
                 node: str | None = None, gpu: int | None = None, group: str | None = None,
                 bootstrap: str | None = None, topic: str | None = None, enabled: bool | None = None,
                 heartbeat_interval: float | None = None, queue_size: int | None = None,
                 collective_events: bool | None = None, flush_interval: float = 0.1, close_timeout: float = 5.0,
                 producer_config: Mapping[str, Any] | None = None, environ: Mapping[str, str] | None = None,
                 start_step: int = 0, sink: Callable[[list[dict]], None] | None = None,
                 job_phases: bool | None = None, shard_ranks: int | None = None,
                 settings: Settings | None = None) -> None:
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
        self._step_base: dict[str, Any] = {"v": 1, "kind": "step", "job": cfg.job, "rank": cfg.rank}
        for name, value in (("node", cfg.node), ("gpu", cfg.gpu), ("group", cfg.group),
                            ("world_size", cfg.world_size)):
            if value is not None:
                self._step_base[name] = value
        self._rank_base: dict[str, Any] = {"job": cfg.job, "rank": cfg.rank}
        if cfg.node:
            self._rank_base["node"] = cfg.node
        # Phase events of rank 0 speak for the whole job (no ``rank`` field: see docs/events.md),
        # so a job-wide eval/checkpoint/end is announced once; other ranks mark their own phase.
        self.job_phases = (cfg.rank == 0) if job_phases is None else bool(job_phases)
        self._phase_base: dict[str, Any] = {"job": cfg.job} if self.job_phases else {"job": cfg.job,
                                                                                      "rank": cfg.rank}

        # Hot-path errors (bad arguments, ...); Kafka problems are the transport's (see stats()).
        self.errors = 0
        self.last_error: str | None = None
        self._last_error_log = 0.0
        #: The queue, sender thread and producer (None while disabled).
        self.transport: Transport | None = None

        # Step state (training thread).
        self._phase = "train"
        self._step_t0: float | None = None
        self._step_no: int | None = None
        self._next_step = start_step
        self.last_step: int | None = None
        self._data_time = 0.0
        self._data_t0: float | None = None
        self._between_t0: float | None = None  # start of a data wait before the step began
        self._comm = _StepComm()
        self._comm_lock = threading.Lock()
        # Collective sequence numbers per process group.
        self.seq_started: dict[str, int] = {}
        self.seq_completed: dict[str, int] = {}
        #: Global ranks of each process group but the default one (heartbeats' ``pgs``; producers/pg_tracker.py).
        self.pg_ranks: dict[str, list[int]] = {}
        self.default_pg = DEFAULT_PG
        self._train_ident = threading.get_ident()  # the training thread: first in stack answers
        #: Callables run at each step end and heartbeat to report timings read late (CUDA events).
        self._pollers: list = []

        self._stop = threading.Event()
        self._closed = False
        self._pid = os.getpid()
        self._heartbeat: threading.Thread | None = None
        self._pg_tracker = self._control = None
        if not self.enabled:
            return
        user_sink = sink
        self.transport = Transport(
            topic=cfg.topic, bootstrap=cfg.bootstrap, settings=settings or Settings(), security=cfg.security,
            config_error=cfg.security_error, mode=DROP,
            queue_size=cfg.queue_size, flush_interval=cfg.flush_interval, linger_ms=50, max_block_ms=1000,
            client_id=f"stepwatch-{self.job}-r{self.rank}", producer_config=cfg.producer_config,
            sink=(lambda _key, events: user_sink(events)) if user_sink is not None else None,
            on_connect=self._connected, name=f"stepwatch-sender-r{cfg.rank}")
        if cfg.heartbeat_interval and cfg.heartbeat_interval > 0:
            self._heartbeat = threading.Thread(target=self._heartbeat_loop, name=f"stepwatch-heartbeat-r{cfg.rank}",
                                               daemon=True)
            self._heartbeat.start()
        atexit.register(self._atexit)
        # Every process group's sequence numbers (when torch is imported), and answers to stack
        # requests on the control topic (docs/hang.md). Both off the training thread's way.
        from .pg_tracker import auto_track
        from .stacks import start_control_listener

        self._pg_tracker = auto_track(self, environ)
        self._control = start_control_listener(self, environ)

    # -- hot path ---------------------------------------------------------------------------

    def _enqueue(self, event: dict) -> None:
        # Job-wide phase events (no rank) go under the job id even when this rank's are keyed by shard.
        transport = self.transport
        if transport is not None:
            transport.offer(self._key if "rank" in event else self._job_key, [event])

    def _error(self, where: str, exc: BaseException) -> None:
        # Never raises: a broken monitor must not break training.
        try:
            self.errors += 1
            self.last_error = f"{where}: {exc!r}"
            now = _perf()
            if now - self._last_error_log > 60.0:
                self._last_error_log = now
                log.warning("stepwatch monitor error in %s (training continues): %r", where, exc)
        except Exception:
            pass

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
            self._step_t0 = None
            step = self._step_no
            if self._pollers:
                self._poll()
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

    # -- collectives -------------------------------------------------------------------------

    def collective_begin(self, pg: str | None = None) -> int:
        """Number a collective being issued on process group ``pg``; returns its sequence number."""
        pg = pg or self.default_pg
        seq = self.seq_started.get(pg, 0) + 1
        self.seq_started[pg] = seq
        return seq

    def collective_end(self, seq: int, *, op: str = "allreduce", pg: str | None = None,
                       start: float | None = None, end: float | None = None, duration: float | None = None,
                       nbytes: int | None = None, start_ts: float | None = None) -> None:
        """Record that collective ``seq`` of ``pg`` completed.

        ``start``/``end`` are ``time.perf_counter()`` readings (host wall clock); without them
        ``duration`` (seconds, e.g. from CUDA events) is used. Safe from any thread.
        """
        if not self.enabled:
            return
        try:
            pg = pg or self.default_pg
            if end is None and start is not None:
                end = _perf()
            if duration is None:
                duration = (end - start) if (start is not None and end is not None) else 0.0
            duration = max(0.0, float(duration))
            with self._comm_lock:
                if seq > self.seq_completed.get(pg, 0):
                    self.seq_completed[pg] = seq
                comm = self._comm
                if start is not None and end is not None:
                    comm.intervals.append((start, end))
                else:
                    comm.durations.append(duration)
                comm.count += 1
                comm.total += duration
                if duration > comm.max:
                    comm.max = duration
                if pg == self.default_pg:
                    comm.last_seq = seq
            if self.config.collective_events:
                event = {"v": 1, "kind": "collective", **self._rank_base, "seq": seq, "op": op, "ts": _wall(),
                         "duration": duration}
                if pg != DEFAULT_PG:
                    event["pg"] = pg
                step = self._step_no if self._step_t0 is not None else self.last_step
                if step is not None:
                    event["step"] = step
                if nbytes is not None:
                    event["bytes"] = int(nbytes)
                if start_ts is not None:
                    event["start_ts"] = start_ts
                elif start is not None:
                    event["start_ts"] = max(0.0, _wall() - (_perf() - start))
                self._enqueue(event)
        except Exception as exc:
            self._error("collective_end", exc)

    @contextmanager
    def collective(self, op: str = "allreduce", *, pg: str | None = None,
                   nbytes: int | None = None) -> Iterator[int]:
        """Time a blocking collective on the host clock: ``with monitor.collective("barrier"): ...``."""
        seq = self.collective_begin(pg)
        start = _perf()
        try:
            yield seq
        finally:
            self.collective_end(seq, op=op, pg=pg, start=start, end=_perf(), nbytes=nbytes)

    # -- heartbeat ---------------------------------------------------------------------------

    def heartbeat_event(self) -> dict:
        """The heartbeat this rank would send now."""
        event = {"v": 1, "kind": "heartbeat", **self._rank_base, "ts": _wall(),
                 "step": self.last_step if self.last_step is not None else 0, "phase": self._phase}
        pg = self.default_pg
        if pg in self.seq_started:
            event["seq_started"] = self.seq_started[pg]
            event["seq_completed"] = self.seq_completed.get(pg, 0)
        if self.seq_started:
            # Every process group (docs/events.md); ``ranks`` for all but the default group.
            pgs = {}
            for name, started in list(self.seq_started.items()):
                entry = {"started": started, "completed": self.seq_completed.get(name, 0)}
                ranks = self.pg_ranks.get(name)
                if ranks is not None and name != DEFAULT_PG:
                    entry["ranks"] = ranks
                pgs[name] = entry
            event["pgs"] = pgs
        event["in_step"] = self._step_t0 is not None
        return event

    def _poll(self) -> None:
        for poll in self._pollers:
            try:
                poll()
            except Exception as exc:
                self._error("poll", exc)

    def heartbeat(self) -> None:
        """Queue one heartbeat now (the heartbeat thread does this every ``heartbeat_interval``)."""
        if not self.enabled:
            return
        try:
            if self._pollers:
                self._poll()
            self._enqueue(self.heartbeat_event())
        except Exception as exc:
            self._error("heartbeat", exc)

    def _heartbeat_loop(self) -> None:
        interval = self.config.heartbeat_interval
        self.heartbeat()
        while not self._stop.wait(interval):
            self.heartbeat()

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
        except Exception:
            pass
        if not self.enabled or os.getpid() != self._pid:
            return
        timeout = self.config.close_timeout if timeout is None else timeout
        deadline = _perf() + timeout
        self._stop.set()
        lost = 0
        try:
            if self._heartbeat is not None:
                self._heartbeat.join(max(0.0, deadline - _perf()))
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
        except Exception:
            pass

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
        return [t for t in (sender, self._heartbeat, control) if t is not None]

    def __enter__(self) -> "RankMonitor":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.end()
        self.close()
