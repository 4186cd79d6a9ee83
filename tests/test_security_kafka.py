"""TLS + SASL: a broker with a SASL_SSL listener (self-signed certificate made here); the
simulator (kafka-python), the worker (Faust/aiokafka) and the alerts reader connect through it."""

from __future__ import annotations

import subprocess
import uuid

import pytest

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
            f'username="admin" password="admin-pw" user_stepwatch="{PASSWORD}";',
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
        assert PASSWORD not in worker.log_text()
        assert PASSWORD not in str(alerts)
    finally:
        worker.stop()


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
