"""Test helpers for the real-broker tests: a worker subprocess and an alerts reader."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import time
from pathlib import Path

import orjson
from kafka import KafkaConsumer

REPO = Path(__file__).resolve().parents[1]
log = logging.getLogger("tests.support")

#: ``STEPWATCH_FULL_GRID=1``: the heaviest generated tests run every variant; without it (CI) a bounded,
#: fixed sample that still reaches each code path and each named bug (docs/testing.md).
FULL_GRID = bool(os.environ.get("STEPWATCH_FULL_GRID"))


def full_or(full, sample):
    """``full`` under ``STEPWATCH_FULL_GRID=1``, else ``sample``: a parameter list or an example count."""
    return full if FULL_GRID else sample


def stepwatch_env(bootstrap: str, prefix: str, **extra: str) -> dict[str, str]:
    """Environment pointing every stepwatch command at one test's topics and app id."""
    # Not the runner's terminal size: pytest-xdist's workers have COLUMNS=80, and `stepwatch alerts` cuts its lines
    # to COLUMNS where set (a script, without it, gets every character).
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    env.update(
        KAFKA_BOOTSTRAP=bootstrap,
        STEPWATCH_KAFKA_TOPIC_PREFIX=prefix,
        STEPWATCH_KAFKA_APP_ID=prefix.rstrip(".") + "-worker",
        STEPWATCH_WORKER_WEB_PORT="0",
        STEPWATCH_WORKER_SESSION_TIMEOUT="6",  # a killed worker's partitions move on quickly
        PYTHONUNBUFFERED="1",
    )
    env.update(extra)
    return env


def run_stepwatch(*args: str, env: dict[str, str], timeout: float = 120, check: bool = True,
                  **kwargs) -> subprocess.CompletedProcess:
    """Run ``stepwatch ARGS`` to completion; with ``check``, a failure shows the command's stderr."""
    result = subprocess.run([sys.executable, "-m", "stepwatch.cli", *args], env=env, timeout=timeout,
                            capture_output=True, text=True, cwd=REPO, **kwargs)
    if check and result.returncode != 0:
        raise AssertionError(f"stepwatch {' '.join(args)} exited {result.returncode}:\n{result.stderr[-4000:]}")
    return result


class StepwatchProcess:
    """``stepwatch COMMAND`` running in a subprocess, its output in a log file."""

    command = ""

    def __init__(self, env: dict[str, str], log_path: Path) -> None:
        self.env = env
        self.log_path = log_path
        self._log = open(log_path, "w")
        self.proc = subprocess.Popen([sys.executable, "-m", "stepwatch.cli", self.command], env=env, cwd=REPO,
                                     stdout=self._log, stderr=subprocess.STDOUT)

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self, timeout: float = 30) -> int:
        """SIGTERM, then SIGKILL after ``timeout``; the exit status."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()
        return self.proc.returncode

    def discard(self) -> None:
        """SIGKILL, for a process whose test is over: a graceful stop there proves nothing and costs a worker
        seconds (its helpers die with it: streams/decoder.py). A test that asserts on a stop calls ``stop``."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self._log.close()


class WorkerProcess(StepwatchProcess):
    """``stepwatch worker`` in a subprocess; ``wait_ready`` blocks until it consumes."""

    command = "worker"

    def wait_ready(self, timeout: float = 60) -> "WorkerProcess":
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"worker exited with {self.proc.returncode}:\n{self.log_text()[-4000:]}")
            if "Worker]: Ready" in self.log_text():
                return self
            time.sleep(0.2)
        raise TimeoutError(f"worker not ready after {timeout} s:\n{self.log_text()[-4000:]}")


