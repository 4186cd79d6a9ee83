"""The worker's one ready line: what it consumes, how, and where its dashboard and metrics are.

Printed once, on stderr (the log may be quiet), when the events consumer first has its partitions:
``stepwatch worker: ready: consuming stepwatch.events (group stepwatch-events, consumer aiokafka) ...``.
"""

from __future__ import annotations

import asyncio
import sys

#: How often the task looks whether the worker is ready (a wait for a condition, not a timer rule).
POLL_SECONDS = 0.2


def ready_line(worker) -> str:
    settings, kafka = worker.settings, worker.settings.kafka
    topics = [kafka.topic(kafka.events_topic), kafka.topic(settings.telemetry.topic), kafka.topic(kafka.config_topic)]
    line = (f"stepwatch worker: ready: consuming {', '.join(topics)} at {kafka.bootstrap} "
            f"(group {worker.events_group}, consumer {settings.worker.consumer}); alerts to "
            f"{kafka.topic(kafka.alerts_topic)}")
    if settings.worker.web_port > 0:
        base = worker.canonical_url.rstrip("/")
        line += f"; dashboard {base}/dashboard; metrics {base}/metrics"
        if settings.worker.web_bind not in ("127.0.0.1", "localhost", "::1"):
            line += f" (listening on {settings.worker.web_bind}:{settings.worker.web_port})"
    else:
        line += "; web server off (no dashboard or metrics: --web-port 0)"
    return line


def announce_ready(worker) -> None:
    """Register the app task that prints the ready line once the worker is ready."""

    async def say_ready() -> None:
        while not worker.is_ready():
            await asyncio.sleep(POLL_SECONDS)
        # The process's own stderr: Faust redirects sys.stderr into its log (as warnings).
        print(ready_line(worker), file=sys.__stderr__, flush=True)

    worker.app.task(say_ready)
