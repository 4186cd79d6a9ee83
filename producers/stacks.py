"""A rank's answer to a stack request: its Python stacks, and a Flight Recorder dump where torch has one.

While a job hangs, stepwatch's worker asks the culprits and a few waiting ranks where they
are (a ``stack_request`` on ``<prefix>control``, keyed by job; models/hang/stacks.py). Each rank
monitor runs :class:`ControlListener`, a daemon thread that reads that topic (no consumer
group: it reads its job's partition from the end) and answers with a ``stack`` event on the
events topic, through the monitor's ordinary queue and sender:

* ``threads``: Python frames of every thread from ``sys._current_frames()`` (no debugger,
  no extra tool), the training thread first, frames outermost first and innermost last as
  in a traceback, at most 8 threads and 64 frames each (the innermost kept);
* ``flight_recorder``: where the installed torch has a Flight Recorder
  (``torch._C._distributed_c10d._dump_fr_trace``/``_dump_nccl_trace``), the path of the dump
  this request triggered (written to ``TORCH_FR_DUMP_TEMP_FILE``'s folder, else the temp folder).
  The Python stacks are sent first and flushed at once (no wait for the batch timer or linger);
  the dump, which took 6 s on gloo, follows in a second ``stack`` event with the same request id;
* rank-side limits (:class:`StackLimits`): one answer per rank per 5 s at most, and no answer to
  a request addressed to more than 64 ranks (both settable);
* a bounded listener (issue 44: 109 KB ``stack_request``s flooding the job's partition slowed training 43%):
  fetches of at most ``FETCH_BYTES``, a record over ``MAX_REQUEST_BYTES`` dropped unread, and at most
  ``MAX_RECORDS_PER_SECOND`` records looked at a second: beyond, the backlog is skipped (the listener seeks
  to the partition's end and waits out the second). Dropped records are counted (``dropped``).

The training thread is never touched: capturing reads other threads' frames under the GIL,
which a thread blocked in a collective, a sleep or I/O does not hold. A frozen (SIGSTOPped)
or dead process answers nothing, which the alert reports as ``stack_missing``.
``STEPWATCH_MONITOR_STACKS=0`` turns the listener off.
"""

from __future__ import annotations

import logging
import os
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Mapping
from typing import Any

import orjson

from stepwatch.models.wire.events import MAX_STACK_FRAMES, MAX_STACK_THREADS
from stepwatch.models.hang.stacks import StackRequest, parse_request

log = logging.getLogger(__name__)

__all__ = ["capture_threads", "stack_event", "StackLimits", "answer", "flight_recorder_dump", "ControlListener", "start_control_listener"]

#: Kafka client settings the control reader takes over from the monitor's producer settings (TLS/SASL).
_SECURITY_KEYS = ("security_protocol", "ssl_context", "ssl_cafile", "ssl_certfile", "ssl_keyfile", "ssl_check_hostname",
                  "sasl_mechanism", "sasl_plain_username", "sasl_plain_password", "sasl_oauth_token_provider")


def capture_threads(train_ident: int | None = None, *, max_threads: int = MAX_STACK_THREADS,
                    max_frames: int = MAX_STACK_FRAMES) -> list[dict]:
    """Every Python thread's stack: ``[{"name", "frames": [{"file", "line", "function"}]}]``, the
    thread ``train_ident`` first (then the main thread, then by name), frames outermost first."""
    frames = sys._current_frames()
    names = {t.ident: t.name for t in threading.enumerate()}
    me = threading.get_ident()
    main = threading.main_thread().ident

    def rank(ident: int) -> tuple:
        return (ident != train_ident, ident != main, ident == me, names.get(ident, ""))

    out = []
    for ident in sorted(frames, key=rank)[:max_threads]:
        summary = traceback.extract_stack(frames[ident])[-max_frames:]
        out.append({"name": names.get(ident, f"thread-{ident}"),
                    "frames": [{"file": f.filename, "line": f.lineno or 0, "function": f.name} for f in summary]})
    return out


def flight_recorder_dump(rank: int, tag: str) -> str | None:
    """Trigger torch's Flight Recorder dump and return its file, or None where torch has none (or it fails)."""
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    try:
        c10d = torch._C._distributed_c10d
        dump = getattr(c10d, "_dump_fr_trace", None)
        backend = "gloo"
        dist = torch.distributed
        if dist.is_available() and dist.is_initialized():
            backend = str(dist.get_backend())
        if backend == "nccl" and hasattr(c10d, "_dump_nccl_trace"):
            data = c10d._dump_nccl_trace()
        elif dump is not None:
            data = dump(backend=backend)
        else:
            return None
        prefix = os.environ.get("TORCH_FR_DUMP_TEMP_FILE") or os.path.join(tempfile.gettempdir(), "stepwatch_fr_")
        safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in tag)[:80]
        path = f"{prefix}{rank}_{safe}.pkl"
        with open(path, "wb") as f:
            f.write(data)
        return path
    except Exception as exc:
        log.warning("stepwatch: Flight Recorder dump failed: %r", exc)
        return None


