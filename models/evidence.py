"""Typed views of the evidence of straggler and hang alerts, for the modules that act on it.

An alert's ``evidence`` is a dict because it is the wire form (docs/alerts.md). The rules write it; other
modules (models/oncall/actions.py: failure class, implicated nodes, onset) read a few fields of it. They read them
through these records instead of by key, so a field's name and type are stated once, next to the vocabulary
of its values, and the contract test (tests/models/test_rule_contract.py) checks that every straggler and hang
alert the rules emit reads back as its record.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from .alert_types import AlertType
from .alerts import Alert
from .hang.case import HangCase
from .hang.evidence import RankPosition


class StragglerSignal(StrEnum):
    """Which per-rank time a straggler alert compared with the rank's peers."""

    COMPUTE_TIME = "compute_time"
    STEP_TIME = "step_time"
    ARRIVAL = "arrival"  # when the rank reached the collective (models/steps/arrival.py, NCCL Inspector windows)
    DATA_TIME = "data_time"  # the input pipeline's wait


class Horizon(StrEnum):
    """Which straggler rule fired: models/steps/straggler.py (short) or models/steps/long_straggler.py (long)."""

    SHORT = "short"
    LONG = "long"


def _number(ev: dict, name: str, strict: bool) -> float | None:
    value = ev.get(name)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return value
    if strict and value is not None:
        raise ValueError(f"evidence.{name}: not a number: {value!r}")
    return None


def _member(enum: type[StrEnum], ev: dict, name: str, strict: bool):
    value = ev.get(name)
    try:
        return enum(value)
    except ValueError:
        if strict:
            raise ValueError(f"evidence.{name}: {value!r} is not one of {[m.value for m in enum]}") from None
        return None


@dataclass(frozen=True, slots=True)
class StragglerEvidence:
    """The fields of a straggler alert's evidence that other modules act on."""

    signal: StragglerSignal | None
    horizon: Horizon | None
    first_step: int | None  # first slow step of the episode
    detected_step: int | None
    peer_median: float | None  # the peers' median of ``signal`` (seconds)
    cause: str | None  # the rule's own reading ("input pipeline"), before telemetry names suspected causes
    group: str | None = None  # the peer group compared within (None: the whole job)
    resolved_step: int | None = None  # the step a resolved episode ended at
    node_incident: bool = False  # ``incident_scope`` is set: one alert for several ranks of a node
    #: (models/telemetry/incidents.py ``NodeIncidents``), not one rank's
    ratio: float | None = None  # the rank's median over its peers' (rank_median / peer_median)
    rank_median: float | None = None  # the rank's median of ``signal`` (seconds)
    #: What the rank costs its job (models/steps/cost.py ``Cost.to_evidence``): the job's slowdown, the
    #: job's step time the cost was measured on, and the GPUs that wait.
    job_slowdown: float | None = None
    cost_step_time: float | None = None
    cost_gpus: int | None = None

    @classmethod
    def of(cls, alert: Alert, *, strict: bool = False) -> "StragglerEvidence":
        """The record of ``alert``'s evidence; a field missing or of another type reads as None (``strict``:
        a ``ValueError``, for the contract test)."""
        if alert.type != AlertType.STRAGGLER:
            raise ValueError(f"not a straggler alert: {alert.type}")
        ev = alert.evidence
        first, detected = _number(ev, "first_step", strict), _number(ev, "detected_step", strict)
        resolved = _number(ev, "resolved_step", strict)
        cause, group = ev.get("cause"), ev.get("group")
        if strict and group is not None and not isinstance(group, str):
            raise ValueError(f"evidence.group: not a string: {group!r}")
        return cls(signal=_member(StragglerSignal, ev, "signal", strict), horizon=_member(Horizon, ev, "horizon", strict),
                   first_step=None if first is None else int(first),
                   detected_step=None if detected is None else int(detected),
                   peer_median=_number(ev, "peer_median", strict), cause=cause if isinstance(cause, str) else None,
                   group=group if isinstance(group, str) else None,
                   resolved_step=None if resolved is None else int(resolved), node_incident="incident_scope" in ev,
                   ratio=_number(ev, "ratio", strict), rank_median=_number(ev, "rank_median", strict),
                   job_slowdown=_number(ev, "job_slowdown", strict),
                   cost_step_time=_number(ev, "cost_step_time", strict),
                   cost_gpus=None if (gpus := _number(ev, "cost_gpus", strict)) is None else int(gpus))

    @property
    def short(self) -> bool:
        """Written by the short rule (an alert with no ``horizon`` is the short rule's, as before it said so)."""
        return self.horizon is not Horizon.LONG

    @property
    def input_pipeline(self) -> bool:
        """The rank waits for its data, not for its compute."""
        return self.signal is StragglerSignal.DATA_TIME or self.cause == "input pipeline"


@dataclass(frozen=True, slots=True)
class HangEvidence:
    """The fields of a hang alert's evidence that other modules act on."""

    case: HangCase | None
    stalled_since: float | None  # event time the job stopped progressing
    culprit_nodes: tuple[str, ...]  # nodes of the ranks the rule names as the cause, most likely first
    #: Where each silent rank was last seen (``evidence.silent``; models/hang/evidence.py ``RankPosition``).
    silent: tuple[RankPosition, ...] = ()

    @classmethod
    def of(cls, alert: Alert, *, strict: bool = False) -> "HangEvidence":
        if alert.type != AlertType.HANG:
            raise ValueError(f"not a hang alert: {alert.type}")
        ev = alert.evidence
        culprits: Any = ev.get("culprits") or ()
        if strict and not isinstance(culprits, (list, tuple)):
            raise ValueError(f"evidence.culprits: not a list: {culprits!r}")
        nodes = tuple(str(c["node"]) for c in culprits if isinstance(c, dict) and c.get("node"))
        silent = ev.get("silent") or ()
        positions = tuple(
            RankPosition(rank=s["rank"], node=s.get("node") if isinstance(s.get("node"), str) else None,
                         last_seen=_number(s, "last_seen", False))
            for s in (silent if isinstance(silent, (list, tuple)) else ())
            if isinstance(s, dict) and isinstance(s.get("rank"), int) and not isinstance(s.get("rank"), bool))
        return cls(case=_member(HangCase, ev, "case", strict), stalled_since=_number(ev, "stalled_since", strict),
                   culprit_nodes=nodes, silent=positions)
