"""A verdict on one alert: what an SRE (or an unambiguous later fact) says about whether it was right.

Feedback records travel on the compacted ``feedback`` topic, keyed by the alert id (the latest verdict
on an alert is the one that counts), and as JSON Lines in ``stepwatch feedback --export``, which
``stepwatch backtest --labels`` reads. One shape for both::

    {"alert_id": "3f0c...", "verdict": "confirmed", "by": "alice", "at": 1764900000.0,
     "note": "bad HBM, RMA'd", "automatic": false, "type": "straggler", "job": "llm-70b"}

``type`` and ``job`` are optional context (an export can be read without the alerts topic).

>>> record = Feedback(alert_id="a1", verdict=Verdict.FALSE, by="bob", at=10.0)
>>> Feedback.from_json(record.to_json()) == record
True
>>> Verdict.TRANSIENT.counts_as_false
False
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import orjson

#: Longest note kept (characters); a longer one is cut, not refused.
MAX_NOTE = 2_000
#: Longest alert id, principal or context field accepted (characters).
MAX_FIELD = 200


class Verdict(StrEnum):
    """What was said about an alert. ``transient`` is only ever automatic: an alert that resolved by
    itself within minutes and never recurred; it is shown apart and never counts as false."""

    CONFIRMED = "confirmed"
    FALSE = "false"
    DUPLICATE = "duplicate"
    TRANSIENT = "transient"

    @property
    def counts_as_false(self) -> bool:
        return self is Verdict.FALSE


#: What a person may say (``transient`` is the machine's word only).
HUMAN_VERDICTS = (Verdict.CONFIRMED, Verdict.FALSE, Verdict.DUPLICATE)


@dataclass(frozen=True, slots=True)
class Feedback:
    """One verdict on one alert."""

    alert_id: str
    verdict: Verdict
    by: str
    at: float
    note: str = ""
    #: True when stepwatch derived it from later evidence (a hardware fault on the named node, a
    #: short-lived alert that never recurred), False when a person said it.
    automatic: bool = False
    type: str | None = None
    job: str | None = None

    def to_json(self) -> bytes:
        record: dict[str, Any] = {"alert_id": self.alert_id, "verdict": str(self.verdict), "by": self.by,
                                  "at": self.at, "note": self.note, "automatic": self.automatic}
        if self.type is not None:
            record["type"] = self.type
        if self.job is not None:
            record["job"] = self.job
        return orjson.dumps(record)

    @classmethod
    def from_json(cls, raw: bytes | str) -> "Feedback":
        """Parse one record; ``ValueError`` with a one-line reason when it is not a feedback record."""
        try:
            data = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            raise ValueError(f"not JSON: {exc}") from None
        if not isinstance(data, dict):
            raise ValueError("a feedback record is a JSON object")
        alert_id = _text(data, "alert_id", required=True)
        try:
            verdict = Verdict(data.get("verdict"))
        except ValueError:
            raise ValueError(f"verdict must be one of {', '.join(v.value for v in Verdict)}") from None
        at = data.get("at", 0.0)
        if isinstance(at, bool) or not isinstance(at, (int, float)) or at != at or abs(at) > 1e11:
            raise ValueError("at must be a number of seconds since the epoch")
        note = data.get("note") or ""
        if not isinstance(note, str):
            raise ValueError("note must be a string")
        automatic = data.get("automatic", False)
        if not isinstance(automatic, bool):
            raise ValueError("automatic must be true or false")
        return cls(alert_id=alert_id, verdict=verdict, by=_text(data, "by") or "", at=float(at),
                   note=note[:MAX_NOTE], automatic=automatic, type=_text(data, "type"), job=_text(data, "job"))


def _text(data: dict, key: str, *, required: bool = False) -> str | None:
    value = data.get(key)
    if value is None and not required:
        return None
    if not isinstance(value, str) or not value or len(value) > MAX_FIELD:
        raise ValueError(f"{key} must be a non-empty string of at most {MAX_FIELD} characters")
    return value
