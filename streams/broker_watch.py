"""The worker while its Kafka broker is away: a readable log, an honest ``/health``, a bounded shutdown.

With the broker down, aiokafka logs every reconnect attempt of every client (about 300 lines a
second: "Unable connect to node", "Unable to update metadata", "Failed fetch messages", ...).
:class:`BrokerLogLimiter` is a ``logging.Filter`` on the Kafka clients' loggers: the first record of
each kind passes, then at most one per ``interval`` seconds, carrying how many like it were held
back. Every held-back record of a connection kind also marks the broker as away, which is what
``/health`` reports (``"status": "degraded"``) until ``away_after`` seconds pass without one.

A broker that accepts connections but does not answer (``kill -STOP``, a wedged JVM, a network that
drops packets) makes no client log a word until a 40 s request timeout, if then. :class:`BrokerProbe`
asks the cluster for its metadata every ``interval`` seconds, each answer due within ``deadline``: no
answer for ``away_after`` seconds marks the broker away too (``/health``: ``broker_reachable: false``).

Faust's shutdown waits for its producer buffer to flush, forever when no broker answers; the
worker's shutdown watchdog (:func:`exit_if_stuck`) ends the process after a grace period instead.
"""

from __future__ import annotations

import asyncio
import logging
import os
import pkgutil
import sys
import threading
import time
from collections import OrderedDict

log = logging.getLogger("stepwatch.worker")

#: Loggers of the Kafka clients a worker runs (their modules' ``logging.getLogger(__name__)``).
CLIENT_PACKAGES = ("aiokafka", "kafka")
#: Words of a client's log record that mean "cannot reach the broker".
AWAY_MARKERS = ("Unable connect to node", "Unable to update metadata", "NodeNotReadyError", "ECONNREFUSED",
                "Connection lost", "KafkaConnectionError", "No node available", "Connect call failed")
#: Distinct kinds of message remembered (oldest forgotten first: memory stays bounded).
MAX_KINDS = 256


class BrokerLogLimiter(logging.Filter):
    """At most one record per kind (logger, level, message template) per ``interval`` seconds."""

    def __init__(self, *, interval: float = 10.0, away_after: float = 15.0, clock=time.monotonic) -> None:
        super().__init__()
        self.interval = interval
        self.away_after = away_after
        self.clock = clock
        self._kinds: OrderedDict[tuple, list] = OrderedDict()  # kind -> [last passed at, held back since]
        self._lock = threading.Lock()
        self.last_away: float | None = None
        #: Records held back in total (for the log line that lets one through, and tests).
        self.suppressed = 0

    def filter(self, record: logging.LogRecord) -> bool:
        now = self.clock()
        text = str(record.msg)
        if any(marker in text for marker in AWAY_MARKERS) or any(
                marker in str(a) for a in (record.args or ()) if isinstance(a, (str, BaseException))
                for marker in AWAY_MARKERS):
            self.last_away = now
        kind = (record.name, record.levelno, text)
        with self._lock:
            entry = self._kinds.get(kind)
            if entry is None:
                self._kinds[kind] = [now, 0]
                if len(self._kinds) > MAX_KINDS:
                    self._kinds.popitem(last=False)
                return True
            self._kinds.move_to_end(kind)
            if now - entry[0] < self.interval:
                entry[1] += 1
                self.suppressed += 1
                return False
            held, entry[0], entry[1] = entry[1], now, 0
        if held:
            record.msg = f"{record.msg} ({held} more like this held back since the last one)"
        return True

    def broker_away(self) -> bool:
        """A Kafka client could not reach a broker within the last ``away_after`` seconds."""
        return self.last_away is not None and self.clock() - self.last_away < self.away_after


def install(limiter: BrokerLogLimiter, packages=CLIENT_PACKAGES) -> list[str]:
    """Put ``limiter`` on every module logger of ``packages`` (a logger's filters see only its own
    records, not its children's, so each module's logger gets it). Returns the logger names."""
    names = []
    for package in packages:
        try:
            module = __import__(package)
        except ImportError:  # kafka-python or aiokafka not installed: nothing of theirs to quiet
            log.debug("log limiter: %s not installed", package)
            continue
        names.append(package)
        names.extend(info.name for info in pkgutil.walk_packages(module.__path__, prefix=package + "."))
    for name in names:
        logging.getLogger(name).addFilter(limiter)
    return names


