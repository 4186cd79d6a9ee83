"""Every topic an aiokafka producer sends to stays in its metadata topic list.

aiokafka's client starts out fetching metadata for all topics (an empty topic list) and adds a
topic to its list only when it sends to one whose partitions it does not know yet. The first such
topic turns "all topics" into that one topic: a topic the producer knew only from the all-topics
fetch drops out of the next metadata refresh, and a batch queued for it waits for a leader that no
refresh brings back: until the batch expires (Faust's producer request timeout, 20 minutes), with
nothing logged. The worker hit this under load (issue 15): the straggler firing went out while the
list was still "all topics", the on-call feed's first write to a new topic narrowed it, and the
resolved alert queued right behind the firing never left the worker. kafka-python and the Java
client add every topic sent to; ``track_sent_topics`` makes aiokafka's producers do the same.
"""

from __future__ import annotations

import functools


def track_sent_topics() -> None:
    """Make every ``AIOKafkaProducer`` in this process add each topic it sends to to its metadata list.

    Idempotent; consumers are not touched (they set their topic list from their subscription).
    """
    from aiokafka import AIOKafkaProducer

    original = AIOKafkaProducer.send
    if getattr(original, "stepwatch_tracks_topics", False):
        return

    @functools.wraps(original)
    async def send(self, topic, *args, **kwargs):
        # Known topic: a done future, no request. New one: a background metadata refresh that
        # keeps it (and every topic added before) in every later refresh.
        self.client.add_topic(topic)
        return await original(self, topic, *args, **kwargs)

    send.stepwatch_tracks_topics = True  # type: ignore[attr-defined]
    AIOKafkaProducer.send = send
