"""What the worker does with bad input: :class:`Rejected` (a part that failed validation, with why)
and the dead-letter message written for it (docs/events.md).

A dead letter always fits the topic: given ``max_bytes`` (the producer's request size less a record's
overhead), one that would be larger keeps only a prefix of the original bytes and says so
(``"truncated": true``, the whole message's ``value_size`` and ``value_sha256``, the bytes kept in
``value_kept``); a dead letter the producer refused would be lost while counted as sent.
"""

from __future__ import annotations

import base64
import hashlib
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


#: Bytes a Kafka record adds to its key and value at most (batch header, record header, varints): what
#: a dead letter's budget leaves out of the producer's max request size.
RECORD_OVERHEAD = 512
#: In a truncated dead letter, text fields (reasons, the key) are cut to this many characters.
MAX_TEXT = 1_000


def deadletter_budget(max_request_size: int, key: bytes | None) -> int:
    """The largest dead-letter value a producer with ``max_request_size`` can send under ``key``."""
    return max(1_024, max_request_size - RECORD_OVERHEAD - len(key or b""))


def deadletter_record(rejected: Rejected, *, topic: str, partition: int | None, offset: int | None,
                      key: bytes | None, raw: bytes | None, max_bytes: int | None = None) -> bytes:
    """The dead-letter message (docs/events.md): the reason, where it came from, and the original bytes
    (truncated to fit ``max_bytes``: see the module's docstring).

    Written by the shard stage (the worker writes ``deadletter_message``, one per message)."""
    return _fit(_record(rejected, topic=topic, partition=partition, offset=offset, key=key, raw=raw), raw,
                max_bytes)


def _dumps(record: dict) -> bytes:
    return orjson.dumps(record, option=orjson.OPT_PASSTHROUGH_DATACLASS, default=str)


def _fit(record: dict, raw: bytes | None, max_bytes: int | None) -> bytes:
    """``record`` as JSON, its original bytes cut to a prefix when the whole would exceed ``max_bytes``."""
    encoded_size = 0 if raw is None else (len(raw) + 2) // 3 * 4
    if max_bytes is None or encoded_size < max_bytes // 2:  # the original is not what could overflow
        out = _dumps(record)
        if max_bytes is None or len(out) <= max_bytes:
            return out
    # Too large (or about to be): keep what fits, with what identifies the whole message.
    record["value_b64"] = None
    record["truncated"] = True
    record["value_size"] = None if raw is None else len(raw)
    record["value_sha256"] = None if raw is None else hashlib.sha256(raw).hexdigest()
    record["value_kept"] = 0
    base = len(_dumps(record))
    for text, listed in ((MAX_TEXT, 100), (100, 10), (40, 0)):  # cut harder until the rest is small
        if base <= max_bytes // 2:
            break
        # The rest is large too (a big bad event, long reasons or key): the counts and sizes stay.
        record["event"] = None
        record["key"] = record["key"][:text] if record["key"] else record["key"]
        record["reason"] = str(record["reason"])[:text]
        if "rejected" in record:
            record["rejected"] = [{"index": r["index"], "reason": str(r["reason"])[:text]}
                                  for r in record["rejected"][:listed]]
        base = len(_dumps(record))
    keep = 0 if raw is None else max(0, min(len(raw), (max_bytes - base - 64) // 4 * 3))
    record["value_kept"] = keep
    record["value_b64"] = base64.b64encode(raw[:keep]).decode() if raw is not None else None
    return _dumps(record)


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
                       offset: int | None, key: bytes | None, raw: bytes | None, max_bytes: int | None = None) -> bytes:
    """One dead letter for every rejected part of one message (docs/events.md): the original bytes once,
    the first rejected part's reason and event (as ``deadletter_record``) and every part's reason by index;
    at most ``max_bytes`` long (the original bytes truncated: see the module's docstring).

    A message with 10,000 bad events makes one dead letter of about its own size, not 10,000 copies of it.
    """
    first = rejected[0]
    record = _record(first, topic=topic, partition=partition, offset=offset, key=key, raw=raw)
    if len(rejected) > 1:
        record["reason"] = f"{first.reason} (and {len(rejected) - 1} more)"
    record["cause"] = cause
    record["rejected"] = [{"index": r.index, "reason": r.reason} for r in rejected[:MAX_LISTED]]
    record["rejected_count"] = len(rejected)
    return _fit(record, raw, max_bytes)
