"""A producer's stall for the comm rule's tests (models/jobhealth/test_comm_stalled_straggler.py,
test_comm_p2p_stalled.py): one job's collectives fed to a ``CommSlowdownDetector`` round by round, the events of a
stalled producer held and then delivered in order as one burst."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from stepwatch.models.jobhealth.comm import CommSlowdownDetector
from stepwatch.models.wire.events import CollectiveEvent


def feed_stalled(rounds: int, events: Callable[[int], Iterable[CollectiveEvent]],
                 stalled: Callable[[CollectiveEvent], bool], resume: int) -> list:
    """Firing alerts of a fresh detector fed ``rounds`` rounds: ``events(seq)`` gives round ``seq``'s events in
    order; those ``stalled`` says were held come in order, as one burst, before round ``resume``'s."""
    d = CommSlowdownDetector(job="j")
    held: list[CollectiveEvent] = []
    out = []
    for seq in range(rounds):
        if seq == resume:  # the stall ends: its queue drains first (a producer keeps its order)
            for e in held:
                out += d.update(e)
            held.clear()
        for e in events(seq):
            if stalled(e):
                held.append(e)
            else:
                out += d.update(e)
    return [a for a in out if a.status == "firing"]
