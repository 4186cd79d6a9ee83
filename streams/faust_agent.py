"""The events topic's consumer with ``STEPWATCH_WORKER_CONSUMER=faust``: one Faust agent (group ``<app_id>``) a
``take_events`` batch at a time; the other mode is streams/events_consumer.py. A component
(streams/component.py) with the same questions as that one (``ready``, ``owned``, ``partition_count``,
``lag``), answered from the Faust app's consumer."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

from stepwatch.models.sources import Read

#: The Faust agent's batches (``stream.take_events``): at most this many messages, and a batch not full
#: goes after this many seconds (the alert latency it may add; the aiokafka consumer's getmany has none).
FAUST_TAKE_MAX = 1000
FAUST_TAKE_WITHIN = 0.005


class FaustSource:
    """The Faust agent's stream as a source (models/sources.py): one ``Read`` per ``take_events`` batch (whole
    batches, as the aiokafka consumer's getmany: the pipeline merges consecutive step messages into one column
    batch), while ``allowed`` (recovery clears it). take_events acks a batch's events only once the next is
    asked for, after this batch was processed (offsets committed after processing), and a revoke waits for them
    (stream_wait_empty). Faust's messages have the attributes the pipeline reads."""

    def __init__(self, stream, allowed: asyncio.Event) -> None:
        self.stream, self.allowed = stream, allowed

    async def __aiter__(self):
        async for events in self.stream.take_events(FAUST_TAKE_MAX, within=FAUST_TAKE_WITHIN):
            if not self.allowed.is_set():
                await self.allowed.wait()
            yield Read([event.message for event in events], time.time())  # (on the worker's clock: Worker.drive)


class FaustAgent:
    """The Faust agent on ``topic`` (a Faust topic of ``app``): its batches go to ``drive(source, stage)``; an
    assignment is recovered (``recover``) and a revocation forgotten (``forget``), with ``assignment_changed()``
    called either way (the workers registry)."""

    def __init__(self, app, topic, *, drive: Callable[[Any, str], Awaitable[None]],
                 recover: Callable[[set[int]], Awaitable[None]], forget: Callable[[set[int]], None],
                 allowed: asyncio.Event, assignment_changed: Callable[[], None] = lambda: None) -> None:
        self.app, self.topic = app, topic
        self._drive, self._recover, self._forget, self._allowed = drive, recover, forget, allowed
        self._assignment_changed = assignment_changed
        self.rebalanced = False  # Faust's first rebalance completed
        self.assigned = False  # the agent's assignment is known

    def attach(self, app) -> None:
        app.on_rebalance_complete.connect(self._rebalance_complete)
        app.on_partitions_assigned.connect(self._on_assigned)
        app.on_partitions_revoked.connect(self._on_revoked)

        async def detect(stream):
            await self._drive(FaustSource(stream, self._allowed), "events")

        app.agent(self.topic, name="stepwatch-detect")(detect)

    # -- what the worker asks --------------------------------------------------------------

    def ready(self) -> bool:
        return self.rebalanced and not self.app.rebalancing

    def _assignment(self) -> set[int]:
        name = self.topic.get_topic_name()
        return {tp.partition for tp in self.app.consumer.assignment() if tp.topic == name}

    def owned(self) -> set[int] | None:
        """The agent's events partitions now (None: not known yet)."""
        if not self.assigned:
            return None
        try:
            return self._assignment()
        except Exception:  # silent: no assignment while the consumer (re)starts: unknown, as documented
            return None

    def node_partitions(self) -> set[int] | None:
        """The partitions whose nodes' alerts this worker speaks for (streams/telemetry_feed.py)."""
        from .telemetry_feed import owned_partitions

        return owned_partitions(self.app, self.topic.get_topic_name())

    def partition_count(self) -> int | None:
        return self.app.consumer.topic_partitions(self.topic.get_topic_name())

    def lag(self) -> Iterator[tuple[str, int, int]]:
        """(topic, partition, lag) per assigned events partition: highwater - last read - 1."""
        consumer = self.app.consumer
        read = consumer._read_offset  # Faust keeps no public read position
        committed = getattr(consumer, "_committed_offset", {})
        topic = self.topic.get_topic_name()
        for tp in sorted(consumer.assignment()):
            if tp.topic != topic:
                continue
            high = consumer.highwater(tp)
            if high is None:
                continue
            last = read.get(tp)
            position = last + 1 if last is not None else committed.get(tp)
            if position is None:
                position = 0
            yield tp.topic, tp.partition, max(0, high - position)

    # -- Faust's hooks -----------------------------------------------------------------------

    async def _rebalance_complete(self, sender, **kwargs) -> None:
        self.rebalanced = True

    async def _on_assigned(self, sender, assigned, **kwargs) -> None:
        name = self.topic.get_topic_name()
        self.assigned = True  # the assignment is known from here on (owned)
        self._assignment_changed()
        await self._recover({tp.partition for tp in assigned if tp.topic == name})

    async def _on_revoked(self, sender, revoked, **kwargs) -> None:
        name = self.topic.get_topic_name()
        self._forget({tp.partition for tp in revoked if tp.topic == name})
        self._assignment_changed()
