"""The on-call stages of the outlet chain (models/outlet.py), in the order the registry lists them
(models/registry.py ``OUTLET_STAGES``); the state they share is ``OnCall``'s (models/oncall/oncall.py)."""

from __future__ import annotations

from typing import Any

from ..alert_types import AlertStatus
from ..alerts import Alert
from ..outlet import EngineView, Stage, StageSpec
from ..wire.step_columns import StepColumns
from .citations import HOLD_MIN_SECONDS, HOLD_STEPS
from .oncall import OnCall, fields_of, is_node_alert


def _layouts(item: Any, view: EngineView) -> dict:
    return view.layouts(item) if isinstance(item, StepColumns) else {}


class AttributeStage(Stage):
    """A node alert names the jobs with ranks on its node around its start; the input says where ranks run."""

    spec = StageSpec(name="attribute", does="node alerts name the jobs on their node (models/oncall/placement.py)")

    def __init__(self, oncall: OnCall) -> None:
        self.oncall = oncall

    def observe(self, item: Any, view: EngineView) -> None:
        self.oncall.observe_placement(item, _layouts(item, view))

    def process(self, alerts: list[Alert], view: EngineView) -> list[Alert]:
        return [self.oncall.attribute(a) if is_node_alert(a) else a for a in alerts]


class OnsetStage(Stage):
    """Rules that name the step a problem began at (straggler, throughput drop): ``evidence.onset_ts``, when that
    step began, from the job's recent judged steps (models/jobhealth/sli.py); older than those: the detection time
    minus the steps since at their median duration."""

    spec = StageSpec(name="onset", does="job alerts naming their first step get evidence.onset_ts")

    def __init__(self, oncall: OnCall) -> None:
        pass  # (reads the jobs' steps from the view alone)

    def process(self, alerts: list[Alert], view: EngineView) -> list[Alert]:
        return [_with_onset(a, view) if a.job and "onset_ts" not in a.evidence else a for a in alerts]


