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


def deadletter_record(rejected: Rejected, *, topic: str, partition: int | None, offset: int | None,
                      key: bytes | None, raw: bytes | None) -> bytes:
    """The dead-letter message (docs/events.md): the reason, where it came from, and the original bytes.

    Written by the worker and by the shard stage alike."""
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
    return orjson.dumps(record, option=orjson.OPT_PASSTHROUGH_DATACLASS, default=str)

