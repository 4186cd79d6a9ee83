"""The rule contracts: what a rule consumes, how it is fed, lists and closes its alerts, is reconfigured.

``JobRule`` below is the per-job contract; ``NodeRule`` the node-level one (node telemetry: one instance for
the worker, driven by the telemetry hub); ``OutletRule`` the one on the alerts leaving the engine (one instance
for the worker, driven by ``OnCall``). All three share one lifecycle (``Rule``: tick, open alerts, close,
reconfigure, capped) and declare themselves with a ``RuleSpec``.

Every per-job rule the engine runs (models/registry.py lists them) is a ``JobRule``: one instance per job,
made by its registry entry when the job first appears, fed only the signals its ``RuleSpec.consumes``
names, in event order, and asked for its open alerts and to close them through the same five methods.
The engine (models/engine.py) knows no rule by name beyond the hang rule's rank bookkeeping (its timer
asks each rule's ``next_due``): a new
rule is one module with a ``JobRule`` subclass and one line in the registry, and the shared contract
test (tests/models/test_rule_contract.py) runs it like every other (warm-up, reconfigure, bounded state, replay
determinism, open alerts closed with a ``Resolution``).

Like River's ``DriftDetector``: a small base class whose ``update``-style methods return what happened,
with the state held in the instance and reset only by the rule itself.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import TYPE_CHECKING, Any, ClassVar

from .alert_types import AlertType
from .resolution import Resolution, with_resolution

if TYPE_CHECKING:
    import numpy as np

    from .alerts import Alert
    from .steps.assembly import GroupStep
    from .steps.layout import RunLayout
    from .wire.events import Event


class Signal(StrEnum):
    """What a rule consumes; each signal has one method it is fed through."""

    STEPS = "steps"  # ``on_step(GroupStep)``: a step closed across its peer group (models/steps/assembly.py)
    RANK_STEPS = "rank_steps"  # ``on_rank_steps(RankSteps)``: each rank's step events, as they arrive
    HEARTBEATS = "heartbeats"  # ``on_event(HeartbeatEvent)``
    COLLECTIVES = "collectives"  # ``on_event(CollectiveEvent)``
    PHASES = "phases"  # ``on_event(PhaseEvent)``, job-wide and per rank
    STACKS = "stacks"  # ``on_event(StackEvent)``
    INSPECTOR = "inspector"  # ``on_event(NcclWindowEvent)``: NCCL Inspector windows from the node agents
    TICKS = "ticks"  # ``tick(now)``, ``now`` on the job's own clock
    TELEMETRY = "telemetry"  # node events (gpu, xid, link, topology, host): node-level rules only
    #: Alerts as input: a node rule gets the alerts of the node rules before it (``NodeRule.on_alerts``); an
    #: outlet rule, each alert leaving the engine (``OutletRule.update``, models/oncall/oncall.py).
    ALERTS = "alerts"
    #: The job rules' alerts once the telemetry hub named their suspected causes (``NodeRule.on_alerts``).
    ENRICHED = "enriched"


#: The signal of each job event kind that reaches rules through ``on_event`` (steps have their own methods).
EVENT_SIGNALS: dict[str, Signal] = {"heartbeat": Signal.HEARTBEATS, "collective": Signal.COLLECTIVES,
                                    "phase": Signal.PHASES, "stack": Signal.STACKS,
                                    "nccl_window": Signal.INSPECTOR}


@dataclass(frozen=True, slots=True)
class RankSteps:
    """One run of a job's step events by columns, in arrival order (``Signal.RANK_STEPS``)."""

    ranks: list[int]
    steps: list[int]
    ts: list[float]
    step_times: list[float]
    phases: list[str]
    nodes: list[str | None]
    world_sizes: list[int | None]
    #: Who reported the run (its ranks, nodes and GPUs; models/steps/layout.py), or None: not known.
    layout: RunLayout | None = None
    #: ``ts`` as a float64 array (the batch's, ``StepColumns.array``), or None: not at hand.
    ts_array: np.ndarray | None = None
    #: ``(min(steps), max(steps))``, or None: not worked out.
    step_bounds: tuple[int, int] | None = None


