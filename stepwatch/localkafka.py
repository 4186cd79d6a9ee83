"""A real, throw-away Apache Kafka 4.x broker for tests, the demo and CI.

The broker runs in KRaft mode as a single node that is both broker and
controller. Nothing is installed system-wide: Maven fetches the
``org.apache.kafka:kafka_2.13`` jars and their runtime dependencies from Maven
Central into ``.cache/kafka/libs`` (see ``broker/pom.xml``), and the broker is
started with plain ``java -cp 'libs/*' kafka.Kafka server.properties``.

Typical use::

    from stepwatch.localkafka import LocalKafka, create_topics

    with LocalKafka() as kafka:              # free loopback ports, temp data dir
        create_topics(kafka.bootstrap, ["steps"], partitions=4)
        ...                                   # point clients at kafka.bootstrap

Needs Java 17+ and, the first time only, Maven (``mvn``) with access to Maven
Central. ``ensure_jars()`` is idempotent and cheap once the jars are present.
"""

from __future__ import annotations

import atexit
import base64
import hashlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
import uuid
import weakref
from pathlib import Path

__all__ = [
    "KAFKA_MAIN_CLASS",
    "STORAGE_TOOL_CLASS",
    "LocalKafka",
    "LocalKafkaError",
    "create_topics",
    "ensure_jars",
    "run_foreground",
]

REPO_ROOT = Path(__file__).resolve().parent.parent
POM = REPO_ROOT / "broker" / "pom.xml"
DEFAULT_CACHE_DIR = REPO_ROOT / ".cache" / "kafka" / "libs"
# Written after a successful Maven run; holds a hash of the pom so that a
# changed pom (e.g. a new Kafka version) triggers a clean re-fetch.
MARKER_NAME = ".stepwatch-jars-ok"

# Main classes in kafka_2.13 4.x (both still Scala objects in the core jar).
KAFKA_MAIN_CLASS = "kafka.Kafka"
STORAGE_TOOL_CLASS = "kafka.tools.StorageTool"

JAVA_MISSING = "Java 17+ not found: install openjdk-17-jre-headless"
MAVEN_MISSING = "Maven (mvn) not found: install maven to fetch the Kafka broker jars"


class LocalKafkaError(RuntimeError):
    """The local broker could not be fetched, formatted, started or reached."""


# --------------------------------------------------------------------------- jars


def _pom_digest() -> str:
    return hashlib.sha256(POM.read_bytes()).hexdigest()[:16]


def _tail(text: str, lines: int = 40) -> str:
    return "\n".join(text.splitlines()[-lines:])


def ensure_jars(*, cache_dir: str | os.PathLike | None = None, quiet: bool = True) -> Path:
    """Return the folder with the Kafka broker jars, fetching them first if needed.

    Runs ``mvn -f broker/pom.xml package`` once; later calls only check a marker
    file. Raises ``RuntimeError`` (``LocalKafkaError``) with the tail of Maven's
    output when the fetch fails.
    """
    libs = Path(cache_dir) if cache_dir is not None else DEFAULT_CACHE_DIR
    libs = libs.resolve()
    marker = libs / MARKER_NAME
    digest = _pom_digest()
    if marker.is_file() and marker.read_text().strip() == digest:
        return libs

    mvn = shutil.which("mvn")
    if mvn is None:
        raise LocalKafkaError(MAVEN_MISSING)
    # Start clean: copy-dependencies never deletes jars, and two versions of the
    # same jar on one classpath would be a nasty surprise.
    if libs.exists():
        shutil.rmtree(libs)
    cmd = [mvn, "-B", "-Dstyle.color=never", "-f", str(POM), f"-Dkafka.libs.dir={libs}", "package"]
    if quiet:
        cmd.insert(1, "-q")
        proc = subprocess.run(cmd, cwd=REPO_ROOT, capture_output=True, text=True)
        output = proc.stdout + proc.stderr
    else:
        print("+ " + " ".join(cmd), flush=True)
        proc = subprocess.run(cmd, cwd=REPO_ROOT)
        output = "(Maven output was printed above)"
    if proc.returncode != 0 or not any(libs.glob("kafka_2.13-*.jar")):
        raise LocalKafkaError(
            f"fetching the Kafka broker jars failed (exit {proc.returncode}): {' '.join(cmd)}\n"
            + _tail(output)
        )
    marker.write_text(digest + "\n")
    return libs


