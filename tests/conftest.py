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

import pytest


@pytest.fixture(scope="session")
def kafka_bootstrap() -> str:
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
