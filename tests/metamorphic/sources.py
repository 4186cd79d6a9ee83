"""The base recordings: every scenario of the library (``stepwatch scenarios``) and of the test generators.

Each source is a name and a builder (built lazily: the grid picks what it runs). The onset (when the
fault began, true time) comes from the generator's own labels or plan, never from stepwatch's alerts.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from dataclasses import dataclass, replace

import orjson

from .recording import Recording, from_lines


@dataclass(frozen=True)
class Source:
    name: str  # "<generator>:<scenario>"
    build: Callable[[], Recording]
    ranks: int  # the largest job's world size (the grid bounds its cost by it)
    #: What the scenario says must happen: "quiet", or the alert type it is about.
    about: str


def _step_start(rec: Recording, job: str, step: int) -> float | None:
    """When ``step`` began: the earliest end of the step before it (step events are stamped at their end)."""
    ends = [e["ts"] for e in rec.events("step") if e.get("job") == job and e.get("step") == step - 1]
    if ends:
        return min(ends)
    own = [e["ts"] - e.get("step_time", 0.0) for e in rec.events("step") if e.get("job") == job and e.get("step") == step]
    return min(own) if own else None


# -- the library (stepwatch/sim/scenarios.py) -------------------------------------------------------------


def library() -> list[Source]:
    from stepwatch.sim import scenarios

    out = []
    for s in scenarios.suite():
        about = s.problems[0].alert_type if s.problems else "quiet"
        out.append(Source(f"library:{s.name}", _library_builder(s.name), max(sp.ranks for sp in s.specs), about))
    return out


def _library_builder(name: str) -> Callable[[], Recording]:
    def build() -> Recording:
        from stepwatch.sim import scenarios

        with tempfile.TemporaryDirectory() as folder:
            recording, label_path = scenarios.write(scenarios.get(name), folder)
            labels = orjson.loads(label_path.read_bytes())
            raw = recording.read_bytes().splitlines()
        onsets = [p["onset_ts"] for p in labels["problems"] if p.get("onset_ts") is not None]
        return from_lines(f"library:{name}", raw, onset=min(onsets) if onsets else None)
    return build


# -- tests/gen2 --------------------------------------------------------------------------------------------


def gen2() -> list[Source]:
    from gen2.scenarios import Verdict, catalog

    out = []
    for s in catalog():
        about = "quiet" if s.expect.verdict is Verdict.QUIET else s.expect.verdict.value
        out.append(Source(f"gen2:{s.name}", _gen2_builder(s.name), s.plan.ranks, about))
    return out


def _gen2_builder(name: str) -> Callable[[], Recording]:
    def build() -> Recording:
        from gen2.scenarios import catalog

        s = next(s for s in catalog() if s.name == name)
        rec = from_lines(f"gen2:{name}", [raw for _, raw in s.timed_lines()], onset=None)
        plan = s.plan
        steps = [x.start for x in plan.slow] + ([plan.stuck.step] if plan.stuck else [])
        if s.expect.verdict.value != "quiet" and steps:
            rec = replace(rec, onset=_step_start(rec, plan.job, min(steps)))
        return rec
    return build


# -- tests/gen3 --------------------------------------------------------------------------------------------


def gen3() -> list[Source]:
    from gen3.scenarios import scenarios

    out = []
    for s in scenarios():
        about = "alert" if s.expect else "quiet"
        out.append(Source(f"gen3:{s.name}", _gen3_builder(s.name),
                          max(len(j.nodes) * j.gpus_per_node for j in s.jobs), about))
    return out


def _gen3_builder(name: str) -> Callable[[], Recording]:
    def build() -> Recording:
        from gen3.scenarios import scenarios
        from gen3.write import build as write

        s = next(s for s in scenarios() if s.name == name)
        lines, label = write(s)
        onsets = [e["onset"] for e in label["expect"] if e.get("onset") is not None]
        return from_lines(f"gen3:{name}", lines, onset=min(onsets) if onsets else None)
    return build


# -- tests/recordings.py (hand-made) -----------------------------------------------------------------------

HAND_T0 = 1_764_000_000.0


def hand() -> list[Source]:
    def straggler() -> Recording:
        from recordings import straggler_and_slowdown

        rec = from_lines("hand:straggler", [orjson.dumps(e) for e in straggler_and_slowdown("hand-s", t0=HAND_T0)],
                         onset=None)
        return replace(rec, onset=_step_start(rec, "hand-s", 40))

    def hang() -> Recording:
        from recordings import hang as hang_events

        events = hang_events("hand-h", t0=HAND_T0, steps=40, tail=120.0)
        rec = from_lines("hand:hang", [orjson.dumps(e) for e in events], onset=None)
        return replace(rec, onset=_step_start(rec, "hand-h", 40))

    return [Source("hand:straggler", straggler, 8, "straggler"), Source("hand:hang", hang, 4, "hang")]


def everything() -> list[Source]:
    return [*library(), *gen2(), *gen3(), *hand()]
