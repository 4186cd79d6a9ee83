"""Who reported a job's run of step events, compared once per run: :class:`RunLayout`.

A job's ranks report every step from the same places, so a column run of step events (models/engine.py
``_process_steps``) usually has exactly the ranks, nodes and GPUs of the job's previous run. Several modules
work something out from those columns (the hang rule's and the status recorder's slots, the clock offsets'
runs of one node, the placement view's pairs, the telemetry correlator's placement and rings, the restart
tracker's latest run) and keep it for the next run. Instead of each of them comparing 1,024-element lists
to know that the run repeats, the comparison is made once (:func:`layout_of`): a run that repeats the
previous one gets the previous ``RunLayout`` object, so each module knows by identity (``is``) that what it
kept for that layout still holds.
"""

from __future__ import annotations


class RunLayout:
    """The ranks, nodes and GPUs of one run of a job's step events, in order (lists, never changed after).

    Two runs share one object only when these columns are equal (:func:`layout_of`): a module may keep
    what it derived from a layout, keyed by the object, for as long as its own state allows.
    """

    __slots__ = ("ranks", "nodes", "gpus")

    def __init__(self, ranks: list[int], nodes: list[str | None], gpus: list[int | None]) -> None:
        self.ranks = ranks
        self.nodes = nodes
        self.gpus = gpus


def layout_of(previous: RunLayout | None, ranks: list[int], nodes: list, gpus: list) -> RunLayout:
    """``previous`` when the run has its ranks, nodes and GPUs (the usual next step), else a new layout."""
    if previous is not None and previous.ranks == ranks and previous.nodes == nodes and previous.gpus == gpus:
        return previous
    return RunLayout(ranks, nodes, gpus)


def same_ranks(ranks, last) -> bool:
    """``np.array_equal`` of a closed step's ranks and a rule's last ones (1-D int arrays, ``last`` a ``kept_ranks``):
    the step rules ask it of every step. By identity for the steps of one assembler with the same ranks (they share
    one read-only array), else by value without numpy's wrapper (several times the comparison of a few dozen ranks)."""
    return ranks is last or (len(ranks) == len(last) and bool((ranks == last).all()))


def kept_ranks(ranks: np.ndarray) -> np.ndarray:
    """``ranks`` to compare later steps' with (``same_ranks``): the array itself when read-only (no one can change
    it under the keeper), else a copy."""
    return ranks if not ranks.flags.writeable else ranks.copy()


def all_named(nodes) -> bool:
    """``None not in nodes`` for a column of node names (str, or None where unknown), by one C-level join: a str
    compared with None takes the slow road of ``==``, several times the join's cost over thousands of ranks. Anything
    else than a str also answers False (the callers' careful path takes it)."""
    try:
        "".join(nodes)
    except TypeError:
        return False
    return True