def read_alerts(bootstrap: str, topic: str, *, until, timeout: float = 90, quiet: float = 0.0,
                **consumer_config) -> list[dict]:
    """Read alerts from the start of ``topic`` until ``until(alerts)`` is true or ``timeout`` passes.

    ``quiet`` > 0 ("exactly these alerts"): once ``until`` holds, go on reading until no message came
    for ``quiet`` seconds, so that a second, spurious alert right behind the expected ones is in the
    list too and a test comparing the whole list catches it. See ``read_all_alerts``.
    """
    def connect() -> KafkaConsumer:
        return KafkaConsumer(topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest",
                             enable_auto_commit=False, group_id=None, consumer_timeout_ms=1000, **consumer_config)

    consumer = connect()
    alerts: list[dict] = []
    deadline = time.monotonic() + timeout
    progress = time.monotonic()
    try:
        while time.monotonic() < deadline and not until(alerts):
            for record in consumer:
                alerts.append(orjson.loads(record.value))
                progress = time.monotonic()
                if until(alerts):
                    break
            if not until(alerts) and time.monotonic() - progress > STALL_SECONDS:
                # Guard against a client that stops fetching: read the topic again from the start with a fresh
                # one. (The stall first blamed on the reader, CI run 3, was the worker never sending the
                # resolved alert: streams/producer_topics.py, issue 15; the log line tells the two apart.)
                log.warning("read_alerts: nothing from %s for %.0f s with %d alerts read; starting over with a "
                            "fresh client", topic, STALL_SECONDS, len(alerts))
                consumer.close()
                consumer, alerts, progress = connect(), [], time.monotonic()
        if quiet > 0 and until(alerts):
            last = time.monotonic()
            while time.monotonic() - last < quiet:
                for record in consumer:  # returns after 1 s without a message
                    alerts.append(orjson.loads(record.value))
                    last = time.monotonic()
    finally:
        consumer.close()
    return alerts


#: Seconds without a message, before ``until`` holds, after which the reader starts over with a new client.
STALL_SECONDS = 20.0

#: How long the alerts topic must stay silent before "exactly these alerts" is decided: longer than a
#: worker tick and the alert publisher's linger on a loaded machine.
QUIET_SECONDS = 5.0


def read_all_alerts(bootstrap: str, topic: str, *, until, timeout: float = 90, quiet: float = QUIET_SECONDS,
                    **consumer_config) -> list[dict]:
    """Every alert of ``topic`` once ``until`` holds and the topic then stayed quiet ``quiet`` seconds."""
    return read_alerts(bootstrap, topic, until=until, timeout=timeout, quiet=quiet, **consumer_config)


def wait_until(condition, *, timeout: float, what: str, interval: float = 0.2):
    """Poll ``condition()`` until it returns something true (returned) or fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(interval)


def topic_messages(bootstrap: str, topic: str) -> int:
    """Messages in ``topic`` now (sum of its partitions' end offsets)."""
    from kafka import TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None)
    try:
        partitions = consumer.partitions_for_topic(topic) or set()
        ends = consumer.end_offsets([TopicPartition(topic, p) for p in partitions])
        return sum(ends.values())
    finally:
        consumer.close()


def group_offsets(bootstrap: str, group: str, topic: str) -> tuple[int, int]:
    """(committed, end) of consumer group ``group`` on ``topic``, summed over its partitions (an
    uncommitted partition counts 0). Read without joining the group (no subscription, no poll)."""
    from kafka import TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False)
    try:
        partitions = consumer.partitions_for_topic(topic) or set()
        ends = consumer.end_offsets([TopicPartition(topic, p) for p in partitions])
        return sum(consumer.committed(tp) or 0 for tp in ends), sum(ends.values())
    finally:
        consumer.close(autocommit=False)


def group_caught_up(bootstrap: str, group: str, topic: str) -> bool:
    """Whether consumer group ``group`` has committed the end of every partition of ``topic``.

    Reads the group's committed offsets without joining it (no subscription, no poll).
    """
    from kafka import TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False)
    try:
        partitions = consumer.partitions_for_topic(topic) or set()
        ends = consumer.end_offsets([TopicPartition(topic, p) for p in partitions])
        return bool(ends) and all((consumer.committed(tp) or 0) >= end for tp, end in ends.items())
    finally:
        consumer.close(autocommit=False)


def process_alive(pid: int) -> bool:
    """Running (a zombie waiting for its parent's wait counts as gone), from /proc/<pid>/stat's state field."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False
