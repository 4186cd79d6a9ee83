"""streams/producer_topics.py against the real broker: a producer's metadata keeps every topic it sent to.

The worker's lost resolved alert (issue 15): aiokafka's producer sent the firing to the alerts topic while
its metadata list was still "all topics", so the alerts topic was never added to the list; the first send
to a topic it did not know narrowed the list to that topic, and the next refresh dropped the alerts topic:
the resolved alert queued right behind the firing waited for a leader no refresh brought back.
"""

from __future__ import annotations

import asyncio

from stepwatch.streams.producer_topics import track_sent_topics
from stepwatch.topics import create_topics


def test_a_topic_sent_to_stays_in_the_producers_metadata_after_a_new_topic_is_sent_to(kafka_bootstrap,
                                                                                      topic_prefix):
    from aiokafka import AIOKafkaProducer

    known, new = topic_prefix + "alerts", topic_prefix + "ledger"
    create_topics(kafka_bootstrap, [known], 4)
    track_sent_topics()
    track_sent_topics()  # idempotent: one wrapper, not two

    async def run() -> tuple[set | None, set | None]:
        producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap)
        await producer.start()
        try:
            # All topics' metadata, as Faust's producer fetches it when it creates a topic (the worker's
            # first one is its assignor topic): the producer knows ``known`` without having it in its list.
            await producer.client.force_metadata_update()
            assert known in producer.client.cluster.topics()
            await producer.send_and_wait(known, b"firing", key=b"job")
            await asyncio.get_running_loop().run_in_executor(None, create_topics, kafka_bootstrap, [new], 4)
            await producer.send_and_wait(new, b"ledger entry", key=b"node")  # a topic the producer did not know
            await producer.client.force_metadata_update()  # what the sender does when a batch has no leader
            cluster = producer.client.cluster
            return cluster.partitions_for_topic(known), cluster.partitions_for_topic(new)
        finally:
            await producer.stop()

    known_partitions, new_partitions = asyncio.run(run())
    assert new_partitions == {0, 1, 2, 3}
    assert known_partitions == {0, 1, 2, 3}  # None without track_sent_topics: a batch for it would wait 20 min
