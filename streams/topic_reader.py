"""Reading a small shared topic without a consumer group, forever (the config and workers topics).

Every worker must see every record of these topics (runtime settings for every scope, every
worker's advertisement), so the reader takes all partitions itself instead of joining a group.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from stepwatch.config import Settings

log = logging.getLogger("stepwatch.worker")


async def read_topic_forever(settings: Settings, topic: str, handle: Callable, *, what: str,
                             start_ms: Callable[[], int] | None = None) -> None:
    """Call ``handle(record)`` for every record of ``topic``, from its beginning or from ``start_ms()``
    (a timestamp in milliseconds, asked at each (re)start: partitions with nothing that recent start at
    their end). A failure is logged as ``what`` and the reader starts again 2 s later; cancel to stop."""
    from aiokafka import AIOKafkaConsumer

    from stepwatch.security import client_config

    kafka = settings.kafka
    while True:
        consumer = AIOKafkaConsumer(topic, bootstrap_servers=kafka.bootstrap.split(","), group_id=None,
                                    enable_auto_commit=False, auto_offset_reset="earliest",
                                    **client_config(settings))
        try:
            await consumer.start()
            if start_ms is not None:
                while not consumer.assignment():
                    await asyncio.sleep(0.1)
                tps = sorted(consumer.assignment())
                since = start_ms()
                found = await consumer.offsets_for_times({tp: since for tp in tps})
                for tp in tps:
                    if found.get(tp) is not None:
                        consumer.seek(tp, found[tp].offset)
                    else:
                        await consumer.seek_to_end(tp)
            while True:
                batches = await consumer.getmany(timeout_ms=1000)
                for records in batches.values():
                    for record in records:
                        handle(record)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("%s failed; retrying", what)
            await asyncio.sleep(2.0)
        finally:
            await consumer.stop()
