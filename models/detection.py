"""The detection core as the pipeline drives it: the job rules, node telemetry, and the outlet chain, in that order.

    event ─> JobEngine (models/engine.py): the job rules' alerts, each group tagged with the event that caused it
          ─> TelemetryHub (models/telemetry/telemetry_hub.py): observes the rows up to that event, then enriches
          ─> Outlet (models/outlet.py): the registry's OUTLET_STAGES, in order
          ─> Pipeline.publishable (models/pipeline.py)

``DetectionEngine`` is a ``JobEngine`` (jobs, clock, settings, status views) that returns finished alerts: what
tests, bench/ and the pipeline drive. Node telemetry (events of ``TELEMETRY_KINDS``) goes straight to the hub; the
engine tells the hub of jobs' nodes and jobs forgotten as it goes (its ``observer``).
"""

from __future__ import annotations

import dataclasses
import itertools
from collections import Counter

from . import alert_clock
from .alert_clock import AlertClock, GoneClocks
from .alerts import Alert
from .engine import JobEngine
from .engine_output import RowFacts, StepsJudged
from .jobs_view import JobsView
from .oncall.oncall import OnCall
from .outlet import Outlet
from . import registry
from .telemetry.telemetry_hub import TelemetryHub
from .wire.events import Event, StepEvent
from .wire.step_columns import StepColumns
from .wire.telemetry_columns import LinkColumns
from .wire.telemetry_events import TELEMETRY_KINDS

#: What ``DetectionEngine.capped_mark`` counts, in order (``stepwatch_state_capped_total{what}``).
CAPPED_MARK = ("ranks_per_job", "gpus_per_node", "ports_per_node", "process_groups_per_job", "pg_ranks_per_job",
               "op_names_per_job", "gpus_total", "ports_total", "process_groups_total")


