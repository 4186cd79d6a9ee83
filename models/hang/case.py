"""The cases of a hang diagnosis: the hang alert's ``evidence.case`` (models/hang/diagnosis.py decides which).
Its own module: the hang's evidence records (models/hang/evidence.py) and the typed view of every alert's evidence
(models/evidence.py) both name it, and neither imports the other's module for it."""

from __future__ import annotations

from enum import StrEnum


class HangCase(StrEnum):
    """What the hang rule found about who is where (models/hang/diagnosis.py ``HangDiagnosis``)."""

    CULPRIT_BEFORE_COLLECTIVE = "culprit_before_collective"
    SILENT_RANKS = "silent_ranks"
    PARTIAL_HANG = "partial_hang"
    UNDETERMINED = "undetermined"
