"""Dense per-rank slots for the straggler rule's arrays, and the node each rank last ran on.

The rule keeps its per-rank state in numpy arrays indexed by a slot per rank (models/steps/straggler_history.py,
straggler_episodes.py, straggler_data_wait.py), grown on demand. Most steps have the same ranks as the one
before, in order: their slots are reused and, when consecutive, written as one slice instead of a gather.
"""

from __future__ import annotations

import numpy as np

from .layout import all_named, kept_ranks, same_ranks


class RankSlots:
    """Rank -> slot, with the last step's lookup cached; ``nodes[slot]``: the rank's node (None: unknown)."""

    def __init__(self) -> None:
        self._slot: dict[int, int] = {}
        self._last_lookup: tuple[np.ndarray, np.ndarray] = (np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64))
        self._run_of: tuple = (None, None)  # (slots, their first slot if consecutive) of the last step
        self.nodes: list[str | None] = []

    def __len__(self) -> int:
        return len(self._slot)

    def of(self, rank: int) -> int:
        """The slot of a rank seen before."""
        return self._slot[rank]

    def lookup(self, ranks: np.ndarray) -> tuple[np.ndarray, int]:
        """The slots of ``ranks`` and how many of them are new (the caller grows its arrays by that many)."""
        last_ranks, last_slots = self._last_lookup
        if same_ranks(ranks, last_ranks):
            return last_slots, 0
        slot = self._slot
        new = [int(r) for r in ranks if int(r) not in slot]
        start = len(slot)
        for i, r in enumerate(new):
            slot[r] = start + i
        self.nodes.extend([None] * len(new))
        slots = np.fromiter((slot[int(r)] for r in ranks), dtype=np.int64, count=len(ranks))
        self._last_lookup = (kept_ranks(ranks), slots)
        return slots, len(new)

    def first_of_run(self, slots: np.ndarray) -> int | None:
        """The first slot when ``slots`` are consecutive (the usual step: the same ranks as before, in order)."""
        if slots is self._run_of[0]:
            return self._run_of[1]
        n = len(slots)
        first = int(slots[0]) if n and int(slots[-1]) - int(slots[0]) == n - 1 and (
            n == 1 or bool((np.diff(slots) == 1).all())) else None
        self._run_of = (slots, first)
        return first

    def record_nodes(self, slots: np.ndarray, first: int | None, nodes: tuple[str | None, ...]) -> None:
        """The step's node of each rank (an unknown node keeps the one known)."""
        if first is not None and all_named(nodes):  # the usual step: one slice write
            self.nodes[first:first + len(slots)] = nodes
        else:
            for slot, node in zip(slots, nodes):
                if node is not None:
                    self.nodes[slot] = node
