"""The worker's web endpoints (Faust pages): metrics, health, status API, config, dashboard.

========================  =====================================================================
``/metrics``              Prometheus text format (streams/metrics.py)
``/health``               200 ``{"status": "ok"}`` once the worker consumes (``"degraded"`` for 5 minutes
                          after a processing failure, counted in ``stepwatch_processing_failures_total``), 503 before
                          (``starting``), while the broker is unreachable or does not answer (``degraded``,
                          streams/broker_watch.py) and while the events consumer is behind with nothing
                          consumed for a minute (``degraded``, ``stalled_seconds``; streams/metrics.py)
``/jobs``                 the jobs this worker holds (models/status.py ``jobs_view``)
``/jobs/{job}``           per-rank detail, open alerts with evidence, settings in effect
``/jobs/{job}/heatmap``   the dashboard's data (rows x recent steps of compute-time ratio)
``/config``               runtime settings read from the config topic
``/dashboard/{job}``      the live dashboard (``/dashboard`` lists the jobs; ``?job=`` works too)
``/alerts/{id}/feedback`` POST: a verdict on an alert, to the feedback topic (streams/feedback_feed.py)
========================  =====================================================================

A job lives on the worker that owns its events partition (events are keyed by job). A
request for a job this worker does not hold is proxied to the worker that owns the job's
partition; the partition is the producers' default (murmur2 of the job id). The owner: with
the Faust agent (``worker.consumer=faust``), as Faust's partition assignor knows it from the
consumer group's assignment (each worker announces its ``worker.canonical_url``); with the
aiokafka events consumer (whose group Faust does not see), or when the assignor does not
know, this worker for its own partitions and the workers registry (streams/registry.py, each
worker advertises its partitions and ``canonical_url`` there) for the others. When this
worker owns the partition itself, the owner is unknown, or the request was already proxied
once, the answer is 404 with ``partition`` and ``owner`` in the body; 502 when the owner
does not answer.

The proxy talks only to a peer the registry verified (``WorkersRegistry.known``: a live worker whose
record is signed with the peer key, or a listed peer; docs/security.md), follows no redirect and
passes this worker's bearer token on (so the token goes to verified peers only); an owner it does
not trust is answered 404 with ``"untrusted owner"``. With neither a peer key nor a peer list (the
default outside Helm) no ``workers``-topic URL is verified: the answer is 404 with the partition,
the advertised owner, ``"verified": false`` and how to set a key. Who may read the pages at
all: streams/web_auth.py.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from typing import Any

import orjson

from stepwatch.config import ConsumerMode
from stepwatch.models.status import heatmap_view, job_view, jobs_view

from .dashboard import render_dashboard
from .metrics import CONTENT_TYPE_LATEST
from .registry import UNVERIFIED_HINT

log = logging.getLogger("stepwatch.web")

JSON = "application/json"


def _dumps(value: Any) -> str:
    return orjson.dumps(value, option=orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS, default=str).decode()


class StatusPages:
    """The web pages as a component (streams/component.py): ``attach(app)`` registers them (see ``_register``)."""

    def __init__(self, **deps: Any) -> None:
        self._deps = deps

    def attach(self, app) -> None:
        _register(app, **self._deps)


def _register(app, *, engine, recorder, metrics, runtime, events_topic, settings, is_ready,
              owned_partitions=None, partition_count=None, workers=None, token: str | None = None,
              broker_away=None) -> None:
    """Register the pages on ``app`` (a faust.App with its web server enabled).

    ``owned_partitions()``: this worker's events partitions (None: unknown); ``partition_count()``:
    the events topic's partitions (None: unknown, ``kafka.partitions`` is assumed); ``workers``: the
    workers registry (streams/registry.py), who owns the other partitions.
    """

    def mine() -> set[int] | None:
        if owned_partitions is not None:
            return owned_partitions()
        try:
            return {tp.partition for tp in app.consumer.assignment() if tp.topic == events_topic.get_topic_name()}
        except Exception:  # silent: no assignment while the consumer (re)starts: unknown, as documented
            return None

    def job_settings(job: str) -> dict[str, Any]:
        return {"source": runtime.source(job),
                "straggler": dataclasses.asdict(engine.straggler_settings(job))}

    def owner_of(job: str) -> dict[str, Any]:
        """Where the job's events partition lives, as far as this worker can tell."""
        from faust.types import TP

        from .telemetry_feed import partition_of

        topic = events_topic.get_topic_name()
        me = str(app.conf.canonical_url).rstrip("/")
        info: dict[str, Any] = {"worker": str(app.conf.canonical_url), "owner": None}
        try:
            count = (partition_count() if partition_count is not None
                     else app.consumer.topic_partitions(topic)) or settings.kafka.partitions
        except Exception:  # silent: the consumer (re)starting: the configured partition count stands in
            count = settings.kafka.partitions
        # The producers' default partitioner (murmur2 of the key, as Kafka's Java client).
        info["partition"] = partition = partition_of(job, count)
        owner = None
        if settings.worker.consumer is ConsumerMode.FAUST:  # Faust's group is the events consumer's: its assignor knows
            owner = getattr(app.assignor, "_external_tps_url", {}).get(TP(topic, partition))
        if not owner:
            if partition in (mine() or ()):
                owner = me
            elif workers is not None:
                owner = workers.owner(partition, time.time(), exclude=me)
        if owner:
            info["owner"] = str(owner).rstrip("/")
        return info

    async def proxy(view, request, owner: str):
        url = owner + request.path_qs
        headers = {"X-Stepwatch-Proxied": "1"}
        if token is not None:  # the peers share the token (docs/security.md)
            headers["Authorization"] = f"Bearer {token}"
        async with app.http_client.get(url, headers=headers, allow_redirects=False) as response:
            body = await response.read()
            return view.bytes(body, content_type=response.content_type, status=response.status)

    async def local_or_routed(view, request, job: str, build):
        now = time.time()
        body = build(job, now)
        if body is not None:
            return view.text(_dumps(body), content_type=JSON)
        where = owner_of(job)
        owner = where["owner"]
        if owner and owner != where["worker"].rstrip("/") and (workers is None or not workers.known(owner, now)):
            if workers is not None and not workers.verifies:  # the default outside Helm: say how to fix it
                return view.text(_dumps({"error": f"job {job!r} is not on this worker; its partition's owner is "
                                         f"advertised as {owner} but not verified, so it is not proxied: "
                                         f"{UNVERIFIED_HINT}", **where, "verified": False}),
                                 content_type=JSON, status=404)
            return view.text(_dumps({"error": f"unknown job {job!r}: untrusted owner (not a known peer)", **where}),
                             content_type=JSON, status=404)
        if owner and owner != where["worker"].rstrip("/") and "X-Stepwatch-Proxied" not in request.headers:
            try:
                return await proxy(view, request, owner)
            except Exception as exc:  # the owner is unreachable
                log.warning("proxying %s to %s failed: %r", request.path, owner, exc)
                return view.text(_dumps({"error": f"job {job!r} lives on {owner}, which did not answer: {exc!r}",
                                         **where}), content_type=JSON, status=502)
        why = ("this worker owns its partition but has no event of it" if owner == where["worker"].rstrip("/")
               else "its partition's owner is unknown" if not owner else "not on this worker")
        return view.text(_dumps({"error": f"unknown job {job!r}: {why}", **where}), content_type=JSON, status=404)

    @app.page("/metrics")
    async def metrics_page(self, request):
        from aiohttp.web import Response

        return Response(body=metrics.render(), headers={"Content-Type": CONTENT_TYPE_LATEST}, status=200)

    @app.page("/health")
    async def health_page(self, request):
        ready = is_ready()
        # Degraded: consuming on paper, but a Kafka client could not reach the broker just now (streams/broker_watch.py).
        away = bool(broker_away and broker_away())
        body = {**metrics.health(ready, broker_away=away), "worker": str(app.conf.canonical_url),
                "partitions": sorted(mine() or ()), "jobs": len(engine.jobs)}
        # 200 while consuming (a recent processing failure is reported, not a reason to pull the worker);
        # 503 before it consumes, while the broker is unreachable and while consumption is stalled.
        ok = ready and not away and "stalled_seconds" not in body
        return self.text(_dumps(body), content_type=JSON, status=200 if ok else 503)

    @app.page("/jobs")
    async def jobs_page(self, request):
        body = {"worker": str(app.conf.canonical_url), "partitions": sorted(mine() or ()),
                "jobs": jobs_view(engine, recorder, time.time())}
        return self.text(_dumps(body), content_type=JSON)

    @app.page("/jobs/{job}")
    async def job_page(self, request, job):
        return await local_or_routed(self, request, job, lambda j, now: job_view(
            engine, recorder, j, now, settings=job_settings(j)))

    @app.page("/jobs/{job}/heatmap")
    async def heatmap_page(self, request, job):
        max_rows = settings.worker.dashboard_max_rows
        try:
            max_rows = max(1, int(request.query.get("rows", max_rows)))
        except ValueError:
            pass
        return await local_or_routed(self, request, job, lambda j, now: heatmap_view(
            engine, recorder, j, now, max_rows=max_rows, settings=job_settings(j)))

    @app.page("/config")
    async def config_page(self, request):
        return self.text(_dumps(runtime.as_dict()), content_type=JSON)

    @app.page("/dashboard")
    async def dashboard_index(self, request):
        return self.html(render_dashboard(request.query.get("job") or None))

    @app.page("/dashboard/{job}")
    async def dashboard_page(self, request, job):
        return self.html(render_dashboard(job))
