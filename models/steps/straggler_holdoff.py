"""No flapping: a rank whose straggler alert resolved fires again within ``holdoff_steps`` only when clearly
worse (its excess ratio half as large again as the resolved episode's, or past ``critical_ratio``); each re-fire
attempt inside the hold-off is a flap, counted once per episode."""

from __future__ import annotations

from collections.abc import Callable


class HoldOff:
    """Resolved episodes of the rule's ranks, and the ranks held off from re-firing."""

    def __init__(self) -> None:
        self._resolved: dict[int, tuple[int, float]] = {}  # rank -> (resolved step, episode ratio)
        self.suppressed: set[int] = set()
        #: Re-fire attempts within the hold-off: ``{"suppressed": n, "refired": n}``.
        self.flaps = {"suppressed": 0, "refired": 0}

    def resolved(self, rank: int, step: int, ratio: float) -> None:
        """``rank``'s alert resolved at ``step`` after an episode at ``ratio``."""
        self._resolved[rank] = (step, ratio)

    def check(self, rank: int, step: int, *, holdoff_steps: int, critical_ratio: float,
              recent_ratio: Callable[[], float]) -> tuple[bool, str | None]:
        """(May ``rank`` fire at ``step``?, the flap it makes: "refired", "suppressed" or None).
        ``recent_ratio``: the rank's ratio now (read only inside the hold-off)."""
        resolved = self._resolved.get(rank)
        if resolved is None or step - resolved[0] > holdoff_steps:
            return True, None
        ratio = recent_ratio()
        worse = ratio >= critical_ratio or ratio - 1.0 >= 1.5 * (resolved[1] - 1.0)
        if rank in self.suppressed:
            return worse, None
        outcome = "refired" if worse else "suppressed"
        self.flaps[outcome] += 1
        if not worse:
            self.suppressed.add(rank)
        return worse, outcome

    def release(self, ranks: list[int]) -> None:
        """Their held-off episodes are over (by the hysteresis that resolves alerts)."""
        for rank in ranks:
            self.suppressed.discard(rank)
