"""The producer transport: how every stepwatch publisher gets events to Kafka.

One class, :class:`Transport`, behind the rank monitor (producers/monitor.py, and so the
torch/Lightning/Hugging Face callbacks), the node agent's ``KafkaSender``
(producers/agent.py) and ``EventPublisher`` (producers/publisher.py: ``stepwatch
simulate``, the demo). It is a bounded queue in front of a daemon sender thread that owns
the kafka-python producer:

* ``offer`` only takes a lock and appends: it never touches Kafka and never raises;
* the sender connects (and reconnects, with a backoff up to 10 s) in its own thread, so a
  broker that is down at start or goes away later never reaches the caller;
* the queue is bounded (``queue_size`` offers) and so is what waits inside the producer
  (``queue_size`` offers sent and not yet acknowledged): while the broker does not
  acknowledge, events wait in the queue, not in an unbounded buffer;
* in ``DROP`` mode (training, node agents: never lose a step for Kafka) a full queue drops
  its *oldest* offer, counted; in ``WAIT`` mode (simulator, publisher: nothing to protect
  but the data) ``offer`` waits for room instead, and a send the producer cannot take yet
  is retried instead of dropped;
* connection settings come from ``stepwatch.config.Settings`` like the worker's: bootstrap
  from ``settings.kafka`` and every ``STEPWATCH_SECURITY_*`` setting from
  ``settings.security`` (translated by stepwatch.security), so one set of variables
  configures every client;
* a Kafka problem is logged as one line when it starts or changes (not once per retry),
  with the broker address and the reason, never the secret;
* ``close`` flushes within a deadline and counts what is left as dropped, so afterwards
  ``sent + dropped == offered`` (events).
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from stepwatch.client_settings import ClientSettings, SecuritySettings
from stepwatch.models.wire.events import encode_events

if TYPE_CHECKING:  # the whole tree only as a type: importing it loads the detection core
    from stepwatch.config import Settings

log = logging.getLogger("stepwatch.transport")

__all__ = ["Transport", "DROP", "WAIT", "MAX_EVENTS_PER_MESSAGE", "security_from_env"]

#: Full queue: drop the oldest offer (training side) ...
DROP = "drop"
#: ... or make ``offer`` wait for room (simulator, publisher).
WAIT = "wait"
#: Events per Kafka message (one batch envelope), far below Kafka's 1 MiB default (~250 B an event).
MAX_EVENTS_PER_MESSAGE = 256

_perf = time.perf_counter


def security_from_env(environ: Mapping[str, str]) -> SecuritySettings:
    """The ``STEPWATCH_SECURITY_*`` settings of ``environ``, parsed exactly as ``Settings.from_env`` does.

    Only those variables are read, so an unrelated malformed ``STEPWATCH_*`` value cannot stop a
    training process from connecting; a malformed security value raises ``ValueError`` naming it.
    """
    only = {k: v for k, v in environ.items() if k.startswith("STEPWATCH_SECURITY_")}
    return ClientSettings.from_env(only).security


class _CauseCatcher(logging.Handler):
    """While a producer is being built: the refused login or certificate that kafka-python logs (at
    WARNING or above) but reports only as "Unable to bootstrap"."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.cause: str | None = None

    def emit(self, record: logging.LogRecord) -> None:
        try:
            message = record.getMessage()
        except Exception:  # silent: a log record that cannot be formatted cannot be a broker refusal either
            return
        if "SaslAuthenticationFailedError" in message:
            detail = message.rsplit("SaslAuthenticationFailedError: ", 1)[-1].split(" (backoff")[0]
            self.cause = f"SASL login refused: {detail}"
        elif "CERTIFICATE_VERIFY_FAILED" in message and self.cause is None:
            self.cause = "TLS: the broker's certificate is not trusted (CERTIFICATE_VERIFY_FAILED)"


