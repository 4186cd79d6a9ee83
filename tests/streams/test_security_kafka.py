"""TLS + SASL: a broker with a SASL_SSL listener (self-signed certificate made here); the
simulator (kafka-python), the worker (Faust/aiokafka), the alerts reader, a training rank's monitor
(through the Lightning callback) and ``stepwatch agent`` connect through it, configured by the
``STEPWATCH_SECURITY_*`` variables alone (``-k "monitor or agent"`` selects the last two)."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid

import pytest

from stepwatch.acls import Role, acl_bindings, kafka_acls_commands
from stepwatch.localkafka import LocalKafka, free_port
from support import read_alerts, run_stepwatch, stepwatch_env

pytestmark = pytest.mark.kafka

PASSWORD = "s3cret-" + uuid.uuid4().hex[:8]


@pytest.fixture(scope="module")
def secure_broker(tmp_path_factory):
    certs = tmp_path_factory.mktemp("certs")
    key, cert = certs / "broker.key", certs / "broker.crt"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj",
                    "/CN=localhost", "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost",
                    "-keyout", str(key), "-out", str(cert)], check=True, capture_output=True)
    # Kafka's PEM keystore wants the PKCS#8 key and the certificate in one file.
    keystore = certs / "broker.pem"
    keystore.write_text(key.read_text() + cert.read_text())
    secure_port = free_port()
    broker = LocalKafka()
    broker.extra_config.update({
        "listeners": f"PLAINTEXT://127.0.0.1:{broker.port},CONTROLLER://127.0.0.1:{broker.controller_port},"
                     f"SASL_SSL://127.0.0.1:{secure_port}",
        "advertised.listeners": f"PLAINTEXT://127.0.0.1:{broker.port},SASL_SSL://127.0.0.1:{secure_port}",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,SASL_SSL:SASL_SSL",
        "sasl.enabled.mechanisms": "PLAIN",
        "listener.name.sasl_ssl.plain.sasl.jaas.config":
            "org.apache.kafka.common.security.plain.PlainLoginModule required "
            f'username="admin" password="admin-pw" user_admin="admin-pw" user_stepwatch="{PASSWORD}" '
            + "".join(f'user_{role.value}="{role.value}-pw" ' for role in Role) + ";",
        # ACLs (docs/security.md): admin, the broker itself (ANONYMOUS on PLAINTEXT/CONTROLLER) and the
        # principal of the tests above are super users; the roles get only what stepwatch/acls.py grants.
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": "User:admin;User:ANONYMOUS;User:stepwatch",
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(keystore),
        "ssl.client.auth": "none",
    })
    broker.start()
    try:
        yield {"bootstrap": f"127.0.0.1:{secure_port}", "cafile": str(cert)}
    finally:
        broker.stop()


def secure_env(broker, prefix, tmp_path, **extra):
    password_file = tmp_path / "sasl-password"
    password_file.write_text(PASSWORD + "\n")
    return stepwatch_env(broker["bootstrap"], prefix, STEPWATCH_SECURITY_PROTOCOL="SASL_SSL",
                         STEPWATCH_SECURITY_SSL_CAFILE=broker["cafile"], STEPWATCH_SECURITY_SASL_USERNAME="stepwatch",
                         STEPWATCH_SECURITY_SASL_PASSWORD_FILE=str(password_file),
                         STEPWATCH_WORKER_DATADIR=str(tmp_path / "faust"), **extra)


def test_simulator_worker_and_alerts_over_sasl_ssl(secure_broker, topic_prefix, tmp_path):
    from support import WorkerProcess

    port = free_port()  # the web server on: the workers registry (streams/registry.py) connects through TLS too
    env = secure_env(secure_broker, topic_prefix, tmp_path, STEPWATCH_WORKER_WEB_PORT=str(port))
    worker = WorkerProcess(env, tmp_path / "worker.log")
    try:
        worker.wait_ready()
        run_stepwatch("simulate", "--ranks", "8", "--steps", "60", "--straggler", "6:20:1.5", "--speed", "0", env=env)
        from stepwatch.config import Settings
        from stepwatch.security import client_config

        settings = Settings.from_env(env)
        alerts = read_alerts(secure_broker["bootstrap"], topic_prefix + "alerts", until=lambda a: bool(a),
                             **client_config(settings))
        assert alerts and alerts[0]["ranks"] == [6]
        advertised = read_alerts(secure_broker["bootstrap"], topic_prefix + "workers", timeout=20,
                                 until=lambda a: any(r["partitions"] for r in a), **client_config(settings))
        assert {r["url"] for r in advertised} == {f"http://127.0.0.1:{port}"}, worker.log_text()[-3000:]
        assert "registry reader failed" not in worker.log_text()
        # The broker probe behind /health (streams/broker_watch.py) gets its answers through SASL_SSL too.
        from opsupport import get, wait_for

        assert wait_for(lambda: get(f"http://127.0.0.1:{port}/health")[0] == 200, what="/health ok")
        assert b'"broker_reachable":true' in get(f"http://127.0.0.1:{port}/health")[1]
        assert "broker probe failed" not in worker.log_text()
        assert PASSWORD not in worker.log_text()
        assert PASSWORD not in str(alerts)
    finally:
        worker.discard()  # nothing asserted on its stop


def test_wrong_password_is_refused(secure_broker, topic_prefix, tmp_path):
    env = secure_env(secure_broker, topic_prefix, tmp_path)
    (tmp_path / "sasl-password").write_text("wrong")
    result = run_stepwatch("simulate", "--ranks", "8", "--steps", "5", "--speed", "0", env=env, check=False,
                           timeout=120)
    assert result.returncode == 1
    assert "cannot talk to Kafka at" in result.stderr and "Traceback" not in result.stderr
    assert "wrong" not in result.stderr  # the secret is not echoed


def test_plaintext_client_cannot_use_the_secure_listener(secure_broker, topic_prefix, tmp_path):
    env = stepwatch_env(secure_broker["bootstrap"], topic_prefix)
    result = run_stepwatch("simulate", "--ranks", "8", "--steps", "5", "--speed", "0", env=env, check=False,
                           timeout=120)
    assert result.returncode == 1 and "cannot talk to Kafka at" in result.stderr


# -- the training side and the node agent (issue 15): only STEPWATCH_SECURITY_* configure them --------------------

#: Tiny Lightning fits with the stepwatch callback, each a process forked after one import of torch and
#: Lightning (an import per fit was 20-25 s of CPU on 2 cores; tests/rank_zygote.py does the same for jobs).
#: The callback's monitor reads its whole configuration, TLS/SASL included, from the environment: each fit's
#: own, set in its process before the callback is made. Each writes how long it took and the counters.
LIGHTNING_FITS = r"""
import json, os, sys, time
import torch
import lightning.pytorch as pl
from torch import nn
from torch.utils.data import DataLoader, TensorDataset
from stepwatch.producers.lightning import StepwatchCallback