def _with_onset(alert: Alert, view: EngineView) -> Alert:
    ev = alert.evidence
    first = ev.get("first_step", ev.get("onset_step"))
    detected = ev.get("detected_step")
    if not isinstance(first, int) or not isinstance(detected, int) or not view.tracks(alert.job):
        return alert
    steps = view.recent_steps(alert.job)  # (step, end ts, step time, tokens), oldest first
    onset = None
    for step, end, duration, _ in steps:
        if step == first:
            onset = end - duration
            break
    if onset is None and steps:
        typical = sorted(d for _, _, d, _ in steps)[len(steps) // 2]
        onset = alert.starts_at - max(detected - first + 1, 0) * typical
    if onset is None:
        return alert
    return alert.__class__(**{**fields_of(alert), "evidence": {**ev, "onset_ts": round(min(onset, alert.starts_at), 6)}})


class CiteStage(Stage):
    """The incident each alert belongs to (models/oncall/citations.py): a drop that is (or may be) a straggler's own
    cost is left out or held; held ones no straggler explained are released at a tick."""

    spec = StageSpec(name="cite", does="alerts cite their incident; a straggler's own cost is absorbed or held")

    def __init__(self, oncall: OnCall) -> None:
        self.oncall = oncall
        self.citations = oncall.citations

    def process(self, alerts: list[Alert], view: EngineView) -> list[Alert]:
        out = []
        for alert in alerts:
            if not self.citations.absorbs(alert, ranks_of=view.ranks_of):
                out.append(self.citations.cite(alert))
        return out

    def tick(self, now: float, view: EngineView) -> list[Alert]:
        return [self.citations.cite(a) for a in self.citations.release(now, self._hold_seconds)]

    def _hold_seconds(self, job: str) -> float:
        return max(HOLD_MIN_SECONDS, HOLD_STEPS * self.oncall.typical_step_time(job))


class ClassifyStage(Stage):
    """Scope, failure class, action and recommended action (models/oncall/actions.py)."""

    spec = StageSpec(name="classify", does="labels.scope, evidence.failure_class and evidence.action")

    def __init__(self, oncall: OnCall) -> None:
        self.classifier = oncall.classifier

    def process(self, alerts: list[Alert], view: EngineView) -> list[Alert]:
        return [self.classifier.annotate(a) for a in alerts]


class EffectiveComputeStage(Stage):
    """A resolved job alert carries the job's productive share as sampled at the latest tick."""

    spec = StageSpec(name="effective_compute", does="resolved job alerts carry evidence.effective_compute")

    def __init__(self, oncall: OnCall) -> None:
        self.oncall = oncall

    def process(self, alerts: list[Alert], view: EngineView) -> list[Alert]:
        return [self.oncall.with_effective_compute(a) if a.job and a.status == AlertStatus.RESOLVED else a
                for a in alerts]

    def tick(self, now: float, view: EngineView) -> list[Alert]:
        # Only the jobs the engine's timer just visited: a job's share moves only with its events, and every job an
        # event reached is visited (models/engine.py ``tick``): O(jobs due), not O(jobs).
        shares = self.oncall.shares
        for name, share in view.ticked_shares():
            if share is not None:
                shares[name] = share
            else:
                shares.pop(name, None)  # evicted at this tick, or no span yet
        if len(shares) > 2 * view.job_count() + 1024:  # jobs forgotten without a tick (revoked partitions)
            self.oncall.shares = {name: share for name, share in shares.items() if view.tracks(name)}
        return []


class OutletRulesStage(Stage):
    """The outlet rules (models/oncall/outlet_rules.py): each alert leaving, then what the rules add after it; once
    per call the rules' flush (restarts) and the open node alerts of nodes a job just started on, republished."""

    spec = StageSpec(name="outlet_rules", does="restarts, the node ledger; node alerts republished with new jobs")

    def __init__(self, oncall: OnCall) -> None:
        self.oncall = oncall

    def observe(self, item: Any, view: EngineView) -> None:
        self.oncall.observe_steps(item, _layouts(item, view))

    def process(self, alerts: list[Alert], view: EngineView) -> list[Alert]:
        oncall = self.oncall
        out: list[Alert] = []
        for alert in alerts:
            out.append(alert)
            oncall.remember(alert)
            for rule in oncall.alert_rules:
                out.extend(rule.update(alert))
        for rule in oncall.flush_rules:
            out.extend(rule.flush())
        if oncall.new_pairs:
            pairs, oncall.new_pairs = oncall.new_pairs, []
            out.extend(self._republish({node for _, node in pairs}))
        return out

    def tick(self, now: float, view: EngineView) -> list[Alert]:
        out: list[Alert] = []
        for rule in self.oncall.tick_rules:
            out.extend(rule.tick(now))
        return out

    def _republish(self, nodes: set[str]) -> list[Alert]:
        oncall = self.oncall
        out = []
        for ident, alert in list(oncall.open_node_alerts.items()):
            if alert.nodes and alert.nodes[0] in nodes:
                again = oncall.attribute(alert)
                if again.evidence.get("jobs") != alert.evidence.get("jobs"):
                    again = oncall.classifier.annotate(again)
                    oncall.open_node_alerts[ident] = again
                    oncall.remember(again)
                    out.append(again)
                    for rule in oncall.alert_rules:
                        out.extend(rule.update(again))
        return out


class GateStage(Stage):
    """Last: the escalation ladder (models/oncall/escalation.py), then the drain budget (models/oncall/budget.py)."""

    spec = StageSpec(name="gate", does="the escalation ladder, then the drain budget, on everything leaving")

    def __init__(self, oncall: OnCall) -> None:
        self.oncall = oncall

    def process(self, alerts: list[Alert], view: EngineView) -> list[Alert]:
        return self.oncall.gate(alerts)
