"""The worker's side of the control topic: sends the hang rule's stack requests to the ranks.

``<prefix>control``, keyed by job (so one job's requests stay in one partition, the one its
rank monitors read: producers/stacks.py). The hang detector decides whom to ask and when
(models/hang/detector.py: culprits and a few waiting ranks, rate-limited per job, ``hang.stacks``
turns it off); this task only drains ``engine.take_stack_requests()`` on the worker's timer
and publishes. Sending never blocks detection: a failed send is logged and counted, and the
hang alert then lists the asked ranks as ``stack_missing``, as it would for ranks that
cannot answer.
"""

from __future__ import annotations

import logging

import orjson

log = logging.getLogger("stepwatch.worker")


def install_control(app, engine, settings, metrics=None):
    """Add the task that publishes stack requests; returns the async ``flush`` it runs on each tick."""
    kafka = settings.kafka
    topic = app.topic(kafka.topic(kafka.control_topic), value_serializer="raw", key_serializer="raw")
    counter = None
    if metrics is not None:
        from prometheus_client import Counter

        counter = Counter("stepwatch_stack_requests", "Stack requests sent to hung jobs' ranks, by result.",
                          ["result"], registry=metrics.registry)

    async def flush() -> None:
        for request in engine.take_stack_requests():
            try:
                await topic.send(key=request.job.encode(), value=orjson.dumps(request.to_dict()))
            except Exception:
                log.exception("stack request %s for job %s not sent", request.request_id, request.job)
                if counter is not None:
                    counter.labels("failed").inc()
                continue
            if counter is not None:
                counter.labels("sent").inc()
            log.info("stack request %s: job %s ranks %s", request.request_id, request.job, list(request.ranks))

    @app.timer(interval=settings.worker.tick_interval)
    async def stack_requests() -> None:
        await flush()

    return flush