def stack_event(monitor: Any, request: StackRequest, *, flight_recorder: bool = True) -> dict:
    """The ``stack`` event answering ``request`` for ``monitor``'s rank (docs/events.md); with
    ``flight_recorder``, the dump's path too (the dump can take seconds: ``answer`` sends it after)."""
    event: dict[str, Any] = {"v": 1, "kind": "stack", "job": monitor.job, "rank": monitor.rank, "ts": time.time(),
                             "request_id": request.request_id,
                             "threads": capture_threads(monitor.timer.train_ident)}
    if monitor.node:
        event["node"] = monitor.node
    if flight_recorder:
        path = flight_recorder_dump(monitor.rank, request.request_id)
        if path:
            event["flight_recorder"] = path
    return event


class StackLimits:
    """Rank-side limits on stack requests (issue 27): at most one answer per ``min_interval`` seconds
    (``STEPWATCH_MONITOR_STACK_MIN_INTERVAL``, default 5), and requests addressed to more than
    ``max_ranks`` ranks (``STEPWATCH_MONITOR_STACK_MAX_RANKS``, default 64) are not answered: a
    bad or runaway request cannot make every rank of a large job dump at once, again and again."""

    def __init__(self, env: Mapping[str, str]) -> None:
        self.min_interval = _env_float(env, "STEPWATCH_MONITOR_STACK_MIN_INTERVAL", 5.0)
        self.max_ranks = int(_env_float(env, "STEPWATCH_MONITOR_STACK_MAX_RANKS", 64))
        self.last = float("-inf")
        self.limited = 0  # requests for this rank not answered because of these limits

    def allow(self, request: StackRequest) -> bool:
        now = time.monotonic()
        if len(request.ranks) > self.max_ranks or now - self.last < self.min_interval:
            self.limited += 1
            return False
        self.last = now
        return True


def answer(monitor: Any, request: StackRequest, limits: StackLimits | None = None) -> bool:
    """Answer ``request`` if it asks this rank of this job (within ``limits``); True if it did.

    The Python stacks go first, flushed at once (the worker waits for them); the Flight Recorder
    dump, which can take seconds, follows in a second answer with the same ``request_id``.
    """
    if request.job != monitor.job or monitor.rank not in request.ranks:
        return False
    if limits is not None and not limits.allow(request):
        log.warning("stepwatch: stack request %s not answered (rank-side limits: %d ranks asked, max %d; "
                    "at most one answer per %.0f s)", request.request_id, len(request.ranks), limits.max_ranks,
                    limits.min_interval)
        return False
    event = stack_event(monitor, request, flight_recorder=False)
    monitor._enqueue(event, urgent=True)
    path = flight_recorder_dump(monitor.rank, request.request_id)
    if path:
        monitor._enqueue(dict(event, ts=time.time(), flight_recorder=path), urgent=True)
    return True


def _env_float(env: Mapping[str, str], name: str, default: float) -> float:
    try:
        return float(_env(env, name, str(default)))
    except ValueError:
        log.warning("stepwatch: ignoring invalid %s", name)
        return default


def _env(env: Mapping[str, str], name: str, default: str) -> str:
    value = env.get(name)
    return value.strip() if value is not None and value.strip() else default


#: A stack request is a few hundred bytes (at most 64 ranks): anything far larger is not one.
MAX_REQUEST_BYTES = 16 * 1024
#: Bytes fetched per poll from the control topic (the job's partition only).
FETCH_BYTES = 256 * 1024
#: Control records looked at per second at most; a flood beyond is skipped, not parsed.
MAX_RECORDS_PER_SECOND = 20


