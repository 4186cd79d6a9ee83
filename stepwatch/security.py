"""Translating ``SecuritySettings`` into each Kafka client's own connection settings.

kafka-python (producers, agent, CLI, admin) and aiokafka/Faust (the worker) spell TLS and
SASL differently; this module is the one place that knows both. Secrets are read here,
from the settings (environment) or a file, and go nowhere but the client.
"""

from __future__ import annotations

import ssl
from pathlib import Path
from typing import Any

from stepwatch.client_settings import SecuritySettings

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")


def _validate(sec: SecuritySettings) -> None:
    if sec.protocol not in PROTOCOLS:
        raise ValueError(f"STEPWATCH_SECURITY_PROTOCOL={sec.protocol!r}: expected one of {', '.join(PROTOCOLS)}")
    if sec.protocol.startswith("SASL") and sec.sasl_mechanism not in MECHANISMS:
        raise ValueError(f"STEPWATCH_SECURITY_SASL_MECHANISM={sec.sasl_mechanism!r}: expected one of "
                         f"{', '.join(MECHANISMS)}")


def sasl_password(sec: SecuritySettings) -> str:
    if sec.sasl_password_file:
        try:
            return Path(sec.sasl_password_file).read_text().strip()
        except OSError as exc:
            raise ValueError(f"cannot read STEPWATCH_SECURITY_SASL_PASSWORD_FILE: {exc.strerror}") from None
    return sec.sasl_password


def ssl_context(sec: SecuritySettings) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=sec.ssl_cafile or None)
    context.check_hostname = sec.ssl_check_hostname
    if sec.ssl_certfile:
        context.load_cert_chain(sec.ssl_certfile, sec.ssl_keyfile or None)
    return context


def kafka_python_config(sec: SecuritySettings) -> dict[str, Any]:
    """Keyword arguments for kafka-python's KafkaProducer / KafkaConsumer / KafkaAdminClient."""
    _validate(sec)
    if sec.protocol == "PLAINTEXT":
        return {}
    config: dict[str, Any] = {"security_protocol": sec.protocol}
    if sec.protocol in ("SSL", "SASL_SSL"):
        config["ssl_context"] = ssl_context(sec)
    if sec.protocol.startswith("SASL"):
        config.update(sasl_mechanism=sec.sasl_mechanism, sasl_plain_username=sec.sasl_username,
                      sasl_plain_password=sasl_password(sec))
    return config


def client_config(settings) -> dict[str, Any]:
    """kafka-python connection settings for a whole ``Settings`` object."""
    return kafka_python_config(settings.security)


def faust_credentials(sec: SecuritySettings):
    """``broker_credentials`` for faust.App (None for PLAINTEXT)."""
    import faust

    _validate(sec)
    if sec.protocol == "PLAINTEXT":
        return None
    context = ssl_context(sec) if sec.protocol in ("SSL", "SASL_SSL") else None
    if sec.protocol == "SSL":
        return faust.SSLCredentials(context)
    return faust.SASLCredentials(username=sec.sasl_username, password=sasl_password(sec), ssl_context=context,
                                 mechanism=sec.sasl_mechanism)