class DetectionEngine(JobEngine):
    """The job rules (``JobEngine``), node telemetry (``telemetry``) and the outlet chain (``outlet``, its on-call
    state ``oncall``, reading ``view``): ``process``, ``process_batch`` and ``tick`` return finished alerts."""

    #: Whether a column batch whose jobs' lines interleave is judged job by job (``_by_job``: the same alerts and
    #: state, fewer runs); False (tests compare the alerts both ways): run by run.
    join_runs = True

    def __init__(self, settings=None) -> None:
        super().__init__(settings)
        #: Node telemetry: spikes, GPU/link alerts, suspected causes of stragglers and hangs; it hears of the jobs'
        #: nodes and of jobs forgotten from the engine (its ``observer``).
        # (the registry's lists read when the engine is made, not imported: a test may add a rule)
        self.telemetry = TelemetryHub(self.settings.telemetry, self.settings.host, rules=registry.NODE_RULES,
                                      finders=registry.CAUSE_FINDERS)
        self.observer = self.telemetry
        #: The public facts of the jobs and of node telemetry that the outlet chain reads (models/outlet.py).
        self.view = JobsView(self, self.telemetry)
        #: The on-call state of the outlet chain: placement, citations, classifier, outlet rules (models/oncall/).
        self.oncall = OnCall(self.settings.oncall, rules=registry.OUTLET_RULES, stages=registry.OUTLET_STAGES,
                             types=registry.type_classes())
        self.oncall.bind(self.view)
        #: Where alerts leave: the registry's ``OUTLET_STAGES``, in order (models/outlet.py).
        self.outlet = Outlet(self.oncall.stages)
        #: The column batch being taken and its runs' layouts, worked out before any run is (``view.layouts``).
        self.batch_layouts: tuple[StepColumns, dict] | None = None
        #: The rows of the last batch of link samples a state cap left out (``take_refused_links``).
        self.refused_links: list[tuple[int, str]] = []
        #: Evicted jobs' alert clocks, for what of theirs leaves in a later call (models/alert_clock.py).
        self.gone_clocks = GoneClocks()

    @property
    def incremental(self) -> bool:
        """Whether a tick skips open alerts that cannot have changed (an open hang until its verdict can
        change, an enriched alert until its telemetry or placement changed: issue 44); False (tests compare
        the alerts both ways): every open hang and enriched alert every tick."""
        return self.telemetry.incremental

    @incremental.setter
    def incremental(self, on: bool) -> None:
        self.telemetry.incremental = on

    # -- input ----------------------------------------------------------------------------

    def process(self, event: Event, *, arrival: float | None = None) -> list[Alert]:
        """Feed one valid event; return the alerts it caused (firing or resolved), enriched and through the
        outlet chain. ``arrival``: as ``JobEngine.judge``'s."""
        alerts = self._detect(event, arrival)
        self.outlet.observe(event, self.view)  # (the stages' own state: the engine and telemetry never read it)
        return self._leave(self.outlet.process(alerts, self.view))

    def process_batch(self, events: list[Event] | StepColumns | LinkColumns, *,
                      arrival: float | list[float] | None = None) -> list[Alert]:
        """Feed one message's events in order: the same alerts, and the same state after, as ``process``
        for each event (a batch envelope of step events, ``StepColumns``, goes by columns); the alerts go through
        the outlet chain once, together. ``arrival``: one for all, or (columns) a list of each row's (a replay's
        lines of different arrivals in one batch). Link samples by columns (``LinkColumns``) go through the outlet chain
        row by row, as each sample alone would (``take_refused_links``: the rows a state cap left out)."""
        if isinstance(events, LinkColumns):
            return self._process_links(events)
        if isinstance(events, StepColumns):
            # the layouts before any run is taken (a job evicted by this batch keeps its own), for the stages too
            self.batch_layouts = (events, self.layouts(events))
            self.take_refused()  # this batch's only
            runs = events.job_runs()
            groups = self._by_job(events, runs, arrival) if self.join_runs and len(runs) > len(events.jobs) else None
            if groups is None:
                groups = []
                for job, lo, hi in runs:
                    groups.extend(self._enriched(self.judge_steps(job, events, lo, hi, arrival)))
            self.outlet.observe(events, self.view)
            return self._leave(self._through_outlet(groups))
        # A list (kinds mixed): each event as ``process`` takes it, its alerts reading the jobs as of that event.
        return [alert for event in events for alert in self.process(event, arrival=arrival)]

    def _by_job(self, cols: StepColumns, runs: list[tuple[str, int, int]],
                arrival) -> list[tuple[RowFacts | None, list[Alert]]] | None:
        """``process_batch``'s runs of a batch whose jobs' lines interleave (a replay's merged single-event lines: a
        step of a 4-rank job arrives in pieces between other jobs' lines), each job's rows judged as one run, the jobs
        in the order of their last run; then node telemetry observes and enriches by the batch's own runs, in row
        order, and the alerts come out in row order: the same alerts and state as run by run. None: not taken (a job
        new to the batch, or a rank cap within reach: what the cap leaves out, and which job a new one evicts,
        follow the order of the runs).

        Why the same: the rules of a job read only that job's state, and a job's rows are judged in their order
        either way; what is shared follows the last run of each job (the jobs' LRU and activity order, which the
        tick visits in) or is a maximum (the engine's clock; a row's facts take the clock as of that row, below);
        node telemetry sees the same calls in the same order (it reads nothing of the rules)."""
        jobs, retention, n = self.jobs, self.settings.retention, len(cols)
        for name in cols.jobs:
            job = jobs.get(name)
            if job is None or job.ended or job.hang.rank_count + 2 * n > self.store.rank_limit(job, retention):
                return None
        rows: dict[str, list[int]] = {}
        last: dict[str, int] = {}
        for name, lo, hi in runs:
            mine = rows.get(name)
            if mine is None:
                rows[name] = list(range(lo, hi))
            else:
                mine.extend(range(lo, hi))
            last[name] = hi
        order = sorted(last, key=last.__getitem__)
        taken = [row for name in order for row in rows[name]]
        joined = cols.take(taken)
        joined_arrival = list(map(arrival.__getitem__, taken)) if type(arrival) is list else arrival
        clock = self.clock
        layouts = self._layouts
        found: list[tuple[int, RowFacts | None, list[Alert]]] = []  # (row of ``cols``, facts, alerts)
        runs_judged: list[StepsJudged] = []
        start = 0
        for name in order:
            end = start + len(rows[name])
            judged = self.judge_steps(name, joined, start, end, joined_arrival)
            start = end
            if judged is None:
                continue
            runs_judged.append(judged)
            if not judged.caused:
                continue
            for k, (row, alerts) in enumerate(judged.caused):
                facts = judged.facts[k] if k < len(judged.facts) else None
                found.append((taken[row], facts, alerts))
        self._layouts = layouts  # (the batch's own: what the stages and the recorder read of it)
        if not found:  # nothing to enrich (most batches): node telemetry keeps each job's rows apart, so by job too
            for judged in runs_judged:
                self._enriched(judged)
            return []
        found.sort(key=lambda f: f[0])  # (stable: a row's groups keep their order)
        # the engine's clock as of each row, as run by run (the latest time of the rows before and the row)
        at = list(itertools.accumulate(cols.ts, max, initial=clock))
        found = [(row, facts if facts is None or facts.clock == at[row + 1] else
                  dataclasses.replace(facts, clock=at[row + 1]), alerts) for row, facts, alerts in found]
        shared = self.batch_layouts[1] if self.batch_layouts is not None and self.batch_layouts[0] is cols else {}
        out: list[tuple[RowFacts | None, list[Alert]]] = []
        k = 0
        for name, lo, hi in runs:
            mine = []
            while k < len(found) and found[k][0] < hi:
                mine.append(found[k])
                k += 1
            run = StepsJudged(name, cols, lo, hi, shared.get((lo, hi)), tuple((row, alerts) for row, _, alerts in mine),
                              (), tuple(facts for _, facts, _ in mine))
            out.extend(self._enriched(run))
        return out

    def _through_outlet(self, groups: list[tuple[RowFacts | None, list[Alert]]]) -> list[Alert]:
        """Each group of a column batch's alerts through the outlet chain, in order, the view reading the job as of
        the row that fired (one event at a time's facts, not the batch's end: ``JobsView.at``)."""
        if not groups:
            return self.outlet.process([], self.view)
        out: list[Alert] = []
        try:
            for facts, alerts in groups:
                self.view.at(facts)
                out.extend(self.outlet.process(alerts, self.view))
        finally:
            self.view.at(None)
        return out

    def _process_links(self, cols: LinkColumns) -> list[Alert]:
        """``process`` of each link sample of ``cols`` in turn, in one call (``TelemetryHub.process_links``): the
        engine's count and clock caught up to a row before its alerts go through the outlet chain (the chain passes
        a sample without alerts by unchanged: it is not called for those)."""
        out: list[Alert] = []
        noted = 0
        ts = cols.ts

        def note(upto: int) -> None:
            nonlocal noted
            if upto > noted:
                self.events_by_kind["link"] += upto - noted
                newest = max(ts[noted:upto])
                if newest > self.clock:
                    self.clock = newest
                noted = upto

        def emit(row: int, alerts: list[Alert]) -> None:
            note(row + 1)
            out.extend(self._leave(self.outlet.process(alerts, self.view)))

        self.outlet.observe(cols, self.view)  # (no stage reads link samples: for one that would)
        refused = self.telemetry.process_links(cols, 0, len(ts), emit)
        note(len(ts))
        self.refused_links = refused
        return out

    def take_refused_links(self) -> list[tuple[int, str]]:
        """The rows of the last ``LinkColumns`` batch a state cap left out, ``(row, what)``, once."""
        out, self.refused_links = self.refused_links, []
        return out

    def tick(self, now: float) -> list[Alert]:
        """The timer rules' alerts at ``now``, enriched, then node telemetry's; all through the outlet chain, then
        what its stages say at the tick (held alerts released, the outlet rules' timers)."""
        alerts = self.telemetry.enrich(self.judge_tick(now)) + self.telemetry.tick(now)
        out = self.outlet.process(alerts, self.view)
        out.extend(self.outlet.tick(now, self.view))
        return self._leave(out)

    def _leave(self, alerts: list[Alert]) -> list[Alert]:
        """The end of the outlet chain, every road's: ``on_broker_clock``; the evicted jobs' clocks kept a while."""
        alerts = self.on_broker_clock(alerts)
        if self.leaving:
            for name, job in self.leaving.items():
                self.gone_clocks.keep(name, job.alert_clock)
            self.leaving.clear()
        return alerts

    def on_broker_clock(self, alerts: list[Alert]) -> list[Alert]:
        """Job alerts' times onto the broker's clock where the job's hosts' are off (models/alert_clock.py), each
        episode by the shift its job's clock chose (what leaves the outlet chain; restart recovery's open alerts).
        The stages before read them on the hosts' clocks, as node telemetry's."""
        if not alert_clock.ON or not alerts:
            return alerts
        out = alerts
        for i, alert in enumerate(alerts):
            if not alert.job:
                continue  # a node's alert: its agent's times
            clock = self._clock_of(alert)
            if clock is None:
                continue  # forgotten: nothing to move it by
            moved = clock.to_broker(alert)
            if moved is not alert:
                if out is alerts:
                    out = list(alerts)
                out[i] = moved
        return out

    def _clock_of(self, alert: Alert) -> AlertClock | None:
        """The alert clock that chose ``alert``'s shift: its job's as evicted in this call, as tracked, or as
        evicted earlier (the gate held it); none chose it: the tracked job's, else the evicted one's, to choose."""
        leaving = self.leaving.get(alert.job)
        job = self.jobs.get(alert.job)
        gone = self.gone_clocks.get(alert.job)
        candidates = [c for c in (leaving.alert_clock if leaving is not None else None,
                                  job.alert_clock if job is not None else None, gone) if c is not None]
        for clock in candidates:
            if clock.shift(alert) is not None:
                return clock
        return job.alert_clock if job is not None else gone

    def _detect(self, event: Event, arrival: float | None) -> list[Alert]:
        """One event's alerts, enriched, before the outlet chain."""
        if isinstance(event, StepEvent):  # one step path: a lone step event is a batch of one
            self.take_refused()  # one event: its caller compares ``capped_mark`` (and the next batch's are its own)
            groups = self._enriched(self.judge_steps(event.job, StepColumns.of([event]), 0, 1, arrival))
            return [alert for _, alerts in groups for alert in alerts]  # (one row: the job as it is now)
        if event.kind in TELEMETRY_KINDS:  # node telemetry is keyed by node, not by job
            self.note(event.kind, event.ts)
            return self.telemetry.process(event)
        hub = self.telemetry
        return [alert for _, group in self.judge(event, arrival=arrival) for alert in hub.enrich(group)]

    def _enriched(self, run: StepsJudged | None) -> list[tuple[RowFacts | None, list[Alert]]]:
        """A run's alerts enriched in event order, node telemetry caught up to each group's event before it is
        enriched (as one event at a time), then the rest of the run observed; each group with the job as of its row
        (``StepsJudged.facts``; None: an evicted job's, as things are)."""
        if run is None:
            return []
        hub = self.telemetry
        name, cols, lo, hi = run.job, run.cols, run.lo, run.hi
        whole = lo == 0 and hi == len(cols)

        def part(column: list) -> list:  # the batch's own list when the run is all of it
            return column if whole else column[lo:hi]

        ranks, nodes, steps, step_times = part(cols.rank), part(cols.node), part(cols.step), part(cols.step_time)
        out: list[tuple[RowFacts | None, list[Alert]]] = []
        seen = 0  # events observed by node telemetry so far (it names suspected causes)
        for k, (row, alerts) in enumerate(run.caused):
            i = row - lo
            hub.observe_steps(name, ranks[seen:i + 1], nodes[seen:i + 1], cols.gpu[lo + seen:lo + i + 1],
                              cols.data_time[lo + seen:lo + i + 1], steps[seen:i + 1], step_times[seen:i + 1])
            seen = i + 1
            enriched = hub.enrich(alerts)
            if enriched:
                out.append((run.facts[k] if k < len(run.facts) else None, enriched))
        if lo == hi:
            pass  # nothing the rules kept (a state cap): nothing to observe
        elif seen:
            hub.observe_steps(name, ranks[seen:], nodes[seen:], cols.gpu[lo + seen:hi], cols.data_time[lo + seen:hi],
                              steps[seen:], step_times[seen:])
        else:  # the whole run: its own columns, and the batch's data-time array
            # (None: no row reported a data time, as usual: the correlator skips the array's NaN checks)
            data_times = None if cols.absent("data_time") else cols.array("data_time")[lo:hi]
            hub.observe_steps(name, ranks, nodes, part(cols.gpu), data_times, steps, step_times, layout=run.layout)
        if run.evicted:
            evicted = hub.enrich(list(run.evicted))
            return [(None, evicted)] + out if evicted else out
        return out

    # -- state caps -----------------------------------------------------------------------

    def capped_mark(self, job: str | None) -> tuple[int, ...]:
        """The counts of input a cap left out that an event of ``job`` (or node telemetry) can add to, in the
        order of ``CAPPED_MARK``: compared before and after one event, they say whether and what of it was left out."""
        tracker = self.telemetry.tracker.capped
        ranks, pgs, pg_ranks, op_names, pgs_total = self.capped_counts(job)
        return (ranks, tracker["gpus_per_node"], tracker["ports_per_node"], pgs, pg_ranks, op_names,
                tracker["gpus_total"], tracker["ports_total"], pgs_total)

    def capped(self) -> Counter[str]:
        """Input left out at a state cap so far, by what: the job rules' and the node rules'."""
        out = super().capped()
        out.update(self.telemetry.capped())
        return out