class ControlListener:
    """Reads the job's partition of the control topic and answers stack requests (daemon thread)."""

    def __init__(self, monitor: Any, topic: str, *, poll_seconds: float = 0.5,
                 environ: Mapping[str, str] | None = None) -> None:
        self.monitor = monitor
        self.limits = StackLimits(os.environ if environ is None else environ)
        self.topic = topic
        self.poll_seconds = poll_seconds
        self.answered = 0
        #: Control records not looked at: too large, or beyond ``MAX_RECORDS_PER_SECOND`` (the backlog skipped).
        self.dropped = 0
        self._window = (0.0, 0)  # (start of the current second, records looked at in it)
        self._flood_logged = False
        self.ready = threading.Event()  # set once reading from the partition's end
        self._thread = threading.Thread(target=self._run, name=f"stepwatch-control-r{monitor.rank}", daemon=True)

    def start(self) -> "ControlListener":
        self._thread.start()
        return self

    @property
    def thread(self) -> threading.Thread:
        return self._thread

    def _consumer(self):
        from kafka import KafkaConsumer, TopicPartition

        from stepwatch.security import kafka_python_config

        cfg = self.monitor.config
        # The STEPWATCH_SECURITY_* settings (or the monitor's settings object), as for its producer;
        # explicit producer_config keywords win there too.
        security = kafka_python_config(cfg.security) if cfg.security is not None else {}
        security.update({k: v for k, v in cfg.producer_config.items() if k in _SECURITY_KEYS})
        consumer = KafkaConsumer(bootstrap_servers=cfg.bootstrap, enable_auto_commit=False, group_id=None,
                                 client_id=f"stepwatch-control-{self.monitor.job}-r{self.monitor.rank}",
                                 request_timeout_ms=30_000, bootstrap_timeout_ms=2000,
                                 # Long polls: an idle rank costs the broker one fetch per 5 s, and a
                                 # request still arrives at once (the broker answers when data comes).
                                 fetch_max_wait_ms=5000, max_partition_fetch_bytes=FETCH_BYTES,
                                 fetch_max_bytes=FETCH_BYTES, **security)
        partitions = consumer.partitions_for_topic(self.topic)
        if not partitions:
            consumer.close()
            return None
        from kafka.partitioner.default import murmur2

        # Keyed by job: the producers' default partitioner puts the job's requests in one partition.
        count = len(partitions)
        tp = TopicPartition(self.topic, (murmur2(self.monitor.job.encode()) & 0x7FFFFFFF) % count)
        consumer.assign([tp])
        consumer.seek_to_end(tp)
        consumer.position(tp)  # resolve now: only requests made from here on are answered
        return consumer

    def _run(self) -> None:
        stop = self.monitor._stop
        backoff = 1.0
        consumer = None
        while not stop.is_set():
            if consumer is None:
                if not self.monitor.connected and getattr(self.monitor, "_sink", None) is None:
                    stop.wait(0.5)  # the broker is not reachable yet (the sender retries): nothing to ask
                    continue
                try:
                    consumer = self._consumer()
                except Exception as exc:
                    self.monitor._error("control topic", exc)
                    consumer = None
                if consumer is None:  # no broker or no topic yet: try again later
                    stop.wait(backoff)
                    backoff = min(backoff * 2, 30.0)
                    continue
                self.ready.set()
            try:
                batches = consumer.poll(timeout_ms=int(self.poll_seconds * 1000))
            except Exception as exc:
                self.monitor._error("control topic", exc)
                stop.wait(backoff)
                continue
            for tp, records in batches.items():
                for i, record in enumerate(records):
                    if not self._admit(record.value):
                        self._skip_backlog(consumer, tp, len(records) - i - 1)
                        break
                    self._handle(record.value)
        if consumer is not None:
            try:
                consumer.close()
            except Exception:  # silent: closing the stack responder's consumer on the way out
                pass

    def _admit(self, raw: bytes | None) -> bool:
        """Whether to look at one more record now (False: over this second's budget; the caller skips the
        backlog). A record too large to be a request is dropped unread, and still counts against the budget."""
        now = time.monotonic()
        start, seen = self._window
        if now - start >= 1.0:
            start, seen = now, 0
        if seen >= MAX_RECORDS_PER_SECOND:
            return False
        self._window = (start, seen + 1)
        if raw is not None and len(raw) > MAX_REQUEST_BYTES:
            self.dropped += 1  # ``_handle`` ignores it
        return True

    def _skip_backlog(self, consumer, tp, left: int) -> None:
        """A flood: drop what was fetched and what waits, and let the training thread have the rest of the second."""
        self.dropped += left + 1
        if not self._flood_logged:  # once, not per flood second
            self._flood_logged = True
            log.warning("stepwatch: control topic flooded (over %d records/s): backlog skipped, counted",
                        MAX_RECORDS_PER_SECOND)
        try:
            consumer.seek_to_end(tp)
        except Exception as exc:  # a failed seek only means reading on; the budget still holds
            self.monitor._error("control topic", exc)
        self.monitor._stop.wait(max(0.0, 1.0 - (time.monotonic() - self._window[0])))

    def _handle(self, raw: bytes | None) -> None:
        if raw is not None and len(raw) > MAX_REQUEST_BYTES:
            return  # not a request (counted in ``_admit``)
        try:
            request = parse_request(orjson.loads(raw)) if raw else None
        except orjson.JSONDecodeError:
            request = None
        if request is None:
            return
        try:
            if answer(self.monitor, request, self.limits):
                self.answered += 1
        except Exception as exc:  # never let a bad request stop the listener
            self.monitor._error("stack answer", exc)


def control_topic(environ: Mapping[str, str] | None = None) -> str:
    from stepwatch.client_settings import KafkaSettings

    env = os.environ if environ is None else environ
    kafka = KafkaSettings()
    prefix = env.get("STEPWATCH_KAFKA_TOPIC_PREFIX", kafka.topic_prefix)
    return prefix + _env(env, "STEPWATCH_KAFKA_CONTROL_TOPIC", kafka.control_topic)


def start_control_listener(monitor: Any, environ: Mapping[str, str] | None = None) -> ControlListener | None:
    """What ``RankMonitor`` calls: listen unless disabled, sending to a sink (tests), or ``STEPWATCH_MONITOR_STACKS=0``."""
    env = os.environ if environ is None else environ
    if not monitor.enabled or getattr(monitor, "_sink", None) is not None:
        return None
    if _env(env, "STEPWATCH_MONITOR_STACKS", "1").lower() in ("0", "false", "no", "off"):
        return None
    return ControlListener(monitor, control_topic(env), environ=env).start()