def kafka_version(libs: Path | None = None) -> str:
    """Version of the fetched broker, read from the core jar's name."""
    libs = libs or DEFAULT_CACHE_DIR
    for jar in libs.glob("kafka_2.13-*.jar"):
        return jar.name[len("kafka_2.13-") : -len(".jar")]
    raise LocalKafkaError(f"no kafka_2.13 jar in {libs}; call ensure_jars() first")


# ------------------------------------------------------------------------- helpers


def _java() -> str:
    """Path of a Java 17+ executable, or a clear error."""
    java_home = os.environ.get("JAVA_HOME")
    java = None
    if java_home and (Path(java_home) / "bin" / "java").exists():
        java = str(Path(java_home) / "bin" / "java")
    java = java or shutil.which("java")
    if java is None:
        raise LocalKafkaError(JAVA_MISSING)
    try:
        out = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise LocalKafkaError(f"{JAVA_MISSING} ({java} -version failed: {exc})") from exc
    text = out.stderr + out.stdout
    # `openjdk version "17.0.15"` / `"1.8.0_392"`
    try:
        ver = text.split('"')[1]
        major = int(ver.split(".")[1] if ver.startswith("1.") else ver.split(".")[0].split("-")[0])
    except (IndexError, ValueError):
        major = 0
    if major < 17:
        raise LocalKafkaError(f"{JAVA_MISSING} (found: {_tail(text, 3)!r} at {java})")
    return java


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _random_cluster_id() -> str:
    # Same format as `kafka-storage random-uuid`: base64url of 16 bytes, no padding. An id
    # starting with '-' would be read as an option by the storage tool, so draw again.
    while True:
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        if not cluster_id.startswith("-"):
            return cluster_id


def _file_tail(path: Path, lines: int = 60) -> str:
    try:
        return _tail(path.read_text(errors="replace"), lines)
    except OSError:
        return "(no log)"


LOG4J2_TEMPLATE = """\
# Written by stepwatch.localkafka: broker logs go to a file, not the terminal.
status = warn
appender.file.type = File
appender.file.name = FILE
appender.file.fileName = {log}
appender.file.append = true
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.file.ref = FILE
# Quiet the chattiest loggers.
logger.state.name = state.change.logger
logger.state.level = WARN
logger.request.name = kafka.request.logger
logger.request.level = WARN
logger.controller.name = org.apache.kafka.controller
logger.controller.level = INFO
logger.authorizer.name = kafka.authorizer.logger
logger.authorizer.level = WARN
"""


# -------------------------------------------------------------------------- broker


_live: "weakref.WeakSet[LocalKafka]" = weakref.WeakSet()


@atexit.register
def _stop_leftovers() -> None:
    # A crashed test run must not leave a JVM holding ports and memory.
    for k in list(_live):
        try:
            k.stop(timeout=5)
        except Exception:  # silent: at interpreter exit, a broker already gone: nothing left to stop
            pass