@dataclass(frozen=True, slots=True)
class RuleSpec:
    """What a rule declares about itself; the registry and the contract test read it, the engine routes by it."""

    #: Unique within the registry (``JobState.rule(name)``).
    name: str
    consumes: frozenset[Signal]
    #: Every ``Alert.type`` the rule emits.
    alert_types: tuple[AlertType, ...]
    #: Failure classes (models/oncall/actions.py ``FAILURE_CLASSES``) its alerts can be classified as: the one
    #: declaration of which classes exist. An alert type's class by its type alone (``TYPE_CLASSES``) is the one
    #: named as the type, else the first (models/registry.py ``type_classes``).
    failure_classes: tuple[str, ...]
    #: The settings dataclass ``reconfigure`` takes (None: the rule has no run-time settings).
    settings: type | None
    #: Rules whose state this one reads (fed first, made first): e.g. the straggler rule reads the
    #: imbalance rule's rank classes.
    needs: tuple[str, ...] = ()


class Rule:
    """The lifecycle every rule shares, whatever it is fed: ``JobRule``, ``NodeRule`` and ``OutletRule`` add
    only their feeding methods.

    ``spec`` declares the rule (``RuleSpec``). ``tick`` is the timer, ``open_alerts`` the rule's alerts now firing
    (one list, whatever the rule keeps inside), ``close`` resolves and forgets them saying why, ``reconfigure``
    takes new settings (an instance of ``spec.settings``) while running, keeping state and open alerts, and
    ``capped`` counts the input the rule left out at a state cap (``stepwatch_state_capped_total``).
    """

    spec: ClassVar[RuleSpec]

    def tick(self, now: float) -> list[Alert]:
        return []

    def next_due(self, now: float, *, incremental: bool = True) -> float:
        """The earliest time (``tick``'s clock) at which ``tick`` can say or change anything with no new input, asked
        right after a tick at ``now``: the engine's timer skips the job until then (``inf``: not before input or a
        setting reaches the rule; ``-inf`` or NaN: every tick). ``incremental=False``: open alerts that only a tick
        can move are due every tick (tests compare both ways). Default: ``inf``, a rule with no timer of its own."""
        return math.inf

    def open_alerts(self) -> list[Alert]:
        """The rule's alerts now firing."""
        raise NotImplementedError

    def close(self, *, at: float, resolution: Resolution, reason: str) -> list[Alert]:
        """Resolve every open alert at ``at``, saying why (``evidence.resolution``, the summary); forget them
        (the condition must be seen anew)."""
        raise NotImplementedError

    def reconfigure(self, settings: Any) -> None:
        """Take new settings (an instance of ``spec.settings``) while running; state and open alerts are kept."""

    def capped(self) -> dict[str, int]:
        """Input this rule left out at a state cap so far, by what."""
        return {}


class JobRule(Rule):
    """Base of every per-job rule: defaults for the signals a rule does not consume.

    A subclass sets ``spec`` and overrides the feeding methods of the signals it consumes, plus
    ``open_alerts`` and ``close``. Each feeding method returns the alerts that fired or resolved because of
    its input (``on_rank_steps``: with the index of the event that caused each, for event order); ``tick(now)``
    gets ``now`` on the job's own clock.
    """

    def on_step(self, step: GroupStep) -> list[Alert]:
        return []

    def on_rank_steps(self, run: RankSteps) -> list[tuple[int, Alert]]:
        return []

    def on_event(self, event: Event) -> list[Alert]:
        return []


class NodeRule(Rule):
    """Base of every node-level rule: rules on node telemetry, keyed by node rather than by job.

    One instance for the whole worker, made by the telemetry hub (models/telemetry/telemetry_hub.py) from its
    ``NODE_RULES`` entry (models/registry.py), in an order where each comes after the rules it ``needs``. What
    ``spec.consumes`` names decides what the hub feeds it:

    * ``Signal.TELEMETRY``: ``update(event)`` for each node event whose kind is in ``kinds``, in arrival order;
    * ``Signal.RANK_STEPS``: ``on_steps(job, steps, step_times)``, each job's step events as they arrive;
    * ``Signal.ALERTS``: ``on_alerts(alerts)``, the alerts of the node rules before it (from one event or one
      tick), returning them as they should leave (e.g. many nodes' link alerts grouped into one incident);
    * ``Signal.ENRICHED``: ``on_alerts(alerts)`` too, but with the job rules' alerts once the hub has named their
      suspected causes (e.g. one node's stragglers grouped into one node incident);
    * ``Signal.TICKS``: ``tick(now)``, ``now`` on the worker's timer clock.

    Each feeding method returns the alerts that fired or resolved because of its input. A new node rule is a
    ``NodeRule`` subclass and one line in ``NODE_RULES``; tests/models/test_rule_contract.py runs it through the same
    contract as the other rules.
    """

    #: The node event kinds ``update`` takes (``Signal.TELEMETRY``).
    kinds: ClassVar[frozenset[str]] = frozenset()

    def update(self, event: Event) -> list[Alert]:
        return []

    def on_steps(self, job: str, steps: list[int], step_times: list[float]) -> None:
        """Step events of ``job``, in order (absent step_time: NaN)."""

    def on_alerts(self, alerts: list[Alert]) -> list[Alert]:
        return alerts