def exit_if_stuck(grace: float, *, what: str = "shutdown", exit_code: int = 1) -> threading.Thread:
    """A daemon thread that ends the process if it is still alive ``grace`` seconds from now (a clean
    exit first ends the thread with the process)."""

    def watch() -> None:
        time.sleep(grace)  # a watchdog's timer, not a wait for a condition
        log.error("%s did not finish in %.0f s (is the Kafka broker gone? uncommitted events "
                  "are read again on restart); exiting", what, grace)
        sys.stderr.flush()
        os._exit(exit_code)

    thread = threading.Thread(target=watch, name="stepwatch-shutdown-watchdog", daemon=True)
    thread.start()
    return thread


class BrokerProbe:
    """Metadata asked of the cluster every ``interval`` seconds, due within ``deadline``; ``away()`` once no
    answer came for ``away_after`` seconds (see the module's docstring). ``run()`` is the asking task."""

    def __init__(self, bootstrap: str, client_config: dict | None = None, *, interval: float = 2.0,
                 deadline: float = 5.0, away_after: float = 10.0, clock=time.monotonic) -> None:
        self.bootstrap = bootstrap
        self.client_config = dict(client_config or {})
        self.interval, self.deadline, self.away_after = interval, deadline, away_after
        self.clock = clock
        self.started = clock()
        self.last_answer: float | None = None
        #: Questions without an answer in time (for logs and tests).
        self.unanswered = 0

    def answered(self) -> None:
        self.last_answer = self.clock()

    def away(self) -> bool:
        """No answer for ``away_after`` seconds (since the start, before the first one)."""
        last = self.last_answer if self.last_answer is not None else self.started
        return self.clock() - last > self.away_after

    async def run(self) -> None:
        from aiokafka.client import AIOKafkaClient

        client = AIOKafkaClient(bootstrap_servers=self.bootstrap.split(","), client_id="stepwatch-broker-probe",
                                request_timeout_ms=int(self.deadline * 1000), **self.client_config)
        bootstrapped = False
        try:
            while True:
                try:
                    if not bootstrapped:
                        await asyncio.wait_for(client.bootstrap(), self.deadline + 1.0)
                        bootstrapped = True
                    await asyncio.wait_for(client.fetch_all_metadata(), self.deadline + 1.0)
                    if self.last_answer is not None and self.clock() - self.last_answer > self.away_after:
                        log.info("the Kafka broker answers again")
                    self.answered()
                except asyncio.CancelledError:
                    raise
                except Exception as exc:  # no answer in time: away() tells /health once it lasts
                    self.unanswered += 1
                    if self.unanswered & (self.unanswered - 1) == 0:  # 1st, 2nd, 4th, ...: a bounded log
                        log.warning("the Kafka broker did not answer a metadata request within %.0f s (%r); "
                                    "%d so far", self.deadline, exc, self.unanswered)
                await asyncio.sleep(self.interval)  # the probe's cadence, not a wait for a condition
        finally:
            await client.close()


class BrokerWatch:
    """A ``BrokerProbe`` run as a task of the app (a component, streams/component.py); ``away()`` for /health:
    ``limiter`` saw a client fail to connect, or the probe got no answer."""

    def __init__(self, settings, limiter: BrokerLogLimiter) -> None:
        from stepwatch.security import client_config

        self.limiter = limiter
        self.probe = BrokerProbe(settings.kafka.bootstrap, client_config(settings))

    def attach(self, app) -> None:
        from .supervise import run_forever

        probe = self.probe

        async def broker_probe() -> None:
            await run_forever(probe.run, what="broker probe", log=log)

        app.task(broker_probe)

    def away(self) -> bool:
        return self.limiter.broker_away() or self.probe.away()