class LocalKafka:
    """A single-node KRaft Kafka broker in a subprocess (its own process group).

    ``port``: PLAINTEXT listener (a free loopback port when None); the
    controller listener always gets a second free port.
    ``data_dir``: log dirs, config and logs (a temp dir removed on ``stop()``
    when None; a given dir is kept).
    ``session_timeout_ms``: the smallest consumer session timeout the broker
    accepts (``group.min.session.timeout.ms``), low so that tests can detect a
    dead consumer within seconds.
    ``log_file``: where the broker's log goes (default ``<data_dir>/server.log``).
    """

    def __init__(
        self,
        *,
        port: int | None = None,
        data_dir: str | os.PathLike | None = None,
        session_timeout_ms: int = 1000,
        log_file: str | os.PathLike | None = None,
        num_partitions: int = 1,
        heap: str = "512m",
        extra_config: dict[str, object] | None = None,
        cache_dir: str | os.PathLike | None = None,
    ) -> None:
        self.port = port or free_port()
        self.controller_port = free_port()
        while self.controller_port == self.port:
            self.controller_port = free_port()
        self._own_data_dir = data_dir is None
        self._data_dir_arg = Path(data_dir) if data_dir is not None else None
        self.data_dir: Path | None = self._data_dir_arg
        self.session_timeout_ms = int(session_timeout_ms)
        self._log_file_arg = Path(log_file) if log_file is not None else None
        self.num_partitions = int(num_partitions)
        self.heap = heap
        self.extra_config = dict(extra_config or {})
        self._cache_dir = cache_dir
        self.proc: subprocess.Popen | None = None
        self._formatted = False
        self.startup_seconds: float | None = None

    # ------------------------------------------------------------------ props
    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def log_file(self) -> Path:
        assert self.data_dir is not None, "broker not started"
        return self._log_file_arg or (self.data_dir / "server.log")

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    # ----------------------------------------------------------------- config
    def server_properties(self) -> dict[str, object]:
        assert self.data_dir is not None
        st = self.session_timeout_ms
        props: dict[str, object] = {
            "process.roles": "broker,controller",
            "node.id": 1,
            # Static quorum: simplest for one node, no --standalone formatting.
            "controller.quorum.voters": f"1@127.0.0.1:{self.controller_port}",
            "listeners": f"PLAINTEXT://127.0.0.1:{self.port},CONTROLLER://127.0.0.1:{self.controller_port}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{self.port}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "log.dirs": str(self.data_dir / "kraft-logs"),
            "num.partitions": self.num_partitions,
            "default.replication.factor": 1,
            "min.insync.replicas": 1,
            "auto.create.topics.enable": "true",
            # Internal topics: one replica, few partitions, so that the first
            # consumer group / transaction does not wait for 50 partitions.
            "offsets.topic.replication.factor": 1,
            "offsets.topic.num.partitions": 4,
            "transaction.state.log.replication.factor": 1,
            "transaction.state.log.min.isr": 1,
            "transaction.state.log.num.partitions": 4,
            "share.coordinator.state.topic.replication.factor": 1,
            "share.coordinator.state.topic.min.isr": 1,
            "share.coordinator.state.topic.num.partitions": 4,
            # Groups: rebalance at once, and allow short session timeouts.
            "group.initial.rebalance.delay.ms": 0,
            "group.min.session.timeout.ms": st,
            "group.consumer.min.session.timeout.ms": max(st, 1000),
            "group.consumer.session.timeout.ms": max(st, 1000) * 3,
            "group.consumer.min.heartbeat.interval.ms": 500,
            "group.consumer.heartbeat.interval.ms": 500,
            # Small disk and heap footprint.
            "log.segment.bytes": 16 * 1024 * 1024,
            "log.retention.bytes": 256 * 1024 * 1024,
            "log.retention.hours": 24,
            "log.retention.check.interval.ms": 60_000,
            "log.cleaner.threads": 1,
            "log.cleaner.dedupe.buffer.size": 8 * 1024 * 1024,
            "num.network.threads": 2,
            "num.io.threads": 4,
            "num.recovery.threads.per.data.dir": 1,
            "background.threads": 2,
            # Faster clean shutdown of a throw-away broker.
            "controlled.shutdown.enable": "true",
        }
        props.update(self.extra_config)
        return props

    def _write_config(self) -> Path:
        assert self.data_dir is not None
        cfg = self.data_dir / "server.properties"
        cfg.write_text(
            "# Written by stepwatch.localkafka\n"
            + "".join(f"{k}={v}\n" for k, v in self.server_properties().items())
        )
        (self.data_dir / "log4j2.properties").write_text(LOG4J2_TEMPLATE.format(log=self.log_file))
        return cfg

    def _java_cmd(self, java: str, libs: Path, main: str, *args: str) -> list[str]:
        return [
            java,
            f"-Xmx{self.heap}",
            "-Xms128m",
            "-XX:+UseG1GC",
            "-XX:MaxGCPauseMillis=20",
            "-Djava.awt.headless=true",
            f"-Dlog4j2.configurationFile={self.data_dir / 'log4j2.properties'}",
            f"-Dkafka.logs.dir={self.data_dir}",
            "-cp",
            str(libs / "*"),
            main,
            *args,
        ]

    # -------------------------------------------------------------- lifecycle
    def start(self, timeout: float = 60) -> "LocalKafka":
        """Format storage (first start only), launch the broker, wait until it serves."""
        if self.running:
            return self
        t0 = time.monotonic()
        java = _java()
        libs = ensure_jars(cache_dir=self._cache_dir)
        if self.data_dir is None:
            self.data_dir = Path(tempfile.mkdtemp(prefix="stepwatch-kafka-"))
        self.data_dir.mkdir(parents=True, exist_ok=True)
        cfg = self._write_config()

        if not self._formatted:
            fmt = subprocess.run(
                self._java_cmd(
                    java, libs, STORAGE_TOOL_CLASS,
                    "format", "--config", str(cfg),
                    "--cluster-id", _random_cluster_id(), "--ignore-formatted",
                ),
                capture_output=True, text=True, timeout=max(timeout, 30),
            )
            if fmt.returncode != 0:
                raise LocalKafkaError(
                    f"formatting KRaft storage failed (exit {fmt.returncode}):\n"
                    + _tail(fmt.stdout + fmt.stderr)
                    + "\n--- broker log ---\n" + _file_tail(self.log_file)
                )
            self._formatted = True

        # stdout/stderr of the JVM (normally almost empty: logs go to log_file).
        self._console = open(self.data_dir / "broker.console", "ab")
        self.proc = subprocess.Popen(
            self._java_cmd(java, libs, KAFKA_MAIN_CLASS, str(cfg)),
            stdin=subprocess.DEVNULL,
            stdout=self._console,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # own process group: stop() kills it all, Ctrl-C does not
        )
        _live.add(self)
        try:
            self._wait_ready(t0 + timeout)
        except BaseException:
            self._kill()
            raise
        self.startup_seconds = time.monotonic() - t0
        return self

    def _wait_ready(self, deadline: float) -> None:
        from kafka import KafkaAdminClient  # local import: keep module import cheap
        from kafka.errors import KafkaConfigurationError

        last_err: Exception | None = None
        while True:
            if self.proc is None or self.proc.poll() is not None:
                code = None if self.proc is None else self.proc.returncode
                raise LocalKafkaError(
                    f"Kafka broker exited during startup (exit {code}); log {self.log_file}:\n"
                    + self._logs_tail()
                )
            if time.monotonic() > deadline:
                raise LocalKafkaError(
                    f"Kafka broker not ready at {self.bootstrap} before timeout "
                    f"(last error: {last_err!r}); log {self.log_file}:\n" + self._logs_tail()
                )
            # Cheap check first: no point building a client before the port listens.
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                    pass
            except OSError as exc:
                last_err = exc
                time.sleep(0.2)
                continue
            try:
                admin = KafkaAdminClient(
                    bootstrap_servers=self.bootstrap,
                    client_id="stepwatch-localkafka-probe",
                    request_timeout_ms=5000,
                )
                try:
                    admin.list_topics()
                    return
                finally:
                    admin.close()
            except KafkaConfigurationError:
                raise  # a bug, not "broker not ready yet"
            except Exception as exc:  # noqa: BLE001 - any other failure means "not yet"
                last_err = exc
                time.sleep(0.3)

    def _logs_tail(self) -> str:
        out = _file_tail(self.log_file)
        if self.data_dir is not None:
            console = _file_tail(self.data_dir / "broker.console", 20)
            if console.strip() and console != "(no log)":
                out += "\n--- console ---\n" + console
        return out

    def _kill(self, timeout: float = 20) -> None:
        """Stop the broker process group: SIGTERM, wait, then SIGKILL."""
        proc = self.proc
        if proc is not None:
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
                try:
                    proc.wait(timeout=timeout)
                except subprocess.TimeoutExpired:
                    try:
                        os.killpg(proc.pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
                    proc.wait(timeout=10)
            self.proc = None
        console = getattr(self, "_console", None)
        if console is not None:
            console.close()
            self._console = None

    def stop(self, timeout: float = 20) -> None:
        """Stop the broker; remove the data dir if it is a temp dir we made."""
        self._kill(timeout)
        _live.discard(self)
        if self._own_data_dir and self.data_dir is not None:
            shutil.rmtree(self.data_dir, ignore_errors=True)
            self.data_dir = None
            self._formatted = False

    def restart(self, timeout: float = 60, *, down_for: float = 0.0) -> "LocalKafka":
        """Stop the broker process, keep its data, start it again on the same ports.

        ``down_for`` seconds of outage in between (for broker-outage tests).
        """
        self._kill()
        if down_for > 0:
            time.sleep(down_for)
        return self.start(timeout=timeout)

    def kill(self) -> None:
        """Hard-kill the broker (SIGKILL, data kept): simulates a crash; ``start()`` revives it."""
        if self.proc is not None and self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self._kill()

    def __enter__(self) -> "LocalKafka":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        state = "running" if self.running else "stopped"
        return f"<LocalKafka {self.bootstrap} {state} data_dir={self.data_dir}>"


# ---------------------------------------------------------------------- topics


# create_topics lives in stepwatch.topics; kept importable from here for the tests.
from stepwatch.topics import create_topics  # noqa: E402,F401


# ----------------------------------------------------------------- foreground


def port_is_free(port: int) -> None:
    """Raise ``LocalKafkaError`` when 127.0.0.1:``port`` is taken: the readiness probe would find whatever
    listens there (another broker, say) and call this broker ready while it failed to bind."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError as exc:
            raise LocalKafkaError(f"port {port} on 127.0.0.1 is busy ({exc.strerror}): another broker? "
                                  f"stop it, or pick another with --port") from None


def run_foreground(port: int = 9092, *, data_dir: str | os.PathLike | None = None) -> None:
    """Start a broker on 127.0.0.1:``port`` and block until SIGINT/SIGTERM (for `stepwatch broker`)."""
    stop = threading.Event()

    def _on_signal(signum, frame):  # noqa: ARG001
        stop.set()

    port_is_free(port)
    old = {s: signal.signal(s, _on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    kafka = LocalKafka(port=port, data_dir=data_dir)
    try:
        kafka.start()
        if not kafka.running:  # what answered the probe was not this broker
            raise LocalKafkaError(f"the broker exited at start; log {kafka.log_file}")
        print(
            f"Kafka {kafka_version()} ready at {kafka.bootstrap} "
            f"(started in {kafka.startup_seconds:.1f}s; log: {kafka.log_file}). Ctrl-C to stop.",
            flush=True,
        )
        while not stop.wait(0.5):
            if not kafka.running:
                raise LocalKafkaError("Kafka broker exited unexpectedly:\n" + kafka._logs_tail())
    finally:
        kafka.stop()
        for s, h in old.items():
            signal.signal(s, h)