class Tiny(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = nn.Linear(8, 2)
    def training_step(self, batch, batch_idx):
        x, y = batch
        return nn.functional.cross_entropy(self.net(x), y)
    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)

def fit(env, steps, out):
    os.environ.clear()
    os.environ.update(env)
    callback = StepwatchCallback(heartbeat_interval=0.5)
    trainer = pl.Trainer(max_steps=steps, accelerator="cpu", devices=1, logger=False, enable_progress_bar=False,
                         enable_model_summary=False, enable_checkpointing=False, callbacks=[callback])
    data = TensorDataset(torch.randn(64, 8), torch.randint(0, 2, (64,)))
    t0 = time.monotonic()
    trainer.fit(Tiny(), DataLoader(data, batch_size=4))
    fit_s = time.monotonic() - t0
    with open(out, "w") as f:
        json.dump({"fit_s": fit_s, **callback.monitor.stats()}, f)

for job in json.loads(sys.argv[1]):
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            fd = os.open(job["log"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            os.dup2(fd, 1)
            os.dup2(fd, 2)
            fit(job["env"], job["steps"], job["out"])
            code = 0
        except BaseException:
            import traceback
            traceback.print_exc()
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    if status != 0:
        sys.exit(f"fit {job['out']} exited with {status}")
"""


def lightning_fits(jobs: dict[str, tuple[dict, int]], tmp_path, timeout: float = 360) -> dict[str, tuple[dict, str]]:
    """Run each named (env, steps) fit, one after the other, from one import: name -> (stats, its output)."""
    pytest.importorskip("lightning.pytorch", reason="lightning not installed (pip install -e '.[train-test]')")
    spec = [{"env": env, "steps": steps, "out": str(tmp_path / f"{name}.json"), "log": str(tmp_path / f"{name}.log")}
            for name, (env, steps) in jobs.items()]
    result = subprocess.run([sys.executable, "-c", LIGHTNING_FITS, json.dumps(spec)], capture_output=True, text=True,
                            timeout=timeout, env=dict(next(iter(jobs.values()))[0], OMP_NUM_THREADS="1"))
    logs = {name: (tmp_path / f"{name}.log").read_text(errors="replace") if (tmp_path / f"{name}.log").exists()
            else "" for name in jobs}
    assert result.returncode == 0, result.stderr[-2000:] + "".join(text[-3000:] for text in logs.values())
    return {name: (json.loads((tmp_path / f"{name}.json").read_text()), logs[name]) for name in jobs}


@pytest.fixture(scope="module")
def fits(secure_broker, tmp_path_factory):
    """The two fits of the monitor tests below, from one import: one with the right password (its events on
    its own topic) and one with a wrong one. name -> (prefix, env, stats, its output)."""
    from stepwatch.config import Settings
    from stepwatch.security import client_config
    from stepwatch.topics import create_topics

    jobs, prefixes = {}, {}
    for name, job, steps, extra in (("published", "secure-fit", 12, {}),
                                    ("refused", "refused-fit", 120, {"STEPWATCH_MONITOR_QUEUE_SIZE": "50"})):
        tmp = tmp_path_factory.mktemp(name)
        prefixes[name] = f"t-{name}-fit-{uuid.uuid4().hex[:8]}."
        env = secure_env(secure_broker, prefixes[name], tmp, STEPWATCH_JOB=job, **extra)
        if name == "refused":
            (tmp / "sasl-password").write_text("wrong-" + PASSWORD)
        else:
            create_topics(secure_broker["bootstrap"], [prefixes[name] + "events"], 1,
                          client_config=client_config(Settings.from_env(env)))
        jobs[name] = (env, steps)
    ran = lightning_fits(jobs, tmp_path_factory.mktemp("fits"))
    return {name: (prefixes[name], jobs[name][0], *ran[name]) for name in jobs}


def read_topic(broker, topic: str, settings, until, timeout: float = 60) -> list[dict]:
    """Wire events (batch envelopes unpacked) read through the secure listener until ``until(events)``."""
    from stepwatch.security import client_config

    messages = read_alerts(broker["bootstrap"], topic, until=lambda ms: until(unpack(ms)), timeout=timeout,
                           **client_config(settings))
    return unpack(messages)


def unpack(messages: list[dict]) -> list[dict]:
    return [e for m in messages for e in (m["events"] if m.get("kind") == "batch" else [m])]


def kafka_problem_lines(stderr: str) -> list[str]:
    """stepwatch's own lines about Kafka (kafka-python's loggers are not ours)."""
    return [line for line in stderr.splitlines() if "stepwatch: " in line and "Kafka" in line]


def test_rank_monitor_through_lightning_callback_publishes_over_sasl_ssl(secure_broker, fits):
    from stepwatch.config import Settings

    prefix, env, stats, stderr = fits["published"]
    assert (stats["sent"], stats["dropped"], stats["connected"]) == (stats["produced"], 0, True), stderr[-3000:]
    events = read_topic(secure_broker, prefix + "events", Settings.from_env(env),
                        until=lambda evs: sum(e["kind"] == "step" for e in evs) >= 12)
    assert [e["step"] for e in events if e["kind"] == "step"] == list(range(12))
    assert {e["job"] for e in events} == {"secure-fit"}
    assert PASSWORD not in stderr


def test_rank_monitor_with_wrong_password_says_so_once_and_training_is_not_blocked(secure_broker, fits):
    _, _, stats, stderr = fits["refused"]
    # Every step trained; none reached Kafka; what did not fit the queue is counted, the rest dropped at close.
    assert (stats["sent"], stats["connected"]) == (0, False)
    assert stats["produced"] >= 120 and stats["dropped"] == stats["produced"]
    # A hot path waiting on Kafka (up to max_block_ms = 1 s a call) would take minutes; 120 tiny steps take seconds.
    assert stats["fit_s"] < 60
    problems = kafka_problem_lines(stderr)
    assert len(problems) == 1, stderr[-3000:]
    assert f"stepwatch: cannot connect to Kafka at {secure_broker['bootstrap']}" in problems[0]
    assert "check the STEPWATCH_SECURITY_* settings" in problems[0]
    assert "Traceback" not in stderr and PASSWORD not in stderr


def test_agent_once_publishes_over_sasl_ssl(secure_broker, topic_prefix, tmp_path):
    from stepwatch.config import Settings
    from test_agent import make_sysfs

    env = secure_env(secure_broker, topic_prefix, tmp_path)
    sysfs = make_sysfs(tmp_path / "sys")
    result = run_stepwatch("agent", "--once", "--node", "secure-node", "--sysfs-root", str(sysfs), env=env,
                           timeout=120)
    assert "1 batches sent, 0 dropped (queue full), 0 not sent" in result.stderr, result.stderr[-3000:]
    events = read_topic(secure_broker, topic_prefix + "telemetry", Settings.from_env(env),
                        until=lambda evs: any(e["kind"] == "link" for e in evs))
    assert sorted((e["node"], e["device"]) for e in events if e["kind"] == "link") == [
        ("secure-node", "mlx5_0"), ("secure-node", "mlx5_1")]
    assert PASSWORD not in result.stderr


def test_agent_once_with_wrong_password_says_so_once_and_exits(secure_broker, topic_prefix, tmp_path):
    from test_agent import make_sysfs

    env = secure_env(secure_broker, topic_prefix, tmp_path)
    (tmp_path / "sasl-password").write_text("wrong-" + PASSWORD)
    result = run_stepwatch("agent", "--once", "--node", "secure-node", "--sysfs-root",
                           str(make_sysfs(tmp_path / "sys")), env=env, timeout=120)
    assert "0 batches sent, 0 dropped (queue full), 1 not sent" in result.stderr, result.stderr[-3000:]
    problems = kafka_problem_lines(result.stderr)
    assert len(problems) == 1, result.stderr[-3000:]
    assert f"stepwatch: cannot connect to Kafka at {secure_broker['bootstrap']}" in problems[0]
    assert "check the STEPWATCH_SECURITY_* settings" in problems[0]
    assert "Traceback" not in result.stderr and PASSWORD not in result.stderr


# -- ACLs: who writes which topic (docs/security.md, stepwatch/acls.py) -----------------------------

PRINCIPALS = {role: f"User:{role.value}" for role in Role}


def role_client(secure_broker, kind, role: str, password: str | None = None, **kwargs):
    import ssl

    context = ssl.create_default_context(cafile=secure_broker["cafile"])
    return kind(bootstrap_servers=secure_broker["bootstrap"], security_protocol="SASL_SSL", ssl_context=context,
                sasl_mechanism="PLAIN", sasl_plain_username=role, sasl_plain_password=password or f"{role}-pw",
                **kwargs)


def test_the_documented_acls_keep_each_principal_to_its_topics(secure_broker, topic_prefix):
    from kafka import KafkaProducer
    from kafka.admin import KafkaAdminClient, NewTopic
    from kafka.errors import TopicAuthorizationFailedError

    from stepwatch.config import Settings

    settings = Settings.from_env({"STEPWATCH_KAFKA_TOPIC_PREFIX": topic_prefix})
    admin = role_client(secure_broker, KafkaAdminClient, "admin", "admin-pw")
    try:
        names = ["events", "telemetry", "config", "control", "alerts", "feedback"]
        admin.create_topics([NewTopic(topic_prefix + n, 1, 1) for n in names])
        admin.create_acls(acl_bindings(PRINCIPALS, settings))
    finally:
        admin.close()

    def can_write(role: str, topic: str) -> bool:
        producer = role_client(secure_broker, KafkaProducer, role, max_block_ms=15000, retries=0)
        try:
            producer.send(topic_prefix + topic, b"{}").get(timeout=15)
            return True
        except TopicAuthorizationFailedError:
            return False
        finally:
            producer.close()

    # Training code: its events (stack answers are events) only; no telemetry (a forged Xid), no
    # runtime settings (hang.timeout_seconds=inf), no stack requests to every rank.
    assert can_write("training", "events")
    assert not can_write("training", "telemetry")
    assert not can_write("training", "config")
    assert not can_write("training", "control")
    assert not can_write("training", "alerts")
    assert can_write("agent", "telemetry") and not can_write("agent", "events")
    assert can_write("operator", "config") and can_write("operator", "control")
    assert can_write("worker", "alerts") and can_write("worker", "control") and not can_write("worker", "config")
    # Verdicts on alerts (issue 41): the SREs, and the workers for what their guarded web port takes; a training
    # process or an agent cannot mark alerts false (and so lower a rule's precision or hide a page's sentence).
    assert can_write("operator", "feedback") and can_write("worker", "feedback")
    assert not can_write("training", "feedback") and not can_write("agent", "feedback")


def test_stepwatch_feedback_from_an_unauthorised_principal_is_refused_in_one_line(secure_broker, topic_prefix,
                                                                                   tmp_path):
    from kafka.admin import KafkaAdminClient, NewTopic

    from stepwatch.config import Settings

    settings = Settings.from_env({"STEPWATCH_KAFKA_TOPIC_PREFIX": topic_prefix})
    admin = role_client(secure_broker, KafkaAdminClient, "admin", "admin-pw")
    try:
        admin.create_topics([NewTopic(topic_prefix + n, 1, 1) for n in ("alerts", "feedback")])
        admin.create_acls(acl_bindings(PRINCIPALS, settings))
    finally:
        admin.close()

    def feedback(role: str, *args: str):
        (tmp_path / role).write_text(f"{role}-pw\n")
        env = stepwatch_env(secure_broker["bootstrap"], topic_prefix, STEPWATCH_SECURITY_PROTOCOL="SASL_SSL",
                            STEPWATCH_SECURITY_SSL_CAFILE=secure_broker["cafile"],
                            STEPWATCH_SECURITY_SASL_USERNAME=role,
                            STEPWATCH_SECURITY_SASL_PASSWORD_FILE=str(tmp_path / role))
        return run_stepwatch("feedback", *args, env=env, check=False, timeout=120)

    refused = feedback("training", "a1", "false", "--force")
    assert refused.returncode != 0 and "not allowed to write" in refused.stderr, refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1, refused.stderr
    allowed = feedback("operator", "a1", "confirmed", "--force")
    assert allowed.returncode == 0 and "marked confirmed by operator" in allowed.stdout, allowed.stderr
    exported = feedback("operator", "--export")
    assert [json.loads(line)["by"] for line in exported.stdout.splitlines()] == ["operator"], exported.stderr


def test_docs_security_lists_the_acl_commands_of_the_table():
    from pathlib import Path

    doc = (Path(__file__).resolve().parents[2] / "docs" / "security.md").read_text()
    for command in kafka_acls_commands({role: f"User:{role.value}" for role in Role}):
        assert command in doc, command
