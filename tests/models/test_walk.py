"""The walk of one step event through the ``Pipeline``: each station of the alert's road entered once, in order.

One step event that makes a rule fire is fed, as a lone message and as a batch envelope, to a pipeline that was
fed the job's earlier events untraced; ``sys.setprofile`` records every call into the repository's models/ and
streams/ files. A call *enters* a station when the nearest repository frame below it is in another station.

What the walk counts (a file of models/ or streams/ in no station and not a helper fails the test: place it):

- stations, in the road's order: ``pipeline`` (models/pipeline.py), ``decode`` (models/wire/, counted only when
  the pipeline calls it: elsewhere StepColumns is the batch's data being read), ``detection``
  (models/detection.py, the composition), ``engine`` (models/engine.py and its parts: models/tick_schedule.py,
  models/jobs_store.py, models/event_router.py),
  ``rules`` (models/job_rules.py,
  models/steps/, models/hang/, models/jobhealth/, models/job_phase.py, models/settings_store.py), ``telemetry``
  (models/telemetry/), ``outlet`` (models/outlet.py, models/oncall/, models/jobs_view.py), ``publishable``
  (models/published.py);
- helpers called from everywhere, never counted: ``HELPERS`` (alert and evidence records, the rule base classes,
  a run's layout record: models/steps/layout.py, worked out once per batch and read by every station; a job's
  alert clock, models/alert_clock.py: its shifts chosen in the engine, made where alerts leave detection; the reading
  of a rank's relaunch, models/relaunch.py: one rule for the hang rule and the outlet's restart tracker);
- the pipeline's questions about state caps (``capped_mark`` before and after a lone event, ``take_refused``
  after a batch) are bookkeeping of the input, not the alert's road: they and what they call are left out;
- the outlet's view (models/jobs_view.py) reads facts of the jobs' own records (recent steps, checkpoint): those
  reads are left out of the sequence, and they must never reach engine.py or detection.py.

The sequence of stations entered, consecutive repeats merged, is exactly ``ROAD``: no station is entered twice,
and nothing climbs back into engine.py from an outlet stage.
"""

from __future__ import annotations

import os
import sys

import orjson
import pytest

from stepwatch.models.pipeline import Pipeline
from step_gen import step_event

ROOT = os.path.realpath(os.path.join(os.path.dirname(__file__), "..", ".."))
SCOPE = (os.path.join(ROOT, "models") + os.sep, os.path.join(ROOT, "streams") + os.sep)
STATIONS = (
    ("pipeline", ("models/pipeline.py",)),
    ("decode", ("models/wire/",)),
    ("detection", ("models/detection.py",)),
    ("engine", ("models/engine.py", "models/tick_schedule.py", "models/jobs_store.py",
                "models/event_router.py")),
    ("rules", ("models/job_rules.py", "models/steps/", "models/hang/", "models/jobhealth/", "models/job_phase.py",
               "models/settings_store.py")),
    ("telemetry", ("models/telemetry/",)),
    ("outlet", ("models/outlet.py", "models/oncall/", "models/jobs_view.py")),
    ("publishable", ("models/published.py",)),
)
ROAD = [name for name, _ in STATIONS]
HELPERS = ("models/alerts.py", "models/evidence.py", "models/rule.py", "models/resolution.py",
           "models/alert_types.py", "models/steps/layout.py", "models/alert_clock.py", "models/relaunch.py")
BOOKKEEPING = frozenset({"capped_mark", "take_refused"})
VIEW = "models/jobs_view.py"
T0 = 1_700_000_000.0


def _station(rel: str) -> str | None:
    if rel.startswith(HELPERS):
        return None
    for name, prefixes in STATIONS:
        if rel.startswith(prefixes):
            return name
    raise AssertionError(f"{rel}: in no station of the walk and not a helper (tests/models/test_walk.py)")


def _messages(ranks: int, slow: int, factor: float) -> list[dict]:
    """A job of ``ranks`` ranks, rank ``slow`` ``factor`` times slower from step 40 on."""
    out = []
    for step in range(200):
        slowed = step >= 40
        step_time = 0.8 * factor + 0.2 if slowed else 1.0 + 0.001 * (step * 7 % 5)
        for rank in range(ranks):
            compute = 0.8 * (factor if slowed and rank == slow else 1.0) + 0.001 * ((step * 7 + rank * 3) % 5)
            out.append(step_event("j", rank, step, T0 + step * 1.5 + 0.001 * rank, step_time,
                                  min(compute, step_time), f"n{rank // 4}", ranks))
    return out


def _walk(pipeline: Pipeline, value: bytes) -> tuple[list[str], set[tuple[str, str]], list]:
    """Feed ``value`` traced: (stations entered, merged; the files the view's reads entered; the alerts)."""
    entries: list[tuple[str, str | None]] = []
    skipping: list = []  # the frame of a bookkeeping call in progress

    def profile(frame, event, arg):
        if skipping:
            if event == "return" and frame is skipping[0]:
                skipping.clear()
            return
        if event != "call" or not frame.f_code.co_filename.startswith(SCOPE):
            return
        if frame.f_code.co_name in BOOKKEEPING:
            skipping.append(frame)
            return
        caller = frame.f_back
        while caller is not None and not caller.f_code.co_filename.startswith(SCOPE):
            caller = caller.f_back
        rel = os.path.relpath(frame.f_code.co_filename, ROOT)
        by = os.path.relpath(caller.f_code.co_filename, ROOT) if caller is not None else None
        if by != rel:
            entries.append((rel, by))

    sys.setprofile(profile)
    try:
        out = pipeline.feed([value])
    finally:
        sys.setprofile(None)
    stations: list[str] = []
    reads: set[tuple[str, str]] = set()
    for rel, by in entries:
        if by == VIEW:
            reads.add((rel, _station(rel) or "helper"))
            continue
        station = _station(rel)
        if station is None or (station == "decode" and by is not None and _station(by) != "pipeline"):
            continue
        if by is not None and _station(by) == station:
            continue  # within a station (the engine and its schedule)
        if by is None:
            stations.append("pipeline")  # the walk's start
        elif not stations or stations[-1] != station:
            stations.append(station)
    return stations, reads, out.alerts


@pytest.mark.parametrize("envelope", [False, True], ids=["lone", "envelope"])
@pytest.mark.parametrize("ranks,slow,factor", [(8, 3, 1.6), (6, 0, 2.0)])
def test_one_step_event_walks_the_road_once_in_order(envelope, ranks, slow, factor):
    events = _messages(ranks, slow, factor)
    probe = Pipeline()
    first = next(i for i, ev in enumerate(events) if probe.feed([orjson.dumps(ev)]).alerts)
    pipeline = Pipeline()
    for ev in events[:first]:
        pipeline.feed([orjson.dumps(ev)])
    last = events[first]
    value = orjson.dumps({"v": 1, "kind": "batch", "events": [last]} if envelope else last)
    stations, reads, alerts = _walk(pipeline, value)
    assert alerts, "the traced event makes a rule fire: the walk goes through enrichment and the outlet with it"
    assert stations == ROAD
    assert all(station in ("rules", "telemetry", "helper") for _, station in reads), reads  # never engine/detection