class OutletRule(Rule):
    """Base of every rule on the alerts leaving the engine (restarts, the node ledger).

    One instance for the worker, made by the engine's outlet (``OnCall``, models/oncall/oncall.py) from its
    ``OUTLET_RULES`` entry (models/registry.py) with the outlet as its environment, in an order where each comes
    after the rules it ``needs``. Every alert the engine returns passes the outlet once; what ``spec.consumes``
    names decides what the outlet feeds the rule:

    * ``Signal.RANK_STEPS``: ``on_steps(job, ranks, steps, ts)``, each job's step events before the engine sees
      them;
    * ``Signal.ALERTS``: ``update(alert)`` for each alert leaving, classified, in order; it returns the alerts it
      adds after that one (e.g. a ``node_suspect``);
    * ``flush()`` at the end of each engine call: the alerts the input of that call caused (e.g. a restart);
    * ``Signal.TICKS``: ``tick(now)``, ``now`` on the worker's timer clock.

    The alerts a rule returns leave as they are (they are not fed to the other outlet rules).
    """

    def on_steps(self, job: str, ranks, steps, ts, layout=None) -> None:
        """A run of ``job``'s step events (columns), in arrival order; ``layout``: who reported them
        (models/steps/layout.py), or None: not known."""

    def update(self, alert: Alert) -> list[Alert]:
        return []

    def flush(self) -> list[Alert]:
        return []

    def gate(self, alerts: list[Alert]) -> list[Alert]:
        """Every alert the outlet is about to return, last, in order: the list to return instead (the drain
        budget holds drains beyond it: models/oncall/budget.py). Default: unchanged."""
        return alerts


def closed(alerts: list[Alert], resolution: Resolution, reason: str) -> list[Alert]:
    """``alerts``, resolved by a rule's own close-for-a-reason, saying ``resolution``: where the rule set
    another (a detector's ``close`` presumes the job ended), the one asked for replaces it."""
    out = []
    for alert in alerts:
        if alert.evidence.get("resolution") not in (None, resolution):
            alert = replace(alert, evidence={k: v for k, v in alert.evidence.items()
                                             if k not in ("resolution", "resolution_detail")})
        out.append(with_resolution(alert, resolution, reason))
    return out


def open_alerts_of(rules) -> list[Alert]:
    """The alerts now firing of several rules, in their order (a job's rules, the hub's, on-call's)."""
    return [a for rule in rules for a in rule.open_alerts()]


def capped_of(rules) -> dict[str, int]:
    """Input several rules left out at a state cap so far, by what, summed."""
    out: dict[str, int] = {}
    for rule in rules:
        for what, n in rule.capped().items():
            out[what] = out.get(what, 0) + n
    return out


def reconfigure_rules(rules, settings) -> None:
    """New settings to every rule whose spec takes that settings class (state and open alerts kept)."""
    for rule in rules:
        if rule.spec.settings is not None and isinstance(settings, rule.spec.settings):
            rule.reconfigure(settings)


def dependency_order(specs: list[RuleSpec]) -> list[RuleSpec]:
    """``specs`` with each after the rules it ``needs`` (otherwise in the given order); ``ValueError`` on an
    unknown name or a cycle."""
    by_name = {s.name: s for s in specs}
    out: list[RuleSpec] = []
    state: dict[str, int] = {}  # 1: being placed, 2: placed

    def place(spec: RuleSpec) -> None:
        if state.get(spec.name) == 2:
            return
        if state.get(spec.name) == 1:
            raise ValueError(f"rules need each other: {spec.name}")
        state[spec.name] = 1
        for name in spec.needs:
            if name not in by_name:
                raise ValueError(f"rule {spec.name} needs {name}, which is not registered")
            place(by_name[name])
        state[spec.name] = 2
        out.append(spec)

    for spec in specs:
        place(spec)
    return out
