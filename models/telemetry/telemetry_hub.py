"""The engine's view of node telemetry: the node-level rules, alert enrichment, and the telemetry settings.

:class:`TelemetryHub` is what the engine holds. It makes the node-level rules from the registry
(models/registry.py ``NODE_RULES``, ``NodeRule``s: models/rule.py, models/telemetry/node_rules.py) and drives
them: each node event to the rules whose ``kinds`` take it, each job's steps to those that consume
``RANK_STEPS``, the alerts of the rules before to those that consume ``ALERTS``, the job rules' alerts with their
suspected causes to those that consume ``ENRICHED``, each tick to those that consume ``TICKS``.
Beside the rules it keeps what names suspected causes: the host signals (models/telemetry/host.py), the
fabric history (models/telemetry/fabric.py) and which rank runs on which node and GPU
(models/telemetry/telemetry_correlator.py); it enriches alerts with their suspected causes and publishes a
new version of an alert when its suspected causes change after it fired. :class:`TelemetrySettings`
configures all of it and the node agent.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import replace

from .settings import TelemetrySettings  # noqa: F401  (defined in a light module; re-exported here)
from ..alert_types import AlertStatus, AlertType, ENRICHED_TYPES
from ..alerts import Alert
from ..evidence import HangEvidence
from .causes import SuspectedCause
from .fabric import FabricCorrelator, FabricHistory
from .host import HostSettings, host_hub_parts, merge_causes
from .link_baseline import LinkBaselines
from .telemetry_correlator import TelemetryCorrelator
from ..wire.telemetry_events import TELEMETRY_KINDS  # noqa: F401  (the engine routes these kinds here)
from .telemetry_tracker import TelemetryTracker
from ..rule import NodeRule, Signal, capped_of, dependency_order, open_alerts_of, reconfigure_rules




class TelemetryHub:
    """What the detection engine holds for telemetry: tracker, correlator, and alert enrichment."""

    #: Job-level alerts (comm_slowdown, a communication throughput_drop, a hang with no culprit)
    #: compare all of the job's nodes with each other (models/telemetry/fabric.py, ``FabricCorrelator.applies``).
    ENRICHED_TYPES = ENRICHED_TYPES

    #: Re-enrich only the open alerts whose inputs changed (``refresh``); False: all of them every tick.
    incremental = True

    def __init__(self, settings=None, host=None, *, rules, finders=()) -> None:
        """``rules``: the node rules' classes, in feeding order (the registry's ``NODE_RULES``); ``finders``: the cause
        finders' classes (the registry's ``CAUSE_FINDERS``, models/telemetry/cause_finders.py)."""
        if settings is None:
            settings = TelemetrySettings()
        if host is None:
            host = HostSettings()
        s = settings
        self.settings = s
        self.host_settings = host
        classes = tuple(rules)
        made: dict[str, NodeRule] = {}
        by_name = {c.spec.name: c for c in classes}
        for spec in dependency_order([c.spec for c in classes]):  # each after the rules it needs
            made[spec.name] = by_name[spec.name](self, {n: made[n] for n in spec.needs})
        #: The node rules, in feeding order: a rule that consumes ``ALERTS`` gets those of the rules before it.
        self.rules: tuple[NodeRule, ...] = tuple(made[c.spec.name] for c in classes)
        self._route: dict[str, list[tuple[NodeRule, bool]]] = {
            kind: [(r, kind in r.kinds) for r in self.rules
                   if (kind in r.kinds and Signal.TELEMETRY in r.spec.consumes) or Signal.ALERTS in r.spec.consumes]
            for kind in TELEMETRY_KINDS}
        self._step_rules = [r for r in self.rules if Signal.RANK_STEPS in r.spec.consumes]
        # What names causes reads the telemetry rule's spikes and the fabric rule's open incidents.
        self.tracker: TelemetryTracker = self.rule("telemetry").tracker
        self.correlator = TelemetryCorrelator(self.tracker, window=s.correlation_window, max_causes=s.max_causes,
                                              data_time_ratio=s.data_time_ratio)
        self.max_updates = s.max_enrichment_updates
        # Job-level alerts (comm_slowdown, ...) are judged against all of the job's nodes (models/telemetry/fabric.py).
        baselines = LinkBaselines(half_life=s.link_baseline_half_life, min_samples=s.link_baseline_min_samples)
        self.fabric = FabricCorrelator(FabricHistory(baselines=baselines), window=s.correlation_window)
        # Many nodes' ports erring at once: one fabric incident, not a page per node (models/telemetry/incidents.py).
        self.incidents = self.rule("fabric").incidents
        #: The rules that consume ``ENRICHED`` (one node's stragglers as one incident, a flaky rank's episodes as
        #: one): the job rules' alerts go through them, in this order, once their causes are named.
        self._enriched_rules = [r for r in self.rules if Signal.ENRICHED in r.spec.consumes]
        self.node_incidents = self.rule("node_incident").incidents
        self.intermittent = self.rule("intermittent_incident").incidents
        #: Job-wide comparisons are costly (every component of every node of the job): an open alert's
        #: is recomputed at most every ``fabric_refresh_seconds`` of the timer's clock, and no longer
        #: once its window has passed (plus a margin for node clocks and ingestion lag).
        self.fabric_refresh_seconds = 10.0
        self._fabric_cache: dict[str, tuple[float, list | None]] = {}
        self._now: float | None = None
        # Host signals (models/telemetry/host.py) and the device-layer rules (models/telemetry/device_rules.py).
        self.host, self.host_correlator = host_hub_parts(s, host)
        #: What names suspected causes, by name (models/telemetry/cause_finders.py).
        self.finders = {f.name: f.of(self) for f in finders}
        # Open enriched alerts: id -> [base alert, signature of its causes, updates published, last version]
        self._open: dict[str, list] = {}
        self.max_open = 10_000
        # What ``refresh`` re-enriches (issue 44: many open alerts cost O(what changed) per tick, not O(open)):
        # an open alert whose job (placement, steps, nodes) or one of whose nodes (telemetry) changed since its
        # last enrichment, one whose causes depend on the clock (``_timed``), and every one when something any
        # alert may depend on changed (``_all_changed``: a node first heard of, a node rule's alert, settings)
        # or every ``full_refresh_seconds`` all the same. ``incremental = False``: every open alert every tick.
        self.full_refresh_seconds = 300.0
        self._last_full: float | None = None
        self._all_changed = False
        self._changed_jobs: set[str] = set()
        self._changed_nodes: set[str] = set()
        self._by_job: dict[str, set[str]] = {}
        self._by_node: dict[str, set[str]] = {}
        self._deps: dict[str, tuple[str, tuple[str, ...]]] = {}  # alert id -> (job, nodes) it was indexed under
        self._timed: set[str] = set()
        self._seq = 0  # order of first enrichment: ``refresh`` publishes in it
        #: Node -> ts of its agent's first report (least recently reporting first; bounded like the
        #: tracker's nodes): action hooks drain only nodes whose agent reported before the alert.
        self._reported: OrderedDict[str, float] = OrderedDict()

    def reported_before(self, node: str, ts: float) -> bool:
        """Whether telemetry of ``node`` arrived before ``ts`` (its agent is real, not one forged message)."""
        first = self._reported.get(node)
        return first is not None and first < ts

    def reported_nodes(self) -> int:
        """How many nodes' agents have reported (bounded by the tracker's ``max_nodes``): the drain budget's fleet."""
        return len(self._reported)

    def _note_report(self, node, ts: float) -> None:
        if not isinstance(node, str):
            return
        if node in self._reported:
            self._reported.move_to_end(node)
            self._changed_nodes.add(node)
            return
        self._all_changed = True  # a node first heard of (it may push another out of the bounded node tables)
        if len(self._reported) >= self.tracker.max_nodes:
            self._reported.popitem(last=False)
        self._reported[node] = ts

    def rule(self, name: str) -> NodeRule:
        """The node rule registered as ``name``."""
        for rule in self.rules:
            if rule.spec.name == name:
                return rule
        raise KeyError(name)

    def placements(self) -> dict[str, dict[int, tuple]]:
        """job -> rank -> (node, gpu) (``NodeEnv``)."""
        return self.correlator.placements()

    def process(self, event) -> list[Alert]:
        """One node event: to the node rules that take its kind, their alerts through those that consume alerts."""
        node = getattr(event, "node", None)
        self._note_report(node, getattr(event, "ts", 0.0))
        if not isinstance(node, str):
            self._all_changed = True
        self.fabric.history.update(event)
        # Host signals name causes of job alerts (models/telemetry/host.py): no alert of their own so far.
        out: list[Alert] = self.host.update(event) if event.kind == "host" else []
        for rule, takes in self._route.get(event.kind, ()):
            if takes:
                out.extend(rule.update(event))
            else:
                out = rule.on_alerts(out)
        if out:
            self._all_changed = True
        return out

    @property
    def link_columns(self) -> bool:
        """Whether link samples may come by columns (``process_links``): the telemetry rule is the one rule that takes
        them, first, and the rules after it take its alerts (``on_alerts`` of none: nothing). Otherwise (a rule
        added) each sample goes through ``process``."""
        route = self._route.get("link", ())
        return bool(route) and route[0][0] is self.rule("telemetry") and route[0][1] and not any(
            takes for _, takes in route[1:])

    def process_links(self, cols, lo: int, hi: int, emit) -> list[tuple[int, str]]:
        """Rows ``lo:hi`` of ``cols`` (``LinkColumns``: models/wire/telemetry_columns.py), link samples of one or more
        nodes' runs: the same state and alerts as ``process`` of each in turn. Each row's alerts (rare) go to
        ``emit(row, alerts)`` as soon as they are known, before the next row is taken, with every row up to it noted
        and in the fabric history. Returns the rows a state cap left out, ``(row, what)``."""
        route = self._route["link"]
        tracker, history = self.tracker, self.fabric.history
        runs = cols.node_runs() if lo == 0 and hi == len(cols) else [
            (name, max(a, lo), min(b, hi)) for name, a, b in cols.node_runs() if a < hi and b > lo]
        ts = cols.ts
        refused: list[tuple[int, str]] = []
        run, at = 0, lo
        while at < hi:
            out, upto = tracker.update_links(cols, at, hi, refused)
            # the reports of the runs begun by then (those of its later samples: noting the second is all of it)
            while run < len(runs) and runs[run][1] < upto:
                node, a, b = runs[run]
                self._note_report(node, ts[a])
                if b - a > 1:
                    self._note_report(node, ts[a + 1])
                run += 1
            history.update_links(cols, at, upto)
            if out:
                for rule, _ in route[1:]:
                    out = rule.on_alerts(out)
                if out:
                    self._all_changed = True
                    emit(upto - 1, out)
            at = upto
        return refused

    def open_alerts(self) -> list[Alert]:
        """The node rules' alerts now firing."""
        return open_alerts_of(self.rules)

    def capped(self) -> dict[str, int]:
        """Input the node rules left out at a state cap so far, by what (``stepwatch_state_capped_total``)."""
        return capped_of(self.rules)

    def reconfigure(self, settings) -> None:
        """New settings (``TelemetrySettings`` or ``HostSettings``) to every node rule that takes them."""
        reconfigure_rules(self.rules, settings)
        self._all_changed = True

    def observe_node(self, job: str, node: str | None) -> None:
        """An event of ``job`` ran on ``node`` (the job's nodes: models/telemetry/fabric.py)."""
        if node is not None and node not in self.fabric.job_nodes(job):
            self.fabric.observe_node(job, node)
            self._changed_jobs.add(job)

    def forget_job(self, job: str) -> None:
        """``job``'s state was evicted: its nodes are no longer known."""
        self.fabric.forget_job(job)
        self._changed_jobs.add(job)

    def ranks_on(self, job: str, node: str) -> tuple[int, ...]:
        return tuple(sorted(r for r, (n, _) in self.correlator.placements().get(job, {}).items() if n == node))

    def jobs_on(self, nodes: tuple[str, ...]) -> list[str]:
        wanted = set(nodes)
        jobs = dict.fromkeys((*self.correlator.placements(), *self.fabric.jobs()))
        return [job for job in jobs if wanted.intersection(self.job_nodes(job))]

    def observe_steps(self, job: str, ranks: list[int], nodes: list, gpus: list, data_times: list[float] | None,
                      steps: list[int] = (), step_times: list[float] = (), *, layout=None) -> None:
        """Step events of one job, in order; ``layout``: the run's (models/steps/layout.py) when these are a whole run;
        ``data_times``: None when no event reported one."""
        self.correlator.observe_steps(job, ranks, nodes, gpus, data_times, layout=layout)
        self._changed_jobs.add(job)
        if steps:
            for rule in self._step_rules:
                rule.on_steps(job, steps, step_times)

    def _reference_time(self, alert: Alert) -> float:
        since = HangEvidence.of(alert).stalled_since if alert.type == AlertType.HANG else None
        return alert.starts_at if since is None else float(since)

    # -- where jobs run, as the cause finders ask (models/telemetry/cause_finders.py ``CauseView``) ----------------

    def placement(self, job: str, rank: int) -> tuple[str | None, int | None]:
        return self.correlator.placement(job, rank)

    def rank_nodes(self, job: str) -> list[str]:
        return self.correlator.job_nodes(job)

    def job_nodes(self, job: str) -> tuple[str, ...]:
        placed = (node for node, _ in self.correlator.placements().get(job, {}).values() if node is not None)
        return tuple(dict.fromkeys((*placed, *self.fabric.job_nodes(job))))

    def _enriched(self, base: Alert) -> tuple[Alert, tuple]:
        at = self._reference_time(base)
        # A firing straggler's causes are re-derived as its node's telemetry accumulates (issue 39 item 5): what
        # shows while it lasts (a throttle that deepens, host pressure that starts) counts, not only its onset's.
        now = self._now if base.facts.causes_follow_clock and base.status == AlertStatus.FIRING else None
        late = now is not None and now > at + self.correlator.window
        finders = self.finders
        causes = finders["ranks"].suspects(base, at, self, until=now if late else None)
        host = finders["host"].suspects(base, at, self)
        if late:
            seen = {(c.node, c.component) for c in host}
            host = host + [c for c in finders["host"].suspects(base, now, self) if (c.node, c.component) not in seen]
        causes = merge_causes(causes, host, self.correlator.max_causes)
        if finders["fabric"].applies(base):
            return self._enriched_job_wide(base, at, causes)
        rank = 0
        listed = []
        for rank, cause in enumerate(causes, 1):
            listed.append(cause.to_dict(rank))
        hint = causes[0].hint if causes else "unknown"
        evidence = dict(base.evidence)
        evidence["suspected_causes"] = listed
        evidence["cause_hint"] = hint
        signature = tuple((c.component, c.node, c.category) for c in causes)
        return replace(base, summary=f"{base.summary}; suspected cause: {hint}", evidence=evidence), signature

    def _enriched_job_wide(self, base: Alert, at: float, own: list[SuspectedCause]) -> tuple[Alert, tuple]:
        """A job-level alert: the job's nodes compared with each other (models/telemetry/fabric.py); with too few
        nodes to compare, every spike on any of them near the onset is a candidate."""
        nodes = self.job_nodes(base.job)
        host = [c for c in own if c.category == "host"]  # host signals (models/telemetry/host.py) judged on their own
        incident = self.incidents.covering(nodes, at)
        if incident is not None:  # the job's nodes are in a fabric incident: that is the cause, no node is
            causes = [incident.cause(), *host][: self.correlator.max_causes]
            evidence = dict(base.evidence)
            evidence["suspected_causes"] = [c.to_dict(i) for i, c in enumerate(causes, 1)]
            evidence["cause_hint"] = causes[0].hint
            evidence["nodes_compared"] = len(nodes)
            evidence["incident"] = incident.id
            evidence["fabric"] = incident.switch or "fleet"
            return replace(base, nodes=(), ranks=(), evidence=evidence,
                           summary=f"{base.summary}; suspected cause: {causes[0].hint}"), (("fabric", incident.id),)
        found = self._fabric_suspects(base, nodes, at)
        if found is None:
            wide = replace(base, nodes=tuple(dict.fromkeys((*base.nodes, *nodes))), ranks=())
            causes = self.finders["ranks"].suspects(wide, at, self) + host
        else:
            causes = list(found)
            seen = {(c.node, c.component) for c in causes}
            # Spikes near the ranks it names (ranks that stood out); a stalled job's listed ranks are all waiting.
            causes += [c for c in (host if base.facts.stalls else own) if (c.node, c.component) not in seen]
        causes = causes[: self.correlator.max_causes]
        listed = [c.to_dict(i) for i, c in enumerate(causes, 1)]
        hint = causes[0].hint if causes else "unknown"
        evidence = dict(base.evidence)
        evidence["suspected_causes"] = listed
        evidence["cause_hint"] = hint
        evidence["nodes_compared"] = len(nodes)
        named = tuple(c.node for c in causes[:1] if c.node) if found else ()
        # The node the alert names is part of what changed: the same first cause found by the fabric
        # comparison (once the job's telemetry arrived) names its node, found near the onset it does not.
        signature = tuple((c.component, c.node, c.category) for c in causes) + ((("named",) + named,) if named else ())
        return replace(base, nodes=tuple(dict.fromkeys((*named, *base.nodes))), evidence=evidence,
                       summary=f"{base.summary}; suspected cause: {hint}"), signature

    def _fabric_suspects(self, base: Alert, nodes: tuple[str, ...], at: float) -> list | None:
        cached = self._fabric_cache.get(base.id)
        now = self._now
        samples = self.fabric.history.samples
        # Too few nodes had telemetry the last time (e.g. the job's events reached the worker before its
        # nodes' telemetry, another topic): compared again as soon as any has come, whatever the age.
        late_telemetry = cached is not None and cached[1] is None and cached[2] != samples
        if cached is not None and now is not None and not late_telemetry and (
                now - cached[0] < self.fabric_refresh_seconds or self._fabric_frozen(cached, base)):
            return cached[1]
        found = self.finders["fabric"].suspects(base, at, self)  # (of the job's nodes: ``nodes``)
        if len(self._fabric_cache) >= self.max_open:
            self._fabric_cache.pop(next(iter(self._fabric_cache)))
        self._fabric_cache[base.id] = (now if now is not None else at, found, samples)
        return found

    def enrich(self, alerts: list[Alert]) -> list[Alert]:
        """Add ``suspected_causes`` (and a hint in the summary) to straggler, hang and comm alerts, then pass them
        through the node rules that consume ``ENRICHED`` (e.g. the stragglers of most ranks of one node become one
        node incident: models/telemetry/incidents.py)."""
        if not alerts:
            return alerts
        return self._grouped(self._enrich(alerts))

    def _grouped(self, alerts: list[Alert]) -> list[Alert]:
        before = [a.id for a in alerts]
        for rule in self._enriched_rules:
            alerts = rule.on_alerts(alerts)
        if [a.id for a in alerts] != before:  # a rule made an incident of them: alerts may depend on it
            self._all_changed = True
        return alerts

    def _index(self, alert_id: str, base: Alert, enriched: Alert) -> None:
        """Note what ``alert_id``'s enrichment depends on (``refresh``)."""
        self._unindex(alert_id)
        nodes = tuple(dict.fromkeys((*base.nodes, *enriched.nodes, *self.job_nodes(base.job))))
        self._deps[alert_id] = (base.job, nodes)
        self._by_job.setdefault(base.job, set()).add(alert_id)
        for node in nodes:
            self._by_node.setdefault(node, set()).add(alert_id)
        cached = self._fabric_cache.get(alert_id)
        if (base.facts.causes_follow_clock and base.status == AlertStatus.FIRING) or (
                self.finders["fabric"].applies(base) and (cached is None or not self._fabric_frozen(cached, base))):
            self._timed.add(alert_id)  # its causes follow the clock (a late straggler's, the fabric cache's age)

    def _unindex(self, alert_id: str) -> None:
        deps = self._deps.pop(alert_id, None)
        self._timed.discard(alert_id)
        if deps is None:
            return
        job, nodes = deps
        for key, index in ((job, self._by_job), *((n, self._by_node) for n in nodes)):
            ids = index.get(key)
            if ids is not None:
                ids.discard(alert_id)
                if not ids:
                    del index[key]

    def _fabric_frozen(self, cached: tuple, base: Alert) -> bool:
        """Whether an alert's fabric comparison is no longer recomputed by age (its window has passed)."""
        return cached[0] > self._reference_time(base) + 2 * self.fabric.window + 60.0

    def _enrich(self, alerts: list[Alert]) -> list[Alert]:
        out = []
        for alert in alerts:
            if not any(finder.applies(alert) for finder in self.finders.values()):
                out.append(alert)
                continue
            if alert.status == AlertStatus.FIRING:
                enriched, signature = self._enriched(alert)
                if not signature and not self.tracker.events_seen and not self.host.events_seen:
                    enriched = alert  # no agent deployed (yet) and no other clue: left as it is
                entry = self._open.get(alert.id)
                if entry is None:
                    if len(self._open) >= self.max_open:
                        self._unindex(next(iter(self._open)))
                        self._open.pop(next(iter(self._open)))
                    self._seq += 1
                self._open[alert.id] = [alert, signature, 0, enriched, entry[4] if entry else self._seq]
                self._index(alert.id, alert, enriched)
                out.append(enriched)
            else:
                entry = self._open.pop(alert.id, None)
                self._unindex(alert.id)
                self._fabric_cache.pop(alert.id, None)
                if (entry is not None and "suspected_causes" not in alert.evidence
                        and "suspected_causes" in entry[3].evidence):
                    last = entry[3]
                    evidence = dict(alert.evidence)
                    evidence["suspected_causes"] = last.evidence.get("suspected_causes", [])
                    evidence["cause_hint"] = last.evidence.get("cause_hint", "unknown")
                    alert = replace(alert, evidence=evidence)
                out.append(alert)
        return out

    def refresh(self) -> list[Alert]:
        """New versions (still firing, same id) of open alerts whose suspected causes changed."""
        out = []
        now = self._now
        # With no node telemetry ever heard, a timed alert (one the fabric comparison may take up again) whose job
        # did not change and whose fabric comparison is still fresh would be enriched from the same inputs as last
        # time: the same causes, so no new version. Skipped; a full refresh and a clock-following one are not.
        clockless = (self.incremental and not self._all_changed and now is not None and self._last_full is not None
                     and now - self._last_full < self.full_refresh_seconds and not self._reported
                     and not self.tracker.events_seen and not self.host.events_seen)
        marked: set[str] = set()
        if clockless:
            for job in self._changed_jobs:
                marked.update(self._by_job.get(job, ()))
            for node in self._changed_nodes:
                marked.update(self._by_node.get(node, ()))
        for alert_id, entry in self._due():
            base, signature, updates, _, _ = entry
            if updates >= self.max_updates:
                self._unindex(alert_id)  # never re-enriched again: nothing to track
                continue
            if clockless and alert_id not in marked and not (
                    base.facts.causes_follow_clock and base.status == AlertStatus.FIRING):
                cached = self._fabric_cache.get(alert_id)
                if cached is not None and not (cached[1] is None and cached[2] != self.fabric.history.samples) and (
                        now - cached[0] < self.fabric_refresh_seconds or self._fabric_frozen(cached, base)):
                    continue  # (``_fabric_suspects`` would return ``cached``: nothing it reads has moved)
            enriched, new_signature = self._enriched(base)
            self._index(alert_id, base, enriched)
            if new_signature != signature:
                entry[1], entry[2], entry[3] = new_signature, updates + 1, enriched
                out.append(enriched)
        return out

    def _due(self) -> list[tuple[str, list]]:
        """The open alerts ``refresh`` re-enriches now (see ``incremental``), in the order they opened."""
        now = self._now
        full = (not self.incremental or self._all_changed or now is None or self._last_full is None
                or now - self._last_full >= self.full_refresh_seconds)
        if full:
            self._last_full = now
            due = list(self._open.items())
        else:
            ids = set(self._timed)
            for job in self._changed_jobs:
                ids.update(self._by_job.get(job, ()))
            for node in self._changed_nodes:
                ids.update(self._by_node.get(node, ()))
            due = sorted(((i, self._open[i]) for i in ids if i in self._open), key=lambda item: item[1][4])
        self._all_changed = False
        self._changed_jobs.clear()
        self._changed_nodes.clear()
        return due

    def tick(self, now: float) -> list[Alert]:
        self._now = now
        out: list[Alert] = []
        for rule in self.rules:
            if Signal.ALERTS in rule.spec.consumes:
                out = rule.on_alerts(out)
            if Signal.TICKS in rule.spec.consumes:
                out.extend(rule.tick(now))
        return out + self._grouped(self.refresh())
