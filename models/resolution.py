"""Why an alert resolved: ``evidence.resolution`` on every resolved version (docs/alerts.md).

An SRE reads "resolved" as "the problem went away"; an alert that ends for another reason (its
threshold was raised at run time, its job ended, its state was forgotten) says so, in the
evidence and in the summary.
"""

from __future__ import annotations

from dataclasses import replace
from enum import Enum

from .alert_types import AlertStatus
from .alerts import Alert


class Resolution(str, Enum):
    """Closed vocabulary of ``evidence.resolution``."""

    RECOVERED = "recovered"  # the condition cleared on its own (back in line, the job stepped again)
    THRESHOLD_CHANGED = "threshold_changed"  # the rule's settings changed; the condition may still hold
    JOB_ENDED = "job_ended"  # the job sent ``phase: end``
    JOB_RESTARTED = "job_restarted"  # most ranks run new processes (a new incarnation of the job)
    FORGOTTEN = "forgotten"  # the job's state was evicted (idle too long, too many jobs)


def with_resolution(alert: Alert, resolution: Resolution, detail: str | None = None) -> Alert:
    """``alert`` (resolved) with ``evidence.resolution`` set, unless its rule set one already."""
    if alert.status != AlertStatus.RESOLVED or "resolution" in alert.evidence:
        return alert
    evidence = {**alert.evidence, "resolution": resolution.value}
    if detail:
        evidence["resolution_detail"] = detail
    return replace(alert, evidence=evidence)
