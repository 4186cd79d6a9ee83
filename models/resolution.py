"""Why an alert resolved: ``evidence.resolution`` on every resolved version (docs/alerts.md).

An SRE reads "resolved" as "the problem went away"; an alert that ends for another reason (its
threshold was raised at run time, its job ended, its state was forgotten) says so, in the
evidence and in the summary.
"""

from __future__ import annotations

from dataclasses import replace
from enum import StrEnum

from .alert_types import AlertStatus
from .alerts import Alert


class Resolution(StrEnum):
    """Closed vocabulary of ``evidence.resolution``: writers put the member in the evidence (a ``StrEnum``, so the
    JSON is its value); an alert that leaves the pipeline with another value fails
    tests/models/test_alert_invariants.py."""

    RECOVERED = "recovered"  # the condition cleared on its own (back in line, the job stepped again)
    THRESHOLD_CHANGED = "threshold_changed"  # the rule's settings changed; the condition may still hold
    JOB_ENDED = "job_ended"  # the job sent ``phase: end``
    JOB_RESTARTED = "job_restarted"  # most ranks run new processes (a new incarnation of the job)
    FORGOTTEN = "forgotten"  # the job's state was evicted (idle too long, too many jobs)
    GROUPED = "grouped"  # a paged alert became part of an incident (models/telemetry/incidents.py), which goes on
    CLEAN = "clean"  # an incident's members are all clean again (every port, every rank of the node)
    EXPLAINED = "explained"  # a comm slowdown was a straggler's waits, not the network (models/jobhealth/comm.py)

    @classmethod
    def of(cls, value: object, default: "Resolution") -> "Resolution":
        """The member ``value`` names; ``default`` for none or one this version does not know (a record read
        back from a newer worker), so reading it never raises."""
        try:
            return cls(value) if value is not None else default
        except ValueError:
            return default


def with_resolution(alert: Alert, resolution: Resolution, detail: str | None = None) -> Alert:
    """``alert`` (resolved) with ``evidence.resolution`` set, unless its rule set one already."""
    if alert.status != AlertStatus.RESOLVED or "resolution" in alert.evidence:
        return alert
    evidence = {**alert.evidence, "resolution": resolution}
    if detail:
        evidence["resolution_detail"] = detail
    return replace(alert, evidence=evidence)
