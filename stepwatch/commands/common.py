"""What the commands share: settings from the environment and the command line, Kafka checks, text cuts."""

from __future__ import annotations

import argparse
import dataclasses

from typing import TYPE_CHECKING

from stepwatch.terminal import json_line, printable  # noqa: F401  (the commands' text helpers, re-exported)

if TYPE_CHECKING:  # the whole tree loads the detection core: only when a command needs it, not to parse
    from stepwatch.client_settings import ClientSettings
    from stepwatch.config import Settings


def files_precheck(command: str, nothing: str):
    """A ``precheck`` (stepwatch/cli.py) for commands reading several recordings: every file checked before any
    is read, so one missing among them is one line (``stepwatch COMMAND: PATH: why; NOTHING``) and nothing
    half done: a job's other ranks' events without it are not the job."""

    def check(args: argparse.Namespace) -> None:
        from stepwatch.recording import unreadable

        problem = unreadable(args.files)
        if problem:
            raise SystemExit(f"stepwatch {command}: {problem}; {nothing}")

    return check


def _settings(args: argparse.Namespace) -> Settings:
    from stepwatch.config import Settings

    return _with_overrides(Settings.from_env(), args)


def client_settings(args: argparse.Namespace) -> ClientSettings:
    """Only the Kafka and security sections (light: for the reachability check before anything heavy)."""
    from stepwatch.client_settings import ClientSettings

    return _with_overrides(ClientSettings.from_env(), args)


def _with_overrides(settings, args: argparse.Namespace):
    kafka = settings.kafka
    overrides = {}
    if getattr(args, "bootstrap", None):
        overrides["bootstrap"] = args.bootstrap
    if getattr(args, "topic_prefix", None) is not None:
        overrides["topic_prefix"] = args.topic_prefix
    if overrides:
        settings = dataclasses.replace(settings, kafka=dataclasses.replace(kafka, **overrides))
    return settings


def _require_bootstrap(settings: Settings | ClientSettings) -> None:
    if not settings.kafka.bootstrap:
        raise SystemExit("stepwatch: no Kafka configured: pass --bootstrap HOST:PORT or set KAFKA_BOOTSTRAP "
                         "(`stepwatch broker` starts a local one)")


def _add_kafka_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--bootstrap", metavar="HOST:PORT[,...]",
                   help="Kafka bootstrap servers (default: $KAFKA_BOOTSTRAP)")
    p.add_argument("--topic-prefix", metavar="PREFIX",
                   help="prefix of the events/alerts/deadletter topics (default: $STEPWATCH_KAFKA_TOPIC_PREFIX "
                        "or 'stepwatch.')")


def _require_reachable(settings: Settings | ClientSettings, command: str, timeout: float = 5.0) -> None:
    """One clear line, at once, when no bootstrap server accepts a connection (not Kafka's retry logs)."""
    import socket

    errors = []
    for server in settings.kafka.bootstrap.split(","):
        host, _, port = server.strip().rpartition(":")
        try:
            socket.create_connection((host.strip("[]") or "localhost", int(port)), timeout=timeout).close()
            return
        except (OSError, ValueError) as exc:
            errors.append(f"{server.strip()}: {exc.strerror if isinstance(exc, OSError) and exc.strerror else exc}")
    raise SystemExit(f"stepwatch {command}: Kafka broker unreachable ({'; '.join(errors)}); check --bootstrap or "
                     "KAFKA_BOOTSTRAP (`stepwatch broker` starts a local one)")


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[:width - 1] + "~"
