"""The worker's parts as components: each is built from explicit dependencies (callables and values, never the
worker itself) and ``attach(app)`` registers what it runs on the worker's Faust app (its tasks, timers,
services, pages); nothing else is written into another object. streams/worker.py composes them in one place.

A component that holds a connection has ``start()``/``stop()``: ``as_service`` runs them as a ``mode.Service``
of the app (started before the worker logs "Ready", stopped before the app's producer), so a test drives the
same two methods with no Faust app and no broker.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any, Protocol, runtime_checkable

log = logging.getLogger("stepwatch.worker")


@runtime_checkable
class Component(Protocol):
    """A part of the worker (streams/worker.py composes them)."""

    def attach(self, app: Any) -> None:
        """Register its tasks, timers, services or pages on the worker's Faust ``app``."""


class Startable(Protocol):
    async def start(self) -> None: ...

    async def stop(self) -> None: ...


#: What a failed item of a live road does (``Worker.drive``): ``(stage, item, exc)``; the road goes on.
ErrorPolicy = Callable[[str, Any, Exception], None]
#: Sends one record to a topic: ``await send(topic, key, value)`` (the worker's: the Faust app's producer).
Send = Callable[[str, bytes, bytes | None], Awaitable[Any]]


def as_service(app: Any, part: Startable, name: str) -> None:
    """Run ``part.start()``/``part.stop()`` as a ``mode.Service`` of ``app``."""
    from mode import Service

    async def on_start(self) -> None:
        await part.start()

    async def on_stop(self) -> None:
        await part.stop()

    # Made with its name (Faust's log says it; mode keys a service's tasks by its class name when it is made).
    app.service(type(name, (Service,), {"on_start": on_start, "on_stop": on_stop, "__module__": __name__}))


def app_sender(app: Any, *names: str) -> Send:
    """``Send`` through the Faust app's producer (raw keys and values); ``names``: topics declared now, before the
    app starts (others on their first send)."""
    topics: dict[str, Any] = {name: app.topic(name, value_serializer="raw", key_serializer="raw") for name in names}

    async def send(topic: str, key: bytes, value: bytes | None) -> None:
        out = topics.get(topic)
        if out is None:
            out = topics[topic] = app.topic(topic, value_serializer="raw", key_serializer="raw")
        await out.send(key=key, value=value)

    return send