class Transport:
    """Bounded queue + daemon sender thread in front of one kafka-python producer (see the module doc).

    Keyword-only arguments:

    * ``topic``: where every message goes; ``bootstrap``: brokers (default ``settings.kafka.bootstrap``);
    * ``settings``: a ``stepwatch.config.Settings`` (bootstrap and security); ``security``: a
      ``SecuritySettings`` that overrides ``settings.security`` (default: ``Settings.from_env()``'s);
    * ``mode``: ``DROP`` or ``WAIT``; ``queue_size``: offers held, and offers in flight, at most;
    * ``flush_interval``: how often the sender drains the queue (seconds);
    * ``linger_ms``, ``max_block_ms``, ``compression_type``, ``acks``, ``client_id``: producer settings;
      ``producer_config``: any other kafka-python producer argument (wins over all of the above);
    * ``sink``: instead of Kafka, hand each message's ``(key, events)`` to this callable (tests, files);
    * ``on_connect``: called in the sender thread after each (re)connection (create a topic, ...);
    * ``name``: the sender thread's name;
    * ``config_error``: a settings problem found by the caller (a malformed ``STEPWATCH_SECURITY_*``):
      reported once, and nothing connects (DROP mode drops and counts, as for a broker that is away).
    """

    def __init__(self, *, topic: str, bootstrap: str | None = None, settings: ClientSettings | Settings | None = None,
                 security: SecuritySettings | None = None, mode: str = DROP, queue_size: int = 10_000,
                 flush_interval: float = 0.1, linger_ms: int = 50, max_block_ms: int = 1000,
                 compression_type: str | None = "gzip", acks: int | str = 1, client_id: str | None = None,
                 producer_config: Mapping[str, Any] | None = None,
                 sink: Callable[[str, list[dict]], Any] | None = None,
                 on_connect: Callable[[], Any] | None = None, name: str = "stepwatch-sender",
                 config_error: str | None = None) -> None:
        if mode not in (DROP, WAIT):
            raise ValueError(f"mode must be {DROP!r} or {WAIT!r}, not {mode!r}")
        self.topic = topic
        self.settings = settings if settings is not None else ClientSettings.from_env()
        self.bootstrap = bootstrap or self.settings.kafka.bootstrap or "localhost:9092"
        self.security = security if security is not None else self.settings.security
        self.mode = mode
        self.queue_size = max(1, int(queue_size))
        self.flush_interval = flush_interval
        self.sink = sink
        self.on_connect = on_connect
        self._producer_args: dict[str, Any] = dict(
            linger_ms=linger_ms, compression_type=compression_type, max_block_ms=max_block_ms, acks=acks,
            request_timeout_ms=10_000, bootstrap_timeout_ms=2000, retries=5, enable_idempotence=False,
            # Training side: a message older than this is stale; publisher: hold it through an outage.
            delivery_timeout_ms=30_000 if mode == DROP else 120_000)
        if client_id:
            self._producer_args["client_id"] = client_id
        self._producer_config = dict(producer_config or {})

        # The lock guards the queue and every counter; it is never held while talking to Kafka.
        self._lock = threading.Lock()
        self._room = threading.Condition(self._lock)
        self._queue: collections.deque[tuple[str, list[dict]]] = collections.deque()
        self._in_flight = 0  # offers handed to the producer and not yet acknowledged or failed
        self._in_flight_events = 0
        self._final = False
        #: Events offered, acknowledged by Kafka (or taken by the sink), and dropped.
        self.offered = 0
        self.sent = 0
        self.dropped = 0
        #: Offers (batches) dropped because the queue was full (DROP mode).
        self.batches_dropped = 0
        #: Offers acknowledged, offers lost after leaving the queue (send or delivery failed, or
        #: left at close), and messages handed to the producer.
        self.batches_sent = 0
        self.batches_failed = 0
        self.messages = 0
        self.connect_failures = 0
        self.errors = 0
        self.last_error: str | None = None
        self.connected = False
        self._reported: str | None = None  # the problem last logged (one line per new problem)
        self.config_error = config_error

        self._producer = None
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._urgent = False
        self._closed = False
        self._deadline = 0.0
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    # -- caller side (never blocks in DROP mode, never raises) -----------------------------------

    def offer(self, key: str, events: list[dict], timeout: float | None = None, *, urgent: bool = False) -> bool:
        """Queue ``events`` (one message's worth or less, kept together) under ``key``.

        DROP: always returns at once; False when the queue was full and its oldest offer was
        dropped (counted). WAIT: waits for room (up to ``timeout`` seconds, None: as long as it
        takes); False if it had to drop ``events`` (time out, or the transport is closed).
        """
        n = len(events)
        if not n:
            return True
        with self._lock:
            self.offered += n
            if self._closed:
                self.dropped += n
                self.batches_dropped += 1
                return False
            ok = True
            if len(self._queue) >= self.queue_size:
                if self.mode == DROP:
                    _, old = self._queue.popleft()
                    self.dropped += len(old)
                    self.batches_dropped += 1
                    ok = False
                else:
                    self._wake.set()
                    if not self._room.wait_for(lambda: len(self._queue) < self.queue_size or self._closed,
                                               timeout):
                        self.dropped += n
                        self.batches_dropped += 1
                        return False
                    if self._closed:
                        self.dropped += n
                        self.batches_dropped += 1
                        return False
            self._queue.append((key, events))
        if urgent:
            # Sent now and flushed past the producer's linger (a stack answer is awaited by the worker).
            self._urgent = True
            self._wake.set()
        # Before the first connection, or while a Kafka problem is reported, its line already says
        # that events are dropped.
        if not ok and self.connected and self._reported is None and (self.batches_dropped in (1, 10, 100, 1000)
                                                   or self.batches_dropped % 10_000 == 0):
            log.warning("stepwatch: queue for %s full (Kafka at %s slow or away): %d events dropped so far",
                        self.topic, self.bootstrap, self.dropped)
        return ok

    def queued(self) -> list[tuple[str, list[dict]]]:
        """What waits in the queue now (oldest first)."""
        with self._lock:
            return list(self._queue)

    def stats(self) -> dict[str, Any]:
        with self._lock:
            return {"offered": self.offered, "sent": self.sent, "dropped": self.dropped,
                    "queued": sum(len(events) for _, events in self._queue), "in_flight": self._in_flight_events,
                    "messages": self.messages, "connected": self.connected, "errors": self.errors,
                    "connect_failures": self.connect_failures, "last_error": self.last_error}

    # -- problems -----------------------------------------------------------------------------

    def _problem(self, what: str, exc: BaseException | str) -> None:
        """Count a Kafka problem; log one line when it is new (not on every retry)."""
        if isinstance(exc, str):
            reason = exc
        else:  # kafka-python's errors already start with their class name
            text = str(exc)
            reason = text if text.startswith(type(exc).__name__) else f"{type(exc).__name__}: {text}".rstrip(": ")
        line = f"{what} ({reason})"
        with self._lock:
            self.errors += 1
            self.last_error = line
            # A problem is what failed, not its detail: kafka-python words one refused login differently
            # from one attempt to the next.
            new = what != self._reported
            self._reported = what
        if new:
            log.warning("stepwatch: %s; %s", line,
                        "retrying, events are dropped and counted meanwhile" if self.mode == DROP else "retrying")

    # -- sender thread ------------------------------------------------------------------------

    def _connect(self) -> bool:
        from kafka import KafkaProducer

        from stepwatch.security import kafka_python_config

        if self.config_error:
            self._problem(f"not connecting to Kafka at {self.bootstrap}", self.config_error)
            return False
        cause = _CauseCatcher()
        kafka_log = logging.getLogger("kafka")
        kafka_log.addHandler(cause)
        try:
            config = dict(bootstrap_servers=self.bootstrap, **self._producer_args)
            config.update(kafka_python_config(self.security))
            config.update(self._producer_config)
            self._producer = KafkaProducer(**config)
        except Exception as exc:  # NoBrokersAvailable, DNS, TLS, SASL, a bad setting: try again later
            self.connect_failures += 1
            self._problem(f"cannot connect to Kafka at {self.bootstrap}", self._explain(exc, cause.cause))
            return False
        finally:
            kafka_log.removeHandler(cause)
        with self._lock:
            self.connected = True
            was = self._reported
            self._reported = None
        if was is not None:
            log.warning("stepwatch: connected to Kafka at %s", self.bootstrap)
        if self.on_connect is not None:
            try:
                self.on_connect()
            except Exception as exc:
                log.info("stepwatch: on-connect hook failed: %r", exc)
        return True

    def _explain(self, exc: BaseException, cause: str | None = None) -> str:
        """The reason for a failed connection, with what to check when TLS/SASL are on.

        kafka-python reports a refused login, an untrusted certificate and an unreachable broker
        alike, as "Unable to bootstrap"; the broker closes the connection on a wrong password.
        """
        text = str(exc)
        reason = text if text.startswith(type(exc).__name__) else f"{type(exc).__name__}: {text}".rstrip(": ")
        sec = self.security
        if cause:
            return f"{cause}; check the STEPWATCH_SECURITY_* settings"
        if sec.protocol != "PLAINTEXT" and "bootstrap" in text.lower():
            login = f", SASL {sec.sasl_mechanism} login of user {sec.sasl_username!r}" \
                if sec.protocol.startswith("SASL") else ""
            reason += (f": broker unreachable, or it refused this client; check the STEPWATCH_SECURITY_* settings "
                       f"(protocol {sec.protocol}{login}, CA file {sec.ssl_cafile or 'system'})")
        return reason

    def _take(self) -> list[tuple[str, list[dict]]]:
        with self._lock:
            # Bound what waits inside the producer too: while the broker does not acknowledge,
            # offers stay in (and, in DROP mode, drop from) the bounded queue instead.
            room = self.queue_size - self._in_flight
            if not self._queue or room <= 0:
                return []
            items = [self._queue.popleft() for _ in range(min(room, len(self._queue)))]
            self._in_flight += len(items)
            self._in_flight_events += sum(len(events) for _, events in items)
            self._room.notify_all()
        return items

    def _settle(self, items: int, n: int, ok: bool) -> None:
        with self._lock:
            if self._final:
                return
            self._in_flight -= items
            self._in_flight_events -= n
            if ok:
                self.sent += n
                self.batches_sent += items
            else:
                self.dropped += n
                self.batches_failed += items

    @staticmethod
    def _messages(items: list[tuple[str, list[dict]]]) -> Iterable[tuple[str, list[dict], int]]:
        """``(key, events, offers)`` per message: offers of one key merged (order kept), in envelopes of at most
        MAX_EVENTS_PER_MESSAGE events; an offer is never split unless it alone is larger."""
        by_key: dict[str, list[list[dict]]] = {}
        for key, events in items:
            by_key.setdefault(key, []).append(events)
        for key, offers in by_key.items():
            chunk: list[dict] = []
            count = 0
            for events in offers:
                if chunk and len(chunk) + len(events) > MAX_EVENTS_PER_MESSAGE:
                    yield key, chunk, count
                    chunk, count = [], 0
                chunk.extend(events)
                count += 1
                while len(chunk) > MAX_EVENTS_PER_MESSAGE:
                    yield key, chunk[:MAX_EVENTS_PER_MESSAGE], 0
                    chunk = chunk[MAX_EVENTS_PER_MESSAGE:]
            if chunk:
                yield key, chunk, count

    def _publish(self, items: list[tuple[str, list[dict]]]) -> None:
        for key, events, count in self._messages(items):
            n = len(events)
            if self.sink is not None:
                try:
                    self.sink(key, events)
                except Exception as exc:
                    self._problem("sink failed", exc)
                    self._settle(count, n, False)
                else:
                    self._settle(count, n, True)
                continue
            self._send(key, events, count)

    def _send(self, key: str, events: list[dict], count: int) -> None:
        n = len(events)
        value = encode_events(events)
        backoff = 0.2
        while True:
            try:
                future = self._producer.send(self.topic, key=key.encode(), value=value)
            except Exception as exc:  # buffer full / no metadata within max_block_ms
                self._problem(f"cannot send to {self.topic} at {self.bootstrap}", exc)
                # WAIT mode keeps the message and tries again (until close's deadline).
                if self.mode == WAIT and not (self._stop.is_set() and _perf() >= self._deadline):
                    time.sleep(backoff)
                    backoff = min(backoff * 2, 5.0)
                    continue
                self._settle(count, n, False)
                return
            break
        with self._lock:
            self.messages += 1
        future.add_callback(lambda _md: self._settle(count, n, True))
        future.add_errback(self._failed, count, n)

    def _failed(self, count: int, n: int, exc) -> None:
        self._settle(count, n, False)
        self._problem(f"delivery to {self.topic} at {self.bootstrap} failed", exc)

    def _run(self) -> None:
        backoff = 0.5
        while not self._stop.is_set():
            if self.sink is None and self._producer is None:
                if not self._connect():
                    self._stop.wait(backoff)
                    backoff = min(backoff * 2, 10.0)
                    continue
                backoff = 0.5
            items = self._take()
            if items:
                self._publish(items)
            if self._urgent:
                self._urgent = False
                if self._producer is not None:
                    try:
                        self._producer.flush(timeout=2.0)
                    except Exception as exc:
                        self._problem(f"cannot flush to {self.topic} at {self.bootstrap}", exc)
                if self._queue:
                    continue
            self._wake.wait(self.flush_interval)
            self._wake.clear()
        self._finish()

    def _finish(self) -> None:
        """Last drain, flush and close of the producer, within the close deadline (sender thread)."""
        try:
            if self.sink is not None or self._producer is not None:
                while _perf() < self._deadline:
                    items = self._take()
                    if not items:
                        break
                    self._publish(items)
            producer = self._producer
            if producer is None:
                return
            try:
                producer.flush(timeout=max(0.0, self._deadline - _perf()))
            except Exception as exc:
                self._problem("flush incomplete", exc)
            try:
                producer.close(timeout=max(0.0, self._deadline - _perf()), null_logger=True)
            except Exception as exc:
                self._problem("close failed", exc)
            self._producer = None
        except Exception as exc:  # never let the sender die noisily
            self._problem("sender failed", exc)

    # -- lifecycle ----------------------------------------------------------------------------

    def flush(self, timeout: float = 5.0) -> bool:
        """Wait until every queued offer was delivered or dropped; True if that happened in time."""
        deadline = _perf() + timeout
        self._wake.set()
        while _perf() < deadline:
            with self._lock:
                if not self._queue and self._in_flight == 0:
                    return True
            if not self._thread.is_alive():
                return False
            self._wake.set()
            time.sleep(0.01)
        return False

    def close(self, timeout: float = 5.0) -> int:
        """Stop the sender after a last flush within ``timeout`` seconds; count the rest as dropped.

        Returns the number of events dropped at close. Never raises; idempotent.
        """
        with self._lock:
            if self._closed:
                return 0
            self._closed = True
            self._room.notify_all()
        self._deadline = _perf() + timeout
        self._stop.set()
        self._wake.set()
        if threading.current_thread() is not self._thread:
            self._thread.join(max(0.0, self._deadline - _perf()) + 0.5)
        with self._lock:
            lost = sum(len(events) for _, events in self._queue) + self._in_flight_events
            self.batches_failed += len(self._queue) + self._in_flight
            self._queue.clear()
            self._in_flight = self._in_flight_events = 0
            self.dropped += lost
            self._final = True
        return lost

    @property
    def thread(self) -> threading.Thread:
        return self._thread
