"""``stepwatch worker``: run the detection worker until interrupted."""

from __future__ import annotations

import argparse
import dataclasses

from stepwatch.commands.common import _add_kafka_args, _require_bootstrap, _require_reachable, _settings


def run(args: argparse.Namespace) -> int:
    from stepwatch.streams.worker import run_worker

    settings = _settings(args)
    _require_bootstrap(settings)
    overrides = {}
    if args.web_port is not None:
        overrides["web_port"] = args.web_port
    if overrides:
        settings = dataclasses.replace(settings, worker=dataclasses.replace(settings.worker, **overrides))
    _require_reachable(settings, "worker")
    _require_free_web_port(settings)
    _require_web_auth(settings)  # a configuration mistake says so before any wait for the broker
    _require_kafka(settings)
    from stepwatch.recording import tune_gc

    # As replay: the default collector's scans of every rank's state grow with the job (BENCHMARKS.md,
    # "Replay and job size"); a larger youngest generation keeps the per-event cost flat.
    tune_gc()
    run_worker(settings, loglevel=args.loglevel)
    return 0


def _require_web_auth(settings) -> None:
    """An off-loopback bind without a token (or an unreadable token file): its one line, before the Kafka wait."""
    from stepwatch.streams.web_auth import web_token

    web_token(settings.worker)  # a ValueError: one line and exit 2 (stepwatch/cli.py)


#: How long the worker waits for a bootstrap server that accepts connections to answer as Kafka.
KAFKA_ANSWER_SECONDS = 5.0


def _require_free_web_port(settings) -> None:
    """A second worker on the same host: one line naming the port, not aiohttp's traceback from inside Faust."""
    import errno
    import socket

    w = settings.worker
    if w.web_port <= 0:
        return
    try:
        infos = socket.getaddrinfo(w.web_bind, w.web_port, type=socket.SOCK_STREAM)
    except OSError:
        return  # an unresolvable bind address: the web server says so itself
    family, _type, _proto, _name, address = infos[0]
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as aiohttp binds: TIME_WAIT is no conflict
        try:
            probe.bind(address)
        except OSError as exc:
            if exc.errno not in (errno.EADDRINUSE, errno.EACCES):
                return
            raise SystemExit(f"stepwatch worker: web port {w.web_port} on {w.web_bind} is busy ({exc.strerror}): "
                             "another worker on this host? give this one --web-port PORT "
                             "(or STEPWATCH_WORKER_WEB_PORT; 0: no web server)") from None


def _require_kafka(settings) -> None:
    """A port that accepts connections but is not Kafka (or wants TLS): one line within seconds, not a silent
    half-minute. Says what it waits for while it does."""
    import logging
    import sys

    from kafka import KafkaAdminClient
    from kafka.errors import KafkaError

    from stepwatch.security import client_config

    bootstrap = settings.kafka.bootstrap
    print(f"stepwatch worker: waiting for Kafka at {bootstrap} (up to {KAFKA_ANSWER_SECONDS:g} s)", file=sys.stderr,
          flush=True)
    quiet = logging.getLogger("kafka")
    level = quiet.level
    quiet.setLevel(logging.CRITICAL)  # its retry log; the line below says what failed
    options = {"request_timeout_ms": int(KAFKA_ANSWER_SECONDS * 1000)}
    if "bootstrap_timeout_ms" in KafkaAdminClient.DEFAULT_CONFIG:
        options["bootstrap_timeout_ms"] = int(KAFKA_ANSWER_SECONDS * 1000)
    try:
        KafkaAdminClient(bootstrap_servers=bootstrap, **client_config(settings), **options).close()
    except KafkaError as exc:
        raise SystemExit(f"stepwatch worker: {bootstrap} accepts connections but did not answer as Kafka within "
                         f"{KAFKA_ANSWER_SECONDS:g} s ({type(exc).__name__}): is it the broker's port? a TLS or "
                         "SASL listener needs the STEPWATCH_SECURITY_* settings") from None
    finally:
        quiet.setLevel(level)


def add_parser(sub) -> None:
    p = sub.add_parser("worker", help="run the detection worker (Faust) until interrupted",
                       description="Consume the events topic, detect stragglers and hangs, publish alerts.")
    _add_kafka_args(p)
    p.add_argument("--web-port", type=int, help="port of the worker's web server, 0 to disable (default 6066)")
    p.add_argument("--loglevel", default="info", choices=["debug", "info", "warning", "error"],
                   help="log level of its own log (default info)")
    p.set_defaults(func=run)
