"""Shared pytest fixtures.

Kafka: tests that need a broker request ``kafka_bootstrap``; the first one
starts a real single-node Kafka 4.x (``stepwatch.localkafka.LocalKafka``) that
lives for the whole session. With ``KAFKA_BOOTSTRAP=host:port`` set, that
broker is used instead and nothing is started. Tests that do not request the
fixture never start a JVM.

Isolation on a shared broker comes from names, not from fresh brokers:
``topic_prefix`` and ``consumer_group`` are unique per test.

Parallel runs (``scripts/test`` with ``STEPWATCH_TEST_WORKERS`` > 1: ``-n N --dist loadgroup``): every test
that uses the session broker (the ``kafka_bootstrap`` fixture, directly or through another fixture, or the
``kafka`` marker) is put in one xdist group, so one worker starts one broker and runs them in order, as a serial
run does; the other workers run the pure tests beside it.

Skips: every skipped test is listed at the end with its reason; in CI (``CI=true``) a skip
not on the allow-list (tests/allowed_skips.py) makes the run fail.
"""

from __future__ import annotations

import os
import re
import uuid
from collections.abc import Iterator

import pytest

import sys
from pathlib import Path

# The tests mirror the code's tree (tests/models/steps/...); a few import helpers from a test
# module in another folder (test_rule_contract's runs, test_agent's sysfs tree): every test
# folder is on the path, so those imports do not depend on the order pytest collects in.
for _folder in sorted(p for p in Path(__file__).resolve().parent.rglob("*") if p.is_dir()
                      and any(p.glob("test_*.py")) and not (p / "__init__.py").exists()):
    if str(_folder) not in sys.path:
        sys.path.append(str(_folder))


from allowed_skips import allowed


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


#: The xdist group (``--dist loadgroup``) of every test that needs a Kafka broker. One group, not a broker per
#: worker: a second JVM on a 2-core CI machine would slow the timing-bound broker tests, and these tests mostly
#: wait (on the broker, worker subprocesses, training ranks), so one worker suffices for them.
KAFKA_GROUP = "kafka"


def _needs_broker(item: pytest.Item) -> bool:
    return "kafka_bootstrap" in item.fixturenames or item.get_closest_marker("kafka") is not None


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook, which reads the group into the node id
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if _needs_broker(item):
            item.add_marker(pytest.mark.xdist_group(KAFKA_GROUP))


@pytest.hookimpl(tryfirst=True)  # before xdist's, which sends the ids to the scheduler
def pytest_collection_finish(session: pytest.Session) -> None:
    """Group the broker tests where xdist could not: loadgroup schedules by the ``@group`` suffix of the node ids a
    worker sends, and pytest-xdist 3.8 appends it to ``item._nodeid``, which pytest 9.2 no longer reads (a node's
    id is ``item._id``, a ``NodeId``): without this every broker test would be a group of its own, spread over the
    workers, each starting a broker."""
    if not session.config.getoption("loadgroup", default=False):  # set on xdist workers under --dist loadgroup
        return
    suffix = "@" + KAFKA_GROUP
    for item in session.items:
        if not _needs_broker(item) or item.nodeid.endswith(suffix):
            continue
        if isinstance(getattr(item, "_id", None), str) or not hasattr(item, "_id"):
            item._nodeid = item.nodeid + suffix  # pytest < 9.2 (xdist did this already)
        else:
            from _pytest.nodeid import NodeId

            item._id = NodeId.parse(item.nodeid + suffix)
        assert item.nodeid.endswith(suffix), item.nodeid


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

    Returns the ``support.WorkerProcess``; every worker started is killed after the test (``discard``).
    ``ready=False`` returns at once (call ``wait_ready()``): workers that start together overlap their starts.
    """
    from support import WorkerProcess, stepwatch_env

    started = []

    def start(*, ready: bool = True, **extra_env: str):
        extra_env.setdefault("STEPWATCH_WORKER_CONSUMER", worker_consumer)
        extra_env.setdefault("STEPWATCH_WORKER_DATADIR", str(tmp_path / "faust"))
        env = stepwatch_env(kafka_bootstrap, topic_prefix, **extra_env)
        worker = WorkerProcess(env, tmp_path / f"worker-{len(started)}.log")
        started.append(worker)
        return worker.wait_ready() if ready else worker

    yield start
    for worker in started:
        worker.discard()


# -- no silent skips ---------------------------------------------------------------------------------

_skips: list[tuple[str, str]] = []  # (node id, reason) of every test or module that skipped


def in_ci(environ=os.environ) -> bool:
    return environ.get("CI", "").strip().lower() in ("1", "true", "yes")


def _skip_reason(report) -> str:
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2]).removeprefix("Skipped: ")
    return str(longrepr)


def pytest_collectreport(report) -> None:
    if report.skipped:  # a module-level skip (importorskip at import) hides all its tests
        _skips.append((report.nodeid, _skip_reason(report)))


def pytest_runtest_logreport(report) -> None:
    if report.skipped and not hasattr(report, "wasxfail"):
        _skips.append((report.nodeid, _skip_reason(report)))


def plain_nodeid(nodeid: str) -> str:
    """``nodeid`` without the ``@group`` that ``--dist loadgroup`` appends to a grouped test's id."""
    return nodeid.removesuffix("@" + KAFKA_GROUP)


def unexpected_skips() -> list[tuple[str, str]]:
    return [(nodeid, reason) for nodeid, reason in _skips if allowed(plain_nodeid(nodeid)) is None]


def pytest_sessionfinish(session, exitstatus) -> None:
    if in_ci() and unexpected_skips() and exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:
    if not _skips:
        return
    ci = in_ci()
    terminalreporter.section("skipped tests", sep="=", yellow=True)
    for nodeid, reason in _skips:
        why = allowed(plain_nodeid(nodeid))
        mark = f"allowed: {why}" if why is not None else ("NOT ALLOWED IN CI" if ci else "would fail in CI")
        terminalreporter.write_line(f"SKIPPED {plain_nodeid(nodeid)}: {reason} [{mark}]")
    bad = unexpected_skips()
    if ci and bad:
        terminalreporter.write_line(f"FAIL: {len(bad)} skipped test(s) not on the allow-list (tests/allowed_skips.py); "
                                    "CI=true runs every test", red=True, bold=True)
