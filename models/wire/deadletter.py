"""What the worker does with bad input: :class:`Rejected` (a part that failed validation, with why)
and the dead-letter message written for it (docs/events.md)."""

from __future__ import annotations

import base64
import time
from dataclasses import dataclass
from typing import Any

import orjson


@dataclass(frozen=True, slots=True)
class Rejected:
    """An event (or whole message) that failed validation, with why."""

    reason: str
    payload: Any
    #: Its place in the message's batch envelope (None: the whole message, or not known).
    index: int | None = None


def deadletter_record(rejected: Rejected, *, topic: str, partition: int | None, offset: int | None,
                      key: bytes | None, raw: bytes | None) -> bytes:
    """The dead-letter message (docs/events.md): the reason, where it came from, and the original bytes.

    Written by the shard stage (the worker writes ``deadletter_message``, one per message)."""
    return orjson.dumps(_record(rejected, topic=topic, partition=partition, offset=offset, key=key, raw=raw),
                        option=orjson.OPT_PASSTHROUGH_DATACLASS, default=str)


def _record(rejected: Rejected, *, topic: str, partition: int | None, offset: int | None, key: bytes | None,
            raw: bytes | None) -> dict:
    original = rejected.payload if rejected.payload is not None and not isinstance(rejected.payload, bytes) else None
    record = {
        "v": 1,
        "kind": "deadletter",
        "reason": rejected.reason,
        "topic": topic,
        "partition": partition,
        "offset": offset,
        "key": key.decode("utf-8", "replace") if key else None,
        "ts": time.time(),
        # The whole message as sent, base64 so that invalid UTF-8 survives too.
        "value_b64": base64.b64encode(raw).decode() if raw is not None else None,
        # For a bad event inside a good batch: that event alone.
        "event": original,
    }
    return record



#: Rejected parts of one message listed by index in its dead letter at most (the rest are counted).
MAX_LISTED = 1_000


def deadletter_message(rejected: list[Rejected], *, cause: str, topic: str, partition: int | None,
                       offset: int | None, key: bytes | None, raw: bytes | None) -> bytes:
    """One dead letter for every rejected part of one message (docs/events.md): the original bytes once,
    the first rejected part's reason and event (as ``deadletter_record``) and every part's reason by index.

    A message with 10,000 bad events makes one dead letter of about its own size, not 10,000 copies of it.
    """
    first = rejected[0]
    record = _record(first, topic=topic, partition=partition, offset=offset, key=key, raw=raw)
    if len(rejected) > 1:
        record["reason"] = f"{first.reason} (and {len(rejected) - 1} more)"
    record["cause"] = cause
    record["rejected"] = [{"index": r.index, "reason": r.reason} for r in rejected[:MAX_LISTED]]
    record["rejected_count"] = len(rejected)
    return orjson.dumps(record, option=orjson.OPT_PASSTHROUGH_DATACLASS, default=str)
