"""Each rank's recent verdicts in the straggler rule: rings of its last steps, its clean run, its episode's start.

``slow``: the last ``window`` slow verdicts (the k-of-n test); ``ratio``, ``z``, ``value``, ``peer``: the last
``evidence_window`` steps' numbers (an alert's evidence); ``clean_run``: consecutive clean steps (resolves an
alert); ``episode_start``: the first slow step of the current run (-1: none). Rows are slots
(models/steps/straggler_slots.py); column ``evaluated % width`` is the step being written.
"""

from __future__ import annotations

import numpy as np


def resized(ring: np.ndarray, old: int, new: int, fill, written: int) -> np.ndarray:
    """``ring`` (columns written at ``written % old``) at width ``new``: the newest columns that fit, placed where
    the new width expects them, so the next write lands after them."""
    out = np.full((ring.shape[0], new), fill, dtype=ring.dtype)
    keep = min(written, old, new)
    for k in range(1, keep + 1):
        out[:, (written - k) % new] = ring[:, (written - k) % old]
    return out


class RankHistory:
    """The per-rank rings of the straggler rule (one row per slot)."""

    def __init__(self, *, window: int, evidence_window: int) -> None:
        self.slow = np.zeros((0, window), dtype=bool)
        self.ratio = np.full((0, evidence_window), np.nan)
        self.z = np.full((0, evidence_window), np.nan)
        self.value = np.full((0, evidence_window), np.nan)
        self.peer = np.full((0, evidence_window), np.nan)
        self.clean_run = np.zeros(0, dtype=np.int64)
        self.episode_start = np.full(0, -1, dtype=np.int64)
        self.evaluated = 0  # steps judged

    def grow(self, n: int) -> None:
        """Rows for ``n`` new ranks."""
        self.slow = np.vstack([self.slow, np.zeros((n, self.slow.shape[1]), dtype=bool)])
        for name in ("ratio", "z", "value", "peer"):
            ring = getattr(self, name)
            setattr(self, name, np.vstack([ring, np.full((n, ring.shape[1]), np.nan)]))
        self.clean_run = np.concatenate([self.clean_run, np.zeros(n, dtype=np.int64)])
        self.episode_start = np.concatenate([self.episode_start, np.full(n, -1, dtype=np.int64)])

    def resize(self, *, window: int, evidence_window: int) -> None:
        """New widths, keeping the most recent verdicts that fit."""
        if window != self.slow.shape[1]:
            self.slow = resized(self.slow, self.slow.shape[1], window, False, self.evaluated)
        if evidence_window != self.ratio.shape[1]:
            for name in ("ratio", "z", "value", "peer"):
                ring = getattr(self, name)
                setattr(self, name, resized(ring, ring.shape[1], evidence_window, np.nan, self.evaluated))

    def recent(self, n: int) -> np.ndarray:
        """Columns of the evidence rings of the last ``n`` judged steps (at most as many as judged), newest first."""
        return (self.evaluated - 1 - np.arange(min(n, self.evaluated))) % self.ratio.shape[1]

    def record(self, at, slow: np.ndarray, ratio: np.ndarray, z: np.ndarray, value: np.ndarray, peer) -> None:
        """One judged step's verdicts of the ranks at ``at`` (slots, or the slice they make)."""
        col = self.evaluated % self.slow.shape[1]
        ecol = self.evaluated % self.ratio.shape[1]
        self.evaluated += 1
        self.slow[at, col] = slow
        self.ratio[at, ecol] = ratio
        self.z[at, ecol] = z
        self.value[at, ecol] = value
        self.peer[at, ecol] = peer
