"""The worker's side of the control topic: sends the hang rule's stack requests to the ranks.

``<prefix>control``, keyed by job (so one job's requests stay in one partition, the one its
rank monitors read: producers/stacks.py). The hang detector decides whom to ask and when
(models/hang/detector.py: culprits and a few waiting ranks, rate-limited per job, ``hang.stacks``
turns it off); this task only drains ``engine.take_stack_requests()`` on the worker's timer
and publishes. Sending never blocks detection: a failed send is logged and counted, and the
hang alert then lists the asked ranks as ``stack_missing``, as it would for ranks that
cannot answer. A component (streams/component.py): ``flush`` runs without an app or a broker.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable

import orjson

from .component import Send, app_sender

log = logging.getLogger("stepwatch.worker")


class StackRequests:
    """Publishes the hang rule's stack requests (``take()``: the engine's ``take_stack_requests``) on each tick;
    ``registry``: the worker's metrics registry (counts sent and failed), or None; ``send``: default the app's."""

    def __init__(self, take: Callable[[], Iterable], settings, *, registry=None, send: Send | None = None) -> None:
        kafka = settings.kafka
        self._take, self._send = take, send
        self.topic = kafka.topic(kafka.control_topic)
        self.interval = settings.worker.tick_interval
        self._counter = None
        if registry is not None:
            from prometheus_client import Counter

            self._counter = Counter("stepwatch_stack_requests", "Stack requests sent to hung jobs' ranks, by result.",
                                    ["result"], registry=registry)

    def attach(self, app) -> None:
        if self._send is None:
            self._send = app_sender(app, self.topic)
        app.timer(interval=self.interval)(self.flush)

    async def flush(self) -> None:
        for request in self._take():
            try:
                await self._send(self.topic, request.job.encode(), orjson.dumps(request.to_dict()))
            except Exception:
                log.exception("stack request %s for job %s not sent", request.request_id, request.job)
                if self._counter is not None:
                    self._counter.labels("failed").inc()
                continue
            if self._counter is not None:
                self._counter.labels("sent").inc()
            log.info("stack request %s: job %s ranks %s", request.request_id, request.job, list(request.ranks))
