"""Shared pytest fixtures.

Kafka: tests that need a broker request ``kafka_bootstrap``; the first one
starts a real single-node Kafka 4.x (``stepwatch.localkafka.LocalKafka``) that
lives for the whole session. With ``KAFKA_BOOTSTRAP=host:port`` set, that
broker is used instead and nothing is started. Tests that do not request the
fixture never start a JVM.

Isolation on a shared broker comes from names, not from fresh brokers:
``topic_prefix`` and ``consumer_group`` are unique per test.
"""

from __future__ import annotations

import os
import re
import uuid
from collections.abc import Iterator

import pytest


@pytest.fixture(scope="session")
def kafka_bootstrap() -> Iterator[str]:
    """``host:port`` of a running Kafka broker for this test session."""
    external = os.environ.get("KAFKA_BOOTSTRAP", "").strip()
    if external:
        yield external
        return
    from stepwatch.localkafka import LocalKafka

    broker = LocalKafka()
    broker.start()
    try:
        yield broker.bootstrap
    finally:
        broker.stop()


def _short_test_name(request: pytest.FixtureRequest, limit: int = 24) -> str:
    name = re.sub(r"[^A-Za-z0-9]+", "-", request.node.name.removeprefix("test_")).strip("-")
    return name[:limit].rstrip("-").lower() or "test"


@pytest.fixture
def topic_prefix(request: pytest.FixtureRequest) -> str:
    """Unique topic-name prefix for one test, e.g. ``t-faust-forward-1a2b3c4d.``."""
    return f"t-{_short_test_name(request)}-{uuid.uuid4().hex[:8]}."


@pytest.fixture
def consumer_group(request: pytest.FixtureRequest) -> str:
    """Unique consumer group id for one test, e.g. ``g-faust-forward-1a2b3c4d``."""
    return f"g-{_short_test_name(request)}-{uuid.uuid4().hex[:8]}"


def pytest_configure(config: pytest.Config) -> None:
    # kafka-python 3.0.x loads its protocol schemas with the legacy
    # importlib.resources API; hundreds of identical warnings hide real ones.
    for msg in ("read_text is deprecated", "open_text is deprecated"):
        config.addinivalue_line("filterwarnings", f"ignore:{msg}:DeprecationWarning")


#: Both ways the worker can consume the events topic (``STEPWATCH_WORKER_CONSUMER``).
WORKER_CONSUMERS = ["faust", "aiokafka"]


@pytest.fixture
def worker_consumer() -> str:
    """How ``start_worker`` consumes the events topic: the environment's choice, else the default (``aiokafka``).

    A test runs in both modes with ``@pytest.mark.parametrize("worker_consumer", WORKER_CONSUMERS)``;
    the whole suite runs in one mode with ``STEPWATCH_WORKER_CONSUMER=faust pytest``.
    """
    from stepwatch.config import WorkerSettings

    return os.environ.get("STEPWATCH_WORKER_CONSUMER", WorkerSettings().consumer)


@pytest.fixture
def start_worker(kafka_bootstrap, topic_prefix, tmp_path, worker_consumer):
    """Factory: ``start_worker(**env)`` runs ``stepwatch worker`` on this test's topics, ready to consume.

    Returns the ``support.WorkerProcess``; every worker started is stopped after the test.
    """
    from support import WorkerProcess, stepwatch_env

    started = []

    def start(**extra_env: str):
        extra_env.setdefault("STEPWATCH_WORKER_CONSUMER", worker_consumer)
        extra_env.setdefault("STEPWATCH_WORKER_DATADIR", str(tmp_path / "faust"))
        env = stepwatch_env(kafka_bootstrap, topic_prefix, **extra_env)
        worker = WorkerProcess(env, tmp_path / f"worker-{len(started)}.log")
        started.append(worker)
        return worker.wait_ready()

    yield start
    for worker in started:
        worker.stop()
